//! The one polling helper: wait for a condition without betting on how long it takes (in a
//! runtime, or on a plain thread).

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
