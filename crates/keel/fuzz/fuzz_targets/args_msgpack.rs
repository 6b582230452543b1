//! Arbitrary bytes as the MessagePack body of a call (keel's own clients' format): the first
//! byte picks an operation of a contract with representative argument types, the rest is decoded as the host decodes it (the generated
//! server's `invoke`, and `keel::__private::decode_args` into the generated arguments struct).
//! Must never panic; a refusal is `BadRequest`; whatever decodes re-encodes and decodes to the
//! same value. The checks live in `tests/support/args_core.rs`, which stable CI also runs.

#![no_main]

#[path = "../../tests/support/args_core.rs"]
mod args_core;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    args_core::decode_args_input(keel::__private::Format::MsgPack, data)
});
