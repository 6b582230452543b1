//! Hedging (issue 33): a call of an `#[keel(idempotent)]` operation whose first attempt goes
//! unanswered past the policy's delay is sent again, to another host of a balanced channel;
//! the first answer wins and the loser is cancelled on the wire, so its handler sees it. Other
//! calls are never hedged, and hedges stop when the retry budget is spent. Real sockets on
//! port 0; the stalled handlers wait for their cancellation (or a minute), so nothing here
//! depends on how fast the machine is.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::eventually;
use keel::client::{HedgeDelay, HedgingPolicy, HttpVersion, RetryPolicy};
use keel::{Channel, Context};

#[keel::contract]
pub trait Tail {
    /// The call's arrival number over every host sharing the counters, and this host's id.
    /// The arrivals the host is told to stall wait until the call is cancelled.
    #[keel(idempotent)]
    async fn read(&self, ctx: Context) -> (u64, u64);
    /// The same, not idempotent.
    async fn write(&self, ctx: Context) -> (u64, u64);
}

/// Counters shared by every host of a test.
#[derive(Default)]
struct Shared {
    arrivals: AtomicU64,
    cancelled: AtomicU64,
    /// The hosts the stalled arrivals reached, in order.
    stalled_at: Mutex<Vec<u64>>,
}

#[derive(Clone)]
struct TailImpl {
    id: u64,
    shared: Arc<Shared>,
    /// Which arrivals stall: the first only, or every odd one.
    every_odd: bool,
}

