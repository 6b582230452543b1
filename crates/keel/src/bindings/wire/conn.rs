//! One keel-wire connection's state, the same on both ends: keel-wire's sans-IO core
//! ([`keel_wire::Connection`]: call table, stream windows, ping/RTT, GoAway, which frames each
//! side may receive) and, beside it under the same lock, the async ends of its streams (the
//! channel an inbound stream's consumer reads, the wake-ups an outbound stream's pump waits
//! for). Frames the core asks for are written before the lock is released, so they keep their
//! order with the frames that caused them.
//!
//! A stream's window bounds what it can have in flight or buffered, so memory stays bounded
//! whatever the stream's size. A consumer that stops early sends StopSending; the producer
//! stops and the connection carries on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_wire::{
    CallRejected, Closed, ConnError, Connection, Event, Frame, Keepalive, PingPolicy, Side,
    StreamData, WindowConfig, DEFAULT_INITIAL_WINDOW,
};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{mpsc, Notify};

use super::sink::{SendError, Sink};
use crate::core::error::{Error, Kind};
use crate::core::status::StatusCode;
use crate::core::stream::{ByteStream, Credit};
use crate::runtime::clock;

/// Why [`WireEnd::send_call`] sent nothing.
#[derive(Debug)]
pub(crate) enum NotSent {
    /// The core refused the call: the connection is closed, or the host said GoAway.
    Rejected(CallRejected),
    /// The Request could not be queued.
    Sink(SendError),
}

/// What a client keeps for each pending call: the connection's timer reads its deadline (see
/// [`WireEnd::run_timers`]). A host keeps nothing (`()`).
pub(crate) trait Expiring {
    /// When the call stops waiting for its reply; `None`: never.
    fn deadline(&self) -> Option<Instant>;
}

impl Expiring for () {
    fn deadline(&self) -> Option<Instant> {
        None
    }
}

/// Who waits on a client connection's socket for its next bytes. Kept here, with the call
/// table; when it changes hands is decided by the client's [`read`](super::read) module
/// (through [`WireEnd::with_reader`]), except that a call starting makes the task read
/// ([`WireEnd::send_call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    /// The connection's reader task (always on a host).
    Task,
    /// The call with this id, alone in flight, reads for itself.
    Call(u64),
}

/// A call [`WireEnd::send_call`] sent.
#[derive(Debug)]
pub(crate) struct Sent {
    pub(crate) call_id: u64,
    /// The handle of its upload's registered outbound stream (for the pump).
    pub(crate) upload: Option<OutboundHandle>,
    /// Another call was reading the socket: from now on the task reads, and the caller must
    /// hand the socket to it.
    pub(crate) socket_to_task: bool,
}

/// A client connection's timer first looks this long after the connection opened, whether
/// or not a call asked it to. A first call needs no look sooner for keepalive: with calls
/// waiting, a ping is due [`keel_wire::BUSY_QUIET_MIN`] (or two round trips) after the last
/// frame received, never before the connection opened; and its own deadline is usually later
/// still (one that is not wakes the timer). So it wakes no timer task, and the connection's first
/// call costs what its later ones do.
const FIRST_LOOK: Duration = keel_wire::BUSY_QUIET_MIN;

/// Largest StreamData payload keel sends (further limited by the peer's message size).
const MAX_CHUNK: usize = 64 * 1024;

/// A pump sends its next chunk only when at most this much is queued for the socket: the
/// window bounds what the receiver holds, this bounds what the sender holds.
const SEND_QUEUE_LIMIT: usize = 256 * 1024;

