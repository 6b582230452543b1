//! The host side of `quic://`: a UDP endpoint accepting QUIC connections, and each connection
//! served one call per bidirectional stream.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keel_wire::{Codec, Frame, Limits, Reply};
use tokio::sync::{oneshot, watch};

use super::frames::{self, code, FrameReader, PumpFail, ReadFail};
use super::transport_config;
use crate::bindings::{HostConnRegistry, ServerSettings};
use crate::core::compress::Compression;
use crate::core::error::{Error, Kind};
use crate::core::format::{Format, Framing};
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::dispatch::{
    dispatch, Dispatcher, HostAnswer, HostConn, HostConnInfo, Incoming, ReceiveBudget, ReplyTo,
};
use crate::transport::tls::ServerTls;
use crate::transport::Endpoint;

/// The binding's label in metrics and `Host::connections`.
const BINDING: &str = "quic";

/// Largest StreamData frame a host writes (the reply stream's chunks are split to it).
const MAX_CHUNK: usize = 64 * 1024;

/// The fewest concurrent streams a connection is offered: at least as many as calls, so that a
/// call over the connection's limit (or a small throttle's) is answered `Busy` at once, as on
/// the other bindings, rather than waiting in the client for QUIC stream credit. (As HTTP/2's
/// floor; the connection's calls in flight are bounded by its call limit either way.)
const MIN_STREAMS: usize = 128;

/// A bound `quic://` endpoint.
#[derive(Debug)]
pub(crate) struct QuicListener {
    endpoint: quinn::Endpoint,
    tls: QuicTlsSlot,
}

/// A `quic://` endpoint's certificate, replaced while the host runs when its certificate is
/// (`Host::reload_tls`): handshakes from then on use the new one, connections already open keep
/// theirs.
#[derive(Debug, Clone)]
pub(crate) struct QuicTlsSlot {
    endpoint: quinn::Endpoint,
    alpn: &'static [&'static [u8]],
    transport: Arc<quinn::TransportConfig>,
    /// Whether connections may carry 0-RTT data (the TLS settings accept it).
    zero_rtt: Arc<AtomicBool>,
}

impl QuicTlsSlot {
    /// The server config for `tls`, and whether it accepts 0-RTT data.
    fn config(&self, tls: &ServerTls) -> Result<(quinn::ServerConfig, bool), Error> {
        let crypto = tls.quic_config(self.alpn)?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(self.transport.clone());
        // Handshakes never finished are bounded by the host's connection limit and handshake
        // timeout; quinn's own queue of connections not yet accepted is bounded too.
        config.max_incoming(64 * 1024);
        Ok((config, tls.quic_accepts_0rtt()))
    }

    /// New handshakes use `tls`. (Checked by `Host::reload_tls` before any slot is replaced.)
    pub(crate) fn replace(&self, tls: &ServerTls) -> Result<(), Error> {
        let (config, zero_rtt) = self.config(tls)?;
        self.endpoint.set_server_config(Some(config));
        self.zero_rtt.store(zero_rtt, Ordering::SeqCst);
        Ok(())
    }

    /// Whether `tls` can serve QUIC (what a reload checks first).
    pub(crate) fn check(&self, tls: &ServerTls) -> Result<(), Error> {
        self.config(tls).map(|_| ())
    }
}

impl QuicListener {
    /// Binds `ep` with `tls` and the host's limits. Must run inside the host's runtime.
    pub(crate) fn bind(
        ep: &Endpoint,
        tls: &ServerTls,
        settings: &ServerSettings,
    ) -> Result<QuicListener, Error> {
        let transport = Arc::new(transport_config(
            settings.max_calls_per_connection.max(MIN_STREAMS),
            settings.max_receive_bytes_per_connection,
            settings.max_message_size,
            settings.max_unsent_bytes,
            settings.keepalive,
            settings.quic_congestion,
            false,
        ));
        let addr = resolve(ep)?;
        let socket = std::net::UdpSocket::bind(addr)
            .map_err(|e| crate::transport::socket::listen_error(ep, e))?;
        let endpoint = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            None,
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|e| crate::transport::socket::listen_error(ep, e))?;
        let slot = QuicTlsSlot {
            endpoint: endpoint.clone(),
            alpn: ep.alpn(),
            transport,
            zero_rtt: Arc::new(AtomicBool::new(false)),
        };
        slot.replace(tls)?;
        Ok(QuicListener {
            endpoint,
            tls: slot,
        })
    }

    /// Its certificate's slot, for reloads.
    pub(crate) fn tls_slot(&self) -> QuicTlsSlot {
        self.tls.clone()
    }

    /// The URL clients connect to (with the real port when bound to port 0).
    pub(crate) fn local_url(&self) -> Result<String, Error> {
        let addr = self.endpoint.local_addr().map_err(|e| {
            Error::new(Kind::Config, format!("quic:// endpoint address: {e}")).with_source(e)
        })?;
        Ok(format!("quic://{addr}"))
    }

    /// Whether its connections may carry 0-RTT data.
    pub(crate) fn zero_rtt(&self) -> bool {
        self.tls.zero_rtt.load(Ordering::SeqCst)
    }

    /// The next connection attempt; `None` once the endpoint is closed.
    pub(crate) async fn accept(&self) -> Option<quinn::Incoming> {
        self.endpoint.accept().await
    }
}

