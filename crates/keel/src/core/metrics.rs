//! Metrics: what keel reports through the [`metrics`](https://docs.rs/metrics) facade, and a
//! Prometheus recorder to serve them with.
//!
//! keel records its counters, gauges and histograms through the `metrics` crate, so the
//! application picks the exporter: install any `metrics` recorder, or call
//! [`install_prometheus`] (feature `prometheus`, on by default), whose text a host's admin
//! endpoint serves at `GET /metrics` ([`HostBuilder::admin`](crate::host::HostBuilder::admin)).
//!
//! **Install the recorder before building hosts and channels.** keel registers its handles
//! once, when a host starts (per service and operation, per binding) and when a channel is
//! built, so that a call costs a few atomic additions rather than a lookup by name; a handle
//! registered while no recorder was installed stays a no-op for that host's or channel's life.
//! With no recorder installed, recording costs next to nothing.
//!
//! # Names
//!
//! Prometheus conventions: base units (seconds), `_total` counters, `_seconds` histograms.
//! Labels: `service` and `operation` (a contract's names), `code` ([`StatusCode::as_str`](crate::StatusCode::as_str)),
//! `binding` (the URL scheme: `tcp`, `tcps`, `unix`, `http`, `https`, `quic`, or `http-service`
//! for [`Host::http_service`](crate::Host::http_service)).
//!
//! Host, per operation (recorded as calls happen):
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `keel_server_calls_total` | counter | service, operation, code | calls answered, by status code (refusals included) |
//! | `keel_server_calls_in_flight` | gauge | service, operation | calls admitted and not yet answered |
//! | `keel_server_throttle_wait_seconds` | histogram | service, operation | time queued in the throttle (0 when admitted at once) |
//! | `keel_server_pool_wait_seconds` | histogram | service, operation | blocking operations: from the hand-off to keel-pool to the start on a pool thread |
//! | `keel_server_handler_seconds` | histogram | service, operation | the handler itself, with decoding its arguments and encoding its reply (over keel-wire a call started at once is timed from the reader's latest clock reading, the read or the previous call's end; over HTTP from when its body has been read) |
//! | `keel_server_call_duration_seconds` | histogram | service, operation | the whole server time, from the request's arrival to the answer |
//! | `keel_server_stream_messages_sent_total`, `keel_server_stream_messages_received_total` | counter | service, operation | messages of streams of messages the host sent (reply streams) and received (request streams), registered on the operation's first stream |
//! | `keel_server_handler_blocking_total` | counter | service, operation | polls of an `async` handler that held its runtime worker longer than the blocking watchdog's threshold ([`HostBuilder::blocking_watchdog`](crate::host::HostBuilder::blocking_watchdog)), one per poll |
//!
//! The phases are separate histograms, not a `phase` label, so that no query adds up a total and
//! its parts. They are recorded for calls that start; the total for every call answered.
//!
//! Host, throttle, pool and connections (gauges and the pool's counters are read when
//! `/metrics` is scraped, from the host that serves the scrape; the rest are recorded as they
//! happen):
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `keel_throttle_calls_running` | gauge | (service) | throttle places taken (calls running) |
//! | `keel_throttle_calls_queued` | gauge | (service) | calls waiting for a place |
//! | `keel_throttle_max_concurrent_calls`, `keel_throttle_max_queued_calls` | gauge | (service) | the throttle's limits |
//! | `keel_throttle_rejected_total` | counter | (service) | calls answered `Busy` because the queue was full |
//!
//! The unlabelled throttle series are the host-wide throttle's; a service with a throttle of its
//! own ([`HostBuilder::service_throttle`](crate::host::HostBuilder::service_throttle)) has the same
//! series labelled `service`.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `keel_pool_threads` | gauge | state (`idle`, `busy`, `starting`) | keel-pool's threads |
//! | `keel_pool_min_threads`, `keel_pool_max_threads` | gauge | | the warm floor and the cap |
//! | `keel_pool_tasks_queued` | gauge | | tasks waiting for a thread |
//! | `keel_pool_threads_created_total`, `keel_pool_threads_retired_total` | counter | | threads started; threads retired after `keep_alive` |
//! | `keel_pool_thread_spawn_failures_total` | counter | | thread creations the OS refused |
//! | `keel_pool_queue_wait_seconds` | histogram | | every blocking call's pool wait, all operations together |
//! | `keel_server_connections_open` | gauge | binding | connections open now |
//! | `keel_server_connections_opened_total`, `keel_server_connections_closed_total` | counter | binding | connections past their handshakes; of those, closed |
//! | `keel_server_connections_evicted_total` | counter | binding | closed to make room at `max_connections` |
//! | `keel_server_connections_timed_out_total` | counter | binding | closed for a handshake, frame, head, body or unsent output too slow, or idle |
//! | `keel_server_connections_refused_total` | counter | binding | refused at `max_connections` |
//! | `keel_server_connection_calls` | histogram | binding | calls one connection carried, recorded as it closes (≈ 1 would be seed 004's bug) |
//! | `keel_host_ready` | gauge | | 1 while the host is ready, 0 once a drain began |
//!
//! Client, per channel (recorded as calls happen):
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `keel_client_calls_total` | counter | service, operation, binding, code | calls by outcome (`code` is `unavailable` when no host could be reached or it was lost, `transport_error` for the caller's own failures: a local deadline, a message too large to send, ...) |
//! | `keel_client_call_duration_seconds` | histogram | service, operation, binding | from the call to its answer |
//! | `keel_client_stream_messages_sent_total`, `keel_client_stream_messages_received_total` | counter | service, operation, binding | messages of streams of messages the client sent and received (registered when a call's stream starts) |
//! | `keel_client_hedges_total` | counter | service, operation, binding | hedges sent: attempts of hedged calls after their first (`keel::client::HedgingPolicy`; registered on an operation's first hedge) |
//! | `keel_client_hedges_won_total` | counter | service, operation, binding | hedged calls whose answer came from a hedge, not their first attempt |
//! | `keel_client_reconnects_total` | counter | binding | connections a channel opened after its first (a reconnection, or one more HTTP/1.1 pool connection) |
//!
//! The gauges read at scrape time describe one host: with several hosts in a process, each
//! admin endpoint sets them to its own host's values; counters and histograms of every host
//! in the process add up.

use metrics::Unit;

/// Histogram buckets for durations, in seconds: 25 µs to 10 s.
#[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
pub(crate) const SECONDS_BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Histogram buckets for calls per connection.
#[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
pub(crate) const CALLS_BUCKETS: &[f64] = &[
    1.0,
    2.0,
    5.0,
    10.0,
    100.0,
    1_000.0,
    10_000.0,
    100_000.0,
    1_000_000.0,
];

pub(crate) const SERVER_CALLS: &str = "keel_server_calls_total";
pub(crate) const SERVER_IN_FLIGHT: &str = "keel_server_calls_in_flight";
pub(crate) const SERVER_THROTTLE_WAIT: &str = "keel_server_throttle_wait_seconds";
pub(crate) const SERVER_POOL_WAIT: &str = "keel_server_pool_wait_seconds";
pub(crate) const SERVER_HANDLER: &str = "keel_server_handler_seconds";
pub(crate) const SERVER_HANDLER_BLOCKING: &str = "keel_server_handler_blocking_total";
pub(crate) const SERVER_DURATION: &str = "keel_server_call_duration_seconds";
pub(crate) const THROTTLE_RUNNING: &str = "keel_throttle_calls_running";
pub(crate) const THROTTLE_QUEUED: &str = "keel_throttle_calls_queued";
pub(crate) const THROTTLE_MAX_CONCURRENT: &str = "keel_throttle_max_concurrent_calls";
pub(crate) const THROTTLE_MAX_QUEUED: &str = "keel_throttle_max_queued_calls";
pub(crate) const THROTTLE_REJECTED: &str = "keel_throttle_rejected_total";
pub(crate) const POOL_THREADS: &str = "keel_pool_threads";
pub(crate) const POOL_MIN_THREADS: &str = "keel_pool_min_threads";
pub(crate) const POOL_MAX_THREADS: &str = "keel_pool_max_threads";
pub(crate) const POOL_QUEUED: &str = "keel_pool_tasks_queued";
pub(crate) const POOL_CREATED: &str = "keel_pool_threads_created_total";
pub(crate) const POOL_RETIRED: &str = "keel_pool_threads_retired_total";
pub(crate) const POOL_SPAWN_FAILURES: &str = "keel_pool_thread_spawn_failures_total";
pub(crate) const POOL_QUEUE_WAIT: &str = "keel_pool_queue_wait_seconds";
pub(crate) const CONNS_OPEN: &str = "keel_server_connections_open";
pub(crate) const CONNS_OPENED: &str = "keel_server_connections_opened_total";
pub(crate) const CONNS_CLOSED: &str = "keel_server_connections_closed_total";
pub(crate) const CONNS_EVICTED: &str = "keel_server_connections_evicted_total";
pub(crate) const CONNS_TIMED_OUT: &str = "keel_server_connections_timed_out_total";
pub(crate) const CONNS_REFUSED: &str = "keel_server_connections_refused_total";
pub(crate) const CONN_CALLS: &str = "keel_server_connection_calls";
pub(crate) const HOST_READY: &str = "keel_host_ready";
pub(crate) const CLIENT_CALLS: &str = "keel_client_calls_total";
pub(crate) const CLIENT_DURATION: &str = "keel_client_call_duration_seconds";
pub(crate) const CLIENT_RECONNECTS: &str = "keel_client_reconnects_total";
pub(crate) const CLIENT_HEDGES: &str = "keel_client_hedges_total";
pub(crate) const CLIENT_HEDGES_WON: &str = "keel_client_hedges_won_total";
pub(crate) const SERVER_MESSAGES_SENT: &str = "keel_server_stream_messages_sent_total";
pub(crate) const SERVER_MESSAGES_RECEIVED: &str = "keel_server_stream_messages_received_total";
pub(crate) const CLIENT_MESSAGES_SENT: &str = "keel_client_stream_messages_sent_total";
pub(crate) const CLIENT_MESSAGES_RECEIVED: &str = "keel_client_stream_messages_received_total";

/// A stream's message counters (metrics): messages sent and received.
#[derive(Clone)]
pub(crate) struct StreamCounters {
    /// Messages sent.
    pub(crate) sent: metrics::Counter,
    /// Messages received.
    pub(crate) received: metrics::Counter,
}

impl std::fmt::Debug for StreamCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamCounters")
    }
}

