//! The host side: one task per HTTP connection (HTTP/1.1 and h2c on the same port, or what ALPN
//! agreed), one call per request. Requests reach the same dispatcher as keel-wire frames; each
//! call's answer comes back on a oneshot to the request that is waiting for it
//! ([`ReplyTo::Waiter`]), and [`HttpResponder`] stops the connection when the host asks.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use ::http::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, ALLOW, CONNECTION, CONTENT_ENCODING, CONTENT_TYPE,
    ORIGIN, RETRY_AFTER, VARY,
};
use ::http::{Method, Request, Response, Version};
use bytes::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{oneshot, watch, Notify};

use super::accept_encoding;
use super::body::{self, Body, ReadError, Received};
use super::{
    details_encode, http_status, metadata_from_headers, metadata_to_headers, ARGS_HEADER,
    DEADLINE_HEADER, DETAILS_HEADER, JSON_CONTENT_TYPE, MSGPACK_CONTENT_TYPE,
    POSTCARD_CONTENT_TYPE, STATUS_HEADER, STREAM_CONTENT_TYPE, UNPROCESSED_HEADER,
};
use crate::bindings::{ConnectionRegistry, ServerSettings};
use crate::core::compress::Compression;
use crate::core::format::Format;
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
#[cfg(not(feature = "openapi"))]
use crate::core::service::ServiceDescriptor;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::dispatch::{
    dispatch, poll_once_then_spawn, ConnInfo, ConnShared, Dispatcher, Incoming, ReceiveBudget,
    ReplyTo, Responder,
};
use crate::transport::{Connected, Io};

/// How far the host has asked an HTTP connection to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Stop {
    Serving,
    /// The host is going away (a drain): HTTP/2 gets `GOAWAY`. An HTTP/1.1 connection is not
    /// closed while idle, as a request may be on its way (a client that sees the close only
    /// after sending could not tell whether the host took its call); the next request on it
    /// is answered with `connection: close`, and a drain's answer says the call was not
    /// processed.
    GoingAway,
    /// Close, gracefully: HTTP/1.1 once the answer in progress is written (at once if idle);
    /// HTTP/2 after `GOAWAY`, once the streams in flight are answered.
    Closing,
}

/// `go_away` and `close` stop the connection (see [`Stop`]). Answers go to each call's waiter,
/// not through the connection.
#[derive(Debug)]
struct HttpResponder {
    stop: watch::Sender<Stop>,
}

impl Responder for HttpResponder {
    fn go_away(&self, _reason: &str) {
        self.stop.send_if_modified(|s| {
            let raise = *s < Stop::GoingAway;
            if raise {
                *s = Stop::GoingAway;
            }
            raise
        });
    }

    fn close(&self) {
        self.stop.send_replace(Stop::Closing);
    }
}

/// The fewest concurrent streams an HTTP/2 connection is offered.
const H2_MIN_STREAMS: usize = 128;

/// What every request of one HTTP connection shares.
#[derive(Debug, Clone)]
pub(super) struct Ctx {
    pub(super) conn: Arc<ConnShared>,
    /// The next call's id: the key of its entry among the connection's calls in flight (HTTP
    /// carries no call ids).
    next_call_id: Arc<AtomicU64>,
    pub(super) settings: Arc<ServerSettings>,
    /// Bytes of request bodies this connection (and the host) may hold at once.
    budget: ReceiveBudget,
    /// The HTTP/1.1 request head being received, if any (none for `HttpService`).
    watch: Option<Arc<HeadWatch>>,
}

impl Ctx {
    /// A connection's shared state; `stop` is told when the host wants it to go away or close.
    /// It has at most `max_calls` calls in flight; `watch` follows its request heads.
    pub(super) fn new(
        dispatcher: &Arc<Dispatcher>,
        settings: Arc<ServerSettings>,
        info: ConnInfo,
        stop: watch::Sender<Stop>,
        max_calls: usize,
        watch: Option<Arc<HeadWatch>>,
    ) -> Ctx {
        let responder = HttpResponder { stop };
        let conn = Arc::new(ConnShared::new(
            Box::new(responder),
            info,
            max_calls,
            dispatcher.clone(),
        ));
        let budget = ReceiveBudget::new(
            settings.max_receive_bytes_per_connection,
            &dispatcher.receive_budget,
        );
        Ctx {
            conn,
            next_call_id: Arc::new(AtomicU64::new(0)),
            settings,
            budget,
            watch,
        }
    }

