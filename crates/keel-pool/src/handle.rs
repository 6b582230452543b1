//! `JoinHandle`: the result slot of one `spawn_handle` task, and `JoinError`.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::core::{lock, Runnable};

/// Why a [`JoinHandle`] did not produce the task's value.
///
/// The enum is complete: a task either returns a value, panics ([`JoinError::Panicked`]) or is
/// dropped unrun because the pool shut down ([`JoinError::Cancelled`]).
pub enum JoinError {
    /// The task panicked. The payload is the value given to `panic!` (usually a `&'static str`
    /// or a `String`, see [`JoinError::panic_message`]); re-raise it with
    /// [`std::panic::resume_unwind`] to propagate the panic.
    Panicked(Box<dyn Any + Send + 'static>),
    /// The task never ran: it was still queued when [`Pool::shutdown_now`](crate::Pool::shutdown_now)
    /// dropped the queue, or it was submitted after the pool had shut down.
    Cancelled,
}

impl JoinError {
    /// `true` if the task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// `true` if the task was cancelled (never ran).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, JoinError::Cancelled)
    }

    /// The panic payload.
    ///
    /// # Panics
    /// If the error is [`JoinError::Cancelled`]; see [`JoinError::try_into_panic`].
    pub fn into_panic(self) -> Box<dyn Any + Send + 'static> {
        match self {
            JoinError::Panicked(payload) => payload,
            JoinError::Cancelled => panic!("JoinError::into_panic called on a cancelled task"),
        }
    }

    /// The panic payload, or the error back if it is not a panic.
    pub fn try_into_panic(self) -> Result<Box<dyn Any + Send + 'static>, JoinError> {
        match self {
            JoinError::Panicked(payload) => Ok(payload),
            cancelled => Err(cancelled),
        }
    }

    /// The panic message, when the payload is a `&str` or a `String` (what `panic!` produces).
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            JoinError::Panicked(payload) => payload
                .downcast_ref::<&'static str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str)),
            JoinError::Cancelled => None,
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(_) => f
                .debug_tuple("Panicked")
                .field(&self.panic_message().unwrap_or("<non-string payload>"))
                .finish(),
            JoinError::Cancelled => f.write_str("Cancelled"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.panic_message()) {
            (JoinError::Panicked(_), Some(msg)) => write!(f, "task panicked: {msg}"),
            (JoinError::Panicked(_), None) => f.write_str("task panicked"),
            (JoinError::Cancelled, _) => {
                f.write_str("task cancelled: the pool shut down before it ran")
            }
        }
    }
}

impl std::error::Error for JoinError {}

struct Slot<R> {
    result: Option<Result<R, JoinError>>,
    waker: Option<Waker>,
    /// The result has been handed out (by `poll` or `join`).
    taken: bool,
}

struct Shared<R> {
    slot: Mutex<Slot<R>>,
    done: Condvar,
}

impl<R> Shared<R> {
    fn set(&self, result: Result<R, JoinError>) {
        let waker = {
            let mut slot = lock(&self.slot);
            slot.result = Some(result);
            slot.waker.take()
        };
        self.done.notify_all();
        // Wake outside the lock: a waker may run arbitrary code.
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// An owned permission to wait for a task's result, returned by
/// [`Pool::spawn_handle`](crate::Pool::spawn_handle).
///
/// Wait for it either by blocking with [`JoinHandle::join`] or by `.await`ing it (it implements
/// [`Future`] with a mutex-guarded slot and a [`Waker`]; it needs no particular async runtime).
/// Dropping the handle detaches the task: it still runs, and its result is dropped.
pub struct JoinHandle<R> {
    shared: Arc<Shared<R>>,
}

impl<R> JoinHandle<R> {
    /// Blocks the current thread until the task finishes, and returns its value.
    ///
    /// Returns [`JoinError::Panicked`] if the task panicked and [`JoinError::Cancelled`] if it was
    /// dropped unrun by a shutdown.
    ///
    /// # Panics
    /// If the handle was already polled to completion as a future.
    pub fn join(self) -> Result<R, JoinError> {
        let mut slot = lock(&self.shared.slot);
        loop {
            if let Some(result) = slot.result.take() {
                slot.taken = true;
                return result;
            }
            assert!(
                !slot.taken,
                "JoinHandle::join called after the result was taken"
            );
            slot = self
                .shared
                .done
                .wait(slot)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// `true` once the task has finished (returned, panicked or been cancelled). Never blocks.
    pub fn is_finished(&self) -> bool {
        let slot = lock(&self.shared.slot);
        slot.result.is_some() || slot.taken
    }
}

impl<R> Future for JoinHandle<R> {
    type Output = Result<R, JoinError>;

    /// # Panics
    /// If polled again after it returned `Ready`.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = lock(&self.shared.slot);
        if let Some(result) = slot.result.take() {
            slot.taken = true;
            return Poll::Ready(result);
        }
        assert!(!slot.taken, "JoinHandle polled after completion");
        match &mut slot.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            other => *other = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<R> fmt::Debug for JoinHandle<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// The producing side of a `JoinHandle`. Dropping it without completing (the task was dropped
/// unrun) resolves the handle to `Cancelled`.
pub(crate) struct Completer<R> {
    shared: Option<Arc<Shared<R>>>,
}

impl<R> Completer<R> {
    fn complete(mut self, result: Result<R, JoinError>) {
        if let Some(shared) = self.shared.take() {
            shared.set(result);
        }
    }
}

impl<R> Drop for Completer<R> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.set(Err(JoinError::Cancelled));
        }
    }
}

/// A task whose result goes to a `JoinHandle`.
pub(crate) struct WithHandle<F, R> {
    f: F,
    completer: Completer<R>,
}

impl<F, R> WithHandle<F, R> {
    pub(crate) fn new(f: F) -> (Self, JoinHandle<R>) {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot {
                result: None,
                waker: None,
                taken: false,
            }),
            done: Condvar::new(),
        });
        let completer = Completer {
            shared: Some(shared.clone()),
        };
        (WithHandle { f, completer }, JoinHandle { shared })
    }
}

impl<F, R> Runnable for WithHandle<F, R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    fn run(self: Box<Self>) -> bool {
        let WithHandle { f, completer } = *self;
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(value) => {
                completer.complete(Ok(value));
                false
            }
            Err(payload) => {
                completer.complete(Err(JoinError::Panicked(payload)));
                true
            }
        }
    }
}