impl Drop for QuicListener {
    fn drop(&mut self) {
        self.endpoint.close(code::NO_ERROR, b"host stopped");
    }
}

/// The first socket address of `ep`'s authority.
fn resolve(ep: &Endpoint) -> Result<SocketAddr, Error> {
    use std::net::ToSocketAddrs;
    let authority = ep.authority().unwrap_or_default();
    authority
        .to_socket_addrs()
        .map_err(|e| crate::transport::socket::listen_error(ep, e))?
        .next()
        .ok_or_else(|| {
            Error::new(
                Kind::Config,
                format!("cannot listen on {ep}: {authority} resolves to no address"),
            )
        })
}

// How far the host has asked the connection to stop (the shared [`Stop`], raised by
// [`StopResponder`]): `GoingAway` refuses new streams unprocessed while calls in flight
// finish; `Closing` closes once they are answered.
use crate::bindings::{Stop, StopResponder};

/// What every stream of one connection shares.
struct Shared {
    conn: Arc<HostConn>,
    settings: Arc<ServerSettings>,
    budget: ReceiveBudget,
    /// The TLS handshake is complete: the client is live (0-RTT data alone may be a replay).
    handshake: watch::Receiver<bool>,
    /// Streamed uploads open now.
    uploads: Arc<AtomicUsize>,
    /// Calls being served (streams not yet finished).
    streams: AtomicUsize,
    going_away: AtomicBool,
}

/// Serves one connection attempt accepted as `id` until the connection closes, registered with
/// `registry` while it is open. The handshake must complete within the handshake timeout;
/// with 0-RTT, idempotent calls may run before it does (see PROTOCOL.md, "QUIC").
pub(crate) async fn serve(
    incoming: quinn::Incoming,
    zero_rtt: bool,
    dispatcher: Arc<Dispatcher>,
    registry: &dyn HostConnRegistry,
    settings: Arc<ServerSettings>,
    id: u64,
) {
    let peer = incoming.remote_address();
    let Ok(connecting) = incoming.accept() else {
        return;
    };
    let handshake_timeout = settings.handshake_timeout;
    let (done_tx, done_rx) = watch::channel(false);
    let connection = if zero_rtt {
        match connecting.into_0rtt() {
            Ok((connection, accepted)) => {
                // The handshake goes on beside the calls; a connection that does not complete
                // it in time (a replay never does) is closed, and nothing that waited for it
                // runs.
                let c = connection.clone();
                let d = dispatcher.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(handshake_timeout, accepted).await {
                        Ok(_) if c.close_reason().is_none() => {
                            let _ = done_tx.send(true);
                        }
                        Ok(_) => {}
                        Err(_) => {
                            d.timed_out(BINDING);
                            c.close(code::TIMED_OUT, b"handshake timeout");
                        }
                    }
                });
                connection
            }
            Err(connecting) => match tokio::time::timeout(handshake_timeout, connecting).await {
                Ok(Ok(c)) => {
                    let _ = done_tx.send(true);
                    c
                }
                Ok(Err(_)) => return,
                Err(_) => return dispatcher.timed_out(BINDING),
            },
        }
    } else {
        match tokio::time::timeout(handshake_timeout, connecting).await {
            Ok(Ok(c)) => {
                let _ = done_tx.send(true);
                c
            }
            Ok(Err(_)) => return,
            Err(_) => return dispatcher.timed_out(BINDING),
        }
    };
    let peer_certificates = peer_certificates(&connection);
    let info = HostConnInfo::new(id, BINDING, Some(peer), peer_certificates);
    let (stop, mut stopped) = watch::channel(Stop::Serving);
    let max_calls = settings.max_calls_per_connection;
    let (conn, budget) = StopResponder::conn(stop, info, max_calls, &dispatcher, &settings);
    let shared = Arc::new(Shared {
        conn: conn.clone(),
        settings,
        budget,
        handshake: done_rx,
        uploads: Arc::new(AtomicUsize::new(0)),
        streams: AtomicUsize::new(0),
        going_away: AtomicBool::new(false),
    });
    registry.register(conn.clone());
    let mut told_go_away = false;
    let mut check = tokio::time::interval(Duration::from_millis(10));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let level = *stopped.borrow_and_update();
        if level >= Stop::GoingAway && !told_go_away {
            told_go_away = true;
            shared.going_away.store(true, Ordering::SeqCst);
            go_away(&connection).await;
        }
        if level == Stop::Closing && shared.streams.load(Ordering::SeqCst) == 0 {
            connection.close(code::NO_ERROR, b"closed by the host");
            break;
        }
        tokio::select! {
            accepted = connection.accept_bi() => match accepted {
                Ok((send, recv)) => {
                    shared.streams.fetch_add(1, Ordering::SeqCst);
                    let shared = shared.clone();
                    let c = connection.clone();
                    tokio::spawn(async move {
                        let _done = StreamDone(&shared.streams);
                        serve_stream(&shared, &c, send, recv).await;
                    });
                }
                Err(_) => break,
            },
            changed = stopped.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            // Closing waits for the streams in flight to end.
            _ = check.tick(), if level == Stop::Closing => {}
        }
    }
    let gone = Status::new(StatusCode::Cancelled, "connection closed");
    conn.abandon_all(&gone);
    registry.unregister(conn.id);
}

