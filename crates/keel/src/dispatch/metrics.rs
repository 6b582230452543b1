//! The host's metric handles, registered once when the host starts (per operation, per
//! binding), so that recording a call costs a few atomic additions and no lookup by name. The
//! names are in `core/metrics.rs`.

use std::sync::OnceLock;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

use crate::core::metrics as m;
use crate::core::status::StatusCode;

/// How many status codes there are (the length of `StatusCode::ALL`).
const CODES: usize = StatusCode::ALL.len();

/// One operation's handles.
#[derive(Debug)]
pub(crate) struct OpMetrics {
    service: &'static str,
    operation: &'static str,
    /// `keel_server_calls_total`, one per code, registered on the code's first call (most
    /// operations only ever see a few codes: no series for the others).
    calls: [OnceLock<Counter>; CODES],
    pub(crate) in_flight: Gauge,
    pub(crate) throttle_wait: Histogram,
    pub(crate) pool_wait: Histogram,
    pub(crate) handler: Histogram,
    pub(crate) total: Histogram,
    /// The operation in the blocking watchdog's registry (`None`: the host's watchdog is off).
    pub(crate) watch: Option<super::watchdog::OpId>,
    /// How long its handler takes, for running its blocking calls in runs (see `schedule`).
    pub(crate) pace: super::schedule::Pace,
    /// Messages of its streams of messages, registered on its first stream.
    messages: OnceLock<crate::core::metrics::StreamCounters>,
}

impl OpMetrics {
    /// The operation's message counters (registered on first use).
    pub(crate) fn stream_counters(&self) -> crate::core::metrics::StreamCounters {
        self.messages
            .get_or_init(|| {
                let labels = [("service", self.service), ("operation", self.operation)];
                crate::core::metrics::StreamCounters {
                    sent: metrics::counter!(m::SERVER_MESSAGES_SENT, &labels),
                    received: metrics::counter!(m::SERVER_MESSAGES_RECEIVED, &labels),
                }
            })
            .clone()
    }

    pub(crate) fn new(
        service: &'static str,
        operation: &'static str,
        watch: Option<super::watchdog::OpId>,
    ) -> OpMetrics {
        let labels = [("service", service), ("operation", operation)];
        OpMetrics {
            watch,
            service,
            operation,
            calls: std::array::from_fn(|_| OnceLock::new()),
            messages: OnceLock::new(),
            in_flight: gauge!(m::SERVER_IN_FLIGHT, &labels),
            throttle_wait: histogram!(m::SERVER_THROTTLE_WAIT, &labels),
            pool_wait: histogram!(m::SERVER_POOL_WAIT, &labels),
            handler: histogram!(m::SERVER_HANDLER, &labels),
            total: histogram!(m::SERVER_DURATION, &labels),
            pace: super::schedule::Pace::default(),
        }
    }

    /// One call answered with `code`.
    pub(crate) fn answered(&self, code: StatusCode) {
        let register = || counter!(m::SERVER_CALLS, "service" => self.service, "operation" => self.operation, "code" => code.as_str());
        match self.calls.get(code as usize) {
            Some(slot) => slot.get_or_init(register).increment(1),
            None => register().increment(1),
        }
    }
}

/// The bindings connection metrics are kept for, by `HostConnInfo::binding`.
const BINDINGS: [&str; 7] = [
    "tcp",
    "tcps",
    "unix",
    "http",
    "https",
    "http-service",
    "quic",
];

/// One binding's host-connection metric handles.
#[derive(Debug)]
pub(crate) struct HostConnMetrics {
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) open: Gauge,
    pub(crate) opened: Counter,
    pub(crate) closed: Counter,
    pub(crate) evicted: Counter,
    pub(crate) timed_out: Counter,
    pub(crate) refused: Counter,
    pub(crate) calls: Histogram,
}

impl HostConnMetrics {
    fn new(binding: &'static str) -> HostConnMetrics {
        let labels = [("binding", binding)];
        HostConnMetrics {
            open: gauge!(m::CONNS_OPEN, &labels),
            opened: counter!(m::CONNS_OPENED, &labels),
            closed: counter!(m::CONNS_CLOSED, &labels),
            evicted: counter!(m::CONNS_EVICTED, &labels),
            timed_out: counter!(m::CONNS_TIMED_OUT, &labels),
            refused: counter!(m::CONNS_REFUSED, &labels),
            calls: histogram!(m::CONN_CALLS, &labels),
        }
    }
}

/// The handles of a service's own throttle: the host-wide throttle's metrics with a `service`
/// label.
#[derive(Debug)]
#[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
pub(crate) struct ThrottleMetrics {
    pub(crate) rejected: Counter,
    running: Gauge,
    queued: Gauge,
    max_concurrent: Gauge,
    max_queued: Gauge,
}

