//! A gRPC request's messages: a unary call's one message, read with the HTTP binding's body
//! reader (its size limit, receive budget and timeout) while each prefix is checked as it
//! passes; and a streamed request's messages, each decompressed and framed as keel's message
//! streams are, for the operation's `MessageStream`.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use http_body::{Frame, SizeHint};

use super::super::super::body::{self, BoxError, ReadError, Received};
use super::super::super::grpc::frame::{self, FrameError, Reader, Scanner};
use super::super::super::grpc::web::NotBase64;
use super::super::Ctx;
use crate::core::compress::{self, Compression, DecompressError};
use crate::core::error::{Error, Kind};
use crate::core::messages::framing::{encode_message, Framing};
use crate::core::proto::json::{request_from_proto_json, TooLarge};
use crate::core::proto::schema::ServiceSchema;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::dispatch::Reservation;

/// A unary call's request message.
#[derive(Debug)]
pub(super) struct Unary {
    /// The request's body: the message's prefix and the message.
    body: Bytes,
    /// Where the message lies in `body`.
    at: std::ops::Range<usize>,
    /// Its compressed flag was set.
    pub(super) compressed: bool,
    /// Its room in the receive budget, held (never read) while the message is in use.
    _reserved: Reservation,
}

/// Reads a unary call's request: exactly one message of at most the host's message size.
/// A prefix that announces more is refused when it arrives, before its message does; a
/// second message as soon as its first byte arrives.
pub(super) async fn read_unary<B: Received>(ctx: &Ctx, body: B) -> Result<Unary, Status> {
    let max = ctx.settings.max_message_size;
    let checked = Checked {
        body,
        scanner: Scanner::new(max, Some(1)),
    };
    let deadline = tokio::time::Instant::now() + ctx.settings.frame_timeout;
    let limit = max.saturating_add(frame::PREFIX as u32);
    let read = body::read_limited(checked, limit, 0, Some((&ctx.budget, deadline)));
    let read = match tokio::time::timeout_at(deadline, read).await {
        Ok(read) => read,
        Err(_) => Err(ReadError::NoRoom),
    };
    let (bytes, reserved) = match read {
        Ok(read) => read,
        Err(ReadError::NoRoom) => {
            let conn = &ctx.conn;
            conn.dispatcher.timed_out(conn.info.binding);
            let msg = "the request message did not arrive in time, or the host had no room for it";
            return Err(Status::new(StatusCode::BadRequest, msg));
        }
        Err(ReadError::TooLarge { size, .. }) => {
            let size = size.map_or_else(|| "more than".to_string(), |n| n.to_string());
            let msg = format!("a request of {size} bytes exceeds this host's limit of {max} bytes");
            return Err(Status::new(StatusCode::TooLarge, msg));
        }
        Err(ReadError::Broken(e)) => {
            if let Some(e) = e.downcast_ref::<NotBase64>() {
                return Err(Status::new(StatusCode::BadRequest, e.to_string()));
            }
            return Err(match e.downcast_ref::<FrameError>() {
                Some(e) => frame_status(e),
                None => Status::new(
                    StatusCode::Cancelled,
                    format!("cannot read the request: {e}"),
                ),
            });
        }
    };
    let Some((compressed, at)) =
        frame::one_message_at(&bytes, max).map_err(|e| frame_status(&e))?
    else {
        return Err(Status::new(
            StatusCode::Unimplemented,
            "a unary call's request must be exactly one message; this one had none",
        ));
    };
    Ok(Unary {
        body: bytes,
        at,
        compressed,
        _reserved: reserved,
    })
}

impl Unary {
    /// The message (compressed if `compressed`).
    pub(super) fn message(&self) -> &[u8] {
        &self.body[self.at.clone()]
    }
}

/// The status for messages that are not well framed (gRPC's codes: a size past the limit is
/// `RESOURCE_EXHAUSTED`, a unary request of more than one message `UNIMPLEMENTED`).
fn frame_status(e: &FrameError) -> Status {
    let code = match e {
        FrameError::TooLarge { .. } => StatusCode::TooLarge,
        FrameError::TooMany => StatusCode::Unimplemented,
        FrameError::UnknownFlags(_) | FrameError::Truncated => StatusCode::BadRequest,
    };
    Status::new(code, e.to_string())
}

/// A body whose gRPC prefixes are checked as its bytes pass: an error ends it at the first
/// prefix that is refused.
struct Checked<B> {
    body: B,
    scanner: Scanner,
}

