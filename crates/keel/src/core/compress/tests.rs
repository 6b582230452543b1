//! Tests of the codecs and their bounds, and a measurement of each codec (run by hand).

use super::*;
use std::time::{Duration, Instant};

use Compression::{Gzip, Zstd};

const MIB: usize = 1024 * 1024;

/// `n` bytes from a fixed xorshift sequence: incompressible.
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// JSON records like an RPC body's, about `n` bytes.
fn json_body(n: usize) -> Vec<u8> {
    let mut out = String::from("[");
    let mut i = 0u64;
    while out.len() < n.saturating_sub(1) {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            r#"{{"id":{},"name":"user-{}","email":"user{}@example.com","active":{},"score":{}.{}}}"#,
            1000 + i * 7,
            i,
            i * 31 % 977,
            i.is_multiple_of(3),
            i * 13 % 100,
            i % 10
        ));
        i += 1;
    }
    out.truncate(n.saturating_sub(1));
    out.push(']');
    out.into_bytes()
}

/// English-like text of about `n` bytes: words drawn from a small vocabulary.
fn text_body(n: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the",
        "call",
        "host",
        "keel",
        "latency",
        "stays",
        "flat",
        "under",
        "load",
        "and",
        "every",
        "reply",
        "is",
        "bounded",
        "by",
        "its",
        "budget",
        "when",
        "a",
        "burst",
        "arrives",
        "worker",
        "pool",
        "grows",
        "connection",
        "stream",
        "of",
        "bytes",
        "frame",
    ];
    let picks = random_bytes(n, 7);
    let mut out = Vec::with_capacity(n + 16);
    let mut i = 0;
    while out.len() < n {
        out.extend_from_slice(WORDS[usize::from(picks[i]) % WORDS.len()].as_bytes());
        out.push(if picks[i].is_multiple_of(11) {
            b'\n'
        } else {
            b' '
        });
        i += 1;
    }
    out.truncate(n);
    out
}

fn samples() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("empty", Vec::new()),
        ("one byte", b"a".to_vec()),
        ("1 KiB JSON", json_body(1024)),
        ("64 KiB text", text_body(64 * 1024)),
        ("277 KiB random", random_bytes(277 * 1024, 42)),
        ("1 MiB zeros", vec![0; MIB]),
    ]
}

fn malformed(r: Result<Bytes, DecompressError>) -> bool {
    matches!(r, Err(DecompressError::Malformed(_)))
}

/// A zstd frame without a content size: magic, frame header descriptor 0 (no size, no
/// checksum, no dictionary), a window of `2^window_log`, then `blocks`.
fn zstd_frame_unsized(window_log: u32, blocks: &[u8]) -> Vec<u8> {
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, ((window_log - 10) << 3) as u8];
    f.extend_from_slice(blocks);
    f
}

/// A zstd frame that declares `size` bytes of content (an 8-byte field) with a window of
/// `2^window_log`, then `blocks` (whatever they really hold).
fn zstd_frame_declaring(size: u64, window_log: u32, blocks: &[u8]) -> Vec<u8> {
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0xC0, ((window_log - 10) << 3) as u8];
    f.extend_from_slice(&size.to_le_bytes());
    f.extend_from_slice(blocks);
    f
}

/// `count` RLE blocks of `size` bytes of `byte` each (the last one marked last): `4 × count`
/// bytes of frame for `count × size` bytes of output.
fn rle_blocks(count: usize, size: u32, byte: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..count {
        let last = u32::from(i + 1 == count);
        let header = (size << 3) | (1 << 1) | last;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.push(byte);
    }
    out
}

/// One raw block holding `data`, the last of its frame.
fn raw_block(data: &[u8]) -> Vec<u8> {
    let header = ((data.len() as u32) << 3) | 1;
    let mut out = header.to_le_bytes()[..3].to_vec();
    out.extend_from_slice(data);
    out
}

#[test]
fn round_trips() {
    for c in Compression::ALL {
        for (name, data) in samples() {
            let packed = compress(c, &data);
            let back = decompress(c, &packed, data.len());
            assert_eq!(back.as_deref(), Ok(&data[..]), "{c} {name}");
        }
    }
}

/// What `printf 'hello from the zstd tool\n' | zstd -c -3` writes (zstd 1.5.4): no size, a
/// 2 MiB window, a checksum.
const ZSTD_TOOL: &[u8] = &[
    0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0xc9, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x20, 0x66,
    0x72, 0x6f, 0x6d, 0x20, 0x74, 0x68, 0x65, 0x20, 0x7a, 0x73, 0x74, 0x64, 0x20, 0x74, 0x6f, 0x6f,
    0x6c, 0x0a, 0xc5, 0xe6, 0x33, 0x8e,
];

