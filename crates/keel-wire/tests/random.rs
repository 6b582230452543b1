//! Property-style tests without extra dependencies: a deterministic xorshift generator makes
//! random frames, random split points and random garbage.

use bytes::{Bytes, BytesMut};
use keel_wire::{
    Cancel, Codec, Frame, GoAway, Limits, Reply, Request, RequestFlags, StatusCode, StopSending,
    StreamData, StreamEnd, WindowUpdate, WireError, MAX_NAME_LEN, MAX_REASON_LEN,
};

#[path = "support/fuzz_core.rs"]
mod fuzz_core;

/// xorshift64*: small, deterministic, good enough to pick test cases.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..=max`.
    fn upto(&mut self, max: usize) -> usize {
        (self.u64() % (max as u64 + 1)) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u64() as u8).collect()
    }

    /// Random bytes, usually few, sometimes up to `max`.
    fn blob(&mut self, max: usize) -> Vec<u8> {
        let n = self.len(max);
        self.bytes(n)
    }

    /// A length that is usually small and sometimes up to `max`.
    fn len(&mut self, max: usize) -> usize {
        if self.upto(3) == 0 {
            self.upto(max)
        } else {
            self.upto(max.min(16))
        }
    }

    /// Text of at most `max` bytes mixing 1- to 4-byte characters.
    fn text(&mut self, max: usize) -> String {
        const CHARS: [char; 6] = ['a', 'Z', '_', 'é', '€', '😀'];
        let target = self.len(max);
        let mut s = String::new();
        loop {
            let c = CHARS[self.upto(CHARS.len() - 1)];
            if s.len() + c.len_utf8() > target {
                return s;
            }
            s.push(c);
        }
    }

    fn frame(&mut self, max_body: usize) -> Frame {
        match self.upto(9) {
            0 => Frame::Request(Request {
                call_id: self.u64(),
                flags: RequestFlags {
                    one_way: self.upto(1) == 1,
                    streamed: self.upto(1) == 1,
                },
                deadline_us: self.u64(),
                service: self.text(MAX_NAME_LEN),
                operation: self.text(MAX_NAME_LEN),
                body: Bytes::from(self.blob(max_body)),
            }),
            1 => Frame::Reply(Reply {
                call_id: self.u64(),
                status: self.status(),
                body: Bytes::from(self.blob(max_body)),
            }),
            2 => Frame::Cancel(Cancel {
                call_id: self.u64(),
            }),
            3 => Frame::Ping(self.u64()),
            4 => Frame::Pong(self.u64()),
            5 => Frame::GoAway(GoAway {
                last_call_id: self.u64(),
                reason: self.text(MAX_REASON_LEN),
            }),
            6 => Frame::StreamData(StreamData {
                call_id: self.u64(),
                data: Bytes::from(self.blob(max_body)),
            }),
            7 => {
                let status = self.status();
                Frame::StreamEnd(StreamEnd {
                    call_id: self.u64(),
                    status,
                    message: if status == StatusCode::Ok {
                        Bytes::new()
                    } else {
                        Bytes::from(self.text(MAX_REASON_LEN))
                    },
                })
            }
            8 => Frame::WindowUpdate(WindowUpdate {
                call_id: self.u64(),
                increment: (self.u64() as u32).max(1),
            }),
            _ => Frame::StopSending(StopSending {
                call_id: self.u64(),
            }),
        }
    }

    fn status(&mut self) -> StatusCode {
        StatusCode::from_u8(self.upto(11) as u8).unwrap()
    }

    /// Split `data` into random pieces.
    fn pieces<'a>(&mut self, mut data: &'a [u8]) -> Vec<&'a [u8]> {
        let mut out = vec![];
        while !data.is_empty() {
            let n = 1 + self.len(data.len() - 1);
            let (a, b) = data.split_at(n);
            out.push(a);
            data = b;
        }
        out
    }
}

/// Feed `pieces` to `codec`, collecting every outcome; stops at a fatal error.
fn decode_all(codec: &mut Codec, pieces: &[&[u8]]) -> Vec<Result<Frame, WireError>> {
    let mut src = BytesMut::new();
    let mut out = vec![];
    for piece in pieces {
        src.extend_from_slice(piece);
        loop {
            match codec.decode(&mut src) {
                Ok(Some(frame)) => out.push(Ok(frame)),
                Ok(None) => break,
                Err(e) => {
                    let fatal = e.is_fatal();
                    out.push(Err(e));
                    if fatal {
                        return out;
                    }
                }
            }
        }
    }
    assert!(src.is_empty(), "{} bytes left over", src.len());
    out
}