    /// The connection is gone: nobody can receive answers, so stop what still runs for it.
    pub(super) fn abandon(&self) {
        let gone = Status::new(StatusCode::Cancelled, "connection closed");
        self.conn.abandon_all(&gone);
    }
}

/// Serves one accepted HTTP connection until it closes.
pub(crate) async fn serve(
    connected: Connected,
    dispatcher: Arc<Dispatcher>,
    registry: &dyn ConnectionRegistry,
    settings: Arc<ServerSettings>,
    info: ConnInfo,
) {
    let (stop, mut stopped) = watch::channel(Stop::Serving);
    // HTTP/1.1 heads are watched unless TLS agreed on HTTP/2 (cleartext HTTP/2 is recognised
    // by its preface).
    let head_watch = Arc::new(HeadWatch::new(connected.alpn.as_deref() == Some(b"h2")));
    let max_calls = settings.max_calls_per_connection;
    let frame_timeout = settings.frame_timeout;
    let keepalive = settings.keepalive;
    let ctx = Ctx::new(
        &dispatcher,
        settings,
        info,
        stop,
        max_calls,
        Some(head_watch.clone()),
    );
    registry.register(ctx.conn.clone());

    // Not hyper's header read timeout: it also runs while a keep-alive connection waits for
    // its next request, and would close idle connections keel keeps for the client's life.
    // `HeadWatch` times only a head that has started arriving.
    let streams = Deferred::default();
    let mut builder = auto::Builder::new(streams.clone());
    // At least as many streams as calls: a stream over the call limit is answered Busy. A
    // floor of 128 keeps a small throttle's Busy answers visible to HTTP/2 clients rather than
    // queueing them behind the stream limit.
    let max_streams = u32::try_from(max_calls.max(H2_MIN_STREAMS)).unwrap_or(u32::MAX);
    builder.http1().max_buf_size(super::H1_MAX_BUF);
    builder
        .http2()
        .max_concurrent_streams(max_streams)
        .max_header_list_size(super::H2_MAX_HEADER_LIST)
        .initial_stream_window_size(super::H2_STREAM_WINDOW)
        .initial_connection_window_size(super::H2_CONNECTION_WINDOW)
        .timer(TokioTimer::new());
    // HTTP/2 PINGs to a client quiet for the keepalive interval; closed if it does not answer.
    if let Some(k) = keepalive {
        builder
            .http2()
            .keep_alive_interval(k.interval)
            .keep_alive_timeout(k.timeout);
    }
    let builder = match connected.alpn.as_deref() {
        Some(b"h2") => builder.http2_only(),
        Some(b"http/1.1") => builder.http1_only(),
        _ => builder,
    };
    let service = {
        let ctx = ctx.clone();
        hyper::service::service_fn(move |req| {
            let ctx = ctx.clone();
            async move { Ok::<_, Infallible>(handle(&ctx, req).await) }
        })
    };
    let io = Watched {
        io: connected.io,
        watch: head_watch.clone(),
    };
    let serving = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(serving);
    let overdue = head_watch.overdue(frame_timeout);
    tokio::pin!(overdue);
    let mut check = tokio::time::interval((frame_timeout / 4).max(Duration::from_millis(10)));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Whether hyper's graceful shutdown has begun: for `Stop::Closing`, and for
    // `Stop::GoingAway` once the connection is known to speak HTTP/2.
    let mut stopping = false;
    let level = stopped.clone();
    loop {
        let must_stop = |stop: &Stop| match stop {
            Stop::Serving => false,
            Stop::GoingAway => head_watch.is_h2(),
            Stop::Closing => true,
        };
        tokio::select! {
            _ = std::future::poll_fn(|cx| drive(serving.as_mut(), &streams, cx)) => break,
            _ = stopped.wait_for(must_stop), if !stopping => {
                stopping = true;
                serving.as_mut().graceful_shutdown();
            }
            _ = overdue.as_mut() => {
                // A request head started arriving and did not finish in time (slowloris).
                dispatcher.timed_out(ctx.conn.info.binding);
                break;
            }
            _ = check.tick() => {
                if !stopping && must_stop(&level.borrow()) {
                    // Going away, and its HTTP/2 preface arrived since.
                    stopping = true;
                    serving.as_mut().graceful_shutdown();
                }
                if head_watch.write_stalled(frame_timeout) {
                    // The peer does not read its answers: they would pile up (hyper stops
                    // reading meanwhile, so this is the only way out).
                    dispatcher.timed_out(ctx.conn.info.binding);
                    break;
                }
                if stopping && ctx.conn.in_flight() == 0 && head_watch.quiet(frame_timeout) {
                    // Told to close (idle, evicted, drained), no call left, and nothing moves:
                    // a peer that never sends its HTTP/2 preface, say, would keep it forever.
                    break;
                }
            }
        }
    }
    // `drive` runs what the connection handed over before it returns; nothing should be left,
    // but a request handed over after all is run (or spawned) rather than dropped unanswered.
    streams.run();
    ctx.abandon();
    registry.unregister(ctx.conn.id);
}

