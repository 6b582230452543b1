//! [`HostBuilder`]: every setting of a host, each with a setter and a documented default.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{accept_loop, idle_reaper, Host, HostRuntime};
use crate::bindings::ServerSettings;
use crate::core::error::{Error, Kind};
use crate::core::keepalive::{Keepalive, PingPolicy};
use crate::core::service::Service;
use crate::dispatch::{
    AsyncInterceptor, Dispatcher, Interceptor, Interceptors, Limits, ThrottleConfig,
};
use crate::transport::socket::ServerSecurity;
use crate::transport::{Endpoint, Protocol, ServerTlsSettings};

/// Settings for the worker pool that runs blocking (`fn`) operations. `None` keeps keel-pool's
/// documented default (see [`keel_pool::Builder`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Warm floor: threads created at start that never retire.
    pub min_threads: Option<usize>,
    /// Most threads at once; beyond it work queues (never dropped).
    pub max_threads: Option<usize>,
    /// How long a thread above the floor stays idle before retiring.
    pub keep_alive: Option<Duration>,
    /// Stack size of pool threads.
    pub stack_size: Option<usize>,
}

/// A host's settings, as [`HostBuilder`] collects them and [`Host::config`] reports them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HostConfig {
    /// Admission control. Default: [`ThrottleConfig::default`].
    pub throttle: ThrottleConfig,
    /// `quic://`: the congestion controller of what the host sends. Default:
    /// [`QuicCongestion::Bbr`](crate::host::QuicCongestion::Bbr).
    #[cfg(feature = "quic")]
    pub quic_congestion: crate::bindings::QuicCongestion,
    /// Services with a throttle of their own, by contract name
    /// ([`HostBuilder::service_throttle`]). Default: none.
    pub service_throttles: Vec<(String, ThrottleConfig)>,
    /// Largest request body accepted. Default: 4 MiB.
    pub max_message_size: u32,
    /// How long `shutdown` waits for calls in flight before answering them `ShuttingDown`.
    /// Default: 10 s.
    pub close_timeout: Duration,
    /// A new connection must complete the handshake within this (on TLS endpoints, the TLS
    /// handshake and then keel's, each). Default: 10 s.
    pub handshake_timeout: Duration,
    /// Connections open at once, those still in their handshake included. When full, a newcomer
    /// is admitted by closing the connection idle longest (no call in flight; a connection
    /// still in its handshake first, then one that never carried a call); only when every
    /// connection has calls in flight is the newcomer refused. Default: 10,000.
    pub max_connections: usize,
    /// A connection with no call in flight and none started for this long is closed (with
    /// GoAway on keel-wire; the client reconnects on its next call). Default: 2 h, longer than
    /// the idle hour keel keeps a client's latency flat across.
    pub idle_timeout: Duration,
    /// Once a frame (keel-wire), a request head or a request body (HTTP) has started arriving,
    /// the rest must arrive within this; and unsent output above `max_unsent_bytes` must drain
    /// within it. Otherwise the connection is closed. Default: 30 s.
    pub frame_timeout: Duration,
    /// Output a connection may have waiting for its peer to read. Beyond it, the host reads
    /// nothing more from that connection until the peer reads (replies and pongs included).
    /// Default: 1 MiB.
    pub max_unsent_bytes: usize,
    /// Bytes of messages one connection may have partly received at once: keel-wire frames and
    /// HTTP bodies larger than 64 KiB (smaller ones fit the connection's first buffers and are
    /// not counted). Default: 16 MiB.
    pub max_receive_bytes_per_connection: usize,
    /// Bytes of messages all connections together may have partly received at once. A
    /// connection that would pass it waits (within `frame_timeout`) for others to finish.
    /// Default: 256 MiB.
    pub max_receive_bytes: usize,
    /// Calls in flight on one connection (on HTTP/2 also its concurrent streams); more are
    /// answered `Busy`. Default: a fair share of the throttle, a quarter of
    /// `max_concurrent_calls + max_queued_calls` (512 with the throttle's defaults; all of them
    /// up to 16 for a small throttle), so that no single connection can take every place.
    pub max_calls_per_connection: Option<usize>,
    /// The listen backlog of TCP and Unix endpoints: connections the kernel completes before
    /// the host accepts them (a connect beyond it waits for a SYN retry, a second or more).
    /// Default: the system's limit, read when the config is made: on Linux
    /// `net.core.somaxconn` (4,096 since Linux 5.4) up to 65,535; 1,024 elsewhere or if it
    /// cannot be read. The kernel caps any value at `somaxconn`.
    pub listen_backlog: u32,
    /// Replies of at least this many bytes are compressed for a caller that accepts it (a
    /// keel client with compression on, an HTTP client's `Accept-Encoding`), unless that does
    /// not make them smaller; `usize::MAX` turns reply compression off. Default: 1 KiB.
    pub compress_replies_above: usize,
    /// Largest flow-control window one streamed upload may grow to (it starts at 256 KiB and
    /// grows toward the link's bandwidth-delay product). Bounds the memory one stream can
    /// occupy. Default: 8 MiB.
    pub max_stream_window: u32,
    /// Streamed uploads (keel-wire) open at once on one connection; one more is answered
    /// `Busy`. With `max_stream_window` it bounds what streams can make one connection hold.
    /// An upload counts until its handler drops it, even once its last byte arrived (those
    /// bytes may still wait to be read). (HTTP/2 bounds its streams with its connection
    /// window.) Default: 16.
    pub max_streams_per_connection: usize,
    /// Reply streams (a `ByteStream` or `MessageStream` still being sent after its call was
    /// answered) and sessions open at once on one connection, on every binding; a call that
    /// would open one more is answered `Busy` without running. Each holds a task and what its
    /// producer buffers (the stream's output is bounded by `max_unsent_bytes`). Default: 100
    /// (what gRPC servers commonly allow as concurrent streams).
    pub max_reply_streams_per_connection: usize,
    /// Runtime worker threads for I/O and async operations, when the host builds its own
    /// runtime. Default: the number of CPUs.
    pub worker_threads: Option<usize>,
    /// The blocking-operation pool.
    pub pool: PoolConfig,
    /// How long a shutdown keeps serving as usual after the host reports itself not ready
    /// (`GET /readyz` answers 503), before it sends GoAway and drains: time for a load balancer
    /// that polls `/readyz` to stop sending work here. Default: 0 (GoAway at once).
    pub drain_grace: Duration,
    /// The admin endpoint's URL (`http://host:port`): `GET /metrics`, `/healthz`, `/readyz`.
    /// Default: `None` (no admin endpoint).
    pub admin: Option<String>,
    /// Serve gRPC's standard services beside the contracts: `grpc.health.v1.Health` (fed by
    /// the host's readiness, as `/readyz` is) and server reflection (`grpc.reflection.v1`
    /// and `v1alpha`, which describe every hosted contract from its types, as
    /// `GET /openapi.json` does). Default: true.
    pub grpc_standard_services: bool,
    /// Whether the host describes its contracts: `GET /{Service}`, `GET /openapi.json` and
    /// gRPC server reflection. Each such request passes the host's interceptors first (as an
    /// operation named [`DESCRIBE`](crate::host::DESCRIBE)), so an interceptor that demands
    /// credentials demands them here too; off, each is answered `NotFound` (HTTP 404).
    /// [`Host::set_descriptions`](crate::Host::set_descriptions) switches them at run time.
    /// Default: true.
    pub descriptions: bool,
    /// The blocking watchdog's threshold: a poll of an `async` operation's handler that holds
    /// its runtime worker longer than this is reported (a `log` warning naming the operation,
    /// `keel_server_handler_blocking_total`, [`HostStats::handlers_blocked`](crate::host::HostStats::handlers_blocked)).
    /// `None` turns it off. Default: 10 ms.
    pub blocking_watchdog: Option<Duration>,
    /// A connection older than this (±10 % per connection, so that connections opened together
    /// leave at different times) is told GoAway: its client opens a new connection for its
    /// next call, which an L4 load balancer may send to another replica, and this one closes
    /// once its calls are answered. Default: `None` (connections live as long as they are
    /// used; see `idle_timeout`).
    pub max_connection_age: Option<Duration>,
    /// How long calls in flight on a connection told GoAway for its age may still run; then
    /// they are answered `ShuttingDown` and the connection closes. Default: 30 s.
    pub max_connection_age_grace: Duration,
    /// keel-wire and HTTP/2: a connection nothing arrived on for `interval` is pinged, and
    /// closed if nothing arrives within `timeout` after that (keel-wire: at least four round
    /// trips; HTTP/2: hyper's keepalive, the timeout as given): a client that
    /// vanished without a word (a NAT or load balancer dropped the path, the machine died)
    /// stops holding a connection and its calls long before TCP notices. keel's clients ping
    /// their quiet connections every 20 s themselves, so the host's pings reach only clients
    /// that do not. `None` turns it off. Default: 60 s interval, 20 s timeout.
    pub keepalive: Option<Keepalive>,
    /// keel-wire: how often a client may ping. A ping less than `min_interval` after the
    /// previous one, with no call between them, is a strike; one strike past `max_strikes`
    /// and the connection is told GoAway ("too many pings") and closed, as gRPC does. A
    /// ping sent with a call is never a strike. Default: 5 s, 2 strikes.
    pub ping_policy: PingPolicy,
    /// Which web origins may call the HTTP binding from a browser (CORS). Default: `None`
    /// (off: a page from another origin cannot read the host's answers).
    #[cfg(feature = "http")]
    pub cors: Option<crate::http::Cors>,
    /// Certificate and key for TLS endpoints (`tcps://`, `https://`), and whether clients must
    /// present certificates. Required when the host has a TLS endpoint. Default: `None`.
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::ServerTls>,
    /// How often the host reads the files its TLS settings came from
    /// ([`ServerTls::from_pem_files`](crate::tls::ServerTls::from_pem_files)) and, when they
    /// changed, takes the new certificate ([`HostBuilder::watch_tls_files`]). Default: `None`
    /// (not watched).
    #[cfg(feature = "tls")]
    pub watch_tls_files: Option<Duration>,
}

