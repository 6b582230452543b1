//! One host-side connection, whatever its protocol: the calls it has in flight and where their
//! answers go (a [`Responder`]). Every accepted call is answered exactly once: whoever removes it
//! from `calls` (the handler finishing, a cancel, or the drain timeout) owns the answer.
//!
//! [`serve`] runs a keel-wire connection: handshake, then a reader that hands requests to the
//! dispatcher; replies are written by whichever thread produced them (see [`Sink`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keel_wire::{Codec, Frame, GoAway, HelloReply, Limits, Reply, WireError};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf};
use tokio::task::AbortHandle;

use super::dispatch::{dispatch, Incoming};
use super::HostShared;
use crate::endpoint::Io;
use crate::error::{Error, Kind};
use crate::error::{Status, StatusCode};
use crate::service::{Format, Outcome, Payload};
use crate::sink::Sink;
use crate::stream::ByteStream;
use crate::wire_stream::Streams;

/// Per-call control shared with the task or pool job running it.
#[derive(Debug, Default)]
pub(crate) struct CallCtl {
    /// Set by a cancel frame or the drain timeout: a job that has not started must not start.
    pub(crate) cancelled: AtomicBool,
    /// The task running an async operation, so a cancel can stop it.
    pub(crate) task: Mutex<Option<AbortHandle>>,
}

impl CallCtl {
    /// The call will not be answered by its handler: a job not yet started must not start, and
    /// an async operation still running is aborted. (A blocking job already running finishes;
    /// threads cannot be interrupted.)
    fn stop(&self) {
        self.cancelled.store(true, Ordering::Release);
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

/// Where a connection's answers go: keel-wire frames, or the HTTP requests waiting for them.
pub(crate) trait Responder: Send + Sync + std::fmt::Debug + 'static {
    /// Delivers the answer to call `call_id`.
    fn reply(&self, call_id: u64, outcome: Outcome);
    /// The host will serve no new calls here; tell the peer (calls up to `last_call_id` are
    /// still answered).
    fn go_away(&self, last_call_id: u64, reason: &str);
    /// Delivers what is queued, then closes the connection.
    fn close(&self);
}

/// The keel-wire responder: answers are Reply frames (then StreamData for a streamed reply).
#[derive(Debug)]
struct WireResponder {
    /// Replies are written by whichever thread produced them (see [`Sink`]).
    sink: Arc<Sink>,
    streams: Arc<Streams>,
    /// Where streamed replies are pumped from (answers may come from pool threads).
    runtime: tokio::runtime::Handle,
    /// Largest reply body the client accepts (from its hello).
    peer_max_message: u32,
}

impl Responder for WireResponder {
    fn reply(&self, call_id: u64, outcome: Outcome) {
        let outcome = match outcome {
            Ok(Payload::Stream(stream)) => {
                // Register first, so the client's credit for it is routed from the start.
                let handle = self.streams.register_outbound(call_id);
                let head = Frame::Reply(Reply {
                    call_id,
                    status: StatusCode::Ok,
                    body: Bytes::new(),
                });
                if self.sink.send(&head).is_ok() {
                    self.runtime
                        .spawn(self.streams.clone().pump(handle, stream));
                } else {
                    self.streams.stop_outbound(call_id);
                }
                return;
            }
            Ok(Payload::Body(body)) => Ok(body),
            Err(status) => Err(status),
        };
        let (status, body) = match outcome {
            Ok(body) if body.len() as u64 > u64::from(self.peer_max_message) => (
                StatusCode::TooLarge,
                Bytes::from(format!(
                    "reply body of {} bytes exceeds the client's limit of {} bytes",
                    body.len(),
                    self.peer_max_message
                )),
            ),
            Ok(body) => (StatusCode::Ok, body),
            Err(status) => (status.code(), status.into_wire_body()),
        };
        let _ = self.sink.send(&Frame::Reply(Reply {
            call_id,
            status,
            body,
        }));
    }

    fn go_away(&self, last_call_id: u64, reason: &str) {
        let frame = Frame::GoAway(GoAway {
            last_call_id,
            reason: reason.to_string(),
        });
        let _ = self.sink.send(&frame);
    }

