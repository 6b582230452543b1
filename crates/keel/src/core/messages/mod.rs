//! Streams of typed messages: [`MessageStream`], what an operation takes (client streaming),
//! returns (server streaming) or both (bidirectional), and [`MessageSender`], the half a
//! producer writes into.
//!
//! A stream of messages rides on a call's byte stream (see [`ByteStream`]): each message is
//! encoded as a unary body is (MessagePack for keel's clients, JSON for others), so contract
//! evolution applies per message, and framed inside the bytes ([`framing`]). Everything
//! [`ByteStream`] guarantees holds: the sender may have only a flow-control window of bytes
//! unconsumed at the receiver, and a receiver that drops the stream tells the sender to stop.

pub(crate) mod framing;

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures_core::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use self::framing::{Decoded, Decoder, Frame, FrameError, Framing};
use super::codec;
use super::error::{Error, Kind};
use super::format::Format;
use super::status::{Status, StatusCode};
use super::stream::ByteStream;
use crate::runtime::timer;

/// Encoded messages are gathered into one chunk of the byte stream, while the producer has
/// more ready at once, up to this many bytes.
const BATCH: usize = 32 * 1024;

/// The most capacity an encoder keeps in its buffer between chunks: one that held a large
/// message lets it go.
const MAX_KEPT: usize = 2 * BATCH;

/// A stream of messages of type `T`: what a streaming operation takes or returns.
///
/// Build one from an iterator, any [`Stream`] of `Result<T, Status>`, or a
/// [`MessageStream::channel`] fed from another task or thread. Read one with
/// [`MessageStream::next`] (async), [`MessageStream::blocking_next`] or
/// [`MessageStream::blocking_iter`] (in a plain `fn` operation), or as a [`Stream`]. A stream
/// ends cleanly (`None`), or with an error: the producer's [`Status`] or typed fault
/// ([`MessageSender::abort`], [`MessageSender::fault`]), or the failure of the connection that
/// carried it.
///
/// ```
/// # keel::__private::block_on(async {
/// use keel::MessageStream;
///
/// let (tx, mut quotes) = MessageStream::channel(8);
/// std::thread::spawn(move || {
///     for seq in 0..3u32 {
///         tx.blocking_send(seq).unwrap();
///     }
///     // Dropping the sender ends the stream.
/// });
/// let mut seen = Vec::new();
/// while let Some(seq) = quotes.next().await {
///     seen.push(seq?);
/// }
/// assert_eq!(seen, [0, 1, 2]);
/// # Ok::<(), keel::Error>(())
/// # }).unwrap();
/// ```
pub struct MessageStream<T> {
    source: Source<T>,
}

enum Source<T> {
    Empty,
    Iter(Box<dyn Iterator<Item = T> + Send>),
    Channel(mpsc::Receiver<Result<T, End>>),
    Dyn(Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>),
    Remote(Box<Remote<T>>),
}

impl<T> fmt::Debug for MessageStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.source {
            Source::Empty => "empty",
            Source::Iter(_) => "iterator",
            Source::Channel(_) => "channel",
            Source::Dyn(_) => "stream",
            Source::Remote(_) => "remote",
        };
        f.debug_struct("MessageStream")
            .field("source", &kind)
            .finish()
    }
}

impl<T> Default for MessageStream<T> {
    fn default() -> Self {
        MessageStream::empty()
    }
}

impl<T> MessageStream<T> {
    /// A stream with no messages.
    pub fn empty() -> MessageStream<T> {
        MessageStream {
            source: Source::Empty,
        }
    }

    /// A stream of the iterator's items, pulled as the receiver makes room. The iterator runs
    /// on the runtime: it must not block (for blocking producers use
    /// [`MessageStream::channel`]).
    #[allow(clippy::should_implement_trait)] // Mirrors `ByteStream::from_iter`.
    pub fn from_iter<I>(items: I) -> MessageStream<T>
    where
        I: IntoIterator<Item = T>,
        I::IntoIter: Send + 'static,
    {
        MessageStream {
            source: Source::Iter(Box::new(items.into_iter())),
        }
    }