/// A future hyper hands over to run beside the connection (an HTTP/2 request's).
type StreamFuture = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The executor of one connection's HTTP/2 request futures. hyper hands each over while it
/// reads the connection's frames; they wait here until the connection has read all it could
/// (by then a request's body has usually arrived with its head), and are then polled once each,
/// in the connection's task ([`drive`]). Only one that has to wait is spawned. A call whose
/// handler completes at once (an `async fn` that does not wait) is answered without a task of
/// its own, and the answers of a batch leave together, in the connection's next write, instead
/// of one write each. A spawned future's next poll registers its task's waker, as every poll of
/// a future does (the same as `dispatch`'s first poll of a handler).
#[derive(Clone, Default)]
struct Deferred(Arc<Mutex<Vec<StreamFuture>>>);

impl<F> hyper::rt::Executor<F> for Deferred
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::pin(fut));
    }
}

impl Deferred {
    /// Polls each future handed over since the last time once, and spawns those that must
    /// wait. False if there were none.
    fn run(&self) -> bool {
        let batch = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        if batch.is_empty() {
            return false;
        }
        for fut in batch {
            // As a spawned task's panic would, one here drops the request's stream (a reset).
            poll_once_then_spawn(fut, "an HTTP/2 request's future");
        }
        true
    }
}

/// Polls the connection, then runs what it handed to `streams`, then polls it again so that
/// their answers are written now, until nothing new is handed over.
fn drive<C: std::future::Future>(
    mut conn: Pin<&mut C>,
    streams: &Deferred,
    cx: &mut std::task::Context<'_>,
) -> Poll<C::Output> {
    loop {
        let polled = conn.as_mut().poll(cx);
        if !streams.run() || polled.is_ready() {
            return polled;
        }
    }
}

/// Follows an HTTP connection's bytes: the request head an HTTP/1.1 connection is receiving,
/// so that one that starts arriving and does not finish within the frame timeout closes the
/// connection (a head "starts" when bytes arrive while no request is in progress; it ends when
/// the request reaches [`handle`]); output the peer does not take; and when bytes last moved.
/// (A client that pipelines its next request behind a streamed answer longer than the frame
/// timeout is closed too; keel's client and browsers do not pipeline.)
#[derive(Debug)]
pub(super) struct HeadWatch {
    epoch: std::time::Instant,
    /// Since when writing has been waiting for the peer to read, in ms since `epoch` (plus
    /// one); 0 while output flows.
    write_blocked: AtomicU64,
    /// When bytes last moved either way, in ms since `epoch`.
    last_io: AtomicU64,
    /// When bytes arrived with no request in progress, in ms since `epoch` (plus one); 0 for
    /// none.
    started: AtomicU64,
    /// Requests in progress.
    in_request: AtomicUsize,
    /// HTTP/2: its own framing, nothing to watch.
    h2: AtomicBool,
    /// Woken when a head starts.
    armed: Notify,
}

