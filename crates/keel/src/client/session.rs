//! Sessions on the client's side (see `bindings/session` for what a session is): opening one
//! over a channel, a channel whose calls go over it, and the task that runs the host's
//! callbacks on the client's callback service, one at a time, in order.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::builder::ChannelBuilder;
use super::call::CallOptions;
use super::Channel;
use crate::bindings::session::{Frame, Peer, SessionClient, CALL, CALL_QUEUE, SESSION_OPERATION};
use crate::bindings::{ClientTransport, Outgoing};
use crate::core::context::{CallFacts, Context};
use crate::core::error::{Error, Kind};
use crate::core::format::{Format, Framing};
use crate::core::messages::MessageStream;
use crate::core::metadata::Metadata;
use crate::core::service::{Invocation, Outcome, Payload, Service, ServiceDescriptor};
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;

impl Channel {
    /// A channel whose calls go over a session (`transport`), named `url`.
    pub(crate) fn over_session(url: String, transport: Box<dyn ClientTransport>) -> Channel {
        ChannelBuilder::new(url, None).build_over(transport, "session")
    }

    /// Opens a session on `desc`'s service over this channel, with `callback` serving the
    /// host's callbacks; returns a channel whose calls go over the session, in order. What
    /// generated clients' `open_session` calls.
    pub(crate) async fn open_session(
        &self,
        options: &CallOptions,
        desc: &'static ServiceDescriptor,
        callback: Option<Arc<dyn Service>>,
    ) -> Result<Channel, Error> {
        let (out_tx, out) = MessageStream::<Frame>::channel(CALL_QUEUE);
        let call = Outgoing {
            service: desc.name,
            operation: SESSION_OPERATION,
            one_way: false,
            metadata: Metadata::new(),
            // No arguments: an empty MessagePack map.
            body: bytes::Bytes::from_static(&[0x80]),
            compression: None,
            accepts_compressed: false,
            upload: Some(out.encode(Format::MsgPack, Framing::Envelope, None, None)),
            download: true,
            idempotent: false,
            fresh: false,
            grpc: None,
        };
        let replied = match self.call(call, options).await? {
            Ok(replied) => replied,
            Err(status) => return Err(Error::from_status(status)),
        };
        let bytes = match replied.payload {
            Payload::Stream(s) => s,
            Payload::Body(_) => {
                return Err(Error::new(
                    Kind::Protocol,
                    "the host answered a session without a stream",
                ))
            }
        };
        let (_, max) = self.stream_limits(options);
        // The session lasts until it is closed: the call's deadline covered opening it.
        let inbound = MessageStream::<Frame>::decode(
            bytes,
            Format::MsgPack,
            Framing::Envelope,
            max,
            None,
            None,
            None,
        );
        let peer = Peer::new(out_tx);
        let (calls_tx, calls) = mpsc::channel(CALL_QUEUE);
        tokio::spawn(peer.clone().read(inbound, calls_tx));
        tokio::spawn(run_callbacks(peer.clone(), calls, callback));
        Ok(Channel::over_session(
            format!("{}#session", self.inner.url),
            // The channel it was opened over carries the session's stream: kept with it.
            Box::new(SessionClient::new(peer, Some(Box::new(self.clone())))),
        ))
    }
}

impl Context {
    /// The client of the callback contract of the session this call runs in (WCF's
    /// `GetCallbackChannel`): `ctx.callback::<CalculatorDuplexCallbackClient>()`. `None` when
    /// the call was not made in a session. Calls on it reach the client that opened the
    /// session, in order, for as long as the session lives, including after this call
    /// returned.
    pub fn callback<C: From<Channel>>(&self) -> Option<C> {
        let channel = self.session()?.downcast_ref::<Channel>()?;
        Some(C::from(channel.clone()))
    }
}

/// Runs the host's callbacks on `service`, one at a time, in order, and sends their replies.
async fn run_callbacks(
    peer: Arc<Peer>,
    mut calls: mpsc::Receiver<Frame>,
    service: Option<Arc<dyn Service>>,
) {
    while let Some(frame) = calls.recv().await {
        let metadata = Metadata::from_wire_block(&frame.metadata);
        let outcome = match &service {
            Some(service) => run(service, &frame, metadata).await,
            None => Err(Status::new(
                StatusCode::Unimplemented,
                "this session's client serves no callbacks",
            )),
        };
        if frame.kind != CALL {
            continue;
        }
        if peer
            .send(Frame::reply(frame.id, outcome, &Metadata::new()))
            .await
            .is_err()
        {
            break;
        }
    }
}

/// Runs one callback: a plain `fn` on a blocking thread, an `async fn` as a task of its own
/// (either way a panic is the call's `HandlerPanicked`, not the session's end).
async fn run(service: &Arc<dyn Service>, frame: &Frame, metadata: Metadata) -> Outcome {
    let desc = service.descriptor();
    let Some(op) = desc.operation_index(&frame.operation) else {
        return Err(Status::new(
            StatusCode::UnknownOperation,
            format!(
                "callback contract `{}` has no operation `{}`",
                desc.name, frame.operation
            ),
        ));
    };
    let ctx = Context::new(CallFacts {
        service: desc.name,
        operation: desc.operations[op].name,
        binding: "session",
        peer_addr: None,
        peer_certificates: None,
        deadline: crate::bindings::session::deadline_of(frame)
            .map(|d| crate::runtime::clock::now() + d),
        metadata,
        reply_codec: None,
        span: tracing::Span::none(),
        reply_framing: Framing::Envelope,
        request_framing: None,
        max_message_size: keel_wire::DEFAULT_MAX_MESSAGE_SIZE,
        session: None,
        stream_counters: None,
    });
    let invocation = service.invoke(op, Format::MsgPack, &frame.body, ByteStream::empty(), &ctx)?;
    let panicked = |_| {
        Err(Status::new(
            StatusCode::HandlerPanicked,
            "the callback panicked",
        ))
    };
    match invocation {
        Invocation::Blocking(f) => tokio::task::spawn_blocking(f)
            .await
            .unwrap_or_else(panicked),
        Invocation::Async(f) => tokio::spawn(f).await.unwrap_or_else(panicked),
    }
}
