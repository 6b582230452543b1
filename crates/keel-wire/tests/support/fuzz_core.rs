//! The checks behind the fuzz targets in `fuzz/`, shared with `tests/random.rs` so that stable CI
//! runs them too. Each function must never panic on any input; the assertions inside state the
//! decoders' invariants.

// Each fuzz target uses one of the two entry points.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keel_wire::{
    decode_hello, decode_hello_reply, encode_hello, encode_hello_reply, CallRejected, Cancel,
    Codec, ConnError, Connection, Event, FlowError, Frame, GoAway, Keepalive, KnownNames, Limits,
    PingPolicy, RecvWindow, Reply, Request, RequestFlags, SendWindow, Side, StatusCode,
    StopSending, StreamData, StreamEnd, WindowConfig, WindowUpdate, MAGIC, MAX_WINDOW_SIZE,
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
    // Requests naming these borrow them; they must decode to the same frames regardless.
    codec.set_known_names(KnownNames::new(["", "a", "Calculator", "add"]));
    let mut src = BytesMut::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(chunks.next(rest.len()));
        rest = tail;
        src.extend_from_slice(chunk);
        loop {
            // What a host decodes in place must be what `decode` returns next, consuming as
            // much; and a whole valid request at the front must decode in place.
            let in_place = codec
                .decode_request_in_place(&src)
                .map(|(req, len)| (owned(&req), len));
            // Likewise a reply taken off the front by a client (from a copy: it consumes), and
            // when it takes nothing it touches nothing.
            let before = src.len();
            let reply_first = {
                let mut copy = src.clone();
                let reply = codec.decode_reply(&mut copy);
                if reply.is_none() {
                    assert_eq!(copy, src);
                }
                reply.map(|reply| (reply, before - copy.len()))
            };
            match codec.decode(&mut src) {
                Ok(Some(frame)) => {
                    let mut again = BytesMut::new();
                    codec
                        .encode(&frame, &mut again)
                        .expect("decoded frame re-encodes");
                    let consumed = before - src.len();
                    let request = match &frame {
                        Frame::Request(req) => Some(req),
                        _ => None,
                    };
                    let reply = match &frame {
                        Frame::Reply(reply) => Some(reply),
                        _ => None,
                    };
                    agrees("request", request, in_place, consumed, again.len());
                    agrees("reply", reply, reply_first, consumed, again.len());
                    let mut fresh = Codec::new(limits);
                    assert_eq!(fresh.decode(&mut again), Ok(Some(frame)));
                    assert!(again.is_empty());
                }
                Ok(None) => {
                    assert!(reply_first.is_none());
                    // At most one partial frame within the limit (GoAway and StreamEnd have their
                    // own bounds, the larger being StreamEnd's).
                    let bound = codec
                        .frame_limit()
                        .max(12 + keel_wire::MAX_REASON_LEN as u64);
                    assert!((src.len() as u64) < 4 + bound);
                    break;
                }
                Err(e) if e.is_fatal() => {
                    assert!(in_place.is_none() && reply_first.is_none());
                    return;
                }
                Err(_) => assert!(in_place.is_none() && reply_first.is_none()),
            }
        }
    }
}

/// A frame an in-place decoder took from the front of the buffer (`first`: the frame and the
/// bytes it took) must be the one `decode` returned next (`decoded`, when it is of that kind),
/// which consumed as much (`consumed`, its encoding being `encoded_len` bytes). A whole frame
/// of that kind at the front must be taken, unless bytes before it were skipped (the rest of an
/// oversized frame, or a frame of an unknown type); none may be taken before another frame.
fn agrees<T: PartialEq + std::fmt::Debug>(
    kind: &str,
    decoded: Option<&T>,
    first: Option<(T, usize)>,
    consumed: usize,
    encoded_len: usize,
) {
    match (decoded, first) {
        (Some(frame), Some((same, len))) => {
            assert_eq!(frame, &same);
            assert_eq!(consumed, len);
        }
        (Some(_), None) => assert!(
            consumed > encoded_len,
            "a whole {kind} at the front was not decoded in place"
        ),
        (None, first) => assert!(first.is_none(), "a {kind} decoded in place: {first:?}"),
    }
}

