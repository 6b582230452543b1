//! The engine: shared state, the worker loop, and the spawner thread.
//!
//! Locks: `Inner::state` (the queue, the idle stack, counters) and one `Parker::slot` per worker.
//! They are never held together, and no thread is ever created while either is held.
//!
//! Ownership protocol for idle workers: a worker parks by pushing its `Parker` on the idle stack
//! (under the state lock). Whoever pops it off the stack owns that worker's next wake-up and must
//! deliver a `Slot::Wake` to it (after releasing the state lock). A worker whose keep-alive
//! expires retires only if it can still find itself on the stack; otherwise a delivery is in
//! flight and it waits for it.
//!
//! Wake-ups are chained: tasks always go through the queue, and at most `max_waking` workers are
//! on their way from the idle stack at any moment (`State::waking`). A woken worker takes one
//! task and, if more wait and workers are idle, wakes the next before running it; a worker that
//! finishes a task takes the next queued one without parking. So a batch of short tasks costs a
//! wake-up or two, not one each, and a batch of long ones still starts every task within one
//! wake-up latency per task (the chain), while the spawner creates threads for the tasks the
//! idle workers cannot cover. Invariant: while the queue is non-empty and a worker is idle,
//! `waking > 0`, so some woken worker will carry the chain on.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::mem;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::metrics::{Metrics, Recorder};

/// Locks a mutex, ignoring poisoning: no user code ever runs while a pool lock is held, so a
/// poisoned lock can only come from a bug in this crate, and the data is still consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A unit of work. `run` returns `true` if the task panicked (and caught it itself).
pub(crate) trait Runnable: Send {
    fn run(self: Box<Self>) -> bool;
}

/// A fire-and-forget task from `Pool::spawn`.
pub(crate) struct Plain<F>(pub(crate) F);

impl<F: FnOnce() + Send> Runnable for Plain<F> {
    fn run(self: Box<Self>) -> bool {
        (self.0)();
        false
    }
}

/// Hook consulted before each thread creation (test seam for spawn failures).
pub(crate) type SpawnHook = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

pub(crate) struct Job {
    task: Box<dyn Runnable>,
    enqueued: Instant,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Phase {
    /// Accepting work.
    Open,
    /// `shutdown`: no new work; queued work still runs.
    Draining,
    /// `shutdown_now`: no new work; the queue was dropped.
    Stopping,
}

pub(crate) struct Config {
    pub(crate) min_threads: usize,
    pub(crate) max_threads: usize,
    pub(crate) keep_alive: Duration,
    pub(crate) stack_size: usize,
    pub(crate) name: String,
    pub(crate) hook: Option<SpawnHook>,
    /// How many new workers may help the spawner create threads at once.
    pub(crate) max_helpers: usize,
    /// How many idle workers may be on their way to the queue at once (see the module docs).
    pub(crate) max_waking: usize,
}

enum Slot {
    Empty,
    /// Look at the queue (and leave if the pool is closed and it is empty).
    Wake,
}

/// One worker's parking place: the idle stack holds these, most recently idle on top.
struct Parker {
    slot: Mutex<Slot>,
    cv: Condvar,
}

impl Parker {
    fn deliver(&self, what: Slot) {
        *lock(&self.slot) = what;
        self.cv.notify_one();
    }
}

struct State {
    /// Unbounded on purpose: admission control is keel's throttle, in front of the pool.
    queue: VecDeque<Job>,
    /// LIFO: the most recently idle worker is woken first, so cold ones age out.
    idle: Vec<Arc<Parker>>,
    /// Workers taken off `idle` and woken that have not looked at the queue yet.
    waking: usize,
    threads: usize,
    /// Threads on their way: counted by whoever decided to create them, uncounted when they
    /// register (or when creation fails).
    starting: usize,
    /// Creations decided (already in `starting`) but not yet claimed by a creator.
    debt: usize,
    /// New workers currently helping the spawner create threads (fan-out).
    helpers: usize,
    /// Creation back-off after the OS refused a thread.
    backoff: Duration,
    retry_at: Option<Instant>,
    phase: Phase,
    spawner_parked: bool,
    spawner_alive: bool,
    lifecycle_waiters: usize,
    created_total: u64,
    retired_total: u64,
    died_total: u64,
    spawn_failures_total: u64,
    completed_total: u64,
    panicked_total: u64,
    cancelled_total: u64,
}

impl State {
    /// How many more threads should be created right now: one per queued task not already
    /// covered by a thread on its way (being created, being woken, or idle and about to be woken
    /// by the chain), plus any shortfall below the floor, within the cap.
    fn need(&self, cfg: &Config) -> usize {
        if self.phase == Phase::Stopping {
            return 0;
        }
        let have = self.threads + self.starting;
        let cap = cfg.max_threads.saturating_sub(have);
        let floor = match self.phase {
            Phase::Open => cfg.min_threads.saturating_sub(have),
            _ => 0,
        };
        let covered = self.starting + self.waking + self.idle.len();
        let demand = self.queue.len().saturating_sub(covered);
        demand.max(floor).min(cap)
    }
}

static NEXT_POOL_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// Id of the pool whose worker this thread is (0: none).
    static CURRENT_POOL: Cell<usize> = const { Cell::new(0) };
}

