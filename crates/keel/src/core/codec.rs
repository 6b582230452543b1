//! How message bodies are encoded and decoded: MessagePack for keel's own clients (protocol
//! version 2), postcard for version-1 clients, JSON for any HTTP client. Decoding arguments is
//! the caller's fault when it fails (`BadRequest`); encoding a reply is the host's (`Internal`).
//!
//! MessagePack is written with structs as maps keyed by field name (and an operation's
//! arguments as a map keyed by parameter name), so contracts evolve as JSON ones do: a field or
//! parameter the receiver does not know is ignored, and one it expects but does not get takes
//! its default when it has `#[serde(default)]` (`#[keel(default)]` on a parameter). Byte
//! sequences (`Vec<u8>`, `&[u8]`) travel as MessagePack `bin`, one byte per byte.

use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::depth::Depth;

use super::service::{Outcome, Payload, ServiceDescriptor};
use super::status::{Status, StatusCode};
use super::stream::ByteStream;

/// How message bodies are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// MessagePack, structs as maps: keel's own clients from protocol version 2 on.
    MsgPack,
    /// postcard: compact positional binary, keel's clients of protocol version 1.
    Postcard,
    /// JSON (`serde_json`): the HTTP binding's format for clients in any language. Arguments
    /// are an object of the parameters by name.
    Json,
}

pub(crate) fn encode<T: Serialize + ?Sized>(format: Format, value: &T) -> Result<Bytes, String> {
    match format {
        Format::MsgPack => encode_msgpack(value),
        Format::Postcard => postcard::to_stdvec(value)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
        Format::Json => serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
    }
}

/// Bodies smaller than this are encoded through a thread's scratch buffers (see
/// [`encode_msgpack`]); the buffer bodies are split from is this large.
const SCRATCH: usize = 1024;

/// A thread's buffers for encoding MessagePack bodies.
#[derive(Default)]
struct Scratch {
    /// Where a body is encoded (kept, cleared, between bodies: writing into a `Vec` is what
    /// rmp-serde does fastest).
    encoding: Vec<u8>,
    /// Where bodies are copied and split off from.
    bodies: BytesMut,
}

thread_local! {
    static SCRATCH_BUFS: Cell<Scratch> = Cell::new(Scratch::default());
}

/// Encodes `value` as MessagePack. A small body costs no allocation: it is encoded into the
/// thread's scratch `Vec`, copied into the thread's body buffer and split off from it, where a
/// `Vec` of its own cost two (its own, and the reference count that `Bytes::from(Vec)` adds
/// when the `Vec` has room to spare). Bodies split off share the buffer's memory until the last
/// of them is dropped: when the buffer is full it starts over in the same memory if none is
/// alive, else in new memory of [`SCRATCH`] bytes. A body of [`SCRATCH`] bytes or more becomes
/// a `Bytes` of its own, without a copy, and its memory goes with it.
fn encode_msgpack<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, String> {
    // Taken out while in use: a `Serialize` impl that encodes something itself meanwhile gets
    // buffers of its own (and so does a thread whose locals are being destroyed).
    let mut scratch = SCRATCH_BUFS.try_with(Cell::take).unwrap_or_default();
    scratch.encoding.clear();
    let mut se = rmp_serde::Serializer::new(&mut scratch.encoding)
        .with_struct_map()
        .with_bytes(rmp_serde::config::BytesMode::ForceIterables);
    let encoded = value.serialize(&mut se);
    let len = scratch.encoding.len();
    let body = if let Err(e) = encoded {
        Err(e.to_string())
    } else if len >= SCRATCH {
        // The scratch `Vec` goes with the body: the next body gets a new one.
        Ok(Bytes::from(std::mem::take(&mut scratch.encoding)))
    } else {
        Ok(split_body(&mut scratch))
    };
    let _ = SCRATCH_BUFS.try_with(|bufs| bufs.set(scratch));
    body
}

/// The small body in `scratch.encoding`, copied into the body buffer and split off.
fn split_body(scratch: &mut Scratch) -> Bytes {
    let len = scratch.encoding.len();
    let bodies = &mut scratch.bodies;
    if bodies.capacity() < len {
        bodies.reserve(SCRATCH);
    }
    bodies.extend_from_slice(&scratch.encoding);
    bodies.split().freeze()
}

