//! [`ChannelBuilder`] and the [`ClientConfig`] it collects: every setting of a channel, each
//! with a setter and a documented default.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use super::intercept::Interceptors;
use super::metrics::ChannelMetrics;
#[cfg(feature = "quic")]
use super::QuicCongestion;
use super::{
    balance, retry, AsyncInterceptor, Channel, HedgingPolicy, HttpVersion, Inner, Interceptor,
    Keepalive, RetryPolicy,
};
use crate::bindings::{self, ClientSettings};
use crate::core::compress::Compression;
use crate::core::error::Error;
use crate::core::metadata::Metadata;
use crate::transport::Endpoint;

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
    pub keepalive: Option<Keepalive>,
    /// `quic://`: the congestion controller of what the client sends. Default:
    /// [`QuicCongestion::Bbr`].
    #[cfg(feature = "quic")]
    pub quic_congestion: QuicCongestion,
    /// How calls of `#[keel(idempotent)]` operations are retried after failures that say the
    /// host could not take them (`Unavailable`, `Busy`, `ShuttingDown`, a lost connection),
    /// and the budget that keeps retries from amplifying an outage. Calls of other operations
    /// are never sent again once they may have reached a host. Default:
    /// [`RetryPolicy::default`] (3 attempts, 10 ms → 1 s backoff with jitter, retries at most
    /// 10 % of calls plus 10 a second).
    pub retry: RetryPolicy,
    /// How calls of `#[keel(idempotent)]` operations (without a request stream or a streamed
    /// reply) are hedged: sent again while the first attempt is unanswered, to another host
    /// of a balanced channel, the first answer winning (see [`HedgingPolicy`]). A hedged call
    /// is not retried by [`retry`](ClientConfig::retry) (hedges spend the same budget).
    /// Default: `None` (no hedging).
    pub hedging: Option<HedgingPolicy>,
    /// Hedging policies of named operations, over [`hedging`](ClientConfig::hedging): each
    /// name is an operation's (`get`) or a service's and an operation's (`Store.get`).
    /// Default: none.
    pub hedging_operations: Vec<(String, HedgingPolicy)>,
    /// A [balanced](Channel::balanced) channel resolves its URLs' names again this often (and
    /// after a connect failure). Default: 30 s.
    pub resolve_interval: Duration,
    /// A call made with a handler's context (a generated client's `with_context`) gets
    /// the time the incoming call has left less this, so that the handler still has this
    /// long to answer its own caller (a fallback, or the downstream's error) when the
    /// downstream call times out. Default: zero, as gRPC propagates deadlines: the incoming
    /// deadline is already late by the network's one-way delay (the host counts the time
    /// left from when the call arrived), so a margin of a few milliseconds mostly cuts a tight
    /// budget; set one when the handler has something to do after a downstream timeout.
    pub propagation_margin: Duration,
    /// The request metadata keys a call made with a handler's context copies from the
    /// incoming call (every value of each; keys the call's own metadata sets win, and the
    /// channel's interceptors run after, so an OpenTelemetry interceptor writes a
    /// `traceparent` of its own). Default: `x-request-id`, and the W3C trace context
    /// `traceparent` and `tracestate`, so that a trace keeps its id across a hop that has no
    /// tracing pipeline of its own.
    pub propagated_metadata: Vec<String>,
}

/// The default of [`ClientConfig::propagated_metadata`].
const PROPAGATED_METADATA: [&str; 3] = ["x-request-id", "traceparent", "tracestate"];

/// The client's keepalive default: see [`ClientConfig::keepalive`].
const CLIENT_KEEPALIVE: Keepalive = Keepalive::new(Duration::from_secs(20), Duration::from_secs(1));

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
            #[cfg(feature = "quic")]
            quic_congestion: QuicCongestion::Bbr,
            retry: RetryPolicy::default(),
            hedging: None,
            hedging_operations: Vec::new(),
            resolve_interval: Duration::from_secs(30),
            propagation_margin: Duration::ZERO,
            propagated_metadata: PROPAGATED_METADATA.map(String::from).to_vec(),
        }
    }
}

impl ClientConfig {
    /// The hedging policy of calls of `service.operation` (see
    /// [`hedging_operations`](ClientConfig::hedging_operations)), if any.
    #[inline]
    pub(crate) fn hedging_of(&self, service: &str, operation: &str) -> Option<HedgingPolicy> {
        if self.hedging_operations.is_empty() {
            return self.hedging;
        }
        let named = |name: &str| match name.split_once('.') {
            Some((s, o)) => s == service && o == operation,
            None => name == operation,
        };
        self.hedging_operations
            .iter()
            .rev()
            .find(|(name, _)| named(name))
            .map(|(_, policy)| *policy)
            .or(self.hedging)
    }

    /// What the bindings need of these settings.
    pub(super) fn settings(&self, binding: &'static str) -> ClientSettings {
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
            keepalive: self.keepalive.map(Into::into),
            #[cfg(feature = "quic")]
            quic_congestion: self.quic_congestion,
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
///     .http_version(keel::client::HttpVersion::Http2)
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
    interceptors: Interceptors,
    /// The first setting refused on the way (an invalid metadata key or value), reported by
    /// [`ChannelBuilder::build`] so that the chain of setters never breaks.
    refused: Option<String>,
}

impl std::fmt::Debug for ChannelBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelBuilder")
            .field("url", &self.url)
            .field("balanced", &self.balanced)
            .field("config", &self.config)
            .field("interceptors", &self.interceptors.len())
            .field("refused", &self.refused)
            .finish()
    }
}