/// Counts a handler that did not finish as cancelled, however it ended: its future dropped
/// (the host aborts an async handler whose call is cancelled) or its context cancelled.
struct Unfinished(Arc<Shared>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        self.0.cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

impl TailImpl {
    async fn answer(&self, ctx: Context) -> (u64, u64) {
        let n = self.shared.arrivals.fetch_add(1, Ordering::SeqCst) + 1;
        let stall = if self.every_odd { n % 2 == 1 } else { n == 1 };
        if stall {
            self.shared.stalled_at.lock().unwrap().push(self.id);
            let _unfinished = Unfinished(self.shared.clone());
            tokio::select! {
                () = ctx.cancelled() => {}
                () = tokio::time::sleep(Duration::from_secs(60)) => {}
            }
        }
        (n, self.id)
    }
}

impl Tail for TailImpl {
    async fn read(&self, ctx: Context) -> (u64, u64) {
        self.answer(ctx).await
    }
    async fn write(&self, ctx: Context) -> (u64, u64) {
        self.answer(ctx).await
    }
}

fn serve(url: &str, id: u64, shared: &Arc<Shared>, every_odd: bool) -> keel::Host {
    keel::Host::builder()
        .service(TailServer::new(TailImpl {
            id,
            shared: shared.clone(),
            every_odd,
        }))
        .endpoint(url)
        .start()
        .unwrap()
}

/// A second attempt after 50 ms.
fn policy() -> HedgingPolicy {
    HedgingPolicy::default()
        .max_attempts(2)
        .delay(HedgeDelay::Fixed(Duration::from_millis(50)))
}

/// keel-wire (a Cancel frame), HTTP/1.1 (a closed connection), HTTP/2 (a reset stream).
#[cfg(feature = "http")]
const BINDINGS: &[(&str, HttpVersion)] = &[
    ("tcp://127.0.0.1:0", HttpVersion::Auto),
    ("http://127.0.0.1:0", HttpVersion::Http1),
    ("http://127.0.0.1:0", HttpVersion::Http2),
];
#[cfg(not(feature = "http"))]
const BINDINGS: &[(&str, HttpVersion)] = &[("tcp://127.0.0.1:0", HttpVersion::Auto)];

#[tokio::test]
async fn a_stalled_first_attempt_is_answered_by_the_hedge_and_cancelled() {
    for &(url, version) in BINDINGS {
        let label = format!("{url} {version:?}");
        let shared = Arc::new(Shared::default());
        let host = serve(url, 1, &shared, false);
        let channel = Channel::builder(host.url())
            .http_version(version)
            .hedging(policy())
            .build()
            .unwrap();
        let client = TailClient::new(channel.clone());
        let (n, _) = client.read().await.unwrap();
        assert_eq!(n, 2, "{label}: the hedge's answer");
        assert!(
            eventually(|| shared.cancelled.load(Ordering::SeqCst) == 1).await,
            "{label}: the losing attempt's handler is cancelled"
        );
        let stats = channel.stats();
        assert_eq!((stats.hedges, stats.hedges_won), (1, 1), "{label}");
        assert_eq!(stats.calls, 1, "{label}");
        // Unstalled calls are answered by their first attempt: nothing more is sent.
        let (n, _) = client.read().await.unwrap();
        assert_eq!(n, 3, "{label}");
        host.shutdown_async().await;
    }
}

#[tokio::test]
async fn calls_of_other_operations_are_never_hedged() {
    let shared = Arc::new(Shared::default());
    let host = serve("tcp://127.0.0.1:0", 1, &shared, false);
    let channel = Channel::builder(host.url())
        .hedging(policy())
        .build()
        .unwrap();
    let client = TailClient::new(channel.clone()).with_deadline(Duration::from_millis(500));
    let e = client.write().await.unwrap_err();
    assert!(e.is_timeout());
    assert_eq!(shared.arrivals.load(Ordering::SeqCst), 1, "sent once");
    assert_eq!(channel.stats().hedges, 0);
    // A client can turn the channel's hedging off for its calls.
    let shared = Arc::new(Shared::default());
    let host = serve("tcp://127.0.0.1:0", 1, &shared, false);
    let channel = Channel::builder(host.url())
        .hedging(policy())
        .build()
        .unwrap();
    let client = TailClient::new(channel.clone())
        .with_deadline(Duration::from_millis(500))
        .with_hedging(HedgingPolicy::disabled());
    assert!(client.read().await.unwrap_err().is_timeout());
    assert_eq!(shared.arrivals.load(Ordering::SeqCst), 1);
    // And a client of a channel without hedging can turn it on.
    let shared = Arc::new(Shared::default());
    let host = serve("tcp://127.0.0.1:0", 1, &shared, false);
    let client = TailClient::new(Channel::new(host.url()).unwrap()).with_hedging(policy());
    assert_eq!(client.read().await.unwrap().0, 2, "the hedge's answer");
}

#[tokio::test]
async fn no_hedge_without_a_retry_budget_token() {
    let shared = Arc::new(Shared::default());
    let host = serve("tcp://127.0.0.1:0", 1, &shared, false);
    let channel = Channel::builder(host.url())
        .retry(RetryPolicy::default().budget(0.0, 0))
        .hedging(policy())
        .build()
        .unwrap();
    let client = TailClient::new(channel.clone()).with_deadline(Duration::from_millis(500));
    assert!(client.read().await.unwrap_err().is_timeout());
    assert_eq!(shared.arrivals.load(Ordering::SeqCst), 1, "no hedge sent");
    let stats = channel.stats();
    assert_eq!((stats.hedges, stats.hedges_refused_by_budget), (0, 1));
}

#[tokio::test]
async fn a_balanced_channel_hedges_to_another_host() {
    let shared = Arc::new(Shared::default());
    let hosts: Vec<_> = (0..3)
        .map(|id| serve("tcp://127.0.0.1:0", id, &shared, true))
        .collect();
    let channel = Channel::balanced(hosts.iter().map(|h| h.url().to_string()))
        .hedging(policy())
        .connect()
        .await
        .unwrap();
    let client = TailClient::new(channel.clone());
    for call in 0..10 {
        let (n, answered_by) = client.read().await.unwrap();
        assert_eq!(n, 2 * call + 2, "the hedge answers");
        let stalled_at = shared.stalled_at.lock().unwrap()[call as usize];
        assert_ne!(
            answered_by, stalled_at,
            "call {call}: the hedge went to another host"
        );
    }
    assert!(eventually(|| shared.cancelled.load(Ordering::SeqCst) == 10).await);
    let stats = channel.stats();
    assert_eq!((stats.hedges, stats.hedges_won), (10, 10));
}