    /// A stream of `stream`'s items; an `Err` item ends the stream with that status.
    pub fn from_stream<S>(stream: S) -> MessageStream<T>
    where
        S: Stream<Item = Result<T, Status>> + Send + 'static,
    {
        MessageStream {
            source: Source::Dyn(Box::pin(stream)),
        }
    }

    /// A stream fed through a [`MessageSender`], from another task or thread. `capacity` is
    /// how many messages may wait before [`MessageSender::send`] waits.
    pub fn channel(capacity: usize) -> (MessageSender<T>, MessageStream<T>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            MessageSender { tx },
            MessageStream {
                source: Source::Channel(rx),
            },
        )
    }

    /// The next message, `None` at the end. An `Err` ends the stream: the producer ended it
    /// with a status or a typed fault ([`Error::fault`]), a message did not decode, the
    /// call's deadline passed, or the connection carrying it broke.
    pub async fn next(&mut self) -> Option<Result<T, Error>> {
        std::future::poll_fn(|cx| self.poll_message(cx)).await
    }

    /// [`MessageStream::next`] for plain `fn` operations and other code outside a runtime.
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime (it would block a runtime thread).
    pub fn blocking_next(&mut self) -> Option<Result<T, Error>> {
        if tokio::runtime::Handle::try_current().is_ok() {
            panic!("MessageStream::blocking_next called from async code; use `next().await`");
        }
        crate::core::block_on::block_on(self.next())
    }

    /// An iterator over the messages for plain `fn` operations (see
    /// [`MessageStream::blocking_next`]).
    pub fn blocking_iter(self) -> BlockingIter<T> {
        BlockingIter { stream: self }
    }

    /// Polls for the next message (the [`Stream`] implementation).
    pub fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
        let polled = match &mut self.source {
            Source::Empty => Poll::Ready(None),
            Source::Iter(it) => Poll::Ready(it.next().map(Ok)),
            Source::Channel(rx) => rx
                .poll_recv(cx)
                .map(|o| o.map(|r| r.map_err(End::into_error))),
            Source::Dyn(s) => s
                .as_mut()
                .poll_next(cx)
                .map(|o| o.map(|r| r.map_err(Error::from_status))),
            Source::Remote(r) => r.poll_message(cx),
        };
        if let Poll::Ready(None | Some(Err(_))) = &polled {
            // Ended (or failed): release the source now, and never yield after the end.
            self.source = Source::Empty;
        }
        polled
    }

    /// Polls the producer's side: like [`MessageStream::poll_message`], but a local
    /// producer's error comes back as it was given (its fault still to be encoded).
    fn poll_local(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, End>>> {
        let polled = match &mut self.source {
            Source::Empty => Poll::Ready(None),
            Source::Iter(it) => Poll::Ready(it.next().map(Ok)),
            Source::Channel(rx) => rx.poll_recv(cx),
            Source::Dyn(s) => s
                .as_mut()
                .poll_next(cx)
                .map(|o| o.map(|r| r.map_err(End::Status))),
            Source::Remote(r) => r
                .poll_message(cx)
                .map(|o| o.map(|r| r.map_err(|e| End::Status(e.to_status())))),
        };
        if let Poll::Ready(None | Some(Err(_))) = &polled {
            self.source = Source::Empty;
        }
        polled
    }

    /// A stream of messages decoded from `bytes`, framed as `framing` in `format`, each at most
    /// `max` bytes; it fails with a timeout at `deadline`. A fault end is decoded by `fault`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode(
        bytes: ByteStream,
        format: Format,
        framing: Framing,
        max: usize,
        deadline: Option<Instant>,
        fault: Option<FaultDecoder>,
        counted: Option<metrics::Counter>,
    ) -> MessageStream<T>
    where
        T: DeserializeOwned,
    {
        MessageStream {
            source: Source::Remote(Box::new(Remote {
                bytes,
                decoder: Decoder::new(framing, max),
                format,
                decode: decode_message::<T>,
                fault,
                deadline: deadline.map(|at| Box::pin(timer::sleep_until(at))),
                input_ended: false,
                counted,
                from_caller: false,
            })),
        }
    }

    /// This stream, read by a host from its caller: an error in its bytes is the caller's
    /// (`BadRequest`, `TooLarge`) when a handler passes it on.
    pub(crate) fn sent_by_caller(mut self) -> Self {
        if let Source::Remote(r) = &mut self.source {
            r.from_caller = true;
        }
        self
    }

    /// The bytes of this stream: each message encoded in `format` and framed as `framing`;
    /// past `deadline` the stream ends with `DeadlineExceeded`.
    pub(crate) fn encode(
        self,
        format: Format,
        framing: Framing,
        deadline: Option<Instant>,
        counted: Option<metrics::Counter>,
    ) -> ByteStream
    where
        T: Serialize + Send + 'static,
    {
        ByteStream::from_results(Encoder {
            messages: self,
            format,
            framing,
            deadline: deadline.map(|at| Box::pin(timer::sleep_until(at))),
            done: false,
            counted,
            buf: Vec::new(),
        })
    }
}

