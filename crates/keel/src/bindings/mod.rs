//! Bindings: how a call travels over a connection. Each binding is a folder of its own with one
//! client-side type implementing [`ClientTransport`] and one server-side entry point; the two
//! registration points are [`client`] and [`serve`] below.
//!
//! - [`wire`]: the keel wire protocol (`tcp://`, `tcps://`, `unix://`), one multiplexed
//!   connection, frames from `keel-wire`;
//! - [`http`] (feature `http`): HTTP/1.1 and HTTP/2 (`http://`, `https://`), one request per
//!   call, the convention in `HTTP.md`; and gRPC over the same HTTP/2 client (`grpc://`,
//!   `grpcs://`, `GRPC.md`);
//! - `quic` (feature `quic`): keel-wire's calls on QUIC streams (`quic://`), one stream per
//!   call, 0-RTT on resumption for idempotent calls (PROTOCOL.md, "QUIC").
//!
//! A binding sits on the transport (sockets, TLS) and on dispatch (the host side hands every
//! call to [`crate::dispatch::dispatch`]); it takes plain settings ([`ClientSettings`],
//! [`ServerSettings`]) from the client and the host above it, and registers the connections it
//! serves with the host's registry through [`HostConnRegistry`].

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "quic")]
pub(crate) mod quic;
pub(crate) mod session;
pub(crate) mod wire;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::core::compress::Compression;
use crate::core::error::Error;
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::Status;
use crate::core::stream::ByteStream;
use crate::dispatch::{Dispatcher, HostConn, HostConnInfo, Responder};
use crate::transport::{ClientTlsSettings, Endpoint, Protocol, SecuredStream};

/// Which HTTP version a client speaks on `http://` and `https://` endpoints (see
/// [`ChannelBuilder::http_version`](crate::client::ChannelBuilder::http_version)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpVersion {
    /// HTTP/1.1 on `http://`; on `https://`, what TLS ALPN agrees, preferring HTTP/2.
    #[default]
    Auto,
    /// HTTP/1.1: a pool of keep-alive connections, one call at a time on each.
    Http1,
    /// HTTP/2 (h2c with prior knowledge on `http://`): one connection carries every call.
    Http2,
}

/// The congestion controller of `quic://` connections (see
/// [`ChannelBuilder::quic_congestion`](crate::client::ChannelBuilder::quic_congestion) and
/// [`HostBuilder::quic_congestion`](crate::host::HostBuilder::quic_congestion)); each side
/// chooses for what it sends. PROTOCOL.md, "QUIC", compares them.
#[cfg(feature = "quic")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuicCongestion {
    /// BBR (quinn's, which quinn calls experimental): it does not take a lost packet for
    /// congestion, so a long, lossy path keeps its rate. quinn paces it at its window per
    /// round trip, which is twice the path's bandwidth-delay product: into a bottleneck whose
    /// buffer is smaller than what one call sends, it loses packets (see PROTOCOL.md).
    #[default]
    Bbr,
    /// CUBIC (RFC 9438), as TCP on Linux: halves its rate at each loss and grows back slowly
    /// on a long path.
    Cubic,
}

/// A client's settings as its bindings take them (plain values from the channel's config).
#[derive(Debug, Clone)]
pub(crate) struct ClientSettings {
    /// Limit for connecting plus the handshake.
    pub(crate) connect_timeout: Duration,
    /// Largest reply body this client accepts.
    pub(crate) max_message_size: u32,
    /// Largest flow-control window one streamed download may grow to.
    pub(crate) max_stream_window: u32,
    /// Whom to trust on TLS endpoints (`None`: the system roots).
    pub(crate) tls: ClientTlsSettings,
    /// The HTTP version spoken on HTTP endpoints.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) http_version: HttpVersion,
    /// HTTP/1.1: the most connections open at once.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) http_max_connections: usize,
    /// keel-wire: pings on a quiet connection and the verdict on a silent host (`None`: off).
    pub(crate) keepalive: Option<keel_wire::Keepalive>,
    /// `quic://`: the congestion controller of what the client sends.
    #[cfg(feature = "quic")]
    pub(crate) quic_congestion: QuicCongestion,
    /// Counts the connections opened after the first (the `keel_client_reconnects_total`
    /// metric's handle).
    pub(crate) reconnects: metrics::Counter,
}