/// The host's keepalive default: see [`HostConfig::keepalive`].
const HOST_KEEPALIVE: Keepalive = Keepalive::new(Duration::from_secs(60), Duration::from_secs(20));

/// The host's ping limit by default: see [`HostConfig::ping_policy`].
const PING_POLICY: PingPolicy = PingPolicy::new(Duration::from_secs(5), 2);

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            throttle: ThrottleConfig::default(),
            service_throttles: Vec::new(),
            max_message_size: keel_wire::DEFAULT_MAX_MESSAGE_SIZE,
            compress_replies_above: 1024,
            close_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            idle_timeout: Duration::from_secs(2 * 3600),
            frame_timeout: Duration::from_secs(30),
            max_unsent_bytes: 1 << 20,
            max_receive_bytes_per_connection: 16 << 20,
            max_receive_bytes: 256 << 20,
            max_calls_per_connection: None,
            listen_backlog: crate::transport::socket::system_backlog(),
            max_stream_window: keel_wire::DEFAULT_MAX_WINDOW,
            max_streams_per_connection: 16,
            max_reply_streams_per_connection: 100,
            worker_threads: None,
            pool: PoolConfig::default(),
            drain_grace: Duration::ZERO,
            admin: None,
            grpc_standard_services: true,
            descriptions: true,
            blocking_watchdog: Some(crate::dispatch::WATCHDOG_THRESHOLD),
            max_connection_age: None,
            max_connection_age_grace: Duration::from_secs(30),
            keepalive: Some(HOST_KEEPALIVE),
            ping_policy: PING_POLICY,
            #[cfg(feature = "quic")]
            quic_congestion: crate::bindings::QuicCongestion::Bbr,
            #[cfg(feature = "http")]
            cors: None,
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(feature = "tls")]
            watch_tls_files: None,
        }
    }
}

