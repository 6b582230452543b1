//! The host: serves contracts on endpoints, with its own runtime for I/O and keel-pool for
//! blocking handlers.

mod conn;
mod dispatch;

// What the bindings outside this module (HTTP) build on.
#[cfg(feature = "http")]
pub(crate) use conn::{ConnInfo, Responder};
#[cfg(feature = "http")]
pub(crate) use dispatch::{dispatch, Incoming};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::endpoint::{self, Endpoint, Protocol};
use crate::error::{Error, Kind, Status, StatusCode};
use crate::service::Service;
use crate::throttle::{Throttle, ThrottleConfig};
pub(crate) use conn::ConnShared;

/// Settings for the worker pool that runs blocking (`fn`) operations. `None` keeps keel-pool's
/// documented default.
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

/// Host settings. Every field has a documented default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HostConfig {
    /// Admission control. Default: [`ThrottleConfig::default`].
    pub throttle: ThrottleConfig,
    /// Largest request body accepted. Default: 4 MiB.
    pub max_message_size: u32,
    /// How long `shutdown` waits for calls in flight before answering them `ShuttingDown`.
    /// Default: 10 s.
    pub close_timeout: Duration,
    /// A new connection must complete the handshake within this (on TLS endpoints, the TLS
    /// handshake and then keel's, each). Default: 10 s.
    pub handshake_timeout: Duration,
    /// Connections open at once; more are closed on accept. Default: 10,000.
    pub max_connections: usize,
    /// Calls in flight on one connection; more are answered `Busy`. Default: 4,096.
    pub max_calls_per_connection: usize,
    /// Largest flow-control window one streamed upload may grow to (it starts at 256 KiB and
    /// grows toward the link's bandwidth-delay product). Bounds the memory one stream can
    /// occupy. Default: 8 MiB.
    pub max_stream_window: u32,
    /// Runtime worker threads for I/O and async operations. Default: the number of CPUs.
    pub worker_threads: Option<usize>,
    /// The blocking-operation pool.
    pub pool: PoolConfig,
    /// Certificate and key for TLS endpoints (`tcps://`, `https://`), and whether clients must
    /// present certificates. Required when the host has a TLS endpoint. Default: `None`.
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::ServerTls>,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            throttle: ThrottleConfig::default(),
            max_message_size: keel_wire::DEFAULT_MAX_MESSAGE_SIZE,
            close_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            max_calls_per_connection: 4096,
            max_stream_window: keel_wire::DEFAULT_MAX_WINDOW,
            worker_threads: None,
            pool: PoolConfig::default(),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// Builds a [`Host`]: services, endpoints, settings, then [`HostBuilder::start`].
#[derive(Default)]
pub struct HostBuilder {
    services: Vec<Arc<dyn Service>>,
    endpoints: Vec<String>,
    config: HostConfig,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.services.iter().map(|s| s.descriptor().name).collect();
        f.debug_struct("HostBuilder")
            .field("services", &names)
            .field("endpoints", &self.endpoints)
            .field("config", &self.config)
            .finish()
    }
}

impl HostBuilder {
    /// Adds a service: a generated `{Contract}Server`.
    pub fn service(mut self, service: impl Service) -> Self {
        self.services.push(Arc::new(service));
        self
    }