/// A host's settings as its bindings take them (plain values from the host's config).
#[derive(Debug, Clone)]
pub(crate) struct ServerSettings {
    /// Largest request body accepted.
    pub(crate) max_message_size: u32,
    /// A new connection must complete keel's handshake within this.
    pub(crate) handshake_timeout: Duration,
    /// The rest of a started frame, request head or body must arrive within this; unsent
    /// output above `max_unsent_bytes` must drain within it.
    pub(crate) frame_timeout: Duration,
    /// Unsent output beyond which a connection is not read until its peer reads.
    pub(crate) max_unsent_bytes: usize,
    /// Bytes of messages one connection may have partly received.
    pub(crate) max_receive_bytes_per_connection: usize,
    /// keel-wire: streamed uploads open at once on one connection.
    pub(crate) max_streams_per_connection: usize,
    /// Largest flow-control window one streamed upload may grow to.
    pub(crate) max_stream_window: u32,
    /// keel-wire: pings on a quiet connection and the verdict on a silent client (`None`: off).
    pub(crate) keepalive: Option<keel_wire::Keepalive>,
    /// keel-wire: how often a client may ping.
    pub(crate) ping_policy: keel_wire::PingPolicy,
    /// `quic://`: the congestion controller of what the host sends.
    #[cfg(feature = "quic")]
    pub(crate) quic_congestion: QuicCongestion,
    /// Calls (HTTP/2: streams) in flight on one connection.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) max_calls_per_connection: usize,
    /// HTTP: which web origins may call from a browser (`None`: CORS off).
    #[cfg(feature = "http")]
    pub(crate) cors: Option<http::Cors>,
}

/// How far the host has asked a connection to stop, for the bindings whose calls answer
/// through each call's own waiter (HTTP, QUIC): each binding's connection task watches it and
/// says what each step means for its protocol.
#[cfg_attr(not(any(feature = "http", feature = "quic")), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stop {
    /// Serving calls.
    Serving,
    /// The host is going away (a drain): no new calls; calls in flight finish.
    GoingAway,
    /// Close once the calls in flight are answered.
    Closing,
}

/// The [`Responder`] of such a connection: `go_away` and `close` only raise its [`Stop`]
/// (never lower it); the connection's task does the rest.
#[cfg_attr(not(any(feature = "http", feature = "quic")), allow(dead_code))]
#[derive(Debug)]
pub(crate) struct StopResponder {
    pub(crate) stop: tokio::sync::watch::Sender<Stop>,
}

#[cfg_attr(not(any(feature = "http", feature = "quic")), allow(dead_code))]
impl StopResponder {
    /// A connection of such a binding at the host: its books (the host's stops raise `stop`;
    /// at most `max_calls` calls in flight) and its receive budget (the host's per-connection
    /// limit, within the host's).
    pub(crate) fn conn(
        stop: tokio::sync::watch::Sender<Stop>,
        info: HostConnInfo,
        max_calls: usize,
        dispatcher: &Arc<Dispatcher>,
        settings: &ServerSettings,
    ) -> (Arc<HostConn>, crate::dispatch::ReceiveBudget) {
        let conn = Arc::new(HostConn::new(
            Box::new(StopResponder { stop }),
            info,
            max_calls,
            dispatcher.clone(),
        ));
        let budget = crate::dispatch::ReceiveBudget::new(
            settings.max_receive_bytes_per_connection,
            &dispatcher.receive_budget,
        );
        (conn, budget)
    }
}

impl Responder for StopResponder {
    fn go_away(&self, _reason: &str) {
        self.stop.send_if_modified(|s| {
            let raise = *s < Stop::GoingAway;
            if raise {
                *s = Stop::GoingAway;
            }
            raise
        });
    }

    fn close(&self) {
        self.stop.send_replace(Stop::Closing);
    }
}

/// A client connection's calls waiting for their answers (an answer's head, on HTTP/2), for
/// its liveness check (PROTOCOL.md "Liveness"): while any wait, a quiet connection is pinged
/// after a quarter second, not after the keepalive interval. HTTP/2 and QUIC keep one per
/// connection (keel-wire's connection core keeps its own books).
#[cfg_attr(not(any(feature = "http", feature = "quic")), allow(dead_code))]
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    calls: std::sync::atomic::AtomicUsize,
    /// Calls started on the connection so far.
    started: std::sync::atomic::AtomicU64,
    /// Told when a call starts.
    started_one: tokio::sync::Notify,
}

#[cfg_attr(not(any(feature = "http", feature = "quic")), allow(dead_code))]
impl Waiting {
    /// A call waits for its answer until the guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> WaitingGuard {
        use std::sync::atomic::Ordering;
        self.started.fetch_add(1, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.started_one.notify_one();
        WaitingGuard(self.clone())
    }

