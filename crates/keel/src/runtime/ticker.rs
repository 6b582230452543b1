//! A thread that ticks while there is something to watch and parks when there is not: the
//! blocking watchdog's (`watchdog`) and the run guard's (`runs`).
//!
//! Whatever is watched stores the current tick ([`Ticker::now`]) when it starts: a relaxed load
//! and store, no clock read. Each tick the thread advances the count and scans; after four
//! ticks with nothing running it parks, so an idle process has no wake-ups from it, and the
//! next start unparks it ([`Ticker::wake`]).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

/// Ticks without anything running before the thread parks.
const IDLE_TICKS: u32 = 4;

/// What a ticker's thread looks at.
pub(crate) trait Watch: Sync {
    /// The tick's length; `None` while there is nothing to tick for yet (the thread parks until
    /// [`Ticker::unpark`]).
    fn period(&self) -> Option<Duration>;
    /// Looks at what runs at tick `now`, a tick of `period` long; returns whether anything
    /// still runs.
    fn scan(&self, now: u64, period: Duration) -> bool;
}

/// The tick count and the thread's parking state.
#[derive(Debug)]
pub(crate) struct Ticker {
    /// Ticks since the thread started; starts at 1, so that 0 can mark "nothing running".
    tick: AtomicU64,
    /// The thread is parked (or about to park): a start must unpark it.
    parked: AtomicBool,
    thread: OnceLock<Thread>,
}

impl Ticker {
    /// A ticker whose thread is not started yet.
    pub(crate) const fn new() -> Ticker {
        Ticker {
            tick: AtomicU64::new(1),
            parked: AtomicBool::new(true),
            thread: OnceLock::new(),
        }
    }

    /// Starts the thread, named `name`, ticking for `watch`.
    pub(crate) fn start(&'static self, name: &str, watch: &'static dyn Watch) -> io::Result<()> {
        let handle = std::thread::Builder::new()
            .name(name.into())
            .stack_size(64 * 1024)
            .spawn(move || self.run(watch))?;
        let _ = self.thread.set(handle.thread().clone());
        Ok(())
    }

    /// The current tick.
    pub(crate) fn now(&self) -> u64 {
        self.tick.load(Ordering::Relaxed)
    }

    /// Something to watch started (after storing [`now`](Ticker::now)): unparks the thread if it
    /// parked for want of anything to watch.
    pub(crate) fn wake(&self) {
        if self.parked.load(Ordering::SeqCst) && self.parked.swap(false, Ordering::SeqCst) {
            self.unpark();
        }
    }

    /// Unparks the thread (a new [`Watch::period`]).
    pub(crate) fn unpark(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    fn run(&self, watch: &dyn Watch) {
        let mut idle_ticks = 0u32;
        loop {
            let Some(period) = watch.period() else {
                std::thread::park();
                continue;
            };
            std::thread::sleep(period);
            let now = self.tick.fetch_add(1, Ordering::Relaxed) + 1;
            if watch.scan(now, period) {
                idle_ticks = 0;
                continue;
            }
            idle_ticks += 1;
            if idle_ticks < IDLE_TICKS {
                continue;
            }
            // Park until something starts. The flag first, then one more look: a start in
            // between either sees the flag (and unparks) or is seen here.
            self.parked.store(true, Ordering::SeqCst);
            if watch.scan(now, period) {
                self.parked.store(false, Ordering::SeqCst);
                continue;
            }
            while self.parked.load(Ordering::SeqCst) {
                std::thread::park();
            }
            idle_ticks = 0;
        }
    }
}
