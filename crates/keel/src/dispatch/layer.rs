//! A `tower::Layer` around a host's calls (feature `tower`,
//! [`HostBuilder::layer`](crate::host::HostBuilder::layer)): the layered service sees each
//! call as a [`CallRequest`] once keel admitted it (interceptors, arguments decoded, throttle
//! slot taken) and answers a [`CallResponse`]; [`Handler`], the innermost service, runs the
//! operation's handler.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use super::panics::{panic_status, CatchUnwind};
use crate::core::context::Context;
use crate::core::service::{Invocation, Outcome};
use crate::core::status::{Status, StatusCode};

/// The error a layer may answer with: a [`Status`] is answered as it is, tower's timeout
/// (`tower::timeout::error::Elapsed`) as `DeadlineExceeded`, its load shedding
/// (`tower::load_shed::error::Overloaded`) as `Busy`, anything else as `Internal` with its
/// message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One call on its way through a host's tower layers to its handler: what a middleware can see
/// of it is its [`Context`] (service, operation, metadata, deadline, extensions, reply
/// metadata).
pub struct CallRequest {
    ctx: Context,
    invocation: Invocation,
    pool: Arc<keel_pool::Pool>,
    /// The call's throttle slot: held until its handler returns (on keel-pool, for a blocking
    /// one), not only until the layers give up on it.
    permit: Option<super::throttle::Permit>,
    deadline: Option<std::time::Instant>,
}

impl std::fmt::Debug for CallRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallRequest")
            .field("service", &self.ctx.service())
            .field("operation", &self.ctx.operation())
            .finish_non_exhaustive()
    }
}

impl CallRequest {
    /// The call's context, as its handler will see it.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

/// A call's answer on its way back out through a host's tower layers.
pub struct CallResponse {
    outcome: Outcome,
}

impl std::fmt::Debug for CallResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallResponse")
            .field("code", &self.code())
            .finish_non_exhaustive()
    }
}

impl CallResponse {
    /// The answer's status code (`Ok` for a reply).
    pub fn code(&self) -> StatusCode {
        match &self.outcome {
            Ok(_) => StatusCode::Ok,
            Err(status) => status.code(),
        }
    }

    /// The status the handler answered with, if it did not reply.
    pub fn status(&self) -> Option<&Status> {
        self.outcome.as_ref().err()
    }

    /// An answer of `status` instead of the handler's (a middleware that refuses a call may
    /// also return the status as its error).
    pub fn from_status(status: Status) -> CallResponse {
        CallResponse {
            outcome: Err(status),
        }
    }
}

/// The innermost service of a host's tower stack: runs the call's handler (a blocking one on
/// keel-pool, an async one in the layers' task) and answers what it returned. It is always
/// ready and never fails: a handler's statuses (and panics, as `HandlerPanicked`) are in its
/// [`CallResponse`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Handler {
    _private: (),
}

impl tower::Service<CallRequest> for Handler {
    type Response = CallResponse;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<CallResponse, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: CallRequest) -> Self::Future {
        let CallRequest {
            ctx,
            invocation,
            pool,
            permit,
            deadline,
        } = req;
        Box::pin(async move {
            let outcome = match invocation {
                Invocation::Async(fut) => {
                    let _permit = permit;
                    CatchUnwind::handler(fut).await
                }
                Invocation::Blocking(job) => {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let span = ctx.span().clone();
                    let task = keel_pool::Task::new(move || {
                        let _permit = permit;
                        // Given up while it waited for a thread (a layer's timeout, the
                        // deadline, a cancel): it does not start.
                        let outcome = if ctx.is_cancelled() {
                            Err(Status::new(StatusCode::Cancelled, "cancelled"))
                        } else if deadline.is_some_and(|d| crate::runtime::clock::now() >= d) {
                            Err(Status::new(
                                StatusCode::DeadlineExceeded,
                                "deadline passed before the call could start",
                            ))
                        } else {
                            span.in_scope(|| catch_unwind(AssertUnwindSafe(job)))
                                .unwrap_or_else(|p| Err(panic_status(&p)))
                        };
                        let _ = tx.send(outcome);
                    });
                    let refused = || Status::new(StatusCode::ShuttingDown, "host is shutting down");
                    match pool.spawn_task(task) {
                        Ok(()) => rx.await.unwrap_or_else(|_| Err(refused())),
                        Err(_) => Err(refused()),
                    }
                }
            };
            Ok(CallResponse { outcome })
        })
    }
}

/// A host's layered service, with its types erased.
pub(crate) trait Layered: Send + Sync + 'static {
    /// Runs one call through the layers.
    fn serve(&self, req: CallRequest) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;
}

/// `S`, a layer's service around [`Handler`], as [`Layered`]: cloned for each call (as tonic
/// and axum do), made ready, called.
pub(crate) struct Stack<S>(pub(crate) S);

impl<S> Layered for Stack<S>
where
    S: tower::Service<CallRequest, Response = CallResponse> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    fn serve(&self, req: CallRequest) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        let mut service = self.0.clone();
        Box::pin(async move {
            if let Err(e) = std::future::poll_fn(|cx| service.poll_ready(cx)).await {
                return Err(status_of(e.into()));
            }
            match service.call(req).await {
                Ok(response) => response.outcome,
                Err(e) => Err(status_of(e.into())),
            }
        })
    }
}

/// The request for a call that runs `invocation` with `ctx` (blocking ones on `pool`), holding
/// its throttle slot `permit` until the handler returns, not started after `deadline`.
pub(crate) fn request(
    ctx: Context,
    invocation: Invocation,
    pool: Arc<keel_pool::Pool>,
    permit: Option<super::throttle::Permit>,
    deadline: Option<std::time::Instant>,
) -> CallRequest {
    CallRequest {
        ctx,
        invocation,
        pool,
        permit,
        deadline,
    }
}

/// The status a layer's error answers the call with (see [`BoxError`]).
fn status_of(e: BoxError) -> Status {
    let e = match e.downcast::<Status>() {
        Ok(status) => return *status,
        Err(e) => e,
    };
    if e.is::<tower::timeout::error::Elapsed>() {
        return Status::new(
            StatusCode::DeadlineExceeded,
            "a layer's timeout passed while the operation ran",
        );
    }
    if e.is::<tower::load_shed::error::Overloaded>() {
        return Status::new(
            StatusCode::Busy,
            "a layer shed the call: the host is overloaded",
        );
    }
    Status::new(
        StatusCode::Internal,
        format!("a layer failed the call: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layers_errors_become_statuses() {
        let status: BoxError = Box::new(Status::permission_denied("no"));
        assert_eq!(status_of(status).code(), StatusCode::PermissionDenied);
        let elapsed: BoxError = Box::new(tower::timeout::error::Elapsed::new());
        assert_eq!(status_of(elapsed).code(), StatusCode::DeadlineExceeded);
        let shed: BoxError = Box::new(tower::load_shed::error::Overloaded::new());
        assert_eq!(status_of(shed).code(), StatusCode::Busy);
        let other: BoxError = "the cache is down".into();
        let status = status_of(other);
        assert_eq!(status.code(), StatusCode::Internal);
        assert!(status.message().contains("the cache is down"));
    }
}
