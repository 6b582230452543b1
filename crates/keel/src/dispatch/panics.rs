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

/// Turns a panic inside an operation's future into a `HandlerPanicked` status.
pub(super) struct CatchUnwind(pub(super) HandlerFuture);

impl Future for CatchUnwind {
    type Output = Outcome;
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Outcome> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(p) => p,
            Err(payload) => Poll::Ready(Err(panic_status(&payload))),
        }
    }
}
