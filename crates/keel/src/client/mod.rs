//! The client side: a [`Channel`] is one logical connection to a host, shared by every client
//! (and every clone of a client) built on it. It owns its configuration ([`ChannelBuilder`])
//! and hands plain settings to its binding: on keel-wire, calls are multiplexed over one
//! connection; on HTTP, see [`crate::http`].

mod balance;
mod call;
mod intercept;
mod metrics;
mod pipeline;
mod retry;
mod rt;

pub use call::{call, call_fallible, call_one_way, call_stream, call_stream_fallible};
pub use intercept::{ClientCall, ClientInterceptor};
pub use retry::RetryPolicy;
pub(crate) use rt::block_on;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::metrics::ChannelMetrics;
use crate::bindings::{self, Answer, ClientSettings, HttpVersion, Outgoing};
use crate::core::clock;
use crate::core::compress::Compression;
use crate::core::error::Error;
use crate::core::metadata::Metadata;
use crate::core::status::StatusCode;
use crate::transport::Endpoint;
use tracing::Instrument as _;

/// A channel's settings, as [`ChannelBuilder`] collects them and [`Channel::config`] reports
/// them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Deadline for each call unless the call sets its own. Default: 60 s.
    pub deadline: Duration,
    /// Limit for connecting plus the handshake. Default: 10 s.
    pub connect_timeout: Duration,
    /// Largest reply body this client accepts. Default: 4 MiB.
    pub max_message_size: u32,
    /// Largest flow-control window one streamed download may grow to (it starts at 256 KiB
    /// and grows toward the link's bandwidth-delay product). Default: 8 MiB.
    pub max_stream_window: u32,
    /// Whom to trust on TLS endpoints (`tcps://`, `https://`), and the client's certificate for
    /// mutual TLS. Default: `None`, which trusts the system's root certificates (loaded once per
    /// process, on the first TLS connection).
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::ClientTls>,
    /// The HTTP version spoken on `http://` and `https://` endpoints. Default:
    /// [`HttpVersion::Auto`].
    pub http_version: HttpVersion,
    /// HTTP/1.1: the most connections open at once (each carries one call at a time); a call
    /// that finds them all busy waits for one. Default: 32.
    pub http_max_connections: usize,
    /// Metadata sent with every call (a call's own metadata replaces values of the same
    /// keys). Default: none.
    pub metadata: Metadata,
    /// Compression for requests of at least `compress_above` bytes (when it makes them
    /// smaller), and asked of the host for replies. Default: `None` (calls and replies travel
    /// uncompressed; compression costs CPU that a fast network does not repay).
    pub compression: Option<Compression>,
    /// The smallest request body worth compressing. Default: 1 KiB.
    pub compress_above: usize,
    /// keel-wire: a connection nothing arrived on for `interval` is pinged (keeping NAT and
    /// load-balancer state alive), and so is one a call starts on after nothing arrived for
    /// `timeout` (the ping goes with the call). If nothing arrives within `timeout` after a
    /// ping (at least four round trips), the host or the path to it is gone: the connection
    /// closes, its calls fail `Unavailable` at once instead of at their deadlines, and the
    /// next call opens a new connection. HTTP/2 connections ping on the same interval and
    /// timeout (hyper's keepalive; no ping goes with a call); HTTP/1.1 cannot ping and relies
    /// on TCP keepalive. `None` turns it off. Default: 20 s interval (below the
    /// idle timeouts of common NATs and L4 load balancers, which are minutes: AWS NLB 350 s,
    /// Azure Load Balancer 4 min), 1 s timeout.
    pub keepalive: Option<crate::Keepalive>,
    /// How calls of `#[keel(idempotent)]` operations are retried after failures that say the
    /// host could not take them (`Unavailable`, `Busy`, `ShuttingDown`, a lost connection),
    /// and the budget that keeps retries from amplifying an outage. Calls of other operations
    /// are never sent again once they may have reached a host. Default:
    /// [`RetryPolicy::default`] (3 attempts, 10 ms → 1 s backoff with jitter, retries at most
    /// 10 % of calls plus 10 a second).
    pub retry: RetryPolicy,
    /// A [balanced](Channel::balanced) channel resolves its URLs' names again this often (and
    /// after a connect failure). Default: 30 s.
    pub resolve_interval: Duration,
}

