//! Message bodies, both directions, both ends: the one place where bytes become an HTTP body and
//! an HTTP body becomes bytes, with the size limit and the drain rule; and where a
//! [`ByteStream`] becomes a body (chunked on HTTP/1.1, DATA frames on HTTP/2) and back.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyDataStream, BodyExt, Empty, Full, StreamBody};
use tokio::sync::{oneshot, Notify};

use crate::core::stream::ByteStream;
use crate::dispatch::{ReceiveBudget, Reservation};

/// Any error a body can end with.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body keel receives: hyper's on its own connections, any server's (axum's, say) through
/// [`HttpService`](super::HttpService).
pub(crate) trait Received:
    http_body::Body<Data = Bytes, Error = Self::E> + Send + Unpin + 'static
{
    /// The body's error type.
    type E: Into<BoxError> + std::fmt::Display + Send;
}

impl<B> Received for B
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + std::fmt::Display + Send,
{
    type E = B::Error;
}

/// The body type keel sends, on the host and on the client.
pub(crate) type Body = BoxBody<Bytes, BoxError>;

/// A body of exactly `bytes`.
pub(crate) fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// An empty body.
pub(crate) fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// A body of `stream`'s chunks. A stream that fails mid-way aborts the body (HTTP/1.1: the
/// connection closes; HTTP/2: the stream is reset), so a receiver never takes it as complete.
pub(crate) fn streamed(stream: ByteStream) -> Body {
    StreamBody::new(Frames(std::sync::Mutex::new(stream))).boxed()
}

/// A body of `stream`'s chunks, as [`streamed`], that gives the stream back if it is dropped
/// before a chunk was taken from it (the request was never sent, or the host refused it
/// unprocessed): the receiver then gets `Some(stream)`, else `None`. A client sends such a
/// request again only with the stream it gets back.
pub(crate) fn replayable(stream: ByteStream) -> (Body, oneshot::Receiver<Option<ByteStream>>) {
    let (back, returned) = oneshot::channel();
    let frames = Replayable(Mutex::new(Replay {
        stream: Some(stream),
        taken: false,
        ended: false,
        back: Some(back),
    }));
    (StreamBody::new(frames).boxed(), returned)
}

/// [`replayable`]'s body: a stream's chunks as body frames, and whether any was taken. The
/// mutex (never contended) makes it `Sync`, as keel's boxed body type requires.
struct Replayable(Mutex<Replay>);

struct Replay {
    stream: Option<ByteStream>,
    /// A chunk (or an error) was taken: the stream cannot be sent again.
    taken: bool,
    /// The stream ended before giving any chunk: an empty stream, sent again as one.
    ended: bool,
    back: Option<oneshot::Sender<Option<ByteStream>>>,
}

impl Stream for Replayable {
    type Item = Result<Frame<Bytes>, BoxError>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let st = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        let Some(stream) = st.stream.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = poll_data(stream, cx);
        match &polled {
            Poll::Pending => {}
            Poll::Ready(None) => st.ended = true,
            Poll::Ready(Some(_)) => st.taken = true,
        }
        polled
    }
}

impl Drop for Replayable {
    fn drop(&mut self) {
        let st = self.0.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(back) = st.back.take() {
            let whole = match st.stream.take() {
                _ if st.taken => None,
                _ if st.ended => Some(ByteStream::empty()),
                stream => stream,
            };
            let _ = back.send(whole);
        }
    }
}

/// A stream's chunks as body frames. The mutex (never contended: only the body's owner polls)
/// makes it `Sync`, as keel's boxed body type requires.
struct Frames(std::sync::Mutex<ByteStream>);

impl Stream for Frames {
    type Item = Result<Frame<Bytes>, BoxError>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let stream = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        poll_data(stream, cx)
    }
}

