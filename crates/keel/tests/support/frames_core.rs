//! The checks behind the `message_frames` fuzz target in `fuzz/`, shared with
//! `tests/message_frames.rs` so that stable CI runs them too.
//!
//! An input's first byte picks the framing (its low bit: envelope or NDJSON) and the message
//! size limit (the next three bits, one of [`MAXES`]); its second byte seeds how the rest is
//! cut into chunks (0: one chunk), as a peer's bytes arrive in pieces of any size. The chunks
//! go, one after another, into the decoder a host and a client run on a stream of messages
//! (`keel::__private::Decoder`, `src/core/messages/framing.rs`), which hands out whole frames.
//! It must never panic, and:
//!
//! - it never holds more than a partial frame and the chunk just pushed: at most `max` +
//!   [`ENVELOPE_HEADER`] + that chunk's length, in a buffer of at most `max` +
//!   [`ENVELOPE_HEADER`] + the largest chunk so far, and of at most twice the bytes pushed so
//!   far (a frame's announced length is a claim, not a reason to reserve room);
//! - every message it hands out is at most `max` bytes (an NDJSON one: a non-empty line without
//!   its newline and surrounding whitespace), an end frame only comes last, and every error
//!   fits the framing (`TooLarge` names the limit it was given);
//! - how the bytes were cut does not matter: the same bytes in one chunk give the same frames
//!   and the same error;
//! - whatever decoded re-encodes (`encode_message`, and an end frame as the envelope it came
//!   in) to bytes that decode to the same frames, without error;
//! - an end frame whose payload is a status (`decode_end`) re-encodes with `encode_error_end`
//!   to an end frame carrying the same status, and encoding that again gives the same bytes.

// The fuzz target and the stable test each use part of this.
#![allow(dead_code, unreachable_pub, missing_docs)]

use bytes::{BufMut, BytesMut};
use keel::__private::{
    decode_end, encode_error_end, encode_message, Decoder, Frame, FrameError, Framing,
    ENVELOPE_HEADER,
};

/// The limits an input's first byte picks from.
pub const MAXES: [usize; 8] = [0, 1, 5, 16, 64, 255, 1000, 4096];

/// The first byte that picks `framing` and `MAXES[max_index]`.
pub fn selector(framing: Framing, max_index: usize) -> u8 {
    let ndjson = u8::from(framing == Framing::Ndjson);
    ndjson | ((max_index as u8 & 7) << 1)
}

/// Decodes one input (see the module docs), panicking if any check fails.
pub fn frames_input(data: &[u8]) {
    let [pick, seed, bytes @ ..] = data else {
        return;
    };
    let framing = if pick & 1 == 1 {
        Framing::Ndjson
    } else {
        Framing::Envelope
    };
    let max = MAXES[usize::from(pick >> 1) & 7];
    let chunks = cut(bytes, *seed, max);
    check(framing, max, &chunks);
}

/// `bytes` cut into chunks of 0 to `max` + 2 headers + 2 bytes, as `seed` says (0: one chunk).
pub fn cut(bytes: &[u8], seed: u8, max: usize) -> Vec<&[u8]> {
    if seed == 0 {
        return vec![bytes];
    }
    let span = max + 2 * ENVELOPE_HEADER + 3;
    let mut state = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut chunks = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        // xorshift32: deterministic, and cheap enough for a fuzz target.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (state as usize % span).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        chunks.push(chunk);
        rest = tail;
    }
    chunks
}

/// What a decoder made of a stream's bytes: its frames, and the error that ended them, if any.
#[derive(Debug)]
pub struct Decoded {
    pub frames: Vec<Frame>,
    pub error: Option<FrameError>,
}

/// Feeds `chunks` to a decoder of `framing` under `max`, as a stream's consumer does, then
/// ends the bytes; checks what it holds after every push and every frame it hands out.
pub fn decode(framing: Framing, max: usize, chunks: &[&[u8]]) -> Decoded {
    let mut d = Decoder::new(framing, max);
    let mut frames = Vec::new();
    let (mut largest, mut pushed) = (0, 0);
    for chunk in chunks {
        let (before, _) = d.held();
        d.push(chunk);
        largest = largest.max(chunk.len());
        pushed += chunk.len();
        let (held, capacity) = d.held();
        assert_eq!(held, before + chunk.len(), "it holds what it was given");
        assert!(
            held <= max + ENVELOPE_HEADER + chunk.len(),
            "{framing:?}, max {max}: holds {held} bytes after a chunk of {}",
            chunk.len()
        );
        assert!(
            capacity <= max + ENVELOPE_HEADER + largest,
            "{framing:?}, max {max}: a buffer of {capacity} bytes ({held} held), chunks of at \
             most {largest}"
        );
        assert!(
            capacity <= 2 * pushed,
            "{framing:?}, max {max}: a buffer of {capacity} bytes for {pushed} pushed (room \
             for a length a frame only announced)"
        );
        loop {
            match d.next() {
                Ok(Some(frame)) => {
                    check_frame(framing, max, &frames, &frame);
                    frames.push(frame);
                }
                Ok(None) => break,
                Err(e) => {
                    check_error(framing, max, &frames, &e);
                    return Decoded {
                        frames,
                        error: Some(e),
                    };
                }
            }
        }
    }
    // The bytes ended.
    loop {
        match d.finish() {
            Ok(Some(frame)) => {
                check_frame(framing, max, &frames, &frame);
                frames.push(frame);
            }
            Ok(None) => break,
            Err(e) => {
                check_error(framing, max, &frames, &e);
                return Decoded {
                    frames,
                    error: Some(e),
                };
            }
        }
    }
    Decoded {
        frames,
        error: None,
    }
}

