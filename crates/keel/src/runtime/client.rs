//! The runtime behind blocking clients, so that `fn main` needs no runtime of its own.

use std::future::Future;
use std::sync::OnceLock;

/// Runs `fut` to completion on the calling thread, with keel's client runtime driving I/O.
///
/// # Panics
/// When called from inside an async task (blocking there would stall a runtime worker), with a
/// message that names the fix: the async client, or `spawn_blocking`.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    // tokio refuses, with "Cannot start a runtime from within a runtime", which names neither
    // keel nor the fix. Only tokio knows when it refuses (in a task, yes; in `spawn_blocking`,
    // no), so its refusal is caught and said again in keel's words.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime().block_on(fut))) {
        Ok(output) => output,
        Err(panic) => {
            let tokio_refused = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .is_some_and(|m| m.contains("runtime from within a runtime"));
            if tokio_refused {
                panic!("{IN_A_RUNTIME}");
            }
            std::panic::resume_unwind(panic)
        }
    }
}

/// What a blocking client called from async code says.
const IN_A_RUNTIME: &str = "keel: a blocking client ({Contract}BlockingClient) was called from \
    async code, inside a tokio runtime, where blocking would stall the runtime's thread: use the \
    async client ({Contract}Client) with `.await` there, or call the blocking client from \
    tokio::task::spawn_blocking";

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("keel-client")
            .enable_all()
            .build()
            .expect("keel: cannot start the client runtime")
    })
}
