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
use super::format::Format;
use super::service::{Outcome, Payload, ServiceDescriptor};
use super::status::{Status, StatusCode};
use super::stream::ByteStream;

/// Why a postcard body cannot be encoded or decoded in a build without the feature `wire-v1`
/// (never seen in practice: such a host refuses version-1 clients and postcard content types).
#[cfg(not(feature = "wire-v1"))]
const WIRE_V1_NEEDED: &str =
    "postcard bodies (keel protocol version 1) need keel's feature `wire-v1`";

pub(crate) fn encode<T: Serialize + ?Sized>(format: Format, value: &T) -> Result<Bytes, String> {
    match format {
        Format::MsgPack => encode_msgpack(value),
        #[cfg(feature = "wire-v1")]
        Format::Postcard => postcard::to_stdvec(value)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
        #[cfg(not(feature = "wire-v1"))]
        Format::Postcard => Err(WIRE_V1_NEEDED.into()),
        Format::Json => serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
        Format::Protobuf(codec) => encode_scratch(|out| codec.encode_into(value, out)),
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
    encode_scratch(|out| msgpack_into(value, out).map_err(|e| e.to_string()))
}

/// A body `write` appends to an empty `Vec`, made as [`encode_msgpack`] says: through the
/// thread's scratch buffers (MessagePack and protobuf bodies alike).
fn encode_scratch(write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>) -> Result<Bytes, String> {
    // Taken out while in use: a `Serialize` impl that encodes something itself meanwhile gets
    // buffers of its own (and so does a thread whose locals are being destroyed).
    let mut scratch = SCRATCH_BUFS.try_with(Cell::take).unwrap_or_default();
    scratch.encoding.clear();
    let encoded = write(&mut scratch.encoding);
    let len = scratch.encoding.len();
    let body = if let Err(e) = encoded {
        Err(e)
    } else if len >= SCRATCH {
        // The scratch `Vec` goes with the body: the next body gets a new one.
        Ok(Bytes::from(std::mem::take(&mut scratch.encoding)))
    } else {
        Ok(split_body(&mut scratch))
    };
    let _ = SCRATCH_BUFS.try_with(|bufs| bufs.set(scratch));
    body
}

/// Appends `value`, encoded as MessagePack the way keel writes every body (structs as maps,
/// byte sequences as `bin`), to `out`.
fn msgpack_into<T: Serialize + ?Sized>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), rmp_serde::encode::Error> {
    let mut se = rmp_serde::Serializer::new(out)
        .with_struct_map()
        .with_bytes(rmp_serde::config::BytesMode::ForceIterables);
    value.serialize(&mut se)
}

/// What `write` puts in a `BytesMut`, as one `Bytes`: a small one (`len` under [`SCRATCH`])
/// written into the thread's body buffer and split off, as a small encoded body is (no
/// allocation of its own), a larger one in a buffer of its own. `len` is what `write` writes,
/// or at least a bound on it.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn small_bytes(len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    if len >= SCRATCH {
        let mut out = BytesMut::with_capacity(len);
        write(&mut out);
        return out.freeze();
    }
    let mut scratch = SCRATCH_BUFS.try_with(Cell::take).unwrap_or_default();
    let bodies = &mut scratch.bodies;
    if bodies.capacity() < len {
        bodies.reserve(SCRATCH);
    }
    write(bodies);
    let out = bodies.split().freeze();
    let _ = SCRATCH_BUFS.try_with(|bufs| bufs.set(scratch));
    out
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
        // The fast path decodes what it can (nearly every body); rmp-serde decodes the rest,
        // and says what is wrong with a body that does not decode.
        Format::MsgPack => match super::msgpack::decode(body) {
            Some(value) => Ok(value),
            None => decode_msgpack_rmp(body),
        },
        #[cfg(not(feature = "wire-v1"))]
        Format::Postcard => Err(WIRE_V1_NEEDED.into()),
        #[cfg(feature = "wire-v1")]
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
        Format::Protobuf(codec) => codec.decode(body),
    }
}

