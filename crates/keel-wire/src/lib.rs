//! The keel wire protocol, sans-IO.
//!
//! This crate owns the bytes that travel between a keel client and a keel host over a
//! byte-stream transport (TCP, Unix sockets, TLS). It performs no I/O and reads no clock:
//! callers feed it bytes and get frames back, or hand it frames and get bytes back. That keeps
//! every decoder fuzzable (see `fuzz/`).
//!
//! A connection starts with a [`Hello`] from the client and a [`HelloReply`] from the host, then
//! carries length-prefixed [`Frame`]s in both directions. Limits are checked from the length
//! prefix, before any allocation.

#![forbid(unsafe_code)]

mod codec;
mod frame;
mod handshake;

pub use codec::{
    decode_hello, decode_hello_reply, encode_hello, encode_hello_reply, Codec, Limits, WireError,
};
pub use frame::{Cancel, Frame, GoAway, Reply, Request, RequestFlags, StatusCode};
pub use handshake::{Hello, HelloReply, MAGIC, VERSION};

/// Default largest message body (4 MiB) either side accepts, unless configured otherwise.
pub const DEFAULT_MAX_MESSAGE_SIZE: u32 = 4 * 1024 * 1024;
