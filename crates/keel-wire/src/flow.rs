//! Flow control for streamed transfer, sans-IO.
//!
//! Each direction of a call's byte stream has a producer and a consumer. The producer holds a
//! [`SendWindow`]: the number of data bytes it may still send. The consumer holds a
//! [`RecvWindow`]: it checks the producer stays within what was granted, and decides when to
//! grant more with a [`WindowUpdate`](crate::WindowUpdate). Only the lengths of
//! [`StreamData`](crate::StreamData) payloads count.
//!
//! Nothing here reads a clock: the caller passes `Instant`s and its round-trip-time estimate.

use std::fmt;
use std::time::{Duration, Instant};

use crate::{DEFAULT_INITIAL_WINDOW, DEFAULT_MAX_WINDOW};

/// Largest credit a producer may hold, in bytes: 2³¹ − 1, as in HTTP/2. A grant that would raise
/// a [`SendWindow`] above it is [`FlowError::Overflow`]; a [`RecvWindow`] never grants beyond it.
pub const MAX_WINDOW_SIZE: u32 = (1 << 31) - 1;

/// The reason text a receiver sends when it ends a call because the peer exceeded its window
/// (with [`StatusCode::BadRequest`](crate::StatusCode::BadRequest)).
pub const WINDOW_EXCEEDED_REASON: &str = "flow control window exceeded";

/// Sizes of a [`RecvWindow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowConfig {
    /// Credit the producer starts with. It must be at least what the peer assumes:
    /// [`DEFAULT_INITIAL_WINDOW`], or the connection's learned initial window once the consumer
    /// announced one (a WindowUpdate on call 0; see PROTOCOL.md, "Learned initial window").
    pub initial: u32,
    /// Largest window auto-tuning may reach. [`RecvWindow::new`] clamps it to
    /// `1..=`[`MAX_WINDOW_SIZE`] and then `initial` to `1..=max`.
    pub max: u32,
}

impl Default for WindowConfig {
    /// [`DEFAULT_INITIAL_WINDOW`] growing up to [`DEFAULT_MAX_WINDOW`].
    fn default() -> Self {
        WindowConfig {
            initial: DEFAULT_INITIAL_WINDOW,
            max: DEFAULT_MAX_WINDOW,
        }
    }
}

/// A flow-control rule was broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowError {
    /// The peer sent more data than it was granted. A protocol error for that call: end it
    /// with [`StatusCode::BadRequest`](crate::StatusCode::BadRequest) and
    /// [`WINDOW_EXCEEDED_REASON`].
    WindowExceeded {
        /// Credit the peer had left when the data arrived.
        window: u64,
        /// Size of the data that arrived.
        received: u64,
    },
    /// A [`WindowUpdate`](crate::WindowUpdate) would raise the producer's credit above
    /// [`MAX_WINDOW_SIZE`]. A protocol error by the consumer for that call.
    Overflow,
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowError::WindowExceeded { window, received } => write!(
                f,
                "{WINDOW_EXCEEDED_REASON}: {received} bytes arrived, {window} allowed"
            ),
            FlowError::Overflow => write!(
                f,
                "flow control window overflow: credit above {MAX_WINDOW_SIZE} bytes"
            ),
        }
    }
}

impl std::error::Error for FlowError {}

/// Producer side of a stream: how many data bytes it may still send.
///
/// Start it with the initial window both sides assume ([`DEFAULT_INITIAL_WINDOW`]), call
/// [`SendWindow::consume`] for every [`StreamData`](crate::StreamData) sent and
/// [`SendWindow::grant`] for every [`WindowUpdate`](crate::WindowUpdate) received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWindow {
    available: u64,
}

impl SendWindow {
    /// A window with `initial` bytes of credit.
    pub fn new(initial: u32) -> SendWindow {
        SendWindow {
            available: u64::from(initial),
        }
    }

    /// Data bytes that may be sent now.
    pub fn available(&self) -> u64 {
        self.available
    }

    /// `n` data bytes were sent.
    ///
    /// Sending more than [`SendWindow::available`] is a bug in the caller: this panics in debug
    /// builds and saturates at 0 in release builds.
    pub fn consume(&mut self, n: usize) {
        let n = n as u64;
        debug_assert!(
            n <= self.available,
            "sent {n} bytes with only {} of credit",
            self.available
        );
        self.available = self.available.saturating_sub(n);
    }

