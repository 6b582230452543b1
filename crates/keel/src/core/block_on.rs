//! [`block_on`]: runs a future to completion on the calling thread, parking it between polls.
//!
//! What `futures_executor::block_on` did for the streams' `blocking_next`, in a few lines of
//! std (`std::task::Wake`): that crate brought futures-util, futures-task and slab into every
//! build for this one function.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

/// Wakes the thread it was made on.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    /// This thread's waker, made once: a blocking read per message allocates nothing.
    static WAKER: Waker = Waker::from(Arc::new(Unpark(thread::current())));
}

/// Polls `future` until it is ready, parking this thread while it is pending. A wake-up that
/// came before the park, or a spurious one, only costs one more poll.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = WAKER.with(Waker::clone);
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ready_at_once_and_woken_from_another_thread() {
        assert_eq!(block_on(async { 7 }), 7);
        // Pending until another thread sends: the send's wake-up unparks this thread.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sender = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            tx.send("sent").unwrap();
        });
        assert_eq!(block_on(rx), Ok("sent"));
        sender.join().unwrap();
        // Many short waits in a row on one thread (the waker is reused).
        for i in 0..100 {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let sender = thread::spawn(move || tx.send(i).unwrap());
            assert_eq!(block_on(rx), Ok(i));
            sender.join().unwrap();
        }
    }
}
