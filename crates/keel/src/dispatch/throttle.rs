//! Admission control: at most `max_concurrent_calls` run at once, at most `max_queued_calls`
//! wait for a slot, and anything beyond that is refused at once with `Busy`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Throttle settings. Every field has a documented default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThrottleConfig {
    /// Calls running at once across the host. Default: 1024.
    pub max_concurrent_calls: usize,
    /// Calls waiting for a slot; one more is answered `Busy` at once. Default: 1024.
    pub max_queued_calls: usize,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            max_concurrent_calls: 1024,
            max_queued_calls: 1024,
        }
    }
}

impl ThrottleConfig {
    /// Settings with the given limits.
    pub fn new(max_concurrent_calls: usize, max_queued_calls: usize) -> ThrottleConfig {
        ThrottleConfig {
            max_concurrent_calls,
            max_queued_calls,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Throttle {
    slots: Arc<Semaphore>,
    queued: AtomicUsize,
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    max_concurrent: usize,
    max_queued: usize,
}

/// The verdict on one call.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Run now; the permit frees the slot when dropped.
    Now(OwnedSemaphorePermit),
    /// Wait with [`QueuePlace::wait`]; a queue place is reserved.
    Queued(QueuePlace),
    /// Queue full.
    Busy,
}

/// A reserved place in the wait queue, released when dropped.
#[derive(Debug)]
pub(crate) struct QueuePlace {
    throttle: Arc<Throttle>,
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.throttle.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

impl QueuePlace {
    /// Waits for a slot. The semaphore is FIFO, so queued calls run in arrival order.
    pub(crate) async fn wait(self) -> OwnedSemaphorePermit {
        let permit = self.throttle.slots.clone().acquire_owned().await;
        // The semaphore is never closed.
        permit.expect("throttle semaphore closed")
    }
}

impl Throttle {
    pub(crate) fn new(config: ThrottleConfig) -> Arc<Throttle> {
        Arc::new(Throttle {
            slots: Arc::new(Semaphore::new(config.max_concurrent_calls.max(1))),
            queued: AtomicUsize::new(0),
            max_concurrent: config.max_concurrent_calls.max(1),
            max_queued: config.max_queued_calls,
        })
    }

    pub(crate) fn admit(self: &Arc<Self>) -> Admission {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Admission::Now(p);
        }
        if self.queued.fetch_add(1, Ordering::AcqRel) < self.max_queued {
            Admission::Queued(QueuePlace {
                throttle: self.clone(),
            })
        } else {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            Admission::Busy
        }
    }

    /// Calls waiting for a slot now.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Slots taken now (calls running).
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn running(&self) -> usize {
        self.max_concurrent
            .saturating_sub(self.slots.available_permits())
    }

    /// Calls that may run at once.
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn max_concurrent(&self) -> usize {
        self.max_concurrent
    }

    /// Calls that may wait for a slot.
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn max_queued(&self) -> usize {
        self.max_queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn admits_then_queues_then_refuses() {
        let t = Throttle::new(ThrottleConfig::new(2, 1));
        let a = t.admit();
        let b = t.admit();
        assert!(matches!(a, Admission::Now(_)) && matches!(b, Admission::Now(_)));
        let q = match t.admit() {
            Admission::Queued(q) => q,
            other => panic!("expected queued, got {other:?}"),
        };
        assert!(matches!(t.admit(), Admission::Busy));
        assert_eq!(t.queued(), 1);
        drop(a);
        let _permit = q.wait().await;
        assert_eq!(t.queued(), 0);
        assert!(matches!(t.admit(), Admission::Queued(_)));
    }
}
