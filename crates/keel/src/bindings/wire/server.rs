//! The host side of a keel-wire connection: the handshake, then a reader that hands requests
//! to dispatch; replies are written by whichever thread produced them (see [`Sink`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use keel_wire::{Codec, Event, Frame, HelloReply, Limits, Reply, Side, WireError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::conn::WireEnd;
use super::sink::{SendError, Sink};
use crate::bindings::{HostConnRegistry, ServerSettings};
use crate::core::compress::Compression;
use crate::core::format::Format;
use crate::core::messages::framing::Framing;
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::dispatch::{
    dispatch, BlockingCalls, Dispatcher, HostAnswer, HostConn, HostConnInfo, Incoming,
    ReceiveBudget, ReplyTo, Reservation, Responder,
};
use crate::runtime::clock;
use crate::transport::{Io, IoReader};

/// The keel-wire responder: answers are Reply frames (then StreamData for a streamed reply).
#[derive(Debug)]
struct WireResponder {
    /// Replies are written by whichever thread produced them (see [`Sink`]).
    wire: Arc<WireEnd<()>>,
    /// Where streamed replies are pumped from (answers may come from pool threads).
    runtime: tokio::runtime::Handle,
    /// Largest reply body the client accepts (from its hello).
    peer_max_message: u32,
}

impl Responder for WireResponder {
    fn reply(&self, call_id: u64, answer: HostAnswer) {
        let HostAnswer {
            outcome,
            metadata,
            compression,
        } = answer;
        // Metadata the handler set is its own to get right; one that does not fit is dropped
        // rather than failing an answer that is otherwise fine.
        let metadata = metadata.to_wire().unwrap_or_default();
        let compression = compression.map_or(Compression::IDENTITY_ID, Compression::to_u8);
        let outcome = match outcome {
            Ok(Payload::Stream(stream)) => {
                // Register first, so the client's credit for it is routed from the start.
                let handle = self.wire.open_outbound(call_id);
                let head = Frame::Reply(Reply::stream_head(call_id, metadata));
                if self.wire.sink().send(&head).is_ok() {
                    self.runtime.spawn(self.wire.clone().pump(handle, stream));
                } else {
                    self.wire.stop_outbound(call_id);
                }
                return;
            }
            Ok(Payload::Body(body)) => Ok(body),
            Err(status) => Err(status),
        };
        let (status, body, details) = match outcome {
            Ok(body) if body.len() as u64 > u64::from(self.peer_max_message) => (
                keel_wire::StatusCode::TooLarge,
                Bytes::from(format!(
                    "reply body of {} bytes exceeds the client's limit of {} bytes",
                    body.len(),
                    self.peer_max_message
                )),
                Bytes::new(),
            ),
            Ok(body) => (keel_wire::StatusCode::Ok, body, Bytes::new()),
            Err(status) => {
                let code = status.code().to_wire();
                let (body, details, _) = status.into_wire_parts();
                (code, body, details)
            }
        };
        let compression = if status == keel_wire::StatusCode::Ok {
            compression
        } else {
            Compression::IDENTITY_ID
        };
        let reply = Frame::Reply(Reply {
            call_id,
            status,
            metadata,
            compression,
            details,
            body,
        });
        // In a run of short blocking calls, the run writes its replies together when it ends.
        let sent = if crate::dispatch::deferring() {
            self.wire.sink().enqueue(&reply)
        } else {
            self.wire.sink().send(&reply)
        };
        if let Err(SendError::Encode(keel_wire::WireError::TooLarge { .. })) = sent {
            // Body and details together exceed the client's limit: say so instead.
            let _ = self.wire.sink().send(&Frame::Reply(Reply {
                call_id,
                status: keel_wire::StatusCode::TooLarge,
                metadata: Bytes::new(),
                compression: 0,
                details: Bytes::new(),
                body: Bytes::from_static(b"the reply exceeds the client's message size limit"),
            }));
        }
    }

    fn go_away(&self, reason: &str) {
        self.wire.go_away(reason);
    }

    fn close(&self) {
        self.wire.sink().close();
    }
    fn flush(&self) {
        self.wire.sink().push();
    }
}

