//! One client connection: a reader task that hands frames to the connection's state
//! ([`WireConn`]) and routes replies to waiting calls; requests are written by the calling
//! thread (see [`Sink`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use keel_wire::{
    CallRejected, Codec, Event, Frame, Hello, HelloReply, Limits, Request, RequestFlags, Side,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf};
use tokio::sync::{oneshot, watch};
use tokio::task::AbortHandle;

use super::conn::{NotSent, WireConn};
use crate::bindings::{Answer, ClientSettings, Outgoing, Replied};
use crate::core::compress::Compression;
use crate::core::error::{Error, Kind};
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::transport::sink::{SendError, Sink};
use crate::transport::{Endpoint, Io};

/// What a waiting call receives.
type ReplySlot = oneshot::Sender<Delivery>;

/// What a waiting call receives: its answer, or word that the host will not process it.
#[derive(Debug)]
enum Delivery {
    Answer(Answer),
    /// The host's GoAway named a `last_call_id` below the call's id: the host did not and will
    /// not process it, so it may be sent again on another connection.
    Unprocessed,
}

/// One connection of a client.
#[derive(Debug)]
pub(crate) struct Conn {
    wire: Arc<WireConn<ReplySlot>>,
    /// The runtime the connection's tasks (and upload pumps) run on.
    runtime: tokio::runtime::Handle,
    /// Largest request body the host accepts (from its handshake reply; the default until it
    /// arrives).
    peer_max_message: Arc<AtomicU32>,
    /// The handshake's outcome, once the host answered it.
    handshaken: watch::Receiver<Option<Result<(), (Kind, String)>>>,
    /// The reader, the flusher and the keepalive timer.
    tasks: [AbortHandle; 3],
}

