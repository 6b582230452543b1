//! A streamed answer (a `ByteStream`) that fails midway is cut off (HTTP/1.1: the connection
//! closes without the last chunk; HTTP/2: the stream is reset), and what it sent before the
//! failure must reach the reader first. (A stream of messages ends with its error line or event
//! instead, and no cut: HTTP.md, "Streams of messages".)
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
//! it held). That is why a stream of messages never ends with a cut.
//!
//! Behind [`HttpService`](crate::http::HttpService) (another server's connections: no
//! watchdog), the flushes are not counted: the error waits for one pass of the server's
//! connection instead, in which hyper's HTTP/1.1 flushes what it took when the socket has room.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;

use super::io_watch::HeadWatch;
use crate::core::error::Error;
use crate::core::stream::ByteStream;

/// `stream`, its error (if it fails) held back until what it sent before was flushed on the
/// connection `watch` follows (see the module docs).
pub(super) fn flushed_before_cut(stream: ByteStream, watch: Option<Arc<HeadWatch>>) -> ByteStream {
    ByteStream::from_results(FlushedBeforeCut {
        stream,
        watch,
        held: None,
    })
}

struct FlushedBeforeCut {
    stream: ByteStream,
    watch: Option<Arc<HeadWatch>>,
    held: Option<Held>,
}

/// The stream's error, waiting.
struct Held {
    error: Error,
    /// The connection's flush count when the error came.
    since: u64,
    /// The flush count at which the connection's task was last woken for another flush.
    nudged: Option<u64>,
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
                            });
                            return Poll::Pending;
                        }
                    };
                    this.held = Some(Held {
                        error,
                        since,
                        nudged: None,
                    });
                }
                polled => return polled,
            }
        }
        let held = this.held.as_mut().expect("held above");
        if let Some(watch) = &this.watch {
            let mut now = watch.flushes();
            while now < held.since + 2 {
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
        Poll::Ready(this.held.take().map(|h| Err(h.error)))
    }
}
