//! Reply streams in the drain: a handler's stream (bytes or messages) keeps flowing after its
//! call was answered, so it counts as a call in flight until it ends, and a drain waits for it
//! up to the host's close timeout; then it is ended with `ShuttingDown`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;

use std::sync::atomic::Ordering;

use super::{Dispatcher, HostConn};
use crate::core::error::{Error, Kind};
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;

impl HostConn {
    /// `Busy` if this connection has as many reply streams open as it may: a call that would
    /// open one more does not run.
    pub(crate) fn refuse_reply_stream(&self) -> Option<Status> {
        let max = self.dispatcher.limits.max_reply_streams_per_connection;
        (self.reply_streams.load(Ordering::Acquire) >= max).then(|| {
            Status::new(
                StatusCode::Busy,
                format!(
                    "this connection has {max} streams open, as many as the host allows \
                     (max_reply_streams_per_connection); end one, or use another connection"
                ),
            )
        })
    }
}

impl Dispatcher {
    /// `stream`, counted in flight (and among `conn`'s reply streams) until it ends or its
    /// consumer drops it, and ended with `ShuttingDown` once [`Dispatcher::stop_streams`] was
    /// called.
    pub(crate) fn lease_stream(
        self: &Arc<Self>,
        conn: &Arc<HostConn>,
        stream: ByteStream,
    ) -> ByteStream {
        self.call_started();
        conn.reply_streams.fetch_add(1, Ordering::AcqRel);
        let mut stop = self.streams_stop.subscribe();
        ByteStream::from_results(Leased {
            stream: Some(stream),
            stopped: Box::pin(async move {
                // An error: the sender is gone with the dispatcher; stop then too.
                let _ = stop.wait_for(|stop| *stop).await;
            }),
            _lease: Lease(conn.clone()),
        })
    }

    /// The drain's close timeout passed: every reply stream still flowing ends with
    /// `ShuttingDown`.
    pub(crate) fn stop_streams(&self) {
        self.streams_stop.send_replace(true);
    }
}

/// Counts a stream in flight, and among its connection's reply streams, while it lives.
struct Lease(Arc<HostConn>);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.reply_streams.fetch_sub(1, Ordering::AcqRel);
        self.0.dispatcher.call_finished();
    }
}

/// A reply stream under a lease (see [`Dispatcher::lease_stream`]).
struct Leased {
    /// `None` once it ended.
    stream: Option<ByteStream>,
    stopped: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Held until the binding drops the stream (after sending its end).
    _lease: Lease,
}

impl Stream for Leased {
    type Item = Result<Bytes, Error>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(stream) = &mut this.stream else {
            return Poll::Ready(None);
        };
        if this.stopped.as_mut().poll(cx).is_ready() {
            // The lease goes with this stream, once the binding has sent its end.
            this.stream = None;
            return Poll::Ready(Some(Err(Error::new(
                Kind::Status(StatusCode::ShuttingDown),
                "the host shut down before the stream ended (close timeout)",
            ))));
        }
        let polled = stream.poll_chunk(cx);
        if let Poll::Ready(None | Some(Err(_))) = &polled {
            this.stream = None;
        }
        polled
    }
}
