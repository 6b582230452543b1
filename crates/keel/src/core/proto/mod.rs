//! Protobuf, derived from a contract's serde types: what gRPC callers send and receive.
//!
//! - `wire.rs`: protobuf's wire format, sans-IO (varints, tags, a message's fields);
//! - `encode.rs`: any `Serialize` value as a message;
//! - `descriptor.rs`: a file's `FileDescriptorProto`, for gRPC server reflection;
//! - `decode.rs`: a message as any `Deserialize` type, the type driving the decoding;
//! - `names.rs`: how Rust names become protobuf's (`PascalCase` methods, identifiers);
//! - `model.rs`: the shapes of types, as serde-reflection traces them, kept in a `static`;
//! - `file.rs`: one `.proto` file's services, messages and enums, decided once for the text
//!   and the reflection descriptors;
//! - `json.rs`: protobuf JSON's names and strings read as keel's serde JSON (requests);
//! - `schema.rs`: a contract's types traced (with serde-reflection) into the messages, enums
//!   and oneofs of its `.proto` file, checked for what protobuf cannot say.
//!
//! The mapping (GRPC.md, "Types"): a struct is a message whose fields are numbered from 1 in
//! declaration order; an operation's parameters are its request message; a body that is not
//! a struct is field 1 (`value`) of a wrapper message; an enum whose variants carry nothing is
//! a protobuf enum, any other a message with one `oneof` (variant `i` is member `i + 1`);
//! `Option<T>` is an `optional` field, `Vec<T>` a `repeated` one (numbers packed), a map a
//! `map<K, V>`.

pub(crate) mod decode;
pub(crate) mod descriptor;
pub(crate) mod encode;
pub(crate) mod file;
#[cfg(feature = "http")]
pub(crate) mod json;
pub(crate) mod model;
pub(crate) mod names;
pub(crate) mod schema;
pub(crate) mod wire;

use std::collections::HashSet;
use std::fmt;

/// What went wrong encoding or decoding a protobuf message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProtoError(String);

impl ProtoError {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        ProtoError(msg.into())
    }
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtoError {}

impl serde::ser::Error for ProtoError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ProtoError(msg.to_string())
    }
}

impl serde::de::Error for ProtoError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ProtoError(msg.to_string())
    }
}

/// The enums of a contract that are protobuf enums (every variant carries nothing): encoded
/// as a varint, where other enums are a oneof message. Found by tracing the contract's types
/// (`schema.rs`); serde tells a serializer only the variant it serializes.
#[derive(Debug, Default)]
pub(crate) struct Enums {
    c_like: HashSet<String>,
}

impl Enums {
    /// The enums named in `names` are protobuf enums.
    pub(crate) fn new(names: impl IntoIterator<Item = String>) -> Self {
        Enums {
            c_like: names.into_iter().collect(),
        }
    }

    /// Whether the enum serde calls `name` is a protobuf enum.
    pub(crate) fn is_c_like(&self, name: &str) -> bool {
        self.c_like.contains(name)
    }
}

/// The protobuf encoding of one contract's types ([`Format::Protobuf`]): which of its enums
/// are protobuf enums. Not a public API.
///
/// [`Format::Protobuf`]: crate::core::format::Format::Protobuf
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct ProtoCodec {
    enums: &'static Enums,
}

impl ProtoCodec {
    /// The encoding of the contract whose enums are `enums`.
    pub(crate) fn new(enums: &'static Enums) -> Self {
        ProtoCodec { enums }
    }

    /// Appends `value`, encoded as a message body, to `out`.
    pub(crate) fn encode_into<T: serde::Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        encode::encode_into(self.enums, value, out).map_err(|e| e.to_string())
    }

    /// Decodes the message body `body` as a `T`.
    pub(crate) fn decode<'de, T: serde::Deserialize<'de>>(
        &self,
        body: &'de [u8],
    ) -> Result<T, String> {
        decode::decode(self.enums, body).map_err(|e| e.to_string())
    }
}

impl fmt::Debug for ProtoCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProtoCodec")
    }
}

impl PartialEq for ProtoCodec {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.enums, other.enums)
    }
}

impl Eq for ProtoCodec {}

#[cfg(test)]
mod tests;
