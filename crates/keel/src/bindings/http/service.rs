//! The HTTP binding as a `tower::Service`, for mounting a host's contracts in an HTTP server
//! of your own (an axum `Router`, say) beside ordinary routes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tokio::sync::watch;

use super::body::{Body, BoxError};
use super::server::{handle, Ctx, Stop};
use crate::bindings::ServerSettings;
use crate::dispatch::{Dispatcher, HostConnInfo};

/// A host's HTTP binding as a [`tower_service::Service`], from
/// [`Host::http_service`](crate::Host::http_service). It answers `POST /{Service}/{operation}`
/// and `GET /{Service}` exactly as an `http://` endpoint does; mount it where those paths
/// reach it, e.g. as an axum `Router`'s fallback or nested under a prefix-free route.
///
/// ```
/// # #[keel::contract] pub trait Echo { fn echo(&self, s: String) -> String; }
/// # struct E;
/// # impl Echo for E { fn echo(&self, s: String) -> String { s } }
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use axum::routing::get;
///
/// let host = keel::Host::builder()
///     .service(EchoServer::new(E))
///     .runtime(tokio::runtime::Handle::current())
///     .start()?;
/// let app: axum::Router = axum::Router::new()
///     .route("/health", get(|| async { "ok" }))
///     .fallback_service(host.http_service());
/// // axum::serve(listener, app).await?;
/// # drop(app);
/// # host.shutdown_async().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct HttpService {
    inner: Arc<Inner>,
}

/// Stops what still runs for the service's calls when the last clone is dropped.
#[derive(Debug)]
struct Inner {
    ctx: Ctx,
    /// Kept so the responder's go-away signal has a receiver; a service has no connection of
    /// its own to close (each HTTP/1.1 answer during a drain says `connection: close`).
    _stop: watch::Receiver<Stop>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ctx.abandon();
    }
}

impl HttpService {
    /// The service of the host whose calls go to `dispatcher`, counted as its connection `id`.
    pub(crate) fn new(
        dispatcher: &Arc<Dispatcher>,
        settings: Arc<ServerSettings>,
        id: u64,
    ) -> HttpService {
        let (stop, stopped) = watch::channel(Stop::Serving);
        let info = HostConnInfo::new(id, "http-service", None, None);
        // Not registered as a connection: the HTTP server that mounts it has its own, and the
        // throttle (not a per-connection share) bounds the calls of all of them together.
        let ctx = Ctx::new(dispatcher, settings, info, stop, usize::MAX, None);
        HttpService {
            inner: Arc::new(Inner {
                ctx,
                _stop: stopped,
            }),
        }
    }
}

/// The body of an [`HttpService`] answer: bytes, whole or streamed.
pub struct HttpBody(Body);

impl std::fmt::Debug for HttpBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBody").finish_non_exhaustive()
    }
}

impl http_body::Body for HttpBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }
}

impl<B> tower_service::Service<Request<B>> for HttpService
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + std::fmt::Display + Send,
{
    type Response = Response<HttpBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<HttpBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Admission happens per call (throttle, Busy): the service is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move { Ok(handle(&inner.ctx, req).await.map(HttpBody)) })
    }
}
