//! The write side of a keel-wire connection, shared by the client and the host.
//!
//! A frame is written by the thread that has it (the caller, or the pool thread that produced a
//! reply) straight to the socket when the socket takes it without waiting. Only when the socket
//! would block does a flusher task take over and wait for it. Handing every frame to a writer
//! task instead costs one more thread wake per frame, and after an idle period each wake is
//! expensive (keel-lab's `idle` experiment measures it).
//!
//! One thread writes at a time, outside the lock: it takes the writer and the queued bytes,
//! writes, and then writes whatever was queued meanwhile. A thread that finds the writer taken
//! only queues its frame and returns, so replies produced together on several threads (pool
//! threads answering a batch) leave together, and no thread sleeps on the lock while another
//! is in a system call.
//!
//! A reader that has just read a batch of requests corks the sink ([`Sink::cork`]) while it
//! handles them, and uncorks it before it waits again: the replies produced meanwhile (by
//! handlers that completed at once, or by other threads) leave in one write, not one each.
//!
//! A client's request sent while other calls are in flight is queued and written a moment
//! later ([`Sink::push_soon`]): by a task that yields once, so that it writes after the tasks
//! ready on its worker have run. Under load those are the callers the last read answered,
//! each sending its next request, and their requests leave together in one write instead of
//! one system call each. A call alone in flight writes at once (its latency is the call's).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BytesMut};
use keel_wire::{Codec, Frame, WireError};
use parking_lot::{Mutex, MutexGuard};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use crate::transport::IoWriter;

type Writer = IoWriter;

/// Why a frame was not queued.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The connection is closed or closing.
    Closed,
    /// The frame cannot be encoded (too large for the peer); nothing was queued.
    Encode(WireError),
}

#[derive(Debug)]
pub(crate) struct Sink {
    state: Mutex<State>,
    /// Wakes the flusher when it has the writer to drive, or a close to perform.
    flusher: Notify,
    /// Wakes producers waiting for the queue to shrink (see [`Sink::wait_below`]).
    progress: Notify,
    /// How many producers are in [`Sink::wait_below`]: with none (nearly always), a write
    /// skips notifying `progress`, which takes a lock.
    waiting: AtomicUsize,
    /// Bytes handed to the socket since the start (see [`Sink::written_bytes`]).
    written: AtomicU64,
    /// A write was asked for by [`Sink::push_soon`] and the task that does it has not taken
    /// the request yet: later senders only queue.
    soon: AtomicBool,
    /// Wakes the task of [`Sink::pushes_soon`].
    push_soon: Notify,
}

struct State {
    /// `None` while a sender writes (see [`Sink::write_out`]) or the flusher owns the writer
    /// (waiting for the socket).
    writer: Option<Writer>,
    /// Encoded frames not yet written. Bounded in practice by calls in flight times the message
    /// limit, as every queued frame belongs to a call in flight.
    buf: BytesMut,
    /// An empty buffer with capacity: the writer takes `buf` and leaves this one for frames
    /// queued meanwhile, then keeps the one it wrote as the next spare (see [`State::take`]).
    /// Two buffers swapped cost no allocation and no split of one buffer's memory.
    spare: BytesMut,
    /// Bytes the writer's holder took from `buf` and is writing now.
    in_flight: usize,
    /// Bytes the writer took but could not flush yet (TLS buffers them): the flusher must
    /// flush even when `buf` is empty.
    unflushed: bool,
    codec: Codec,
    /// Bytes queued since the start (see [`Sink::queued_bytes`]).
    queued: u64,
    /// Frames are queued, not written, until [`Sink::uncork`].
    corked: bool,
    /// No more frames accepted.
    closing: bool,
    /// The flusher has shut the writer down, or writing failed.
    closed: bool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("buffered", &self.buf.len())
            .field("closing", &self.closing)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

/// The most capacity a written buffer keeps to be reused as the spare: a connection that once
/// sent a large message does not hold two buffers that size.
const MAX_SPARE: usize = 64 * 1024;

impl State {
    /// The queued bytes, for the writer to write outside the lock; frames queued meanwhile go
    /// into the spare buffer.
    fn take(&mut self) -> BytesMut {
        let spare = std::mem::take(&mut self.spare);
        let chunk = std::mem::replace(&mut self.buf, spare);
        self.in_flight = chunk.len();
        chunk
    }

