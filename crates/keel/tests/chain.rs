//! Calls that chain, on every binding: a caller calls `Frontdesk`, whose handlers call
//! `Backend` with their `Context` (`with_context`). The caller's deadline, its cancellation
//! (a deadline that passes, a caller that goes away) and its request id reach `Backend`, from
//! an async handler (the async client) and from a blocking one (the blocking client). Real
//! sockets on port 0; time bounds are polled generously, never asserted tight.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Binding;
use keel::{Context, Metadata, Status};
use serde::{Deserialize, Serialize};

/// What `Backend.work` did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Stats {
    pub started: u64,
    pub completed: u64,
    pub cancelled: u64,
}

#[keel::contract]
pub trait Backend {
    /// Sleeps `delay_ms`, unless cancelled first; returns `delay_ms`.
    async fn work(&self, ctx: Context, delay_ms: u64) -> u64;
    fn stats(&self) -> Stats;
    /// The request metadata `key`, as this host received it.
    async fn seen(&self, ctx: Context, key: String) -> Option<String>;
    /// The time this call has left, in ms, as this host sees it.
    fn remaining_ms(&self, ctx: Context) -> Option<u64>;
}

#[keel::contract]
pub trait Frontdesk {
    /// Calls `Backend.work(delay_ms)` with its context (async handler, async client).
    async fn ask(&self, ctx: Context, delay_ms: u64) -> Result<u64, Status>;
    /// The same from a blocking handler, with the blocking client.
    fn ask_sync(&self, ctx: Context, delay_ms: u64) -> Result<u64, Status>;
    /// `Backend.seen(key)` with its context (async).
    async fn relay(&self, ctx: Context, key: String) -> Result<Option<String>, Status>;
    /// `Backend.seen(key)` with its context (blocking).
    fn relay_sync(&self, ctx: Context, key: String) -> Result<Option<String>, Status>;
    /// `Backend.seen(key)` with its context, from a task the handler spawned.
    async fn relay_spawned(&self, ctx: Context, key: String) -> Result<Option<String>, Status>;
    /// `Backend.remaining_ms()` with its context.
    async fn remaining(&self, ctx: Context) -> Result<Option<u64>, Status>;
    /// How many of this host's `ask`/`ask_sync` handlers ended (whatever the outcome).
    fn ended(&self) -> u64;
}

#[derive(Default, Clone)]
struct BackendImpl {
    started: Arc<AtomicU64>,
    completed: Arc<AtomicU64>,
    cancelled: Arc<AtomicU64>,
}

/// Counts a `work` that did not complete as cancelled, however it ended: its future dropped
/// (the host aborts an async handler whose call is cancelled) or its context cancelled.
struct Unfinished(Option<Arc<AtomicU64>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(cancelled) = self.0.take() {
            cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Backend for BackendImpl {
    async fn work(&self, ctx: Context, delay_ms: u64) -> u64 {
        self.started.fetch_add(1, Ordering::SeqCst);
        let mut unfinished = Unfinished(Some(self.cancelled.clone()));
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(delay_ms)) => {
                unfinished.0 = None;
                self.completed.fetch_add(1, Ordering::SeqCst);
            }
            () = ctx.cancelled() => {}
        }
        delay_ms
    }
    fn stats(&self) -> Stats {
        Stats {
            started: self.started.load(Ordering::SeqCst),
            completed: self.completed.load(Ordering::SeqCst),
            cancelled: self.cancelled.load(Ordering::SeqCst),
        }
    }
    async fn seen(&self, ctx: Context, key: String) -> Option<String> {
        ctx.metadata().get(&key).map(str::to_owned)
    }
    fn remaining_ms(&self, ctx: Context) -> Option<u64> {
        ctx.remaining().map(|d| d.as_millis() as u64)
    }
}

#[derive(Clone)]
struct FrontdeskImpl {
    backend: BackendClient,
    ended: Arc<AtomicU64>,
}

