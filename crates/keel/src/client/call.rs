//! The client half of generated code: encode arguments, call, decode the reply or the fault.

use std::any::Any;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::either::Either;

use super::{Channel, ReplyMetadata};
use crate::bindings::{Answer, GrpcTarget, Outgoing, Replied};
use crate::core::codec;
use crate::core::context::Context;
use crate::core::error::{Error, Kind};
use crate::core::format::Format;
use crate::core::messages::framing::Framing;
use crate::core::messages::{FaultDecoder, MessageStream};
use crate::core::metadata::Metadata;
use crate::core::metrics as m;
use crate::core::service::{Payload, ServiceDescriptor};
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::runtime::clock;

/// The format `ch`'s calls of operation `op` of `desc` encode their messages in: MessagePack,
/// or protobuf on a gRPC channel (GRPC.md, "Types"). An operation gRPC cannot call fails here,
/// `Unimplemented` with the reason, before anything is sent.
#[inline]
fn format(ch: &Channel, desc: &'static ServiceDescriptor, op: usize) -> Result<Format, Error> {
    if !ch.inner.grpc {
        return Ok(Format::MsgPack);
    }
    desc.grpc_codec(op)
        .map(Format::Protobuf)
        .map_err(|why| Error::from_status(Status::new(StatusCode::Unimplemented, why)))
}

/// Operation `op` of `desc` called on `ch` with `args` (encoded in `format`) and `upload`, as
/// the channel sends it.
fn outgoing<A: Serialize>(
    (ch, desc, op): (&Channel, &'static ServiceDescriptor, usize),
    format: Format,
    args: &A,
    upload: Option<ByteStream>,
) -> Result<Outgoing, Error> {
    let info = &desc.operations[op];
    let body = codec::encode(format, args).map_err(|e| {
        Error::new(
            Kind::Codec,
            format!(
                "cannot encode arguments of {}.{}: {e}",
                desc.name, info.name
            ),
        )
    })?;
    Ok(Outgoing {
        service: desc.name,
        operation: info.name,
        one_way: info.one_way,
        // The channel adds its defaults and the call's options.
        metadata: Metadata::new(),
        body,
        // The channel compresses if its settings say so.
        compression: None,
        accepts_compressed: false,
        upload,
        download: info.stream_response,
        idempotent: info.idempotent,
        fresh: false,
        grpc: ch.inner.grpc.then(|| GrpcTarget {
            desc,
            op,
            compress_messages: ch
                .inner
                .config
                .compression
                .map(|codec| (codec, ch.inner.config.compress_above)),
        }),
    })
}

/// The whole body of a reply the operation does not stream.
#[inline]
fn body(desc: &ServiceDescriptor, op: usize, replied: Replied) -> Result<bytes::Bytes, Error> {
    replied.payload.into_body().ok_or_else(|| {
        Error::new(
            Kind::Protocol,
            format!(
                "{}.{}: the host streamed a reply the contract does not stream",
                desc.name, desc.operations[op].name
            ),
        )
    })
}

/// The stream of a reply the operation streams.
fn stream(replied: Replied) -> ByteStream {
    match replied.payload {
        Payload::Stream(s) => s,
        Payload::Body(b) => ByteStream::from_bytes(b),
    }
}

fn decode_reply<T: DeserializeOwned>(
    (desc, op): (&ServiceDescriptor, usize),
    format: Format,
    body: &[u8],
) -> Result<T, Error> {
    codec::decode(format, body).map_err(|e| {
        let name = desc.operations[op].name;
        Error::new(
            Kind::Codec,
            format!("cannot decode the reply of {}.{name}: {e}", desc.name),
        )
    })
}

/// The caller's error for a host's answer other than Ok. A fault is decoded as the contract's
/// typed fault `E`.
fn fault_or_status<E>(
    (desc, op): (&ServiceDescriptor, usize),
    format: Format,
    status: Status,
) -> Error
where
    E: DeserializeOwned + Any + Send + Sync + Debug,
{
    if status.code() != StatusCode::Fault {
        return Error::from_status(status);
    }
    match decode_reply::<E>((desc, op), format, status.details()) {
        Ok(fault) => Error::from_fault(fault).with_metadata(status.metadata().clone()),
        Err(undecodable) => undecodable,
    }
}

/// Calls a request-reply operation.
///
/// Not an `async fn`: the channel's future is returned inside `Decoded`, which decodes the
/// answer as it arrives, one level of future fewer on every call (see `Channel::call`).
/// Arguments are encoded here, where the generated client's own future calls it.
#[inline(always)]
pub fn call<'a, A: Serialize, T: DeserializeOwned>(
    ch: &'a Channel,
    opts: &'a CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
    upload: Option<ByteStream>,
) -> impl Future<Output = Result<T, Error>> + Send + 'a {
    decoded(ch, opts, (desc, op), args, upload, |_, status| {
        Error::from_status(status)
    })
}

