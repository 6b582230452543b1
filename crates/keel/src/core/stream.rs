//! Streamed transfer: [`ByteStream`], a body that flows in chunks instead of arriving whole.
//!
//! An operation may take one `ByteStream` parameter (an upload), return a `ByteStream` (a
//! download), or both. Memory stays bounded whatever the size: the sender may only have a
//! flow-control window of bytes unconsumed at the receiver, and that window grows toward the
//! link's bandwidth-delay product, so a long, fast link is not throttled by a small window.
//!
//! A receiver that stops early (drops the stream) tells the sender to stop; the connection stays
//! open for other calls.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures_core::Stream;
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio_util::io::ReaderStream;

use super::error::{Error, Kind};
use super::status::StatusCode;

/// Default chunk size when keel reads from a reader on your behalf.
const READ_CHUNK: usize = 64 * 1024;

/// A stream of bytes: an upload an operation receives, or a download it returns.
///
/// Build one from bytes, an iterator, an [`AsyncRead`], any [`Stream`] of `Bytes`, or a
/// [`ByteStream::channel`] fed from another task or thread. Read it with [`ByteStream::next`]
/// (async), [`ByteStream::blocking_next`] (in a plain `fn` operation), [`ByteStream::read_to_end`],
/// or as a [`Stream`].
///
/// ```
/// # keel::__private::block_on(async {
/// use keel::ByteStream;
///
/// let mut s = ByteStream::from_iter(vec![b"hello ".to_vec(), b"world".to_vec()]);
/// let mut all = Vec::new();
/// while let Some(chunk) = s.next().await {
///     all.extend_from_slice(&chunk?);
/// }
/// assert_eq!(all, b"hello world");
/// # Ok::<(), keel::Error>(())
/// # }).unwrap();
/// ```
pub struct ByteStream {
    source: Source,
}

enum Source {
    Empty,
    Once(Option<Bytes>),
    Iter(Box<dyn Iterator<Item = Bytes> + Send>),
    Channel(mpsc::Receiver<Result<Bytes, Error>>),
    Dyn(Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send>>),
    Remote(Remote),
    /// A source that failed, kept until the stream is dropped: what it holds (a drain's count
    /// of the stream, say) lasts until whoever read the error has passed it on.
    Failed {
        _kept: Box<Source>,
    },
}

impl fmt::Debug for ByteStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.source {
            Source::Empty => "empty",
            Source::Once(_) => "bytes",
            Source::Iter(_) => "iterator",
            Source::Channel(_) => "channel",
            Source::Dyn(_) => "stream",
            Source::Remote(_) => "remote",
            Source::Failed { .. } => "failed",
        };
        f.debug_struct("ByteStream").field("source", &kind).finish()
    }
}

impl Default for ByteStream {
    fn default() -> Self {
        ByteStream::empty()
    }
}

impl ByteStream {
    /// A stream with no bytes.
    pub fn empty() -> ByteStream {
        ByteStream {
            source: Source::Empty,
        }
    }

    /// A stream of one chunk.
    pub fn from_bytes(bytes: impl Into<Bytes>) -> ByteStream {
        let b = bytes.into();
        ByteStream {
            source: Source::Once((!b.is_empty()).then_some(b)),
        }
    }

    /// A stream of the iterator's chunks, pulled as the receiver makes room. The iterator runs
    /// on the runtime: it must not block (for blocking producers use [`ByteStream::channel`]).
    #[allow(clippy::should_implement_trait)] // Takes chunks of any `Into<Bytes>`, not items.
    pub fn from_iter<I>(chunks: I) -> ByteStream
    where
        I: IntoIterator,
        I::Item: Into<Bytes> + 'static,
        I::IntoIter: Send + 'static,
    {
        ByteStream {
            source: Source::Iter(Box::new(chunks.into_iter().map(Into::into))),
        }
    }

    /// A stream of what `reader` yields until it ends, in chunks of up to 64 KiB.
    pub fn from_reader(reader: impl AsyncRead + Send + 'static) -> ByteStream {
        ByteStream::from_stream(ReaderStream::with_capacity(reader, READ_CHUNK))
    }

