//! Retries: calls of `#[keel(idempotent)]` operations are sent again after failures that say
//! the host could not take them, within the policy's attempts and its budget; other calls
//! never are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel::client::RetryPolicy;
use keel::{Channel, Status, StatusCode};

/// Fails on demand.
#[keel::contract]
pub trait Flaky {
    /// Fails with the configured status while failures remain; then the calls that arrived.
    #[keel(idempotent)]
    fn read(&self) -> Result<u64, keel::Status>;
    /// The same, but not idempotent.
    fn write(&self) -> Result<u64, keel::Status>;
}

#[derive(Clone)]
struct FlakyImpl {
    failures: Arc<AtomicU64>,
    calls: Arc<AtomicU64>,
    code: StatusCode,
}

impl FlakyImpl {
    fn new(failures: u64, code: StatusCode) -> FlakyImpl {
        FlakyImpl {
            failures: Arc::new(AtomicU64::new(failures)),
            calls: Arc::default(),
            code,
        }
    }

    fn answer(&self) -> Result<u64, Status> {
        let calls = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(Status::new(self.code, "not now"));
        }
        Ok(calls)
    }
}

impl Flaky for FlakyImpl {
    fn read(&self) -> Result<u64, Status> {
        self.answer()
    }
    fn write(&self) -> Result<u64, Status> {
        self.answer()
    }
}

fn serve(url: &str, imp: &FlakyImpl) -> keel::Host {
    keel::Host::builder()
        .service(FlakyServer::new(imp.clone()))
        .endpoint(url)
        .start()
        .unwrap()
}

async fn client(host: &keel::Host, policy: RetryPolicy) -> (FlakyClient, Channel) {
    let channel = Channel::builder(host.url()).retry(policy).build().unwrap();
    (FlakyClient::new(channel.clone()), channel)
}

#[cfg(feature = "http")]
const URLS: &[&str] = &["tcp://127.0.0.1:0", "http://127.0.0.1:0"];
#[cfg(not(feature = "http"))]
const URLS: &[&str] = &["tcp://127.0.0.1:0"];

#[tokio::test]
async fn an_idempotent_call_is_retried_until_it_succeeds() {
    for url in URLS {
        for code in [
            StatusCode::Unavailable,
            StatusCode::Busy,
            StatusCode::ShuttingDown,
        ] {
            let imp = FlakyImpl::new(2, code);
            let host = serve(url, &imp);
            let (c, channel) = client(&host, RetryPolicy::default()).await;
            assert_eq!(c.read().await.unwrap(), 3, "{url} {code:?}");
            let stats = channel.stats();
            assert_eq!((stats.calls, stats.retries), (1, 2), "{url} {code:?}");
            host.shutdown_async().await;
        }
    }
}

#[tokio::test]
async fn other_failures_and_other_operations_are_never_retried() {
    for url in URLS {
        // Not idempotent: sent once.
        let imp = FlakyImpl::new(1, StatusCode::Unavailable);
        let host = serve(url, &imp);
        let (c, channel) = client(&host, RetryPolicy::default()).await;
        let err = c.write().await.unwrap_err();
        assert_eq!(err.status_code(), Some(StatusCode::Unavailable), "{url}");
        assert_eq!(imp.calls.load(Ordering::SeqCst), 1, "{url}");
        assert_eq!(channel.stats().retries, 0);
        host.shutdown_async().await;

        // Idempotent, but the failure is the operation's own answer.
        let imp = FlakyImpl::new(1, StatusCode::Internal);
        let host = serve(url, &imp);
        let (c, channel) = client(&host, RetryPolicy::default()).await;
        let err = c.read().await.unwrap_err();
        assert_eq!(err.status_code(), Some(StatusCode::Internal), "{url}");
        assert_eq!(imp.calls.load(Ordering::SeqCst), 1, "{url}");
        assert_eq!(channel.stats().retries, 0);
        host.shutdown_async().await;
    }
}

#[tokio::test]
async fn attempts_and_the_budget_bound_retries() {
    // At most `max_attempts` in all.
    let imp = FlakyImpl::new(10, StatusCode::Unavailable);
    let host = serve("tcp://127.0.0.1:0", &imp);
    let (c, channel) = client(&host, RetryPolicy::default().max_attempts(3)).await;
    assert!(c.read().await.is_err());
    assert_eq!(imp.calls.load(Ordering::SeqCst), 3);
    assert_eq!(channel.stats().retries, 2);

    // An empty budget: no retry at all, and it says so.
    let imp = FlakyImpl::new(10, StatusCode::Unavailable);
    let host = serve("tcp://127.0.0.1:0", &imp);
    let (c, channel) = client(&host, RetryPolicy::default().budget(0.0, 0)).await;
    assert!(c.read().await.is_err());
    assert_eq!(imp.calls.load(Ordering::SeqCst), 1);
    let stats = channel.stats();
    assert_eq!((stats.retries, stats.retries_refused_by_budget), (0, 1));

    // 10 % of calls: 100 calls that all fail get about 10 retries (and the minimum: none).
    let imp = FlakyImpl::new(u64::MAX, StatusCode::Unavailable);
    let host = serve("tcp://127.0.0.1:0", &imp);
    let (c, channel) = client(&host, RetryPolicy::default().budget(0.1, 0)).await;
    for _ in 0..100 {
        assert!(c.read().await.is_err());
    }
    let stats = channel.stats();
    println!(
        "100 failing idempotent calls: {} retries sent, {} refused by the budget",
        stats.retries, stats.retries_refused_by_budget
    );
    assert!((9..=10).contains(&stats.retries), "{stats:?}");
    // Each call that was not granted a retry (or a further one) was refused one.
    assert!(stats.retries_refused_by_budget >= 90, "{stats:?}");
}

/// HTTP: a 503 answer's `Retry-After` (keel's hosts send 1 s with `Busy`) is waited out.
#[cfg(feature = "http")]
#[tokio::test]
async fn an_http_retry_after_is_honoured() {
    use std::time::{Duration, Instant};
    let imp = FlakyImpl::new(1, StatusCode::Busy);
    let host = serve("http://127.0.0.1:0", &imp);
    let (c, channel) = client(&host, RetryPolicy::default()).await;
    let start = Instant::now();
    assert_eq!(c.read().await.unwrap(), 2);
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(1), "retried after {took:?}");
    assert_eq!(channel.stats().retries, 1);

    // A deadline shorter than the wait: not retried, the host's answer stands.
    let imp = FlakyImpl::new(1, StatusCode::Busy);
    let host = serve("http://127.0.0.1:0", &imp);
    let (c, channel) = client(&host, RetryPolicy::default()).await;
    let c = c.with_deadline(Duration::from_millis(300));
    let err = c.read().await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert_eq!(channel.stats().retries, 0);
}
