//! The IO watchdog of an HTTP connection: a request head that starts arriving and does not
//! finish in time (slowloris), output the peer does not read, when bytes last moved, and when
//! the connection's output was last flushed (for [`cut`](super::cut)).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{ready, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::first_line::{FirstLine, Verdict};
use crate::transport::Io;

/// Follows an HTTP connection's bytes: the request head an HTTP/1.1 connection is receiving,
/// so that one that starts arriving and does not finish within the frame timeout closes the
/// connection (a head "starts" when bytes arrive while no request is in progress; it ends when
/// the request reaches [`handle`](super::route::handle)); output the peer does not take; and
/// when bytes last moved.
/// (A client that pipelines its next request behind a streamed answer longer than the frame
/// timeout is closed too; keel's client and browsers do not pipeline.)
#[derive(Debug)]
pub(in crate::bindings::http) struct HeadWatch {
    epoch: std::time::Instant,
    /// Since when writing has been waiting for the peer to read, in ms since `epoch` (plus
    /// one); 0 while output flows.
    write_blocked: AtomicU64,
    /// When bytes last moved either way, in ms since `epoch`.
    last_io: AtomicU64,
    /// When bytes arrived with no request in progress, in ms since `epoch` (plus one); 0 for
    /// none.
    started: AtomicU64,
    /// Requests in progress.
    in_request: AtomicUsize,
    /// HTTP/2: its own framing, nothing to watch.
    h2: AtomicBool,
    /// Woken when a head starts.
    armed: Notify,
    /// Flushes of the connection's output that completed. hyper flushes the IO only once what
    /// it had taken to send is written (HTTP/1.1: its buffer; HTTP/2: the frames its codec
    /// holds), so each one means those bytes were handed to the socket.
    flushes: AtomicU64,
    /// Whether anyone waits in `flush_waiting` (read without the lock on every flush).
    flush_waiters: AtomicUsize,
    /// Woken at the next completed flush.
    flush_waiting: Mutex<Vec<Waker>>,
    /// The connection's task: woken, it flushes.
    connection: OnceLock<Waker>,
}

impl HeadWatch {
    pub(super) fn new(h2: bool) -> HeadWatch {
        HeadWatch {
            epoch: std::time::Instant::now(),
            write_blocked: AtomicU64::new(0),
            last_io: AtomicU64::new(0),
            started: AtomicU64::new(0),
            in_request: AtomicUsize::new(0),
            h2: AtomicBool::new(h2),
            armed: Notify::new(),
            flushes: AtomicU64::new(0),
            flush_waiters: AtomicUsize::new(0),
            flush_waiting: Mutex::new(Vec::new()),
            connection: OnceLock::new(),
        }
    }

    /// Remembers the connection's task (the one that polls hyper's connection, so that
    /// [`nudge_connection`](Self::nudge_connection) can make it flush).
    pub(super) fn set_connection_task(&self, waker: &Waker) {
        let _ = self.connection.set(waker.clone());
    }

    /// A flush of the connection's output completed.
    fn flushed(&self) {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        if self.flush_waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        let waiting = {
            let mut w = self.flush_waiting.lock().unwrap_or_else(|e| e.into_inner());
            self.flush_waiters.store(0, Ordering::SeqCst);
            std::mem::take(&mut *w)
        };
        waiting.into_iter().for_each(Waker::wake);
    }

    /// How many flushes of the connection's output have completed.
    pub(super) fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::SeqCst)
    }

    /// Wakes `waker` at the next completed flush. Returns [`flushes`](Self::flushes) as seen
    /// after registering: if it moved since the caller last looked, the wake may have been
    /// missed, so look again.
    pub(super) fn wake_at_next_flush(&self, waker: &Waker) -> u64 {
        {
            let mut w = self.flush_waiting.lock().unwrap_or_else(|e| e.into_inner());
            if !w.iter().any(|x| x.will_wake(waker)) {
                w.push(waker.clone());
            }
            self.flush_waiters.fetch_add(1, Ordering::SeqCst);
        }
        self.flushes()
    }

    /// Wakes the connection's task, which flushes whenever it runs (HTTP/1.1 after each pass
    /// over the connection, HTTP/2 whenever it has nothing to read).
    pub(super) fn nudge_connection(&self) {
        if let Some(c) = self.connection.get() {
            c.wake_by_ref();
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A write (or flush) took bytes (`true`) or had to wait for the peer (`false`).
    fn wrote(&self, progress: bool) {
        if progress {
            self.write_blocked.store(0, Ordering::Relaxed);
            self.last_io.store(self.now_ms(), Ordering::Relaxed);
        } else if self.write_blocked.load(Ordering::Relaxed) == 0 {
            self.write_blocked
                .store(self.now_ms() + 1, Ordering::Relaxed);
        }
    }

    /// Whether output has waited for the peer to read for `timeout` without any progress.
    pub(super) fn write_stalled(&self, timeout: Duration) -> bool {
        let since = self.write_blocked.load(Ordering::Relaxed);
        since != 0 && (self.now_ms() + 1).saturating_sub(since) >= timeout.as_millis() as u64
    }

    /// Whether no byte moved either way for `timeout`.
    pub(super) fn quiet(&self, timeout: Duration) -> bool {
        self.now_ms()
            .saturating_sub(self.last_io.load(Ordering::Relaxed))
            >= timeout.as_millis() as u64
    }

    /// Whether the connection speaks HTTP/2 (by ALPN, or its preface arrived).
    pub(super) fn is_h2(&self) -> bool {
        self.h2.load(Ordering::Relaxed)
    }

    /// Bytes arrived (`first` is what was read).
    fn received(&self, first: &[u8]) {
        self.last_io.store(self.now_ms(), Ordering::Relaxed);
        if self.h2.load(Ordering::Relaxed) {
            return;
        }
        // HTTP/2's preface ("PRI * HTTP/2.0..."): no HTTP/1.1 request starts with `PRI`.
        if first.starts_with(b"PRI") {
            self.h2.store(true, Ordering::Relaxed);
            return;
        }
        if self.in_request.load(Ordering::Acquire) == 0 && self.started.load(Ordering::Relaxed) == 0
        {
            let now = self.epoch.elapsed().as_millis() as u64 + 1;
            self.started.store(now, Ordering::Release);
            self.armed.notify_one();
        }
    }

    /// What a write's outcome says about the peer reading.
    fn wrote_as(&self, polled: &Poll<std::io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(n)) => self.wrote(*n > 0),
            Poll::Pending => self.wrote(false),
            Poll::Ready(Err(_)) => {}
        }
    }

    /// A request's head is complete; the guard marks its end.
    pub(super) fn request(self: &Arc<Self>) -> RequestGuard {
        self.in_request.fetch_add(1, Ordering::AcqRel);
        self.started.store(0, Ordering::Release);
        RequestGuard(self.clone())
    }

    /// Completes when a head has been arriving for longer than `timeout`.
    pub(super) async fn overdue(&self, timeout: Duration) {
        loop {
            let started = self.started.load(Ordering::Acquire);
            if started == 0 {
                self.armed.notified().await;
                continue;
            }
            let due = self.epoch + Duration::from_millis(started - 1) + timeout;
            tokio::time::sleep_until(due.into()).await;
            if self.started.load(Ordering::Acquire) == started {
                return;
            }
        }
    }
}