/// The client's keepalive default: see [`ClientConfig::keepalive`].
const CLIENT_KEEPALIVE: crate::Keepalive = crate::Keepalive {
    interval: Duration::from_secs(20),
    timeout: Duration::from_secs(1),
};

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            deadline: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_message_size: keel_wire::DEFAULT_MAX_MESSAGE_SIZE,
            max_stream_window: keel_wire::DEFAULT_MAX_WINDOW,
            #[cfg(feature = "tls")]
            tls: None,
            http_version: HttpVersion::Auto,
            http_max_connections: 32,
            metadata: Metadata::new(),
            compression: None,
            compress_above: 1024,
            keepalive: Some(CLIENT_KEEPALIVE),
            retry: RetryPolicy::default(),
            resolve_interval: Duration::from_secs(30),
        }
    }
}

impl ClientConfig {
    /// What the bindings need of these settings.
    fn settings(&self, binding: &'static str) -> ClientSettings {
        ClientSettings {
            connect_timeout: self.connect_timeout,
            max_message_size: self.max_message_size,
            max_stream_window: self.max_stream_window,
            #[cfg(feature = "tls")]
            tls: self.tls.clone(),
            #[cfg(not(feature = "tls"))]
            tls: (),
            http_version: self.http_version,
            http_max_connections: self.http_max_connections,
            keepalive: self.keepalive,
            reconnects: ChannelMetrics::reconnects(binding),
        }
    }
}

/// Builds a [`Channel`]: the host's URL, then settings, then [`ChannelBuilder::build`] (nothing
/// connected yet) or [`ChannelBuilder::connect`] (connected and past the handshake). Every
/// setter documents its default.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn example() -> Result<(), keel::Error> {
/// let channel = keel::Channel::builder("http://127.0.0.1:7000")
///     .deadline(Duration::from_secs(5))
///     .http_version(keel::HttpVersion::Http2)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ChannelBuilder {
    url: String,
    /// With [`Channel::balanced`]: every URL, `url` first.
    balanced: Option<Vec<String>>,
    config: ClientConfig,
    interceptors: Vec<Arc<dyn ClientInterceptor>>,
}

impl std::fmt::Debug for ChannelBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelBuilder")
            .field("url", &self.url)
            .field("balanced", &self.balanced)
            .field("config", &self.config)
            .field("interceptors", &self.interceptors.len())
            .finish()
    }
}

impl ChannelBuilder {
    /// Adds metadata sent with every call: a text value for `key` (see [`Metadata::insert`]
    /// for the rules; binary values: [`ChannelBuilder::metadata`]). Default: none.
    pub fn default_metadata(mut self, key: &str, value: &str) -> Result<Self, Error> {
        self.config
            .metadata
            .insert(key, value)
            .map_err(|e| Error::new(crate::core::error::Kind::Config, e.to_string()))?;
        Ok(self)
    }

    /// Compresses requests of at least [`compress_above`](ChannelBuilder::compress_above) bytes
    /// with `codec` when that makes them smaller, and asks the host to compress its replies
    /// (keel-wire: zstd; HTTP: `Accept-Encoding: zstd, gzip`). Streamed bodies are never
    /// compressed. Default: off.
    pub fn compression(mut self, codec: Compression) -> Self {
        self.config.compression = Some(codec);
        self
    }

    /// The smallest request body worth compressing (with [`ChannelBuilder::compression`]).
    /// Default: 1 KiB.
    pub fn compress_above(mut self, bytes: usize) -> Self {
        self.config.compress_above = bytes;
        self
    }

