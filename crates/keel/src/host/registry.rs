//! The host's registry of connections: those in their handshakes and those open, the
//! connection limit (evict the oldest handshake, else the connection idle longest, an unused one
//! first), idle reaping, connection age, and the drain that tells every connection to go away.
//!
//! Bindings register the connections they serve through [`HostConnRegistry`] (defined with
//! the bindings, so that they need not import the host); the accept loop, the reapers, the
//! admin endpoint and [`Host`](super::Host) use the rest.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::bindings::HostConnRegistry;
use crate::core::status::{Status, StatusCode};
use crate::dispatch::{Dispatcher, HostConn};

/// A connection in its handshakes: the task running them (once spawned), and its binding.
#[derive(Debug)]
struct Handshake {
    task: Option<AbortHandle>,
    binding: &'static str,
}

/// What [`Registry::drain`] left unfinished.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drained {
    /// Calls still running at the close timeout, answered `ShuttingDown`.
    pub(crate) abandoned_calls: usize,
}

/// Every connection of a host, from its accept to its close.
#[derive(Debug)]
pub(crate) struct Registry {
    dispatcher: Arc<Dispatcher>,
    /// Connections open (past their handshakes), by id.
    conns: Mutex<HashMap<u64, Arc<HostConn>>>,
    /// Connections still in their handshakes (TLS, keel's), by id (so in accept order), with
    /// the task running each (once it is known): the first to go when the connection limit
    /// needs room.
    handshaking: Mutex<BTreeMap<u64, Handshake>>,
    /// Set once the host has stopped: a connection that finishes its handshakes later is
    /// closed as it registers.
    registrations_closed: AtomicBool,
    next_id: AtomicU64,
}

/// How many times [`Registry::admit`] makes room for one attempt before it refuses it.
const ADMIT_ROUNDS: usize = 3;

/// Whether the connections counted in `handshakes` and `conns` reach `limit` (see
/// [`Registry::admit`]). The exact count walks the connections: only needed near the limit.
fn full(
    handshakes: &BTreeMap<u64, Handshake>,
    conns: &HashMap<u64, Arc<HostConn>>,
    limit: usize,
) -> bool {
    handshakes.len() + conns.len() >= limit
        && handshakes.len() + conns.values().filter(|c| !c.is_closing()).count() >= limit
}

impl Registry {
    /// An empty registry of the connections whose calls go to `dispatcher`.
    pub(crate) fn new(dispatcher: Arc<Dispatcher>) -> Registry {
        Registry {
            dispatcher,
            conns: Mutex::new(HashMap::new()),
            handshaking: Mutex::new(BTreeMap::new()),
            registrations_closed: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        }
    }

    /// The dispatcher the connections' calls go to.
    pub(crate) fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// A fresh connection id, unique for the host's life.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn conn_map(&self) -> MutexGuard<'_, HashMap<u64, Arc<HostConn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections open now (registered, past their handshakes).
    pub(crate) fn conn_count(&self) -> usize {
        self.conn_map().len()
    }

    /// Every open connection.
    pub(crate) fn conns(&self) -> Vec<Arc<HostConn>> {
        self.conn_map().values().cloned().collect()
    }

