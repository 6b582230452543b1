//! Sessions: one bidirectional stream of messages that carries calls both ways, in order
//! (WCF's sessions and duplex contracts). A session is a call of the reserved operation
//! [`SESSION_OPERATION`] whose request and response streams are streams of [`Frame`]s; so it
//! runs wherever a bidirectional stream runs (keel-wire, HTTP/2).
//!
//! Each side is a [`Peer`]: calls it makes go out as `Call` frames and their answers come back
//! as `Reply` frames (matched by id); calls the other side makes arrive as `Call` frames and
//! are run one at a time, in order, by whoever holds the peer's queue of them (the host's
//! dispatch for the service's operations, the client's callback service for callbacks). A
//! [`SessionClient`] is a [`ClientTransport`] over a peer, so a session's calls are made
//! with a generated client over an ordinary `Channel`.
//!
//! The frames are MessagePack maps (serde), inside the stream's envelope framing:
//!
//! | field | in | meaning |
//! |---|---|---|
//! | `kind` | all | 0 = a call, 1 = a one-way call (no reply), 2 = a reply |
//! | `id` | all | a call's id (unique among the sender's calls in flight); a reply's call |
//! | `op` | calls | the operation's name |
//! | `md` | calls, replies | metadata, as keel-wire's metadata block |
//! | `dl` | calls | the deadline, microseconds from when the call was sent (0: none) |
//! | `st` | replies | the status (keel-wire's status byte; 0 = ok) |
//! | `body` | calls, replies | the arguments; the reply; or the status message, or a fault |
//! | `det` | replies | the status details |

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::{Answer, Attempt, BoxFuture, ClientTransport, ConnCounts, Outgoing, Replied};
use crate::core::error::{Error, Kind};
use crate::core::messages::{MessageSender, MessageStream};
use crate::core::metadata::Metadata;
use crate::core::service::{Outcome, Payload};
use crate::core::status::{Status, StatusCode};

pub(crate) use crate::core::service::SESSION_OPERATION;

/// Calls from the other side that may wait to run, beyond which the session's stream is not
/// read (the other side's sends wait for its window).
pub(crate) const CALL_QUEUE: usize = 64;

/// A call.
pub(crate) const CALL: u8 = 0;
/// A one-way call.
pub(crate) const ONE_WAY: u8 = 1;
/// A reply.
pub(crate) const REPLY: u8 = 2;

/// One frame of a session (see the module docs).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Frame {
    pub(crate) kind: u8,
    pub(crate) id: u64,
    #[serde(default, rename = "op", skip_serializing_if = "String::is_empty")]
    pub(crate) operation: String,
    #[serde(
        default,
        rename = "md",
        with = "bin",
        skip_serializing_if = "Bytes::is_empty"
    )]
    pub(crate) metadata: Bytes,
    #[serde(default, rename = "dl", skip_serializing_if = "is_zero")]
    pub(crate) deadline_us: u64,
    #[serde(default, rename = "st", skip_serializing_if = "is_zero_u8")]
    pub(crate) status: u8,
    #[serde(default, with = "bin", skip_serializing_if = "Bytes::is_empty")]
    pub(crate) body: Bytes,
    #[serde(
        default,
        rename = "det",
        with = "bin",
        skip_serializing_if = "Bytes::is_empty"
    )]
    pub(crate) details: Bytes,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u8(v: &u8) -> bool {
    *v == 0
}

impl Frame {
    /// The reply to call `id` with `outcome` and its metadata.
    pub(crate) fn reply(id: u64, outcome: Outcome, metadata: &Metadata) -> Frame {
        let metadata = metadata.to_wire().unwrap_or_default();
        let outcome = match outcome {
            Ok(Payload::Body(body)) => Ok(body),
            Ok(Payload::Stream(_)) => Err(Status::new(
                StatusCode::Internal,
                "a session's calls do not stream",
            )),
            Err(status) => Err(status),
        };
        match outcome {
            Ok(body) => Frame {
                kind: REPLY,
                id,
                metadata,
                body,
                ..Frame::default()
            },
            Err(status) => {
                let code = status.code().to_wire() as u8;
                let (body, details, _) = status.into_wire_parts();
                Frame {
                    kind: REPLY,
                    id,
                    metadata,
                    status: code,
                    body,
                    details,
                    ..Frame::default()
                }
            }
        }
    }

    /// What a reply frame says: the body, or the status.
    fn into_answer(self) -> Result<Replied, Status> {
        let metadata = Metadata::from_wire_block(&self.metadata);
        if self.status == 0 {
            return Ok(Replied {
                payload: Payload::Body(self.body),
                metadata,
                compression: None,
            });
        }
        let code =
            keel_wire::StatusCode::from_u8(self.status).unwrap_or(keel_wire::StatusCode::Unknown);
        Err(Status::from_wire_parts(
            StatusCode::from_wire(code),
            self.body,
            self.details,
            metadata,
        ))
    }
}

/// Bytes as MessagePack `bin` (and, from JSON, an array of numbers).
mod bin {
    use bytes::Bytes;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(b)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes::copy_from_slice(v))
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes::from(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Bytes, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(Bytes::from(v))
            }
        }
        d.deserialize_bytes(Visitor)
    }
}

/// One side of a session: its outgoing frames, and its calls waiting for their replies.
#[derive(Debug)]
pub(crate) struct Peer {
    /// `None` once this side closed the session.
    out: Mutex<Option<MessageSender<Frame>>>,
    /// Replies awaited, by call id.
    pending: Mutex<HashMap<u64, oneshot::Sender<Frame>>>,
    next_id: AtomicU64,
    /// The session ended (either side closed it, or its stream broke).
    ended: AtomicBool,
}