/// Tells the installed recorder what each of keel's metrics is (Prometheus' `# HELP`). Cheap;
/// called whenever a host starts or a channel is built, as a recorder installed in between
/// would otherwise lack them.
/// The time from `from` to `to`, in seconds for a histogram, worked out only if the
/// histogram records it: a handle registered with no recorder installed (the metrics crate's
/// no-op) never asks, and the call path then does no `Instant` arithmetic for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Elapsed {
    pub(crate) from: std::time::Instant,
    pub(crate) to: std::time::Instant,
}

impl metrics::IntoF64 for Elapsed {
    fn into_f64(self) -> f64 {
        self.to.saturating_duration_since(self.from).as_secs_f64()
    }
}

/// The time from an instant until the histogram asks (see [`Elapsed`]): no clock read unless
/// a recorder records it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Since(pub(crate) std::time::Instant);

impl metrics::IntoF64 for Since {
    fn into_f64(self) -> f64 {
        (crate::runtime::clock::now() - self.0).as_secs_f64()
    }
}

pub(crate) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    let s = Unit::Seconds;
    describe_counter!(SERVER_CALLS, "Calls answered by the host, by status code.");
    describe_gauge!(SERVER_IN_FLIGHT, "Calls admitted and not yet answered.");
    describe_histogram!(
        SERVER_THROTTLE_WAIT,
        s,
        "Time a call waited in the throttle queue."
    );
    describe_histogram!(
        SERVER_POOL_WAIT,
        s,
        "Blocking calls: time from the hand-off to keel-pool to the start on a thread."
    );
    describe_histogram!(SERVER_HANDLER, s, "Time the handler ran.");
    describe_counter!(
        SERVER_HANDLER_BLOCKING,
        "Polls of an async handler that held its runtime worker past the blocking watchdog's threshold."
    );
    describe_histogram!(
        SERVER_DURATION,
        s,
        "Server time of a call, from its arrival to its answer."
    );
    describe_gauge!(THROTTLE_RUNNING, "Throttle places taken (calls running).");
    describe_gauge!(THROTTLE_QUEUED, "Calls waiting for a throttle place.");
    describe_gauge!(
        THROTTLE_MAX_CONCURRENT,
        "The throttle's limit on calls running."
    );
    describe_gauge!(THROTTLE_MAX_QUEUED, "The throttle's limit on calls queued.");
    describe_counter!(
        THROTTLE_REJECTED,
        "Calls answered Busy: the throttle queue was full."
    );
    describe_gauge!(POOL_THREADS, "keel-pool threads by state.");
    describe_gauge!(POOL_MIN_THREADS, "keel-pool's warm floor of threads.");
    describe_gauge!(POOL_MAX_THREADS, "keel-pool's cap on threads.");
    describe_gauge!(POOL_QUEUED, "Tasks waiting for a keel-pool thread.");
    describe_counter!(POOL_CREATED, "keel-pool threads started.");
    describe_counter!(
        POOL_RETIRED,
        "keel-pool threads retired after keep-alive idle."
    );
    describe_counter!(
        POOL_SPAWN_FAILURES,
        "keel-pool thread creations the OS refused."
    );
    describe_histogram!(
        POOL_QUEUE_WAIT,
        s,
        "Time a blocking call waited for a pool thread."
    );
    describe_gauge!(CONNS_OPEN, "Connections open.");
    describe_counter!(CONNS_OPENED, "Connections past their handshakes.");
    describe_counter!(CONNS_CLOSED, "Connections closed.");
    describe_counter!(
        CONNS_EVICTED,
        "Connections closed to make room at the limit."
    );
    describe_counter!(
        CONNS_TIMED_OUT,
        "Connections closed for being too slow or idle."
    );
    describe_counter!(
        CONNS_REFUSED,
        "Connections refused at the connection limit."
    );
    describe_histogram!(
        CONN_CALLS,
        "Calls one connection carried, recorded as it closed."
    );
    describe_gauge!(
        HOST_READY,
        "1 while the host is ready, 0 once a drain began."
    );
    describe_counter!(CLIENT_CALLS, "Calls made by clients, by status code.");
    describe_histogram!(CLIENT_DURATION, s, "Client calls from start to answer.");
    describe_counter!(
        CLIENT_HEDGES,
        "Hedges sent: attempts of hedged calls after their first."
    );
    describe_counter!(
        CLIENT_HEDGES_WON,
        "Hedged calls whose answer came from a hedge."
    );
    describe_counter!(
        CLIENT_RECONNECTS,
        "Connections a channel opened after its first."
    );
    describe_counter!(
        SERVER_MESSAGES_SENT,
        "Messages the host sent on streams of messages."
    );
    describe_counter!(
        SERVER_MESSAGES_RECEIVED,
        "Messages the host received on streams of messages."
    );
    describe_counter!(
        CLIENT_MESSAGES_SENT,
        "Messages clients sent on streams of messages."
    );
    describe_counter!(
        CLIENT_MESSAGES_RECEIVED,
        "Messages clients received on streams of messages."
    );
}

