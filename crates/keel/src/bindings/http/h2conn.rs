//! The client's HTTP/2 connections, on the `h2` crate directly.
//!
//! hyper's HTTP/2 client passes every request through a channel to its connection task, which
//! spawns a task per request to wait for the response and hands the response back through
//! another channel: three task hops and a spawn per call. Here the caller opens the stream,
//! sends a buffered body and awaits the response itself; the connection's task only reads and
//! writes frames. A streamed upload is the one thing still sent from a task of its own
//! ([`pipe`]), since it must flow while the caller reads the answer.
//!
//! What hyper did for keel and this module now does: the connection's settings (windows,
//! header list size, send buffer), keepalive pings ([`drive`], [`Counted`]), and cancellation:
//! a call dropped before its answer ends resets its stream (h2 does so when the last handle to
//! a stream goes; the upload's task is told by [`UploadGuard`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::{Connection, SendRequest};
use h2::{Ping, RecvStream, SendStream};
use http_body::{Body as _, Frame, SizeHint};
use keel_wire::Keepalive;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use super::body::Body;

/// HTTP/2's connection settings as keel's client sends them. The windows are keel's (large,
/// so a call's body is not held up by WINDOW_UPDATEs); the rest are the defaults keel's client
/// had under hyper.
pub(super) fn builder() -> h2::client::Builder {
    let mut b = h2::client::Builder::new();
    b.initial_window_size(super::H2_STREAM_WINDOW)
        .initial_connection_window_size(super::H2_CONNECTION_WINDOW)
        // Streams opened before the host's SETTINGS say how many it allows.
        .initial_max_send_streams(100)
        .max_header_list_size(16 << 10)
        .max_frame_size(16 << 10)
        .max_send_buffer_size(1 << 20)
        .max_local_error_reset_streams(Some(1024))
        .enable_push(false);
    b
}

/// Counts the bytes read from a connection and stamps the last read, so its keepalive knows
/// whether and when the host was last heard from: a connection receiving frames needs no PING.
pub(super) struct Counted<T> {
    io: T,
    /// Bytes read so far, and when the last read was.
    pub(super) read: Arc<Heard>,
}

/// What a connection heard from its host: bytes read, and when it last read any.
#[derive(Debug)]
pub(super) struct Heard {
    bytes: AtomicU64,
    /// When the last read was, in nanoseconds since `epoch`.
    at_nanos: AtomicU64,
    epoch: Instant,
}

impl Heard {
    fn new() -> Heard {
        Heard {
            bytes: AtomicU64::new(0),
            at_nanos: AtomicU64::new(0),
            epoch: crate::runtime::clock::now(),
        }
    }

    /// Bytes read so far.
    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// When the host was last heard from (the connection's start, before any read).
    fn last(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.at_nanos.load(Ordering::Relaxed))
    }
}