/// Calls an operation that returns a [`ByteStream`].
pub async fn call_stream<A: Serialize>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
    upload: Option<ByteStream>,
) -> Result<ByteStream, Error> {
    let format = format(ch, desc, op)?;
    match ch
        .call(outgoing((ch, desc, op), format, args, upload)?, opts)
        .await?
    {
        Ok(payload) => Ok(stream(payload)),
        Err(status) => Err(Error::from_status(status)),
    }
}

/// Calls an operation that returns `Result<ByteStream, E>`.
pub async fn call_stream_fallible<A, E>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
    upload: Option<ByteStream>,
) -> Result<ByteStream, Error>
where
    A: Serialize,
    E: DeserializeOwned + Any + Send + Sync + Debug,
{
    let format = format(ch, desc, op)?;
    match ch
        .call(outgoing((ch, desc, op), format, args, upload)?, opts)
        .await?
    {
        Ok(payload) => Ok(stream(payload)),
        Err(status) => Err(fault_or_status::<E>((desc, op), format, status)),
    }
}

/// Calls an operation that returns `Result<T, E>`: a fault arrives as the error's [`Error::fault`].
///
/// Not an `async fn`, as [`call`].
#[inline(always)]
pub fn call_fallible<'a, A, T, E>(
    ch: &'a Channel,
    opts: &'a CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
    upload: Option<ByteStream>,
) -> impl Future<Output = Result<T, Error>> + Send + 'a
where
    A: Serialize,
    T: DeserializeOwned,
    E: DeserializeOwned + Any + Send + Sync + Debug,
{
    decoded(ch, opts, (desc, op), args, upload, move |format, status| {
        fault_or_status::<E>((desc, op), format, status)
    })
}

/// The future of a call whose reply body decodes as `T`, and whose answer other than Ok is
/// the caller's error by `not_ok`: ready at once if the call cannot be sent (its operation's
/// format, or its arguments, do not encode), else the channel's call decoded as it ends.
#[inline(always)]
fn decoded<'a, A: Serialize, T: DeserializeOwned>(
    ch: &'a Channel,
    opts: &'a CallOptions,
    (desc, op): (&'static ServiceDescriptor, usize),
    args: &A,
    upload: Option<ByteStream>,
    not_ok: impl FnOnce(Format, Status) -> Error + Send + 'a,
) -> impl Future<Output = Result<T, Error>> + Send + 'a {
    let prepared = format(ch, desc, op).and_then(|format| {
        let call = outgoing((ch, desc, op), format, args, upload)?;
        Ok((format, call))
    });
    // A call that cannot be sent answers its error at once; its format is then never read.
    let (format, answer) = match prepared {
        Err(e) => (Format::MsgPack, Either::Left(std::future::ready(Err(e)))),
        Ok((format, call)) => (format, Either::Right(ch.call(call, opts))),
    };
    Decoded {
        answer,
        decode: Some(move |answer: Answer| match answer? {
            Ok(payload) => decode_reply((desc, op), format, &body(desc, op, payload)?),
            Err(status) => Err(not_ok(format, status)),
        }),
    }
}

pin_project_lite::pin_project! {
    /// A call's future `answer`, and what turns its answer into the caller's result: as
    /// `futures`' `map`, written here rather than as an `async` block around the answer, which
    /// would hold the channel's future in a state of its own (moved in whole, ~900 bytes).
    struct Decoded<F, D> {
        #[pin]
        answer: F,
        decode: Option<D>,
    }
}

impl<F, D, T> Future for Decoded<F, D>
where
    F: Future<Output = Answer>,
    D: FnOnce(Answer) -> Result<T, Error>,
{
    type Output = Result<T, Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = std::task::ready!(this.answer.poll(cx));
        let decode = this
            .decode
            .take()
            .expect("a call's future polled after it ended");
        Poll::Ready(decode(answer))
    }
}

/// Calls an operation that returns a [`MessageStream`]: the stream's messages decode as `T`,
/// and the call's deadline covers the whole stream.
pub async fn call_messages<A, T>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
    upload: Option<ByteStream>,
) -> Result<MessageStream<T>, Error>
where
    A: Serialize,
    T: DeserializeOwned,
{
    let target = (ch, opts, desc, op);
    call_messages_with(target, args, upload, None, Error::from_status).await
}

/// Calls an operation that returns `Result<MessageStream<T>, E>`: a fault before the stream
/// or at its end arrives as the error's [`Error::fault`].
pub async fn call_messages_fallible<A, T, E>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
    upload: Option<ByteStream>,
) -> Result<MessageStream<T>, Error>
where
    A: Serialize,
    T: DeserializeOwned,
    E: DeserializeOwned + Any + Send + Sync + Debug,
{
    let target = (ch, opts, desc, op);
    let refused = |status| match format(ch, desc, op) {
        Ok(format) => fault_or_status::<E>((desc, op), format, status),
        Err(e) => e,
    };
    call_messages_with(target, args, upload, Some(decode_fault::<E>), refused).await
}

