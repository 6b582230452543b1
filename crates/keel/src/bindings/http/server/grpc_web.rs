//! gRPC-Web (GRPC.md, "gRPC-Web"): a request whose content type is `application/grpc-web…`
//! is a gRPC call as `grpc/` answers it, over HTTP/1.1 or HTTP/2, with two differences kept
//! here: a `-text` body is base64 both ways, and the answer's trailers travel as a last
//! length-prefixed frame (flag `0x80`) in the body, since browsers cannot read HTTP trailers.
//! A call that fails before its first message keeps gRPC's Trailers-Only form: the status in
//! the headers, no body.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::http::header::{HeaderValue, CONTENT_TYPE};
use ::http::{Request, Response};
use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt as _;

use super::super::body::{Body, BoxError, Received};
use super::super::grpc::web::{self, NotBase64, TextDecoder};
use super::super::grpc::GRPC_STATUS;
use super::grpc::{self, Dialect};
use super::Ctx;

/// What a gRPC-Web request's content type says (`None`: not gRPC-Web).
pub(super) fn content_type<B>(req: &Request<B>) -> Option<(bool, String)> {
    let ct = req.headers().get(CONTENT_TYPE)?.to_str().ok()?;
    web::parse_content_type(ct).map(|(text, sub)| (text, sub.to_ascii_lowercase()))
}

/// One gRPC-Web call: `text` says the body is base64, `subtype` the messages' encoding.
pub(super) async fn call<B: Received>(
    ctx: &Ctx,
    req: Request<B>,
    text: bool,
    subtype: &str,
) -> Response<Body> {
    let mut response = if text {
        let (parts, body) = req.into_parts();
        let body = TextBody {
            body,
            decoder: TextDecoder::default(),
        };
        grpc::call(ctx, Request::from_parts(parts, body), Dialect::Web).await
    } else {
        grpc::call(ctx, req, Dialect::Web).await
    };
    if response.status() != ::http::StatusCode::OK {
        // Not a gRPC answer (a wrong method): as it is.
        return response;
    }
    let main = if text {
        web::TEXT_CONTENT_TYPE
    } else {
        web::CONTENT_TYPE
    };
    let ct = if subtype.is_empty() {
        main.to_string()
    } else {
        format!("{main}+{subtype}")
    };
    if let Ok(v) = HeaderValue::from_str(&ct) {
        response.headers_mut().insert(CONTENT_TYPE, v);
    }
    if response.headers().contains_key(GRPC_STATUS) {
        // Trailers-Only: the status is in the headers, and there is no body.
        return response;
    }
    response.map(|body| {
        WebReply {
            body,
            text,
            done: false,
        }
        .boxed()
    })
}

/// A `-text` request body, decoded from base64 as it arrives.
struct TextBody<B> {
    body: B,
    decoder: TextDecoder,
}

impl<B: Received> http_body::Body for TextBody<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            let polled = ready!(Pin::new(&mut this.body).poll_frame(cx));
            return Poll::Ready(match polled {
                None => match this.decoder.finish() {
                    Ok(()) => None,
                    Err(e) => Some(Err(Box::new(e))),
                },
                Some(Err(e)) => Some(Err(e.into())),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => match this.decoder.push(&data) {
                        Ok(bytes) if bytes.is_empty() => continue,
                        Ok(bytes) => Some(Ok(Frame::data(bytes))),
                        Err(e @ NotBase64) => Some(Err(Box::new(e))),
                    },
                    // Trailers of a request: nothing gRPC-Web uses.
                    Err(_) => continue,
                },
            });
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // The decoded size is not the size on the wire.
        SizeHint::default()
    }
}

/// A gRPC answer's body as gRPC-Web sends it: the messages, then the trailers as a frame;
/// all of it in base64 for `-text`.
struct WebReply {
    body: Body,
    text: bool,
    done: bool,
}

impl WebReply {
    fn data(&self, bytes: Bytes) -> Frame<Bytes> {
        Frame::data(if self.text {
            web::text_encode(&bytes)
        } else {
            bytes
        })
    }
}

impl http_body::Body for WebReply {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = ready!(Pin::new(&mut self.body).poll_frame(cx));
        Poll::Ready(match polled {
            None => None,
            Some(Err(e)) => Some(Err(e)),
            Some(Ok(frame)) => match frame.into_trailers() {
                Ok(trailers) => {
                    self.done = true;
                    let mut out = BytesMut::new();
                    web::trailer_frame(&trailers, &mut out);
                    Some(Ok(self.data(out.freeze())))
                }
                Err(frame) => match frame.into_data() {
                    Ok(data) => Some(Ok(self.data(data))),
                    Err(_) => None,
                },
            },
        })
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
