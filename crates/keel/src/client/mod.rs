//! The client side: a [`Channel`] is one logical connection to a host (or, [balanced](Channel::balanced),
//! to several), shared by every generated client (and every clone of one) built on it. Build one
//! with [`Channel::builder`] ([`ChannelBuilder`], each setting's default documented);
//! [`Channel::config`] reports the settings in force and [`Channel::stats`] what it did. An
//! [`Interceptor`] sees every call of a channel; [`RetryPolicy`] says how idempotent calls are
//! sent again after a failure, and [`HedgingPolicy`] (opt-in) how they are sent again, to
//! another host, while the first attempt is slow to answer; [`ReplyMetadata`] catches a
//! call's reply metadata.
//!
//! Inside keel, the channel owns its configuration and hands plain settings to its binding: on
//! keel-wire, calls are multiplexed over one connection; on HTTP, see `keel::http`.

mod balance;
mod builder;
pub(crate) mod call;
mod hedge;
mod intercept;
mod metrics;
mod pipeline;
mod retry;
mod session;

pub use crate::bindings::HttpVersion;
#[cfg(feature = "quic")]
pub use crate::bindings::QuicCongestion;
pub use crate::core::keepalive::Keepalive;
pub(crate) use crate::runtime::client::block_on;
pub use builder::{ChannelBuilder, ClientConfig};
pub use hedge::{HedgeDelay, HedgingPolicy};
pub use intercept::{AsyncInterceptor, ClientCall, Interceptor};
pub use retry::RetryPolicy;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use self::metrics::ChannelMetrics;
use self::pipeline::{answer_code, Record};
use crate::bindings::{self, Answer, Outgoing};
use crate::core::context::Context;
use crate::core::error::{Error, Kind};
use crate::core::metadata::Metadata;
use crate::core::status::StatusCode;
use crate::runtime::clock;
use std::future::Future;
use tokio_util::either::Either;
use tracing::Instrument as _;

/// A channel's connection and call counters, from [`Channel::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelStats {
    /// Connections opened (connected and, on keel-wire, past the handshake), since creation.
    pub connections_opened: u64,
    /// Of those, connections closed since (by either side, or broken).
    pub connections_closed: u64,
    /// Connections open now.
    pub connections_open: usize,
    /// Calls made on the channel, whatever their outcome (retries not counted).
    pub calls: u64,
    /// Retries sent (calls of idempotent operations sent again after a failure).
    pub retries: u64,
    /// Retries not sent because the retry budget was spent (the call failed instead).
    pub retries_refused_by_budget: u64,
    /// Hedges sent: attempts of hedged calls after their first (see [`HedgingPolicy`]).
    pub hedges: u64,
    /// Hedged calls whose answer came from a hedge, not from their first attempt.
    pub hedges_won: u64,
    /// Hedges not sent because the retry budget was spent.
    pub hedges_refused_by_budget: u64,
    /// `quic://`: calls sent as 0-RTT data on a resumed connection, and answered (only
    /// `#[keel(idempotent)]` calls without a request stream go early).
    pub calls_sent_early: u64,
}

/// Where a call's reply metadata lands (as grpc-go's `grpc.Header` call option): give it to a
/// generated client's `with_reply_metadata`, make the call, then read it. Shared by clones; a
/// later call through the same client replaces what an earlier one left.
///
/// ```no_run
/// # #[keel::contract] pub trait Echo { async fn echo(&self, s: String) -> String; }
/// # async fn example(client: EchoClient) -> Result<(), keel::Error> {
/// let reply = keel::client::ReplyMetadata::new();
/// client.with_reply_metadata(&reply).echo("hi".into()).await?;
/// println!("served by {:?}", reply.get().get("served-by"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ReplyMetadata {
    slot: Arc<Mutex<Metadata>>,
}

impl ReplyMetadata {
    /// An empty slot.
    pub fn new() -> ReplyMetadata {
        ReplyMetadata::default()
    }

    /// The metadata the last call stored (empty before any).
    pub fn get(&self) -> Metadata {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, metadata: Metadata) {
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = metadata;
    }
}

