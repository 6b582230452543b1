//! Message bodies, both directions, both ends: the one place where bytes become an HTTP body and
//! an HTTP body becomes bytes, with the size limit and the drain rule. (Streamed transfer plugs
//! a byte stream in here.)

use bytes::{Bytes, BytesMut};
use http_body::Body as _;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;

/// Any error a body can end with.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type keel sends, on the host and on the client.
pub(crate) type Body = BoxBody<Bytes, BoxError>;

/// A body of exactly `bytes`.
pub(crate) fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// An empty body.
pub(crate) fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// How far past the limit an oversized body is read (and thrown away) so that its HTTP/1.1
/// connection can carry the next message. Beyond it the connection is given up instead.
pub(crate) const DRAIN_LIMIT: u64 = 16 << 20;

/// Why a body could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Larger than the limit. `size` is the whole body's size when known. `drained`: the body
    /// was read to its end, so the connection can carry another message.
    TooLarge { size: Option<u64>, drained: bool },
    /// The peer went away or broke the protocol mid-body.
    Broken(hyper::Error),
}

/// Reads a whole body of at most `limit` bytes. A larger one is read and thrown away up to
/// `drain` bytes past the limit ([`DRAIN_LIMIT`] on HTTP/1.1, where an unread body would end the
/// connection; 0 on HTTP/2, where dropping the body resets only its stream).
pub(crate) async fn read_limited(
    mut body: Incoming,
    limit: u32,
    drain: u64,
) -> Result<Bytes, ReadError> {
    let limit = u64::from(limit);
    let declared = body.size_hint().exact();
    if declared.is_some_and(|n| n > limit + drain) {
        return Err(ReadError::TooLarge {
            size: declared,
            drained: false,
        });
    }
    // One chunk (the common case) is returned as is; more are gathered.
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(ReadError::Broken)?.into_data() else {
            continue; // trailers: nothing keel uses
        };
        total += data.len() as u64;
        if total > limit + drain {
            return Err(ReadError::TooLarge {
                size: declared,
                drained: false,
            });
        }
        if total > limit {
            first = None;
            rest = BytesMut::new();
            continue;
        }
        match first.take() {
            None if rest.is_empty() => first = Some(data),
            None => rest.extend_from_slice(&data),
            Some(f) => {
                rest.reserve(declared.map_or(0, |n| n as usize).max(f.len() + data.len()));
                rest.extend_from_slice(&f);
                rest.extend_from_slice(&data);
            }
        }
    }
    if total > limit {
        return Err(ReadError::TooLarge {
            size: Some(total),
            drained: true,
        });
    }
    Ok(first.unwrap_or_else(|| rest.freeze()))
}
