//! An operation's pace: a running mean of its handler's time, from which the scheduler decides
//! whether its calls are short enough to run in runs (see `runs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// An operation whose handler's mean time is at most this is short.
pub(crate) const SHORT: Duration = Duration::from_micros(20);

/// Calls an operation must have answered before its mean counts.
const MIN_SAMPLES: u64 = 4;

/// An operation's pace: a running mean of its handler's time, for the decision to run its calls
/// in a run. Updated without a lock (a lost update between two threads only delays the mean).
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// The mean, in nanoseconds (an exponentially weighted one, 1/8 per call).
    mean_nanos: AtomicU64,
    /// Calls counted, up to [`MIN_SAMPLES`].
    samples: AtomicU64,
}

impl Pace {
    /// Counts a handler that took `took`.
    pub(crate) fn record(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let samples = self.samples.load(Ordering::Relaxed);
        let mean = if samples == 0 {
            took
        } else {
            let old = self.mean_nanos.load(Ordering::Relaxed);
            // old + (took - old) / 8, in unsigned arithmetic.
            (old - old / 8).saturating_add(took / 8)
        };
        self.mean_nanos.store(mean, Ordering::Relaxed);
        if samples < MIN_SAMPLES {
            self.samples.store(samples + 1, Ordering::Relaxed);
        }
    }

    /// The expected time of one call, if the operation is short (see the module docs).
    pub(crate) fn short(&self) -> Option<u64> {
        if self.samples.load(Ordering::Relaxed) < MIN_SAMPLES {
            return None;
        }
        let mean = self.mean_nanos.load(Ordering::Relaxed);
        (mean <= SHORT.as_nanos() as u64).then_some(mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_is_short_only_after_a_few_quick_calls() {
        let pace = Pace::default();
        for _ in 0..MIN_SAMPLES - 1 {
            pace.record(Duration::from_micros(1));
            assert_eq!(pace.short(), None, "too few calls to tell");
        }
        pace.record(Duration::from_micros(1));
        assert_eq!(pace.short(), Some(1_000));
    }

    #[test]
    fn one_slow_call_makes_an_operation_long_until_quick_ones_bring_the_mean_down() {
        let pace = Pace::default();
        for _ in 0..MIN_SAMPLES {
            pace.record(Duration::from_micros(1));
        }
        pace.record(Duration::from_millis(2));
        assert_eq!(pace.short(), None, "a mean of ~250 µs is not short");
        let mut quick = 0;
        while pace.short().is_none() {
            pace.record(Duration::from_micros(1));
            quick += 1;
            assert!(quick < 100, "the mean never came down");
        }
        // (2 ms / 8) × (7/8)^n ≤ 20 µs: n ≥ 19.
        assert!(quick >= 15, "came down after only {quick} quick calls");
    }
}
