//! Dispatch: from a call that arrived on any binding to its handler and back. Admission
//! (throttle and per-connection limits), deadlines, and the hand-off to keel-pool (plain `fn`
//! operations) or the runtime (`async fn` operations).
//!
//! The [`Dispatcher`] is what a host's bindings share: the services, the throttle, the pool,
//! and the count of calls arriving and in flight that a drain waits for. (The registry of open
//! connections, each a [`HostConn`], is the host's: `host/registry.rs`.) It imports neither
//! the host nor any binding: bindings call [`dispatch`] with an [`Incoming`] call and answer it
//! through their [`Responder`].

mod budget;
mod call;
mod conn;
mod intercept;
#[cfg(feature = "tower")]
mod layer;
mod metrics;
mod panics;
mod schedule;
mod streams;
mod throttle;
mod watchdog;

pub(crate) use budget::{Budget, ReceiveBudget, Reservation};
#[cfg(feature = "http")]
pub(crate) use call::poll_once_then_spawn;
pub(crate) use call::{dispatch, BlockingCalls, Incoming, SessionCall, SessionOpener};
pub(crate) use conn::{HostAnswer, HostConn, HostConnInfo, ReplyTo, Responder};
pub(crate) use intercept::descriptions_off;
use intercept::DynAsyncInterceptor;
pub(crate) use intercept::Interceptors;
pub use intercept::{AsyncInterceptor, Interceptor, ALL_SERVICES, DESCRIBE};
#[cfg(feature = "tower")]
pub use layer::{BoxError, CallRequest, CallResponse, Handler};
#[cfg(feature = "tower")]
pub(crate) use layer::{Layered, Stack};
pub(crate) use metrics::Observed;
pub(crate) use schedule::deferring;
pub use throttle::ThrottleConfig;
pub(crate) use watchdog::DEFAULT_THRESHOLD as WATCHDOG_THRESHOLD;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::core::service::Service;
#[cfg(feature = "openapi")]
use crate::core::service::ServiceDescriptor;
use metrics::{HostMetrics, OpMetrics, ThrottleMetrics};
use throttle::Throttle;

/// The dispatcher's limits, as plain values from the host's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bytes of messages all connections together may have partly received.
    pub(crate) max_receive_bytes: usize,
    /// Largest request body, after decompression.
    pub(crate) max_message_size: u32,
    /// Replies at least this large are compressed for callers that accept it.
    pub(crate) compress_replies_above: usize,
    /// Reply streams (and sessions) one connection may have open at once.
    pub(crate) max_reply_streams_per_connection: usize,
}

/// Counters for the host's stats, in one place: the host's registry (`host/registry.rs`) counts
/// connections opened, closed, refused and evicted; it and the bindings, those timed out
/// ([`Dispatcher::timed_out`]); dispatch, the calls.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) opened: AtomicU64,
    pub(crate) closed: AtomicU64,
    pub(crate) refused: AtomicU64,
    /// Closed to make room for a newcomer at the connection limit.
    pub(crate) evicted: AtomicU64,
    /// Closed for taking too long: handshake, idle, a frame, head or body, unsent output.
    pub(crate) timed_out: AtomicU64,
    pub(crate) calls: AtomicU64,
    /// Async handlers' polls the blocking watchdog reported.
    pub(crate) handlers_blocked: Arc<AtomicU64>,
}

/// Up to this many services are also found by address (see `Dispatcher::by_address`); past
/// it, scanning them would cost what hashing the name does.
const BY_ADDRESS: usize = 4;

/// A service the host serves, with its operations' metric handles (by operation index).
pub(crate) struct Served {
    pub(crate) service: Arc<dyn Service>,
    pub(crate) metrics: Box<[Arc<OpMetrics>]>,
    /// The service's own throttle (`HostBuilder::service_throttle`), which its calls take
    /// instead of the host-wide one, with its metric handles.
    pub(crate) throttle: Option<(Arc<Throttle>, ThrottleMetrics)>,
}

impl Served {
    /// The throttle this service's calls take: its own, or the host's.
    pub(crate) fn throttle<'a>(&'a self, host: &'a Arc<Throttle>) -> &'a Arc<Throttle> {
        self.throttle.as_ref().map_or(host, |(own, _)| own)
    }
}