impl HeadWatch {
    fn new(h2: bool) -> HeadWatch {
        HeadWatch {
            epoch: std::time::Instant::now(),
            write_blocked: AtomicU64::new(0),
            last_io: AtomicU64::new(0),
            started: AtomicU64::new(0),
            in_request: AtomicUsize::new(0),
            h2: AtomicBool::new(h2),
            armed: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A write (or flush) took bytes (`true`) or had to wait for the peer (`false`).
    fn wrote(&self, progress: bool) {
        if progress {
            self.write_blocked.store(0, Ordering::Relaxed);
            self.last_io.store(self.now_ms(), Ordering::Relaxed);
        } else if self.write_blocked.load(Ordering::Relaxed) == 0 {
            self.write_blocked
                .store(self.now_ms() + 1, Ordering::Relaxed);
        }
    }

    /// Whether output has waited for the peer to read for `timeout` without any progress.
    fn write_stalled(&self, timeout: Duration) -> bool {
        let since = self.write_blocked.load(Ordering::Relaxed);
        since != 0 && (self.now_ms() + 1).saturating_sub(since) >= timeout.as_millis() as u64
    }

    /// Whether no byte moved either way for `timeout`.
    fn quiet(&self, timeout: Duration) -> bool {
        self.now_ms()
            .saturating_sub(self.last_io.load(Ordering::Relaxed))
            >= timeout.as_millis() as u64
    }

    /// Whether the connection speaks HTTP/2 (by ALPN, or its preface arrived).
    fn is_h2(&self) -> bool {
        self.h2.load(Ordering::Relaxed)
    }

    /// Bytes arrived (`first` is what was read).
    fn received(&self, first: &[u8]) {
        self.last_io.store(self.now_ms(), Ordering::Relaxed);
        if self.h2.load(Ordering::Relaxed) {
            return;
        }
        // HTTP/2's preface ("PRI * HTTP/2.0..."): no HTTP/1.1 request starts with `PRI`.
        if first.starts_with(b"PRI") {
            self.h2.store(true, Ordering::Relaxed);
            return;
        }
        if self.in_request.load(Ordering::Acquire) == 0 && self.started.load(Ordering::Relaxed) == 0
        {
            let now = self.epoch.elapsed().as_millis() as u64 + 1;
            self.started.store(now, Ordering::Release);
            self.armed.notify_one();
        }
    }

    /// What a write's outcome says about the peer reading.
    fn wrote_as(&self, polled: &Poll<std::io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(n)) => self.wrote(*n > 0),
            Poll::Pending => self.wrote(false),
            Poll::Ready(Err(_)) => {}
        }
    }

    /// A request's head is complete; the guard marks its end.
    fn request(self: &Arc<Self>) -> RequestGuard {
        self.in_request.fetch_add(1, Ordering::AcqRel);
        self.started.store(0, Ordering::Release);
        RequestGuard(self.clone())
    }

    /// Completes when a head has been arriving for longer than `timeout`.
    async fn overdue(&self, timeout: Duration) {
        loop {
            let started = self.started.load(Ordering::Acquire);
            if started == 0 {
                self.armed.notified().await;
                continue;
            }
            let due = self.epoch + Duration::from_millis(started - 1) + timeout;
            tokio::time::sleep_until(due.into()).await;
            if self.started.load(Ordering::Acquire) == started {
                return;
            }
        }
    }
}

