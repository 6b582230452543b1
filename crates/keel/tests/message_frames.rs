//! The `message_frames` fuzz target's checks (`support/frames_core.rs`), run on stable: on
//! arbitrary bytes and on valid streams of frames changed, cut short or extended, cut into
//! chunks of every size, under every limit the fuzz target uses (proptest); on the target's
//! seed corpus; and on the two defects they found, kept as regression tests.
#![allow(missing_docs)]

#[path = "support/frames_core.rs"]
mod frames_core;

use bytes::{BufMut, BytesMut};
use frames_core::{check, frames_input, selector, MAXES};
use keel::__private::{encode_message, Decoder, Frame, FrameError, Framing, ENVELOPE_HEADER};
use proptest::collection::vec;
use proptest::prelude::*;

fn framing() -> impl Strategy<Value = Framing> {
    prop_oneof![Just(Framing::Envelope), Just(Framing::Ndjson)]
}

/// A message: any bytes (envelope), or a line with no newline in it, spaces and `\r` included
/// (NDJSON), of up to a little more than the largest limit.
fn message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..80),
        vec(
            prop_oneof![Just(b'x'), Just(b' '), Just(b'\r'), Just(b'{')],
            0..80
        ),
        (any::<u8>(), 0usize..4200).prop_map(|(b, n)| vec![b; n]),
    ]
}

/// Cuts `bytes` at `sizes` (each taken modulo what is left, plus one), the rest as a last chunk.
fn chunks<'a>(bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    for &n in sizes {
        let n = n % (rest.len() + 1);
        let (chunk, tail) = rest.split_at(n);
        out.push(chunk);
        rest = tail;
    }
    out.push(rest);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn arbitrary_bytes(data in vec(any::<u8>(), 0..2048)) {
        frames_input(&data);
    }

    #[test]
    fn valid_streams_changed(
        framing in framing(),
        max_index in 0usize..MAXES.len(),
        messages in vec(message(), 0..6),
        end in proptest::option::of((any::<u8>(), vec(any::<u8>(), 0..20), vec(any::<u8>(), 0..8))),
        edits in vec((any::<usize>(), any::<u8>()), 0..3),
        cut in proptest::option::of(any::<usize>()),
        tail in vec(any::<u8>(), 0..6),
        sizes in vec(0usize..5000, 0..12),
    ) {
        let mut bytes = BytesMut::new();
        for m in &messages {
            encode_message(framing, m, &mut bytes);
        }
        if let (Framing::Envelope, Some((code, body, details))) = (framing, end) {
            // An end frame: status, body length, body, details.
            bytes.put_u8(0x02);
            bytes.put_u32((5 + body.len() + details.len()) as u32);
            bytes.put_u8(code);
            bytes.put_u32(body.len() as u32);
            bytes.put_slice(&body);
            bytes.put_slice(&details);
        }
        let mut bytes = bytes.to_vec();
        if !bytes.is_empty() {
            for (at, byte) in edits {
                let at = at % bytes.len();
                bytes[at] = byte;
            }
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        bytes.extend_from_slice(&tail);
        check(framing, MAXES[max_index], &chunks(&bytes, &sizes));
    }

    #[test]
    fn valid_streams_decode_whole(
        framing in framing(),
        messages in vec(message(), 0..6),
        sizes in vec(0usize..5000, 0..12),
    ) {
        // Under the largest limit every message fits (NDJSON: one without a newline, trimmed,
        // unless it is blank).
        let max = MAXES[MAXES.len() - 1];
        let messages: Vec<Vec<u8>> = messages
            .into_iter()
            .filter(|m| m.len() <= max && (framing != Framing::Ndjson || !m.contains(&b'\n')))
            .collect();
        let mut bytes = BytesMut::new();
        for m in &messages {
            encode_message(framing, m, &mut bytes);
        }
        let decoded = check(framing, max, &chunks(&bytes, &sizes));
        prop_assert!(decoded.error.is_none(), "{:?}", decoded.error);
        let want: Vec<&[u8]> = messages
            .iter()
            .map(|m| match framing {
                Framing::Ndjson => m.trim_ascii(),
                _ => &m[..],
            })
            .filter(|m| framing != Framing::Ndjson || !m.is_empty())
            .collect();
        let got: Vec<&[u8]> = decoded
            .frames
            .iter()
            .map(|f| match f {
                Frame::Message(m) => &m[..],
                Frame::End(_) => panic!("no end frame was sent"),
            })
            .collect();
        prop_assert_eq!(got, want);
    }
}

/// Every limit, both framings, on a few streams by hand.
#[test]
fn every_limit_on_streams_by_hand() {
    for framing in [Framing::Envelope, Framing::Ndjson] {
        for (i, &max) in MAXES.iter().enumerate() {
            for bytes in [
                &b""[..],
                b"{}\n{\"a\":1}\r\n\n  \n",
                &[
                    0, 0, 0, 0, 3, b'a', b'b', b'c', 2, 0, 0, 0, 6, 5, 0, 0, 0, 1, b'x',
                ],
                &[0, 0, 0, 0x10, 0],
                &[0x80; 300],
            ] {
                for seed in [0u8, 1, 2, 77, 255] {
                    let mut input = vec![selector(framing, i), seed];
                    input.extend_from_slice(bytes);
                    frames_input(&input);
                }
                check(framing, max, &[bytes]);
            }
        }
    }
}

/// The seed corpus of the fuzz target, through the same checks.
#[test]
fn the_fuzz_targets_seed_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/message_frames");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        frames_input(&data);
        seeds += 1;
    }
    assert!(seeds >= 8, "only {seeds} seeds in {}", dir.display());
}

/// Found by these checks: a frame's announced length made the decoder reserve that much
/// before any of it arrived, so 5 bytes per stream could make a host allocate the message
/// size limit per stream (4 MiB by default, on every stream of every connection).
#[test]
fn an_announced_length_reserves_nothing() {
    let max = 64 << 20;
    let mut d = Decoder::new(Framing::Envelope, max);
    d.push(&[0, 0x04, 0, 0, 0]);
    assert_eq!(d.next(), Ok(None));
    d.push(b"a few bytes");
    assert_eq!(d.next(), Ok(None));
    let (held, capacity) = d.held();
    assert_eq!(held, ENVELOPE_HEADER + 11);
    assert!(capacity < 1024, "{capacity} bytes reserved for {held}");
}

/// Found by these checks: an NDJSON stream's last line, without its newline, could be one byte
/// over the limit (the byte kept for a `\r` that a newline would follow).
#[test]
fn an_ndjson_last_line_without_its_newline_is_held_to_the_limit() {
    let mut d = Decoder::new(Framing::Ndjson, 8);
    d.push(b"012345678");
    assert_eq!(d.next(), Ok(None));
    assert_eq!(
        d.finish(),
        Err(FrameError::TooLarge {
            len: Some(9),
            max: 8
        })
    );
    let mut d = Decoder::new(Framing::Ndjson, 8);
    d.push(b"01234567\r");
    assert_eq!(d.next(), Ok(None));
    assert_eq!(
        d.finish(),
        Ok(Some(Frame::Message(keel::Bytes::from_static(b"01234567"))))
    );
}
