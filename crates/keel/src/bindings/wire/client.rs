//! One client connection: a reader task that routes replies to waiting calls by call id, and a
//! writer task that batches frames onto the socket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::BytesMut;
use keel_wire::{
    Cancel, Codec, Frame, Hello, HelloReply, Limits, Request, RequestFlags, StopSending,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf};
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use super::streams::Streams;
use crate::bindings::{Answer, ClientSettings, Outgoing};
use crate::core::error::{Error, Kind};
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::transport::sink::{SendError, Sink};
use crate::transport::{Endpoint, Io};
use keel_wire::StatusCode as WireCode;

/// What a waiting call receives.
type ReplySlot = oneshot::Sender<Answer>;

/// A call waiting for its reply.
#[derive(Debug)]
struct Waiting {
    slot: ReplySlot,
    /// The reply is streamed: an Ok reply opens the inbound stream.
    download: bool,
}

#[derive(Debug)]
pub(crate) struct Conn {
    shared: Arc<Shared>,
    sink: Arc<Sink>,
    streams: Arc<Streams>,
    /// The runtime the connection's tasks (and upload pumps) run on.
    runtime: tokio::runtime::Handle,
    tasks: [AbortHandle; 2],
}

#[derive(Debug)]
struct Shared {
    pending: Mutex<Pending>,
    next_id: AtomicU64,
    open: AtomicBool,
    /// Largest request body the host accepts (from its handshake reply).
    peer_max_message: u32,
}

#[derive(Debug, Default)]
struct Pending {
    calls: HashMap<u64, Waiting>,
    /// Set once the connection is gone; later calls fail at once with this reason.
    closed: Option<String>,
}

impl Shared {
    /// Unregisters a waiting call; `None` if it was already answered or given up.
    fn take(&self, call_id: u64) -> Option<Waiting> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .calls
            .remove(&call_id)
    }

    /// Marks the connection closed and fails every waiting call.
    fn fail_all(&self, reason: &str) {
        self.open.store(false, Ordering::Release);
        let calls = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.closed.is_none() {
                p.closed = Some(reason.to_string());
            }
            std::mem::take(&mut p.calls)
        };
        for (_, waiting) in calls {
            let _ = waiting
                .slot
                .send(Err(Error::new(Kind::Connection, reason.to_string())));
        }
    }
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
        let reply = loop {
            match keel_wire::decode_hello_reply(&mut buf) {
                Ok(Some(r)) => break r,
                Ok(None) => {}
                Err(_) if crate::transport::looks_like_tls(&buf) => {
                    return Err(Error::new(
                        Kind::Connect,
                        format!(
                            "{endpoint}: the host answered with TLS; connect with a tcps:// URL \
                             and TLS settings"
                        ),
                    ))
                }
                Err(e) => {
                    return Err(Error::new(
                        Kind::Protocol,
                        format!("{endpoint}: bad handshake: {e}"),
                    ))
                }
            }
            if io.read_buf(&mut buf).await.map_err(connect_err)? == 0 {
                return Err(Error::new(
                    Kind::Connect,
                    format!("{endpoint}: closed during the handshake"),
                ));
            }
        };
        let peer_max_message = match reply {
            HelloReply::Accept {
                max_message_size, ..
            } => max_message_size,
            HelloReply::Reject {
                supported_version,
                reason,
            } => {
                return Err(Error::new(
                    Kind::Protocol,
                    format!(
                        "{endpoint} refused the handshake (it speaks version {supported_version}, \
                         this client {}): {reason}",
                        keel_wire::VERSION
                    ),
                ))
            }
        };

        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            next_id: AtomicU64::new(1),
            open: AtomicBool::new(true),
            peer_max_message,
        });
        let (rd, wr) = tokio::io::split(io);
        let (sink, flusher) = Sink::new(
            wr,
            Codec::new(Limits::with_max_message_size(peer_max_message)),
        );
        // The handshake was one round trip: the first estimate stream windows grow against.
        let streams = Streams::new(sink.clone(), config.max_stream_window, peer_max_message);
        streams.set_rtt(hello_sent.elapsed());
        let flusher = tokio::spawn(flusher);
        let reader = tokio::spawn(read_loop(
            rd,
            buf,
            Codec::new(Limits::with_max_message_size(config.max_message_size)),
            shared.clone(),
            sink.clone(),
            streams.clone(),
        ));
        Ok(Conn {
            shared,
            sink,
            streams,
            runtime: tokio::runtime::Handle::current(),
            tasks: [reader.abort_handle(), flusher.abort_handle()],
        })
    }

    pub(crate) fn is_open(&self) -> bool {
        self.shared.open.load(Ordering::Acquire)
    }

    /// Closes the connection now; waiting calls fail.
    pub(crate) fn close(&self, reason: &str) {
        self.shared.fail_all(reason);
        self.streams.close(reason);
        for t in &self.tasks {
            t.abort();
        }
    }

    pub(crate) async fn call(&self, call: Outgoing, deadline: Instant) -> Answer {
        let Outgoing {
            service,
            operation,
            one_way,
            body,
            upload,
            download,
        } = call;
        if body.len() as u64 > u64::from(self.shared.peer_max_message) {
            return Err(Error::new(
                Kind::TooLarge,
                format!(
                    "request body of {} bytes exceeds the host's limit of {} bytes",
                    body.len(),
                    self.shared.peer_max_message
                ),
            ));
        }
        let call_id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (slot, reply) = oneshot::channel();
        {
            let mut p = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(reason) = &p.closed {
                return Err(Error::new(Kind::Connection, reason.clone()));
            }
            p.calls.insert(call_id, Waiting { slot, download });
        }
        // From here on, a dropped future (the caller gave up) must unregister and tell the host.
        let mut guard = CallGuard {
            conn: self,
            call_id,
            armed: true,
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let request = Frame::Request(Request {
            call_id,
            flags: RequestFlags {
                one_way,
                streamed: upload.is_some(),
            },
            // Round up so a sub-microsecond remainder is not read as "no deadline".
            deadline_us: (remaining.as_micros() as u64).max(1),
            service: service.to_string(),
            operation: operation.to_string(),
            body,
        });
        // Register the upload before the request goes out, so the host's credit and
        // StopSending for it are routed from the start.
        let upload = upload.map(|s| (self.streams.register_outbound(call_id), s));
        if let Err(e) = self.sink.send(&request) {
            guard.armed = false;
            self.shared.take(call_id);
            self.streams.stop_outbound(call_id);
            return Err(match e {
                SendError::Closed => Error::new(Kind::Connection, "connection closed"),
                SendError::Encode(e) => Error::new(Kind::TooLarge, e.to_string()),
            });
        }
        if let Some((handle, stream)) = upload {
            self.runtime
                .spawn(self.streams.clone().pump(handle, stream));
        }
        let outcome = tokio::time::timeout_at(deadline.into(), reply).await;
        guard.armed = false;
        match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::new(Kind::Connection, "connection closed")),
            Err(_) => {
                self.cancel(call_id);
                Err(Error::new(
                    Kind::Timeout,
                    format!("{service}.{operation}: no reply before the deadline"),
                ))
            }
        }
    }

    /// Forgets a call and tells the host it need not answer.
    fn cancel(&self, call_id: u64) {
        self.streams.stop_outbound(call_id);
        let removed = self.shared.take(call_id).is_some();
        if removed {
            // Best effort: on a closed connection there is nothing to cancel.
            let _ = self.sink.send(&Frame::Cancel(Cancel { call_id }));
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close("connection dropped");
    }
}