/// One logical connection to a keel host: connected by [`Channel::open`] (or lazily by the first
/// call), kept for the channel's life, reconnected on the next call after it breaks.
///
/// Cheap to clone; clones share the connection.
#[derive(Clone, Debug)]
pub struct Channel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("config", &self.config)
            .field("interceptors", &self.interceptors.len())
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: ClientConfig,
    interceptors: intercept::Interceptors,
    /// The binding (or a balanced channel's members): every call's attempts go through it.
    transport: bindings::Client,
    /// Calls made, for [`Channel::stats`].
    calls: AtomicU64,
    /// What bounds retries (see [`RetryPolicy`]).
    retry_budget: retry::RetryBudget,
    /// Retries sent, and retries the budget refused.
    retries: AtomicU64,
    retries_refused: AtomicU64,
    /// Hedges sent, hedged calls a hedge answered, and hedges the budget refused.
    hedges: AtomicU64,
    hedges_won: AtomicU64,
    hedges_refused: AtomicU64,
    /// The latency of calls hedged after a percentile of it, made on the first such call.
    latency: std::sync::OnceLock<hedge::LatencyRecorder>,
    /// Metric handles (calls, latency).
    metrics: ChannelMetrics,
    /// The URL the channel was built for (the calls' spans name it).
    url: String,
    /// The channel speaks gRPC (`grpc://`, `grpcs://`): its messages are protobuf.
    grpc: bool,
}

impl Channel {
    /// A builder for a channel to `url` (e.g. `tcp://127.0.0.1:7000`).
    pub fn builder(url: impl Into<String>) -> ChannelBuilder {
        ChannelBuilder::new(url.into(), None)
    }