/// The stream's next chunk that is not empty, as a body frame. Empty chunks are skipped: over
/// HTTP/2 each would be an empty DATA frame, and h2 answers more than 100 of those on one
/// connection (its `MAX_RECV_EMPTY_DATA_FRAMES`, never reset) with GOAWAY
/// `ENHANCE_YOUR_CALM`, which ended the connection after about 100 echoed streams (a
/// received body yields an empty chunk for the final empty DATA frame).
fn poll_data(
    stream: &mut ByteStream,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    loop {
        match stream.poll_chunk(cx) {
            Poll::Ready(Some(Ok(chunk))) if chunk.is_empty() => continue,
            polled => {
                return polled
                    .map(|o| o.map(|r| r.map(Frame::data).map_err(|e| Box::new(e) as BoxError)))
            }
        }
    }
}

/// A received body as a [`ByteStream`].
///
/// HTTP/2 (`drain == None`): the body itself; dropping it early resets only its stream.
///
/// HTTP/1.1 (`drain == Some(limit)`): an unread body would cost the connection, so a task
/// reads it, and if the consumer stops early, keeps reading and discarding up to `limit` more
/// bytes. `done(true)` is called once the body was read to its end (the connection can carry
/// the next message), `done(false)` if it was given up (beyond the limit, or broken).
pub(crate) fn received<B: Received>(
    incoming: B,
    drain: Option<(u64, Arc<Draining>)>,
    done: impl FnOnce(bool) + Send + 'static,
) -> ByteStream {
    let Some((limit, draining)) = drain else {
        done(true);
        return ByteStream::from_stream(BodyDataStream::new(incoming));
    };
    let (tx, stream) = ByteStream::channel(4);
    let state = Arc::new(Mutex::new(Forwarding::Reading));
    let guarded = Guarded {
        stream,
        ended: false,
        state: state.clone(),
        draining: draining.clone(),
    };
    tokio::spawn(async move {
        let mut incoming = incoming;
        let mut tx = Some(tx);
        // Whatever happens, report the end; and if a drain was announced, that it is over.
        let finish = |whole: bool| {
            done(whole);
            let was = std::mem::replace(&mut *lock(&state), Forwarding::Finished);
            if was == Forwarding::ConsumerGone {
                draining.end();
            }
        };
        let mut drained: u64 = 0;
        loop {
            let Some(frame) = incoming.frame().await else {
                return finish(true);
            };
            let data = match frame {
                Ok(f) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue, // trailers: nothing keel uses
                },
                Err(e) => {
                    if let Some(tx) = tx.take() {
                        tx.abort(format!("the body broke off: {e}"));
                    }
                    return finish(false);
                }
            };
            if let Some(sender) = &tx {
                if sender.send(data).await.is_ok() {
                    continue;
                }
                tx = None; // The consumer stopped: drain the rest.
                continue;
            }
            drained += data.len() as u64;
            if drained > limit {
                log::warn!(
                    "closing an HTTP/1.1 connection: a streamed body was stopped early with \
                     more than {limit} bytes left to drain"
                );
                return finish(false);
            }
        }
    });
    ByteStream::from_stream(guarded)
}

/// Where a forwarded HTTP/1.1 body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forwarding {
    /// The consumer reads it.
    Reading,
    /// The consumer dropped it early; the rest is being drained (announced to [`Draining`]).
    ConsumerGone,
    /// The body ended, was drained, or was given up.
    Finished,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The consumer's side of a forwarded body: dropped before its end, it announces the drain at
/// once (before the forwarding task notices), so a call made right after waits for this
/// connection instead of opening another.
struct Guarded {
    stream: ByteStream,
    ended: bool,
    state: Arc<Mutex<Forwarding>>,
    draining: Arc<Draining>,
}

impl Stream for Guarded {
    type Item = Result<Bytes, crate::core::error::Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.stream.poll_chunk(cx);
        if let Poll::Ready(None | Some(Err(_))) = &polled {
            self.ended = true;
        }
        polled
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let mut state = lock(&self.state);
        if *state == Forwarding::Reading {
            *state = Forwarding::ConsumerGone;
            self.draining.begin();
        }
    }
}

/// Bodies being drained after their consumer stopped early, so that a caller about to open a
/// new HTTP/1.1 connection can wait for the one about to be free instead (draining is bounded
/// by the drain limit, and needs nobody else to make progress).
#[derive(Debug, Default)]
pub(crate) struct Draining {
    active: AtomicUsize,
    ended: Notify,
}

