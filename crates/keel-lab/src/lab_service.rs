//! The lab's own contract: an operation that does a fixed amount of CPU-free work, so that a
//! throttle of concurrency C admits about C / work calls per second whatever the CPU does.

// `#[keel::contract]` declares the generated clients' methods `pub` whatever the trait's
// visibility, which is unreachable in this binary.
#![allow(unreachable_pub)]

use std::time::Duration;

/// What `keel-lab overload` (and `soak`) call besides the examples' contracts.
#[keel::contract]
pub(crate) trait Lab {
    /// Blocks its keel-pool thread for `us` microseconds (a sleep: no CPU), then echoes `us`.
    fn work(&self, us: u64) -> u64;
}

/// The [`Lab`] implementation.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LabImpl;

impl Lab for LabImpl {
    fn work(&self, us: u64) -> u64 {
        std::thread::sleep(Duration::from_micros(us));
        us
    }
}