    fn close(&self) {
        self.sink.close();
    }
}

/// Facts about one connection, for [`Host::connections`](crate::Host::connections).
#[derive(Debug)]
pub(crate) struct ConnInfo {
    /// The binding's scheme: `tcp`, `tcps`, `unix`, `http`, `https`.
    pub(crate) binding: &'static str,
    /// The other end, for logs.
    pub(crate) peer: String,
    /// When the connection was accepted.
    pub(crate) opened: Instant,
    /// Calls received on it (accepted or refused).
    pub(crate) calls: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct ConnShared {
    pub(crate) id: u64,
    out: Box<dyn Responder>,
    calls: Mutex<HashMap<u64, Arc<CallCtl>>>,
    last_call_id: AtomicU64,
    pub(crate) info: ConnInfo,
    pub(crate) host: Arc<HostShared>,
}

impl ConnShared {
    /// A connection whose answers go to `out`.
    pub(crate) fn new(
        id: u64,
        out: Box<dyn Responder>,
        info: ConnInfo,
        host: Arc<HostShared>,
    ) -> ConnShared {
        ConnShared {
            id,
            out,
            calls: Mutex::new(HashMap::new()),
            last_call_id: AtomicU64::new(0),
            info,
            host,
        }
    }

    /// Registers an accepted call. `None` if the connection already has as many calls as allowed.
    pub(crate) fn track(&self, call_id: u64) -> Result<Arc<CallCtl>, Status> {
        let ctl = Arc::new(CallCtl::default());
        {
            let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            if calls.len() >= self.host.config.max_calls_per_connection {
                return Err(Status::new(
                    StatusCode::Busy,
                    format!(
                        "this connection already has {} calls in flight",
                        self.host.config.max_calls_per_connection
                    ),
                ));
            }
            calls.insert(call_id, ctl.clone());
        }
        self.last_call_id.fetch_max(call_id, Ordering::Relaxed);
        self.host.call_started();
        Ok(ctl)
    }

    /// Answers a tracked call, unless someone else (cancel, drain) already did.
    pub(crate) fn finish(&self, call_id: u64, one_way: bool, outcome: Outcome) {
        let removed = self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&call_id);
        if removed.is_some() {
            if !one_way {
                self.reply(call_id, outcome);
            }
            self.host.call_finished();
        }
    }

    /// Sends an answer for a call that was never tracked (refused before admission).
    pub(crate) fn reply(&self, call_id: u64, outcome: Outcome) {
        self.out.reply(call_id, outcome);
    }

    /// The caller no longer wants call `call_id`: stop it; no answer is sent.
    pub(crate) fn cancel(&self, call_id: u64) {
        let removed = self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&call_id);
        if let Some(ctl) = removed {
            ctl.stop();
            self.host.call_finished();
        }
    }

    /// Drain: tell the client no new calls will be served here.
    pub(crate) fn go_away(&self, reason: &str) {
        let last_call_id = self.last_call_id.load(Ordering::Relaxed);
        self.out.go_away(last_call_id, reason);
    }

    /// Answers every call still in flight with `status` and closes the connection.
    pub(crate) fn abandon_all(&self, status: &Status) {
        let calls = std::mem::take(&mut *self.calls.lock().unwrap_or_else(|e| e.into_inner()));
        for (call_id, ctl) in calls {
            ctl.stop();
            self.reply(call_id, Err(status.clone()));
            self.host.call_finished();
        }
        self.out.close();
    }

    /// Delivers what is queued and closes the connection.
    pub(crate) fn close(&self) {
        self.out.close();
    }

