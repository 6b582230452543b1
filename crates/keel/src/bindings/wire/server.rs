//! The host side of a keel-wire connection: the handshake, then a reader that hands requests
//! to dispatch; replies are written by whichever thread produced them (see [`Sink`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keel_wire::{Codec, Frame, GoAway, HelloReply, Limits, Reply, WireError};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf};

use super::streams::Streams;
use crate::bindings::ServerSettings;
use crate::core::codec::Format;
use crate::core::error::{Error, Kind};
use crate::core::service::{Outcome, Payload};
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::dispatch::{dispatch, ConnInfo, ConnShared, Dispatcher, Incoming, Responder};
use crate::transport::sink::Sink;
use crate::transport::Io;

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
                    status: keel_wire::StatusCode::Ok,
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
                keel_wire::StatusCode::TooLarge,
                Bytes::from(format!(
                    "reply body of {} bytes exceeds the client's limit of {} bytes",
                    body.len(),
                    self.peer_max_message
                )),
            ),
            Ok(body) => (keel_wire::StatusCode::Ok, body),
            Err(status) => (status.code().to_wire(), status.into_body()),
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

/// Serves one accepted keel-wire connection until it closes.
pub(crate) async fn serve(
    io: Box<dyn Io>,
    dispatcher: Arc<Dispatcher>,
    settings: Arc<ServerSettings>,
    info: ConnInfo,
) {
    let mut io = io;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let handshake = tokio::time::timeout(settings.handshake_timeout, async {
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
        max_message_size: settings.max_message_size,
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
        settings.max_stream_window,
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
    let id = dispatcher.next_conn_id();
    let conn = Arc::new(ConnShared::new(id, Box::new(out), info, dispatcher.clone()));
    dispatcher.register(conn.clone());
    if dispatcher.is_shutting_down() {
        conn.go_away("host shutting down");
    }
    let writer = tokio::spawn(flusher);
    let codec = Codec::new(Limits::with_max_message_size(settings.max_message_size));
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
    dispatcher.unregister(conn.id);
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