impl HostConfig {
    fn tls(&self) -> ServerTlsSettings {
        #[cfg(feature = "tls")]
        let tls = self.tls.clone();
        #[cfg(not(feature = "tls"))]
        let tls = ();
        tls
    }

    /// Calls in flight allowed on one connection: the setting, or a fair share of the
    /// throttle's places (running plus queued): a quarter of them, but never fewer than all of
    /// them up to 16, so that a small throttle stays usable from one connection.
    pub fn calls_per_connection(&self) -> usize {
        self.max_calls_per_connection.unwrap_or_else(|| {
            let places = self.throttle.max_concurrent_calls + self.throttle.max_queued_calls;
            (places / 4).max(places.min(16)).max(1)
        })
    }

    /// What the bindings need of these settings.
    fn server_settings(&self) -> ServerSettings {
        ServerSettings {
            max_message_size: self.max_message_size,
            handshake_timeout: self.handshake_timeout,
            frame_timeout: self.frame_timeout,
            max_unsent_bytes: self.max_unsent_bytes,
            max_receive_bytes_per_connection: self.max_receive_bytes_per_connection,
            max_stream_window: self.max_stream_window,
            max_streams_per_connection: self.max_streams_per_connection,
            max_calls_per_connection: self.calls_per_connection(),
            keepalive: self.keepalive.map(Into::into),
            ping_policy: self.ping_policy.into(),
            #[cfg(feature = "quic")]
            quic_congestion: self.quic_congestion,
            #[cfg(feature = "http")]
            cors: self.cors.clone(),
        }
    }
}

/// Builds a [`Host`]: services, endpoints, settings, then [`HostBuilder::start`]. Every setter
/// documents its default; settings not set keep it.
///
/// ```
/// # #[keel::contract] pub trait Echo { fn echo(&self, s: String) -> String; }
/// # struct E;
/// # impl Echo for E { fn echo(&self, s: String) -> String { s } }
/// use std::time::Duration;
///
/// let host = keel::Host::builder()
///     .service(EchoServer::new(E))
///     .endpoint("tcp://127.0.0.1:0")
///     .max_concurrent_calls(256)
///     .max_queued_calls(512)
///     .max_message_size(1 << 20)
///     .close_timeout(Duration::from_secs(5))
///     .min_threads(4)
///     .start()?;
/// assert_eq!(host.config().max_message_size, 1 << 20);
/// host.shutdown();
/// # Ok::<(), keel::Error>(())
/// ```
#[derive(Default)]
pub struct HostBuilder {
    services: Vec<Arc<dyn Service>>,
    interceptors: Interceptors,
    endpoints: Vec<String>,
    config: HostConfig,
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.services.iter().map(|s| s.descriptor().name).collect();
        f.debug_struct("HostBuilder")
            .field("services", &names)
            .field("interceptors", &self.interceptors.len())
            .field("endpoints", &self.endpoints)
            .field("config", &self.config)
            .field("runtime", &self.runtime.is_some())
            .finish()
    }
}

impl HostBuilder {
    /// Adds a service: a generated `{Contract}Server`.
    pub fn service<S: Service>(mut self, service: S) -> Self {
        self.services.push(Arc::new(service));
        self
    }

    /// Adds an interceptor: it sees every call of every service, after the interceptors added
    /// before it (see [`Interceptor`]). Default: none.
    pub fn interceptor<I: Interceptor>(mut self, interceptor: I) -> Self {
        self.interceptors.sync.push(Arc::new(interceptor));
        self
    }

    /// Adds an interceptor whose `before` may wait (see [`AsyncInterceptor`]): it sees every
    /// call of every service after every synchronous interceptor, and after the async ones
    /// added before it. Default: none (and then a call pays nothing for them).
    pub fn async_interceptor<I: AsyncInterceptor>(mut self, interceptor: I) -> Self {
        self.interceptors.deferred.push(Arc::new(interceptor));
        self
    }

