//! The answers that are not a call's own: errors (the status code from the table, `keel-status`,
//! the details header, the body in the call's format), and the headers every answer carries.

use ::http::header::{HeaderValue, ACCEPT_ENCODING, ALLOW, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use ::http::{Method, Response};
use bytes::Bytes;
use serde::Serialize;

use super::super::body::{self, Body};
use super::super::{
    details_encode, http_status, metadata_to_headers, DETAILS, JSON_CONTENT_TYPE,
    MSGPACK_CONTENT_TYPE, POSTCARD_CONTENT_TYPE, STATUS, UNPROCESSED,
};
use crate::core::format::Format;
use crate::core::status::{Status, StatusCode};

/// A request head over the HTTP/1.1 limit: 431, and the connection closes.
pub(super) fn head_too_large() -> Response<Body> {
    let msg = format!(
        "the request head exceeds this host's limit of {} bytes",
        super::super::H1_MAX_BUF
    );
    let mut response = error(Status::new(StatusCode::BadRequest, msg), Format::Json);
    *response.status_mut() = ::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

pub(super) fn wrong_method(method: &Method, path: &str, allowed: Method) -> Response<Body> {
    let msg = format!("{method} is not allowed on `{path}`; use {allowed}");
    let mut response = error(Status::new(StatusCode::BadRequest, msg), Format::Json);
    *response.status_mut() = ::http::StatusCode::METHOD_NOT_ALLOWED;
    let allowed = HeaderValue::from_str(allowed.as_str()).expect("a method is a header value");
    response.headers_mut().insert(ALLOW, allowed);
    response
}

pub(super) fn unsupported_encoding(encoding: &str) -> Response<Body> {
    let msg = format!(
        "content encoding `{encoding}` is not supported: send zstd, gzip or identity (and a \
         streamed upload uncompressed)"
    );
    let mut response = error(Status::new(StatusCode::BadRequest, msg), Format::Json);
    *response.status_mut() = ::http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    response
        .headers_mut()
        .insert(ACCEPT_ENCODING, HeaderValue::from_static("zstd, gzip"));
    response
}

pub(super) fn unsupported_media_type(content_type: &str) -> Response<Body> {
    // `curl -d` sends form data unless told otherwise: the most common way to get here.
    let hint = if content_type.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        " (with curl: add -H 'content-type: application/json', or use --json)"
    } else if content_type.eq_ignore_ascii_case(POSTCARD_CONTENT_TYPE) {
        " (postcard bodies, from keel's clients before MessagePack, need keel's feature `wire-v1` \
         on the host)"
    } else {
        ""
    };
    let accepted = if cfg!(feature = "wire-v1") {
        format!("{JSON_CONTENT_TYPE}, {MSGPACK_CONTENT_TYPE} or {POSTCARD_CONTENT_TYPE}")
    } else {
        format!("{JSON_CONTENT_TYPE} or {MSGPACK_CONTENT_TYPE}")
    };
    let msg = format!("content type `{content_type}` is not supported: send {accepted}{hint}");
    let mut response = error(Status::new(StatusCode::BadRequest, msg), Format::Json);
    *response.status_mut() = ::http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    response
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: Option<serde_json::Value>,
    /// The status's details, base64 (as the `keel-status-details` header).
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<String>,
}

/// An error answer: the status code from the table, `keel-status`, the details header, the
/// status's metadata as headers, and the body in `format`.
pub(super) fn error(status: Status, format: Format) -> Response<Body> {
    let code = status.code();
    let details = (code != StatusCode::Fault && !status.details().is_empty())
        .then(|| details_encode(status.details()));
    let (body, content_type) = match format {
        Format::Json => {
            let fault = (code == StatusCode::Fault).then(|| {
                serde_json::from_slice(status.details()).unwrap_or(serde_json::Value::Null)
            });
            let body = ErrorBody {
                code: code.as_str(),
                message: fault.is_none().then(|| status.message()),
                fault,
                details: details.clone(),
            };
            let json = serde_json::to_vec(&body).expect("an error body always serializes");
            (Bytes::from(json), JSON_CONTENT_TYPE)
        }
        _ if code == StatusCode::Fault => {
            (status.clone().into_wire_parts().0, content_type(format))
        }
        _ => (
            status.clone().into_wire_parts().0,
            "text/plain; charset=utf-8",
        ),
    };
    let mut response = Response::new(body::full(body));
    metadata_to_headers(status.metadata(), response.headers_mut());
    if let Some(details) = details.and_then(|d| HeaderValue::from_str(&d).ok()) {
        response.headers_mut().insert(DETAILS, details);
    }
    *response.status_mut() = ::http::StatusCode::from_u16(http_status(code))
        .unwrap_or(::http::StatusCode::INTERNAL_SERVER_ERROR);
    set_content_type(&mut response, content_type);
    set_status_header(&mut response, code);
    if matches!(code, StatusCode::Busy | StatusCode::ShuttingDown) {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// The answer to a call that arrived while the host drains: 503 `shutting_down`, marked as not
/// processed, so a client may send it again on a new connection.
pub(super) fn unprocessed(format: Format) -> Response<Body> {
    let msg = "the host is going away and did not process the call";
    let mut response = error(Status::new(StatusCode::ShuttingDown, msg), format);
    response
        .headers_mut()
        .insert(UNPROCESSED, HeaderValue::from_static("1"));
    response
}

pub(super) fn content_type(format: Format) -> &'static str {
    match format {
        Format::Postcard => POSTCARD_CONTENT_TYPE,
        Format::MsgPack => MSGPACK_CONTENT_TYPE,
        _ => JSON_CONTENT_TYPE,
    }
}

pub(super) fn set_content_type(response: &mut Response<Body>, content_type: &'static str) {
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
}

pub(super) fn set_status_header(response: &mut Response<Body>, code: StatusCode) {
    response
        .headers_mut()
        .insert(STATUS, HeaderValue::from_static(code.as_str()));
}
