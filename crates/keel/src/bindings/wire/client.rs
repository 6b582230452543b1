//! One client connection: a reader task that hands frames to the connection's state
//! ([`WireConn`]) and routes replies to waiting calls; requests are written by the calling
//! thread (see [`Sink`]).

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use keel_wire::{
    CallRejected, Codec, Event, Frame, Hello, HelloReply, Limits, Request, RequestFlags, Side,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf};
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use super::conn::WireConn;
use crate::bindings::{Answer, ClientSettings, Outgoing};
use crate::core::error::{Error, Kind};
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::transport::sink::{SendError, Sink};
use crate::transport::{Endpoint, Io};

/// What a waiting call receives.
type ReplySlot = oneshot::Sender<Answer>;

/// One connection of a client.
#[derive(Debug)]
pub(crate) struct Conn {
    wire: Arc<WireConn<ReplySlot>>,
    /// The runtime the connection's tasks (and upload pumps) run on.
    runtime: tokio::runtime::Handle,
    /// Largest request body the host accepts (from its handshake reply).
    peer_max_message: u32,
    tasks: [AbortHandle; 2],
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

        let (rd, wr) = tokio::io::split(io);
        let (sink, flusher) = Sink::new(
            wr,
            Codec::new(Limits::with_max_message_size(peer_max_message)),
        );
        let wire = WireConn::new(
            Side::Client,
            sink,
            config.max_stream_window,
            peer_max_message,
        );
        // The handshake was one round trip: the first estimate stream windows grow against.
        wire.set_rtt(hello_sent.elapsed());
        let flusher = tokio::spawn(flusher);
        let reader = tokio::spawn(read_loop(
            rd,
            buf,
            Codec::new(Limits::with_max_message_size(config.max_message_size)),
            wire.clone(),
        ));
        Ok(Conn {
            wire,
            runtime: tokio::runtime::Handle::current(),
            peer_max_message,
            tasks: [reader.abort_handle(), flusher.abort_handle()],
        })
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

    /// Sends one call and waits for its answer until `deadline`. Gives the call back unsent if
    /// the connection takes no new calls (the host said GoAway): the caller sends it on a new
    /// connection.
    pub(crate) async fn call_or_return(
        &self,
        call: Outgoing,
        deadline: Instant,
    ) -> Result<Answer, Outgoing> {
        if call.body.len() as u64 > u64::from(self.peer_max_message) {
            return Ok(Err(Error::new(
                Kind::TooLarge,
                format!(
                    "request body of {} bytes exceeds the host's limit of {} bytes",
                    call.body.len(),
                    self.peer_max_message
                ),
            )));
        }
        let (slot, reply) = oneshot::channel();
        // Registers the upload before the request goes out, so the host's credit and
        // StopSending for it are routed from the start.
        let (call_id, upload_handle) =
            match self
                .wire
                .start_call(slot, call.download, call.upload.is_some())
            {
                Ok(started) => started,
                Err(CallRejected::GoingAway) => return Err(call),
                Err(CallRejected::Closed(reason)) => {
                    return Ok(Err(Error::new(Kind::Connection, reason)))
                }
                Err(other) => return Ok(Err(Error::new(Kind::Connection, other.to_string()))),
            };
        let Outgoing {
            service,
            operation,
            one_way,
            body,
            upload,
            ..
        } = call;
        // From here on, a dropped future (the caller gave up) must unregister and tell the host.
        let mut guard = CallGuard {
            wire: &self.wire,
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
        if let Err(e) = self.wire.sink().send(&request) {
            guard.armed = false;
            self.wire.forget_call(call_id);
            return Ok(Err(match e {
                SendError::Closed => Error::new(Kind::Connection, "connection closed"),
                SendError::Encode(e) => Error::new(Kind::TooLarge, e.to_string()),
            }));
        }
        if let (Some(handle), Some(stream)) = (upload_handle, upload) {
            self.runtime.spawn(self.wire.clone().pump(handle, stream));
        }
        let outcome = tokio::time::timeout_at(deadline.into(), reply).await;
        guard.armed = false;
        Ok(match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::new(Kind::Connection, "connection closed")),
            Err(_) => {
                self.wire.cancel_call(call_id);
                Err(Error::new(
                    Kind::Timeout,
                    format!("{service}.{operation}: no reply before the deadline"),
                ))
            }
        })
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
    for (_, slot) in wire.close(reason) {
        let _ = slot.send(Err(Error::new(Kind::Connection, reason.to_string())));
    }
}

async fn read_loop(
    mut rd: ReadHalf<Box<dyn Io>>,
    mut buf: BytesMut,
    mut codec: Codec,
    wire: Arc<WireConn<ReplySlot>>,
) {
    let reason = loop {
        match codec.decode(&mut buf) {
            Ok(Some(frame)) => match wire.handle(frame) {
                Ok(Some(Event::Reply {
                    reply,
                    slot,
                    download,
                })) => {
                    let result = if reply.status != keel_wire::StatusCode::Ok {
                        let code = StatusCode::from_wire(reply.status);
                        Err(Status::from_body(code, reply.body))
                    } else if download {
                        // Before the next frame is read: its data follows this reply.
                        Ok(Payload::Stream(wire.inbound_stream(reply.call_id)))
                    } else {
                        Ok(Payload::Body(reply.body))
                    };
                    // Nobody waiting: the caller gave up as the reply arrived; drop it.
                    let _ = slot.send(Ok(result));
                    continue;
                }
                // GoAway: the host answers calls already sent (with ShuttingDown if it did not
                // run them) and then closes; new calls go to a new connection.
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
                        let _ = slot.send(Err(Error::new(Kind::TooLarge, format!("reply: {e}"))));
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
    fail_all(&wire, &reason);
}
