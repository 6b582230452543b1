//! gRPC's status codes (`doc/statuscodes.md`) and keel's [`StatusCode`], both ways (the table
//! is in GRPC.md, "Status codes"), and `grpc-message`'s percent-encoding. Sans-IO.

use crate::core::status::StatusCode;

/// The gRPC status code (0 to 16) an answer with keel's `code` carries in `grpc-status`.
///
/// keel's own codes map to what the gRPC libraries generate in the same case
/// (`doc/statuscodes.md`): `unknown_service` and `unknown_operation` to `UNIMPLEMENTED` (12),
/// `bad_request` (a request that does not decode) to `INTERNAL` (13), `too_large` and `busy`
/// to `RESOURCE_EXHAUSTED` (8), `shutting_down` to `UNAVAILABLE` (14), `handler_panicked` to
/// `UNKNOWN` (2, an application's exception); a typed fault is `UNKNOWN` (2) with the fault in
/// `grpc-status-details-bin`. Every other code is gRPC's own.
pub fn grpc_code(code: StatusCode) -> u32 {
    match code {
        StatusCode::Ok => 0,
        StatusCode::Cancelled => 1,
        StatusCode::Unknown | StatusCode::Fault | StatusCode::HandlerPanicked => 2,
        StatusCode::InvalidArgument => 3,
        StatusCode::DeadlineExceeded => 4,
        StatusCode::NotFound => 5,
        StatusCode::AlreadyExists => 6,
        StatusCode::PermissionDenied => 7,
        StatusCode::ResourceExhausted | StatusCode::TooLarge | StatusCode::Busy => 8,
        StatusCode::FailedPrecondition => 9,
        StatusCode::Aborted => 10,
        StatusCode::OutOfRange => 11,
        StatusCode::Unimplemented | StatusCode::UnknownService | StatusCode::UnknownOperation => 12,
        StatusCode::Internal | StatusCode::BadRequest => 13,
        StatusCode::Unavailable | StatusCode::ShuttingDown => 14,
        StatusCode::DataLoss => 15,
        StatusCode::Unauthenticated => 16,
    }
}

/// keel's code for the gRPC status code `code`: gRPC's seventeen codes are keel's codes of the
/// same names; any other number reads as [`StatusCode::Unknown`], as gRPC's libraries read
/// it. (A `2` whose `grpc-status-details-bin` holds the operation's fault type is a typed
/// fault, [`StatusCode::Fault`]: that takes the details, which this function does not see.)
pub fn code_from_grpc(code: u32) -> StatusCode {
    match code {
        0 => StatusCode::Ok,
        1 => StatusCode::Cancelled,
        3 => StatusCode::InvalidArgument,
        4 => StatusCode::DeadlineExceeded,
        5 => StatusCode::NotFound,
        6 => StatusCode::AlreadyExists,
        7 => StatusCode::PermissionDenied,
        8 => StatusCode::ResourceExhausted,
        9 => StatusCode::FailedPrecondition,
        10 => StatusCode::Aborted,
        11 => StatusCode::OutOfRange,
        12 => StatusCode::Unimplemented,
        13 => StatusCode::Internal,
        14 => StatusCode::Unavailable,
        15 => StatusCode::DataLoss,
        16 => StatusCode::Unauthenticated,
        _ => StatusCode::Unknown,
    }
}

/// The gRPC code a gRPC client reads from an answer without `grpc-status` whose HTTP status is
/// not 200, as gRPC's `doc/http-grpc-status-mapping.md` says: 400 `INTERNAL`, 401
/// `UNAUTHENTICATED`, 403 `PERMISSION_DENIED`, 404 `UNIMPLEMENTED`, 429, 502, 503 and 504
/// `UNAVAILABLE`, anything else `UNKNOWN`.
pub(crate) fn code_from_http(status: u16) -> StatusCode {
    match status {
        400 => StatusCode::Internal,
        401 => StatusCode::Unauthenticated,
        403 => StatusCode::PermissionDenied,
        404 => StatusCode::Unimplemented,
        429 | 502 | 503 | 504 => StatusCode::Unavailable,
        _ => StatusCode::Unknown,
    }
}

/// `message` as `grpc-message` carries it: UTF-8, every byte outside printable ASCII
/// (`0x20`–`0x7E`) and `%` itself as `%XX` (upper-case hex).
pub(crate) fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
        }
    }
    out
}

/// A `grpc-message` value decoded: `%XX` sequences as bytes, the result as UTF-8 (invalid
/// sequences replaced); a `%` not followed by two hex digits is kept as it is, as the spec
/// asks of receivers.
pub(crate) fn percent_decode(value: &[u8]) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%' {
            if let (Some(h), Some(l)) = (
                value.get(i + 1).copied().and_then(hex),
                value.get(i + 2).copied().and_then(hex),
            ) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(value[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_keel_code_has_a_grpc_code_and_grpc_codes_come_back() {
        for code in StatusCode::ALL {
            let g = grpc_code(code);
            assert!(g <= 16, "{code:?}");
            // keel's codes that are gRPC's own come back as themselves.
            let back = code_from_grpc(g);
            assert_eq!(grpc_code(back), g, "{code:?}");
        }
        for g in 0..=16 {
            assert_eq!(grpc_code(code_from_grpc(g)), g);
        }
        assert_eq!(code_from_grpc(17), StatusCode::Unknown);
        assert_eq!(code_from_grpc(u32::MAX), StatusCode::Unknown);
        assert_eq!(grpc_code(StatusCode::UnknownService), 12);
        assert_eq!(grpc_code(StatusCode::TooLarge), 8);
        assert_eq!(grpc_code(StatusCode::ShuttingDown), 14);
        assert_eq!(grpc_code(StatusCode::DeadlineExceeded), 4);
    }

    #[test]
    fn http_statuses_map_as_grpc_says() {
        assert_eq!(code_from_http(404), StatusCode::Unimplemented);
        assert_eq!(code_from_http(503), StatusCode::Unavailable);
        assert_eq!(code_from_http(401), StatusCode::Unauthenticated);
        assert_eq!(code_from_http(500), StatusCode::Unknown);
    }

    #[test]
    fn messages_are_percent_encoded_as_the_spec_says() {
        assert_eq!(percent_encode("no change"), "no change");
        assert_eq!(percent_encode("100% 🙂\n"), "100%25 %F0%9F%99%82%0A");
        for s in ["", "a%b", "ünïcödé\t\r\n", "%%%"] {
            assert_eq!(percent_decode(percent_encode(s).as_bytes()), s);
        }
        // A lone `%` is kept.
        assert_eq!(percent_decode(b"50%"), "50%");
        assert_eq!(percent_decode(b"%zz%4"), "%zz%4");
    }
}
