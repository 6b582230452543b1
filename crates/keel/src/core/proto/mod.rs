//! Protobuf, derived from a contract's serde types: what gRPC callers send and receive.
//!
//! - `wire.rs`: protobuf's wire format, sans-IO (varints, tags, a message's fields);
//! - `encode.rs`: any `Serialize` value as a message;
//! - `descriptor.rs`: a file's `FileDescriptorProto`, for gRPC server reflection;
//! - `decode.rs`: a message as any `Deserialize` type, the type driving the decoding;
//! - `index.rs`: where a message's fields lie by number, for `decode.rs` (sans-IO, small);
//! - `names.rs`: how Rust names become protobuf's (`PascalCase` methods, identifiers);
//! - `numbers.rs`: the field numbers a contract pins, checked against its types;
//! - `model.rs`: the shapes of types, as serde-reflection traces them, kept in a `static`;
//! - `file.rs`: one `.proto` file's services, messages and enums, decided once for the text
//!   and the reflection descriptors;
//! - `json.rs`: protobuf JSON's names and strings read as keel's serde JSON (requests);
//! - `schema.rs`: a contract's types traced (with serde-reflection) into the messages, enums
//!   and oneofs of its `.proto` file, checked for what protobuf cannot say.
//!
//! The mapping (GRPC.md, "Types"): a struct is a message whose fields are numbered from 1 in
//! declaration order (unless the contract pins them, `proto_numbers`); an operation's parameters are its request message; a body that is not
//! a struct is field 1 (`value`) of a wrapper message; an enum whose variants carry nothing is
//! a protobuf enum, any other a message with one `oneof` (variant `i` is member `i + 1`);
//! `Option<T>` is an `optional` field, `Vec<T>` a `repeated` one (numbers packed), a map a
//! `map<K, V>`.

pub(crate) mod decode;
pub(crate) mod descriptor;
pub(crate) mod encode;
pub(crate) mod file;
pub(crate) mod index;
#[cfg(feature = "http")]
pub(crate) mod json;
pub(crate) mod model;
pub(crate) mod names;
pub(crate) mod numbers;
pub(crate) mod schema;
pub(crate) mod wire;

use std::collections::{HashMap, HashSet};
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

/// What a contract's encoding needs to know beyond what serde tells a serializer, found by
/// tracing its types (`schema.rs`): which enums are protobuf enums (every variant carries
/// nothing: encoded as a varint, where other enums are a oneof message; serde tells a
/// serializer only the variant it serializes), and the messages whose field numbers the
/// contract pins (`proto_numbers`).
#[derive(Debug, Default)]
pub(crate) struct Layout {
    c_like: HashSet<String>,
    /// By serde name, the pinned messages: each field's serde name and number.
    numbers: HashMap<String, Pins>,
}

impl Layout {
    /// The enums named in `names` are protobuf enums; no numbers are pinned.
    pub(crate) fn new(names: impl IntoIterator<Item = String>) -> Self {
        Layout {
            c_like: names.into_iter().collect(),
            numbers: HashMap::new(),
        }
    }

    /// This layout, with the fields of the messages in `numbers` (by serde name) numbered as
    /// it says (each field's serde name and number).
    pub(crate) fn with_numbers(mut self, numbers: HashMap<String, Pins>) -> Self {
        self.numbers = numbers;
        self
    }

    /// Whether the enum serde calls `name` is a protobuf enum.
    pub(crate) fn is_c_like(&self, name: &str) -> bool {
        self.c_like.contains(name)
    }

    /// The pinned numbers of the struct serde calls `name` (each field's serde name and
    /// number), or `None` when its fields are numbered from 1 in order.
    pub(crate) fn pinned(&self, name: &str) -> Option<&[(String, u32)]> {
        if self.numbers.is_empty() {
            return None;
        }
        self.numbers.get(name).map(|n| &n[..])
    }
}

/// One pinned message's fields: each one's serde name and number.
pub(crate) type Pins = Box<[(String, u32)]>;

/// The field serde calls `key`, field `index` (from 0, serde's order) of a message whose
/// pinned numbers are `pinned`: its number. Unpinned, `index + 1`; pinned, the number of its
/// name (not of its place: serde leaves out a field it skips when serializing).
pub(crate) fn field_number(
    pinned: Option<&[(String, u32)]>,
    index: usize,
    key: &str,
) -> Result<u32, ProtoError> {
    match pinned {
        None => u32::try_from(index + 1).map_err(|_| ProtoError::new("too many fields")),
        Some(numbers) => pinned_number(numbers, key).ok_or_else(|| {
            ProtoError::new(format!(
                "field `{key}` has no pinned number (a field serde only serializes cannot be \
                 pinned)"
            ))
        }),
    }
}

/// The number `numbers` pins for the field serde calls `key`.
pub(crate) fn pinned_number(numbers: &[(String, u32)], key: &str) -> Option<u32> {
    numbers
        .iter()
        .find(|(name, _)| name == key)
        .map(|&(_, n)| n)
}

/// The protobuf encoding of one contract's types ([`Format::Protobuf`]): which of its enums
/// are protobuf enums, which field numbers it pins. Not a public API.
///
/// [`Format::Protobuf`]: crate::core::format::Format::Protobuf
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct ProtoCodec {
    layout: &'static Layout,
}

impl ProtoCodec {
    /// The encoding of the contract whose layout is `layout`.
    pub(crate) fn new(layout: &'static Layout) -> Self {
        ProtoCodec { layout }
    }

    /// Appends `value`, encoded as a message body, to `out`.
    pub(crate) fn encode_into<T: serde::Serialize + ?Sized>(
        &self,
        value: &T,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        encode::encode_into(self.layout, value, out).map_err(|e| e.to_string())
    }

    /// Decodes the message body `body` as a `T`.
    pub(crate) fn decode<'de, T: serde::Deserialize<'de>>(
        &self,
        body: &'de [u8],
    ) -> Result<T, String> {
        decode::decode(self.layout, body).map_err(|e| e.to_string())
    }
}

impl fmt::Debug for ProtoCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProtoCodec")
    }
}

impl PartialEq for ProtoCodec {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.layout, other.layout)
    }
}

impl Eq for ProtoCodec {}

#[cfg(test)]
mod tests;