    /// Whether any call waits.
    pub(crate) fn busy(&self) -> bool {
        self.calls.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// How many calls have started on the connection so far.
    pub(crate) fn started(&self) -> u64 {
        self.started.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Returns once a call starts (at once if one started since the last return).
    pub(crate) async fn until_call_starts(&self) {
        self.started_one.notified().await;
    }
}

/// A call waiting on a connection (see [`Waiting::enter`]).
#[derive(Debug)]
pub(crate) struct WaitingGuard(Arc<Waiting>);

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        self.0
            .calls
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Where a binding registers the connections it serves: the host's registry of open
/// connections (`host/registry.rs`: the connection limit, idle reaping, age, the drain).
/// Defined here, below the host, so that bindings reach it without importing the host.
pub(crate) trait HostConnRegistry: Send + Sync {
    /// The connection's handshakes are over: it is open. After the host stopped, it is closed
    /// at once.
    fn register(&self, conn: Arc<HostConn>);
    /// The connection `id` is closed: answers nothing more, forgets it.
    fn unregister(&self, id: u64);
}

/// One call on its way out, whatever the binding.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) service: &'static str,
    pub(crate) operation: &'static str,
    pub(crate) one_way: bool,
    /// The request metadata.
    pub(crate) metadata: Metadata,
    /// The encoded arguments, compressed with `compression` if it is set.
    pub(crate) body: Bytes,
    /// How `body` is compressed, if it is.
    pub(crate) compression: Option<Compression>,
    /// The caller accepts a compressed reply body.
    pub(crate) accepts_compressed: bool,
    /// The request stream, for operations that take one.
    pub(crate) upload: Option<ByteStream>,
    /// The operation streams its reply.
    pub(crate) download: bool,
    /// The operation is `#[keel(idempotent)]`: it may be sent again after a failure.
    pub(crate) idempotent: bool,
    /// The host refused the previous attempt unprocessed: this one goes to a new connection,
    /// not to a pooled one that may lead to the same host (set by the channel's attempt loop).
    pub(crate) fresh: bool,
    /// On a gRPC channel: the contract and operation called (the path, the fault's type).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) grpc: Option<GrpcTarget>,
}

impl Outgoing {
    /// A copy of this call for another attempt running beside it (a hedge), for a call
    /// without a request stream (which cannot be sent twice): the body is shared, the
    /// metadata copied.
    pub(crate) fn clone_unstreamed(&self) -> Outgoing {
        debug_assert!(
            self.upload.is_none(),
            "a request stream cannot be sent twice"
        );
        Outgoing {
            service: self.service,
            operation: self.operation,
            one_way: self.one_way,
            metadata: self.metadata.clone(),
            body: self.body.clone(),
            compression: self.compression,
            accepts_compressed: self.accepts_compressed,
            upload: None,
            download: self.download,
            idempotent: self.idempotent,
            fresh: self.fresh,
            grpc: self.grpc,
        }
    }

    /// This call's keel-wire Request frame as `call_id` (keel-wire and QUIC), with its
    /// `metadata` already encoded, `streamed` if a request stream follows, and `remaining`
    /// until its deadline (rounded up, so that a sub-microsecond remainder is not read as "no
    /// deadline").
    #[inline]
    pub(crate) fn wire_request(
        &self,
        call_id: u64,
        metadata: Bytes,
        streamed: bool,
        remaining: Duration,
    ) -> keel_wire::Frame {
        keel_wire::Frame::Request(keel_wire::Request {
            call_id,
            flags: keel_wire::RequestFlags {
                one_way: self.one_way,
                streamed,
                accepts_compressed: self.accepts_compressed,
            },
            deadline_us: (remaining.as_micros() as u64).max(1),
            service: self.service.into(),
            operation: self.operation.into(),
            metadata,
            compression: self
                .compression
                .map_or(Compression::IDENTITY_ID, Compression::to_u8),
            body: self.body.clone(),
        })
    }

    /// The error of this call when its deadline passed.
    pub(crate) fn timed_out(&self) -> Error {
        Error::new(
            crate::core::error::Kind::Timeout,
            format!(
                "{}.{}: no reply before the deadline",
                self.service, self.operation
            ),
        )
    }
}

/// The hosts the attempts of one hedged call went to (a balanced channel's members, by
/// address), so that the next hedge goes to another while one is left.
pub(crate) type TriedHosts = std::sync::Mutex<Vec<usize>>;

/// What a gRPC binding needs to know of a call beyond its names: its contract's descriptor and
/// the operation's index in it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrpcTarget {
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) desc: &'static crate::core::service::ServiceDescriptor,
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) op: usize,
    /// The channel's compression and the smallest message worth it: each message of a request
    /// stream of at least that size goes compressed (a unary body is compressed by the channel).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) compress_messages: Option<(Compression, usize)>,
}