    /// The consumer granted `increment` more bytes.
    ///
    /// Fails with [`FlowError::Overflow`], leaving the window unchanged, when the credit would
    /// exceed [`MAX_WINDOW_SIZE`].
    pub fn grant(&mut self, increment: u32) -> Result<(), FlowError> {
        let next = self.available + u64::from(increment);
        if next > u64::from(MAX_WINDOW_SIZE) {
            return Err(FlowError::Overflow);
        }
        self.available = next;
        Ok(())
    }
}

/// Consumer side of a stream: checks the peer stays within the window, decides when to grant
/// more, and auto-tunes the window toward the bandwidth-delay product.
///
/// Call [`RecvWindow::on_data`] when a [`StreamData`](crate::StreamData) arrives and
/// [`RecvWindow::on_consumed`] when the application has taken bytes out of the buffer; send a
/// [`WindowUpdate`](crate::WindowUpdate) whenever the latter says so.
///
/// Policy: consumed bytes not yet granted back accumulate until they reach half the window,
/// then one update grants them all, so the producer never stalls with a full window in flight.
/// When such an update comes less than two round trips after the previous one (or after the
/// window was created), the window, not the consumer, is the bottleneck: the window doubles (up
/// to the configured max) and the update includes the growth. The window never shrinks, and
/// the bytes the peer may still send plus the bytes buffered here never exceed the window.
///
/// ```
/// use std::time::{Duration, Instant};
/// use keel_wire::{RecvWindow, SendWindow, WindowConfig};
///
/// let config = WindowConfig { initial: 1000, max: 4000 };
/// let start = Instant::now();
/// let rtt = Duration::from_millis(50);
/// let mut producer = SendWindow::new(config.initial);
/// let mut consumer = RecvWindow::new(config, start);
///
/// producer.consume(600);
/// consumer.on_data(600)?;
/// // Half the window consumed within two round trips: grant it back and double the window.
/// let increment = consumer.on_consumed(600, start + Duration::from_millis(10), rtt).unwrap();
/// assert_eq!((increment, consumer.window()), (1600, 2000));
/// producer.grant(increment)?;
/// assert_eq!(producer.available(), 2000);
/// # Ok::<(), keel_wire::FlowError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RecvWindow {
    /// Current target window: credit granted beyond what was consumed, right after an update.
    window: u32,
    /// Auto-tuning cap.
    max: u32,
    /// Total credit granted to the peer, the initial window included.
    granted: u64,
    /// Total data bytes received.
    received: u64,
    /// Total data bytes consumed by the application.
    consumed: u64,
    /// When the previous update was decided (creation time before the first).
    last_update: Instant,
    /// The window the stream started with.
    initial: u32,
}

impl RecvWindow {
    /// A window for a stream that starts `now`, granting `config.initial` bytes (the credit the
    /// producer assumes).
    pub fn new(config: WindowConfig, now: Instant) -> RecvWindow {
        let max = config.max.clamp(1, MAX_WINDOW_SIZE);
        let window = config.initial.clamp(1, max);
        RecvWindow {
            window,
            max,
            granted: u64::from(window),
            received: 0,
            consumed: 0,
            last_update: now,
            initial: window,
        }
    }

    /// `n` data bytes arrived from the peer (before the application consumes them).
    ///
    /// Fails with [`FlowError::WindowExceeded`], counting nothing, when they exceed what was
    /// granted.
    pub fn on_data(&mut self, n: usize) -> Result<(), FlowError> {
        let n = n as u64;
        let left = self.granted - self.received;
        if n > left {
            return Err(FlowError::WindowExceeded {
                window: left,
                received: n,
            });
        }
        self.received += n;
        Ok(())
    }

    /// The application consumed `n` buffered bytes at `now`; `rtt` is the current round-trip
    /// estimate, zero when unknown.
    ///
    /// With an estimate, the window doubles (up to its max) at an update that comes less than
    /// two round trips after the previous one: the consumer keeps up and the window is what
    /// limits the producer. Without one (a host's first stream on a connection, before its
    /// first Pong), the window doubles once, to twice the initial window, if the consumer keeps
    /// up with what arrives (less than a quarter of the window is left buffered): otherwise the
    /// first stream of every connection would never grow, and nor would what the next streams
    /// learn from it.
    ///
    /// Returns `Some(increment)` when a [`WindowUpdate`](crate::WindowUpdate) with that
    /// increment (never 0) should be sent now. Consuming more than [`RecvWindow::buffered`] is a
    /// bug in the caller: it panics in debug builds and counts only what was buffered in
    /// release builds.
    pub fn on_consumed(&mut self, n: usize, now: Instant, rtt: Duration) -> Option<u32> {
        let n = n as u64;
        debug_assert!(
            n <= self.buffered(),
            "consumed {n} bytes with only {} buffered",
            self.buffered()
        );
        self.consumed += n.min(self.buffered());
        // Consumed bytes not yet granted back: the credit that would restore the window.
        let pending = (self.consumed + u64::from(self.window)).saturating_sub(self.granted);
        let threshold = u64::from((self.window / 2).max(1));
        if pending < threshold {
            return None;
        }
        let elapsed = now.saturating_duration_since(self.last_update);
        let fast = if rtt.is_zero() {
            self.buffered() < u64::from(self.window / 4)
                && self.window < self.initial.saturating_mul(2)
        } else {
            elapsed < rtt.saturating_mul(2)
        };
        if fast && self.window < self.max {
            self.window = self.window.saturating_mul(2).min(self.max);
        }
        self.last_update = now;
        let granted = self.consumed + u64::from(self.window);
        let increment = granted - self.granted;
        self.granted = granted;
        // At most the window, which is at most MAX_WINDOW_SIZE.
        Some(increment as u32)
    }

