//! How a call's bodies are encoded on the wire: the [`Format`] a binding chose for it.

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
