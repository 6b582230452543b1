//! The gRPC protocol on the host's http:// and https:// endpoints (GRPC.md): a request whose
//! content type is `application/grpc` or `application/grpc+{subtype}` comes here from the
//! route, beside keel's own HTTP convention. Calls reach the same dispatcher, with the same
//! limits; only their framing, headers and status encoding are gRPC's.
//!
//! One concern per file:
//! - `mod.rs`: this tour;
//! - `call.rs`: one call, request to dispatch to answer;
//! - `request.rs`: the operation a path names, what the headers say;
//! - `format.rs`: the message format a content type names (the one place it is chosen);
//! - `messages.rs`: the request's messages (a unary call's one, or a stream);
//! - `reply.rs`: the answer: messages and trailers, or Trailers-Only.
//!
//! The pieces that do no IO (prefixes, `grpc-timeout`, status codes, status details) are in
//! `bindings/http/grpc/`.

mod call;
mod format;
mod messages;
mod reply;
mod request;

pub(super) use call::{call, is_grpc, Dialect};
