//! The host side: a [`Host`] serves contracts on endpoints. Build one with [`Host::builder`]
//! ([`HostBuilder`]: services, endpoints, then settings, each with its default documented);
//! [`Host::config`] reports the settings in force, [`Host::stats`] and [`Host::connections`]
//! what it is doing. An [`Interceptor`] sees every call; [`Keepalive`] and [`PingPolicy`] set
//! how the host checks on its clients.
//!
//! Inside keel, the host owns its configuration, the runtime its I/O and async operations run
//! on (its own, or the caller's), the listeners and their accept loops, and the registry of its
//! connections (`registry.rs`); it hands plain settings down to dispatch and the bindings.

#[cfg(feature = "http")]
mod admin;
mod builder;
#[cfg(feature = "tls")]
mod certificates;
mod registry;
mod session;
mod signal;
mod standard;

#[cfg(feature = "quic")]
pub use crate::bindings::QuicCongestion;
pub use crate::core::keepalive::{Keepalive, PingPolicy};
pub use crate::dispatch::{AsyncInterceptor, Interceptor, ThrottleConfig, ALL_SERVICES, DESCRIBE};
#[cfg(feature = "tower")]
pub use crate::dispatch::{BoxError, CallRequest, CallResponse, Handler};
pub use builder::{HostBuilder, HostConfig, PoolConfig};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::bindings::{self, ServerSettings};
use crate::dispatch::{Dispatcher, HostConnInfo};
use crate::transport::socket::Listener;
use registry::Registry;

/// One open connection of a host, from [`Host::connections`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The host's id for it, unique for the host's life.
    pub id: u64,
    /// The binding's URL scheme: `tcp`, `tcps`, `unix`, `http`, `https` or `quic`.
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
    /// Connections refused because `max_connections` were open, all with calls in flight.
    pub connections_refused: u64,
    /// Connections closed to make room for a newcomer at `max_connections` (the one idle
    /// longest, or the oldest still in its handshake).
    pub connections_evicted: u64,
    /// Connections closed for taking too long: the handshake, a frame, a request head or body
    /// not completed in time, unsent output not read, or no call for `idle_timeout`.
    pub connections_timed_out: u64,
    /// Calls in flight now (admitted, not yet answered).
    pub calls_in_flight: usize,
    /// Calls waiting in a throttle queue now (the host-wide one and each service's own).
    pub calls_queued: usize,
    /// Calls accepted since start.
    pub calls_total: u64,
    /// Polls of `async` handlers that held their runtime worker past the blocking watchdog's
    /// threshold ([`HostBuilder::blocking_watchdog`](crate::host::HostBuilder::blocking_watchdog)).
    pub handlers_blocked: u64,
    /// Times the TLS certificate was replaced while the host ran ([`Host::reload_tls`], or a
    /// change of its watched files).
    pub tls_reloads: u64,
    /// New certificate files the host refused while watching them (and kept the current
    /// certificate); each is also logged as a warning.
    pub tls_reload_failures: u64,
}

/// What [`Host::shutdown`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Calls still running at the close timeout, answered `ShuttingDown`.
    pub abandoned_calls: usize,
}

/// The runtime a host's I/O and async operations run on.
#[derive(Debug)]
enum HostRuntime {
    /// Its own, built at start (the default); `None` once shut down.
    Owned(Option<tokio::runtime::Runtime>),
    /// The caller's ([`HostBuilder::runtime`]).
    Shared(tokio::runtime::Handle),
}

impl HostRuntime {
    fn handle(&self) -> Option<tokio::runtime::Handle> {
        match self {
            HostRuntime::Owned(rt) => rt.as_ref().map(|rt| rt.handle().clone()),
            HostRuntime::Shared(handle) => Some(handle.clone()),
        }
    }
}

