//! Arbitrary bytes, fed in arbitrary chunk sizes to `decode_hello` and `decode_hello_reply`:
//! must never panic. The checks live in `tests/support/fuzz_core.rs`, which stable CI also runs.

#![no_main]

#[path = "../../tests/support/fuzz_core.rs"]
mod fuzz_core;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_core::decode_hellos(data));