/// Decodes a whole body. Bytes left over after the value are an error in both formats (postcard
/// itself would ignore them, so random bytes could decode as a call), and so is a value nested
/// more than [`MAX_DEPTH`](super::depth::MAX_DEPTH) levels deep (serde_json's limit; postcard
/// has none, and would overflow the stack).
pub(crate) fn decode<T: DeserializeOwned>(format: Format, body: &[u8]) -> Result<T, String> {
    match format {
        Format::MsgPack => {
            // Borrowing from `body` (no copy of strings and byte arrays into a scratch buffer);
            // where the value ends is found by walking its markers.
            let mut de = rmp_serde::Deserializer::from_read_ref(body);
            let value = T::deserialize(Depth::new(&mut de)).map_err(|e| e.to_string())?;
            let used = msgpack_len(body).ok_or("malformed MessagePack")?;
            let rest = body.len() - used;
            if rest != 0 {
                return Err(format!("{rest} unexpected bytes after the value"));
            }
            Ok(value)
        }
        Format::Postcard => {
            let mut de = postcard::Deserializer::from_bytes(body);
            let value = T::deserialize(Depth::new(&mut de)).map_err(|e| e.to_string())?;
            match de.finalize() {
                Ok([]) => Ok(value),
                Ok(rest) => Err(format!("{} unexpected bytes after the value", rest.len())),
                Err(e) => Err(e.to_string()),
            }
        }
        Format::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
    }
}

/// The length of the first MessagePack value in `buf`, or `None` if it is cut short or uses
/// the one reserved marker (0xc1). Walks the markers without recursion: a count of the values
/// still to skip stands in for the nesting.
fn msgpack_len(buf: &[u8]) -> Option<usize> {
    let mut pos = 0usize;
    let mut pending: u64 = 1;
    while pending > 0 {
        pending -= 1;
        let marker = *buf.get(pos)?;
        pos += 1;
        let at = &mut pos;
        // (payload bytes after the marker and its length field, values it contains)
        let (skip, inner): (u64, u64) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * u64::from(marker & 0x0f)),
            0x90..=0x9f => (0, u64::from(marker & 0x0f)),
            0xa0..=0xbf => (u64::from(marker & 0x1f), 0),
            0xc4 | 0xd9 => (length(buf, at, 1)?, 0),
            0xc5 | 0xda => (length(buf, at, 2)?, 0),
            0xc6 | 0xdb => (length(buf, at, 4)?, 0),
            // ext: the type byte, then the data.
            0xc7 => (length(buf, at, 1)? + 1, 0),
            0xc8 => (length(buf, at, 2)? + 1, 0),
            0xc9 => (length(buf, at, 4)? + 1, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (0, length(buf, at, 2)?),
            0xdd => (0, length(buf, at, 4)?),
            0xde => (0, 2 * length(buf, at, 2)?),
            0xdf => (0, 2 * length(buf, at, 4)?),
            0xc1 => return None,
        };
        pos = pos.checked_add(usize::try_from(skip).ok()?)?;
        if pos > buf.len() {
            return None;
        }
        pending = pending.checked_add(inner)?;
    }
    Some(pos)
}

/// The big-endian length field of `n` bytes at `*pos`; moves `*pos` past it.
fn length(buf: &[u8], pos: &mut usize, n: usize) -> Option<u64> {
    let bytes = buf.get(*pos..pos.checked_add(n)?)?;
    *pos += n;
    Some(bytes.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b)))
}

/// Decodes operation arguments; a failure is the caller's fault (`BadRequest`).
pub(crate) fn decode_args<T: DeserializeOwned>(format: Format, body: &[u8]) -> Result<T, Status> {
    decode(format, body).map_err(|e| {
        Status::new(
            StatusCode::BadRequest,
            format!("cannot decode arguments: {e}"),
        )
    })
}

