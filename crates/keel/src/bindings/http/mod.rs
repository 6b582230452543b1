#![doc = include_str!("../../../HTTP.md")]
//!
//! # Constants
//!
//! The header names, content types and the status mapping above are also available as items of
//! this module, for code that speaks the convention by hand.

mod accept_encoding;
mod body;
pub(crate) mod client;
mod conns;
mod cors;
mod grpc;
mod h2conn;
pub(crate) mod server;
mod service;

pub use cors::Cors;
pub use grpc::codes::{code_from_grpc, grpc_code};
pub use service::{HttpBody, HttpService};

use base64::Engine as _;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::core::metadata::Metadata;
use crate::core::status::StatusCode;

/// The header every answer carries: the call's [`StatusCode::as_str`] (`ok` on success).
pub const STATUS_HEADER: &str = "keel-status";

/// The request header with the caller's remaining time budget, in whole milliseconds.
pub const DEADLINE_HEADER: &str = "keel-deadline-ms";

/// The answer header with a status's details (see [`Status::details`](crate::Status::details)),
/// in unpadded standard base64; absent when there are none.
pub const DETAILS_HEADER: &str = "keel-status-details";

/// The content type of JSON bodies (the default when a request has none).
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// The content type of MessagePack bodies, the binary format keel's own clients send (structs
/// as maps keyed by field name, arguments as a map keyed by parameter name, bytes as `bin`).
pub const MSGPACK_CONTENT_TYPE: &str = "application/vnd.msgpack";

/// The content type of postcard bodies, the binary format keel's clients sent before
/// MessagePack; still accepted by a host built with keel's feature `wire-v1` (postcard is
/// positional: it does not let a contract evolve).
pub const POSTCARD_CONTENT_TYPE: &str = "application/x-keel-postcard";

/// The content type of a streamed body (a `ByteStream` parameter or return value).
pub const STREAM_CONTENT_TYPE: &str = "application/octet-stream";

/// The content type of a stream of JSON messages (a `MessageStream<T>` parameter or return
/// value, for callers that send or accept JSON): one message per line.
pub const NDJSON_CONTENT_TYPE: &str = "application/x-ndjson";

/// The content type of a reply stream of JSON messages as Server-Sent Events, for callers that
/// send `Accept: text/event-stream` (a browser's `EventSource`).
pub const SSE_CONTENT_TYPE: &str = "text/event-stream";

/// The content type of a stream of binary messages (MessagePack or postcard, as the call's
/// `Accept` chose): length-prefixed frames (see HTTP.md, "Streams of messages").
pub const MESSAGES_CONTENT_TYPE: &str = "application/x-keel-messages";

/// The header that marks an answer to a call the host did not process because it was going
/// away (`1`, with `keel-status: shutting_down`): nothing ran, so the call may be sent again,
/// on a new connection (another host may be listening there by then).
pub const UNPROCESSED_HEADER: &str = "keel-unprocessed";

/// The request header carrying the other parameters of an operation whose body is a stream:
/// a JSON object, or MessagePack (postcard) in unpadded URL-safe base64 when the call asks for
/// MessagePack (postcard) with `Accept`.
pub const ARGS_HEADER: &str = "keel-args";

// keel's header names, parsed once: a `HeaderMap` lookup or insert by `&str` parses and
// checks the name every time.
/// [`STATUS_HEADER`] as a header name.
pub(crate) const STATUS: HeaderName = HeaderName::from_static(STATUS_HEADER);
/// [`DEADLINE_HEADER`] as a header name.
pub(crate) const DEADLINE: HeaderName = HeaderName::from_static(DEADLINE_HEADER);
/// [`DETAILS_HEADER`] as a header name.
pub(crate) const DETAILS: HeaderName = HeaderName::from_static(DETAILS_HEADER);
/// [`UNPROCESSED_HEADER`] as a header name.
pub(crate) const UNPROCESSED: HeaderName = HeaderName::from_static(UNPROCESSED_HEADER);
/// [`ARGS_HEADER`] as a header name.
pub(crate) const ARGS: HeaderName = HeaderName::from_static(ARGS_HEADER);

