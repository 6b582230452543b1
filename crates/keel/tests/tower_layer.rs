//! A `tower::Layer` around a host's calls (`HostBuilder::layer`, feature `tower`): tower's own
//! timeout, concurrency limit and load shedding, and a hand-written middleware that reads and
//! adds to the call's context, around blocking and async handlers, on every binding. Real
//! sockets on port 0.
#![cfg(feature = "tower")]
#![allow(missing_docs)]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use common::Binding;
use keel::host::{CallRequest, CallResponse};
use keel::{Context, Status, StatusCode};

#[keel::contract]
pub trait Layered {
    /// Sleeps `ms` (async) and answers the tenant the middleware found.
    async fn work(&self, ctx: Context, ms: u64) -> String;
    /// The same, blocking.
    fn work_sync(&self, ctx: Context, ms: u64) -> String;
    /// Panics.
    async fn explode(&self) -> u32;
}

/// Counts handlers running at once, and the most seen.
#[derive(Clone, Default)]
struct Impl {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

#[derive(Debug, Clone)]
struct Tenant(String);

impl Impl {
    fn enter(&self) -> Running {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        Running(self.running.clone())
    }
}

struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn tenant(ctx: &Context) -> String {
    ctx.extension::<Tenant>()
        .map_or_else(|| "none".into(), |t| t.0)
}

impl Layered for Impl {
    async fn work(&self, ctx: Context, ms: u64) -> String {
        let _running = self.enter();
        tokio::time::sleep(Duration::from_millis(ms)).await;
        tenant(&ctx)
    }
    fn work_sync(&self, ctx: Context, ms: u64) -> String {
        let _running = self.enter();
        std::thread::sleep(Duration::from_millis(ms));
        tenant(&ctx)
    }
    async fn explode(&self) -> u32 {
        panic!("kaboom")
    }
}

/// A hand-written middleware: refuses calls without `x-tenant`, puts the tenant in the
/// context for the handler, and adds reply metadata naming the answer's code.
#[derive(Clone)]
struct TenantLayer;

impl<S> tower::Layer<S> for TenantLayer {
    type Service = TenantService<S>;
    fn layer(&self, inner: S) -> TenantService<S> {
        TenantService(inner)
    }
}

#[derive(Clone)]
struct TenantService<S>(S);

impl<S> tower::Service<CallRequest> for TenantService<S>
where
    S: tower::Service<CallRequest, Response = CallResponse> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<keel::host::BoxError>,
{
    type Response = CallResponse;
    type Error = keel::host::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<CallResponse, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: CallRequest) -> Self::Future {
        let ctx = req.context().clone();
        let Some(tenant) = ctx.metadata().get("x-tenant").map(str::to_owned) else {
            return Box::pin(async {
                Err(Status::permission_denied("which tenant? send x-tenant").into())
            });
        };
        ctx.insert_extension(Tenant(tenant));
        let answer = self.0.call(req);
        Box::pin(async move {
            let response = answer.await.map_err(Into::into)?;
            ctx.insert_reply_metadata("x-layer-saw", response.code().as_str())
                .unwrap();
            Ok(response)
        })
    }
}

fn host_with_layer<L>(b: Binding, imp: Impl, layer: L) -> keel::Host
where
    L: tower::Layer<keel::host::Handler>,
    L::Service:
        tower::Service<CallRequest, Response = CallResponse> + Clone + Send + Sync + 'static,
    <L::Service as tower::Service<CallRequest>>::Future: Send + 'static,
    <L::Service as tower::Service<CallRequest>>::Error: Into<keel::host::BoxError>,
{
    b.start(
        keel::Host::builder()
            .service(LayeredServer::new(imp))
            .layer(layer),
    )
}

fn tenant_client(b: Binding, host: &keel::Host) -> LayeredClient {
    LayeredClient::new(b.channel_with(host.url(), |c| c.default_metadata("x-tenant", "acme")))
}