    /// A stream of `stream`'s chunks; an `Err` item ends the stream with that error.
    pub fn from_stream<S, E>(stream: S) -> ByteStream
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        ByteStream {
            source: Source::Dyn(Box::pin(MapErr(Box::pin(stream)))),
        }
    }

    /// A stream fed through a [`ByteSender`], from another task or thread. `capacity` is how
    /// many chunks may wait before [`ByteSender::send`] waits.
    ///
    /// ```
    /// use keel::ByteStream;
    ///
    /// let (tx, mut stream) = ByteStream::channel(4);
    /// std::thread::spawn(move || {
    ///     for i in 0..3u8 {
    ///         tx.blocking_send(vec![i; 10]).unwrap();
    ///     }
    ///     // Dropping the sender ends the stream.
    /// });
    /// let all = keel::__private::block_on(stream.read_to_end(1 << 20)).unwrap();
    /// assert_eq!(all.len(), 30);
    /// ```
    pub fn channel(capacity: usize) -> (ByteSender, ByteStream) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            ByteSender { tx },
            ByteStream {
                source: Source::Channel(rx),
            },
        )
    }

    /// The next chunk, `None` at the end. An `Err` ends the stream: the producer failed, or
    /// the connection carrying it broke.
    pub async fn next(&mut self) -> Option<Result<Bytes, Error>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// [`ByteStream::next`] for plain `fn` operations and other code outside a runtime.
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime (it would block a runtime thread).
    pub fn blocking_next(&mut self) -> Option<Result<Bytes, Error>> {
        if tokio::runtime::Handle::try_current().is_ok() {
            panic!("ByteStream::blocking_next called from async code; use `next().await`");
        }
        // Parks this thread between polls; the connection's reader or the producer wakes it.
        crate::core::block_on::block_on(self.next())
    }

    /// Reads the whole stream into memory, failing with a too-large error beyond `limit` bytes.
    pub async fn read_to_end(mut self, limit: usize) -> Result<Bytes, Error> {
        let mut all = BytesMut::new();
        while let Some(chunk) = self.next().await {
            let chunk = chunk?;
            if all.len() + chunk.len() > limit {
                return Err(Error::new(
                    Kind::TooLarge,
                    format!("stream is longer than the limit of {limit} bytes"),
                ));
            }
            all.extend_from_slice(&chunk);
        }
        Ok(all.freeze())
    }

    /// A blocking [`std::io::Read`] over the stream, for plain `fn` operations.
    pub fn into_blocking_reader(self) -> BlockingReader {
        BlockingReader {
            stream: self,
            current: Bytes::new(),
        }
    }

    /// Polls for the next chunk (the [`Stream`] implementation).
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        let polled = match &mut self.source {
            Source::Empty => Poll::Ready(None),
            Source::Once(b) => Poll::Ready(b.take().map(Ok)),
            Source::Iter(it) => Poll::Ready(it.next().map(Ok)),
            Source::Channel(rx) => rx.poll_recv(cx),
            Source::Dyn(s) => s.as_mut().poll_next(cx),
            Source::Remote(r) => r.poll_chunk(cx),
            Source::Failed { .. } => Poll::Ready(None),
        };
        match &polled {
            // Ended: release the source now, and never yield after the end.
            Poll::Ready(None) => self.source = Source::Empty,
            // Failed: never yield again either, but keep the source until the stream is
            // dropped.
            Poll::Ready(Some(Err(_))) if !matches!(self.source, Source::Failed { .. }) => {
                let failed = std::mem::replace(&mut self.source, Source::Empty);
                self.source = Source::Failed {
                    _kept: Box::new(failed),
                };
            }
            _ => {}
        }
        polled
    }

    /// A stream of `stream`'s chunks, its errors keel's own (kept as they are).
    pub(crate) fn from_results(
        stream: impl Stream<Item = Result<Bytes, Error>> + Send + 'static,
    ) -> ByteStream {
        ByteStream {
            source: Source::Dyn(Box::pin(stream)),
        }
    }

    /// A stream fed by a connection (see [`Remote`]).
    pub(crate) fn remote(
        rx: mpsc::UnboundedReceiver<Result<Bytes, Error>>,
        credit: Arc<dyn Credit>,
    ) -> ByteStream {
        ByteStream {
            source: Source::Remote(Remote {
                rx,
                credit,
                ended: false,
            }),
        }
    }
}

