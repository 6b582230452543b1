//! Arbitrary bytes as a compressed body: the first byte picks the codec (zstd or gzip) and the
//! limit (0 B to 1 MiB), the rest is decoded as a host decodes a compressed body
//! (`keel::__private::decompress`). Must never panic nor pass the limit; what decodes survives
//! compress and decompress again; the limit only ever cuts decoding short. The checks live in
//! `tests/support/compress_core.rs`, which stable CI also runs (`tests/compress.rs`).

#![no_main]

#[path = "../../tests/support/compress_core.rs"]
mod compress_core;

libfuzzer_sys::fuzz_target!(|data: &[u8]| compress_core::decompress_input(data));
