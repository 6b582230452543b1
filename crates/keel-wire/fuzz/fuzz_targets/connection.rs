//! A client core and a host core (`Connection::handle`) fed frames decoded from arbitrary bytes
//! or built from them, interleaved with the API calls a caller makes, as the input chooses: must
//! never panic, and fail only with the documented `ConnError`s. The checks live in
//! `tests/support/fuzz_core.rs`, which stable CI also runs.

#![no_main]

#[path = "../../tests/support/fuzz_core.rs"]
mod fuzz_core;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_core::connection(data));
