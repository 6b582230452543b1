//! How a call's bodies are encoded on the wire: the [`Format`] a binding chose for it, and the
//! [`Framing`] of its streams of messages.

use super::proto::ProtoCodec;

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
    /// Protobuf, derived from the contract's types (gRPC): arguments are a message of the
    /// parameters numbered in order (see `core/proto`).
    Protobuf(ProtoCodec),
}

/// How messages are framed in a stream's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Length-prefixed frames (MessagePack or postcard messages).
    Envelope,
    /// Newline-delimited JSON.
    Ndjson,
    /// Server-Sent Events of JSON messages (encoding only: nothing sends SSE to a host).
    Sse,
}

impl Framing {
    /// The framing a stream of messages in `format` has unless a binding chose another.
    pub(crate) fn for_format(format: Format) -> Framing {
        match format {
            Format::Json => Framing::Ndjson,
            _ => Framing::Envelope,
        }
    }
}
