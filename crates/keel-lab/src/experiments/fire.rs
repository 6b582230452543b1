//! The bursts' client harness: client threads that each open a client, wait at a gate that
//! releases them all at once, make one timed call, and close once every call has its
//! reply. keel's bursts (`burst`, `idle`,
//! `concurrent`) and the thread-per-connection baseline (`thread_server`) fire through it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use keel_examples::service1::Service1BlockingClient;

/// Stack of each client thread (1,000 of them at once).
pub(crate) const CLIENT_STACK: usize = 256 * 1024;

/// A burst's timings: release to last reply, and each client's own call (index order).
#[derive(Debug, Clone)]
pub(crate) struct Fired {
    /// When the barrier released the calls.
    pub(crate) start: Instant,
    /// Release to the last reply.
    pub(crate) total: Duration,
    /// Each client's call, in client order.
    pub(crate) calls: Vec<Duration>,
}

/// A start line: client threads report ready, then wait until the gate opens (or is aborted).
///
/// Each waiter parks on its own and the opener unparks them one by one: a condition variable's
/// `notify_all` would wake 1,000 threads at once to fight over its mutex, and that herd
/// (tens of ms on 2 cores) would be the lab's cost, not the host's.
#[derive(Debug, Default)]
struct Gate {
    /// Ready threads (the opener waits for them on `cv`).
    ready: Mutex<Vec<std::thread::Thread>>,
    cv: Condvar,
    /// 0: closed, 1: open, 2: aborted.
    state: AtomicU8,
    /// The threads expected: the last to arrive wakes the opener.
    expected: usize,
}

impl Gate {
    /// A gate for `expected` threads.
    fn new(expected: usize) -> Gate {
        Gate {
            expected,
            ..Gate::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<std::thread::Thread>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reports ready and waits for the gate; `false` if aborted.
    fn arrive_and_wait(&self) -> bool {
        let mut ready = self.lock();
        ready.push(std::thread::current());
        if ready.len() >= self.expected {
            self.cv.notify_all();
        }
        drop(ready);
        loop {
            match self.state.load(Ordering::Acquire) {
                0 => std::thread::park(),
                state => return state == 1,
            }
        }
    }

    /// Waits until every expected thread is ready.
    fn wait_ready(&self) {
        let mut ready = self.lock();
        while ready.len() < self.expected {
            ready = self.cv.wait(ready).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Opens the gate (aborting: the waiting threads give up).
    fn open(&self, abort: bool) {
        self.state
            .store(if abort { 2 } else { 1 }, Ordering::Release);
        for t in self.lock().iter() {
            t.unpark();
        }
    }
}

/// A client the burst harness drives, one per client thread: keel's blocking Service1 client,
/// or the thread-per-connection baseline's socket ([`super::thread_server::LineClient`]).
pub(crate) trait BurstClient {
    /// `get_data(i, work_ms)`: the server sleeps `work_ms` and answers `You entered: {i}`.
    fn call(&mut self, i: usize, work_ms: u64) -> anyhow::Result<String>;
    /// Closes the client (after its call was timed).
    fn close(self);
}

impl BurstClient for Service1BlockingClient {
    fn call(&mut self, i: usize, work_ms: u64) -> anyhow::Result<String> {
        Ok(self.get_data(i as i32, work_ms)?)
    }

    fn close(self) {
        Service1BlockingClient::close(&self);
    }
}

/// Opens `clients` blocking clients, each on its own thread, then releases all their
/// `get_data(i, work_ms)` calls at once and waits for every reply (the seeds' `ThreadProc`).
pub(crate) fn fire(url: &str, clients: usize, work_ms: u64) -> anyhow::Result<Fired> {
    fire_with(clients, work_ms, |_| {
        Ok(Service1BlockingClient::connect(url)?)
    })
}

/// The burst harness: `clients` threads each open a client with `connect(i)`, wait at a gate
/// that releases them all at once, make one timed call, and close the client once every
/// thread has its reply.
pub(crate) fn fire_with<C: BurstClient>(
    clients: usize,
    work_ms: u64,
    connect: impl Fn(usize) -> anyhow::Result<C> + Sync,
) -> anyhow::Result<Fired> {
    // The start line, and the finish line the clients wait at between their reply and closing.
    let (gate, finish) = (Gate::new(clients), Gate::new(clients));
    let (start, results) = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(clients);
        for i in 0..clients {
            let (gate, finish, connect) = (&gate, &finish, &connect);
            let h = std::thread::Builder::new()
                .name(format!("lab-client-{i}"))
                .stack_size(CLIENT_STACK)
                .spawn_scoped(s, move || {
                    // A panic is this thread's error: it still reaches both lines, which
                    // wait for every thread.
                    let panicked = |what: &str| anyhow::anyhow!("client {i}: {what} panicked");
                    let client = catch_unwind(AssertUnwindSafe(|| connect(i)))
                        .unwrap_or_else(|_| Err(panicked("connecting")));
                    if !gate.arrive_and_wait() {
                        anyhow::bail!("aborted");
                    }
                    let timed = client.and_then(|mut client| {
                        catch_unwind(AssertUnwindSafe(move || {
                            let t = Instant::now();
                            let reply = client.call(i, work_ms);
                            let end = Instant::now();
                            (client, reply, t, end)
                        }))
                        .map_err(|_| panicked("the call"))
                    });
                    // Closed (and the thread gone) only once every thread is done: 1,000
                    // clients closing and their threads exiting (munmap, TLB shootdowns) would
                    // take the cores from the replies still on their way.
                    finish.arrive_and_wait();
                    let (client, reply, t, end) = timed?;
                    client.close();
                    let reply = reply?;
                    anyhow::ensure!(
                        reply == format!("You entered: {i}"),
                        "unexpected reply {reply:?}"
                    );
                    Ok((end - t, end))
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    gate.open(true);
                    return Err(anyhow::anyhow!("cannot start client thread {i}: {e}"));
                }
            }
        }
        gate.wait_ready();
        let start = Instant::now();
        gate.open(false);
        finish.wait_ready();
        finish.open(false);
        let results = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("client thread panicked"))?
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok::<_, anyhow::Error>((start, results))
    })?;
    let last = results.iter().map(|r| r.1).max().unwrap_or(start);
    Ok(Fired {
        start,
        total: last.saturating_duration_since(start),
        calls: results.into_iter().map(|r| r.0).collect(),
    })
}
