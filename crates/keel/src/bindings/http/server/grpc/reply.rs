//! A gRPC call's answer: HTTP 200, the messages (each length-prefixed, compressed when the
//! caller accepts it and that makes it smaller), then the status as trailers; or, for a call
//! that fails before its first message, a Trailers-Only answer (the status in the headers,
//! nothing after). A reply stream arrives framed as keel's message streams are: its
//! messages are reframed for gRPC, and its end (keel's end frame with a status, or a clean end)
//! becomes the trailers, so keel's end frame never reaches a gRPC peer.

use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use ::http::header::{HeaderValue, CONTENT_TYPE};
use ::http::{HeaderMap, Response};
use bytes::{Bytes, BytesMut};
use http_body::Frame;

use super::super::super::body::{Body, BoxError};
use super::super::super::grpc::{
    frame, status_headers, FaultType, ACCEPTED_ENCODINGS, GRPC_ACCEPT_ENCODING, GRPC_ENCODING,
    GRPC_STATUS,
};
use super::super::super::metadata_to_headers;
use crate::core::codec;
use crate::core::compress::{self, Compression};
use crate::core::messages::framing::{decode_end, Decoded, Decoder, Frame as KeelFrame, Framing};
use crate::core::metadata::Metadata;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;

/// What every answer to one call shares.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    /// The content type that echoes the request's.
    pub(super) content_type: HeaderValue,
    /// The operation's typed fault type, if it has one.
    pub(super) fault: Option<FaultType<'static>>,
    /// How reply messages are compressed, if the caller accepts that.
    pub(super) codec: Option<Compression>,
    /// Messages of at least this many bytes are compressed (when `codec` is set).
    pub(super) compress_above: usize,
}

impl Answer {
    /// An HTTP 200 with the headers every gRPC answer carries.
    fn response(&self, body: Body) -> Response<Body> {
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, self.content_type.clone());
        headers.insert(
            GRPC_ACCEPT_ENCODING,
            HeaderValue::from_static(ACCEPTED_ENCODINGS),
        );
        response
    }

    /// A Trailers-Only answer: `status` and `metadata` in the headers, no body.
    pub(super) fn trailers_only(&self, status: &Status, metadata: &Metadata) -> Response<Body> {
        let mut response = self.response(super::super::super::body::empty());
        status_headers(status, self.fault, response.headers_mut());
        metadata_to_headers(metadata, response.headers_mut());
        response
    }

    /// A unary call's answer: `message`, then the `OK` trailers.
    pub(super) fn unary(&self, message: &[u8], metadata: &Metadata) -> Response<Body> {
        let len = frame::PREFIX + message.len();
        let (data, compressed) = if self.codec.is_some() && message.len() >= self.compress_above {
            let mut out = BytesMut::with_capacity(len);
            let compressed = self.encode(message, &mut out);
            (out.freeze(), compressed)
        } else {
            // Not compressed: a small reply is framed in the thread's body buffer.
            let data = codec::small_bytes(len, |out| frame::encode(false, message, out));
            (data, false)
        };
        let body = Reply::body(State {
            data: Some(data),
            source: None,
            decoder: None,
            answer: self.owned(),
            trailers: Some(ok_trailers()),
        });
        let mut response = self.response(body);
        if compressed {
            response
                .headers_mut()
                .insert(GRPC_ENCODING, self.encoding());
        }
        metadata_to_headers(metadata, response.headers_mut());
        response
    }

    /// A streamed answer: the messages of `stream` (framed as keel's message streams are),
    /// then its end as the trailers.
    pub(super) fn stream(&self, stream: ByteStream, metadata: &Metadata) -> Response<Body> {
        let body = Reply::body(State {
            data: None,
            source: Some(stream),
            // The host's own messages: no limit of the caller's applies to them.
            decoder: Some(Decoder::new(Framing::Envelope, u32::MAX as usize)),
            answer: self.owned(),
            trailers: None,
        });
        let mut response = self.response(body);
        if self.codec.is_some() {
            response
                .headers_mut()
                .insert(GRPC_ENCODING, self.encoding());
        }
        metadata_to_headers(metadata, response.headers_mut());
        response
    }

    fn encoding(&self) -> HeaderValue {
        HeaderValue::from_static(self.codec.map_or("identity", Compression::as_str))
    }

    /// Appends `message` length-prefixed, compressed if that is allowed and makes it smaller;
    /// whether it was.
    fn encode(&self, message: &[u8], out: &mut BytesMut) -> bool {
        self.owned().encode(message, out)
    }

    fn owned(&self) -> Owned {
        Owned {
            fault: self.fault,
            codec: self.codec,
            compress_above: self.compress_above,
        }
    }
}

