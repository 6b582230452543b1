//! `RecvWindow` and `SendWindow` under a peer that sends any amount of data and grants any
//! increment: must never panic, and keep the flow-control invariants. The checks live in
//! `tests/support/fuzz_core.rs`, which stable CI also runs.

#![no_main]

#[path = "../../tests/support/fuzz_core.rs"]
mod fuzz_core;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_core::windows(data));
