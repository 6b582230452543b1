//! The `decompress` fuzz target's checks (`support/compress_core.rs`), run on stable with
//! proptest: arbitrary bytes, and valid bodies of both codecs with a few bytes changed, cut
//! short, or followed by more, under every limit the fuzz target uses.

#[path = "support/compress_core.rs"]
mod compress_core;

use compress_core::{check, decompress_input, selector, LIMITS};
use keel::__private::compress;
use keel::Compression;
use proptest::prelude::*;

fn codec() -> impl Strategy<Value = Compression> {
    prop_oneof![Just(Compression::Zstd), Just(Compression::Gzip)]
}

/// A body worth compressing: words from a small vocabulary, or runs of one byte.
fn plain() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(
            prop_oneof![
                Just(&b"call "[..]),
                Just(&b"keel "[..]),
                Just(&b"{\"id\":1}"[..])
            ],
            0..400
        )
        .prop_map(|words| words.concat()),
        (any::<u8>(), 0usize..200_000).prop_map(|(b, n)| vec![b; n]),
        proptest::collection::vec(any::<u8>(), 0..2000),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..1024)) {
        decompress_input(&data);
    }

    #[test]
    fn valid_bodies_changed(
        c in codec(),
        body in plain(),
        limit_index in 0usize..LIMITS.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<usize>()),
        tail in proptest::collection::vec(any::<u8>(), 0..3),
        twice: bool,
    ) {
        let mut packed = compress(c, &body).to_vec();
        if twice {
            packed.extend_from_slice(&compress(c, &body[..body.len() / 2]));
        }
        for (at, byte) in edits {
            let at = at % packed.len();
            packed[at] = byte;
        }
        if let Some(cut) = cut {
            packed.truncate(cut % (packed.len() + 1));
        }
        packed.extend_from_slice(&tail);
        let mut input = vec![selector(c, limit_index)];
        input.extend_from_slice(&packed);
        decompress_input(&input);
    }
}

#[test]
fn every_limit_on_valid_bodies() {
    for c in [Compression::Zstd, Compression::Gzip] {
        for body in [&b""[..], b"x", &[7; 5000], &[b'a'; 300_001]] {
            let packed = compress(c, body);
            for limit in LIMITS {
                check(c, &packed, limit);
            }
        }
    }
}