    /// The binding of every open connection (for the metrics' gauges).
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn bindings(&self) -> Vec<&'static str> {
        self.conn_map().values().map(|c| c.info.binding).collect()
    }

    fn handshakes(&self) -> MutexGuard<'_, BTreeMap<u64, Handshake>> {
        self.handshaking.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `limit` connections count toward the connection limit: those in their
    /// handshakes, and those registered that the host is not closing already.
    ///
    /// Both maps are read under the handshakes' lock, which [`register`](Self::register) also
    /// holds while it moves a connection from one to the other: read one after the other, a
    /// connection registering in between was counted in both, and the limit evicted a
    /// handshake (a client's, well within the limit) to make room it did not need.
    #[cfg(test)]
    pub(crate) fn is_full(&self, limit: usize) -> bool {
        let handshakes = self.handshakes();
        full(&handshakes, &self.conn_map(), limit)
    }

    /// Admits a connection attempt of `binding` (an accepted TCP connection, a QUIC Initial)
    /// under the connection limit `limit`: it gets its id and counts toward the limit from now
    /// until it registers (which takes it out of the handshakes itself) or
    /// [`handshake_ended`](Registry::handshake_ended) (its task's end). Called before the
    /// connection's task is spawned, so that the task cannot register it first and leave its
    /// handshake entry behind: a live connection would then count twice, and the limit could
    /// evict it as a handshake. At the limit it makes room
    /// ([`evict_one`](Self::evict_one)) and looks again; it is refused (counted; `None`) when
    /// nothing can go.
    ///
    /// The look and the count are one step, under the handshakes' lock: each endpoint has an
    /// accept loop of its own (a `tcp://` and a `quic://` one, two listeners), and two attempts
    /// that looked and then counted apart could both take the last place. A place made by an
    /// eviction can be taken by another loop before this one looks again; the attempt then
    /// makes room once more, [`ADMIT_ROUNDS`] times at most.
    pub(crate) fn admit(&self, limit: usize, binding: &'static str) -> Option<u64> {
        for _ in 0..ADMIT_ROUNDS {
            {
                let mut handshakes = self.handshakes();
                if !full(&handshakes, &self.conn_map(), limit) {
                    let id = self.next_id();
                    handshakes.insert(
                        id,
                        Handshake {
                            task: None,
                            binding,
                        },
                    );
                    return Some(id);
                }
            }
            if !self.evict_one() {
                break;
            }
        }
        self.refused(binding);
        None
    }

    /// The task running connection `id`'s handshakes, for eviction (if they are not over
    /// already).
    pub(crate) fn handshake_task(&self, id: u64, task: AbortHandle) {
        if let Some(h) = self.handshakes().get_mut(&id) {
            h.task = Some(task);
        }
    }

    /// Connection `id`'s task ended (a connection that registered was taken out then already).
    pub(crate) fn handshake_ended(&self, id: u64) {
        self.handshakes().remove(&id);
    }

    /// Makes room for a newcomer at the connection limit: ends the oldest handshake still
    /// going, or else closes the connection idle longest, one that never carried a call first.
    /// False if every connection has calls in flight.
    ///
    /// Never carried a call first: a connection is idle from when it registered, which on a
    /// loaded host can be well after its accept, so a silent socket accepted long ago can look
    /// less idle than a client pausing between calls; that client, closed, reconnects, and its
    /// new connection ends the oldest handshake, maybe a newcomer's whose task had not run yet
    /// (`hostile.rs`' `http2::sockets_that_never_handshake_cannot_lock_newcomers_out`, once in
    /// 13 runs under load before).
    pub(crate) fn evict_one(&self) -> bool {
        let oldest = {
            let mut handshakes = self.handshakes();
            // (One whose task is not known yet was accepted a moment ago, on this very loop.)
            let id = handshakes
                .iter()
                .find(|(_, h)| h.task.is_some())
                .map(|(id, _)| *id);
            id.and_then(|id| handshakes.remove(&id))
        };
        if let Some(Handshake {
            task: Some(task),
            binding,
        }) = oldest
        {
            task.abort();
            self.evicted(binding);
            return true;
        }
        let now = self.dispatcher.now_ms();
        let idlest = self
            .conns()
            .into_iter()
            .filter(|c| !c.is_closing())
            .filter_map(|c| {
                let unused = c.info.calls.load(Ordering::Relaxed) == 0;
                c.idle_ms(now).map(|idle| ((unused, idle), c))
            })
            .max_by_key(|(key, _)| *key);
        match idlest {
            Some((_, c)) => {
                if c.shut("connection limit reached: closing the connection idle longest") {
                    self.evicted(c.info.binding);
                }
                true
            }
            None => false,
        }
    }

    /// Closes every connection that has had no call in flight for `idle_timeout`.
    pub(crate) fn reap_idle(&self, idle_timeout: Duration) {
        let now = self.dispatcher.now_ms();
        let limit = idle_timeout.as_millis() as u64;
        for c in self.conns() {
            if c.idle_ms(now).is_some_and(|idle| idle >= limit)
                && c.shut("idle timeout: no call for too long")
            {
                self.dispatcher.timed_out(c.info.binding);
            }
        }
    }

    /// Sends GoAway to every connection older than `max_age` (each with its own jitter of
    /// up to ±10 %, so that connections opened together do not all leave together), and closes
    /// those told so once their calls are done, or after `grace`. Returns how many were told.
    pub(crate) fn age_connections(&self, max_age: Duration, grace: Duration) -> usize {
        let now = self.dispatcher.now_ms();
        self.conns()
            .iter()
            .filter(|c| c.age(now, jittered(max_age, c.id), grace))
            .count()
    }

    /// A connection of `binding` was closed to make room at the connection limit.
    fn evicted(&self, binding: &'static str) {
        let d = &self.dispatcher;
        d.stats.evicted.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = d.metrics.conn(binding) {
            m.evicted.increment(1);
        }
    }

    /// A connection of `binding` was refused at the connection limit.
    pub(crate) fn refused(&self, binding: &'static str) {
        let d = &self.dispatcher;
        d.stats.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = d.metrics.conn(binding) {
            m.refused.increment(1);
        }
    }

    /// The host has stopped: connections registering from now on are closed at once, and the
    /// handshakes still going are ended.
    pub(crate) fn close_registrations(&self) {
        self.dispatcher.set_shutting_down();
        self.registrations_closed.store(true, Ordering::Release);
        let handshakes = std::mem::take(&mut *self.handshakes());
        for task in handshakes.into_values().filter_map(|h| h.task) {
            task.abort();
        }
    }

    /// Stop taking calls, let those in flight finish within `close_timeout`, answer the rest
    /// `ShuttingDown`, and close every connection.
    pub(crate) async fn drain(&self, close_timeout: Duration) -> Drained {
        let d = &self.dispatcher;
        d.set_shutting_down();
        for c in self.conns() {
            c.go_away("host shutting down");
        }
        d.settle(tokio::time::Instant::now() + close_timeout).await;
        let abandoned = d.in_flight();
        if abandoned > 0 {
            // Reply streams still flowing end with `ShuttingDown`; a moment for their ends
            // to be written before the connections close.
            d.stop_streams();
            d.settle(tokio::time::Instant::now() + STREAM_END_GRACE)
                .await;
        }
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

impl HostConnRegistry for Registry {
    fn register(&self, conn: Arc<HostConn>) {
        let d = &self.dispatcher;
        d.stats.opened.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = d.metrics.conn(conn.info.binding) {
            m.opened.increment(1);
        }
        // Out of the handshakes and into the open connections in one step (the handshakes'
        // lock, then the connections', as `is_full` takes them): counted once throughout.
        {
            let mut handshakes = self.handshakes();
            handshakes.remove(&conn.id);
            self.conn_map().insert(conn.id, conn.clone());
        }
        if self.registrations_closed.load(Ordering::Acquire) {
            conn.shut("host shut down");
        }
    }

    fn unregister(&self, id: u64) {
        let removed = self.conn_map().remove(&id);
        if let Some(conn) = removed {
            let d = &self.dispatcher;
            d.stats.closed.fetch_add(1, Ordering::Relaxed);
            if let Some(m) = d.metrics.conn(conn.info.binding) {
                m.closed.increment(1);
                m.calls
                    .record(conn.info.calls.load(Ordering::Relaxed) as f64);
            }
        }
    }
}

/// How long a drain waits, after its close timeout, for the reply streams it ended to say so
/// to their clients.
const STREAM_END_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// `max_age` scaled by a factor in [0.9, 1.1) drawn from connection `id` (a fixed hash, so a
/// connection keeps its factor).
fn jittered(max_age: Duration, id: u64) -> Duration {
    max_age.mul_f64(0.9 + 0.2 * crate::core::random::unit_from(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{HostConnInfo, Limits, Responder};

    #[derive(Debug)]
    struct Quiet;

    impl Responder for Quiet {
        fn go_away(&self, _reason: &str) {}
        fn close(&self) {}
    }

    fn registry() -> Arc<Registry> {
        let limits = Limits {
            max_receive_bytes: 1 << 20,
            max_message_size: 1 << 20,
            compress_replies_above: usize::MAX,
            max_reply_streams_per_connection: 1,
        };
        let pool = keel_pool::Pool::builder().min_threads(0).build().unwrap();
        Arc::new(Registry::new(Arc::new(Dispatcher::new(
            HashMap::new(),
            Default::default(),
            limits,
            Default::default(),
            &[],
            pool,
            None,
        ))))
    }

    /// One connection at a time goes from its handshakes to open and closes, many times over,
    /// while another thread asks whether two would be too many: never, since there is never
    /// more than one (a registration read half before and half after counted one twice, and
    /// a newcomer evicted a client's handshake).
    #[test]
    fn a_connection_registering_is_counted_once() {
        let r = registry();
        let stop = Arc::new(AtomicBool::new(false));
        // The checker's count of questions asked: the loop below runs until both sides have
        // done enough, side by side (the barrier), so that the test cannot pass because the
        // checker thread hardly ran while connections registered.
        let asked = Arc::new(AtomicU64::new(0));
        let start = Arc::new(std::sync::Barrier::new(2));
        let checker = std::thread::spawn({
            let (r, stop, asked, start) = (r.clone(), stop.clone(), asked.clone(), start.clone());
            move || {
                start.wait();
                let mut full = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    full += u64::from(r.is_full(2));
                    asked.fetch_add(1, Ordering::Relaxed);
                }
                full
            }
        });
        start.wait();
        let mut registered = 0u64;
        while registered < 200_000 || asked.load(Ordering::Relaxed) < 200_000 {
            let id = r.admit(usize::MAX, "tcp").unwrap();
            let info = HostConnInfo::new(id, "tcp", None, None);
            let conn = HostConn::new(Box::new(Quiet), info, 1, r.dispatcher().clone());
            r.register(Arc::new(conn));
            r.unregister(id);
            registered += 1;
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(checker.join().unwrap(), 0, "counted two connections of one");
    }

    /// Two accept loops (two endpoints) admit an attempt each at once, with one place left and
    /// nothing that could make room: one is admitted and the other refused, every round.
    /// Looked at and counted apart, both took the place now and then: the limit overrun.
    #[test]
    fn two_loops_admitting_at_once_never_overrun_the_limit() {
        const ROUNDS: usize = 20_000;
        let r = registry();
        // Three parties: the two loops, and this thread, which frees the place between rounds.
        let step = Arc::new(std::sync::Barrier::new(3));
        let admit_each_round = |binding| {
            let (r, step) = (r.clone(), step.clone());
            std::thread::spawn(move || {
                (0..ROUNDS)
                    .map(|_| {
                        step.wait();
                        let admitted = r.admit(1, binding).is_some();
                        step.wait();
                        step.wait();
                        admitted
                    })
                    .collect::<Vec<bool>>()
            })
        };
        let (tcp, quic) = (admit_each_round("tcp"), admit_each_round("quic"));
        for _ in 0..ROUNDS {
            step.wait();
            // Both have answered: free the place for the next round.
            step.wait();
            r.handshakes().clear();
            step.wait();
        }
        let (tcp, quic) = (tcp.join().unwrap(), quic.join().unwrap());
        let admitted = |round: usize| usize::from(tcp[round]) + usize::from(quic[round]);
        let overrun = (0..ROUNDS).filter(|&i| admitted(i) == 2).count();
        assert_eq!(overrun, 0, "both attempts admitted with one place left");
        assert!((0..ROUNDS).all(|i| admitted(i) == 1));
        let refused = r.dispatcher().stats.refused.load(Ordering::Relaxed);
        assert_eq!(refused, ROUNDS as u64);
    }
}