/// Counts a stream out when its task ends.
struct StreamDone<'a>(&'a AtomicUsize);

impl Drop for StreamDone<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Tells the client GoAway: a keel-wire GoAway frame on a unidirectional stream of the host's.
/// Streams the client opens from now on are refused unprocessed (RESET_STREAM
/// [`code::UNPROCESSED`]), so `last_call_id` is not needed and is sent as 0.
async fn go_away(connection: &quinn::Connection) {
    let Ok(mut uni) = connection.open_uni().await else {
        return;
    };
    let codec = Codec::new(Limits::default());
    let frame = Frame::GoAway(keel_wire::GoAway {
        last_call_id: 0,
        reason: "the host is going away".into(),
    });
    if let Ok(bytes) = frames::encode(&codec, &frame) {
        let _ = uni.write_chunk(bytes).await;
        let _ = uni.finish();
    }
}

/// The client's certificate chain, when it presented one.
fn peer_certificates(connection: &quinn::Connection) -> Option<Arc<[Bytes]>> {
    let identity = connection.peer_identity()?;
    let chain = identity
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .ok()?;
    Some(
        chain
            .iter()
            .map(|c| Bytes::copy_from_slice(c.as_ref()))
            .collect(),
    )
}

/// The wire codec of a `quic://` stream: keel-wire version 2 frames (no hello: ALPN agreed on
/// the protocol), with the host's message limit.
fn codec(max_message_size: u32) -> Codec {
    let mut codec = Codec::new(Limits::with_max_message_size(max_message_size));
    codec.set_version(2);
    codec
}

/// Refuses a stream unprocessed: the client sends its call again elsewhere.
fn refuse(send: &mut quinn::SendStream, recv: &mut quinn::RecvStream) {
    let _ = recv.stop(code::UNPROCESSED);
    let _ = send.reset(code::UNPROCESSED);
}

/// Gives a stream up: the peer broke the protocol on it.
fn give_up(send: &mut quinn::SendStream, recv: &mut quinn::RecvStream) {
    let _ = recv.stop(code::PROTOCOL);
    let _ = send.reset(code::PROTOCOL);
}

/// Whether `service`'s `operation` may run on data that may be a replay: idempotent and without
/// a request stream.
fn replay_safe(dispatcher: &Dispatcher, service: &str, operation: &str) -> bool {
    let Some(served) = dispatcher.served(service) else {
        // Answered `UnknownService` without running anything.
        return true;
    };
    let desc = served.service.descriptor();
    match desc.operation_index(operation) {
        Some(op) => {
            let info = &desc.operations[op];
            info.idempotent && !info.stream_request && !info.message_request
        }
        None => true,
    }
}