/// The status of a reply that holds a non-finite float (infinity or NaN), which JSON cannot
/// carry (`serde_json` would write `null`): `out_of_range`, the caller's choice of format being
/// what cannot carry it. `None` when `value` can be encoded in `format`.
fn not_in_json<T: Serialize + ?Sized>(format: Format, value: &T, what: &str) -> Option<Status> {
    (format == Format::Json && super::finite::has_non_finite(value)).then(|| {
        Status::new(
            StatusCode::OutOfRange,
            format!(
                "the {what} holds a non-finite number (infinity or NaN), which JSON cannot \
                 carry; call with MessagePack (application/vnd.msgpack) to receive it"
            ),
        )
    })
}

/// Encodes a handler's return value.
pub(crate) fn encode_ok<T: Serialize>(format: Format, value: &T) -> Outcome {
    if let Some(status) = not_in_json(format, value, "reply") {
        return Err(status);
    }
    encode(format, value)
        .map(Payload::Body)
        .map_err(|e| Status::new(StatusCode::Internal, format!("cannot encode reply: {e}")))
}

/// Encodes a typed fault.
fn encode_fault<E: Serialize>(format: Format, fault: &E) -> Status {
    if let Some(status) = not_in_json(format, fault, "fault") {
        return status;
    }
    match encode(format, fault) {
        Ok(b) => Status::fault(b),
        Err(e) => Status::new(StatusCode::Internal, format!("cannot encode fault: {e}")),
    }
}

/// Encodes a handler's `Result<T, E>`: `Err` becomes a typed fault.
pub(crate) fn encode_fallible<T: Serialize, E: Serialize>(
    format: Format,
    value: &Result<T, E>,
) -> Outcome {
    match value {
        Ok(v) => encode_ok(format, v),
        Err(e) => Err(encode_fault(format, e)),
    }
}

/// A handler's streamed reply.
pub(crate) fn stream_ok(stream: ByteStream) -> Outcome {
    Ok(Payload::Stream(stream))
}

/// A handler's `Result<ByteStream, E>`: `Err` becomes a typed fault.
pub(crate) fn stream_fallible<E: Serialize>(
    format: Format,
    value: Result<ByteStream, E>,
) -> Outcome {
    match value {
        Ok(s) => Ok(Payload::Stream(s)),
        Err(e) => Err(encode_fault(format, &e)),
    }
}

