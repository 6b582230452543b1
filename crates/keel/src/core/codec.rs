//! How message bodies are encoded and decoded: MessagePack for keel's own clients (protocol
//! version 2), postcard for version-1 clients, JSON for any HTTP client. Decoding arguments is
//! the caller's fault when it fails (`BadRequest`); encoding a reply is the host's (`Internal`).
//!
//! MessagePack is written with structs as maps keyed by field name (and an operation's
//! arguments as a map keyed by parameter name), so contracts evolve as JSON ones do: a field or
//! parameter the receiver does not know is ignored, and one it expects but does not get takes
//! its default when it has `#[serde(default)]` (`#[keel(default)]` on a parameter). Byte
//! sequences (`Vec<u8>`, `&[u8]`) travel as MessagePack `bin`, one byte per byte.

use bytes::Bytes;
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
        Format::MsgPack => {
            let mut buf = Vec::with_capacity(64);
            let mut se = rmp_serde::Serializer::new(&mut buf)
                .with_struct_map()
                .with_bytes(rmp_serde::config::BytesMode::ForceIterables);
            value.serialize(&mut se).map_err(|e| e.to_string())?;
            Ok(Bytes::from(buf))
        }
        Format::Postcard => postcard::to_stdvec(value)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
        Format::Json => serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
    }
}

/// Decodes a whole body. Bytes left over after the value are an error in both formats (postcard
/// itself would ignore them, so random bytes could decode as a call), and so is a value nested
/// more than [`MAX_DEPTH`](super::depth::MAX_DEPTH) levels deep (serde_json's limit; postcard
/// has none, and would overflow the stack).
pub(crate) fn decode<T: DeserializeOwned>(format: Format, body: &[u8]) -> Result<T, String> {
    match format {
        Format::MsgPack => {
            let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(body));
            let value = T::deserialize(Depth::new(&mut de)).map_err(|e| e.to_string())?;
            let rest = body.len() as u64 - de.position();
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

/// Decodes operation arguments; a failure is the caller's fault (`BadRequest`).
pub(crate) fn decode_args<T: DeserializeOwned>(format: Format, body: &[u8]) -> Result<T, Status> {
    decode(format, body).map_err(|e| {
        Status::new(
            StatusCode::BadRequest,
            format!("cannot decode arguments: {e}"),
        )
    })
}

/// Encodes a handler's return value.
pub(crate) fn encode_ok<T: Serialize>(format: Format, value: &T) -> Outcome {
    encode(format, value)
        .map(Payload::Body)
        .map_err(|e| Status::new(StatusCode::Internal, format!("cannot encode reply: {e}")))
}

/// Encodes a typed fault.
fn encode_fault<E: Serialize>(format: Format, fault: &E) -> Status {
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
