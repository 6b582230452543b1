#![doc = include_str!("../../HTTP.md")]
//!
//! # Constants
//!
//! The header names, content types and the status mapping above are also available as items of
//! this module, for code that speaks the convention by hand.

mod body;
pub(crate) mod client;
mod conns;
pub(crate) mod server;

use crate::error::StatusCode;

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

/// The request header carrying the other parameters of an operation whose body is a stream:
/// a JSON object, or hex-encoded postcard when the call asks for postcard with `Accept`.
pub const ARGS_HEADER: &str = "keel-args";

/// HTTP/2 receive window of one stream: what a sender may have in flight on it. Fixed, not
/// hyper's adaptive window, which pings on every burst of DATA frames until the peer's ping-flood
/// protection closes the connection (hyperium/hyper#2526; reproduced here with an upload of
/// 50-byte chunks). 4 MiB covers a 200 ms link at 160 Mbit/s.
pub(crate) const H2_STREAM_WINDOW: u32 = 4 << 20;

/// HTTP/2 receive window of a whole connection: bounds what all its streams together may have
/// buffered at the receiver.
pub(crate) const H2_CONNECTION_WINDOW: u32 = 8 << 20;

/// Lower-case hex of `bytes`.
pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The bytes of hex text (either case); `None` if it is not hex.
pub(crate) fn hex_decode(text: &[u8]) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        (c as char).to_digit(16).map(|d| d as u8)
    }
    if text.len() % 2 != 0 {
        return None;
    }
    text.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
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
        _ => 500,
    }
}

/// The code whose [`StatusCode::as_str`] is `s`.
pub(crate) fn status_code_from_str(s: &str) -> Option<StatusCode> {
    (0..=u8::MAX)
        .map_while(StatusCode::from_u8)
        .find(|c| c.as_str() == s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_name() {
        for c in (0..=u8::MAX).map_while(StatusCode::from_u8) {
            assert_eq!(status_code_from_str(c.as_str()), Some(c));
            assert!((200..600).contains(&http_status(c)));
        }
        assert_eq!(status_code_from_str("nope"), None);
    }

    #[test]
    fn hex_round_trips_and_rejects_non_hex() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_decode(hex_encode(&all).as_bytes()), Some(all));
        assert_eq!(hex_decode(b"0A0b"), Some(vec![10, 11]));
        assert_eq!(hex_decode(b"abc"), None);
        assert_eq!(hex_decode(b"zz"), None);
    }
}
