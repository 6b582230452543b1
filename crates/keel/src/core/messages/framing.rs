//! How a stream of typed messages is framed inside a byte stream (a keel-wire stream, an HTTP
//! body): encoders, and a sans-IO decoder that takes bytes as they arrive and hands out whole
//! frames (fuzzed: `fuzz/fuzz_targets/message_frames.rs`).
//!
//! - **Envelope** (keel's clients: MessagePack; postcard too): each frame is a flags byte, a
//!   32-bit big-endian length and that many bytes, gRPC's length-prefixed message. Flags `0x00`:
//!   a message. Flags `0x02`: the end of the stream with a status (the payload below); nothing
//!   follows it. Any other flags value is malformed (no bit is defined yet, so a receiver
//!   cannot mistake a future frame for a message).
//! - **NDJSON** (`application/x-ndjson`): one JSON message per line (`\n`, an optional `\r`
//!   before it; empty lines are skipped). A stream that fails ends with a line
//!   `{"error": {...}}` (the error body of HTTP.md), and then ends as any stream does: the line
//!   is the stream's end with a status, as Connect's end-of-stream message is (a cut would lose
//!   it: a browser drops what its page has not read of an answer that breaks).
//! - **SSE** (`text/event-stream`, responses only): each message is an event `data: <json>`;
//!   the end is an event named `end` (`data: {}`) or `error` (`data: {...}`, the error body),
//!   so a browser's `EventSource` can close instead of reconnecting.
//!
//! An end frame's payload (envelope): the status code (keel-wire's status byte), a 32-bit
//! big-endian length, that many bytes of body (the message as UTF-8, or for a fault the
//! encoded fault), then the status details (the rest).

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub use crate::core::format::Framing;
use crate::core::status::{Status, StatusCode};

/// Bytes before an envelope frame's payload: flags, then the length.
pub const ENVELOPE_HEADER: usize = 5;
/// An envelope frame's flags for a message.
const FLAG_MESSAGE: u8 = 0x00;
/// An envelope frame's flags for the end of the stream.
const FLAG_END: u8 = 0x02;
/// The most capacity a decoder keeps in its buffer once it is empty.
const MAX_KEPT: usize = 128 * 1024;

/// Appends one message as a frame, the message written by `encode` straight into `out` after
/// the frame's header (so it is never copied), the header's length filled in after. On an
/// error `out` is left as it was.
pub(crate) fn encode_message_with<E>(
    framing: Framing,
    out: &mut Vec<u8>,
    encode: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let start = out.len();
    let (prefix, suffix): (&[u8], &[u8]) = match framing {
        // The length is filled in once the message is written.
        Framing::Envelope => (&[FLAG_MESSAGE, 0, 0, 0, 0], b""),
        Framing::Ndjson => (b"", b"\n"),
        Framing::Sse => (b"data: ", b"\n\n"),
    };
    out.extend_from_slice(prefix);
    if let Err(e) = encode(out) {
        out.truncate(start);
        return Err(e);
    }
    if framing == Framing::Envelope {
        let len = (out.len() - start - ENVELOPE_HEADER) as u32;
        out[start + 1..start + ENVELOPE_HEADER].copy_from_slice(&len.to_be_bytes());
    }
    out.extend_from_slice(suffix);
    Ok(())
}

/// Appends `message` (already encoded) as one frame.
pub fn encode_message(framing: Framing, message: &[u8], out: &mut impl BufMut) {
    match framing {
        Framing::Envelope => {
            out.put_u8(FLAG_MESSAGE);
            out.put_u32(message.len() as u32);
            out.put_slice(message);
        }
        Framing::Ndjson => {
            out.put_slice(message);
            out.put_u8(b'\n');
        }
        Framing::Sse => {
            out.put_slice(b"data: ");
            out.put_slice(message);
            out.put_slice(b"\n\n");
        }
    }
}

/// The bytes that end a stream cleanly (nothing but for SSE's `end` event).
pub(crate) fn encode_clean_end(framing: Framing) -> Option<Bytes> {
    (framing == Framing::Sse).then(|| Bytes::from_static(b"event: end\ndata: {}\n\n"))
}

