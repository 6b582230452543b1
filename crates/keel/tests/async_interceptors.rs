//! Async interceptors on both sides (`keel::host::AsyncInterceptor`,
//! `keel::client::AsyncInterceptor`): an identity put in the context after an await reaches
//! blocking and async handlers on every binding; a refusal comes before the arguments are
//! decoded; the order of hooks with synchronous interceptors; the deadline, a cancelled caller
//! and a panic while one waits; descriptions pass through them. Real sockets on port 0.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Binding;
use keel::client::{self, ClientCall};
use keel::host::{AsyncInterceptor, Interceptor};
use keel::{Context, Status, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[keel::contract]
pub trait Guarded {
    /// The identity the interceptors established (async handler).
    async fn whoami(&self, ctx: Context) -> String;
    /// The same from a blocking handler.
    fn whoami_sync(&self, ctx: Context) -> String;
    /// Sleeps `ms` (async), then answers the identity: a handler that waits.
    async fn whoami_later(&self, ctx: Context, ms: u64) -> String;
}

#[derive(Clone, Default)]
struct Impl;

/// The identity an async interceptor established.
#[derive(Debug, Clone)]
struct Caller(String);

fn identity(ctx: &Context) -> String {
    ctx.extension::<Caller>()
        .map_or_else(|| "nobody".to_string(), |c| c.0)
}

impl Guarded for Impl {
    async fn whoami(&self, ctx: Context) -> String {
        identity(&ctx)
    }
    fn whoami_sync(&self, ctx: Context) -> String {
        identity(&ctx)
    }
    async fn whoami_later(&self, ctx: Context, ms: u64) -> String {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        identity(&ctx)
    }
}

/// A simulated token check: awaits `wait`, then admits `Bearer <user>` as `<user>`; `hang`
/// waits forever; `boom` panics. Logs its hooks.
struct TokenCheck {
    wait: Duration,
    log: Arc<Mutex<Vec<String>>>,
    afters: Arc<AtomicUsize>,
}

impl AsyncInterceptor for TokenCheck {
    async fn before(&self, ctx: &Context) -> Result<(), Status> {
        let token = ctx.metadata().get("authorization").map(str::to_owned);
        self.log
            .lock()
            .unwrap()
            .push(format!("async before {}", ctx.operation()));
        tokio::time::sleep(self.wait).await;
        match token.as_deref().and_then(|t| t.strip_prefix("Bearer ")) {
            Some("hang") => std::future::pending().await,
            Some("boom") => panic!("the token service is on fire"),
            Some(user) => {
                ctx.insert_extension(Caller(user.to_owned()));
                Ok(())
            }
            None => Err(Status::unauthenticated("a bearer token is required")),
        }
    }

    fn after(&self, ctx: &Context, code: StatusCode) {
        self.afters.fetch_add(1, Ordering::SeqCst);
        self.log
            .lock()
            .unwrap()
            .push(format!("async after {} {code}", ctx.operation()));
    }
}

/// A synchronous interceptor that logs its hooks (it runs before the async one).
struct Logger(Arc<Mutex<Vec<String>>>);

impl Interceptor for Logger {
    fn before(&self, ctx: &Context) -> Result<(), Status> {
        self.0
            .lock()
            .unwrap()
            .push(format!("sync before {}", ctx.operation()));
        Ok(())
    }
    fn after(&self, ctx: &Context, code: StatusCode) {
        self.0
            .lock()
            .unwrap()
            .push(format!("sync after {} {code}", ctx.operation()));
    }
}

struct Guard {
    host: keel::Host,
    log: Arc<Mutex<Vec<String>>>,
    afters: Arc<AtomicUsize>,
}

fn guarded(b: Binding, wait: Duration) -> Guard {
    let log = Arc::new(Mutex::new(Vec::new()));
    let afters = Arc::new(AtomicUsize::new(0));
    let host = b.start(
        keel::Host::builder()
            .service(GuardedServer::new(Impl))
            .async_interceptor(TokenCheck {
                wait,
                log: log.clone(),
                afters: afters.clone(),
            })
            .interceptor(Logger(log.clone())),
    );
    Guard { host, log, afters }
}

/// Sends `Authorization: Bearer <user>` with every call, read after an await.
struct Bearer(Arc<tokio::sync::RwLock<String>>);

impl client::AsyncInterceptor for Bearer {
    async fn before(&self, call: &mut ClientCall) -> Result<(), Status> {
        let user = self.0.read().await.clone();
        if user == "refuse" {
            return Err(Status::failed_precondition("no token to send"));
        }
        if user == "slow" {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        call.metadata_mut()
            .insert("authorization", &format!("Bearer {user}"))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(())
    }
}

fn client_as(b: Binding, host: &keel::Host, user: &str) -> GuardedClient {
    let token = Arc::new(tokio::sync::RwLock::new(user.to_string()));
    GuardedClient::new(b.channel_with(host.url(), |c| c.async_interceptor(Bearer(token))))
}

/// An interceptor that awaits 1 ms per call admits 1,000 calls (blocking, async, and async
/// handlers that wait), each with the identity it found.
async fn an_identity_set_after_an_await_reaches_every_kind_of_handler(b: Binding) {
    let g = guarded(b, Duration::from_millis(1));
    let client = client_as(b, &g.host, "alice");
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..1000u32 {
        let client = client.clone();
        calls.spawn(async move {
            match i % 3 {
                0 => client.whoami().await,
                1 => client.whoami_sync().await,
                _ => client.whoami_later(1).await,
            }
        });
        // At most 50 in flight (HTTP/1.1 opens a connection per call in flight).
        if calls.len() >= 50 {
            assert_eq!(calls.join_next().await.unwrap().unwrap().unwrap(), "alice");
        }
    }
    while let Some(answer) = calls.join_next().await {
        assert_eq!(answer.unwrap().unwrap(), "alice");
    }
    assert_eq!(g.afters.load(Ordering::SeqCst), 1000);
    g.host.shutdown_async().await;
}

/// The async interceptor refuses; the hooks run sync then async before, async then sync after.
async fn a_refusal_answers_the_call_and_hooks_run_in_order(b: Binding) {
    let g = guarded(b, Duration::ZERO);
    let plain = GuardedClient::new(b.channel(g.host.url()));
    let err = plain.whoami().await.unwrap_err();
    assert_eq!(
        err.status_code(),
        Some(StatusCode::Unauthenticated),
        "{err}"
    );
    assert_eq!(err.message(), "a bearer token is required");
    assert_eq!(
        *g.log.lock().unwrap(),
        [
            "sync before whoami",
            "async before whoami",
            "async after whoami unauthenticated",
            "sync after whoami unauthenticated"
        ]
    );
    g.host.shutdown_async().await;
}

/// A caller whose deadline passes while the interceptor waits gets `DeadlineExceeded` (or its
/// own timeout, whichever side notices first); a caller that gives up leaves the interceptor's
/// `after` seeing `Cancelled`; a panicking interceptor answers `Internal`. The host serves on.
async fn deadlines_cancellation_and_panics_while_an_interceptor_waits(b: Binding) {
    let g = guarded(b, Duration::ZERO);
    let hang = client_as(b, &g.host, "hang");
    let err = hang
        .with_deadline(Duration::from_millis(200))
        .whoami()
        .await
        .unwrap_err();
    assert!(
        err.is_timeout() || err.status_code() == Some(StatusCode::DeadlineExceeded),
        "{err}"
    );
    // The host's side of it: the interceptor's `after` hears the call ended.
    assert!(common::poll::eventually(|| g.afters.load(Ordering::SeqCst) == 1).await);
    // Dropped by its caller while the interceptor waits (no deadline soon).
    let call = tokio::spawn(async move { hang.whoami().await });
    let started = |log: &Mutex<Vec<String>>| {
        let log = log.lock().unwrap();
        log.iter().filter(|l| l.starts_with("async before")).count()
    };
    assert!(common::poll::eventually(|| started(&g.log) == 2).await);
    call.abort();
    assert!(common::poll::eventually(|| g.afters.load(Ordering::SeqCst) == 2).await);
    let last = g.log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last, "sync after whoami cancelled");
    let err = client_as(b, &g.host, "boom").whoami().await.unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::Internal), "{err}");
    assert_eq!(client_as(b, &g.host, "bob").whoami().await.unwrap(), "bob");
    g.host.shutdown_async().await;
}

