//! Helpers shared by the integration tests: polling with a generous bound, and a latch.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Upper bound for every wait: generous, so that slow CI machines never fail a test.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// Polls `cond` every millisecond until it holds; panics after `PATIENCE`.
pub(crate) fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Tasks call `enter` (counts them as running, then blocks until `release`).
#[derive(Default)]
pub(crate) struct Latch {
    running: AtomicUsize,
    max_running: AtomicUsize,
    done: AtomicUsize,
    open: Mutex<bool>,
    cv: Condvar,
}

impl Latch {
    pub(crate) fn new() -> Arc<Latch> {
        Arc::new(Latch::default())
    }

    pub(crate) fn enter(&self) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
        drop(open);
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Releases the latch when dropped, so that a failing assertion (which unwinds while tasks
    /// are still blocked) cannot hang the pool's `Drop`.
    pub(crate) fn release_on_drop(self: &Arc<Self>) -> ReleaseOnDrop {
        ReleaseOnDrop(self.clone())
    }

    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    pub(crate) fn max_running(&self) -> usize {
        self.max_running.load(Ordering::SeqCst)
    }

    pub(crate) fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }
}

/// See [`Latch::release_on_drop`].
pub(crate) struct ReleaseOnDrop(Arc<Latch>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release();
    }
}