/// A request in progress on a watched connection.
struct RequestGuard(Arc<HeadWatch>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.in_request.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's byte stream, reporting what arrives to its [`HeadWatch`].
struct Watched {
    io: Box<dyn Io>,
    watch: Arc<HeadWatch>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.received(&buf.filled()[before..]);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch.wrote_as(&polled);
        polled
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        match polled {
            Poll::Ready(Ok(())) => self.watch.wrote(true),
            Poll::Pending => self.watch.wrote(false),
            Poll::Ready(Err(_)) => {}
        }
        polled
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch.wrote_as(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// One request: routes it and answers.
pub(super) async fn handle<B: Received>(ctx: &Ctx, req: Request<B>) -> Response<Body> {
    let _in_request = ctx.watch.as_ref().map(|w| w.request());
    let conn = &ctx.conn;
    let h1 = req.version() <= Version::HTTP_11;
    if h1 && ctx.watch.is_some() && head_size(&req) > super::H1_MAX_BUF {
        // hyper bounds the buffer it reads a head into, not the head: one that arrived in a
        // single large read passes its check.
        return head_too_large();
    }
    let cors = ctx.settings.cors.as_ref();
    let origin = cors.and_then(|_| req.headers().get(ORIGIN).cloned());
    if let Some(answer) = cors.and_then(|c| c.preflight(req.method(), req.headers())) {
        return preflight_answer(answer);
    }
    let path = req.uri().path().to_string();
    let mut segments = path.strip_prefix('/').unwrap_or(&path).split('/');
    let mut response = match (segments.next(), segments.next(), segments.next()) {
        #[cfg(feature = "openapi")]
        (Some("openapi.json"), None, _) => {
            if req.method() == Method::GET {
                openapi(conn)
            } else {
                wrong_method(req.method(), &path, Method::GET)
            }
        }
        (Some(service), None, _) if !service.is_empty() => {
            if req.method() == Method::GET {
                describe(conn, service)
            } else {
                wrong_method(req.method(), &path, Method::GET)
            }
        }
        (Some(service), Some(operation), None) if !service.is_empty() && !operation.is_empty() => {
            if req.method() == Method::POST {
                call(ctx, req, service, operation).await
            } else {
                wrong_method(req.method(), &path, Method::POST)
            }
        }
        _ => error(
            Status::new(
                StatusCode::UnknownOperation,
                format!("nothing at `{path}`: calls are POST /{{Service}}/{{operation}}, descriptions GET /{{Service}}"),
            ),
            Format::Json,
        ),
    };
    if h1 && (conn.dispatcher.is_shutting_down() || conn.is_going_away()) {
        // A draining host (or one retiring this connection for its age) answers this one and
        // closes, so the client reconnects elsewhere.
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    if let Some(cors) = cors {
        cors.decorate(origin.as_ref(), response.headers_mut());
    }
    response
}

/// The answer to a CORS preflight: 204 with the headers that allow the call, or 403.
fn preflight_answer(answer: Result<::http::HeaderMap, String>) -> Response<Body> {
    match answer {
        Ok(headers) => {
            let mut response = Response::new(body::empty());
            *response.status_mut() = ::http::StatusCode::NO_CONTENT;
            *response.headers_mut() = headers;
            response
        }
        Err(msg) => {
            let mut response = error(Status::new(StatusCode::PermissionDenied, msg), Format::Json);
            *response.status_mut() = ::http::StatusCode::FORBIDDEN;
            response
        }
    }
}

/// `POST /{Service}/{operation}`: one call.
async fn call<B: Received>(
    ctx: &Ctx,
    req: Request<B>,
    service: &str,
    operation: &str,
) -> Response<Body> {
    let received = Instant::now();
    let Ctx {
        conn, next_call_id, ..
    } = ctx;
    let h1 = req.version() <= Version::HTTP_11;
    let op = conn.dispatcher.service(service).and_then(|s| {
        let desc = s.descriptor();
        desc.operation_index(operation).map(|i| &desc.operations[i])
    });
    let one_way = op.is_some_and(|op| op.one_way);
    let stream_request = op.is_some_and(|op| op.stream_request);
    // A streamed upload's body is the stream: its format is what it asks for with `Accept`.
    let format = match req.headers().get(CONTENT_TYPE).map(|v| v.to_str()) {
        _ if stream_request => accepted_format(&req),
        None => Format::Json,
        Some(Ok(ct)) => match ct.split(';').next().unwrap_or("").trim() {
            t if t.eq_ignore_ascii_case(JSON_CONTENT_TYPE) => Format::Json,
            t if t.eq_ignore_ascii_case(MSGPACK_CONTENT_TYPE) => Format::MsgPack,
            t if t.eq_ignore_ascii_case(POSTCARD_CONTENT_TYPE) => Format::Postcard,
            other => return unsupported_media_type(other),
        },
        Some(Err(_)) => return unsupported_media_type("(not text)"),
    };
    let deadline = match req.headers().get(DEADLINE_HEADER) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(ms) => Some(Duration::from_millis(ms)),
            None => {
                let msg =
                    format!("invalid {DEADLINE_HEADER} header {v:?}: expected whole milliseconds");
                return error(Status::new(StatusCode::BadRequest, msg), format);
            }
        },
    };
    let metadata = metadata_from_headers(req.headers());
    let compression = match req.headers().get(CONTENT_ENCODING).map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) if v.trim().eq_ignore_ascii_case("identity") => None,
        Some(Ok(v)) => match Compression::from_token(v) {
            Some(c) if !stream_request => Some(c),
            _ => return unsupported_encoding(v),
        },
        Some(Err(_)) => return unsupported_encoding("(not text)"),
    };
    let reply_codec = req
        .headers()
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .fold(None::<String>, |acc, v| {
            Some(acc.map_or(v.to_string(), |a| a + "," + v))
        })
        .and_then(|header| accept_encoding::pick(&header, &Compression::ALL));
    // From here the call counts as in flight, so a drain waits for it; a call that arrives
    // while the host drains is not processed, and says so.
    let Some(arrival) = conn.dispatcher.admit() else {
        return unprocessed(format);
    };
    let (format, body, stream, reserved) = if stream_request {
        // The body is the stream; the other parameters travel in the `keel-args` header.
        let args = match stream_args(&req, format) {
            Ok(args) => args,
            Err(status) => return error(status, format),
        };
        let drain = h1.then(|| (body::DRAIN_LIMIT, Arc::new(body::Draining::default())));
        let stream = body::received(req.into_body(), drain, |_| {});
        (format, args, stream, None)
    } else {
        let limit = ctx.settings.max_message_size;
        let drain = if h1 { body::DRAIN_LIMIT } else { 0 };
        // The body must arrive within the frame timeout, in memory the budgets allow.
        let deadline = tokio::time::Instant::now() + ctx.settings.frame_timeout;
        let read = body::read_limited(req.into_body(), limit, drain, Some((&ctx.budget, deadline)));
        let read = match tokio::time::timeout_at(deadline, read).await {
            Ok(read) => read,
            Err(_) => Err(ReadError::NoRoom),
        };
        let (body, reserved) = match read {
            Ok((b, r)) if b.is_empty() && format == Format::Json => (Bytes::from_static(b"{}"), r),
            Ok(read) => read,
            Err(ReadError::NoRoom) => {
                conn.dispatcher.timed_out(conn.info.binding);
                let msg = "the request body did not arrive in time, or the host had no room \
                           for it";
                let mut response = error(Status::new(StatusCode::BadRequest, msg), format);
                *response.status_mut() = ::http::StatusCode::REQUEST_TIMEOUT;
                if h1 {
                    response
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                return response;
            }
            Err(ReadError::TooLarge { size, drained }) => {
                let size = size.map_or_else(|| "more than".to_string(), |n| format!("{n}"));
                let msg = format!(
                    "request body of {size} bytes exceeds this host's limit of {limit} bytes"
                );
                let mut response = error(Status::new(StatusCode::TooLarge, msg), format);
                if h1 && !drained {
                    response
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                return response;
            }
            Err(ReadError::Broken(e)) => {
                let msg = format!("cannot read the request body: {e}");
                return error(Status::new(StatusCode::BadRequest, msg), format);
            }
        };
        (format, body, ByteStream::empty(), Some(reserved))
    };

    let call_id = next_call_id.fetch_add(1, Ordering::Relaxed);
    let (tx, answer) = oneshot::channel();
    // If hyper drops this future (the client went away, or reset the stream), stop the call.
    let mut guard = CancelOnDrop {
        conn,
        call_id,
        armed: true,
    };
    let incoming = Incoming {
        call_id,
        one_way,
        deadline,
        service,
        operation,
        metadata,
        compression,
        reply_codec,
        format,
        body: &body,
        stream,
        arrival,
        reply_to: ReplyTo::waiter(tx),
    };
    // The call starts now, with its body read: `received` is when its head arrived, and a
    // handler's (and a pool wait's) time must not include the upload.
    let mut clock = Instant::now();
    dispatch(conn, incoming, received, &mut clock, None);
    // The arguments are decoded: the body's memory is free again.
    drop(body);
    drop(reserved);
    let answer = answer.await;
    guard.armed = false;
    let (outcome, reply_metadata, encoding) = match answer {
        Ok(a) => (Ok(a.outcome), a.metadata, a.compression),
        Err(e) => (Err(e), Metadata::new(), None),
    };
    let mut response = match outcome {
        Ok(Ok(_)) if one_way => {
            let mut response = Response::new(body::empty());
            *response.status_mut() = ::http::StatusCode::ACCEPTED;
            set_status_header(&mut response, StatusCode::Ok);
            response
        }
        Ok(Ok(Payload::Body(reply))) => {
            let mut response = Response::new(body::full(reply));
            set_content_type(&mut response, content_type(format));
            set_status_header(&mut response, StatusCode::Ok);
            if let Some(codec) = encoding {
                let headers = response.headers_mut();
                headers.insert(CONTENT_ENCODING, HeaderValue::from_static(codec.as_str()));
                headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
            }
            response
        }
        Ok(Ok(Payload::Stream(stream))) => {
            let mut response = Response::new(body::streamed(stream));
            set_content_type(&mut response, STREAM_CONTENT_TYPE);
            set_status_header(&mut response, StatusCode::Ok);
            response
        }
        Ok(Err(status)) => error(status, format),
        Err(_) => {
            let status = Status::new(StatusCode::Internal, "the call ended without an answer");
            error(status, format)
        }
    };
    metadata_to_headers(&reply_metadata, response.headers_mut());
    response
}

/// The format a streamed-upload call asks for with `Accept` (JSON unless it names postcard).
fn accepted_format<B>(req: &Request<B>) -> Format {
    let names = |wanted: &str| {
        req.headers()
            .get_all(ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| {
                t.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case(wanted)
            })
    };
    if names(MSGPACK_CONTENT_TYPE) {
        Format::MsgPack
    } else if names(POSTCARD_CONTENT_TYPE) {
        Format::Postcard
    } else {
        Format::Json
    }
}

/// The non-stream parameters of a streamed-upload call, from the `keel-args` header: a JSON
/// object, or postcard in unpadded URL-safe base64. Absent: no parameters (`{}`).
fn stream_args<B>(req: &Request<B>, format: Format) -> Result<Bytes, Status> {
    let Some(v) = req.headers().get(ARGS_HEADER) else {
        return Ok(match format {
            Format::Postcard => Bytes::new(),
            // An empty map.
            Format::MsgPack => Bytes::from_static(&[0x80]),
            _ => Bytes::from_static(b"{}"),
        });
    };
    let bad = |why: &str| Status::new(StatusCode::BadRequest, format!("{ARGS_HEADER}: {why}"));
    match format {
        Format::Postcard | Format::MsgPack => super::args_decode(v.as_bytes())
            .map(Bytes::from)
            .ok_or_else(|| bad("expected binary arguments in unpadded URL-safe base64")),
        _ => Ok(Bytes::copy_from_slice(v.as_bytes())),
    }
}

/// Cancels a call whose request future is dropped before its answer arrived.
struct CancelOnDrop<'a> {
    conn: &'a Arc<ConnShared>,
    call_id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.cancel(self.call_id);
        }
    }
}