#[cfg(feature = "prometheus")]
pub use prometheus::{install_prometheus, Prometheus};

#[cfg(feature = "prometheus")]
mod prometheus {
    use std::collections::HashMap;
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use crossbeam_queue::ArrayQueue;
    use metrics::{
        Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString,
        Unit,
    };
    use metrics_exporter_prometheus::{
        Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
    };
    use parking_lot::Mutex;

    use super::{CALLS_BUCKETS, CONN_CALLS, SECONDS_BUCKETS};
    use crate::core::error::{Error, Kind};

    /// Samples a histogram holds for its recorder before a thread moves them over
    /// ([`Handoff`]): 2 KiB per histogram.
    const HANDOFF_SAMPLES: usize = 128;

    /// keel's Prometheus recorder: renders every metric recorded in the process as Prometheus
    /// text (format 0.0.4). Cheap to clone.
    #[derive(Clone, Debug)]
    pub struct Prometheus {
        handle: PrometheusHandle,
        histograms: Arc<Histograms>,
    }

    impl Prometheus {
        /// The metrics as Prometheus text, with every histogram sample recorded before the
        /// call (as far as the exporter's own histograms keep them: a sample recorded at the
        /// very moment another scrape clears them can be lost there).
        pub fn render(&self) -> String {
            self.histograms.hand_over();
            self.handle.render()
        }
    }

