//! Latency distributions: HDR-histogram recording and its summary ([`Dist`], µs), shared by
//! the experiments and the child host's own timings.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// `x` rounded to one decimal.
pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// A latency distribution, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct Dist {
    /// Samples.
    pub(crate) count: u64,
    /// Fastest.
    pub(crate) min_us: f64,
    /// Median.
    pub(crate) p50_us: f64,
    /// 99th percentile.
    pub(crate) p99_us: f64,
    /// Slowest.
    pub(crate) max_us: f64,
}

#[cfg(test)]
impl Dist {
    /// A distribution for tests: 1,000 calls around `p50` (min half of it, p99 twice, max four
    /// times).
    pub(crate) fn around(p50: f64) -> Dist {
        Dist {
            count: 1000,
            min_us: p50 / 2.0,
            p50_us: p50,
            p99_us: p50 * 2.0,
            max_us: p50 * 4.0,
        }
    }
}

/// Records latencies (ns, 3 significant digits) and summarises them as a [`Dist`].
#[derive(Debug)]
pub(crate) struct Latencies {
    hist: Histogram<u64>,
}

impl Latencies {
    /// An empty recorder (1 ns to 1 h).
    pub(crate) fn new() -> Latencies {
        Latencies {
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid histogram bounds"),
        }
    }

    /// Records one latency.
    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.hist.saturating_record(ns);
    }

    /// Adds every latency `other` recorded.
    pub(crate) fn add(&mut self, other: &Latencies) {
        // Both have the same bounds, so this cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    /// The summary.
    pub(crate) fn dist(&self) -> Dist {
        let q = |v: u64| round1(v as f64 / 1000.0);
        Dist {
            count: self.hist.len(),
            min_us: q(self.hist.min()),
            p50_us: q(self.hist.value_at_quantile(0.5)),
            p99_us: q(self.hist.value_at_quantile(0.99)),
            max_us: q(self.hist.max()),
        }
    }
}