/// What a reply body keeps of its [`Answer`].
#[derive(Debug, Clone, Copy)]
struct Owned {
    fault: Option<FaultType<'static>>,
    codec: Option<Compression>,
    compress_above: usize,
}

impl Owned {
    fn encode(&self, message: &[u8], out: &mut BytesMut) -> bool {
        if let Some(codec) = self.codec.filter(|_| message.len() >= self.compress_above) {
            let packed = compress::compress(codec, message);
            if packed.len() < message.len() {
                frame::encode(true, &packed, out);
                return true;
            }
        }
        frame::encode(false, message, out);
        false
    }

    fn trailers(&self, status: &Status) -> HeaderMap {
        let mut trailers = HeaderMap::new();
        status_headers(status, self.fault, &mut trailers);
        metadata_to_headers(status.metadata(), &mut trailers);
        trailers
    }
}

fn ok_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert(GRPC_STATUS, HeaderValue::from_static("0"));
    trailers
}

/// A gRPC reply body: data, then trailers. The mutex (never contended: only the body's owner
/// polls it) makes it `Sync`, as keel's boxed body type requires.
struct Reply(Mutex<State>);

impl Reply {
    fn body(state: State) -> Body {
        use http_body_util::BodyExt;
        Reply(Mutex::new(state)).boxed()
    }
}

struct State {
    /// The next data frame, ready.
    data: Option<Bytes>,
    /// A reply stream still being read.
    source: Option<ByteStream>,
    decoder: Option<Decoder>,
    answer: Owned,
    /// The trailers, once known; sent after the data.
    trailers: Option<HeaderMap>,
}

impl State {
    /// Reads the reply stream until a data frame is ready or its end is known (then the
    /// stream is dropped and the trailers are set).
    fn poll_stream(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(mut source) = self.source.take() else {
            return Poll::Ready(());
        };
        let polled = self.poll_source(&mut source, cx);
        if self.trailers.is_none() {
            self.source = Some(source);
        }
        polled
    }

    fn poll_source(&mut self, source: &mut ByteStream, cx: &mut Context<'_>) -> Poll<()> {
        let State {
            data,
            decoder,
            answer,
            trailers,
            ..
        } = self;
        let Some(decoder) = decoder else {
            *trailers = Some(ok_trailers());
            return Poll::Ready(());
        };
        let mut out = BytesMut::new();
        loop {
            let end = loop {
                match decoder.next_with(|m| answer.encode(m, &mut out)) {
                    Ok(Some(Decoded::Message(_))) => {}
                    Ok(Some(Decoded::End(payload))) => break Some(end_status(payload)),
                    Ok(None) => break None,
                    Err(e) => break Some(malformed(&e.to_string())),
                }
            };
            if let Some(status) = end {
                *trailers = Some(answer.trailers(&status));
            }
            if !out.is_empty() {
                *data = Some(out.freeze());
                return Poll::Ready(());
            }
            if trailers.is_some() {
                return Poll::Ready(());
            }
            match source.poll_chunk(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => decoder.push(&chunk),
                Poll::Ready(Some(Err(e))) => {
                    *trailers = Some(answer.trailers(&e.to_status()));
                    return Poll::Ready(());
                }
                Poll::Ready(None) => {
                    // Envelope frames are whole before the end: what is left is an end
                    // frame, or a stream cut inside a frame.
                    *trailers = Some(match decoder.finish() {
                        Ok(None) => ok_trailers(),
                        Ok(Some(KeelFrame::End(payload))) => answer.trailers(&end_status(payload)),
                        Ok(Some(KeelFrame::Message(m))) => {
                            answer.encode(&m, &mut out);
                            *data = Some(out.freeze());
                            ok_trailers()
                        }
                        Err(e) => answer.trailers(&malformed(&e.to_string())),
                    });
                    return Poll::Ready(());
                }
            }
        }
    }
}

/// The status of keel's end frame.
fn end_status(payload: Bytes) -> Status {
    decode_end(payload).unwrap_or_else(|| malformed("a malformed end frame"))
}

fn malformed(why: &str) -> Status {
    Status::new(
        StatusCode::Internal,
        format!("the reply stream broke: {why}"),
    )
}

impl http_body::Body for Reply {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let state = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        if state.data.is_none() && state.source.is_some() && state.poll_stream(cx).is_pending() {
            return Poll::Pending;
        }
        if let Some(data) = state.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(state.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        let state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        state.data.is_none() && state.source.is_none() && state.trailers.is_none()
    }
}
