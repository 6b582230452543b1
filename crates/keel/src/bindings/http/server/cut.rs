//! A streamed answer that fails midway is cut off (HTTP/1.1: the connection closes without the
//! last chunk; HTTP/2: the stream is reset), and what it sent before the failure must reach the
//! reader first: for NDJSON the last of it is the error line (HTTP.md, "Streams of messages").
//!
//! hyper does not see to that. Given a body's error right after its last bytes, HTTP/1.1 drops
//! the connection with those bytes still in its write buffer, and HTTP/2's reset discards the
//! DATA frames still queued for the stream. Both lost the whole answer of a stream that failed
//! as soon as it started (its messages, its error line and the error, written together). So
//! [`flushed_before_cut`] holds the error back until the connection's output has been flushed
//! twice (counted by the [`HeadWatch`]) after hyper took the bytes before it:
//!
//! - HTTP/1.1: one connection task does everything. The body answers `Pending`; hyper flushes
//!   its buffer (the bytes), then the IO: a flush. One more, then the error.
//! - HTTP/2: the answer's task hands the bytes to h2 (queued for the stream, the connection's
//!   task woken) before it asks for the error. The first flush to complete after that may belong
//!   to a pass of the connection's task that had collected the frames just before they were
//!   queued; the second belongs to a pass that began after the first ended, which collected
//!   them (h2 collects every queued frame the peer's flow-control window allows before it
//!   flushes).
//!
//! The answer wakes the connection's task (it flushes whenever it runs) when the error comes
//! and again at the first flush, so both come without waiting for other traffic (an HTTP/2
//! connection that had nothing else to send would otherwise never flush again). A peer that
//! reads nothing is closed by the watchdog as usual; an HTTP/2 peer whose window is full when
//! the stream fails gets the reset without the bytes the window still held back.
//!
//! Bytes handed to the socket are not yet bytes a page has read: a browser drops what its page
//! has not read of an answer that breaks (Chromium errors the body's stream at once, with what
//! it held). So an NDJSON stream's cut also waits [`CUT_GRACE`] after the flushes, for the page
//! to take its error line; a reader that closes first (a page that cancels its reader at the
//! error line) ends the wait, as hyper then drops the answer.
//!
//! Behind [`HttpService`](crate::http::HttpService) (another server's connections: no
//! watchdog), the flushes are not counted: the error waits for one pass of the server's
//! connection instead, in which hyper's HTTP/1.1 flushes what it took when the socket has room,
//! then the grace.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;

use super::io_watch::HeadWatch;
use crate::core::error::Error;
use crate::core::stream::ByteStream;

/// How long an NDJSON stream that failed stays open after its error line has been flushed,
/// before it is cut off: time for a browser's page to read the line (see the module docs).
pub(super) const CUT_GRACE: Duration = Duration::from_secs(1);

/// `stream`, its error (if it fails) held back until what it sent before was flushed on the
/// connection `watch` follows, then for `grace` (see the module docs).
pub(super) fn flushed_before_cut(
    stream: ByteStream,
    watch: Option<Arc<HeadWatch>>,
    grace: Duration,
) -> ByteStream {
    ByteStream::from_results(FlushedBeforeCut {
        stream,
        watch,
        grace,
        held: None,
    })
}

struct FlushedBeforeCut {
    stream: ByteStream,
    watch: Option<Arc<HeadWatch>>,
    grace: Duration,
    held: Option<Held>,
}

/// The stream's error, waiting.
struct Held {
    error: Error,
    /// The connection's flush count when the error came.
    since: u64,
    /// The flush count at which the connection's task was last woken for another flush.
    nudged: Option<u64>,
    /// The bytes before the error were flushed.
    flushed: bool,
    /// The grace that follows, once they were.
    grace: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stream for FlushedBeforeCut {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.held.is_none() {
            match this.stream.poll_chunk(cx) {
                Poll::Ready(Some(Err(error))) => {
                    let since = match &this.watch {
                        Some(watch) => watch.flushes(),
                        None => {
                            // One pass of the connection first.
                            cx.waker().wake_by_ref();
                            this.held = Some(Held {
                                error,
                                since: 0,
                                nudged: None,
                                flushed: false,
                                grace: None,
                            });
                            return Poll::Pending;
                        }
                    };
                    this.held = Some(Held {
                        error,
                        since,
                        nudged: None,
                        flushed: false,
                        grace: None,
                    });
                }
                polled => return polled,
            }
        }
        let held = this.held.as_mut().expect("held above");
        if !held.flushed {
            if let Some(watch) = &this.watch {
                let mut now = watch.flushes();
                loop {
                    if now >= held.since + 2 {
                        break;
                    }
                    if held.nudged != Some(now) {
                        held.nudged = Some(now);
                        watch.nudge_connection();
                    }
                    let after = watch.wake_at_next_flush(cx.waker());
                    if after == now {
                        return Poll::Pending;
                    }
                    now = after;
                }
            }
            held.flushed = true;
            if !this.grace.is_zero() {
                held.grace = Some(Box::pin(tokio::time::sleep(this.grace)));
            }
        }
        if let Some(grace) = &mut held.grace {
            if grace.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        Poll::Ready(this.held.take().map(|h| Err(h.error)))
    }
}
