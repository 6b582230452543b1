//! `Metrics` snapshot and the lock-free queue-wait histogram behind it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two: 8 gives a relative bucket width of at most 12.5 %.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Values `0..SUB` get one bucket each; above that, `SUB` buckets per power of two up to 2^64.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

fn bucket_of(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros(); // >= SUB_BITS
    let mantissa = ((ns >> (exp - SUB_BITS)) as usize) & (SUB - 1);
    SUB + (exp - SUB_BITS) as usize * SUB + mantissa
}

/// Largest value (in ns) that falls into bucket `i`.
fn bucket_upper(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let exp = (i - SUB) / SUB + SUB_BITS as usize;
    let mantissa = ((i - SUB) % SUB) as u64;
    let shift = exp - SUB_BITS as usize;
    ((SUB as u64 + mantissa + 1) << shift).wrapping_sub(1)
}

/// Concurrent recorder: one relaxed `fetch_add` per task.
pub(crate) struct Recorder {
    buckets: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Recorder {
    pub(crate) fn new() -> Self {
        Recorder {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub(crate) fn record(&self, wait: Duration) {
        let ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> QueueWait {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        QueueWait {
            count: counts.iter().sum(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            counts,
        }
    }
}

/// Histogram of queue-wait times: from `spawn` to the moment a worker starts the task.
///
/// Log-linear buckets (8 per power of two), so every quantile is exact to within 12.5 %
/// (reported values are the upper edge of their bucket, i.e. never an underestimate).
/// Counts are cumulative since the pool was built.
#[derive(Clone)]
pub struct QueueWait {
    counts: Vec<u64>,
    count: u64,
    sum_ns: u64,
}

impl QueueWait {
    /// Number of tasks recorded (tasks that have started running).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean wait, or zero when nothing was recorded.
    pub fn mean(&self) -> Duration {
        match self.count {
            0 => Duration::ZERO,
            n => Duration::from_nanos(self.sum_ns / n),
        }
    }

    /// The `q`-quantile (`q` in `0.0..=1.0`, clamped), e.g. `0.5` for p50 and `0.99` for p99.
    /// Zero when nothing was recorded.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        // Rank of the wanted sample, 1-based; at least the first sample.
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(bucket_upper(i));
            }
        }
        Duration::from_nanos(u64::MAX)
    }
}

impl fmt::Debug for QueueWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueWait")
            .field("count", &self.count)
            .field("mean", &self.mean())
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .field("max", &self.quantile(1.0))
            .finish()
    }
}

/// A point-in-time snapshot of a pool, from [`Pool::metrics`](crate::Pool::metrics).
///
/// Gauges (`threads`, `idle`, `busy`, `starting`, `queued`) are read together under the pool's
/// lock, so they are consistent with each other; `*_total` counters are cumulative since `build`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Metrics {
    /// Live worker threads (idle + busy). The pool's internal spawner thread is not counted.
    pub threads: usize,
    /// Workers parked waiting for work.
    pub idle: usize,
    /// Workers running a task or about to (`threads - idle`).
    pub busy: usize,
    /// Threads requested from the OS that have not started yet.
    pub starting: usize,
    /// Tasks waiting in the queue (not yet picked up by any worker).
    pub queued: usize,
    /// The warm floor: threads that never retire.
    pub min_threads: usize,
    /// The effective cap (after clamping to the OS limits).
    pub max_threads: usize,
    /// Worker threads ever started.
    pub created_total: u64,
    /// Workers that retired after `keep_alive` idle.
    pub retired_total: u64,
    /// Workers that died by an escaped panic and were replaced (should stay 0).
    pub died_total: u64,
    /// Thread creations the OS (or the test hook) refused; the work stayed queued.
    pub spawn_failures_total: u64,
    /// Tasks that finished running, including ones that panicked.
    pub completed_total: u64,
    /// Tasks that panicked (a subset of `completed_total`).
    pub panicked_total: u64,
    /// Tasks dropped unrun by `shutdown_now`.
    pub cancelled_total: u64,
    /// Queue-wait histogram (submit → start).
    pub queue_wait: QueueWait,
}

impl Metrics {
    /// Shorthand for `self.queue_wait.quantile(q)`.
    pub fn queue_wait_quantile(&self, q: f64) -> Duration {
        self.queue_wait.quantile(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_cover_their_values() {
        let mut last = 0;
        for v in (0..5000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last || v > 4999, "bucket order");
            last = b;
            assert!(bucket_upper(b) >= v, "upper({b}) < {v}");
            if b > 0 {
                assert!(bucket_upper(b - 1) < v, "value {v} belongs lower");
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_within_bucket_precision() {
        let r = Recorder::new();
        for us in 1..=1000u64 {
            r.record(Duration::from_micros(us));
        }
        let s = r.snapshot();
        assert_eq!(s.count(), 1000);
        for (q, exact) in [(0.5, 500.0), (0.99, 990.0), (1.0, 1000.0), (0.0, 1.0)] {
            let got = s.quantile(q).as_nanos() as f64 / 1000.0;
            assert!(
                got >= exact && got <= exact * 1.125 + 0.001,
                "q{q}: {got} vs {exact}"
            );
        }
        assert_eq!(
            QueueWait {
                counts: vec![0; BUCKETS],
                count: 0,
                sum_ns: 0
            }
            .quantile(0.5),
            Duration::ZERO
        );
    }
}
