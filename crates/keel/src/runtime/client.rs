//! The runtime behind blocking clients, so that `fn main` needs no runtime of its own.

use std::future::Future;
use std::sync::OnceLock;

/// Runs `fut` to completion on the calling thread, with keel's client runtime driving I/O.
///
/// # Panics
/// When called from inside an async task (blocking there would stall a runtime worker): use the
/// async client there.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    runtime().block_on(fut)
}

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