pub(crate) struct Inner {
    id: usize,
    pub(crate) cfg: Config,
    state: Mutex<State>,
    spawner_cv: Condvar,
    lifecycle_cv: Condvar,
    handles: Mutex<Handles>,
    waits: Recorder,
    next_name: AtomicUsize,
}

/// The threads' join handles, joined by `wait_exit`. Each worker's is keyed by its number (the
/// spawner's by `SPAWNER`), so that a retiring worker can take its own out and drop it, detaching
/// itself: its stack is then freed as it exits, in the idle time that retired it. Otherwise a
/// creator would reap the finished handles (`pthread_detach`, and a `munmap` of each stack glibc
/// does not cache) in the middle of the next burst, holding this lock (measured: the second and
/// later 1,000-call bursts of `keel-lab burst` waited ~10–20 ms longer for their threads).
struct Handles {
    list: Vec<(usize, thread::JoinHandle<()>)>,
    prune_at: usize,
}

/// The spawner's key in `Handles`.
const SPAWNER: usize = usize::MAX;

impl Inner {
    pub(crate) fn new(cfg: Config) -> Arc<Inner> {
        Arc::new(Inner {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            cfg,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                idle: Vec::new(),
                waking: 0,
                threads: 0,
                starting: 0,
                debt: 0,
                helpers: 0,
                backoff: Duration::ZERO,
                retry_at: None,
                phase: Phase::Open,
                spawner_parked: false,
                spawner_alive: false,
                lifecycle_waiters: 0,
                created_total: 0,
                retired_total: 0,
                died_total: 0,
                spawn_failures_total: 0,
                completed_total: 0,
                panicked_total: 0,
                cancelled_total: 0,
            }),
            spawner_cv: Condvar::new(),
            lifecycle_cv: Condvar::new(),
            handles: Mutex::new(Handles {
                list: Vec::new(),
                prune_at: 64,
            }),
            waits: Recorder::new(),
            next_name: AtomicUsize::new(0),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Starts the spawner and the warm floor, and waits until the floor is parked.
    pub(crate) fn start(self: &Arc<Self>) -> io::Result<()> {
        let min = self.cfg.min_threads;
        {
            let mut st = self.state();
            st.starting = min; // so the spawner does not also create the floor
            st.spawner_alive = true;
        }
        let me = self.clone();
        let spawned = thread::Builder::new()
            .name(format!("{}-spawner", self.cfg.name))
            .stack_size(64 * 1024)
            .spawn(move || me.spawner_main());
        match spawned {
            Ok(h) => self.push_handle(SPAWNER, h),
            Err(e) => {
                let mut st = self.state();
                st.spawner_alive = false;
                st.starting = 0;
                return Err(e);
            }
        }
        for created in 0..min {
            if let Err(e) = self.create_worker() {
                let mut st = self.state();
                st.starting -= min - created;
                st.spawn_failures_total += 1;
                return Err(e);
            }
        }
        let mut st = self.state();
        st.lifecycle_waiters += 1;
        while st.idle.len() < min && st.threads + st.starting >= min {
            st = self
                .lifecycle_cv
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        st.lifecycle_waiters -= 1;
        Ok(())
    }

    /// Queues a task and wakes the most recently idle worker, unless enough are on their way
    /// already (one of them will wake the next). Never creates a thread: at most it wakes
    /// the spawner.
    pub(crate) fn submit<T: Runnable + 'static>(&self, task: Box<T>) -> Result<(), Box<T>> {
        let enqueued = Instant::now();
        let mut st = self.state();
        if st.phase != Phase::Open {
            return Err(task);
        }
        st.queue.push_back(Job { task, enqueued });
        self.wake_for_queue(st);
        Ok(())
    }

    /// Queues every task of `tasks` under one lock, then wakes as many idle workers as may be
    /// on their way at once (they wake the rest by the chain). If the pool is closed, nothing is
    /// queued and `tasks` comes back untouched.
    pub(crate) fn submit_jobs<I>(&self, tasks: I) -> Result<(), I>
    where
        I: Iterator<Item = Box<dyn Runnable>>,
    {
        let enqueued = Instant::now();
        let mut st = self.state();
        if st.phase != Phase::Open {
            return Err(tasks);
        }
        st.queue.extend(tasks.map(|task| Job { task, enqueued }));
        self.wake_for_queue(st);
        Ok(())
    }

    /// After tasks were queued: wakes as many idle workers as may be on their way at once
    /// (`take_idle`), and the spawner if threads are needed beyond those; the wake-ups are
    /// delivered after the lock is released.
    fn wake_for_queue(&self, mut st: MutexGuard<'_, State>) {
        // At most `max_waking` (one per core); one or two without allocating a list.
        let first = self.take_idle(&mut st);
        let second = first.as_ref().and_then(|_| self.take_idle(&mut st));
        let mut more = Vec::new();
        if second.is_some() {
            while let Some(parker) = self.take_idle(&mut st) {
                more.push(parker);
            }
        }
        if st.spawner_parked && st.need(&self.cfg) > 0 {
            st.spawner_parked = false;
            self.spawner_cv.notify_one();
        }
        drop(st);
        for parker in first.into_iter().chain(second).chain(more) {
            parker.deliver(Slot::Wake);
        }
    }

    /// An idle worker to wake for the queued work, if more tasks wait than workers are on
    /// their way, one is idle, and fewer than `max_waking` are on their way. The caller delivers
    /// `Slot::Wake` to it after releasing the lock.
    fn take_idle(&self, st: &mut State) -> Option<Arc<Parker>> {
        if st.queue.len() <= st.waking || st.waking >= self.cfg.max_waking {
            return None;
        }
        let parker = st.idle.pop()?;
        st.waking += 1;
        Some(parker)
    }

    pub(crate) fn metrics(&self) -> Metrics {
        let queue_wait = self.waits.snapshot();
        let st = self.state();
        Metrics {
            threads: st.threads,
            idle: st.idle.len(),
            busy: st.threads - st.idle.len(),
            starting: st.starting,
            queued: st.queue.len(),
            min_threads: self.cfg.min_threads,
            max_threads: self.cfg.max_threads,
            created_total: st.created_total,
            retired_total: st.retired_total,
            died_total: st.died_total,
            spawn_failures_total: st.spawn_failures_total,
            completed_total: st.completed_total,
            panicked_total: st.panicked_total,
            cancelled_total: st.cancelled_total,
            queue_wait,
        }
    }

    fn notify_lifecycle(&self, st: &State) {
        if st.lifecycle_waiters > 0 {
            self.lifecycle_cv.notify_all();
        }
    }

    fn poke_spawner(&self, st: &mut State) {
        if st.spawner_parked {
            st.spawner_parked = false;
            self.spawner_cv.notify_one();
        }
    }

    fn push_handle(&self, n: usize, h: thread::JoinHandle<()>) {
        let mut hs = lock(&self.handles);
        if hs.list.len() >= hs.prune_at {
            // Threads that left without taking their handle out (one that retired before its
            // handle was pushed, one that died) leave finished handles behind; drop them
            // (amortised O(1)).
            hs.list.retain(|(_, h)| !h.is_finished());
            hs.prune_at = (hs.list.len() * 2).max(64);
        }
        hs.list.push((n, h));
    }

    /// Takes worker `n`'s handle out (`None` if it is not there yet), for the retiring worker
    /// to drop outside the lock.
    fn take_handle(&self, n: usize) -> Option<thread::JoinHandle<()>> {
        let mut hs = lock(&self.handles);
        let pos = hs.list.iter().position(|(id, _)| *id == n)?;
        Some(hs.list.swap_remove(pos).1)
    }

    /// Creates one worker thread. The caller has already counted it in `starting`.
    fn create_worker(self: &Arc<Self>) -> io::Result<()> {
        if let Some(hook) = &self.cfg.hook {
            hook()?;
        }
        let me = self.clone();
        // Allocated here rather than in the new thread, which would otherwise make glibc set up
        // a malloc arena (an mmap under the contended mm lock) during a burst.
        let parker = Arc::new(Parker {
            slot: Mutex::new(Slot::Empty),
            cv: Condvar::new(),
        });
        let n = self.next_name.fetch_add(1, Ordering::Relaxed);
        let h = thread::Builder::new()
            .name(format!("{}-{n}", self.cfg.name))
            .stack_size(self.cfg.stack_size)
            .spawn(move || me.worker_main(n, parker))?;
        self.push_handle(n, h);
        Ok(())
    }

    /// Claims one pending creation and performs it, outside the lock. Returns the re-taken
    /// guard and whether a creation was attempted.
    fn create_one<'a>(
        self: &'a Arc<Self>,
        mut st: MutexGuard<'a, State>,
    ) -> (MutexGuard<'a, State>, bool) {
        if st.debt == 0 {
            return (st, false);
        }
        st.debt -= 1;
        drop(st);
        let result = self.create_worker();
        let mut st = self.state();
        match result {
            Ok(()) => {
                st.backoff = Duration::ZERO;
                st.retry_at = None;
            }
            Err(_) => {
                // The work stays queued. Cancel the rest of this round and retry after a short
                // back-off (doubling up to 100 ms while the OS keeps refusing).
                st.starting -= 1 + st.debt;
                st.debt = 0;
                st.spawn_failures_total += 1;
                st.backoff =
                    (st.backoff * 2).clamp(Duration::from_millis(1), Duration::from_millis(100));
                st.retry_at = Some(Instant::now() + st.backoff);
                self.poke_spawner(&mut st);
            }
        }
        (st, true)
    }

