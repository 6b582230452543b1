//! Encoding and decoding of frames and of the handshake. The byte layout is in `PROTOCOL.md`.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::WireError;
use crate::error::MAX_NAME_LEN;
use crate::metadata::{self, MAX_METADATA_LEN};
use crate::{
    Cancel, Frame, GoAway, Hello, HelloReply, Reply, Request, RequestFlags, StatusCode,
    StopSending, StreamData, StreamEnd, WindowUpdate, MAGIC, VERSION,
};

/// Size of the length prefix in front of every frame.
pub const LEN_PREFIX_SIZE: usize = 4;

/// Longest reason text in a [`GoAway`], a [`StreamEnd`] or a [`HelloReply::Reject`], in bytes.
/// Longer reasons are truncated to a character boundary by the encoders.
pub const MAX_REASON_LEN: usize = 1024;

/// Room a frame may take beyond its message body: the type byte, the largest fixed fields (those
/// of a request: call id, flags, deadline, two name lengths), two names of [`MAX_NAME_LEN`]
/// bytes, and (version 2) a metadata block of at most [`MAX_METADATA_LEN`] bytes with its
/// length and the compression byte. The largest frame a [`Codec`] accepts has a length field of
/// `max_message_size + MAX_HEADER` (see [`Codec::frame_limit`]).
pub const MAX_HEADER: u32 = V1_MAX_HEADER + 2 + MAX_METADATA_LEN as u32 + 1;

/// Version 1's room beyond the body: no metadata, no compression byte.
const V1_MAX_HEADER: u32 = 1 + 8 + 1 + 8 + 1 + 1 + 2 * MAX_NAME_LEN as u32;

/// Size of an encoded [`Hello`]: magic, version, message limit.
pub const HELLO_LEN: usize = 4 + 2 + 4;

// Frame type bytes. 0 and 11..=255 are unknown: malformed in version 1, skipped from version 2.
const TYPE_REQUEST: u8 = 1;
const TYPE_REPLY: u8 = 2;
const TYPE_CANCEL: u8 = 3;
const TYPE_PING: u8 = 4;
const TYPE_PONG: u8 = 5;
const TYPE_GOAWAY: u8 = 6;
const TYPE_STREAM_DATA: u8 = 7;
const TYPE_STREAM_END: u8 = 8;
const TYPE_WINDOW_UPDATE: u8 = 9;
const TYPE_STOP_SENDING: u8 = 10;

// Largest GoAway length field: type, last call id, reason length, reason.
const MAX_GOAWAY_LEN: usize = 1 + 8 + 2 + MAX_REASON_LEN;
// Largest StreamEnd length field: type, call id, status, reason length, reason.
const MAX_STREAM_END_LEN: usize = 1 + 8 + 1 + 2 + MAX_REASON_LEN;

const FLAG_ONE_WAY: u8 = 0b0000_0001;
const FLAG_STREAMED: u8 = 0b0000_0010;
// Version 2: a metadata block follows the names; a compression byte follows that.
const FLAG_METADATA: u8 = 0b0000_0100;
const FLAG_COMPRESSED: u8 = 0b0000_1000;
// Version 2: the caller accepts a compressed reply.
const FLAG_ACCEPTS_COMPRESSED: u8 = 0b0001_0000;
// Version 1 refuses any other bit; version 2 ignores bits 5..=7 (a future flag that changes a
// frame's layout comes with a new version, which is negotiated).
const KNOWN_FLAGS_V1: u8 = FLAG_ONE_WAY | FLAG_STREAMED;

// Reply flags (version 2): metadata block, compression byte, details, in that order.
const REPLY_METADATA: u8 = 0b0000_0001;
const REPLY_COMPRESSED: u8 = 0b0000_0010;
const REPLY_DETAILS: u8 = 0b0000_0100;

// Fixed part of a request after the type byte: call id, flags, deadline.
const REQUEST_FIXED: usize = 8 + 1 + 8;
// Bytes from the start of the length prefix to the end of the call id of a frame that starts
// with one (request, reply, stream data, stream end).
const CALL_ID_END: usize = LEN_PREFIX_SIZE + 1 + 8;

const HELLO_TAG_ACCEPT: u8 = 0;
const HELLO_TAG_REJECT: u8 = 1;

/// Size limits a [`Codec`] enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest message body accepted or produced. Default [`crate::DEFAULT_MAX_MESSAGE_SIZE`].
    pub max_message_size: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_size: crate::DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

impl Limits {
    /// Limits with the given largest message body.
    pub fn with_max_message_size(max_message_size: u32) -> Limits {
        Limits { max_message_size }
    }
}

impl RequestFlags {
    /// The flags as their wire byte.
    pub fn to_u8(self) -> u8 {
        let mut v = 0;
        if self.one_way {
            v |= FLAG_ONE_WAY;
        }
        if self.streamed {
            v |= FLAG_STREAMED;
        }
        if self.accepts_compressed {
            v |= FLAG_ACCEPTS_COMPRESSED;
        }
        v
    }

    /// Flags from their wire byte, or `None` when a bit protocol version 1 does not know is
    /// set. (From version 2 the codec reads the flags itself and ignores unknown bits.)
    pub fn from_u8(v: u8) -> Option<RequestFlags> {
        if v & !KNOWN_FLAGS_V1 != 0 {
            return None;
        }
        Some(RequestFlags {
            one_way: v & FLAG_ONE_WAY != 0,
            streamed: v & FLAG_STREAMED != 0,
            accepts_compressed: false,
        })
    }
}

