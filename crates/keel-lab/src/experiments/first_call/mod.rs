//! Seed 000: the first async call after sync calls. The seed's sequence: sync test (new
//! client, open, two sync calls, close), async test, async test, sync test; every call timed
//! (the open is not); then steady-state calls for the p50 the first async call is compared to.
//!
//! The seed's stall was a first call in a fresh process, so each round is a fresh process
//! (`keel-lab first-call-round`, hidden): its own host, the sequence and the steady calls, and
//! the same sequence on raw TCP as the machine's baseline (raw first in every other round, so
//! neither always inherits a process the other warmed). The bar is judged on medians over the
//! rounds (of the slowest call, and of the first async call ÷ p50), so a stall keel causes (in
//! every process, as the seed's was) fails it, and a pause of the VM that lands on one call of
//! one round does not; every round is reported.

mod raw;

use std::process::Command;
use std::time::Instant;

use keel_examples::calculator::{CalculatorBlockingClient, CalculatorClient};
use serde::{Deserialize, Serialize};

use super::{start_host, us, Binding, Dist, HostSettings, Latencies};
use crate::verdict::{self, max_of, median, Verdict};

/// Settings of the first-call experiment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// The transport.
    pub(crate) binding: Binding,
    /// Steady-state calls after the sequence, per client kind.
    pub(crate) steady_calls: usize,
    /// Rounds, each in a fresh process.
    pub(crate) rounds: usize,
}

/// One timed call of the seed's sequence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TimedCall {
    /// Which test: `sync 1`, `async 1`, `async 2`, `sync 2`.
    pub(crate) test: String,
    /// The call within the test, from 1.
    pub(crate) call: u32,
    /// Time of the call, µs.
    pub(crate) us: f64,
}

/// One round: what one fresh process measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Round {
    /// Every timed call of keel's sequence, in order.
    pub(crate) calls: Vec<TimedCall>,
    /// Steady-state async calls.
    pub(crate) steady_async: Dist,
    /// Steady-state sync (blocking client) calls.
    pub(crate) steady_sync: Dist,
    /// Raw TCP's round trips in the seed's order, µs.
    pub(crate) raw_calls_us: Vec<f64>,
    /// p50 of raw TCP's steady-state async round trips, µs.
    pub(crate) raw_steady_p50_us: f64,
}

impl Round {
    /// The first call of the first test whose name starts with `prefix`, µs.
    fn first_of(&self, prefix: &str) -> f64 {
        self.calls
            .iter()
            .find(|c| c.test.starts_with(prefix))
            .map_or(f64::NAN, |c| c.us)
    }

    /// The first async call ÷ the steady async p50.
    fn ratio(&self) -> f64 {
        self.first_async_us() / self.steady_async.p50_us
    }

    /// The first call of the first async test (a new async client, just opened), µs.
    fn first_async_us(&self) -> f64 {
        self.first_of("async")
    }

    /// The slowest timed call, µs.
    fn slowest_us(&self) -> f64 {
        max_of(&self.calls.iter().map(|c| c.us).collect::<Vec<_>>())
    }

    /// Raw TCP's first async round trip ÷ its steady p50 (the third of the sequence).
    fn raw_ratio(&self) -> f64 {
        self.raw_calls_us.get(2).copied().unwrap_or(f64::NAN) / self.raw_steady_p50_us
    }
}

/// What the first-call experiment measured. The sequence's fields are one round's: the one
/// whose first-async ratio is the median (the lower middle one for an even count); the
/// medians are each taken over every round; `rounds` holds every round.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FirstCall {
    /// `first-call`.
    pub(crate) experiment: &'static str,
    /// The transport.
    pub(crate) binding: Binding,
    /// The median round's timed calls, in order.
    pub(crate) calls: Vec<TimedCall>,
    /// The median round's first async call, µs.
    pub(crate) first_async_us: f64,
    /// The median round's first sync call (the very first call to its host), µs.
    pub(crate) first_sync_us: f64,
    /// The median round's p50 of steady-state async calls, µs.
    pub(crate) steady_p50_us: f64,
    /// The median round's steady-state async calls.
    pub(crate) steady_async: Dist,
    /// The median round's steady-state sync calls.
    pub(crate) steady_sync: Dist,
    /// Median over rounds of the first async call ÷ the steady async p50.
    pub(crate) median_ratio: f64,
    /// Median over rounds of the slowest timed call, µs.
    pub(crate) median_slowest_us: f64,
    /// Raw TCP, same sequence, same processes: median of its first-async ratio.
    pub(crate) raw_median_ratio: f64,
    /// Raw TCP: median over rounds of its slowest timed round trip, µs.
    pub(crate) raw_median_slowest_us: f64,
    /// Every round, in order.
    pub(crate) rounds: Vec<Round>,
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

