//! The one polling helper: wait for a condition without betting on how long it takes (in a
//! runtime, on a plain thread, or in keel's time with its clock paused).

use std::time::{Duration, Instant};

/// How often [`eventually_within`] looks.
const EVERY: Duration = Duration::from_millis(5);

/// Polls `cond` every 5 ms for up to 10 s: whether it came to hold. The limit is generous; it
/// is reached only when the behaviour is missing.
pub async fn eventually(cond: impl FnMut() -> bool) -> bool {
    eventually_within(Duration::from_secs(10), cond).await
}

/// Polls `cond` every 5 ms for up to `limit` (and once more at the limit): whether it came to
/// hold.
pub async fn eventually_within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(EVERY).await;
    }
    cond()
}

/// [`eventually_within`] for a plain thread, outside any runtime (it sleeps the thread).
pub fn eventually_blocking(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(EVERY);
    }
    cond()
}

/// [`eventually_within`] in keel's time: moves keel's clock, paused by `clock`, forward `step`
/// at a time, with a real pause of 1 ms after each step for what it woke to act, until `cond`
/// holds. Returns how far keel's clock moved by then, or `None` if `cond` did not hold within
/// `limit` of keel's time. keel's time runs far ahead of real time here: it suits waits that
/// need nothing but keel's timers (a dead path, a deadline, an age), not one that also waits in
/// real time (a handler's sleep, a retry's backoff), which would look many steps long.
pub async fn drive(
    clock: &keel::testing::Paused,
    step: Duration,
    limit: Duration,
    mut cond: impl FnMut() -> bool,
) -> Option<Duration> {
    let start = clock.now();
    loop {
        let moved = clock.now() - start;
        if cond() {
            return Some(moved);
        }
        if moved >= limit {
            return None;
        }
        clock.advance(step);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