impl<T> Stream for MessageStream<T> {
    type Item = Result<T, Error>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // `MessageStream` holds no self-references: every source is boxed or `Unpin`.
        self.get_mut().poll_message(cx)
    }
}

impl<T> Unpin for MessageStream<T> {}

/// A blocking iterator over a [`MessageStream`] (see [`MessageStream::blocking_iter`]).
#[derive(Debug)]
pub struct BlockingIter<T> {
    stream: MessageStream<T>,
}

impl<T> Iterator for BlockingIter<T> {
    type Item = Result<T, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        self.stream.blocking_next()
    }
}

/// The sending half of [`MessageStream::channel`]. Clones send into the same stream (from
/// several tasks or threads). Dropping the last one ends the stream cleanly, except while the
/// thread is panicking: then the stream ends with an error, so a receiver never takes a
/// truncated stream for a whole one.
pub struct MessageSender<T> {
    tx: mpsc::Sender<Result<T, End>>,
}

impl<T> Clone for MessageSender<T> {
    fn clone(&self) -> Self {
        MessageSender {
            tx: self.tx.clone(),
        }
    }
}

impl<T> fmt::Debug for MessageSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageSender")
            .field("closed", &self.tx.is_closed())
            .finish()
    }
}

impl<T> MessageSender<T> {
    /// Sends a message, waiting while `capacity` messages are waiting (and, for a stream to a
    /// peer, while the peer has not made room). Fails if the receiver is gone: it stopped
    /// reading, the call ended, or the connection broke.
    pub async fn send(&self, message: T) -> Result<(), Error> {
        self.tx.send(Ok(message)).await.map_err(|_| receiver_gone())
    }

    /// [`MessageSender::send`] for threads outside a runtime.
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    pub fn blocking_send(&self, message: T) -> Result<(), Error> {
        self.tx
            .blocking_send(Ok(message))
            .map_err(|_| receiver_gone())
    }

    /// Ends the stream with `status`: the receiver's next read fails with it.
    pub async fn abort(self, status: Status) {
        let _ = self.tx.send(Err(End::Status(status))).await;
    }

    /// Ends the stream with the typed fault `fault`: the receiver's next read fails with it
    /// ([`Error::fault`]), as a unary operation's `Err(fault)` does.
    pub async fn fault<E>(self, fault: E)
    where
        E: Serialize + Any + Send + Sync + fmt::Debug,
    {
        let _ = self.tx.send(Err(End::fault(fault))).await;
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Completes when the receiver is gone (it stopped reading, the call ended, or the
    /// connection broke): a producer between messages learns of it without sending.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

impl<T> Drop for MessageSender<T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.tx.try_send(Err(End::Status(Status::new(
                StatusCode::Internal,
                "the producer of this stream panicked",
            ))));
        }
    }
}

fn receiver_gone() -> Error {
    Error::new(
        Kind::Status(StatusCode::Cancelled),
        "the receiver stopped reading this stream",
    )
}

