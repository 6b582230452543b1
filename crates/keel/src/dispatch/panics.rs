//! Panics in a handler (or in what wraps it) become a `HandlerPanicked` answer.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::Poll;

use crate::core::service::Outcome;
use crate::core::status::{Status, StatusCode};

/// An async operation's future, as the generated code boxes it.
pub(super) type HandlerFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// The status of a handler that panicked with `payload`.
pub(super) fn panic_status(payload: &Box<dyn std::any::Any + Send>) -> Status {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string());
    Status::new(
        StatusCode::HandlerPanicked,
        format!("handler panicked: {msg}"),
    )
}

/// A future whose panics become an answer: a handler's (`HandlerPanicked`,
/// [`CatchUnwind::handler`]) or an interceptor's ([`CatchUnwind::new`]).
pub(super) struct CatchUnwind<'a, T = Outcome> {
    fut: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
    on_panic: fn(&Box<dyn std::any::Any + Send>) -> T,
}

impl<'a, T> CatchUnwind<'a, T> {
    /// `fut`, a panic in it answered `on_panic(payload)`.
    pub(super) fn new(
        fut: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
        on_panic: fn(&Box<dyn std::any::Any + Send>) -> T,
    ) -> Self {
        CatchUnwind { fut, on_panic }
    }
}

impl CatchUnwind<'static> {
    /// An operation's future, a panic in it answered `HandlerPanicked`.
    pub(super) fn handler(fut: HandlerFuture) -> Self {
        CatchUnwind::new(fut, |p| Err(panic_status(p)))
    }
}

impl<T> Future for CatchUnwind<'_, T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<T> {
        let on_panic = self.on_panic;
        match catch_unwind(AssertUnwindSafe(|| self.fut.as_mut().poll(cx))) {
            Ok(p) => p,
            Err(payload) => Poll::Ready(on_panic(&payload)),
        }
    }
}