/// A MessagePack body decoded by rmp-serde: what [`decode`] falls back to.
fn decode_msgpack_rmp<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    // Borrowing from `body` (no copy of strings and byte arrays into a scratch buffer); where
    // the value ends is found by walking its markers.
    let mut de = rmp_serde::Deserializer::from_read_ref(body);
    let value = T::deserialize(Depth::new(&mut de)).map_err(|e| e.to_string())?;
    let used = msgpack_len(body).ok_or("malformed MessagePack")?;
    let rest = body.len() - used;
    if rest != 0 {
        return Err(format!("{rest} unexpected bytes after the value"));
    }
    Ok(value)
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

/// Encodes one message of a stream at the end of `out`: the bytes [`encode`] makes, written
/// where they go instead of into a buffer of their own (a stream's messages are gathered into
/// one chunk). On an error `out` is left as it was.
pub(crate) fn encode_message_into<T: Serialize>(
    format: Format,
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), Status> {
    if let Some(status) = not_in_json(format, value, "stream message") {
        return Err(status);
    }
    let start = out.len();
    let encoded = match format {
        Format::MsgPack => msgpack_into(value, out).map_err(|e| e.to_string()),
        #[cfg(feature = "wire-v1")]
        Format::Postcard => postcard::to_io(value, &mut *out)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(not(feature = "wire-v1"))]
        Format::Postcard => Err(WIRE_V1_NEEDED.into()),
        Format::Json => serde_json::to_writer(&mut *out, value).map_err(|e| e.to_string()),
        Format::Protobuf(codec) => codec.encode_into(value, out),
    };
    encoded.map_err(|e| {
        out.truncate(start);
        Status::new(
            StatusCode::Internal,
            format!("cannot encode a stream message: {e}"),
        )
    })
}