/// The client's async interceptor: a refusal fails the call locally (nothing is sent); one
/// that outlives the call's deadline fails it as a timeout.
async fn client_async_interceptors_refuse_and_keep_the_deadline(b: Binding) {
    let g = guarded(b, Duration::ZERO);
    let err = client_as(b, &g.host, "refuse").whoami().await.unwrap_err();
    assert_eq!(
        err.status_code(),
        Some(StatusCode::FailedPrecondition),
        "{err}"
    );
    let err = client_as(b, &g.host, "slow")
        .with_deadline(Duration::from_millis(100))
        .whoami()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(g.host.stats().calls_total, 0, "nothing reached the host");
    g.host.shutdown_async().await;
}

common::binding_matrix! {
    [] {
        async fn an_identity_set_after_an_await_reaches_every_kind_of_handler;
        async fn a_refusal_answers_the_call_and_hooks_run_in_order;
        async fn deadlines_cancellation_and_panics_while_an_interceptor_waits;
        async fn client_async_interceptors_refuse_and_keep_the_deadline;
    }
}

/// Sends one HTTP/1.1 request to `url`'s port and returns the whole answer.
async fn http1(url: &str, request: String) -> String {
    let addr = url.strip_prefix("http://").unwrap();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    answer
}

/// The async interceptor refuses before the arguments are decoded: a malformed body without a
/// token is `unauthenticated`, not `bad_request`; with a token it is `bad_request`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_comes_before_the_arguments_are_decoded() {
    let g = guarded(Binding::Http1, Duration::from_millis(1));
    let post = |auth: &str| {
        format!(
            "POST /Guarded/whoami_later HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             {auth}content-length: 5\r\nconnection: close\r\n\r\n{{{{{{{{{{"
        )
    };
    let refused = http1(g.host.url(), post("")).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(refused.contains("a bearer token is required"), "{refused}");
    let malformed = http1(g.host.url(), post("authorization: Bearer alice\r\n")).await;
    assert!(malformed.starts_with("HTTP/1.1 400"), "{malformed}");
    g.host.shutdown_async().await;
}

