//! One connection as the dispatcher sees it, whatever its binding: the calls it has in flight,
//! where each one's answer goes (its [`ReplyTo`]), and the connection's [`Responder`]. Every
//! accepted call is answered exactly once: whoever removes it from `calls` (the handler
//! finishing, a cancel, or the drain timeout) owns the answer.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::oneshot;

use super::schedule::Owner;
use super::{Arrival, Dispatcher};
use crate::core::compress::{self, Compression};
use crate::core::context::{CallFacts, Context};
use crate::core::format::Framing;
use crate::core::metadata::Metadata;
use crate::core::service::{Outcome, Payload};
use crate::core::status::{Status, StatusCode};
use crate::runtime::clock;

/// One call's answer as a binding sends it.
#[derive(Debug)]
pub(crate) struct HostAnswer {
    /// The reply or the status.
    pub(crate) outcome: Outcome,
    /// Reply metadata (the context's and the status's).
    pub(crate) metadata: Metadata,
    /// How an `Ok` body is compressed, if it is.
    pub(crate) compression: Option<Compression>,
}

/// What the dispatcher asks of a connection as a whole. Each binding implements it once.
pub(crate) trait Responder: Send + Sync + std::fmt::Debug + 'static {
    /// Delivers the answer to call `call_id`, for calls answered by the connection
    /// ([`ReplyTo::Connection`]: keel-wire's Reply frames). A binding whose calls each have a
    /// waiter of their own never gets one.
    fn reply(&self, call_id: u64, answer: HostAnswer) {
        let _ = (call_id, answer);
        debug_assert!(
            false,
            "this binding's calls are answered through their waiters"
        );
    }
    /// The host will serve no new calls here; tell the peer (calls it sent already are still
    /// answered).
    fn go_away(&self, reason: &str);
    /// Delivers what is queued, then closes the connection.
    fn close(&self);
    /// Writes the answers queued while this thread ran a run of short blocking calls
    /// ([`deferring`](super::deferring)). A binding that never queues them has nothing to do.
    fn flush(&self) {}
}

/// Where one call's answer goes.
#[derive(Debug)]
pub(crate) enum ReplyTo {
    /// The connection's [`Responder::reply`], by the call's id: keel-wire's Reply frames.
    Connection,
    /// The binding's request waiting for it (HTTP); `None` once answered (a one-way call's
    /// acknowledgement answers it).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Waiter(Option<oneshot::Sender<HostAnswer>>),
}

impl ReplyTo {
    /// A call answered on `tx`.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn waiter(tx: oneshot::Sender<HostAnswer>) -> ReplyTo {
        ReplyTo::Waiter(Some(tx))
    }

    /// Delivers `answer` to call `call_id` of `out`'s connection, where it goes.
    #[inline]
    fn send(self, out: &dyn Responder, call_id: u64, answer: HostAnswer) {
        match self {
            ReplyTo::Connection => out.reply(call_id, answer),
            ReplyTo::Waiter(Some(tx)) => {
                // The request may be gone (its client left): then nobody wants the answer.
                let _ = tx.send(answer);
            }
            ReplyTo::Waiter(None) => {}
        }
    }

    /// Takes where the answer goes, leaving a waiter answered.
    fn take(&mut self) -> ReplyTo {
        match self {
            ReplyTo::Connection => ReplyTo::Connection,
            ReplyTo::Waiter(tx) => ReplyTo::Waiter(tx.take()),
        }
    }
}

/// Facts about one host connection: who is at the other end (for a call's `Context`), and what
/// `Host::connections` reports of it (as the public `ConnectionInfo`).
#[derive(Debug)]
pub(crate) struct HostConnInfo {
    /// The host's id for it, unique for the host's life (in accept order).
    pub(crate) id: u64,
    /// The binding's scheme: `tcp`, `tcps`, `unix`, `http`, `https`.
    pub(crate) binding: &'static str,
    /// The other end, for logs.
    pub(crate) peer: String,
    /// The other end's address (`None` on a Unix socket).
    pub(crate) peer_addr: Option<SocketAddr>,
    /// The client's TLS certificate chain, DER, when it presented one.
    pub(crate) peer_certificates: Option<Arc<[Bytes]>>,
    /// When the connection was accepted.
    pub(crate) opened: Instant,
    /// Calls received on it (accepted or refused).
    pub(crate) calls: AtomicU64,
}