    /// Decides how many threads to create (`State::need`) and creates them, helped by the
    /// threads it creates (each new worker claims pending creations before taking work, so
    /// creation fans out over the cores). Woken by `submit` when work is queued and no thread
    /// is idle. After `build`, the only other place threads are created is `worker_main`.
    fn spawner_main(self: Arc<Self>) {
        let mut st = self.state();
        loop {
            if st.phase != Phase::Open && st.queue.is_empty() && st.threads == 0 && st.starting == 0
            {
                st.spawner_alive = false;
                self.notify_lifecycle(&st);
                return;
            }
            let need = st.need(&self.cfg);
            let now = Instant::now();
            if need > 0 && st.retry_at.is_none_or(|t| now >= t) {
                st.starting += need;
                st.debt += need;
            }
            let (guard, created) = self.create_one(st);
            st = guard;
            if created {
                continue;
            }
            st.spawner_parked = true;
            st = match st.retry_at {
                Some(t) if need > 0 => {
                    let wait = t.saturating_duration_since(now);
                    self.spawner_cv
                        .wait_timeout(st, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                _ => self
                    .spawner_cv
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner),
            };
            st.spawner_parked = false;
        }
    }

    /// Runs one job outside every lock; `true` if it panicked.
    fn run(&self, job: Job) -> bool {
        self.waits.record(job.enqueued.elapsed());
        match catch_unwind(AssertUnwindSafe(|| job.task.run())) {
            Ok(panicked) => panicked,
            Err(payload) => {
                // Dropped here, unguarded: a payload whose Drop panics kills this thread, and
                // `ExitGuard` then replaces it.
                drop(payload);
                true
            }
        }
    }

    fn worker_main(self: Arc<Self>, n: usize, parker: Arc<Parker>) {
        CURRENT_POOL.with(|c| c.set(self.id));
        let mut guard = ExitGuard {
            inner: &self,
            parker: &parker,
            registered: false,
            clean: false,
        };
        let mut st = self.state();
        // Fan-out: help create the rest of a burst before taking work (our task may block for
        // long). With one creator per core (the spawner plus `max_helpers`) a burst of 100
        // starts 15-30 % sooner on 2 cores than with the spawner alone; more creators only
        // fight over the kernel's mm lock.
        if st.debt > 0 && st.helpers < self.cfg.max_helpers {
            st.helpers += 1;
            loop {
                let (guard, created) = self.create_one(st);
                st = guard;
                if !created {
                    break;
                }
            }
            st.helpers -= 1;
        }
        // Register and take the first task under one lock: until then this thread stays in
        // `starting`, which is what keeps `need` from creating a second thread for that task.
        st.starting -= 1;
        st.threads += 1;
        st.created_total += 1;
        guard.registered = true;
        self.notify_lifecycle(&st);
        loop {
            let job = match st.queue.pop_front() {
                Some(job) => {
                    drop(st);
                    job
                }
                None => {
                    if st.phase != Phase::Open {
                        break;
                    }
                    st.idle.push(parker.clone());
                    self.notify_lifecycle(&st);
                    drop(st);
                    if let Park::Retired = self.park(&parker) {
                        guard.clean = true;
                        // Uncounted already and leaving: detach, so that nobody reaps this
                        // thread later (see `Handles`). `wait_exit` no longer joins it; it has
                        // left the pool's code, as every thread `wait_exit` joins has.
                        drop(self.take_handle(n));
                        return;
                    }
                    // Woken: carry the chain on before running anything (our task may block).
                    st = self.state();
                    st.waking -= 1;
                    let Some(job) = st.queue.pop_front() else {
                        continue; // Someone else took it; park again (or leave if closed).
                    };
                    let next = self.take_idle(&mut st);
                    drop(st);
                    if let Some(next) = next {
                        next.deliver(Slot::Wake);
                    }
                    job
                }
            };
            let panicked = self.run(job);
            st = self.state();
            st.completed_total += 1;
            st.panicked_total += u64::from(panicked);
        }
        st.threads -= 1;
        self.notify_lifecycle(&st);
        self.poke_spawner(&mut st);
        guard.clean = true;
    }

    /// Waits for a wake-up, or retires after `keep_alive` idle if above the floor.
    fn park(&self, parker: &Arc<Parker>) -> Park {
        let keep_alive = self.cfg.keep_alive;
        let mut slot = lock(&parker.slot);
        let mut deadline = Instant::now().checked_add(keep_alive);
        loop {
            if let Slot::Wake = mem::replace(&mut *slot, Slot::Empty) {
                return Park::Woken;
            }
            let Some(until) = deadline else {
                slot = parker.cv.wait(slot).unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            let now = Instant::now();
            if now < until {
                slot = parker
                    .cv
                    .wait_timeout(slot, until - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                continue;
            }
            // Keep-alive expired. Lock order: never hold the slot while taking the state lock.
            drop(slot);
            let mut st = self.state();
            match st.idle.iter().position(|p| Arc::ptr_eq(p, parker)) {
                Some(pos) if st.threads > self.cfg.min_threads => {
                    st.idle.remove(pos);
                    st.threads -= 1;
                    st.retired_total += 1;
                    self.notify_lifecycle(&st);
                    return Park::Retired;
                }
                // Part of the floor: stay.
                Some(_) => deadline = now.checked_add(keep_alive),
                // Someone popped us and is delivering: wait for it without a timeout.
                None => deadline = None,
            }
            drop(st);
            slot = lock(&parker.slot);
        }
    }

    /// Stops accepting work; with `Phase::Stopping` also drops the queue (returned, so that the
    /// caller drops it outside the lock: dropping a `spawn_handle` task wakes its waiter).
    pub(crate) fn close(&self, phase: Phase) -> VecDeque<Job> {
        let mut st = self.state();
        if phase > st.phase {
            st.phase = phase;
        }
        let dropped = if phase == Phase::Stopping {
            st.cancelled_total += st.queue.len() as u64;
            mem::take(&mut st.queue)
        } else {
            VecDeque::new()
        };
        // Every idle worker is woken: each runs what is still queued (`Draining`), then leaves.
        let idle = mem::take(&mut st.idle);
        st.waking += idle.len();
        self.poke_spawner(&mut st);
        drop(st);
        for parker in idle {
            parker.deliver(Slot::Wake);
        }
        dropped
    }

    /// Waits until every worker (and the spawner) has exited, then joins them.
    /// `false` on timeout, or when called from one of this pool's own workers (which cannot join
    /// itself: it then waits for all the others only).
    pub(crate) fn wait_exit(&self, deadline: Option<Instant>) -> bool {
        let inside = CURRENT_POOL.with(Cell::get) == self.id;
        let me = usize::from(inside);
        let mut st = self.state();
        st.lifecycle_waiters += 1;
        let done = loop {
            if st.threads <= me && st.starting == 0 && (inside || !st.spawner_alive) {
                break true;
            }
            st = match deadline {
                None => self
                    .lifecycle_cv
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break false;
                    }
                    self.lifecycle_cv
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        };
        st.lifecycle_waiters -= 1;
        drop(st);
        if !done || inside {
            return false;
        }
        let handles = mem::take(&mut lock(&self.handles).list);
        for (_, h) in handles {
            // Every thread has already left the pool's code; this waits for the OS exit.
            let _ = h.join();
        }
        true
    }
}

enum Park {
    /// Delivered `Slot::Wake`: counted in `State::waking` until it looks at the queue.
    Woken,
    Retired,
}

/// Keeps the counts right if a worker unwinds (only possible if a panic payload's `Drop`
/// panics, or a bug): the thread is uncounted and the spawner replaces it if needed.
struct ExitGuard<'a> {
    inner: &'a Arc<Inner>,
    parker: &'a Arc<Parker>,
    /// Counted in `threads` (else still in `starting`).
    registered: bool,
    clean: bool,
}

impl Drop for ExitGuard<'_> {
    fn drop(&mut self) {
        if self.clean {
            return;
        }
        let mut st = self.inner.state();
        st.idle.retain(|p| !Arc::ptr_eq(p, self.parker));
        if self.registered {
            st.threads -= 1;
        } else {
            st.starting -= 1;
        }
        st.died_total += 1;
        st.completed_total += 1;
        st.panicked_total += 1;
        self.inner.notify_lifecycle(&st);
        self.inner.poke_spawner(&mut st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    /// Waits (bounded, generously) until `done` holds.
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < until, "timed out waiting until {what}");
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Retired workers take their own join handles out as they leave, so that no creator has
    /// to reap them during the next burst: after a burst and its retirements only the floor's
    /// and the spawner's handles are left.
    #[test]
    fn retired_workers_leave_no_handle_behind() {
        let pool = crate::Pool::builder()
            .min_threads(1)
            .max_threads(16)
            .keep_alive(Duration::from_millis(20))
            .build()
            .unwrap();
        for _ in 0..2 {
            let all = std::sync::Arc::new(Barrier::new(8));
            let calls: Vec<_> = (0..8)
                .map(|_| {
                    let all = all.clone();
                    pool.spawn_handle(move || {
                        all.wait();
                    })
                })
                .collect();
            for c in calls {
                c.join().unwrap();
            }
            wait_for("retired down to the floor", || pool.metrics().threads == 1);
            let inner = &pool.inner;
            wait_for("the retired threads' handles are gone", || {
                lock(&inner.handles).list.len() == 2
            });
            let hs = lock(&inner.handles);
            assert!(hs.list.iter().any(|(n, _)| *n == SPAWNER));
        }
        assert!(pool.metrics().retired_total >= 14);
    }
}