impl Conn {
    /// Connects and completes the handshake within the configured connect timeout.
    pub(crate) async fn connect(
        endpoint: &Endpoint,
        config: &ClientSettings,
    ) -> Result<Conn, Error> {
        let fut = Self::connect_inner(endpoint, config);
        match tokio::time::timeout(config.connect_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                Kind::Connect,
                format!(
                    "{endpoint}: no connection within {:?}",
                    config.connect_timeout
                ),
            )),
        }
    }

    /// Connects, secures, and sends keel's Hello, without waiting for the host's answer: the
    /// first call goes right behind it (the handshake is pipelined with it, as HTTP/2's
    /// preface is), so a fresh connection's first call costs one round trip. The reader task
    /// takes the HelloReply; [`Conn::handshake`] waits for it.
    async fn connect_inner(endpoint: &Endpoint, config: &ClientSettings) -> Result<Conn, Error> {
        let connect_err = |e: std::io::Error| {
            Error::new(Kind::Connect, format!("{endpoint}: {e}")).with_source(e)
        };
        let raw = endpoint.connect_raw().await.map_err(connect_err)?;
        let mut io = endpoint
            .secure_client(raw, &config.tls, endpoint.alpn())
            .await?
            .io;
        let mut buf = BytesMut::with_capacity(4096);
        keel_wire::encode_hello(
            &Hello {
                version: keel_wire::VERSION,
                max_message_size: config.max_message_size,
            },
            &mut buf,
        );
        let hello_sent = Instant::now();
        io.write_all(&buf).await.map_err(connect_err)?;
        // Over TLS, written bytes may wait in the TLS layer until flushed.
        io.flush().await.map_err(connect_err)?;
        buf.clear();

        // Until the host says otherwise, it is assumed to take the default message size.
        let assumed = keel_wire::DEFAULT_MAX_MESSAGE_SIZE;
        let (rd, wr) = tokio::io::split(io);
        let (sink, flusher) = Sink::new(wr, Codec::new(Limits::with_max_message_size(assumed)));
        let wire = WireConn::new(Side::Client, sink, config.max_stream_window, assumed);
        let peer_max_message = Arc::new(AtomicU32::new(assumed));
        let (handshake, handshaken) = watch::channel(None);
        let flusher = tokio::spawn(flusher);
        if let Some(keepalive) = config.keepalive {
            wire.set_keepalive(keepalive);
        }
        let reader = tokio::spawn(read_loop(
            rd,
            buf,
            Codec::new(Limits::with_max_message_size(config.max_message_size)),
            wire.clone(),
            Handshake {
                endpoint: endpoint.clone(),
                sent: hello_sent,
                peer_max_message: peer_max_message.clone(),
                done: handshake,
            },
        ));
        let keepalive = tokio::spawn(watch_liveness(
            wire.clone(),
            endpoint.clone(),
            reader.abort_handle(),
        ));
        Ok(Conn {
            wire,
            runtime: tokio::runtime::Handle::current(),
            peer_max_message,
            handshaken,
            tasks: [
                reader.abort_handle(),
                flusher.abort_handle(),
                keepalive.abort_handle(),
            ],
        })
    }

    /// Waits until the host accepted the handshake; its refusal (or a connection that closed
    /// first) as an error.
    pub(crate) async fn handshake(&self) -> Result<(), Error> {
        let mut done = self.handshaken.clone();
        let outcome = done.wait_for(Option::is_some).await;
        match outcome.as_deref() {
            Ok(Some(Ok(()))) => Ok(()),
            Ok(Some(Err((kind, message)))) => Err(Error::new(*kind, message.clone())),
            _ => Err(Error::new(
                Kind::Connect,
                "connection closed during the handshake",
            )),
        }
    }

    /// Whether the connection is still up (it may have stopped taking new calls).
    pub(crate) fn is_open(&self) -> bool {
        !self.wire.is_closed()
    }

    /// Whether new calls may go here: open, and the host has not said GoAway.
    pub(crate) fn takes_calls(&self) -> bool {
        self.wire.takes_calls()
    }

    /// Closes the connection now; waiting calls fail, streams stop.
    pub(crate) fn close(&self, reason: &str) {
        fail_all(&self.wire, reason);
        // Wakes any pump waiting for the socket queue to shrink.
        self.wire.sink().close();
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Sends one call and waits for its answer until `deadline`. Gives the call back unsent
    /// if the connection takes no new calls (the host said GoAway), and also after it was sent
    /// if the host's GoAway says it did not process it (its id is above the GoAway's
    /// `last_call_id`): the caller sends it on a new connection.
    ///
    /// A call with a request stream is given back only if nothing was taken from its stream
    /// yet; once the stream has started, its bytes are gone and the call fails `ShuttingDown`
    /// (the host did not run it, but it cannot be sent again).
    pub(crate) async fn call_or_return(
        &self,
        mut call: Outgoing,
        deadline: Instant,
    ) -> Result<Answer, Outgoing> {
        let peer_max_message = self.peer_max_message.load(Ordering::Acquire);
        if call.body.len() as u64 > u64::from(peer_max_message) {
            return Ok(Err(Error::new(
                Kind::TooLarge,
                format!(
                    "request body of {} bytes exceeds the host's limit of {peer_max_message} bytes",
                    call.body.len(),
                ),
            )));
        }
        let metadata_block = match call.metadata.to_wire() {
            Ok(m) => m,
            Err(e) => return Ok(Err(Error::new(Kind::TooLarge, e.to_string()))),
        };
        // The call stays whole (to be given back) but for its stream, which goes to the pump.
        let upload = call.upload.take();
        let (service, operation) = (call.service, call.operation);
        let (slot, reply) = oneshot::channel();
        let now = Instant::now();
        let remaining = deadline.saturating_duration_since(now);
        let request = |call_id| {
            Frame::Request(Request {
                call_id,
                flags: RequestFlags {
                    one_way: call.one_way,
                    streamed: upload.is_some(),
                    accepts_compressed: call.accepts_compressed,
                },
                // Round up so a sub-microsecond remainder is not read as "no deadline".
                deadline_us: (remaining.as_micros() as u64).max(1),
                service: service.into(),
                operation: operation.into(),
                metadata: metadata_block.clone(),
                compression: call
                    .compression
                    .map_or(Compression::IDENTITY_ID, Compression::to_u8),
                body: call.body.clone(),
            })
        };
        // The upload is registered before the request goes out, so the host's credit and
        // StopSending for it are routed from the start.
        let (call_id, upload_handle) =
            match self
                .wire
                .send_call(slot, call.download, upload.is_some(), now, request)
            {
                Ok(sent) => sent,
                Err(NotSent::Rejected(CallRejected::GoingAway)) => {
                    call.upload = upload;
                    return Err(call);
                }
                Err(NotSent::Rejected(CallRejected::Closed(reason))) => {
                    return Ok(Err(Error::new(Kind::Connection, reason)))
                }
                Err(NotSent::Rejected(other)) => {
                    return Ok(Err(Error::new(Kind::Connection, other.to_string())))
                }
                Err(NotSent::Sink(SendError::Closed)) => {
                    return Ok(Err(Error::new(Kind::Connection, "connection closed")))
                }
                Err(NotSent::Sink(SendError::Encode(e))) => {
                    return Ok(Err(Error::new(Kind::TooLarge, e.to_string())))
                }
            };
        // From here on, a dropped future (the caller gave up) must unregister and tell the host.
        let mut guard = CallGuard {
            wire: &self.wire,
            call_id,
            armed: true,
        };
        // The pump gives the stream back if the call is stopped before it took anything.
        let upload_back = match (upload_handle, upload) {
            (Some(handle), Some(stream)) => {
                let (back, returned) = oneshot::channel();
                let pump = self.wire.clone().pump(handle, stream);
                self.runtime.spawn(async move {
                    let _ = back.send(pump.await);
                });
                Some(returned)
            }
            _ => None,
        };
        let timed_out = || {
            Err(Error::new(
                Kind::Timeout,
                format!("{service}.{operation}: no reply before the deadline"),
            ))
        };
        let outcome = tokio::time::timeout_at(deadline.into(), reply).await;
        guard.armed = false;
        let result = match outcome {
            Ok(Ok(Delivery::Answer(result))) => result,
            Ok(Ok(Delivery::Unprocessed)) => {
                let upload = match upload_back {
                    None => None,
                    Some(returned) => {
                        match tokio::time::timeout_at(deadline.into(), returned).await {
                            Ok(Ok(Some(stream))) => Some(stream),
                            Ok(_) => {
                                return Ok(Ok(Err(Status::new(
                                    StatusCode::ShuttingDown,
                                    format!(
                                        "{service}.{operation}: the host went away without \
                                         processing the call, and its request stream had \
                                         started, so it cannot be sent again"
                                    ),
                                ))))
                            }
                            Err(_) => return Ok(timed_out()),
                        }
                    }
                };
                call.upload = upload;
                return Err(call);
            }
            Ok(Err(_)) => Err(Error::new(Kind::Connection, "connection closed")),
            Err(_) => {
                self.wire.cancel_call(call_id);
                timed_out()
            }
        };
        Ok(result)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close("connection dropped");
    }
}