impl ChannelBuilder {
    /// A builder with every default, for `url` (and, balanced, every URL).
    pub(super) fn new(url: String, balanced: Option<Vec<String>>) -> ChannelBuilder {
        ChannelBuilder {
            url,
            balanced,
            config: ClientConfig::default(),
            interceptors: Interceptors::default(),
            refused: None,
        }
    }

    /// Adds metadata sent with every call: a text value for `key` (see [`Metadata::insert`]
    /// for the rules; binary values: [`ChannelBuilder::metadata`]). An invalid key or value
    /// makes [`build`](ChannelBuilder::build) (and `connect`) fail with a `Config` error naming
    /// it. Default: none.
    pub fn default_metadata(mut self, key: &str, value: &str) -> Self {
        if let Err(e) = self.config.metadata.insert(key, value) {
            self.refused
                .get_or_insert_with(|| format!("default metadata `{key}`: {e}"));
        }
        self
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
    /// (see [`Interceptor`]). Default: none.
    pub fn interceptor<I: Interceptor>(mut self, interceptor: I) -> Self {
        self.interceptors.sync.push(Arc::new(interceptor));
        self
    }

    /// Adds an interceptor whose `before` may wait (see [`AsyncInterceptor`]): it sees every
    /// call of this channel after every synchronous interceptor, and after the async ones added
    /// before it. Default: none (and then a call pays nothing for them).
    pub fn async_interceptor<I: AsyncInterceptor>(mut self, interceptor: I) -> Self {
        self.interceptors.deferred.push(Arc::new(interceptor));
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

    /// The congestion controller of what a `quic://` channel sends. Default:
    /// [`QuicCongestion::Bbr`]; PROTOCOL.md, "QUIC", says when CUBIC does better.
    #[cfg(feature = "quic")]
    pub fn quic_congestion(mut self, congestion: QuicCongestion) -> Self {
        self.config.quic_congestion = congestion;
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
    pub fn keepalive(mut self, keepalive: Option<Keepalive>) -> Self {
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

    /// Hedges calls of every `#[keel(idempotent)]` operation (without a request stream or a
    /// streamed reply) with `policy` (see [`HedgingPolicy`] and [`ClientConfig::hedging`]);
    /// a client's `with_hedging` overrides it for its calls. Default: no hedging.
    ///
    /// ```no_run
    /// use keel::client::{HedgeDelay, HedgingPolicy};
    ///
    /// # fn example() -> Result<(), keel::Error> {
    /// let channel = keel::Channel::balanced(["tcp://10.0.0.1:7000", "tcp://10.0.0.2:7000"])
    ///     .hedging(HedgingPolicy::default().delay(HedgeDelay::Percentile(90.0)))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn hedging(mut self, policy: HedgingPolicy) -> Self {
        self.config.hedging = Some(policy);
        self
    }

    /// Hedges calls of the operation `name` (`get`, or `Store.get` for one service's) with
    /// `policy`, over the channel's [`hedging`](ChannelBuilder::hedging) policy
    /// ([`HedgingPolicy::disabled`] exempts it); the last one given for a name wins. Only
    /// `#[keel(idempotent)]` operations without a request stream or a streamed reply are
    /// hedged. Default: none.
    pub fn hedging_for(mut self, name: impl Into<String>, policy: HedgingPolicy) -> Self {
        self.config.hedging_operations.push((name.into(), policy));
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

    /// Calls made with a handler's context (a generated client's `with_context`) get the
    /// time the incoming call has left less `margin` (see
    /// [`ClientConfig::propagation_margin`]). Default: zero.
    pub fn propagation_margin(mut self, margin: Duration) -> Self {
        self.config.propagation_margin = margin;
        self
    }

    /// The request metadata keys a call made with a handler's context copies from the
    /// incoming call, replacing the default list (see [`ClientConfig::propagated_metadata`]);
    /// an empty list copies none. Keys are compared without regard to case. Default:
    /// `x-request-id`, `traceparent`, `tracestate`.
    pub fn propagate_metadata<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.propagated_metadata = keys
            .into_iter()
            .map(|k| k.into().to_ascii_lowercase())
            .collect();
        self
    }

    /// The channel; nothing is connected yet. Fails for an invalid URL or a binding this build
    /// leaves out, for a balanced channel over URLs of different schemes, and for invalid
    /// [`default_metadata`](ChannelBuilder::default_metadata).
    pub fn build(self) -> Result<Channel, Error> {
        if let Some(refused) = self.refused {
            return Err(Error::new(crate::core::error::Kind::Config, refused));
        }
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
                hedges: AtomicU64::new(0),
                hedges_won: AtomicU64::new(0),
                hedges_refused: AtomicU64::new(0),
                latency: std::sync::OnceLock::new(),
                config: self.config,
                interceptors: self.interceptors,
                transport,
                calls: AtomicU64::new(0),
                metrics: ChannelMetrics::new(binding),
                url: self.url,
                grpc: matches!(binding, "grpc" | "grpcs"),
            }),
        }
    }

    /// The channel with its calls carried by `transport`, a binding of scheme `binding` (a
    /// session's channel).
    pub(crate) fn build_over(
        self,
        transport: Box<dyn bindings::ClientTransport>,
        binding: &'static str,
    ) -> Channel {
        self.finish(bindings::Client::Other(transport), binding)
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