impl Peer {
    /// A peer sending into `out`.
    pub(crate) fn new(out: MessageSender<Frame>) -> Arc<Peer> {
        Arc::new(Peer {
            out: Mutex::new(Some(out)),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            ended: AtomicBool::new(false),
        })
    }

    /// Sends `frame`; fails once the session ended.
    pub(crate) async fn send(&self, frame: Frame) -> Result<(), Error> {
        let out = self.out.lock().clone();
        match out {
            Some(out) => out.send(frame).await.map_err(|_| ended()),
            None => Err(ended()),
        }
    }

    /// Ends the session from this side: the other side's stream ends once the frames already
    /// handed over are sent.
    pub(crate) fn close(&self) {
        self.out.lock().take();
    }

    /// Reads the other side's frames until its stream ends: replies go to the calls awaiting
    /// them, calls into `calls` (in order; the stream is not read while `calls` is full).
    /// Then the session has ended: calls awaiting replies fail.
    pub(crate) async fn read(
        self: Arc<Self>,
        mut inbound: MessageStream<Frame>,
        calls: mpsc::Sender<Frame>,
    ) {
        while let Some(frame) = inbound.next().await {
            let Ok(frame) = frame else { break };
            match frame.kind {
                REPLY => {
                    if let Some(waiter) = self.pending.lock().remove(&frame.id) {
                        let _ = waiter.send(frame);
                    }
                }
                CALL | ONE_WAY => {
                    // Waits while the queue is full: the stream is not read meanwhile.
                    let queued = calls.send(frame).await;
                    if queued.is_err() {
                        break;
                    }
                }
                // A kind this version does not know: skipped, as unknown frames are.
                _ => {}
            }
        }
        self.ended.store(true, Ordering::SeqCst);
        self.close();
        // Waiters see their sender dropped: the session ended.
        self.pending.lock().clear();
    }

    /// Whether the session ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst) || self.out.lock().is_none()
    }
}

fn ended() -> Error {
    Error::new(Kind::Connection, "the session ended")
}

/// A [`ClientTransport`] whose calls go over a session (see the module docs).
pub(crate) struct SessionClient {
    peer: Arc<Peer>,
    /// What the session's stream needs alive (the client's channel it was opened over).
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for SessionClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionClient")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl SessionClient {
    /// Calls over `peer`, keeping `keep` alive as long as they can be made.
    pub(crate) fn new(
        peer: Arc<Peer>,
        keep: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> SessionClient {
        SessionClient { peer, _keep: keep }
    }

    async fn call(&self, call: &mut Outgoing, deadline: Instant) -> Answer {
        if call.upload.is_some() || call.download {
            return Err(Error::new(
                Kind::Config,
                format!(
                    "{}.{} streams: a session carries calls without streams",
                    call.service, call.operation
                ),
            ));
        }
        if call.compression.is_some() {
            // Sessions carry bodies as they are (the stream is not compressed either).
            return Err(Error::new(
                Kind::Config,
                "a session's calls are not compressed: turn compression off for its channel",
            ));
        }
        let id = self.peer.next_id.fetch_add(1, Ordering::Relaxed);
        let remaining = deadline.saturating_duration_since(crate::runtime::clock::now());
        let frame = Frame {
            kind: if call.one_way { ONE_WAY } else { CALL },
            id,
            operation: call.operation.to_string(),
            metadata: call.metadata.to_wire().unwrap_or_default(),
            deadline_us: u64::try_from(remaining.as_micros())
                .unwrap_or(u64::MAX)
                .max(1),
            body: call.body.clone(),
            ..Frame::default()
        };
        let waiter = (!call.one_way).then(|| {
            let (tx, rx) = oneshot::channel();
            self.peer.pending.lock().insert(id, tx);
            rx
        });
        if let Err(e) = self.peer.send(frame).await {
            self.peer.pending.lock().remove(&id);
            return Err(e);
        }
        let Some(waiter) = waiter else {
            // One-way: handed to the session, in order.
            return Ok(Ok(Replied {
                payload: Payload::Body(Bytes::new()),
                metadata: Metadata::new(),
                compression: None,
            }));
        };
        let at = crate::runtime::clock::to_tokio(deadline);
        match tokio::time::timeout_at(at, waiter).await {
            Ok(Ok(reply)) => Ok(reply.into_answer()),
            Ok(Err(_)) => Err(ended()),
            Err(_) => {
                self.peer.pending.lock().remove(&id);
                Err(Error::new(
                    Kind::Timeout,
                    format!("{}: no reply before the deadline", call.operation),
                ))
            }
        }
    }
}

impl ClientTransport for SessionClient {
    fn attempt<'a>(&'a self, call: &'a mut Outgoing, deadline: Instant) -> BoxFuture<'a, Attempt> {
        Box::pin(async move { Attempt::Answered(self.call(call, deadline).await) })
    }

    fn open(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            if self.peer.has_ended() {
                Err(ended())
            } else {
                Ok(())
            }
        })
    }

    fn close(&self) {
        self.peer.close();
    }

    fn is_connected(&self) -> bool {
        !self.peer.has_ended()
    }

    fn counts(&self) -> ConnCounts {
        let open = usize::from(!self.peer.has_ended());
        ConnCounts {
            opened: 1,
            closed: 1 - open as u64,
            open,
            sent_early: 0,
        }
    }
}

/// A call's deadline from its frame: `dl` microseconds from `received`.
pub(crate) fn deadline_of(frame: &Frame) -> Option<Duration> {
    (frame.deadline_us > 0).then(|| Duration::from_micros(frame.deadline_us))
}
