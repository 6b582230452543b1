//! The Connect protocol's own pieces (connectrpc.com/docs/protocol), with no IO: its content
//! types, its error codes and their HTTP statuses, an error as Connect's JSON (made from a
//! status as gRPC's headers carry it), the end-of-stream message, `Connect-Timeout-Ms`, and
//! the query of a unary GET.

use base64::Engine as _;
use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;
use serde_json::{json, Map, Value};

use super::{codes, details, GRPC_MESSAGE, GRPC_STATUS, GRPC_STATUS_DETAILS};

/// The flags byte of a streaming response's last message, the end of the stream.
pub(crate) const END_STREAM_FLAG: u8 = 0x02;

/// The header with the protocol's version (`1`).
pub(crate) const PROTOCOL_VERSION: &str = "connect-protocol-version";
/// The caller's time budget, in milliseconds.
pub(crate) const TIMEOUT_MS: &str = "connect-timeout-ms";
/// How a streaming request's messages are compressed.
pub(crate) const CONTENT_ENCODING: &str = "connect-content-encoding";
/// How a streaming answer's messages may be compressed.
pub(crate) const ACCEPT_ENCODING: &str = "connect-accept-encoding";

/// What kind of Connect request a content type makes, and its message codec (`"proto"` or
/// `"json"`, lower case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `application/{codec}`: a unary call.
    Unary(String),
    /// `application/connect+{codec}`: a streaming call.
    Streaming(String),
}

/// The Connect kind of a content type: `application/connect+{codec}` always; `application/proto`
/// always (keel's convention has no such type); `application/json` only when `json_is_connect`
/// (the caller decides: see GRPC.md, "Connect"). `None`: not Connect.
pub(crate) fn kind(content_type: &str, json_is_connect: bool) -> Option<Kind> {
    let t = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if let Some(codec) = t.strip_prefix("application/connect+") {
        return (!codec.is_empty()).then(|| Kind::Streaming(codec.to_string()));
    }
    match t.as_str() {
        "application/proto" => Some(Kind::Unary("proto".into())),
        "application/json" if json_is_connect => Some(Kind::Unary("json".into())),
        _ => None,
    }
}

/// Connect's name for a gRPC code, and the HTTP status a unary error answer carries.
pub(crate) fn code_name(grpc: u32) -> (&'static str, u16) {
    match grpc {
        1 => ("canceled", 499),
        3 => ("invalid_argument", 400),
        4 => ("deadline_exceeded", 504),
        5 => ("not_found", 404),
        6 => ("already_exists", 409),
        7 => ("permission_denied", 403),
        8 => ("resource_exhausted", 429),
        9 => ("failed_precondition", 400),
        10 => ("aborted", 409),
        11 => ("out_of_range", 400),
        12 => ("unimplemented", 501),
        13 => ("internal", 500),
        14 => ("unavailable", 503),
        15 => ("data_loss", 500),
        16 => ("unauthenticated", 401),
        _ => ("unknown", 500),
    }
}

/// The gRPC status in `headers` (`grpc-status`; `None` if absent or `0`).
pub(crate) fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    let code = headers
        .get(GRPC_STATUS)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(2);
    headers
        .get(GRPC_STATUS)
        .is_some()
        .then_some(code)
        .filter(|c| *c != 0)
}

/// The error a status in gRPC's headers (`grpc-status`, `grpc-message`,
/// `grpc-status-details-bin`) is in Connect's JSON: `{"code", "message", "details": [{"type",
/// "value"}]}`, each detail's type without `type.googleapis.com/` and its value in unpadded
/// base64. With the HTTP status of a unary answer.
pub(crate) fn error_json(headers: &HeaderMap) -> (u16, Value) {
    let grpc = grpc_status(headers).unwrap_or(2);
    let (code, http) = code_name(grpc);
    let mut error = Map::new();
    error.insert("code".into(), json!(code));
    let message = headers
        .get(GRPC_MESSAGE)
        .map(|v| codes::percent_decode(v.as_bytes()))
        .unwrap_or_default();
    if !message.is_empty() {
        error.insert("message".into(), json!(message));
    }
    let decoded = headers
        .get(GRPC_STATUS_DETAILS)
        .and_then(|v| {
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(
                    v.as_bytes()
                        .trim_ascii_end()
                        .strip_suffix(b"==")
                        .unwrap_or(v.as_bytes()),
                )
                .ok()
        })
        .and_then(|b| details::decode(&b));
    if let Some(status) = decoded {
        let details: Vec<Value> = status
            .details
            .iter()
            .map(|any| {
                let ty = any
                    .type_url
                    .rsplit_once('/')
                    .map_or(any.type_url.as_str(), |(_, t)| t);
                json!({
                    "type": ty,
                    "value": base64::engine::general_purpose::STANDARD_NO_PAD.encode(&any.value),
                })
            })
            .collect();
        if !details.is_empty() {
            error.insert("details".into(), Value::Array(details));
        }
    }
    (http, Value::Object(error))
}