    /// Adds an endpoint URL to listen on, e.g. `tcp://127.0.0.1:0` (port 0 picks a free port;
    /// [`Host::urls`] reports the bound one).
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoints.push(url.into());
        self
    }

    /// Replaces all settings.
    pub fn config(mut self, config: HostConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the throttle.
    pub fn throttle(mut self, throttle: ThrottleConfig) -> Self {
        self.config.throttle = throttle;
        self
    }

    /// Sets the blocking-operation pool's settings.
    pub fn pool(mut self, pool: PoolConfig) -> Self {
        self.config.pool = pool;
        self
    }

    /// Sets the largest request body accepted.
    pub fn max_message_size(mut self, bytes: u32) -> Self {
        self.config.max_message_size = bytes;
        self
    }

    /// Sets how long `shutdown` waits for calls in flight.
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.config.close_timeout = timeout;
        self
    }

    /// Sets the certificate and key that TLS endpoints (`tcps://`, `https://`) serve, and
    /// whether clients must present certificates. Required when the host has a TLS endpoint.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::ServerTls) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// Binds every endpoint and starts serving. Returns once the host accepts connections.
    pub fn start(self) -> Result<Host, Error> {
        let config = self.config;
        if self.endpoints.is_empty() {
            return Err(Error::new(
                Kind::Config,
                "a host needs at least one endpoint",
            ));
        }
        let mut services: HashMap<String, Arc<dyn Service>> = HashMap::new();
        for s in self.services {
            let name = s.descriptor().name;
            if services.insert(name.to_string(), s).is_some() {
                return Err(Error::new(
                    Kind::Config,
                    format!("service `{name}` added twice"),
                ));
            }
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|u| Endpoint::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        #[cfg(not(feature = "http"))]
        if let Some(ep) = endpoints.iter().find(|e| e.protocol() == Protocol::Http) {
            return Err(Error::new(
                Kind::Config,
                format!("{ep}: HTTP endpoints need keel's `http` feature"),
            ));
        }
        // Before binding anything: a TLS endpoint without a certificate is a config error.
        let security = endpoints
            .iter()
            .map(|ep| endpoint::ServerSecurity::for_endpoint(ep, &config))
            .collect::<Result<Vec<_>, _>>()?;

        let mut pool = keel_pool::Pool::builder();
        pool.thread_name("keel-handler");
        let pc = &config.pool;
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
        let pool = pool.build().map_err(|e| {
            Error::new(Kind::Config, format!("cannot start the handler pool: {e}")).with_source(e)
        })?;

        let mut rt = tokio::runtime::Builder::new_multi_thread();
        rt.enable_all().thread_name("keel-host");
        if let Some(n) = config.worker_threads {
            rt.worker_threads(n.max(1));
        }
        let runtime = rt.build().map_err(|e| {
            Error::new(Kind::Config, format!("cannot start the host runtime: {e}")).with_source(e)
        })?;

        let shared = Arc::new(HostShared {
            services,
            throttle: Throttle::new(config.throttle),
            config,
            pool: Arc::new(pool),
            shutting_down: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            drained: Notify::new(),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            stats: Counters::default(),
        });

        let mut urls = Vec::new();
        let mut accept_tasks = Vec::new();
        for (ep, security) in endpoints.into_iter().zip(security) {
            let listen_err = |e: std::io::Error| {
                Error::new(Kind::Config, format!("cannot listen on {ep}: {e}")).with_source(e)
            };
            let bound = ep.bind().map_err(listen_err)?;
            urls.push(bound.local_url().map_err(listen_err)?);
            let listener = {
                let _in_runtime = runtime.enter();
                bound.into_async(security).map_err(listen_err)?
            };
            let host = shared.clone();
            accept_tasks.push(runtime.spawn(accept_loop(listener, host)));
        }
        Ok(Host {
            shared,
            runtime: Some(runtime),
            urls,
            accept_tasks,
        })
    }
}

