//! Issue 33, item 2: hedging. Three hosts in this process behind one balanced channel; each
//! call sleeps 100 ms for `slow_percent` % of calls (drawn at random) and 1 ms otherwise.
//! `callers` callers call one after another, `calls` calls in all, twice: without hedging,
//! then with a [`HedgingPolicy`] (a second attempt once the first has run longer than the
//! `percentile` of the channel's recent calls, or after `delay_ms` if given). Reported: p50,
//! p99 and max of each, the hedges sent and won, and the extra load (attempts the hosts saw ÷
//! calls − 1) beside what the retry budget allows (its ratio, plus its floor per second over
//! the phase). The goal: p99 with hedging ≤ 1/3 of p99 without, extra load within the budget.
//!
//! Each phase starts with `calls / 10` calls that are not timed (connections, and the samples
//! a percentile delay needs).

// `#[keel::contract]` declares the generated clients' methods `pub` whatever the trait's
// visibility, which is unreachable in this binary.
#![allow(unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::client::{HedgeDelay, HedgingPolicy, RetryPolicy};
use serde::Serialize;

use super::{round1, Dist, Latencies};

/// A service whose calls are mostly fast, sometimes slow.
#[keel::contract]
pub(crate) trait Tail {
    /// Sleeps 1 ms, or 100 ms now and then; returns its argument.
    #[keel(idempotent)]
    async fn get(&self, n: u64) -> u64;
}

struct TailImpl {
    /// Out of 10,000.
    slow_in_10k: u64,
    arrivals: Arc<AtomicU64>,
    seed: AtomicU64,
}

impl Tail for TailImpl {
    async fn get(&self, n: u64) -> u64 {
        self.arrivals.fetch_add(1, Ordering::Relaxed);
        let slow = xorshift(&self.seed) % 10_000 < self.slow_in_10k;
        let ms = if slow { SLOW_MS } else { FAST_MS };
        tokio::time::sleep(Duration::from_millis(ms)).await;
        n
    }
}

/// A slow call's sleep, and a fast one's.
const SLOW_MS: u64 = 100;
const FAST_MS: u64 = 1;
/// Hosts behind the channel.
const HOSTS: usize = 3;

/// The next number of a xorshift64 sequence shared by one host's calls.
fn xorshift(state: &AtomicU64) -> u64 {
    let mut x = state.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    state.store(x, Ordering::Relaxed);
    x
}

/// Settings of the experiment.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Params {
    /// Concurrent callers.
    pub(crate) callers: usize,
    /// Timed calls per phase.
    pub(crate) calls: usize,
    /// Percent of calls that sleep 100 ms.
    pub(crate) slow_percent: f64,
    /// The hedging delay's percentile of the channel's observed latency.
    pub(crate) percentile: f64,
    /// A fixed hedging delay instead, ms.
    pub(crate) delay_ms: Option<u64>,
}

/// One phase.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Phase {
    pub(crate) name: &'static str,
    pub(crate) latency: Dist,
    pub(crate) errors: u64,
    /// Calls made (timed and untimed).
    pub(crate) calls: u64,
    /// Attempts the hosts' handlers saw.
    pub(crate) attempts: u64,
    /// attempts ÷ calls − 1.
    pub(crate) extra_load: f64,
    pub(crate) hedges: u64,
    pub(crate) hedges_won: u64,
    pub(crate) hedges_refused_by_budget: u64,
    /// Seconds the phase took.
    pub(crate) seconds: f64,
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Hedge {
    pub(crate) params: Params,
    pub(crate) without: Phase,
    pub(crate) with: Phase,
    /// p99 with hedging ÷ p99 without.
    pub(crate) p99_ratio: f64,
    /// The extra load the retry budget allows over the hedged phase: its ratio plus its
    /// floor per second × seconds ÷ calls.
    pub(crate) budget: f64,
    /// `p99_ratio` ≤ 1/3, `with.extra_load` ≤ `budget`, no errors.
    pub(crate) pass: bool,
}

/// Runs both phases.
pub(crate) fn run(p: &Params) -> anyhow::Result<Hedge> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()?;
    let (without, with) = rt.block_on(async {
        let without = phase(p, None).await?;
        let delay = match p.delay_ms {
            Some(ms) => HedgeDelay::Fixed(Duration::from_millis(ms)),
            None => HedgeDelay::Percentile(p.percentile),
        };
        let with = phase(p, Some(HedgingPolicy::default().delay(delay))).await?;
        anyhow::Ok((without, with))
    })?;
    let retry = RetryPolicy::default();
    let budget = retry.budget_ratio
        + f64::from(retry.budget_min_per_second) * with.seconds / with.calls.max(1) as f64;
    let p99_ratio = with.latency.p99_us / without.latency.p99_us.max(0.1);
    Ok(Hedge {
        params: *p,
        pass: p99_ratio <= 1.0 / 3.0
            && with.extra_load <= budget
            && without.errors == 0
            && with.errors == 0,
        p99_ratio: (p99_ratio * 1000.0).round() / 1000.0,
        budget: (budget * 1000.0).round() / 1000.0,
        without,
        with,
    })
}