/// How a local producer ended its stream with an error.
enum End {
    Status(Status),
    /// A typed fault: the value, and how to encode it (in the format the call chose) or hand
    /// it to a local reader.
    Fault {
        value: Box<dyn Any + Send + Sync>,
        encode: fn(&(dyn Any + Send + Sync), Format) -> Status,
        into_error: fn(Box<dyn Any + Send + Sync>) -> Error,
    },
}

impl End {
    fn fault<E: Serialize + Any + Send + Sync + fmt::Debug>(fault: E) -> End {
        End::Fault {
            value: Box::new(fault),
            encode: |v, format| {
                let fault = v.downcast_ref::<E>().expect("the fault's own type");
                codec::encode_fault(format, fault)
            },
            into_error: |v| Error::from_fault(*v.downcast::<E>().expect("the fault's own type")),
        }
    }

    fn into_error(self) -> Error {
        match self {
            End::Status(s) => Error::from_status(s),
            End::Fault {
                value, into_error, ..
            } => into_error(value),
        }
    }

    fn into_status(self, format: Format) -> Status {
        match self {
            End::Status(s) => s,
            End::Fault { value, encode, .. } => encode(&*value, format),
        }
    }
}

/// Decodes a fault end's details into the caller's error (generated code passes the
/// contract's fault type).
pub(crate) type FaultDecoder = fn(Format, &[u8]) -> Error;

fn decode_message<T: DeserializeOwned>(format: Format, bytes: &[u8]) -> Result<T, String> {
    codec::decode(format, bytes)
}

/// A stream fed by a peer: its bytes, decoded message by message.
struct Remote<T> {
    bytes: ByteStream,
    decoder: Decoder,
    format: Format,
    decode: fn(Format, &[u8]) -> Result<T, String>,
    fault: Option<FaultDecoder>,
    deadline: Option<Pin<Box<timer::Sleep>>>,
    /// The bytes ended: what the decoder holds is all there is.
    input_ended: bool,
    /// Counts the messages received (a metric).
    counted: Option<metrics::Counter>,
    /// A caller sends it (a host's request stream): its faults are the caller's, and a
    /// handler that passes one on (`?`) answers `BadRequest` or `TooLarge` with it.
    from_caller: bool,
}

impl<T> Remote<T> {
    /// The error for bytes that are not a stream of `T`: `kind` when they came from a host
    /// (the host broke the protocol), the caller's status when they came from one.
    fn refuse(&self, kind: Kind, message: String) -> Error {
        let kind = match kind {
            _ if !self.from_caller => kind,
            Kind::TooLarge => Kind::Status(StatusCode::TooLarge),
            _ => Kind::Status(StatusCode::BadRequest),
        };
        Error::new(kind, message)
    }

    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
        let (format, decode) = (self.format, self.decode);
        loop {
            let frame = if self.input_ended {
                self.decoder.finish().map(|frame| {
                    frame.map(|frame| match frame {
                        Frame::Message(m) => Decoded::Message(decode(format, &m)),
                        Frame::End(payload) => Decoded::End(payload),
                    })
                })
            } else {
                // Decoded where it lies in the decoder's buffer.
                self.decoder.next_with(|m| decode(format, m))
            };
            match frame {
                Ok(Some(Decoded::Message(m))) => {
                    if let Some(counted) = &self.counted {
                        counted.increment(1);
                    }
                    return Poll::Ready(Some(m.map_err(|e| {
                        let message = format!("cannot decode a stream message: {e}");
                        self.refuse(Kind::Codec, message)
                    })));
                }
                Ok(Some(Decoded::End(payload))) => {
                    let Some(status) = framing::decode_end(payload) else {
                        let message = malformed("a malformed end frame");
                        return Poll::Ready(Some(Err(self.refuse(Kind::Protocol, message))));
                    };
                    return Poll::Ready(Some(Err(match (status.code(), self.fault) {
                        (StatusCode::Fault, Some(decode)) => decode(self.format, status.details())
                            .with_metadata(status.metadata().clone()),
                        _ => Error::from_status(status),
                    })));
                }
                Ok(None) if self.input_ended => return Poll::Ready(None),
                Ok(None) => {}
                Err(e @ FrameError::TooLarge { .. }) => {
                    return Poll::Ready(Some(Err(self.refuse(Kind::TooLarge, e.to_string()))));
                }
                Err(e) => {
                    let message = malformed(&e.to_string());
                    return Poll::Ready(Some(Err(self.refuse(Kind::Protocol, message))));
                }
            }
            if let Some(deadline) = &mut self.deadline {
                if deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Error::new(
                        Kind::Timeout,
                        "the call's deadline passed before its stream ended",
                    ))));
                }
            }
            match self.bytes.poll_chunk(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => self.decoder.push(&chunk),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => self.input_ended = true,
            }
        }
    }
}