/// A request decoded in place, owning its bytes (as `decode` returns it).
fn owned(req: &Request<&[u8]>) -> Request {
    Request {
        call_id: req.call_id,
        flags: req.flags,
        deadline_us: req.deadline_us,
        service: req.service.clone(),
        operation: req.operation.clone(),
        metadata: Bytes::copy_from_slice(req.metadata),
        compression: req.compression,
        body: Bytes::copy_from_slice(req.body),
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

/// Reads an input as a sequence of small numbers; past its end every read gives 0.
#[derive(Debug, Clone)]
struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// Up to `n` little-endian bytes.
    fn uint(&mut self, n: usize) -> u64 {
        (0..n).fold(0u64, |acc, i| acc | u64::from(self.u8()) << (8 * i))
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.data.split_at(n.min(self.data.len()));
        self.data = b;
        a
    }

    /// A call id: usually one of a few small ones, so that frames and calls meet; a byte from
    /// 0xF0 on reads a whole u64.
    fn call_id(&mut self) -> u64 {
        match self.u8() {
            b @ 0..=0xEF => u64::from(b % 8),
            _ => self.uint(8),
        }
    }

    /// A byte count: small, or (from 0xC0 on) up to about twice the initial window.
    fn size(&mut self) -> usize {
        match self.u8() {
            b @ 0..=0xBF => usize::from(b),
            b => usize::from(b - 0xBF) * 8 * 1024 + self.uint(2) as usize,
        }
    }

    fn status(&mut self) -> StatusCode {
        StatusCode::from_u8(self.u8() % 12).expect("0..=11 are statuses")
    }

    fn text(&mut self) -> String {
        let n = usize::from(self.u8() % 32);
        String::from_utf8_lossy(self.bytes(n)).into_owned()
    }
}

/// A frame built field by field from `r` (reaches the core's states faster than raw bytes).
fn structured_frame(r: &mut Reader<'_>) -> Frame {
    match r.u8() % 10 {
        0 => {
            let flags = r.u8();
            Frame::Request(Request {
                call_id: r.call_id(),
                flags: RequestFlags {
                    one_way: flags & 1 != 0,
                    streamed: flags & 2 != 0,
                    accepts_compressed: false,
                },
                deadline_us: r.uint(1),
                service: r.text().into(),
                operation: r.text().into(),
                metadata: Bytes::new(),
                compression: 0,
                body: Bytes::copy_from_slice(r.bytes(4)),
            })
        }
        1 => Frame::Reply(Reply {
            call_id: r.call_id(),
            status: r.status(),
            metadata: Bytes::new(),
            compression: 0,
            details: Bytes::new(),
            body: Bytes::copy_from_slice(r.bytes(4)),
        }),
        2 => Frame::Cancel(Cancel {
            call_id: r.call_id(),
        }),
        3 => Frame::Ping(r.uint(8)),
        4 => Frame::Pong(r.uint(8)),
        5 => Frame::GoAway(GoAway {
            last_call_id: r.call_id(),
            reason: r.text(),
        }),
        6 => Frame::StreamData(StreamData {
            call_id: r.call_id(),
            data: Bytes::from(vec![0; r.size()]),
        }),
        7 => {
            let call_id = r.call_id();
            let status = r.status();
            let message = r.text();
            Frame::StreamEnd(StreamEnd {
                call_id,
                status,
                message: if status == StatusCode::Ok {
                    Bytes::new()
                } else {
                    Bytes::from(message)
                },
            })
        }
        8 => Frame::WindowUpdate(WindowUpdate {
            call_id: r.call_id(),
            increment: match r.u8() {
                0..=0x7F => r.uint(3) as u32,
                _ => r.uint(4) as u32,
            },
        }),
        _ => Frame::StopSending(StopSending {
            call_id: r.call_id(),
        }),
    }
}

/// The error `side` must answer `frame` with: only frames the other side alone sends.
fn expected_conn_error(side: Side, frame: &Frame) -> Option<ConnError> {
    match (side, frame) {
        (Side::Client, Frame::Request(_)) => Some(ConnError::ClientOnlyFrame { frame: "Request" }),
        (Side::Client, Frame::Cancel(_)) => Some(ConnError::ClientOnlyFrame { frame: "Cancel" }),
        (Side::Host, Frame::Reply(_)) => Some(ConnError::HostOnlyFrame { frame: "Reply" }),
        (Side::Host, Frame::GoAway(_)) => Some(ConnError::HostOnlyFrame { frame: "GoAway" }),
        _ => None,
    }
}

/// One [`Connection`] of `side` driven by `data`, and what it must keep to.
struct ConnRun {
    side: Side,
    conn: Connection<u64>,
    /// Encodes what the core queues (it must all encode).
    codec: Codec,
    /// Decodes the raw bytes fed to the core, as a real reader does.
    reader: Codec,
    inbox: BytesMut,
    now: Instant,
    started: u64,
    pending: BTreeSet<u64>,
    last_ping: Option<u64>,
}

impl ConnRun {
    fn new(side: Side) -> ConnRun {
        // Keepalive on both sides and the host's ping limit, at scales the steps' clock
        // (0–3.3 s a step) reaches.
        let now = Instant::now();
        let mut conn = Connection::new(side, WindowConfig::default());
        conn.set_keepalive(
            Keepalive {
                interval: Duration::from_millis(20),
                timeout: Duration::from_millis(5),
            },
            now,
        );
        if side == Side::Host {
            conn.set_ping_policy(PingPolicy {
                min_interval: Duration::from_millis(1),
                max_strikes: 2,
            });
        }
        ConnRun {
            side,
            conn,
            codec: Codec::new(Limits::default()),
            reader: Codec::new(Limits::with_max_message_size(64 * 1024)),
            inbox: BytesMut::new(),
            now,
            started: 0,
            pending: BTreeSet::new(),
            last_ping: None,
        }
    }

    /// Feeds one decoded frame and checks the outcome.
    fn feed(&mut self, frame: Frame) {
        let side = self.side;
        let expected = expected_conn_error(side, &frame);
        let is_ping = matches!(frame, Frame::Ping(_));
        let closed = self.conn.is_closed();
        match self.conn.handle(frame, self.now) {
            Err(ConnError::TooManyPings) => {
                assert!(!closed && side == Side::Host && is_ping);
                self.close();
            }
            Err(e) => {
                assert!(!closed, "a closed core reported {e}");
                assert_eq!(Some(e), expected);
                // What a real reader does: close the connection.
                self.close();
            }
            Ok(event) => {
                assert!(closed || expected.is_none(), "{expected:?} accepted");
                assert!(!closed || event.is_none());
                match event {
                    Some(Event::Request(_) | Event::Cancel { .. }) => assert_eq!(side, Side::Host),
                    Some(Event::Reply { reply, slot, .. }) => {
                        assert_eq!(side, Side::Client);
                        assert_eq!(slot, reply.call_id);
                        assert!(self.pending.remove(&slot));
                    }
                    Some(Event::GoAway(_)) => {
                        assert_eq!(side, Side::Client);
                        assert!(self.conn.is_going_away());
                    }
                    Some(Event::StreamFailed { error, .. }) => {
                        assert!(
                            matches!(error, FlowError::WindowExceeded { .. }),
                            "{error:?}"
                        );
                    }
                    Some(Event::OutboundStopped { call_id, .. }) => {
                        assert_eq!(self.conn.send_credit(call_id), None);
                    }
                    Some(Event::Credit { call_id }) => {
                        assert!(self.conn.send_credit(call_id).is_some());
                    }
                    Some(Event::StreamData { .. } | Event::StreamEnd { .. }) | None => {}
                    Some(other) => panic!("an event this check does not know: {other:?}"),
                }
            }
        }
    }

    fn close(&mut self) {
        let closed = self.conn.close("closed");
        for (id, slot) in &closed.calls {
            assert_eq!(id, slot);
            assert!(self.pending.remove(id));
        }
        assert!(self.pending.is_empty());
    }

    /// One step read from `r`.
    fn step(&mut self, r: &mut Reader<'_>) {
        let side = self.side;
        let now = self.now;
        match r.u8() % 20 {
            // Raw bytes, decoded as a real reader would; a fatal decoding error closes.
            0 | 1 => {
                let n = usize::from(r.u8());
                self.inbox.extend_from_slice(r.bytes(n));
                loop {
                    match self.reader.decode(&mut self.inbox) {
                        Ok(Some(frame)) => self.feed(frame),
                        Ok(None) => break,
                        Err(e) if e.is_fatal() => {
                            self.inbox.clear();
                            self.close();
                            break;
                        }
                        Err(_) => {}
                    }
                }
            }
            2..=6 => {
                let frame = structured_frame(r);
                self.feed(frame);
            }
            7 => {
                let (download, upload) = (r.bool(), r.bool());
                if side == Side::Client {
                    let slot = self.started + 1;
                    match self.conn.start_call(slot, download, upload) {
                        Ok(id) => {
                            self.started += 1;
                            assert_eq!(id, slot);
                            self.pending.insert(id);
                        }
                        Err((CallRejected::Closed(_), s)) => {
                            assert!(self.conn.is_closed());
                            assert_eq!(s, slot);
                        }
                        Err((CallRejected::GoingAway, s)) => {
                            assert!(self.conn.is_going_away());
                            assert_eq!(s, slot);
                        }
                        Err((other, _)) => panic!("a rejection this check does not know: {other}"),
                    }
                }
            }
            8 => {
                let id = r.call_id();
                let slot = self.conn.cancel_call(id);
                assert_eq!(slot.is_some(), self.pending.remove(&id));
                assert_eq!(self.conn.send_credit(id), None);
            }
            9 => {
                let id = r.call_id();
                let slot = self.conn.forget_call(id);
                assert_eq!(slot.is_some(), self.pending.remove(&id));
            }
            10 => {
                let (id, n) = (r.call_id(), r.size());
                self.conn.consumed(id, n, now);
            }
            11 => {
                let id = r.call_id();
                if r.bool() {
                    self.conn.abandon_inbound(id);
                } else {
                    self.conn.close_inbound(id);
                }
            }
            12 => {
                let id = r.call_id();
                if r.bool() {
                    self.conn.open_inbound(id, now);
                } else {
                    self.conn.open_outbound(id);
                }
            }
            13 => {
                let (id, n) = (r.call_id(), r.size());
                let credit = self.conn.send_credit(id).unwrap_or(0) as usize;
                self.conn.on_sent(id, n.min(credit));
            }
            14 => {
                let (id, status) = (r.call_id(), r.status());
                let registered = self.conn.send_credit(id).is_some();
                assert_eq!(
                    self.conn
                        .finish_outbound(id, status, Bytes::from_static(b"done")),
                    registered
                );
            }
            15 => {
                let id = r.call_id();
                let registered = self.conn.send_credit(id).is_some();
                assert_eq!(self.conn.stop_outbound(id), registered);
            }
            16 => {
                if r.bool() {
                    self.conn.ping(now);
                } else if let Some(nonce) = self.last_ping.take() {
                    assert_eq!(self.conn.handle(Frame::Pong(nonce), now), Ok(None));
                }
            }
            17 => {
                let v = r.uint(2);
                match r.u8() % 5 {
                    0 => self.conn.set_rtt(Duration::from_micros(v * 50)),
                    1 | 2 => self.now += Duration::from_micros(v * 50),
                    3 => {
                        // The keepalive timer, fired when the core asked for it or not.
                        let due = self.conn.poll_timeout();
                        assert_eq!(due.is_none(), self.conn.is_closed());
                        let at = if r.bool() {
                            due.unwrap_or(now).max(now)
                        } else {
                            now
                        };
                        self.now = at;
                        match self.conn.handle_timeout(at) {
                            Ok(true) => {
                                assert!(self.conn.poll_timeout().is_some_and(|t| t > at));
                            }
                            Ok(false) => {}
                            Err(ConnError::Unresponsive { waited }) => {
                                assert!(waited >= Duration::from_millis(5), "{waited:?}");
                                self.close();
                            }
                            Err(e) => panic!("handle_timeout failed with {e}"),
                        }
                    }
                    _ => {
                        if r.bool() {
                            if self.conn.probe(now) {
                                assert!(self.conn.poll_timeout().is_some());
                            }
                        } else {
                            self.conn.restart_keepalive_wait(now);
                        }
                    }
                }
            }
            18 => {
                if side == Side::Host {
                    self.conn.go_away("draining");
                    assert!(self.conn.is_going_away() || self.conn.is_closed());
                }
            }
            _ => {
                if r.u8() < 16 {
                    self.close();
                }
            }
        }
        self.check();
    }

    /// What holds after every step: the call table matches, the RTT is positive, and every
    /// queued frame is one this side may send and encodes.
    fn check(&mut self) {
        assert_eq!(self.conn.pending_calls(), self.pending.len());
        if let Some(rtt) = self.conn.rtt() {
            assert!(rtt > Duration::ZERO);
        }
        while let Some(frame) = self.conn.poll_transmit() {
            let allowed = match &frame {
                Frame::Request(_) | Frame::Reply(_) | Frame::StreamData(_) => false,
                Frame::Cancel(_) => self.side == Side::Client,
                Frame::GoAway(_) => self.side == Side::Host,
                Frame::WindowUpdate(w) => w.increment > 0 && w.increment <= MAX_WINDOW_SIZE,
                Frame::Ping(nonce) => {
                    self.last_ping = Some(*nonce);
                    true
                }
                _ => true,
            };
            assert!(allowed, "{:?} sent {frame:?}", self.side);
            let mut wire = BytesMut::new();
            assert_eq!(self.codec.encode(&frame, &mut wire), Ok(()));
        }
    }
}

/// Drives a client core and a host core with the same input: steps read from `data` feed
/// frames (raw bytes through a [`Codec`], or built field by field) and make the API calls the
/// caller makes. Never panics; `handle` fails only with the documented [`ConnError`]s.
pub(crate) fn connection(data: &[u8]) {
    for side in [Side::Client, Side::Host] {
        let mut run = ConnRun::new(side);
        let mut r = Reader { data };
        while !r.is_empty() {
            run.step(&mut r);
        }
        run.close();
    }
}

/// A [`RecvWindow`] and the [`SendWindow`] of an honest producer, with a peer that also sends
/// data and grants credit of sizes read from `data`. Checks the flow-control invariants: data
/// beyond the granted credit and grants above [`MAX_WINDOW_SIZE`] are refused (changing
/// nothing), the honest producer's credit always equals what the consumer granted minus what
/// it received, credit plus buffered bytes never exceed the window, and the window never
/// shrinks nor passes its max.
pub(crate) fn windows(data: &[u8]) {
    let mut r = Reader { data };
    let config = WindowConfig {
        initial: match r.u8() {
            0..=0x7F => keel_wire::DEFAULT_INITIAL_WINDOW,
            _ => r.uint(4) as u32,
        },
        max: match r.u8() {
            0..=0x7F => keel_wire::DEFAULT_MAX_WINDOW,
            _ => r.uint(4) as u32,
        },
    };
    let max = config.max.clamp(1, MAX_WINDOW_SIZE);
    let mut now = Instant::now();
    let mut rtt = Duration::ZERO;
    let mut consumer = RecvWindow::new(config, now);
    let first = consumer.window();
    assert!(first >= 1 && first <= max);
    let mut producer = SendWindow::new(first);
    let (mut granted, mut received, mut consumed) = (u64::from(first), 0u64, 0u64);
    // A producer whose consumer is the peer: it takes any increment.
    let mut exposed = SendWindow::new(keel_wire::DEFAULT_INITIAL_WINDOW);
    while !r.is_empty() {
        let window = consumer.window();
        match r.u8() % 6 {
            // The honest producer sends what its credit allows.
            0 => {
                let n = (r.uint(4) as usize).min(producer.available() as usize);
                producer.consume(n);
                assert_eq!(consumer.on_data(n), Ok(()));
                received += n as u64;
            }
            // The peer sends any amount.
            1 => {
                let n = r.uint(4) as usize;
                let left = granted - received;
                match consumer.on_data(n) {
                    Ok(()) => {
                        assert!(n as u64 <= left);
                        producer.consume(n);
                        received += n as u64;
                    }
                    Err(e) => assert_eq!(
                        e,
                        FlowError::WindowExceeded {
                            window: left,
                            received: n as u64
                        }
                    ),
                }
            }
            // The application consumes some of what is buffered.
            2 => {
                let n = (r.uint(4) as usize).min(consumer.buffered() as usize);
                consumed += n as u64;
                if let Some(increment) = consumer.on_consumed(n, now, rtt) {
                    assert!(increment > 0 && increment <= MAX_WINDOW_SIZE);
                    assert_eq!(producer.grant(increment), Ok(()));
                    granted += u64::from(increment);
                }
            }
            // The peer grants any increment.
            3 => {
                let increment = r.uint(4) as u32;
                let before = exposed.available();
                match exposed.grant(increment) {
                    Ok(()) => {
                        assert!(before + u64::from(increment) <= u64::from(MAX_WINDOW_SIZE));
                        assert_eq!(exposed.available(), before + u64::from(increment));
                    }
                    Err(e) => {
                        assert_eq!(e, FlowError::Overflow);
                        assert!(before + u64::from(increment) > u64::from(MAX_WINDOW_SIZE));
                        assert_eq!(exposed.available(), before);
                    }
                }
                let n = (r.uint(4) as usize).min(exposed.available() as usize);
                exposed.consume(n);
            }
            4 => now += Duration::from_micros(r.uint(3)),
            _ => rtt = Duration::from_micros(r.uint(3)),
        }
        assert_eq!(consumer.buffered(), received - consumed);
        assert_eq!(producer.available(), granted - received);
        assert!(granted - consumed <= u64::from(consumer.window()));
        assert!(consumer.window() >= window && consumer.window() <= max);
        assert!(exposed.available() <= u64::from(MAX_WINDOW_SIZE));
    }
}
