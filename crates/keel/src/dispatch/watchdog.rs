//! The blocking watchdog: notices an `async` handler that holds its runtime worker (a poll that
//! does not return) for longer than a threshold, and names the operation in a log record and a
//! metric. A blocked worker is how the seeds' failures come back in async Rust: every other call
//! on that worker waits behind it.
//!
//! How: each runtime thread has a slot. Polling a watched handler stores the current *tick* and
//! the operation in the slot, and clears it when the poll returns: two relaxed stores and a load,
//! no clock read. One process-wide thread (a `ticker`) advances the tick every quarter of the
//! smallest threshold and looks at every slot; a slot whose tick is old enough is reported, once
//! per poll. The thread parks while no watched poll runs, so an idle process has no watchdog
//! wake-ups; the next poll unparks it.
//!
//! What it measures is wall-clock time: a poll preempted by the OS for longer than the threshold
//! (a badly overloaded machine) is reported too.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use std::{future::Future, pin::Pin};

use metrics::{counter, Counter};

use crate::core::metrics as m;
use crate::runtime::ticker::{Ticker, Watch};

/// The default threshold ([`HostBuilder::blocking_watchdog`](crate::host::HostBuilder::blocking_watchdog)).
pub(crate) const DEFAULT_THRESHOLD: Duration = Duration::from_millis(10);

/// The smallest threshold the watchdog takes (its tick is a quarter of the smallest one).
pub(crate) const MIN_THRESHOLD: Duration = Duration::from_millis(1);

/// A watched operation's index in the registry.
pub(crate) type OpId = usize;

/// One watched operation of one host.
struct WatchedOp {
    service: &'static str,
    operation: &'static str,
    threshold: Duration,
    /// `keel_server_handler_blocking_total`.
    reported: Counter,
    /// The host's count ([`HostStats::handlers_blocked`](crate::host::HostStats::handlers_blocked)).
    host_count: Arc<AtomicU64>,
}

/// A runtime thread's slot.
#[derive(Default)]
struct Slot {
    /// The tick at which the running watched poll began; 0 when none runs.
    started: AtomicU64,
    /// The running poll's operation.
    op: AtomicUsize,
    /// The `started` value last reported, so that a poll is reported once.
    reported: AtomicU64,
}

struct Watchdog {
    /// The tick (0 marks an empty slot) and the thread.
    ticker: Ticker,
    /// The tick's length, in nanoseconds: a quarter of the smallest threshold registered.
    tick_nanos: AtomicU64,
    slots: Mutex<Vec<Weak<Slot>>>,
    ops: RwLock<Vec<WatchedOp>>,
}

fn watchdog() -> &'static Watchdog {
    static WATCHDOG: OnceLock<&'static Watchdog> = OnceLock::new();
    WATCHDOG.get_or_init(|| {
        let w: &'static Watchdog = Box::leak(Box::new(Watchdog {
            ticker: Ticker::new(),
            tick_nanos: AtomicU64::new(u64::MAX),
            slots: Mutex::new(Vec::new()),
            ops: RwLock::new(Vec::new()),
        }));
        if let Err(e) = w.ticker.start("keel-watchdog", w) {
            log::warn!("keel: cannot start the blocking watchdog: {e}");
        }
        w
    })
}

/// Registers `service.operation` of a host whose watchdog threshold is `threshold`; the host
/// counts reports in `host_count`.
pub(crate) fn register(
    service: &'static str,
    operation: &'static str,
    threshold: Duration,
    host_count: Arc<AtomicU64>,
) -> OpId {
    let w = watchdog();
    let threshold = threshold.max(MIN_THRESHOLD);
    let quarter = u64::try_from((threshold / 4).as_nanos()).unwrap_or(u64::MAX);
    w.tick_nanos.fetch_min(quarter, Ordering::Relaxed);
    // The thread may have started before the tick was set (see `Watchdog::period`).
    w.ticker.unpark();
    let mut ops = w.ops.write().unwrap_or_else(|e| e.into_inner());
    ops.push(WatchedOp {
        service,
        operation,
        threshold,
        reported: counter!(m::SERVER_HANDLER_BLOCKING, "service" => service, "operation" => operation),
        host_count,
    });
    ops.len() - 1
}

thread_local! {
    static SLOT: Arc<Slot> = {
        let slot = Arc::new(Slot::default());
        let w = watchdog();
        let mut slots = w.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|s| s.strong_count() > 0);
        slots.push(Arc::downgrade(&slot));
        slot
    };
}

/// A handler's future, watched while it is polled (not when `op` is `None`: the host's
/// watchdog is off).
pub(crate) struct Watched<F> {
    fut: F,
    op: Option<OpId>,
}

impl<F> Watched<F> {
    pub(crate) fn new(fut: F, op: Option<OpId>) -> Watched<F> {
        Watched { fut, op }
    }
}

impl<F: Future + Unpin> Future for Watched<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(op) = self.op else {
            return Pin::new(&mut self.fut).poll(cx);
        };
        let fut = &mut self.fut;
        let watched = SLOT.try_with(|slot| {
            let w = watchdog();
            // A watched poll inside another (a nested runtime) restores the outer one after.
            let outer = (
                slot.started.load(Ordering::Relaxed),
                slot.op.load(Ordering::Relaxed),
            );
            slot.op.store(op, Ordering::Relaxed);
            slot.started.store(w.ticker.now(), Ordering::SeqCst);
            w.ticker.wake();
            let out = Pin::new(&mut *fut).poll(cx);
            slot.op.store(outer.1, Ordering::Relaxed);
            slot.started.store(outer.0, Ordering::Release);
            out
        });
        // Err: the thread is shutting down (its slot is gone); poll unwatched.
        watched.unwrap_or_else(|_| Pin::new(&mut self.fut).poll(cx))
    }
}

impl Watch for Watchdog {
    fn period(&self) -> Option<Duration> {
        // `u64::MAX`: no operation registered yet. The thread can start before its first
        // registration sets the tick, and a sleep of `u64::MAX` would never end; `register`
        // unparks it.
        match self.tick_nanos.load(Ordering::Relaxed) {
            u64::MAX => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// Looks at every slot at tick `now`; reports polls past their threshold. Returns whether
    /// any watched poll is running.
    fn scan(&self, now: u64, tick: Duration) -> bool {
        let slots: Vec<Arc<Slot>> = {
            let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.iter().filter_map(Weak::upgrade).collect()
        };
        let mut active = false;
        for slot in slots {
            let started = slot.started.load(Ordering::SeqCst);
            if started == 0 {
                continue;
            }
            active = true;
            // The poll began during tick `started`: at least `now - started - 1` whole ticks
            // ago.
            let whole = now.saturating_sub(started).saturating_sub(1);
            let blocked = tick.saturating_mul(u32::try_from(whole).unwrap_or(u32::MAX));
            let ops = self.ops.read().unwrap_or_else(|e| e.into_inner());
            let Some(op) = ops.get(slot.op.load(Ordering::Relaxed)) else {
                continue;
            };
            if blocked >= op.threshold && slot.reported.swap(started, Ordering::Relaxed) != started
            {
                op.reported.increment(1);
                op.host_count.fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    target: "keel::watchdog",
                    "keel: async operation {}.{} has blocked its runtime worker for {} ms \
                     (more than {} ms) without yielding: every call on that worker waits behind \
                     it. Make it a plain `fn` (it then runs on keel-pool), or move the blocking \
                     work to `tokio::task::spawn_blocking`.",
                    op.service,
                    op.operation,
                    blocked.as_millis(),
                    op.threshold.as_millis()
                );
            }
        }
        active
    }
}