impl<T> Counted<T> {
    /// `io`, counting what is read from it.
    pub(super) fn new(io: T) -> Counted<T> {
        Counted {
            io,
            read: Arc::new(Heard::new()),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        let n = buf.filled().len() - before;
        if n > 0 {
            let heard = &self.read;
            heard.bytes.fetch_add(n as u64, Ordering::Relaxed);
            let at = crate::runtime::clock::now().saturating_duration_since(heard.epoch);
            heard
                .at_nanos
                .store(at.as_nanos() as u64, Ordering::Relaxed);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The connection's driver: reads and writes its frames until it closes.
///
/// With keepalive configured it also watches the host by keel-wire's rule
/// ([`Keepalive::busy_ping_at`], [`Keepalive::busy_dead_at`]; PROTOCOL.md "Liveness"): a PING
/// after an interval in which nothing arrived, and, while calls wait for answers, after a
/// quarter second of silence. A host that answers nothing after the PING, for the timeout (or, while
/// calls wait, until a second less 10 ms of silence, the PING given at least 740 ms) ends the
/// driver. That closes the connection and fails its calls as a lost connection; the next call
/// reconnects. A connection that is receiving needs no PING, and a PONG held up behind DATA
/// still in flight does not count as silence. While calls still wait after an answered PING
/// and none started since, the next waits for the interval (and at least
/// [`keel_wire::BUSY_PING_SPACING`]), so a long call does not make PINGs a host would count as
/// abuse.
pub(super) async fn drive<T>(
    mut conn: Connection<Counted<T>, Bytes>,
    heard: Arc<Heard>,
    waiting: Arc<crate::bindings::Waiting>,
    keepalive: Option<Keepalive>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let pings = conn.ping_pong();
    let conn = LetOthersFirst::new(conn);
    let (Some(keepalive), Some(mut pings)) = (keepalive, pings) else {
        let _ = conn.await;
        return;
    };
    let pinger = async move {
        // The last PING answered, and the calls started by then.
        let mut answered: Option<(Instant, u64)> = None;
        loop {
            let busy = waiting.busy();
            let last = heard.last();
            let due = if busy {
                // The spacing counts from an answered PING unless a call started since.
                let spaced_from = answered
                    .filter(|&(_, started)| waiting.started() == started)
                    .map(|(at, _)| at);
                keepalive.busy_ping_at(last, None, spaced_from)
            } else {
                last + keepalive.interval
            };
            let now = crate::runtime::clock::now();
            if now < due {
                tokio::select! {
                    () = tokio::time::sleep_until(crate::runtime::clock::to_tokio(due)) => {}
                    () = waiting.until_call_starts(), if !busy => {}
                }
                continue;
            }
            let mut seen = heard.bytes();
            let sent = now;
            let started = waiting.started();
            let mut dead_at = if busy {
                keepalive.busy_dead_at(last, sent, None)
            } else {
                sent + keepalive.timeout
            };
            let pong = pings.ping(Ping::opaque());
            tokio::pin!(pong);
            loop {
                let until = crate::runtime::clock::to_tokio(dead_at);
                match tokio::time::timeout_at(until, &mut pong).await {
                    Ok(Ok(_pong)) => break,
                    // The connection ended: so does its driver.
                    Ok(Err(_)) => return,
                    // Something arrived after the PING: the host is alive; wait on for the
                    // PONG, behind what it sends.
                    Err(_) if heard.bytes() != seen => {
                        seen = heard.bytes();
                        dead_at = crate::runtime::clock::now() + keepalive.timeout;
                    }
                    Err(_) => return,
                }
            }
            answered = Some((crate::runtime::clock::now(), started));
        }
    };
    tokio::select! {
        _ = conn => {}
        () = pinger => {}
    }
}

/// A future that, each time it is woken, first lets the tasks already waiting to run go ahead:
/// it wakes itself and returns `Pending` once, then polls the inner future on its next poll.
/// tokio runs a task woken by the task running now before anything else on that worker (its
/// "LIFO slot"), but reschedules a task that woke itself at the back of the queue, as a yield.
///
/// For a connection's driver: when a read wakes the callers of a batch of answers, the first
/// caller to send its next request wakes the driver, which would then run next and write that
/// one request; the next caller wakes it again, and so on: a write, a segment and a read on the
/// host per call. Run after the callers instead, the driver writes their requests together
/// (`callbench --http2 --async-op`, 64 in flight: 0.35–0.41 writes per call → 0.03). A call
/// alone pays one more poll of the driver's task, not a system call or a thread wake-up.
struct LetOthersFirst<F> {
    inner: Pin<Box<F>>,
    /// The last poll was the yield: poll the inner future this time.
    yielded: bool,
}

impl<F: Future> LetOthersFirst<F> {
    /// `inner`, polled after the tasks that are ready when it is woken.
    fn new(inner: F) -> LetOthersFirst<F> {
        LetOthersFirst {
            inner: Box::pin(inner),
            yielded: false,
        }
    }
}

impl<F: Future> Future for LetOthersFirst<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.yielded = false;
        self.inner.as_mut().poll(cx)
    }
}

/// Sends a request with a body of `body`'s frames; returns the response's future, and a guard
/// that keeps the upload going while it lives (drop it when the answer is read, or the call is
/// dropped, and the upload's stream is reset). A buffered body goes out with the request, in
/// the caller's task; a streamed one from a task of its own, spawned by `spawn`.
pub(super) fn send(
    sender: &mut SendRequest<Bytes>,
    request: http::Request<()>,
    body: RequestBody,
    spawn: impl FnOnce(Pin<Box<dyn Future<Output = ()> + Send>>),
) -> Result<(h2::client::ResponseFuture, Option<UploadGuard>), h2::Error> {
    match body {
        RequestBody::Full(bytes) if bytes.is_empty() => {
            let (response, _) = sender.send_request(request, true)?;
            Ok((response, None))
        }
        RequestBody::Full(bytes) => {
            let (response, mut stream) = sender.send_request(request, false)?;
            // h2 buffers what the stream's window does not take yet and sends it as credit
            // arrives. It fails only on a stream already ended (the host refused or reset
            // it, or the connection closed): the response's future then says why.
            let _ = stream.send_data(bytes, true);
            Ok((response, None))
        }
        RequestBody::Stream(body) => {
            let (response, stream) = sender.send_request(request, false)?;
            // The task watches its end of the channel close: the guard's end dropped.
            let (watch, guard) = oneshot::channel();
            spawn(Box::pin(pipe(body, stream, watch)));
            Ok((response, Some(UploadGuard { _watched: guard })))
        }
    }
}

/// A request's body, as the client sends it.
pub(super) enum RequestBody {
    /// All of it at once, with the request.
    Full(Bytes),
    /// Chunk by chunk as the stream gives them and flow control allows.
    Stream(Body),
}

impl RequestBody {
    /// The body as hyper sends it (HTTP/1.1).
    pub(super) fn into_body(self) -> Body {
        match self {
            RequestBody::Full(bytes) => super::body::full(bytes),
            RequestBody::Stream(body) => body,
        }
    }
}

/// Keeps a streamed upload going; dropped, the upload stops and its stream is reset.
#[derive(Debug)]
pub(super) struct UploadGuard {
    /// Never read: dropping it closes the channel, which is what the task watches.
    _watched: oneshot::Receiver<()>,
}

/// Sends `body`'s chunks on `stream` as the stream's window allows, until the body ends, the
/// host resets the stream, or the guard is dropped (the stream is then reset with CANCEL).
/// Empty chunks are not sent: an empty DATA frame without END_STREAM is noise a host may count
/// against the connection. A body that fails resets the stream, so the host never takes a
/// part for the whole.
async fn pipe(mut body: Body, mut stream: SendStream<Bytes>, mut cancelled: oneshot::Sender<()>) {
    loop {
        let frame = tokio::select! {
            biased;
            () = cancelled.closed() => {
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
            reset = std::future::poll_fn(|cx| stream.poll_reset(cx)) => {
                let _ = reset;
                return;
            }
            frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)) => frame,
        };
        let data = match frame {
            None => {
                let _ = stream.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(_)) => {
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue, // Trailers: keel's bodies have none.
            },
        };
        if data.is_empty() {
            continue;
        }
        let eos = body.is_end_stream();
        // Claim only a byte up front: the chunk is in hand, and h2 raises the claim to what is
        // buffered, so a stream waiting for credit does not pin the connection's window.
        stream.reserve_capacity(1);
        loop {
            if stream.capacity() > 0 {
                break;
            }
            let got = tokio::select! {
                biased;
                () = cancelled.closed() => {
                    stream.send_reset(h2::Reason::CANCEL);
                    return;
                }
                got = std::future::poll_fn(|cx| stream.poll_capacity(cx)) => got,
            };
            match got {
                Some(Ok(_)) => {}
                // Reset, or the connection closed.
                Some(Err(_)) | None => return,
            }
        }
        if stream.send_data(data, eos).is_err() || eos {
            return;
        }
    }
}

/// A response's body, as keel's body readers take it: DATA frames as they arrive, their
/// window given back as they are taken; the size the `content-length` header declares, so a
/// reader can refuse an oversized body before reading it. Holds the call's [`UploadGuard`],
/// so a streamed upload runs as long as its answer is being read.
pub(super) struct RecvBody {
    stream: RecvStream,
    declared: Option<u64>,
    _upload: Option<UploadGuard>,
}

impl RecvBody {
    /// The body of a response whose head declared `declared` bytes.
    pub(super) fn new(
        stream: RecvStream,
        declared: Option<u64>,
        upload: Option<UploadGuard>,
    ) -> RecvBody {
        RecvBody {
            stream,
            declared,
            _upload: upload,
        }
    }
}

impl http_body::Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        match ready!(this.stream.poll_data(cx)) {
            Some(Ok(data)) => {
                // Taken from h2's buffer: the host may send as much again.
                let _ = this.stream.flow_control().release_capacity(data.len());
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => match ready!(this.stream.poll_trailers(cx)) {
                Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
                Ok(None) => Poll::Ready(None),
                Err(e) => Poll::Ready(Some(Err(e))),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stream.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.declared {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// Whether a request failed because the host refused it unprocessed: its stream is above the
/// last one a GOAWAY from the host named, or the host reset it with REFUSED_STREAM. Either
/// way the host did nothing with it (RFC 9113 §6.8, §8.7), and it may be sent again.
pub(super) fn refused_unprocessed(e: &h2::Error) -> bool {
    e.is_remote() && (e.is_go_away() || e.reason() == Some(h2::Reason::REFUSED_STREAM))
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::sync::Mutex;
    use std::task::Waker;

    use tokio::sync::Notify;

    use super::*;

    /// `producers` tasks, released at once, each hand an item to a consumer and wake it (as
    /// callers hand requests to a connection's driver); returns the sizes of the batches the
    /// consumer took, on a runtime with one worker (where tokio's next-task slot decides).
    fn batches(producers: usize, let_others_first: bool) -> Vec<usize> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        rt.block_on(async {
            let items = Arc::new(Mutex::new(0usize));
            let waker: Arc<Mutex<Option<Waker>>> = Arc::default();
            let go = Arc::new(Notify::new());
            // Every task, the consumer included, says when it waits.
            let (waiting, mut all_waiting) = tokio::sync::mpsc::unbounded_channel();
            let consumer = {
                let (items, waker) = (items.clone(), waker.clone());
                let mut registered = Some(waiting.clone());
                let mut taken = 0;
                let mut sizes = Vec::new();
                poll_fn(move |cx| {
                    *waker.lock().unwrap() = Some(cx.waker().clone());
                    if let Some(r) = registered.take() {
                        r.send(()).unwrap();
                    }
                    let n = std::mem::take(&mut *items.lock().unwrap());
                    if n > 0 {
                        sizes.push(n);
                        taken += n;
                    }
                    if taken == producers {
                        Poll::Ready(std::mem::take(&mut sizes))
                    } else {
                        Poll::Pending
                    }
                })
            };
            let consumer = if let_others_first {
                tokio::spawn(LetOthersFirst::new(consumer))
            } else {
                tokio::spawn(consumer)
            };
            for _ in 0..producers {
                let (items, waker, go) = (items.clone(), waker.clone(), go.clone());
                let waiting = waiting.clone();
                tokio::spawn(async move {
                    let released = go.notified();
                    tokio::pin!(released);
                    released.as_mut().enable();
                    waiting.send(()).unwrap();
                    released.await;
                    *items.lock().unwrap() += 1;
                    let consumer = waker.lock().unwrap().clone();
                    consumer.expect("the consumer waits").wake();
                });
            }
            for _ in 0..=producers {
                all_waiting.recv().await.unwrap();
            }
            // Released together, from a task on the worker, as a read wakes callers.
            tokio::spawn(async move { go.notify_waiters() });
            consumer.await.unwrap()
        })
    }

    #[test]
    fn a_woken_driver_takes_what_the_ready_tasks_hand_it_together() {
        let together = batches(32, true);
        assert_eq!(together.iter().sum::<usize>(), 32);
        assert!(together.len() <= 3, "batches {together:?}");
        // Without it, tokio runs the driver after each producer: one item at a time.
        let apart = batches(32, false);
        assert!(apart.len() >= 16, "batches {apart:?}");
    }
}