/// Serves the call on one bidirectional stream: its Request frame (and request stream), the
/// dispatch, and the Reply (and reply stream).
async fn serve_stream(
    shared: &Shared,
    connection: &quinn::Connection,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let conn = &shared.conn;
    let dispatcher = &conn.dispatcher;
    let settings = &shared.settings;
    if shared.going_away.load(Ordering::SeqCst) || conn.is_going_away() {
        conn.info.calls.fetch_add(1, Ordering::Relaxed);
        return refuse(&mut send, &mut recv);
    }
    let early = recv.is_0rtt();
    let call_id = recv.id().index();
    let codec = codec(settings.max_message_size);
    let mut reader = FrameReader::new(
        recv,
        self::codec(settings.max_message_size),
        Some(shared.budget.clone()),
        Some(settings.frame_timeout),
    );
    // The whole Request frame must arrive within the frame timeout of the stream's opening.
    let first = tokio::time::timeout(settings.frame_timeout, reader.next()).await;
    let (req, reserved) = match first {
        Ok(Ok(Some((Frame::Request(req), reserved)))) => (req, reserved),
        Ok(Err(ReadFail::TooLarge(e))) => {
            conn.info.calls.fetch_add(1, Ordering::Relaxed);
            let status = Status::new(StatusCode::TooLarge, e.to_string());
            let _ = reader.recv_mut().stop(code::PROTOCOL);
            return answer_status(&mut send, &codec, call_id, status).await;
        }
        Ok(Err(ReadFail::TimedOut)) | Err(_) => {
            dispatcher.timed_out(BINDING);
            return give_up(&mut send, reader.recv_mut());
        }
        // A stream that carries no call, a reset, a malformed frame: given up, the connection
        // and its other calls go on.
        _ => return give_up(&mut send, reader.recv_mut()),
    };
    let streamed = req.flags.streamed;
    let may_be_replayed = early && !*shared.handshake.borrow();
    if may_be_replayed && (streamed || !replay_safe(dispatcher, &req.service, &req.operation)) {
        // 0-RTT data may be a replay: only a call safe to run twice runs before the client has
        // proved it is live by completing the handshake.
        let mut done = shared.handshake.clone();
        let waited = tokio::time::timeout(settings.handshake_timeout, done.wait_for(|d| *d)).await;
        if !matches!(waited, Ok(Ok(_))) {
            return refuse(&mut send, reader.recv_mut());
        }
    }
    let Some(arrival) = dispatcher.admit() else {
        conn.info.calls.fetch_add(1, Ordering::Relaxed);
        return refuse(&mut send, reader.recv_mut());
    };
    let compression = match Compression::from_wire_id(req.compression) {
        Ok(c) => c,
        Err(id) => {
            conn.info.calls.fetch_add(1, Ordering::Relaxed);
            let status = Status::new(
                StatusCode::BadRequest,
                format!("unknown compression id {id}"),
            );
            return answer_status(&mut send, &codec, call_id, status).await;
        }
    };
    let (stream, recv_kept) = if streamed {
        if shared.uploads.load(Ordering::SeqCst) >= settings.max_streams_per_connection {
            conn.info.calls.fetch_add(1, Ordering::Relaxed);
            let msg = format!(
                "this connection already has {} streamed uploads open",
                settings.max_streams_per_connection
            );
            let _ = reader.recv_mut().stop(code::CANCELLED);
            return answer_status(
                &mut send,
                &codec,
                call_id,
                Status::new(StatusCode::Busy, msg),
            )
            .await;
        }
        shared.uploads.fetch_add(1, Ordering::SeqCst);
        let held = UploadCount(shared.uploads.clone());
        (frames::inbound(reader, Some(Box::new(held))), None)
    } else {
        (ByteStream::empty(), Some(reader))
    };
    let (tx, answer) = oneshot::channel();
    let incoming = Incoming {
        call_id,
        one_way: req.flags.one_way,
        deadline: (req.deadline_us > 0).then(|| Duration::from_micros(req.deadline_us)),
        service: &req.service,
        operation: &req.operation,
        metadata: Metadata::from_wire(&req.metadata),
        compression,
        reply_codec: req.flags.accepts_compressed.then_some(Compression::Zstd),
        format: Format::MsgPack,
        reply_framing: Framing::for_format(Format::MsgPack),
        request_framing: None,
        session: None,
        body: &req.body,
        stream,
        arrival,
        reply_to: ReplyTo::waiter(tx),
    };
    let received = crate::runtime::clock::now();
    let mut clock = received;
    dispatch(conn, incoming, received, &mut clock, None);
    drop(reserved);
    drop(req);
    // The caller may give up meanwhile (RESET_STREAM and STOP_SENDING): the call is stopped.
    let answer = tokio::select! {
        answer = answer => answer,
        _ = send.stopped() => {
            conn.cancel(call_id);
            return;
        }
    };
    let Ok(HostAnswer {
        outcome,
        metadata,
        compression,
    }) = answer
    else {
        let status = Status::new(StatusCode::Internal, "the call ended without an answer");
        return answer_status(&mut send, &codec, call_id, status).await;
    };
    let metadata = metadata.to_wire().unwrap_or_default();
    let write_timeout = Some(settings.frame_timeout);
    let result = match outcome {
        Ok(Payload::Stream(stream)) => {
            let head = Frame::Reply(Reply::stream_head(call_id, metadata));
            let sent = match frames::encode(&codec, &head) {
                Ok(bytes) => frames::write(&mut send, bytes, write_timeout).await,
                Err(_) => Err(PumpFail::Broken),
            };
            match sent {
                Ok(()) => {
                    let pumped = {
                        let pump =
                            frames::pump(&mut send, &codec, stream, MAX_CHUNK, write_timeout);
                        tokio::pin!(pump);
                        pump.await
                    };
                    pumped
                }
                Err(e) => Err(e),
            }
        }
        Ok(Payload::Body(body)) => {
            let compression = compression.map_or(Compression::IDENTITY_ID, Compression::to_u8);
            let reply = Frame::Reply(Reply {
                call_id,
                status: keel_wire::StatusCode::Ok,
                metadata,
                compression,
                details: Bytes::new(),
                body,
            });
            write_frame(&mut send, &codec, reply, write_timeout).await
        }
        Err(status) => {
            let code = status.code().to_wire();
            let (body, details, _) = status.into_wire_parts();
            let reply = Frame::Reply(Reply {
                call_id,
                status: code,
                metadata,
                compression: 0,
                details,
                body,
            });
            write_frame(&mut send, &codec, reply, write_timeout).await
        }
    };
    match result {
        Ok(()) => {
            let _ = send.finish();
            // Until the client has it all: a connection closed now (a drain, idle) would drop
            // what is still unacknowledged, and this stream counts until then.
            let _ = tokio::time::timeout(settings.frame_timeout, send.stopped()).await;
        }
        Err(PumpFail::TimedOut) => {
            // The client does not read its answers: they would pile up.
            dispatcher.timed_out(BINDING);
            connection.close(code::TIMED_OUT, b"answers not read in time");
        }
        Err(PumpFail::Broken) => {
            let _ = send.reset(code::CANCELLED);
        }
    }
    drop(recv_kept);
}

