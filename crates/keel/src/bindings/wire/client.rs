//! One client connection: the write side (requests are written by the calling thread, see
//! [`Sink`]), the call path, and the connection's tasks. How replies are read and reach their
//! calls is in the [`read`](super::read) module.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use keel_wire::{CallRejected, Codec, Hello, Limits, Side};
use tokio::io::AsyncWriteExt;
use tokio::sync::{oneshot, watch};
use tokio::task::AbortHandle;

use super::conn::{NotSent, Sent, WireEnd};
use super::read::{fail_all_with, AnswerCell, Delivery, Handshake, ReadSide, Reading, ReplySlot};
use super::sink::{SendError, Sink};
use crate::bindings::{Again, Attempt, ClientSettings, Outgoing};
use crate::core::error::{Error, Kind};
use crate::transport::Endpoint;

/// One keel-wire connection of a client: the handle its calls go through (the client's half
/// of a [`WireEnd`], its read side, its tasks).
#[derive(Debug)]
pub(crate) struct WireClientConn {
    wire: Arc<WireEnd<ReplySlot>>,
    /// The read side: the reader task's, or the one call in flight's.
    reading: Arc<Reading>,
    /// The runtime the connection's tasks (and upload pumps) run on.
    runtime: tokio::runtime::Handle,
    /// Largest request body the host accepts (from its handshake reply; the default until it
    /// arrives).
    peer_max_message: Arc<AtomicU32>,
    /// The handshake's outcome, once the host answered it.
    handshaken: watch::Receiver<Option<Result<(), (Kind, String)>>>,
    /// The reader, the flusher, the timer (deadlines, keepalive) and the task that writes
    /// pipelined requests together ([`Sink::pushes_soon`]).
    tasks: [AbortHandle; 4],
}

