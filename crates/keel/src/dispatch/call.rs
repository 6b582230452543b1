//! One call's way from a decoded request to a running handler.
//!
//! Whether a call arrived in time to be served while the host drains is the binding's to say
//! (it brings the call's [`Arrival`]). Then the checks, cheapest first: service → operation →
//! per-connection limit → arguments → throttle. Blocking operations run on keel-pool and never
//! on a runtime worker; async operations run as runtime tasks. A call whose deadline passed
//! before it could start is answered `DeadlineExceeded` without running.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::conn::{CallCtl, ConnShared};
use super::throttle::Admission;
use super::Arrival;
use crate::core::codec::Format;
use crate::core::service::{Invocation, Outcome, Payload};
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;

/// A call as it arrived, whatever the binding.
#[derive(Debug)]
pub(crate) struct Incoming<'a> {
    /// Unique among the connection's calls in flight.
    pub(crate) call_id: u64,
    /// Acknowledge on receipt; the outcome is not reported.
    pub(crate) one_way: bool,
    /// The caller's remaining time budget when the request was sent.
    pub(crate) deadline: Option<Duration>,
    pub(crate) service: &'a str,
    pub(crate) operation: &'a str,
    /// How `body` (and the reply) is encoded.
    pub(crate) format: Format,
    pub(crate) body: Bytes,
    /// The request stream, for operations that take one (empty otherwise).
    pub(crate) stream: ByteStream,
    /// The call counts from its arrival on (the binding admitted it; see [`Arrival`]).
    pub(crate) arrival: Arrival,
}

pub(crate) fn dispatch(conn: &Arc<ConnShared>, req: Incoming<'_>, received: Instant) {
    let dispatcher = &conn.dispatcher;
    let call_id = req.call_id;
    let one_way = req.one_way;
    // Dropped at any return below, after the answer is sent, unless tracking took it over.
    let arrival = req.arrival;
    conn.info.calls.fetch_add(1, Ordering::Relaxed);
    let Some(service) = dispatcher.service(req.service) else {
        let msg = format!("no service `{}` on this host", req.service);
        return conn.reply(call_id, Err(Status::new(StatusCode::UnknownService, msg)));
    };
    let desc = service.descriptor();
    let Some(op) = desc.operation_index(req.operation) else {
        let msg = format!(
            "service `{}` has no operation `{}`",
            desc.name, req.operation
        );
        return conn.reply(call_id, Err(Status::new(StatusCode::UnknownOperation, msg)));
    };
    let deadline = req.deadline.and_then(|d| received.checked_add(d));
    // The per-connection limit before decoding: a connection at its limit costs no decoding.
    let ctl = match conn.track(call_id, arrival) {
        Ok(ctl) => ctl,
        Err(status) => return conn.reply(call_id, Err(status)),
    };
    let invocation = match service.invoke(op, req.format, &req.body, req.stream) {
        Ok(inv) => inv,
        // Answered unless a drain answered it meanwhile (even one-way calls hear of it).
        Err(status) => return conn.finish(call_id, false, Err(status)),
    };
    dispatcher.call_accepted();
    if one_way {
        // Acknowledge receipt now; the outcome is not reported.
        conn.reply(call_id, Ok(Payload::Body(Bytes::new())));
    }
    let call = Call {
        conn: conn.clone(),
        ctl,
        call_id,
        one_way,
        deadline,
    };
    match dispatcher.throttle.admit() {
        Admission::Now(permit) => call.start(invocation, permit),
        Admission::Queued(place) => {
            let rt = tokio::runtime::Handle::current();
            rt.spawn(async move {
                let permit = match call.deadline {
                    Some(d) => match tokio::time::timeout_at(d.into(), place.wait()).await {
                        Ok(p) => p,
                        Err(_) => return call.finish(Err(deadline_status())),
                    },
                    None => place.wait().await,
                };
                call.start(invocation, permit);
            });
        }
        Admission::Busy => {
            let status = Status::new(StatusCode::Busy, "the host's call queue is full");
            call.finish(Err(status));
        }
    }
}

fn deadline_status() -> Status {
    Status::new(
        StatusCode::DeadlineExceeded,
        "deadline passed before the call could start",
    )
}

/// An admitted call on its way to a handler.
struct Call {
    conn: Arc<ConnShared>,
    ctl: Arc<CallCtl>,
    call_id: u64,
    one_way: bool,
    deadline: Option<Instant>,
}

impl Call {
    fn finish(self, outcome: Outcome) {
        self.conn.finish(self.call_id, self.one_way, outcome);
    }

    /// `Some(status)` if the call must not start: cancelled, or its deadline passed.
    fn refuse_start(&self) -> Option<Status> {
        if self.ctl.cancelled.load(Ordering::Acquire) {
            return Some(Status::new(StatusCode::Cancelled, "cancelled"));
        }
        match self.deadline {
            Some(d) if Instant::now() >= d => Some(deadline_status()),
            _ => None,
        }
    }

    fn start(self, invocation: Invocation, permit: tokio::sync::OwnedSemaphorePermit) {
        match invocation {
            Invocation::Blocking(job) => {
                let pool = self.conn.dispatcher.pool.clone();
                let (conn, call_id, one_way) = (self.conn.clone(), self.call_id, self.one_way);
                let submitted = pool.spawn(move || {
                    let _permit = permit;
                    if let Some(status) = self.refuse_start() {
                        return self.finish(Err(status));
                    }
                    let outcome = catch_unwind(AssertUnwindSafe(job))
                        .unwrap_or_else(|p| Err(panic_status(&p)));
                    self.finish(outcome);
                });
                if submitted.is_err() {
                    // The pool closes only at the end of shutdown; answer rather than vanish.
                    let status = Status::new(StatusCode::ShuttingDown, "host is shutting down");
                    conn.finish(call_id, one_way, Err(status));
                }
            }
            Invocation::Async(fut) => {
                let ctl = self.ctl.clone();
                let handle = tokio::runtime::Handle::current().spawn(async move {
                    let _permit = permit;
                    if let Some(status) = self.refuse_start() {
                        return self.finish(Err(status));
                    }
                    let run = CatchUnwind(fut);
                    let outcome = match self.deadline {
                        Some(d) => match tokio::time::timeout_at(d.into(), run).await {
                            Ok(o) => o,
                            Err(_) => Err(Status::new(
                                StatusCode::DeadlineExceeded,
                                "deadline passed while the operation ran",
                            )),
                        },
                        None => run.await,
                    };
                    self.finish(outcome);
                });
                *ctl.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle.abort_handle());
            }
        }
    }
}

fn panic_status(payload: &Box<dyn std::any::Any + Send>) -> Status {
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
struct CatchUnwind(Pin<Box<dyn Future<Output = Outcome> + Send>>);

impl Future for CatchUnwind {
    type Output = Outcome;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(p) => p,
            Err(payload) => Poll::Ready(Err(panic_status(&payload))),
        }
    }
}