/// `GET /{Service}`: the contract as JSON.
fn describe(conn: &ConnShared, service: &str) -> Response<Body> {
    let Some(s) = conn.dispatcher.service(service) else {
        let msg = format!("no service `{service}` on this host");
        return error(Status::new(StatusCode::UnknownService, msg), Format::Json);
    };
    #[cfg(feature = "openapi")]
    let json = serde_json::to_vec(&crate::openapi::Description::of(s.descriptor()));
    #[cfg(not(feature = "openapi"))]
    let json = serde_json::to_vec(&Description::of(s.descriptor()));
    let json = json.expect("a description always serializes");
    let mut response = Response::new(body::full(Bytes::from(json)));
    set_content_type(&mut response, JSON_CONTENT_TYPE);
    set_status_header(&mut response, StatusCode::Ok);
    response
}

/// `GET /openapi.json`: the OpenAPI document of every contract the host serves.
#[cfg(feature = "openapi")]
fn openapi(conn: &ConnShared) -> Response<Body> {
    let json = crate::openapi::document(&conn.dispatcher.descriptors());
    let mut response = Response::new(body::full(Bytes::from(json)));
    set_content_type(&mut response, JSON_CONTENT_TYPE);
    set_status_header(&mut response, StatusCode::Ok);
    response
}

