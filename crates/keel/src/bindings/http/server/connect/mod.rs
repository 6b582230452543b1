//! The Connect protocol (GRPC.md, "Connect"): unary calls (`POST` with `application/proto` or
//! `application/json`, and `GET` for `#[keel(idempotent)]` operations) and streaming calls
//! (`application/connect+proto`, `+json`). Each request is turned into the gRPC request it
//! means and answered by `grpc/` (routing, dispatch, limits, status, metadata, compression);
//! the gRPC answer is turned back into Connect's.
//!
//! One concern per file:
//! - `mod.rs`: which requests are Connect ([`classify`]), and the headers both kinds translate;
//! - `unary.rs`: unary calls, POST and GET, and their answers (the message, or the error JSON);
//! - `stream.rs`: streaming calls, and their end-of-stream message.
//!
//! The pieces that do no IO (content types, codes, error JSON, GET query) are in
//! `bindings/http/grpc/connect.rs`.

mod stream;
mod unary;

use ::http::header::{HeaderValue, CONTENT_TYPE};
use ::http::{HeaderMap, Method, Request};

use super::super::grpc::connect::{self, Kind, PROTOCOL_VERSION, TIMEOUT_MS};
use super::super::grpc::{status_headers, GRPC_TIMEOUT};
use crate::core::status::{Status, StatusCode};

pub(super) use stream::call as stream_call;
pub(super) use unary::call as unary_call;

/// What Connect request `req` is, if it is one.
#[derive(Debug)]
pub(super) enum ConnectRequest {
    /// A unary POST with this codec.
    Unary(String),
    /// A unary GET (its codec is in the query).
    Get,
    /// A streaming call with this codec.
    Streaming(String),
}

/// Whether `req` speaks Connect, and how. `application/json` is Connect's only when the request
/// says so (`Connect-Protocol-Version`) or its path names a gRPC service with a package
/// (`/{package}.{Service}/{Method}`: keel's own paths have no `.` in their first segment);
/// otherwise it is keel's convention. A GET is Connect's when its query has `connect=v1`.
pub(super) fn classify<B>(req: &Request<B>) -> Option<ConnectRequest> {
    let path = req.uri().path();
    let dotted = path
        .strip_prefix('/')
        .and_then(|p| p.split_once('/'))
        .is_some_and(|(service, _)| service.contains('.'));
    if req.method() == Method::GET {
        let query = req.uri().query().unwrap_or("");
        let asks = query.split('&').any(|kv| kv == "connect=v1");
        return (asks && dotted).then_some(ConnectRequest::Get);
    }
    let ct = req.headers().get(CONTENT_TYPE)?.to_str().ok()?;
    let json_is_connect = dotted || req.headers().contains_key(PROTOCOL_VERSION);
    match connect::kind(ct, json_is_connect)? {
        Kind::Unary(codec) => Some(ConnectRequest::Unary(codec)),
        Kind::Streaming(codec) => Some(ConnectRequest::Streaming(codec)),
    }
}

/// The request headers the gRPC path should see for a Connect request with `codec`: Connect's
/// own headers (`connect-*`, `content-type` and the HTTP codings) replaced by gRPC's; the
/// rest (metadata) kept. `encoding` and `accept` are the request's codings as Connect names
/// them for this kind of call.
fn grpc_headers(
    headers: &HeaderMap,
    codec: &str,
    encoding: &str,
    accept: &str,
) -> Result<HeaderMap, Status> {
    let mut out = HeaderMap::with_capacity(headers.len() + 2);
    for (name, value) in headers {
        let n = name.as_str();
        let dropped = n.starts_with("connect-")
            || n == encoding
            || n == accept
            || matches!(
                n,
                "content-type" | "content-length" | "accept-encoding" | "content-encoding"
            )
            || n.starts_with("grpc-");
        if !dropped {
            out.append(name.clone(), value.clone());
        }
    }
    let ct = format!("application/grpc+{codec}");
    out.insert(
        CONTENT_TYPE,
        HeaderValue::from_str(&ct).map_err(|_| bad("the content type's codec is not a token"))?,
    );
    if let Some(v) = headers.get(TIMEOUT_MS) {
        let grpc = connect::timeout_as_grpc(v.as_bytes())
            .map_err(|why| bad(&format!("malformed {TIMEOUT_MS} header {v:?}: {why}")))?;
        let value = HeaderValue::from_str(&grpc).expect("digits and a unit");
        out.insert(GRPC_TIMEOUT, value);
    }
    if let Some(v) = headers.get(encoding) {
        out.insert(super::super::grpc::GRPC_ENCODING, v.clone());
    }
    for v in headers.get_all(accept) {
        out.append(super::super::grpc::GRPC_ACCEPT_ENCODING, v.clone());
    }
    Ok(out)
}

fn bad(msg: &str) -> Status {
    Status::new(StatusCode::BadRequest, msg.to_string())
}

/// A status as gRPC's headers carry it (for answers made here, before the gRPC path).
fn as_grpc_headers(status: &Status) -> HeaderMap {
    let mut h = HeaderMap::new();
    status_headers(status, None, &mut h);
    h
}

/// Whether a header of a gRPC answer is the protocol's own (not metadata).
fn is_protocol_header(name: &str) -> bool {
    name.starts_with("grpc-") || matches!(name, "content-type" | "content-length" | "date")
}