impl WireClientConn {
    /// Connects and completes the handshake within the configured connect timeout.
    pub(crate) async fn connect(
        endpoint: &Endpoint,
        config: &ClientSettings,
    ) -> Result<WireClientConn, Error> {
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
    /// takes the HelloReply; [`WireClientConn::handshake`] waits for it.
    async fn connect_inner(
        endpoint: &Endpoint,
        config: &ClientSettings,
    ) -> Result<WireClientConn, Error> {
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
        let (rd, wr) = io.split();
        let (sink, flusher) = Sink::new(wr, Codec::new(Limits::with_max_message_size(assumed)));
        let wire = WireEnd::new(Side::Client, sink, config.max_stream_window, assumed);
        let peer_max_message = Arc::new(AtomicU32::new(assumed));
        let (handshake, handshaken) = watch::channel(None);
        let flusher = tokio::spawn(flusher);
        let pushes_soon = tokio::spawn(wire.sink().clone().pushes_soon());
        if let Some(keepalive) = config.keepalive {
            wire.set_keepalive(keepalive);
        }
        let reading = Arc::new(Reading::new(ReadSide::new(
            rd,
            buf,
            Codec::new(Limits::with_max_message_size(config.max_message_size)),
            Handshake {
                endpoint: endpoint.clone(),
                sent: hello_sent,
                peer_max_message: peer_max_message.clone(),
                done: handshake,
            },
        )));
        let reader = tokio::spawn(reading.clone().run(wire.clone()));
        let timers = tokio::spawn(run_timers(
            wire.clone(),
            reading.clone(),
            endpoint.clone(),
            reader.abort_handle(),
        ));
        Ok(WireClientConn {
            wire,
            reading,
            runtime: tokio::runtime::Handle::current(),
            peer_max_message,
            handshaken,
            tasks: [
                reader.abort_handle(),
                flusher.abort_handle(),
                timers.abort_handle(),
                pushes_soon.abort_handle(),
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

    /// One attempt: sends the call and waits for its answer until `deadline`. Says it did not
    /// run if the connection takes no new calls (the host said GoAway), and also after it was
    /// sent if the host's GoAway says it did not process it (its id is above the GoAway's
    /// `last_call_id`), with its request stream coming back from the pump.
    ///
    /// `now`: the time the call is sent at, read by the caller; `remaining`: what is left of
    /// `deadline` then, the request's deadline budget.
    pub(crate) async fn attempt(
        &self,
        call: &mut Outgoing,
        deadline: Instant,
        now: Instant,
        remaining: Duration,
    ) -> Attempt {
        let peer_max_message = self.peer_max_message.load(Ordering::Acquire);
        if call.body.len() as u64 > u64::from(peer_max_message) {
            return Attempt::Answered(Err(Error::new(
                Kind::TooLarge,
                format!(
                    "request body of {} bytes exceeds the host's limit of {peer_max_message} bytes",
                    call.body.len(),
                ),
            )));
        }
        let metadata_block = match call.metadata.to_wire() {
            Ok(m) => m,
            Err(e) => return Attempt::Answered(Err(Error::new(Kind::TooLarge, e.to_string()))),
        };
        // The call stays whole (for another attempt) but for its stream, which goes to the pump.
        let upload = call.upload.take();
        let (slot, cell) = ReplySlot::new(deadline);
        let streamed = upload.is_some();
        let request =
            |call_id| call.wire_request(call_id, metadata_block.clone(), streamed, remaining);
        // The upload is registered before the request goes out, so the host's credit and
        // StopSending for it are routed from the start.
        let (call_id, upload_handle) =
            match self
                .wire
                .send_call(slot, call.download, upload.is_some(), now, request)
            {
                Ok(Sent {
                    call_id,
                    upload,
                    socket_to_task,
                }) => {
                    if socket_to_task {
                        self.reading.give_to_task(&self.wire);
                    }
                    (call_id, upload)
                }
                Err(NotSent::Rejected(CallRejected::GoingAway)) => {
                    // The host said GoAway: it processes no new call here.
                    call.upload = upload;
                    return Attempt::again(Again::Unprocessed);
                }
                Err(NotSent::Rejected(CallRejected::Closed(reason))) => {
                    return Attempt::Answered(Err(Error::new(Kind::Connection, reason)))
                }
                Err(NotSent::Rejected(other)) => {
                    return Attempt::Answered(Err(Error::new(Kind::Connection, other.to_string())))
                }
                Err(NotSent::Sink(SendError::Closed)) => {
                    return Attempt::Answered(Err(Error::new(
                        Kind::Connection,
                        "connection closed",
                    )))
                }
                Err(NotSent::Sink(SendError::Encode(e))) => {
                    return Attempt::Answered(Err(Error::new(Kind::TooLarge, e.to_string())))
                }
            };
        // From here on, a dropped future (the caller gave up) must unregister and tell the host.
        let mut guard = CallGuard {
            wire: &self.wire,
            reading: &self.reading,
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
        // No timer of its own: the connection's timer answers it `TimedOut` at its deadline.
        let outcome = self.reading.answer(&self.wire, call_id, &cell).await;
        guard.armed = false;
        AnswerCell::recycle(cell);
        Attempt::Answered(match outcome {
            Delivery::Answer(result) => result,
            Delivery::TimedOut => Err(call.timed_out()),
            Delivery::Closed => Err(Error::new(Kind::Connection, "connection closed")),
            Delivery::Unprocessed => {
                return Attempt::Again {
                    stream_back: upload_back,
                    why: Again::Unprocessed,
                }
            }
        })
    }
}

impl Drop for WireClientConn {
    fn drop(&mut self) {
        self.close("connection dropped");
    }
}

/// Cancels a call whose future is dropped before its reply arrived (and gives the socket back
/// to the reader task if the call was reading it).
struct CallGuard<'a> {
    wire: &'a Arc<WireEnd<ReplySlot>>,
    reading: &'a Reading,
    call_id: u64,
    armed: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.wire.cancel_call(self.call_id);
            self.reading.release(self.wire, self.call_id);
        }
    }
}

/// Closes the connection's state and fails every waiting call with `reason`.
fn fail_all(wire: &WireEnd<ReplySlot>, reason: &str) {
    fail_all_with(wire, Kind::Connection, reason);
}

/// Runs the connection's timer: calls past their deadline are answered `TimedOut`, and with
/// keepalive on, a host that answers nothing within the timeout after a ping is gone, or the
/// path to it is: the connection closes, its calls fail `Unavailable` at once (not at their
/// deadlines), and the channel's next call opens a new connection.
async fn run_timers(
    wire: Arc<WireEnd<ReplySlot>>,
    reading: Arc<Reading>,
    endpoint: Endpoint,
    reader: AbortHandle,
) {
    let timed_out = |expired: Vec<(u64, ReplySlot)>| {
        for (_, slot) in expired {
            slot.send(Delivery::TimedOut);
        }
    };
    // A call that reads the socket for itself but is not polled (its future kept, not
    // dropped) must not make a live host look silent: the task reads before the verdict.
    let reclaim = || reading.reclaim(&wire);
    let Some(dead) = wire.clone().run_timers(timed_out, reclaim).await else {
        return;
    };
    reader.abort();
    let reason = format!("{endpoint}: connection dead: {dead}");
    log::debug!("{reason}");
    // The same shape as a reset or closed connection (`Error::is_connection`, `Unavailable`).
    fail_all_with(&wire, Kind::Connection, &reason);
    wire.sink().close();
}
