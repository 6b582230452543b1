//! One direction of the emulated link as a pure model (no clock, no I/O): what happens to a
//! packet handed to it at a given instant. The pump in [`super::pump`] applies the answers.
//!
//! In the order netem applies them: random loss first (each packet dropped with the loss
//! probability, from a seeded generator), then the bandwidth cap (the packet waits for the
//! packets before it to be serialized, then takes `len / rate` itself; if the bytes already
//! waiting exceed the queue's size, it is dropped: drop-tail), then the propagation delay (half
//! the RTT). Delivery times never decrease, so the pump delivers in arrival order.

use std::time::{Duration, Instant};

/// A link's impairments, each way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Impairments {
    /// Round-trip time: each direction adds half of it.
    pub(crate) rtt: Duration,
    /// Bandwidth cap each way, bytes/s (`None`: none, and no queue).
    pub(crate) bytes_per_sec: Option<u64>,
    /// The probability that a packet is dropped, percent (0–100), each way.
    pub(crate) loss_pct: f64,
    /// Seeds the loss generator (each direction derives its own stream from it).
    pub(crate) seed: u64,
}

impl Impairments {
    /// The bytes a capped direction's queue holds before it drops what arrives (drop-tail): one
    /// bandwidth-delay product, and never less than [`MIN_QUEUE_PACKETS`] full packets. A
    /// router buffer of one BDP is the classic sizing that lets one TCP flow fill the link.
    pub(crate) fn queue_bytes(&self) -> Option<usize> {
        self.bytes_per_sec.map(|rate| {
            let bdp = (rate as f64 * self.rtt.as_secs_f64()) as usize;
            bdp.max(MIN_QUEUE_PACKETS * MTU)
        })
    }
}

/// The devices' MTU (a full packet's size on the link).
pub(crate) const MTU: usize = 1500;

/// The smallest queue of a capped direction, in full packets.
pub(crate) const MIN_QUEUE_PACKETS: usize = 64;

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// It arrives at the far end at this instant.
    Deliver(Instant),
    /// Dropped at random (the loss rate).
    Lost,
    /// Dropped because the queue in front of the capped link was full.
    QueueFull,
}

/// One direction: the loss generator and the link's queue.
#[derive(Debug, Clone)]
pub(crate) struct Direction {
    one_way: Duration,
    bytes_per_sec: Option<u64>,
    queue_bytes: usize,
    /// Probability of loss scaled to `u64::MAX` (0: never, `u64::MAX`: always).
    loss_threshold: u64,
    rng: SplitMix64,
    /// When the link finishes serializing what it already holds (capped directions only).
    free_at: Option<Instant>,
}

