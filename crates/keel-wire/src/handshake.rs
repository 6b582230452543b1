//! Connection handshake. Implementation: see the functions' docs.

/// First four bytes a client sends on a new connection.
pub const MAGIC: [u8; 4] = *b"KEEL";
/// The newest protocol version this crate speaks. It also speaks every version from 1 up: a
/// host accepts `min(client's, its own)` (see `PROTOCOL.md`, "Versions").
pub const VERSION: u16 = 2;

/// Client → host, first bytes on a connection: `MAGIC`, version, the client's message limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version the client speaks.
    pub version: u16,
    /// Largest message body the client accepts.
    pub max_message_size: u32,
}

/// Host → client: accept with the host's limit, or reject with a reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloReply {
    /// The connection is open.
    Accept {
        /// Protocol version in use.
        version: u16,
        /// Largest message body the host accepts; the client checks its requests against it.
        max_message_size: u32,
    },
    /// The host will not talk to this client; it closes the connection after sending this.
    Reject {
        /// The version the host speaks.
        supported_version: u16,
        /// Why, for humans.
        reason: String,
    },
}
