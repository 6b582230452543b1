//! The core every other layer shares: what a call is, independent of how it travels.
//!
//! - [`error`]: the caller's [`Error`](error::Error);
//! - [`status`]: what a host says about a call, [`Status`](status::Status) and keel's own
//!   [`StatusCode`](status::StatusCode);
//! - [`metadata`]: [`Metadata`](metadata::Metadata), the key/value pairs that travel with a call;
//! - [`context`]: [`Context`](context::Context), what a handler knows about its call;
//! - [`stream`]: [`ByteStream`](stream::ByteStream), a body that flows in chunks;
//! - [`messages`]: [`MessageStream`](messages::MessageStream), a stream of typed messages framed
//!   inside one;
//! - [`service`]: a contract's descriptors and the [`Service`](service::Service) trait generated
//!   servers implement (the dispatch trait);
//! - [`format`]: [`Format`](format::Format), how a call's bodies are encoded (MessagePack,
//!   postcard, JSON, protobuf);
//! - [`codec`]: how arguments, replies and faults are encoded in a format;
//! - [`proto`]: protobuf derived from a contract's serde types (gRPC's encoding);
//! - [`keepalive`]: [`Keepalive`](keepalive::Keepalive) and [`PingPolicy`](keepalive::PingPolicy),
//!   the liveness settings both sides share;
//! - [`depth`]: the nesting limit decoding keeps in every format;
//! - [`finite`]: whether a reply holds a float JSON cannot carry (infinity, NaN);
//! - [`compress`]: body compression (zstd, gzip), with bounded decompression;
//! - [`metrics`]: the names of keel's metrics, and the Prometheus recorder (`keel::metrics`);
//! - [`random`]: jitter and random picks without an RNG crate;
//! - [`block_on`]: a future run to completion on the calling thread (the streams'
//!   `blocking_next`).
//!
//! Imports nothing else of keel's but the clock (`runtime/`, the layer below).

pub(crate) mod block_on;
pub(crate) mod codec;
pub(crate) mod compress;
pub(crate) mod context;
pub(crate) mod depth;
pub(crate) mod error;
pub(crate) mod finite;
pub(crate) mod format;
pub(crate) mod keepalive;
pub(crate) mod messages;
pub(crate) mod metadata;
pub mod metrics;
pub(crate) mod msgpack;
pub(crate) mod proto;
pub(crate) mod random;
pub(crate) mod service;
pub(crate) mod status;
pub(crate) mod stream;
