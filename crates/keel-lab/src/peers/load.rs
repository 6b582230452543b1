//! What every system's client shares: the measuring window its calls check, and histograms.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;

/// A histogram of call latencies in nanoseconds (1 ns to 60 s, 3 significant digits).
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// The state callers share during a throughput run: warm-up (calls not counted), the measured
/// window (counted), then stop. Callers only read it: each counts its calls in its own
/// histogram (a shared counter bumped by every call would cost a contended atomic per call,
/// charged to the client).
#[derive(Debug, Default)]
pub(crate) struct Window {
    stop: AtomicBool,
    counting: AtomicBool,
}

impl Window {
    /// Whether callers should stop issuing calls.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Starts (true) or ends (false) the measured window.
    pub(crate) fn set_counting(&self, on: bool) {
        self.counting.store(on, Ordering::Relaxed);
    }

    /// Tells callers to stop.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Records in `h` a call started at `t0` and answered now, if the window is open: the
    /// calls answered in the window are the histograms' counts.
    pub(crate) fn record(&self, h: &mut Histogram<u64>, t0: Instant) {
        if self.counting.load(Ordering::Relaxed) {
            h.saturating_record(t0.elapsed().as_nanos() as u64);
        }
    }
}

/// p50, p99 and p99.9 of `h` in µs (0.01 µs resolution), zeros when empty.
pub(crate) fn percentiles_us(h: &Histogram<u64>) -> [f64; 3] {
    if h.is_empty() {
        return [0.0; 3];
    }
    [0.5, 0.99, 0.999].map(|q| (h.value_at_quantile(q) as f64 / 10.0).round() / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = new_histogram();
        // 1..=1000 µs, one call each.
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let [p50, p99, p999] = percentiles_us(&h);
        assert!((p50 - 500.0).abs() <= 1.0, "{p50}");
        assert!((p99 - 990.0).abs() <= 1.0, "{p99}");
        assert!((p999 - 999.0).abs() <= 1.0, "{p999}");
        assert_eq!(percentiles_us(&new_histogram()), [0.0; 3]);
    }

    #[test]
    fn window_counts_only_while_open() {
        let w = Window::default();
        let mut h = new_histogram();
        w.record(&mut h, Instant::now());
        assert_eq!(h.len(), 0);
        w.set_counting(true);
        w.record(&mut h, Instant::now());
        w.record(&mut h, Instant::now());
        w.set_counting(false);
        w.record(&mut h, Instant::now());
        assert_eq!(h.len(), 2);
        assert!(!w.stopped());
        w.stop();
        assert!(w.stopped());
    }
}