/// Service and operation names the receiver of requests knows in advance (a host: the names it
/// serves). A decoded [`Request`] whose name is one of them borrows the known `&'static str`
/// instead of allocating a copy, and its bytes need no UTF-8 validation (they equal a valid
/// string). Other names are validated and copied as always, so what a request decodes to does
/// not depend on the known names, only whether its names are borrowed. Cloning is cheap (a
/// reference count).
///
/// ```
/// use std::borrow::Cow;
/// use bytes::{Bytes, BytesMut};
/// use keel_wire::{Codec, Frame, KnownNames, Limits, Request, RequestFlags};
///
/// let request = Frame::Request(Request {
///     call_id: 1,
///     flags: RequestFlags::default(),
///     deadline_us: 0,
///     service: "Calculator".into(),
///     operation: "add".into(),
///     metadata: Bytes::new(),
///     compression: 0,
///     body: Bytes::new(),
/// });
/// let mut wire = BytesMut::new();
/// Codec::new(Limits::default()).encode(&request, &mut wire)?;
///
/// let mut host = Codec::new(Limits::default());
/// host.set_known_names(KnownNames::new(["Calculator", "add"]));
/// let Some(Frame::Request(decoded)) = host.decode(&mut wire)? else { unreachable!() };
/// assert!(matches!(decoded.service, Cow::Borrowed("Calculator")));
/// # Ok::<(), keel_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct KnownNames {
    /// By length, each length's names sorted: a lookup goes to its length's names (usually
    /// one or two) and binary-searches them. Cheaper than hashing the name, which costs about
    /// what it saves on names this short. `None` when there are none.
    by_len: Option<Arc<[Box<[&'static str]>]>>,
}

impl KnownNames {
    /// The set of `names` (duplicates are fine).
    pub fn new(names: impl IntoIterator<Item = &'static str>) -> KnownNames {
        let mut by_len: Vec<Vec<&'static str>> = Vec::new();
        for name in names {
            if by_len.len() <= name.len() {
                by_len.resize_with(name.len() + 1, Vec::new);
            }
            by_len[name.len()].push(name);
        }
        if by_len.is_empty() {
            return KnownNames::default();
        }
        let by_len = by_len
            .into_iter()
            .map(|mut names| {
                names.sort_unstable();
                names.dedup();
                names.into_boxed_slice()
            })
            .collect();
        KnownNames {
            by_len: Some(by_len),
        }
    }

    /// The known name whose bytes are `bytes`, if there is one.
    #[inline]
    pub fn get(&self, bytes: &[u8]) -> Option<&'static str> {
        let names = self.by_len.as_ref()?.get(bytes.len())?;
        // A few names of one length are compared in turn (equality of equal-length bytes is
        // cheaper than ordering them); more are binary-searched.
        if names.len() <= 4 {
            return names.iter().find(|name| name.as_bytes() == bytes).copied();
        }
        let at = names
            .binary_search_by(|name| name.as_bytes().cmp(bytes))
            .ok()?;
        Some(names[at])
    }

    /// How many names it holds.
    pub fn len(&self) -> usize {
        self.by_len
            .as_ref()
            .map_or(0, |by_len| by_len.iter().map(|names| names.len()).sum())
    }

    /// Whether it holds no name.
    pub fn is_empty(&self) -> bool {
        self.by_len.is_none()
    }
}

/// Frame encoder/decoder.
///
/// Decoding is incremental: feed whatever bytes arrived into a [`BytesMut`] and call
/// [`Codec::decode`] until it returns `Ok(None)`. An oversized frame yields one
/// [`WireError::TooLarge`]; the codec then drops that frame's remaining bytes as they arrive,
/// without buffering them, and decoding continues with the next frame.
#[derive(Debug)]
pub struct Codec {
    limits: Limits,
    /// The protocol version the connection negotiated.
    version: u16,
    /// Bytes of an oversized frame still to drop.
    discard: u64,
    /// Names decoded requests borrow instead of copying (see [`KnownNames`]).
    names: KnownNames,
}

impl Codec {
    /// A codec enforcing `limits`, speaking the newest protocol version ([`VERSION`]).
    pub fn new(limits: Limits) -> Codec {
        Codec {
            limits,
            version: VERSION,
            discard: 0,
            names: KnownNames::default(),
        }
    }
    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The protocol version this codec reads and writes.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Speak protocol `version` (1 or 2; anything above 2 is read as 2), as negotiated in the
    /// handshake. Version 1 carries no metadata, compression or details, and treats unknown
    /// frame types, request flags and status codes as malformed; see `PROTOCOL.md`.
    pub fn set_version(&mut self, version: u16) {
        self.version = version.clamp(1, VERSION);
    }

    /// Decoded requests borrow these names instead of allocating copies of them (see
    /// [`KnownNames`]); the frames decoded are equal either way.
    pub fn set_known_names(&mut self, names: KnownNames) {
        self.names = names;
    }

    /// Change the largest message body. After the handshake a client adopts
    /// `min(own, host's)` so that it never sends what the host would refuse.
    pub fn set_max_message_size(&mut self, n: u32) {
        self.limits.max_message_size = n;
    }

    /// The largest length field accepted: `max_message_size + MAX_HEADER` (version 1:
    /// `max_message_size + 530`). (A [`GoAway`] and a [`StreamEnd`] are accepted up to their
    /// own bounds, `11 + MAX_REASON_LEN` and `12 + MAX_REASON_LEN`, even when those are
    /// larger.)
    pub fn frame_limit(&self) -> u64 {
        let header = if self.version >= 2 {
            MAX_HEADER
        } else {
            V1_MAX_HEADER
        };
        u64::from(self.limits.max_message_size) + u64::from(header)
    }