/// A successful answer: the reply and its metadata.
#[derive(Debug)]
pub(crate) struct Replied {
    /// The reply; a body is compressed with `compression` if that is set.
    pub(crate) payload: Payload,
    pub(crate) metadata: Metadata,
    pub(crate) compression: Option<Compression>,
}

/// A call's result: the outer error is the caller's side (could not send, no reply in time);
/// the inner `Status` is the host's answer (with its metadata).
pub(crate) type Answer = Result<Result<Replied, Status>, Error>;

/// A request stream coming back from the binding that was sending it: `Some` if nothing was
/// taken from it, `None` once it had started (its bytes are gone, so the call cannot be sent
/// again).
pub(crate) type StreamBack = tokio::sync::oneshot::Receiver<Option<ByteStream>>;

/// What happened to one attempt of a call, as a binding reports it. The binding borrows the
/// call for the attempt and never sends it again itself: the channel's attempt loop
/// (`client/pipeline.rs`) decides whether and where it goes next.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The host answered, or the call failed in a way after which it may have run (the
    /// connection was lost once the request had left, the deadline passed, ...).
    Answered(Answer),
    /// The host did not run the call: it may go to another connection as it is. A request
    /// stream the binding had taken from the call comes back through `stream_back`.
    Again {
        /// The request stream, when the binding had taken it.
        stream_back: Option<StreamBack>,
        /// Why it was not run.
        why: Again,
    },
}

/// Why an attempt's call was not run (see [`Attempt::Again`]).
#[derive(Debug)]
pub(crate) enum Again {
    /// It never left: the connection had closed (HTTP/2: or was going away), or the one
    /// opened for it speaks another HTTP version.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    NotSent,
    /// The host said it does not process it: a keel-wire GoAway before it was sent or below its
    /// id, HTTP/2's REFUSED_STREAM or a GOAWAY below its stream, or a 503 marked
    /// `keel-unprocessed`.
    Unprocessed,
    /// No connection could be made (nothing was sent): another host may take it.
    NoConnection(Error),
}

impl Attempt {
    /// The call was not run (`why`), its request stream, if any, still in it.
    pub(crate) fn again(why: Again) -> Attempt {
        Attempt::Again {
            stream_back: None,
            why,
        }
    }
}

/// A boxed future, as [`ClientTransport`]'s methods return.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A client's connection counts, for `Channel::stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ConnCounts {
    /// Connections opened (connected and past the handshake), since creation.
    pub(crate) opened: u64,
    /// Of those, connections closed since.
    pub(crate) closed: u64,
    /// Connections open now.
    pub(crate) open: usize,
    /// Calls answered that went out as 0-RTT data (`quic://` on a resumed connection).
    pub(crate) sent_early: u64,
}

/// The client side of a binding: carries one channel's calls to its host.
pub(crate) trait ClientTransport: Send + Sync + std::fmt::Debug {
    /// Makes one attempt of `call`: sends it once and waits for its answer until `deadline`,
    /// or says why it did not run (see [`Attempt`]). The deadline bounds the call until its
    /// reply (or a streamed reply's head) arrives. The call is only borrowed: it stays whole
    /// for the next attempt, but for a request stream the binding takes.
    fn attempt<'a>(&'a self, call: &'a mut Outgoing, deadline: Instant) -> BoxFuture<'a, Attempt>;
    /// [`attempt`](ClientTransport::attempt) for one of a hedged call's attempts: a transport
    /// with several hosts sends it to one not in `tried` while one is left, and adds the one
    /// it chose.
    fn attempt_hedge<'a>(
        &'a self,
        call: &'a mut Outgoing,
        deadline: Instant,
        tried: &'a TriedHosts,
    ) -> BoxFuture<'a, Attempt> {
        let _ = tried;
        self.attempt(call, deadline)
    }
    /// How many hosts a call that found no connection may try in all (a balanced channel's
    /// members; 1 for one URL).
    fn hosts(&self) -> usize {
        1
    }
    /// Connects (and completes any handshake) now, unless connected.
    fn open(&self) -> BoxFuture<'_, Result<(), Error>>;
    /// Closes every connection; calls in flight fail with a connection error.
    fn close(&self);
    /// Whether a connection is open now.
    fn is_connected(&self) -> bool;
    /// Connection counters.
    fn counts(&self) -> ConnCounts;
}

