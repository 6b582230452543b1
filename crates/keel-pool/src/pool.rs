//! `Pool`: the public face of the engine in `core`. Its entry point, `Pool::builder`, lives
//! with the `Builder` it returns, so that this module does not depend on `builder`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::{Inner, Phase, Plain, Runnable};
use crate::handle::WithHandle;
use crate::{JoinHandle, Metrics, PoolClosed};

/// An elastic pool of worker threads for blocking work.
///
/// `Pool` is `Send + Sync` but not `Clone`: share it in an `Arc`. Dropping it performs a graceful
/// shutdown ([`Pool::shutdown`] without a timeout): queued work still runs, and the drop returns
/// when every thread has been joined. See the [crate docs](crate) for how threads are managed.
pub struct Pool {
    pub(crate) inner: Arc<Inner>,
}

impl Pool {
    /// Runs `f` on the pool. Never blocks on thread creation: it locks the queue, queues `f`,
    /// wakes the most recently idle thread unless one per core is already on its way (or wakes
    /// the spawner), and returns.
    ///
    /// A panic in `f` is caught and counted in [`Metrics::panicked_total`]; use
    /// [`Pool::spawn_handle`] to observe it.
    ///
    /// # Errors
    /// [`PoolClosed`] with `f` inside if [`shutdown`](Pool::shutdown) or
    /// [`shutdown_now`](Pool::shutdown_now) has been called.
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), PoolClosed<F>> {
        self.inner
            .submit(Box::new(Plain(f)))
            .map_err(|task| PoolClosed(task.0))
    }

    /// Runs a [`Task`] on the pool, as [`spawn`](Pool::spawn) runs a closure.
    ///
    /// # Errors
    /// [`PoolClosed`] with the task inside if the pool has been shut down.
    pub fn spawn_task(&self, task: Task) -> Result<(), PoolClosed<Task>> {
        self.inner
            .submit_jobs(std::iter::once(task.0))
            .map_err(|mut rest| PoolClosed(Task(rest.next().expect("the task came back"))))
    }

    /// Runs every task of `tasks` on the pool: queued under one lock, with at most one wake-up
    /// per core rather than one per task (the woken threads wake the rest as they take them,
    /// see the [crate docs](crate)). For a caller that has several tasks ready at once, such as
    /// a connection's reader that decoded a batch of requests.
    ///
    /// # Errors
    /// [`PoolClosed`] with every task inside if the pool has been shut down; none was queued.
    pub fn spawn_batch<I>(&self, tasks: I) -> Result<(), PoolClosed<Vec<Task>>>
    where
        I: IntoIterator<Item = Task>,
    {
        self.inner
            .submit_jobs(tasks.into_iter().map(|t| t.0))
            .map_err(|rest| PoolClosed(rest.map(Task).collect()))
    }

    /// Runs `f` on the pool and returns a handle to its result, which can be awaited (from any
    /// async runtime) or [`join`](JoinHandle::join)ed.
    ///
    /// If `f` panics the handle resolves to [`JoinError::Panicked`](crate::JoinError::Panicked)
    /// with the payload. If the pool is already shut down, or `shutdown_now` drops the task
    /// before it runs, it resolves to [`JoinError::Cancelled`](crate::JoinError::Cancelled).
    pub fn spawn_handle<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let (task, handle) = WithHandle::new(f);
        // A rejected task is dropped here, which resolves its handle to `Cancelled`.
        let _ = self.inner.submit(Box::new(task));
        handle
    }

    /// A snapshot of the pool's gauges, counters and queue-wait histogram.
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics()
    }

    /// Graceful shutdown: stop accepting work (later `spawn` calls return [`PoolClosed`]), run
    /// everything already queued (creating threads for it as usual), then join every thread.
    ///
    /// Returns `true` if all threads exited within `timeout`. On `false` the remaining threads
    /// carry on, finish the queue and exit on their own; calling `shutdown` again waits again.
    /// Called from inside one of this pool's tasks, it waits (up to `timeout`) for the other
    /// threads and returns `false`, since a thread cannot join itself.
    pub fn shutdown(&self, timeout: Duration) -> bool {
        self.inner.close(Phase::Draining);
        self.inner.wait_exit(Instant::now().checked_add(timeout))
    }

    /// Immediate shutdown: stop accepting work, drop every queued task that has not started
    /// (their [`JoinHandle`]s resolve to [`JoinError::Cancelled`](crate::JoinError::Cancelled),
    /// counted in [`Metrics::cancelled_total`]), let tasks that are already running finish,
    /// then join every thread. Running tasks are not interrupted, so this waits for them
    /// without a timeout.
    ///
    /// Returns `true` once every thread has been joined; `false` only when called from inside
    /// one of this pool's tasks (it then waits for all the other threads, but cannot join its
    /// own). Also upgrades a `shutdown` that is in progress.
    pub fn shutdown_now(&self) -> bool {
        // Dropped outside the pool's lock: dropping a task wakes whoever awaits its handle.
        drop(self.inner.close(Phase::Stopping));
        self.inner.wait_exit(None)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.inner.close(Phase::Draining);
        self.inner.wait_exit(None);
    }
}

/// A closure boxed for the pool once, ahead of time: for callers that hold tasks for a while
/// before handing them over (see [`Pool::spawn_batch`]) without boxing them a second time.
pub struct Task(Box<dyn Runnable>);

impl Task {
    /// Boxes `f` for [`Pool::spawn_task`] or [`Pool::spawn_batch`]. Run there, a panic in `f`
    /// is caught and counted in [`Metrics::panicked_total`], as with [`Pool::spawn`].
    pub fn new<F: FnOnce() + Send + 'static>(f: F) -> Task {
        Task(Box::new(Plain(f)))
    }

    /// Runs the task here, on the calling thread (say, after the pool refused it). A panic in
    /// it unwinds into the caller.
    pub fn run(self) {
        self.0.run();
    }
}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Task(..)")
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.metrics();
        f.debug_struct("Pool")
            .field("threads", &m.threads)
            .field("idle", &m.idle)
            .field("queued", &m.queued)
            .field("min_threads", &m.min_threads)
            .field("max_threads", &m.max_threads)
            .finish_non_exhaustive()
    }
}
