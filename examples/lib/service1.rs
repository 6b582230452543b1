//! Seed 002's Service1: one operation that blocks its thread, like the seed's `Thread.Sleep(2000)`.

use std::time::Duration;

/// Seed 002's contract.
#[keel::contract]
pub trait Service1 {
    /// Sleeps `work_ms` milliseconds on a pool thread (blocking, like the seed), then echoes
    /// `value`.
    fn get_data(&self, value: i32, work_ms: u64) -> String;
}

/// The Service1 implementation.
#[derive(Debug, Default, Clone, Copy)]
pub struct Service1Impl;

impl Service1 for Service1Impl {
    fn get_data(&self, value: i32, work_ms: u64) -> String {
        std::thread::sleep(Duration::from_millis(work_ms));
        format!("You entered: {value}")
    }
}