/// What `(printf 'hello ' | gzip -c -n; printf 'again\n' | gzip -c -n)` writes: two members.
const GZIP_TOOL: &[u8] = &[
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0x57,
    0x00, 0x00, 0xf6, 0xf9, 0x81, 0xed, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x03, 0x4b, 0x4c, 0x4f, 0xcc, 0xcc, 0xe3, 0x02, 0x00, 0xff, 0x19, 0x4f, 0x86,
    0x06, 0x00, 0x00, 0x00,
];

#[test]
fn decodes_what_the_zstd_and_gzip_tools_write() {
    let hello = b"hello from the zstd tool\n";
    assert_eq!(
        decompress(Zstd, ZSTD_TOOL, hello.len()).as_deref(),
        Ok(&hello[..])
    );
    assert_eq!(
        decompress(Zstd, ZSTD_TOOL, hello.len() - 1),
        Err(DecompressError::TooLarge { limit: 24 })
    );
    let mut bad = ZSTD_TOOL.to_vec();
    *bad.last_mut().unwrap() ^= 1;
    assert!(
        malformed(decompress(Zstd, &bad, 100)),
        "the checksum is checked"
    );
    assert_eq!(
        decompress(Gzip, GZIP_TOOL, 100).as_deref(),
        Ok(&b"hello again\n"[..])
    );
    assert_eq!(
        decompress(Gzip, GZIP_TOOL, 11),
        Err(DecompressError::TooLarge { limit: 11 })
    );
}

#[test]
fn the_limit_is_exact() {
    for c in Compression::ALL {
        for (name, data) in samples() {
            let packed = compress(c, &data);
            assert_eq!(
                decompress(c, &packed, data.len()).map(|b| b.len()),
                Ok(data.len())
            );
            if let Some(limit) = data.len().checked_sub(1) {
                assert_eq!(
                    decompress(c, &packed, limit),
                    Err(DecompressError::TooLarge { limit }),
                    "{c} {name}"
                );
            }
        }
    }
}

#[test]
fn compressed_empty_input_is_a_stream_that_decodes_to_nothing() {
    for c in Compression::ALL {
        let packed = compress(c, b"");
        assert!(!packed.is_empty(), "{c}");
        assert_eq!(decompress(c, &packed, 0).as_deref(), Ok(&b""[..]), "{c}");
    }
}

#[test]
fn an_empty_body_is_malformed() {
    for c in Compression::ALL {
        assert!(malformed(decompress(c, b"", 1024)), "{c}");
    }
}

#[test]
fn incompressible_input_grows_by_little_and_compressible_input_shrinks() {
    let random = random_bytes(277 * 1024, 3);
    let text = text_body(64 * 1024);
    for c in Compression::ALL {
        let packed = compress(c, &random);
        assert!(
            packed.len() <= random.len() + random.len() / 100 + 64,
            "{c}: {}",
            packed.len()
        );
        assert_eq!(
            decompress(c, &packed, random.len()).as_deref(),
            Ok(&random[..])
        );
        let packed = compress(c, &text);
        assert!(packed.len() < text.len() / 2, "{c}: {}", packed.len());
    }
}

#[test]
fn output_is_exactly_sized_for_honest_bodies() {
    // The declared size (zstd's content size, gzip's ISIZE) stops the buffer's growth.
    for c in Compression::ALL {
        // Text is decoded in one call; zeros (over 32:1) a piece at a time.
        for (n, zeros) in [
            (1, false),
            (1000, false),
            (20_000, false),
            (300_000, false),
            (300_000, true),
        ] {
            let data = if zeros { vec![0; n] } else { text_body(n) };
            let back = decompress(c, &compress(c, &data), 4 * MIB).unwrap();
            let vec = Vec::from(back);
            assert_eq!((vec.len(), vec.capacity()), (n, n), "{c} {n}");
        }
    }
}

#[test]
fn truncated_streams_are_malformed() {
    for c in Compression::ALL {
        let data = json_body(1024);
        let packed = compress(c, &data);
        for cut in 0..packed.len() {
            let r = decompress(c, &packed[..cut], 4096);
            assert!(
                malformed(r.clone()),
                "{c} cut at {cut} of {}: {r:?}",
                packed.len()
            );
        }
    }
}