/// Counts a handler's end, however it ends (an aborted async handler included).
struct Ended(Arc<AtomicU64>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Frontdesk for FrontdeskImpl {
    async fn ask(&self, ctx: Context, delay_ms: u64) -> Result<u64, Status> {
        let _ended = Ended(self.ended.clone());
        Ok(self.backend.with_context(&ctx).work(delay_ms).await?)
    }
    fn ask_sync(&self, ctx: Context, delay_ms: u64) -> Result<u64, Status> {
        let _ended = Ended(self.ended.clone());
        let backend = BackendBlockingClient::new(self.backend.channel().clone());
        Ok(backend.with_context(&ctx).work(delay_ms)?)
    }
    async fn relay(&self, ctx: Context, key: String) -> Result<Option<String>, Status> {
        Ok(self.backend.with_context(&ctx).seen(key).await?)
    }
    fn relay_sync(&self, ctx: Context, key: String) -> Result<Option<String>, Status> {
        let backend = BackendBlockingClient::new(self.backend.channel().clone());
        Ok(backend.with_context(&ctx).seen(key)?)
    }
    async fn relay_spawned(&self, ctx: Context, key: String) -> Result<Option<String>, Status> {
        let backend = self.backend.clone();
        let task = tokio::spawn(async move { backend.with_context(&ctx).seen(key).await });
        Ok(task.await.expect("the task does not panic")?)
    }
    async fn remaining(&self, ctx: Context) -> Result<Option<u64>, Status> {
        Ok(self.backend.with_context(&ctx).remaining_ms().await?)
    }
    fn ended(&self) -> u64 {
        self.ended.load(Ordering::SeqCst)
    }
}

/// Two hosts of binding `b`: `Backend`, and `Frontdesk` calling it; a client of each.
struct Chain {
    backend_host: keel::Host,
    frontdesk_host: keel::Host,
    backend: BackendClient,
    frontdesk: FrontdeskClient,
}

impl Chain {
    async fn start(b: Binding) -> Chain {
        let backend_host =
            b.start(keel::Host::builder().service(BackendServer::new(BackendImpl::default())));
        let next = BackendClient::new(b.channel(backend_host.url()));
        let frontdesk_host = b.start(keel::Host::builder().service(FrontdeskServer::new(
            FrontdeskImpl {
                backend: next,
                ended: Arc::default(),
            },
        )));
        let backend = BackendClient::new(b.channel(backend_host.url()));
        let frontdesk = FrontdeskClient::new(b.channel(frontdesk_host.url()));
        backend.open().await.unwrap();
        frontdesk.open().await.unwrap();
        Chain {
            backend_host,
            frontdesk_host,
            backend,
            frontdesk,
        }
    }

    async fn stats(&self) -> Stats {
        self.backend.stats().await.unwrap()
    }

    /// Polls Backend's stats (every 5 ms, for up to `limit`) until `cond` holds.
    async fn until(&self, limit: Duration, cond: impl Fn(Stats) -> bool) -> Stats {
        let end = Instant::now() + limit;
        loop {
            let stats = self.stats().await;
            if cond(stats) || Instant::now() >= end {
                return stats;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn shutdown(self) {
        self.frontdesk_host.shutdown_async().await;
        self.backend_host.shutdown_async().await;
    }
}

/// A caller with a 200 ms deadline asks for 2 s of work two hops down: it gets
/// `deadline_exceeded`, and Backend's handler is cancelled long before its 2 s sleep would
/// have ended (with a 60 s default deadline downstream and no propagation, the blocking
/// handler's call would run the full 2 s).
async fn a_deadline_reaches_two_hops_down_and_cancels_there(b: Binding) {
    let chain = Chain::start(b).await;
    let caller = chain.frontdesk.with_deadline(Duration::from_millis(200));
    for (round, sync) in [false, true].into_iter().enumerate() {
        let round = round as u64 + 1;
        let asked = Instant::now();
        let err = match sync {
            false => caller.ask(2000).await.unwrap_err(),
            true => caller.ask_sync(2000).await.unwrap_err(),
        };
        assert!(err.is_timeout(), "{b:?} sync={sync}: {err}");
        let stats = chain
            .until(Duration::from_secs(2), |s| s.cancelled == round)
            .await;
        let ended = asked.elapsed();
        assert_eq!(
            stats,
            Stats {
                started: round,
                completed: 0,
                cancelled: round
            },
            "{b:?} sync={sync}: Backend's handler was not cancelled"
        );
        assert!(
            ended < Duration::from_millis(2000),
            "{b:?} sync={sync}: Backend's handler ended after {ended:?}, no sooner than its sleep"
        );
    }
    chain.shutdown().await;
}

/// The deadline Backend sees is the caller's, not the channel's 60 s default (the issue's
/// trial: a handler with 300 ms left made a call that arrived with 59,999 ms).
async fn the_downstream_call_inherits_the_remaining_deadline(b: Binding) {
    let chain = Chain::start(b).await;
    let left = chain
        .frontdesk
        .with_deadline(Duration::from_millis(300))
        .remaining()
        .await
        .unwrap()
        .expect("a deadline downstream");
    assert!(left <= 300, "{b:?}: Backend saw {left} ms left");
    // Without a context, the channel's default applies.
    let left = chain.backend.remaining_ms().await.unwrap().unwrap();
    assert!(left > 30_000, "{b:?}: {left} ms");
    chain.shutdown().await;
}

/// A caller that goes away mid-call (its future dropped) cancels both hops: Frontdesk's
/// handler ends (a blocking one wakes from its blocking call) and Backend's is cancelled.
async fn dropping_the_caller_cancels_both_hops(b: Binding) {
    let chain = Chain::start(b).await;
    let ended = chain.frontdesk.ended().await.unwrap();
    assert_eq!(ended, 0);
    for (round, sync) in [false, true].into_iter().enumerate() {
        let round = round as u64 + 1;
        let caller = chain.frontdesk.clone();
        let call = tokio::spawn(async move {
            match sync {
                false => caller.ask(2000).await,
                true => caller.ask_sync(2000).await,
            }
        });
        let started = chain
            .until(Duration::from_secs(10), |s| s.started == round)
            .await;
        assert_eq!(
            started.started, round,
            "{b:?} sync={sync}: Backend never started"
        );
        let dropped = Instant::now();
        call.abort();
        let stats = chain
            .until(Duration::from_secs(2), |s| s.cancelled == round)
            .await;
        assert_eq!(
            stats,
            Stats {
                started: round,
                completed: 0,
                cancelled: round
            },
            "{b:?} sync={sync}: Backend's handler was not cancelled"
        );
        let mut ended = 0;
        while dropped.elapsed() < Duration::from_secs(2) {
            ended = chain.frontdesk.ended().await.unwrap();
            if ended == round {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            ended, round,
            "{b:?} sync={sync}: Frontdesk's handler did not end"
        );
        assert!(
            dropped.elapsed() < Duration::from_millis(2000),
            "{b:?} sync={sync}: the hops ended after {:?}, no sooner than Backend's sleep",
            dropped.elapsed()
        );
    }
    chain.shutdown().await;
}

/// The caller's `x-request-id` (and trace context) arrive two hops down, from an async and a
/// blocking handler; a key not on the channel's list does not.
async fn the_request_id_arrives_two_hops_down(b: Binding) {
    let chain = Chain::start(b).await;
    let mut md = Metadata::new();
    md.insert("x-request-id", "req-42").unwrap();
    md.insert(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    .unwrap();
    md.insert("x-private", "not for downstream").unwrap();
    let caller = chain.frontdesk.with_metadata(md);
    for sync in [false, true] {
        let relay = |key: &str| {
            let caller = caller.clone();
            let key = key.to_owned();
            async move {
                match sync {
                    false => caller.relay(key).await.unwrap(),
                    true => caller.relay_sync(key).await.unwrap(),
                }
            }
        };
        assert_eq!(
            relay("x-request-id").await.as_deref(),
            Some("req-42"),
            "{b:?}"
        );
        assert_eq!(
            relay("traceparent").await.as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            "{b:?}"
        );
        assert_eq!(relay("x-private").await, None, "{b:?}");
    }
    chain.shutdown().await;
}

common::binding_matrix! {
    [] {
        async fn a_deadline_reaches_two_hops_down_and_cancels_there;
        async fn the_downstream_call_inherits_the_remaining_deadline;
        async fn dropping_the_caller_cancels_both_hops;
        async fn the_request_id_arrives_two_hops_down;
    }
}

/// A hop for the test below: calls Backend with its context.
#[derive(Clone)]
struct Hop(BackendClient);
#[keel::contract]
pub trait Relay {
    async fn hop(&self, ctx: Context, key: String)
        -> Result<(Option<u64>, Option<String>), Status>;
    async fn overridden(&self, ctx: Context) -> Result<Option<String>, Status>;
}
impl Relay for Hop {
    async fn hop(
        &self,
        ctx: Context,
        key: String,
    ) -> Result<(Option<u64>, Option<String>), Status> {
        let next = self.0.with_context(&ctx);
        Ok((next.remaining_ms().await?, next.seen(key).await?))
    }
    async fn overridden(&self, ctx: Context) -> Result<Option<String>, Status> {
        let mut own = Metadata::new();
        own.insert("x-tenant", "own").unwrap();
        Ok(self
            .0
            .with_context(&ctx)
            .with_metadata(own)
            .seen("x-tenant".into())
            .await?)
    }
}

/// The channel's settings: a margin is taken off the inherited deadline; the propagated keys
/// are the channel's list, and the call's own metadata wins over a propagated value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_margin_and_the_key_list_are_the_channels() {
    let b = Binding::Tcp;
    let backend_host =
        b.start(keel::Host::builder().service(BackendServer::new(BackendImpl::default())));
    let channel = b.channel_with(backend_host.url(), |c| {
        c.propagation_margin(Duration::from_millis(150))
            .propagate_metadata(["X-Tenant"])
    });
    assert_eq!(channel.config().propagated_metadata, ["x-tenant"]);

    let relay_host =
        b.start(keel::Host::builder().service(RelayServer::new(Hop(BackendClient::new(channel)))));
    let mut md = Metadata::new();
    md.insert("x-tenant", "acme").unwrap();
    md.insert("x-request-id", "req-1").unwrap();
    let relay = RelayClient::new(b.channel(relay_host.url()))
        .with_metadata(md)
        .with_deadline(Duration::from_millis(400));
    let (left, tenant) = relay.hop("x-tenant".into()).await.unwrap();
    let left = left.expect("a deadline downstream");
    assert!(left <= 250, "a 150 ms margin off 400 ms left {left} ms");
    assert_eq!(tenant.as_deref(), Some("acme"));
    let (_, request_id) = relay.hop("x-request-id".into()).await.unwrap();
    assert_eq!(
        request_id, None,
        "x-request-id is not on this channel's list"
    );
    assert_eq!(relay.overridden().await.unwrap().as_deref(), Some("own"));
    // A margin larger than what is left: the call is not sent, and fails as timed out.
    let err = relay
        .with_deadline(Duration::from_millis(100))
        .hop("x-tenant".into())
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    relay_host.shutdown_async().await;
    backend_host.shutdown_async().await;
}

/// A `keel.call` span as recorded: its side, its method, the host it calls (a client span's),
/// and its parent's side and method.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpanHop {
    target: String,
    method: String,
    address: Option<String>,
    parent: Option<(String, String)>,
}

/// A span's `rpc.method`, and its `server.address` (a client span's).
#[derive(Default)]
struct Method(String, Option<String>);

impl tracing::field::Visit for Method {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "rpc.method" => self.0 = format!("{value:?}"),
            "server.address" => self.1 = Some(format!("{value:?}")),
            _ => {}
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "rpc.method" => self.0 = value.to_owned(),
            "server.address" => self.1 = Some(value.to_owned()),
            _ => {}
        }
    }
}

/// Records every `keel.call` span with its parent `keel.call`, if any.
#[derive(Clone, Default)]
struct SpanHops(Arc<std::sync::Mutex<Vec<SpanHop>>>);

/// A span's side and method, kept in its extensions.
struct Named(String, String);

impl<S> tracing_subscriber::Layer<S> for SpanHops
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() != "keel.call" {
            return;
        }
        let mut method = Method::default();
        attrs.record(&mut method);
        let target = attrs.metadata().target().to_owned();
        let span = ctx.span(id).expect("the new span");
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<Named>()
                .map(|Named(t, m)| (t.clone(), m.clone()))
        });
        span.extensions_mut()
            .insert(Named(target.clone(), method.0.clone()));
        self.0.lock().unwrap().push(SpanHop {
            target,
            method: method.0,
            address: method.1,
            parent,
        });
    }
}

