//! Seed 000: the first async call after sync calls. The seed's sequence: sync test (new
//! client, open, two sync calls, close), async test, async test, sync test; every call timed
//! (the open is not); then steady-state calls for the p50 the first async call is compared to.

use std::time::Instant;

use keel_examples::calculator::{CalculatorBlockingClient, CalculatorClient};
use serde::Serialize;

use super::{start_host, us, Binding, HostSettings, Latencies};
use crate::verdict::{self, Verdict};

/// Settings of the first-call experiment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// The transport.
    pub(crate) binding: Binding,
    /// Steady-state calls after the sequence, per client kind.
    pub(crate) steady_calls: usize,
}

/// One timed call of the seed's sequence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TimedCall {
    /// Which test: `sync 1`, `async 1`, `async 2`, `sync 2`.
    pub(crate) test: String,
    /// The call within the test, from 1.
    pub(crate) call: u32,
    /// Time of the call, µs.
    pub(crate) us: f64,
}

/// What the first-call experiment measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FirstCall {
    /// `first-call`.
    pub(crate) experiment: &'static str,
    /// The transport.
    pub(crate) binding: Binding,
    /// Every timed call of the sequence, in order.
    pub(crate) calls: Vec<TimedCall>,
    /// The first call of the first async test (a new async client, just opened), µs.
    pub(crate) first_async_us: f64,
    /// The first call of the first sync test (the very first call to the host), µs.
    pub(crate) first_sync_us: f64,
    /// p50 of steady-state async calls (the same kind as `first_async_us`), µs.
    pub(crate) steady_p50_us: f64,
    /// Steady-state async calls.
    pub(crate) steady_async: super::Dist,
    /// Steady-state sync (blocking client) calls.
    pub(crate) steady_sync: super::Dist,
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

/// Runs the experiment.
pub(crate) fn run(p: &Params) -> anyhow::Result<FirstCall> {
    let host = start_host(p.binding, HostSettings::default())?;
    let url = host.url().to_string();
    // The async clients' runtime: the lab's own, separate from the host's and from keel's
    // blocking-client runtime.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lab-client")
        .enable_all()
        .build()?;

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

    let pb = super::bar(2 * p.steady_calls as u64, "first-call: steady-state calls");
    let steady_async = rt.block_on(async {
        let client = CalculatorClient::connect(&url).await?;
        let mut lat = Latencies::new();
        for i in 0..p.steady_calls {
            let t = Instant::now();
            client.add(i as f64, 2.0).await?;
            lat.record(t.elapsed());
            pb.inc(1);
        }
        client.close().await;
        Ok::<_, keel::Error>(lat.dist())
    })?;
    let client = CalculatorBlockingClient::connect(&url)?;
    let mut lat = Latencies::new();
    for i in 0..p.steady_calls {
        let t = Instant::now();
        client.add(i as f64, 2.0)?;
        lat.record(t.elapsed());
        pb.inc(1);
    }
    client.close();
    pb.finish_and_clear();
    let steady_sync = lat.dist();
    drop(rt);
    host.shutdown();
    Ok(evaluate(p.binding, calls, steady_async, steady_sync))
}

/// Builds the result and its verdict from the measurements.
pub(crate) fn evaluate(
    binding: Binding,
    calls: Vec<TimedCall>,
    steady_async: super::Dist,
    steady_sync: super::Dist,
) -> FirstCall {
    let first_of = |prefix: &str| {
        calls
            .iter()
            .find(|c| c.test.starts_with(prefix))
            .map_or(f64::NAN, |c| c.us)
    };
    let first_async_us = first_of("async");
    let first_sync_us = first_of("sync");
    let steady_p50_us = steady_async.p50_us;
    let all: Vec<f64> = calls.iter().map(|c| c.us).collect();
    let verdict = verdict::first_call(&all, first_async_us, steady_p50_us);
    FirstCall {
        experiment: "first-call",
        binding,
        calls,
        first_async_us,
        first_sync_us,
        steady_p50_us,
        steady_async,
        steady_sync,
        pass: verdict.pass,
        verdict,
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
    let mut s = format!("first-call (seed 000), binding {}\n", r.binding.name());
    s.push_str("  test     call     time\n");
    for c in &r.calls {
        s.push_str(&format!("  {:<8} {:>4} {:>8.1} µs\n", c.test, c.call, c.us));
    }
    let d = |x: &super::Dist| {
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
    use crate::experiments::Dist;

    fn dist(p50: f64) -> Dist {
        Dist {
            count: 1000,
            min_us: p50 / 2.0,
            p50_us: p50,
            p99_us: p50 * 2.0,
            max_us: p50 * 4.0,
        }
    }

    fn sequence(us: [f64; 8]) -> Vec<TimedCall> {
        let names = ["sync 1", "async 1", "async 2", "sync 2"];
        us.iter()
            .enumerate()
            .map(|(i, &us)| TimedCall {
                test: names[i / 2].to_string(),
                call: (i % 2) as u32 + 1,
                us,
            })
            .collect()
    }

    #[test]
    fn picks_the_first_async_and_sync_calls() {
        let r = evaluate(
            Binding::Tcp,
            sequence([70.0, 40.0, 80.0, 35.0, 45.0, 30.0, 40.0, 30.0]),
            dist(30.0),
            dist(35.0),
        );
        assert_eq!(r.first_sync_us, 70.0);
        assert_eq!(r.first_async_us, 80.0);
        assert_eq!(r.steady_p50_us, 30.0);
        assert!(r.pass);
        // WCF's numbers, in µs: 1005 ms first async call.
        let wcf = evaluate(
            Binding::Tcp,
            sequence([36e3, 1e3, 1005e3, 1e3, 4e3, 1e3, 0.0, 0.0]),
            dist(1000.0),
            dist(1000.0),
        );
        assert!(!wcf.pass);
    }

    #[test]
    fn json_shape() {
        let r = evaluate(
            Binding::Tcp,
            sequence([70.0, 40.0, 80.0, 35.0, 45.0, 30.0, 40.0, 30.0]),
            dist(30.0),
            dist(35.0),
        );
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "calls",
            "first_async_us",
            "first_sync_us",
            "steady_p50_us",
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
        assert_eq!(v["binding"], "tcp");
    }
}