/// One end of a keel-wire connection, client or host: keel-wire's sans-IO core
/// ([`keel_wire::Connection`]) under a lock, the write path, the async ends of its streams and
/// its timer. `C` is what a client's pending call carries (the slot its reply goes to); a host
/// uses `()`.
#[derive(Debug)]
pub(crate) struct WireEnd<C> {
    state: Mutex<State<C>>,
    sink: Arc<Sink>,
    /// Largest StreamData payload we may send (the peer's message limit, capped).
    max_chunk: AtomicUsize,
    /// New calls may start here: not closed, and (client) no GoAway received. Mirrors the
    /// core's state so the call path can ask without the lock.
    accepting: AtomicBool,
    /// Wakes the timer ([`WireEnd::run_timers`]) when its deadline moved earlier (a call with
    /// an earlier deadline, a call's probe ping) or the connection closed.
    timer: Notify,
    /// The sink's [`queued_bytes`](Sink::queued_bytes) once the last keepalive ping was queued:
    /// it has left when the sink's `written_bytes` reach this.
    ping_mark: AtomicU64,
    /// Inbound streams whose consumer still holds them (see [`WireEnd::inbound_streams`]).
    held_inbound: AtomicUsize,
    /// Client: the core's pending calls as of the last change under the lock, for a look
    /// without it (see [`WireEnd::calls_waiting`]).
    waiting: AtomicUsize,
}

#[derive(Debug)]
struct State<C> {
    core: Connection<C>,
    /// Where each inbound stream's data goes.
    inbound: HashMap<u64, mpsc::UnboundedSender<Result<Bytes, Error>>>,
    /// What each outbound stream's pump waits on.
    outbound: HashMap<u64, Arc<Outbound>>,
    /// Client: when the timer looks for calls past their deadline next. Never later than a
    /// pending call's deadline, and only moved earlier as calls start: calls that start one
    /// after another with the same budget (most do) set no timer of their own. It may be
    /// earlier than every deadline left (the call it was set for ended): firing then only
    /// finds the next one. A new connection's first look is [`FIRST_LOOK`] after it opened.
    call_timer: Option<Instant>,
    /// Client: when the timer task wakes next of itself (`None`: only when told), as it last
    /// decided under this lock. A call that needs it sooner (an earlier deadline, the first
    /// call waiting on a quiet connection, whose keepalive deadline is then a quarter second
    /// away) wakes it; no other call does.
    timer_wakes_at: Option<Instant>,
    /// Client: who reads the socket. Kept here, with the call table, so that "the only call in
    /// flight" is decided under the lock that starts calls.
    reader: Reader,
}

/// An outbound stream's wake-ups.
#[derive(Debug, Default)]
struct Outbound {
    /// Woken (one permit) when credit arrives or the stream is stopped.
    credit: Notify,
    /// Woken (all waiters) when the stream is stopped.
    stop: Notify,
    stopped: AtomicBool,
}

impl Outbound {
    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.stop.notify_waiters();
        self.credit.notify_one();
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Waits until the stream is stopped.
    async fn stopped(&self) {
        // A `Notified` sees `notify_waiters` from its creation on, so check after creating it.
        let notified = self.stop.notified();
        if self.is_stopped() {
            return;
        }
        notified.await;
    }
}

/// An outbound stream registered with the connection, for [`WireEnd::pump`].
#[derive(Debug)]
pub(crate) struct OutboundHandle {
    call_id: u64,
    out: Arc<Outbound>,
}

fn lost(reason: &str) -> Error {
    Error::new(Kind::Connection, format!("stream interrupted: {reason}"))
}

impl<C> State<C> {
    fn register_outbound(&mut self, call_id: u64) -> OutboundHandle {
        let out = Arc::new(Outbound::default());
        if self.core.is_closed() {
            out.stop();
        }
        self.outbound.insert(call_id, out.clone());
        OutboundHandle { call_id, out }
    }

    /// Client: one Reply read at `now` (see [`WireEnd::handle_reply`]). A failed call's
    /// upload stops here.
    #[inline(always)]
    fn reply(
        &mut self,
        reply: &keel_wire::Reply,
        now: Instant,
    ) -> Result<Option<(C, bool)>, ConnError> {
        let answered = self.core.handle_reply(reply, now)?;
        if answered.is_some() && reply.status != keel_wire::StatusCode::Ok {
            self.stop_outbound_handle(reply.call_id);
        }
        Ok(answered)
    }

    fn stop_outbound_handle(&mut self, call_id: u64) {
        if let Some(out) = self.outbound.remove(&call_id) {
            out.stop();
        }
    }

