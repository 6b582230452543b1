//! Property tests (proptest): random frames, random split points and random garbage.

use bytes::{Bytes, BytesMut};
use keel_wire::{
    Cancel, Codec, Frame, GoAway, Limits, Reply, Request, RequestFlags, StatusCode, StopSending,
    StreamData, StreamEnd, WindowUpdate, WireError, MAX_NAME_LEN, MAX_REASON_LEN,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

#[path = "support/fuzz_core.rs"]
mod fuzz_core;

/// A length that is usually small and sometimes up to `max`.
fn len(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0..=max.min(16), 1 => 0..=max]
}

/// Random bytes, usually few, sometimes up to `max`.
fn blob(max: usize) -> impl Strategy<Value = Vec<u8>> {
    len(max).prop_flat_map(|n| vec(any::<u8>(), n))
}

fn body(max: usize) -> impl Strategy<Value = Bytes> {
    blob(max).prop_map(Bytes::from)
}

/// Text of at most `max` bytes (usually few) mixing 1- to 4-byte characters.
fn text(max: usize) -> impl Strategy<Value = String> {
    const CHARS: [char; 6] = ['a', 'Z', '_', 'é', '€', '😀'];
    len(max).prop_flat_map(|target| {
        vec(select(&CHARS[..]), target).prop_map(move |chars| {
            let mut s = String::new();
            for c in chars {
                if s.len() + c.len_utf8() > target {
                    break;
                }
                s.push(c);
            }
            s
        })
    })
}

/// The most details a random reply carries.
const DETAILS_MAX: usize = 16;

/// A reply's metadata block of two entries, one of them binary.
fn reply_metadata() -> Bytes {
    let mut block = BytesMut::new();
    keel_wire::metadata::push(&mut block, "x-request-id", b"req-1").unwrap();
    keel_wire::metadata::push(&mut block, "x-trace-bin", &[0, 1, 2, 255]).unwrap();
    block.freeze()
}

fn status() -> impl Strategy<Value = StatusCode> {
    (0..=11u8).prop_map(|v| StatusCode::from_u8(v).unwrap())
}

/// Any frame, with bodies and stream data of at most `max_body` bytes.
fn frame(max_body: usize) -> impl Strategy<Value = Frame> {
    let request = (
        any::<u64>(),
        any::<(bool, bool)>(),
        any::<u64>(),
        text(MAX_NAME_LEN),
        text(MAX_NAME_LEN),
        body(max_body),
    )
        .prop_map(
            |(call_id, (one_way, streamed), deadline_us, service, operation, body)| {
                Frame::Request(Request {
                    call_id,
                    flags: RequestFlags {
                        one_way,
                        streamed,
                        accepts_compressed: false,
                    },
                    deadline_us,
                    service: service.into(),
                    operation: operation.into(),
                    metadata: Bytes::new(),
                    compression: 0,
                    body,
                })
            },
        );
    // Replies of every shape a client takes apart: with and without metadata, compression and
    // details (which count against the message limit with the body).
    let reply = (
        any::<u64>(),
        status(),
        body(max_body.saturating_sub(DETAILS_MAX)),
        any::<bool>(),
        prop_oneof![Just(0u8), any::<u8>()],
        prop_oneof![Just(Bytes::new()), body(DETAILS_MAX)],
    )
        .prop_map(
            |(call_id, status, body, with_metadata, compression, details)| {
                Frame::Reply(Reply {
                    call_id,
                    status,
                    metadata: if with_metadata {
                        reply_metadata()
                    } else {
                        Bytes::new()
                    },
                    compression,
                    details,
                    body,
                })
            },
        );
    let go_away = (any::<u64>(), text(MAX_REASON_LEN)).prop_map(|(last_call_id, reason)| {
        Frame::GoAway(GoAway {
            last_call_id,
            reason,
        })
    });
    let data = (any::<u64>(), body(max_body))
        .prop_map(|(call_id, data)| Frame::StreamData(StreamData { call_id, data }));
    let end = (any::<u64>(), status(), text(MAX_REASON_LEN)).prop_map(|(call_id, status, text)| {
        Frame::StreamEnd(StreamEnd {
            call_id,
            status,
            message: if status == StatusCode::Ok {
                Bytes::new()
            } else {
                Bytes::from(text)
            },
        })
    });
    let window = (any::<u64>(), 1..=u32::MAX)
        .prop_map(|(call_id, increment)| Frame::WindowUpdate(WindowUpdate { call_id, increment }));
    prop_oneof![
        request,
        reply,
        any::<u64>().prop_map(|call_id| Frame::Cancel(Cancel { call_id })),
        any::<u64>().prop_map(Frame::Ping),
        any::<u64>().prop_map(Frame::Pong),
        go_away,
        data,
        end,
        window,
        any::<u64>().prop_map(|call_id| Frame::StopSending(StopSending { call_id })),
    ]
}

/// Where to cut a byte stream: each entry gives the next piece's size (a quarter of them up
/// to everything left, the others at most 17 bytes), used in turn.
fn cuts() -> impl Strategy<Value = Vec<(u8, usize)>> {
    vec((0..4u8, any::<usize>()), 1..=32)
}

/// Split `data` into pieces following `cuts` (see [`cuts`]).
fn pieces<'a>(mut data: &'a [u8], cuts: &[(u8, usize)]) -> Vec<&'a [u8]> {
    let mut out = vec![];
    for &(kind, raw) in cuts.iter().cycle() {
        if data.is_empty() {
            break;
        }
        let most = if kind == 0 {
            data.len()
        } else {
            data.len().min(17)
        };
        let (a, b) = data.split_at(1 + raw % most);
        out.push(a);
        data = b;
    }
    out
}