/// A running host. Stop it with [`Host::shutdown`] (or [`Host::shutdown_async`]). Dropping it
/// instead stops accepting and serving at once, drops queued blocking calls unanswered, and
/// waits only for blocking handlers already running (threads cannot be interrupted).
#[derive(Debug)]
pub struct Host {
    dispatcher: Arc<Dispatcher>,
    /// Its connections.
    registry: Arc<Registry>,
    /// What the bindings take; kept for [`Host::http_service`].
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    settings: Arc<ServerSettings>,
    config: HostConfig,
    runtime: HostRuntime,
    urls: Vec<String>,
    /// The admin endpoint's bound URL, if it has one.
    admin_url: Option<String>,
    accept_tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Its TLS endpoints' certificates, which a reload replaces.
    #[cfg(feature = "tls")]
    certificates: Arc<certificates::Certificates>,
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
    ///
    /// # Panics
    /// If the host has no endpoint (it serves only through [`Host::http_service`]).
    pub fn url(&self) -> &str {
        &self.urls[0]
    }

    /// The bound URL of the admin endpoint ([`HostBuilder::admin`]), if the host has one.
    pub fn admin_url(&self) -> Option<&str> {
        self.admin_url.as_deref()
    }

    /// The OpenAPI 3.1 document of the contracts this host serves, as its `http://` endpoints
    /// answer `GET /openapi.json` (see [`openapi::document`](crate::openapi::document)).
    #[cfg(feature = "openapi")]
    pub fn openapi(&self) -> String {
        crate::openapi::document(&self.dispatcher.descriptors())
    }

    /// Switches the host's descriptions of its contracts (`GET /{Service}`,
    /// `GET /openapi.json`, gRPC server reflection) on or off, for requests that arrive from
    /// now on (see [`HostConfig::descriptions`]). [`Host::openapi`] is not affected: it is the
    /// host's owner asking.
    pub fn set_descriptions(&self, on: bool) {
        self.dispatcher.set_descriptions(on);
    }

    /// Whether the host reports itself ready (`GET /readyz`): true until a shutdown begins.
    pub fn is_ready(&self) -> bool {
        self.dispatcher.is_ready()
    }

    /// The settings the host was built with.
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// The blocking-operation pool's metrics.
    pub fn pool_metrics(&self) -> keel_pool::Metrics {
        self.dispatcher.pool.metrics()
    }