    fn fail_inbound(&mut self, call_id: u64, error: Error) {
        if let Some(tx) = self.inbound.remove(&call_id) {
            let _ = tx.send(Err(error));
        }
    }
}

impl<C: Expiring + Send + 'static> WireEnd<C> {
    /// The state of a connection whose handshake just completed on `side`. `max_window` bounds
    /// the windows of streams we receive; `peer_max_message` the chunks we send.
    pub(crate) fn new(
        side: Side,
        sink: Arc<Sink>,
        max_window: u32,
        peer_max_message: u32,
    ) -> Arc<WireEnd<C>> {
        let window = WindowConfig {
            initial: DEFAULT_INITIAL_WINDOW,
            max: max_window.max(DEFAULT_INITIAL_WINDOW),
        };
        let first_look = (side == Side::Client).then(|| clock::now() + FIRST_LOOK);
        Arc::new(WireEnd {
            state: Mutex::new(State {
                core: Connection::new(side, window),
                inbound: HashMap::new(),
                outbound: HashMap::new(),
                call_timer: first_look,
                timer_wakes_at: first_look,
                reader: Reader::Task,
            }),
            sink,
            max_chunk: AtomicUsize::new(MAX_CHUNK.min(peer_max_message.max(1) as usize)),
            accepting: AtomicBool::new(true),
            timer: Notify::new(),
            ping_mark: AtomicU64::new(0),
            held_inbound: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
        })
    }

    /// The write side.
    pub(crate) fn sink(&self) -> &Arc<Sink> {
        &self.sink
    }

    /// The peer's message limit is now known (a client learns it from the HelloReply).
    pub(crate) fn set_peer_max_message(&self, bytes: u32) {
        self.max_chunk
            .store(MAX_CHUNK.min(bytes.max(1) as usize), Ordering::Relaxed);
        self.sink.set_max_message_size(bytes);
    }

    /// Runs `f` on the state under the lock and queues the frames the core asked for (in
    /// order with anything `f` queued); writes them once the lock is released, so no socket
    /// write happens under it.
    fn with<R>(&self, f: impl FnOnce(&mut State<C>) -> R) -> R {
        let (r, queued) = {
            let mut st = self.lock();
            let r = f(&mut st);
            // Every change to the call table goes through here (or `close`, which empties it).
            self.waiting
                .store(st.core.pending_calls(), Ordering::Relaxed);
            let mut queued = false;
            while let Some(frame) = st.core.poll_transmit() {
                // A closed sink means the connection is going: nothing left to tell the peer.
                let _ = self.sink.enqueue(&frame);
                queued = true;
            }
            (r, queued)
        };
        // Most calls queue nothing here (a call's own Request or Reply is sent by its caller).
        if queued {
            self.sink.push();
        }
        r
    }

    fn lock(&self) -> MutexGuard<'_, State<C>> {
        self.state.lock()
    }

    /// Host: a Request read at `now`, by reference (see keel-wire's `handle_request`): `None`
    /// if the connection is closed (drop it); else `admit()`'s value if it arrived before this
    /// connection's GoAway, taken under the connection's lock (a GoAway sent at the same time
    /// is ordered after it, so its `last_call_id` covers exactly the requests admitted), or
    /// `None` if it arrived after: the host must not process it (the client sends it again on
    /// another connection).
    pub(crate) fn handle_request<A, B>(
        &self,
        request: &keel_wire::Request<B>,
        now: Instant,
        admit: impl FnOnce() -> A,
    ) -> Result<Option<Option<A>>, ConnError> {
        self.with(|st| {
            if !st.core.handle_request(request, now)? {
                return Ok(None);
            }
            Ok(Some((!st.core.is_going_away()).then(admit)))
        })
    }

    /// Client: a Reply read at `now`, by reference (see keel-wire's `handle_reply`): the slot
    /// of the call it answers and whether a response stream follows, `None` if no call waits
    /// for it. A failed call's upload stops here (the core forgot its window).
    pub(crate) fn handle_reply(
        &self,
        reply: &keel_wire::Reply,
        now: Instant,
    ) -> Result<Option<(C, bool)>, ConnError> {
        self.with(|st| st.reply(reply, now))
    }

    /// Client: [`handle_reply`](WireEnd::handle_reply) for each of a run of Replies read at
    /// `now`, under one lock; the calls they answer go to `answered` with their replies. Stops
    /// at the first error (the rest of the run is dropped: the connection ends).
    pub(crate) fn handle_replies(
        &self,
        replies: impl Iterator<Item = keel_wire::Reply>,
        now: Instant,
        answered: &mut Vec<(keel_wire::Reply, C, bool)>,
    ) -> Result<(), ConnError> {
        self.with(|st| {
            for reply in replies {
                if let Some((slot, download)) = st.reply(&reply, now)? {
                    answered.push((reply, slot, download));
                }
            }
            Ok(())
        })
    }

    /// Feeds one frame from the peer, read at `now`, other than the two every call brings:
    /// a host's Requests go to [`handle_request`](WireEnd::handle_request) (which admits
    /// them), a client's Replies to [`handle_reply`](WireEnd::handle_reply). (A Request sent
    /// to a client or a Reply sent to a host comes here, and is the error the core makes of
    /// it.) Stream frames are handled here (data delivered to its consumer, credit to its
    /// pump); what is left for the caller comes back: a host's Cancel, a client's GoAway.
    /// Stream cleanup for a Cancel is done already; a request stream that broke flow control
    /// (`StreamFailed`) has failed its consumer and told the producer to stop, and comes back
    /// so that a host ends its call.
    pub(crate) fn handle(&self, frame: Frame, now: Instant) -> Result<Option<Event<C>>, ConnError> {
        self.with(|st| {
            let Some(event) = st.core.handle(frame, now)? else {
                return Ok(None);
            };
            match event {
                Event::StreamData { call_id, data } => {
                    if let Some(tx) = st.inbound.get(&call_id) {
                        // A closed receiver means the consumer is gone; its drop already told
                        // the producer to stop.
                        let _ = tx.send(Ok(data));
                    }
                }
                Event::StreamEnd {
                    call_id,
                    status,
                    message,
                } => {
                    // Dropping the sender ends the consumer's stream after what it buffered.
                    if let Some(tx) = st.inbound.remove(&call_id) {
                        if status != keel_wire::StatusCode::Ok {
                            let msg = String::from_utf8_lossy(&message);
                            let _ = tx.send(Err(Error::new(
                                Kind::Status(StatusCode::from_wire(status)),
                                format!("the sender aborted the stream: {msg}"),
                            )));
                        }
                    }
                }
                Event::StreamFailed { call_id, error } => {
                    let msg = format!("the peer broke flow control: {error}");
                    st.fail_inbound(
                        call_id,
                        Error::new(Kind::Status(StatusCode::BadRequest), msg),
                    );
                    // A host also ends the call (see `server.rs`).
                    return Ok(Some(Event::StreamFailed { call_id, error }));
                }
                Event::Credit { call_id } => {
                    if let Some(out) = st.outbound.get(&call_id) {
                        out.credit.notify_one();
                    }
                }
                Event::OutboundStopped { call_id, .. } => st.stop_outbound_handle(call_id),
                Event::Cancel { call_id } => {
                    st.stop_outbound_handle(call_id);
                    let cancelled =
                        Error::new(Kind::Status(StatusCode::Cancelled), "call cancelled");
                    st.fail_inbound(call_id, cancelled);
                    return Ok(Some(Event::Cancel { call_id }));
                }
                Event::GoAway(_) => {
                    self.accepting.store(false, Ordering::Release);
                    return Ok(Some(event));
                }
                other => return Ok(Some(other)),
            }
            Ok(None)
        })
    }

    /// The consumer's end of inbound stream `call_id`, whose window the core opened (for a
    /// streamed Request or a download's Ok Reply). Call it before handling the next frame.
    /// Dropping the stream before its end sends StopSending.
    pub(crate) fn inbound_stream(self: &Arc<Self>, call_id: u64) -> ByteStream {
        let (tx, rx) = mpsc::unbounded_channel();
        self.with(|st| {
            if st.core.is_closed() {
                let _ = tx.send(Err(lost("connection closed")));
            } else {
                st.inbound.insert(call_id, tx);
            }
        });
        // Released when the consumer drops the stream (`InboundCredit`'s drop).
        self.held_inbound.fetch_add(1, Ordering::AcqRel);
        let weak: Weak<WireEnd<C>> = Arc::downgrade(self);
        let credit: Arc<dyn Credit> = Arc::new(InboundCredit {
            conn: weak,
            call_id,
        });
        ByteStream::remote(rx, credit)
    }

    /// Inbound streams whose consumer still holds them: open, or ended by their producer with
    /// bytes the consumer may not have read yet. Each may hold up to its window of bytes, so
    /// a stream counts until its consumer drops it, not until its producer ends it.
    pub(crate) fn inbound_streams(&self) -> usize {
        self.held_inbound.load(Ordering::Acquire)
    }

    /// Refuses inbound stream `call_id`, whose window the core opened for a streamed Request:
    /// the producer is told to stop (StopSending).
    pub(crate) fn refuse_inbound(&self, call_id: u64) {
        self.with(|st| {
            st.inbound.remove(&call_id);
            st.core.abandon_inbound(call_id);
        });
    }

    /// The consumer of an inbound stream took `n` bytes.
    fn consumed(&self, call_id: u64, n: usize) {
        let now = clock::now();
        self.with(|st| st.core.consumed(call_id, n, now));
    }

    /// The consumer of an inbound stream dropped it before its end: tell the producer to stop.
    fn abandoned(&self, call_id: u64) {
        self.with(|st| {
            st.inbound.remove(&call_id);
            st.core.abandon_inbound(call_id);
        });
    }

    /// Host: registers the outbound stream of a streamed reply (before its Ok Reply is sent).
    pub(crate) fn open_outbound(&self, call_id: u64) -> OutboundHandle {
        self.with(|st| {
            st.core.open_outbound(call_id);
            st.register_outbound(call_id)
        })
    }

    /// Stop producing for `call_id` (the call was cancelled or refused), without a StreamEnd.
    pub(crate) fn stop_outbound(&self, call_id: u64) {
        self.with(|st| {
            st.core.stop_outbound(call_id);
            st.stop_outbound_handle(call_id);
        });
    }

    /// Host: ends outbound stream `call_id` now with `status` and `message` (a StreamEnd), its
    /// pump stopped; nothing if it has none or it ended.
    pub(crate) fn end_outbound(&self, call_id: u64, status: keel_wire::StatusCode, message: Bytes) {
        self.with(|st| {
            st.stop_outbound_handle(call_id);
            st.core.finish_outbound(call_id, status, message);
        });
    }

    /// Sends `stream` as the data of `handle`'s call within the peer's credit, then StreamEnd.
    /// Returns when the stream ended, was stopped, or the connection closed. A stream nothing
    /// was taken from is given back whole (an empty one, once it ended, as an empty stream): a
    /// client may send it again with its call on another connection.
    pub(crate) async fn pump(
        self: Arc<Self>,
        handle: OutboundHandle,
        mut stream: ByteStream,
    ) -> Option<ByteStream> {
        let OutboundHandle { call_id, out } = handle;
        let mut untouched = true;
        let end = loop {
            let next = tokio::select! {
                biased;
                _ = out.stopped() => break None,
                next = stream.next() => next,
            };
            let mut chunk = match next {
                None => {
                    // One that ended before giving anything is an empty stream.
                    if untouched {
                        stream = ByteStream::empty();
                    }
                    break Some((keel_wire::StatusCode::Ok, Bytes::new()));
                }
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => {
                    untouched = false;
                    // The producer's own status when it has one (a drain's `ShuttingDown`, a
                    // deadline), else `Internal`.
                    let code = e
                        .status_code()
                        .map_or(keel_wire::StatusCode::Internal, |c| c.to_wire());
                    break Some((code, Bytes::from(e.message().to_string())));
                }
            };
            untouched = false;
            while !chunk.is_empty() {
                let n = loop {
                    let credit = self.lock().core.send_credit(call_id);
                    match credit {
                        None => break 0,
                        _ if out.is_stopped() => break 0,
                        Some(0) => out.credit.notified().await,
                        Some(c) => {
                            let max_chunk = self.max_chunk.load(Ordering::Relaxed);
                            break (c as usize).min(max_chunk).min(chunk.len());
                        }
                    }
                };
                if n == 0 {
                    out.stop();
                    break;
                }
                self.sink.wait_below(SEND_QUEUE_LIMIT).await;
                let data = chunk.split_to(n);
                let sent = self.with(|st| {
                    // Stopped meanwhile (StopSending, Cancel, a window error): not one more byte.
                    if st.core.send_credit(call_id).is_none() {
                        return false;
                    }
                    st.core.on_sent(call_id, n);
                    self.sink
                        .enqueue(&Frame::StreamData(StreamData { call_id, data }))
                        .is_ok()
                });
                self.sink.push();
                if !sent {
                    out.stop();
                    break;
                }
            }
            if out.is_stopped() {
                break None;
            }
        };
        // The core ends the stream unless the peer stopped it first.
        self.with(|st| {
            st.outbound.remove(&call_id);
            if let Some((status, message)) = end {
                st.core.finish_outbound(call_id, status, message);
            } else {
                st.core.stop_outbound(call_id);
            }
        });
        untouched.then_some(stream)
    }

    /// A round-trip sample measured elsewhere (the client's handshake).
    pub(crate) fn set_rtt(&self, rtt: Duration) {
        self.with(|st| st.core.set_rtt(rtt));
    }

    /// Turns keepalive on (see [`Keepalive`]); [`WireEnd::run_timers`] runs its timer.
    pub(crate) fn set_keepalive(&self, keepalive: Keepalive) {
        let now = clock::now();
        self.with(|st| st.core.set_keepalive(keepalive, now));
    }

    /// Host: limits how often the client may ping.
    pub(crate) fn set_ping_policy(&self, policy: PingPolicy) {
        self.with(|st| st.core.set_ping_policy(policy));
    }

    /// The connection's timer, for keepalive and for calls' deadlines, until the connection
    /// closes (then `None`).
    ///
    /// Keepalive: it pings when the connection has been quiet for the interval, and returns
    /// the verdict when a ping went unanswered for the timeout (the caller closes the
    /// connection). A ping cannot be answered before it has left: if it still waits behind a
    /// large frame that is being written (a big message on a slow link), the wait starts
    /// again, for as long as our bytes keep leaving. A send queue that did not move for a
    /// whole timeout means the path is gone too.
    ///
    /// Deadlines (client): calls whose deadline passed are cancelled (the host is told) and
    /// handed to `expired`, which answers them. One timer serves every call of the
    /// connection, instead of one per call.
    ///
    /// `before_keepalive` runs before each keepalive verdict: a client makes sure the reader
    /// task reads the socket then (see the client's [`read`](super::read) module).
    pub(crate) async fn run_timers(
        self: Arc<Self>,
        mut expired: impl FnMut(Vec<(u64, C)>),
        before_keepalive: impl Fn(),
    ) -> Option<ConnError> {
        // What the socket had taken when the current keepalive wait began.
        let mut written_before = self.sink.written_bytes();
        loop {
            // Created before reading the deadlines, so one moved meanwhile wakes it.
            let moved = self.timer.notified();
            let (keepalive_at, calls_at) = {
                let mut st = self.lock();
                if st.core.is_closed() {
                    return None;
                }
                let keepalive_at = st.core.poll_timeout();
                st.timer_wakes_at = keepalive_at.into_iter().chain(st.call_timer).min();
                (keepalive_at, st.call_timer)
            };
            let woken = match keepalive_at.into_iter().chain(calls_at).min() {
                None => {
                    moved.await;
                    true
                }
                Some(at) => tokio::select! {
                    _ = crate::runtime::timer::sleep_until(at) => false,
                    _ = moved => true,
                },
            };
            if woken {
                // A probe ping begins a new keepalive wait; a call's deadline does not.
                if self.lock().core.poll_timeout() != keepalive_at {
                    written_before = self.sink.written_bytes();
                }
                continue;
            }
            let now = clock::now();
            if calls_at.is_some_and(|at| at <= now) {
                let gone = self.with(|st| {
                    let passed = |c: &C| c.deadline().is_some_and(|d| d <= now);
                    let gone = st.core.cancel_calls_where(passed);
                    for (call_id, _) in &gone {
                        st.stop_outbound_handle(*call_id);
                    }
                    st.call_timer = st.core.pending().filter_map(|(_, c)| c.deadline()).min();
                    gone
                });
                if !gone.is_empty() {
                    expired(gone);
                }
            }
            if keepalive_at.is_none_or(|at| at > now) {
                continue;
            }
            before_keepalive();
            match self.with(|st| st.core.handle_timeout(now)) {
                Ok(pinged) => {
                    if pinged {
                        self.mark_ping();
                    }
                    written_before = self.sink.written_bytes();
                }
                Err(dead) => {
                    let written = self.sink.written_bytes();
                    let ping_left = written >= self.ping_mark.load(Ordering::Acquire);
                    if ping_left || written == written_before {
                        return Some(dead);
                    }
                    written_before = written;
                    self.with(|st| st.core.restart_keepalive_wait(now));
                }
            }
        }
    }

    /// A keepalive ping was just queued: remember where it is in the send queue.
    fn mark_ping(&self) {
        self.ping_mark
            .store(self.sink.queued_bytes(), Ordering::Release);
    }

    /// Host: tell the client no new calls are served here (once).
    pub(crate) fn go_away(&self, reason: &str) {
        self.with(|st| st.core.go_away(reason));
    }

    /// Client: registers a call and queues its Request (`request` builds it from the call's
    /// id) in one step under the lock, so Requests leave in the order of their ids, as a
    /// GoAway's `last_call_id` requires; then writes what the socket takes, at once if the call
    /// is alone in flight, else a moment later with the requests of the callers ready beside
    /// it ([`Sink::push_soon`]: the client runs [`Sink::pushes_soon`]).
    ///
    /// If keepalive is on and nothing arrived for its timeout, a Ping follows the Request (see
    /// [`Connection::probe_call`]), so a path that died while the connection was quiet fails this
    /// call within the timeout rather than at its deadline.
    pub(crate) fn send_call(
        &self,
        slot: C,
        download: bool,
        upload: bool,
        now: Instant,
        request: impl FnOnce(u64) -> Frame,
    ) -> Result<Sent, NotSent> {
        let (mut probed, mut timer_moved, mut alone) = (false, false, true);
        let deadline = slot.deadline();
        let sent = self.with(|st| {
            let call_id = st
                .core
                .start_call(slot, download, upload)
                .map_err(|(why, _)| NotSent::Rejected(why))?;
            if let Err(e) = self.sink.enqueue(&request(call_id)) {
                st.core.forget_call(call_id);
                return Err(NotSent::Sink(e));
            }
            let probe = st.core.probe_call(now);
            probed = probe.pinged;
            alone = st.core.pending_calls() == 1;
            // Calls waiting make the keepalive deadline earlier (a ping if nothing arrives
            // for a quarter second): the timer must know when it moved before the timer's
            // next look. Only the first call waiting can move it, or the first call since a
            // keepalive ping (which lifts the ping spacing); a probe ping above wakes the
            // timer itself.
            let mut sooner = |st: &mut State<C>, at: Instant| {
                if st.timer_wakes_at.is_none_or(|wakes| at < wakes) {
                    st.timer_wakes_at = Some(at);
                    timer_moved = true;
                }
            };
            if st.core.pending_calls() == 1 || probe.timer_earlier {
                if let Some(due) = st.core.poll_timeout() {
                    sooner(st, due);
                }
            }
            if let Some(d) = deadline {
                if st.call_timer.is_none_or(|at| d < at) {
                    st.call_timer = Some(d);
                    sooner(st, d);
                }
            }
            let handle = upload.then(|| st.register_outbound(call_id));
            // A call reading for itself is not alone any more: the task reads for both.
            let socket_to_task = st.reader != Reader::Task;
            st.reader = Reader::Task;
            Ok(Sent {
                call_id,
                upload: handle,
                socket_to_task,
            })
        });
        match &sent {
            Ok(_) if alone => self.sink.push(),
            Ok(_) => self.sink.push_soon(),
            Err(_) => {}
        }
        if probed {
            self.mark_ping();
        }
        if probed || timer_moved {
            self.timer.notify_one();
        }
        sent
    }

    /// Client: the host's GoAway said it processed no call above `last_call_id`: those calls
    /// are forgotten (their uploads stopped, nothing sent) and their slots returned, for the
    /// caller to send them again on another connection.
    pub(crate) fn unprocessed(&self, last_call_id: u64) -> Vec<C> {
        self.with(|st| {
            let calls = st.core.unprocessed_calls(last_call_id);
            calls
                .into_iter()
                .map(|(call_id, slot)| {
                    st.stop_outbound_handle(call_id);
                    slot
                })
                .collect()
        })
    }

    /// Client: the caller gave up on `call_id`. Stops its upload and, if it was pending, tells
    /// the host (Cancel). Returns its slot if it was pending.
    pub(crate) fn cancel_call(&self, call_id: u64) -> Option<C> {
        self.with(|st| {
            st.stop_outbound_handle(call_id);
            st.core.cancel_call(call_id)
        })
    }

    /// Client: forgets a call whose request could not be sent.
    pub(crate) fn forget_call(&self, call_id: u64) -> Option<C> {
        self.with(|st| {
            st.stop_outbound_handle(call_id);
            st.core.forget_call(call_id)
        })
    }

    /// Client: runs `f` on who reads the socket, with the call table, under the lock that
    /// starts calls (so "the only call in flight" cannot change meanwhile). The rules for who
    /// reads when are the read side's (`read.rs`, "Who reads the socket").
    pub(crate) fn with_reader<R>(&self, f: impl FnOnce(&mut Reader, &Connection<C>) -> R) -> R {
        let mut st = self.lock();
        let st = &mut *st;
        f(&mut st.reader, &st.core)
    }

    /// Client: how many calls wait for their reply, as of the last change to the call table,
    /// read without the lock: it may be a moment late. The read side uses it to leave the
    /// socket alone while other calls are in flight (see `read.rs`, "Who reads the socket").
    pub(crate) fn calls_waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Client: whether new calls may start here (not closed, no GoAway received).
    pub(crate) fn takes_calls(&self) -> bool {
        self.accepting.load(Ordering::Acquire)
    }

    /// Whether the connection was closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().core.is_closed()
    }

    /// The connection is gone: inbound streams fail, pumps stop, and the pending calls are
    /// returned for the caller to fail.
    pub(crate) fn close(&self, reason: &str) -> Vec<(u64, C)> {
        self.accepting.store(false, Ordering::Release);
        let (closed, inbound, outbound) = {
            let mut st = self.lock();
            let closed: Closed<C> = st.core.close(reason);
            self.waiting.store(0, Ordering::Relaxed);
            (
                closed,
                std::mem::take(&mut st.inbound),
                std::mem::take(&mut st.outbound),
            )
        };
        for (_, tx) in inbound {
            let _ = tx.send(Err(lost(reason)));
        }
        for (_, out) in outbound {
            out.stop();
        }
        // The timer ends.
        self.timer.notify_one();
        closed.calls
    }
}

/// Connects a remote [`ByteStream`] to its connection's flow control. Dropped with the
/// stream: the connection then counts it no more (see [`WireEnd::inbound_streams`]).
struct InboundCredit<C> {
    conn: Weak<WireEnd<C>>,
    call_id: u64,
}

impl<C> Drop for InboundCredit<C> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.upgrade() {
            c.held_inbound.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<C: Expiring + Send + 'static> Credit for InboundCredit<C> {
    fn consumed(&self, n: usize) {
        if let Some(c) = self.conn.upgrade() {
            c.consumed(self.call_id, n);
        }
    }

    fn abandoned(&self) {
        if let Some(c) = self.conn.upgrade() {
            c.abandoned(self.call_id);
        }
    }
}
