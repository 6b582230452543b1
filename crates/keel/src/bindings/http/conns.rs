//! The client's connections: each one's driver runs in a task of its own, registered here so
//! that closing a channel ends them all and [`ChannelStats`](crate::ChannelStats) can count them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// Every connection's driver task, so that `close` can end them and stats can count them.
#[derive(Debug, Default)]
pub(super) struct Registry {
    drivers: Mutex<HashMap<u64, AbortHandle>>,
    next_id: AtomicU64,
    pub(super) opened: AtomicU64,
    pub(super) closed: AtomicU64,
}

impl Registry {
    /// Runs a connection's driver in a task of its own; returns the connection's id.
    pub(super) fn spawn<F>(self: &Arc<Self>, driver: F) -> u64
    where
        F: Future + Send + 'static,
    {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let registry = self.clone();
        // Held while spawning, so the task cannot remove its entry before it is inserted.
        let mut drivers = self.drivers.lock().unwrap_or_else(|e| e.into_inner());
        let task = tokio::spawn(async move {
            let _ = driver.await;
            registry.remove(id);
        });
        drivers.insert(id, task.abort_handle());
        self.opened.fetch_add(1, Ordering::Relaxed);
        id
    }

    pub(super) fn remove(&self, id: u64) -> Option<AbortHandle> {
        let removed = self
            .drivers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        if removed.is_some() {
            self.closed.fetch_add(1, Ordering::Relaxed);
        }
        removed
    }

    /// Closes connection `id` now.
    pub(super) fn kill(&self, id: u64) {
        if let Some(task) = self.remove(id) {
            task.abort();
        }
    }

    pub(super) fn kill_all(&self) {
        let all = std::mem::take(&mut *self.drivers.lock().unwrap_or_else(|e| e.into_inner()));
        self.closed.fetch_add(all.len() as u64, Ordering::Relaxed);
        for task in all.into_values() {
            task.abort();
        }
    }

    pub(super) fn is_open(&self, id: u64) -> bool {
        self.drivers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&id)
    }

    pub(super) fn open(&self) -> usize {
        self.drivers.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