    /// Every open connection, oldest first: binding, peer, age and calls so far.
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        let mut all: Vec<ConnectionInfo> = self
            .registry
            .conns()
            .iter()
            .map(|c| ConnectionInfo {
                id: c.id,
                binding: c.info.binding,
                peer: c.info.peer.clone(),
                age: crate::runtime::clock::now() - c.info.opened,
                calls: c.info.calls.load(Ordering::Relaxed),
                calls_in_flight: c.in_flight(),
            })
            .collect();
        all.sort_by_key(|c| c.id);
        all
    }

    /// Connection and call counters.
    pub fn stats(&self) -> HostStats {
        let d = &self.dispatcher;
        HostStats {
            connections_opened: d.stats.opened.load(Ordering::Relaxed),
            connections_closed: d.stats.closed.load(Ordering::Relaxed),
            connections_open: self.registry.conn_count(),
            connections_refused: d.stats.refused.load(Ordering::Relaxed),
            connections_evicted: d.stats.evicted.load(Ordering::Relaxed),
            connections_timed_out: d.stats.timed_out.load(Ordering::Relaxed),
            calls_in_flight: d.in_flight(),
            calls_queued: d.queued(),
            calls_total: d.stats.calls.load(Ordering::Relaxed),
            handlers_blocked: d.stats.handlers_blocked.load(Ordering::Relaxed),
            #[cfg(feature = "tls")]
            tls_reloads: self.certificates.reloads(),
            #[cfg(feature = "tls")]
            tls_reload_failures: self.certificates.failures(),
            #[cfg(not(feature = "tls"))]
            tls_reloads: 0,
            #[cfg(not(feature = "tls"))]
            tls_reload_failures: 0,
        }
    }

    /// Replaces the host's TLS certificate (and client authentication): every TLS endpoint's
    /// handshakes use `tls` from now on, while connections already open keep the certificate
    /// they agreed on. `tls` was checked when it was made (a key that matches its
    /// certificate), so this cannot leave a host without a usable certificate. Fails only for
    /// a host with no TLS endpoint. To follow files instead, see
    /// [`HostBuilder::watch_tls_files`]; a host that watches its files takes their next change
    /// over what this set.
    ///
    /// ```
    /// # #[keel::contract] pub trait Greeter { fn hello(&self) -> u64; }
    /// # struct G;
    /// # impl Greeter for G { fn hello(&self) -> u64 { 1 } }
    /// let old = keel::tls::self_signed(&["127.0.0.1"])?;
    /// let host = keel::Host::builder()
    ///     .service(GreeterServer::new(G))
    ///     .endpoint("tcps://127.0.0.1:0")
    ///     .tls(old.server_tls()?)
    ///     .start()?;
    /// let renewed = keel::tls::self_signed(&["127.0.0.1"])?;
    /// host.reload_tls(renewed.server_tls()?)?;
    /// // New connections see the renewed certificate (clients that trust only the old one
    /// // would now fail their handshake).
    /// let channel = keel::Channel::builder(host.url()).tls(renewed.client_tls()?).build()?;
    /// assert_eq!(GreeterBlockingClient::new(channel).hello()?, 1);
    /// assert_eq!(host.stats().tls_reloads, 1);
    /// host.shutdown();
    /// # Ok::<(), keel::Error>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn reload_tls(&self, tls: crate::tls::ServerTls) -> Result<(), crate::Error> {
        if self.certificates.is_empty() {
            return Err(crate::Error::new(
                crate::core::error::Kind::Config,
                "reload_tls: this host has no TLS endpoint (tcps://, https:// or quic://)",
            ));
        }
        self.certificates.check(&tls)?;
        self.certificates.replace(&tls);
        Ok(())
    }

    /// The host's HTTP binding as a `tower::Service`, to mount in an HTTP server of your own
    /// (an axum `Router`, say) beside ordinary routes: every request it gets is served as on an
    /// `http://` endpoint of this host (the convention in [`crate::http`]), through the same
    /// throttle, pool and limits. All requests through it count as one connection
    /// (binding `http-service`) in [`Host::connections`].
    ///
    /// Needs the host to run on the server's runtime ([`HostBuilder::runtime`]) or its own; the
    /// service is cheap to clone.
    #[cfg(feature = "http")]
    pub fn http_service(&self) -> crate::http::HttpService {
        let id = self.registry.next_id();
        crate::http::HttpService::new(&self.dispatcher, self.settings.clone(), id)
    }

    /// Drains and stops: reports the host not ready (the admin endpoint's `/readyz` answers
    /// 503) and keeps serving for [`HostBuilder::drain_grace`] (default 0), then answers new
    /// calls `ShuttingDown`, lets calls in flight finish within the
    /// close timeout (answering the rest `ShuttingDown`), stops accepting, closes connections,
    /// stops the pool. Blocks until done; from async code use [`Host::shutdown_async`] (which
    /// a host on the caller's runtime needs, so as not to block the runtime it drains on).
    ///
    /// Connections are still accepted while calls in flight drain, so that a caller who needs a
    /// new connection then (an HTTP/1.1 client whose connections are all busy, say) gets an
    /// explicit `ShuttingDown` answer rather than a connect that hangs or is refused.
    ///
    /// Every call that arrived before the drain began is in flight (keel-wire: up to the
    /// `last_call_id` of the GoAway each connection gets). The calls answered `ShuttingDown`
    /// without running are marked as not processed (keel-wire: above that `last_call_id`;
    /// HTTP: `keel-unprocessed: 1`), and keel's clients send those again on a new connection:
    /// if another host listens at the address by then (one that took it over), no call fails
    /// because this one drains.
    ///
    /// # Panics
    ///
    /// For a host on the caller's runtime ([`HostBuilder::runtime`]), when called from inside
    /// that runtime (blocking there could keep the drain from ever running): use
    /// [`Host::shutdown_async`].
    pub fn shutdown(mut self) -> ShutdownReport {
        if matches!(self.runtime, HostRuntime::Shared(_))
            && tokio::runtime::Handle::try_current().is_ok()
        {
            panic!(
                "keel: Host::shutdown called from async code on the host's own runtime; \
                 use Host::shutdown_async"
            );
        }
        let runtime = std::mem::replace(&mut self.runtime, HostRuntime::Owned(None));
        let stop = Stop {
            registry: self.registry.clone(),
            close_timeout: self.config.close_timeout,
            drain_grace: self.config.drain_grace,
            accept_tasks: std::mem::take(&mut self.accept_tasks),
        };
        // A thread of its own, so this works from async code and from plain `main` alike.
        let run = move || match runtime {
            HostRuntime::Owned(Some(rt)) => {
                let pool = stop.registry.dispatcher().pool.clone();
                let report = rt.block_on(stop.run());
                rt.shutdown_timeout(Duration::from_secs(1));
                pool.shutdown(Duration::from_secs(1));
                report
            }
            HostRuntime::Shared(handle) => {
                // The drain runs as a task of the caller's runtime, which must be running
                // (checked below: not called from inside it).
                let pool = stop.registry.dispatcher().pool.clone();
                let (tx, rx) = std::sync::mpsc::channel();
                handle.spawn(async move {
                    let _ = tx.send(stop.run().await);
                });
                let report = rx.recv().unwrap_or(ShutdownReport { abandoned_calls: 0 });
                pool.shutdown(Duration::from_secs(1));
                report
            }
            HostRuntime::Owned(None) => ShutdownReport { abandoned_calls: 0 },
        };
        std::thread::spawn(run)
            .join()
            .unwrap_or(ShutdownReport { abandoned_calls: 0 })
    }

    /// [`Host::shutdown`] for async callers: does not block the calling task's thread.
    pub async fn shutdown_async(mut self) -> ShutdownReport {
        if let HostRuntime::Shared(_) = self.runtime {
            // On the caller's runtime: drain right here, as a task of it.
            self.runtime = HostRuntime::Owned(None);
            let stop = Stop {
                registry: self.registry.clone(),
                close_timeout: self.config.close_timeout,
                drain_grace: self.config.drain_grace,
                accept_tasks: std::mem::take(&mut self.accept_tasks),
            };
            let pool = stop.registry.dispatcher().pool.clone();
            let report = stop.run().await;
            // Joining pool threads blocks: off the runtime's workers.
            let _ =
                tokio::task::spawn_blocking(move || pool.shutdown(Duration::from_secs(1))).await;
            return report;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(self.shutdown());
        });
        rx.await.unwrap_or(ShutdownReport { abandoned_calls: 0 })
    }
}

