//! Connect's streaming calls (`application/connect+proto`, `+json`): the request's envelopes
//! are gRPC's length-prefixed messages (flag `0x01`: compressed with
//! `Connect-Content-Encoding`), so its body goes to the gRPC path as it is; the answer's
//! messages come back as they are, and its status and trailing metadata become the
//! end-of-stream message (flag `0x02`, `{"error", "metadata"}`). The HTTP status is 200.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use ::http::{HeaderMap, Request, Response};
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt as _;

use super::super::super::body::{self, Body, BoxError, Received};
use super::super::super::grpc::{connect, GRPC_ENCODING, GRPC_STATUS};
use super::super::grpc::{self, Dialect};
use super::super::Ctx;
use super::{as_grpc_headers, grpc_headers, is_protocol_header};

/// One streaming Connect call whose messages are `codec`.
pub(in crate::bindings::http::server) async fn call<B: Received>(
    ctx: &Ctx,
    req: Request<B>,
    codec: &str,
) -> Response<Body> {
    let (mut parts, incoming) = req.into_parts();
    let headers = match grpc_headers(
        &parts.headers,
        codec,
        connect::CONTENT_ENCODING,
        connect::ACCEPT_ENCODING,
    ) {
        Ok(h) => h,
        Err(status) => return ended(codec, &as_grpc_headers(&status)),
    };
    parts.headers = headers;
    let answer = grpc::call(
        ctx,
        Request::from_parts(parts, incoming),
        Dialect::ConnectStream,
    )
    .await;
    let (mut parts, reply) = answer.into_parts();
    if parts.status != ::http::StatusCode::OK {
        return Response::from_parts(parts, reply);
    }
    if parts.headers.contains_key(GRPC_STATUS) {
        // Trailers-Only: the whole answer is the end of the stream.
        return ended(codec, &parts.headers);
    }
    set_content_type(&mut parts.headers, codec);
    if let Some(c) = parts.headers.remove(GRPC_ENCODING) {
        parts
            .headers
            .insert(HeaderName::from_static(connect::CONTENT_ENCODING), c);
    }
    let accepted = parts
        .headers
        .remove(super::super::super::grpc::GRPC_ACCEPT_ENCODING);
    if let Some(a) = accepted {
        parts
            .headers
            .insert(HeaderName::from_static(connect::ACCEPT_ENCODING), a);
    }
    let body = Ends {
        body: reply,
        done: false,
    }
    .boxed();
    Response::from_parts(parts, body)
}

fn set_content_type(headers: &mut HeaderMap, codec: &str) {
    let ct = HeaderValue::from_str(&format!("application/connect+{codec}"))
        .unwrap_or(HeaderValue::from_static("application/connect+proto"));
    headers.insert(CONTENT_TYPE, ct);
}

/// An answer that is only its end: the status in `status` (gRPC's headers).
fn ended(codec: &str, status: &HeaderMap) -> Response<Body> {
    let (metadata, status_only) = split(status);
    let mut response = Response::new(body::full(connect::end_stream(&status_only, &metadata)));
    set_content_type(response.headers_mut(), codec);
    response
}

/// `headers` split into metadata and the protocol's own.
fn split(headers: &HeaderMap) -> (HeaderMap, HeaderMap) {
    let mut metadata = HeaderMap::new();
    let mut own = HeaderMap::new();
    for (name, value) in headers {
        if is_protocol_header(name.as_str()) {
            own.append(name.clone(), value.clone());
        } else {
            metadata.append(name.clone(), value.clone());
        }
    }
    (metadata, own)
}

/// A gRPC answer's body whose trailers become the end-of-stream message.
struct Ends {
    body: Body,
    done: bool,
}

impl http_body::Body for Ends {
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
            None => {
                // No trailers at all: an end without error.
                self.done = true;
                let end = connect::end_stream(&HeaderMap::new(), &HeaderMap::new());
                Some(Ok(Frame::data(end)))
            }
            Some(Err(e)) => Some(Err(e)),
            Some(Ok(frame)) => match frame.into_trailers() {
                Ok(trailers) => {
                    self.done = true;
                    let (metadata, status) = split(&trailers);
                    Some(Ok(Frame::data(connect::end_stream(&status, &metadata))))
                }
                Err(frame) => Some(Ok(frame)),
            },
        })
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
