//! Runs of short blocking calls: the calls of one read batch whose operation is known to be
//! quick run one after another on one keel-pool thread, and their replies leave in one write.
//!
//! Why: a sync (`fn`) operation runs on keel-pool, never on the runtime. Handed to the pool one
//! by one, a batch of 20 calls that take a microsecond each woke pool threads, and each reply
//! was its own `send`: keel-lab's `peers` measured the sync op at half the async op's
//! throughput, with 3 µs more host CPU per call. A run costs at most one wake-up and one write
//! per batch: a batch that arrives while the connection's run still runs joins it (within its
//! budget), and the thread running it takes the calls without a wake-up.
//!
//! The pool's promise is that no blocking call waits behind another. A run keeps it with two
//! rules:
//! - **Only calls known to be short join a run.** Each operation keeps a running mean of its
//!   handler's time ([`Pace`](super::Pace)); an operation is short once it has answered a few
//!   calls with a mean of at most [`SHORT`](super::pace::SHORT). A new operation, or one that blocks (the seeds' 1 s and 2 s
//!   handlers), is handed to the pool call by call, as before. A run holds at most
//!   [`RUN_BUDGET`] of expected work; a larger batch makes several runs, one thread each.
//! - **A run that stalls is split.** A short operation can still block this once. A guard
//!   thread ticks every [`TICK`] while runs exist; a run whose current call has been running
//!   for a whole tick has the calls still waiting behind it handed to the pool (each gets a
//!   thread at once, by the pool's usual rule), and the replies it had already produced are
//!   written. So a call waits behind another for at most two ticks (2 ms), not for the other's
//!   whole handler. The guard parks after a few ticks without a run: an idle host has no
//!   guard wake-ups.
//!
//! While a run's calls execute, replies are queued on the connection without being written
//! ([`deferring`]); the run writes them after each batch's last call and when it ends
//! ([`Owner::flush_replies`]).

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use super::{spawn_each, Job, Owner};
use crate::runtime::ticker::{Ticker, Watch};

/// The most expected work (the sum of its calls' means) one run holds.
pub(crate) const RUN_BUDGET: Duration = Duration::from_micros(100);

/// The guard's tick: a call that has run for a whole tick has the rest of its run split off.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// A short blocking call in a run.
pub(crate) struct Short<J> {
    pub(crate) job: J,
    /// Its expected time in nanoseconds (its operation's pace).
    pub(crate) nanos: u64,
    /// The last of the calls that joined the run together: the run writes the replies it has
    /// produced after running it.
    pub(crate) ends_batch: bool,
}

/// Short calls of one connection, run one after another on one pool thread.
pub(crate) struct Run<J> {
    owner: Arc<dyn Owner>,
    state: Mutex<RunState<J>>,
    /// The guard's tick when the running call started; 0 between calls.
    running_since: AtomicU64,
}

struct RunState<J> {
    /// The calls not started yet.
    waiting: VecDeque<Short<J>>,
    /// Their expected time, in nanoseconds.
    expected: u64,
    /// No more calls may join: the run has ended (it found no call waiting) or was split.
    closed: bool,
}

impl<J: Job> Run<J> {
    /// A run of `jobs`, in this order, for `owner`. The caller hands it to the pool
    /// ([`Run::task`]).
    pub(crate) fn new(owner: Arc<dyn Owner>, jobs: VecDeque<Short<J>>) -> Arc<Run<J>> {
        let expected = jobs.iter().map(|j| j.nanos).sum();
        Arc::new(Run {
            owner,
            state: Mutex::new(RunState {
                waiting: jobs,
                expected,
                closed: false,
            }),
            running_since: AtomicU64::new(0),
        })
    }