/// The description without JSON Schema (without the `openapi` feature): types as written in
/// the Rust contract.
#[cfg(not(feature = "openapi"))]
#[derive(Serialize)]
struct Description {
    service: &'static str,
    operations: Vec<OperationDescription>,
}

#[cfg(not(feature = "openapi"))]
#[derive(Serialize)]
struct OperationDescription {
    name: &'static str,
    params: Vec<ParamDescription>,
    returns: &'static str,
    fault: Option<&'static str>,
    one_way: bool,
    streamed: bool,
}

#[cfg(not(feature = "openapi"))]
#[derive(Serialize)]
struct ParamDescription {
    name: &'static str,
    #[serde(rename = "type")]
    ty: &'static str,
}

#[cfg(not(feature = "openapi"))]
impl Description {
    fn of(desc: &'static ServiceDescriptor) -> Description {
        Description {
            service: desc.name,
            operations: desc
                .operations
                .iter()
                .map(|op| OperationDescription {
                    name: op.name,
                    params: op
                        .params
                        .iter()
                        .map(|p| ParamDescription {
                            name: p.name,
                            ty: p.ty,
                        })
                        .collect(),
                    returns: op.returns,
                    fault: op.fault,
                    one_way: op.one_way,
                    streamed: op.streamed(),
                })
                .collect(),
        }
    }
}

/// About how many bytes `req`'s head took on the wire (request line and header fields).
fn head_size<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len()
        + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + " HTTP/1.1\r\n".len()
        + 1;
    let fields: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + ": \r\n".len())
        .sum();
    line + fields + "\r\n".len()
}

