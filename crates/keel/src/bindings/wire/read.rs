//! The read side of a client connection, and how answers reach their calls.
//!
//! Replies are read by the connection's reader task, except while one call is alone in
//! flight: then that call reads the socket itself, in its own poll. A reply then reaches its
//! caller with no task in between: no second task to run, and (on a current-thread runtime,
//! where the caller is often the `block_on` future) no extra turn of the I/O driver before the
//! caller runs. With more calls in flight the task reads for all of them, in batches.
//!
//! Who reads is the connection's [`Reader`] (kept with the call table, so that "the only call
//! in flight" is decided under the lock that starts calls). The socket itself only ever sees
//! one waker, the [`SocketWaker`], which wakes whoever reads now: moving the socket between a
//! call and the task is a change of that target, not another registration with the socket. A
//! call gives the socket back to the task whenever it stops being alone or stops waiting
//! (answered, cancelled, dropped), and a second call starting while a call reads gives it back
//! too. The connection's timer also takes it back before it judges keepalive, so a caller that
//! stopped polling its call (without dropping it) cannot make a live host look dead.
//!
//! The rules for who reads are here, in "Who reads the socket" below; the [`Reader`] itself
//! is kept with the call table ([`WireEnd::with_reader`]).
//!
//! [`Reader`]: super::conn::Reader

use std::cell::RefCell;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use bytes::BytesMut;
use keel_wire::{Codec, Event, Frame, HelloReply, Reply};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;

use super::conn::{Expiring, Reader, WireEnd};
use crate::bindings::{Answer, Replied};
use crate::core::compress::Compression;
use crate::core::error::{Error, Kind};
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::runtime::clock;
use crate::transport::{Endpoint, IoReader};

/// What a waiting call receives: its answer, or why it has none.
#[derive(Debug)]
pub(super) enum Delivery {
    Answer(Answer),
    /// The host's GoAway named a `last_call_id` below the call's id: the host did not and will
    /// not process it, so it may be sent again on another connection.
    Unprocessed,
    /// Its deadline passed first: the connection's timer cancelled it (the host was told).
    TimedOut,
    /// The connection forgot the call without a word (it went away).
    Closed,
}

/// Where a call's answer is left for it (by whoever read its reply, by the connection's timer,
/// or by a close), and the waker of the call waiting for it.
#[derive(Debug, Default)]
pub(super) struct AnswerCell {
    state: Mutex<CellState>,
}

#[derive(Debug, Default)]
struct CellState {
    delivery: Option<Delivery>,
    waker: Option<Waker>,
}

/// How many cells of answered calls a thread keeps for its next calls (a few KiB).
const SPARE_CELLS: usize = 64;

thread_local! {
    /// Cells of calls answered on this thread, each held by nobody else, for the next calls
    /// made on it: a call then allocates no cell of its own (a `malloc` and a `free` were ~130
    /// of the client's ~4,400 instructions a call at 64 in flight, by callgrind).
    static SPARES: RefCell<Vec<Arc<AnswerCell>>> = const { RefCell::new(Vec::new()) };
}

