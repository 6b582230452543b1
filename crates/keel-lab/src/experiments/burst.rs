//! Seed 002: bursts of concurrent blocking calls. Each round, every client thread opens its own
//! client, a barrier releases all calls at once, and the round lasts from the release to the last
//! reply; rounds are separated by an idle gap longer than the pool's keep-alive, so the threads
//! above the floor retire between them.
//!
//! The host serves an admin endpoint, and the lab reads keel's metrics the way a Prometheus user
//! would, by scraping its `GET /metrics` over HTTP: a sampler thread records the pool's threads
//! (the `keel_pool_threads` gauges) every 50 ms (the seed's perfmon graph), and the phase
//! histograms are scraped before and after each round for where its calls' time went
//! ([`phases`]).
//!
//! Before keel's rounds, one burst of the same client threads against a plain
//! thread-per-connection server ([`super::thread_server`]) measures the machine's own cost of
//! that many threads in the same run: the bar of bursts beyond 100 clients follows it
//! ([`verdict::burst_limit_ms`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::fire::fire;
use super::phases::{self, Phases, Snapshot};
use super::{host_builder, ms, Binding, HostSettings};
use crate::prom::Metrics;
use crate::scrape::Scraper;
use crate::verdict::{self, Verdict};

/// How often the sampler scrapes the pool's thread count.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// The host's admin endpoint (a free port).
const ADMIN_URL: &str = "http://127.0.0.1:0";
/// The pool's thread gauges (`state` = `idle`, `busy`, `starting`).
const POOL_THREADS: &str = "keel_pool_threads";
/// The labels of the burst's calls in keel's per-operation metrics.
const SERVICE1: [(&str, &str); 1] = [("service", "Service1")];
/// How long to wait, after the last reply, for the host's histograms to count every call (a
/// call's server time is recorded once its answer is written, which can be after the client
/// has read it).
const COUNTED_WITHIN: Duration = Duration::from_secs(1);

/// Settings of the burst experiment. Serialized (in `keel-lab all`'s profile) without the
/// binding, which the report carries once.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Params {
    /// The transport.
    #[serde(skip)]
    pub(crate) binding: Binding,
    /// Concurrent clients per burst.
    pub(crate) clients: usize,
    /// How long each call blocks its pool thread, ms.
    pub(crate) work_ms: u64,
    /// Bursts.
    pub(crate) rounds: usize,
    /// Idle gap between bursts, ms.
    pub(crate) idle_ms: u64,
    /// The host pool's keep-alive, ms.
    pub(crate) keep_alive_ms: u64,
}

/// One burst.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Round {
    /// From the release to the last reply, ms.
    pub(crate) total_ms: f64,
    /// Most pool threads seen during the burst.
    pub(crate) peak_threads: usize,
    /// Pool threads just before the release.
    pub(crate) threads_before: usize,
    /// Slowest single call, ms.
    pub(crate) slowest_call_ms: f64,
    /// Release time since the experiment's start, ms.
    pub(crate) start_ms: f64,
    /// Last reply since the experiment's start, ms.
    pub(crate) end_ms: f64,
    /// Where the round's calls' time went, from the host's phase histograms (`None` if a
    /// scrape failed or the host counted no call).
    pub(crate) phases: Option<Phases>,
}

/// The thread-per-connection baseline's burst ([`super::thread_server`]): the same clients
/// and work against a server whose threads exist before the release.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Baseline {
    /// From the release to the last reply, ms.
    pub(crate) total_ms: f64,
    /// Slowest single call, ms.
    pub(crate) slowest_call_ms: f64,
    /// Release time since the experiment's start, ms.
    pub(crate) start_ms: f64,
    /// Last reply since the experiment's start, ms.
    pub(crate) end_ms: f64,
}

/// One scrape of the pool's thread gauges.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Sample {
    /// When the scrape was sent, since the experiment's start, ms.
    pub(crate) t_ms: f64,
    /// Live pool threads: `keel_pool_threads` over its states.
    pub(crate) threads: usize,
    /// Of those, running a task: `keel_pool_threads{state="busy"}`.
    pub(crate) busy: usize,
}

