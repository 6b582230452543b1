//! The hand-off of blocking calls to keel-pool: one connection's [`Scheduler`], owned by the
//! reader that dispatches its calls, and the runs it makes of short calls.
//!
//! A sync (`fn`) operation runs on keel-pool, never on the runtime. A reader that handles a read
//! batch holds the batch's blocking calls ([`Scheduler::hold`]) and hands them over together
//! when it is done with the batch ([`Scheduler::release`], and when the scheduler is dropped):
//! one at a time, each woke a pool thread that found the queue empty again by the time the
//! reader had decoded the next request. Calls of operations known to be short go in runs
//! ([`runs`]): one after another on one pool thread, their replies in one write. The others go
//! one by one, each to a thread of its own at once, by the pool's usual rule.
//!
//! The scheduler knows nothing of calls or connections: a call is a [`Job`], and the connection
//! it belongs to is the [`Owner`] of the scheduler (the pool, and the writer of the replies a
//! run queued).

mod pace;
mod runs;

pub(crate) use pace::Pace;
pub(crate) use runs::deferring;

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Instant;

use runs::{Run, Short, RUN_BUDGET};

/// A blocking call, as the scheduler hands it to the pool.
pub(crate) trait Job: Send + Sized + 'static {
    /// Runs the call on the pool thread this is called on, and answers it. It starts at
    /// `start` if given (the previous call's end, in a run), else at a fresh clock reading;
    /// returns the reading at its end.
    fn run(self, start: Option<Instant>) -> Instant;
    /// The pool refused it (it does only at the end of a shutdown): answer the call without
    /// running it.
    fn refuse(self);
}

/// What a scheduler's jobs belong to: a connection, with the pool its calls run on and the
/// replies a run queued without writing them (see [`deferring`]).
pub(crate) trait Owner: Send + Sync + 'static {
    /// The pool the connection's blocking calls run on.
    fn pool(&self) -> &keel_pool::Pool;
    /// Writes the replies queued while a run of short calls ran.
    fn flush_replies(&self);
}

/// One connection's hand-off of blocking calls to the pool, owned by its reader (so it takes
/// no lock). Dropped, it hands over whatever it still holds.
pub(crate) struct Scheduler<J: Job> {
    owner: Arc<dyn Owner>,
    /// Between [`hold`](Scheduler::hold) and [`release`](Scheduler::release).
    holding: bool,
    /// Held calls of operations not known to be short: each goes to the pool on its own.
    jobs: Vec<J>,
    /// Held calls of short operations: they go to the pool in runs.
    short: Vec<Short<J>>,
    /// The connection's latest run: calls join it while it runs.
    latest: Weak<Run<J>>,
}

impl<J: Job> std::fmt::Debug for Scheduler<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("holding", &self.holding)
            .field("jobs", &self.jobs.len())
            .field("short", &self.short.len())
            .finish()
    }
}

impl<J: Job> Scheduler<J> {
    /// A scheduler for the blocking calls of `owner`, holding nothing.
    pub(crate) fn new(owner: Arc<dyn Owner>) -> Scheduler<J> {
        Scheduler {
            owner,
            holding: false,
            jobs: Vec::new(),
            short: Vec::new(),
            latest: Weak::new(),
        }
    }

    /// From now until [`release`](Scheduler::release), calls submitted are held here instead of
    /// being handed to the pool one by one. Whoever holds must release before waiting for
    /// anything.
    pub(crate) fn hold(&mut self) {
        self.holding = true;
    }

    /// Runs `job` on the pool, or holds it (see [`hold`](Scheduler::hold)). `short`: the call's
    /// expected time in nanoseconds, if its operation is short (see [`Pace`]).
    pub(crate) fn submit(&mut self, job: J, short: Option<u64>) {
        if !self.holding {
            return spawn(self.owner.pool(), job);
        }
        match short {
            Some(nanos) => self.short.push(Short {
                job,
                nanos,
                ends_batch: false,
            }),
            None => self.jobs.push(job),
        }
    }

    /// Hands the calls held since [`hold`](Scheduler::hold) to the pool, together, and stops
    /// holding: calls of short operations in runs, the others one by one. (The lists keep their
    /// capacity.)
    pub(crate) fn release(&mut self) {
        self.holding = false;
        if let Some(last) = self.short.last_mut() {
            last.ends_batch = true;
            // Join the connection's run if it still runs: its thread takes them, no wake-up.
            if let Some(run) = self.latest.upgrade() {
                run.join(&mut self.short);
            }
        }
        if self.short.len() == 1 {
            // A run of one would only cost its guard's attention.
            let one = self.short.pop().expect("one short call");
            self.jobs.push(one.job);
        }
        let mut runs = Vec::new();
        if !self.short.is_empty() {
            let budget = RUN_BUDGET.as_nanos() as u64;
            let mut run = VecDeque::new();
            let mut expected = 0u64;
            for short in self.short.drain(..) {
                if !run.is_empty() && expected.saturating_add(short.nanos) > budget {
                    runs.push(Run::new(self.owner.clone(), std::mem::take(&mut run)));
                    expected = 0;
                }
                expected = expected.saturating_add(short.nanos);
                run.push_back(short);
            }
            runs.push(Run::new(self.owner.clone(), run));
            self.latest = Arc::downgrade(runs.last().expect("a run"));
        }
        let pool = self.owner.pool();
        let refused = match (runs.len(), self.jobs.len()) {
            (0, 0) => return,
            (0, 1) => return spawn(pool, self.jobs.pop().expect("one job")),
            (1, 0) => pool.spawn_task(Run::task(&runs[0])).is_err(),
            _ => {
                let tasks = runs
                    .iter()
                    .map(Run::task)
                    .chain(self.jobs.drain(..).map(unrun_task));
                // Refused jobs are answered as their tasks drop (see `unrun_task`).
                pool.spawn_batch(tasks).is_err()
            }
        };
        if refused {
            // A refused run's task was dropped unrun: its calls are still in it.
            for run in runs {
                for short in run.take_waiting() {
                    short.job.refuse();
                }
            }
        }
    }
}

impl<J: Job> Drop for Scheduler<J> {
    /// However its reader ends, the calls it held are handed over (they are answered).
    fn drop(&mut self) {
        self.release();
    }
}

/// Runs `job` on `pool`, on a thread of its own; answers it if the pool refuses it.
pub(crate) fn spawn<J: Job>(pool: &keel_pool::Pool, job: J) {
    // Refused, the task is dropped, and with it the job is answered (see `unrun_task`).
    let _ = pool.spawn_task(unrun_task(job));
}

/// Runs `jobs` on `pool`, each on a thread of its own (the calls of a run that stalled).
fn spawn_each<J: Job>(pool: &keel_pool::Pool, jobs: impl IntoIterator<Item = J>) {
    let _ = pool.spawn_batch(jobs.into_iter().map(unrun_task));
}

/// `job` boxed for the pool: run there, or, if the task is dropped unrun (the pool refused it),
/// refused.
fn unrun_task<J: Job>(job: J) -> keel_pool::Task {
    let mut unrun = Unrun(Some(job));
    keel_pool::Task::new(move || {
        if let Some(job) = unrun.0.take() {
            job.run(None);
        }
    })
}

/// A job that is refused if it is dropped before it ran.
struct Unrun<J: Job>(Option<J>);

impl<J: Job> Drop for Unrun<J> {
    fn drop(&mut self) {
        if let Some(job) = self.0.take() {
            job.refuse();
        }
    }
}
