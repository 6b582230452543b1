//! keel's own threads and runtimes, in one place: none of them ever runs user code, and each
//! exists so that the runtime's workers park without a timeout or so that a plain `fn main`
//! needs no runtime of its own.
//!
//! - [`timer`]: the `keel-timer` thread for the long waits that are nearly always armed
//!   (keepalive, client deadlines, the host's reapers), which keeps the runtime's parks free of
//!   timeouts;
//! - [`ticker`]: a thread that ticks while something is watched and parks when nothing is: the
//!   blocking watchdog's and the run guard's (both in `dispatch/`);
//! - [`client`]: the `keel-client` runtime behind blocking clients;
//! - [`clock`]: the clock keel's waits, deadlines and connection ages are read from (the timer
//!   thread's too), which tests can pause and move with `keel::testing` (feature `test-util`).
//!
//! The host's runtime (its own, or the caller's) is the host's (`host/mod.rs`). Imports nothing
//! else of keel's: every layer above may use it.

pub(crate) mod client;
pub(crate) mod clock;
#[cfg(feature = "test-util")]
pub mod testing;
pub(crate) mod ticker;
pub(crate) mod timer;
