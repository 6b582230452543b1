//! Connect's unary calls: a POST whose body is the message (`Content-Encoding` compressed), or
//! a GET whose query holds it; answered with the reply message as the body (metadata as
//! headers, trailing metadata as `trailer-` headers) or an error as Connect's JSON with the
//! HTTP status Connect's table gives.

use ::http::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_ENCODING, CONTENT_TYPE, VARY};
use ::http::{HeaderMap, Method, Request, Response, Version};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;

use super::super::super::body::{self, Body, ReadError, Received};
use super::super::super::grpc::{connect, frame, GRPC_ENCODING, GRPC_STATUS};
use super::super::grpc::{self, Dialect};
use super::super::Ctx;
use super::{as_grpc_headers, grpc_headers, is_protocol_header};
use crate::core::compress::Compression;
use crate::core::status::{Status, StatusCode};

/// One unary Connect call: a POST with `codec` (`Some`), or a GET (`None`: the codec is in the
/// query).
pub(in crate::bindings::http::server) async fn call<B: Received>(
    ctx: &Ctx,
    req: Request<B>,
    codec: Option<String>,
) -> Response<Body> {
    let h1 = req.version() <= Version::HTTP_11;
    let get = codec.is_none();
    let max = ctx.settings.max_message_size;
    let (parts, incoming) = req.into_parts();
    let (codec, message, compression) = match codec {
        Some(codec) => {
            let compression = parts.headers.get(CONTENT_ENCODING).cloned();
            match read(ctx, incoming, h1).await {
                Ok(message) => (codec, message, compression),
                Err(status) => {
                    let too_large = status.code() == StatusCode::TooLarge;
                    let mut response = error(&as_grpc_headers(&status));
                    if h1 && too_large {
                        // The body may not have been read to its end: the connection cannot
                        // carry another request.
                        response
                            .headers_mut()
                            .insert(CONNECTION, HeaderValue::from_static("close"));
                    }
                    return response;
                }
            }
        }
        None => {
            let query = parts.uri.query().unwrap_or("");
            match connect::parse_get(query, max as usize) {
                Ok(q) => {
                    let compression = q.compression.and_then(|c| HeaderValue::from_str(&c).ok());
                    (q.codec, Bytes::from(q.message), compression)
                }
                Err(why) => {
                    let code = if why.contains("limit") {
                        StatusCode::TooLarge
                    } else {
                        StatusCode::BadRequest
                    };
                    return error(&as_grpc_headers(&Status::new(code, why)));
                }
            }
        }
    };
    let compressed = match compression.as_ref().map(|v| v.to_str()) {
        None => false,
        Some(Ok(v)) if v.trim().eq_ignore_ascii_case("identity") => false,
        Some(Ok(v)) if Compression::from_token(v.trim()).is_some() => true,
        _ => {
            let msg = format!(
                "content encoding {compression:?} is not supported by this host: it accepts {}",
                super::super::super::grpc::ACCEPTED_ENCODINGS
            );
            let status = Status::new(StatusCode::Unimplemented, msg);
            return error(&as_grpc_headers(&status));
        }
    };
    let mut headers = match grpc_headers(
        &parts.headers,
        &codec,
        "content-encoding",
        "accept-encoding",
    ) {
        Ok(h) => h,
        Err(status) => return error(&as_grpc_headers(&status)),
    };
    if let Some(c) = compression.filter(|_| compressed) {
        headers.insert(GRPC_ENCODING, c);
    }
    let mut framed = BytesMut::with_capacity(frame::PREFIX + message.len());
    frame::encode(compressed, &message, &mut framed);
    drop(message);
    let mut grpc_req = Request::new(http_body_util::Full::new(framed.freeze()));
    *grpc_req.method_mut() = Method::POST;
    *grpc_req.uri_mut() = parts.uri;
    *grpc_req.version_mut() = parts.version;
    *grpc_req.headers_mut() = headers;
    let answer = grpc::call(ctx, grpc_req, Dialect::ConnectUnary { get }).await;
    let mut response = translate(answer, &codec).await;
    if get {
        // The same query gets the same answer: caches keep the codings apart.
        response
            .headers_mut()
            .append(VARY, HeaderValue::from_static("accept-encoding"));
    }
    response
}