/// Cancels a call whose future is dropped before its reply arrived.
struct CallGuard<'a> {
    wire: &'a WireConn<ReplySlot>,
    call_id: u64,
    armed: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.wire.cancel_call(self.call_id);
        }
    }
}

/// Closes the connection's state and fails every waiting call with `reason`.
fn fail_all(wire: &WireConn<ReplySlot>, reason: &str) {
    fail_all_with(wire, Kind::Connection, reason);
}

/// Closes the connection's state and fails every waiting call with an error of `kind`.
fn fail_all_with(wire: &WireConn<ReplySlot>, kind: Kind, reason: &str) {
    for (_, slot) in wire.close(reason) {
        let _ = slot.send(Delivery::Answer(Err(Error::new(kind, reason.to_string()))));
    }
}

/// Runs the connection's keepalive timer (if keepalive is on). A host that answers nothing
/// within the timeout after a ping is gone, or the path to it is: the connection closes, its
/// calls fail `Unavailable` at once (not at their deadlines), and the channel's next call opens
/// a new connection.
async fn watch_liveness(wire: Arc<WireConn<ReplySlot>>, endpoint: Endpoint, reader: AbortHandle) {
    let Some(dead) = wire.clone().keepalive().await else {
        return;
    };
    reader.abort();
    let reason = format!("{endpoint}: connection dead: {dead}");
    log::debug!("{reason}");
    fail_all_with(&wire, Kind::Status(StatusCode::Unavailable), &reason);
    wire.sink().close();
}

/// What the reader needs to finish the handshake.
struct Handshake {
    endpoint: Endpoint,
    /// When the Hello went out: the reply gives the first round-trip sample.
    sent: Instant,
    peer_max_message: Arc<AtomicU32>,
    done: watch::Sender<Option<Result<(), (Kind, String)>>>,
}

impl Handshake {
    /// Reads the HelloReply. Accepted: the host's limits apply from now on. Refused (or not a
    /// keel host): the error, for `Conn::handshake` and the calls already sent.
    async fn complete(
        self,
        rd: &mut ReadHalf<Box<dyn Io>>,
        buf: &mut BytesMut,
        wire: &WireConn<ReplySlot>,
    ) -> Result<(), (Kind, String)> {
        let endpoint = &self.endpoint;
        let outcome = loop {
            match keel_wire::decode_hello_reply(buf) {
                Ok(Some(r)) => break Ok(r),
                Ok(None) => {}
                Err(_) if crate::transport::looks_like_tls(buf) => {
                    break Err((
                        Kind::Connect,
                        format!(
                            "{endpoint}: the host answered with TLS; connect with a tcps:// URL \
                             and TLS settings"
                        ),
                    ))
                }
                Err(e) => break Err((Kind::Protocol, format!("{endpoint}: bad handshake: {e}"))),
            }
            match rd.read_buf(buf).await {
                Ok(0) => {
                    break Err((
                        Kind::Connect,
                        format!("{endpoint}: closed during the handshake"),
                    ))
                }
                Ok(_) => {}
                Err(e) => break Err((Kind::Connect, format!("{endpoint}: {e}"))),
            }
        };
        let outcome = match outcome {
            Ok(HelloReply::Accept { version, .. }) if version < keel_wire::VERSION => Err((
                Kind::Protocol,
                format!(
                    "{endpoint} speaks protocol version {version}; this client needs version {} \
                     (upgrade the host first: hosts serve clients of every older version)",
                    keel_wire::VERSION
                ),
            )),
            Ok(HelloReply::Accept {
                max_message_size, ..
            }) => {
                self.peer_max_message
                    .store(max_message_size, Ordering::Release);
                wire.set_peer_max_message(max_message_size);
                // The handshake was one round trip: the first estimate windows grow against.
                wire.set_rtt(self.sent.elapsed());
                Ok(())
            }
            Ok(HelloReply::Reject {
                supported_version,
                reason,
            }) => Err((
                Kind::Protocol,
                format!(
                    "{endpoint} refused the handshake (it speaks version {supported_version}, \
                     this client {}): {reason}",
                    keel_wire::VERSION
                ),
            )),
            Err(e) => Err(e),
        };
        self.done.send_replace(Some(outcome.clone()));
        outcome
    }
}

