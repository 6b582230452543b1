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

/// Chunk sizes read from the input itself: its first byte says how many schedule bytes follow
/// (the byte's value mod 16); the bytes after them are the data to feed. So one input also
/// decides how it is split, with no generator in between.
#[derive(Debug, Clone, Copy)]
struct Chunks<'a> {
    schedule: &'a [u8],
    taken: usize,
}

impl<'a> Chunks<'a> {
    /// Splits `input` into a chunk schedule and the data; `None` if `input` is empty.
    fn split(input: &'a [u8]) -> Option<(Chunks<'a>, &'a [u8])> {
        let (&n, rest) = input.split_first()?;
        let (schedule, data) = rest.split_at((usize::from(n) % 16).min(rest.len()));
        Some((Chunks { schedule, taken: 0 }, data))
    }

    /// The next chunk's size, in `1..=max.max(1)`. The schedule bytes are used in turn, over
    /// and over: below 0xC0 a small piece (1 to 16 bytes), from 0xC0 on a large one (64 bytes
    /// to 4 KiB). An empty schedule feeds everything at once.
    fn next(&mut self, max: usize) -> usize {
        let max = max.max(1);
        if self.schedule.is_empty() {
            return max;
        }
        let b = self.schedule[self.taken % self.schedule.len()];
        self.taken += 1;
        let n = if b < 0xC0 {
            1 + usize::from(b % 16)
        } else {
            64 * usize::from(b - 0xBF)
        };
        n.min(max)
    }
}

/// Feed the rest of `data` to a [`Codec`] with a limit chosen by `data[0]`, in chunks chosen by
/// the schedule that follows it (see [`Chunks`]), decoding until a fatal error. Every decoded
/// frame must re-encode and decode to itself, and the buffer must never hold more than one
/// partial frame within the limit.
pub(crate) fn decode_frames(data: &[u8]) {
    let Some((pick, rest)) = data.split_first() else {
        return;
    };
    let Some((mut chunks, stream)) = Chunks::split(rest) else {
        return;
    };
    let limits = Limits::with_max_message_size(LIMITS[usize::from(*pick) % LIMITS.len()]);
    let mut codec = Codec::new(limits);
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

/// Feed `data` in chunks (a schedule, then the stream: see [`Chunks`]) to [`decode_hello`] and,
/// separately, to
/// [`decode_hello_reply`]. A mismatching magic must fail as soon as it is visible; a decoded
/// message must re-encode to exactly the bytes it was decoded from.
pub(crate) fn decode_hellos(data: &[u8]) {
    let Some((schedule, stream)) = Chunks::split(data) else {
        return;
    };
    let mut chunks = schedule;
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

    let mut chunks = schedule;
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