/// Reads a unary request's body: at most the message size limit, within the frame timeout
/// and the receive budget.
async fn read<B: Received>(ctx: &Ctx, incoming: B, h1: bool) -> Result<Bytes, Status> {
    let limit = ctx.settings.max_message_size;
    let drain = if h1 { body::DRAIN_LIMIT } else { 0 };
    let deadline = tokio::time::Instant::now() + ctx.settings.frame_timeout;
    let read = body::read_limited(incoming, limit, drain, Some((&ctx.budget, deadline)));
    let read = match tokio::time::timeout_at(deadline, read).await {
        Ok(read) => read,
        Err(_) => Err(ReadError::NoRoom),
    };
    match read {
        // The bytes are copied into a framed message at once: the reservation need not stay.
        Ok((bytes, _reserved)) => Ok(bytes),
        Err(ReadError::NoRoom) => {
            ctx.conn.dispatcher.timed_out(ctx.conn.info.binding);
            Err(Status::new(
                StatusCode::BadRequest,
                "the request message did not arrive in time, or the host had no room for it",
            ))
        }
        Err(ReadError::TooLarge { size, .. }) => {
            let size = size.map_or_else(|| "more than".to_string(), |n| n.to_string());
            Err(Status::new(
                StatusCode::TooLarge,
                format!("a request of {size} bytes exceeds this host's limit of {limit} bytes"),
            ))
        }
        Err(ReadError::Broken(e)) => Err(Status::new(
            StatusCode::Cancelled,
            format!("cannot read the request: {e}"),
        )),
    }
}

/// A gRPC answer to a unary call as Connect's.
async fn translate(answer: Response<Body>, codec: &str) -> Response<Body> {
    let (parts, reply) = answer.into_parts();
    if parts.status != ::http::StatusCode::OK {
        return Response::from_parts(parts, reply);
    }
    if parts.headers.contains_key(GRPC_STATUS) {
        return error(&parts.headers);
    }
    // The host's own reply, one message: held whole.
    let collected = match reply.collect().await {
        Ok(c) => c,
        Err(e) => {
            let status = Status::new(StatusCode::Internal, format!("the reply broke: {e}"));
            return error(&as_grpc_headers(&status));
        }
    };
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let data = collected.to_bytes();
    if connect::grpc_status(&trailers).is_some() {
        let mut response = error(&trailers);
        copy_metadata(&parts.headers, "", response.headers_mut());
        return response;
    }
    let message = match frame::one_message(&data, u32::MAX) {
        Ok(Some(m)) => m,
        _ => {
            let status = Status::new(StatusCode::Internal, "the reply was not one message");
            return error(&as_grpc_headers(&status));
        }
    };
    let mut response = Response::new(body::full(message.bytes));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_str(&format!("application/{codec}"))
            .unwrap_or(HeaderValue::from_static("application/proto")),
    );
    if message.compressed {
        if let Some(c) = parts.headers.get(GRPC_ENCODING) {
            headers.insert(CONTENT_ENCODING, c.clone());
        }
    }
    headers.insert(
        HeaderName::from_static("accept-encoding"),
        HeaderValue::from_static(super::super::super::grpc::ACCEPTED_ENCODINGS),
    );
    copy_metadata(&parts.headers, "", headers);
    copy_metadata(&trailers, "trailer-", headers);
    response
}

/// Copies the metadata among `from` (not the protocol's headers) to `to`, names prefixed.
fn copy_metadata(from: &HeaderMap, prefix: &str, to: &mut HeaderMap) {
    for (name, value) in from {
        if is_protocol_header(name.as_str()) {
            continue;
        }
        let name = if prefix.is_empty() {
            Some(name.clone())
        } else {
            HeaderName::from_bytes(format!("{prefix}{}", name.as_str()).as_bytes()).ok()
        };
        if let Some(name) = name {
            to.append(name, value.clone());
        }
    }
}

/// An error answer: the status in `status` (gRPC's headers) as Connect's JSON, with its HTTP
/// status, and the metadata among `status`.
fn error(status: &HeaderMap) -> Response<Body> {
    let (http, json) = connect::error_json(status);
    let bytes = serde_json::to_vec(&json).expect("JSON of JSON values");
    let mut response = Response::new(body::full(Bytes::from(bytes)));
    *response.status_mut() =
        ::http::StatusCode::from_u16(http).unwrap_or(::http::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    copy_metadata(status, "", headers);
    response
}
