//! Dispatch: from a call that arrived on any binding to its handler and back. Admission
//! (throttle and per-connection limits), deadlines, and the hand-off to keel-pool (plain `fn`
//! operations) or the runtime (`async fn` operations).
//!
//! The [`Dispatcher`] is what a host's bindings share: the services, the throttle, the pool,
//! and the registry of open connections (each a [`ConnShared`]) with the drain that stops them.
//! It imports neither the host nor any binding: bindings call [`dispatch`] with an [`Incoming`]
//! call and answer it through their [`Responder`].

mod call;
mod conn;
mod throttle;

pub(crate) use call::{dispatch, Incoming};
pub(crate) use conn::{ConnInfo, ConnShared, Responder};
pub use throttle::ThrottleConfig;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::core::service::Service;
use crate::core::status::{Status, StatusCode};
use throttle::Throttle;

/// The dispatcher's limits, as plain values from the host's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Calls in flight on one connection; more are answered `Busy`.
    pub(crate) max_calls_per_connection: usize,
}

/// Counters the dispatcher keeps for the host's stats.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) opened: AtomicU64,
    pub(crate) closed: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) calls: AtomicU64,
}

/// What every connection of a host shares: services, admission, the pool, open connections.
pub(crate) struct Dispatcher {
    services: HashMap<String, Arc<dyn Service>>,
    pub(crate) limits: Limits,
    pub(crate) pool: Arc<keel_pool::Pool>,
    pub(crate) throttle: Arc<Throttle>,
    shutting_down: AtomicBool,
    in_flight: AtomicUsize,
    drained: Notify,
    conns: Mutex<HashMap<u64, Arc<ConnShared>>>,
    next_conn: AtomicU64,
    pub(crate) stats: Counters,
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

/// What [`Dispatcher::drain`] left unfinished.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drained {
    /// Calls still running at the close timeout, answered `ShuttingDown`.
    pub(crate) abandoned_calls: usize,
}

impl Dispatcher {
    /// A dispatcher for `services` (names already checked unique by the caller).
    pub(crate) fn new(
        services: HashMap<String, Arc<dyn Service>>,
        limits: Limits,
        throttle: ThrottleConfig,
        pool: keel_pool::Pool,
    ) -> Dispatcher {
        Dispatcher {
            services,
            limits,
            pool: Arc::new(pool),
            throttle: Throttle::new(throttle),
            shutting_down: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            drained: Notify::new(),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            stats: Counters::default(),
        }
    }

    /// The service called `name`, if the host serves it.
    pub(crate) fn service(&self, name: &str) -> Option<&Arc<dyn Service>> {
        self.services.get(name)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    fn call_started(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A call passed decoding: it counts as accepted.
    fn call_accepted(&self) {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn call_finished(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 && self.is_shutting_down() {
            self.drained.notify_waiters();
        }
    }

    /// Calls in flight now (admitted, not yet answered).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Calls waiting in the throttle queue now.
    pub(crate) fn queued(&self) -> usize {
        self.throttle.queued()
    }

    /// A fresh connection id, unique for the host's life.
    pub(crate) fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    fn conn_map(&self) -> MutexGuard<'_, HashMap<u64, Arc<ConnShared>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections open now.
    pub(crate) fn conn_count(&self) -> usize {
        self.conn_map().len()
    }

    /// Registers an open connection.
    pub(crate) fn register(&self, conn: Arc<ConnShared>) {
        self.stats.opened.fetch_add(1, Ordering::Relaxed);
        self.conn_map().insert(conn.id, conn);
    }

    /// The connection is closed: answers nothing more, forgets it.
    pub(crate) fn unregister(&self, id: u64) {
        if self.conn_map().remove(&id).is_some() {
            self.stats.closed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every open connection.
    pub(crate) fn conns(&self) -> Vec<Arc<ConnShared>> {
        self.conn_map().values().cloned().collect()
    }

    /// Stop taking calls, let those in flight finish within `close_timeout`, answer the rest
    /// `ShuttingDown`, and close every connection.
    pub(crate) async fn drain(&self, close_timeout: Duration) -> Drained {
        self.shutting_down.store(true, Ordering::Release);
        for c in self.conns() {
            c.go_away("host shutting down");
        }
        let deadline = tokio::time::Instant::now() + close_timeout;
        loop {
            let notified = self.drained.notified();
            if self.in_flight() == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let abandoned = self.in_flight();
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
        Drained {
            abandoned_calls: abandoned,
        }
    }
}
