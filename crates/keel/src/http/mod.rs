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
}