impl ThrottleMetrics {
    pub(crate) fn new(service: &'static str) -> ThrottleMetrics {
        let labels = [("service", service)];
        ThrottleMetrics {
            rejected: counter!(m::THROTTLE_REJECTED, &labels),
            running: gauge!(m::THROTTLE_RUNNING, &labels),
            queued: gauge!(m::THROTTLE_QUEUED, &labels),
            max_concurrent: gauge!(m::THROTTLE_MAX_CONCURRENT, &labels),
            max_queued: gauge!(m::THROTTLE_MAX_QUEUED, &labels),
        }
    }

    /// Sets the gauges, at scrape time.
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn observe(&self, running: usize, queued: usize, max_c: usize, max_q: usize) {
        self.running.set(running as f64);
        self.queued.set(queued as f64);
        self.max_concurrent.set(max_c as f64);
        self.max_queued.set(max_q as f64);
    }
}

/// The host-wide handles: throttle, pool, connections by binding, readiness.
#[derive(Debug)]
#[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
pub(crate) struct HostMetrics {
    /// Per binding (the order of `BINDINGS`), registered on the binding's first connection.
    conns: [OnceLock<HostConnMetrics>; BINDINGS.len()],
    pub(crate) throttle_rejected: Counter,
    pub(crate) pool_queue_wait: Histogram,
    throttle_running: Gauge,
    throttle_queued: Gauge,
    throttle_max_concurrent: Gauge,
    throttle_max_queued: Gauge,
    pool_idle: Gauge,
    pool_busy: Gauge,
    pool_starting: Gauge,
    pool_min: Gauge,
    pool_max: Gauge,
    pool_queued: Gauge,
    pool_created: Counter,
    pool_retired: Counter,
    pool_spawn_failures: Counter,
    ready: Gauge,
}

/// What [`HostMetrics::observe`] sets: the values the host keeps as atomics of its own.
#[derive(Debug)]
#[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
pub(crate) struct Observed<'a> {
    pub(crate) running: usize,
    pub(crate) queued: usize,
    pub(crate) max_concurrent: usize,
    pub(crate) max_queued: usize,
    pub(crate) pool: &'a keel_pool::Metrics,
    /// Open connections by binding.
    pub(crate) conns: &'a [&'static str],
    pub(crate) ready: bool,
}

impl HostMetrics {
    pub(crate) fn new() -> HostMetrics {
        m::describe();
        let pool_threads = |state: &'static str| gauge!(m::POOL_THREADS, "state" => state);
        HostMetrics {
            conns: std::array::from_fn(|_| OnceLock::new()),
            throttle_rejected: counter!(m::THROTTLE_REJECTED),
            pool_queue_wait: histogram!(m::POOL_QUEUE_WAIT),
            throttle_running: gauge!(m::THROTTLE_RUNNING),
            throttle_queued: gauge!(m::THROTTLE_QUEUED),
            throttle_max_concurrent: gauge!(m::THROTTLE_MAX_CONCURRENT),
            throttle_max_queued: gauge!(m::THROTTLE_MAX_QUEUED),
            pool_idle: pool_threads("idle"),
            pool_busy: pool_threads("busy"),
            pool_starting: pool_threads("starting"),
            pool_min: gauge!(m::POOL_MIN_THREADS),
            pool_max: gauge!(m::POOL_MAX_THREADS),
            pool_queued: gauge!(m::POOL_QUEUED),
            pool_created: counter!(m::POOL_CREATED),
            pool_retired: counter!(m::POOL_RETIRED),
            pool_spawn_failures: counter!(m::POOL_SPAWN_FAILURES),
            ready: gauge!(m::HOST_READY),
        }
    }

    /// The handles of `binding`'s connections.
    pub(crate) fn conn(&self, binding: &'static str) -> Option<&HostConnMetrics> {
        let i = BINDINGS.iter().position(|b| *b == binding)?;
        Some(self.conns[i].get_or_init(|| HostConnMetrics::new(BINDINGS[i])))
    }

    /// Sets the gauges (and the pool's counters) from the host's own atomics, at scrape time.
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn observe(&self, o: &Observed<'_>) {
        self.throttle_running.set(o.running as f64);
        self.throttle_queued.set(o.queued as f64);
        self.throttle_max_concurrent.set(o.max_concurrent as f64);
        self.throttle_max_queued.set(o.max_queued as f64);
        let p = o.pool;
        self.pool_idle.set(p.idle as f64);
        self.pool_busy.set(p.busy as f64);
        self.pool_starting.set(p.starting as f64);
        self.pool_min.set(p.min_threads as f64);
        self.pool_max.set(p.max_threads as f64);
        self.pool_queued.set(p.queued as f64);
        self.pool_created.absolute(p.created_total);
        self.pool_retired.absolute(p.retired_total);
        self.pool_spawn_failures.absolute(p.spawn_failures_total);
        self.ready.set(if o.ready { 1.0 } else { 0.0 });
        for (i, binding) in BINDINGS.iter().enumerate() {
            let open = o.conns.iter().filter(|b| *b == binding).count();
            // A binding never seen gets no series, unless it has connections now.
            if open > 0 || self.conns[i].get().is_some() {
                if let Some(c) = self.conn(binding) {
                    c.open.set(open as f64);
                }
            }
        }
    }
}

pub(crate) use crate::core::metrics::{Elapsed, Since};
