//! The checks behind the fuzz targets in `fuzz/`, shared with `tests/random.rs` so that stable CI
//! runs them too. Each function must never panic on any input; the assertions inside state the
//! decoders' invariants.

// Each fuzz target uses one of the two entry points.
#![allow(dead_code)]

use bytes::BytesMut;
use keel_wire::{
    decode_hello, decode_hello_reply, encode_hello, encode_hello_reply, Codec, Limits, MAGIC,
};

/// Message limits the frame target picks from (small ones reach the oversized paths).
const LIMITS: [u32; 5] = [0, 16, 1000, 70_000, keel_wire::DEFAULT_MAX_MESSAGE_SIZE];

/// Chunk sizes from a byte-seeded xorshift, so one input also decides how it is split.
struct Chunks(u32);

impl Chunks {
    fn new(seed: u8) -> Chunks {
        Chunks(u32::from(seed) | 0x100)
    }

    fn next(&mut self, max: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        // Mostly small pieces, sometimes large ones.
        let n = if self.0 & 3 == 0 {
            self.0 >> 2
        } else {
            self.0 % 16
        };
        (n as usize % max.max(1)) + 1
    }
}

/// Feed `data[2..]` to a [`Codec`] in chunks chosen by `data[1]`, with a limit chosen by
/// `data[0]`, decoding until a fatal error. Every decoded frame must re-encode and decode to
/// itself, and the buffer must never hold more than one partial frame within the limit.
pub(crate) fn decode_frames(data: &[u8]) {
    let [pick, seed, stream @ ..] = data else {
        return;
    };
    let limits = Limits::with_max_message_size(LIMITS[usize::from(*pick) % LIMITS.len()]);
    let mut codec = Codec::new(limits);
    let mut chunks = Chunks::new(*seed);
    let mut src = BytesMut::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(chunks.next(rest.len()));
        rest = tail;
        src.extend_from_slice(chunk);
        loop {
            match codec.decode(&mut src) {
                Ok(Some(frame)) => {
                    let mut again = BytesMut::new();
                    codec
                        .encode(&frame, &mut again)
                        .expect("decoded frame re-encodes");
                    let mut fresh = Codec::new(limits);
                    assert_eq!(fresh.decode(&mut again), Ok(Some(frame)));
                    assert!(again.is_empty());
                }
                Ok(None) => {
                    // At most one partial frame within the limit (GoAway and StreamEnd have their
                    // own bounds, the larger being StreamEnd's).
                    let bound = codec
                        .frame_limit()
                        .max(12 + keel_wire::MAX_REASON_LEN as u64);
                    assert!((src.len() as u64) < 4 + bound);
                    break;
                }
                Err(e) if e.is_fatal() => return,
                Err(_) => {}
            }
        }
    }
}

/// Feed `data[1..]` in chunks chosen by `data[0]` to [`decode_hello`] and, separately, to
/// [`decode_hello_reply`]. A mismatching magic must fail as soon as it is visible; a decoded
/// message must re-encode to exactly the bytes it was decoded from.
pub(crate) fn decode_hellos(data: &[u8]) {
    let [seed, stream @ ..] = data else {
        return;
    };
    let mut chunks = Chunks::new(*seed);
    let mut src = BytesMut::new();
    let mut fed = 0;
    while fed < stream.len() {
        let n = chunks.next(stream.len() - fed);
        src.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
        let seen = fed.min(MAGIC.len());
        let good_magic = stream[..seen] == MAGIC[..seen];
        match decode_hello(&mut src) {
            Ok(Some(hello)) => {
                assert!(good_magic);
                let mut again = BytesMut::new();
                encode_hello(&hello, &mut again);
                assert_eq!(&again[..], &stream[..again.len()]);
                break;
            }
            Ok(None) => assert!(good_magic && fed < keel_wire::HELLO_LEN),
            Err(e) => {
                assert!(e.is_fatal());
                assert!(!good_magic);
                break;
            }
        }
    }

    let mut chunks = Chunks::new(*seed);
    let mut src = BytesMut::new();
    let mut fed = 0;
    while fed < stream.len() {
        let n = chunks.next(stream.len() - fed);
        src.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
        match decode_hello_reply(&mut src) {
            Ok(Some(reply)) => {
                let mut again = BytesMut::new();
                encode_hello_reply(&reply, &mut again);
                assert_eq!(&again[..], &stream[..again.len()]);
                assert_eq!(src.len(), fed - again.len());
                break;
            }
            Ok(None) => {}
            Err(e) => {
                assert!(e.is_fatal());
                break;
            }
        }
    }
}
