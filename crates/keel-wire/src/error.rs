//! [`WireError`]: why bytes could not become a frame, or a frame bytes.

use std::fmt;

/// Longest service or operation name, in bytes (the length travels in one byte).
pub const MAX_NAME_LEN: usize = 255;

/// Why bytes could not become a frame (or a frame bytes).
///
/// Use [`WireError::is_fatal`] to decide whether the connection can go on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// A message is larger than the limit. Not fatal: when decoding, the codec skips the rest
    /// of the oversized frame by itself; when encoding, nothing was written.
    TooLarge {
        /// The call the oversized frame belongs to, when it is a request, a reply or a
        /// stream's data or end and its call id was read (or, when encoding, the frame's call
        /// id).
        call_id: Option<u64>,
        /// Declared size: the frame's length field when it exceeds [`Codec::frame_limit`](crate::Codec::frame_limit), or
        /// the body length when the body exceeds the message limit.
        size: u64,
        /// The limit it exceeds.
        limit: u32,
    },
    /// The bytes do not follow the protocol. The connection cannot continue.
    Malformed(&'static str),
    /// Encoding only: a service or operation name is longer than [`MAX_NAME_LEN`] bytes.
    /// Nothing was written; not fatal.
    NameTooLong {
        /// Which name: `"service"` or `"operation"`.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// Encoding only: a [`WindowUpdate`](crate::WindowUpdate) with an increment of 0, which the protocol forbids.
    /// Nothing was written; not fatal.
    ZeroWindowIncrement {
        /// The update's call id.
        call_id: u64,
    },
    /// Building or encoding only: a metadata key or value is invalid, the block is too long,
    /// or a frame carries something its protocol version cannot (a compressed body in
    /// version 1). Nothing was written; not fatal.
    InvalidMetadata(&'static str),
}

impl WireError {
    /// Whether the connection must be closed: `true` for [`WireError::Malformed`], `false` for
    /// errors that concern one message ([`WireError::TooLarge`], [`WireError::NameTooLong`],
    /// [`WireError::ZeroWindowIncrement`]).
    pub fn is_fatal(&self) -> bool {
        match self {
            WireError::Malformed(_) => true,
            WireError::TooLarge { .. }
            | WireError::NameTooLong { .. }
            | WireError::ZeroWindowIncrement { .. }
            | WireError::InvalidMetadata(_) => false,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::TooLarge {
                call_id,
                size,
                limit,
            } => {
                write!(f, "message too large: {size} bytes, limit {limit}")?;
                if let Some(id) = call_id {
                    write!(f, " (call {id})")?;
                }
                Ok(())
            }
            WireError::Malformed(what) => write!(f, "malformed keel wire data: {what}"),
            WireError::NameTooLong { field, len } => {
                write!(
                    f,
                    "{field} name too long: {len} bytes, limit {MAX_NAME_LEN}"
                )
            }
            WireError::ZeroWindowIncrement { call_id } => {
                write!(f, "window update with increment 0 (call {call_id})")
            }
            WireError::InvalidMetadata(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for WireError {}