/// What every connection of a host shares: services, admission, the pool, the calls in flight.
pub(crate) struct Dispatcher {
    /// Looked up by name on every call (foldhash: several times cheaper than SipHash on a
    /// short name; the keys are the host's own).
    services: HashMap<String, Arc<Served>, foldhash::fast::RandomState>,
    /// A host with a few services (up to [`BY_ADDRESS`]) also finds them by their names'
    /// addresses: a name keel-wire decoded as one of `known_names` is the descriptor's own
    /// `&'static str`, found without hashing or comparing it.
    by_address: Box<[(&'static str, Arc<Served>)]>,
    /// Every service and operation name served: keel-wire's codec decodes a request's names
    /// as these `&'static str`s instead of allocating a copy of each.
    pub(crate) known_names: keel_wire::KnownNames,
    /// The host's interceptors, in order (the synchronous ones first).
    interceptors: Interceptors,
    /// Whether the host answers requests for descriptions of its contracts (`intercept.rs`).
    descriptions: AtomicBool,
    pub(crate) limits: Limits,
    pub(crate) pool: Arc<keel_pool::Pool>,
    pub(crate) throttle: Arc<Throttle>,
    /// The host-wide budget for bytes of messages being received.
    pub(crate) receive_budget: Budget,
    shutting_down: AtomicBool,
    /// Cleared when a shutdown begins, before the drain (what the admin endpoint's `/readyz`
    /// says).
    ready: AtomicBool,
    /// Told when [`Dispatcher::set_unready`] is (gRPC health's `Watch`).
    ready_changed: tokio::sync::watch::Sender<bool>,
    /// Calls tracked (admitted, not yet answered).
    in_flight: AtomicUsize,
    /// Calls that arrived and are served, not yet tracked (their arguments are being read or
    /// checked): a drain waits for them too.
    arriving: AtomicUsize,
    drained: Notify,
    /// Where `now_ms` counts from.
    epoch: Instant,
    pub(crate) stats: Counters,
    /// Metric handles of the host as a whole.
    pub(crate) metrics: HostMetrics,
    /// Set when the drain's close timeout passed: reply streams still flowing end
    /// (`streams.rs`).
    streams_stop: tokio::sync::watch::Sender<bool>,
    /// Opens sessions (set once by the host that built this dispatcher).
    pub(crate) sessions: std::sync::OnceLock<Arc<dyn SessionOpener>>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.services.keys().collect();
        names.sort();
        f.debug_struct("Dispatcher")
            .field("services", &names)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A call that arrived and that the host serves: counted from its arrival (before it is
/// decoded or tracked), so that a drain beginning meanwhile waits for it. Tracking the call
/// ([`HostConn::track`]) counts it in flight instead; dropped (the call was refused), it
/// counts no more.
#[derive(Debug)]
pub(crate) struct Arrival {
    /// `None` once the count passed to a tracked call.
    dispatcher: Option<Arc<Dispatcher>>,
}

impl Arrival {
    /// The call is tracked: it counts in flight until it ends.
    fn tracked(mut self) {
        if let Some(d) = self.dispatcher.take() {
            // In flight first, so a drain never finds it counted in neither.
            d.call_started();
            d.arrival_ended();
        }
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if let Some(d) = self.dispatcher.take() {
            d.arrival_ended();
        }
    }
}

impl Dispatcher {
    /// A dispatcher for `services` (names already checked unique by the caller).
    pub(crate) fn new(
        services: HashMap<String, Arc<dyn Service>>,
        interceptors: Interceptors,
        limits: Limits,
        throttle: ThrottleConfig,
        service_throttles: &[(String, ThrottleConfig)],
        pool: keel_pool::Pool,
        blocking_watchdog: Option<Duration>,
    ) -> Dispatcher {
        let metrics = HostMetrics::new();
        let stats = Counters::default();
        let known_names = keel_wire::KnownNames::new(services.values().flat_map(|s| {
            let desc = s.descriptor();
            std::iter::once(desc.name).chain(desc.operations.iter().map(|op| op.name))
        }));
        let services = services
            .into_iter()
            .map(|(name, service)| {
                let desc = service.descriptor();
                let ops = desc
                    .operations
                    .iter()
                    .map(|op| {
                        let watch = blocking_watchdog.map(|threshold| {
                            let count = stats.handlers_blocked.clone();
                            watchdog::register(desc.name, op.name, threshold, count)
                        });
                        Arc::new(OpMetrics::new(desc.name, op.name, watch))
                    })
                    .collect();
                let own = service_throttles
                    .iter()
                    .find(|(n, _)| *n == name && name == desc.name)
                    .map(|(_, config)| (Throttle::new(*config), ThrottleMetrics::new(desc.name)));
                let served = Served {
                    service,
                    metrics: ops,
                    throttle: own,
                };
                (name, Arc::new(served))
            })
            .collect::<HashMap<_, _, _>>();
        // The contracts' own (gRPC's standard services are kept under their full names, and
        // reached by HTTP only).
        let own = || {
            services
                .iter()
                .filter(|(key, s)| *key == s.service.descriptor().name)
        };
        let by_address = if own().count() <= BY_ADDRESS {
            own()
                .map(|(_, s)| (s.service.descriptor().name, s.clone()))
                .collect()
        } else {
            Box::default()
        };
        Dispatcher {
            services,
            by_address,
            known_names,
            interceptors,
            descriptions: AtomicBool::new(true),
            limits,
            pool: Arc::new(pool),
            throttle: Throttle::new(throttle),
            receive_budget: Budget::new(limits.max_receive_bytes),
            shutting_down: AtomicBool::new(false),
            ready: AtomicBool::new(true),
            ready_changed: tokio::sync::watch::Sender::new(true),
            in_flight: AtomicUsize::new(0),
            arriving: AtomicUsize::new(0),
            drained: Notify::new(),
            epoch: crate::runtime::clock::now(),
            stats,
            metrics,
            sessions: std::sync::OnceLock::new(),
            streams_stop: tokio::sync::watch::Sender::new(false),
        }
    }

    /// The host's synchronous interceptors, in the order they run `before` a call.
    pub(crate) fn interceptors(&self) -> &[Arc<dyn Interceptor>] {
        &self.interceptors.sync
    }

    /// The host's async interceptors, in the order they run `before` a call (after the
    /// synchronous ones).
    pub(crate) fn async_interceptors(&self) -> &[Arc<dyn DynAsyncInterceptor>] {
        &self.interceptors.deferred
    }

    /// The tower layers around the host's calls, if it has any (`HostBuilder::layer`).
    #[cfg(feature = "tower")]
    pub(crate) fn layer(&self) -> Option<&Arc<dyn Layered>> {
        self.interceptors.layer.as_ref()
    }

    /// The service hosted under `key` (a contract's name, or a gRPC standard service's full
    /// name) and the key as the host keeps it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn service_entry(&self, key: &str) -> Option<(&str, &Arc<dyn Service>)> {
        self.services
            .get_key_value(key)
            .map(|(k, s)| (k.as_str(), &s.service))
    }

    /// The service called `name`, if the host serves it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn service(&self, name: &str) -> Option<&Arc<dyn Service>> {
        self.services.get(name).map(|s| &s.service)
    }

    /// The descriptors of the contracts hosted (not gRPC's standard services), sorted by name.
    #[cfg(feature = "openapi")]
    pub(crate) fn descriptors(&self) -> Vec<&'static ServiceDescriptor> {
        let mut all: Vec<_> = self
            .services
            .iter()
            .filter(|(key, s)| *key == s.service.descriptor().name)
            .map(|(_, s)| s.service.descriptor())
            .collect();
        all.sort_by_key(|d| d.name);
        all
    }

    /// The descriptors of every service hosted, gRPC's standard services included, with the
    /// names they are found by.
    pub(crate) fn all_services(
        &self,
    ) -> impl Iterator<Item = (&str, &'static crate::core::service::ServiceDescriptor)> {
        self.services
            .iter()
            .map(|(key, s)| (key.as_str(), s.service.descriptor()))
    }

    /// The service called `name` with its operations' metric handles.
    pub(crate) fn served(&self, name: &str) -> Option<&Served> {
        // `ptr::eq` on `str`s compares address and length.
        if let Some((_, served)) = self.by_address.iter().find(|(n, _)| std::ptr::eq(*n, name)) {
            return Some(served);
        }
        self.services.get(name).map(|s| &**s)
    }

    /// Whether the host is ready for new work: true until a shutdown begins.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// A shutdown began: the host reports itself not ready (its calls are still served until
    /// the drain).
    pub(crate) fn set_unready(&self) {
        self.ready.store(false, Ordering::Release);
        self.ready_changed.send_replace(false);
    }

    /// Follows whether the host is ready (true until a shutdown begins).
    pub(crate) fn watch_ready(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ready_changed.subscribe()
    }

    /// Sets the gauges read at scrape time from the host's own counters; `conns` holds the
    /// binding of every open connection.
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn observe_metrics(&self, conns: &[&'static str]) {
        let pool = self.pool.metrics();
        for (t, metrics) in self.own_throttles() {
            metrics.observe(t.running(), t.queued(), t.max_concurrent(), t.max_queued());
        }
        self.metrics.observe(&Observed {
            running: self.throttle.running(),
            queued: self.throttle.queued(),
            max_concurrent: self.throttle.max_concurrent(),
            max_queued: self.throttle.max_queued(),
            pool: &pool,
            conns,
            ready: self.is_ready(),
        });
    }

    /// Whether a drain has begun. (SeqCst, as the count in [`Dispatcher::admit`] and the
    /// drain's own check: a call and a drain that begin at once see each other.)
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// A drain begins (or the host stopped): calls that arrive from now on are refused.
    pub(crate) fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    fn call_started(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    /// A call arrived that this host will serve even if a drain begins now: it counts as
    /// arriving from here on (and in flight once tracked), so the drain waits for it.
    /// keel-wire takes it under its connection's lock for every Request that arrives before
    /// the connection's GoAway (so it is ordered with that GoAway's `last_call_id`).
    pub(crate) fn arrival(self: &Arc<Self>) -> Arrival {
        self.arriving.fetch_add(1, Ordering::SeqCst);
        Arrival {
            dispatcher: Some(self.clone()),
        }
    }

    /// A call arrived on a binding whose connections carry no GoAway ids (HTTP): its
    /// [`Arrival`], or `None` if the host is draining (the binding answers that the call was
    /// not processed). The call is counted before the check, so a drain that begins at the
    /// same moment either waits for it or is seen by it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Arrival> {
        let arrival = self.arrival();
        (!self.is_shutting_down()).then_some(arrival)
    }

    /// A call passed decoding: it counts as accepted.
    fn call_accepted(&self) {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn call_finished(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 && self.is_shutting_down() {
            self.drained.notify_waiters();
        }
    }

    fn arrival_ended(&self) {
        if self.arriving.fetch_sub(1, Ordering::SeqCst) == 1 && self.is_shutting_down() {
            self.drained.notify_waiters();
        }
    }

    /// Calls admitted and not yet tracked (their `Arrival` is in a binding's hands), on every
    /// connection.
    pub(crate) fn arriving(&self) -> usize {
        self.arriving.load(Ordering::SeqCst)
    }

    /// No call in flight, and none arriving: what a drain waits for.
    fn settled(&self) -> bool {
        self.arriving.load(Ordering::SeqCst) == 0 && self.in_flight() == 0
    }

    /// Calls in flight now (admitted, not yet answered).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Calls waiting in the throttle queues now (the host's and the services' own).
    pub(crate) fn queued(&self) -> usize {
        self.throttle.queued() + self.own_throttles().map(|(t, _)| t.queued()).sum::<usize>()
    }

    /// The services' own throttles, with their metric handles.
    fn own_throttles(&self) -> impl Iterator<Item = &(Arc<Throttle>, ThrottleMetrics)> {
        self.services.values().filter_map(|s| s.throttle.as_ref())
    }

    /// Milliseconds since the dispatcher started (the clock of connections' activity).
    pub(crate) fn now_ms(&self) -> u64 {
        self.ms_at(crate::runtime::clock::now())
    }

    /// `at` on the clock of [`now_ms`](Dispatcher::now_ms).
    pub(crate) fn ms_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// A connection of `binding` was closed for taking too long (a handshake, a frame, a head,
    /// a body, unsent output, or idle).
    pub(crate) fn timed_out(&self, binding: &'static str) {
        self.stats.timed_out.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = self.metrics.conn(binding) {
            m.timed_out.increment(1);
        }
    }

    /// Waits until no call is in flight or arriving, or until `deadline`: the drain's wait.
    pub(crate) async fn settle(&self, deadline: tokio::time::Instant) {
        loop {
            let notified = self.drained.notified();
            if self.settled() {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
    }
}
