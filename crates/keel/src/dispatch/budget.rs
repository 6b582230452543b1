//! Budgets for bytes of messages being received: one per connection and one for the whole host,
//! so that peers sending slowly (or never finishing) cannot make the host hold unbounded memory.
//! A reservation waits for room within a deadline; when the deadline passes first, the caller
//! closes the connection that wanted it.

use std::sync::Arc;

use smallvec::{smallvec, SmallVec};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The unit budgets count in: bytes are rounded up to whole KiB.
const UNIT: usize = 1024;

fn units(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
}

/// A budget of bytes being received.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    room: Arc<Semaphore>,
    capacity: u32,
}

impl Budget {
    /// A budget of `bytes` (at least 1 KiB).
    pub(crate) fn new(bytes: usize) -> Budget {
        let capacity = units(bytes)
            .max(1)
            .min(u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
        Budget {
            room: Arc::new(Semaphore::new(capacity as usize)),
            capacity,
        }
    }

    /// Reserves `bytes`, waiting until `deadline` for room. `None` if the deadline passed first
    /// or the request is larger than the whole budget.
    pub(crate) async fn reserve(&self, bytes: usize, deadline: Instant) -> Option<Reservation> {
        let n = units(bytes);
        if n > self.capacity {
            return None;
        }
        let acquire = self.room.clone().acquire_many_owned(n);
        match tokio::time::timeout_at(deadline, acquire).await {
            Ok(Ok(permit)) => Some(Reservation {
                permits: smallvec![permit],
            }),
            _ => None,
        }
    }

    /// Bytes free now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.room.available_permits() * UNIT
    }
}

/// Bytes reserved from one or more budgets; given back when dropped. A body's reservation is
/// one or two permits (the connection's, and the host's past 64 KiB), held in place: no
/// allocation per call.
#[derive(Debug, Default)]
pub(crate) struct Reservation {
    permits: SmallVec<[OwnedSemaphorePermit; 2]>,
}

impl Reservation {
    /// Adds `other` to this reservation (released together).
    pub(crate) fn merge(&mut self, other: Reservation) {
        self.permits.extend(other.permits);
    }
}

/// A connection's budget and the host's, reserved together.
#[derive(Debug, Clone)]
pub(crate) struct ReceiveBudget {
    connection: Budget,
    host: Budget,
}

impl ReceiveBudget {
    /// A budget of `per_connection` bytes within the host's `host`.
    pub(crate) fn new(per_connection: usize, host: &Budget) -> ReceiveBudget {
        ReceiveBudget {
            connection: Budget::new(per_connection),
            host: host.clone(),
        }
    }

    /// Reserves `bytes` from the connection's budget alone (for bytes small enough that no
    /// connection should queue behind others' for them), waiting until `deadline`.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) async fn reserve_own(&self, bytes: usize, deadline: Instant) -> Option<Reservation> {
        self.connection.reserve(bytes, deadline).await
    }

    /// Reserves `bytes` from the connection's budget and then the host's, each before
    /// `deadline`. `None`: no room in time (or more than a whole budget).
    pub(crate) async fn reserve(&self, bytes: usize, deadline: Instant) -> Option<Reservation> {
        let mut r = self.connection.reserve(bytes, deadline).await?;
        r.merge(self.host.reserve(bytes, deadline).await?);
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn reservations_wait_for_room_until_the_deadline() {
        let host = Budget::new(8 * UNIT);
        let a = ReceiveBudget::new(6 * UNIT, &host);
        let b = ReceiveBudget::new(6 * UNIT, &host);
        let soon = || Instant::now() + Duration::from_millis(20);
        let first = a.reserve(5 * UNIT, soon()).await.expect("room");
        // The connection's own budget is the limit here...
        assert!(a.reserve(2 * UNIT, soon()).await.is_none());
        // ...and the host's there.
        assert!(b.reserve(4 * UNIT, soon()).await.is_none());
        let second = b.reserve(3 * UNIT, soon()).await.expect("room");
        assert_eq!(host.available(), 0);
        drop(first);
        assert_eq!(host.available(), 5 * UNIT);
        // More than a whole budget never fits.
        assert!(a.reserve(7 * UNIT, soon()).await.is_none());
        drop(second);
        assert_eq!(host.available(), 8 * UNIT);
        // Bytes round up to whole KiB.
        let _one = a.reserve(1, soon()).await.expect("room");
        assert_eq!(host.available(), 7 * UNIT);
    }
}
