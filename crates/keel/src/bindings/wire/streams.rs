//! Streamed transfer on a keel-wire connection, shared by the host and the client.
//!
//! Each streamed direction of a call is either *inbound* (we consume: StreamData arrives, we
//! grant WindowUpdates as the application reads) or *outbound* (we produce: a pump task sends
//! StreamData within the credit the peer granted). The window bounds what one stream can have
//! in flight or buffered, so memory stays bounded whatever the stream's size.
//!
//! A consumer that stops early sends StopSending; the producer stops and the connection carries
//! on. Frames for a stream we no longer know are dropped: they may have been in flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_wire::{
    Frame, RecvWindow, SendWindow, StatusCode, StopSending, StreamData, StreamEnd, WindowConfig,
    WindowUpdate, DEFAULT_INITIAL_WINDOW,
};

use crate::core::status::StatusCode as KeelCode;
use tokio::sync::{mpsc, Notify};

use crate::core::error::{Error, Kind};
use crate::core::stream::{ByteStream, Credit};
use crate::transport::sink::Sink;

/// Largest StreamData payload keel sends (further limited by the peer's message size).
const MAX_CHUNK: usize = 64 * 1024;

/// A pump sends its next chunk only when at most this much is queued for the socket: the
/// window bounds what the receiver holds, this bounds what the sender holds.
const SEND_QUEUE_LIMIT: usize = 256 * 1024;

/// The streams of one connection.
#[derive(Debug)]
pub(crate) struct Streams {
    sink: Arc<Sink>,
    /// Largest window we grant a producer (the initial window is fixed by the protocol).
    max_window: u32,
    /// Largest StreamData payload we may send (the peer's message limit, capped).
    max_chunk: usize,
    /// The connection's round-trip time estimate, µs (0 = unknown: windows do not grow).
    rtt_us: AtomicU64,
    inbound: Mutex<HashMap<u64, Inbound>>,
    outbound: Mutex<HashMap<u64, Arc<Outbound>>>,
    /// Set when the connection is gone: no new streams.
    closed: AtomicBool,
}

#[derive(Debug)]
struct Inbound {
    tx: mpsc::UnboundedSender<Result<Bytes, Error>>,
    window: RecvWindow,
}

