//! Test-only control of keel's clock (feature `test-util`, **not for production**): pause it,
//! move it forward, and wake at once whatever keel has waiting on it.
//!
//! keel reads the time of keepalive pings and their verdicts, of a call's deadline (the
//! client's timer and the host's checks), of a connection's age (`max_connection_age`) and of
//! its idleness (`idle_timeout`) from one clock. [`pause`] stops it for the whole process;
//! [`Paused::advance`] moves it forward and returns once keel's timer thread has woken every
//! wait that was due by then. A 20 s keepalive interval then takes no 20 s:
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! let clock = keel::testing::pause();
//! // ... a host and a channel, a call, then the path dies silently ...
//! clock.advance(Duration::from_secs(20)); // the keepalive ping goes out
//! clock.advance(Duration::from_secs(1)); // unanswered for its timeout: the connection is dead
//! # }
//! ```
//!
//! # One clock per process
//!
//! The clock belongs to the process, not to a test: keel's timer thread, its pool threads and
//! a host's runtime all read it, and the tests of one test binary run in parallel threads of
//! one process. So [`pause`] takes the clock for the test that calls it: another test's
//! [`pause`] waits until the first drops its [`Paused`]. A test of the same binary that needs
//! keel's time to follow the wall clock (it waits for a real keepalive, deadline or reaper)
//! takes [`real_time`]: tests holding that run together, never while the clock is paused.
//! Tests that hold neither must not care about keel's timing. (A per-channel and per-host
//! clock would avoid this, at the price of a clock handle through every builder, connection
//! and timer entry.)
//!
//! # What does not follow it
//!
//! Waits keel leaves to tokio's timers run in real time, whatever the clock says: frame,
//! header and handshake timeouts, an HTTP/2 client's keepalive pings, a host's cut-off of
//! an async handler at its deadline, an HTTP call's deadline, retries' backoff, and handlers'
//! own sleeps. Each is armed with the time left on keel's clock, so a paused clock never makes
//! one fire early. Nor does keel-pool's clock (a thread's keep-alive) follow it, nor the
//! blocking watchdog's, which measures how long a thread really is blocked.
//!
//! While paused, every reading is the same instant until the next advance: round-trip samples
//! taken in that time are zero, and [`Context::deadline`](crate::Context::deadline) and other
//! instants keel hands out are on keel's clock ([`now`] reads it).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use super::{clock, timer};

/// Who holds the clock: one test that paused it, or any number that need it running.
static HOLDERS: RwLock<()> = RwLock::new(());

/// keel's clock now (what keel compares its deadlines with).
pub fn now() -> Instant {
    clock::now()
}

/// Pauses keel's clock for the calling test, once no other test holds it (see the
/// [module docs](self)): it stands still until [`Paused::advance`] moves it, and runs on
/// from where it stands when the [`Paused`] is dropped. Not reentrant: a test that pauses
/// twice without dropping the first [`Paused`] waits for itself forever.
pub fn pause() -> Paused {
    let holder = HOLDERS.write().unwrap_or_else(|e| e.into_inner());
    clock::pause();
    Paused { _holder: holder }
}

/// Keeps keel's clock running with the wall clock for as long as the guard lives: a test
/// that waits for keel's real timing holds it, and runs alongside the others that do, never
/// while a test has the clock paused (see the [module docs](self)).
pub fn real_time() -> RealTime {
    RealTime {
        _holder: HOLDERS.read().unwrap_or_else(|e| e.into_inner()),
    }
}

/// keel's clock, paused by [`pause`]. Dropped, the clock runs again from where it stands
/// (it never goes back), and the next test may take it.
#[derive(Debug)]
#[must_use = "the clock runs again when this is dropped"]
pub struct Paused {
    _holder: RwLockWriteGuard<'static, ()>,
}

impl Paused {
    /// Moves keel's clock forward by `by`, and returns once keel's timer thread has woken
    /// every wait due by the new time (keepalive pings and verdicts, client deadlines, a
    /// host's age and idle reapers). What the woken tasks then do, they do on their own
    /// runtimes: wait for its outcome as for any other.
    pub fn advance(&self, by: Duration) {
        clock::advance(by);
        timer::clock_moved();
    }

    /// keel's clock now (where it stands).
    pub fn now(&self) -> Instant {
        clock::now()
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        clock::resume();
        timer::clock_moved();
    }
}

/// keel's clock kept running with the wall clock (see [`real_time`]).
#[derive(Debug)]
#[must_use = "the clock may be paused again once this is dropped"]
pub struct RealTime {
    _holder: RwLockReadGuard<'static, ()>,
}