    /// Whether a frame has started arriving and is not whole yet: some of its bytes are in
    /// `src` (the receive buffer this codec decodes from), or an oversized frame is still being
    /// dropped. A receiver bounds how long that may last (keel: the host's frame timeout).
    pub fn in_frame(&self, src: &BytesMut) -> bool {
        self.discard > 0 || !src.is_empty()
    }

    /// How many bytes the frame at the front of `src` occupies once whole, length prefix
    /// included; `None` until its length prefix has arrived, or while an oversized frame is
    /// being dropped (it is not buffered) or its length exceeds the limit (it will be dropped).
    /// A receiver can reserve that much from a memory budget before reading the rest.
    pub fn pending_frame_size(&self, src: &BytesMut) -> Option<usize> {
        if self.discard > 0 || src.len() < LEN_PREFIX_SIZE {
            return None;
        }
        let len = u32::from_le_bytes([src[0], src[1], src[2], src[3]]);
        let bound = self
            .frame_limit()
            .max(MAX_GOAWAY_LEN as u64)
            .max(MAX_STREAM_END_LEN as u64);
        (u64::from(len) <= bound).then(|| LEN_PREFIX_SIZE + len as usize)
    }

    /// Decode one frame from the front of `src`.
    ///
    /// Returns `Ok(None)` when `src` does not hold a whole frame yet (it then has reserved room
    /// for the rest of the frame, which is within the limit). Consumes the frame's bytes when it
    /// returns a frame or a [`WireError::TooLarge`]; the bodies of the returned frames share
    /// `src`'s memory rather than copying it.
    ///
    /// After an error for which [`WireError::is_fatal`] holds, the connection must be closed.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        loop {
            match self.decode_one(src)? {
                Decoded::Frame(f) => return Ok(Some(f)),
                Decoded::Incomplete => return Ok(None),
                Decoded::Skipped => continue,
            }
        }
    }

    /// The Request at the front of `src`, decoded in place: its metadata block and body borrow
    /// `src`, so nothing is split off the buffer or reference-counted. Returns the request and
    /// the length of its frame, which the caller consumes (`src.advance(len)`) when done with
    /// it; `decode` would have returned the same request (owning its bytes) and consumed as
    /// much.
    ///
    /// `None` unless the front of `src` is a whole, well-formed Request within the limits:
    /// anything else (another frame, a partial frame, an oversized or malformed one, the rest of
    /// a frame being skipped) is [`decode`](Self::decode)'s to handle, and it reports the same
    /// errors it always does. A host calls this first and `decode` when it returns `None`.
    ///
    /// ```
    /// use bytes::{Buf, BytesMut};
    /// use keel_wire::{Codec, Frame, Limits, Request, RequestFlags};
    ///
    /// let codec = Codec::new(Limits::default());
    /// let request = Request {
    ///     call_id: 7,
    ///     flags: RequestFlags::default(),
    ///     deadline_us: 0,
    ///     service: "Calculator".into(),
    ///     operation: "add".into(),
    ///     metadata: bytes::Bytes::new(),
    ///     compression: 0,
    ///     body: bytes::Bytes::from_static(b"args"),
    /// };
    /// let mut buf = BytesMut::new();
    /// codec.encode(&Frame::Request(request), &mut buf).unwrap();
    /// let (req, len) = codec.decode_request_in_place(&buf).unwrap();
    /// assert_eq!((req.call_id, &*req.operation, req.body), (7, "add", &b"args"[..]));
    /// buf.advance(len);
    /// assert!(buf.is_empty());
    /// ```
    pub fn decode_request_in_place<'a>(&self, src: &'a [u8]) -> Option<(Request<&'a [u8]>, usize)> {
        let (frame, total) = self.whole_frame_at(src, TYPE_REQUEST)?;
        let mut r = Reader::new(frame);
        r.pos = 1;
        let req = self.request_at(&mut r).ok()?;
        Some((
            Request {
                call_id: req.call_id,
                flags: req.flags,
                deadline_us: req.deadline_us,
                service: req.service,
                operation: req.operation,
                metadata: &frame[req.metadata],
                compression: req.compression,
                body: &frame[req.body],
            },
            total,
        ))
    }

    /// The Reply at the front of `src`, taken off the buffer with only its parts split off:
    /// the body (and the metadata block and details when it has them) share `src`'s
    /// allocation, with no frame in between (no [`Frame`] built, moved and dropped, no split of
    /// the whole frame to be sliced and released). `decode` would have returned the same reply
    /// and consumed as much.
    ///
    /// `None`, with `src` untouched, unless the front of `src` is a whole, well-formed Reply
    /// within the limits: anything else is [`decode`](Self::decode)'s to handle, and it reports
    /// the same errors it always does. A client calls this first and `decode` when it returns
    /// `None`.
    ///
    /// ```
    /// use bytes::{Bytes, BytesMut};
    /// use keel_wire::{Codec, Frame, Limits, Reply, StatusCode};
    ///
    /// let codec = Codec::new(Limits::default());
    /// let reply = Reply {
    ///     call_id: 7,
    ///     status: StatusCode::Ok,
    ///     metadata: Bytes::new(),
    ///     compression: 0,
    ///     details: Bytes::new(),
    ///     body: Bytes::from_static(b"3.0"),
    /// };
    /// let mut buf = BytesMut::new();
    /// codec.encode(&Frame::Reply(reply.clone()), &mut buf).unwrap();
    /// assert_eq!(codec.decode_reply(&mut buf), Some(reply));
    /// assert!(buf.is_empty());
    /// ```
    pub fn decode_reply(&self, src: &mut BytesMut) -> Option<Reply> {
        let (frame, total) = self.whole_frame_at(src, TYPE_REPLY)?;
        let mut r = Reader::new(frame);
        r.pos = 1;
        let at = self.reply_at(&mut r).ok()?;
        if at.metadata.is_empty() && at.details.is_empty() {
            // Most replies: the body is all that is kept.
            src.advance(LEN_PREFIX_SIZE + at.body.start);
            let body = src.split_to(at.body.len()).freeze();
            return Some(Reply {
                call_id: at.call_id,
                status: at.status,
                metadata: Bytes::new(),
                compression: at.compression,
                details: Bytes::new(),
                body,
            });
        }
        let mut frame = src.split_to(total).freeze();
        frame.advance(LEN_PREFIX_SIZE);
        Some(Reply {
            call_id: at.call_id,
            status: at.status,
            metadata: frame.slice(at.metadata),
            compression: at.compression,
            details: frame.slice(at.details),
            body: frame.slice(at.body),
        })
    }

    /// The frame of type `ty` at the front of `src` (from its type byte on) and its length with
    /// the prefix, if it is whole, within the limit and not the rest of a frame being skipped:
    /// what the in-place decoders start from.
    fn whole_frame_at<'a>(&self, src: &'a [u8], ty: u8) -> Option<(&'a [u8], usize)> {
        if self.discard > 0 || src.len() < LEN_PREFIX_SIZE + 1 || src[LEN_PREFIX_SIZE] != ty {
            return None;
        }
        let len = u32::from_le_bytes([src[0], src[1], src[2], src[3]]);
        if u64::from(len) > self.frame_limit() {
            return None;
        }
        let total = LEN_PREFIX_SIZE + len as usize;
        Some((src.get(LEN_PREFIX_SIZE..total)?, total))
    }

    fn decode_one(&mut self, src: &mut BytesMut) -> Result<Decoded, WireError> {
        if self.discard > 0 && !self.skip_discarded(src) {
            return Ok(Decoded::Incomplete);
        }
        if src.len() < LEN_PREFIX_SIZE {
            return Ok(Decoded::Incomplete);
        }
        let len = u32::from_le_bytes([src[0], src[1], src[2], src[3]]);
        let total = LEN_PREFIX_SIZE as u64 + u64::from(len);
        if u64::from(len) > self.frame_limit() {
            // GoAway and StreamEnd reasons are bounded on their own and those frames must
            // arrive whatever the message limit, so they are exempt up to their largest size.
            let Some(&ty) = src.get(LEN_PREFIX_SIZE) else {
                return Ok(Decoded::Incomplete);
            };
            let own_bound = match ty {
                TYPE_GOAWAY => MAX_GOAWAY_LEN,
                TYPE_STREAM_END => MAX_STREAM_END_LEN,
                _ => 0,
            };
            if len as usize > own_bound {
                return self.oversized(src, len, total);
            }
        }
        let Ok(total) = usize::try_from(total) else {
            return self.oversized(src, len, total);
        };
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(Decoded::Incomplete);
        }
        let mut frame = src.split_to(total);
        frame.advance(LEN_PREFIX_SIZE);
        if self.version >= 2 && frame.first().is_some_and(|&ty| !is_known_type(ty)) {
            // RFC 9113 §4.1's rule: unknown frame types are skipped.
            return Ok(Decoded::Skipped);
        }
        self.parse(frame).map(Decoded::Frame)
    }

    /// Drop buffered bytes of an oversized frame. Returns whether the frame is fully dropped.
    fn skip_discarded(&mut self, src: &mut BytesMut) -> bool {
        let n = self.discard.min(src.len() as u64);
        src.advance(n as usize);
        self.discard -= n;
        self.discard == 0
    }

    /// The length field exceeds the limit: report it once the call id (if any) can be read.
    fn oversized(
        &mut self,
        src: &mut BytesMut,
        len: u32,
        total: u64,
    ) -> Result<Decoded, WireError> {
        if src.len() < LEN_PREFIX_SIZE + 1 {
            return Ok(Decoded::Incomplete);
        }
        let call_id = match src[LEN_PREFIX_SIZE] {
            TYPE_REQUEST | TYPE_REPLY | TYPE_STREAM_DATA | TYPE_STREAM_END => {
                if src.len() < CALL_ID_END {
                    return Ok(Decoded::Incomplete);
                }
                let mut id = [0u8; 8];
                id.copy_from_slice(&src[LEN_PREFIX_SIZE + 1..CALL_ID_END]);
                Some(u64::from_le_bytes(id))
            }
            TYPE_CANCEL | TYPE_PING | TYPE_PONG | TYPE_GOAWAY | TYPE_WINDOW_UPDATE
            | TYPE_STOP_SENDING => None,
            _ if self.version >= 2 => {
                // An unknown frame is skipped whatever its size, without buffering it.
                self.discard = total;
                self.skip_discarded(src);
                return Ok(Decoded::Skipped);
            }
            _ => return Err(WireError::Malformed("unknown frame type")),
        };
        self.discard = total;
        self.skip_discarded(src);
        Err(WireError::TooLarge {
            call_id,
            size: u64::from(len),
            limit: self.limits.max_message_size,
        })
    }

    /// Parse one complete frame (without its length prefix).
    fn parse(&self, mut frame: BytesMut) -> Result<Frame, WireError> {
        let mut r = Reader::new(&frame);
        let ty = r.u8()?;
        match ty {
            TYPE_REQUEST => {
                let req = self.request_at(&mut r)?;
                let frame = frame.freeze();
                Ok(Frame::Request(Request {
                    call_id: req.call_id,
                    flags: req.flags,
                    deadline_us: req.deadline_us,
                    service: req.service,
                    operation: req.operation,
                    metadata: frame.slice(req.metadata),
                    compression: req.compression,
                    body: frame.slice(req.body),
                }))
            }
            TYPE_REPLY => {
                let reply = self.reply_at(&mut r)?;
                let frame = frame.freeze();
                Ok(Frame::Reply(Reply {
                    call_id: reply.call_id,
                    status: reply.status,
                    metadata: frame.slice(reply.metadata),
                    compression: reply.compression,
                    details: frame.slice(reply.details),
                    body: frame.slice(reply.body),
                }))
            }
            TYPE_CANCEL => {
                let call_id = r.u64()?;
                r.finish()?;
                Ok(Frame::Cancel(Cancel { call_id }))
            }
            TYPE_PING => {
                let nonce = r.u64()?;
                r.finish()?;
                Ok(Frame::Ping(nonce))
            }
            TYPE_PONG => {
                let nonce = r.u64()?;
                r.finish()?;
                Ok(Frame::Pong(nonce))
            }
            TYPE_GOAWAY => {
                let last_call_id = r.u64()?;
                let reason_len = usize::from(r.u16()?);
                if reason_len > MAX_REASON_LEN {
                    return Err(WireError::Malformed("goaway reason too long"));
                }
                let reason = r.utf8(reason_len)?;
                r.finish()?;
                Ok(Frame::GoAway(GoAway {
                    last_call_id,
                    reason,
                }))
            }
            TYPE_STREAM_DATA => {
                let call_id = r.u64()?;
                let header = r.pos;
                self.check_body(call_id, frame.len() - header)?;
                frame.advance(header);
                Ok(Frame::StreamData(StreamData {
                    call_id,
                    data: frame.freeze(),
                }))
            }
            TYPE_STREAM_END => {
                let call_id = r.u64()?;
                let status = self.status(r.u8()?)?;
                let reason_len = usize::from(r.u16()?);
                if reason_len > MAX_REASON_LEN {
                    return Err(WireError::Malformed("stream end reason too long"));
                }
                let start = r.pos;
                std::str::from_utf8(r.bytes(reason_len)?)
                    .map_err(|_| WireError::Malformed("invalid UTF-8"))?;
                r.finish()?;
                frame.advance(start);
                Ok(Frame::StreamEnd(StreamEnd {
                    call_id,
                    status,
                    message: frame.freeze(),
                }))
            }
            TYPE_WINDOW_UPDATE => {
                let call_id = r.u64()?;
                let increment = r.u32()?;
                r.finish()?;
                if increment == 0 {
                    return Err(WireError::Malformed("zero window increment"));
                }
                Ok(Frame::WindowUpdate(WindowUpdate { call_id, increment }))
            }
            TYPE_STOP_SENDING => {
                let call_id = r.u64()?;
                r.finish()?;
                Ok(Frame::StopSending(StopSending { call_id }))
            }
            _ => Err(WireError::Malformed("unknown frame type")),
        }
    }

    /// A status byte: one this version does not know is malformed in version 1 and reads as
    /// [`StatusCode::Unknown`] from version 2 (gRPC's rule).
    fn status(&self, b: u8) -> Result<StatusCode, WireError> {
        match StatusCode::from_u8(b) {
            Some(code) => Ok(code),
            None if self.version >= 2 => Ok(StatusCode::Unknown),
            None => Err(WireError::Malformed("unknown status code")),
        }
    }

    /// A Request's fields after its type byte, read by `r` (positioned after the type), with
    /// where its metadata block and its body lie in the frame (which starts at the type byte).
    fn request_at(&self, r: &mut Reader<'_>) -> Result<Request<Range<usize>>, WireError> {
        let call_id = r.u64()?;
        let bits = r.u8()?;
        if self.version < 2 && bits & !KNOWN_FLAGS_V1 != 0 {
            return Err(WireError::Malformed("unknown request flags"));
        }
        let flags = RequestFlags {
            one_way: bits & FLAG_ONE_WAY != 0,
            streamed: bits & FLAG_STREAMED != 0,
            accepts_compressed: bits & FLAG_ACCEPTS_COMPRESSED != 0,
        };
        let deadline_us = r.u64()?;
        let service_len = usize::from(r.u8()?);
        let service = r.name(service_len, &self.names)?;
        let op_len = usize::from(r.u8()?);
        let operation = r.name(op_len, &self.names)?;
        let metadata = if bits & FLAG_METADATA != 0 {
            r.metadata()?
        } else {
            0..0
        };
        let compression = if bits & FLAG_COMPRESSED != 0 {
            r.u8()?
        } else {
            0
        };
        let header = r.pos;
        let end = r.buf.len();
        self.check_body(call_id, end - header)?;
        Ok(Request {
            call_id,
            flags,
            deadline_us,
            service,
            operation,
            metadata,
            compression,
            body: header..end,
        })
    }

    /// A Reply's fields after its type byte, read by `r` (positioned after the type), with
    /// where its metadata block, details and body lie in the frame (which starts at the type
    /// byte).
    fn reply_at(&self, r: &mut Reader<'_>) -> Result<Reply<Range<usize>>, WireError> {
        let call_id = r.u64()?;
        let status = self.status(r.u8()?)?;
        let (mut metadata, mut compression, mut details) = (0..0, 0, 0..0);
        if self.version >= 2 {
            let bits = r.u8()?;
            if bits & REPLY_METADATA != 0 {
                metadata = r.metadata()?;
            }
            if bits & REPLY_COMPRESSED != 0 {
                compression = r.u8()?;
            }
            if bits & REPLY_DETAILS != 0 {
                let len = r.u32()? as usize;
                let start = r.pos;
                r.bytes(len)?;
                details = start..r.pos;
            }
        }
        let header = r.pos;
        let end = r.buf.len();
        self.check_body(call_id, end - header + details.len())?;
        Ok(Reply {
            call_id,
            status,
            metadata,
            compression,
            details,
            body: header..end,
        })
    }

    /// A body within a frame that passed the length check may still exceed the message limit
    /// when the names are short; the message limit is what both sides agreed on, so enforce it.
    fn check_body(&self, call_id: u64, body_len: usize) -> Result<(), WireError> {
        if body_len as u64 > u64::from(self.limits.max_message_size) {
            return Err(WireError::TooLarge {
                call_id: Some(call_id),
                size: body_len as u64,
                limit: self.limits.max_message_size,
            });
        }
        Ok(())
    }

    /// Append `frame` to `dst`.
    ///
    /// Fails, writing nothing, when a request or reply body or a [`StreamData`]'s data exceeds
    /// the message limit ([`WireError::TooLarge`]), a name exceeds [`MAX_NAME_LEN`] bytes
    /// ([`WireError::NameTooLong`]), or a [`WindowUpdate`] has an increment of 0
    /// ([`WireError::ZeroWindowIncrement`]). A [`GoAway`] or [`StreamEnd`] reason is truncated
    /// to a character boundary at most [`MAX_REASON_LEN`] bytes long (a [`StreamEnd`] message
    /// that is not UTF-8 is converted lossily first).
    pub fn encode(&self, frame: &Frame, dst: &mut BytesMut) -> Result<(), WireError> {
        match frame {
            Frame::Request(req) => {
                check_name("service", &req.service)?;
                check_name("operation", &req.operation)?;
                self.check_body(req.call_id, req.body.len())?;
                let v2 = self.version >= 2;
                if !v2 && req.compression != 0 {
                    return Err(WireError::InvalidMetadata(
                        "protocol version 1 cannot carry a compressed body",
                    ));
                }
                let md = if v2 { &req.metadata[..] } else { &[][..] };
                check_metadata(md)?;
                let mut bits = req.flags.to_u8();
                if !v2 {
                    bits &= KNOWN_FLAGS_V1;
                }
                let mut header =
                    1 + REQUEST_FIXED + 1 + req.service.len() + 1 + req.operation.len();
                if !md.is_empty() {
                    bits |= FLAG_METADATA;
                    header += 2 + md.len();
                }
                if req.compression != 0 {
                    bits |= FLAG_COMPRESSED;
                    header += 1;
                }
                let len = self.check_len(Some(req.call_id), header, req.body.len())?;
                dst.reserve(LEN_PREFIX_SIZE + len);
                let mut head = Head::new(dst, LEN_PREFIX_SIZE + header);
                head.u32(len as u32);
                head.u8(TYPE_REQUEST);
                head.u64(req.call_id);
                head.u8(bits);
                head.u64(req.deadline_us);
                head.u8(req.service.len() as u8);
                head.bytes(req.service.as_bytes());
                head.u8(req.operation.len() as u8);
                head.bytes(req.operation.as_bytes());
                if !md.is_empty() {
                    head.u16(md.len() as u16);
                    head.bytes(md);
                }
                if req.compression != 0 {
                    head.u8(req.compression);
                }
                head.done();
                dst.extend_from_slice(&req.body);
            }
            Frame::Reply(rep) => self.encode_reply(rep, dst)?,
            Frame::Cancel(c) => put_u64_frame(dst, TYPE_CANCEL, c.call_id),
            Frame::Ping(nonce) => put_u64_frame(dst, TYPE_PING, *nonce),
            Frame::Pong(nonce) => put_u64_frame(dst, TYPE_PONG, *nonce),
            Frame::GoAway(g) => {
                let reason = truncate_utf8(&g.reason, MAX_REASON_LEN);
                let len = 1 + 8 + 2 + reason.len();
                dst.reserve(LEN_PREFIX_SIZE + len);
                dst.put_u32_le(len as u32);
                dst.put_u8(TYPE_GOAWAY);
                dst.put_u64_le(g.last_call_id);
                dst.put_u16_le(reason.len() as u16);
                dst.put_slice(reason.as_bytes());
            }
            Frame::StreamData(d) => {
                self.check_body(d.call_id, d.data.len())?;
                let len = self.check_len(Some(d.call_id), 1 + 8, d.data.len())?;
                dst.reserve(LEN_PREFIX_SIZE + len);
                dst.put_u32_le(len as u32);
                dst.put_u8(TYPE_STREAM_DATA);
                dst.put_u64_le(d.call_id);
                dst.put_slice(&d.data);
            }
            Frame::StreamEnd(e) => {
                let reason = reason_bytes(&e.message);
                let len = 1 + 8 + 1 + 2 + reason.len();
                dst.reserve(LEN_PREFIX_SIZE + len);
                dst.put_u32_le(len as u32);
                dst.put_u8(TYPE_STREAM_END);
                dst.put_u64_le(e.call_id);
                dst.put_u8(e.status as u8);
                dst.put_u16_le(reason.len() as u16);
                dst.put_slice(&reason);
            }
            Frame::WindowUpdate(w) => {
                if w.increment == 0 {
                    return Err(WireError::ZeroWindowIncrement { call_id: w.call_id });
                }
                dst.reserve(LEN_PREFIX_SIZE + 13);
                dst.put_u32_le(13);
                dst.put_u8(TYPE_WINDOW_UPDATE);
                dst.put_u64_le(w.call_id);
                dst.put_u32_le(w.increment);
            }
            Frame::StopSending(s) => put_u64_frame(dst, TYPE_STOP_SENDING, s.call_id),
        }
        Ok(())
    }

    fn encode_reply(&self, rep: &Reply, dst: &mut BytesMut) -> Result<(), WireError> {
        if self.version < 2 {
            if rep.compression != 0 {
                return Err(WireError::InvalidMetadata(
                    "protocol version 1 cannot carry a compressed body",
                ));
            }
            // Version 1 knows codes up to `internal`, and no metadata or details.
            let status = if rep.status as u8 > StatusCode::Internal as u8 {
                StatusCode::Internal
            } else {
                rep.status
            };
            self.check_body(rep.call_id, rep.body.len())?;
            let len = self.check_len(Some(rep.call_id), 1 + 8 + 1, rep.body.len())?;
            dst.reserve(LEN_PREFIX_SIZE + len);
            dst.put_u32_le(len as u32);
            dst.put_u8(TYPE_REPLY);
            dst.put_u64_le(rep.call_id);
            dst.put_u8(status as u8);
            dst.put_slice(&rep.body);
            return Ok(());
        }
        check_metadata(&rep.metadata)?;
        self.check_body(rep.call_id, rep.body.len() + rep.details.len())?;
        let mut bits = 0;
        let mut header = 1 + 8 + 1 + 1;
        if !rep.metadata.is_empty() {
            bits |= REPLY_METADATA;
            header += 2 + rep.metadata.len();
        }
        if rep.compression != 0 {
            bits |= REPLY_COMPRESSED;
            header += 1;
        }
        if !rep.details.is_empty() {
            bits |= REPLY_DETAILS;
            header += 4 + rep.details.len();
        }
        let len = self.check_len(Some(rep.call_id), header, rep.body.len())?;
        dst.reserve(LEN_PREFIX_SIZE + len);
        let mut head = Head::new(dst, LEN_PREFIX_SIZE + header);
        head.u32(len as u32);
        head.u8(TYPE_REPLY);
        head.u64(rep.call_id);
        head.u8(rep.status as u8);
        head.u8(bits);
        if !rep.metadata.is_empty() {
            head.u16(rep.metadata.len() as u16);
            head.bytes(&rep.metadata);
        }
        if rep.compression != 0 {
            head.u8(rep.compression);
        }
        if !rep.details.is_empty() {
            head.u32(rep.details.len() as u32);
            head.bytes(&rep.details);
        }
        head.done();
        dst.extend_from_slice(&rep.body);
        Ok(())
    }

    /// The length field of a frame with this header and body: it must fit in `u32` and within
    /// the frame limit.
    fn check_len(
        &self,
        call_id: Option<u64>,
        header: usize,
        body: usize,
    ) -> Result<usize, WireError> {
        let len = header as u64 + body as u64;
        if len > self.frame_limit() || len > u64::from(u32::MAX) {
            return Err(WireError::TooLarge {
                call_id,
                size: len,
                limit: self.limits.max_message_size,
            });
        }
        Ok(header + body)
    }
}