/// Cancels a call whose future is dropped before its reply arrived.
struct CallGuard<'a> {
    conn: &'a Conn,
    call_id: u64,
    armed: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.cancel(self.call_id);
        }
    }
}

async fn read_loop(
    mut rd: ReadHalf<Box<dyn Io>>,
    mut buf: BytesMut,
    mut codec: Codec,
    shared: Arc<Shared>,
    sink: Arc<Sink>,
    streams: Arc<Streams>,
) {
    let reason = loop {
        match codec.decode(&mut buf) {
            Ok(Some(Frame::Reply(reply))) => {
                let waiting = shared.take(reply.call_id);
                // Nobody waiting: the caller gave up (deadline, dropped future); drop the reply.
                if let Some(waiting) = waiting {
                    let result = if reply.status != WireCode::Ok {
                        // The call is over: an upload still running stops.
                        streams.stop_outbound(reply.call_id);
                        Err(Status::from_body(
                            StatusCode::from_wire(reply.status),
                            reply.body,
                        ))
                    } else if waiting.download {
                        // Opened before the next frame is read: its data follows this reply.
                        Ok(Payload::Stream(streams.open_inbound(reply.call_id)))
                    } else {
                        Ok(Payload::Body(reply.body))
                    };
                    let _ = waiting.slot.send(Ok(result));
                } else if reply.status == WireCode::Ok {
                    // A streamed reply nobody wants any more: tell the host to stop.
                    let _ = sink.send(&Frame::StopSending(StopSending {
                        call_id: reply.call_id,
                    }));
                }
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
            // The host is draining: it answers calls already sent (with ShuttingDown if it did
            // not run them) and then closes; the next call after that reconnects.
            Ok(Some(Frame::GoAway(_) | Frame::Pong(_))) => continue,
            Ok(Some(Frame::Request(_) | Frame::Cancel(_))) => {
                break "protocol error: the host sent a client-only frame".to_string()
            }
            Ok(None) => {}
            Err(e) if !e.is_fatal() => {
                if let keel_wire::WireError::TooLarge {
                    call_id: Some(id), ..
                } = &e
                {
                    if let Some(waiting) = shared.take(*id) {
                        let _ = waiting
                            .slot
                            .send(Err(Error::new(Kind::TooLarge, format!("reply: {e}"))));
                    }
                }
                continue;
            }
            Err(e) => break format!("protocol error from the host: {e}"),
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) => break "connection closed by the host".to_string(),
            Ok(_) => {}
            Err(e) => break format!("connection lost: {e}"),
        }
    };
    shared.fail_all(&reason);
    streams.close(&reason);
}
