//! The client side: a [`Channel`] is one logical connection to a host, shared by every client
//! (and every clone of a client) built on it. On keel-wire, calls are multiplexed over one
//! connection; on HTTP, see [`crate::http`].

mod conn;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::endpoint::{Endpoint, Protocol};
use crate::error::{Error, Kind, Status};
use crate::service::Payload;
use crate::stream::ByteStream;
use conn::Conn;

/// Client settings. Every field has a documented default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Deadline for each call unless the call sets its own. Default: 60 s.
    pub deadline: Duration,
    /// Limit for connecting plus the handshake. Default: 10 s.
    pub connect_timeout: Duration,
    /// Largest reply body this client accepts. Default: 4 MiB.
    pub max_message_size: u32,
    /// Largest flow-control window one streamed download may grow to (it starts at 256 KiB
    /// and grows toward the link's bandwidth-delay product). Default: 8 MiB.
    pub max_stream_window: u32,
    /// Whom to trust on TLS endpoints (`tcps://`, `https://`), and the client's certificate for
    /// mutual TLS. Default: `None`, which trusts the system's root certificates (loaded once per
    /// process, on the first TLS connection).
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::ClientTls>,
    /// The HTTP version spoken on `http://` and `https://` endpoints. Default:
    /// [`HttpVersion::Auto`].
    pub http_version: HttpVersion,
    /// HTTP/1.1: the most connections open at once (each carries one call at a time); a call
    /// that finds them all busy waits for one. Default: 32.
    pub http_max_connections: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            deadline: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_message_size: keel_wire::DEFAULT_MAX_MESSAGE_SIZE,
            max_stream_window: keel_wire::DEFAULT_MAX_WINDOW,
            #[cfg(feature = "tls")]
            tls: None,
            http_version: HttpVersion::Auto,
            http_max_connections: 32,
        }
    }
}

impl ClientConfig {
    /// These settings with `tls` for TLS endpoints (see [`ClientConfig::tls`]).
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: crate::tls::ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }
}

/// Which HTTP version a client speaks on `http://` and `https://` endpoints (see
/// [`ClientConfig::http_version`]).
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

/// A channel's connection and call counters, from [`Channel::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelStats {
    /// Connections opened (connected and, on keel-wire, past the handshake), since creation.
    pub connections_opened: u64,
    /// Of those, connections closed since (by either side, or broken).
    pub connections_closed: u64,
    /// Connections open now.
    pub connections_open: usize,
    /// Calls made on the channel, whatever their outcome.
    pub calls: u64,
}

/// Per-call options carried by a generated client (see its `with_deadline`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOptions {
    deadline: Option<Duration>,
}

impl CallOptions {
    /// These options with a per-call deadline.
    pub fn with_deadline(self, deadline: Duration) -> CallOptions {
        CallOptions {
            deadline: Some(deadline),
        }
    }
}

/// One logical connection to a keel host: connected by [`Channel::open`] (or lazily by the first
/// call), kept for the channel's life, reconnected on the next call after it breaks.
///
/// Cheap to clone; clones share the connection.
#[derive(Clone, Debug)]
pub struct Channel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoint: Endpoint,
    config: ClientConfig,
    transport: Transport,
    /// Calls made, for [`Channel::stats`].
    calls: AtomicU64,
}

/// How a channel reaches its host.
#[derive(Debug)]
enum Transport {
    /// keel-wire: one multiplexed connection.
    Wire(WireSlot),
    /// HTTP/1.1 or HTTP/2.
    #[cfg(feature = "http")]
    Http(crate::http::client::HttpTransport),
}

/// The keel-wire connection of a channel.
#[derive(Debug, Default)]
struct WireSlot {
    /// The live connection, if any. A std mutex: held only to clone or swap the `Arc`.
    conn: Mutex<Option<Arc<Conn>>>,
    /// Serialises connection attempts so a burst of first calls opens one connection.
    connecting: tokio::sync::Mutex<()>,
    opened: AtomicU64,
    /// Connections taken out of `conn` (closed, or found broken and replaced).
    closed: AtomicU64,
}

impl Channel {
    /// A channel to `url` with default settings; nothing is connected yet.
    pub fn new(url: &str) -> Result<Channel, Error> {
        Channel::with_config(url, ClientConfig::default())
    }

    /// A channel to `url` with `config`; nothing is connected yet.
    pub fn with_config(url: &str, config: ClientConfig) -> Result<Channel, Error> {
        let endpoint = Endpoint::parse(url)?;
        #[cfg(not(feature = "tls"))]
        if endpoint.is_tls() {
            return Err(crate::endpoint::tls_feature_needed(&endpoint));
        }
        let transport = match endpoint.protocol() {
            Protocol::Wire => Transport::Wire(WireSlot::default()),
            #[cfg(feature = "http")]
            Protocol::Http => Transport::Http(crate::http::client::HttpTransport::new(
                endpoint.clone(),
                config.clone(),
            )),
            #[cfg(not(feature = "http"))]
            Protocol::Http => {
                return Err(Error::new(
                    Kind::Config,
                    format!("{endpoint}: HTTP endpoints need keel's `http` feature"),
                ))
            }
        };
        Ok(Channel {
            inner: Arc::new(Inner {
                endpoint,
                config,
                transport,
                calls: AtomicU64::new(0),
            }),
        })
    }