    /// `chunk`, taken by [`State::take`], was written whole: it is kept, emptied, for the next
    /// frames (unless it grew large).
    fn written(&mut self, mut chunk: BytesMut) {
        chunk.clear();
        if chunk.capacity() > MAX_SPARE {
            return;
        }
        if self.buf.is_empty() {
            self.spare = std::mem::replace(&mut self.buf, chunk);
        } else {
            self.spare = chunk;
        }
    }

    /// `chunk`, taken by [`State::take`], was partly written: what the socket did not take
    /// goes first, before what was queued since.
    fn unwritten(&mut self, mut chunk: BytesMut) {
        chunk.extend_from_slice(&self.buf);
        self.buf.clear();
        self.spare = std::mem::replace(&mut self.buf, chunk);
    }
}

/// Outcome of writing without waiting.
enum Progress {
    Done,
    WouldBlock,
    Failed,
}

impl Sink {
    /// A sink over `writer`, encoding with `codec`, and the flusher task's future (to spawn).
    pub(crate) fn new(
        writer: impl Into<Writer>,
        codec: Codec,
    ) -> (
        Arc<Sink>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let sink = Arc::new(Sink {
            state: Mutex::new(State {
                writer: Some(writer.into()),
                // Grown by the first frames, and kept: an idle connection holds no send
                // buffer it never used (8 KiB each, most of an idle connection's memory).
                buf: BytesMut::new(),
                spare: BytesMut::new(),
                in_flight: 0,
                unflushed: false,
                codec,
                queued: 0,
                corked: false,
                closing: false,
                closed: false,
            }),
            flusher: Notify::new(),
            progress: Notify::new(),
            waiting: AtomicUsize::new(0),
            written: AtomicU64::new(0),
            soon: AtomicBool::new(false),
            push_soon: Notify::new(),
        });
        let flusher = flush_loop(sink.clone());
        (sink, flusher)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Queues `frame` and writes what the socket takes now. Never waits.
    pub(crate) fn send(&self, frame: &Frame) -> Result<(), SendError> {
        let mut st = self.lock();
        Self::encode(&mut st, frame)?;
        if !st.corked {
            self.write_out(st);
        }
        Ok(())
    }

    /// Holds what is sent from now on until [`Sink::uncork`] (see the module docs). Whoever
    /// corks must uncork before waiting for anything.
    pub(crate) fn cork(&self) {
        self.lock().corked = true;
    }

    /// Writes what was held since [`Sink::cork`], as far as the socket takes it, and writes
    /// through again.
    pub(crate) fn uncork(&self) {
        let mut st = self.lock();
        st.corked = false;
        if !st.buf.is_empty() {
            self.write_out(st);
        }
    }

    /// Queues `frame` without writing it: for callers holding a lock of their own, who then
    /// call [`Sink::push`] after releasing it. Frames keep the order they were queued in.
    pub(crate) fn enqueue(&self, frame: &Frame) -> Result<(), SendError> {
        Self::encode(&mut self.lock(), frame)
    }

    /// Writes what is queued, as far as the socket takes it without waiting.
    pub(crate) fn push(&self) {
        let st = self.lock();
        if !st.buf.is_empty() && !st.corked {
            self.write_out(st);
        }
    }

    /// Writes what is queued once the tasks ready on this worker have run (see the module
    /// docs), through the task of [`Sink::pushes_soon`], which the caller must run: senders
    /// meanwhile only queue, and their frames leave in the same write.
    pub(crate) fn push_soon(&self) {
        // Queued before this swap, so the task (which clears the flag before it writes)
        // writes this frame whenever the flag was already set.
        if !self.soon.swap(true, Ordering::AcqRel) {
            self.push_soon.notify_one();
        }
    }

    /// The task that writes what [`Sink::push_soon`] left queued: it yields once before each
    /// write, so that the tasks ready on its worker (or 61 polls of them, tokio's maintenance
    /// interval) run first. Runs until aborted.
    pub(crate) async fn pushes_soon(self: Arc<Self>) {
        loop {
            self.push_soon.notified().await;
            tokio::task::yield_now().await;
            self.soon.store(false, Ordering::Release);
            self.push();
        }
    }

    fn encode(st: &mut State, frame: &Frame) -> Result<(), SendError> {
        if st.closing || st.closed {
            return Err(SendError::Closed);
        }
        let State {
            codec, buf, queued, ..
        } = st;
        let before = buf.len();
        codec.encode(frame, buf).map_err(SendError::Encode)?;
        *queued += (buf.len() - before) as u64;
        Ok(())
    }

    /// Bytes queued since the start: a frame queued now has left once
    /// [`written_bytes`](Sink::written_bytes) reaches this.
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.lock().queued
    }