    /// Sets the metadata sent with every call. Default: none.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.config.metadata = metadata;
        self
    }

    /// Adds an interceptor that sees every call of this channel, after those added before it
    /// (see [`ClientInterceptor`]). Default: none.
    pub fn interceptor<I: ClientInterceptor>(mut self, interceptor: I) -> Self {
        self.interceptors.push(Arc::new(interceptor));
        self
    }

    /// Deadline for each call unless the call sets its own. Default: 60 s.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.config.deadline = deadline;
        self
    }

    /// Limit for connecting plus the handshake. Default: 10 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Largest reply body this client accepts. Default: 4 MiB.
    pub fn max_message_size(mut self, bytes: u32) -> Self {
        self.config.max_message_size = bytes;
        self
    }

    /// Largest flow-control window one streamed download may grow to. Default: 8 MiB.
    pub fn max_stream_window(mut self, bytes: u32) -> Self {
        self.config.max_stream_window = bytes;
        self
    }

    /// Whom to trust on TLS endpoints, and the client's certificate for mutual TLS. Default:
    /// the system's root certificates, no client certificate.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::ClientTls) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// The HTTP version spoken on `http://` and `https://` endpoints. Default:
    /// [`HttpVersion::Auto`].
    pub fn http_version(mut self, version: HttpVersion) -> Self {
        self.config.http_version = version;
        self
    }

    /// keel-wire and HTTP/2: pings on quiet connections and the verdict on a silent host (see
    /// [`ClientConfig::keepalive`]); `None` turns it off. Default: 20 s interval, 1 s timeout.
    pub fn keepalive(mut self, keepalive: Option<crate::Keepalive>) -> Self {
        self.config.keepalive = keepalive;
        self
    }

    /// How calls of `#[keel(idempotent)]` operations are retried (see
    /// [`ClientConfig::retry`]); [`RetryPolicy::disabled`] turns retries off. Default:
    /// [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// HTTP/1.1: the most connections open at once. Default: 32.
    pub fn http_max_connections(mut self, n: usize) -> Self {
        self.config.http_max_connections = n;
        self
    }

    /// [`Channel::balanced`]: how often the URLs' names are resolved again (they also are
    /// after a connect failure). Default: 30 s.
    pub fn resolve_interval(mut self, interval: Duration) -> Self {
        self.config.resolve_interval = interval;
        self
    }

    /// The channel; nothing is connected yet. Fails for an invalid URL or a binding this build
    /// leaves out, and for a balanced channel over URLs of different schemes.
    pub fn build(self) -> Result<Channel, Error> {
        let urls = self
            .balanced
            .clone()
            .unwrap_or_else(|| vec![self.url.clone()]);
        if urls.is_empty() {
            return Err(Error::new(
                crate::core::error::Kind::Config,
                "a balanced channel needs at least one URL",
            ));
        }
        let mut endpoints = Vec::with_capacity(urls.len());
        for url in &urls {
            let endpoint = Endpoint::parse(url)?;
            #[cfg(not(feature = "tls"))]
            if endpoint.is_tls() {
                return Err(crate::transport::tls_feature_needed(&endpoint));
            }
            if let Some(first) = endpoints.first() {
                let first: &Endpoint = first;
                if first.scheme() != endpoint.scheme() {
                    return Err(Error::new(
                        crate::core::error::Kind::Config,
                        format!(
                            "a balanced channel's URLs share one scheme: `{}` and `{url}` differ",
                            urls[0]
                        ),
                    ));
                }
            }
            endpoints.push(endpoint);
        }
        let binding = endpoints[0].scheme();
        let settings = self.config.settings(binding);
        let transport = match self.balanced {
            None => bindings::client(endpoints.remove(0), settings)?,
            Some(_) => bindings::Client::Other(Box::new(balance::Balanced(Arc::new(
                balance::Balancer::new(endpoints, settings, self.config.resolve_interval),
            )))),
        };
        Ok(self.finish(transport, binding))
    }

    /// The channel over `transport`, a binding of scheme `binding`.
    fn finish(self, transport: bindings::Client, binding: &'static str) -> Channel {
        Channel {
            inner: Arc::new(Inner {
                retry_budget: retry::RetryBudget::new(&self.config.retry),
                retries: AtomicU64::new(0),
                retries_refused: AtomicU64::new(0),
                config: self.config,
                interceptors: self.interceptors,
                transport,
                calls: AtomicU64::new(0),
                metrics: ChannelMetrics::new(binding),
                url: self.url,
            }),
        }
    }

    /// The channel with its calls carried by `transport` (the attempt loop's tests).
    #[cfg(test)]
    pub(crate) fn build_on(self, transport: Box<dyn bindings::ClientTransport>) -> Channel {
        self.finish(bindings::Client::Other(transport), "test")
    }

    /// The channel, connected and past the handshake.
    pub async fn connect(self) -> Result<Channel, Error> {
        let channel = self.build()?;
        channel.open().await?;
        Ok(channel)
    }
}

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
}