fn malformed(why: &str) -> String {
    format!("malformed message stream: {why}")
}

/// The producer's side of a stream on its way to a peer: messages encoded and framed, gathered
/// into chunks.
struct Encoder<T> {
    messages: MessageStream<T>,
    format: Format,
    framing: Framing,
    deadline: Option<Pin<Box<timer::Sleep>>>,
    /// The end was sent: nothing follows.
    done: bool,
    /// Counts the messages sent (a metric).
    counted: Option<metrics::Counter>,
    /// Where the messages ready at once are encoded, each straight after the last, and framed;
    /// empty between polls. Kept for the next chunk (up to [`MAX_KEPT`] of capacity): a chunk
    /// is copied out of it.
    buf: Vec<u8>,
}

impl<T> Encoder<T> {
    /// What the buffer holds, as one chunk; the buffer is left empty.
    fn chunk(&mut self) -> Bytes {
        let chunk = Bytes::copy_from_slice(&self.buf);
        self.buf.clear();
        if self.buf.capacity() > MAX_KEPT {
            self.buf = Vec::new();
        }
        chunk
    }
}

impl<T: Serialize> Stream for Encoder<T> {
    type Item = Result<Bytes, Error>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(deadline) = &mut this.deadline {
            if deadline.as_mut().poll(cx).is_ready() {
                // The producer is dropped now, which tells it (a sender's `send` fails).
                this.messages = MessageStream::empty();
                this.done = true;
                let status = Status::new(
                    StatusCode::DeadlineExceeded,
                    "the call's deadline passed before its stream ended",
                );
                return Poll::Ready(Some(Ok(framing::encode_error_end(this.framing, status))));
            }
        }
        let (format, framing) = (this.format, this.framing);
        loop {
            let end = match this.messages.poll_local(cx) {
                Poll::Pending => Ok(None),
                Poll::Ready(Some(Ok(m))) => {
                    let encoded = framing::encode_message_with(framing, &mut this.buf, |out| {
                        codec::encode_message_into(format, &m, out)
                    });
                    if encoded.is_ok() {
                        if let Some(counted) = &this.counted {
                            counted.increment(1);
                        }
                    }
                    match encoded {
                        Ok(()) if this.buf.len() < BATCH => continue,
                        Ok(()) => Ok(None),
                        Err(status) => Err(End::Status(status)),
                    }
                }
                Poll::Ready(Some(Err(end))) => Err(end),
                Poll::Ready(None) => Ok(Some(())),
            };
            match end {
                // Nothing more ready now: send what was gathered, or wait.
                Ok(None) if this.buf.is_empty() => return Poll::Pending,
                Ok(None) => return Poll::Ready(Some(Ok(this.chunk()))),
                Ok(Some(())) => {
                    this.done = true;
                    if let Some(tail) = framing::encode_clean_end(framing) {
                        this.buf.extend_from_slice(&tail);
                    }
                }
                Err(end) => {
                    let status = end.into_status(format);
                    this.buf
                        .extend_from_slice(&framing::encode_error_end(framing, status));
                    this.done = true;
                }
            }
            return Poll::Ready(if this.buf.is_empty() {
                None
            } else {
                Some(Ok(this.chunk()))
            });
        }
    }
}