    /// Bytes handed to the socket since the start.
    pub(crate) fn written_bytes(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Encodes later frames for a peer taking messages of up to `bytes`.
    pub(crate) fn set_max_message_size(&self, bytes: u32) {
        self.lock().codec.set_max_message_size(bytes);
    }

    /// Bytes queued and not yet written (those being written included).
    pub(crate) fn unsent(&self) -> usize {
        let st = self.lock();
        st.buf.len() + st.in_flight
    }

    /// Stops accepting frames; what is queued is written, then the connection's write side is
    /// shut down.
    pub(crate) fn close(&self) {
        let mut st = self.lock();
        if st.closing {
            return;
        }
        st.closing = true;
        self.notify_progress();
        if st.writer.is_some() {
            // Hand the writer to the flusher, which flushes and shuts down.
            self.flusher.notify_one();
        }
    }

    /// Waits until at most `limit` bytes are queued (or the sink is closing). Streams call it
    /// before each chunk, so a fast producer on a slow socket queues a bounded amount.
    pub(crate) async fn wait_below(&self, limit: usize) {
        // Counted before the first look at the queue, under the lock: a writer that changes
        // the queue after that look sees the count (it reads it after taking the lock
        // itself), and notifies.
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _counted = Waiting(&self.waiting);
        loop {
            let progressed = self.progress.notified();
            {
                let st = self.lock();
                if st.closing || st.closed || st.buf.len() + st.in_flight <= limit {
                    return;
                }
            }
            progressed.await;
        }
    }

    /// Wakes the producers waiting in [`Sink::wait_below`], if there are any. Called after the
    /// queue changed under the lock.
    fn notify_progress(&self) {
        if self.waiting.load(Ordering::Relaxed) > 0 {
            self.progress.notify_waiters();
        }
    }

    /// Writes the queued bytes without waiting, outside the lock, then what was queued
    /// meanwhile, until none is left; hands over to the flusher if the socket is full. Returns
    /// at once if another thread holds the writer: that one writes these bytes too.
    fn write_out<'a>(&'a self, mut st: MutexGuard<'a, State>) {
        let mut wrote = false;
        loop {
            if st.buf.is_empty() || st.corked {
                break;
            }
            let Some(mut w) = st.writer.take() else {
                break; // A sender or the flusher holds the writer and will see the new bytes.
            };
            let mut chunk = st.take();
            drop(st);
            let progress = try_write(&mut w, &mut chunk, &self.written);
            st = self.lock();
            st.in_flight = 0;
            st.writer = Some(w);
            wrote = true;
            match progress {
                Progress::Done => st.written(chunk),
                Progress::WouldBlock => {
                    st.unwritten(chunk);
                    st.unflushed = true;
                    self.flusher.notify_one();
                    break;
                }
                Progress::Failed => {
                    st.closed = true;
                    st.buf.clear();
                    self.flusher.notify_one();
                    break;
                }
            }
        }
        // A close requested while we held the writer is the flusher's to perform (it found
        // the writer gone and left it to us).
        if st.closing && st.writer.is_some() {
            self.flusher.notify_one();
        }
        drop(st);
        if wrote {
            // A producer waiting for the queue to shrink (`wait_below`) hears of every write:
            // while corked, the queue can pass its bound with the socket idle.
            self.notify_progress();
        }
    }
}

/// Counts a producer in [`Sink::wait_below`] until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Writes as much of `buf` as the socket takes without waiting; what it took is removed from
/// `buf`.
fn try_write(w: &mut Writer, buf: &mut BytesMut, written: &AtomicU64) -> Progress {
    let mut cx = Context::from_waker(Waker::noop());
    let mut at = 0;
    while at < buf.len() {
        match Pin::new(&mut *w).poll_write(&mut cx, &buf[at..]) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Progress::Failed,
            Poll::Ready(Ok(n)) => {
                at += n;
                written.fetch_add(n as u64, Ordering::Release);
            }
            Poll::Pending => {
                buf.advance(at);
                return Progress::WouldBlock;
            }
        }
    }
    // All of it (nearly always, in one write): emptied in place, the buffer keeps its start and
    // all of its room for the next frames, where advancing past the bytes would leave it less
    // (and the next frame's encoding would have to move it back).
    buf.clear();
    match Pin::new(&mut *w).poll_flush(&mut cx) {
        Poll::Ready(Ok(())) => Progress::Done,
        Poll::Ready(Err(_)) => Progress::Failed,
        Poll::Pending => Progress::WouldBlock,
    }
}