    /// Calls in flight on this connection.
    pub(crate) fn in_flight(&self) -> usize {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Serves one accepted keel-wire connection until it closes.
pub(crate) async fn serve(io: Box<dyn Io>, host: Arc<HostShared>, id: u64, info: ConnInfo) {
    let mut io = io;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let handshake = tokio::time::timeout(host.config.handshake_timeout, async {
        loop {
            match keel_wire::decode_hello(&mut buf) {
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
            match io.read_buf(&mut buf).await {
                Ok(0) => return Err("closed during the handshake".to_string()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    })
    .await;
    let hello = match handshake {
        Ok(Ok(h)) => h,
        // Not a keel client, or too slow: close without a word (we cannot frame one).
        Ok(Err(_)) | Err(_) => return,
    };
    let mut out = BytesMut::new();
    if hello.version != keel_wire::VERSION {
        let reject = HelloReply::Reject {
            supported_version: keel_wire::VERSION,
            reason: format!(
                "protocol version {} is not supported; this host speaks {}",
                hello.version,
                keel_wire::VERSION
            ),
        };
        keel_wire::encode_hello_reply(&reject, &mut out);
        let _ = io.write_all(&out).await;
        let _ = io.shutdown().await;
        return;
    }
    let accept = HelloReply::Accept {
        version: keel_wire::VERSION,
        max_message_size: host.config.max_message_size,
    };
    keel_wire::encode_hello_reply(&accept, &mut out);
    // Over TLS, written bytes may wait in the TLS layer until flushed.
    if io.write_all(&out).await.is_err() || io.flush().await.is_err() {
        return;
    }

    let (rd, wr) = tokio::io::split(io);
    let (sink, flusher) = Sink::new(
        wr,
        Codec::new(Limits::with_max_message_size(hello.max_message_size)),
    );
    let streams = Streams::new(
        sink.clone(),
        host.config.max_stream_window,
        hello.max_message_size,
    );
    // One ping gives the round-trip time that stream windows grow against.
    let ping_sent = Instant::now();
    let _ = sink.send(&Frame::Ping(RTT_PING));
    let out = WireResponder {
        sink: sink.clone(),
        streams: streams.clone(),
        runtime: tokio::runtime::Handle::current(),
        peer_max_message: hello.max_message_size,
    };
    let conn = Arc::new(ConnShared::new(id, Box::new(out), info, host.clone()));
    host.register(conn.clone());
    if host.is_shutting_down() {
        conn.go_away("host shutting down");
    }
    let writer = tokio::spawn(flusher);
    let codec = Codec::new(Limits::with_max_message_size(host.config.max_message_size));
    let reader = tokio::spawn(read_loop(
        rd,
        buf,
        codec,
        conn.clone(),
        Wire {
            sink,
            streams: streams.clone(),
            ping_sent,
        },
    ));
    // The reader ends on EOF or error; the writer when it closed the connection on purpose.
    let reader_abort = reader.abort_handle();
    tokio::select! {
        _ = reader => {}
        _ = writer => { reader_abort.abort(); }
    }
    // The peer is gone: nobody can receive answers, so stop what still runs for it.
    streams.close("connection closed");
    let gone = Status::new(StatusCode::Cancelled, "connection closed");
    conn.abandon_all(&gone);
    host.unregister(conn.id);
}

/// The nonce of the ping a host sends to measure the round-trip time.
const RTT_PING: u64 = 0x006b_6565_6c72_7474; // "keelrtt"

/// The write side and stream state a wire connection's reader needs.
struct Wire {
    sink: Arc<Sink>,
    streams: Arc<Streams>,
    ping_sent: Instant,
}

async fn read_loop(
    mut rd: ReadHalf<Box<dyn Io>>,
    mut buf: BytesMut,
    mut codec: Codec,
    conn: Arc<ConnShared>,
    wire: Wire,
) {
    let Wire {
        sink,
        streams,
        ping_sent,
    } = wire;
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(Frame::Request(req))) => {
                let stream = if req.flags.streamed {
                    streams.open_inbound(req.call_id)
                } else {
                    ByteStream::empty()
                };
                let incoming = Incoming {
                    call_id: req.call_id,
                    one_way: req.flags.one_way,
                    deadline: (req.deadline_us > 0).then(|| Duration::from_micros(req.deadline_us)),
                    service: &req.service,
                    operation: &req.operation,
                    format: Format::Postcard,
                    body: req.body,
                    stream,
                };
                dispatch(&conn, incoming, Instant::now());
                continue;
            }
            Ok(Some(Frame::Cancel(c))) => {
                conn.cancel(c.call_id);
                streams.stop_outbound(c.call_id);
                let cancelled = Error::new(Kind::Status(StatusCode::Cancelled), "call cancelled");
                streams.fail_inbound(c.call_id, cancelled);
                continue;
            }
            Ok(Some(
                frame @ (Frame::StreamData(_)
                | Frame::StreamEnd(_)
                | Frame::WindowUpdate(_)
                | Frame::StopSending(_)),
            )) => {
                streams.on_frame(frame);
                continue;
            }
            Ok(Some(Frame::Ping(nonce))) => {
                let _ = sink.send(&Frame::Pong(nonce));
                continue;
            }
            Ok(Some(Frame::Pong(nonce))) => {
                if nonce == RTT_PING {
                    streams.set_rtt(ping_sent.elapsed());
                }
                continue;
            }
            Ok(Some(Frame::Reply(_) | Frame::GoAway(_))) => {
                conn.go_away("protocol error: the client sent a host-only frame");
                conn.close();
                return;
            }
            Ok(None) => {}
            Err(WireError::TooLarge {
                call_id,
                size,
                limit,
            }) => {
                // The codec skips the oversized frame; the connection stays usable.
                if let Some(call_id) = call_id {
                    let msg = format!(
                        "request of {size} bytes exceeds this host's limit of {limit} bytes"
                    );
                    conn.reply(call_id, Err(Status::new(StatusCode::TooLarge, msg)));
                }
                continue;
            }
            Err(e) => {
                conn.go_away(&format!("protocol error: {e}"));
                conn.close();
                return;
            }
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