#[derive(Debug)]
struct Outbound {
    window: Mutex<SendWindow>,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Streams {
    pub(crate) fn new(sink: Arc<Sink>, max_window: u32, peer_max_message: u32) -> Arc<Streams> {
        Arc::new(Streams {
            sink,
            max_window: max_window.max(DEFAULT_INITIAL_WINDOW),
            max_chunk: MAX_CHUNK.min(peer_max_message.max(1) as usize),
            rtt_us: AtomicU64::new(0),
            inbound: Mutex::new(HashMap::new()),
            outbound: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        })
    }

    /// Records a round-trip-time sample; windows grow only once one is known.
    pub(crate) fn set_rtt(&self, rtt: Duration) {
        let us = (rtt.as_micros() as u64).max(1);
        self.rtt_us.store(us, Ordering::Relaxed);
    }

    fn rtt(&self) -> Duration {
        Duration::from_micros(self.rtt_us.load(Ordering::Relaxed))
    }

    /// Starts receiving the stream of `call_id`: StreamData for it is delivered to the returned
    /// stream. Dropping that stream before its end sends StopSending.
    pub(crate) fn open_inbound(self: &Arc<Self>, call_id: u64) -> ByteStream {
        let (tx, rx) = mpsc::unbounded_channel();
        if self.closed.load(Ordering::Acquire) {
            let _ = tx.send(Err(lost("connection closed")));
        } else {
            let config = WindowConfig {
                initial: DEFAULT_INITIAL_WINDOW,
                max: self.max_window,
            };
            lock(&self.inbound).insert(
                call_id,
                Inbound {
                    tx,
                    window: RecvWindow::new(config, Instant::now()),
                },
            );
        }
        let credit = Arc::new(InboundCredit {
            streams: Arc::downgrade(self),
            call_id,
        });
        ByteStream::remote(rx, credit)
    }

    /// Handles a streamed-transfer frame (StreamData, StreamEnd, WindowUpdate, StopSending),
    /// the same on both ends of a connection. Other frames are not this module's: ignored.
    pub(crate) fn on_frame(&self, frame: Frame) {
        match frame {
            Frame::StreamData(d) => self.on_data(d),
            Frame::StreamEnd(end) => self.on_end(end),
            Frame::WindowUpdate(w) => self.on_window(w),
            Frame::StopSending(s) => self.on_stop_sending(s.call_id),
            _ => debug_assert!(false, "not a stream frame: {frame:?}"),
        }
    }

    /// StreamData arrived.
    fn on_data(&self, d: StreamData) {
        let mut inbound = lock(&self.inbound);
        let Some(entry) = inbound.get_mut(&d.call_id) else {
            return; // Stopped or finished; this was in flight.
        };
        if let Err(e) = entry.window.on_data(d.data.len()) {
            let entry = inbound.remove(&d.call_id).expect("present");
            drop(inbound);
            let msg = format!("the peer broke flow control: {e}");
            let _ = entry
                .tx
                .send(Err(Error::new(Kind::Status(KeelCode::BadRequest), msg)));
            let _ = self
                .sink
                .send(&Frame::StopSending(StopSending { call_id: d.call_id }));
            return;
        }
        // A closed receiver means the consumer is gone; its drop already sent StopSending.
        let _ = entry.tx.send(Ok(d.data));
    }

    /// StreamEnd arrived: the producer finished (or aborted) the stream.
    fn on_end(&self, end: StreamEnd) {
        let Some(entry) = lock(&self.inbound).remove(&end.call_id) else {
            return;
        };
        if end.status != StatusCode::Ok {
            let msg = String::from_utf8_lossy(&end.message).into_owned();
            let _ = entry.tx.send(Err(Error::new(
                Kind::Status(KeelCode::from_wire(end.status)),
                format!("the sender aborted the stream: {msg}"),
            )));
        }
        // Dropping the sender ends the consumer's stream after what it has buffered.
    }

    /// The consumer of an inbound stream took `n` bytes.
    fn consumed(&self, call_id: u64, n: usize) {
        let increment = {
            let mut inbound = lock(&self.inbound);
            let Some(entry) = inbound.get_mut(&call_id) else {
                return;
            };
            entry.window.on_consumed(n, Instant::now(), self.rtt())
        };
        if let Some(increment) = increment {
            let _ = self
                .sink
                .send(&Frame::WindowUpdate(WindowUpdate { call_id, increment }));
        }
    }

    /// The consumer of an inbound stream dropped it before its end: tell the producer to stop.
    fn abandoned(&self, call_id: u64) {
        if lock(&self.inbound).remove(&call_id).is_some() {
            let _ = self.sink.send(&Frame::StopSending(StopSending { call_id }));
        }
    }

    /// Ends an inbound stream with an error (the call was cancelled or failed).
    pub(crate) fn fail_inbound(&self, call_id: u64, error: Error) {
        if let Some(entry) = lock(&self.inbound).remove(&call_id) {
            let _ = entry.tx.send(Err(error));
        }
    }

    /// WindowUpdate arrived: more credit for an outbound stream.
    fn on_window(&self, w: WindowUpdate) {
        let Some(out) = lock(&self.outbound).get(&w.call_id).cloned() else {
            return;
        };
        if lock(&out.window).grant(w.increment).is_err() {
            // The consumer granted more than the protocol allows: end that stream.
            self.stop_outbound(w.call_id);
            let _ = self.sink.send(&Frame::StreamEnd(StreamEnd {
                call_id: w.call_id,
                status: StatusCode::BadRequest,
                message: Bytes::from_static(b"flow control window overflow"),
            }));
            return;
        }
        out.credit.notify_one();
    }

    /// The call was cancelled or refused: stop producing for `call_id`, without a StreamEnd.
    pub(crate) fn stop_outbound(&self, call_id: u64) {
        if let Some(out) = lock(&self.outbound).remove(&call_id) {
            out.stop();
        }
    }

    /// StopSending arrived: stop producing for `call_id` and end the stream as cancelled
    /// (unless the pump ended it already).
    fn on_stop_sending(&self, call_id: u64) {
        if let Some(out) = lock(&self.outbound).remove(&call_id) {
            out.stop();
            let _ = self.sink.send(&Frame::StreamEnd(StreamEnd {
                call_id,
                status: StatusCode::Cancelled,
                message: Bytes::from_static(b"the receiver stopped reading"),
            }));
        }
    }

    /// The connection is gone: inbound streams fail, outbound pumps stop.
    pub(crate) fn close(&self, reason: &str) {
        self.closed.store(true, Ordering::Release);
        let inbound = std::mem::take(&mut *lock(&self.inbound));
        for (_, entry) in inbound {
            let _ = entry.tx.send(Err(lost(reason)));
        }
        let outbound = std::mem::take(&mut *lock(&self.outbound));
        for (_, out) in outbound {
            out.stop();
        }
    }

    /// Registers an outbound stream for `call_id` before its first frame is announced, so
    /// credit and StopSending for it are routed from the start. Returns the pump's handle.
    pub(crate) fn register_outbound(&self, call_id: u64) -> OutboundHandle {
        let out = Arc::new(Outbound {
            window: Mutex::new(SendWindow::new(DEFAULT_INITIAL_WINDOW)),
            credit: Notify::new(),
            stop: Notify::new(),
            stopped: AtomicBool::new(self.closed.load(Ordering::Acquire)),
        });
        lock(&self.outbound).insert(call_id, out.clone());
        OutboundHandle { call_id, out }
    }

    /// Sends `stream` as the data of `handle`'s call within the peer's credit, then StreamEnd.
    /// Returns when the stream ended, was stopped, or the connection closed.
    pub(crate) async fn pump(self: Arc<Self>, handle: OutboundHandle, mut stream: ByteStream) {
        let OutboundHandle { call_id, out } = handle;
        let end = loop {
            let next = tokio::select! {
                biased;
                _ = out.stopped() => break None,
                next = stream.next() => next,
            };
            let mut chunk = match next {
                None => break Some((StatusCode::Ok, Bytes::new())),
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => break Some((StatusCode::Internal, Bytes::from(e.to_string()))),
            };
            while !chunk.is_empty() {
                let n = loop {
                    if out.is_stopped() {
                        break 0;
                    }
                    let available = lock(&out.window).available();
                    if available > 0 {
                        break (available as usize).min(self.max_chunk).min(chunk.len());
                    }
                    out.credit.notified().await;
                };
                if n == 0 {
                    break;
                }
                self.sink.wait_below(SEND_QUEUE_LIMIT).await;
                lock(&out.window).consume(n);
                let data = chunk.split_to(n);
                if self
                    .sink
                    .send(&Frame::StreamData(StreamData { call_id, data }))
                    .is_err()
                {
                    out.stop();
                    break;
                }
            }
            if out.is_stopped() {
                break None;
            }
        };
        // Whoever removes the entry ends the stream: here, or `on_stop_sending`.
        let ours = lock(&self.outbound).remove(&call_id).is_some();
        if let (true, Some((status, message))) = (ours, end) {
            let _ = self.sink.send(&Frame::StreamEnd(StreamEnd {
                call_id,
                status,
                message,
            }));
        }
    }
}

/// An outbound stream registered with [`Streams::register_outbound`].
#[derive(Debug)]
pub(crate) struct OutboundHandle {
    call_id: u64,
    out: Arc<Outbound>,
}

fn lost(reason: &str) -> Error {
    Error::new(Kind::Connection, format!("stream interrupted: {reason}"))
}

/// Connects a remote [`ByteStream`] to its connection's flow control.
struct InboundCredit {
    streams: Weak<Streams>,
    call_id: u64,
}

impl Credit for InboundCredit {
    fn consumed(&self, n: usize) {
        if let Some(s) = self.streams.upgrade() {
            s.consumed(self.call_id, n);
        }
    }

    fn abandoned(&self) {
        if let Some(s) = self.streams.upgrade() {
            s.abandoned(self.call_id);
        }
    }
}
