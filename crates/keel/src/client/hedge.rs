//! Hedging of idempotent calls (issue 33): the [`HedgingPolicy`], and the recorder of a
//! channel's observed latency that a [percentile delay](HedgeDelay::Percentile) reads.
//!
//! A hedged call is sent once, and again (up to
//! [`max_attempts`](HedgingPolicy::max_attempts) attempts in all) each time the
//! [`delay`](HedgingPolicy::delay) passes without an answer, to another host of a balanced
//! channel while one is left. The first answer that is not a "host could not take it" answer
//! (`Unavailable`, `Busy`, `ShuttingDown`, a lost connection) wins; the other attempts are
//! dropped, which cancels them on the wire (a Cancel frame on keel-wire, a reset stream on
//! HTTP/2, a closed connection on HTTP/1.1), so their handlers see the cancellation. A "could
//! not take it" answer starts the next attempt at once (gRFC A6's non-fatal codes). Every
//! attempt after the first takes a token of the channel's retry budget (no token, no more
//! attempts), and the call's deadline bounds them all. A call is either hedged or retried,
//! never both (as in gRFC A6): a hedged call's [`RetryPolicy`](super::RetryPolicy) is not used.
//!
//! The loop that runs the attempts is in `pipeline.rs`, beside the one every other call takes.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The most attempts a hedged call makes, whatever its policy says (gRFC A6 caps them at 5).
pub(crate) const MAX_HEDGED_ATTEMPTS: u32 = 5;

/// How a channel hedges calls of `#[keel(idempotent)]` operations: sends a call again, to
/// another host where the channel has several, while its first attempt is still unanswered,
/// and takes the first answer (see [`ChannelBuilder::hedging`](super::ChannelBuilder::hedging)).
/// Opt-in: a channel hedges nothing unless given a policy, for every operation
/// ([`ChannelBuilder::hedging`](super::ChannelBuilder::hedging)), for some
/// ([`ChannelBuilder::hedging_for`](super::ChannelBuilder::hedging_for)), or for one client's
/// calls (a generated client's `with_hedging`). Only calls of idempotent operations without a
/// request stream or a streamed reply are hedged; the others run as without a policy.
///
/// ```
/// use std::time::Duration;
/// use keel::client::{HedgeDelay, HedgingPolicy};
///
/// // The default: a second attempt once the first has run longer than 95 % of the channel's
/// // recent calls did ("The Tail at Scale").
/// let policy = HedgingPolicy::default();
/// assert_eq!(policy.max_attempts, 2);
/// assert_eq!(policy.delay, HedgeDelay::Percentile(95.0));
/// // Up to three attempts, 20 ms apart.
/// let policy = HedgingPolicy::default()
///     .max_attempts(3)
///     .delay(HedgeDelay::Fixed(Duration::from_millis(20)));
/// assert_eq!(policy.max_attempts, 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct HedgingPolicy {
    /// Attempts per call, the first included (1: no hedging; at most 5). Default: 2.
    pub max_attempts: u32,
    /// How long an attempt goes unanswered before the next one is sent. Default:
    /// [`HedgeDelay::Percentile`]`(95.0)`.
    pub delay: HedgeDelay,
}

/// When a hedged call sends its next attempt (see [`HedgingPolicy::delay`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum HedgeDelay {
    /// This long after the previous attempt was sent.
    Fixed(Duration),
    /// This percentile (0 to 100) of the channel's observed latency: the time from start to
    /// answer of its recent calls that had a percentile policy, over the last 5 to 10 seconds
    /// (two histograms that take turns, each kept for 5 s, to within 12.5 %). Until the
    /// channel has seen 20 such calls in that window, no attempt is sent on a delay (an answer
    /// that says the host could not take the call still starts the next at once). One
    /// recorder per channel: operations whose latencies differ widely are better given a
    /// [`Fixed`](HedgeDelay::Fixed) delay each.
    Percentile(f64),
}

impl Default for HedgingPolicy {
    fn default() -> Self {
        HedgingPolicy {
            max_attempts: 2,
            delay: HedgeDelay::Percentile(95.0),
        }
    }
}

impl HedgingPolicy {
    /// No hedging (one attempt): given to a client's `with_hedging`, it turns off the
    /// channel's policy for that client's calls.
    pub fn disabled() -> HedgingPolicy {
        HedgingPolicy {
            max_attempts: 1,
            ..HedgingPolicy::default()
        }
    }

    /// Attempts per call, the first included (at least 1, at most 5).
    pub fn max_attempts(mut self, attempts: u32) -> HedgingPolicy {
        self.max_attempts = attempts.clamp(1, MAX_HEDGED_ATTEMPTS);
        self
    }