/// The outgoing call's span is a child of the incoming call's, from an async handler, a
/// blocking one, and a task the handler spawned (which no span follows by itself).
///
/// The subscriber is the process's, so it also sees the spans of the tests running beside
/// this one (other chains' `hop` calls `seen` too): the outgoing span is the one to this
/// test's Backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outgoing_span_is_a_child_of_the_incoming() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let hops = SpanHops::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(hops.clone()))
        .unwrap();
    let chain = Chain::start(Binding::Tcp).await;
    let backend = chain.backend_host.url().to_string();
    for relay in ["relay", "relay_sync", "relay_spawned"] {
        hops.0.lock().unwrap().clear();
        let answer = match relay {
            "relay" => chain.frontdesk.relay("k".into()).await,
            "relay_sync" => chain.frontdesk.relay_sync("k".into()).await,
            _ => chain.frontdesk.relay_spawned("k".into()).await,
        };
        assert_eq!(answer.unwrap(), None);
        let all = hops.0.lock().unwrap().clone();
        let outgoing = all
            .iter()
            .find(|h| {
                h.target == "keel::client"
                    && h.method == "seen"
                    && h.address.as_deref() == Some(backend.as_str())
            })
            .unwrap_or_else(|| {
                panic!("{relay}: no client span for Backend.seen at {backend}: {all:#?}")
            });
        assert_eq!(
            outgoing.parent,
            Some(("keel::server".to_owned(), relay.to_owned())),
            "{relay}: {all:#?}"
        );
    }
    chain.shutdown().await;
}
