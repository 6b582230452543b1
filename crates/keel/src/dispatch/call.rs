//! One call's way from a decoded request to a running handler.
//!
//! Whether a call arrived in time to be served while the host drains is the binding's to say
//! (it brings the call's [`Arrival`]). Then the checks, cheapest first: service → operation →
//! per-connection limit → interceptors → arguments → throttle. Blocking operations run on
//! keel-pool and never on a runtime worker; async operations run as runtime tasks. A call whose
//! deadline passed before it could start is answered `DeadlineExceeded` without running.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::task::AbortHandle;
use tracing::Instrument as _;

use super::conn::{HostConn, ReplyTo};
use super::metrics::{Elapsed, OpMetrics, Since};
use super::panics::{panic_status, CatchUnwind, HandlerFuture};
use super::schedule::{self, Job, Scheduler};
use super::throttle::Admission;
use super::watchdog::Watched;
use super::{Arrival, Served};
use crate::core::compress::{self, Compression, DecompressError};
use crate::core::context::{CallFacts, Context};
use crate::core::format::Format;
use crate::core::messages::framing::Framing;
use crate::core::metadata::Metadata;
use crate::core::service::{Invocation, Outcome, Payload, Service};
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::runtime::clock;

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
    /// The request metadata.
    pub(crate) metadata: Metadata,
    /// How `body` is compressed, if it is.
    pub(crate) compression: Option<Compression>,
    /// How the reply may be compressed: the caller accepts this codec.
    pub(crate) reply_codec: Option<Compression>,
    /// How `body` (and the reply) is encoded.
    pub(crate) format: Format,
    /// The encoded arguments (only read: the call's arguments are decoded from them).
    pub(crate) body: &'a [u8],
    /// The request stream, for operations that take one (empty otherwise).
    pub(crate) stream: ByteStream,
    /// The call counts from its arrival on (the binding admitted it; see [`Arrival`]).
    pub(crate) arrival: Arrival,
    /// Where its answer goes.
    pub(crate) reply_to: ReplyTo,
    /// How a reply stream of messages is framed (keel-wire: as the format says; HTTP: also
    /// SSE when the caller asks for it).
    pub(crate) reply_framing: Framing,
    /// How a request stream of messages is framed, when not as its format's own framing.
    pub(crate) request_framing: Option<Framing>,
    /// For a call in a session: the session's instance of the service (instead of the one the
    /// host serves), and the session (what `Context::callback` reaches).
    pub(crate) session: Option<SessionCall>,
}

/// What a call made in a session runs with (see [`Incoming::session`]).
#[derive(Clone)]
pub(crate) struct SessionCall {
    /// The session's instance of the service.
    pub(crate) instance: Arc<dyn Service>,
    /// The session, for the call's context.
    pub(crate) handle: Arc<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for SessionCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCall")
            .field("service", &self.instance.descriptor().name)
            .finish_non_exhaustive()
    }
}

/// Opens sessions (the host's, in `host/session.rs`): a call of the reserved session
/// operation is handed to it whole.
pub(crate) trait SessionOpener: Send + Sync + 'static {
    /// Opens a session on `served` for the call `req`, answering it through its reply target.
    fn open(&self, conn: &Arc<HostConn>, served: &Served, req: Incoming<'_>);
}

/// The hand-off of one connection's blocking calls to the pool, owned by its reader (see
/// [`schedule`]).
pub(crate) type BlockingCalls = Scheduler<Blocking>;