/// Runs the experiment: `rounds` fresh processes, each running [`run_round`].
pub(crate) fn run(p: &Params) -> anyhow::Result<FirstCall> {
    let exe = std::env::current_exe()?;
    let pb = super::bar(p.rounds as u64, "first-call: fresh processes");
    let mut rounds = Vec::with_capacity(p.rounds);
    for i in 0..p.rounds {
        let mut child = Command::new(&exe);
        child
            .args(["first-call-round", "--binding", p.binding.name()])
            .args(["--steady-calls", &p.steady_calls.to_string()]);
        if i % 2 == 1 {
            child.arg("--raw-first");
        }
        let out = child.output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(
            out.status.success(),
            "keel-lab first-call-round failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let line = stdout.lines().last().unwrap_or_default();
        rounds.push(
            serde_json::from_str(line)
                .map_err(|e| anyhow::anyhow!("keel-lab first-call-round printed {line:?}: {e}"))?,
        );
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(evaluate(p.binding, rounds))
}

/// One round, in this process: a host, the seed's sequence and the steady calls; and raw TCP's
/// sequence, after them or (`raw_first`) before.
pub(crate) fn run_round(
    binding: Binding,
    steady_calls: usize,
    raw_first: bool,
) -> anyhow::Result<Round> {
    let host = start_host(binding, HostSettings::default())?;
    let url = host.url().to_string();
    // The async clients' runtime: the lab's own, separate from the host's and from keel's
    // blocking-client runtime.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lab-client")
        .enable_all()
        .build()?;
    let raw_before = raw_first.then(|| raw::run(&rt, steady_calls)).transpose()?;

    let mut calls = Vec::new();
    for (name, is_async) in [
        ("sync 1", false),
        ("async 1", true),
        ("async 2", true),
        ("sync 2", false),
    ] {
        let times = if is_async {
            async_test(&rt, &url)?
        } else {
            sync_test(&url)?
        };
        for (i, t) in times.into_iter().enumerate() {
            calls.push(TimedCall {
                test: name.to_string(),
                call: i as u32 + 1,
                us: t,
            });
        }
    }

    let steady_async = rt.block_on(async {
        let client = CalculatorClient::connect(&url).await?;
        let mut lat = Latencies::new();
        for i in 0..steady_calls {
            let t = Instant::now();
            client.add(i as f64, 2.0).await?;
            lat.record(t.elapsed());
        }
        client.close().await;
        Ok::<_, keel::Error>(lat.dist())
    })?;
    let client = CalculatorBlockingClient::connect(&url)?;
    let mut lat = Latencies::new();
    for i in 0..steady_calls {
        let t = Instant::now();
        client.add(i as f64, 2.0)?;
        lat.record(t.elapsed());
    }
    client.close();
    let steady_sync = lat.dist();
    host.shutdown();
    let raw = match raw_before {
        Some(raw) => raw,
        None => raw::run(&rt, steady_calls)?,
    };
    Ok(Round {
        calls,
        steady_async,
        steady_sync,
        raw_calls_us: raw.calls_us,
        raw_steady_p50_us: raw.steady_p50_us,
    })
}

/// Builds the result and its verdict from the rounds.
pub(crate) fn evaluate(binding: Binding, rounds: Vec<Round>) -> FirstCall {
    let ratios: Vec<f64> = rounds.iter().map(Round::ratio).collect();
    let median_ratio = median(&ratios);
    let median_slowest_us = median(&rounds.iter().map(Round::slowest_us).collect::<Vec<_>>());
    let raw_median_ratio = median(&rounds.iter().map(Round::raw_ratio).collect::<Vec<_>>());
    let raw_median_slowest_us = median(
        &rounds
            .iter()
            .map(|r| max_of(&r.raw_calls_us))
            .collect::<Vec<_>>(),
    );
    // The round whose ratio is the median (the lower middle one for an even count).
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    order.sort_by(|&a, &b| ratios[a].total_cmp(&ratios[b]));
    let shown = order
        .get(rounds.len().saturating_sub(1) / 2)
        .map(|&i| &rounds[i]);
    let nan = Dist {
        count: 0,
        min_us: f64::NAN,
        p50_us: f64::NAN,
        p99_us: f64::NAN,
        max_us: f64::NAN,
    };
    let verdict = verdict::first_call(rounds.len(), median_slowest_us, median_ratio);
    FirstCall {
        experiment: "first-call",
        binding,
        calls: shown.map(|r| r.calls.clone()).unwrap_or_default(),
        first_async_us: shown.map_or(f64::NAN, Round::first_async_us),
        first_sync_us: shown.map_or(f64::NAN, |r| r.first_of("sync")),
        steady_p50_us: shown.map_or(f64::NAN, |r| r.steady_async.p50_us),
        steady_async: shown.map_or(nan, |r| r.steady_async),
        steady_sync: shown.map_or(nan, |r| r.steady_sync),
        median_ratio,
        median_slowest_us,
        raw_median_ratio,
        raw_median_slowest_us,
        pass: verdict.pass,
        verdict,
        rounds,
    }
}

/// The seed's `SyncTest`: a new blocking client, opened (not timed), two timed calls, closed.
fn sync_test(url: &str) -> anyhow::Result<Vec<f64>> {
    let client = CalculatorBlockingClient::connect(url)?;
    let mut out = Vec::new();
    for _ in 0..2 {
        let t = Instant::now();
        let r = client.add(1.0, 2.0)?;
        out.push(us(t.elapsed()));
        anyhow::ensure!(r == 3.0, "Add(1, 2) returned {r}");
    }
    client.close();
    Ok(out)
}

/// The seed's `AsyncTest`: a new async client, opened (not timed), two timed calls, closed.
fn async_test(rt: &tokio::runtime::Runtime, url: &str) -> anyhow::Result<Vec<f64>> {
    rt.block_on(async {
        let client = CalculatorClient::connect(url).await?;
        let mut out = Vec::new();
        for _ in 0..2 {
            let t = Instant::now();
            let r = client.add(1.0, 2.0).await?;
            out.push(us(t.elapsed()));
            anyhow::ensure!(r == 3.0, "Add(1, 2) returned {r}");
        }
        client.close().await;
        Ok(out)
    })
}

/// The readable summary.
pub(crate) fn summary(r: &FirstCall) -> String {
    let mut s = format!(
        "first-call (seed 000), binding {}, {} fresh processes\n",
        r.binding.name(),
        r.rounds.len()
    );
    s.push_str("  the round with the median first async ÷ p50:\n  test     call     time\n");
    for c in &r.calls {
        s.push_str(&format!("  {:<8} {:>4} {:>8.1} µs\n", c.test, c.call, c.us));
    }
    let d = |x: &Dist| {
        format!(
            "p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs ({} calls)",
            x.p50_us, x.p99_us, x.max_us, x.count
        )
    };
    s.push_str(&format!(
        "  first async call {:.1} µs; first sync call {:.1} µs\n  steady async: {}\n  steady sync:  {}\n",
        r.first_async_us,
        r.first_sync_us,
        d(&r.steady_async),
        d(&r.steady_sync)
    ));
    s.push_str("  round  first async ÷ p50  slowest call   raw TCP: first ÷ p50  slowest\n");
    for (i, round) in r.rounds.iter().enumerate() {
        s.push_str(&format!(
            "  {:>5} {:>17.2} {:>10.1} µs {:>22.2} {:>6.1} µs\n",
            i + 1,
            round.ratio(),
            round.slowest_us(),
            round.raw_ratio(),
            max_of(&round.raw_calls_us)
        ));
    }
    s.push_str(&format!(
        "  median {:>16.2} {:>10.1} µs {:>22.2} {:>6.1} µs\n",
        r.median_ratio, r.median_slowest_us, r.raw_median_ratio, r.raw_median_slowest_us
    ));
    s.push_str(&verdict_line(&r.verdict));
    s
}

/// `  bar: ... -> PASS` plus the reasons of a failure.
pub(crate) fn verdict_line(v: &Verdict) -> String {
    let mut s = format!("  bar: {} -> {}\n", v.bar, v.word());
    for r in &v.reasons {
        s.push_str(&format!("    - {r}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round with keel's sequence `us`, steady p50s of 30 µs (keel) and 20 µs (raw).
    fn round(us: [f64; 8]) -> Round {
        let names = ["sync 1", "async 1", "async 2", "sync 2"];
        Round {
            calls: us
                .iter()
                .enumerate()
                .map(|(i, &us)| TimedCall {
                    test: names[i / 2].to_string(),
                    call: (i % 2) as u32 + 1,
                    us,
                })
                .collect(),
            steady_async: Dist::around(30.0),
            steady_sync: Dist::around(35.0),
            raw_calls_us: vec![300.0, 20.0, 24.0, 20.0, 22.0, 20.0, 21.0, 20.0],
            raw_steady_p50_us: 20.0,
        }
    }

    const GOOD: [f64; 8] = [70.0, 40.0, 80.0, 35.0, 45.0, 30.0, 40.0, 30.0];

    #[test]
    fn picks_the_first_async_and_sync_calls_of_the_median_round() {
        let r = evaluate(Binding::Tcp, vec![round(GOOD)]);
        assert_eq!(r.first_sync_us, 70.0);
        assert_eq!(r.first_async_us, 80.0);
        assert_eq!(r.steady_p50_us, 30.0);
        assert_eq!(r.raw_median_ratio, 24.0 / 20.0);
        assert_eq!(r.raw_median_slowest_us, 300.0);
        assert!(r.pass);
        // Three rounds: the one shown is the one whose ratio is the median.
        let mut slow = GOOD;
        slow[2] = 85.0;
        let mut slower = GOOD;
        slower[2] = 500.0;
        let r = evaluate(Binding::Tcp, vec![round(slower), round(GOOD), round(slow)]);
        assert_eq!(r.first_async_us, 85.0);
        assert_eq!(r.median_ratio, 85.0 / 30.0);
        assert!(r.pass);
    }

    #[test]
    fn a_stall_in_every_process_fails_and_a_pause_in_one_does_not() {
        // WCF's numbers, in µs: 1005 ms first async call, in every process.
        let wcf = [36e3, 1e3, 1005e3, 1e3, 4e3, 1e3, 1e3, 1e3];
        let r = evaluate(Binding::Tcp, vec![round(wcf); 5]);
        assert!(!r.pass);
        assert_eq!(r.verdict.reasons.len(), 2, "{:?}", r.verdict.reasons);
        // A first call 4 × p50 in most processes fails, though one round is fine.
        let mut stalls = GOOD;
        stalls[2] = 120.0;
        let r = evaluate(
            Binding::Tcp,
            vec![
                round(stalls),
                round(GOOD),
                round(stalls),
                round(stalls),
                round(GOOD),
            ],
        );
        assert!(!r.pass);
        // A 3 ms pause of the machine on one call of one round of five does not.
        let mut paused = GOOD;
        paused[5] = 3000.0;
        let r = evaluate(
            Binding::Tcp,
            vec![
                round(GOOD),
                round(paused),
                round(GOOD),
                round(GOOD),
                round(GOOD),
            ],
        );
        assert!(r.pass, "{:?}", r.verdict.reasons);
        // Nor rounds: no verdict to pass.
        assert!(!evaluate(Binding::Tcp, vec![]).pass);
    }

    #[test]
    fn json_shape() {
        let r = evaluate(Binding::Tcp, vec![round(GOOD), round(GOOD)]);
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "calls",
            "first_async_us",
            "first_sync_us",
            "steady_p50_us",
            "median_ratio",
            "median_slowest_us",
            "raw_median_ratio",
            "raw_median_slowest_us",
            "rounds",
            "pass",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert!(v["pass"].is_boolean());
        let c = &v["calls"][0];
        assert_eq!(c["test"], "sync 1");
        assert_eq!(c["call"], 1);
        assert_eq!(c["us"], 70.0);
        assert_eq!(v["calls"].as_array().unwrap().len(), 8);
        assert_eq!(v["rounds"].as_array().unwrap().len(), 2);
        assert_eq!(v["binding"], "tcp");
        // A round survives the trip through a child process's JSON line.
        let line = serde_json::to_string(&round(GOOD)).unwrap();
        assert_eq!(serde_json::from_str::<Round>(&line).unwrap(), round(GOOD));
    }
}
