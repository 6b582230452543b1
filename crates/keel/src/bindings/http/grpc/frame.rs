//! gRPC's length-prefixed messages (PROTOCOL-HTTP2.md, "Length-Prefixed-Message"): a flags
//! byte (`0` plain, `1` compressed with the call's `grpc-encoding`; no other bit is defined),
//! a 32-bit big-endian length, that many bytes. Sans-IO: a [`Scanner`] that checks each
//! prefix as the bytes pass by (nothing kept), a [`Reader`] that hands out whole messages, and
//! the encoder.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes before a message: the flags, then the length.
pub(crate) const PREFIX: usize = 5;

/// The flags of a compressed message.
const COMPRESSED: u8 = 0x01;

/// Why bytes are not a stream of gRPC messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// A prefix announced more than the limit (checked before any of the message arrives).
    TooLarge {
        /// The announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// Flags other than `0` and `1`.
    UnknownFlags(u8),
    /// A second message where exactly one is allowed (a unary call's request).
    TooMany,
    /// The bytes ended inside a message.
    Truncated,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { len, max } => write!(
                f,
                "a message of {len} bytes exceeds this host's limit of {max} bytes"
            ),
            FrameError::UnknownFlags(b) => {
                write!(f, "a message prefix with unknown flags {b:#04x}")
            }
            FrameError::TooMany => f.write_str("more than one message in a unary call's request"),
            FrameError::Truncated => f.write_str("the request ended inside a message"),
        }
    }
}

impl std::error::Error for FrameError {}

/// One message's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefix {
    /// The message is compressed with the call's `grpc-encoding`.
    pub(crate) compressed: bool,
    /// The message's length on the wire.
    pub(crate) len: u32,
}

/// The prefix in `bytes`, refused if its flags are unknown or its length exceeds `max`.
pub(crate) fn parse_prefix(bytes: [u8; PREFIX], max: u32) -> Result<Prefix, FrameError> {
    let compressed = match bytes[0] {
        0 => false,
        COMPRESSED => true,
        other => return Err(FrameError::UnknownFlags(other)),
    };
    let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(Prefix { compressed, len })
}

/// Appends `message` as one length-prefixed message.
pub(crate) fn encode(compressed: bool, message: &[u8], out: &mut impl BufMut) {
    out.put_u8(if compressed { COMPRESSED } else { 0 });
    out.put_u32(message.len() as u32);
    out.put_slice(message);
}

/// Follows the prefixes of bytes that pass by, without keeping them: what lets a body be
/// refused as soon as a prefix announces too much, before the message arrives.
#[derive(Debug)]
pub(crate) struct Scanner {
    max: u32,
    /// At most this many messages may start (`None`: any number).
    max_messages: Option<u64>,
    header: [u8; PREFIX],
    /// Bytes of `header` received.
    have: usize,
    /// Bytes of the current message still to come.
    remaining: u64,
    /// Messages started (their first prefix byte seen).
    started: u64,
}

impl Scanner {
    /// A scanner refusing messages over `max` bytes, and more than `max_messages`.
    pub(crate) fn new(max: u32, max_messages: Option<u64>) -> Scanner {
        Scanner {
            max,
            max_messages,
            header: [0; PREFIX],
            have: 0,
            remaining: 0,
            started: 0,
        }
    }

    /// Follows `data`; the first error is final (later calls may return anything).
    pub(crate) fn feed(&mut self, mut data: &[u8]) -> Result<(), FrameError> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = (self.remaining as usize).min(data.len());
                self.remaining -= n as u64;
                data = &data[n..];
                continue;
            }
            if self.have == 0 {
                self.started += 1;
                if self.max_messages.is_some_and(|m| self.started > m) {
                    return Err(FrameError::TooMany);
                }
            }
            let n = (PREFIX - self.have).min(data.len());
            self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == PREFIX {
                self.have = 0;
                self.remaining = u64::from(parse_prefix(self.header, self.max)?.len);
            }
        }
        Ok(())
    }
}