/// HTTP/2 receive window of one stream: what a sender may have in flight on it. Fixed, not
/// hyper's adaptive window, which pings on every burst of DATA frames until the peer's ping-flood
/// protection closes the connection (hyperium/hyper#2526; reproduced here with an upload of
/// 50-byte chunks). 4 MiB covers a 200 ms link at 160 Mbit/s.
pub(crate) const H2_STREAM_WINDOW: u32 = 4 << 20;

/// HTTP/1.1: the most a connection buffers of a request head (and of a body chunk being read);
/// a head that does not fit is refused (431).
pub(crate) const H1_MAX_BUF: usize = 64 * 1024;

/// HTTP/2: the largest header list (a request's headers, decoded) a connection accepts.
pub(crate) const H2_MAX_HEADER_LIST: u32 = 64 * 1024;

/// HTTP/2 receive window of a whole connection: bounds what all its streams together may have
/// buffered at the receiver.
pub(crate) const H2_CONNECTION_WINDOW: u32 = 8 << 20;

/// `bytes` as the `keel-args` header carries postcard: unpadded URL-safe base64.
pub(crate) fn args_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The bytes of a `keel-args` header in postcard form; `None` if it is not such base64.
pub(crate) fn args_decode(text: &[u8]) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()
}

/// The HTTP status an answer with `code` is sent with (see the table in the module docs).
/// One-way operations are answered 202 rather than 200. The gRPC codes follow Google's
/// mapping (`google/rpc/code.proto`).
pub fn http_status(code: StatusCode) -> u16 {
    match code {
        StatusCode::Ok => 200,
        StatusCode::BadRequest
        | StatusCode::InvalidArgument
        | StatusCode::FailedPrecondition
        | StatusCode::OutOfRange => 400,
        StatusCode::Unauthenticated => 401,
        StatusCode::PermissionDenied => 403,
        StatusCode::UnknownService | StatusCode::UnknownOperation | StatusCode::NotFound => 404,
        StatusCode::AlreadyExists | StatusCode::Aborted => 409,
        StatusCode::TooLarge => 413,
        StatusCode::Fault => 422,
        StatusCode::ResourceExhausted => 429,
        StatusCode::Cancelled => 499,
        StatusCode::HandlerPanicked
        | StatusCode::Internal
        | StatusCode::Unknown
        | StatusCode::DataLoss => 500,
        StatusCode::Unimplemented => 501,
        StatusCode::Busy | StatusCode::ShuttingDown | StatusCode::Unavailable => 503,
        StatusCode::DeadlineExceeded => 504,
    }
}

/// The metadata in `headers`: every header whose name is a valid, unreserved metadata key
/// (see [`Metadata`]), with a `-bin` header's value decoded from base64 (padded or not).
/// Headers that cannot be metadata (reserved names, values that are not printable ASCII or
/// not base64) are left out.
pub(crate) fn metadata_from_headers(headers: &HeaderMap) -> Metadata {
    metadata_from_headers_except(headers, "")
}

/// [`metadata_from_headers`], leaving out the header `except` too (a lower-case name; `""`:
/// none), so that one the caller does not want costs nothing.
pub(crate) fn metadata_from_headers_except(headers: &HeaderMap, except: &str) -> Metadata {
    let mut md = Metadata::new();
    for (name, value) in headers {
        let key = name.as_str();
        if key == except
            || Metadata::is_reserved(key)
            || key.starts_with("access-control-")
            || !keel_wire::metadata::is_valid_key(key)
        {
            continue;
        }
        let bytes = value.as_bytes();
        if keel_wire::metadata::is_binary_key(key) {
            let text = bytes
                .strip_suffix(b"==")
                .or_else(|| bytes.strip_suffix(b"="));
            let decoded =
                base64::engine::general_purpose::STANDARD_NO_PAD.decode(text.unwrap_or(bytes));
            if let Ok(decoded) = decoded {
                md.push_raw(key, decoded.into());
            }
        } else if keel_wire::metadata::is_valid_text_value(bytes) {
            md.push_raw(key, bytes::Bytes::copy_from_slice(bytes));
        }
    }
    md
}