    /// Creates a channel and opens it: the returned channel is connected and past the handshake.
    pub async fn connect(url: &str) -> Result<Channel, Error> {
        let ch = Channel::new(url)?;
        ch.open().await?;
        Ok(ch)
    }

    /// Connects and completes the handshake now, unless already connected. (HTTP/1.1: opens
    /// one pooled connection unless one is open.)
    pub async fn open(&self) -> Result<(), Error> {
        match &self.inner.transport {
            Transport::Wire(w) => self.wire_conn(w).await.map(drop),
            #[cfg(feature = "http")]
            Transport::Http(h) => h.open().await,
        }
    }

    /// Closes the connection. Calls in flight fail with a connection error; the next call
    /// reconnects.
    pub async fn close(&self) {
        match &self.inner.transport {
            Transport::Wire(w) => {
                let conn = w.conn.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(c) = conn {
                    w.closed.fetch_add(1, Ordering::Relaxed);
                    c.close("closed by the client");
                }
            }
            #[cfg(feature = "http")]
            Transport::Http(h) => h.close(),
        }
    }

    /// Whether a connection is open right now.
    pub fn is_connected(&self) -> bool {
        match &self.inner.transport {
            Transport::Wire(w) => w.current().is_some(),
            #[cfg(feature = "http")]
            Transport::Http(h) => h.is_connected(),
        }
    }

    /// The settings this channel was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Connection and call counters: e.g. that a client's calls share one connection.
    pub fn stats(&self) -> ChannelStats {
        let calls = self.inner.calls.load(Ordering::Relaxed);
        match &self.inner.transport {
            Transport::Wire(w) => {
                let broken = {
                    let slot = w.conn.lock().unwrap_or_else(|e| e.into_inner());
                    slot.as_ref().map(|c| !c.is_open())
                };
                // A connection that broke but is still in the slot counts as closed.
                let (open, dead) = match broken {
                    Some(false) => (1, 0),
                    Some(true) => (0, 1),
                    None => (0, 0),
                };
                ChannelStats {
                    connections_opened: w.opened.load(Ordering::Relaxed),
                    connections_closed: w.closed.load(Ordering::Relaxed) + dead,
                    connections_open: open,
                    calls,
                }
            }
            #[cfg(feature = "http")]
            Transport::Http(h) => h.stats(calls),
        }
    }

    async fn wire_conn(&self, w: &WireSlot) -> Result<Arc<Conn>, Error> {
        if let Some(c) = w.current() {
            return Ok(c);
        }
        let _connecting = w.connecting.lock().await;
        if let Some(c) = w.current() {
            return Ok(c);
        }
        let conn = Arc::new(Conn::connect(&self.inner.endpoint, &self.inner.config).await?);
        w.opened.fetch_add(1, Ordering::Relaxed);
        let old = w
            .conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(conn.clone());
        if old.is_some() {
            w.closed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(conn)
    }

    /// Sends one request and waits for its reply. The outer error is the caller's side (could
    /// not send, no reply in time); the inner `Status` is the host's answer.
    ///
    /// The deadline bounds the call until its reply arrives; a streamed reply then flows until
    /// it ends or the caller drops it.
    pub(crate) async fn call(
        &self,
        call: Outgoing,
        options: &CallOptions,
    ) -> Result<Result<Payload, Status>, Error> {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let deadline = options.deadline.unwrap_or(self.inner.config.deadline);
        let deadline = Instant::now() + deadline;
        match &self.inner.transport {
            Transport::Wire(w) => self.wire_call(w, call, deadline).await,
            #[cfg(feature = "http")]
            Transport::Http(h) => h.call(call, deadline).await,
        }
    }

    async fn wire_call(
        &self,
        w: &WireSlot,
        call: Outgoing,
        deadline: Instant,
    ) -> Result<Result<Payload, Status>, Error> {
        let conn = match tokio::time::timeout_at(deadline.into(), self.wire_conn(w)).await {
            Ok(conn) => conn?,
            Err(_) => {
                return Err(Error::new(
                    Kind::Timeout,
                    "deadline passed while connecting",
                ))
            }
        };
        conn.call(call, deadline).await
    }
}

/// One call on its way out, whatever the binding.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) service: &'static str,
    pub(crate) operation: &'static str,
    pub(crate) one_way: bool,
    /// The encoded arguments.
    pub(crate) body: Bytes,
    /// The request stream, for operations that take one.
    pub(crate) upload: Option<ByteStream>,
    /// The operation streams its reply.
    pub(crate) download: bool,
}

impl WireSlot {
    fn current(&self) -> Option<Arc<Conn>> {
        let guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().filter(|c| c.is_open()).cloned()
    }
}
