//! Issue 33, item 7: per-service throttles. One host serves a slow service (each call sleeps
//! `work_ms`, async) and a fast one (returns at once). The fast service's calls are timed one
//! after another, first with nothing else running (its unloaded p99), then while `callers`
//! callers keep the slow service busy, twice: with only the host-wide throttle (the slow calls
//! take its places and the fast ones queue behind them), and with the slow service on a
//! throttle of its own (`HostBuilder::service_throttle`) of the same size. The goal: with its
//! own throttle, the fast service's p99 under load is at most twice its unloaded p99.
//!
//! Both throttles are sized below `callers` on purpose (`places` running, the rest queued), so
//! that without isolation the slow service fills the host's places; the host-wide throttle is
//! the same in both runs.

// `#[keel::contract]` declares the generated clients' methods `pub` whatever the trait's
// visibility, which is unreachable in this binary.
#![allow(unreachable_pub)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{round1, Dist, Latencies};

/// Calls that hold their place for a while.
#[keel::contract]
pub(crate) trait Slow {
    /// Sleeps `ms`, then returns it.
    async fn work(&self, ms: u64) -> u64;
}

/// Calls that return at once.
#[keel::contract]
pub(crate) trait Fast {
    /// Returns `n`.
    async fn ping(&self, n: u64) -> u64;
}

struct Sleeper;

impl Slow for Sleeper {
    async fn work(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
}

struct Echo;

impl Fast for Echo {
    async fn ping(&self, n: u64) -> u64 {
        n
    }
}

/// The longest the fast calls of one phase are timed (without isolation each waits behind
/// the slow calls queued ahead of it: seconds).
const PHASE_LIMIT: Duration = Duration::from_secs(15);

/// Connections the slow callers' calls are spread over (one connection may hold a quarter of
/// the throttle's places).
const CONNECTIONS: usize = 8;

/// Settings of the experiment.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Params {
    /// Callers of the slow service, each calling again as soon as its call returns.
    pub(crate) callers: usize,
    /// How long a slow call sleeps, ms.
    pub(crate) work_ms: u64,
    /// Places of each throttle (running at once); `callers` may queue beyond them.
    pub(crate) places: usize,
    /// Fast calls timed per phase (fewer if the phase reaches 15 s).
    pub(crate) fast_calls: usize,
}

/// One phase's fast-call latencies.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Phase {
    /// What ran beside the fast calls.
    pub(crate) name: &'static str,
    /// The fast calls' latencies.
    pub(crate) fast: Dist,
    /// Fast calls that failed.
    pub(crate) fast_errors: u64,
    /// Slow calls answered during the phase.
    pub(crate) slow_answered: u64,
    /// Slow calls that failed (`Busy`, say) during the phase.
    pub(crate) slow_errors: u64,
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Isolation {
    pub(crate) params: Params,
    pub(crate) phases: Vec<Phase>,
    /// The fast service's p99 under load with the slow one on its own throttle, over its
    /// unloaded p99.
    pub(crate) isolated_p99_ratio: f64,
    /// The same with the host-wide throttle only.
    pub(crate) shared_p99_ratio: f64,
    /// `isolated_p99_ratio` ≤ 2.
    pub(crate) pass: bool,
}

/// Runs the three phases.
pub(crate) fn run(p: &Params) -> anyhow::Result<Isolation> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()?;
    let mut phases = Vec::new();
    rt.block_on(async {
        let unloaded = phase(p, false, 0, "unloaded").await?;
        let shared = phase(p, false, p.callers, "host-wide throttle only").await?;
        let isolated = phase(p, true, p.callers, "slow service on its own throttle").await?;
        phases.extend([unloaded, shared, isolated]);
        anyhow::Ok(())
    })?;
    let ratio = |i: usize| round1(phases[i].fast.p99_us / phases[0].fast.p99_us.max(0.1));
    let (shared_p99_ratio, isolated_p99_ratio) = (ratio(1), ratio(2));
    Ok(Isolation {
        params: *p,
        pass: isolated_p99_ratio <= 2.0 && phases.iter().all(|ph| ph.fast_errors == 0),
        phases,
        isolated_p99_ratio,
        shared_p99_ratio,
    })
}