/// A channel's (or a balanced channel member's) way to its host: keel-wire's client, whose
/// attempts are awaited inline (its future is not boxed: an allocation and a copy of ~900
/// bytes per call, on the binding most calls take), or any other [`ClientTransport`].
#[derive(Debug)]
// One per channel (or member), inside its `Arc`: boxing keel-wire's client would cost every
// call a pointer chase and save nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Client {
    /// keel-wire (`tcp://`, `tcps://`, `unix://`).
    Wire(wire::WireClient),
    /// Any other binding, or a balanced channel's members.
    Other(Box<dyn ClientTransport>),
}

impl Client {
    /// One attempt of `call` (see [`ClientTransport::attempt`]). `started`: when the caller
    /// read the clock just before, and the call's time budget then; keel-wire sends its
    /// request with those, sparing a clock read, if nothing waited since.
    pub(crate) async fn attempt(
        &self,
        call: &mut Outgoing,
        deadline: Instant,
        started: Option<(Instant, Duration)>,
    ) -> Attempt {
        match self {
            Client::Wire(wire) => wire.attempt_inner(call, deadline, started).await,
            Client::Other(transport) => transport.attempt(call, deadline).await,
        }
    }

    /// The transport behind it.
    pub(crate) fn transport(&self) -> &dyn ClientTransport {
        match self {
            Client::Wire(wire) => wire,
            Client::Other(transport) => &**transport,
        }
    }
}

/// The client side of `endpoint`'s binding. One line per binding.
pub(crate) fn client(endpoint: Endpoint, settings: ClientSettings) -> Result<Client, Error> {
    Ok(match endpoint.protocol() {
        Protocol::Wire => Client::Wire(wire::WireClient::new(endpoint, settings)),
        #[cfg(feature = "http")]
        Protocol::Http => {
            Client::Other(Box::new(http::client::HttpClient::new(endpoint, settings)))
        }
        #[cfg(feature = "http")]
        Protocol::Grpc => Client::Other(Box::new(http::client::HttpClient::new_grpc(
            endpoint, settings,
        ))),
        #[cfg(not(feature = "http"))]
        Protocol::Http | Protocol::Grpc => return Err(http_feature_needed(&endpoint)),
        #[cfg(feature = "quic")]
        Protocol::Quic => {
            Client::Other(Box::new(quic::client::QuicClient::new(endpoint, settings)))
        }
        #[cfg(not(feature = "quic"))]
        Protocol::Quic => return Err(quic_feature_needed(&endpoint)),
    })
}

/// Serves one accepted (and secured) connection of `protocol` until it closes, registered with
/// `registry` while it is open. One line per binding.
pub(crate) async fn serve(
    connected: SecuredStream,
    protocol: Protocol,
    dispatcher: Arc<Dispatcher>,
    registry: &dyn HostConnRegistry,
    settings: Arc<ServerSettings>,
    info: HostConnInfo,
) {
    match protocol {
        Protocol::Wire => wire::serve(connected.io, dispatcher, registry, settings, info).await,
        #[cfg(feature = "http")]
        Protocol::Http => {
            http::server::serve(connected, dispatcher, registry, settings, info).await
        }
        #[cfg(not(feature = "http"))]
        Protocol::Http => unreachable!("refused at start without the `http` feature"),
        Protocol::Grpc => unreachable!("a host refuses gRPC's client schemes at start"),
        Protocol::Quic => unreachable!("a host serves quic:// on a UDP endpoint of its own"),
    }
}

/// The error for a `quic://` endpoint in a build without the `quic` feature.
#[cfg(not(feature = "quic"))]
pub(crate) fn quic_feature_needed(endpoint: &Endpoint) -> Error {
    Error::new(
        crate::core::error::Kind::Config,
        format!("{endpoint}: quic:// endpoints need keel's `quic` feature"),
    )
}

/// The error for an HTTP (or gRPC) endpoint in a build without the `http` feature.
#[cfg(not(feature = "http"))]
pub(crate) fn http_feature_needed(endpoint: &Endpoint) -> Error {
    Error::new(
        crate::core::error::Kind::Config,
        format!("{endpoint}: HTTP and gRPC endpoints need keel's `http` feature"),
    )
}
