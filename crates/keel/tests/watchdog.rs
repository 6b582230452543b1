//! The blocking watchdog: an `async` operation that blocks its runtime worker is reported (a
//! log warning naming it, and `HostStats::handlers_blocked`), once per blocked poll; handlers
//! that await, and plain `fn` operations (keel-pool), are not.
//!
//! The thresholds are generous (50 ms against a 300 ms block) so that a loaded machine, which
//! can preempt a poll for a few ms, decides nothing.
#![allow(missing_docs)]

use std::sync::Mutex;
use std::time::Duration;

/// One way to wait per operation.
#[keel::contract]
pub trait Sleepy {
    /// The mistake: a blocking sleep in an `async fn`.
    async fn blocks(&self, ms: u64) -> u64;
    /// The right way in an `async fn`: the sleep yields.
    async fn awaits(&self, ms: u64) -> u64;
    /// A plain `fn` may block: it runs on keel-pool.
    fn plain(&self, ms: u64) -> u64;
}

struct Impl;

impl Sleepy for Impl {
    async fn blocks(&self, ms: u64) -> u64 {
        std::thread::sleep(Duration::from_millis(ms));
        ms
    }
    async fn awaits(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
    fn plain(&self, ms: u64) -> u64 {
        std::thread::sleep(Duration::from_millis(ms));
        ms
    }
}

/// Keeps the watchdog's warnings.
struct Warnings(Mutex<Vec<String>>);

impl log::Log for Warnings {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target() == "keel::watchdog"
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

fn warnings() -> &'static Warnings {
    static W: std::sync::OnceLock<&'static Warnings> = std::sync::OnceLock::new();
    W.get_or_init(|| {
        let w: &'static Warnings = Box::leak(Box::new(Warnings(Mutex::new(Vec::new()))));
        log::set_logger(w).unwrap();
        log::set_max_level(log::LevelFilter::Warn);
        w
    })
}

fn host(threshold: Option<Duration>) -> keel::Host {
    keel::Host::builder()
        .service(SleepyServer::new(Impl))
        .endpoint("tcp://127.0.0.1:0")
        .blocking_watchdog(threshold)
        .start()
        .unwrap()
}

async fn settle() {
    // Longer than a few of the watchdog's ticks (a quarter of the threshold).
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_async_handler_is_reported_and_nothing_else_is() {
    let warnings = warnings();
    assert_eq!(
        keel::host::HostConfig::default().blocking_watchdog,
        Some(Duration::from_millis(10))
    );

    let h = host(Some(Duration::from_millis(50)));
    let c = SleepyClient::connect(h.url()).await.unwrap();

    // Well-behaved: awaiting, and blocking in a plain fn.
    for _ in 0..3 {
        assert_eq!(c.awaits(300).await.unwrap(), 300);
        assert_eq!(c.plain(300).await.unwrap(), 300);
    }
    settle().await;
    assert_eq!(h.stats().handlers_blocked, 0);
    assert!(warnings.0.lock().unwrap().is_empty());

    // The mistake: one blocked poll, reported once, by name.
    assert_eq!(c.blocks(300).await.unwrap(), 300);
    settle().await;
    assert_eq!(h.stats().handlers_blocked, 1);
    let seen = warnings.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains("Sleepy.blocks"), "{seen:?}");
    assert!(seen[0].contains("more than 50 ms"), "{seen:?}");

    // Again: each blocked poll is one report.
    assert_eq!(c.blocks(300).await.unwrap(), 300);
    settle().await;
    assert_eq!(h.stats().handlers_blocked, 2);
    h.shutdown_async().await;

    // Off: nothing is watched.
    let off = host(None);
    let c = SleepyClient::connect(off.url()).await.unwrap();
    assert_eq!(c.blocks(300).await.unwrap(), 300);
    settle().await;
    assert_eq!(off.stats().handlers_blocked, 0);
    assert_eq!(warnings.0.lock().unwrap().len(), 2);
    off.shutdown_async().await;
}
