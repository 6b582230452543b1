//! An elastic worker pool for blocking work that never makes a burst wait.
//!
//! keel runs every synchronous (blocking) service operation on a `keel-pool`. The pool exists to
//! keep latency flat in the three situations where classic thread pools do not: the first call,
//! a burst of blocking calls, and the first call after an idle period.
//!
//! # A tour
//!
//! * [`Pool::builder`] configures a pool: a warm floor of [`min_threads`](Builder::min_threads)
//!   created by `build` and never retired, a cap [`max_threads`](Builder::max_threads), and a
//!   [`keep_alive`](Builder::keep_alive) after which idle threads above the floor retire.
//! * [`Pool::spawn`] runs a closure; [`Pool::spawn_handle`] also returns a [`JoinHandle`] that
//!   can be `.await`ed or [`join`](JoinHandle::join)ed, and carries a panic as a [`JoinError`].
//! * [`Pool::metrics`] returns a [`Metrics`] snapshot: thread gauges, lifetime counters and a
//!   queue-wait histogram with [`Metrics::queue_wait_quantile`].
//! * [`Pool::shutdown`] drains and joins, [`Pool::shutdown_now`] drops the queue and joins;
//!   dropping the pool is a graceful shutdown.
//!
//! ```
//! use std::time::Duration;
//!
//! let pool = keel_pool::Pool::builder()
//!     .min_threads(2)
//!     .max_threads(64)
//!     .keep_alive(Duration::from_secs(10))
//!     .build()?;
//!
//! pool.spawn(|| println!("fire and forget")).unwrap();
//! let answer = pool.spawn_handle(|| 6 * 7);
//! assert_eq!(answer.join().unwrap(), 42);
//!
//! let failed = pool.spawn_handle(|| -> () { panic!("boom") });
//! assert_eq!(failed.join().unwrap_err().panic_message(), Some("boom"));
//!
//! assert!(pool.metrics().threads >= 2);
//! assert!(pool.shutdown(Duration::from_secs(5)));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # How threads are managed
//!
//! There is no ramp-up controller and no hill climbing: keel knows which operations block (the
//! contract says so), so when work waits the right answer is always "a thread for it, now".
//!
//! * **Injection.** When `k` tasks wait and `i` threads are idle, `min(k, i)` idle threads take
//!   them and `k − i` threads are created at once, up to `max_threads`. `spawn` only locks,
//!   pushes and wakes an idle thread; threads are created by a dedicated spawner thread, never on
//!   the submitting thread and never while a lock is held.
//! * **Chained wake-ups.** At most one idle thread per core is on its way to the queue at a
//!   time. A woken thread takes a task and, if more wait, wakes the next idle thread before it
//!   runs its own; a thread that finishes a task takes the next one without parking. A batch of
//!   short tasks therefore costs a wake-up or two instead of one per task (keel's sync
//!   operations: 95k → 135–167k calls/s in `keel-lab peers`), while a batch of long ones still
//!   has every task started within one wake-up per task, as the chain passes through the idle
//!   threads and the spawner creates the rest.
//! * **Warm floor, LIFO.** The `min_threads` floor never retires. Idle threads park on a stack
//!   and the most recently idle one is woken first, so cold threads age out: each retires after
//!   `keep_alive` of its own idle time, using a timed condvar wait (no timer thread).
//! * **Never drop, never crash.** At `max_threads`, or when the OS refuses a thread, the work
//!   waits in the queue and is picked up by the next free thread; refusals are counted in
//!   [`Metrics::spawn_failures_total`] and creation is retried after a short back-off.
//!   The queue is unbounded on purpose: admission control belongs to keel's throttle in front
//!   of the pool, which answers `Busy` at once instead of queueing without limit.
//! * **Panics.** Each task runs under `catch_unwind`; the panic goes to its [`JoinHandle`]. A
//!   thread that dies anyway is replaced.

#![forbid(unsafe_code)]

mod builder;
mod core;
mod handle;
mod metrics;
mod pool;

use std::fmt;

pub use builder::{
    Builder, DEFAULT_KEEP_ALIVE, DEFAULT_MAX_THREADS, DEFAULT_STACK_SIZE, DEFAULT_THREAD_NAME,
};
pub use handle::{JoinError, JoinHandle};
pub use metrics::{Metrics, QueueWait};
pub use pool::{Pool, Task};

/// Returned by [`Pool::spawn`] after the pool has shut down; holds the closure, so the caller
/// can run it elsewhere.
pub struct PoolClosed<F>(pub F);

impl<F> fmt::Debug for PoolClosed<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PoolClosed(..)")
    }
}

impl<F> fmt::Display for PoolClosed<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the pool is shut down")
    }
}

impl<F> std::error::Error for PoolClosed<F> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn pool_is_send_and_sync() {
        assert_send_sync::<Pool>();
        assert_send_sync::<Metrics>();
        assert_send::<JoinError>();
        assert_send::<JoinHandle<String>>();
    }
}
