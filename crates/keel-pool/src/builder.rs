//! `Builder`: configuration with documented defaults, checked against the OS limits, and
//! `Pool::builder`, the entry point that returns one (here, not in `pool`, so that `builder`
//! depends on `pool` and not the other way round).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::core::{Config, Inner, SpawnHook};
use crate::Pool;

/// Default for [`Builder::max_threads`]: 1,024.
///
/// Why this number: a blocking operation holds its thread for its whole run, so the pool needs
/// one thread per call running at once, and keel's host admits at most its throttle's
/// `max_concurrent_calls` (default 1,024) at once: the same number, so a burst the throttle
/// admits never waits for a thread. The cost of the cap is bounded: each thread reserves a
/// [`DEFAULT_STACK_SIZE`] stack (256 KiB of address space, touched only as used), so 1,024
/// threads reserve 256 MiB of address space and typically a few MiB of memory. Beyond it, work
/// queues rather than exhausting the process's threads (`ulimit -u`, `kernel.threads-max`).
/// Raise both together for hosts whose operations mostly wait (sleeps, I/O).
pub const DEFAULT_MAX_THREADS: usize = 1024;
/// Default for [`Builder::keep_alive`]: 60 s.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(60);
/// Default for [`Builder::stack_size`]: 256 KiB (std's default is 2 MiB).
pub const DEFAULT_STACK_SIZE: usize = 256 * 1024;
/// Default for [`Builder::thread_name`].
pub const DEFAULT_THREAD_NAME: &str = "keel-pool";

/// Configures and builds a [`Pool`]. Get one from [`Pool::builder`].
///
/// Every setter takes `&mut self` and returns it, so calls chain; `build` borrows, so one builder
/// can build several pools.
///
/// | setting | default |
/// |---|---|
/// | [`min_threads`](Builder::min_threads) | `max(2, available_parallelism())` |
/// | [`max_threads`](Builder::max_threads) | [`DEFAULT_MAX_THREADS`] (1024), clamped to the OS limit |
/// | [`keep_alive`](Builder::keep_alive) | [`DEFAULT_KEEP_ALIVE`] (60 s) |
/// | [`stack_size`](Builder::stack_size) | [`DEFAULT_STACK_SIZE`] (256 KiB) |
/// | [`thread_name`](Builder::thread_name) | [`DEFAULT_THREAD_NAME`] (`"keel-pool"`) |
pub struct Builder {
    min_threads: Option<usize>,
    max_threads: usize,
    keep_alive: Duration,
    stack_size: usize,
    thread_name: String,
    hook: Option<SpawnHook>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            min_threads: None,
            max_threads: DEFAULT_MAX_THREADS,
            keep_alive: DEFAULT_KEEP_ALIVE,
            stack_size: DEFAULT_STACK_SIZE,
            thread_name: DEFAULT_THREAD_NAME.to_owned(),
            hook: None,
        }
    }
}

impl Pool {
    /// A [`Builder`] with every default.
    pub fn builder() -> Builder {
        Builder::new()
    }
}

impl Builder {
    /// A builder with every default (same as [`Pool::builder`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The warm floor: threads created by [`build`](Builder::build) (which returns once they
    /// are parked and ready) and never retired. `0` is allowed (a fully elastic pool).
    ///
    /// Default: `max(2, std::thread::available_parallelism())`.
    pub fn min_threads(&mut self, n: usize) -> &mut Self {
        self.min_threads = Some(n);
        self
    }

    /// The most worker threads alive at once; beyond it work waits in the queue.
    ///
    /// Default: 1024. `build` clamps it to what the OS allows
    /// (`/proc/sys/kernel/threads-max` and the soft "Max processes" limit of
    /// `/proc/self/limits`, when readable); the effective value is in
    /// [`Metrics::max_threads`](crate::Metrics::max_threads).
    pub fn max_threads(&mut self, n: usize) -> &mut Self {
        self.max_threads = n;
        self
    }

    /// How long a thread above the floor stays idle before it retires. Threads retire one at a
    /// time, each after its own idle period, and idle threads are reused most-recently-idle
    /// first, so under light load the same few stay warm and the rest age out.
    ///
    /// Default: 60 s.
    pub fn keep_alive(&mut self, d: Duration) -> &mut Self {
        self.keep_alive = d;
        self
    }