/// One streamed upload open; counted out when its stream is dropped.
struct UploadCount(Arc<AtomicUsize>);

impl Drop for UploadCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes `frame` (a too-large one becomes a `TooLarge` answer).
async fn write_frame(
    send: &mut quinn::SendStream,
    codec: &Codec,
    frame: Frame,
    timeout: Option<Duration>,
) -> Result<(), PumpFail> {
    let bytes = match frames::encode(codec, &frame) {
        Ok(bytes) => bytes,
        Err(_) => {
            let call_id = match &frame {
                Frame::Reply(r) => r.call_id,
                _ => 0,
            };
            frames::encode(
                codec,
                &Frame::Reply(Reply {
                    call_id,
                    status: keel_wire::StatusCode::TooLarge,
                    metadata: Bytes::new(),
                    compression: 0,
                    details: Bytes::new(),
                    body: Bytes::from_static(b"the reply exceeds the message size limit"),
                }),
            )
            .map_err(|_| PumpFail::Broken)?
        }
    };
    frames::write(send, bytes, timeout).await
}

/// Answers the stream's call with `status` and finishes the stream (a client that does not
/// read it within a minute loses it).
async fn answer_status(send: &mut quinn::SendStream, codec: &Codec, call_id: u64, status: Status) {
    let code = status.code().to_wire();
    let (body, details, metadata) = status.into_wire_parts();
    let reply = Frame::Reply(Reply {
        call_id,
        status: code,
        metadata: metadata.to_wire().unwrap_or_default(),
        compression: 0,
        details,
        body,
    });
    let timeout = Duration::from_secs(60);
    if write_frame(send, codec, reply, Some(timeout)).await.is_ok() {
        let _ = send.finish();
        // Delivered before the stream stops counting (see `serve_stream`).
        let _ = tokio::time::timeout(timeout, send.stopped()).await;
    }
}