/// One message as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    /// Compressed with the call's `grpc-encoding`.
    pub(crate) compressed: bool,
    /// Its bytes (compressed or not).
    pub(crate) bytes: Bytes,
}

/// Gathers bytes as they arrive and hands out whole messages. It holds what arrived and not
/// yet handed out: never more than one message's bytes plus the last chunk, and never room for
/// a length a prefix only announced.
#[derive(Debug)]
pub(crate) struct Reader {
    max: u32,
    buf: BytesMut,
}

impl Reader {
    /// A reader refusing messages over `max` bytes.
    pub(crate) fn new(max: u32) -> Reader {
        Reader {
            max,
            buf: BytesMut::new(),
        }
    }

    /// Adds bytes that arrived.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole message; `Ok(None)` until one has arrived.
    #[allow(clippy::should_implement_trait)] // `None` means "not yet", not the end.
    pub(crate) fn next(&mut self) -> Result<Option<Message>, FrameError> {
        let Some(header) = self.buf.get(..PREFIX) else {
            return Ok(None);
        };
        let header: [u8; PREFIX] = header.try_into().expect("five bytes");
        let prefix = parse_prefix(header, self.max)?;
        let len = prefix.len as usize;
        if self.buf.len() < PREFIX + len {
            return Ok(None);
        }
        self.buf.advance(PREFIX);
        let bytes = self.buf.split_to(len).freeze();
        Ok(Some(Message {
            compressed: prefix.compressed,
            bytes,
        }))
    }

    /// The bytes ended: an error if a message was left unfinished.
    pub(crate) fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Truncated)
        }
    }
}

/// The one message of a complete body, as a slice of it (no copy): `Ok(None)` for an empty
/// body; an error for a body that ends inside its message or holds more than one.
pub(crate) fn one_message(body: &Bytes, max: u32) -> Result<Option<Message>, FrameError> {
    Ok(one_message_at(body, max)?.map(|(compressed, at)| Message {
        compressed,
        bytes: body.slice(at),
    }))
}