/// `GET /openapi.json` and `GET /{Service}` pass through the async interceptors too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptions_pass_through_async_interceptors() {
    let g = guarded(Binding::Http1, Duration::from_millis(1));
    for path in ["/Guarded", "/openapi.json"] {
        if path == "/openapi.json" && !cfg!(feature = "openapi") {
            continue;
        }
        let get = |auth: &str| {
            format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n")
        };
        let refused = http1(g.host.url(), get("")).await;
        assert!(refused.starts_with("HTTP/1.1 401"), "{path}: {refused}");
        let admitted = http1(g.host.url(), get("authorization: Bearer alice\r\n")).await;
        assert!(admitted.starts_with("HTTP/1.1 200"), "{path}: {admitted}");
    }
    g.host.shutdown_async().await;
}

/// gRPC's `grpc.health.v1.Health`, as a Kubernetes probe or grpc-health-probe calls it (the
/// host's own is a standard service, kept under its full gRPC name).
#[allow(unreachable_pub)]
mod health {
    use serde::{Deserialize, Serialize};

    #[keel::contract(package = "grpc.health.v1")]
    pub trait Health {
        async fn check(&self, service: String) -> HealthCheckResponse;
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub struct HealthCheckResponse {
        pub status: ServingStatus,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum ServingStatus {
        Unknown,
        Serving,
        NotServing,
        ServiceUnknown,
    }
}

/// The standard services pass through async interceptors like any call, and are found again
/// after them under their full gRPC names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_checks_pass_through_async_interceptors() {
    let g = guarded(Binding::Http2, Duration::from_millis(1));
    let url = g.host.url().replace("http://", "grpc://");
    let anonymous = health::HealthClient::new(keel::Channel::new(&url).unwrap());
    let err = anonymous.check(String::new()).await.unwrap_err();
    assert_eq!(
        err.status_code(),
        Some(StatusCode::Unauthenticated),
        "{err}"
    );
    let channel = keel::Channel::builder(&url)
        .default_metadata("authorization", "Bearer kubelet")
        .build()
        .unwrap();
    let answer = health::HealthClient::new(channel)
        .check(String::new())
        .await
        .unwrap();
    assert_eq!(answer.status, health::ServingStatus::Serving);
    g.host.shutdown_async().await;
}