    /// A builder for a channel that spreads its calls over several hosts: every address of
    /// every URL (a name that resolves to several addresses, such as a Kubernetes headless
    /// Service's, counts each). Calls go to the less busy of two hosts drawn at random (by
    /// calls in flight); a host whose connection fails is left out for a while (1 s, doubling
    /// up to 30 s while it keeps failing); names are resolved again every
    /// [`resolve_interval`](ChannelBuilder::resolve_interval) and after a connect failure.
    /// Every URL must have the same scheme; each host gets its own connection.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), keel::Error> {
    /// let channel = keel::Channel::balanced(["tcp://10.0.0.1:7000", "tcp://10.0.0.2:7000"])
    ///     .connect()
    ///     .await?;
    /// // Or every pod behind a headless Service:
    /// let channel = keel::Channel::balanced(["tcp://orders.shop.svc.cluster.local:7000"])
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn balanced<I, S>(urls: I) -> ChannelBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
        ChannelBuilder::new(urls.first().cloned().unwrap_or_default(), Some(urls))
    }

    /// A channel to `url` with default settings; nothing is connected yet.
    pub fn new(url: &str) -> Result<Channel, Error> {
        Channel::builder(url).build()
    }

    /// Creates a channel with default settings and opens it: the returned channel is connected
    /// and past the handshake.
    pub async fn connect(url: &str) -> Result<Channel, Error> {
        Channel::builder(url).connect().await
    }

    /// Connects and completes the handshake now, unless already connected. (HTTP/1.1: opens
    /// one pooled connection unless one is open.)
    pub async fn open(&self) -> Result<(), Error> {
        self.inner.transport.transport().open().await
    }

    /// Closes the connection. Calls in flight fail with a connection error; the next call
    /// reconnects.
    pub async fn close(&self) {
        self.inner.transport.transport().close();
    }

    /// Whether a connection is open right now.
    pub fn is_connected(&self) -> bool {
        self.inner.transport.transport().is_connected()
    }

    /// The settings this channel was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Connection and call counters: e.g. that a client's calls share one connection.
    pub fn stats(&self) -> ChannelStats {
        let counts = self.inner.transport.transport().counts();
        ChannelStats {
            connections_opened: counts.opened,
            connections_closed: counts.closed,
            connections_open: counts.open,
            calls: self.inner.calls.load(Ordering::Relaxed),
            retries: self.inner.retries.load(Ordering::Relaxed),
            retries_refused_by_budget: self.inner.retries_refused.load(Ordering::Relaxed),
            hedges: self.inner.hedges.load(Ordering::Relaxed),
            hedges_won: self.inner.hedges_won.load(Ordering::Relaxed),
            hedges_refused_by_budget: self.inner.hedges_refused.load(Ordering::Relaxed),
            calls_sent_early: counts.sent_early,
        }
    }

    /// A call's time budget with `options` (the channel's default unless they set one), and
    /// the largest message the channel accepts: what a stream of messages needs to read.
    pub(crate) fn stream_limits(
        &self,
        options: &call::CallOptions,
    ) -> (std::time::Duration, usize) {
        (
            self.budget(options),
            self.inner.config.max_message_size as usize,
        )
    }

    /// Sends one request and waits for its reply. The outer error is the caller's side (could
    /// not send, no reply in time); the inner `Status` is the host's answer.
    ///
    /// The deadline bounds the call until its reply arrives; a streamed reply then flows until
    /// it ends or the caller drops it. The call's clock starts here: call this where the call
    /// is awaited (a generated client does so when its own future is first polled).
    ///
    /// Not an `async fn`: a call with no span to enter and no incoming call to follow (nearly
    /// every call) is [`Channel::run`]'s future itself, one level of future fewer. Inlined, so
    /// that the caller's `.await` moves only the part of that future a fresh one has written
    /// (its captures, ~200 bytes), not all of it (~900): a function the optimizer cannot see
    /// into returns the whole. Callgrind, `icount.py keel-tcp-async` at 64 in flight: 4,715
    /// instructions a client call as an `async fn`, 4,691 not inlined, 4,620 inlined.
    #[inline(always)]
    pub(crate) fn call<'a>(
        &'a self,
        call: Outgoing,
        options: &'a call::CallOptions,
    ) -> impl Future<Output = Answer> + Send + 'a {
        let started = clock::now();
        let (service, operation) = (call.service, call.operation);
        // The call's span (see the crate docs, "Tracing"): interceptors run inside it, so one
        // can inject its trace context into the call's metadata. Nothing is formatted or
        // allocated unless a subscriber wants it. A call made for an incoming call is a child
        // of that call's span, wherever it runs (a task the handler spawned, say).
        macro_rules! call_span {
            ($($parent:tt)*) => {
                tracing::info_span!(
                    target: "keel::client",
                    $($parent)*
                    "keel.call",
                    otel.kind = "client",
                    otel.name = tracing::field::display(format_args!("{service}/{operation}")),
                    rpc.system = "keel",
                    rpc.service = service,
                    rpc.method = operation,
                    keel.binding = self.inner.metrics.binding(),
                    server.address = %self.inner.url,
                    rpc.code = tracing::field::Empty,
                )
            };
        }
        let span = match &options.context {
            Some(ctx) if !ctx.span().is_disabled() => call_span!(parent: ctx.span(),),
            _ => call_span!(),
        };
        if options.context.is_none() && span.is_disabled() {
            // Nothing to enter, and the call's future is not moved into an `Instrumented`.
            return Either::Left(self.run(call, options, started, Record::Metrics));
        }
        // Boxed: the span, and the race with the incoming call's cancellation, would weigh on
        // every other call's future.
        Either::Right(Box::pin(async move {
            let answer = match &options.context {
                Some(ctx) => {
                    self.run_within(ctx, call, options, started)
                        .instrument(span.clone())
                        .await
                }
                None => {
                    self.run(call, options, started, Record::Nothing)
                        .instrument(span.clone())
                        .await
                }
            };
            let code = answer_code(&answer);
            if !span.is_disabled() {
                span.record(
                    "rpc.code",
                    code.map_or("transport_error", StatusCode::as_str),
                );
            }
            self.inner.metrics.record(service, operation, started, code);
            answer
        }))
    }

    /// [`Channel::run`] for a call made for the incoming call `ctx`: not sent if `ctx` is
    /// cancelled or has no time left (after the margin), and ended, `cancelled`, when `ctx`
    /// is cancelled meanwhile. Ending it drops the attempt, which tells the host as a
    /// dropped call does: a Cancel frame on keel-wire, a reset stream on HTTP/2, a closed
    /// connection on HTTP/1.1.
    async fn run_within(
        &self,
        ctx: &Context,
        call: Outgoing,
        options: &call::CallOptions,
        started: std::time::Instant,
    ) -> Answer {
        let (service, operation) = (call.service, call.operation);
        let cancelled = || {
            Err(Error::new(
                Kind::Status(StatusCode::Cancelled),
                format!(
                    "{service}.{operation}: the call it was made for ({}.{}) was cancelled",
                    ctx.service(),
                    ctx.operation()
                ),
            ))
        };
        if ctx.is_cancelled() {
            return cancelled();
        }
        let margin = self.inner.config.propagation_margin;
        if ctx.remaining().is_some_and(|left| left <= margin) {
            return Err(Error::new(
                Kind::Timeout,
                format!(
                    "{service}.{operation}: the call it was made for ({}.{}) has no time left",
                    ctx.service(),
                    ctx.operation()
                ),
            ));
        }
        tokio::select! {
            biased;
            () = ctx.cancelled() => cancelled(),
            answer = self.run(call, options, started, Record::Nothing) => answer,
        }
    }
}
