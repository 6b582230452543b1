//! An HTTP/2 request answered on its head alone (404, 405, 415, a CORS preflight, ...) while its
//! body is still arriving: a small body that declares its length is read to its end before the
//! answer goes, so that one whose DATA frames do not add up to its `content-length` is refused
//! as RFC 9113 §8.1.2.6 requires, its stream reset with `PROTOCOL_ERROR` (h2 checks the length
//! as the frames arrive), rather than answered.
//!
//! Without the wait the answer is a race: a handler that runs before the DATA frames are read
//! answers, the unread body is dropped, and h2 resets the stream with `NO_ERROR` (RFC 9113
//! §8.1.1 allows an answer before the whole request); the frames that break the length then
//! arrive on a closed stream and are ignored. keel runs a request's handler as soon as the
//! connection has read what had arrived (`driver::Deferred`), so a body sent in a TCP segment
//! after its head lost that race often (h2spec 8.1.2.6 failed one run in six).

use std::pin::Pin;
use std::task::{Context, Poll};

use ::http::header::CONTENT_LENGTH;
use ::http::{Request, Response, Version};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::oneshot;

use super::super::body::Body;
use super::route::handle;
use super::Ctx;

/// The largest declared body an answer given on a request's head waits for. A client sends a
/// body this small with its head, so waiting costs it nothing; a larger upload to a wrong path
/// is refused before it is sent, as before (its stream reset with `NO_ERROR` after the answer).
const WAITS_FOR: u64 = 64 * 1024;

/// [`handle`], for a request of keel's own HTTP connections: an HTTP/2 request whose body is
/// open and declares at most [`WAITS_FOR`] bytes, answered without reading its body, is answered
/// once that body has ended (within the frame timeout; past it, answered as it is).
pub(super) async fn handle_checked(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    let waits = req.version() == Version::HTTP_2
        && !req.body().is_end_stream()
        && declared(&req).is_some_and(|n| n <= WAITS_FOR);
    if !waits {
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
    // answer) is not waited for.
    if let Ok(mut body) = unread.try_recv() {
        // h2 resets the stream with PROTOCOL_ERROR if the frames break the declared length
        // (the answer then goes nowhere); a body that errs or ends here is done with either way.
        let read_to_end = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout(ctx.settings.frame_timeout, read_to_end).await;
    }
    response
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
/// [`handle_checked`] (its receiver), which reads it to its end. A body whose reader took
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
