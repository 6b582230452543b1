//! Arbitrary bytes as a stream of messages (envelope frames or NDJSON lines), cut into chunks
//! of arbitrary sizes as a peer's bytes arrive: the first byte picks the framing and a small
//! message size limit, the second how the rest is cut. The chunks go through the decoder a host
//! and a client run on a stream's bytes (`keel::__private::Decoder`). Must never panic, never
//! hold more than the limit plus a header plus the chunk just pushed (nor room for a length a
//! frame only announced), and whatever decodes re-encodes (`encode_message`) to bytes that
//! decode to the same frames. The checks live in `tests/support/frames_core.rs`, which stable
//! CI also runs.

#![no_main]

#[path = "../../tests/support/frames_core.rs"]
mod frames_core;

libfuzzer_sys::fuzz_target!(|data: &[u8]| frames_core::frames_input(data));