    fn state(&self) -> MutexGuard<'_, RunState<J>> {
        self.state.lock()
    }

    /// Adds `jobs` (a batch, all short) behind the calls waiting, if the run has not ended and
    /// they fit its budget: the thread running it takes them without a wake-up. Returns them
    /// otherwise.
    pub(crate) fn join(&self, jobs: &mut Vec<Short<J>>) -> bool {
        let nanos: u64 = jobs.iter().map(|j| j.nanos).sum();
        let mut st = self.state();
        if st.closed || st.expected.saturating_add(nanos) > RUN_BUDGET.as_nanos() as u64 {
            return false;
        }
        st.expected += nanos;
        st.waiting.extend(jobs.drain(..));
        true
    }

    /// The run boxed for the pool.
    pub(crate) fn task(run: &Arc<Run<J>>) -> keel_pool::Task {
        let run = run.clone();
        keel_pool::Task::new(move || run.run())
    }

    /// Runs the calls, on the pool thread this is called on, writing the replies of each
    /// batch that joined once its last call has run.
    fn run(self: Arc<Self>) {
        let g = guard();
        g.watch(&self);
        DEFERRING.with(|d| d.set(true));
        // The previous call's end, the next one's start (one clock read per call), unless
        // replies were written in between.
        let mut last = None;
        loop {
            let short = {
                let mut st = self.state();
                let Some(short) = st.waiting.pop_front() else {
                    st.closed = true;
                    break;
                };
                st.expected -= short.nanos;
                short
            };
            let ends_batch = short.ends_batch;
            self.running_since.store(g.ticker.now(), Ordering::Relaxed);
            // A panic in keel's own code (the handler's are caught inside) must not lose the
            // calls behind it.
            match catch_unwind(AssertUnwindSafe(|| short.job.run(last))) {
                Ok(ended) => last = Some(ended),
                Err(_) => {
                    last = None;
                    log::error!("a blocking call's completion panicked");
                }
            }
            self.running_since.store(0, Ordering::Relaxed);
            if ends_batch {
                self.owner.flush_replies();
                last = None;
            }
        }
        DEFERRING.with(|d| d.set(false));
        self.owner.flush_replies();
    }

    /// Ends the run for new calls and takes out those not started (for a pool that refused
    /// the run, or a split).
    pub(crate) fn take_waiting(&self) -> VecDeque<Short<J>> {
        let mut st = self.state();
        st.closed = true;
        st.expected = 0;
        std::mem::take(&mut st.waiting)
    }
}

/// A run as the guard watches it, whatever its calls.
trait Watched: Send + Sync {
    /// The guard's tick when the running call started; 0 between calls.
    fn running_since(&self) -> u64;
    /// Hands the calls still waiting to the pool, one by one, and writes the replies produced
    /// so far (the guard, for a run that stalled).
    fn split(&self);
}

impl<J: Job> Watched for Run<J> {
    fn running_since(&self) -> u64 {
        self.running_since.load(Ordering::Relaxed)
    }

    fn split(&self) {
        let rest = self.take_waiting();
        self.owner.flush_replies();
        if !rest.is_empty() {
            spawn_each(self.owner.pool(), rest.into_iter().map(|s| s.job));
        }
    }
}

thread_local! {
    /// This thread is running a [`Run`]: replies are queued, not written.
    static DEFERRING: Cell<bool> = const { Cell::new(false) };
}

/// Whether a reply produced now should only be queued: the thread is running a run of short
/// calls, which writes its replies together when it ends.
pub(crate) fn deferring() -> bool {
    DEFERRING.with(Cell::get)
}

/// The process's guard over running runs (see the module docs).
struct Guard {
    /// The tick (0 marks a run between calls) and the guard's thread.
    ticker: Ticker,
    runs: Mutex<Vec<Weak<dyn Watched>>>,
}

fn guard() -> &'static Guard {
    static GUARD: OnceLock<&'static Guard> = OnceLock::new();
    GUARD.get_or_init(|| {
        let g: &'static Guard = Box::leak(Box::new(Guard {
            ticker: Ticker::new(),
            runs: Mutex::new(Vec::new()),
        }));
        // Without its thread a stalled run is not split: its calls still run, one after
        // another. A process that cannot start one thread is failing anyway.
        if let Err(e) = g.ticker.start("keel-run-guard", g) {
            log::error!("keel: cannot start the run guard's thread: {e}");
        }
        g
    })
}

impl Guard {
    fn runs(&self) -> MutexGuard<'_, Vec<Weak<dyn Watched>>> {
        self.runs.lock()
    }

    /// Watches `run` until it ends.
    fn watch<J: Job>(&self, run: &Arc<Run<J>>) {
        let run: Arc<dyn Watched> = run.clone();
        self.runs().push(Arc::downgrade(&run));
        self.ticker.wake();
    }
}

impl Watch for Guard {
    fn period(&self) -> Option<Duration> {
        Some(TICK)
    }

    /// Splits the runs whose call has run for a whole tick at tick `now`; forgets ended runs.
    fn scan(&self, now: u64, _: Duration) -> bool {
        let stalled: Vec<Arc<dyn Watched>> = {
            let mut runs = self.runs();
            runs.retain(|r| r.strong_count() > 0);
            runs.iter()
                .filter_map(Weak::upgrade)
                .filter(|r| {
                    let since = r.running_since();
                    // Started during tick `since`: a whole tick has passed by `since + 2`.
                    since != 0 && now >= since + 2
                })
                .collect()
        };
        for run in &stalled {
            run.split();
        }
        !self.runs().is_empty()
    }
}
