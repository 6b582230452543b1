//! keel's clock: every reading behind keepalive, a connection's age and idleness, and calls'
//! deadlines (both ends) comes from [`now`], so that a test can pause and drive it.
//!
//! Without the `test-util` feature [`now`] is `Instant::now()`, inlined: the release build
//! reads the clock exactly as before, with no atomic and no branch. With it, the clock can be
//! paused and moved forward by the test-only `keel::testing` (`core/testing.rs`); until a test
//! does, it reads `Instant::now()` plus nothing.
//!
//! Not every reading goes through it: measurements that keep their instants to themselves (a
//! handshake's round trip, an interceptor's elapsed time, a balancer's resolve interval) and
//! waits left to tokio's timers with tokio's own instants (frame, header and handshake
//! timeouts, the drain) read the real clock. An instant from [`now`] handed to a tokio timer
//! goes through [`to_tokio`], which keeps the time left on keel's clock.
//!
//! The shape follows tokio's `time::clock` (a plain `Instant::now()` unless `test-util`), but
//! the clock is one per process, not one per runtime: keel's timer thread, its pool threads and
//! a host's own runtime read it, and none of them belongs to a test's runtime.

#[cfg(not(feature = "test-util"))]
use std::time::Instant;

/// keel's clock now.
#[cfg(not(feature = "test-util"))]
#[inline(always)]
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// `at`, an instant on keel's clock, as a deadline for tokio's timers.
#[cfg(not(feature = "test-util"))]
#[inline(always)]
pub(crate) fn to_tokio(at: Instant) -> tokio::time::Instant {
    at.into()
}

#[cfg(feature = "test-util")]
pub(crate) use virtual_clock::{advance, now, pause, resume, to_tokio};

#[cfg(feature = "test-util")]
mod virtual_clock {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// [`FROZEN`] while the clock runs.
    const RUNNING: u64 = u64::MAX;

    /// Everything tests moved the clock forward by, in nanoseconds: a running clock reads
    /// `Instant::now()` plus this. It only grows, so the clock never goes back.
    static AHEAD: AtomicU64 = AtomicU64::new(0);

    /// While paused, where the clock stands, in nanoseconds after [`base`]; [`RUNNING`]
    /// otherwise.
    static FROZEN: AtomicU64 = AtomicU64::new(RUNNING);

    /// What [`FROZEN`] counts from (set at the first pause).
    fn base() -> Instant {
        static BASE: OnceLock<Instant> = OnceLock::new();
        *BASE.get_or_init(Instant::now)
    }

    pub(crate) fn now() -> Instant {
        // The real clock first, then the state: a pause that lands in between is seen, and
        // its reading is the later one.
        let real = Instant::now();
        match FROZEN.load(Ordering::Acquire) {
            RUNNING => real + Duration::from_nanos(AHEAD.load(Ordering::Acquire)),
            frozen => base() + Duration::from_nanos(frozen),
        }
    }

    /// `at`, on keel's clock, as a tokio deadline the same time away as it is on keel's clock
    /// now. (tokio's timers still wait in real time: moving keel's clock does not fire them.)
    pub(crate) fn to_tokio(at: Instant) -> tokio::time::Instant {
        let (keel, real) = (now(), Instant::now());
        let real_at = match at.checked_duration_since(keel) {
            Some(left) => real + left,
            None => real.checked_sub(keel - at).unwrap_or(real),
        };
        real_at.into()
    }

    /// Stops the clock where it is. The caller makes sure no other pause is in effect.
    pub(crate) fn pause() {
        let base = base();
        let at = nanos(now().saturating_duration_since(base));
        FROZEN.store(at, Ordering::Release);
    }

    /// Moves the (paused) clock forward by `by`.
    pub(crate) fn advance(by: Duration) {
        let by = nanos(by);
        AHEAD.fetch_add(by, Ordering::AcqRel);
        FROZEN.fetch_add(by, Ordering::AcqRel);
    }

    /// The clock runs again: from the real clock plus every advance, never behind where it
    /// stood (that was the real clock at the pause plus the same advances).
    pub(crate) fn resume() {
        FROZEN.store(RUNNING, Ordering::Release);
    }

    fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(RUNNING - 1)
    }
}