    /// The current target window size, in bytes.
    pub fn window(&self) -> u32 {
        self.window
    }

    /// Bytes received but not yet consumed.
    pub fn buffered(&self) -> u64 {
        self.received - self.consumed
    }
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    use super::*;

    const RTT: Duration = Duration::from_millis(200);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Receive and consume half a window at a time, `gap` apart; returns the windows seen
    /// after each update.
    fn drain_in_halves(gap: Duration, rounds: usize, rtt: Duration) -> Vec<u32> {
        let start = Instant::now();
        let mut now = start;
        let mut consumer = RecvWindow::new(WindowConfig::default(), start);
        let mut producer = SendWindow::new(DEFAULT_INITIAL_WINDOW);
        let mut windows = vec![];
        for _ in 0..rounds {
            let n = (consumer.window() / 2) as usize;
            producer.consume(n);
            consumer.on_data(n).unwrap();
            now += gap;
            let increment = consumer.on_consumed(n, now, rtt).expect("half a window");
            producer.grant(increment).unwrap();
            // The producer is back to a full window of credit.
            assert_eq!(producer.available(), u64::from(consumer.window()));
            windows.push(consumer.window());
        }
        windows
    }

    #[test]
    fn fast_consumer_grows_window_to_max() {
        let windows = drain_in_halves(ms(1), 10, RTT);
        // 256 KiB doubles five times to 8 MiB, then stays.
        assert_eq!(
            windows[..6],
            [512, 1024, 2048, 4096, 8192, 8192].map(|k| k * 1024)
        );
        assert!(windows[6..].iter().all(|&w| w == DEFAULT_MAX_WINDOW));
    }

    #[test]
    fn slow_consumer_keeps_initial_window() {
        let windows = drain_in_halves(2 * RTT + ms(1), 10, RTT);
        assert!(windows.iter().all(|&w| w == DEFAULT_INITIAL_WINDOW));
        // Exactly two round trips apart is not "under two round trips" either.
        let windows = drain_in_halves(2 * RTT, 10, RTT);
        assert!(windows.iter().all(|&w| w == DEFAULT_INITIAL_WINDOW));
    }

    #[test]
    fn unknown_rtt_grows_once_for_a_consumer_that_keeps_up() {
        let windows = drain_in_halves(Duration::ZERO, 10, Duration::ZERO);
        assert_eq!(windows[0], 2 * DEFAULT_INITIAL_WINDOW);
        assert!(windows.iter().all(|&w| w == 2 * DEFAULT_INITIAL_WINDOW));
    }

    #[test]
    fn unknown_rtt_never_grows_for_a_consumer_that_lags() {
        let now = Instant::now();
        let mut w = RecvWindow::new(WindowConfig::default(), now);
        let half = (DEFAULT_INITIAL_WINDOW / 2) as usize;
        // The whole window arrived; the consumer took half and left half buffered.
        w.on_data(2 * half).unwrap();
        assert_eq!(w.on_consumed(half, now, Duration::ZERO), Some(half as u32));
        assert_eq!(w.window(), DEFAULT_INITIAL_WINDOW);
    }

    #[test]
    fn update_waits_for_half_a_window() {
        let now = Instant::now();
        let mut w = RecvWindow::new(
            WindowConfig {
                initial: 100,
                max: 100,
            },
            now,
        );
        w.on_data(100).unwrap();
        assert_eq!(w.on_consumed(49, now, RTT), None);
        assert_eq!(w.buffered(), 51);
        assert_eq!(w.on_consumed(1, now, RTT), Some(50));
        assert_eq!(w.on_consumed(49, now, RTT), None);
        assert_eq!(w.on_consumed(0, now, RTT), None);
        assert_eq!(w.on_consumed(1, now, RTT), Some(50));
        assert_eq!(w.buffered(), 0);
    }

