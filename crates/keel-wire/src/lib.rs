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
//!
//! The exact byte layout is in `PROTOCOL.md` next to this crate's `Cargo.toml`.
//!
//! # Streamed transfer
//!
//! A call may carry a byte stream in each direction besides its body: a [`Request`] flagged
//! [`RequestFlags::streamed`] is followed by [`StreamData`] frames and one [`StreamEnd`], and so
//! is an `Ok` [`Reply`] of an operation with a streamed response. Each stream is flow-controlled
//! by its consumer with [`WindowUpdate`] credit, starting at [`DEFAULT_INITIAL_WINDOW`];
//! [`StopSending`] asks the producer to stop early. The sans-IO bookkeeping for both ends is
//! [`SendWindow`] (producer) and [`RecvWindow`] (consumer, with window auto-tuning up to
//! [`DEFAULT_MAX_WINDOW`]). Ordering and error rules are in `PROTOCOL.md`.
//!
//! # The connection core
//!
//! Above frames and flow control, [`Connection`] (module [`conn`]) is the per-connection protocol
//! state both ends of a connection share, still sans-IO: the client's call table, the
//! flow-control accounting of every stream in both directions, ping/pong and the round-trip-time
//! estimate, GoAway, and which frames each side may receive. The caller feeds it decoded frames
//! and gets [`Event`]s back, tells it what the application did, and sends the control frames it
//! queues; the caller keeps the socket, the clock, and the frames that carry application data.
//!
//! # Example
//!
//! Encode a request and decode it back, as the two ends of a connection would:
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use keel_wire::{Codec, Frame, Limits, Request, RequestFlags};
//!
//! let codec = Codec::new(Limits::default());
//! let request = Frame::Request(Request {
//!     call_id: 1,
//!     flags: RequestFlags::default(),
//!     deadline_us: 5_000_000,
//!     service: "Calculator".into(),
//!     operation: "add".into(),
//!     metadata: Bytes::new(),
//!     compression: 0,
//!     body: Bytes::from_static(&[2, 3]),
//! });
//! let mut wire = BytesMut::new();
//! codec.encode(&request, &mut wire)?;
//!
//! // The receiving side feeds whatever arrived; a partial frame gives `None`.
//! let mut receiver = Codec::new(Limits::default());
//! let mut inbox = BytesMut::new();
//! inbox.extend_from_slice(&wire[..7]);
//! assert_eq!(receiver.decode(&mut inbox)?, None);
//! inbox.extend_from_slice(&wire[7..]);
//! assert_eq!(receiver.decode(&mut inbox)?, Some(request));
//! # Ok::<(), keel_wire::WireError>(())
//! ```
//!
//! # Errors and limits
//!
//! A [`WireError`] for which [`WireError::is_fatal`] is true means the peer does not speak the
//! protocol and the connection must be closed. [`WireError::TooLarge`] is not fatal: the
//! decoder skips the oversized frame without buffering it, and names the call when it can, so
//! the host can answer that one call with [`StatusCode::TooLarge`] and carry on.

#![forbid(unsafe_code)]

mod codec;
pub mod conn;
mod error;
mod flow;
mod frame;
mod handshake;
pub mod metadata;

pub use codec::{
    decode_hello, decode_hello_reply, encode_hello, encode_hello_reply, Codec, KnownNames, Limits,
    HELLO_LEN, LEN_PREFIX_SIZE, MAX_HEADER, MAX_REASON_LEN,
};
pub use conn::{
    CallRejected, Closed, ConnError, Connection, Event, Keepalive, PingPolicy, Probe, Side,
    BUSY_PING_SPACING, BUSY_QUIET_MIN, BUSY_VERDICT_MIN, CONNECTION, MAX_LEARNED_INITIAL_WINDOW,
};
pub use error::{WireError, MAX_NAME_LEN};
pub use flow::{
    FlowError, RecvWindow, SendWindow, WindowConfig, MAX_WINDOW_SIZE, WINDOW_EXCEEDED_REASON,
};
pub use frame::{
    Cancel, Frame, GoAway, Reply, Request, RequestFlags, StatusCode, StopSending, StreamData,
    StreamEnd, WindowUpdate,
};
pub use handshake::{Hello, HelloReply, MAGIC, VERSION};

/// Default largest message body (4 MiB) either side accepts, unless configured otherwise.
pub const DEFAULT_MAX_MESSAGE_SIZE: u32 = 4 * 1024 * 1024;

/// Flow-control credit, in data bytes, each side starts with per stream direction (the
/// producer of a stream may send this much before the first [`WindowUpdate`]).
pub const DEFAULT_INITIAL_WINDOW: u32 = 256 * 1024;

/// Default largest window (8 MiB) a [`RecvWindow`] auto-tunes up to.
pub const DEFAULT_MAX_WINDOW: u32 = 8 * 1024 * 1024;