/// Accepts connections until the task is aborted; each runs in a task of its own.
async fn accept_loop(listener: endpoint::Listener, host: Arc<HostShared>) {
    let listener = Arc::new(listener);
    loop {
        let (io, peer) = match listener.accept().await {
            Ok(x) => x,
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if host.conns.lock().unwrap_or_else(|e| e.into_inner()).len() >= host.config.max_connections
        {
            host.stats.refused.fetch_add(1, Ordering::Relaxed);
            drop(io);
            continue;
        }
        let id = host.next_conn.fetch_add(1, Ordering::Relaxed);
        let (host, listener) = (host.clone(), listener.clone());
        tokio::spawn(async move {
            // TLS runs here, not in the accept loop, so a slow peer delays only itself.
            let secured =
                tokio::time::timeout(host.config.handshake_timeout, listener.secure(io)).await;
            let Ok(Ok(connected)) = secured else { return };
            let endpoint = listener.endpoint();
            let info = conn::ConnInfo {
                binding: endpoint.scheme(),
                peer,
                opened: std::time::Instant::now(),
                calls: AtomicU64::new(0),
            };
            match endpoint.protocol() {
                Protocol::Wire => conn::serve(connected.io, host, id, info).await,
                #[cfg(feature = "http")]
                Protocol::Http => crate::http::server::serve(connected, host, id, info).await,
                #[cfg(not(feature = "http"))]
                Protocol::Http => unreachable!("refused at start without the `http` feature"),
            }
        });
    }
}

/// One open connection of a host, from [`Host::connections`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The host's id for it, unique for the host's life.
    pub id: u64,
    /// The binding's URL scheme: `tcp`, `tcps`, `unix`, `http` or `https`.
    pub binding: &'static str,
    /// The other end (`ip:port`, or `unix`).
    pub peer: String,
    /// How long it has been open.
    pub age: Duration,
    /// Calls received on it so far (answered, refused or in flight).
    pub calls: u64,
    /// Calls in flight on it now.
    pub calls_in_flight: usize,
}

/// Connection and call counters of a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStats {
    /// Connections accepted and past the handshake, since start.
    pub connections_opened: u64,
    /// Of those, connections closed since.
    pub connections_closed: u64,
    /// Connections open now.
    pub connections_open: usize,
    /// Connections refused because `max_connections` were open.
    pub connections_refused: u64,
    /// Calls in flight now (admitted, not yet answered).
    pub calls_in_flight: usize,
    /// Calls waiting in the throttle queue now.
    pub calls_queued: usize,
    /// Calls accepted since start.
    pub calls_total: u64,
}

#[derive(Debug, Default)]
struct Counters {
    opened: AtomicU64,
    closed: AtomicU64,
    refused: AtomicU64,
    calls: AtomicU64,
}

/// State shared by the host's connections.
pub(crate) struct HostShared {
    services: HashMap<String, Arc<dyn Service>>,
    config: HostConfig,
    pool: Arc<keel_pool::Pool>,
    throttle: Arc<Throttle>,
    shutting_down: AtomicBool,
    in_flight: AtomicUsize,
    drained: Notify,
    conns: Mutex<HashMap<u64, Arc<ConnShared>>>,
    next_conn: AtomicU64,
    stats: Counters,
}