    /// Runs every call the host serves through `layer`'s service (feature `tower`), for teams
    /// that already have tower middleware: `tower::timeout::TimeoutLayer`,
    /// `ConcurrencyLimitLayer`, `LoadShedLayer`, a `ServiceBuilder` of them, or their own.
    ///
    /// The layers see a call once keel admitted it (the interceptors ran, its arguments
    /// decoded, its throttle slot taken) as a [`CallRequest`](crate::host::CallRequest), whose
    /// [`Context`](crate::Context) they may read and add to, and wrap [`Handler`](crate::host::Handler),
    /// which runs the operation's handler. The service is cloned for each call (make it cheap
    /// to clone, as tower's are) and runs as a task of its own within the call's deadline. An
    /// error it answers with becomes the call's status (see [`BoxError`](crate::host::BoxError)).
    /// A second `layer` replaces the first: compose with `tower::ServiceBuilder`. Default: none
    /// (and then a call pays nothing for it).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let host = keel::Host::builder()
    ///     .layer(
    ///         tower::ServiceBuilder::new()
    ///             .load_shed()
    ///             .timeout(Duration::from_secs(2))
    ///             .into_inner(),
    ///     )
    ///     .endpoint("tcp://127.0.0.1:0")
    ///     .start()?;
    /// host.shutdown();
    /// # Ok::<(), keel::Error>(())
    /// ```
    #[cfg(feature = "tower")]
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<crate::host::Handler>,
        L::Service: tower::Service<crate::host::CallRequest, Response = crate::host::CallResponse>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<crate::host::CallRequest>>::Future: Send + 'static,
        <L::Service as tower::Service<crate::host::CallRequest>>::Error:
            Into<crate::host::BoxError>,
    {
        let service = layer.layer(crate::host::Handler::default());
        self.interceptors.layer = Some(Arc::new(crate::dispatch::Stack(service)));
        self
    }