impl Direction {
    /// Direction number `which` (0: towards the host, 1: back) of a link with `imp`.
    pub(crate) fn new(imp: &Impairments, which: u64) -> Direction {
        let p = (imp.loss_pct / 100.0).clamp(0.0, 1.0);
        Direction {
            one_way: imp.rtt / 2,
            bytes_per_sec: imp.bytes_per_sec.filter(|&b| b > 0),
            queue_bytes: imp.queue_bytes().unwrap_or(usize::MAX),
            loss_threshold: (p * u64::MAX as f64) as u64,
            rng: SplitMix64(imp.seed ^ which.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            free_at: None,
        }
    }

    /// The fate of a packet of `len` bytes handed to the link at `now`. Calls must come with
    /// `now` never decreasing; the delivery times then never decrease either.
    pub(crate) fn offer(&mut self, now: Instant, len: usize) -> Fate {
        if self.loss_threshold > 0 && self.rng.next() < self.loss_threshold {
            return Fate::Lost;
        }
        let Some(rate) = self.bytes_per_sec else {
            return Fate::Deliver(now + self.one_way);
        };
        let start = self.free_at.map_or(now, |f| f.max(now));
        // Bytes still waiting to be serialized ahead of this packet.
        let waiting = (start - now).as_secs_f64() * rate as f64;
        if waiting + len as f64 > self.queue_bytes as f64 {
            return Fate::QueueFull;
        }
        let done = start + Duration::from_secs_f64(len as f64 / rate as f64);
        self.free_at = Some(done);
        Fate::Deliver(done + self.one_way)
    }
}

/// SplitMix64: a small seeded generator whose whole state is one number, so a run is replayed
/// from the seed it printed.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imp(loss_pct: f64, bytes_per_sec: Option<u64>) -> Impairments {
        Impairments {
            rtt: Duration::from_millis(200),
            bytes_per_sec,
            loss_pct,
            seed: 7,
        }
    }

    #[test]
    fn uncapped_lossless_adds_half_the_rtt() {
        let mut d = Direction::new(&imp(0.0, None), 0);
        let t = Instant::now();
        for i in 0..1000 {
            let now = t + Duration::from_micros(i);
            assert_eq!(
                d.offer(now, 1500),
                Fate::Deliver(now + Duration::from_millis(100))
            );
        }
    }

    #[test]
    fn loss_rate_and_seed() {
        let t = Instant::now();
        let count = |seed: u64, which: u64| {
            let mut d = Direction::new(
                &Impairments {
                    seed,
                    ..imp(3.0, None)
                },
                which,
            );
            (0..100_000)
                .map(|_| d.offer(t, 100))
                .map(|f| f == Fate::Lost)
                .collect::<Vec<_>>()
        };
        let a = count(7, 0);
        let lost = a.iter().filter(|&&l| l).count();
        // 3 % of 100k: 3,000, σ ≈ 54.
        assert!((2_700..3_300).contains(&lost), "{lost}");
        // The same seed replays the same drops; another seed or direction does not.
        assert_eq!(a, count(7, 0));
        assert_ne!(a, count(8, 0));
        assert_ne!(a, count(7, 1));
        // 0 % never drops, 100 % always does.
        let mut never = Direction::new(&imp(0.0, None), 0);
        let mut always = Direction::new(&imp(100.0, None), 0);
        for _ in 0..10_000 {
            assert!(matches!(never.offer(t, 1), Fate::Deliver(_)));
            assert_eq!(always.offer(t, 1), Fate::Lost);
        }
    }

    #[test]
    fn the_cap_serializes_then_the_queue_drops_tail() {
        // 1.5 MB/s: a 1500-byte packet takes 1 ms. BDP at 200 ms: 300 KB = 200 packets.
        let i = imp(0.0, Some(1_500_000));
        assert_eq!(i.queue_bytes(), Some(300_000));
        let mut d = Direction::new(&i, 0);
        let t = Instant::now();
        // A burst at one instant: packet k is delivered after k + 1 ms of serialization.
        let mut fates = (0..300).map(|_| d.offer(t, 1500)).collect::<Vec<_>>();
        for (k, f) in fates.iter().enumerate().take(200) {
            let at = t + Duration::from_millis(100) + Duration::from_millis(k as u64 + 1);
            let Fate::Deliver(got) = *f else {
                panic!("packet {k}: {f:?}")
            };
            let off = got.max(at) - got.min(at);
            assert!(off < Duration::from_micros(5), "packet {k}: {off:?}");
        }
        // The queue holds 200 packets: the rest of the burst is dropped.
        assert!(fates.split_off(200).iter().all(|&f| f == Fate::QueueFull));
        // Once the link has drained, packets pass again.
        let later = t + Duration::from_secs(1);
        assert!(
            matches!(d.offer(later, 1500), Fate::Deliver(at) if at == later + Duration::from_millis(101))
        );
        // A small cap still queues at least 64 full packets.
        assert_eq!(imp(0.0, Some(10_000)).queue_bytes(), Some(64 * 1500));
        assert_eq!(imp(0.0, None).queue_bytes(), None);
    }
}
