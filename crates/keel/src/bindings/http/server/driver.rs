//! One HTTP connection's task: hyper's server (HTTP/1.1 and HTTP/2), the HTTP/2 request futures
//! run in the connection's own task, the host's stop signal, and the IO watchdog's timeouts.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::watch;

use super::io_watch::{HeadWatch, Watched};
use super::unread::handle_checked;
use super::{Ctx, Stop};
use crate::bindings::{HostConnRegistry, ServerSettings};
use crate::dispatch::{poll_once_then_spawn, Dispatcher, HostConnInfo};
use crate::transport::SecuredStream;

/// The fewest concurrent streams an HTTP/2 connection is offered.
const H2_MIN_STREAMS: usize = 128;

/// Serves one accepted HTTP connection until it closes.
pub(crate) async fn serve(
    connected: SecuredStream,
    dispatcher: Arc<Dispatcher>,
    registry: &dyn HostConnRegistry,
    settings: Arc<ServerSettings>,
    info: HostConnInfo,
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
    builder.http1().max_buf_size(super::super::H1_MAX_BUF);
    builder
        .http2()
        .max_concurrent_streams(max_streams)
        .max_header_list_size(super::super::H2_MAX_HEADER_LIST)
        .initial_stream_window_size(super::super::H2_STREAM_WINDOW)
        .initial_connection_window_size(super::super::H2_CONNECTION_WINDOW)
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
            async move { Ok::<_, Infallible>(handle_checked(&ctx, req).await) }
        })
    };
    // Unless ALPN agreed on one, HTTP/1.1 and HTTP/2 share the port: a first line that is
    // neither closes the connection (`first_line`).
    let agreed = matches!(connected.alpn.as_deref(), Some(b"h2" | b"http/1.1"));
    let io = Watched::new(connected.io, head_watch.clone(), !agreed);
    // This task polls the connection: woken, it flushes (see `cut`).
    std::future::poll_fn(|cx| {
        head_watch.set_connection_task(cx.waker());
        Poll::Ready(())
    })
    .await;
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
            // The stop signal first: it fires once, judges nothing, and is then off (it only
            // starts hyper's graceful shutdown); polled after the connection, a flood whose
            // reading used up the task's cooperative budget (tokio's, which the watch channel
            // obeys) could put it off for as long as the flood lasts. Then the connection, then
            // the timers: after a pause in which this task did not run (a loaded machine; a
            // new socket, whose readiness tokio learns only at the reactor's next turn), what
            // arrived is read and what waited is written before the watchdog judges, so that
            // the time the peer was not the one stalling does not count against it. (Only what
            // the reactor has seen by then: a write tokio still reports pending counts as
            // before.)
            biased;
            _ = stopped.wait_for(must_stop), if !stopping => {
                stopping = true;
                serving.as_mut().graceful_shutdown();
            }
            _ = std::future::poll_fn(|cx| drive(serving.as_mut(), &streams, cx)) => break,
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
    // `drive` runs what the connection handed over before it returns; nothing should be left
    // (but after the connection ended mid-batch), and a request handed over after all is run
    // (or spawned) rather than dropped unanswered.
    while streams.run() {}
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
///
/// A large batch is run a part at a time ([`run_next`]), the connection written between parts:
/// run whole, every call a client pipelines would travel as one batch, each side idle while the
/// other works on it; split, the client works on the first answers while the host runs the
/// rest (docs/performance.md, "HTTP").
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
    /// Polls the next part ([`run_next`]) of the futures handed over, oldest first, once each,
    /// and spawns those that must wait. False if none was waiting.
    fn run(&self) -> bool {
        let batch: Vec<StreamFuture> = {
            let mut waiting = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let n = run_next(waiting.len());
            waiting.drain(..n).collect()
        };
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

/// Fewer request futures than this waiting are run together.
const SPLIT_FROM: usize = 16;

/// The most request futures run between two writes of the connection.
const RUN_AT_MOST: usize = 32;

/// How many of `waiting` request futures to run before the connection writes their answers:
/// all of a small batch, half of a larger one, and never more than [`RUN_AT_MOST`]. Measured
/// with `keel-lab peers-latency --system keel-h2` (docs/performance.md, "HTTP"): at 16, 64 and
/// 128 calls in flight, answers written by halves (or parts of 32) made 1.3-1.7 x the calls a
/// second of one write a batch; parts of 8 cost more in system calls than they gained.
fn run_next(waiting: usize) -> usize {
    if waiting < SPLIT_FROM {
        waiting
    } else {
        waiting.div_ceil(2).min(RUN_AT_MOST)
    }
}

/// Polls the connection, then runs what it handed to `streams` (a part at a time), then polls
/// it again so that their answers are written now, until nothing new is handed over.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_batch_runs_whole_and_a_large_one_by_parts() {
        assert_eq!(run_next(0), 0);
        assert_eq!(run_next(1), 1);
        assert_eq!(run_next(SPLIT_FROM - 1), SPLIT_FROM - 1);
        assert_eq!(run_next(SPLIT_FROM), SPLIT_FROM / 2);
        assert_eq!(run_next(41), 21);
        assert_eq!(run_next(64), RUN_AT_MOST);
        assert_eq!(run_next(1000), RUN_AT_MOST);
    }

    #[test]
    fn the_connection_writes_between_the_parts_of_a_batch() {
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
        let ran = Arc::new(AtomicUsize::new(0));
        let streams = Deferred::default();
        // How many request futures had run each time the connection was polled (which is when
        // it writes their answers). Its first poll reads 64 requests.
        let mut polled_after = Vec::new();
        {
            let conn = std::future::poll_fn(|_| {
                if polled_after.is_empty() {
                    for _ in 0..64 {
                        let ran = ran.clone();
                        hyper::rt::Executor::execute(&streams, async move {
                            ran.fetch_add(1, Relaxed);
                        });
                    }
                }
                polled_after.push(ran.load(Relaxed));
                Poll::<()>::Pending
            });
            let mut conn = std::pin::pin!(conn);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(drive(conn.as_mut(), &streams, &mut cx).is_pending());
        }
        assert_eq!(polled_after, [0, 32, 48, 56, 64]);
        assert_eq!(ran.load(Relaxed), 64);
    }
}
