//! The gRPC protocol's pieces that do no IO (GRPC.md, "Transport"): content types, the
//! length-prefixed messages, `grpc-timeout`, the status codes and `grpc-message`, and
//! `grpc-status-details-bin`. The host side that speaks it is `server/grpc/`.
//!
//! One concern per file:
//! - `mod.rs`: content types, header names, and a status as gRPC's trailers;
//! - `frame.rs`: the 5-byte prefix, a scanner and a reader of messages, the encoder;
//! - `timeout.rs`: `grpc-timeout`;
//! - `codes.rs`: keel's status codes and gRPC's, both ways; `grpc-message`'s encoding;
//! - `details.rs`: `google.rpc.Status`, encoded by hand;
//! - `web.rs`: gRPC-Web's content types, trailer frame and base64 text;
//! - `connect.rs`: Connect's content types, error JSON, end-of-stream message, timeout, GET query.

pub(crate) mod codes;
pub(crate) mod connect;
pub(crate) mod details;
pub(crate) mod frame;
pub(crate) mod timeout;
pub(crate) mod web;

use base64::Engine as _;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::core::compress::Compression;
use crate::core::status::{Status, StatusCode};

/// The content type of gRPC requests and answers; `+{subtype}` names the message encoding.
pub(crate) const CONTENT_TYPE: &str = "application/grpc";

/// The status of a gRPC call (an answer's trailers, or its headers in a Trailers-Only answer).
pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// The status's message, percent-encoded.
pub(crate) const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// A `google.rpc.Status`, in base64.
pub(crate) const GRPC_STATUS_DETAILS: HeaderName =
    HeaderName::from_static("grpc-status-details-bin");
/// The call's time budget.
pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// How the messages of this side are compressed.
pub(crate) const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
/// The compressions this side accepts.
pub(crate) const GRPC_ACCEPT_ENCODING: HeaderName = HeaderName::from_static("grpc-accept-encoding");

/// What a host lists in `grpc-accept-encoding`: the codings keel decompresses.
pub(crate) const ACCEPTED_ENCODINGS: &str = "zstd,gzip";

/// The content type an answer echoes for a request's `subtype` (lower-cased, parameters
/// dropped).
pub(crate) fn answer_content_type(subtype: &str) -> HeaderValue {
    match subtype {
        "" => HeaderValue::from_static(CONTENT_TYPE),
        s if s.eq_ignore_ascii_case("json") => HeaderValue::from_static("application/grpc+json"),
        s if s.eq_ignore_ascii_case("proto") => HeaderValue::from_static("application/grpc+proto"),
        s => HeaderValue::from_str(&format!("{CONTENT_TYPE}+{}", s.to_ascii_lowercase()))
            .unwrap_or(HeaderValue::from_static(CONTENT_TYPE)),
    }
}

/// The subtype of a gRPC content type (`""` for `application/grpc`, `"json"` for
/// `application/grpc+json`; parameters after `;` ignored), or `None` for any other content
/// type, `application/grpc-web` among them.
pub(crate) fn subtype(content_type: &str) -> Option<&str> {
    let t = content_type.split(';').next().unwrap_or("").trim();
    let head = t.get(..CONTENT_TYPE.len())?;
    if !head.eq_ignore_ascii_case(CONTENT_TYPE) {
        return None;
    }
    match &t[CONTENT_TYPE.len()..] {
        "" => Some(""),
        rest => rest.strip_prefix('+').filter(|s| !s.is_empty()),
    }
}

/// The compression of a `grpc-encoding` value: `Ok(None)` for `identity`, `Err` for one this
/// host does not speak.
pub(crate) fn encoding(value: &str) -> Result<Option<Compression>, ()> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("identity") {
        return Ok(None);
    }
    Compression::from_token(value).map(Some).ok_or(())
}

/// The compression to answer with, from the caller's `grpc-accept-encoding` values: the first
/// of keel's preferences (zstd, then gzip) the caller lists.
pub(crate) fn reply_encoding<'a>(accepted: impl Iterator<Item = &'a str>) -> Option<Compression> {
    let listed: Vec<Compression> = accepted
        .flat_map(|v| v.split(','))
        .filter_map(|t| Compression::from_token(t.trim()))
        .collect();
    Compression::ALL.into_iter().find(|c| listed.contains(c))
}

/// An operation's typed fault type: its contract's protobuf package and the type as the
/// contract writes it (`OperationInfo::fault`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FaultType<'a> {
    pub(crate) package: &'a str,
    pub(crate) written: &'a str,
}

impl FaultType<'_> {
    /// The type's name: a path's last segment, generics dropped.
    fn name(&self) -> &str {
        let name = self.written.split('<').next().unwrap_or(self.written);
        name.rsplit("::").next().unwrap_or(name).trim()
    }

    /// `type.googleapis.com/{package}.{name}`: the type URL of the `Any` that carries it.
    pub(crate) fn type_url(&self) -> String {
        if self.package.is_empty() {
            format!("type.googleapis.com/{}", self.name())
        } else {
            format!("type.googleapis.com/{}.{}", self.package, self.name())
        }
    }
}

