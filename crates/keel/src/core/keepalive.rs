//! Liveness settings both sides share: [`Keepalive`] (pings on quiet connections, and the
//! verdict on a silent peer) and the host's limit on a client's pings, [`PingPolicy`]. keel's
//! own types, so that keel-wire's may change without changing keel's API; the bindings get
//! keel-wire's through `From`.

use std::time::Duration;

/// Pings on a quiet connection and the verdict on a silent peer: a connection nothing arrived
/// on for `interval` is pinged, and closed if nothing arrives within `timeout` after the ping
/// (on keel-wire at least four round trips of the connection once it has a round-trip sample,
/// whatever `timeout` says: a client has one from its handshake, a host from its first streamed
/// request or first answered keepalive ping). Set on
/// a host with [`HostBuilder::keepalive`](crate::host::HostBuilder::keepalive) and on a channel
/// with [`ChannelBuilder::keepalive`](crate::client::ChannelBuilder::keepalive); each documents
/// its side's default.
///
/// ```
/// use std::time::Duration;
/// let every_10s = keel::host::Keepalive::new(Duration::from_secs(10), Duration::from_secs(5));
/// assert_eq!(every_10s.interval, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Keepalive {
    /// Ping once nothing has arrived for this long.
    pub interval: Duration,
    /// The peer is gone if nothing arrives within this long after a ping. A client also pings,
    /// with its call, when it starts a call on a connection nothing arrived on for this long;
    /// and (keel-wire and HTTP/2) once its calls have waited 250 ms (or two round trips) with
    /// nothing arriving since the last sign of life. That ping unanswered, the connection is
    /// gone once nothing has arrived, since that last sign of life, for a second or this
    /// timeout, whichever is longer, less 10 ms (or six round trips, if longer): with calls
    /// waiting, this bounds the silence, not the ping's own wait, which is at least 740 ms (and
    /// four round trips). So a host that froze under calls is found within a second of its
    /// last frame. After a ping it answered, with no new call since, the next waits for
    /// `interval`.
    pub timeout: Duration,
}

impl Keepalive {
    /// Pings after `interval` of quiet; gives the peer `timeout` to answer.
    pub const fn new(interval: Duration, timeout: Duration) -> Keepalive {
        Keepalive { interval, timeout }
    }
}

impl From<Keepalive> for keel_wire::Keepalive {
    fn from(k: Keepalive) -> Self {
        keel_wire::Keepalive {
            interval: k.interval,
            timeout: k.timeout,
        }
    }
}

/// A host's limit on a client's pings (gRPC's `min_time` and ping strikes): a ping that arrives
/// less than `min_interval` after the previous one, with no call between them, is a strike;
/// one strike past `max_strikes` and the connection is told GoAway ("too many pings") and
/// closed. A ping sent with a call is never a strike. Set with
/// [`HostBuilder::ping_policy`](crate::host::HostBuilder::ping_policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PingPolicy {
    /// The shortest gap between two pings with no call between them.
    pub min_interval: Duration,
    /// Pings closer than that tolerated before the connection is closed.
    pub max_strikes: u32,
}

impl PingPolicy {
    /// At most `max_strikes` pings closer than `min_interval` (with no call between them).
    pub const fn new(min_interval: Duration, max_strikes: u32) -> PingPolicy {
        PingPolicy {
            min_interval,
            max_strikes,
        }
    }
}

impl From<PingPolicy> for keel_wire::PingPolicy {
    fn from(p: PingPolicy) -> Self {
        keel_wire::PingPolicy {
            min_interval: p.min_interval,
            max_strikes: p.max_strikes,
        }
    }
}