/// The middleware refuses, admits, hands the handler what it learnt, and sees the answer, for
/// async and blocking handlers; a panicking handler is `HandlerPanicked` through it.
async fn a_hand_written_middleware_wraps_every_call(b: Binding) {
    let host = host_with_layer(b, Impl::default(), TenantLayer);
    let anonymous = LayeredClient::new(b.channel(host.url()));
    let err = anonymous.work(0).await.unwrap_err();
    assert_eq!(
        err.status_code(),
        Some(StatusCode::PermissionDenied),
        "{err}"
    );
    assert_eq!(err.message(), "which tenant? send x-tenant");
    let client = tenant_client(b, &host);
    let reply = keel::client::ReplyMetadata::new();
    let seen = client.with_reply_metadata(&reply).work(1).await.unwrap();
    assert_eq!(seen, "acme");
    assert_eq!(reply.get().get("x-layer-saw"), Some("ok"));
    assert_eq!(client.work_sync(1).await.unwrap(), "acme");
    let err = client.explode().await.unwrap_err();
    assert_eq!(
        err.status_code(),
        Some(StatusCode::HandlerPanicked),
        "{err}"
    );
    assert_eq!(client.work(0).await.unwrap(), "acme", "the host serves on");
    host.shutdown_async().await;
}

/// tower's `TimeoutLayer` answers `DeadlineExceeded`; its `ConcurrencyLimitLayer` holds the
/// host to one handler at a time; with `LoadShedLayer` in front, calls beyond it are `Busy`.
async fn towers_own_middleware_limits_and_times_out(b: Binding) {
    let host = host_with_layer(
        b,
        Impl::default(),
        tower::timeout::TimeoutLayer::new(Duration::from_millis(100)),
    );
    let client = LayeredClient::new(b.channel(host.url()));
    for sync in [false, true] {
        let err = if sync {
            client.work_sync(2_000).await.unwrap_err()
        } else {
            client.work(2_000).await.unwrap_err()
        };
        assert_eq!(
            err.status_code(),
            Some(StatusCode::DeadlineExceeded),
            "{err}"
        );
    }
    assert_eq!(client.work(1).await.unwrap(), "none");
    host.shutdown_async().await;

    let imp = Impl::default();
    let host = host_with_layer(b, imp.clone(), tower::limit::ConcurrencyLimitLayer::new(1));
    let client = LayeredClient::new(b.channel(host.url()));
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    client.work(20).await
                } else {
                    client.work_sync(20).await
                }
            })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), "none");
    }
    assert_eq!(imp.most.load(Ordering::SeqCst), 1, "one handler at a time");
    host.shutdown_async().await;

    let imp = Impl::default();
    let shed = tower::ServiceBuilder::new()
        .load_shed()
        .concurrency_limit(1)
        .into_inner();
    let host = host_with_layer(b, imp.clone(), shed);
    let client = LayeredClient::new(b.channel(host.url()));
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.work(1_000).await }
    });
    assert!(common::poll::eventually(|| imp.running.load(Ordering::SeqCst) == 1).await);
    let err = client.work(0).await.unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::Busy), "{err}");
    assert_eq!(first.await.unwrap().unwrap(), "none");
    host.shutdown_async().await;
}

common::binding_matrix! {
    [] {
        async fn a_hand_written_middleware_wraps_every_call;
        async fn towers_own_middleware_limits_and_times_out;
    }
}

/// A caller that gives up cancels the layered call: the handler's future is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_inside_the_layers() {
    let imp = Impl::default();
    let host = host_with_layer(Binding::Tcp, imp.clone(), TenantLayer);
    let client = tenant_client(Binding::Tcp, &host);
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.work(30_000).await }
    });
    assert!(common::poll::eventually(|| imp.running.load(Ordering::SeqCst) == 1).await);
    call.abort();
    assert!(
        common::poll::eventually(|| imp.running.load(Ordering::SeqCst) == 0).await,
        "the handler's future was dropped"
    );
    host.shutdown_async().await;
}