/// Encodes a typed fault.
pub(crate) fn encode_fault<E: Serialize>(format: Format, fault: &E) -> Status {
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
    fn a_stream_message_encoded_in_place_is_the_body_encode_makes() {
        #[derive(Serialize)]
        struct Quote {
            symbol: String,
            seq: u32,
            price: f64,
            raw: Vec<u8>,
        }
        let q = Quote {
            symbol: "KEEL".into(),
            seq: 7,
            price: 100.25,
            raw: vec![1, 2, 3],
        };
        for format in [Format::MsgPack, Format::Postcard, Format::Json] {
            let mut out = b"kept".to_vec();
            encode_message_into(format, &q, &mut out).unwrap();
            assert_eq!(&out[..4], b"kept");
            assert_eq!(&out[4..], &encode(format, &q).unwrap()[..], "{format:?}");
        }
        // Refused or failed: nothing written.
        let mut out = b"kept".to_vec();
        let status = encode_message_into(Format::Json, &f64::NAN, &mut out).unwrap_err();
        assert_eq!(
            (status.code(), &out[..]),
            (StatusCode::OutOfRange, &b"kept"[..])
        );
        // JSON has no map keys but strings: fails after writing the map's opening brace.
        let map = std::collections::BTreeMap::from([(vec![1u8], 1u8)]);
        let status = encode_message_into(Format::Json, &map, &mut out).unwrap_err();
        assert_eq!(
            (status.code(), &out[..]),
            (StatusCode::Internal, &b"kept"[..])
        );
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

/// The MessagePack fast path (`super::msgpack`) against rmp-serde: a body decodes to the same
/// value, or fails with the same message, whichever decodes it.
#[cfg(test)]
mod msgpack_fast_path {
    use std::collections::BTreeMap;
    use std::fmt;

    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    use serde::{Deserialize, Serialize};

    use super::{decode, decode_msgpack_rmp, encode, Format};
    use crate::core::msgpack;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Unit,
        New(i32),
        Tuple(u8, String),
        Struct { x: f64, y: Option<bool> },
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Marker;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Meters(u16);

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Rich {
        a: f64,
        b: i64,
        c: u64,
        d: i8,
        e: u32,
        f: f32,
        g: bool,
        h: String,
        i: Vec<u8>,
        j: Option<Option<u8>>,
        k: Vec<Shape>,
        l: BTreeMap<String, i16>,
        m: (u8, char),
        n: Marker,
        o: Meters,
        p: Vec<Tree>,
        #[serde(default)]
        q: Vec<String>,
        r: (),
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Tree {
        v: u8,
        kids: Vec<Tree>,
    }

    /// Which visitor method a value arrived through, and with what: deserialized through
    /// `deserialize_any`, so both decoders must make the same calls, not just equal values.
    #[derive(Debug, Clone, PartialEq)]
    enum Seen {
        Bool(bool),
        I8(i8),
        I16(i16),
        I32(i32),
        I64(i64),
        U8(u8),
        U16(u16),
        U32(u32),
        U64(u64),
        F32(u32),
        F64(u64),
        Str(String),
        Bytes(Vec<u8>),
        Unit,
        Seq(Vec<Seen>),
        Map(Vec<(Seen, Seen)>),
    }

    impl<'de> Deserialize<'de> for Seen {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seen, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Seen;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("anything")
                }
                fn visit_bool<E>(self, v: bool) -> Result<Seen, E> {
                    Ok(Seen::Bool(v))
                }
                fn visit_i8<E>(self, v: i8) -> Result<Seen, E> {
                    Ok(Seen::I8(v))
                }
                fn visit_i16<E>(self, v: i16) -> Result<Seen, E> {
                    Ok(Seen::I16(v))
                }
                fn visit_i32<E>(self, v: i32) -> Result<Seen, E> {
                    Ok(Seen::I32(v))
                }
                fn visit_i64<E>(self, v: i64) -> Result<Seen, E> {
                    Ok(Seen::I64(v))
                }
                fn visit_u8<E>(self, v: u8) -> Result<Seen, E> {
                    Ok(Seen::U8(v))
                }
                fn visit_u16<E>(self, v: u16) -> Result<Seen, E> {
                    Ok(Seen::U16(v))
                }
                fn visit_u32<E>(self, v: u32) -> Result<Seen, E> {
                    Ok(Seen::U32(v))
                }
                fn visit_u64<E>(self, v: u64) -> Result<Seen, E> {
                    Ok(Seen::U64(v))
                }
                fn visit_f32<E>(self, v: f32) -> Result<Seen, E> {
                    Ok(Seen::F32(v.to_bits()))
                }
                fn visit_f64<E>(self, v: f64) -> Result<Seen, E> {
                    Ok(Seen::F64(v.to_bits()))
                }
                fn visit_str<E>(self, v: &str) -> Result<Seen, E> {
                    Ok(Seen::Str(v.to_owned()))
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<Seen, E> {
                    Ok(Seen::Bytes(v.to_vec()))
                }
                fn visit_unit<E>(self) -> Result<Seen, E> {
                    Ok(Seen::Unit)
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Seen, A::Error> {
                    let mut items = vec![];
                    while let Some(item) = a.next_element()? {
                        items.push(item);
                    }
                    Ok(Seen::Seq(items))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Seen, A::Error> {
                    let mut entries = vec![];
                    while let Some(entry) = a.next_entry()? {
                        entries.push(entry);
                    }
                    Ok(Seen::Map(entries))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// `decode` (the fast path, then rmp-serde) answers exactly as rmp-serde alone does.
    fn same<T: serde::de::DeserializeOwned + PartialEq + fmt::Debug>(body: &[u8]) {
        let both: Result<T, String> = decode(Format::MsgPack, body);
        let rmp: Result<T, String> = decode_msgpack_rmp(body);
        assert_eq!(both, rmp, "body {body:02x?}");
        // And the fast path never succeeds where rmp-serde fails.
        if let Some(fast) = msgpack::decode::<T>(body) {
            assert_eq!(Ok(fast), rmp, "body {body:02x?}");
        }
    }

    fn shape() -> impl Strategy<Value = Shape> {
        prop_oneof![
            Just(Shape::Unit),
            any::<i32>().prop_map(Shape::New),
            (any::<u8>(), ".{0,40}").prop_map(|(a, b)| Shape::Tuple(a, b)),
            (any::<f64>(), any::<Option<bool>>()).prop_map(|(x, y)| Shape::Struct { x, y }),
        ]
    }

    fn tree() -> impl Strategy<Value = Tree> {
        let leaf = any::<u8>().prop_map(|v| Tree { v, kids: vec![] });
        leaf.prop_recursive(6, 40, 4, |inner| {
            (any::<u8>(), vec(inner, 0..4)).prop_map(|(v, kids)| Tree { v, kids })
        })
    }

    fn rich() -> impl Strategy<Value = Rich> {
        let numbers = (
            any::<f64>(),
            any::<i64>(),
            any::<u64>(),
            any::<i8>(),
            any::<u32>(),
            any::<f32>(),
            any::<bool>(),
        );
        let rest = (
            ".{0,300}",
            vec(any::<u8>(), 0..300),
            any::<Option<Option<u8>>>(),
            vec(shape(), 0..5),
            btree_map(".{0,8}", any::<i16>(), 0..5),
            (any::<u8>(), any::<char>()),
            any::<u16>(),
            vec(tree(), 0..3),
            vec(".{0,5}", 0..3),
        );
        (numbers, rest).prop_map(
            |((a, b, c, d, e, f, g), (h, i, j, k, l, m, o, p, q))| Rich {
                a,
                b,
                c,
                d,
                e,
                f,
                g,
                h,
                i,
                j,
                k,
                l,
                m,
                n: Marker,
                o: Meters(o),
                p,
                q,
                r: (),
            },
        )
    }

    fn body(value: &impl Serialize) -> Vec<u8> {
        encode(Format::MsgPack, value).unwrap().to_vec()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// What keel writes, the fast path reads (NaN compared bitwise through `Seen`).
        #[test]
        fn the_fast_path_reads_what_keel_writes(value in rich()) {
            let b = body(&value);
            let fast = msgpack::decode::<Rich>(&b).expect("decoded by the fast path");
            prop_assert_eq!(body(&fast), b.clone());
            same::<Seen>(&b);
        }

        /// Changed, cut and extended bodies: the same value or the same error either way.
        #[test]
        fn mutated_bodies_decode_as_rmp_serde_decodes_them(
            value in rich(),
            changes in vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<Option<usize>>(),
            tail in vec(any::<u8>(), 0..3),
        ) {
            let mut b = body(&value);
            for (at, byte) in changes {
                let at = at % b.len();
                b[at] = byte;
            }
            if let Some(cut) = cut {
                b.truncate(cut % (b.len() + 1));
            }
            b.extend_from_slice(&tail);
            same::<Seen>(&b);
            same::<Tree>(&b);
            same::<Shape>(&b);
            same::<Option<(Meters, Marker)>>(&b);
            // `Rich` holds floats (NaN != NaN): compared through its encoding.
            let both = decode::<Rich>(Format::MsgPack, &b).map(|v| body(&v));
            let rmp = decode_msgpack_rmp::<Rich>(&b).map(|v| body(&v));
            prop_assert_eq!(both, rmp);
        }

        #[test]
        fn random_bytes_decode_as_rmp_serde_decodes_them(b in vec(any::<u8>(), 0..64)) {
            same::<Seen>(&b);
            same::<Tree>(&b);
            same::<Shape>(&b);
            same::<(u8, String, Option<Vec<i64>>)>(&b);
        }
    }

    #[test]
    fn the_nesting_limit_is_the_same() {
        for depth in [126, 127, 128, 129, 200, 5_000] {
            // Arrays in arrays, then a value; and trees whose kids nest as deep.
            let mut b = vec![0x91; depth];
            b.push(0x00);
            same::<Seen>(&b);
            let mut t = Tree { v: 1, kids: vec![] };
            for _ in 0..depth.min(300) {
                t = Tree {
                    v: 0,
                    kids: vec![t],
                };
            }
            same::<Tree>(&body(&t));
        }
    }

    #[test]
    fn trailing_and_missing_bytes_are_rmp_serde_errors() {
        let b = body(&(1u8, 2.5f64));
        let mut longer = b.clone();
        longer.push(0xc0);
        assert!(msgpack::decode::<(u8, f64)>(&longer).is_none());
        same::<(u8, f64)>(&longer);
        same::<(u8, f64)>(&b[..b.len() - 1]);
        assert_eq!(msgpack::decode::<(u8, f64)>(&b), Some((1, 2.5)));
    }
}