#[test]
fn random_frames_survive_random_splits() {
    let mut rng = Rng::new(1);
    let limits = Limits::with_max_message_size(3000);
    for _ in 0..500 {
        let codec = Codec::new(limits);
        let frames: Vec<Frame> = (0..=rng.upto(40)).map(|_| rng.frame(3000)).collect();
        let mut wire = BytesMut::new();
        for frame in &frames {
            codec.encode(frame, &mut wire).unwrap();
        }
        let pieces = rng.pieces(&wire);
        let got = decode_all(&mut Codec::new(limits), &pieces);
        let expected: Vec<_> = frames.into_iter().map(Ok).collect();
        assert_eq!(got, expected);
    }
}

/// Frames written under a larger limit than the reader's: every request, reply or stream data
/// whose payload exceeds the reader's limit becomes a `TooLarge` naming its call, and everything
/// else (GoAway and StreamEnd whatever their reason's length) still arrives, whatever the split.
#[test]
fn oversized_frames_are_skipped_and_named() {
    let mut rng = Rng::new(2);
    for _ in 0..300 {
        let reader_limit = rng.upto(2000) as u32;
        let writer = Codec::new(Limits::with_max_message_size(20_000));
        let frames: Vec<Frame> = (0..=rng.upto(30)).map(|_| rng.frame(20_000)).collect();
        let mut wire = BytesMut::new();
        let mut expected = vec![];
        for frame in frames {
            writer.encode(&frame, &mut wire).unwrap();
            let oversized = match &frame {
                Frame::Request(r) if r.body.len() > reader_limit as usize => Some(r.call_id),
                Frame::Reply(r) if r.body.len() > reader_limit as usize => Some(r.call_id),
                Frame::StreamData(d) if d.data.len() > reader_limit as usize => Some(d.call_id),
                _ => None,
            };
            expected.push(match oversized {
                Some(id) => Err(Some(id)),
                None => Ok(frame),
            });
        }
        let pieces = rng.pieces(&wire);
        let mut reader = Codec::new(Limits::with_max_message_size(reader_limit));
        let got: Vec<_> = decode_all(&mut reader, &pieces)
            .into_iter()
            .map(|r| {
                r.map_err(|e| match e {
                    WireError::TooLarge { call_id, limit, .. } => {
                        assert_eq!(limit, reader_limit);
                        call_id
                    }
                    other => panic!("unexpected {other:?}"),
                })
            })
            .collect();
        assert_eq!(got, expected);
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng::new(3);
    for _ in 0..3000 {
        let n = rng.len(3000);
        let data = rng.bytes(n);
        fuzz_core::decode_frames(&data);
        fuzz_core::decode_hellos(&data);
    }
}

/// Valid streams with a few bytes changed reach deeper than pure garbage.
#[test]
fn mutated_streams_never_panic() {
    let mut rng = Rng::new(4);
    let codec = Codec::new(Limits::with_max_message_size(1000));
    for _ in 0..3000 {
        // Limit byte 2 selects 1000, matching the writer; the seed byte picks the split.
        let mut data = vec![2, rng.u64() as u8];
        let mut wire = BytesMut::new();
        for _ in 0..=rng.upto(5) {
            codec.encode(&rng.frame(1000), &mut wire).unwrap();
        }
        data.extend_from_slice(&wire);
        for _ in 0..=rng.upto(3) {
            let i = 2 + rng.upto(data.len() - 3);
            data[i] = rng.u64() as u8;
        }
        fuzz_core::decode_frames(&data);

        let mut hello = vec![rng.u64() as u8];
        hello.extend_from_slice(b"KEEL");
        let tail = rng.upto(12);
        hello.extend_from_slice(&rng.bytes(tail));
        if rng.upto(1) == 0 {
            let i = rng.upto(hello.len() - 1);
            hello[i] = rng.u64() as u8;
        }
        fuzz_core::decode_hellos(&hello);
    }
}
