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

use super::body::{Body, BoxError, Received};
use super::server::{handle, Ctx};
use crate::bindings::ServerSettings;
use crate::dispatch::{ConnInfo, Dispatcher};

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

/// Unregisters the service's connection when the last clone is dropped.
#[derive(Debug)]
struct Inner {
    ctx: Ctx,
    /// Kept so the responder's go-away signal has a receiver; a service has no connection of
    /// its own to close (each HTTP/1.1 answer during a drain says `connection: close`).
    _stop: watch::Receiver<bool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ctx.unregister();
    }
}

impl HttpService {
    pub(crate) fn new(dispatcher: &Arc<Dispatcher>, settings: Arc<ServerSettings>) -> HttpService {
        let (stop, stopped) = watch::channel(false);
        let info = ConnInfo::new("http-service", "tower".to_string());
        let ctx = Ctx::register(dispatcher, settings, info, stop);
        HttpService {
            inner: Arc::new(Inner {
                ctx,
                _stop: stopped,
            }),
        }
    }
}

impl<B> tower_service::Service<Request<B>> for HttpService
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + std::fmt::Display + Send,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Admission happens per call (throttle, Busy): the service is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move { Ok(handle(&inner.ctx, req).await) })
    }
}

// `B: Received` is what `handle` needs; the bound above spells it out for users' docs.
#[allow(dead_code)]
fn assert_received<B>()
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + std::fmt::Display + Send,
{
    fn is<R: Received>() {}
    is::<B>();
}