impl HostConnInfo {
    /// A context for something on this connection that is not a call of its own (a session
    /// being opened, a request for a description): `service` and `operation` as named, no
    /// deadline, no span, no stream counters.
    pub(crate) fn context_outside_a_call(
        &self,
        service: &'static str,
        operation: &'static str,
        metadata: Metadata,
        max_message_size: u32,
        session: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Context {
        Context::new(CallFacts {
            service,
            operation,
            binding: self.binding,
            peer_addr: self.peer_addr,
            peer_certificates: self.peer_certificates.clone(),
            deadline: None,
            metadata,
            reply_codec: None,
            span: tracing::Span::none(),
            reply_framing: Framing::Envelope,
            request_framing: None,
            max_message_size,
            session,
            stream_counters: None,
        })
    }

    /// Connection `id` of `binding` with `peer`, accepted now.
    pub(crate) fn new(
        id: u64,
        binding: &'static str,
        peer_addr: Option<SocketAddr>,
        peer_certificates: Option<Arc<[Bytes]>>,
    ) -> HostConnInfo {
        HostConnInfo {
            id,
            binding,
            peer: peer_addr.map_or_else(|| binding.to_string(), |a| a.to_string()),
            peer_addr,
            peer_certificates,
            opened: clock::now(),
            calls: AtomicU64::new(0),
        }
    }
}

/// A call in flight: its context (its cancellation signal: a cancel frame, the caller leaving or
/// the drain timeout set it, and a job that has not started must not start; its reply
/// metadata; the task running it, see [`Context::stop`]) and where its answer goes.
#[derive(Debug)]
struct InFlight {
    ctx: Context,
    reply_to: ReplyTo,
}

/// A connection's calls in flight by call id. foldhash, not SipHash: the map is hashed two
/// times per call, and its size is bounded by the connection's call limit.
type CallMap = HashMap<u64, InFlight, foldhash::fast::RandomState>;

/// A connection's calls in flight, and when one last ended: stamped under the lock that
/// removes the call, so the idle check never sees the call gone and the stamp old, and it
/// costs no clock arithmetic per call (the idle check converts it, rarely).
#[derive(Debug)]
struct Calls {
    map: CallMap,
    /// When the connection opened, or a call last ended.
    last_active: Instant,
}

/// One host connection as dispatch sees it, whatever its binding: its call table (calls in
/// flight, each with where its answer goes), its way to answer them, and the controls the
/// host's registry uses (GoAway, close, idle, age).
#[derive(Debug)]
pub(crate) struct HostConn {
    pub(crate) id: u64,
    out: Box<dyn Responder>,
    calls: Mutex<Calls>,
    /// Calls it may have in flight at once.
    max_calls: usize,
    /// Being closed by the host (evicted, idle): no longer counts toward the connection limit.
    closing: AtomicBool,
    /// When the host told it GoAway for its age (ms since the dispatcher started; 0: not yet).
    aged_at: AtomicU64,
    /// Told GoAway, for any reason.
    told_go_away: AtomicBool,
    /// Reply streams and sessions open (`streams.rs`).
    pub(crate) reply_streams: std::sync::atomic::AtomicUsize,
    pub(crate) info: HostConnInfo,
    pub(crate) dispatcher: Arc<Dispatcher>,
}

impl HostConn {
    /// A connection whose answers go to `out`, with at most `max_calls` calls in flight.
    pub(crate) fn new(
        out: Box<dyn Responder>,
        info: HostConnInfo,
        max_calls: usize,
        dispatcher: Arc<Dispatcher>,
    ) -> HostConn {
        HostConn {
            id: info.id,
            reply_streams: std::sync::atomic::AtomicUsize::new(0),
            out,
            calls: Mutex::new(Calls {
                map: CallMap::default(),
                last_active: clock::now(),
            }),
            max_calls,
            closing: AtomicBool::new(false),
            aged_at: AtomicU64::new(0),
            told_go_away: AtomicBool::new(false),
            info,
            dispatcher,
        }
    }

    /// Removes call `call_id` from those in flight, if it is there, stamping the connection's
    /// activity at `ended`.
    fn remove(&self, call_id: u64, ended: impl FnOnce() -> Instant) -> Option<InFlight> {
        let mut calls = self.calls();
        let removed = calls.map.remove(&call_id);
        if removed.is_some() {
            calls.last_active = ended();
        }
        removed
    }