/// Dispatches a call that arrived at `received`.
///
/// `clock`: the caller's latest clock reading (`received` itself, or later). A call that
/// starts at once takes it as its start, and one that also completes at once leaves its end
/// in it, for the next call the caller dispatches: a reader reads the clock once per read and
/// once per call instead of twice per call. A call's start then also covers decoding its
/// request (a fraction of a microsecond).
///
/// `blocking`: the reader's hand-off of the connection's blocking calls, which may hold them
/// for the rest of a read batch; `None` hands a blocking call to the pool at once.
pub(crate) fn dispatch(
    conn: &Arc<HostConn>,
    req: Incoming<'_>,
    received: Instant,
    clock: &mut Instant,
    blocking: Option<&mut BlockingCalls>,
) {
    let dispatcher = &conn.dispatcher;
    let call_id = req.call_id;
    let one_way = req.one_way;
    // Dropped at any return below, after the answer is sent, unless tracking took it over.
    let arrival = req.arrival;
    let reply_to = req.reply_to;
    conn.info.calls.fetch_add(1, Ordering::Relaxed);
    let Some(served) = dispatcher.served(req.service) else {
        let msg = format!("no service `{}` on this host", req.service);
        let status = Status::new(StatusCode::UnknownService, msg);
        return conn.reply_to(reply_to, call_id, Err(status));
    };
    if req.operation == crate::core::service::SESSION_OPERATION {
        return match dispatcher.sessions.get() {
            Some(opener) => opener.open(
                conn,
                served,
                Incoming {
                    arrival,
                    reply_to,
                    ..req
                },
            ),
            None => {
                let status = Status::new(StatusCode::Unimplemented, "this host opens no sessions");
                conn.reply_to(reply_to, call_id, Err(status))
            }
        };
    }
    let service: &dyn Service = match &req.session {
        Some(session) => &*session.instance,
        None => &*served.service,
    };
    let desc = service.descriptor();
    let Some(op) = desc.operation_index(req.operation) else {
        let msg = format!(
            "service `{}` has no operation `{}`",
            desc.name, req.operation
        );
        let status = Status::new(StatusCode::UnknownOperation, msg);
        return conn.reply_to(reply_to, call_id, Err(status));
    };
    let deadline = req.deadline.and_then(|d| received.checked_add(d));
    let info = &desc.operations[op];
    // The call's span (see the crate docs, "Tracing"): decoding and the handler run inside it.
    // Interceptors get it unentered through `Context::span`, so that one can still give it a
    // parent (the caller's trace); entering it first would start an OpenTelemetry span for
    // good. Nothing is formatted or allocated unless a subscriber wants it.
    let span = tracing::info_span!(
        target: "keel::server",
        "keel.call",
        otel.kind = "server",
        otel.name = tracing::field::display(format_args!("{}/{}", desc.name, info.name)),
        rpc.system = "keel",
        rpc.service = desc.name,
        rpc.method = info.name,
        keel.call_id = call_id,
        keel.binding = conn.info.binding,
        client.address = %conn.info.peer,
        rpc.code = tracing::field::Empty,
    );
    let ctx = Context::new(CallFacts {
        service: desc.name,
        operation: info.name,
        binding: conn.info.binding,
        peer_addr: conn.info.peer_addr,
        peer_certificates: conn.info.peer_certificates.clone(),
        deadline,
        metadata: req.metadata,
        reply_codec: req.reply_codec,
        span,
        reply_framing: req.reply_framing,
        request_framing: req.request_framing,
        max_message_size: dispatcher.limits.max_message_size,
        session: req.session.as_ref().map(|s| s.handle.clone()),
        stream_counters: (info.message_request || info.message_response)
            .then(|| served.metrics[op].stream_counters()),
    });
    // The per-connection limit before decoding: a connection at its limit costs no decoding.
    let metrics = &served.metrics[op];
    if let Err((status, reply_to)) = conn.track(call_id, &ctx, reply_to, arrival) {
        metrics.answered(status.code());
        return conn.reply_to(reply_to, call_id, Err(status));
    }
    metrics.in_flight.increment(1.0);
    let mut call = Call {
        conn: conn.clone(),
        call_id,
        one_way,
        deadline,
        ctx,
        intercepted: 0,
        intercepted_async: 0,
        metrics: metrics.clone(),
        received,
        answered: false,
        permit: None,
    };
    // A call that would open one reply stream too many on its connection does not run.
    if info.stream_response {
        if let Some(busy) = conn.refuse_reply_stream() {
            return call.finish(Err(busy));
        }
    }
    // Interceptors before decoding: a refused caller costs no decoding either.
    for interceptor in dispatcher.interceptors() {
        call.intercepted += 1;
        if let Err(status) = interceptor.before(&call.ctx) {
            // Answered even for one-way calls: the caller must hear it was refused.
            call.one_way = false;
            return call.finish(Err(status));
        }
    }
    let args = Args {
        compression: req.compression,
        format: req.format,
        body: req.body,
        stream: req.stream,
    };
    if !dispatcher.async_interceptors().is_empty() {
        let service = match &req.session {
            Some(session) => session.instance.clone(),
            None => served.service.clone(),
        };
        // The key the host serves it under (gRPC's standard services: their full names).
        let key = req.service.to_owned();
        return call.intercept_async(key, service, op, args.into_owned());
    }
    call.admitted(served, service, op, args, clock, blocking);
}