    /// How long an attempt goes unanswered before the next one is sent.
    pub fn delay(mut self, delay: HedgeDelay) -> HedgingPolicy {
        if let HedgeDelay::Percentile(p) = delay {
            self.delay = HedgeDelay::Percentile(if p.is_nan() {
                95.0
            } else {
                p.clamp(0.0, 100.0)
            });
        } else {
            self.delay = delay;
        }
        self
    }

    /// Whether a call under this policy is hedged at all.
    pub(crate) fn hedges(&self) -> bool {
        self.max_attempts > 1
    }
}

/// Latencies below this many microseconds each have a bucket of their own.
const EXACT: usize = 16;
/// Buckets per doubling above that (so a bucket is at most 12.5 % wide).
const PER_OCTAVE: usize = 8;
/// Octaves above `EXACT` µs: up to 2^36 µs (19 hours).
const OCTAVES: usize = 32;
const BUCKETS: usize = EXACT + OCTAVES * PER_OCTAVE;
/// How long each histogram collects before the other takes over (and is cleared).
const HALF_WINDOW_MS: u64 = 5_000;
/// Samples in the window below which the percentile is not trusted.
const MIN_SAMPLES: u64 = 20;
/// How often the percentile is worked out again (a scan of both histograms).
const REFRESH_MS: u64 = 50;
/// No percentile yet.
const UNKNOWN: u64 = u64::MAX;

/// A channel's observed latency (see [`HedgeDelay::Percentile`]): two histograms of
/// log-linear buckets (2 × 272 counters, about 2 KiB), each recording for 5 s in turn and
/// cleared when its turn comes again, so a percentile covers the last 5 to 10 s. Recording is
/// a few atomic operations; the percentile is worked out at most every 50 ms and cached (on
/// every call while too few samples make it unknown).
/// Counts touched during a turn change may land in the histogram being cleared: an
/// approximation a delay can live with.
#[derive(Debug)]
pub(crate) struct LatencyRecorder {
    halves: [Vec<AtomicU32>; 2],
    /// The histogram recording now (0 or 1).
    current: AtomicUsize,
    /// When the current one began (ms since `start`).
    turned_ms: AtomicU64,
    /// The cached percentile (µs, or `UNKNOWN`), which percentile it is (its bits), and
    /// when it was worked out (ms since `start`, `UNKNOWN`: never).
    cached_us: AtomicU64,
    cached_for: AtomicU64,
    cached_ms: AtomicU64,
    start: Instant,
}

impl LatencyRecorder {
    pub(crate) fn new(now: Instant) -> LatencyRecorder {
        let half = || (0..BUCKETS).map(|_| AtomicU32::new(0)).collect();
        LatencyRecorder {
            halves: [half(), half()],
            current: AtomicUsize::new(0),
            turned_ms: AtomicU64::new(0),
            cached_us: AtomicU64::new(UNKNOWN),
            cached_for: AtomicU64::new(0),
            cached_ms: AtomicU64::new(UNKNOWN),
            start: now,
        }
    }

    fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_millis() as u64
    }

    /// Hands over to the other histogram if the current one's turn is over (cleared first).
    fn turn(&self, now_ms: u64) {
        let turned = self.turned_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(turned) < HALF_WINDOW_MS {
            return;
        }
        if self
            .turned_ms
            .compare_exchange(turned, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let next = 1 - self.current.load(Ordering::Relaxed);
        // Idle for a whole window: what the other one holds is stale too.
        if now_ms.saturating_sub(turned) >= 2 * HALF_WINDOW_MS {
            for c in &self.halves[1 - next] {
                c.store(0, Ordering::Relaxed);
            }
        }
        for c in &self.halves[next] {
            c.store(0, Ordering::Relaxed);
        }
        self.current.store(next, Ordering::Relaxed);
        self.cached_ms.store(UNKNOWN, Ordering::Relaxed);
    }

    /// Records one call's latency.
    pub(crate) fn record(&self, latency: Duration, now: Instant) {
        self.turn(self.ms(now));
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let half = &self.halves[self.current.load(Ordering::Relaxed)];
        half[bucket(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// The `p`th percentile of the recorded latencies (the upper edge of its bucket), or
    /// `None` with fewer than 20 samples in the window.
    pub(crate) fn percentile(&self, p: f64, now: Instant) -> Option<Duration> {
        let now_ms = self.ms(now);
        self.turn(now_ms);
        let at = self.cached_ms.load(Ordering::Relaxed);
        let cached_us = self.cached_us.load(Ordering::Relaxed);
        // Not known yet: worked out again on every call until it is (a quiet channel's).
        let cached = if at != UNKNOWN
            && cached_us != UNKNOWN
            && now_ms.saturating_sub(at) < REFRESH_MS
            && self.cached_for.load(Ordering::Relaxed) == p.to_bits()
        {
            cached_us
        } else {
            let us = self.scan(p);
            self.cached_us.store(us, Ordering::Relaxed);
            self.cached_for.store(p.to_bits(), Ordering::Relaxed);
            self.cached_ms.store(now_ms, Ordering::Relaxed);
            us
        };
        (cached != UNKNOWN).then(|| Duration::from_micros(cached))
    }

    /// Works the percentile out from both histograms.
    fn scan(&self, p: f64) -> u64 {
        let count = |i: usize| {
            u64::from(self.halves[0][i].load(Ordering::Relaxed))
                + u64::from(self.halves[1][i].load(Ordering::Relaxed))
        };
        let total: u64 = (0..BUCKETS).map(count).sum();
        if total < MIN_SAMPLES {
            return UNKNOWN;
        }
        let rank = ((p / 100.0 * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for i in 0..BUCKETS {
            seen += count(i);
            if seen >= rank {
                return upper_edge(i);
            }
        }
        upper_edge(BUCKETS - 1)
    }
}

/// The bucket of a latency of `us` microseconds.
fn bucket(us: u64) -> usize {
    if us < EXACT as u64 {
        return us as usize;
    }
    // The octave (2^octave ≤ us < 2^(octave + 1)), 4 for the first above EXACT.
    let octave = (63 - us.leading_zeros()) as usize;
    if octave >= 4 + OCTAVES {
        return BUCKETS - 1;
    }
    let sub = ((us >> (octave - 3)) & (PER_OCTAVE as u64 - 1)) as usize;
    EXACT + (octave - 4) * PER_OCTAVE + sub
}

/// The first latency (µs) above bucket `i`.
fn upper_edge(i: usize) -> u64 {
    if i < EXACT {
        return i as u64 + 1;
    }
    let octave = 4 + (i - EXACT) / PER_OCTAVE;
    let sub = ((i - EXACT) % PER_OCTAVE) as u64;
    (PER_OCTAVE as u64 + sub + 1) << (octave - 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_at_most_an_eighth_wide() {
        let mut last = 0;
        for us in [
            0u64,
            1,
            15,
            16,
            17,
            31,
            32,
            100,
            1_000,
            99_999,
            1 << 30,
            u64::MAX,
        ] {
            let b = bucket(us);
            assert!(b >= last, "{us}");
            assert!(b < BUCKETS);
            last = b;
            if us < 1 << 35 {
                assert!(upper_edge(b) > us, "{us}: {}", upper_edge(b));
                assert!(upper_edge(b) as f64 <= (us as f64 * 1.125).max(us as f64 + 1.0) + 1.0);
            }
        }
    }

    #[test]
    fn the_percentile_follows_the_samples_and_forgets_old_ones() {
        let t0 = Instant::now();
        let r = LatencyRecorder::new(t0);
        let ms = Duration::from_millis;
        for _ in 0..19 {
            r.record(ms(1), t0);
        }
        assert_eq!(r.percentile(95.0, t0), None, "too few samples");
        // 95 calls of 1 ms and 5 of 100 ms: the 90th percentile is about 1 ms, the 99th about
        // 100 ms.
        for _ in 19..95 {
            r.record(ms(1), t0);
        }
        for _ in 0..5 {
            r.record(ms(100), t0);
        }
        let later = t0 + ms(REFRESH_MS);
        let p90 = r.percentile(90.0, later).unwrap();
        assert!(p90 >= ms(1) && p90 <= ms(1).mul_f64(1.13), "{p90:?}");
        let p99 = r.percentile(99.0, later).unwrap();
        assert!(p99 >= ms(100) && p99 <= ms(113), "{p99:?}");
        // 10 s later only the new samples count.
        let t1 = t0 + ms(HALF_WINDOW_MS);
        for _ in 0..100 {
            r.record(ms(10), t1);
        }
        let t2 = t1 + ms(HALF_WINDOW_MS);
        for _ in 0..100 {
            r.record(ms(20), t2);
        }
        let p99 = r.percentile(99.0, t2).unwrap();
        assert!(p99 >= ms(20) && p99 < ms(23), "{p99:?}");
        let p10 = r.percentile(10.0, t2).unwrap();
        assert!(
            p10 >= ms(10) && p10 < ms(12),
            "the previous window still counts: {p10:?}"
        );
        // A long quiet spell forgets everything.
        assert_eq!(r.percentile(50.0, t2 + ms(3 * HALF_WINDOW_MS)), None);
    }
}