/// What one step of decoding produced.
enum Decoded {
    Frame(Frame),
    /// Not a whole frame yet.
    Incomplete,
    /// A frame of a type this version does not know was dropped (version 2 and later).
    Skipped,
}

fn is_known_type(ty: u8) -> bool {
    (TYPE_REQUEST..=TYPE_STOP_SENDING).contains(&ty)
}

/// A metadata block an encoder is given must be well formed: the decoder at the other end
/// would close the connection over a bad one.
fn check_metadata(block: &[u8]) -> Result<(), WireError> {
    metadata::validate(block).map_err(|_| {
        WireError::InvalidMetadata("metadata block is malformed or longer than 16 KiB")
    })
}

fn check_name(field: &'static str, name: &str) -> Result<(), WireError> {
    if name.len() > MAX_NAME_LEN {
        return Err(WireError::NameTooLong {
            field,
            len: name.len(),
        });
    }
    Ok(())
}

/// A frame's head (everything before its body), written field by field into bytes appended
/// to the buffer at once: one length check and one copy per field of known size, where
/// `BufMut`'s `put_*` each check and copy on their own.
struct Head<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl<'a> Head<'a> {
    /// The next `len` bytes of `dst` (appended, zeroed), to be filled exactly.
    fn new(dst: &'a mut BytesMut, len: usize) -> Head<'a> {
        let start = dst.len();
        dst.resize(start + len, 0);
        Head {
            buf: &mut dst[start..],
            at: 0,
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }

    fn u8(&mut self, v: u8) {
        self.buf[self.at] = v;
        self.at += 1;
    }

    fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    /// Every byte was written (the head's length was computed right).
    fn done(self) {
        debug_assert_eq!(self.at, self.buf.len(), "frame head length");
    }
}

fn put_u64_frame(dst: &mut BytesMut, ty: u8, v: u64) {
    dst.reserve(LEN_PREFIX_SIZE + 9);
    dst.put_u32_le(9);
    dst.put_u8(ty);
    dst.put_u64_le(v);
}

/// The longest prefix of `s` that is at most `max` bytes and ends on a character boundary.
fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A [`StreamEnd`] message as it goes on the wire: UTF-8 (converted lossily if need be), at most
/// [`MAX_REASON_LEN`] bytes, cut at a character boundary. Shares `message`'s memory when it is
/// valid UTF-8.
fn reason_bytes(message: &Bytes) -> Bytes {
    match std::str::from_utf8(message) {
        Ok(s) => message.slice(..truncate_utf8(s, MAX_REASON_LEN).len()),
        Err(_) => {
            let s = String::from_utf8_lossy(message);
            Bytes::copy_from_slice(truncate_utf8(&s, MAX_REASON_LEN).as_bytes())
        }
    }
}

/// Bounds-checked reads over a complete frame or handshake message.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or(WireError::Malformed("truncated frame"))?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A metadata block (`len u16`, then the block), validated; returns its range.
    fn metadata(&mut self) -> Result<std::ops::Range<usize>, WireError> {
        let len = usize::from(self.u16()?);
        let start = self.pos;
        metadata::validate(self.bytes(len)?)?;
        Ok(start..self.pos)
    }

    fn utf8(&mut self, n: usize) -> Result<String, WireError> {
        let b = self.bytes(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| WireError::Malformed("invalid UTF-8"))
    }

    /// A service or operation name: borrowed when `names` knows it (its bytes are then valid
    /// UTF-8 already: no validation, no allocation), else validated and copied.
    fn name(&mut self, n: usize, names: &KnownNames) -> Result<Cow<'static, str>, WireError> {
        let b = self.bytes(n)?;
        if let Some(known) = names.get(b) {
            return Ok(Cow::Borrowed(known));
        }
        std::str::from_utf8(b)
            .map(|s| Cow::Owned(s.to_owned()))
            .map_err(|_| WireError::Malformed("invalid UTF-8"))
    }