/// The bytes that end a stream with `status` (not `Ok`); nothing follows them.
pub fn encode_error_end(framing: Framing, status: Status) -> Bytes {
    match framing {
        Framing::Envelope => {
            let code = status.code().to_wire() as u8;
            let (body, details, _) = status.into_wire_parts();
            let mut out = BytesMut::with_capacity(ENVELOPE_HEADER + 5 + body.len() + details.len());
            out.put_u8(FLAG_END);
            out.put_u32((5 + body.len() + details.len()) as u32);
            out.put_u8(code);
            out.put_u32(body.len() as u32);
            out.put_slice(&body);
            out.put_slice(&details);
            out.freeze()
        }
        Framing::Ndjson => {
            let mut line = br#"{"error":"#.to_vec();
            line.extend_from_slice(&error_json(&status));
            line.extend_from_slice(b"}\n");
            Bytes::from(line)
        }
        Framing::Sse => {
            let mut event = b"event: error\ndata: ".to_vec();
            event.extend_from_slice(&error_json(&status));
            event.extend_from_slice(b"\n\n");
            Bytes::from(event)
        }
    }
}

/// A status as HTTP.md's JSON error body: `code`, then `message`, or `fault` for a fault (the
/// details are the fault, encoded as JSON). Other details travel only in an envelope.
fn error_json(status: &Status) -> Vec<u8> {
    let mut obj = serde_json::Map::new();
    obj.insert("code".into(), status.code().as_str().into());
    if status.code() == StatusCode::Fault {
        let fault = serde_json::from_slice(status.details()).unwrap_or(serde_json::Value::Null);
        obj.insert("fault".into(), fault);
    } else {
        obj.insert("message".into(), status.message().into());
    }
    serde_json::to_vec(&obj).expect("a JSON object always serializes")
}

/// The status an envelope end frame carries, or `None` if its payload is malformed.
pub fn decode_end(mut payload: Bytes) -> Option<Status> {
    if payload.len() < 5 {
        return None;
    }
    let code = payload.get_u8();
    let len = payload.get_u32() as usize;
    if len > payload.len() {
        return None;
    }
    let body = payload.split_to(len);
    let code = keel_wire::StatusCode::from_u8(code).unwrap_or(keel_wire::StatusCode::Unknown);
    let code = StatusCode::from_wire(code);
    if code == StatusCode::Ok {
        // An end frame says the stream failed; a clean end has none.
        return None;
    }
    Some(Status::from_wire_parts(
        code,
        body,
        payload,
        Default::default(),
    ))
}

/// What [`Decoder::next_with`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<R> {
    /// What the caller's function made of one message's bytes.
    Message(R),
    /// The end of the stream with a status (envelope only): the payload, see [`decode_end`].
    End(Bytes),
}

/// What [`Decoder::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// One message, encoded.
    Message(Bytes),
    /// The end of the stream with a status (envelope only): the payload, see [`decode_end`].
    End(Bytes),
}

/// Why the bytes are not a stream of frames.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A message longer than the limit (announced, or a line without its end).
    TooLarge {
        /// Its length when the frame announced it, else `None` (a line past the limit).
        len: Option<u64>,
        /// The limit.
        max: usize,
    },
    /// Flags this version does not know.
    UnknownFlags(u8),
    /// The bytes ended inside a frame.
    Truncated,
    /// Bytes after an end frame.
    AfterEnd,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { len: Some(n), max } => {
                write!(f, "a message of {n} bytes exceeds the limit of {max} bytes")
            }
            FrameError::TooLarge { len: None, max } => {
                write!(f, "a message exceeds the limit of {max} bytes")
            }
            FrameError::UnknownFlags(x) => write!(f, "unknown message frame flags {x:#04x}"),
            FrameError::Truncated => f.write_str("the stream ended inside a message"),
            FrameError::AfterEnd => f.write_str("bytes after the end of the stream"),
        }
    }
}

/// Takes a stream's bytes as they arrive and yields whole frames. It holds at most one partial
/// frame (at most `max` bytes of message, checked before they are buffered when the frame
/// announces its length) plus the chunk that completes it, in a buffer sized by the bytes that
/// arrived (see [`Decoder::push`]).
#[derive(Debug)]
pub struct Decoder {
    framing: Framing,
    max: usize,
    buf: BytesMut,
    /// An end frame was yielded: nothing may follow.
    ended: bool,
    /// For NDJSON: how far `buf` was searched for a newline already.
    scanned: usize,
}

impl Decoder {
    /// A decoder of `framing` (`Envelope` or `Ndjson`) refusing messages over `max` bytes.
    pub fn new(framing: Framing, max: usize) -> Decoder {
        Decoder {
            framing,
            max,
            buf: BytesMut::new(),
            ended: false,
            scanned: 0,
        }
    }