impl Draining {
    fn begin(&self) {
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    fn end(&self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
        self.ended.notify_waiters();
    }

    /// Waits until some drain ends; `false` at once if none is going on.
    pub(crate) async fn wait_one(&self) -> bool {
        let ended = self.ended.notified();
        if self.active.load(Ordering::Acquire) == 0 {
            return false;
        }
        ended.await;
        true
    }
}

/// The first this-many bytes of a body count against the connection's own receive budget only,
/// not the host's.
const UNCOUNTED_BODY: u64 = 64 * 1024;

/// How far past the limit an oversized body is read (and thrown away) so that its HTTP/1.1
/// connection can carry the next message. Beyond it the connection is given up instead.
pub(crate) const DRAIN_LIMIT: u64 = 16 << 20;

/// Why a body could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Larger than the limit. `size` is the whole body's size when known. `drained`: the body
    /// was read to its end, so the connection can carry another message.
    TooLarge { size: Option<u64>, drained: bool },
    /// The peer went away or broke the protocol mid-body.
    Broken(BoxError),
    /// The receive budget had no room for the body before its deadline.
    NoRoom,
}

/// Reads a whole body of at most `limit` bytes. A larger one is read and thrown away up to
/// `drain` bytes past the limit ([`DRAIN_LIMIT`] on HTTP/1.1, where an unread body would end the
/// connection; 0 on HTTP/2, where dropping the body resets only its stream).
///
/// With `budget`, the bytes kept are reserved from it (waiting for room until its deadline) and
/// the reservation comes back with the body, to be held while the body is in use.
pub(crate) async fn read_limited<B: Received>(
    mut body: B,
    limit: u32,
    drain: u64,
    budget: Option<(&ReceiveBudget, tokio::time::Instant)>,
) -> Result<(Bytes, Reservation), ReadError> {
    let mut reserved = Reservation::default();
    let limit = u64::from(limit);
    let declared = body.size_hint().exact();
    if declared.is_some_and(|n| n > limit + drain) {
        return Err(ReadError::TooLarge {
            size: declared,
            drained: false,
        });
    }
    // One chunk (the common case) is returned as is; more are gathered.
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Broken(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers: nothing keel uses
        };
        total += data.len() as u64;
        if total > limit + drain {
            return Err(ReadError::TooLarge {
                size: declared,
                drained: false,
            });
        }
        if total > limit {
            first = None;
            rest = BytesMut::new();
            reserved = Reservation::default();
            continue;
        }
        if let Some((budget, deadline)) = budget {
            // The first 64 KiB of a body count against the connection's own budget only, so a
            // small call never queues behind other connections' large bodies for room; past
            // that, every byte counts against the host's budget too.
            let counted = |n: u64| if n > UNCOUNTED_BODY { n } else { 0 };
            let shared = counted(total) - counted(total - data.len() as u64);
            let own = data.len() as u64 - shared.min(data.len() as u64);
            if own > 0 {
                match budget.reserve_own(own as usize, deadline).await {
                    Some(r) => reserved.merge(r),
                    None => return Err(ReadError::NoRoom),
                }
            }
            if shared > 0 {
                match budget.reserve(shared as usize, deadline).await {
                    Some(r) => reserved.merge(r),
                    None => return Err(ReadError::NoRoom),
                }
            }
        }
        match first.take() {
            None if rest.is_empty() => first = Some(data),
            None => rest.extend_from_slice(&data),
            Some(f) => {
                // Not the declared length: that is the peer's word, and reserving it would
                // allocate ahead of the budget (30 bodies of 4 MiB that never finish would hold
                // 120 MiB). The buffer grows with what has been received and reserved.
                rest.reserve(f.len() + data.len());
                rest.extend_from_slice(&f);
                rest.extend_from_slice(&data);
            }
        }
    }
    if total > limit {
        return Err(ReadError::TooLarge {
            size: Some(total),
            drained: true,
        });
    }
    Ok((first.unwrap_or_else(|| rest.freeze()), reserved))
}