/// A call's arguments as they arrived, not yet decompressed or decoded.
struct Args<'a> {
    compression: Option<Compression>,
    format: Format,
    body: &'a [u8],
    stream: ByteStream,
}

impl Args<'_> {
    /// The arguments with their body copied out of the read buffer, for a call whose
    /// admission waits.
    fn into_owned(self) -> OwnedArgs {
        OwnedArgs {
            compression: self.compression,
            format: self.format,
            body: bytes::Bytes::copy_from_slice(self.body),
            stream: self.stream,
        }
    }
}

/// [`Args`] that own their body.
struct OwnedArgs {
    compression: Option<Compression>,
    format: Format,
    body: bytes::Bytes,
    stream: ByteStream,
}

impl Call {
    /// Runs the host's async interceptors for the call, in a task of its own (which a cancel
    /// aborts), then the rest of its admission ([`Call::admitted`]).
    fn intercept_async(self, key: String, service: Arc<dyn Service>, op: usize, args: OwnedArgs) {
        let ctx = self.ctx.clone();
        let span = self.ctx.span().clone();
        let task = async move {
            let mut call = self;
            let conn = call.conn.clone();
            for interceptor in conn.dispatcher.async_interceptors() {
                call.intercepted_async += 1;
                let before = super::intercept::verdict(interceptor.before(&call.ctx));
                let verdict = match call.deadline {
                    Some(d) => tokio::time::timeout_at(clock::to_tokio(d), before)
                        .await
                        .unwrap_or_else(|_| {
                            Err(Status::new(
                                StatusCode::DeadlineExceeded,
                                "deadline passed while an interceptor ran",
                            ))
                        }),
                    None => before.await,
                };
                if let Err(status) = verdict {
                    call.one_way = false;
                    return call.finish(Err(status));
                }
            }
            let Some(served) = conn.dispatcher.served(&key) else {
                // Served since the call arrived: a host never forgets a service.
                return call.finish(Err(Status::new(
                    StatusCode::UnknownService,
                    format!("no service `{key}` on this host"),
                )));
            };
            let args = Args {
                compression: args.compression,
                format: args.format,
                body: &args.body[..],
                stream: args.stream,
            };
            call.admitted(served, &*service, op, args, &mut clock::now(), None);
        };
        let handle = tokio::runtime::Handle::current().spawn(task.instrument(span));
        // The task may have started the handler's own task already (interceptors that did
        // not wait, on another worker): that one is what a cancel must abort.
        ctx.set_task_unless_set(handle.abort_handle());
    }