    /// How long (ms) the connection has had no call in flight; `None` while it has one.
    pub(crate) fn idle_ms(&self, now_ms: u64) -> Option<u64> {
        let calls = self.calls();
        calls.map.is_empty().then(|| {
            let last_active = self.dispatcher.ms_at(calls.last_active);
            now_ms.saturating_sub(last_active)
        })
    }

    /// Whether the host is closing it already.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Closes the connection on the host's initiative (`reason` goes to the peer on
    /// keel-wire). Returns false if it was being closed already.
    pub(crate) fn shut(&self, reason: &str) -> bool {
        if self.closing.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.go_away(reason);
        self.close();
        true
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock()
    }

    /// Registers a call, counted since its `arrival`, answered at `reply_to`. `BadRequest` if a
    /// call with its id is in flight already (it would take that call's place: neither counted
    /// against the limit nor ever answered), `Busy` if the connection already has as many
    /// calls as allowed; the refused call's `reply_to` comes back with the status.
    pub(crate) fn track(
        &self,
        call_id: u64,
        ctx: &Context,
        reply_to: ReplyTo,
        arrival: Arrival,
    ) -> Result<(), (Status, ReplyTo)> {
        let limit = self.max_calls;
        {
            let mut calls = self.calls();
            let at_limit = calls.map.len() >= limit;
            match calls.map.entry(call_id) {
                Entry::Occupied(_) => {
                    let msg = format!("call id {call_id} is already in flight on this connection");
                    return Err((Status::new(StatusCode::BadRequest, msg), reply_to));
                }
                Entry::Vacant(_) if at_limit => {
                    let msg = format!("this connection already has {limit} calls in flight");
                    return Err((Status::new(StatusCode::Busy, msg), reply_to));
                }
                Entry::Vacant(place) => {
                    place.insert(InFlight {
                        ctx: ctx.clone(),
                        reply_to,
                    });
                }
            }
        }
        // No `touch` here: a connection with a call in flight is not idle whatever the clock
        // says; its activity is stamped when the call ends.
        arrival.tracked();
        Ok(())
    }

    /// Answers a tracked call, unless someone else (cancel, drain) already did, with the
    /// reply metadata its context collected (and its status's, for a failure). `ended` is
    /// when the call ended (the connection's last activity).
    pub(crate) fn finish(&self, call_id: u64, one_way: bool, mut outcome: Outcome, ended: Instant) {
        if let Some(InFlight { ctx, reply_to }) = self.remove(call_id, || ended) {
            // The call is over: whatever still watches its context (a task the handler
            // spawned, a handler that outlived its deadline) hears it, as in gRPC.
            ctx.cancel();
            if !one_way {
                let mut metadata = ctx.take_reply_metadata();
                if let Err(status) = &mut outcome {
                    metadata.merge(&std::mem::take(status.metadata_mut()));
                }
                let mut compression = None;
                if let (Some(codec), Ok(Payload::Body(body))) = (ctx.reply_codec(), &mut outcome) {
                    if body.len() >= self.dispatcher.limits.compress_replies_above {
                        let packed = compress::compress(codec, body);
                        // Incompressible bodies go as they are.
                        if packed.len() < body.len() {
                            *body = packed;
                            compression = Some(codec);
                        }
                    }
                }
                let answer = HostAnswer {
                    outcome,
                    metadata,
                    compression,
                };
                reply_to.send(&*self.out, call_id, answer);
            }
            self.dispatcher.call_finished();
        }
    }

    /// Answers call `call_id` through the connection ([`ReplyTo::Connection`]), tracked or not:
    /// a keel-wire call refused before admission.
    pub(crate) fn reply(&self, call_id: u64, outcome: Outcome) {
        self.reply_to(ReplyTo::Connection, call_id, outcome);
    }

    /// Answers call `call_id` at `reply_to` without the bookkeeping of a tracked call: one
    /// refused before admission, or a one-way call's acknowledgement.
    pub(crate) fn reply_to(&self, reply_to: ReplyTo, call_id: u64, mut outcome: Outcome) {
        let metadata = match &mut outcome {
            Err(status) => std::mem::take(status.metadata_mut()),
            Ok(_) => Metadata::new(),
        };
        let answer = HostAnswer {
            outcome,
            metadata,
            compression: None,
        };
        reply_to.send(&*self.out, call_id, answer);
    }