    /// Fixed-size frames must have no trailing bytes.
    fn finish(&self) -> Result<(), WireError> {
        if self.pos != self.buf.len() {
            return Err(WireError::Malformed("trailing bytes in frame"));
        }
        Ok(())
    }
}

/// Append a client hello: [`MAGIC`], version (u16), max message size (u32), little-endian.
pub fn encode_hello(hello: &Hello, dst: &mut BytesMut) {
    dst.reserve(HELLO_LEN);
    dst.put_slice(&MAGIC);
    dst.put_u16_le(hello.version);
    dst.put_u32_le(hello.max_message_size);
}

/// Decode a client hello from the front of `src`.
///
/// Returns `Ok(None)` until all [`HELLO_LEN`] bytes are present, and
/// `Err(WireError::Malformed("bad magic"))` as soon as the bytes present differ from [`MAGIC`],
/// so a peer speaking another protocol fails fast. The version is not checked here: the host
/// decides, and answers a version it does not speak with [`HelloReply::Reject`].
pub fn decode_hello(src: &mut BytesMut) -> Result<Option<Hello>, WireError> {
    let seen = src.len().min(MAGIC.len());
    if src[..seen] != MAGIC[..seen] {
        return Err(WireError::Malformed("bad magic"));
    }
    if src.len() < HELLO_LEN {
        return Ok(None);
    }
    let msg = src.split_to(HELLO_LEN);
    let mut r = Reader::new(&msg[MAGIC.len()..]);
    Ok(Some(Hello {
        version: r.u16()?,
        max_message_size: r.u32()?,
    }))
}

