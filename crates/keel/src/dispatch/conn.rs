//! One connection as the dispatcher sees it, whatever its binding: the calls it has in flight
//! and where their answers go (a [`Responder`]). Every accepted call is answered exactly once:
//! whoever removes it from `calls` (the handler finishing, a cancel, or the drain timeout) owns
//! the answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::task::AbortHandle;

use super::Dispatcher;
use crate::core::service::Outcome;
use crate::core::status::{Status, StatusCode};

/// Per-call control shared with the task or pool job running it.
#[derive(Debug, Default)]
pub(crate) struct CallCtl {
    /// Set by a cancel frame or the drain timeout: a job that has not started must not start.
    pub(crate) cancelled: AtomicBool,
    /// The task running an async operation, so a cancel can stop it.
    pub(crate) task: Mutex<Option<AbortHandle>>,
}

impl CallCtl {
    /// The call will not be answered by its handler: a job not yet started must not start, and
    /// an async operation still running is aborted. (A blocking job already running finishes;
    /// threads cannot be interrupted.)
    fn stop(&self) {
        self.cancelled.store(true, Ordering::Release);
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

/// Where a connection's answers go: keel-wire frames, or the HTTP requests waiting for them.
/// Each binding implements it once.
pub(crate) trait Responder: Send + Sync + std::fmt::Debug + 'static {
    /// Delivers the answer to call `call_id`.
    fn reply(&self, call_id: u64, outcome: Outcome);
    /// The host will serve no new calls here; tell the peer (calls it sent already are still
    /// answered).
    fn go_away(&self, reason: &str);
    /// Delivers what is queued, then closes the connection.
    fn close(&self);
}

/// Facts about one connection, for `Host::connections`.
#[derive(Debug)]
pub(crate) struct ConnInfo {
    /// The binding's scheme: `tcp`, `tcps`, `unix`, `http`, `https`.
    pub(crate) binding: &'static str,
    /// The other end, for logs.
    pub(crate) peer: String,
    /// When the connection was accepted.
    pub(crate) opened: Instant,
    /// Calls received on it (accepted or refused).
    pub(crate) calls: AtomicU64,
}

impl ConnInfo {
    /// A connection of `binding` with `peer`, accepted now.
    pub(crate) fn new(binding: &'static str, peer: String) -> ConnInfo {
        ConnInfo {
            binding,
            peer,
            opened: Instant::now(),
            calls: AtomicU64::new(0),
        }
    }
}

/// One connection's calls in flight and its way to answer them.
#[derive(Debug)]
pub(crate) struct ConnShared {
    pub(crate) id: u64,
    out: Box<dyn Responder>,
    calls: Mutex<HashMap<u64, Arc<CallCtl>>>,
    pub(crate) info: ConnInfo,
    pub(crate) dispatcher: Arc<Dispatcher>,
}

impl ConnShared {
    /// A connection whose answers go to `out`.
    pub(crate) fn new(
        id: u64,
        out: Box<dyn Responder>,
        info: ConnInfo,
        dispatcher: Arc<Dispatcher>,
    ) -> ConnShared {
        ConnShared {
            id,
            out,
            calls: Mutex::new(HashMap::new()),
            info,
            dispatcher,
        }
    }

    fn calls(&self) -> MutexGuard<'_, HashMap<u64, Arc<CallCtl>>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a call. `Busy` if the connection already has as many calls as allowed.
    pub(crate) fn track(&self, call_id: u64) -> Result<Arc<CallCtl>, Status> {
        let ctl = Arc::new(CallCtl::default());
        let limit = self.dispatcher.limits.max_calls_per_connection;
        {
            let mut calls = self.calls();
            if calls.len() >= limit {
                return Err(Status::new(
                    StatusCode::Busy,
                    format!("this connection already has {limit} calls in flight"),
                ));
            }
            calls.insert(call_id, ctl.clone());
        }
        self.dispatcher.call_started();
        Ok(ctl)
    }

    /// Forgets a tracked call without answering it (it is answered another way, e.g. refused
    /// after tracking with [`ConnShared::reply`]).
    pub(crate) fn untrack(&self, call_id: u64) {
        if self.calls().remove(&call_id).is_some() {
            self.dispatcher.call_finished();
        }
    }

    /// Answers a tracked call, unless someone else (cancel, drain) already did.
    pub(crate) fn finish(&self, call_id: u64, one_way: bool, outcome: Outcome) {
        let removed = self.calls().remove(&call_id);
        if removed.is_some() {
            if !one_way {
                self.reply(call_id, outcome);
            }
            self.dispatcher.call_finished();
        }
    }

    /// Sends an answer for a call that was never tracked (refused before admission).
    pub(crate) fn reply(&self, call_id: u64, outcome: Outcome) {
        self.out.reply(call_id, outcome);
    }

    /// The caller no longer wants call `call_id`: stop it; no answer is sent.
    pub(crate) fn cancel(&self, call_id: u64) {
        let removed = self.calls().remove(&call_id);
        if let Some(ctl) = removed {
            ctl.stop();
            self.dispatcher.call_finished();
        }
    }

    /// Drain: tell the client no new calls will be served here.
    pub(crate) fn go_away(&self, reason: &str) {
        self.out.go_away(reason);
    }

    /// Answers every call still in flight with `status` and closes the connection.
    pub(crate) fn abandon_all(&self, status: &Status) {
        let calls = std::mem::take(&mut *self.calls());
        for (call_id, ctl) in calls {
            ctl.stop();
            self.reply(call_id, Err(status.clone()));
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
        self.calls().len()
    }
}