impl Sample {
    /// The sample in scrape `m` taken at `t_ms` (`None` if it has no `keel_pool_threads`).
    pub(crate) fn from_scrape(t_ms: f64, m: &Metrics) -> Option<Sample> {
        let count = |v: f64| v.max(0.0).round() as usize;
        Some(Sample {
            t_ms,
            threads: count(m.sum(POOL_THREADS, &[])?),
            busy: count(m.sum(POOL_THREADS, &[("state", "busy")]).unwrap_or(0.0)),
        })
    }
}

/// What the burst experiment measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Burst {
    /// `burst`.
    pub(crate) experiment: &'static str,
    /// The transport.
    pub(crate) binding: Binding,
    /// Clients per burst.
    pub(crate) clients: usize,
    /// Work per call, ms.
    pub(crate) work_ms: u64,
    /// Idle gap between bursts, ms.
    pub(crate) idle_ms: u64,
    /// The pool's keep-alive, ms.
    pub(crate) keep_alive_ms: u64,
    /// The pool's warm floor.
    pub(crate) min_threads: usize,
    /// Threads that retired (after keep-alive idle) during the experiment.
    pub(crate) retired_total: u64,
    /// Every burst.
    pub(crate) rounds: Vec<Round>,
    /// The slowest burst, ms.
    pub(crate) max_total_ms: f64,
    /// The thread-per-connection baseline's burst in the same run, release to last reply, ms
    /// (`null` if it did not run).
    pub(crate) baseline_max_ms: Option<f64>,
    /// The baseline's burst (one per run, before keel's).
    pub(crate) baseline: Option<Baseline>,
    /// The bar: every burst at most this, ms.
    pub(crate) bar_ms: f64,
    /// Pool threads every 50 ms, scraped from the admin endpoint.
    pub(crate) thread_samples: Vec<Sample>,
    /// Scrapes of the sampler that failed (their samples are missing).
    pub(crate) scrape_errors: u64,
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