#[test]
fn corrupted_streams_never_decode_to_something_else() {
    for c in Compression::ALL {
        let data = json_body(1024);
        let packed = compress(c, &data);
        let mut refused = 0;
        for i in 0..packed.len() {
            for flip in [0x01, 0x80, 0xFF] {
                let mut bad = packed.to_vec();
                bad[i] ^= flip;
                match decompress(c, &bad, 4096) {
                    Ok(out) => assert_eq!(out, data, "{c}: byte {i} ^ {flip:#x}"),
                    Err(DecompressError::Malformed(_)) => refused += 1,
                    // Corrupting a size field can make it claim more than the limit.
                    Err(DecompressError::TooLarge { limit }) => {
                        assert_eq!(limit, 4096);
                        refused += 1;
                    }
                }
            }
        }
        // A few bits change nothing (gzip's MTIME, XFL and OS header bytes, which no check
        // covers; padding and unused bits in either's bitstreams): those decode unchanged.
        let flips = packed.len() * 3;
        assert!(
            refused >= flips * 95 / 100,
            "{c}: {refused} of {flips} refused"
        );
    }
}

#[test]
fn trailing_bytes_are_malformed() {
    for c in Compression::ALL {
        let packed = compress(c, b"hello, world");
        for tail in [&b"\0"[..], b"garbage", &[0; 8], &packed[..4]] {
            let mut bad = packed.to_vec();
            bad.extend_from_slice(tail);
            let r = decompress(c, &bad, 1024);
            assert!(malformed(r.clone()), "{c} + {tail:?}: {r:?}");
        }
    }
}

#[test]
fn concatenated_frames_and_members_decode_one_after_the_other() {
    for c in Compression::ALL {
        let (a, b) = (text_body(5000), json_body(3000));
        let mut both = compress(c, &a).to_vec();
        both.extend_from_slice(&compress(c, &b));
        let expected = [&a[..], &b[..]].concat();
        assert_eq!(
            decompress(c, &both, 8000).as_deref(),
            Ok(&expected[..]),
            "{c}"
        );
        // The limit holds across them (zstd refuses the second frame on its declared size).
        assert_eq!(
            decompress(c, &both, 7999),
            Err(DecompressError::TooLarge { limit: 7999 })
        );
        assert_eq!(
            decompress(c, &both, 5000),
            Err(DecompressError::TooLarge { limit: 5000 })
        );
    }
}

#[test]
fn zstd_skippable_frames_are_skipped() {
    let mut data = vec![0x50, 0x2A, 0x4D, 0x18, 5, 0, 0, 0, 1, 2, 3, 4, 5];
    data.extend_from_slice(&compress(Zstd, b"after"));
    data.extend_from_slice(&[0x5F, 0x2A, 0x4D, 0x18, 0, 0, 0, 0]);
    assert_eq!(decompress(Zstd, &data, 5).as_deref(), Ok(&b"after"[..]));
    assert_eq!(
        decompress(Zstd, &data, 4),
        Err(DecompressError::TooLarge { limit: 4 })
    );
}

#[test]
fn zstd_frame_declaring_more_than_the_limit_is_refused_up_front() {
    // It holds 5 bytes; declared 6 is over a limit of 5, so it is refused before decoding.
    let frame = zstd_frame_declaring(6, 10, &raw_block(b"hello"));
    assert_eq!(
        decompress(Zstd, &frame, 5),
        Err(DecompressError::TooLarge { limit: 5 })
    );
    // A declared 2^62 bytes with a 1 TiB limit: refused, nothing allocated for it.
    let frame = zstd_frame_declaring(1 << 62, 20, &raw_block(b"hello"));
    assert_eq!(
        decompress(Zstd, &frame, 1 << 40),
        Err(DecompressError::TooLarge { limit: 1 << 40 })
    );
}

#[test]
fn zstd_frame_declaring_more_than_it_holds_is_malformed() {
    // 100 bytes declared in a 22-byte frame: decoded in one call into 100 bytes. 1 TiB
    // declared (a limit that large accepts it): decoded a piece at a time, the buffer
    // growing only as output comes. Either way the frame ends short of its size.
    for declared in [100, 1 << 40] {
        let frame = zstd_frame_declaring(declared, 20, &raw_block(b"hello"));
        assert!(malformed(decompress(Zstd, &frame, 1 << 41)), "{declared}");
    }
}

#[test]
fn zstd_frame_declaring_less_than_it_holds_is_refused() {
    // 64 × 128 KiB = 8 MiB of zeros in a 270-byte frame. Declaring 1000 bytes, it is decoded
    // in one call into 1000 bytes; declaring 100,000 (more than 32 times 270), a piece at a
    // time. Either way the cap holds and the lie is found.
    for declared in [1000, 100_000] {
        let frame = zstd_frame_declaring(declared, 20, &rle_blocks(64, 128 * 1024, 0));
        for limit in [declared as usize, 4 * MIB, 16 * MIB] {
            let r = decompress(Zstd, &frame, limit);
            assert!(r.is_err(), "{declared} {limit}: {:?}", r.map(|b| b.len()));
        }
    }
}