    /// The rest of a call the interceptors admitted: its arguments decompressed and decoded,
    /// then the throttle, then its start (see [`dispatch`] for `clock` and `blocking`).
    #[inline(always)]
    fn admitted(
        mut self,
        served: &Served,
        service: &dyn Service,
        op: usize,
        args: Args<'_>,
        clock: &mut Instant,
        blocking: Option<&mut BlockingCalls>,
    ) {
        let conn = &self.conn;
        let dispatcher = &conn.dispatcher;
        let span = self.ctx.span().clone();
        let entered = span.enter();
        let decompressed;
        let body = match args.compression {
            None => args.body,
            Some(codec) => {
                let limit = dispatcher.limits.max_message_size as usize;
                match compress::decompress(codec, args.body, limit) {
                    Ok(body) => {
                        decompressed = body;
                        &decompressed[..]
                    }
                    Err(e) => {
                        let status = match e {
                            DecompressError::TooLarge { .. } => Status::new(
                                StatusCode::TooLarge,
                                format!("the {codec} request body decompresses to more than this host's limit of {limit} bytes"),
                            ),
                            DecompressError::Malformed(why) => Status::new(
                                StatusCode::BadRequest,
                                format!("the {codec} request body does not decompress: {why}"),
                            ),
                        };
                        self.one_way = false;
                        return self.finish(Err(status));
                    }
                }
            }
        };
        let invocation = match service.invoke(op, args.format, body, args.stream, &self.ctx) {
            Ok(inv) => inv,
            // Answered unless a drain answered it meanwhile (even one-way calls hear of it).
            Err(status) => {
                self.one_way = false;
                return self.finish(Err(status));
            }
        };
        dispatcher.call_accepted();
        drop(entered);
        if self.one_way {
            // Acknowledge receipt now; the outcome is not reported.
            conn.acknowledge(self.call_id);
        }
        match served.throttle(&dispatcher.throttle).admit() {
            Admission::Now(permit) => {
                self.metrics.throttle_wait.record(0.0);
                self.permit = Some(permit);
                self.start(invocation, clock, blocking)
            }
            Admission::Queued(place) => {
                let rt = tokio::runtime::Handle::current();
                let queued = clock::now();
                rt.spawn(async move {
                    let mut call = self;
                    let permit = match call.deadline {
                        Some(d) => {
                            match tokio::time::timeout_at(clock::to_tokio(d), place.wait()).await {
                                Ok(p) => p,
                                Err(_) => return call.finish(Err(deadline_status())),
                            }
                        }
                        None => place.wait().await,
                    };
                    call.metrics.throttle_wait.record(Since(queued));
                    call.permit = Some(permit);
                    call.start(invocation, &mut clock::now(), None);
                });
            }
            Admission::Busy => {
                let status = match &served.throttle {
                    Some((_, metrics)) => {
                        metrics.rejected.increment(1);
                        let name = service.descriptor().name;
                        let msg = format!("the call queue of service `{name}` is full");
                        Status::new(StatusCode::Busy, msg)
                    }
                    None => {
                        dispatcher.metrics.throttle_rejected.increment(1);
                        Status::new(StatusCode::Busy, "the host's call queue is full")
                    }
                };
                self.finish(Err(status));
            }
        }
    }
}

fn deadline_status() -> Status {
    Status::new(
        StatusCode::DeadlineExceeded,
        "deadline passed before the call could start",
    )
}

/// A tracked call on its way to a handler and back.
struct Call {
    conn: Arc<HostConn>,
    call_id: u64,
    one_way: bool,
    deadline: Option<Instant>,
    ctx: Context,
    /// How many synchronous interceptors' `before` ran: their `after` runs, in reverse order.
    /// (Two `u32`s where one `usize` was: a blocking call's pool task keeps its size, and with
    /// it the allocator's bin; 8 more bytes cost the sync path ~7 % of its instructions in
    /// callgrind, in `malloc_consolidate`.)
    intercepted: u32,
    /// How many async interceptors' `before` started: their `after` runs first, in reverse
    /// order.
    intercepted_async: u32,
    /// The operation's metric handles.
    metrics: Arc<OpMetrics>,
    /// When the request arrived (the start of the server time).
    received: Instant,
    /// Counted as answered (by `finish`); otherwise `drop` counts it cancelled.
    answered: bool,
    /// Its throttle slot, from its admission until [`finish_at`](Call::finish_at) gives it
    /// back before the answer leaves, or the call is dropped (`None` before admission, and on
    /// the tower path, whose request holds it). Kept in the call rather than beside it, so that
    /// every way a call ends gives it back in that order. (Moved here from `Blocking`: a
    /// blocking call's pool task keeps its size.)
    permit: Option<Permit>,
}