/// Append a host hello reply. A reject reason is truncated to a character boundary at most
/// [`MAX_REASON_LEN`] bytes long.
pub fn encode_hello_reply(reply: &HelloReply, dst: &mut BytesMut) {
    match reply {
        HelloReply::Accept {
            version,
            max_message_size,
        } => {
            dst.reserve(1 + 2 + 4);
            dst.put_u8(HELLO_TAG_ACCEPT);
            dst.put_u16_le(*version);
            dst.put_u32_le(*max_message_size);
        }
        HelloReply::Reject {
            supported_version,
            reason,
        } => {
            let reason = truncate_utf8(reason, MAX_REASON_LEN);
            dst.reserve(1 + 2 + 2 + reason.len());
            dst.put_u8(HELLO_TAG_REJECT);
            dst.put_u16_le(*supported_version);
            dst.put_u16_le(reason.len() as u16);
            dst.put_slice(reason.as_bytes());
        }
    }
}

/// Decode a host hello reply from the front of `src`; `Ok(None)` until it is complete.
pub fn decode_hello_reply(src: &mut BytesMut) -> Result<Option<HelloReply>, WireError> {
    let Some(&tag) = src.first() else {
        return Ok(None);
    };
    match tag {
        HELLO_TAG_ACCEPT => {
            if src.len() < 1 + 2 + 4 {
                return Ok(None);
            }
            let msg = src.split_to(1 + 2 + 4);
            let mut r = Reader::new(&msg[1..]);
            Ok(Some(HelloReply::Accept {
                version: r.u16()?,
                max_message_size: r.u32()?,
            }))
        }
        HELLO_TAG_REJECT => {
            if src.len() < 1 + 2 + 2 {
                return Ok(None);
            }
            let reason_len = usize::from(u16::from_le_bytes([src[3], src[4]]));
            if reason_len > MAX_REASON_LEN {
                return Err(WireError::Malformed("reject reason too long"));
            }
            let total = 1 + 2 + 2 + reason_len;
            if src.len() < total {
                return Ok(None);
            }
            let msg = src.split_to(total);
            let mut r = Reader::new(&msg[1..]);
            let supported_version = r.u16()?;
            let reason_len = usize::from(r.u16()?);
            let reason = r.utf8(reason_len)?;
            Ok(Some(HelloReply::Reject {
                supported_version,
                reason,
            }))
        }
        _ => Err(WireError::Malformed("unknown hello reply tag")),
    }
}

#[cfg(test)]
mod tests;