    /// Adds bytes that arrived.
    ///
    /// The buffer grows for bytes that arrived, never for a length a frame only announced: a
    /// peer that announces the largest message and sends a few bytes of it makes the decoder
    /// hold those bytes, not the message size limit. It grows geometrically (each byte is
    /// copied a bounded number of times however small the chunks), up to what a partial frame
    /// may need, or exactly what is needed beyond that: its capacity stays within `max` + the
    /// header + the largest chunk, and within twice the bytes pushed.
    ///
    /// An emptied buffer is reused when nothing else holds its memory (messages decoded in
    /// place never split it): a fresh allocation per chunk costs more than the messages'
    /// framing, and on memory the allocator just gave back, page faults too. One that grew for
    /// a large message is let go.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.buf.is_empty()
            && !(self.buf.try_reclaim(chunk.len()) && self.buf.capacity() <= MAX_KEPT)
        {
            self.buf = BytesMut::from(chunk);
            return;
        }
        let needed = self.buf.len() + chunk.len();
        if needed > self.buf.capacity() {
            // `BytesMut::reserve` may double a buffer past both bounds: allocate exactly.
            let partial = self.max.saturating_add(ENVELOPE_HEADER);
            let room = needed.max(self.buf.capacity().saturating_mul(2).min(partial));
            let mut grown = BytesMut::with_capacity(room);
            grown.extend_from_slice(&self.buf);
            self.buf = grown;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole frame, `Ok(None)` when more bytes are needed.
    // Not an iterator: `None` means "not yet", and a stream's end is `finish`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.ended {
            return if self.buf.is_empty() {
                Ok(None)
            } else {
                Err(FrameError::AfterEnd)
            };
        }
        match self.framing {
            Framing::Envelope => self.next_envelope(),
            // SSE is never decoded: read it as NDJSON would be (a host never gets here).
            Framing::Ndjson | Framing::Sse => self.next_line(),
        }
    }

    /// [`Decoder::next`], but a message is handed to `f` where it lies in the buffer instead of
    /// being split off as `Bytes` of its own: for a small message, splitting (a reference count
    /// taken and dropped) costs more than the rest of its framing.
    pub(crate) fn next_with<R>(
        &mut self,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<Decoded<R>>, FrameError> {
        if self.framing == Framing::Envelope && !self.ended {
            let Some((flags, len)) = self.envelope_header()? else {
                return Ok(None);
            };
            if flags == FLAG_MESSAGE {
                let r = f(&self.buf[ENVELOPE_HEADER..ENVELOPE_HEADER + len]);
                self.buf.advance(ENVELOPE_HEADER + len);
                return Ok(Some(Decoded::Message(r)));
            }
        }
        Ok(self.next()?.map(|frame| match frame {
            Frame::Message(m) => Decoded::Message(f(&m)),
            Frame::End(payload) => Decoded::End(payload),
        }))
    }

    /// The bytes ended: anything left is a truncated frame, except an NDJSON last line
    /// without its newline, which is a message.
    pub fn finish(&mut self) -> Result<Option<Frame>, FrameError> {
        if let Some(frame) = self.next()? {
            return Ok(Some(frame));
        }
        if self.buf.is_empty() {
            return Ok(None);
        }
        match self.framing {
            Framing::Envelope => Err(FrameError::Truncated),
            Framing::Ndjson | Framing::Sse => {
                let mut line = self.buf.split().freeze();
                self.scanned = 0;
                // No newline follows: the room `next_line` keeps for a `\r` before one is not
                // the message's.
                if line.last() == Some(&b'\r') {
                    line.truncate(line.len() - 1);
                }
                if line.len() > self.max {
                    return Err(FrameError::TooLarge {
                        len: Some(line.len() as u64),
                        max: self.max,
                    });
                }
                Ok(trim_line(line).map(Frame::Message))
            }
        }
    }

    /// The bytes it holds, and the capacity of the buffer they are in: what the fuzz checks
    /// bound.
    pub fn held(&self) -> (usize, usize) {
        (self.buf.len(), self.buf.capacity())
    }

    fn next_envelope(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some((flags, len)) = self.envelope_header()? else {
            return Ok(None);
        };
        self.buf.advance(ENVELOPE_HEADER);
        let payload = self.buf.split_to(len).freeze();
        Ok(Some(if flags == FLAG_END {
            self.ended = true;
            Frame::End(payload)
        } else {
            Frame::Message(payload)
        }))
    }

    /// The flags and length of the envelope frame at the front of the buffer, once all of it
    /// is there (`None` until then: room is reserved for the rest, the length checked first).
    fn envelope_header(&mut self) -> Result<Option<(u8, usize)>, FrameError> {
        if self.buf.len() < ENVELOPE_HEADER {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        if flags != FLAG_MESSAGE && flags != FLAG_END {
            return Err(FrameError::UnknownFlags(flags));
        }
        // An end frame carries a status message and details: bounded by the same limit.
        if len as u64 > self.max as u64 {
            return Err(FrameError::TooLarge {
                len: Some(len.into()),
                max: self.max,
            });
        }
        let len = len as usize;
        if self.buf.len() < ENVELOPE_HEADER + len {
            // No room is reserved for the rest: it is only announced (see `push`).
            return Ok(None);
        }
        Ok(Some((flags, len)))
    }

    fn next_line(&mut self) -> Result<Option<Frame>, FrameError> {
        loop {
            let Some(at) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') else {
                self.scanned = self.buf.len();
                if self.buf.len() > self.max + 1 {
                    // +1: a `\r` may still come before the `\n`.
                    return Err(FrameError::TooLarge {
                        len: None,
                        max: self.max,
                    });
                }
                return Ok(None);
            };
            let line = self.buf.split_to(self.scanned + at + 1).freeze();
            self.scanned = 0;
            let mut line = line.slice(..line.len() - 1);
            if line.len() > self.max + 1 {
                return Err(FrameError::TooLarge {
                    len: Some(line.len() as u64),
                    max: self.max,
                });
            }
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            if line.len() > self.max {
                return Err(FrameError::TooLarge {
                    len: Some(line.len() as u64),
                    max: self.max,
                });
            }
            if let Some(line) = trim_line(line) {
                return Ok(Some(Frame::Message(line)));
            }
        }
    }
}