/// A host of both services (the slow one on its own throttle if `isolated`), `callers` slow
/// callers running, and the fast calls timed one after another.
async fn phase(
    p: &Params,
    isolated: bool,
    callers: usize,
    name: &'static str,
) -> anyhow::Result<Phase> {
    let queue = p.callers * 2;
    let mut builder = keel::Host::builder()
        .service(SlowServer::new(Sleeper))
        .service(FastServer::new(Echo))
        .endpoint("tcp://127.0.0.1:0")
        .max_concurrent_calls(p.places)
        .max_queued_calls(queue)
        .max_calls_per_connection(p.callers + 16)
        // The slow calls left at the end are answered `ShuttingDown` rather than waited for.
        .close_timeout(Duration::from_secs(2))
        .runtime(tokio::runtime::Handle::current());
    if isolated {
        builder =
            builder.service_throttle("Slow", keel::host::ThrottleConfig::new(p.places, queue));
    }
    let host = builder.start()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let channels = (0..CONNECTIONS)
        .map(|_| keel::Channel::new(host.url()))
        .collect::<Result<Vec<_>, _>>()?;
    let slow: Vec<_> = (0..callers)
        .map(|i| {
            let client = SlowClient::new(channels[i % CONNECTIONS].clone());
            let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
            let work_ms = p.work_ms;
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match client.work(work_ms).await {
                        Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                        Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    if callers > 0 {
        // Until the slow calls fill their places (and the queue behind them).
        let filled = Instant::now();
        while host.stats().calls_in_flight < callers.min(p.places)
            && filled.elapsed() < Duration::from_secs(30)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(p.work_ms / 2)).await;
    }
    let fast = FastClient::new(keel::Channel::new(host.url())?);
    let _ = fast.ping(0).await;
    let mut latencies = Latencies::new();
    let mut fast_errors = 0;
    let began = Instant::now();
    for n in 0..p.fast_calls as u64 {
        // Without isolation each fast call may wait out the slow calls queued ahead of it.
        if began.elapsed() > PHASE_LIMIT {
            break;
        }
        let start = Instant::now();
        if fast.ping(n).await.is_err() {
            fast_errors += 1;
        }
        latencies.record(start.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    host.shutdown_async().await;
    for caller in slow {
        let _ = caller.await;
    }
    Ok(Phase {
        name,
        fast: latencies.dist(),
        fast_errors,
        slow_answered: answered.load(Ordering::Relaxed),
        slow_errors: failed.load(Ordering::Relaxed),
    })
}

/// The text report.
pub(crate) fn summary(r: &Isolation) -> String {
    let p = &r.params;
    let mut s = format!(
        "isolation (per-service throttles): {} callers of a service whose calls sleep {} ms, \
         throttles of {} places; {} calls of a second service timed per phase\n",
        p.callers, p.work_ms, p.places, p.fast_calls
    );
    for ph in &r.phases {
        s.push_str(&format!(
            "  {:<34} fast p50 {:>9.1} µs  p99 {:>11.1} µs  max {:>11.1} µs  errors {}  \
             (slow answered {}, failed {})\n",
            ph.name,
            ph.fast.p50_us,
            ph.fast.p99_us,
            ph.fast.max_us,
            ph.fast_errors,
            ph.slow_answered,
            ph.slow_errors
        ));
    }
    s.push_str(&format!(
        "  fast p99 under load ÷ unloaded: {} with the slow service on its own throttle \
         (goal ≤ 2: {}), {} with the host-wide throttle only\n",
        r.isolated_p99_ratio,
        if r.pass { "met" } else { "NOT met" },
        r.shared_p99_ratio
    ));
    s
}