/// Metadata as Connect's JSON (`{"key": ["value", ...]}`), from headers.
pub(crate) fn metadata_json(headers: &HeaderMap) -> Value {
    let mut out = Map::new();
    for (name, value) in headers {
        let Ok(value) = value.to_str() else { continue };
        let entry = out
            .entry(name.as_str().to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(values) = entry {
            values.push(json!(value));
        }
    }
    Value::Object(out)
}

/// The end-of-stream message of a streaming answer: flags `0x02`, then `{"error"?,
/// "metadata"?}` made from the gRPC trailers `trailers` (the status) and `metadata`.
pub(crate) fn end_stream(trailers: &HeaderMap, metadata: &HeaderMap) -> Bytes {
    let mut end = Map::new();
    if grpc_status(trailers).is_some() {
        end.insert("error".into(), error_json(trailers).1);
    }
    if !metadata.is_empty() {
        end.insert("metadata".into(), metadata_json(metadata));
    }
    let body = serde_json::to_vec(&Value::Object(end)).expect("JSON of JSON values");
    let mut out = BytesMut::with_capacity(super::frame::PREFIX + body.len());
    out.put_u8(END_STREAM_FLAG);
    out.put_u32(body.len() as u32);
    out.put_slice(&body);
    out.freeze()
}

/// `Connect-Timeout-Ms` as `grpc-timeout` says it: at most 10 digits, positive.
pub(crate) fn timeout_as_grpc(value: &[u8]) -> Result<String, &'static str> {
    if value.is_empty() || value.len() > 10 || !value.iter().all(u8::is_ascii_digit) {
        return Err("expected 1 to 10 digits (milliseconds)");
    }
    let ms: u64 = std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("expected 1 to 10 digits (milliseconds)")?;
    // grpc-timeout allows 8 digits: larger values in seconds (rounded up).
    Ok(if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", ms.div_ceil(1000))
    })
}

/// A unary GET's query (`connect=v1&encoding=..&message=..&base64=1&compression=..`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GetQuery {
    /// `encoding`: the codec, `proto` or `json`.
    pub(crate) codec: String,
    /// `message`, decoded (from base64 if `base64=1`); still compressed if `compression` is.
    pub(crate) message: Vec<u8>,
    /// `compression`, if not `identity`.
    pub(crate) compression: Option<String>,
}

