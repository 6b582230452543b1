//! What a gRPC request's path and headers say: the operation it calls (`/{package}.{Service}/
//! {Method}`), its deadline (`grpc-timeout`), its metadata, and its compressions.

use std::time::Duration;

use ::http::HeaderMap;

use super::super::super::grpc::{self, timeout, GRPC_ACCEPT_ENCODING, GRPC_ENCODING, GRPC_TIMEOUT};
use super::super::super::metadata_from_headers_except;
use crate::core::compress::Compression;
use crate::core::metadata::Metadata;
use crate::core::service::{OperationInfo, ServiceDescriptor};
use crate::core::status::{Status, StatusCode};
use crate::dispatch::Dispatcher;

/// The operation `/{package}.{Service}/{Method}` names: the name the host keeps its service
/// under, the service's descriptor and the operation. Nothing is allocated: the service is
/// found by its name, its package compared (gRPC's standard services are kept under their
/// full names), and the method compared with each operation's name in `PascalCase` as it is
/// spelt out.
pub(super) fn route<'d>(
    dispatcher: &'d Dispatcher,
    path: &str,
) -> Result<(&'d str, &'static ServiceDescriptor, &'static OperationInfo), Status> {
    let unknown = |what: &str| {
        Status::new(
            StatusCode::UnknownService,
            format!("{what}: gRPC calls are POST /{{package}}.{{Service}}/{{Method}}"),
        )
    };
    let Some((full, method)) = path.strip_prefix('/').and_then(|p| p.split_once('/')) else {
        return Err(unknown(&format!("no gRPC method at `{path}`")));
    };
    let (package, name) = full.rsplit_once('.').unwrap_or(("", full));
    // A service kept under its full name (gRPC's standard ones) is found by it, but only if
    // it is that service's full name: `/Greeter/...` does not reach `pkg.Greeter`.
    let named_in_full = |d: &ServiceDescriptor| {
        full.strip_suffix(d.name).is_some_and(|p| {
            (p.is_empty() && d.package.is_empty()) || p.strip_suffix('.') == Some(d.package)
        })
    };
    let (key, desc) = dispatcher
        .service_entry(name)
        .filter(|(_, s)| s.descriptor().package == package)
        .or_else(|| {
            dispatcher
                .service_entry(full)
                .filter(|(_, s)| named_in_full(s.descriptor()))
        })
        .map(|(key, s)| (key, s.descriptor()))
        .ok_or_else(|| unknown(&format!("unknown service `{full}`")))?;
    let op = desc
        .operations
        .iter()
        .find(|op| pascal_eq(op.name, method))
        .ok_or_else(|| {
            Status::new(
                StatusCode::UnknownOperation,
                format!("unknown method `{method}` for service `{full}`"),
            )
        })?;
    Ok((key, desc, op))
}

/// Whether `method` is `snake`'s `PascalCase` form (see `OperationInfo::grpc_name`), compared
/// without building it.
fn pascal_eq(snake: &str, method: &str) -> bool {
    snake
        .split('_')
        .filter(|w| !w.is_empty())
        .flat_map(|word| {
            let mut chars = word.chars();
            let first = chars.next().into_iter().flat_map(char::to_uppercase);
            first.chain(chars)
        })
        .eq(method.chars())
}

/// What a gRPC request's headers say.
#[derive(Debug)]
pub(super) struct Head {
    /// `grpc-timeout`.
    pub(super) deadline: Option<Duration>,
    /// The caller's metadata: every header that is not HTTP's, keel's or gRPC's own.
    pub(super) metadata: Metadata,
    /// How compressed request messages are compressed (`grpc-encoding`).
    pub(super) compression: Option<Compression>,
    /// How reply messages may be compressed (`grpc-accept-encoding`).
    pub(super) reply_codec: Option<Compression>,
}

/// Why a request's headers were refused.
#[derive(Debug)]
pub(super) enum HeadError {
    /// A malformed header.
    Bad(Status),
    /// A `grpc-encoding` this host does not speak (answered with `grpc-accept-encoding`).
    Encoding(Status),
}

/// Reads `headers`.
pub(super) fn head(headers: &HeaderMap) -> Result<Head, HeadError> {
    let deadline = match headers.get(GRPC_TIMEOUT) {
        None => None,
        Some(v) => match timeout::parse(v.as_bytes()) {
            Ok(d) => Some(d),
            Err(why) => {
                let msg = format!("malformed {GRPC_TIMEOUT} header {v:?}: {why}");
                return Err(HeadError::Bad(Status::new(StatusCode::BadRequest, msg)));
            }
        },
    };
    let compression = match headers.get(GRPC_ENCODING) {
        None => None,
        Some(v) => match v.to_str().map_err(|_| ()).and_then(grpc::encoding) {
            Ok(c) => c,
            Err(()) => {
                let msg = format!(
                    "grpc-encoding {v:?} is not supported by this host: it accepts {}",
                    grpc::ACCEPTED_ENCODINGS
                );
                return Err(HeadError::Encoding(Status::new(
                    StatusCode::Unimplemented,
                    msg,
                )));
            }
        },
    };
    let reply_codec = grpc::reply_encoding(
        headers
            .get_all(GRPC_ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    // `user-agent` is not reserved in keel's convention, but every gRPC client sends its own.
    let metadata = metadata_from_headers_except(headers, "user-agent");
    Ok(Head {
        deadline,
        metadata,
        compression,
        reply_codec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::http::HeaderValue;

    #[test]
    fn methods_match_their_operations_pascal_case() {
        assert!(pascal_eq("get_feature", "GetFeature"));
        assert!(pascal_eq("add", "Add"));
        assert!(pascal_eq("list__all_", "ListAll"));
        assert!(!pascal_eq("get_feature", "getFeature"));
        assert!(!pascal_eq("get_feature", "GetFeatures"));
        assert!(!pascal_eq("get_feature", "Get_feature"));
        assert!(!pascal_eq("add", ""));
    }

    #[test]
    fn headers_become_deadline_metadata_and_codecs() {
        let mut h = HeaderMap::new();
        h.insert("grpc-timeout", HeaderValue::from_static("250m"));
        h.insert("grpc-encoding", HeaderValue::from_static("gzip"));
        h.insert("grpc-accept-encoding", HeaderValue::from_static("gzip"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("user-agent", HeaderValue::from_static("grpc-go/1.0"));
        h.insert(
            "content-type",
            HeaderValue::from_static("application/grpc+json"),
        );
        h.insert("x-tenant", HeaderValue::from_static("a"));
        h.insert("trace-bin", HeaderValue::from_static("AAE"));
        let head = head(&h).unwrap();
        assert_eq!(head.deadline, Some(Duration::from_millis(250)));
        assert_eq!(head.compression, Some(Compression::Gzip));
        assert_eq!(head.reply_codec, Some(Compression::Gzip));
        let keys: Vec<&str> = head.metadata.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["x-tenant", "trace-bin"]);
        assert_eq!(head.metadata.get_bin("trace-bin"), Some(&[0u8, 1][..]));

        h.insert("grpc-timeout", HeaderValue::from_static("soon"));
        assert!(matches!(head_err(&h), HeadError::Bad(_)));
        h.remove("grpc-timeout");
        h.insert("grpc-encoding", HeaderValue::from_static("snappy"));
        assert!(matches!(head_err(&h), HeadError::Encoding(_)));
    }

    fn head_err(h: &HeaderMap) -> HeadError {
        head(h).unwrap_err()
    }
}