    #[test]
    fn data_beyond_the_grant_errors() {
        let now = Instant::now();
        let mut w = RecvWindow::new(
            WindowConfig {
                initial: 10,
                max: 10,
            },
            now,
        );
        w.on_data(6).unwrap();
        assert_eq!(
            w.on_data(5),
            Err(FlowError::WindowExceeded {
                window: 4,
                received: 5
            })
        );
        // Nothing was counted: the remaining credit is still usable.
        w.on_data(4).unwrap();
        assert_eq!(w.buffered(), 10);
        assert!(w.on_data(1).is_err());
        let increment = w.on_consumed(10, now, Duration::ZERO).unwrap();
        assert_eq!(increment, 10);
        w.on_data(10).unwrap();
        assert!(w.on_data(1).is_err());
    }

    #[test]
    fn empty_data_is_always_fine() {
        let now = Instant::now();
        let mut w = RecvWindow::new(WindowConfig { initial: 1, max: 1 }, now);
        w.on_data(1).unwrap();
        w.on_data(0).unwrap();
    }

    #[test]
    fn grant_overflow_errors() {
        let mut s = SendWindow::new(MAX_WINDOW_SIZE - 10);
        assert_eq!(s.grant(11), Err(FlowError::Overflow));
        assert_eq!(s.available(), u64::from(MAX_WINDOW_SIZE - 10));
        s.grant(10).unwrap();
        assert_eq!(s.available(), u64::from(MAX_WINDOW_SIZE));
        assert_eq!(s.grant(1), Err(FlowError::Overflow));
        assert_eq!(SendWindow::new(0).grant(u32::MAX), Err(FlowError::Overflow));
    }

