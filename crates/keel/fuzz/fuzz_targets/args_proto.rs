//! Arbitrary bytes as the protobuf body of a gRPC call: the first byte picks an operation of
//! a contract whose types cover the protobuf mapping, the rest is decoded as the host decodes
//! it (the generated server's `invoke`, and `keel::__private::decode_args`). Must never panic;
//! a refusal is `BadRequest`; whatever decodes re-encodes stably. The checks live in
//! `tests/support/proto_core.rs`, which stable CI also runs.

#![no_main]

#[path = "../../tests/support/proto_core.rs"]
mod proto_core;

libfuzzer_sys::fuzz_target!(|data: &[u8]| proto_core::proto_input(data));