fn check_frame(framing: Framing, max: usize, before: &[Frame], frame: &Frame) {
    assert!(
        !matches!(before.last(), Some(Frame::End(_))),
        "a frame after the end frame: {frame:?}"
    );
    match frame {
        Frame::Message(m) => {
            assert!(
                m.len() <= max,
                "{framing:?}: a message of {} > {max}",
                m.len()
            );
            if framing == Framing::Ndjson {
                assert!(!m.is_empty(), "an empty NDJSON message");
                assert!(!m.contains(&b'\n'), "a newline inside an NDJSON message");
                assert!(
                    !m[0].is_ascii_whitespace() && !m[m.len() - 1].is_ascii_whitespace(),
                    "an NDJSON message not trimmed: {m:?}"
                );
            }
        }
        Frame::End(payload) => {
            assert_eq!(framing, Framing::Envelope, "an end frame in NDJSON");
            assert!(
                payload.len() <= max,
                "an end frame of {} > {max}",
                payload.len()
            );
        }
    }
}

fn check_error(framing: Framing, max: usize, before: &[Frame], e: &FrameError) {
    match e {
        FrameError::TooLarge { len, max: limit } => {
            assert_eq!(*limit, max, "TooLarge names another limit");
            if let Some(len) = len {
                assert!(*len > max as u64, "TooLarge for {len} bytes under {max}");
            }
        }
        FrameError::UnknownFlags(flags) => {
            assert_eq!(framing, Framing::Envelope, "{e}");
            assert!(*flags != 0x00 && *flags != 0x02, "{e}");
        }
        FrameError::Truncated => assert_eq!(framing, Framing::Envelope, "{e}"),
        FrameError::AfterEnd => {
            assert!(
                matches!(before.last(), Some(Frame::End(_))),
                "AfterEnd without an end frame"
            );
        }
    }
}

/// An error with what depends on where the bytes were cut left out: an NDJSON line past the
/// limit is refused before its newline arrives (no length) or with it (its length).
fn error_kind(e: &Option<FrameError>) -> Option<String> {
    e.as_ref().map(|e| match e {
        FrameError::TooLarge { max, .. } => format!("TooLarge({max})"),
        other => format!("{other:?}"),
    })
}

/// Frames encoded as their senders encode them: messages with `encode_message`, an end frame
/// as the envelope it came in.
pub fn encode(framing: Framing, frames: &[Frame]) -> BytesMut {
    let mut out = BytesMut::new();
    for frame in frames {
        match frame {
            Frame::Message(m) => encode_message(framing, m, &mut out),
            Frame::End(payload) => {
                out.put_u8(0x02);
                out.put_u32(payload.len() as u32);
                out.put_slice(payload);
            }
        }
    }
    out
}

/// Every check for `chunks` decoded as `framing` under `max` (see the module docs).
pub fn check(framing: Framing, max: usize, chunks: &[&[u8]]) -> Decoded {
    let decoded = decode(framing, max, chunks);
    let whole: Vec<u8> = chunks.concat();
    let at_once = decode(framing, max, &[&whole]);
    assert_eq!(
        at_once.frames, decoded.frames,
        "the chunks changed the frames"
    );
    assert_eq!(
        error_kind(&at_once.error),
        error_kind(&decoded.error),
        "the chunks changed the error"
    );
    let again = encode(framing, &decoded.frames);
    let round = decode(framing, max, &[&again]);
    assert!(
        round.error.is_none(),
        "re-encoded frames fail: {:?}",
        round.error
    );
    assert_eq!(
        round.frames, decoded.frames,
        "frames changed in a round trip"
    );
    if let Some(Frame::End(payload)) = decoded.frames.last() {
        end_round_trip(payload);
    }
    decoded
}

/// An end frame's status survives `encode_error_end` and `decode_end`, and encodes to the same
/// bytes once it went through them. (Decoded without a limit: a body that was not UTF-8 comes
/// back longer, each bad byte as U+FFFD.)
fn end_round_trip(payload: &keel::Bytes) {
    let Some(status) = decode_end(payload.clone()) else {
        return;
    };
    let bytes = encode_error_end(Framing::Envelope, status.clone());
    let mut d = Decoder::new(Framing::Envelope, usize::MAX);
    d.push(&bytes);
    let Ok(Some(Frame::End(p2))) = d.next() else {
        panic!("encode_error_end wrote no end frame: {bytes:?}")
    };
    assert_eq!(d.finish(), Ok(None), "bytes after the end frame");
    let back = decode_end(p2).expect("the re-encoded end frame decodes");
    assert_eq!(back.code(), status.code());
    assert_eq!(back.message(), status.message());
    assert_eq!(back.details(), status.details());
    assert_eq!(
        encode_error_end(Framing::Envelope, back),
        bytes,
        "an end frame's status changed in a second round trip"
    );
}