impl AnswerCell {
    /// A cell for a new call: one this thread kept, or a new one.
    fn fresh() -> Arc<AnswerCell> {
        SPARES
            .try_with(|spares| spares.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// A call is done with `cell`: kept for this thread's next call if nobody else holds it
    /// (the call's slot, if the reader still has it, drops it later and it is freed then).
    pub(super) fn recycle(mut cell: Arc<AnswerCell>) {
        let Some(only) = Arc::get_mut(&mut cell) else {
            return;
        };
        let state = only.state.get_mut();
        state.delivery = None;
        state.waker = None;
        let _ = SPARES.try_with(|spares| {
            let mut spares = spares.borrow_mut();
            if spares.len() < SPARE_CELLS {
                spares.push(cell);
            }
        });
    }

    fn lock(&self) -> MutexGuard<'_, CellState> {
        self.state.lock()
    }

    /// Leaves `delivery` and wakes the call if it waits.
    fn deliver(&self, delivery: Delivery) {
        let waker = {
            let mut st = self.lock();
            st.delivery = Some(delivery);
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The answer if it came, and no waker kept: a call about to read the socket itself is not
    /// woken by its own reply.
    fn take(&self) -> Option<Delivery> {
        let mut st = self.lock();
        st.waker = None;
        st.delivery.take()
    }

    /// The answer, or `Pending` with `cx` woken when it comes.
    fn poll(&self, cx: &mut Context<'_>) -> Poll<Delivery> {
        let mut st = self.lock();
        match st.delivery.take() {
            Some(d) => Poll::Ready(d),
            None => {
                match &mut st.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

/// A pending call as the connection keeps it: where its answer goes, and until when it waits.
/// Dropped without an answer (the connection forgot it), it answers [`Delivery::Closed`].
#[derive(Debug)]
pub(super) struct ReplySlot {
    cell: Arc<AnswerCell>,
    deadline: Instant,
    sent: bool,
}

impl ReplySlot {
    /// A slot for a call waiting until `deadline`, and the cell its answer arrives in.
    pub(super) fn new(deadline: Instant) -> (ReplySlot, Arc<AnswerCell>) {
        let cell = AnswerCell::fresh();
        let slot = ReplySlot {
            cell: cell.clone(),
            deadline,
            sent: false,
        };
        (slot, cell)
    }

    /// Answers the call (if it still waits: one that gave up is not there to read it).
    pub(super) fn send(mut self, delivery: Delivery) {
        self.sent = true;
        self.cell.deliver(delivery);
    }
}

impl Drop for ReplySlot {
    fn drop(&mut self) {
        if !self.sent {
            self.cell.deliver(Delivery::Closed);
        }
    }
}

impl Expiring for ReplySlot {
    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }
}

/// Fails every waiting call with an error of `kind` and closes the connection's state.
pub(super) fn fail_all_with(wire: &WireEnd<ReplySlot>, kind: Kind, reason: &str) {
    for (_, slot) in wire.close(reason) {
        slot.send(Delivery::Answer(Err(Error::new(kind, reason.to_string()))));
    }
}

/// What the reader needs to finish the handshake.
pub(super) struct Handshake {
    pub(super) endpoint: Endpoint,
    /// When the Hello went out: the reply gives the first round-trip sample.
    pub(super) sent: Instant,
    pub(super) peer_max_message: Arc<AtomicU32>,
    pub(super) done: watch::Sender<Option<Result<(), (Kind, String)>>>,
}

impl Handshake {
    /// Decodes the HelloReply from `buf` if it is whole: `Ok(true)` once accepted (the host's
    /// limits apply from now on), `Ok(false)` while more bytes are needed. A refusal (or not a
    /// keel host) is the error, for
    /// [`WireClientConn::handshake`](super::client::WireClientConn::handshake) and the calls
    /// already sent.
    fn try_complete(
        &self,
        buf: &mut BytesMut,
        wire: &WireEnd<ReplySlot>,
    ) -> Result<bool, (Kind, String)> {
        let endpoint = &self.endpoint;
        let decoded = match crate::transport::sniff::http_answer(buf) {
            None => return Ok(false),
            Some(false) => keel_wire::decode_hello_reply(buf),
            Some(true) => {
                let (https, tcps) = if endpoint.is_tls() {
                    ("https", "tcps")
                } else {
                    ("http", "tcp")
                };
                let outcome = Err((
                    Kind::Connect,
                    format!(
                        "{endpoint}: the host answered in HTTP, not keel-wire, so it seems to \
                         serve HTTP on this port. Connect with an {https}:// URL, or keep \
                         {tcps}:// and use the port where the host serves keel-wire"
                    ),
                ));
                self.done.send_replace(Some(outcome.clone()));
                return outcome.map(|()| true);
            }
        };
        let outcome = match decoded {
            Ok(None) => return Ok(false),
            Ok(Some(HelloReply::Accept { version, .. })) if version < keel_wire::VERSION => Err((
                Kind::Protocol,
                format!(
                    "{endpoint} speaks protocol version {version}; this client needs \
                         version {} (upgrade the host first: hosts serve clients of every \
                         older version)",
                    keel_wire::VERSION
                ),
            )),
            Ok(Some(HelloReply::Accept {
                max_message_size, ..
            })) => {
                self.peer_max_message
                    .store(max_message_size, Ordering::Release);
                wire.set_peer_max_message(max_message_size);
                // The handshake was one round trip: the first estimate windows grow against.
                wire.set_rtt(self.sent.elapsed());
                Ok(())
            }
            Ok(Some(HelloReply::Reject {
                supported_version,
                reason,
            })) => Err((
                Kind::Protocol,
                format!(
                    "{endpoint} refused the handshake (it speaks version {supported_version}, \
                     this client {}): {reason}",
                    keel_wire::VERSION
                ),
            )),
            Err(_) if crate::transport::looks_like_tls(buf) => Err((
                Kind::Connect,
                format!(
                    "{endpoint}: the host answered with TLS, so it serves TLS on this port. \
                     Connect with a tcps:// URL (and ClientTls settings that trust its \
                     certificate)"
                ),
            )),
            Err(e) => Err((Kind::Protocol, format!("{endpoint}: bad handshake: {e}"))),
        };
        self.done.send_replace(Some(outcome.clone()));
        outcome.map(|()| true)
    }
}

/// Why [`ReadSide::poll`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// A read answered several calls (only when asked for batches).
    Batch,
    /// The connection ended: its calls were failed.
    Ended,
}

/// The one waker a client connection's socket is polled with: it wakes whoever reads now (a
/// call alone in flight, or the reader task), so handing the socket from one to the other is
/// a change of target here, not a new registration with the socket.
#[derive(Debug, Default)]
pub(super) struct SocketWaker {
    target: Mutex<Option<Waker>>,
    /// Set by a wake, cleared before each poll of the socket: the socket has news nobody has
    /// polled for yet.
    fired: AtomicBool,
}

impl SocketWaker {
    /// From now on the socket wakes `waker`.
    fn aim(&self, waker: &Waker) {
        let mut target = self.target.lock();
        match &mut *target {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Wake for SocketWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Before the target is read: one who aims the waker and then finds it fired knows that
        // the wake may have gone to the old target (see `ReadSide::give_to_task`).
        self.fired.store(true, Ordering::SeqCst);
        if let Some(w) = &*self.target.lock() {
            w.wake_by_ref();
        }
    }
}

/// A client connection's read half and what was read but not handled yet.
pub(super) struct ReadSide {
    rd: IoReader,
    buf: BytesMut,
    codec: Codec,
    /// Until the HelloReply arrived.
    handshake: Option<Handshake>,
    /// When the bytes being decoded were read: what the core takes as the frames' arrival.
    read_at: Instant,
    /// The reader task's waker, once it ran: a call that read the socket hands it back with
    /// it.
    task: Option<Waker>,
    /// Who the socket wakes, and the same as a `Waker` to poll it with.
    waker: Arc<SocketWaker>,
    socket_waker: Waker,
    /// The last poll of the socket returned `Pending`: it wakes [`SocketWaker`] when it has
    /// bytes (unless that has happened: [`SocketWaker::fired`]).
    armed: bool,
    ended: bool,
    /// A run of replies taken off the buffer, handled under one lock of the connection's
    /// state ([`handle_replies`]); empty between runs (kept for its capacity).
    replies: Vec<Reply>,
    /// The calls a run answered, answered once the lock is released; empty between runs.
    answers: Vec<(Reply, ReplySlot, bool)>,
}

impl std::fmt::Debug for ReadSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadSide")
            .field("buffered", &self.buf.len())
            .field("handshaking", &self.handshake.is_some())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl ReadSide {
    /// The read side of a connection whose Hello was sent; `buf` holds what was read already.
    pub(super) fn new(rd: IoReader, buf: BytesMut, codec: Codec, handshake: Handshake) -> ReadSide {
        let waker = Arc::new(SocketWaker::default());
        ReadSide {
            rd,
            buf,
            codec,
            handshake: Some(handshake),
            read_at: clock::now(),
            task: None,
            socket_waker: Waker::from(waker.clone()),
            waker,
            armed: false,
            ended: false,
            replies: Vec::new(),
            answers: Vec::new(),
        }
    }

    /// Reads and handles what the connection has, until the socket has nothing more
    /// (`Pending`: it wakes [`SocketWaker`]'s target when it has) or the connection ended.
    /// With `batches`, it also returns after a read that answered several calls, so that the
    /// reader task can let them run before it reads on.
    fn poll(&mut self, wire: &Arc<WireEnd<ReplySlot>>, batches: bool) -> Poll<Step> {
        if self.ended {
            return Poll::Ready(Step::Ended);
        }
        loop {
            let answered = match self.handle_buffered(wire) {
                Ok(n) => n,
                Err((kind, reason)) => return Poll::Ready(self.end(wire, kind, reason)),
            };
            if batches && answered > 1 {
                return Poll::Ready(Step::Batch);
            }
            self.waker.fired.store(false, Ordering::SeqCst);
            let mut cx = Context::from_waker(&self.socket_waker);
            let read =
                tokio_util::io::poll_read_buf(Pin::new(&mut self.rd), &mut cx, &mut self.buf);
            self.armed = read.is_pending();
            let lost = match read {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => None,
                Poll::Ready(Ok(_)) => {
                    self.read_at = clock::now();
                    continue;
                }
                Poll::Ready(Err(e)) => Some(e),
            };
            let (kind, reason) = match (&self.handshake, lost) {
                (Some(h), None) => (
                    Kind::Connect,
                    format!(
                        "{}: the host closed the connection during the keel-wire handshake, so \
                         it does not seem to serve keel-wire on this port. Check the port, and \
                         the scheme: tcps:// if the host serves TLS there",
                        h.endpoint
                    ),
                ),
                (Some(h), Some(e)) => (Kind::Connect, format!("{}: {e}", h.endpoint)),
                (None, None) => (Kind::Connection, "connection closed by the host".into()),
                (None, Some(e)) => (Kind::Connection, format!("connection lost: {e}")),
            };
            return Poll::Ready(self.end(wire, kind, reason));
        }
    }

    /// The connection ended: its calls fail, the reader task stops.
    fn end(&mut self, wire: &Arc<WireEnd<ReplySlot>>, kind: Kind, reason: String) -> Step {
        self.ended = true;
        if let Some(h) = self.handshake.take() {
            h.done.send_replace(Some(Err((kind, reason.clone()))));
        }
        fail_all_with(wire, kind, &reason);
        if let Some(task) = &self.task {
            task.wake_by_ref();
        }
        Step::Ended
    }

    /// Handles every whole frame in the buffer; returns how many calls were answered, or why
    /// the connection must end.
    fn handle_buffered(&mut self, wire: &Arc<WireEnd<ReplySlot>>) -> Result<usize, (Kind, String)> {
        if self.buf.is_empty() {
            return Ok(0);
        }
        if let Some(h) = &self.handshake {
            if !h.try_complete(&mut self.buf, wire)? {
                return Ok(0);
            }
            self.handshake = None;
        }
        let mut answered = 0;
        loop {
            // Replies, most of what a client reads, are taken off the buffer without a frame,
            // and a run of them is handled under one lock of the connection's state: taken once
            // per reply, the lock was contended by the callers sending theirs on the other
            // worker (at 64 calls in flight on one connection, 0.15 `sched_yield`s a call in
            // parking_lot's spinning, half of them here). A reply alone in the buffer (a call
            // alone in flight) goes straight through: the run's lists cost it ~120 instructions
            // by callgrind, and a second call of `decode_reply` (which then was not inlined)
            // ~50.
            if let Some(reply) = self.codec.decode_reply(&mut self.buf) {
                if self.replies.is_empty() && self.buf.is_empty() {
                    if handle_reply(wire, reply, self.read_at).map_err(|e| (Kind::Connection, e))? {
                        answered += 1;
                    }
                } else {
                    self.replies.push(reply);
                }
                continue;
            }
            if !self.replies.is_empty() {
                let run = handle_replies(wire, &mut self.replies, &mut self.answers, self.read_at);
                answered += run.map_err(|e| (Kind::Connection, e))?;
                continue;
            }
            match self.codec.decode(&mut self.buf) {
                Ok(Some(frame)) => {
                    if handle(wire, frame, self.read_at).map_err(|e| (Kind::Connection, e))? {
                        answered += 1;
                    }
                }
                Ok(None) => return Ok(answered),
                Err(e) if !e.is_fatal() => {
                    if let keel_wire::WireError::TooLarge {
                        call_id: Some(id), ..
                    } = &e
                    {
                        if let Some(slot) = wire.forget_call(*id) {
                            let too_large = Error::new(Kind::TooLarge, format!("reply: {e}"));
                            slot.send(Delivery::Answer(Err(too_large)));
                        }
                    }
                }
                Err(e) => {
                    return Err((
                        Kind::Connection,
                        format!("protocol error from the host: {e}"),
                    ))
                }
            }
        }
    }

    /// The reader task reads from now on (a call stops reading): the socket wakes the task,
    /// and what it has that nobody polled for yet is handled here.
    ///
    /// The [`Reader`] was set to the task before this, without this lock: a call alone in
    /// flight may have claimed the socket since (under this lock, aiming the socket at itself
    /// and handling what it had). The socket is then that call's, and aiming it back at the
    /// task would leave nobody to hear the call's reply: the task does not read while a call
    /// does, and the call is never woken. (Seen as a call answered only at the next keepalive
    /// timer, whose `reclaim` reads for it: `take_socket_back`, then a new call's claim, then
    /// this.)
    fn give_to_task(&mut self, wire: &Arc<WireEnd<ReplySlot>>) {
        if !task_reads(wire) {
            return;
        }
        let Some(task) = &self.task else {
            // The task has not run yet: its first poll reads.
            return;
        };
        self.waker.aim(task);
        // Aimed first, then looked: a wake since went to the task, or is seen here.
        if !self.armed || self.waker.fired() {
            if let Poll::Ready(Step::Batch) = self.poll(wire, true) {
                // The task lets the batch's callers run, then reads on.
                if let Some(task) = &self.task {
                    task.wake_by_ref();
                }
            }
        }
    }
}

/// Handles one frame read at `read_at`; true if it answered a call. An error ends the
/// connection.
fn handle(wire: &Arc<WireEnd<ReplySlot>>, frame: Frame, read_at: Instant) -> Result<bool, String> {
    let frame = match frame {
        Frame::Reply(reply) => return handle_reply(wire, reply, read_at),
        frame => frame,
    };
    match wire.handle(frame, read_at) {
        // GoAway: the host answers the calls up to its `last_call_id` and then closes; it did
        // not process those above, which go to a new connection now, as new calls do (the
        // connection takes none).
        Ok(Some(Event::GoAway(go_away))) => {
            for slot in wire.unprocessed(go_away.last_call_id) {
                slot.send(Delivery::Unprocessed);
            }
            Ok(false)
        }
        Ok(_) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Handles a reply read at `read_at`, looked at in place by the connection's core: true if it
/// answered a call. An error ends the connection.
fn handle_reply(
    wire: &Arc<WireEnd<ReplySlot>>,
    reply: Reply,
    read_at: Instant,
) -> Result<bool, String> {
    match wire.handle_reply(&reply, read_at) {
        Ok(Some((slot, download))) => {
            answer(wire, reply, slot, download);
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Handles a run of replies read at `read_at` (emptying `replies`) under one lock of the
/// connection's state, then answers the calls they answer (through `answers`, left empty), the
/// lock released; returns how many. An error ends the connection; the calls answered before it
/// in the run still get their answers.
fn handle_replies(
    wire: &Arc<WireEnd<ReplySlot>>,
    replies: &mut Vec<Reply>,
    answers: &mut Vec<(Reply, ReplySlot, bool)>,
    read_at: Instant,
) -> Result<usize, String> {
    let handled = wire.handle_replies(replies.drain(..), read_at, answers);
    let n = answers.len();
    for (reply, slot, download) in answers.drain(..) {
        answer(wire, reply, slot, download);
    }
    handled.map(|()| n).map_err(|e| e.to_string())
}

/// Leaves `reply`'s answer in `slot`, the slot of the call it answers; `download`: its
/// response is a stream, whose data follows. (Inlined into both its callers: out of line, a
/// lone reply's path cost ~60 instructions more.)
#[inline(always)]
fn answer(wire: &Arc<WireEnd<ReplySlot>>, reply: Reply, slot: ReplySlot, download: bool) {
    let metadata = Metadata::from_wire(&reply.metadata);
    let compression = match Compression::from_wire_id(reply.compression) {
        Ok(c) => c,
        Err(id) => {
            let why = format!("the host compressed a reply with unknown id {id}");
            slot.send(Delivery::Answer(Err(Error::new(Kind::Protocol, why))));
            return;
        }
    };
    let result = if reply.status != keel_wire::StatusCode::Ok {
        let code = StatusCode::from_wire(reply.status);
        Err(Status::from_wire_parts(
            code,
            reply.body,
            reply.details,
            metadata,
        ))
    } else {
        let payload = if download {
            // Before the next frame is read: its data follows this reply.
            Payload::Stream(wire.inbound_stream(reply.call_id))
        } else {
            Payload::Body(reply.body)
        };
        Ok(Replied {
            payload,
            metadata,
            compression,
        })
    };
    slot.send(Delivery::Answer(Ok(result)));
}

/// A client connection's read side, shared by its reader task and its calls.
#[derive(Debug)]
pub(super) struct Reading {
    side: Mutex<ReadSide>,
}

impl Reading {
    pub(super) fn new(side: ReadSide) -> Reading {
        Reading {
            side: Mutex::new(side),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ReadSide> {
        self.side.lock()
    }

    /// The reader task: reads for every call except while one call alone reads for itself
    /// (see the module docs), until the connection ends.
    pub(super) async fn run(self: Arc<Self>, wire: Arc<WireEnd<ReplySlot>>) {
        loop {
            match poll_fn(|cx| self.poll_task(&wire, cx)).await {
                Step::Ended => return,
                Step::Batch => {
                    // Several callers were just answered: under load each sends its next call
                    // at once. Let them run first (one yield, no thread woken) with the sink
                    // corked, so their requests leave in one write instead of one each. A
                    // lone reply skips this: its caller's next request goes out the moment
                    // it is made.
                    wire.sink().cork();
                    tokio::task::yield_now().await;
                    wire.sink().uncork();
                }
            }
        }
    }

    fn poll_task(&self, wire: &Arc<WireEnd<ReplySlot>>, cx: &mut Context<'_>) -> Poll<Step> {
        let mut side = self.lock();
        match &mut side.task {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        if side.ended {
            return Poll::Ready(Step::Ended);
        }
        if !task_reads(wire) {
            // A call reads; it gives the socket back when it stops.
            return Poll::Pending;
        }
        side.waker.aim(cx.waker());
        side.poll(wire, true)
    }

    /// Waits for call `call_id`'s answer in `cell`, reading the socket itself while it is the
    /// only call in flight.
    pub(super) async fn answer(
        &self,
        wire: &Arc<WireEnd<ReplySlot>>,
        call_id: u64,
        cell: &AnswerCell,
    ) -> Delivery {
        // Whether this call ever read the socket: only one that did has it to give back.
        let mut claimed = false;
        let delivery = poll_fn(|cx| self.poll_answer(wire, call_id, cell, &mut claimed, cx)).await;
        if claimed {
            self.release(wire, call_id);
        }
        delivery
    }

    fn poll_answer(
        &self,
        wire: &Arc<WireEnd<ReplySlot>>,
        call_id: u64,
        cell: &AnswerCell,
        claimed: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Delivery> {
        // Not alone in flight, and never the socket's reader: the task reads for this call
        // (a call that starts beside another makes the task read, and only a call alone claims
        // the socket), so it only waits for its cell, without the read side's lock (which the
        // task holds while it reads) or the call table's. A count a moment late is harmless:
        // one too high leaves the socket to the task, which reads while no call has claimed it;
        // one too low takes the locked path below, which decides under the lock.
        if !*claimed && wire.calls_waiting() > 1 {
            return cell.poll(cx);
        }
        if let Some(d) = cell.take() {
            return Poll::Ready(d);
        }
        // Locked, not tried: the lock's other holders (the task, the connection's timer) hold
        // it for a moment and never wait under it. A `try_lock` that gave up here lost wake-ups:
        // the task, holding the lock only to note its waker, does not read while a call has the
        // socket, so the news the socket had just woken this call for was read by nobody until
        // keepalive took the socket back (20 s; seen under load in
        // bindings::tcp::graceful_shutdown_with_a_thousand_calls_in_flight_loses_none).
        {
            let mut side = self.lock();
            if claim_socket(wire, call_id) {
                *claimed = true;
                side.waker.aim(cx.waker());
                // Aimed first, then looked. The socket needs no poll if it is armed and has not
                // fired: it wakes this call when the reply comes.
                if !side.armed || side.waker.fired() {
                    // Ready: the connection ended (this call's answer says so).
                    let _ = side.poll(wire, false);
                }
                if !keep_socket(wire, call_id) {
                    side.give_to_task(wire);
                }
            }
        }
        cell.poll(cx)
    }

    /// Call `call_id` stopped waiting (answered, or given up): if it was reading the socket,
    /// the task reads from now on.
    pub(super) fn release(&self, wire: &Arc<WireEnd<ReplySlot>>, call_id: u64) {
        if release_socket(wire, call_id) {
            self.lock().give_to_task(wire);
        }
    }

    /// A call started while another read the socket: the task reads for both from now on
    /// (the connection's [`Reader`](super::conn::Reader) already says so).
    pub(super) fn give_to_task(&self, wire: &Arc<WireEnd<ReplySlot>>) {
        self.lock().give_to_task(wire);
    }

    /// The connection's timer is about to judge keepalive: if a call reads the socket, the
    /// task takes it back, and what arrived is handled first.
    pub(super) fn reclaim(&self, wire: &Arc<WireEnd<ReplySlot>>) {
        if take_socket_back(wire) {
            self.lock().give_to_task(wire);
        }
    }
}

// Who reads the socket: the reader task, or the one call in flight (see the module docs). Each
// rule is one look at the connection's `Reader` under the lock that starts calls.

/// Whether the reader task reads the socket (no call reads for itself).
fn task_reads(wire: &WireEnd<ReplySlot>) -> bool {
    wire.with_reader(|reader, _| *reader == Reader::Task)
}

/// Whether call `call_id` may read the socket now: it does already, or it is the only call in
/// flight (then it does from now on).
fn claim_socket(wire: &WireEnd<ReplySlot>, call_id: u64) -> bool {
    wire.with_reader(|reader, core| match *reader {
        Reader::Call(id) => id == call_id,
        Reader::Task => {
            let alone = core.pending_calls() == 1 && core.is_pending(call_id);
            if alone {
                *reader = Reader::Call(call_id);
            }
            alone
        }
    })
}

/// Call `call_id`, which reads the socket and just polled it, keeps waiting on it only while
/// it is still the only call in flight and unanswered. False: the task reads from now on, and
/// the caller must hand it the socket.
fn keep_socket(wire: &WireEnd<ReplySlot>, call_id: u64) -> bool {
    wire.with_reader(|reader, core| {
        let keep = *reader == Reader::Call(call_id)
            && core.pending_calls() == 1
            && core.is_pending(call_id);
        if !keep {
            *reader = Reader::Task;
        }
        keep
    })
}

/// Call `call_id` stopped waiting. True if it was reading the socket: the task reads from now
/// on, and the caller must hand it the socket.
fn release_socket(wire: &WireEnd<ReplySlot>, call_id: u64) -> bool {
    wire.with_reader(|reader, _| {
        let was = *reader == Reader::Call(call_id);
        if was {
            *reader = Reader::Task;
        }
        was
    })
}

/// The task reads from now on. True if a call was reading: the caller must hand the task the
/// socket.
fn take_socket_back(wire: &WireEnd<ReplySlot>) -> bool {
    wire.with_reader(|reader, _| std::mem::replace(reader, Reader::Task) != Reader::Task)
}

#[cfg(test)]
mod tests {
    use super::super::sink::Sink;
    use super::*;
    use crate::transport::Io;
    use bytes::Bytes;
    use keel_wire::{Limits, Request, RequestFlags, Side};
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncWriteExt, DuplexStream};

    impl Io for DuplexStream {}

    /// Counts its wakes.
    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A client connection over an in-memory pipe (whose writes wake its reader at once, in
    /// the write), handshake done, its reader task running; and the host's end.
    async fn connection() -> (Arc<WireEnd<ReplySlot>>, Arc<Reading>, DuplexStream) {
        let (client, mut host) = tokio::io::duplex(64 * 1024);
        let io: Box<dyn Io> = Box::new(client);
        let (rd, wr) = io.split();
        let (sink, flusher) = Sink::new(wr, Codec::new(Limits::default()));
        tokio::spawn(flusher);
        let max = keel_wire::DEFAULT_MAX_MESSAGE_SIZE;
        let wire = WireEnd::new(Side::Client, sink, max, max);
        let (done, mut handshaken) = watch::channel(None);
        let handshake = Handshake {
            endpoint: Endpoint::parse("tcp://127.0.0.1:1").unwrap(),
            sent: clock::now(),
            peer_max_message: Arc::new(AtomicU32::new(max)),
            done,
        };
        let side = ReadSide::new(
            rd,
            BytesMut::new(),
            Codec::new(Limits::default()),
            handshake,
        );
        let reading = Arc::new(Reading::new(side));
        tokio::spawn(reading.clone().run(wire.clone()));
        let mut hello = BytesMut::new();
        keel_wire::encode_hello_reply(
            &HelloReply::Accept {
                version: keel_wire::VERSION,
                max_message_size: max,
            },
            &mut hello,
        );
        host.write_all(&hello).await.unwrap();
        let accepted = handshaken.wait_for(Option::is_some).await.unwrap().clone();
        assert_eq!(accepted, Some(Ok(())));
        (wire, reading, host)
    }

    /// Sends a call; its id and its answer's cell.
    fn call(wire: &WireEnd<ReplySlot>) -> (u64, Arc<AnswerCell>) {
        let (slot, cell) = ReplySlot::new(clock::now() + std::time::Duration::from_secs(60));
        let request = |call_id| {
            Frame::Request(Request {
                call_id,
                flags: RequestFlags::default(),
                deadline_us: 60_000_000,
                service: "S".into(),
                operation: "op".into(),
                metadata: Bytes::new(),
                compression: 0,
                body: Bytes::new(),
            })
        };
        let sent = wire
            .send_call(slot, false, false, clock::now(), request)
            .unwrap();
        assert!(!sent.socket_to_task);
        (sent.call_id, cell)
    }

    fn reply(call_id: u64) -> BytesMut {
        reply_with(call_id, keel_wire::StatusCode::Ok, b"answer")
    }

    fn reply_with(call_id: u64, status: keel_wire::StatusCode, body: &'static [u8]) -> BytesMut {
        let mut bytes = BytesMut::new();
        let reply = Frame::Reply(Reply {
            call_id,
            status,
            metadata: Bytes::new(),
            compression: 0,
            details: Bytes::new(),
            body: Bytes::from_static(body),
        });
        Codec::new(Limits::default())
            .encode(&reply, &mut bytes)
            .unwrap();
        bytes
    }

    /// Replies that arrive together are handled as one run (`handle_replies`, one lock of the
    /// connection's state): each call gets its own answer, a failure among them included, and
    /// a reply for a call nobody waits for is passed over.
    #[tokio::test]
    async fn a_run_of_replies_answers_each_of_its_calls() {
        let (wire, _reading, mut host) = connection().await;
        let calls: Vec<_> = (0..3).map(|_| call(&wire)).collect();
        let mut run = BytesMut::new();
        run.extend_from_slice(&reply_with(calls[2].0, keel_wire::StatusCode::Ok, b"third"));
        run.extend_from_slice(&reply_with(
            calls[0].0 + 1000,
            keel_wire::StatusCode::Ok,
            b"?",
        ));
        run.extend_from_slice(&reply_with(
            calls[1].0,
            keel_wire::StatusCode::Busy,
            b"busy",
        ));
        run.extend_from_slice(&reply_with(calls[0].0, keel_wire::StatusCode::Ok, b"first"));
        host.write_all(&run).await.unwrap();
        let mut answers: Vec<Option<Delivery>> = (0..3).map(|_| None).collect();
        for _ in 0..1000 {
            for (answer, (_, cell)) in answers.iter_mut().zip(&calls) {
                if answer.is_none() {
                    *answer = cell.take();
                }
            }
            if answers.iter().all(Option::is_some) {
                break;
            }
            tokio::task::yield_now().await;
        }
        let body = |d: &Option<Delivery>| match d {
            Some(Delivery::Answer(Ok(Ok(replied)))) => match &replied.payload {
                Payload::Body(body) => body.clone(),
                other => panic!("not a body: {other:?}"),
            },
            other => panic!("not an answer: {other:?}"),
        };
        assert_eq!(&body(&answers[0])[..], b"first");
        assert_eq!(&body(&answers[2])[..], b"third");
        match &answers[1] {
            Some(Delivery::Answer(Ok(Err(status)))) => {
                assert_eq!(status.code(), StatusCode::Busy);
                assert_eq!(status.message(), "busy");
            }
            other => panic!("not a failure: {other:?}"),
        }
        assert_eq!(wire.calls_waiting(), 0);
    }

    /// The connection's timer takes the socket back from a call (`reclaim`: the reader set
    /// to the task, then the socket aimed at it) while a call alone in flight claims it in
    /// between. The call must hear its reply: the socket stays aimed at the call that reads
    /// it, not at the task, which does not read while a call does.
    #[tokio::test]
    async fn a_call_that_claims_the_socket_while_the_timer_takes_it_back_is_woken_by_its_reply() {
        let (wire, reading, mut host) = connection().await;
        let (call_id, cell) = call(&wire);
        let counter = Arc::new(Counter::default());
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut claimed = false;
        let mut poll =
            |cx: &mut Context<'_>| reading.poll_answer(&wire, call_id, &cell, &mut claimed, cx);

        // Alone in flight: the call reads the socket for itself.
        assert!(poll(&mut cx).is_pending());
        assert!(wire.with_reader(|r, _| *r == Reader::Call(call_id)));
        // `reclaim`, interleaved: the timer sets the reader to the task...
        assert!(take_socket_back(&wire));
        // ...the call (polled again, as a new call's first poll would be) claims it back...
        assert!(poll(&mut cx).is_pending());
        assert!(wire.with_reader(|r, _| *r == Reader::Call(call_id)));
        // ...and the timer, now holding the read side, hands the socket to the task.
        reading.lock().give_to_task(&wire);

        host.write_all(&reply(call_id)).await.unwrap();
        // Let the reader task run, whatever it was woken for.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            counter.0.load(Ordering::SeqCst) > 0,
            "the call reading the socket was not woken by its reply"
        );
        match poll(&mut cx) {
            Poll::Ready(Delivery::Answer(Ok(Ok(replied)))) => match replied.payload {
                Payload::Body(body) => assert_eq!(&body[..], b"answer"),
                other => panic!("not a body: {other:?}"),
            },
            other => panic!("no answer after the wake: {other:?}"),
        }
    }

    /// An answered call's cell is kept for the thread's next call, empty (no answer, no waker
    /// of the call before); one its slot still holds is not kept (the slot may still answer
    /// into it).
    #[test]
    fn an_answered_calls_cell_is_reused_empty_and_a_held_one_is_not() {
        let deadline = clock::now() + std::time::Duration::from_secs(60);
        let counter = Arc::new(Counter::default());
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);

        let (slot, cell) = ReplySlot::new(deadline);
        assert!(cell.poll(&mut cx).is_pending());
        slot.send(Delivery::TimedOut);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(matches!(
            cell.poll(&mut cx),
            Poll::Ready(Delivery::TimedOut)
        ));
        // Polled pending once more, so that the cell holds a waker when it is given back.
        assert!(cell.poll(&mut cx).is_pending());
        let answered = Arc::as_ptr(&cell);
        AnswerCell::recycle(cell);

        let (slot, cell) = ReplySlot::new(deadline);
        assert_eq!(
            Arc::as_ptr(&cell),
            answered,
            "the answered call's cell was not reused"
        );
        {
            let state = cell.lock();
            assert!(state.delivery.is_none() && state.waker.is_none());
        }
        // Its slot still holds it: not kept, and the next call gets another cell.
        AnswerCell::recycle(cell.clone());
        let (_, other) = ReplySlot::new(deadline);
        assert_ne!(Arc::as_ptr(&other), Arc::as_ptr(&cell));
        // The slot can still answer into it.
        slot.send(Delivery::TimedOut);
        assert!(matches!(cell.take(), Some(Delivery::TimedOut)));
    }
}