    /// Stack size of each worker thread, in bytes (only touched pages use memory, but the
    /// address space is reserved).
    ///
    /// Default: 256 KiB. Raise it for deeply recursive tasks.
    pub fn stack_size(&mut self, bytes: usize) -> &mut Self {
        self.stack_size = bytes;
        self
    }

    /// Thread name prefix; workers are named `"{prefix}-{n}"`, the internal spawner thread
    /// `"{prefix}-spawner"` (Linux shows the first 15 bytes).
    ///
    /// Default: `"keel-pool"`.
    pub fn thread_name(&mut self, prefix: impl Into<String>) -> &mut Self {
        self.thread_name = prefix.into();
        self
    }

    /// Test seam: `hook` is called before every thread creation (the floor included); an `Err`
    /// is treated exactly like the OS refusing the thread.
    #[doc(hidden)]
    pub fn spawn_hook(&mut self, hook: Arc<dyn Fn() -> io::Result<()> + Send + Sync>) -> &mut Self {
        self.hook = Some(hook);
        self
    }

    /// Creates the pool: starts its spawner thread and the warm floor, and returns once the
    /// floor threads are parked, ready to take work.
    ///
    /// # Errors
    /// `InvalidInput` if `max_threads` is 0 or below `min_threads` (after clamping to the OS
    /// limit); any error the OS returns while creating the spawner or the floor.
    pub fn build(&self) -> io::Result<Pool> {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let min = self.min_threads.unwrap_or(cpus.max(2));
        let max = match os_thread_limit() {
            Some(limit) => self.max_threads.min(limit),
            None => self.max_threads,
        };
        if max == 0 || min > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("keel-pool: need 0 < max_threads ({max}) and min_threads ({min}) <= max_threads"),
            ));
        }
        let inner = Inner::new(Config {
            min_threads: min,
            max_threads: max,
            keep_alive: self.keep_alive,
            stack_size: self.stack_size,
            name: self.thread_name.clone(),
            hook: self.hook.clone(),
            max_helpers: cpus.saturating_sub(1).max(1),
            // One worker per core on its way to the queue: enough to keep the cores busy
            // while the chain wakes the rest (see `core`'s docs).
            max_waking: cpus.max(1),
        });
        let pool = Pool { inner };
        // On error, dropping `pool` shuts down whatever was started.
        pool.inner.start()?;
        Ok(pool)
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("min_threads", &self.min_threads)
            .field("max_threads", &self.max_threads)
            .field("keep_alive", &self.keep_alive)
            .field("stack_size", &self.stack_size)
            .field("thread_name", &self.thread_name)
            .field("spawn_hook", &self.hook.is_some())
            .finish()
    }
}

/// The smaller of the kernel's thread limit and this process's soft process limit, if known.
/// Read from procfs so that no libc call (and no `unsafe`) is needed.
fn os_thread_limit() -> Option<usize> {
    let threads_max = std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok());
    let nproc = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| parse_max_processes(&s));
    match (threads_max, nproc) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The soft limit of the "Max processes" line; `None` if absent or "unlimited".
fn parse_max_processes(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max processes"))?;
    line["Max processes".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max cpu time              unlimited            unlimited            seconds   \n\
                    Max processes             96365                96365                processes \n";
        assert_eq!(parse_max_processes(text), Some(96365));
        let unlimited =
            "Max processes             unlimited            unlimited            processes\n";
        assert_eq!(parse_max_processes(unlimited), None);
        assert_eq!(parse_max_processes(""), None);
    }

    #[test]
    fn max_is_clamped_to_the_os_limit() {
        if let Some(limit) = os_thread_limit() {
            let pool = Pool::builder()
                .min_threads(0)
                .max_threads(usize::MAX)
                .build()
                .unwrap();
            assert_eq!(pool.metrics().max_threads, limit);
        }
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let e = Pool::builder()
            .min_threads(3)
            .max_threads(2)
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = Pool::builder()
            .min_threads(0)
            .max_threads(0)
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