#[test]
fn zstd_frame_without_a_size_is_capped_while_decoding() {
    // 8 MiB of zeros in 256 bytes, no declared size.
    let frame = zstd_frame_unsized(20, &rle_blocks(64, 128 * 1024, 0));
    assert_eq!(
        decompress(Zstd, &frame, 4 * MIB),
        Err(DecompressError::TooLarge { limit: 4 * MIB })
    );
    assert_eq!(
        decompress(Zstd, &frame, 8 * MIB).map(|b| b.len()),
        Ok(8 * MIB)
    );
}

#[test]
fn zstd_window_is_capped_by_the_limit() {
    assert_eq!(window_log_max(0), WINDOW_LOG_FLOOR);
    assert_eq!(window_log_max(1), WINDOW_LOG_FLOOR);
    assert_eq!(window_log_max(2 * MIB), 21);
    assert_eq!(window_log_max(4 * MIB), 22);
    assert_eq!(window_log_max(4 * MIB + 1), 23);
    assert_eq!(window_log_max(usize::MAX), WINDOW_LOG_CEILING);
    // A 1-byte frame asking for a 128 MiB window: over a 4 MiB limit's 4 MiB cap.
    let frame = zstd_frame_unsized(27, &raw_block(b"x"));
    assert_eq!(
        decompress(Zstd, &frame, 4 * MIB),
        Err(DecompressError::TooLarge { limit: 4 * MIB })
    );
    assert_eq!(
        decompress(Zstd, &frame, 128 * MIB).as_deref(),
        Ok(&b"x"[..])
    );
    // 2 MiB windows (zstd's default level on a pipe) decode under any limit.
    let frame = zstd_frame_unsized(21, &raw_block(b"x"));
    assert_eq!(decompress(Zstd, &frame, 1).as_deref(), Ok(&b"x"[..]));
    // Past zstd's own default cap, whatever the limit.
    let frame = zstd_frame_unsized(28, &raw_block(b"x"));
    assert_eq!(
        decompress(Zstd, &frame, 1 << 40),
        Err(DecompressError::TooLarge { limit: 1 << 40 })
    );
}

#[test]
fn gzip_trailer_that_lies_about_the_size_is_malformed() {
    let data = text_body(100_000);
    let packed = compress(Gzip, &data);
    for isize in [0u32, 10, 99_999, 100_001, u32::MAX] {
        let mut bad = packed.to_vec();
        let at = bad.len() - 4;
        bad[at..].copy_from_slice(&isize.to_le_bytes());
        assert!(malformed(decompress(Gzip, &bad, MIB)), "ISIZE {isize}");
        // Declaring exactly the limit does not let more through.
        if let Ok(limit) = usize::try_from(isize) {
            if limit < data.len() {
                let r = decompress(Gzip, &bad, limit);
                assert_eq!(r, Err(DecompressError::TooLarge { limit }), "ISIZE {isize}");
            }
        }
    }
}

#[test]
fn growth_never_passes_the_limit_and_stops_at_the_declared_size() {
    assert_eq!(next_capacity(0, 100, None), 100);
    assert_eq!(next_capacity(0, MIB, None), MIN_CAPACITY);
    assert_eq!(next_capacity(0, MIB, Some(10)), 10);
    assert_eq!(next_capacity(10, MIB, Some(10)), MIN_CAPACITY);
    assert_eq!(next_capacity(MIN_CAPACITY, MIB, Some(20_000)), 20_000);
    assert_eq!(
        next_capacity(MIN_CAPACITY, MIB, Some(2 * MIB)),
        2 * MIN_CAPACITY
    );
    assert_eq!(next_capacity(MIB / 2 + 1, MIB, None), MIB);
    assert_eq!(next_capacity(MIB - 1, MIB, None), MIB);
    assert_eq!(next_capacity(usize::MAX - 1, usize::MAX, None), usize::MAX);
}

