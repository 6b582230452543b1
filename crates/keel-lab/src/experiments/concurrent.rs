//! Seed 001: concurrent clients, each on its own thread with its own blocking client, all
//! released together against an operation that sleeps `work_ms`; each client's latency.

use serde::Serialize;

use super::fire::fire;
use super::{ms, start_host, Binding, HostSettings};
use crate::verdict::{self, Verdict};

/// Settings of the concurrent experiment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// The transport.
    pub(crate) binding: Binding,
    /// Concurrent clients.
    pub(crate) clients: usize,
    /// How long each call blocks its pool thread, ms.
    pub(crate) work_ms: u64,
}

/// What the concurrent experiment measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Concurrent {
    /// `concurrent`.
    pub(crate) experiment: &'static str,
    /// The transport.
    pub(crate) binding: Binding,
    /// Concurrent clients.
    pub(crate) clients: usize,
    /// Work per call, ms.
    pub(crate) work_ms: u64,
    /// Each client's call, ms, in client order.
    pub(crate) latencies_ms: Vec<f64>,
    /// The fastest call, ms.
    pub(crate) min_ms: f64,
    /// The slowest call, ms.
    pub(crate) max_ms: f64,
    /// The bar: the slowest call at most this, ms.
    pub(crate) bar_ms: f64,
    /// The pool's live threads after the calls.
    pub(crate) pool_threads: usize,
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

/// Runs the experiment.
pub(crate) fn run(p: &Params) -> anyhow::Result<Concurrent> {
    anyhow::ensure!(p.clients > 0, "need clients > 0");
    let host = start_host(
        p.binding,
        HostSettings {
            keep_alive: None,
            clients: p.clients,
        },
    )?;
    let pb = super::spinner(format!(
        "concurrent: {} clients × {} ms",
        p.clients, p.work_ms
    ));
    let fired = fire(host.url(), p.clients, p.work_ms);
    pb.finish_and_clear();
    let fired = fired?;
    let pool_threads = host.pool_metrics().threads;
    host.shutdown();
    let latencies_ms = fired.calls.iter().copied().map(ms).collect();
    Ok(evaluate(p, latencies_ms, pool_threads))
}

/// Builds the result and its verdict from the measurements.
pub(crate) fn evaluate(p: &Params, latencies_ms: Vec<f64>, pool_threads: usize) -> Concurrent {
    let verdict = verdict::concurrent(&latencies_ms, p.work_ms);
    let min_ms = latencies_ms.iter().copied().fold(f64::NAN, f64::min);
    Concurrent {
        experiment: "concurrent",
        binding: p.binding,
        clients: p.clients,
        work_ms: p.work_ms,
        min_ms,
        max_ms: verdict::max_of(&latencies_ms),
        bar_ms: verdict::concurrent_limit_ms(p.work_ms),
        latencies_ms,
        pool_threads,
        pass: verdict.pass,
        verdict,
    }
}

/// The readable summary.
pub(crate) fn summary(r: &Concurrent) -> String {
    let mut s = format!(
        "concurrent (seed 001), binding {}: {} clients × {} ms\n",
        r.binding.name(),
        r.clients,
        r.work_ms
    );
    for (i, l) in r.latencies_ms.iter().enumerate().take(20) {
        s.push_str(&format!("  client {i:>3} takes: {l:.1} ms\n"));
    }
    if r.latencies_ms.len() > 20 {
        s.push_str(&format!("  ... {} more\n", r.latencies_ms.len() - 20));
    }
    s.push_str(&format!(
        "  latencies {:.1}–{:.1} ms; pool threads after: {}\n",
        r.min_ms, r.max_ms, r.pool_threads
    ));
    s.push_str(&super::first_call::verdict_line(&r.verdict));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            binding: Binding::Tcp,
            clients: 3,
            work_ms: 1000,
        }
    }

    #[test]
    fn verdict_min_max() {
        let r = evaluate(&params(), vec![1001.5, 1003.0, 1000.9], 3);
        assert!(r.pass);
        assert_eq!(r.min_ms, 1000.9);
        assert_eq!(r.max_ms, 1003.0);
        assert_eq!(r.bar_ms, 1010.0);
        assert!(!evaluate(&params(), vec![1001.5, 1010.5], 3).pass);
    }

    #[test]
    fn json_shape() {
        let r = evaluate(&params(), vec![1001.5, 1003.0, 1000.9], 3);
        let v = serde_json::to_value(&r).unwrap();
        for k in ["latencies_ms", "max_ms", "pass"] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert!(v["pass"].is_boolean());
        assert_eq!(v["latencies_ms"].as_array().unwrap().len(), 3);
        assert_eq!(v["max_ms"], 1003.0);
    }
}
