//! The client's connections: each one's driver runs in a task of its own, registered here so
//! that closing a channel ends them all and [`ChannelStats`](crate::client::ChannelStats) can count them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::AbortHandle;

/// The tasks of one HTTP/2 connection besides its driver: one per streamed upload in flight.
/// Closing a connection ends these too.
#[derive(Debug, Clone, Default)]
pub(super) struct Tasks(Arc<Mutex<TaskList>>);

#[derive(Debug, Default)]
struct TaskList {
    tasks: Vec<AbortHandle>,
    /// Ended tasks are forgotten when the list reaches this length (amortised: checking every
    /// task on every spawn touched each task's header, a cache miss apiece, per request).
    prune_at: usize,
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, TaskList> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn abort_all(&self) {
        for task in std::mem::take(&mut self.lock().tasks) {
            task.abort();
        }
    }

    fn is_done(&self) -> bool {
        self.lock().tasks.iter().all(AbortHandle::is_finished)
    }
}

impl Tasks {
    /// Runs `fut` in a task of its own, ended with the connection.
    pub(super) fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let task = tokio::spawn(fut);
        let mut list = self.lock();
        // One task per streamed upload: forget those that ended, now and then.
        if list.tasks.len() >= list.prune_at {
            list.tasks.retain(|t| !t.is_finished());
            list.prune_at = (list.tasks.len() * 2).max(64);
        }
        list.tasks.push(task.abort_handle());
    }
}

/// The tasks of one open client connection: its driver's, and for HTTP/2 its uploads'.
#[derive(Debug)]
struct ClientConnTasks {
    driver: AbortHandle,
    tasks: Option<Tasks>,
}

impl ClientConnTasks {
    fn abort(self) {
        self.driver.abort();
        if let Some(tasks) = self.tasks {
            tasks.abort_all();
        }
    }
}

/// Every open connection of one HTTP client, by its tasks, so that `close` can end them and
/// stats can count them.
#[derive(Debug)]
pub(super) struct ClientConns {
    drivers: Mutex<HashMap<u64, ClientConnTasks>>,
    /// The tasks of HTTP/2 connections whose driver ended (after the host's GOAWAY) while
    /// their streams still run: `kill_all` ends them too.
    lingering: Mutex<Vec<Tasks>>,
    next_id: AtomicU64,
    pub(super) opened: AtomicU64,
    pub(super) closed: AtomicU64,
    /// Counts the connections opened after the first.
    pub(super) reconnects: metrics::Counter,
}

impl ClientConns {
    /// An empty registry; `reconnects` counts the connections opened after the first.
    pub(super) fn new(reconnects: metrics::Counter) -> ClientConns {
        ClientConns {
            drivers: Mutex::default(),
            lingering: Mutex::default(),
            next_id: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            reconnects,
        }
    }

    fn drivers(&self) -> MutexGuard<'_, HashMap<u64, ClientConnTasks>> {
        self.drivers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lingering(&self) -> MutexGuard<'_, Vec<Tasks>> {
        self.lingering.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a connection's driver in a task of its own; `tasks` are its other tasks
    /// (HTTP/2's uploads). Returns the connection's id.
    pub(super) fn spawn<F>(self: &Arc<Self>, driver: F, tasks: Option<Tasks>) -> u64
    where
        F: Future + Send + 'static,
    {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let registry = self.clone();
        // Held while spawning, so the task cannot remove its entry before it is inserted.
        let mut drivers = self.drivers();
        let task = tokio::spawn(async move {
            let _ = driver.await;
            registry.driver_ended(id);
        });
        let driver = task.abort_handle();
        drivers.insert(id, ClientConnTasks { driver, tasks });
        if self.opened.fetch_add(1, Ordering::Relaxed) > 0 {
            self.reconnects.increment(1);
        }
        id
    }

    /// Connection `id`'s driver ended: the connection takes no more requests; what still
    /// runs for it (streams in flight) lingers until it ends, or `kill_all`.
    fn driver_ended(&self, id: u64) {
        if let Some(ClientConnTasks {
            tasks: Some(tasks), ..
        }) = self.remove(id)
        {
            let mut lingering = self.lingering();
            lingering.retain(|t| !t.is_done());
            if !tasks.is_done() {
                lingering.push(tasks);
            }
        }
    }

    fn remove(&self, id: u64) -> Option<ClientConnTasks> {
        let removed = self.drivers().remove(&id);
        if removed.is_some() {
            self.closed.fetch_add(1, Ordering::Relaxed);
        }
        removed
    }

    /// Closes connection `id` now.
    pub(super) fn kill(&self, id: u64) {
        if let Some(conn) = self.remove(id) {
            conn.abort();
        }
    }

    pub(super) fn kill_all(&self) {
        let all = std::mem::take(&mut *self.drivers());
        self.closed.fetch_add(all.len() as u64, Ordering::Relaxed);
        for conn in all.into_values() {
            conn.abort();
        }
        for tasks in std::mem::take(&mut *self.lingering()) {
            tasks.abort_all();
        }
    }

    pub(super) fn is_open(&self, id: u64) -> bool {
        self.drivers().contains_key(&id)
    }

    pub(super) fn open(&self) -> usize {
        self.drivers().len()
    }
}