impl Call {
    fn finish(self, outcome: Outcome) {
        self.finish_at(outcome, clock::now());
    }

    /// [`finish`](Call::finish) with the clock already read at `ended`.
    fn finish_at(mut self, outcome: Outcome, ended: Instant) {
        let code = outcome
            .as_ref()
            .map_or_else(|s| s.code(), |_| StatusCode::Ok);
        self.after(code);
        if !self.ctx.span().is_disabled() {
            self.ctx.span().record("rpc.code", code.as_str());
        }
        self.answered = true;
        self.metrics.answered(code);
        // Before the answer leaves: a caller that has its answer never sees it in flight, nor
        // among the throttle's running calls.
        self.permit = None;
        self.metrics.in_flight.decrement(1.0);
        self.metrics.total.record(Elapsed {
            from: self.received,
            to: ended,
        });
        let outcome = match outcome {
            // The stream flows on after the answer: the drain waits for it (`streams.rs`).
            Ok(Payload::Stream(s)) => Ok(Payload::Stream(
                self.conn.dispatcher.lease_stream(&self.conn, s),
            )),
            other => other,
        };
        self.conn.finish(self.call_id, self.one_way, outcome, ended);
    }

    /// The interceptors' `after`, once.
    fn after(&mut self, code: StatusCode) {
        let ran_async = std::mem::take(&mut self.intercepted_async) as usize;
        if ran_async > 0 {
            let chain = self.conn.dispatcher.async_interceptors();
            for interceptor in chain[..ran_async].iter().rev() {
                interceptor.after(&self.ctx, code);
            }
        }
        let ran = std::mem::take(&mut self.intercepted) as usize;
        if ran > 0 {
            let chain = self.conn.dispatcher.interceptors();
            for interceptor in chain[..ran].iter().rev() {
                interceptor.after(&self.ctx, code);
            }
        }
    }

    /// `Some(status)` if the call must not start at `now`: cancelled, or its deadline passed.
    fn refuse_start(&self, now: Instant) -> Option<Status> {
        if self.ctx.is_cancelled() {
            return Some(Status::new(StatusCode::Cancelled, "cancelled"));
        }
        match self.deadline {
            Some(d) if now >= d => Some(deadline_status()),
            _ => None,
        }
    }

    /// Starts the call at `clock` (see [`dispatch`]); one that completes at once leaves its end
    /// there. A blocking one goes to the pool through `blocking`, if given.
    fn start(
        self,
        invocation: Invocation,
        clock: &mut Instant,
        blocking: Option<&mut BlockingCalls>,
    ) {
        #[cfg(feature = "tower")]
        if let Some(layered) = self.conn.dispatcher.layer().cloned() {
            return self.start_layered(layered, invocation);
        }
        match invocation {
            Invocation::Blocking(job) => {
                let short = self.metrics.pace.short();
                let job = Blocking {
                    call: self,
                    job,
                    handed: *clock,
                };
                match blocking {
                    Some(calls) => calls.submit(job, short),
                    None => {
                        let pool = job.call.conn.dispatcher.pool.clone();
                        schedule::spawn(&pool, job);
                    }
                }
            }
            Invocation::Async(fut) => {
                // The handler is polled once here first: one that completes without waiting
                // (most do) answers at once, in the reader's batch (its reply is written with
                // the batch's others), and costs no task, no allocation and no timer. Only one
                // that waits is spawned, with the rest of its call; its next poll, in the
                // task, registers the task's waker, as a future's every poll does. The
                // handler's panics are answered inside (`CatchUnwind`); a panic in keel's own
                // code (or an interceptor's `after`) here drops the call, counted as
                // cancelled, as it would in a task of its own.
                let first = catch_unwind(AssertUnwindSafe(move || self.first_poll(fut, clock)));
                match first {
                    Ok(None) => {}
                    Ok(Some(waiting)) => waiting.spawn(),
                    Err(_) => log::error!("a call's completion panicked"),
                }
            }
        }
    }