    /// Acknowledges the receipt of one-way call `call_id`, tracked with a waiter of its own (a
    /// call answered by the connection is acknowledged with [`reply`](HostConn::reply)). The
    /// outcome is not reported: the call stays tracked, with nothing more to answer.
    pub(crate) fn acknowledge(&self, call_id: u64) {
        let reply_to = self
            .calls()
            .map
            .get_mut(&call_id)
            .map(|c| c.reply_to.take());
        if let Some(reply_to) = reply_to {
            self.reply_to(reply_to, call_id, Ok(Payload::Body(Bytes::new())));
        }
    }

    /// The caller no longer wants call `call_id`: stop it; no answer is sent.
    pub(crate) fn cancel(&self, call_id: u64) {
        if let Some(InFlight { ctx, .. }) = self.remove(call_id, clock::now) {
            ctx.stop();
            self.dispatcher.call_finished();
        }
    }

    /// Ends call `call_id` on the host's initiative (its client broke the protocol for it):
    /// stopped as for a Cancel, and answered with `status`. False if it is not in flight (it
    /// was answered already).
    pub(crate) fn fail(&self, call_id: u64, status: Status) -> bool {
        let Some(InFlight { ctx, reply_to }) = self.remove(call_id, clock::now) else {
            return false;
        };
        ctx.stop();
        self.reply_to(reply_to, call_id, Err(status));
        self.dispatcher.call_finished();
        true
    }

    /// Past its maximum age (`max_age`, already jittered for it) at `now_ms`: tells the peer
    /// GoAway once, then closes the connection once its calls are done, or `grace` after the
    /// GoAway with whatever is still in flight answered `ShuttingDown`. Returns whether it was
    /// told GoAway now.
    pub(crate) fn age(&self, now_ms: u64, max_age: Duration, grace: Duration) -> bool {
        if clock::now() - self.info.opened < max_age || self.closing.load(Ordering::Acquire) {
            return false;
        }
        let told = self.aged_at.load(Ordering::Acquire);
        if told == 0 {
            self.aged_at.store(now_ms.max(1), Ordering::Release);
            self.go_away("max connection age: reconnect");
            return true;
        }
        let grace_over = now_ms.saturating_sub(told) >= grace.as_millis() as u64;
        // keel-wire: GoAway names the last call the host took, so an idle connection can close
        // now (a call crossing it is resent). HTTP closes by itself: HTTP/2 after GOAWAY once
        // idle, HTTP/1.1 with `connection: close` on its next answer (closing an idle one could
        // meet a request on its way, which its client could not tell was not taken).
        let wire = matches!(self.info.binding, "tcp" | "tcps" | "unix");
        // A request admitted before the GoAway (its id within `last_call_id`) counts as
        // arriving until it is tracked: looked at first, so that a call moving from arriving
        // to in flight meanwhile is seen in one or the other. (Any connection's arrival
        // postpones the close to a later tick; it is a moment's state.)
        if wire && self.dispatcher.arriving() == 0 && self.in_flight() == 0 {
            if !self.closing.swap(true, Ordering::AcqRel) {
                self.close();
            }
        } else if grace_over && self.in_flight() > 0 && !self.closing.swap(true, Ordering::AcqRel) {
            self.abandon_all(&Status::new(
                StatusCode::ShuttingDown,
                "max connection age: the call outlasted the grace period",
            ));
        }
        false
    }

    /// Drain: tell the client no new calls will be served here.
    pub(crate) fn go_away(&self, reason: &str) {
        self.told_go_away.store(true, Ordering::Release);
        self.out.go_away(reason);
    }

    /// Whether the connection was told GoAway (a drain, its age): an HTTP/1.1 answer then
    /// says `connection: close`.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn is_going_away(&self) -> bool {
        self.told_go_away.load(Ordering::Acquire)
    }

    /// Answers every call still in flight with `status` and closes the connection.
    pub(crate) fn abandon_all(&self, status: &Status) {
        let calls = std::mem::take(&mut self.calls().map);
        for (call_id, InFlight { ctx, reply_to }) in calls {
            ctx.stop();
            self.reply_to(reply_to, call_id, Err(status.clone()));
            self.dispatcher.call_finished();
        }
        self.out.close();
    }

    /// Delivers what is queued and closes the connection.
    pub(crate) fn close(&self) {
        self.out.close();
    }

    /// Calls in flight on this connection.
    pub(crate) fn in_flight(&self) -> usize {
        self.calls().map.len()
    }
}

impl Owner for HostConn {
    fn pool(&self) -> &keel_pool::Pool {
        &self.dispatcher.pool
    }

    fn flush_replies(&self) {
        self.out.flush();
    }
}
