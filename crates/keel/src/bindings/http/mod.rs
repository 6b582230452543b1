#![doc = include_str!("../../../HTTP.md")]
//!
//! # Constants
//!
//! The header names, content types and the status mapping above are also available as items of
//! this module, for code that speaks the convention by hand.

mod body;
pub(crate) mod client;
mod conns;
pub(crate) mod server;
mod service;

pub use service::{HttpBody, HttpService};

use base64::Engine as _;

use crate::core::status::StatusCode;

/// The header every answer carries: the call's [`StatusCode::as_str`] (`ok` on success).
pub const STATUS_HEADER: &str = "keel-status";

/// The request header with the caller's remaining time budget, in whole milliseconds.
pub const DEADLINE_HEADER: &str = "keel-deadline-ms";

/// The content type of JSON bodies (the default when a request has none).
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// The content type of postcard bodies, the binary format keel's own clients send.
pub const POSTCARD_CONTENT_TYPE: &str = "application/x-keel-postcard";

/// The content type of a streamed body (a `ByteStream` parameter or return value).
pub const STREAM_CONTENT_TYPE: &str = "application/octet-stream";

/// The header that marks an answer to a call the host did not process because it was going
/// away (`1`, with `keel-status: shutting_down`): nothing ran, so the call may be sent again,
/// on a new connection (another host may be listening there by then).
pub const UNPROCESSED_HEADER: &str = "keel-unprocessed";

/// The request header carrying the other parameters of an operation whose body is a stream:
/// a JSON object, or postcard in unpadded URL-safe base64 when the call asks for postcard with
/// `Accept`.
pub const ARGS_HEADER: &str = "keel-args";

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
/// One-way operations are answered 202 rather than 200.
pub fn http_status(code: StatusCode) -> u16 {
    match code {
        StatusCode::Ok => 200,
        StatusCode::BadRequest => 400,
        StatusCode::UnknownService | StatusCode::UnknownOperation => 404,
        StatusCode::TooLarge => 413,
        StatusCode::Fault => 422,
        StatusCode::Cancelled => 499,
        StatusCode::HandlerPanicked | StatusCode::Internal => 500,
        StatusCode::Busy | StatusCode::ShuttingDown => 503,
        StatusCode::DeadlineExceeded => 504,
    }
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
