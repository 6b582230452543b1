//! Admission control: at most `max_concurrent_calls` run at once, at most `max_queued_calls`
//! wait for a slot, and anything beyond that is refused at once with `Busy`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

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

/// The throttle's state in one word, so that taking a slot, queueing and freeing a slot each
/// see the other two: the free slots in the high half, the calls queued in the low half.
/// Free slots exist only while no call is queued: a freed slot goes to the queue if anyone is
/// in it, else back to the free slots.
#[derive(Debug)]
struct Word(AtomicU64);

const HALF: u32 = 32;
const QUEUED_MASK: u64 = (1 << HALF) - 1;

fn free(word: u64) -> u64 {
    word >> HALF
}

fn queued(word: u64) -> u64 {
    word & QUEUED_MASK
}

/// One free slot, in the word's units.
const ONE_FREE: u64 = 1 << HALF;

#[derive(Debug)]
pub(crate) struct Throttle {
    state: Word,
    /// Where queued calls wait, in arrival order (a FIFO semaphore): it holds a permit only
    /// for a slot freed while calls were queued.
    slots: Arc<Semaphore>,
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    max_concurrent: usize,
    max_queued: usize,
}

/// The verdict on one call.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Run now; the permit frees the slot when dropped.
    Now(Permit),
    /// Wait with [`QueuePlace::wait`]; a queue place is reserved.
    Queued(QueuePlace),
    /// Queue full.
    Busy,
}

/// A slot taken: freed when dropped (to the first queued call, if any).
#[derive(Debug)]
pub(crate) struct Permit {
    throttle: Arc<Throttle>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.throttle.release();
    }
}

/// A reserved place in the wait queue, released when dropped.
#[derive(Debug)]
pub(crate) struct QueuePlace {
    throttle: Arc<Throttle>,
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.throttle.state.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl QueuePlace {
    /// Waits for a slot. The semaphore is FIFO, so queued calls run in arrival order.
    pub(crate) async fn wait(self) -> Permit {
        let permit = self.throttle.slots.acquire().await;
        // The semaphore is never closed. The slot is the call's now: its `Permit` frees it.
        permit.expect("throttle semaphore closed").forget();
        Permit {
            throttle: self.throttle.clone(),
        }
    }
}

impl Throttle {
    /// A throttle with `config`'s limits (each at most 2³² − 1).
    pub(crate) fn new(config: ThrottleConfig) -> Arc<Throttle> {
        let limit = |n: usize| n.min(u32::MAX as usize);
        let max_concurrent = limit(config.max_concurrent_calls.max(1));
        Arc::new(Throttle {
            state: Word(AtomicU64::new(max_concurrent as u64 * ONE_FREE)),
            slots: Arc::new(Semaphore::new(0)),
            max_concurrent,
            max_queued: limit(config.max_queued_calls),
        })
    }

    /// Takes a free slot, or a place in the queue, or neither. One atomic operation when
    /// there is room (no lock).
    pub(crate) fn admit(self: &Arc<Self>) -> Admission {
        let mut word = self.state.0.load(Ordering::Acquire);
        loop {
            let (next, admission) = if free(word) > 0 {
                (word - ONE_FREE, true)
            } else if (queued(word) as usize) < self.max_queued {
                (word + 1, false)
            } else {
                return Admission::Busy;
            };
            match self.state.0.compare_exchange_weak(
                word,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) if admission => {
                    return Admission::Now(Permit {
                        throttle: self.clone(),
                    })
                }
                Ok(_) => {
                    return Admission::Queued(QueuePlace {
                        throttle: self.clone(),
                    })
                }
                Err(now) => word = now,
            }
        }
    }

    /// Frees a slot: to the queue if a call is queued (the first in it takes it), else back
    /// to the free slots.
    fn release(&self) {
        let mut word = self.state.0.load(Ordering::Acquire);
        loop {
            if queued(word) > 0 {
                // A place that gives up after this (a deadline) leaves the slot in the
                // semaphore, for the next call to queue: no slot is lost, and calls still
                // start in arrival order.
                self.slots.add_permits(1);
                return;
            }
            match self.state.0.compare_exchange_weak(
                word,
                word + ONE_FREE,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(now) => word = now,
            }
        }
    }

    /// Calls waiting for a slot now.
    pub(crate) fn queued(&self) -> usize {
        queued(self.state.0.load(Ordering::Acquire)) as usize
    }

    /// Slots taken now (calls running).
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn running(&self) -> usize {
        let free = free(self.state.0.load(Ordering::Acquire)) as usize;
        self.max_concurrent
            .saturating_sub(free + self.slots.available_permits())
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

    fn queue(t: &Arc<Throttle>) -> QueuePlace {
        match t.admit() {
            Admission::Queued(q) => q,
            other => panic!("expected queued, got {other:?}"),
        }
    }

    fn now(t: &Arc<Throttle>) -> Permit {
        match t.admit() {
            Admission::Now(p) => p,
            other => panic!("expected a slot, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_queue_in_order_before_newcomers() {
        let t = Throttle::new(ThrottleConfig::new(1, 2));
        let a = now(&t);
        assert_eq!(t.running(), 1);
        let first = tokio::spawn(queue(&t).wait());
        tokio::task::yield_now().await;
        let second = tokio::spawn(queue(&t).wait());
        tokio::task::yield_now().await;
        assert_eq!(t.queued(), 2);
        drop(a);
        let p1 = first.await.unwrap();
        // The slot went to the first in the queue; a newcomer waits behind the second.
        assert_eq!(t.queued(), 1);
        assert!(matches!(t.admit(), Admission::Queued(_)));
        assert!(!second.is_finished());
        drop(p1);
        let p2 = second.await.unwrap();
        assert_eq!((t.running(), t.queued()), (1, 0));
        drop(p2);
        // Nobody queued: the slot is free again, taken without waiting.
        assert_eq!(t.running(), 0);
        let _p = now(&t);
    }

    #[tokio::test]
    async fn a_slot_left_by_a_call_that_gave_up_waiting_is_not_lost() {
        let t = Throttle::new(ThrottleConfig::new(1, 1));
        let a = now(&t);
        let q = queue(&t);
        // Freed while the place is held: it is the queue's.
        drop(a);
        // The call gives up (its deadline) without taking it.
        drop(q);
        assert_eq!((t.running(), t.queued()), (0, 0));
        // The next call to queue takes it at once; freed with nobody queued, it is free.
        let p = queue(&t).wait().await;
        assert_eq!(t.running(), 1);
        drop(p);
        let _p = now(&t);
        assert!(matches!(t.admit(), Admission::Queued(_)));
    }
}