impl std::fmt::Debug for HostShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostShared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl HostShared {
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    fn call_started(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn call_finished(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 && self.is_shutting_down() {
            self.drained.notify_waiters();
        }
    }

    /// The host's settings.
    #[cfg(feature = "http")]
    pub(crate) fn config(&self) -> &HostConfig {
        &self.config
    }

    /// The service called `name`, if the host serves it.
    #[cfg(feature = "http")]
    pub(crate) fn service(&self, name: &str) -> Option<&Arc<dyn Service>> {
        self.services.get(name)
    }

    pub(crate) fn register(&self, conn: Arc<ConnShared>) {
        self.stats.opened.fetch_add(1, Ordering::Relaxed);
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(conn.id, conn);
    }

    pub(crate) fn unregister(&self, id: u64) {
        if self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
            .is_some()
        {
            self.stats.closed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn conns(&self) -> Vec<Arc<ConnShared>> {
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Stop taking calls, let those in flight finish within the close timeout, answer the rest.
    async fn drain(&self) -> ShutdownReport {
        self.shutting_down.store(true, Ordering::Release);
        for c in self.conns() {
            c.go_away("host shutting down");
        }
        let deadline = tokio::time::Instant::now() + self.config.close_timeout;
        loop {
            let notified = self.drained.notified();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let abandoned = self.in_flight.load(Ordering::Acquire);
        let status = Status::new(
            StatusCode::ShuttingDown,
            "host shut down before the call completed (close timeout)",
        );
        for c in self.conns() {
            if c.in_flight() > 0 {
                c.abandon_all(&status);
            } else {
                c.close();
            }
        }
        ShutdownReport {
            abandoned_calls: abandoned,
        }
    }
}

/// What [`Host::shutdown`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Calls still running at the close timeout, answered `ShuttingDown`.
    pub abandoned_calls: usize,
}

/// A running host. Stop it with [`Host::shutdown`]. Dropping it instead stops accepting and
/// serving at once, drops queued blocking calls unanswered, and waits only for blocking handlers
/// already running (threads cannot be interrupted).
#[derive(Debug)]
pub struct Host {
    shared: Arc<HostShared>,
    runtime: Option<tokio::runtime::Runtime>,
    urls: Vec<String>,
    accept_tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Host {
    /// A builder with default settings.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// The bound URL of every endpoint, in the order they were added.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The bound URL of the first endpoint.
    pub fn url(&self) -> &str {
        &self.urls[0]
    }

    /// The blocking-operation pool's metrics.
    pub fn pool_metrics(&self) -> keel_pool::Metrics {
        self.shared.pool.metrics()
    }

    /// Every open connection, oldest first: binding, peer, age and calls so far.
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        let mut all: Vec<ConnectionInfo> = self
            .shared
            .conns()
            .iter()
            .map(|c| ConnectionInfo {
                id: c.id,
                binding: c.info.binding,
                peer: c.info.peer.clone(),
                age: c.info.opened.elapsed(),
                calls: c.info.calls.load(Ordering::Relaxed),
                calls_in_flight: c.in_flight(),
            })
            .collect();
        all.sort_by_key(|c| c.id);
        all
    }

    /// Connection and call counters.
    pub fn stats(&self) -> HostStats {
        let s = &self.shared;
        HostStats {
            connections_opened: s.stats.opened.load(Ordering::Relaxed),
            connections_closed: s.stats.closed.load(Ordering::Relaxed),
            connections_open: s.conns.lock().unwrap_or_else(|e| e.into_inner()).len(),
            connections_refused: s.stats.refused.load(Ordering::Relaxed),
            calls_in_flight: s.in_flight.load(Ordering::Acquire),
            calls_queued: s.throttle.queued(),
            calls_total: s.stats.calls.load(Ordering::Relaxed),
        }
    }

    /// Drains and stops: answers new calls `ShuttingDown`, lets calls in flight finish within the
    /// close timeout (answering the rest `ShuttingDown`), stops accepting, closes connections,
    /// stops the pool. Blocks until done; from async code prefer [`Host::shutdown_async`].
    ///
    /// Connections are still accepted while calls in flight drain, so that a caller who needs a
    /// new connection then (an HTTP/1.1 client whose connections are all busy, say) gets an
    /// explicit `ShuttingDown` answer rather than a connect that hangs or is refused.
    pub fn shutdown(mut self) -> ShutdownReport {
        let runtime = self.runtime.take().expect("runtime present until shutdown");
        let shared = self.shared.clone();
        let tasks = std::mem::take(&mut self.accept_tasks);
        let stop = move || {
            let report = runtime.block_on(async {
                let report = shared.drain().await;
                for t in &tasks {
                    t.abort();
                }
                // Connections accepted after the drain closed the others carry no calls.
                for c in shared.conns() {
                    c.close();
                }
                // Give writers a moment to flush the final answers.
                let flush_until = tokio::time::Instant::now() + Duration::from_secs(1);
                while !shared
                    .conns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_empty()
                    && tokio::time::Instant::now() < flush_until
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                report
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
            shared.pool.shutdown(Duration::from_secs(1));
            report
        };
        // A thread of its own, so this works from async code and from plain `main` alike.
        std::thread::spawn(stop)
            .join()
            .unwrap_or(ShutdownReport { abandoned_calls: 0 })
    }

    /// [`Host::shutdown`] for async callers: does not block the calling task's thread.
    pub async fn shutdown_async(self) -> ShutdownReport {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(self.shutdown());
        });
        rx.await.unwrap_or(ShutdownReport { abandoned_calls: 0 })
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
            self.shared.pool.shutdown_now();
        }
    }
}