/// The one message of a complete body (a unary call's request): `Ok(None)` for an empty body;
/// an error for a body that ends inside its message or holds more than one. Returns whether the
/// message is compressed, and where it lies in `body`, not a slice of it: a slice of a `Bytes`
/// made from a `Vec` (as h2 hands over a DATA frame's payload) allocates, and a host reads the
/// message where it lies.
pub(crate) fn one_message_at(
    body: &[u8],
    max: u32,
) -> Result<Option<(bool, std::ops::Range<usize>)>, FrameError> {
    if body.is_empty() {
        return Ok(None);
    }
    let Some(header) = body.get(..PREFIX) else {
        return Err(FrameError::Truncated);
    };
    let prefix = parse_prefix(header.try_into().expect("five bytes"), max)?;
    let end = PREFIX + prefix.len as usize;
    if body.len() < end {
        return Err(FrameError::Truncated);
    }
    if body.len() > end {
        return Err(FrameError::TooMany);
    }
    Ok(Some((prefix.compressed, PREFIX..end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(parts: &[(bool, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (c, m) in parts {
            encode(*c, m, &mut out);
        }
        out
    }

    #[test]
    fn prefixes_parse_and_refuse() {
        assert_eq!(
            parse_prefix([0, 0, 0, 1, 0], 1024),
            Ok(Prefix {
                compressed: false,
                len: 256
            })
        );
        assert!(parse_prefix([1, 0, 0, 0, 0], 0).unwrap().compressed);
        assert_eq!(
            parse_prefix([0, 0xff, 0xff, 0xff, 0xff], 1024),
            Err(FrameError::TooLarge {
                len: u32::MAX,
                max: 1024
            })
        );
        assert_eq!(
            parse_prefix([2, 0, 0, 0, 0], 1024),
            Err(FrameError::UnknownFlags(2))
        );
        assert_eq!(
            parse_prefix([0x80, 0, 0, 0, 0], 1024),
            Err(FrameError::UnknownFlags(0x80))
        );
    }

    #[test]
    fn the_reader_hands_out_whole_messages_from_any_split() {
        let bytes = framed(&[(false, b"hello"), (true, b""), (false, b"world!")]);
        for split in 0..bytes.len() {
            let mut r = Reader::new(100);
            let mut got = Vec::new();
            for part in [&bytes[..split], &bytes[split..]] {
                r.push(part);
                while let Some(m) = r.next().unwrap() {
                    got.push((m.compressed, m.bytes.to_vec()));
                }
            }
            r.finish().unwrap();
            assert_eq!(
                got,
                [
                    (false, b"hello".to_vec()),
                    (true, vec![]),
                    (false, b"world!".to_vec())
                ]
            );
        }
        let mut r = Reader::new(100);
        r.push(&bytes[..7]);
        assert_eq!(r.next(), Ok(None));
        assert_eq!(r.finish(), Err(FrameError::Truncated));
    }

    #[test]
    fn a_whole_body_holds_exactly_one_message() {
        let one = framed(&[(true, b"abc")]);
        let (compressed, at) = one_message_at(&one, 10).unwrap().unwrap();
        assert!(compressed);
        assert_eq!(&one[at], b"abc");
        assert_eq!(one_message_at(&[], 10), Ok(None));
        assert_eq!(one_message_at(&one[..3], 10), Err(FrameError::Truncated));
        assert_eq!(one_message_at(&one[..6], 10), Err(FrameError::Truncated));
        let two = framed(&[(false, b"a"), (false, b"")]);
        assert_eq!(one_message_at(&two, 10), Err(FrameError::TooMany));
        assert_eq!(
            one_message_at(&one, 2),
            Err(FrameError::TooLarge { len: 3, max: 2 })
        );
    }

    #[test]
    fn the_reader_refuses_an_oversized_prefix_before_its_message() {
        let mut r = Reader::new(4);
        r.push(&[0, 0, 0, 0, 5, b'a']);
        assert_eq!(r.next(), Err(FrameError::TooLarge { len: 5, max: 4 }));
    }

    #[test]
    fn the_scanner_follows_prefixes_byte_by_byte() {
        let bytes = framed(&[(false, b"abc"), (false, b"de")]);
        let mut s = Scanner::new(10, None);
        for b in &bytes {
            s.feed(std::slice::from_ref(b)).unwrap();
        }
        // One message allowed: the first byte of the second is refused.
        let mut s = Scanner::new(10, Some(1));
        s.feed(&bytes[..8]).unwrap();
        assert_eq!(s.feed(&bytes[8..9]), Err(FrameError::TooMany));
        // An announced length past the limit, seen from its prefix alone.
        let mut s = Scanner::new(10, Some(1));
        assert_eq!(
            s.feed(&[0, 0xff, 0xff, 0xff, 0xff]),
            Err(FrameError::TooLarge {
                len: u32::MAX,
                max: 10
            })
        );
        let mut s = Scanner::new(10, None);
        assert_eq!(
            s.feed(&[7]).and_then(|()| s.feed(&[0; 4])),
            Err(FrameError::UnknownFlags(7))
        );
    }

    proptest::proptest! {
        /// Any bytes, in any split: the reader and the scanner never panic, and agree on
        /// whether the bytes are well framed so far.
        #[test]
        fn reader_and_scanner_never_panic_and_agree(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            split in 0usize..64,
        ) {
            let split = split.min(bytes.len());
            let mut r = Reader::new(16);
            let mut s = Scanner::new(16, None);
            let mut reader_err = None;
            let mut scanner_err = None;
            for part in [&bytes[..split], &bytes[split..]] {
                if scanner_err.is_none() {
                    scanner_err = s.feed(part).err();
                }
                r.push(part);
                while reader_err.is_none() {
                    match r.next() {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => reader_err = Some(e),
                    }
                }
            }
            proptest::prop_assert_eq!(reader_err, scanner_err);
        }
    }
}