/// The most of an HTTP/2 client's first request body a keel-wire port takes in (and drops)
/// before it answers that request with its refusal.
const H2_REFUSED_BODY: u32 = 1 << 20;

/// How long a keel-wire port waits for more of an HTTP/2 client's first request, once its
/// HEADERS are in, before answering it anyway (a client streaming its body).
const H2_REFUSED_QUIET: Duration = Duration::from_millis(250);

/// Reads an HTTP/2 client's first request at a keel-wire port (its preface is in `buf`), so
/// that the refusal answers it: `None` if its HEADERS never arrived (the connection is then
/// closed without a word), else whether the request ended. The request is read to its end if
/// it ends within [`H2_REFUSED_BODY`] bytes (the body dropped as it comes; the client is given
/// the window for it), with pauses shorter than [`H2_REFUSED_QUIET`], all within the handshake
/// timeout: an answer before a request's end makes some clients (curl 7.88, hyper's h2) drop it.
async fn h2_first_request(
    io: &mut Box<dyn Io>,
    buf: &mut BytesMut,
    settings: &ServerSettings,
) -> Option<bool> {
    use crate::transport::sniff::{h2_open_window, H2FirstRequest};
    let mut scan = H2FirstRequest::default();
    let read = async {
        let mut window_opened = false;
        loop {
            let state = scan.take(buf);
            match state {
                Some(true) => return,
                Some(false) if !window_opened => {
                    window_opened = true;
                    if io
                        .write_all(&h2_open_window(H2_REFUSED_BODY))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                _ => {}
            }
            if scan.taken() >= H2_REFUSED_BODY as usize + 64 * 1024 {
                return;
            }
            let read = io.read_buf(buf);
            let read = match state {
                Some(_) => match tokio::time::timeout(H2_REFUSED_QUIET, read).await {
                    Ok(read) => read,
                    Err(_) => return,
                },
                None => read.await,
            };
            if !matches!(read, Ok(n) if n > 0) {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(settings.handshake_timeout, read).await;
    scan.state()
}

/// Serves one accepted keel-wire connection until it closes.
pub(crate) async fn serve(
    io: Box<dyn Io>,
    dispatcher: Arc<Dispatcher>,
    registry: &dyn HostConnRegistry,
    settings: Arc<ServerSettings>,
    info: HostConnInfo,
) {
    let mut io = io;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let handshake = tokio::time::timeout(settings.handshake_timeout, async {
        loop {
            match keel_wire::decode_hello(&mut buf) {
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
            match io.read_buf(&mut buf).await {
                Ok(0) => return Err("closed during the handshake".to_string()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    })
    .await;
    let hello = match handshake {
        Ok(Ok(h)) => h,
        // An HTTP client at a keel-wire port: told so in HTTP, which it reads.
        Ok(Err(_)) if crate::transport::sniff::http_request(&buf) => {
            let text = "this port speaks keel-wire, not HTTP. Connect with a tcp:// URL (tcps:// \
                        if it serves TLS), or send HTTP to the port where the host serves \
                        http://";
            use crate::transport::sniff::{http_refusal, is_h2_preface};
            let h2 = if is_h2_preface(&buf) {
                match h2_first_request(&mut io, &mut buf, &settings).await {
                    Some(ended) => Some(ended),
                    None => return,
                }
            } else {
                None
            };
            let _ = io.write_all(&http_refusal(h2, text)).await;
            let _ = io.shutdown().await;
            // Read what the client sends on (up to a bound, within the handshake time): a
            // close with bytes unread would reset the connection, and the reset could overtake
            // the answer.
            let drain = async {
                let mut left = 64 * 1024usize;
                while left > 0 {
                    buf.clear();
                    match io.read_buf(&mut buf).await {
                        Ok(n) if n > 0 => left = left.saturating_sub(n),
                        _ => break,
                    }
                }
            };
            let _ = tokio::time::timeout(settings.handshake_timeout, drain).await;
            return;
        }
        // Not a keel client: close without a word (we cannot frame one).
        Ok(Err(_)) => return,
        // Too slow: the same, counted.
        Err(_) => return dispatcher.timed_out(info.binding),
    };
    let mut out = BytesMut::new();
    // Versions are negotiated: the host speaks every version from its oldest (1 with the
    // feature `wire-v1`, else 2) up to its own and takes the client's when it is older.
    if hello.version < OLDEST_VERSION {
        let reason = if hello.version == 0 {
            format!(
                "protocol version 0 does not exist; this host speaks {OLDEST_VERSION} to {}",
                keel_wire::VERSION
            )
        } else {
            format!(
                "this host speaks protocol versions {OLDEST_VERSION} to {}, not {}: version 1 \
                 (postcard bodies, keel's clients before MessagePack) needs keel's feature \
                 `wire-v1` on the host; or update the client",
                keel_wire::VERSION,
                hello.version
            )
        };
        let reject = HelloReply::Reject {
            supported_version: keel_wire::VERSION,
            reason,
        };
        keel_wire::encode_hello_reply(&reject, &mut out);
        let _ = io.write_all(&out).await;
        let _ = io.shutdown().await;
        return;
    }
    let version = hello.version.min(keel_wire::VERSION);
    let accept = HelloReply::Accept {
        version,
        max_message_size: settings.max_message_size,
    };
    keel_wire::encode_hello_reply(&accept, &mut out);
    // Over TLS, written bytes may wait in the TLS layer until flushed.
    if io.write_all(&out).await.is_err() || io.flush().await.is_err() {
        return;
    }

    let (rd, wr) = io.split();
    let mut out_codec = Codec::new(Limits::with_max_message_size(hello.max_message_size));
    out_codec.set_version(version);
    let (sink, flusher) = Sink::new(wr, out_codec);
    let wire = WireEnd::new(
        Side::Host,
        sink,
        settings.max_stream_window,
        hello.max_message_size,
    );
    if let Some(keepalive) = settings.keepalive {
        wire.set_keepalive(keepalive);
    }
    wire.set_ping_policy(settings.ping_policy);
    let out = WireResponder {
        wire: wire.clone(),
        runtime: tokio::runtime::Handle::current(),
        peer_max_message: hello.max_message_size,
    };
    let max_calls = settings.max_calls_per_connection;
    let conn = Arc::new(HostConn::new(
        Box::new(out),
        info,
        max_calls,
        dispatcher.clone(),
    ));
    registry.register(conn.clone());
    if dispatcher.is_shutting_down() {
        conn.go_away("host shutting down");
    }
    let mut writer = tokio::spawn(flusher);
    let mut codec = Codec::new(Limits::with_max_message_size(settings.max_message_size));
    codec.set_version(version);
    codec.set_known_names(dispatcher.known_names.clone());
    let budget = ReceiveBudget::new(
        settings.max_receive_bytes_per_connection,
        &dispatcher.receive_budget,
    );
    let reader = tokio::spawn(read_loop(
        rd,
        buf,
        codec,
        conn.clone(),
        wire.clone(),
        ReadLimits {
            max_streams: settings.max_streams_per_connection,
            frame_timeout: settings.frame_timeout,
            max_unsent_bytes: settings.max_unsent_bytes,
            budget,
        },
    ));
    // The reader ends on EOF, error or a timeout; the writer when it closed the connection on
    // purpose.
    let reader_abort = reader.abort_handle();
    let binding = conn.info.binding;
    let writer_done = tokio::select! {
        _ = reader => false,
        _ = &mut writer => { reader_abort.abort(); true }
        // A client that answers nothing after a keepalive ping is gone: its calls stop.
        Some(dead) = wire.clone().run_timers(|_| {}, || {}) => {
            log::debug!("closing a connection: {dead}");
            reader_abort.abort();
            dispatcher.timed_out(binding);
            false
        }
    };
    // The peer is gone: nobody can receive answers, so stop what still runs for it. This also
    // closes the sink: the writer writes what is queued, then shuts the socket down.
    wire.close("connection closed");
    let gone = Status::new(StatusCode::Cancelled, "connection closed");
    conn.abandon_all(&gone);
    registry.unregister(conn.id);
    // A peer that reads nothing would keep the writer (and with it the socket) forever: what
    // is queued gets the frame timeout to drain, unless the peer already left it unread that
    // long (the reader gave up on it): then the socket goes now.
    if !writer_done {
        let stalled = wire.sink().unsent() > settings.max_unsent_bytes;
        if stalled
            || tokio::time::timeout(settings.frame_timeout, &mut writer)
                .await
                .is_err()
        {
            writer.abort();
        }
    }
}

/// The oldest protocol version this host accepts: 1 (postcard bodies) only with `wire-v1`.
const OLDEST_VERSION: u16 = if cfg!(feature = "wire-v1") { 1 } else { 2 };

/// How bodies are encoded on a connection of protocol `version`.
fn wire_format(version: u16) -> Format {
    if version >= 2 {
        Format::MsgPack
    } else {
        Format::Postcard
    }
}

/// What bounds a connection's reader: time to finish a frame, unsent output, memory.
struct ReadLimits {
    /// Streamed uploads open at once.
    max_streams: usize,
    frame_timeout: Duration,
    max_unsent_bytes: usize,
    budget: ReceiveBudget,
}

/// Frames up to this size are not counted against the receive budget (they fit the reader's
/// first buffer); larger ones are, from when their length is known until they are whole.
const UNCOUNTED_FRAME: usize = 64 * 1024;

async fn read_loop(
    mut rd: IoReader,
    mut buf: BytesMut,
    mut codec: Codec,
    conn: Arc<HostConn>,
    wire: Arc<WireEnd<()>>,
    limits: ReadLimits,
) {
    // The frame being received: by when it must be whole, and the memory reserved for it.
    let mut frame_deadline: Option<tokio::time::Instant> = None;
    let mut reserved: Option<(usize, Reservation)> = None;
    let mut reader = HostReader {
        // The connection's blocking calls go to the pool through it; however the loop ends,
        // those it held are handed over (they are answered).
        blocking: BlockingCalls::new(conn.clone()),
        conn,
        wire,
        clock: ReadClock::now(),
        limits,
        version: codec.version(),
        batch: false,
    };
    loop {
        // A large frame's memory is reserved from the budgets before the codec makes room for
        // it (decoding a partial frame allocates its whole size) and before the rest is read.
        if let Some(size) = codec.pending_frame_size(&buf) {
            if size > UNCOUNTED_FRAME
                && buf.len() < size
                && reserved.as_ref().is_none_or(|(s, _)| *s != size)
            {
                let deadline = *frame_deadline.get_or_insert_with(|| {
                    tokio::time::Instant::now() + reader.limits.frame_timeout
                });
                reader.end_batch();
                match reader.limits.budget.reserve(size, deadline).await {
                    Some(r) => reserved = Some((size, r)),
                    None => return reader.timed_out("no room to receive this frame in time"),
                }
            }
        }
        // Requests, most of what a host reads, are decoded in place: their body is only read
        // (the arguments are decoded from it), so nothing is split off the buffer.
        if let Some((req, len)) = codec.decode_request_in_place(&buf) {
            (frame_deadline, reserved) = (None, None);
            let handled = reader.on_request(&req);
            if len == buf.len() {
                // Emptied (one call in flight, or a batch's last): the buffer keeps its start
                // and all of its room, where advancing would leave less room to read into.
                buf.clear();
            } else {
                buf.advance(len);
            }
            match handled {
                Ok(()) => continue,
                Err(e) => return reader.fail(&e),
            }
        }
        // Nothing to decode in an empty buffer (after a batch's last frame): `decode` would say
        // as much.
        let decoded = if buf.is_empty() {
            Ok(None)
        } else {
            codec.decode(&mut buf)
        };
        match decoded {
            Ok(Some(frame)) => {
                (frame_deadline, reserved) = (None, None);
                let handled = match frame {
                    // One `decode_request_in_place` left to `decode` (after a skipped frame).
                    Frame::Request(req) => reader.on_request(&req),
                    frame => match reader.wire.handle(frame, reader.clock.read_at) {
                        // Its streams are stopped already; the call itself is dispatch's.
                        Ok(Some(Event::Cancel { call_id })) => {
                            reader.conn.cancel(call_id);
                            Ok(())
                        }
                        // The client sent more than its credit on a request stream: the call
                        // ends `bad_request` (PROTOCOL.md, "Flow control"), stopped as for a
                        // Cancel and answered, or, answered already, its response stream ended
                        // with that status. Its handler need not read the stream to find out.
                        Ok(Some(Event::StreamFailed { call_id, error })) => {
                            let why = error.to_string();
                            let status = Status::new(StatusCode::BadRequest, why.clone());
                            if !reader.conn.fail(call_id, status) {
                                let bad = keel_wire::StatusCode::BadRequest;
                                reader.wire.end_outbound(call_id, bad, Bytes::from(why));
                            }
                            Ok(())
                        }
                        Ok(_) => Ok(()),
                        Err(e) => Err(e),
                    },
                };
                if let Err(e) = handled {
                    return reader.fail(&e);
                }
                continue;
            }
            Ok(None) => {}
            Err(WireError::TooLarge {
                call_id,
                size,
                limit,
            }) => {
                // The codec skips the oversized frame; the connection stays usable.
                reserved = None;
                if let Some(call_id) = call_id {
                    let msg = format!(
                        "request of {size} bytes exceeds this host's limit of {limit} bytes"
                    );
                    reader
                        .conn
                        .reply(call_id, Err(Status::new(StatusCode::TooLarge, msg)));
                }
                continue;
            }
            Err(e) => {
                reader.conn.go_away(&format!("protocol error: {e}"));
                reader.conn.close();
                return;
            }
        }
        reader.end_batch();
        // Backpressure: while the peer leaves too much of our output unread (replies, pongs),
        // read nothing more from it; if it does not read within the frame timeout, close.
        let limits = &reader.limits;
        if reader.wire.sink().unsent() > limits.max_unsent_bytes {
            let wait = reader.wire.sink().wait_below(limits.max_unsent_bytes);
            if tokio::time::timeout(limits.frame_timeout, wait)
                .await
                .is_err()
            {
                return reader.timed_out("the client did not read its replies in time");
            }
        }
        let read = if codec.in_frame(&buf) {
            let deadline = *frame_deadline
                .get_or_insert_with(|| tokio::time::Instant::now() + reader.limits.frame_timeout);
            match tokio::time::timeout_at(deadline, rd.read_buf(&mut buf)).await {
                Ok(read) => read,
                Err(_) => return reader.timed_out("a frame was not completed in time"),
            }
        } else {
            rd.read_buf(&mut buf).await
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => reader.clock = ReadClock::now(),
        }
        // Released above (`end_batch`), before the reader waits again.
        if holds_a_batch(&codec, &buf) {
            reader.start_batch();
        }
    }
}

/// What a host connection's read loop hands each Request to: the connection, its keel-wire
/// end, the read's clock, the blocking calls it holds for a batch, its limits.
struct HostReader {
    conn: Arc<HostConn>,
    wire: Arc<WireEnd<()>>,
    clock: ReadClock,
    blocking: BlockingCalls,
    limits: ReadLimits,
    /// The protocol version agreed in the handshake (how bodies are encoded).
    version: u16,
    /// Whether the bytes being decoded came as a batch (see `holds_a_batch`): replies are then
    /// corked and blocking calls held until the batch is handled.
    batch: bool,
}

impl HostReader {
    /// A frame this side must never receive: the peer is told why, and the connection ends.
    fn fail(&self, e: &keel_wire::ConnError) {
        self.conn.go_away(&e.to_string());
        self.conn.close();
    }

    /// The peer took too long (`why`): the connection is closed, and counted.
    fn timed_out(&self, why: &str) {
        self.conn.dispatcher.timed_out(self.conn.info.binding);
        self.conn.shut(why);
    }

    /// A Request read at `clock.read_at`, decoded in place or not: the core keeps its books, and
    /// it is dispatched, or refused (after a GoAway, past the streams limit, with an unknown
    /// compression). `Err` when the connection must fail (see `WireEnd::handle_request`).
    fn on_request<B: AsRef<[u8]>>(
        &mut self,
        req: &keel_wire::Request<B>,
    ) -> Result<(), keel_wire::ConnError> {
        let HostReader {
            conn,
            wire,
            clock,
            blocking,
            limits,
            version,
            ..
        } = self;
        let admit = || conn.dispatcher.arrival();
        let arrival = match wire.handle_request(req, clock.read_at, admit)? {
            Some(Some(arrival)) => arrival,
            Some(None) => {
                // It arrived after this connection's GoAway, whose `last_call_id` is below its id:
                // it is not processed, and the client sends it again on another connection.
                conn.info.calls.fetch_add(1, Ordering::Relaxed);
                if req.flags.streamed {
                    wire.refuse_inbound(req.call_id);
                }
                let msg = "the host is going away: the call arrived after its GoAway";
                conn.reply(req.call_id, Err(Status::new(StatusCode::ShuttingDown, msg)));
                return Ok(());
            }
            // The connection is closed: nothing more is processed.
            None => return Ok(()),
        };
        if req.flags.streamed && wire.inbound_streams() >= limits.max_streams {
            // Each open stream may hold its window of bytes: their number is bounded.
            wire.refuse_inbound(req.call_id);
            let msg = format!(
                "this connection already has {} streamed uploads open",
                limits.max_streams
            );
            conn.reply(req.call_id, Err(Status::new(StatusCode::Busy, msg)));
            return Ok(());
        }
        let compression = match Compression::from_wire_id(req.compression) {
            Ok(c) => c,
            Err(id) => {
                let msg = format!("unknown compression id {id}");
                if req.flags.streamed {
                    wire.refuse_inbound(req.call_id);
                }
                conn.reply(req.call_id, Err(Status::new(StatusCode::BadRequest, msg)));
                return Ok(());
            }
        };
        let stream = if req.flags.streamed {
            // Before the next frame is read: its data follows this request.
            wire.inbound_stream(req.call_id)
        } else {
            ByteStream::empty()
        };
        let incoming = Incoming {
            call_id: req.call_id,
            one_way: req.flags.one_way,
            deadline: (req.deadline_us > 0).then(|| Duration::from_micros(req.deadline_us)),
            service: &req.service,
            operation: &req.operation,
            // Copied: the call's context may outlive the read buffer the block is in.
            metadata: Metadata::from_wire_block(req.metadata.as_ref()),
            compression,
            reply_codec: req.flags.accepts_compressed.then_some(Compression::Zstd),
            format: wire_format(*version),
            reply_framing: Framing::for_format(wire_format(*version)),
            request_framing: None,
            session: None,
            body: req.body.as_ref(),
            stream,
            arrival,
            reply_to: ReplyTo::Connection,
        };
        // Arrived when it was read: one clock read per read, not per call.
        dispatch(
            conn,
            incoming,
            clock.read_at,
            &mut clock.latest,
            Some(blocking),
        );
        Ok(())
    }

    /// What the reader does after reading a batch: replies wait for the rest of the batch
    /// (`Sink::cork`), and its blocking calls are handed to the pool together
    /// (`Scheduler::hold`).
    fn start_batch(&mut self) {
        self.wire.sink().cork();
        self.blocking.hold();
        self.batch = true;
    }

    /// What the reader does before it waits for anything, if it started a batch: what the batch
    /// produced leaves in one write, and then the batch's blocking calls go to the pool together.
    ///
    /// In that order: the thread a hand-off wakes often runs at once on the reader's core,
    /// preempting it. Still corked, the sink would hold that thread's replies until the reader ran
    /// again to uncork it; uncorked, the thread writes them as soon as its calls have run.
    fn end_batch(&mut self) {
        if std::mem::take(&mut self.batch) {
            self.wire.sink().uncork();
            self.blocking.release();
        }
    }
}

/// When the bytes being decoded were read (what the core takes as the frames' arrival), and the
/// reader's latest clock reading: that, or the end of a call that completed since (see
/// `dispatch`).
struct ReadClock {
    read_at: Instant,
    latest: Instant,
}

impl ReadClock {
    /// Bytes were just read.
    fn now() -> ReadClock {
        let now = clock::now();
        ReadClock {
            read_at: now,
            latest: now,
        }
    }
}

/// Whether `buf` holds more than the frame at its front, whole or not: then what was read is
/// a batch. A lone frame (one call in flight) needs no corking: its reply is written as it is
/// sent, in one write all the same, and that saves the sink's and the held calls' locks
/// twice per read.
fn holds_a_batch(codec: &Codec, buf: &BytesMut) -> bool {
    codec
        .pending_frame_size(buf)
        .is_some_and(|size| buf.len() > size)
}