impl<B: Received> http_body::Body for Checked<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = ready!(Pin::new(&mut this.body).poll_frame(cx));
        Poll::Ready(match polled {
            None => None,
            Some(Err(e)) => Some(Err(e.into())),
            Some(Ok(frame)) => match frame.data_ref().map(|d| this.scanner.feed(d)) {
                Some(Err(e)) => Some(Err(Box::new(e))),
                _ => Some(Ok(frame)),
            },
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The operation whose JSON request messages are read as protobuf's JSON mapping may write
/// them (`core/proto/json.rs`): its contract's schema and its name.
pub(super) type ProtoJson = (&'static ServiceSchema, &'static str);

/// A streamed request's messages as a byte stream framed as keel's message streams are
/// (length-prefixed, flags `0`), each decompressed with `codec` if its flag says so, each at
/// most `max` bytes before and after decompression; with `json`, each JSON message rewritten
/// from protobuf's JSON mapping as a unary request is.
pub(super) fn request_stream<B: Received>(
    incoming: B,
    codec: Option<Compression>,
    max: u32,
    json: Option<ProtoJson>,
) -> ByteStream {
    ByteStream::from_results(Reframed {
        bytes: body::received(incoming, None, |_| {}),
        reader: Reader::new(max),
        codec,
        max,
        json,
        out: BytesMut::new(),
        done: false,
    })
}

/// `message` rewritten from protobuf's JSON mapping for operation `op` of `schema` (`None`:
/// nothing to rewrite); refused when the rewrite would make it longer than `max` bytes, as a
/// longer message would have been (a bytes field, base64 in protobuf's JSON, grows up to 3 × as
/// keel's JSON writes it: a list of numbers, up to 4 characters a byte). Bytes fields are
/// counted at 4 characters a byte from their base64 text, before they are decoded: at most
/// `max / 4` bytes are ever turned into JSON values.
pub(super) fn from_proto_json(
    schema: &ServiceSchema,
    op: &str,
    message: &[u8],
    max: u32,
) -> Result<Option<Vec<u8>>, Status> {
    let too_large = |size: String| {
        Status::new(
            StatusCode::TooLarge,
            format!(
                "a request message rewritten from protobuf's JSON mapping is {size} bytes, over \
                 this host's limit of {max} bytes"
            ),
        )
    };
    match request_from_proto_json(schema, op, message, max as usize) {
        Err(TooLarge) => Err(too_large("more than".to_string())),
        Ok(Some(r)) if r.len() > max as usize => Err(too_large(r.len().to_string())),
        Ok(r) => Ok(r),
    }
}

/// See [`request_stream`].
struct Reframed {
    bytes: ByteStream,
    reader: Reader,
    codec: Option<Compression>,
    max: u32,
    json: Option<ProtoJson>,
    /// The messages of the last chunk, reframed.
    out: BytesMut,
    done: bool,
}

impl Reframed {
    /// Moves the whole messages the reader holds to `out`.
    fn reframe(&mut self) -> Result<(), Error> {
        while let Some(m) = self
            .reader
            .next()
            .map_err(|e| stream_error(frame_status(&e)))?
        {
            let decompressed;
            let message = match (m.compressed, self.codec) {
                (false, _) => &m.bytes[..],
                (true, None) => {
                    return Err(stream_error(Status::new(
                        StatusCode::BadRequest,
                        "a message is flagged compressed but the request has no grpc-encoding",
                    )))
                }
                (true, Some(codec)) => {
                    decompressed = compress::decompress(codec, &m.bytes, self.max as usize)
                        .map_err(|e| stream_error(decompress_status(codec, e)))?;
                    &decompressed[..]
                }
            };
            let rewritten = match self.json {
                Some((schema, op)) => {
                    from_proto_json(schema, op, message, self.max).map_err(stream_error)?
                }
                None => None,
            };
            encode_message(
                Framing::Envelope,
                rewritten.as_deref().unwrap_or(message),
                &mut self.out,
            );
        }
        Ok(())
    }
}

/// The status of a request message that does not decompress (gRPC: `INTERNAL`; past the
/// limit, `RESOURCE_EXHAUSTED`).
pub(super) fn decompress_status(codec: Compression, e: DecompressError) -> Status {
    match e {
        DecompressError::TooLarge { limit } => Status::new(
            StatusCode::TooLarge,
            format!(
                "a {codec} message decompresses to more than this host's limit of {limit} bytes"
            ),
        ),
        DecompressError::Malformed(why) => Status::new(
            StatusCode::BadRequest,
            format!("a {codec} message does not decompress: {why}"),
        ),
    }
}

fn stream_error(status: Status) -> Error {
    Error::new(Kind::Status(status.code()), status.message().to_string())
}

impl Stream for Reframed {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Err(e) = this.reframe() {
                this.done = true;
                return Poll::Ready(Some(Err(e)));
            }
            if !this.out.is_empty() {
                return Poll::Ready(Some(Ok(this.out.split().freeze())));
            }
            match ready!(this.bytes.poll_chunk(cx)) {
                Some(Ok(chunk)) => this.reader.push(&chunk),
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    this.done = true;
                    if let Err(e) = this.reader.finish() {
                        return Poll::Ready(Some(Err(stream_error(frame_status(&e)))));
                    }
                }
            }
        }
    }
}