    /// Runs the call through the host's tower layers (`HostBuilder::layer`), as a task of its
    /// own (which a cancel aborts), within its deadline. Blocking handlers go to keel-pool from
    /// the layers' innermost service ([`super::Handler`]), one by one.
    #[cfg(feature = "tower")]
    fn start_layered(mut self, layered: Arc<dyn super::Layered>, invocation: Invocation) {
        let ctx = self.ctx.clone();
        let span = self.ctx.span().clone();
        let task = async move {
            let started = clock::now();
            if let Some(status) = self.refuse_start(started) {
                return self.finish_at(Err(status), started);
            }
            let pool = self.conn.dispatcher.pool.clone();
            let (ctx, deadline) = (self.ctx.clone(), self.deadline);
            // The request holds the slot from here: the layers' innermost service gives it
            // back when the handler returns.
            let permit = self.permit.take();
            let request = super::layer::request(ctx, invocation, pool, permit, deadline);
            let run = CatchUnwind::handler(layered.serve(request));
            let outcome = Deadline::new(run, self.deadline).await;
            self.ran(outcome, started, false);
        };
        let handle = tokio::runtime::Handle::current().spawn(task.instrument(span));
        ctx.set_task(handle.abort_handle());
    }

    /// Starts an async handler: polls it once, with a waker that does nothing. Answers the
    /// call and returns `None` if it completed (or must not start); else returns what the
    /// rest of the call needs, to run as a task. It starts at `clock` and leaves its end there
    /// if it completed.
    fn first_poll(self, fut: HandlerFuture, clock: &mut Instant) -> Option<Waiting> {
        // The call's span is entered for the poll and for the answer, as in its task.
        let span = self.ctx.span().clone();
        let _entered = span.enter();
        // The clock is read once per call here, at the end (which also stamps the total and
        // the connection's activity); the start is the dispatcher's latest reading.
        let started = *clock;
        if let Some(status) = self.refuse_start(started) {
            self.finish_at(Err(status), started);
            return None;
        }
        let mut run = Watched::new(CatchUnwind::handler(fut), self.metrics.watch);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match Pin::new(&mut run).poll(&mut cx) {
            Poll::Ready(outcome) => {
                *clock = self.ran(outcome, started, false);
                None
            }
            Poll::Pending => Some(Waiting {
                call: self,
                run,
                started,
            }),
        }
    }

    /// The handler that started at `started` ended with `outcome`: answer. `blocking`: it ran
    /// on the pool (its time counts toward the operation's pace). Returns the clock's reading
    /// at its end.
    fn ran(self, outcome: Outcome, started: Instant, blocking: bool) -> Instant {
        let ended = clock::now();
        if blocking {
            self.metrics
                .pace
                .record(ended.saturating_duration_since(started));
        }
        self.metrics.handler.record(Elapsed {
            from: started,
            to: ended,
        });
        self.finish_at(outcome, ended);
        ended
    }
}

/// A throttle slot, held while the call's handler runs and given back before its answer
/// leaves (`Call::permit`): a caller that has its answer never sees its call among the
/// throttle's running ones, as with the in-flight gauge.
type Permit = super::throttle::Permit;

/// A blocking call handed to keel-pool: run there, on its own or in a run (see [`schedule`]).
pub(crate) struct Blocking {
    call: Call,
    job: Box<dyn FnOnce() -> Outcome + Send>,
    /// When it was handed over (the start of its wait for a pool thread).
    handed: Instant,
}

