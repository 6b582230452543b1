//! The checks behind the `decompress` fuzz target in `fuzz/`, shared with `tests/compress.rs` so
//! that stable CI runs them too.
//!
//! An input's first byte picks the codec (its low bit: zstd or gzip) and the limit (the next
//! three bits, one of [`LIMITS`]); the rest is a compressed body, decoded as a host decodes one
//! (`keel::__private::decompress`). It must never panic, and:
//!
//! - what decodes is at most the limit, decodes the same under the largest limit, and survives
//!   `compress` and `decompress` again unchanged;
//! - `TooLarge` names the limit it was given, and under the largest limit the body is still
//!   refused or decodes to more than the first limit (the limit only ever cuts decoding short);
//! - `Malformed` stays `Malformed` under the largest limit (the error is in the body, not in
//!   where the limit fell).
//!
//! All limits are at most 1 MiB, so zstd's window cap (2 MiB under any of them) is the same for
//! all and cannot make one limit refuse what another accepts.

// The fuzz target and the stable test each use part of this.
#![allow(dead_code, unreachable_pub, missing_docs)]

use keel::__private::{compress, decompress, DecompressError};
use keel::Compression;

/// The limits an input's first byte picks from.
pub const LIMITS: [usize; 8] = [0, 1, 64, 1000, 4096, 65_536, 300_000, 1 << 20];

/// The largest of [`LIMITS`].
pub const MAX_LIMIT: usize = 1 << 20;

/// The first byte that picks `c` and `LIMITS[limit_index]`.
pub fn selector(c: Compression, limit_index: usize) -> u8 {
    let codec = match c {
        Compression::Gzip => 1,
        _ => 0,
    };
    codec | ((limit_index as u8 & 7) << 1)
}

/// Decodes one input (see the module docs), panicking if any check fails.
pub fn decompress_input(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let c = if pick & 1 == 1 {
        Compression::Gzip
    } else {
        Compression::Zstd
    };
    let limit = LIMITS[usize::from(pick >> 1) & 7];
    check(c, body, limit);
}

/// The checks for `body` decoded with `c` under `limit`.
pub fn check(c: Compression, body: &[u8], limit: usize) {
    let result = decompress(c, body, limit);
    let widest = || decompress(c, body, MAX_LIMIT);
    match result {
        Ok(out) => {
            assert!(
                out.len() <= limit,
                "{c}: {} bytes under a limit of {limit}",
                out.len()
            );
            if limit < MAX_LIMIT {
                assert_eq!(
                    widest(),
                    Ok(out.clone()),
                    "{c}: a wider limit decodes differently"
                );
            }
            let again = compress(c, &out);
            assert_eq!(
                decompress(c, &again, out.len()),
                Ok(out.clone()),
                "{c}: does not survive compress and decompress"
            );
        }
        Err(DecompressError::TooLarge { limit: l }) => {
            assert_eq!(l, limit, "{c}: TooLarge names another limit");
            if limit < MAX_LIMIT {
                if let Ok(out) = widest() {
                    assert!(
                        out.len() > limit,
                        "{c}: TooLarge under {limit}, but {} bytes under {MAX_LIMIT}",
                        out.len()
                    );
                }
            }
        }
        Err(DecompressError::Malformed(why)) => {
            if limit < MAX_LIMIT {
                let wide = widest();
                assert!(
                    matches!(wide, Err(DecompressError::Malformed(_))),
                    "{c}: Malformed under {limit} ({why}) but {:?} under {MAX_LIMIT}",
                    wide.map(|b| b.len())
                );
            }
        }
    }
}