/// A request head over the HTTP/1.1 limit: 431, and the connection closes.
fn head_too_large() -> Response<Body> {
    let msg = format!(
        "the request head exceeds this host's limit of {} bytes",
        super::H1_MAX_BUF
    );
    let mut response = error(Status::new(StatusCode::BadRequest, msg), Format::Json);
    *response.status_mut() = ::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

fn wrong_method(method: &Method, path: &str, allowed: Method) -> Response<Body> {
    let msg = format!("{method} is not allowed on `{path}`; use {allowed}");
    let mut response = error(Status::new(StatusCode::BadRequest, msg), Format::Json);
    *response.status_mut() = ::http::StatusCode::METHOD_NOT_ALLOWED;
    let allowed = HeaderValue::from_str(allowed.as_str()).expect("a method is a header value");
    response.headers_mut().insert(ALLOW, allowed);
    response
}

fn unsupported_encoding(encoding: &str) -> Response<Body> {
    let msg = format!(
        "content encoding `{encoding}` is not supported: send zstd, gzip or identity (and a \
         streamed upload uncompressed)"
    );
    let mut response = error(Status::new(StatusCode::BadRequest, msg), Format::Json);
    *response.status_mut() = ::http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    response
        .headers_mut()
        .insert(ACCEPT_ENCODING, HeaderValue::from_static("zstd, gzip"));
    response
}

fn unsupported_media_type(content_type: &str) -> Response<Body> {
    // `curl -d` sends form data unless told otherwise: the most common way to get here.
    let hint = if content_type.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        " (with curl: add -H 'content-type: application/json', or use --json)"
    } else {
        ""
    };
    let msg = format!(
        "content type `{content_type}` is not supported: send {JSON_CONTENT_TYPE}, {MSGPACK_CONTENT_TYPE} or {POSTCARD_CONTENT_TYPE}{hint}"
    );
    let mut response = error(Status::new(StatusCode::BadRequest, msg), Format::Json);
    *response.status_mut() = ::http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    response
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: Option<serde_json::Value>,
    /// The status's details, base64 (as the `keel-status-details` header).
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<String>,
}

/// An error answer: the status code from the table, `keel-status`, the details header, the
/// status's metadata as headers, and the body in `format`.
fn error(status: Status, format: Format) -> Response<Body> {
    let code = status.code();
    let details = (code != StatusCode::Fault && !status.details().is_empty())
        .then(|| details_encode(status.details()));
    let (body, content_type) = match format {
        Format::Json => {
            let fault = (code == StatusCode::Fault).then(|| {
                serde_json::from_slice(status.details()).unwrap_or(serde_json::Value::Null)
            });
            let body = ErrorBody {
                code: code.as_str(),
                message: fault.is_none().then(|| status.message()),
                fault,
                details: details.clone(),
            };
            let json = serde_json::to_vec(&body).expect("an error body always serializes");
            (Bytes::from(json), JSON_CONTENT_TYPE)
        }
        _ if code == StatusCode::Fault => {
            (status.clone().into_wire_parts().0, content_type(format))
        }
        _ => (
            status.clone().into_wire_parts().0,
            "text/plain; charset=utf-8",
        ),
    };
    let mut response = Response::new(body::full(body));
    metadata_to_headers(status.metadata(), response.headers_mut());
    if let Some(details) = details.and_then(|d| HeaderValue::from_str(&d).ok()) {
        response.headers_mut().insert(DETAILS_HEADER, details);
    }
    *response.status_mut() = ::http::StatusCode::from_u16(http_status(code))
        .unwrap_or(::http::StatusCode::INTERNAL_SERVER_ERROR);
    set_content_type(&mut response, content_type);
    set_status_header(&mut response, code);
    if matches!(code, StatusCode::Busy | StatusCode::ShuttingDown) {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// The answer to a call that arrived while the host drains: 503 `shutting_down`, marked as not
/// processed, so a client may send it again on a new connection.
fn unprocessed(format: Format) -> Response<Body> {
    let msg = "the host is going away and did not process the call";
    let mut response = error(Status::new(StatusCode::ShuttingDown, msg), format);
    response
        .headers_mut()
        .insert(UNPROCESSED_HEADER, HeaderValue::from_static("1"));
    response
}

fn content_type(format: Format) -> &'static str {
    match format {
        Format::Postcard => POSTCARD_CONTENT_TYPE,
        Format::MsgPack => MSGPACK_CONTENT_TYPE,
        _ => JSON_CONTENT_TYPE,
    }
}

fn set_content_type(response: &mut Response<Body>, content_type: &'static str) {
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
}

fn set_status_header(response: &mut Response<Body>, code: StatusCode) {
    response
        .headers_mut()
        .insert(STATUS_HEADER, HeaderValue::from_static(code.as_str()));
}