pub(crate) fn unknown_operation(desc: &ServiceDescriptor, op: usize) -> Status {
    Status::new(
        StatusCode::UnknownOperation,
        format!("{} has no operation #{op}", desc.name),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_finite_float_is_out_of_range_in_json_only() {
        let status = encode_ok(Format::Json, &f64::INFINITY).unwrap_err();
        assert_eq!(status.code(), StatusCode::OutOfRange);
        let fault: Result<(), (u8, f32)> = Err((1, f32::NAN));
        let status = encode_fallible(Format::Json, &fault).unwrap_err();
        assert_eq!(status.code(), StatusCode::OutOfRange);
        assert!(encode_ok(Format::MsgPack, &f64::INFINITY).is_ok());
        assert!(encode_ok(Format::Postcard, &f64::NAN).is_ok());
        assert!(encode_ok(Format::Json, &f64::MAX).is_ok());
    }

    #[test]
    fn msgpack_bodies_are_the_same_whatever_their_size() {
        for n in [0, 1, 200, 1000, SCRATCH, 2000, 5000, 10] {
            let value = ("x".repeat(n), vec![7u8; n / 2]);
            let mut expected = Vec::new();
            let mut se = rmp_serde::Serializer::new(&mut expected)
                .with_struct_map()
                .with_bytes(rmp_serde::config::BytesMode::ForceIterables);
            value.serialize(&mut se).unwrap();
            assert_eq!(&encode(Format::MsgPack, &value).unwrap()[..], &expected[..]);
        }
    }

    #[test]
    fn msgpack_bodies_sharing_a_buffer_stay_intact() {
        // Enough small bodies to fill several buffers, some kept and some dropped at once, with
        // a large one in between.
        let mut kept = Vec::new();
        for i in 0..500u32 {
            let value = (i, "y".repeat((i % 40) as usize));
            let body = encode(Format::MsgPack, &value).unwrap();
            if i % 3 == 0 {
                kept.push((value, body));
            }
            if i == 250 {
                let large = vec![i; SCRATCH];
                let body = encode(Format::MsgPack, &large).unwrap();
                assert_eq!(decode::<Vec<u32>>(Format::MsgPack, &body), Ok(large));
            }
        }
        for (value, body) in kept {
            assert_eq!(decode::<(u32, String)>(Format::MsgPack, &body), Ok(value));
        }
    }

    #[test]
    fn msgpack_evolves_like_json_both_ways() {
        #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
        struct V1 {
            id: u64,
        }
        #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
        struct V2 {
            id: u64,
            #[serde(default)]
            note: String,
        }
        let old = encode(Format::MsgPack, &V1 { id: 7 }).unwrap();
        let new = encode(
            Format::MsgPack,
            &V2 {
                id: 7,
                note: "x".into(),
            },
        )
        .unwrap();
        assert_eq!(
            decode::<V2>(Format::MsgPack, &old),
            Ok(V2 {
                id: 7,
                note: String::new()
            })
        );
        assert_eq!(decode::<V1>(Format::MsgPack, &new), Ok(V1 { id: 7 }));
        // Bytes travel as `bin`: one byte per byte, plus a short header.
        let blob = encode(Format::MsgPack, &vec![200u8; 1000]).unwrap();
        assert_eq!(blob.len(), 1000 + 3);
        assert_eq!(
            decode::<Vec<u8>>(Format::MsgPack, &blob),
            Ok(vec![200u8; 1000])
        );
        let mut longer = new.to_vec();
        longer.push(0xc0);
        assert!(decode::<V2>(Format::MsgPack, &longer)
            .unwrap_err()
            .contains("1 unexpected bytes"));
    }

    #[test]
    fn msgpack_len_finds_where_a_value_ends() {
        #[derive(Serialize)]
        struct Many {
            a: Vec<u8>,
            b: String,
            c: Vec<(u64, i64, f32, f64, bool, Option<u8>)>,
            d: std::collections::BTreeMap<String, Vec<String>>,
        }
        let long = "x".repeat(70_000);
        let value = Many {
            a: vec![7; 300],
            b: long.clone(),
            c: vec![
                (u64::MAX, i64::MIN, 1.5, -2.5, true, None),
                (0, -1, 0.0, 0.0, false, Some(200)),
            ],
            d: [(long.clone(), vec![long, String::new()])]
                .into_iter()
                .collect(),
        };
        let body = encode(Format::MsgPack, &value).unwrap();
        assert_eq!(msgpack_len(&body), Some(body.len()));
        let mut longer = body.to_vec();
        longer.extend_from_slice(&[0x90, 0x01]);
        assert_eq!(msgpack_len(&longer), Some(body.len()));
        for cut in [0, 1, 5, body.len() / 2, body.len() - 1] {
            assert_eq!(msgpack_len(&body[..cut]), None, "cut at {cut}");
        }
        assert_eq!(msgpack_len(&[0xc1]), None);
        // A claimed length far past the end.
        assert_eq!(msgpack_len(&[0xdb, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(msgpack_len(&[0xdf, 0xff, 0xff, 0xff, 0xff]), None);
    }

    #[test]
    fn trailing_bytes_are_refused_in_both_formats() {
        let body = encode(Format::Postcard, &(1u32, 2u32)).unwrap();
        assert_eq!(decode::<(u32, u32)>(Format::Postcard, &body), Ok((1, 2)));
        let mut longer = body.to_vec();
        longer.push(0);
        let e = decode::<(u32, u32)>(Format::Postcard, &longer).unwrap_err();
        assert!(e.contains("1 unexpected bytes"), "{e}");
        assert!(decode::<(u32,)>(Format::Postcard, &body).is_err());
        let e = decode_args::<(u32, u32)>(Format::Postcard, &longer).unwrap_err();
        assert_eq!(e.code(), StatusCode::BadRequest);
        assert!(decode::<u32>(Format::Json, b"1 2").is_err());
        assert_eq!(decode::<u32>(Format::Json, b" 1 "), Ok(1));
    }
}