    #[test]
    fn send_window_counts_down() {
        let mut s = SendWindow::new(100);
        s.consume(30);
        s.consume(0);
        assert_eq!(s.available(), 70);
        s.grant(5).unwrap();
        assert_eq!(s.available(), 75);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "credit")]
    fn overspending_panics_in_debug() {
        SendWindow::new(1).consume(2);
    }

    #[test]
    fn config_is_clamped() {
        let now = Instant::now();
        let w = RecvWindow::new(
            WindowConfig {
                initial: 10,
                max: 5,
            },
            now,
        );
        assert_eq!(w.window(), 5);
        let w = RecvWindow::new(WindowConfig { initial: 0, max: 0 }, now);
        assert_eq!(w.window(), 1);
        let mut w = RecvWindow::new(
            WindowConfig {
                initial: u32::MAX,
                max: u32::MAX,
            },
            now,
        );
        assert_eq!(w.window(), MAX_WINDOW_SIZE);
        w.on_data(MAX_WINDOW_SIZE as usize).unwrap();
        let increment = w.on_consumed(MAX_WINDOW_SIZE as usize, now, RTT).unwrap();
        assert_eq!(increment, MAX_WINDOW_SIZE);
        // A producer that used all its credit can take the whole grant.
        let mut s = SendWindow::new(MAX_WINDOW_SIZE);
        s.consume(MAX_WINDOW_SIZE as usize);
        s.grant(increment).unwrap();
        assert_eq!(WindowConfig::default().initial, DEFAULT_INITIAL_WINDOW);
        assert_eq!(WindowConfig::default().max, DEFAULT_MAX_WINDOW);
    }

    #[test]
    fn display() {
        let e = FlowError::WindowExceeded {
            window: 3,
            received: 5,
        };
        assert_eq!(
            e.to_string(),
            "flow control window exceeded: 5 bytes arrived, 3 allowed"
        );
        assert!(e.to_string().starts_with(WINDOW_EXCEEDED_REASON));
        let _: &dyn std::error::Error = &FlowError::Overflow;
    }

    /// One step of [`random_producer_consumer`]: which action, how long before it, and two
    /// raw numbers the action scales to what the state allows.
    #[derive(Debug, Clone)]
    struct Step {
        action: u8,
        micros: u64,
        a: u64,
        b: u64,
    }

    /// One run of [`random_producer_consumer`].
    #[derive(Debug, Clone)]
    struct Run {
        config: WindowConfig,
        rtt: Duration,
        steps: Vec<Step>,
    }

    fn runs() -> impl Strategy<Value = Run> {
        // Tiny windows reach the edge cases, larger ones the auto-tuning.
        let max = prop_oneof![1..=65u32, 1..=(1u32 << 20) + 1];
        let step = (0..5u8, 0..=100_000u64, any::<u64>(), any::<u64>()).prop_map(
            |(action, micros, a, b)| Step {
                action,
                micros,
                a,
                b,
            },
        );
        (max, any::<u32>(), 0..=300u64, vec(step, 1..=2000)).prop_map(
            |(max, initial, rtt, steps)| Run {
                config: WindowConfig {
                    initial: 1 + initial % max,
                    max,
                },
                rtt: ms(rtt),
                steps,
            },
        )
    }

    /// A producer and a consumer with frames in flight both ways, random timing, random chunk
    /// sizes and random consumption: the peer never exceeds the grant, credit never overflows,
    /// outstanding plus buffered bytes stay within the max, the window never shrinks, and once
    /// everything is delivered and consumed the producer can always send.
    #[test]
    fn random_producer_consumer() {
        use std::cell::Cell;
        use std::collections::VecDeque;

        let (grew, stayed, stalls_avoided) = (Cell::new(0), Cell::new(0), Cell::new(0));
        let mut runner = TestRunner::new(Config {
            cases: 300,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&runs(), |Run { config, rtt, steps }| {
            let max = config.max;
            let start = Instant::now();
            let mut now = start;
            let mut producer = SendWindow::new(config.initial);
            let mut consumer = RecvWindow::new(config, start);
            let mut data_in_flight = VecDeque::new();
            let mut updates_in_flight = VecDeque::new();
            let mut granted = u64::from(config.initial);
            let (mut sent, mut received) = (0u64, 0u64);
            let mut window = consumer.window();
            for (i, step) in steps.iter().enumerate() {
                now += Duration::from_micros(step.micros);
                match step.action {
                    0 if producer.available() > 0 => {
                        let n = 1 + step.a % producer.available();
                        let n = n.min(1 + step.b % (u64::from(max) + 1)) as usize;
                        producer.consume(n);
                        sent += n as u64;
                        data_in_flight.push_back(n);
                    }
                    1 => {
                        if let Some(n) = data_in_flight.pop_front() {
                            prop_assert_eq!(consumer.on_data(n), Ok(()), "step {}", i);
                            received += n as u64;
                        }
                    }
                    2 => {
                        let n = (step.a % (consumer.buffered() + 1)) as usize;
                        if let Some(increment) = consumer.on_consumed(n, now, rtt) {
                            prop_assert!(increment > 0);
                            granted += u64::from(increment);
                            updates_in_flight.push_back(increment);
                        }
                    }
                    3 => {
                        if let Some(increment) = updates_in_flight.pop_front() {
                            prop_assert_eq!(producer.grant(increment), Ok(()), "step {}", i);
                        }
                    }
                    4 => {
                        // Quiesce: deliver and consume everything.
                        while let Some(n) = data_in_flight.pop_front() {
                            prop_assert_eq!(consumer.on_data(n), Ok(()), "step {}", i);
                            received += n as u64;
                        }
                        let n = consumer.buffered() as usize;
                        if let Some(increment) = consumer.on_consumed(n, now, rtt) {
                            granted += u64::from(increment);
                            updates_in_flight.push_back(increment);
                        }
                        while let Some(increment) = updates_in_flight.pop_front() {
                            prop_assert_eq!(producer.grant(increment), Ok(()), "step {}", i);
                        }
                        prop_assert_eq!(consumer.buffered(), 0);
                        if sent > u64::from(config.initial) {
                            stalls_avoided.set(stalls_avoided.get() + 1);
                        }
                        prop_assert!(producer.available() > 0, "step {}: producer stalled", i);
                        prop_assert_eq!(producer.available(), granted - sent);
                    }
                    _ => {}
                }
                prop_assert!(consumer.window() >= window, "window shrank");
                window = consumer.window();
                prop_assert!(window <= max);
                let outstanding = granted - received;
                prop_assert!(outstanding + consumer.buffered() <= u64::from(max));
                prop_assert!(outstanding + consumer.buffered() <= u64::from(window));
                prop_assert!(producer.available() + (sent - received) <= outstanding);
            }
            if consumer.window() > config.initial {
                grew.set(grew.get() + 1);
            } else {
                stayed.set(stayed.get() + 1);
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        // The runs cover both behaviours, and producers went past their initial credit.
        let (grew, stayed, stalls_avoided) = (grew.get(), stayed.get(), stalls_avoided.get());
        assert!(grew > 30 && stayed > 30, "grew {grew}, stayed {stayed}");
        assert!(stalls_avoided > 1000, "{stalls_avoided}");
    }
}