#[test]
fn tokens_and_wire_ids() {
    assert_eq!((Zstd.as_str(), Gzip.as_str()), ("zstd", "gzip"));
    assert_eq!(Zstd.to_string(), "zstd");
    for (token, c) in [
        ("zstd", Some(Zstd)),
        (" ZStd\t", Some(Zstd)),
        ("gzip", Some(Gzip)),
        ("GZIP ", Some(Gzip)),
        ("x-gzip", Some(Gzip)),
        ("identity", None),
        ("br", None),
        ("deflate", None),
        ("*", None),
        ("", None),
        ("gzip;q=1", None),
    ] {
        assert_eq!(Compression::from_token(token), c, "{token:?}");
    }
    for c in Compression::ALL {
        assert_eq!(Compression::from_token(c.as_str()), Some(c));
        assert_eq!(Compression::from_u8(c.to_u8()), Some(c));
        assert_ne!(c.to_u8(), Compression::IDENTITY_ID);
    }
    assert_eq!((Zstd.to_u8(), Gzip.to_u8()), (1, 2));
    assert_eq!(Compression::from_u8(Compression::IDENTITY_ID), None);
    assert_eq!(Compression::from_u8(3), None);
    assert_eq!(Compression::from_u8(255), None);
}

proptest::proptest! {
    #[test]
    fn garbage_never_panics_and_never_passes_the_limit(
        data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        gzip: bool,
        limit in 0usize..100_000,
    ) {
        let c = if gzip { Gzip } else { Zstd };
        match decompress(c, &data, limit) {
            Ok(out) => proptest::prop_assert!(out.len() <= limit),
            Err(DecompressError::TooLarge { limit: l }) => proptest::prop_assert_eq!(l, limit),
            Err(DecompressError::Malformed(_)) => {}
        }
    }

    #[test]
    fn mutated_streams_never_panic_and_never_pass_the_limit(
        seed: u64,
        edits in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..8),
        gzip: bool,
        limit in 0usize..20_000,
    ) {
        let c = if gzip { Gzip } else { Zstd };
        let data = text_body(10_000 + (seed % 1000) as usize);
        let mut packed = compress(c, &data).to_vec();
        for (at, byte) in edits {
            let at = at % packed.len();
            packed[at] = byte;
        }
        match decompress(c, &packed, limit) {
            Ok(out) => proptest::prop_assert!(out.len() <= limit),
            Err(DecompressError::TooLarge { limit: l }) => proptest::prop_assert_eq!(l, limit),
            Err(DecompressError::Malformed(_)) => {}
        }
    }
}

/// Runs `f` repeatedly for about `budget`, returning the time per run.
fn time_per_run(budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    let mut runs = 0u32;
    while start.elapsed() < budget {
        f();
        runs += 1;
    }
    start.elapsed() / runs
}

/// Compression and decompression speed and ratio of each codec and level on three bodies.
/// Not a test: `cargo test -p keel --release --lib benchmark_codecs -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand in release"]
fn benchmark_codecs() {
    let bodies = [
        ("1 KiB JSON", json_body(1024)),
        ("64 KiB text", text_body(64 * 1024)),
        ("64 KiB JSON", json_body(64 * 1024)),
        ("277 KiB random", random_bytes(277 * 1024, 9)),
    ];
    type Compressor = Box<dyn Fn(&[u8]) -> Bytes>;
    let codecs: Vec<(&str, Compression, Compressor)> = vec![
        ("zstd -1", Zstd, Box::new(|d| zstd_compress(d, 1))),
        ("zstd -3", Zstd, Box::new(|d| zstd_compress(d, 3))),
        ("gzip -1", Gzip, Box::new(|d| gzip_compress(d, 1))),
        ("gzip -6", Gzip, Box::new(|d| gzip_compress(d, 6))),
    ];
    let budget = Duration::from_millis(300);
    println!(
        "| body | codec | compressed | ratio | compress | decompress | compress MB/s | decompress MB/s |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (body, data) in &bodies {
        for (name, c, f) in &codecs {
            let packed = f(data);
            assert_eq!(
                decompress(*c, &packed, data.len()).as_deref(),
                Ok(&data[..])
            );
            let t_c = time_per_run(budget, || {
                std::hint::black_box(f(std::hint::black_box(data)));
            });
            let t_d = time_per_run(budget, || {
                std::hint::black_box(
                    decompress(*c, std::hint::black_box(&packed), data.len()).ok(),
                );
            });
            let mbps = |t: Duration| data.len() as f64 / t.as_secs_f64() / 1e6;
            println!(
                "| {body} | {name} | {} | {:.2} | {:.1} µs | {:.1} µs | {:.0} | {:.0} |",
                packed.len(),
                data.len() as f64 / packed.len() as f64,
                t_c.as_secs_f64() * 1e6,
                t_d.as_secs_f64() * 1e6,
                mbps(t_c),
                mbps(t_d),
            );
        }
    }
}