/// A line without surrounding whitespace; `None` if nothing is left (an empty line is skipped).
fn trim_line(line: Bytes) -> Option<Bytes> {
    let start = line.iter().position(|b| !b.is_ascii_whitespace())?;
    let end = line.iter().rposition(|b| !b.is_ascii_whitespace())? + 1;
    Some(line.slice(start..end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(framing: Framing, max: usize, chunks: &[&[u8]]) -> Result<Vec<Frame>, FrameError> {
        let mut d = Decoder::new(framing, max);
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(f) = d.next()? {
                out.push(f);
            }
        }
        while let Some(f) = d.finish()? {
            out.push(f);
        }
        Ok(out)
    }

    /// [`frames`] through [`Decoder::next_with`], each message copied out.
    fn frames_in_place(
        framing: Framing,
        max: usize,
        chunks: &[&[u8]],
    ) -> Result<Vec<Frame>, FrameError> {
        let mut d = Decoder::new(framing, max);
        let mut out = Vec::new();
        let owned = |decoded| match decoded {
            Decoded::Message(m) => Frame::Message(m),
            Decoded::End(p) => Frame::End(p),
        };
        for c in chunks {
            d.push(c);
            while let Some(f) = d.next_with(Bytes::copy_from_slice)? {
                out.push(owned(f));
            }
        }
        while let Some(f) = d.finish()? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn envelope_frames_round_trip_split_at_every_byte() {
        let mut all = Vec::new();
        encode_message(Framing::Envelope, b"one", &mut all);
        encode_message(Framing::Envelope, b"", &mut all);
        encode_message(Framing::Envelope, b"three", &mut all);
        let status = Status::new(StatusCode::NotFound, "gone").with_details(&b"d"[..]);
        all.extend_from_slice(&encode_error_end(Framing::Envelope, status));
        for split in 0..=all.len() {
            let (a, b) = all.split_at(split);
            let got = frames(Framing::Envelope, 16, &[a, b]).unwrap();
            assert_eq!(
                frames_in_place(Framing::Envelope, 16, &[a, b]).unwrap(),
                got
            );
            assert_eq!(got.len(), 4, "split at {split}");
            assert_eq!(got[0], Frame::Message(Bytes::from_static(b"one")));
            assert_eq!(got[1], Frame::Message(Bytes::new()));
            assert_eq!(got[2], Frame::Message(Bytes::from_static(b"three")));
            let Frame::End(payload) = &got[3] else {
                panic!("no end frame")
            };
            let end = decode_end(payload.clone()).unwrap();
            assert_eq!(end.code(), StatusCode::NotFound);
            assert_eq!(end.message(), "gone");
            assert_eq!(&end.details()[..], b"d");
        }
    }

    #[test]
    fn an_emptied_buffer_is_reused_unless_it_grew_large() {
        let mut one = Vec::new();
        encode_message(Framing::Envelope, &[7; 100], &mut one);
        let mut d = Decoder::new(Framing::Envelope, 1 << 20);
        d.push(&one);
        let at = d.buf.as_ptr();
        assert!(matches!(
            d.next_with(<[u8]>::len),
            Ok(Some(Decoded::Message(100)))
        ));
        d.push(&one);
        assert_eq!(d.buf.as_ptr(), at, "the same memory");
        assert!(matches!(
            d.next_with(<[u8]>::len),
            Ok(Some(Decoded::Message(100)))
        ));
        // A message larger than what is kept: its memory goes once it is decoded.
        let mut large = Vec::new();
        encode_message(Framing::Envelope, &vec![1; MAX_KEPT + 1], &mut large);
        d.push(&large);
        assert!(d.next_with(<[u8]>::len).unwrap().is_some());
        d.push(&one);
        assert!(d.buf.capacity() < MAX_KEPT);
        assert!(matches!(
            d.next_with(<[u8]>::len),
            Ok(Some(Decoded::Message(100)))
        ));
    }

    #[test]
    fn envelope_refuses_an_oversized_message_before_buffering_it() {
        let mut d = Decoder::new(Framing::Envelope, 10);
        d.push(&[0, 0, 0, 0, 11]);
        assert_eq!(
            d.next(),
            Err(FrameError::TooLarge {
                len: Some(11),
                max: 10
            })
        );
        let mut d = Decoder::new(Framing::Envelope, 10);
        d.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(d.next(), Err(FrameError::TooLarge { .. })));
        assert!(d.buf.capacity() < 1024, "nothing was reserved for it");
    }

    #[test]
    fn envelope_reserves_nothing_for_an_announced_length() {
        // 4 MiB announced within a limit of 64 MiB, 11 bytes sent: 16 bytes held, not 4 MiB.
        let mut d = Decoder::new(Framing::Envelope, 64 << 20);
        d.push(&[0, 0x00, 0x40, 0, 0]);
        assert_eq!(d.next(), Ok(None));
        d.push(b"a few bytes");
        assert_eq!(d.next(), Ok(None));
        assert_eq!(d.held().0, 16);
        assert!(d.held().1 < 1024, "{:?}", d.held());
        // Arriving a byte at a time, a message is still whole at the end, in a buffer that
        // never outgrew twice what arrived.
        let mut all = BytesMut::new();
        encode_message(Framing::Envelope, &[7; 5000], &mut all);
        let mut d = Decoder::new(Framing::Envelope, 5000);
        for (i, b) in all.iter().enumerate() {
            d.push(&[*b]);
            assert!(
                d.held().1 <= 2 * (i + 1),
                "{:?} after {} bytes",
                d.held(),
                i + 1
            );
            if i + 1 < all.len() {
                assert_eq!(d.next(), Ok(None));
            }
        }
        assert_eq!(
            d.next(),
            Ok(Some(Frame::Message(Bytes::from(vec![7; 5000]))))
        );
    }

    #[test]
    fn envelope_refuses_unknown_flags_truncation_and_bytes_after_the_end() {
        assert_eq!(
            frames(Framing::Envelope, 10, &[&[1, 0, 0, 0, 0]]),
            Err(FrameError::UnknownFlags(1))
        );
        assert_eq!(
            frames(Framing::Envelope, 10, &[&[0, 0, 0, 0, 3, b'a']]),
            Err(FrameError::Truncated)
        );
        let mut all = encode_error_end(Framing::Envelope, Status::internal("x")).to_vec();
        encode_message(Framing::Envelope, b"late", &mut all);
        assert_eq!(
            frames(Framing::Envelope, 100, &[&all]),
            Err(FrameError::AfterEnd)
        );
        assert_eq!(
            frames_in_place(Framing::Envelope, 100, &[&all]),
            Err(FrameError::AfterEnd)
        );
        assert_eq!(
            frames_in_place(Framing::Envelope, 10, &[&[0, 0, 0, 0, 11]]),
            Err(FrameError::TooLarge {
                len: Some(11),
                max: 10
            })
        );
    }

    #[test]
    fn a_message_encoded_in_place_is_framed_as_a_copied_one() {
        for framing in [Framing::Envelope, Framing::Ndjson, Framing::Sse] {
            let mut copied = b"before".to_vec();
            encode_message(framing, b"{\"a\":1}", &mut copied);
            let mut in_place = b"before".to_vec();
            encode_message_with(framing, &mut in_place, |out| {
                out.extend_from_slice(b"{\"a\":1}");
                Ok::<(), ()>(())
            })
            .unwrap();
            assert_eq!(in_place, copied, "{framing:?}");
            // A failed encoding leaves nothing behind, not even the header.
            let failed = encode_message_with(framing, &mut in_place, |out| {
                out.extend_from_slice(b"half");
                Err(())
            });
            assert_eq!((failed, &in_place), (Err(()), &copied), "{framing:?}");
        }
        let mut out = Vec::new();
        encode_message(Framing::Envelope, b"abc", &mut out);
        assert_eq!(out, [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        let mut out = Vec::new();
        encode_message(Framing::Sse, b"1", &mut out);
        assert_eq!(out, b"data: 1\n\n");
    }

    #[test]
    fn an_end_frame_with_status_ok_or_a_short_payload_is_malformed() {
        assert!(decode_end(Bytes::from_static(&[0, 0, 0, 0, 0])).is_none());
        assert!(decode_end(Bytes::from_static(&[11, 0, 0, 0])).is_none());
        assert!(decode_end(Bytes::from_static(&[11, 0, 0, 0, 9, b'a'])).is_none());
        let unknown = decode_end(Bytes::from_static(&[250, 0, 0, 0, 1, b'a'])).unwrap();
        assert_eq!(unknown.code(), StatusCode::Unknown);
    }

    #[test]
    fn ndjson_lines_with_crlf_blank_lines_and_a_last_line_without_newline() {
        let got = frames(
            Framing::Ndjson,
            16,
            &[b"{\"a\":1}\r\n\n  \n{\"b\"", b":2}\n{\"c\":3}"],
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                Frame::Message(Bytes::from_static(b"{\"a\":1}")),
                Frame::Message(Bytes::from_static(b"{\"b\":2}")),
                Frame::Message(Bytes::from_static(b"{\"c\":3}")),
            ]
        );
        let lines: &[&[u8]] = &[b"{\"a\":1}\r\n\n  \n{\"b\"", b":2}\n{\"c\":3}"];
        assert_eq!(frames_in_place(Framing::Ndjson, 16, lines).unwrap(), got);
    }

    #[test]
    fn ndjson_refuses_a_line_past_the_limit_without_waiting_for_its_end() {
        let mut d = Decoder::new(Framing::Ndjson, 8);
        d.push(b"0123456789");
        assert!(matches!(
            d.next(),
            Err(FrameError::TooLarge { len: None, .. })
        ));
        assert!(frames(Framing::Ndjson, 8, &[b"0123456789\n"]).is_err());
        assert_eq!(
            frames(Framing::Ndjson, 8, &[b"01234567\r\n"]).unwrap(),
            vec![Frame::Message(Bytes::from_static(b"01234567"))]
        );
        // A last line without its newline is held to the same limit (its `\r` aside).
        assert_eq!(
            frames(Framing::Ndjson, 8, &[b"012345678"]),
            Err(FrameError::TooLarge {
                len: Some(9),
                max: 8
            })
        );
        assert_eq!(
            frames(Framing::Ndjson, 8, &[b"01234567\r"]).unwrap(),
            vec![Frame::Message(Bytes::from_static(b"01234567"))]
        );
    }

    #[test]
    fn json_ends_name_the_status_and_the_fault() {
        let e = encode_error_end(Framing::Ndjson, Status::new(StatusCode::Busy, "full"));
        assert_eq!(&e[..], br#"{"error":{"code":"busy","message":"full"}}"#.as_slice().iter().chain(b"\n").copied().collect::<Vec<_>>().as_slice());
        let fault = Status::fault(Bytes::from_static(br#"{"n":1}"#));
        let e = encode_error_end(Framing::Sse, fault);
        assert_eq!(
            &e[..],
            b"event: error\ndata: {\"code\":\"fault\",\"fault\":{\"n\":1}}\n\n"
        );
        assert_eq!(
            encode_clean_end(Framing::Sse).unwrap(),
            Bytes::from_static(b"event: end\ndata: {}\n\n")
        );
        assert!(encode_clean_end(Framing::Ndjson).is_none());
    }
}