/// Three fresh hosts, a balanced channel over them (hedging with `policy` if given), and the
/// calls.
async fn phase(p: &Params, policy: Option<HedgingPolicy>) -> anyhow::Result<Phase> {
    let arrivals = Arc::new(AtomicU64::new(0));
    let mut hosts = Vec::new();
    for i in 0..HOSTS {
        hosts.push(
            keel::Host::builder()
                .service(TailServer::new(TailImpl {
                    slow_in_10k: (p.slow_percent * 100.0).round() as u64,
                    arrivals: arrivals.clone(),
                    seed: AtomicU64::new(0x9E37_79B9_7F4A_7C15 ^ ((i as u64 + 1) * 0x1234_5678)),
                }))
                .endpoint("tcp://127.0.0.1:0")
                .runtime(tokio::runtime::Handle::current())
                .start()?,
        );
    }
    let mut builder = keel::Channel::balanced(hosts.iter().map(|h| h.url().to_string()));
    if let Some(policy) = policy {
        builder = builder.hedging(policy);
    }
    let channel = builder.connect().await?;
    let client = TailClient::new(channel.clone());
    let warmup = (p.calls / 10).max(100);
    let errors = Arc::new(AtomicU64::new(0));
    let began = Instant::now();
    let run = |calls: usize, timed: bool| {
        let next = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..p.callers)
            .map(|_| {
                let (client, next, errors) = (client.clone(), next.clone(), errors.clone());
                tokio::spawn(async move {
                    let mut latencies = Latencies::new();
                    while next.fetch_add(1, Ordering::Relaxed) < calls as u64 {
                        let start = Instant::now();
                        if client.get(0).await.is_err() {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        if timed {
                            latencies.record(start.elapsed());
                        }
                    }
                    latencies
                })
            })
            .collect();
        async move {
            let mut all = Latencies::new();
            for t in tasks {
                all.add(&t.await?);
            }
            anyhow::Ok(all)
        }
    };
    run(warmup, false).await?;
    let latencies = run(p.calls, true).await?;
    let seconds = began.elapsed().as_secs_f64();
    let stats = channel.stats();
    let attempts = arrivals.load(Ordering::Relaxed);
    for host in hosts {
        host.shutdown_async().await;
    }
    Ok(Phase {
        name: if policy.is_some() {
            "with hedging"
        } else {
            "without hedging"
        },
        latency: latencies.dist(),
        errors: errors.load(Ordering::Relaxed),
        calls: stats.calls,
        attempts,
        extra_load: round3(attempts as f64 / stats.calls.max(1) as f64 - 1.0),
        hedges: stats.hedges,
        hedges_won: stats.hedges_won,
        hedges_refused_by_budget: stats.hedges_refused_by_budget,
        seconds: round1(seconds),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The text report.
pub(crate) fn summary(r: &Hedge) -> String {
    let p = &r.params;
    let delay = match p.delay_ms {
        Some(ms) => format!("after {ms} ms"),
        None => format!("after the p{} of the channel's latency", p.percentile),
    };
    let mut s = format!(
        "hedge: {HOSTS} hosts behind a balanced channel, {}% of calls sleep {SLOW_MS} ms, the \
         rest {FAST_MS} ms; {} callers, {} calls timed per phase; a second attempt {delay}\n",
        p.slow_percent, p.callers, p.calls
    );
    for ph in [&r.without, &r.with] {
        s.push_str(&format!(
            "  {:<16} p50 {:>9.1} µs  p99 {:>10.1} µs  max {:>10.1} µs  errors {}  hedges sent \
             {} won {} refused {}  extra load {:.1} %\n",
            ph.name,
            ph.latency.p50_us,
            ph.latency.p99_us,
            ph.latency.max_us,
            ph.errors,
            ph.hedges,
            ph.hedges_won,
            ph.hedges_refused_by_budget,
            ph.extra_load * 100.0
        ));
    }
    s.push_str(&format!(
        "  p99 with ÷ without: {} (goal ≤ 0.333); extra load {:.1} % within the budget's {:.1} \
         %: {}\n",
        r.p99_ratio,
        r.with.extra_load * 100.0,
        r.budget * 100.0,
        if r.pass { "met" } else { "NOT met" }
    ));
    s
}