/// Prefixes `data` with a chunk schedule for `fuzz_core` (its length byte, then the bytes).
fn scheduled(schedule: &[u8], data: &[u8]) -> Vec<u8> {
    assert!(schedule.len() < 16);
    let mut out = vec![schedule.len() as u8];
    out.extend_from_slice(schedule);
    out.extend_from_slice(data);
    out
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn random_frames_survive_random_splits(
        frames in vec(frame(3000), 1..=41),
        cuts in cuts(),
    ) {
        let limits = Limits::with_max_message_size(3000);
        let codec = Codec::new(limits);
        let mut wire = BytesMut::new();
        for frame in &frames {
            codec.encode(frame, &mut wire).unwrap();
        }
        let got = decode_all(&mut Codec::new(limits), &pieces(&wire, &cuts));
        let expected: Vec<_> = frames.into_iter().map(Ok).collect();
        prop_assert_eq!(got, expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Frames written under a larger limit than the reader's: every request, reply or stream
    /// data whose payload exceeds the reader's limit becomes a `TooLarge` naming its call, and
    /// everything else (GoAway and StreamEnd whatever their reason's length) still arrives,
    /// whatever the split.
    #[test]
    fn oversized_frames_are_skipped_and_named(
        reader_limit in 0..=2000u32,
        frames in vec(frame(20_000), 1..=31),
        cuts in cuts(),
    ) {
        let writer = Codec::new(Limits::with_max_message_size(20_000));
        let mut wire = BytesMut::new();
        let mut expected = vec![];
        for frame in frames {
            writer.encode(&frame, &mut wire).unwrap();
            let oversized = match &frame {
                Frame::Request(r) if r.body.len() > reader_limit as usize => Some(r.call_id),
                Frame::Reply(r) if r.body.len() + r.details.len() > reader_limit as usize => {
                    Some(r.call_id)
                }
                Frame::StreamData(d) if d.data.len() > reader_limit as usize => Some(d.call_id),
                _ => None,
            };
            expected.push(match oversized {
                Some(id) => Err(Some(id)),
                None => Ok(frame),
            });
        }
        let mut reader = Codec::new(Limits::with_max_message_size(reader_limit));
        let mut got = vec![];
        for outcome in decode_all(&mut reader, &pieces(&wire, &cuts)) {
            got.push(match outcome {
                Ok(frame) => Ok(frame),
                Err(WireError::TooLarge { call_id, limit, .. }) => {
                    prop_assert_eq!(limit, reader_limit);
                    Err(call_id)
                }
                Err(other) => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
            });
        }
        prop_assert_eq!(got, expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_garbage_never_panics(data in blob(3000)) {
        fuzz_core::decode_frames(&data);
        fuzz_core::decode_hellos(&data);
        fuzz_core::connection(&data);
        fuzz_core::windows(&data);
    }

    /// Valid streams with a few bytes changed reach deeper than pure garbage.
    #[test]
    fn mutated_streams_never_panic(
        frames in vec(frame(1000), 1..=6),
        schedule in vec(any::<u8>(), 0..16),
        mutations in vec((any::<usize>(), any::<u8>()), 1..=4),
        hello_schedule in vec(any::<u8>(), 0..16),
        hello_tail in vec(any::<u8>(), 0..=12),
        hello_mutation in proptest::option::of((any::<usize>(), any::<u8>())),
    ) {
        let codec = Codec::new(Limits::with_max_message_size(1000));
        let mut wire = BytesMut::new();
        for frame in &frames {
            codec.encode(frame, &mut wire).unwrap();
        }
        for (i, b) in mutations {
            let i = i % wire.len();
            wire[i] = b;
        }
        // Limit byte 2 selects 1000, matching the writer.
        let mut data = vec![2];
        data.extend_from_slice(&scheduled(&schedule, &wire));
        fuzz_core::decode_frames(&data);

        let mut hello = b"KEEL".to_vec();
        hello.extend_from_slice(&hello_tail);
        let mut hello = scheduled(&hello_schedule, &hello);
        if let Some((i, b)) = hello_mutation {
            let i = i % hello.len();
            hello[i] = b;
        }
        fuzz_core::decode_hellos(&hello);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The connection-core and flow-control targets on random step sequences (their inputs are
    /// read a byte per choice, so short random inputs already make many steps).
    #[test]
    fn random_steps_never_panic(data in vec(any::<u8>(), 0..600)) {
        fuzz_core::connection(&data);
        fuzz_core::windows(&data);
    }

    /// Valid frames, encoded, as the connection target's raw-bytes step feeds them: the cores
    /// see whole conversations and not only garbage.
    #[test]
    fn encoded_frames_drive_both_cores(frames in vec(frame(64), 1..=12), calls in 0..4u8) {
        let codec = Codec::new(Limits::default());
        let mut data = vec![];
        // Start a few calls first (step 7, no download, no upload), so replies find them.
        for _ in 0..calls {
            data.extend_from_slice(&[7, 0, 0]);
        }
        for frame in &frames {
            let mut wire = BytesMut::new();
            codec.encode(frame, &mut wire).unwrap();
            for piece in wire.chunks(255) {
                data.push(0);
                data.push(piece.len() as u8);
                data.extend_from_slice(piece);
            }
        }
        fuzz_core::connection(&data);
    }
}