impl Job for Blocking {
    fn run(self, now: Option<Instant>) -> Instant {
        let Blocking { call, job, handed } = self;
        let started = now.unwrap_or_else(clock::now);
        let wait = Elapsed {
            from: handed,
            to: started,
        };
        call.metrics.pool_wait.record(wait);
        call.conn.dispatcher.metrics.pool_queue_wait.record(wait);
        if let Some(status) = call.refuse_start(started) {
            call.finish_at(Err(status), started);
            return started;
        }
        let outcome = call
            .ctx
            .span()
            .in_scope(|| catch_unwind(AssertUnwindSafe(job)))
            .unwrap_or_else(|p| Err(panic_status(&p)));
        call.ran(outcome, started, true)
    }

    fn refuse(self) {
        let status = Status::new(StatusCode::ShuttingDown, "host is shutting down");
        self.call.finish(Err(status));
    }
}

/// An async call whose handler did not complete at its first poll (see [`Call::first_poll`]).
struct Waiting {
    call: Call,
    run: Watched<CatchUnwind<'static>>,
    started: Instant,
}

impl Waiting {
    /// Runs the rest of the call as a task on the current runtime, which a cancel can abort.
    fn spawn(self) {
        let Waiting { call, run, started } = self;
        let ctx = call.ctx.clone();
        let span = call.ctx.span().clone();
        let task = async move {
            let outcome = Deadline::new(run, call.deadline).await;
            call.ran(outcome, started, false);
        };
        let handle = tokio::runtime::Handle::current().spawn(task.instrument(span));
        ctx.set_task(handle.abort_handle());
    }
}

/// An async handler's future cut off at the call's deadline, answering `DeadlineExceeded`
/// then. The timer is set only when a poll leaves the handler pending: one that completes at
/// its first poll (most do) costs no timer at all.
struct Deadline<F> {
    fut: F,
    deadline: Option<Instant>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<F> Deadline<F> {
    fn new(fut: F, deadline: Option<Instant>) -> Deadline<F> {
        Deadline {
            fut,
            deadline,
            timer: None,
        }
    }
}

impl<F: Future<Output = Outcome> + Unpin> Future for Deadline<F> {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Outcome> {
        let this = &mut *self;
        if let Poll::Ready(outcome) = Pin::new(&mut this.fut).poll(cx) {
            return Poll::Ready(outcome);
        }
        let Some(deadline) = this.deadline else {
            return Poll::Pending;
        };
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(clock::to_tokio(deadline))));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Status::new(
                StatusCode::DeadlineExceeded,
                "deadline passed while the operation ran",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Polls `fut` once, here, with a waker that does nothing; spawns it on the current runtime
/// only if it is still pending, and returns the spawned task's abort handle. Its next poll, in
/// the task, registers the task's waker, as every poll of a future does. A panic in that first
/// poll drops `fut` and is logged as `what` panicking, as a spawned task's would be. Used for
/// work that usually completes at once: an HTTP/2 request's future (the HTTP binding). (An
/// async handler's call does the same without boxing its first poll: [`Call::first_poll`].)
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn poll_once_then_spawn<F>(mut fut: Pin<Box<F>>, what: &str) -> Option<AbortHandle>
where
    F: Future<Output = ()> + Send + ?Sized + 'static,
{
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
        Ok(Poll::Ready(())) => None,
        Ok(Poll::Pending) => Some(tokio::runtime::Handle::current().spawn(fut).abort_handle()),
        Err(_) => {
            log::error!("{what} panicked");
            None
        }
    }
}

impl Drop for Call {
    /// A call dropped unanswered was cancelled (its task aborted): the interceptors still hear
    /// of it.
    fn drop(&mut self) {
        self.after(StatusCode::Cancelled);
        if !self.answered {
            self.metrics.answered(StatusCode::Cancelled);
            self.metrics.in_flight.decrement(1.0);
            if !self.ctx.span().is_disabled() {
                self.ctx
                    .span()
                    .record("rpc.code", StatusCode::Cancelled.as_str());
            }
        }
    }
}