/// The two above: `fault` decodes a fault that ends the stream, `refused` makes the caller's
/// error of a status instead of the stream.
async fn call_messages_with<A, T>(
    (ch, opts, desc, op): (&Channel, &CallOptions, &'static ServiceDescriptor, usize),
    args: &A,
    upload: Option<ByteStream>,
    fault: Option<FaultDecoder>,
    refused: impl FnOnce(Status) -> Error,
) -> Result<MessageStream<T>, Error>
where
    A: Serialize,
    T: DeserializeOwned,
{
    let format = format(ch, desc, op)?;
    let (budget, max) = ch.stream_limits(opts);
    let deadline = clock::now() + budget;
    let call = outgoing((ch, desc, op), format, args, upload)?;
    let replied = match ch.call(call, opts).await? {
        Ok(replied) => replied,
        Err(status) => return Err(refused(status)),
    };
    Ok(MessageStream::decode(
        stream(replied),
        format,
        Framing::Envelope,
        max,
        Some(deadline),
        fault,
        Some(counter(ch, desc, op, m::CLIENT_MESSAGES_RECEIVED)),
    ))
}

/// The counter `name` of operation `op` on `ch` (registered per stream: one lookup each).
fn counter(
    ch: &Channel,
    desc: &'static ServiceDescriptor,
    op: usize,
    name: &'static str,
) -> metrics::Counter {
    let labels = [
        ("service", desc.name),
        ("operation", desc.operations[op].name),
        ("binding", ch.inner.metrics.binding()),
    ];
    metrics::counter!(name, &labels)
}

/// A stream's fault end, decoded as the contract's fault type `E`.
fn decode_fault<E>(format: Format, details: &[u8]) -> Error
where
    E: DeserializeOwned + Any + Send + Sync + Debug,
{
    match codec::decode::<E>(format, details) {
        Ok(fault) => Error::from_fault(fault),
        Err(e) => Error::new(
            Kind::Codec,
            format!("cannot decode the fault that ended a stream: {e}"),
        ),
    }
}

/// The request stream of operation `op`, which takes a [`MessageStream`]: its messages in
/// the channel's format (MessagePack, or protobuf on gRPC), framed for the wire.
pub fn upload_messages<T: Serialize + Send + 'static>(
    ch: &Channel,
    desc: &'static ServiceDescriptor,
    op: usize,
    messages: MessageStream<T>,
) -> ByteStream {
    let counted = counter(ch, desc, op, m::CLIENT_MESSAGES_SENT);
    // An operation gRPC cannot call fails when it is called, before this stream is read.
    let format = format(ch, desc, op).unwrap_or(Format::MsgPack);
    messages.encode(format, Framing::Envelope, None, Some(counted))
}

/// Calls a one-way operation: returns once the host acknowledged receipt.
pub async fn call_one_way<A: Serialize>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
    upload: Option<ByteStream>,
) -> Result<(), Error> {
    let format = format(ch, desc, op)?;
    match ch
        .call(outgoing((ch, desc, op), format, args, upload)?, opts)
        .await?
    {
        Ok(_) => Ok(()),
        Err(status) => Err(Error::from_status(status)),
    }
}

/// Per-call options carried by a generated client (see its `with_deadline`, `with_metadata`,
/// `with_reply_metadata`, `with_context` and `with_hedging`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CallOptions {
    pub(crate) deadline: Option<Duration>,
    pub(crate) metadata: Metadata,
    pub(crate) reply: Option<ReplyMetadata>,
    /// The incoming call the calls are made for (see [`CallOptions::with_context`]).
    pub(crate) context: Option<Context>,
    /// Hedging, over the channel's (see [`CallOptions::with_hedging`]).
    pub(crate) hedging: Option<super::HedgingPolicy>,
}

impl CallOptions {
    /// These options with a per-call deadline.
    pub fn with_deadline(mut self, deadline: Duration) -> CallOptions {
        self.deadline = Some(deadline);
        self
    }

    /// These options with request metadata (merged over the channel's defaults).
    pub fn with_metadata(mut self, metadata: Metadata) -> CallOptions {
        self.metadata = metadata;
        self
    }

    /// These options with a place the reply metadata of each call is stored in.
    pub fn with_reply_metadata(mut self, slot: &ReplyMetadata) -> CallOptions {
        self.reply = Some(slot.clone());
        self
    }

    /// These options for calls made on behalf of the incoming call `ctx` (a handler's
    /// [`Context`]): each call's deadline is at most what `ctx` has left, less the channel's
    /// [`propagation_margin`](super::ClientConfig::propagation_margin); the call ends,
    /// `cancelled`, when `ctx` is cancelled (its caller cancelled or went away); it carries
    /// `ctx`'s values of the channel's
    /// [`propagated_metadata`](super::ClientConfig::propagated_metadata) keys; and its span is
    /// a child of `ctx`'s. See the crate docs, "Calls that chain".
    pub fn with_context(mut self, ctx: &Context) -> CallOptions {
        self.context = Some(ctx.clone());
        self
    }

    /// These options with a hedging policy for calls of `#[keel(idempotent)]` operations,
    /// over the channel's and its operations' ([`HedgingPolicy::disabled`](super::HedgingPolicy::disabled)
    /// turns hedging off).
    pub fn with_hedging(mut self, policy: super::HedgingPolicy) -> CallOptions {
        self.hedging = Some(policy);
        self
    }
}