impl Stream for ByteStream {
    type Item = Result<Bytes, Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_chunk(cx)
    }
}

impl From<Bytes> for ByteStream {
    fn from(b: Bytes) -> ByteStream {
        ByteStream::from_bytes(b)
    }
}

impl From<Vec<u8>> for ByteStream {
    fn from(v: Vec<u8>) -> ByteStream {
        ByteStream::from_bytes(v)
    }
}

impl From<&'static [u8]> for ByteStream {
    fn from(v: &'static [u8]) -> ByteStream {
        ByteStream::from_bytes(v)
    }
}

/// The sending half of [`ByteStream::channel`]. Dropping it ends the stream cleanly, except
/// while the thread is panicking: then the stream ends with an error, so a receiver never takes
/// a truncated stream for a whole one.
#[derive(Debug)]
pub struct ByteSender {
    tx: mpsc::Sender<Result<Bytes, Error>>,
}

impl ByteSender {
    /// Sends a chunk, waiting while `capacity` chunks are waiting. Fails if the receiver is
    /// gone (it stopped reading, or the call ended).
    pub async fn send(&self, chunk: impl Into<Bytes>) -> Result<(), Error> {
        self.tx
            .send(Ok(chunk.into()))
            .await
            .map_err(|_| receiver_gone())
    }

    /// [`ByteSender::send`] for threads outside a runtime.
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    pub fn blocking_send(&self, chunk: impl Into<Bytes>) -> Result<(), Error> {
        self.tx
            .blocking_send(Ok(chunk.into()))
            .map_err(|_| receiver_gone())
    }

    /// Ends the stream with an error: the receiver's next read fails with `message`.
    pub fn abort(self, message: impl Into<String>) {
        let _ = self.tx.try_send(Err(Error::new(
            Kind::Status(StatusCode::Internal),
            message.into(),
        )));
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl Drop for ByteSender {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.tx.try_send(Err(Error::new(
                Kind::Status(StatusCode::Internal),
                "the producer of this stream panicked",
            )));
        }
    }
}

fn receiver_gone() -> Error {
    Error::new(
        Kind::Status(StatusCode::Cancelled),
        "the receiver stopped reading this stream",
    )
}

/// A blocking reader over a [`ByteStream`] (see [`ByteStream::into_blocking_reader`]).
#[derive(Debug)]
pub struct BlockingReader {
    stream: ByteStream,
    current: Bytes,
}

impl io::Read for BlockingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.stream.blocking_next() {
                None => return Ok(0),
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}

/// How a connection hears about a remote stream's consumption (to grant the sender more
/// window) and about a receiver that stopped early (to tell the sender to stop).
pub(crate) trait Credit: Send + Sync + 'static {
    /// The application consumed `n` bytes.
    fn consumed(&self, n: usize);
    /// The receiver dropped the stream before its end.
    fn abandoned(&self);
}

/// A stream fed by a connection's reader, chunk by chunk, within a flow-control window.
struct Remote {
    rx: mpsc::UnboundedReceiver<Result<Bytes, Error>>,
    credit: Arc<dyn Credit>,
    ended: bool,
}

impl Remote {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        let polled = self.rx.poll_recv(cx);
        match &polled {
            Poll::Ready(Some(Ok(b))) => self.credit.consumed(b.len()),
            Poll::Ready(None | Some(Err(_))) => self.ended = true,
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if !self.ended {
            self.credit.abandoned();
        }
    }
}

/// Maps a stream's errors into keel errors.
struct MapErr<S>(Pin<Box<S>>);

impl<S, E> Stream for MapErr<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Item = Result<Bytes, Error>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().0.as_mut().poll_next(cx).map(|o| {
            o.map(|r| {
                r.map_err(|e| {
                    let e = e.into();
                    // The whole chain: "error reading a body from connection" alone says
                    // little; its source (an HTTP/2 reset, say) says why.
                    let mut message = e.to_string();
                    let mut source = e.source();
                    while let Some(s) = source {
                        message = format!("{message}: {s}");
                        source = s.source();
                    }
                    Error::new(Kind::Status(StatusCode::Internal), message)
                })
            })
        })
    }
}
