//! Per-service throttles (`HostBuilder::service_throttle`), WCF's `serviceThrottling` per
//! service: a service whose calls hold their places cannot take a second service's places on
//! the same host. The slow calls wait on a gate the test opens, so what is shown is where each
//! call waits, not how long.

mod common;

use std::time::Duration;

use common::eventually;
use keel::host::ThrottleConfig;
use tokio::sync::watch;

/// Calls that hold their place until the gate opens.
#[keel::contract]
pub trait Slow {
    /// Waits for the gate, then returns `n`.
    async fn wait(&self, n: u64) -> u64;
}

/// Calls that return at once.
#[keel::contract]
pub trait Fast {
    /// Returns `n`.
    async fn ping(&self, n: u64) -> u64;
}

struct Gated(watch::Receiver<bool>);

impl Slow for Gated {
    async fn wait(&self, n: u64) -> u64 {
        let mut open = self.0.clone();
        let _ = open.wait_for(|open| *open).await;
        n
    }
}

struct Now;

impl Fast for Now {
    async fn ping(&self, n: u64) -> u64 {
        n
    }
}

/// A host of both services with 2 places running and 100 queued host-wide, `settings` on top;
/// its gate and a client of each service.
async fn host(
    settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
) -> (keel::Host, watch::Sender<bool>, SlowClient, FastClient) {
    let (gate, open) = watch::channel(false);
    let builder = keel::Host::builder()
        .service(SlowServer::new(Gated(open)))
        .service(FastServer::new(Now))
        .endpoint("tcp://127.0.0.1:0")
        .max_concurrent_calls(2)
        .max_queued_calls(100)
        .runtime(tokio::runtime::Handle::current());
    let host = settings(builder).start().unwrap();
    let channel = keel::Channel::builder(host.url()).build().unwrap();
    let slow = SlowClient::new(channel.clone());
    let fast = FastClient::new(channel);
    (host, gate, slow, fast)
}

/// Starts `n` slow calls; they run (or queue) until the gate opens.
fn hold(slow: &SlowClient, n: u64) -> Vec<tokio::task::JoinHandle<Result<u64, keel::Error>>> {
    (0..n)
        .map(|i| {
            let slow = slow.clone();
            tokio::spawn(async move { slow.wait(i).await })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_own_throttle_a_slow_service_takes_the_fast_ones_places() {
    let (host, gate, slow, fast) = host(|h| h).await;
    let held = hold(&slow, 4);
    assert!(eventually(|| host.stats().calls_queued == 2).await);
    // The host's two places are the slow calls': the fast call queues behind them, and stays
    // queued as long as the gate is shut (it cannot finish before the gate opens).
    let ping = tokio::spawn(async move { fast.ping(7).await });
    assert!(eventually(|| host.stats().calls_queued == 3).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !ping.is_finished(),
        "the fast call ran although no place was free"
    );
    gate.send_replace(true);
    assert_eq!(ping.await.unwrap().unwrap(), 7);
    for (i, call) in held.into_iter().enumerate() {
        assert_eq!(call.await.unwrap().unwrap(), i as u64);
    }
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_own_throttle_a_slow_service_leaves_the_host_places_to_others() {
    let (host, gate, slow, fast) =
        host(|h| h.service_throttle("Slow", ThrottleConfig::new(2, 100))).await;
    let held = hold(&slow, 4);
    assert!(eventually(|| host.stats().calls_queued == 2).await);
    // The slow calls hold their service's places (two run, two queue); the host's are free.
    for n in 0..20 {
        let answer = tokio::time::timeout(Duration::from_secs(30), fast.ping(n)).await;
        assert_eq!(answer.expect("the fast call waited").unwrap(), n);
    }
    assert_eq!(host.stats().calls_queued, 2);
    gate.send_replace(true);
    for (i, call) in held.into_iter().enumerate() {
        assert_eq!(call.await.unwrap().unwrap(), i as u64);
    }
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_service_queue_is_busy_and_names_the_service() {
    let (host, gate, slow, fast) =
        host(|h| h.service_throttle("Slow", ThrottleConfig::new(1, 1))).await;
    let held = hold(&slow, 2);
    assert!(eventually(|| host.stats().calls_queued == 1).await);
    let err = slow.wait(9).await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert!(err.to_string().contains("`Slow`"), "{err}");
    // The other service still has the host's places.
    assert_eq!(fast.ping(3).await.unwrap(), 3);
    gate.send_replace(true);
    for (i, call) in held.into_iter().enumerate() {
        assert_eq!(call.await.unwrap().unwrap(), i as u64);
    }
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttle_for_a_service_the_host_does_not_serve_is_a_config_error() {
    let (_gate, open) = watch::channel(false);
    let err = keel::Host::builder()
        .service(SlowServer::new(Gated(open)))
        .service_throttle("Slwo", ThrottleConfig::new(1, 1))
        .endpoint("tcp://127.0.0.1:0")
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("`Slwo`") && text.contains("serves: Slow"),
        "{text}"
    );
}