/// Writes all of `bytes`, counting them into `written` as the socket takes them. False if
/// writing failed.
async fn write_counted(w: &mut Writer, bytes: &[u8], written: &AtomicU64) -> bool {
    let mut at = 0;
    while at < bytes.len() {
        match w.write(&bytes[at..]).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                at += n;
                written.fetch_add(n as u64, Ordering::Release);
            }
        }
    }
    true
}

/// Waits for the socket when a sender could not finish, and performs the close.
async fn flush_loop(sink: Arc<Sink>) {
    loop {
        sink.flusher.notified().await;
        // Take the writer and the bytes; senders meanwhile append to the (now empty) buffer.
        loop {
            let (mut w, chunk, closing) = {
                let mut st = sink.lock();
                if st.closed {
                    st.writer = None;
                    return;
                }
                let pending = !st.buf.is_empty() || st.unflushed;
                if !pending && !st.closing {
                    break; // A sender finished the job already; the writer stays in place.
                }
                let Some(w) = st.writer.take() else { break };
                st.unflushed = false;
                let chunk = st.take();
                (w, chunk, st.closing)
            };
            let ok = write_counted(&mut w, &chunk, &sink.written).await && w.flush().await.is_ok();
            let shut_down = {
                let mut st = sink.lock();
                st.in_flight = 0;
                sink.notify_progress();
                if !ok {
                    st.closed = true;
                    st.buf.clear();
                    return;
                }
                if st.buf.is_empty() && (closing || st.closing) {
                    true
                } else {
                    st.written(chunk);
                    // Senders may write directly again; if more arrived, go round again.
                    let more = !st.buf.is_empty();
                    st.writer = Some(w);
                    if more {
                        continue;
                    }
                    break;
                }
            };
            if shut_down {
                let _ = w.shutdown().await;
                sink.lock().closed = true;
                sink.notify_progress();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Io;
    use keel_wire::{Cancel, Limits};
    use tokio::io::{AsyncRead, ReadBuf};

    /// Like a TLS stream: takes bytes at once but sends them only when flushed, and cannot
    /// flush the first time it is asked.
    struct HoldsBack {
        held: Vec<u8>,
        sent: Arc<Mutex<Vec<u8>>>,
        flushes: usize,
    }

    /// The test writers are never read from.
    macro_rules! never_reads {
        ($($t:ty),*) => {$(
            impl AsyncRead for $t {
                fn poll_read(
                    self: Pin<&mut Self>,
                    _: &mut Context<'_>,
                    _: &mut ReadBuf<'_>,
                ) -> Poll<std::io::Result<()>> {
                    Poll::Pending
                }
            }
        )*};
    }

    never_reads!(HoldsBack, Trickles, Counts);

    impl AsyncWrite for HoldsBack {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.held.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            self.flushes += 1;
            if self.flushes == 1 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let held = std::mem::take(&mut self.held);
            self.sent.lock().extend(held);
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl Io for HoldsBack {}

    #[tokio::test]
    async fn bytes_the_writer_holds_back_are_flushed_without_another_send() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let io: Box<dyn Io> = Box::new(HoldsBack {
            held: Vec::new(),
            sent: sent.clone(),
            flushes: 0,
        });
        let (_rd, wr) = tokio::io::split(io);
        let (sink, flusher) = Sink::new(wr, Codec::new(Limits::default()));
        tokio::spawn(flusher);
        sink.send(&Frame::Cancel(Cancel { call_id: 1 })).unwrap();
        for _ in 0..1000 {
            if !sent.lock().is_empty() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the frame stayed in the writer's buffer");
    }

    /// A socket that takes a few bytes, then is full until the flusher comes back for the rest.
    /// While its first bytes are written, it sends another frame through the sink, as another
    /// thread would (queued behind the one being written).
    struct Trickles {
        sent: Arc<Mutex<Vec<u8>>>,
        full_next: bool,
        meanwhile: Meanwhile,
    }

    /// The frame [`Trickles`] sends through the sink while it is being written to.
    type Meanwhile = Arc<Mutex<Option<(Arc<Sink>, Frame)>>>;

    impl AsyncWrite for Trickles {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            if std::mem::take(&mut self.full_next) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.full_next = true;
            if let Some((sink, frame)) = self.meanwhile.lock().take() {
                sink.send(&frame).unwrap();
            }
            let n = buf.len().min(7);
            self.sent.lock().extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl Io for Trickles {}

    /// A frame a full socket left half written goes first, then the frames queued while it
    /// was written and those sent after: every frame whole, in the order sent.
    #[tokio::test]
    async fn a_half_written_frame_goes_first_then_what_was_queued_behind_it() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let meanwhile = Arc::new(Mutex::new(None));
        let io: Box<dyn Io> = Box::new(Trickles {
            sent: sent.clone(),
            full_next: false,
            meanwhile: meanwhile.clone(),
        });
        let (_rd, wr) = tokio::io::split(io);
        let (sink, flusher) = Sink::new(wr, Codec::new(Limits::default()));
        tokio::spawn(flusher);
        let frames: Vec<Frame> = (1..=20)
            .map(|call_id| Frame::Cancel(Cancel { call_id }))
            .collect();
        *meanwhile.lock() = Some((sink.clone(), frames[1].clone()));
        sink.send(&frames[0]).unwrap();
        for f in &frames[2..] {
            sink.send(f).unwrap();
            tokio::task::yield_now().await;
        }
        let mut expected = BytesMut::new();
        let codec = Codec::new(Limits::default());
        for f in &frames {
            codec.encode(f, &mut expected).unwrap();
        }
        for _ in 0..10_000 {
            if sent.lock().len() >= expected.len() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(&sent.lock()[..], &expected[..]);
    }

    /// A socket that takes everything, and counts the writes it was given.
    struct Counts {
        sent: Arc<Mutex<Vec<u8>>>,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncWrite for Counts {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.writes.fetch_add(1, Ordering::Relaxed);
            self.sent.lock().extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl Io for Counts {}

    /// A sink over a [`Counts`] with its flusher and its [`Sink::pushes_soon`] task running,
    /// what it was sent and how many writes.
    fn counting_sink() -> (Arc<Sink>, Arc<Mutex<Vec<u8>>>, Arc<AtomicUsize>) {
        let (sent, writes) = (
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(AtomicUsize::new(0)),
        );
        let io: Box<dyn Io> = Box::new(Counts {
            sent: sent.clone(),
            writes: writes.clone(),
        });
        let (_rd, wr) = tokio::io::split(io);
        let (sink, flusher) = Sink::new(wr, Codec::new(Limits::default()));
        tokio::spawn(flusher);
        tokio::spawn(sink.clone().pushes_soon());
        (sink, sent, writes)
    }

    fn encoded(frames: impl IntoIterator<Item = Frame>) -> BytesMut {
        let (codec, mut bytes) = (Codec::new(Limits::default()), BytesMut::new());
        for f in frames {
            codec.encode(&f, &mut bytes).unwrap();
        }
        bytes
    }

    /// Frames queued with `push_soon` by tasks ready together leave in one write, after those
    /// tasks ran, in the order queued.
    #[tokio::test]
    async fn frames_pushed_soon_by_tasks_ready_together_leave_in_one_write() {
        let (sink, sent, writes) = counting_sink();
        let senders: Vec<_> = (1..=10)
            .map(|call_id| {
                let sink = sink.clone();
                tokio::spawn(async move {
                    sink.enqueue(&Frame::Cancel(Cancel { call_id })).unwrap();
                    sink.push_soon();
                })
            })
            .collect();
        for s in senders {
            s.await.unwrap();
        }
        let expected = encoded((1..=10).map(|call_id| Frame::Cancel(Cancel { call_id })));
        for _ in 0..1000 {
            if sent.lock().len() >= expected.len() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(&sent.lock()[..], &expected[..]);
        assert_eq!(writes.load(Ordering::Relaxed), 1);
    }

    /// Whoever finds a write already asked for only queues: on several threads, with the task
    /// clearing the request meanwhile, no frame is left behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_frame_pushed_soon_is_left_queued() {
        let (sink, sent, _) = counting_sink();
        let senders: Vec<_> = (0..8u64)
            .map(|t| {
                let sink = sink.clone();
                tokio::spawn(async move {
                    for i in 0..500 {
                        sink.enqueue(&Frame::Cancel(Cancel {
                            call_id: t * 1000 + i,
                        }))
                        .unwrap();
                        sink.push_soon();
                        if i % 7 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.await.unwrap();
        }
        let whole = encoded((0..8u64).flat_map(|t| {
            (0..500).map(move |i| {
                Frame::Cancel(Cancel {
                    call_id: t * 1000 + i,
                })
            })
        }))
        .len();
        for _ in 0..100_000 {
            if sent.lock().len() >= whole {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(sent.lock().len(), whole);
    }
}