    /// Installs keel's Prometheus recorder as the process's `metrics` recorder, once; later
    /// calls return the same one. Durations are histograms with buckets from 25 µs to 10 s.
    /// A host with an admin endpoint calls it when it starts.
    ///
    /// A histogram's samples reach the Prometheus histogram through a small queue of its own,
    /// which the thread that fills it, a scrape ([`Prometheus::render`]) or a background thread
    /// (every 5 s) empties: the exporter's histograms cost a thread that records into them for
    /// the first time a walk over every other live thread that did, and a burst of 1,000 new
    /// pool threads would otherwise pay about half a million such steps.
    ///
    /// # Errors
    /// When another `metrics` recorder was installed first (keel's metrics then go to that
    /// one).
    pub fn install_prometheus() -> Result<Prometheus, Error> {
        static INSTALLED: OnceLock<Result<Prometheus, String>> = OnceLock::new();
        let installed = INSTALLED.get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets(SECONDS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(CONN_CALLS.into()), CALLS_BUCKETS)
                })
                .map_err(|e| e.to_string())?;
            let recorder = Handoffs::new(builder.build_recorder());
            let prometheus = Prometheus {
                handle: recorder.inner.handle(),
                histograms: recorder.histograms.clone(),
            };
            metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
            // Histograms collect samples until drained: drain them even if nobody scrapes.
            let upkeep = prometheus.clone();
            std::thread::Builder::new()
                .name("keel-metrics".into())
                .spawn(move || loop {
                    std::thread::sleep(Duration::from_secs(5));
                    upkeep.histograms.hand_over();
                    upkeep.handle.run_upkeep();
                })
                .map_err(|e| e.to_string())?;
            Ok(prometheus)
        });
        installed.clone().map_err(|e| {
            Error::new(
                Kind::Config,
                format!("cannot install keel's Prometheus recorder: {e}"),
            )
        })
    }

    /// The exporter's recorder with [`Handoff`] histograms.
    struct Handoffs {
        inner: PrometheusRecorder,
        histograms: Arc<Histograms>,
    }

    impl Handoffs {
        fn new(inner: PrometheusRecorder) -> Handoffs {
            Handoffs {
                inner,
                histograms: Arc::default(),
            }
        }
    }

    /// Every histogram registered, one [`Handoff`] per key.
    #[derive(Default)]
    struct Histograms(Mutex<HashMap<Key, Arc<Handoff>>>);

    impl std::fmt::Debug for Histograms {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Histograms")
        }
    }

    impl Histograms {
        /// Moves every queued sample to its Prometheus histogram.
        fn hand_over(&self) {
            let all: Vec<Arc<Handoff>> = self.0.lock().values().cloned().collect();
            for h in all {
                h.hand_over();
            }
        }
    }

    /// A histogram whose samples wait in a bounded queue until a thread moves them to the
    /// exporter's histogram: the thread that finds the queue full, a scrape, or the upkeep.
    ///
    /// The exporter's histogram (metrics-util's `AtomicBucket`) pins crossbeam-epoch's global
    /// collector on every sample, and a thread's first pin (and every 128th after) walks the
    /// list of every live thread registered with that collector. A pool thread or a blocking
    /// client's thread that records one call and retires would pay that walk each, so a burst
    /// of N new threads costs about N²/2 steps (tens of ms of CPU for 1,000 pool and 1,000
    /// client threads in one process, measured in `keel-lab burst`). Here most threads only
    /// push to the queue, which needs no registration; about one sample in [`HANDOFF_SAMPLES`]
    /// moves a queue's worth.
    struct Handoff {
        queue: ArrayQueue<f64>,
        to: Histogram,
        /// Held while samples move: a scrape waits for a move under way, so that a sample
        /// popped from the queue is in the exporter's histogram before the scrape reads it.
        moving: Mutex<()>,
    }

    impl Handoff {
        /// Moves the queued samples, at most a queue's worth (a thread that records while
        /// others refill the queue does not move theirs forever).
        fn move_queued(&self) {
            for _ in 0..HANDOFF_SAMPLES {
                let Some(v) = self.queue.pop() else { break };
                self.to.record(v);
            }
        }

        /// Moves every sample queued now, after any move under way (a scrape, the upkeep).
        fn hand_over(&self) {
            let _moving = self.moving.lock();
            self.move_queued();
        }
    }

    impl HistogramFn for Handoff {
        fn record(&self, value: f64) {
            if let Err(value) = self.queue.push(value) {
                // Full: move the queue's samples unless someone else is (then this one goes
                // straight to the exporter's histogram; nothing waits on the call path).
                if let Some(_moving) = self.moving.try_lock() {
                    self.move_queued();
                }
                self.to.record(value);
            }
        }
    }

    impl Recorder for Handoffs {
        fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
            self.inner.describe_counter(key, unit, description);
        }

        fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
            self.inner.describe_gauge(key, unit, description);
        }

        fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
            self.inner.describe_histogram(key, unit, description);
        }

        fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
            self.inner.register_counter(key, metadata)
        }

        fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
            self.inner.register_gauge(key, metadata)
        }

        /// One [`Handoff`] per key, for the recorder's life: keel does not set the exporter's
        /// idle timeout, which would drop a histogram whose handle the `Handoff` keeps.
        fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
            let mut all = self.histograms.0.lock();
            if let Some(h) = all.get(key) {
                return Histogram::from_arc(h.clone());
            }
            let handoff = Arc::new(Handoff {
                queue: ArrayQueue::new(HANDOFF_SAMPLES),
                to: self.inner.register_histogram(key, metadata),
                moving: Mutex::new(()),
            });
            all.insert(key.clone(), handoff.clone());
            Histogram::from_arc(handoff)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Samples reach the rendered text whether they were queued or moved, and a full
        /// queue moves its samples rather than dropping any.
        #[test]
        fn every_sample_is_rendered() {
            let recorder = Handoffs::new(PrometheusBuilder::new().build_recorder());
            let prometheus = Prometheus {
                handle: recorder.inner.handle(),
                histograms: recorder.histograms.clone(),
            };
            let samples = 3 * HANDOFF_SAMPLES + 5;
            metrics::with_local_recorder(&recorder, || {
                let h = metrics::histogram!("keel_test_seconds", "op" => "a");
                // Registered twice, one queue.
                let again = metrics::histogram!("keel_test_seconds", "op" => "a");
                for i in 0..samples {
                    if i % 2 == 0 { &h } else { &again }.record(1.0);
                }
            });
            assert_eq!(recorder.histograms.0.lock().len(), 1);
            let text = prometheus.render();
            let count = text
                .lines()
                .find(|l| l.starts_with("keel_test_seconds_count"))
                .and_then(|l| l.rsplit(' ').next())
                .unwrap_or_else(|| panic!("no count in:\n{text}"));
            assert_eq!(count, samples.to_string(), "{text}");
        }
    }
}
