//! Encoding and decoding. (Skeleton: bodies to be implemented.)

use bytes::BytesMut;

use crate::{Frame, Hello, HelloReply};

/// Size limits a [`Codec`] enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest message body accepted or produced. Default [`crate::DEFAULT_MAX_MESSAGE_SIZE`].
    pub max_message_size: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_size: crate::DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

impl Limits {
    /// Limits with the given largest message body.
    pub fn with_max_message_size(max_message_size: u32) -> Limits {
        Limits { max_message_size }
    }
}

/// Why bytes could not become a frame (or a frame bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// A message is larger than the limit.
    TooLarge {
        /// The call the oversized frame belongs to, when it is a request and its header was read.
        call_id: Option<u64>,
        /// Declared size.
        size: u64,
        /// The limit it exceeds.
        limit: u32,
    },
    /// The bytes do not follow the protocol. The connection cannot continue.
    Malformed(&'static str),
}

/// Frame encoder/decoder.
#[derive(Debug)]
pub struct Codec {
    limits: Limits,
}

impl Codec {
    /// A codec enforcing `limits`.
    pub fn new(limits: Limits) -> Codec {
        Codec { limits }
    }
    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }
    /// Decode one frame from the front of `src`.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        let _ = src;
        todo!()
    }
    /// Append `frame` to `dst`.
    pub fn encode(&self, frame: &Frame, dst: &mut BytesMut) -> Result<(), WireError> {
        let _ = (frame, dst);
        todo!()
    }
}

/// Append a client hello.
pub fn encode_hello(hello: &Hello, dst: &mut BytesMut) {
    let _ = (hello, dst);
    todo!()
}
/// Decode a client hello.
pub fn decode_hello(src: &mut BytesMut) -> Result<Option<Hello>, WireError> {
    let _ = src;
    todo!()
}
/// Append a host hello reply.
pub fn encode_hello_reply(reply: &HelloReply, dst: &mut BytesMut) {
    let _ = (reply, dst);
    todo!()
}
/// Decode a host hello reply.
pub fn decode_hello_reply(src: &mut BytesMut) -> Result<Option<HelloReply>, WireError> {
    let _ = src;
    todo!()
}