/// Adds `status` to `out` as gRPC says a status travels: `grpc-status`, `grpc-message` when
/// there is one, and for a typed fault `grpc-status-details-bin`, a `google.rpc.Status` with
/// one `Any` of `fault`'s type (see [`FaultType::type_url`]) whose value is the fault as the
/// call's format encoded it. Other details (opaque bytes) travel in `keel-status-details`, as
/// in keel's HTTP convention. The status's metadata is not added here.
pub(crate) fn status_headers(status: &Status, fault: Option<FaultType<'_>>, out: &mut HeaderMap) {
    let code = codes::grpc_code(status.code());
    out.insert(GRPC_STATUS, HeaderValue::from(code));
    let fault_message;
    let message = if status.code() == StatusCode::Fault {
        fault_message = format!(
            "the operation returned its typed fault{}",
            fault.map_or(String::new(), |f| format!(" {}", f.name()))
        );
        &fault_message
    } else {
        status.message()
    };
    if !message.is_empty() {
        let value = HeaderValue::from_str(&codes::percent_encode(message))
            .expect("percent-encoded text is visible ASCII");
        out.insert(GRPC_MESSAGE, value);
    }
    if status.code() == StatusCode::Fault {
        let details = details::encode(&details::RpcStatus {
            code: code as i32,
            message: message.to_string(),
            details: vec![details::Any {
                type_url: fault.map_or(String::new(), |f| f.type_url()),
                value: status.details().to_vec(),
            }],
        });
        let value = base64::engine::general_purpose::STANDARD_NO_PAD.encode(details);
        out.insert(
            GRPC_STATUS_DETAILS,
            HeaderValue::from_str(&value).expect("base64 is visible ASCII"),
        );
    } else if !status.details().is_empty() {
        let value = super::details_encode(status.details());
        out.insert(
            super::DETAILS,
            HeaderValue::from_str(&value).expect("base64 is visible ASCII"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types_and_their_subtypes() {
        assert_eq!(subtype("application/grpc"), Some(""));
        assert_eq!(subtype("application/grpc+json"), Some("json"));
        assert_eq!(
            subtype("Application/GRPC+proto; charset=utf-8"),
            Some("proto")
        );
        assert_eq!(subtype("application/grpc ; x=y"), Some(""));
        for other in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpc-web-text",
            "application/grpc+",
            "application/json",
            "application/grp",
            "",
            "application/grpcx",
        ] {
            assert_eq!(subtype(other), None, "{other}");
        }
    }

    #[test]
    fn encodings() {
        assert_eq!(encoding("identity"), Ok(None));
        assert_eq!(encoding("gzip"), Ok(Some(Compression::Gzip)));
        assert_eq!(encoding("zstd"), Ok(Some(Compression::Zstd)));
        assert_eq!(encoding("snappy"), Err(()));
        assert_eq!(
            reply_encoding(["identity, gzip", "deflate"].into_iter()),
            Some(Compression::Gzip)
        );
        assert_eq!(
            reply_encoding(["gzip,zstd"].into_iter()),
            Some(Compression::Zstd)
        );
        assert_eq!(reply_encoding(["identity"].into_iter()), None);
    }

    #[test]
    fn fault_type_urls() {
        let url = |package, written| FaultType { package, written }.type_url();
        assert_eq!(
            url("keel_examples", "DivideByZero"),
            "type.googleapis.com/keel_examples.DivideByZero"
        );
        assert_eq!(
            url("a.b", "crate::errors::Nope<u8>"),
            "type.googleapis.com/a.b.Nope"
        );
        assert_eq!(url("", "F"), "type.googleapis.com/F");
    }

    #[test]
    fn a_fault_travels_as_a_google_rpc_status() {
        let mut headers = HeaderMap::new();
        let fault = Status::fault(bytes::Bytes::from_static(br#"{"dividend":1.0}"#));
        let ty = FaultType {
            package: "p",
            written: "DivideByZero",
        };
        status_headers(&fault, Some(ty), &mut headers);
        assert_eq!(headers[GRPC_STATUS], "2");
        let details = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(headers[GRPC_STATUS_DETAILS].as_bytes())
            .unwrap();
        let decoded = details::decode(&details).unwrap();
        assert_eq!(decoded.code, 2);
        assert_eq!(decoded.details.len(), 1);
        assert_eq!(
            decoded.details[0].type_url,
            "type.googleapis.com/p.DivideByZero"
        );
        assert_eq!(decoded.details[0].value, br#"{"dividend":1.0}"#);
        assert_eq!(
            codes::percent_decode(headers[GRPC_MESSAGE].as_bytes()),
            decoded.message
        );

        let mut headers = HeaderMap::new();
        let status = Status::new(StatusCode::NotFound, "no such thing: ü");
        status_headers(&status, None, &mut headers);
        assert_eq!(headers[GRPC_STATUS], "5");
        assert_eq!(headers[GRPC_MESSAGE], "no such thing: %C3%BC");
        assert!(headers.get(GRPC_STATUS_DETAILS).is_none());
    }
}