/// A request in progress on a watched connection.
pub(super) struct RequestGuard(Arc<HeadWatch>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.in_request.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's byte stream, reporting what arrives to its [`HeadWatch`].
pub(super) struct Watched {
    io: Box<dyn Io>,
    watch: Arc<HeadWatch>,
    first_line: Sniff,
}

/// Where a connection is with its first line ([`first_line`](super::first_line)).
enum Sniff {
    /// Held back from hyper until it ends.
    Holding(FirstLine),
    /// Passed: hyper reads this first, from the offset.
    Releasing(Vec<u8>, usize),
    /// Nothing (more) to hold: reads go straight through.
    Off,
}

impl Watched {
    /// `io`, reporting to `watch`. `sniff`: the protocol is not agreed (no ALPN), so the first
    /// line must be HTTP/1 or HTTP/2's preface, or the connection is closed.
    pub(super) fn new(io: Box<dyn Io>, watch: Arc<HeadWatch>, sniff: bool) -> Watched {
        let first_line = if sniff {
            Sniff::Holding(FirstLine::default())
        } else {
            Sniff::Off
        };
        Watched {
            io,
            watch,
            first_line,
        }
    }

    /// Reads until the first line's verdict, then hands it to the caller (a
    /// [`Sniff::Holding`] connection only).
    fn poll_first_line(
        &mut self,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            match &mut self.first_line {
                Sniff::Off => return Pin::new(self).poll_read(cx, buf),
                Sniff::Releasing(held, at) => {
                    let n = (held.len() - *at).min(buf.remaining());
                    buf.put_slice(&held[*at..*at + n]);
                    *at += n;
                    if *at == held.len() {
                        self.first_line = Sniff::Off;
                    }
                    return Poll::Ready(Ok(()));
                }
                Sniff::Holding(line) => {
                    let mut chunk = [0u8; 2048];
                    let mut read = ReadBuf::new(&mut chunk);
                    ready!(Pin::new(&mut self.io).poll_read(cx, &mut read))?;
                    let got = read.filled();
                    let verdict = if got.is_empty() {
                        // The end: hyper gets what there is, then the end.
                        Verdict::Pass
                    } else {
                        self.watch.received(got);
                        line.feed(got)
                    };
                    match verdict {
                        Verdict::Wait => {}
                        Verdict::Pass => {
                            let Sniff::Holding(line) =
                                std::mem::replace(&mut self.first_line, Sniff::Off)
                            else {
                                unreachable!("matched above")
                            };
                            let held = line.into_held();
                            if held.is_empty() {
                                // The end, before any byte: that is the caller's too.
                                return Poll::Ready(Ok(()));
                            }
                            self.first_line = Sniff::Releasing(held, 0);
                        }
                        Verdict::KeelWire => {
                            // Best effort, once: the connection closes whatever happens.
                            let text = "this port speaks HTTP, not keel-wire. Connect with an \
                                        http:// URL, or keep tcp:// and use the port where the \
                                        host serves keel-wire";
                            let answer = crate::transport::sniff::http_refusal(None, text);
                            let _ = Pin::new(&mut self.io).poll_write(cx, &answer);
                            let _ = Pin::new(&mut self.io).poll_shutdown(cx);
                            return Poll::Ready(Err(std::io::Error::new(
                                std::io::ErrorKind::InvalidData,
                                "keel-wire's hello at an HTTP port",
                            )));
                        }
                        Verdict::Close => {
                            return Poll::Ready(Err(std::io::Error::new(
                                std::io::ErrorKind::InvalidData,
                                "neither an HTTP/1 request nor HTTP/2's preface",
                            )))
                        }
                    }
                }
            }
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !matches!(self.first_line, Sniff::Off) {
            return self.poll_first_line(cx, buf);
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.received(&buf.filled()[before..]);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch.wrote_as(&polled);
        polled
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        match polled {
            Poll::Ready(Ok(())) => {
                self.watch.wrote(true);
                self.watch.flushed();
            }
            Poll::Pending => self.watch.wrote(false),
            Poll::Ready(Err(_)) => {}
        }
        polled
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch.wrote_as(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