    /// Adds an endpoint URL to listen on, e.g. `tcp://127.0.0.1:0` (port 0 picks a free port;
    /// [`Host::urls`] reports the bound one). A host without endpoints serves only through
    /// [`Host::http_service`].
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoints.push(url.into());
        self
    }

    /// Runs the host on the caller's tokio runtime (I/O, async operations, accept loops)
    /// instead of a runtime of its own (the default). Blocking operations still run on the
    /// host's keel-pool, never on the runtime's workers. Stop such a host with
    /// [`Host::shutdown_async`] from async code.
    pub fn runtime(mut self, handle: tokio::runtime::Handle) -> Self {
        self.runtime = Some(handle);
        self
    }

    /// Sets admission control (both throttle limits at once). Default:
    /// [`ThrottleConfig::default`].
    #[deprecated(note = "set `max_concurrent_calls` and `max_queued_calls`")]
    pub fn throttle(mut self, throttle: ThrottleConfig) -> Self {
        self.config.throttle = throttle;
        self
    }

    /// Calls running at once across the host. Default: 1,024.
    pub fn max_concurrent_calls(mut self, n: usize) -> Self {
        self.config.throttle.max_concurrent_calls = n;
        self
    }

    /// Calls waiting for a slot; one more is answered `Busy` at once. Default: 1,024.
    pub fn max_queued_calls(mut self, n: usize) -> Self {
        self.config.throttle.max_queued_calls = n;
        self
    }

    /// Gives the service named `service` (a contract's name, `Calculator`) a throttle of its
    /// own, as WCF's `serviceThrottling` is per service: its calls take places in it (at most
    /// `throttle.max_concurrent_calls` running, `max_queued_calls` waiting, one more `Busy`)
    /// instead of in the host-wide throttle, so a slow service cannot take the places of a
    /// fast one, nor a fast one those of a slow one. Services without one share the host's.
    /// Its metrics are the throttle's, labelled `service` (see the crate docs, "Metrics").
    /// `start` fails if the host serves no such contract.
    ///
    /// The host then runs at most the host-wide limit plus each service's own at once; the
    /// per-connection limit (`max_calls_per_connection`) still applies to every call.
    ///
    /// ```
    /// # #[keel::contract] pub trait Reports { fn monthly(&self) -> u64; }
    /// # struct R;
    /// # impl Reports for R { fn monthly(&self) -> u64 { 1 } }
    /// use keel::host::ThrottleConfig;
    ///
    /// let host = keel::Host::builder()
    ///     .service(ReportsServer::new(R))
    ///     .service_throttle("Reports", ThrottleConfig::new(4, 100))
    ///     .endpoint("tcp://127.0.0.1:0")
    ///     .start()?;
    /// # host.shutdown();
    /// # Ok::<(), keel::Error>(())
    /// ```
    pub fn service_throttle(mut self, service: &str, throttle: ThrottleConfig) -> Self {
        self.config.service_throttles.retain(|(s, _)| s != service);
        self.config
            .service_throttles
            .push((service.to_string(), throttle));
        self
    }

    /// Sets all of the blocking-operation pool's settings at once. Default:
    /// [`PoolConfig::default`] (keel-pool's defaults).
    #[deprecated(
        note = "set `min_threads`, `max_threads`, `thread_keep_alive` and `thread_stack_size`"
    )]
    pub fn pool(mut self, pool: PoolConfig) -> Self {
        self.config.pool = pool;
        self
    }

    /// The pool's warm floor: threads created at start that never retire. Default: keel-pool's.
    pub fn min_threads(mut self, n: usize) -> Self {
        self.config.pool.min_threads = Some(n);
        self
    }

    /// Most pool threads at once; beyond it work queues. Default: keel-pool's.
    pub fn max_threads(mut self, n: usize) -> Self {
        self.config.pool.max_threads = Some(n);
        self
    }

    /// How long a pool thread above the floor stays idle before retiring. Default: keel-pool's.
    /// (Not to be confused with [`keepalive`](HostBuilder::keepalive), pings on connections.)
    pub fn thread_keep_alive(mut self, keep_alive: Duration) -> Self {
        self.config.pool.keep_alive = Some(keep_alive);
        self
    }

    /// The old name of [`thread_keep_alive`](HostBuilder::thread_keep_alive).
    #[deprecated(note = "renamed `thread_keep_alive` (`keepalive` is about pings)")]
    pub fn keep_alive(self, keep_alive: Duration) -> Self {
        self.thread_keep_alive(keep_alive)
    }

    /// Stack size of pool threads. Default: keel-pool's.
    pub fn thread_stack_size(mut self, bytes: usize) -> Self {
        self.config.pool.stack_size = Some(bytes);
        self
    }

    /// Replies of at least `bytes` are compressed for callers that accept it, when that makes
    /// them smaller (zstd for keel's clients; what `Accept-Encoding` prefers over HTTP);
    /// `usize::MAX` turns it off. Default: 1 KiB.
    pub fn compress_replies_above(mut self, bytes: usize) -> Self {
        self.config.compress_replies_above = bytes;
        self
    }

    /// Largest request body accepted (after decompression, for a compressed one); larger ones
    /// are answered `TooLarge`. Default: 4 MiB.
    pub fn max_message_size(mut self, bytes: u32) -> Self {
        self.config.max_message_size = bytes;
        self
    }

    /// Whether to serve gRPC's standard services, health and server reflection (see
    /// [`HostConfig::grpc_standard_services`]). Default: true.
    pub fn grpc_standard_services(mut self, on: bool) -> Self {
        self.config.grpc_standard_services = on;
        self
    }

    /// Whether the host describes its contracts (see [`HostConfig::descriptions`]).
    /// Default: true.
    pub fn descriptions(mut self, on: bool) -> Self {
        self.config.descriptions = on;
        self
    }

    /// How long `shutdown` waits for calls in flight. Default: 10 s.
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.config.close_timeout = timeout;
        self
    }

    /// How long a shutdown keeps serving after the host turns not ready (`GET /readyz` on the
    /// admin endpoint answers 503 from the moment a shutdown begins), before GoAway and the
    /// drain: a load balancer polling `/readyz` stops sending work before connections close.
    /// Default: 0 (GoAway at once, as without an admin endpoint).
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.config.drain_grace = grace;
        self
    }

    /// Watches `async` operations for handlers that block their runtime worker: a poll (the
    /// stretch between two `.await`s that yield) longer than `threshold` is reported once, as a
    /// `log` warning (target `keel::watchdog`) naming the operation, the counter
    /// `keel_server_handler_blocking_total{service, operation}` and
    /// [`HostStats::handlers_blocked`](crate::host::HostStats::handlers_blocked). A blocked worker
    /// holds up every other call it would run: make such an operation a plain `fn` (keel-pool
    /// runs it) or move the blocking part to `tokio::task::spawn_blocking`. `None` turns the
    /// watchdog off; thresholds under 1 ms count as 1 ms. Default: `Some(10 ms)`.
    ///
    /// It costs two stores per poll and one thread that wakes every quarter threshold while
    /// async handlers run, and parks when none does. It measures wall-clock time, so a poll the
    /// OS preempted for longer than the threshold is reported too.
    pub fn blocking_watchdog(mut self, threshold: Option<Duration>) -> Self {
        self.config.blocking_watchdog = threshold;
        self
    }

    /// Serves an admin endpoint at `url` (`http://host:port`; port 0 picks a free one,
    /// [`Host::admin_url`] reports it), separate from the service endpoints: `GET /metrics`
    /// (Prometheus text, with the `prometheus` feature: keel's Prometheus recorder is installed
    /// when the host starts, see [`crate::metrics`]), `GET /healthz` (200 while the process
    /// serves) and `GET /readyz` (200 while ready, 503 once a shutdown began). HTTP/1.1, at
    /// most 16 connections at once (more are closed at once), 5 s to send a request head
    /// (and the same for an idle connection), heads up to 16 KiB, request bodies never read.
    /// Bind it to an address only operators and load balancers reach. Default: none.
    #[cfg(feature = "http")]
    pub fn admin(mut self, url: impl Into<String>) -> Self {
        self.config.admin = Some(url.into());
        self
    }

    /// Lets pages from other web origins call the HTTP binding from a browser (CORS): their
    /// preflights are answered and the answers readable (see [`crate::http::Cors`]). Default:
    /// off.
    ///
    /// ```
    /// # #[keel::contract] pub trait Echo { fn echo(&self, s: String) -> String; }
    /// # struct E;
    /// # impl Echo for E { fn echo(&self, s: String) -> String { s } }
    /// # fn main() -> Result<(), keel::Error> {
    /// let host = keel::Host::builder()
    ///     .service(EchoServer::new(E))
    ///     .endpoint("http://127.0.0.1:0")
    ///     .cors(keel::http::Cors::allow_origins(["https://app.example.com"])?)
    ///     .start()?;
    /// # host.shutdown();
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "http")]
    pub fn cors(mut self, cors: crate::http::Cors) -> Self {
        self.config.cors = Some(cors);
        self
    }

    /// Tells connections older than `age` (±10 % each) GoAway, so that clients reconnect and
    /// spread again over the replicas behind an L4 load balancer; calls in flight finish
    /// (within `grace`, then they are answered `ShuttingDown`), and the client sends new calls
    /// on a new connection without failing any. Default: off. (gRPC's `MaxConnectionAge` and
    /// `MaxConnectionAgeGrace`.)
    pub fn max_connection_age(mut self, age: Duration, grace: Duration) -> Self {
        self.config.max_connection_age = Some(age);
        self.config.max_connection_age_grace = grace;
        self
    }

    /// The congestion controller of what `quic://` endpoints send. Default:
    /// [`QuicCongestion::Bbr`](crate::host::QuicCongestion::Bbr); PROTOCOL.md, "QUIC",
    /// says when CUBIC does better.
    #[cfg(feature = "quic")]
    pub fn quic_congestion(mut self, congestion: crate::bindings::QuicCongestion) -> Self {
        self.config.quic_congestion = congestion;
        self
    }

    /// How long a new connection may take to complete its handshakes. Default: 10 s.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.config.handshake_timeout = timeout;
        self
    }

    /// Connections open at once, handshakes included; when full, the connection idle longest
    /// (one that never carried a call first) makes room for a newcomer. Default: 10,000.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.config.max_connections = n;
        self
    }

    /// How long a connection may stay without calls before it is closed. Default: 2 h.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.config.idle_timeout = timeout;
        self
    }

    /// keel-wire and HTTP/2: pings a connection nothing arrived on for `keepalive.interval`,
    /// and closes it if nothing arrives within `keepalive.timeout` after that; `None` turns it off.
    /// Default: 60 s, 20 s (see [`HostConfig::keepalive`]).
    pub fn keepalive(mut self, keepalive: Option<Keepalive>) -> Self {
        self.config.keepalive = keepalive;
        self
    }

    /// keel-wire: how often a client may ping before it is told GoAway (see
    /// [`HostConfig::ping_policy`]). Default: 5 s between pings with no call between them, 2
    /// strikes.
    pub fn ping_policy(mut self, policy: PingPolicy) -> Self {
        self.config.ping_policy = policy;
        self
    }

    /// How long the rest of a started frame, request head or body may take to arrive, and
    /// unsent output above the bound to drain. Default: 30 s.
    pub fn frame_timeout(mut self, timeout: Duration) -> Self {
        self.config.frame_timeout = timeout;
        self
    }

    /// Output a connection may have waiting before the host stops reading from it. Default:
    /// 1 MiB.
    pub fn max_unsent_bytes(mut self, bytes: usize) -> Self {
        self.config.max_unsent_bytes = bytes;
        self
    }

    /// Bytes of messages one connection may have partly received. Default: 16 MiB.
    pub fn max_receive_bytes_per_connection(mut self, bytes: usize) -> Self {
        self.config.max_receive_bytes_per_connection = bytes;
        self
    }

    /// Bytes of messages all connections may have partly received. Default: 256 MiB.
    pub fn max_receive_bytes(mut self, bytes: usize) -> Self {
        self.config.max_receive_bytes = bytes;
        self
    }

    /// Calls in flight on one connection; more are answered `Busy`. Default: a quarter of the
    /// throttle's places (512 with its defaults).
    pub fn max_calls_per_connection(mut self, n: usize) -> Self {
        self.config.max_calls_per_connection = Some(n);
        self
    }

    /// The listen backlog of TCP and Unix endpoints. Default: the system's limit
    /// (`net.core.somaxconn` on Linux, at most 65,535; 1,024 elsewhere), see
    /// [`HostConfig::listen_backlog`](crate::host::HostConfig::listen_backlog).
    pub fn listen_backlog(mut self, n: u32) -> Self {
        self.config.listen_backlog = n;
        self
    }

    /// Reply streams and sessions open at once on one connection (see
    /// [`HostConfig::max_reply_streams_per_connection`]). Default: 100.
    pub fn max_reply_streams_per_connection(mut self, streams: usize) -> Self {
        self.config.max_reply_streams_per_connection = streams.max(1);
        self
    }

    /// Largest flow-control window one streamed upload may grow to. Default: 8 MiB.
    pub fn max_stream_window(mut self, bytes: u32) -> Self {
        self.config.max_stream_window = bytes;
        self
    }

    /// Streamed uploads open at once on one keel-wire connection; an upload counts until its
    /// handler drops it, even once its last byte arrived. Default: 16.
    pub fn max_streams_per_connection(mut self, n: usize) -> Self {
        self.config.max_streams_per_connection = n;
        self
    }

    /// Worker threads of the host's own runtime (ignored with [`HostBuilder::runtime`]).
    /// Default: the number of CPUs.
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.config.worker_threads = Some(n);
        self
    }

    /// Sets the certificate and key that TLS endpoints (`tcps://`, `https://`) serve, and
    /// whether clients must present certificates. Required when the host has a TLS endpoint.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::ServerTls) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// Reads the files the host's TLS settings came from
    /// ([`ServerTls::from_pem_files`](crate::tls::ServerTls::from_pem_files)) every `every`,
    /// and when their contents change, takes the new certificate and key (with the same
    /// client authentication) for every handshake from then on; connections already open keep
    /// theirs. New files that are refused (unreadable, malformed, a key that does not match
    /// the certificate) are logged as a warning and counted
    /// ([`HostStats::tls_reload_failures`](crate::host::HostStats::tls_reload_failures)), and
    /// the current certificate stays. Replace both files at once (write elsewhere, then
    /// rename, as cert-manager's and Kubernetes' secret volumes do): a key read before its
    /// certificate is replaced is refused until the pair matches. `start` fails if the
    /// settings were not read from files, or for a zero interval.
    /// [`Host::reload_tls`](crate::Host::reload_tls) does the same on demand; the watcher goes
    /// on reading the files, so their next change replaces what `reload_tls` set. Default: not
    /// watched.
    #[cfg(feature = "tls")]
    pub fn watch_tls_files(mut self, every: Duration) -> Self {
        self.config.watch_tls_files = Some(every);
        self
    }

    /// Binds every endpoint and starts serving. Returns once the host accepts connections.
    pub fn start(self) -> Result<Host, Error> {
        let HostBuilder {
            services: list,
            interceptors,
            endpoints,
            config,
            runtime,
        } = self;
        let mut services: HashMap<String, Arc<dyn Service>> = HashMap::new();
        for s in list {
            let name = s.descriptor().name;
            if services.insert(name.to_string(), s).is_some() {
                return Err(Error::new(
                    Kind::Config,
                    format!("service `{name}` added twice"),
                ));
            }
        }
        if let Some((name, _)) = config
            .service_throttles
            .iter()
            .find(|(name, _)| !services.contains_key(name))
        {
            let mut served: Vec<_> = services.keys().map(String::as_str).collect();
            served.sort_unstable();
            return Err(Error::new(
                Kind::Config,
                format!(
                    "service_throttle names `{name}`, which this host does not serve (it serves: {})",
                    served.join(", ")
                ),
            ));
        }
        let standard = config
            .grpc_standard_services
            .then(|| super::standard::add(&mut services));
        // Each contract's protobuf schema is traced now, not on its first gRPC call: the first
        // call is as quick as the next (a contract protobuf cannot describe is found here too,
        // and answered `UNIMPLEMENTED` with the reason when gRPC asks).
        // A contract that pins field numbers means to be called over gRPC: numbers that do
        // not fit its types stop the host here rather than leave it without gRPC.
        let mut by_package: std::collections::BTreeMap<&str, Vec<_>> = Default::default();
        for s in services.values() {
            let desc = s.descriptor();
            match desc.proto_schema() {
                Ok(schema) => by_package.entry(desc.package).or_default().push(schema),
                Err(e) if desc.pins_proto_numbers() => {
                    return Err(Error::new(Kind::Config, e.to_string()));
                }
                Err(_) => {}
            }
        }
        for schemas in by_package.values() {
            crate::core::proto::schema::check_shared_numbers(schemas)
                .map_err(|e| Error::new(Kind::Config, e))?;
        }
        let endpoints = endpoints
            .iter()
            .map(|u| Endpoint::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(ep) = endpoints.iter().find(|e| e.protocol() == Protocol::Grpc) {
            return Err(Error::new(
                Kind::Config,
                format!(
                    "{ep}: grpc:// and grpcs:// are client schemes; a host serves gRPC on its \
                     http:// and https:// endpoints"
                ),
            ));
        }
        #[cfg(not(feature = "http"))]
        if let Some(ep) = endpoints.iter().find(|e| e.protocol() == Protocol::Http) {
            return Err(crate::bindings::http_feature_needed(ep));
        }
        #[cfg(not(feature = "quic"))]
        if let Some(ep) = endpoints.iter().find(|e| e.protocol() == Protocol::Quic) {
            return Err(crate::bindings::quic_feature_needed(ep));
        }
        // Before binding anything: a TLS endpoint without a certificate is a config error.
        let security = endpoints
            .iter()
            .map(|ep| ServerSecurity::for_endpoint(ep, &config.tls()))
            .collect::<Result<Vec<_>, _>>()?;

        let pool = build_pool(&config.pool)?;
        let runtime = match runtime {
            Some(handle) => HostRuntime::Shared(handle),
            None => {
                let mut rt = tokio::runtime::Builder::new_multi_thread();
                rt.enable_all().thread_name("keel-host");
                if let Some(n) = config.worker_threads {
                    rt.worker_threads(n.max(1));
                }
                let rt = rt.build().map_err(|e| {
                    Error::new(Kind::Config, format!("cannot start the host runtime: {e}"))
                        .with_source(e)
                })?;
                HostRuntime::Owned(Some(rt))
            }
        };
        let handle = runtime.handle().expect("a runtime until shutdown");
        let mut runtime = Unstarted(runtime);
        // Before the dispatcher registers its metric handles: they must reach this recorder.
        #[cfg(feature = "http")]
        let admin = match &config.admin {
            Some(url) => Some(super::admin::bind(url, &handle)?),
            None => None,
        };

        let limits = Limits {
            max_receive_bytes: config.max_receive_bytes,
            max_message_size: config.max_message_size,
            compress_replies_above: config.compress_replies_above,
            max_reply_streams_per_connection: config.max_reply_streams_per_connection,
        };
        let dispatcher = Arc::new(Dispatcher::new(
            services,
            interceptors,
            limits,
            config.throttle,
            &config.service_throttles,
            pool,
            config.blocking_watchdog,
        ));
        let _ = dispatcher.sessions.set(Arc::new(super::session::Sessions));
        dispatcher.set_descriptions(config.descriptions);
        if let Some(link) = standard {
            link.set(&dispatcher);
        }
        let settings = Arc::new(config.server_settings());
        let registry = Arc::new(super::registry::Registry::new(dispatcher.clone()));

        #[cfg(feature = "tls")]
        let certificates = Arc::new(super::certificates::Certificates::new(
            security
                .iter()
                .filter_map(|s| s.tls_slot().cloned())
                .collect(),
        ));
        #[cfg(feature = "tls")]
        let watcher = match (config.watch_tls_files, &config.tls) {
            (None, _) => None,
            (Some(every), _) if every.is_zero() => {
                return Err(Error::new(
                    Kind::Config,
                    "watch_tls_files: the interval must be longer than zero (a few seconds is \
                     plenty: renewals come days before expiry)",
                ))
            }
            (Some(every), Some(tls)) if tls.made_from().is_some() => Some((every, tls.clone())),
            (Some(_), _) => {
                return Err(Error::new(
                    Kind::Config,
                    "watch_tls_files needs TLS settings read from files: \
                     HostBuilder::tls(ServerTls::from_pem_files(chain, key)?)",
                ))
            }
        };

        // Every endpoint is bound before any is served: a failure leaves nothing running.
        let mut urls = Vec::new();
        let mut listeners = Vec::new();
        #[cfg(feature = "quic")]
        let mut quic_listeners = Vec::new();
        for (ep, security) in endpoints.into_iter().zip(security) {
            #[cfg(feature = "quic")]
            if ep.protocol() == Protocol::Quic {
                // A UDP endpoint of its own (TLS is part of QUIC's handshake).
                let tls = config.tls.as_ref().ok_or_else(|| {
                    Error::new(
                        Kind::Config,
                        format!("{ep}: a TLS endpoint needs a certificate: call HostBuilder::tls"),
                    )
                })?;
                let listener = {
                    let _in_runtime = handle.enter();
                    crate::bindings::quic::server::QuicListener::bind(&ep, tls, &settings)?
                };
                urls.push(listener.local_url()?);
                certificates.add_quic(listener.tls_slot());
                quic_listeners.push(listener);
                continue;
            }
            let listen_err = |e| crate::transport::socket::listen_error(&ep, e);
            let bound = ep.bind(config.listen_backlog).map_err(listen_err)?;
            urls.push(bound.local_url().map_err(listen_err)?);
            let listener = {
                let _in_runtime = handle.enter();
                bound.into_async(security).map_err(listen_err)?
            };
            listeners.push(listener);
        }
        let mut accept_tasks: Vec<_> = listeners
            .into_iter()
            .map(|listener| {
                handle.spawn(accept_loop(
                    listener,
                    registry.clone(),
                    settings.clone(),
                    config.max_connections,
                ))
            })
            .collect();
        #[cfg(feature = "quic")]
        accept_tasks.extend(quic_listeners.into_iter().map(|listener| {
            handle.spawn(super::quic_accept_loop(
                listener,
                registry.clone(),
                settings.clone(),
                config.max_connections,
            ))
        }));
        accept_tasks.push(handle.spawn(idle_reaper(registry.clone(), config.idle_timeout)));
        if let Some(age) = config.max_connection_age {
            let grace = config.max_connection_age_grace;
            accept_tasks.push(handle.spawn(super::age_reaper(registry.clone(), age, grace)));
        }
        #[cfg(feature = "tls")]
        if let Some((every, tls)) = watcher {
            accept_tasks.push(handle.spawn(certificates.clone().watch(tls, every)));
        }
        #[cfg(feature = "http")]
        let admin_url = admin.map(|admin| {
            let url = admin.url.clone();
            accept_tasks.push(handle.spawn(super::admin::serve(admin, registry.clone())));
            url
        });
        #[cfg(not(feature = "http"))]
        let admin_url = None;
        Ok(Host {
            dispatcher,
            registry,
            settings,
            config,
            runtime: std::mem::replace(&mut runtime.0, HostRuntime::Owned(None)),
            urls,
            admin_url,
            accept_tasks,
            #[cfg(feature = "tls")]
            certificates,
        })
    }
}

/// The runtime of a host being started: if the start fails (a port in use, say), one it built
/// is shut down without blocking, since a start may fail inside async code, where dropping a
/// runtime panics (and the caller would see tokio's panic instead of the error).
struct Unstarted(HostRuntime);

impl Drop for Unstarted {
    fn drop(&mut self) {
        if let HostRuntime::Owned(rt) = &mut self.0 {
            if let Some(rt) = rt.take() {
                rt.shutdown_background();
            }
        }
    }
}

fn build_pool(pc: &PoolConfig) -> Result<keel_pool::Pool, Error> {
    let mut pool = keel_pool::Pool::builder();
    pool.thread_name("keel-handler");
    if let Some(n) = pc.min_threads {
        pool.min_threads(n);
    }
    if let Some(n) = pc.max_threads {
        pool.max_threads(n);
    }
    if let Some(d) = pc.keep_alive {
        pool.keep_alive(d);
    }
    if let Some(n) = pc.stack_size {
        pool.stack_size(n);
    }
    pool.build().map_err(|e| {
        Error::new(Kind::Config, format!("cannot start the handler pool: {e}")).with_source(e)
    })
}