/// Per-call options carried by a generated client (see its `with_deadline`, `with_metadata`
/// and `with_reply_metadata`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CallOptions {
    deadline: Option<Duration>,
    metadata: Metadata,
    reply: Option<ReplyMetadata>,
}

impl CallOptions {
    /// These options with a per-call deadline.
    pub fn with_deadline(mut self, deadline: Duration) -> CallOptions {
        self.deadline = Some(deadline);
        self
    }

    /// These options with request metadata (merged over the channel's defaults).
    pub fn with_metadata(mut self, metadata: Metadata) -> CallOptions {
        self.metadata = metadata;
        self
    }

    /// These options with a place the reply metadata of each call is stored in.
    pub fn with_reply_metadata(mut self, slot: &ReplyMetadata) -> CallOptions {
        self.reply = Some(slot.clone());
        self
    }
}

/// Where a call's reply metadata lands (as grpc-go's `grpc.Header` call option): give it to a
/// generated client's `with_reply_metadata`, make the call, then read it. Shared by clones; a
/// later call through the same client replaces what an earlier one left.
///
/// ```no_run
/// # #[keel::contract] pub trait Echo { async fn echo(&self, s: String) -> String; }
/// # async fn example(client: EchoClient) -> Result<(), keel::Error> {
/// let reply = keel::ReplyMetadata::new();
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
    interceptors: Vec<Arc<dyn ClientInterceptor>>,
    /// The binding (or a balanced channel's members): every call's attempts go through it.
    transport: bindings::Client,
    /// Calls made, for [`Channel::stats`].
    calls: AtomicU64,
    /// What bounds retries (see [`RetryPolicy`]).
    retry_budget: retry::RetryBudget,
    /// Retries sent, and retries the budget refused.
    retries: AtomicU64,
    retries_refused: AtomicU64,
    /// Metric handles (calls, latency).
    metrics: ChannelMetrics,
    /// The URL the channel was built for (the calls' spans name it).
    url: String,
}

impl Channel {
    /// A builder for a channel to `url` (e.g. `tcp://127.0.0.1:7000`).
    pub fn builder(url: impl Into<String>) -> ChannelBuilder {
        ChannelBuilder {
            url: url.into(),
            balanced: None,
            config: ClientConfig::default(),
            interceptors: Vec::new(),
        }
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
        ChannelBuilder {
            url: urls.first().cloned().unwrap_or_default(),
            balanced: Some(urls),
            config: ClientConfig::default(),
            interceptors: Vec::new(),
        }
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
        }
    }

    /// Sends one request and waits for its reply. The outer error is the caller's side (could
    /// not send, no reply in time); the inner `Status` is the host's answer.
    ///
    /// The deadline bounds the call until its reply arrives; a streamed reply then flows until
    /// it ends or the caller drops it.
    pub(crate) async fn call(&self, call: Outgoing, options: &CallOptions) -> Answer {
        let (service, operation) = (call.service, call.operation);
        // The call's span (see the crate docs, "Tracing"): interceptors run inside it, so one
        // can inject its trace context into the call's metadata. Nothing is formatted or
        // allocated unless a subscriber wants it.
        let span = tracing::info_span!(
            target: "keel::client",
            "keel.call",
            otel.kind = "client",
            otel.name = tracing::field::display(format_args!("{service}/{operation}")),
            rpc.system = "keel",
            rpc.service = service,
            rpc.method = operation,
            keel.binding = self.inner.metrics.binding(),
            server.address = %self.inner.url,
            rpc.code = tracing::field::Empty,
        );
        let started = clock::now();
        let answer = if span.is_disabled() {
            // No subscriber wants it: nothing to enter, and the call's future is not moved
            // into an `Instrumented` (a copy of it per call).
            self.run(call, options, started).await
        } else {
            Box::pin(self.run(call, options, started).instrument(span.clone())).await
        };
        let code = match &answer {
            Ok(Ok(_)) => Some(StatusCode::Ok),
            Ok(Err(status)) => Some(status.code()),
            Err(e) => e.status_code(),
        };
        if !span.is_disabled() {
            span.record(
                "rpc.code",
                code.map_or("transport_error", StatusCode::as_str),
            );
        }
        self.inner.metrics.record(service, operation, started, code);
        answer
    }
}