/// Adds `metadata` to `headers`, a `-bin` value in unpadded standard base64.
pub(crate) fn metadata_to_headers(metadata: &Metadata, headers: &mut HeaderMap) {
    for (key, value) in metadata.iter() {
        let Ok(name) = HeaderName::from_bytes(key.as_bytes()) else {
            continue;
        };
        let value = if keel_wire::metadata::is_binary_key(key) {
            HeaderValue::from_str(&base64::engine::general_purpose::STANDARD_NO_PAD.encode(value))
        } else {
            HeaderValue::from_bytes(value)
        };
        if let Ok(value) = value {
            headers.append(name, value);
        }
    }
}

/// `details` as the [`DETAILS_HEADER`] carries them.
pub(crate) fn details_encode(details: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(details)
}

/// The bytes of a [`DETAILS_HEADER`]; `None` if it is not base64.
pub(crate) fn details_decode(text: &[u8]) -> Option<Vec<u8>> {
    let text = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(text)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_name() {
        for c in StatusCode::ALL {
            assert_eq!(StatusCode::from_name(c.as_str()), Some(c));
            assert!((200..600).contains(&http_status(c)));
        }
        assert_eq!(StatusCode::from_name("nope"), None);
    }

    #[test]
    fn metadata_maps_to_headers_and_back() {
        let mut md = Metadata::new();
        md.insert("authorization", "Bearer t").unwrap();
        md.append("x-tenant", "a")
            .unwrap()
            .append("x-tenant", "b")
            .unwrap();
        md.insert_bin("trace-bin", vec![0u8, 1, 255]).unwrap();
        let mut headers = HeaderMap::new();
        metadata_to_headers(&md, &mut headers);
        assert_eq!(headers["trace-bin"], "AAH/");
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("keel-deadline-ms", HeaderValue::from_static("5"));
        headers.insert("x-raw", HeaderValue::from_bytes(&[0xe9]).unwrap());
        headers.insert("bad-bin", HeaderValue::from_static("***"));
        assert_eq!(metadata_from_headers(&headers), md);
        // Padded base64 is accepted too.
        let mut padded = HeaderMap::new();
        padded.insert("k-bin", HeaderValue::from_static("AQ=="));
        assert_eq!(
            metadata_from_headers(&padded).get_bin("k-bin"),
            Some(&[1u8][..])
        );
        assert_eq!(
            details_decode(details_encode(&[9, 8]).as_bytes()),
            Some(vec![9, 8])
        );
    }

    #[test]
    fn args_round_trip_and_reject_what_is_not_base64() {
        let all: Vec<u8> = (0..=255).collect();
        let text = args_encode(&all);
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(args_decode(text.as_bytes()), Some(all));
        assert_eq!(args_decode(b"AQI"), Some(vec![1, 2]));
        assert_eq!(args_decode(b"a+b/"), None);
        assert_eq!(args_decode(b"A"), None);
    }

    proptest::proptest! {
        /// The `keel-args` header decoder (`pub(crate)`, so no fuzz target reaches it): any
        /// header value is decoded or refused without a panic, what it accepts is canonical
        /// (re-encodes to the same text), and every byte string round-trips.
        #[test]
        fn args_header_never_panics_and_round_trips(
            text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            b64 in "[A-Za-z0-9_=+/-]{0,64}",
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            for text in [&text[..], b64.as_bytes()] {
                if let Some(decoded) = args_decode(text) {
                    let again = args_encode(&decoded);
                    proptest::prop_assert_eq!(again.as_bytes(), text);
                }
            }
            proptest::prop_assert_eq!(args_decode(args_encode(&bytes).as_bytes()), Some(bytes));
        }
    }
}