async fn read_loop(
    mut rd: ReadHalf<Box<dyn Io>>,
    mut buf: BytesMut,
    mut codec: Codec,
    wire: Arc<WireConn<ReplySlot>>,
    handshake: Handshake,
) {
    if let Err((kind, reason)) = handshake.complete(&mut rd, &mut buf, &wire).await {
        return fail_all_with(&wire, kind, &reason);
    }
    // When the bytes being decoded were read: what the core takes as the frames' arrival.
    let mut read_at = Instant::now();
    // Replies handed to their callers since the last read.
    let mut answered = 0usize;
    let reason = loop {
        match codec.decode(&mut buf) {
            Ok(Some(frame)) => match wire.handle(frame, read_at) {
                Ok(Some(Event::Reply {
                    reply,
                    slot,
                    download,
                })) => {
                    let metadata = Metadata::from_wire(&reply.metadata);
                    let compression = match reply.compression {
                        0 => None,
                        id => match Compression::from_u8(id) {
                            Some(c) => Some(c),
                            None => {
                                let why =
                                    format!("the host compressed a reply with unknown id {id}");
                                let _ = slot
                                    .send(Delivery::Answer(Err(Error::new(Kind::Protocol, why))));
                                continue;
                            }
                        },
                    };
                    let result = if reply.status != keel_wire::StatusCode::Ok {
                        let code = StatusCode::from_wire(reply.status);
                        Err(Status::from_wire_parts(
                            code,
                            reply.body,
                            reply.details,
                            metadata,
                        ))
                    } else if download {
                        // Before the next frame is read: its data follows this reply.
                        let payload = Payload::Stream(wire.inbound_stream(reply.call_id));
                        Ok(Replied {
                            payload,
                            metadata,
                            compression,
                        })
                    } else {
                        let payload = Payload::Body(reply.body);
                        Ok(Replied {
                            payload,
                            metadata,
                            compression,
                        })
                    };
                    // Nobody waiting: the caller gave up as the reply arrived; drop it.
                    let _ = slot.send(Delivery::Answer(Ok(result)));
                    answered += 1;
                    continue;
                }
                // GoAway: the host answers the calls up to its `last_call_id` and then closes;
                // it did not process those above, which go to a new connection now, as new
                // calls do (the connection takes none).
                Ok(Some(Event::GoAway(go_away))) => {
                    for slot in wire.unprocessed(go_away.last_call_id) {
                        let _ = slot.send(Delivery::Unprocessed);
                    }
                    continue;
                }
                Ok(_) => continue,
                Err(e) => break e.to_string(),
            },
            Ok(None) => {}
            Err(e) if !e.is_fatal() => {
                if let keel_wire::WireError::TooLarge {
                    call_id: Some(id), ..
                } = &e
                {
                    if let Some(slot) = wire.forget_call(*id) {
                        let too_large = Error::new(Kind::TooLarge, format!("reply: {e}"));
                        let _ = slot.send(Delivery::Answer(Err(too_large)));
                    }
                }
                continue;
            }
            Err(e) => break format!("protocol error from the host: {e}"),
        }
        // Several callers were just answered: under load each sends its next call at once.
        // Let them run first (one yield, no thread woken) with the sink corked, so their
        // requests leave in one write instead of one each. A lone reply skips this: its
        // caller's next request goes out the moment it is made.
        if answered > 1 {
            wire.sink().cork();
            tokio::task::yield_now().await;
            wire.sink().uncork();
        }
        answered = 0;
        match rd.read_buf(&mut buf).await {
            Ok(0) => break "connection closed by the host".to_string(),
            Ok(_) => read_at = Instant::now(),
            Err(e) => break format!("connection lost: {e}"),
        }
    };
    fail_all(&wire, &reason);
}