/// Runs the experiment.
pub(crate) fn run(p: &Params) -> anyhow::Result<Burst> {
    anyhow::ensure!(p.clients > 0 && p.rounds > 0, "need clients and rounds > 0");
    let host = host_builder(
        p.binding,
        HostSettings {
            keep_alive: Some(Duration::from_millis(p.keep_alive_ms)),
            clients: p.clients,
        },
    )
    .admin(ADMIN_URL)
    .start()?;
    let url = host.url().to_string();
    let scraper = Scraper::new(host.admin_url().unwrap_or_default())?;
    // Fail early (before any burst) if the endpoint does not serve keel's metrics.
    let first = scraper.metrics(|n| n == POOL_THREADS)?;
    anyhow::ensure!(
        first.sum(POOL_THREADS, &[]).is_some(),
        "the admin endpoint's /metrics has no {POOL_THREADS}"
    );
    let min_threads = host.pool_metrics().min_threads;
    let retired_before = host.pool_metrics().retired_total;
    let t0 = Instant::now();
    let samples: Mutex<Vec<Sample>> = Mutex::new(Vec::new());
    let scrape_errors = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let since = |i: Instant| ms(i.saturating_duration_since(t0));

    let (rounds, baseline) = std::thread::scope(|s| {
        // The sampler: a thread of its own, a blocking socket per scrape; it keeps only the
        // pool's gauges and takes the samples' lock only to push one.
        let sampler = std::thread::Builder::new()
            .name("lab-scraper".into())
            .spawn_scoped(s, || {
                let mut next = Instant::now();
                while !stop.load(Ordering::Acquire) {
                    let t_ms = since(Instant::now());
                    let sample = scraper
                        .metrics(|n| n == POOL_THREADS)
                        .ok()
                        .and_then(|m| Sample::from_scrape(t_ms, &m));
                    match sample {
                        Some(smp) => samples.lock().unwrap_or_else(|e| e.into_inner()).push(smp),
                        None => {
                            scrape_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    next += SAMPLE_EVERY;
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            });
        if let Err(e) = sampler {
            anyhow::bail!("cannot start the sampler: {e}");
        }
        let result = (|| {
            // The baseline first, with the sampler running as it does for keel's bursts, then
            // the same idle gap as between keel's bursts (its threads exit in it).
            let pb = super::spinner(format!(
                "burst: thread-per-connection baseline, {} clients × {} ms",
                p.clients, p.work_ms
            ));
            let server = super::thread_server::ThreadServer::start()?;
            let fired = server.fire(p.clients, p.work_ms)?;
            drop(server);
            pb.finish_and_clear();
            let baseline = Baseline {
                total_ms: ms(fired.total),
                slowest_call_ms: fired.calls.iter().copied().max().map_or(f64::NAN, ms),
                start_ms: since(fired.start),
                end_ms: since(fired.start + fired.total),
            };
            let mut rounds = Vec::new();
            for r in 0..p.rounds {
                if r == 0 {
                    super::idle_with_progress(
                        Duration::from_millis(p.idle_ms),
                        &format!("burst: idle {} ms after the baseline", p.idle_ms),
                    );
                } else {
                    super::idle_with_progress(
                        Duration::from_millis(p.idle_ms),
                        &format!("burst: idle {} ms before burst {}", p.idle_ms, r + 1),
                    );
                }
                let threads_before = host.pool_metrics().threads;
                let pb = super::spinner(format!(
                    "burst {}/{}: {} clients × {} ms",
                    r + 1,
                    p.rounds,
                    p.clients,
                    p.work_ms
                ));
                let before = phase_snapshot(&scraper).ok();
                let fired = fire(&url, p.clients, p.work_ms)?;
                pb.finish_and_clear();
                let phases = before.and_then(|before| {
                    let after = counted_snapshot(&scraper, &before, p.clients as u64)?;
                    Phases::between(&before, &after, phases::mean(&fired.calls))
                });
                let end = fired.start + fired.total;
                let at_end = host.pool_metrics().threads;
                let (start_ms, end_ms) = (since(fired.start), since(end));
                let sampled_peak = samples
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter(|s| s.t_ms >= start_ms && s.t_ms <= end_ms)
                    .map(|s| s.threads)
                    .max()
                    .unwrap_or(0);
                rounds.push(Round {
                    total_ms: ms(fired.total),
                    peak_threads: sampled_peak.max(at_end),
                    threads_before,
                    slowest_call_ms: fired.calls.iter().copied().max().map_or(f64::NAN, ms),
                    start_ms,
                    end_ms,
                    phases,
                });
            }
            Ok::<_, anyhow::Error>((rounds, baseline))
        })();
        stop.store(true, Ordering::Release);
        result
    })?;
    let retired_total = host.pool_metrics().retired_total - retired_before;
    host.shutdown();
    let thread_samples = samples.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut burst = evaluate(
        p,
        min_threads,
        retired_total,
        rounds,
        Some(baseline),
        thread_samples,
    );
    burst.scrape_errors = scrape_errors.into_inner();
    Ok(burst)
}

/// The phase histograms of Service1's calls, scraped now.
fn phase_snapshot(scraper: &Scraper) -> anyhow::Result<Snapshot> {
    Ok(Snapshot::read(&scraper.metrics(phases::wanted)?, &SERVICE1))
}

/// The phase histograms once the host has counted `calls` more calls than `before` (scraped
/// every 5 ms for up to [`COUNTED_WITHIN`]; the last scrape if they never do).
fn counted_snapshot(scraper: &Scraper, before: &Snapshot, calls: u64) -> Option<Snapshot> {
    let until = Instant::now() + COUNTED_WITHIN;
    loop {
        let now = phase_snapshot(scraper).ok();
        let counted = now.is_some_and(|n| n.calls() >= before.calls() + calls);
        if counted || Instant::now() >= until {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Builds the result and its verdict from the measurements.
pub(crate) fn evaluate(
    p: &Params,
    min_threads: usize,
    retired_total: u64,
    rounds: Vec<Round>,
    baseline: Option<Baseline>,
    thread_samples: Vec<Sample>,
) -> Burst {
    let totals: Vec<f64> = rounds.iter().map(|r| r.total_ms).collect();
    let baseline_max_ms = baseline.map(|b| b.total_ms);
    let verdict = verdict::burst(&totals, p.clients, p.work_ms, baseline_max_ms);
    Burst {
        experiment: "burst",
        binding: p.binding,
        clients: p.clients,
        work_ms: p.work_ms,
        idle_ms: p.idle_ms,
        keep_alive_ms: p.keep_alive_ms,
        min_threads,
        retired_total,
        max_total_ms: verdict::max_of(&totals),
        baseline_max_ms,
        baseline,
        bar_ms: verdict::burst_limit_ms(p.clients, p.work_ms, baseline_max_ms),
        rounds,
        thread_samples,
        scrape_errors: 0,
        pass: verdict.pass,
        verdict,
    }
}

/// The readable summary.
pub(crate) fn summary(r: &Burst) -> String {
    let mut s = format!(
        "burst (seed 002), binding {}: {} clients × {} ms, {} rounds, idle {} ms between, pool keep-alive {} ms, floor {}\n",
        r.binding.name(),
        r.clients,
        r.work_ms,
        r.rounds.len(),
        r.idle_ms,
        r.keep_alive_ms,
        r.min_threads
    );
    s.push_str("  round   total    slowest call   threads before → peak\n");
    for (i, x) in r.rounds.iter().enumerate() {
        s.push_str(&format!(
            "  {:>5} {:>8.1} ms {:>9.1} ms   {:>6} → {}\n",
            i + 1,
            x.total_ms,
            x.slowest_call_ms,
            x.threads_before,
            x.peak_threads
        ));
    }
    if let Some(b) = &r.baseline {
        s.push_str(&format!(
            "  thread-per-connection baseline (same clients, one burst before keel's): {:.1} ms, slowest call {:.1} ms\n",
            b.total_ms, b.slowest_call_ms
        ));
    }
    s.push_str(&format!(
        "  slowest burst {:.1} ms; {} threads retired during the idle gaps\n",
        r.max_total_ms, r.retired_total
    ));
    s.push_str(&phase_table(r));
    if r.scrape_errors > 0 {
        s.push_str(&format!(
            "  note: {} scrapes of /metrics failed (their pool samples are missing)\n",
            r.scrape_errors
        ));
    }
    if r.rounds.len() > 1 && r.idle_ms <= r.keep_alive_ms {
        s.push_str("  note: the idle gap is not longer than the keep-alive: nothing retires between bursts\n");
    }
    s.push_str(&super::first_call::verdict_line(&r.verdict));
    s
}

/// Where each round's calls' time went, as text (mean per call, ms), or nothing if no round
/// has a split.
pub(crate) fn phase_table(r: &Burst) -> String {
    if r.rounds.iter().all(|x| x.phases.is_none()) {
        return "  where a call's time went: not measured (no scrape of /metrics)\n".to_string();
    }
    let mut s = String::from(
        "  where a call's time went, mean per call in ms (the host's phase histograms, scraped):\n  round  calls  throttle wait  pool wait    handler  server, other  client + network     client\n",
    );
    for (i, x) in r.rounds.iter().enumerate() {
        match &x.phases {
            Some(p) => s.push_str(&format!(
                "  {:>5} {:>6} {:>14.3} {:>10.3} {:>10.3} {:>14.3} {:>17.3} {:>10.3}\n",
                i + 1,
                p.calls,
                p.throttle_wait_ms,
                p.pool_wait_ms,
                p.handler_ms,
                p.server_other_ms,
                p.client_network_ms,
                p.client_ms
            )),
            None => s.push_str(&format!("  {:>5}  not measured\n", i + 1)),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_examples::service1::Service1BlockingClient;

    fn params() -> Params {
        Params {
            binding: Binding::Tcp,
            clients: 100,
            work_ms: 2000,
            rounds: 2,
            idle_ms: 2500,
            keep_alive_ms: 1000,
        }
    }

    fn round(total_ms: f64) -> Round {
        Round {
            total_ms,
            peak_threads: 100,
            threads_before: 2,
            slowest_call_ms: total_ms - 1.0,
            start_ms: 0.0,
            end_ms: total_ms,
            phases: None,
        }
    }

    #[test]
    fn verdict_and_max() {
        let r = evaluate(
            &params(),
            2,
            98,
            vec![round(2004.0), round(2010.0)],
            None,
            vec![],
        );
        assert!(r.pass);
        assert_eq!(r.max_total_ms, 2010.0);
        assert_eq!(r.bar_ms, 2020.0);
        let r = evaluate(
            &params(),
            2,
            98,
            vec![round(2004.0), round(2500.0)],
            None,
            vec![],
        );
        assert!(!r.pass);
        assert!(summary(&r).contains("FAIL"));
    }

    #[test]
    fn json_shape() {
        let r = evaluate(
            &params(),
            2,
            98,
            vec![round(2004.0)],
            Some(Baseline {
                total_ms: 2003.0,
                slowest_call_ms: 2002.5,
                start_ms: 10.0,
                end_ms: 2013.0,
            }),
            vec![Sample {
                t_ms: 50.0,
                threads: 2,
                busy: 0,
            }],
        );
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "rounds",
            "max_total_ms",
            "baseline_max_ms",
            "thread_samples",
            "pass",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert!(v["pass"].is_boolean());
        assert_eq!(v["rounds"][0]["total_ms"], 2004.0);
        assert_eq!(v["baseline_max_ms"], 2003.0);
        assert_eq!(v["baseline"]["slowest_call_ms"], 2002.5);
        assert!(summary(&r).contains("thread-per-connection baseline"));
        assert_eq!(v["rounds"][0]["peak_threads"], 100);
        assert_eq!(v["thread_samples"][0]["t_ms"], 50.0);
        assert_eq!(v["thread_samples"][0]["threads"], 2);
        assert_eq!(v["thread_samples"][0]["busy"], 0);
        assert_eq!(v["scrape_errors"], 0);
        assert!(v["rounds"][0]["phases"].is_null());
    }

    /// The whole path against a real host: its admin endpoint's text reads without an error,
    /// has the pool's gauges, and its phase histograms count a call made to it.
    #[test]
    fn scrapes_a_real_host() {
        let host = host_builder(
            Binding::Tcp,
            HostSettings {
                keep_alive: None,
                clients: 1,
            },
        )
        .admin(ADMIN_URL)
        .start()
        .unwrap();
        let scraper = Scraper::new(host.admin_url().unwrap()).unwrap();
        let all = Metrics::parse(&scraper.text().unwrap()).unwrap();
        let pool = Sample::from_scrape(0.0, &all).unwrap();
        assert!(pool.threads >= host.pool_metrics().min_threads, "{pool:?}");
        let before = phase_snapshot(&scraper).unwrap();
        let client = Service1BlockingClient::connect(host.url()).unwrap();
        assert_eq!(client.get_data(7, 1).unwrap(), "You entered: 7");
        let after = counted_snapshot(&scraper, &before, 1).unwrap();
        assert_eq!(after.calls(), before.calls() + 1);
        let split = Phases::between(&before, &after, Duration::from_millis(5)).unwrap();
        assert_eq!(split.calls, 1);
        assert!(split.handler_ms >= 1.0, "{split:?}");
        assert!(split.server_ms >= split.handler_ms, "{split:?}");
        client.close();
        host.shutdown();
    }

    #[test]
    fn samples_from_a_scrape() {
        let m = Metrics::parse(
            "keel_pool_threads{state=\"idle\"} 3\nkeel_pool_threads{state=\"busy\"} 95\nkeel_pool_threads{state=\"starting\"} 2\n",
        )
        .unwrap();
        assert_eq!(
            Sample::from_scrape(150.0, &m),
            Some(Sample {
                t_ms: 150.0,
                threads: 100,
                busy: 95
            })
        );
        assert_eq!(Sample::from_scrape(1.0, &Metrics::default()), None);
    }

    #[test]
    fn phase_table_prints_each_round() {
        let split = Phases {
            calls: 100,
            client_ms: 2004.0,
            throttle_wait_ms: 0.1,
            pool_wait_ms: 3.0,
            handler_ms: 2000.0,
            server_other_ms: 0.5,
            server_ms: 2003.6,
            client_network_ms: 0.4,
        };
        let mut second = round(2010.0);
        second.phases = Some(split);
        let r = evaluate(&params(), 2, 98, vec![round(2004.0), second], None, vec![]);
        let t = phase_table(&r);
        assert!(t.contains("      1  not measured"), "{t}");
        assert!(t.contains("      2    100          0.100      3.000   2000.000          0.500             0.400   2004.000"), "{t}");
        let none = evaluate(&params(), 2, 98, vec![round(2004.0)], None, vec![]);
        assert!(phase_table(&none).contains("not measured (no scrape"));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["rounds"][1]["phases"]["pool_wait_ms"], 3.0);
        assert_eq!(v["rounds"][1]["phases"]["calls"], 100);
    }
}