/// Parses a unary GET's query; refuses a `message` longer than `max` bytes (before decoding
/// it further than its percent-encoding).
pub(crate) fn parse_get(query: &str, max: usize) -> Result<GetQuery, String> {
    let mut codec = None;
    let mut message = None;
    let mut b64 = false;
    let mut compression = None;
    let mut version = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "connect" => version = Some(v.into_owned()),
            "encoding" => codec = Some(v.to_ascii_lowercase()),
            "message" => {
                if v.len() > max.saturating_mul(4) / 3 + 4 {
                    return Err(format!(
                        "the message exceeds this host's message size limit of {max} bytes"
                    ));
                }
                message = Some(v.into_owned())
            }
            "base64" => b64 = v == "1",
            "compression" if !v.eq_ignore_ascii_case("identity") => {
                compression = Some(v.to_ascii_lowercase())
            }
            _ => {}
        }
    }
    if version.as_deref() != Some("v1") {
        return Err("a Connect GET needs connect=v1 in its query".into());
    }
    let codec = codec.ok_or("a Connect GET needs encoding= in its query")?;
    let message = message.unwrap_or_default();
    let message = if b64 {
        let trimmed = message.trim_end_matches('=');
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(trimmed)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed))
            .map_err(|_| "the message is not base64".to_string())?
    } else {
        message.into_bytes()
    };
    if message.len() > max {
        return Err(format!(
            "the message exceeds this host's message size limit of {max} bytes"
        ));
    }
    Ok(GetQuery {
        codec,
        message,
        compression,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn content_types() {
        assert_eq!(
            kind("application/proto", false),
            Some(Kind::Unary("proto".into()))
        );
        assert_eq!(kind("application/json", false), None);
        assert_eq!(
            kind("application/json; charset=utf-8", true),
            Some(Kind::Unary("json".into()))
        );
        assert_eq!(
            kind("application/connect+json", false),
            Some(Kind::Streaming("json".into()))
        );
        assert_eq!(kind("application/connect+", false), None);
        assert_eq!(kind("application/grpc", true), None);
    }

    #[test]
    fn errors_as_json() {
        let mut h = HeaderMap::new();
        h.insert(GRPC_STATUS, HeaderValue::from_static("5"));
        h.insert(GRPC_MESSAGE, HeaderValue::from_static("no%20such"));
        let (http, error) = error_json(&h);
        assert_eq!(http, 404);
        assert_eq!(error, json!({"code": "not_found", "message": "no such"}));
        let status = details::RpcStatus {
            code: 2,
            message: "f".into(),
            details: vec![details::Any {
                type_url: "type.googleapis.com/p.F".into(),
                value: vec![1, 2, 3],
            }],
        };
        let bin = base64::engine::general_purpose::STANDARD_NO_PAD.encode(details::encode(&status));
        h.insert(GRPC_STATUS, HeaderValue::from_static("2"));
        h.insert(GRPC_STATUS_DETAILS, HeaderValue::from_str(&bin).unwrap());
        let (http, error) = error_json(&h);
        assert_eq!(http, 500);
        assert_eq!(error["code"], "unknown");
        assert_eq!(error["details"], json!([{"type": "p.F", "value": "AQID"}]));
        assert_eq!(code_name(16), ("unauthenticated", 401));
        assert_eq!(code_name(8), ("resource_exhausted", 429));
    }

    #[test]
    fn the_end_of_a_stream() {
        let mut ok = HeaderMap::new();
        ok.insert(GRPC_STATUS, HeaderValue::from_static("0"));
        let mut md = HeaderMap::new();
        md.insert("x-n", HeaderValue::from_static("1"));
        let end = end_stream(&ok, &md);
        assert_eq!(end[0], END_STREAM_FLAG);
        let v: Value = serde_json::from_slice(&end[5..]).unwrap();
        assert_eq!(v, json!({"metadata": {"x-n": ["1"]}}));
        let mut bad = HeaderMap::new();
        bad.insert(GRPC_STATUS, HeaderValue::from_static("4"));
        let v: Value = serde_json::from_slice(&end_stream(&bad, &HeaderMap::new())[5..]).unwrap();
        assert_eq!(v, json!({"error": {"code": "deadline_exceeded"}}));
    }

    #[test]
    fn timeouts() {
        assert_eq!(timeout_as_grpc(b"250").unwrap(), "250m");
        assert_eq!(timeout_as_grpc(b"1234567890").unwrap(), "1234568S");
        for bad in [&b""[..], b"-1", b"12345678901", b"1.5"] {
            assert!(timeout_as_grpc(bad).is_err());
        }
    }

    #[test]
    fn get_queries() {
        let q = parse_get("connect=v1&encoding=json&message=%7B%22a%22%3A1%7D", 100).unwrap();
        assert_eq!(q.codec, "json");
        assert_eq!(q.message, br#"{"a":1}"#);
        let q = parse_get(
            "connect=v1&encoding=proto&base64=1&message=CAE&compression=identity",
            100,
        )
        .unwrap();
        assert_eq!((q.message, q.compression), (vec![8, 1], None));
        assert!(parse_get("encoding=json", 100).is_err());
        assert!(parse_get("connect=v1&encoding=json&base64=1&message=!!", 100).is_err());
        let big = format!("connect=v1&encoding=json&message={}", "a".repeat(1000));
        assert!(parse_get(&big, 100).unwrap_err().contains("limit"));
    }
}
