//! An HTTP/2 request answered on its head alone (404, 405, 415, a CORS preflight, ...) while its
//! body is still arriving: the answer goes at once, and the body is read on to its end in the
//! background (at most 64 KiB of it, within the frame timeout), so that h2 goes on checking the
//! stream: DATA frames that break the request's `content-length` (RFC 9113 §8.1.2.6) or
//! trailers with a pseudo-header (§8.1.2.1) still reset it with `PROTOCOL_ERROR`, and frames
//! after the client's own RST_STREAM are still a `STREAM_CLOSED` error (§5.1).
//!
//! Dropping the unread body instead, as hyper does, makes h2 reset the stream with `NO_ERROR`
//! once the answer is sent (RFC 9113 §8.1.1 allows an answer before the whole request), and
//! frames that arrive after that reset are ignored, whatever they are. keel runs a request's
//! handler as soon as the connection has read what had arrived (`driver::Deferred`), so frames
//! sent in a TCP segment after the head often came after that reset: h2spec's 8.1.2.6, 8.1.2.1/3
//! and 5.1/8-9 each failed one run in ten or so.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use ::http::header::CONTENT_LENGTH;
use ::http::{Request, Response, Version};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::oneshot;

use super::super::body::Body;
use super::route::handle;
use super::Ctx;

/// The most of an unread body read on after an answer given on the request's head. A body
/// declared larger is not read at all: the client is told to stop sending (its stream reset
/// with `NO_ERROR` after the answer), as before.
const READS_ON: u64 = 64 * 1024;

/// [`handle`], for a request of keel's own HTTP connections: the body of an HTTP/2 request
/// answered without reading it (and still open) is read on to its end after the answer, within
/// [`READS_ON`] bytes and the frame timeout.
pub(super) async fn handle_checked(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    let reads_on = req.version() == Version::HTTP_2
        && !req.body().is_end_stream()
        && declared(&req).is_none_or(|n| n <= READS_ON);
    if !reads_on {
        return handle(ctx, req).await;
    }
    let (parts, body) = req.into_parts();
    let (back, mut unread) = oneshot::channel();
    let lent = Lent {
        body: Some(body),
        touched: false,
        back: Some(back),
    };
    let response = handle(ctx, Request::from_parts(parts, lent)).await;
    // Only a body already given back: one still held (a stream the handler reads beside its
    // answer) is the handler's.
    if let Ok(body) = unread.try_recv() {
        tokio::spawn(read_on(body, ctx.settings.frame_timeout));
    }
    response
}

/// Reads `body` to its end, its error (h2 reset the stream: a malformed request, or the
/// client's reset), [`READS_ON`] bytes or `timeout`, whichever comes first, and drops it. The
/// answer's own handle keeps the stream open until the answer is sent, so dropping the body
/// early never cuts the answer off: h2 then resets the stream with `NO_ERROR`.
async fn read_on(mut body: Incoming, timeout: Duration) {
    let read = async {
        let mut taken = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            taken += frame.data_ref().map_or(0, |d| d.len() as u64);
            if taken > READS_ON {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
}

/// The request's `content-length`, if it has one that parses.
fn declared<B>(req: &Request<B>) -> Option<u64> {
    req.headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A request body lent to [`handle`]: dropped without a single frame taken, it goes back to
/// [`handle_checked`] (its receiver), which reads it on. A body whose reader took
/// frames was read, or given up on purpose (a stream the handler stopped reading): it is
/// dropped as usual.
struct Lent {
    body: Option<Incoming>,
    touched: bool,
    back: Option<oneshot::Sender<Incoming>>,
}

impl http_body::Body for Lent {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.touched = true;
        match self.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let (false, Some(body), Some(back)) = (self.touched, self.body.take(), self.back.take())
        {
            // The receiver is gone once the answer went: the body is then dropped here.
            let _ = back.send(body);
        }
    }
}