/// The steps of a graceful shutdown that run on the host's runtime.
struct Stop {
    registry: Arc<Registry>,
    close_timeout: Duration,
    /// How long to serve on after turning not ready, before the drain.
    drain_grace: Duration,
    accept_tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Stop {
    async fn run(self) -> ShutdownReport {
        // Not ready first, so that load balancers stop sending work before GoAway closes
        // connections; calls go on being served meanwhile.
        self.registry.dispatcher().set_unready();
        if !self.drain_grace.is_zero() {
            tokio::time::sleep(self.drain_grace).await;
        }
        let drained = self.registry.drain(self.close_timeout).await;
        for t in &self.accept_tasks {
            t.abort();
        }
        // A connection still in its handshakes would register after this: none may.
        self.registry.close_registrations();
        // Connections accepted after the drain closed the others carry no calls.
        for c in self.registry.conns() {
            c.close();
        }
        // Give writers a moment to flush the final answers.
        let flush_until = tokio::time::Instant::now() + Duration::from_secs(1);
        while self.registry.conn_count() > 0 && tokio::time::Instant::now() < flush_until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        ShutdownReport {
            abandoned_calls: drained.abandoned_calls,
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for t in &self.accept_tasks {
            t.abort();
        }
        match &mut self.runtime {
            HostRuntime::Owned(rt) => {
                if let Some(rt) = rt.take() {
                    rt.shutdown_background();
                    self.dispatcher.pool.shutdown_now();
                }
            }
            HostRuntime::Shared(_) => {
                // The caller's runtime goes on: end what runs there for this host.
                self.registry.close_registrations();
                let gone = crate::core::status::Status::new(
                    crate::core::status::StatusCode::ShuttingDown,
                    "host dropped",
                );
                for c in self.registry.conns() {
                    c.abandon_all(&gone);
                }
                self.dispatcher.pool.shutdown_now();
            }
        }
    }
}

/// Accepts connections until the task is aborted; each runs in a task of its own.
///
/// At the connection limit a newcomer is admitted by making room ([`Registry::admit`]); only
/// when every connection has calls in flight is it refused.
async fn accept_loop(
    listener: Listener,
    registry: Arc<Registry>,
    settings: Arc<ServerSettings>,
    max_connections: usize,
) {
    let listener = Arc::new(listener);
    let binding = listener.endpoint().scheme();
    loop {
        let (io, peer) = match listener.accept().await {
            Ok(x) => x,
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(id) = registry.admit(max_connections, binding) else {
            drop(io);
            continue;
        };
        let (r, settings, listener) = (registry.clone(), settings.clone(), listener.clone());
        spawn_handshake(&registry, id, move |ended| async move {
            let _ended = ended;
            let d = r.dispatcher().clone();
            // TLS runs here, not in the accept loop, so a slow peer delays only itself.
            let secured =
                tokio::time::timeout(settings.handshake_timeout, listener.secure(io)).await;
            let connected = match secured {
                Ok(Ok(connected)) => connected,
                Ok(Err(_)) => return,
                Err(_) => return d.timed_out(binding),
            };
            let endpoint = listener.endpoint();
            let info = HostConnInfo::new(
                id,
                endpoint.scheme(),
                peer,
                connected.peer_certificates.clone(),
            );
            bindings::serve(connected, endpoint.protocol(), d, &*r, settings, info).await;
        });
    }
}

/// [`accept_loop`] for a `quic://` endpoint: each connection attempt is admitted as a TCP
/// connection is (the connection limit, eviction), then handshaken and served in a task of its
/// own.
#[cfg(feature = "quic")]
async fn quic_accept_loop(
    listener: bindings::quic::server::QuicListener,
    registry: Arc<Registry>,
    settings: Arc<ServerSettings>,
    max_connections: usize,
) {
    let listener = Arc::new(listener);
    let binding = "quic";
    while let Some(incoming) = listener.accept().await {
        let Some(id) = registry.admit(max_connections, binding) else {
            incoming.refuse();
            continue;
        };
        let (r, settings, listener) = (registry.clone(), settings.clone(), listener.clone());
        spawn_handshake(&registry, id, move |ended| async move {
            let _ended = ended;
            let d = r.dispatcher().clone();
            let zero_rtt = listener.zero_rtt();
            bindings::quic::server::serve(incoming, zero_rtt, d, &*r, settings, id).await;
        });
    }
}

/// Runs an admitted connection's handshake and then its service in a task of its own, which the
/// registry can abort: `serve` makes the task's future from the guard that ends the handshake
/// count of `id`, which the future must own (bind it inside, `let _ended = ended;`) so that the
/// count ends with the task however it ends, aborted before its first poll included.
///
/// The future is the caller's own `async` block, not one wrapped here: an `async` block that
/// awaits a future it captured holds it twice (the capture and the awaited copy), and the
/// wrapper cost every idle `tcp://` connection ~3 KiB (`keel-lab peers`' RSS per 1,000 idle
/// connections: 11.7 MiB before 79e922f, 14.9 MiB with the wrapper).
fn spawn_handshake<F>(registry: &Arc<Registry>, id: u64, serve: impl FnOnce(HandshakeEnded) -> F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let task = tokio::spawn(serve(HandshakeEnded(registry.clone(), id)));
    registry.handshake_task(id, task.abort_handle());
}

/// Takes a connection out of the handshakes when its task ends, however it ends.
struct HandshakeEnded(Arc<Registry>, u64);

impl Drop for HandshakeEnded {
    fn drop(&mut self) {
        self.0.handshake_ended(self.1);
    }
}

/// Tells connections past `max_age` GoAway and closes them once done (or after `grace`),
/// until aborted.
async fn age_reaper(registry: Arc<Registry>, max_age: Duration, grace: Duration) {
    let period = (max_age / 20).clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        crate::runtime::timer::sleep_until(crate::runtime::clock::now() + period).await;
        registry.age_connections(max_age, grace);
    }
}

/// Closes the connections that stayed without calls for `idle_timeout`, until aborted.
async fn idle_reaper(registry: Arc<Registry>, idle_timeout: Duration) {
    let period = (idle_timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(60));
    loop {
        crate::runtime::timer::sleep_until(crate::runtime::clock::now() + period).await;
        registry.reap_idle(idle_timeout);
    }
}
