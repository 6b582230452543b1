//! Sessions on the host's side (see `bindings/session` for what a session is): the session
//! call opens one instance of the service (or shares the host's), a callback channel back to
//! the client, and a task that runs the session's calls one at a time, in order, through
//! dispatch (so interceptors, the throttle, deadlines, metrics and tracing cover them as they
//! cover any call).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::bindings::session::{self, Frame, Peer, SessionClient, CALL, CALL_QUEUE};
use crate::client::Channel;
use crate::core::format::{Format, Framing};
use crate::core::messages::MessageStream;
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::dispatch::{
    dispatch, HostAnswer, HostConn, Incoming, ReplyTo, SessionCall, SessionOpener,
};

/// Call ids of calls made in sessions, apart from keel-wire's (which clients number from 1).
static NEXT_CALL_ID: AtomicU64 = AtomicU64::new(1 << 63);

/// The host's [`SessionOpener`].
#[derive(Debug)]
pub(crate) struct Sessions;

impl SessionOpener for Sessions {
    fn open(&self, conn: &Arc<HostConn>, served: &crate::dispatch::Served, req: Incoming<'_>) {
        let Incoming {
            call_id,
            format,
            metadata,
            stream,
            reply_to,
            ..
        } = req;
        if let Some(busy) = conn.refuse_reply_stream() {
            return conn.reply_to(reply_to, call_id, Err(busy));
        }
        if format != Format::MsgPack {
            let status = Status::new(
                StatusCode::BadRequest,
                "sessions are for keel's clients: open one in MessagePack",
            );
            return conn.reply_to(reply_to, call_id, Err(status));
        }
        let dispatcher = &conn.dispatcher;
        let desc = served.service.descriptor();
        let (out_tx, out) = MessageStream::<Frame>::channel(CALL_QUEUE);
        let peer = Peer::new(out_tx);
        // The callback channel: the handlers' `Context::callback`.
        let callback = Channel::over_session(
            format!("session:{}", conn.info.peer),
            Box::new(SessionClient::new(peer.clone(), None)),
        );
        let handle: Arc<dyn std::any::Any + Send + Sync> = Arc::new(callback);
        let ctx = conn.info.context_outside_a_call(
            desc.name,
            session::SESSION_OPERATION,
            metadata,
            dispatcher.limits.max_message_size,
            Some(handle.clone()),
        );
        let instance = match served.service.open_session(&ctx) {
            Ok(instance) => instance,
            Err(status) => return conn.reply_to(reply_to, call_id, Err(status)),
        };
        let max = dispatcher.limits.max_message_size as usize;
        let inbound = MessageStream::<Frame>::decode(
            stream,
            format,
            Framing::Envelope,
            max,
            None,
            None,
            None,
        );
        // Counted in a drain as a stream is, and ended at its close timeout.
        let reply =
            dispatcher.lease_stream(conn, out.encode(format, Framing::Envelope, None, None));
        conn.reply_to(reply_to, call_id, Ok(Payload::Stream(reply)));
        let (calls_tx, calls) = mpsc::channel(CALL_QUEUE);
        tokio::spawn(peer.clone().read(inbound, calls_tx));
        let session = SessionCall { instance, handle };
        tokio::spawn(run_calls(conn.clone(), desc.name, session, calls, peer));
    }
}

/// Runs the session's calls one at a time, in order, and sends their replies.
async fn run_calls(
    conn: Arc<HostConn>,
    service: &'static str,
    session: SessionCall,
    mut calls: mpsc::Receiver<Frame>,
    peer: Arc<Peer>,
) {
    while let Some(frame) = calls.recv().await {
        let answer = match conn.dispatcher.admit() {
            Some(arrival) => {
                let (tx, rx) = oneshot::channel();
                let incoming = Incoming {
                    call_id: NEXT_CALL_ID.fetch_add(1, Ordering::Relaxed),
                    // Answered when it ran, even one-way: the next call waits for it.
                    one_way: false,
                    deadline: session::deadline_of(&frame),
                    service,
                    operation: &frame.operation,
                    metadata: Metadata::from_wire_block(&frame.metadata),
                    compression: None,
                    reply_codec: None,
                    format: Format::MsgPack,
                    body: &frame.body,
                    stream: ByteStream::empty(),
                    arrival,
                    reply_to: ReplyTo::waiter(tx),
                    reply_framing: Framing::Envelope,
                    request_framing: None,
                    session: Some(session.clone()),
                };
                let received = crate::runtime::clock::now();
                dispatch(&conn, incoming, received, &mut received.clone(), None);
                rx.await.ok()
            }
            None => None,
        };
        if frame.kind != CALL {
            continue;
        }
        let (outcome, metadata) = match answer {
            Some(HostAnswer {
                outcome, metadata, ..
            }) => (outcome, metadata),
            None => (
                Err(Status::new(
                    StatusCode::ShuttingDown,
                    "the host is going away and did not process the call",
                )),
                Metadata::new(),
            ),
        };
        if peer
            .send(Frame::reply(frame.id, outcome, &metadata))
            .await
            .is_err()
        {
            break;
        }
    }
    // The client closed the session (or it broke): the session's instance goes with it.
    peer.close();
    drop(session);
}
