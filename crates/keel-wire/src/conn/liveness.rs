//! Liveness: keepalive pings on a quiet connection, the verdict on a peer that stops answering,
//! and a host's limit on how often a client may ping. Sans-IO like the rest of the core: the
//! caller passes the time and runs the timer ([`Connection::poll_timeout`] says when).
//!
//! [`Connection::poll_timeout`]: crate::Connection::poll_timeout

use std::time::{Duration, Instant};

/// When an end pings a quiet connection, and how long it waits for a sign of life.
///
/// Any frame from the peer is a sign of life (not only the Pong), so a connection busy
/// receiving is never pinged and never judged dead while data arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Ping once nothing has arrived for this long.
    pub interval: Duration,
    /// The peer is dead if nothing arrives within this long after a ping (at least four
    /// round-trip times of the connection, whatever this says). A client also pings, with its
    /// call, when it starts a call on a connection nothing arrived on for this long.
    pub timeout: Duration,
}

/// A host's limit on a client's pings, as gRPC's `min_time`/ping strikes: a Ping that arrives
/// less than `min_interval` after the previous one, with no Request in between, is a strike;
/// after `max_strikes` strikes the next one is
/// [`ConnError::TooManyPings`](crate::ConnError::TooManyPings). A Request clears the strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingPolicy {
    /// The shortest gap between two pings with no call between them.
    pub min_interval: Duration,
    /// Pings closer than that tolerated before the connection is closed.
    pub max_strikes: u32,
}

/// A client whose calls wait for replies pings once nothing has arrived for this long (or four
/// round trips, if longer), whatever the interval: a host that froze or a path that died under
/// a call in flight is found in about this plus the timeout, not at the next interval.
pub const BUSY_QUIET_MIN: Duration = Duration::from_secs(1);

/// Pings a client sends while its calls wait, with no new call between them, are at least its
/// keepalive interval and at least this far apart: a host's default [`PingPolicy`] in keel
/// allows one every 5 s.
pub const BUSY_PING_SPACING: Duration = Duration::from_secs(6);

/// A connection's liveness state (part of [`Connection`](crate::Connection)).
#[derive(Debug, Default)]
pub(super) struct Liveness {
    pub(super) keepalive: Option<Keepalive>,
    /// When the last frame arrived (or keepalive was enabled).
    last_received: Option<Instant>,
    /// Waiting for a sign of life since this time (a ping went out then).
    awaiting: Option<Instant>,
    pub(super) policy: Option<PingPolicy>,
    /// Client: when the last keepalive Ping went out.
    last_sent_ping: Option<Instant>,
    /// Client: a call started since that Ping (so the next one is no strike at the host).
    call_since_ping: bool,
    /// Host: when the last Ping arrived.
    last_ping: Option<Instant>,
    /// Host: a Request arrived since the last Ping.
    request_since_ping: bool,
    strikes: u32,
}

/// What the timer found (see [`Liveness::on_timeout`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Due {
    /// Nothing to do yet.
    Nothing,
    /// Send a keepalive ping (now awaited).
    Ping,
    /// Nothing arrived within the timeout after a ping: the peer is gone.
    Dead(Duration),
}

impl Liveness {
    pub(super) fn enable(&mut self, keepalive: Keepalive, now: Instant) {
        self.keepalive = Some(keepalive);
        self.last_received = Some(self.last_received.map_or(now, |t| t.max(now)));
    }

    /// A frame arrived at `now`: a sign of life.
    pub(super) fn on_received(&mut self, now: Instant) {
        if self.keepalive.is_none() {
            return;
        }
        self.last_received = Some(self.last_received.map_or(now, |t| t.max(now)));
        // A frame read before the ping went out proves nothing about the path since.
        if self.awaiting.is_some_and(|since| now >= since) {
            self.awaiting = None;
        }
    }

    /// How long to wait for a sign of life after a ping: the configured timeout, at least four
    /// round trips.
    fn timeout(&self, keepalive: &Keepalive, rtt: Option<Duration>) -> Duration {
        keepalive
            .timeout
            .max(rtt.unwrap_or(Duration::ZERO).saturating_mul(4))
    }

    /// Client: how long calls may wait with nothing received before a ping checks the path:
    /// four round trips, and at least [`BUSY_QUIET_MIN`].
    fn busy_quiet(rtt: Option<Duration>) -> Duration {
        BUSY_QUIET_MIN.max(rtt.unwrap_or(Duration::ZERO).saturating_mul(4))
    }

    /// Client, with calls waiting for replies: when to ping if nothing arrives. Unless a call
    /// started since the last ping, not before the keepalive interval (at least
    /// [`BUSY_PING_SPACING`]) after it: a host counts pings closer than its
    /// [`PingPolicy::min_interval`] with no call between as strikes, and a client that keeps
    /// to its interval is what the host was configured for.
    fn busy_due(&self, k: &Keepalive, last: Instant, rtt: Option<Duration>) -> Instant {
        let quiet = last + Liveness::busy_quiet(rtt);
        match self.last_sent_ping {
            Some(ping) if !self.call_since_ping => {
                quiet.max(ping + k.interval.max(BUSY_PING_SPACING))
            }
            _ => quiet,
        }
    }

    /// A liveness ping goes out at `now`, awaited from then.
    fn pinged(&mut self, now: Instant) {
        self.awaiting = Some(now);
        self.last_sent_ping = Some(now);
        self.call_since_ping = false;
    }

    /// A call starts at `now`: if nothing arrived for the timeout, a ping goes with it.
    /// Returns whether to send one (it is awaited from now).
    pub(super) fn on_call(&mut self, now: Instant) -> bool {
        self.call_since_ping = true;
        let (Some(k), Some(last)) = (self.keepalive, self.last_received) else {
            return false;
        };
        // `now < last + timeout`, an addition and a comparison rather than a subtraction of
        // instants (std's is branchy): this runs on every call.
        let quiet_too_long = last.checked_add(k.timeout).is_some_and(|due| now >= due);
        if self.awaiting.is_some() || !quiet_too_long {
            return false;
        }
        self.pinged(now);
        true
    }

    /// When the caller should call [`Liveness::on_timeout`] next; `busy`: calls wait for
    /// replies (client).
    pub(super) fn deadline(&self, rtt: Option<Duration>, busy: bool) -> Option<Instant> {
        let k = self.keepalive?;
        let last = self.last_received?;
        match self.awaiting {
            Some(since) => Some(since + self.timeout(&k, rtt)),
            None if busy => Some((last + k.interval).min(self.busy_due(&k, last, rtt))),
            None => Some(last + k.interval),
        }
    }

    /// The timer fired at `now`; `busy`: calls wait for replies (client). A quiet connection
    /// is pinged after the interval, a connection whose calls wait with nothing arriving after
    /// [`Liveness::busy_quiet`], whatever the traffic the caller sends on it.
    pub(super) fn on_timeout(&mut self, now: Instant, rtt: Option<Duration>, busy: bool) -> Due {
        let (Some(k), Some(last)) = (self.keepalive, self.last_received) else {
            return Due::Nothing;
        };
        match self.awaiting {
            Some(since) => {
                let waited = now.saturating_duration_since(since);
                if waited >= self.timeout(&k, rtt) {
                    Due::Dead(waited)
                } else {
                    Due::Nothing
                }
            }
            None if now.saturating_duration_since(last) >= k.interval
                || (busy && now >= self.busy_due(&k, last, rtt)) =>
            {
                self.pinged(now);
                Due::Ping
            }
            None => Due::Nothing,
        }
    }

    /// The awaited ping had not left yet: wait the timeout again from `now`.
    pub(super) fn restart_wait(&mut self, now: Instant) {
        if let Some(since) = self.awaiting.as_mut() {
            *since = (*since).max(now);
        }
    }

    /// Host: a Request arrived.
    pub(super) fn on_request(&mut self) {
        self.request_since_ping = true;
        self.strikes = 0;
    }

    /// Host: a Ping arrived at `now`. False once the client pinged too often.
    pub(super) fn on_ping(&mut self, now: Instant) -> bool {
        let Some(policy) = self.policy else {
            return true;
        };
        let too_soon = !self.request_since_ping
            && self
                .last_ping
                .is_some_and(|t| now.saturating_duration_since(t) < policy.min_interval);
        self.last_ping = Some(now);
        self.request_since_ping = false;
        if too_soon {
            self.strikes += 1;
        }
        self.strikes <= policy.max_strikes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Keepalive = Keepalive {
        interval: Duration::from_secs(20),
        timeout: Duration::from_secs(1),
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_quiet_connection_is_pinged_then_judged() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert_eq!(l.deadline(None, false), Some(t0 + K.interval));
        assert_eq!(l.on_timeout(t0 + ms(19_999), None, false), Due::Nothing);
        assert_eq!(l.on_timeout(t0 + K.interval, None, false), Due::Ping);
        let pinged = t0 + K.interval;
        assert_eq!(l.deadline(None, false), Some(pinged + K.timeout));
        assert_eq!(l.on_timeout(pinged + ms(999), None, false), Due::Nothing);
        assert_eq!(
            l.on_timeout(pinged + ms(1_000), None, false),
            Due::Dead(ms(1_000))
        );
    }

    #[test]
    fn any_frame_after_the_ping_is_a_sign_of_life() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert_eq!(l.on_timeout(t0 + K.interval, None, false), Due::Ping);
        // Read before the ping went out: proves nothing.
        l.on_received(t0 + ms(5));
        assert_eq!(
            l.on_timeout(t0 + K.interval + K.timeout, None, false),
            Due::Dead(K.timeout)
        );
        l.on_received(t0 + K.interval + ms(300));
        assert_eq!(
            l.on_timeout(t0 + K.interval + K.timeout, None, false),
            Due::Nothing
        );
        assert_eq!(l.deadline(None, false), Some(t0 + 2 * K.interval + ms(300)));
    }

    #[test]
    fn a_call_on_a_quiet_connection_carries_a_ping() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        l.on_received(t0 + ms(10));
        // Something arrived within the timeout: no ping.
        assert!(!l.on_call(t0 + ms(500)));
        assert!(l.on_call(t0 + ms(1_010)));
        // One ping awaited at a time.
        assert!(!l.on_call(t0 + ms(1_500)));
        assert_eq!(l.deadline(None, false), Some(t0 + ms(2_010)));
        assert_eq!(
            l.on_timeout(t0 + ms(2_010), None, false),
            Due::Dead(ms(1_000))
        );
    }

    #[test]
    fn the_timeout_is_at_least_four_round_trips() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert_eq!(l.on_timeout(t0 + K.interval, None, false), Due::Ping);
        let rtt = Some(ms(400));
        let pinged = t0 + K.interval;
        assert_eq!(l.deadline(rtt, false), Some(pinged + ms(1_600)));
        assert_eq!(l.on_timeout(pinged + ms(1_000), rtt, false), Due::Nothing);
        assert_eq!(
            l.on_timeout(pinged + ms(1_600), rtt, false),
            Due::Dead(ms(1_600))
        );
    }

    #[test]
    fn a_ping_that_has_not_left_restarts_the_wait() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert!(l.on_call(t0 + ms(1_000)));
        assert_eq!(
            l.on_timeout(t0 + ms(2_000), None, false),
            Due::Dead(ms(1_000))
        );
        l.restart_wait(t0 + ms(2_000));
        assert_eq!(l.on_timeout(t0 + ms(2_500), None, false), Due::Nothing);
        assert_eq!(l.deadline(None, false), Some(t0 + ms(3_000)));
        // Without an awaited ping there is nothing to restart.
        l.on_received(t0 + ms(2_600));
        l.restart_wait(t0 + ms(2_700));
        assert_eq!(l.deadline(None, false), Some(t0 + ms(2_600) + K.interval));
    }

    #[test]
    fn disabled_keepalive_never_pings() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.on_received(t0);
        assert_eq!(l.deadline(None, false), None);
        assert!(!l.on_call(t0 + ms(60_000)));
        assert_eq!(l.on_timeout(t0 + ms(60_000), None, false), Due::Nothing);
    }

    #[test]
    fn ping_strikes_need_no_call_between_and_a_short_gap() {
        let policy = PingPolicy {
            min_interval: Duration::from_secs(5),
            max_strikes: 2,
        };
        let t0 = Instant::now();
        let mut l = Liveness {
            policy: Some(policy),
            ..Liveness::default()
        };
        assert!(l.on_ping(t0));
        // Spaced out: fine, however many.
        for i in 1..10 {
            assert!(l.on_ping(t0 + Duration::from_secs(5 * i)));
        }
        let t1 = t0 + Duration::from_secs(45);
        // With a call between: fine.
        for i in 1..10 {
            l.on_request();
            assert!(l.on_ping(t1 + ms(10 * i)));
        }
        let t2 = t1 + ms(100);
        assert!(l.on_ping(t2 + ms(1)), "strike 1");
        assert!(l.on_ping(t2 + ms(2)), "strike 2");
        assert!(!l.on_ping(t2 + ms(3)), "strike 3 is one too many");
        // A call clears the strikes.
        l.on_request();
        assert!(l.on_ping(t2 + ms(4)));
        assert!(l.on_ping(t2 + ms(5)));
    }

    #[test]
    fn calls_waiting_with_nothing_arriving_are_probed_after_a_second() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        // Replies keep arriving: the connection is not quiet.
        l.on_received(t0 + ms(900));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(1_900)));
        assert_eq!(l.on_timeout(t0 + ms(1_899), None, true), Due::Nothing);
        // Nothing for a second while calls wait: a ping, whatever the interval says.
        assert_eq!(l.on_timeout(t0 + ms(1_900), None, true), Due::Ping);
        assert_eq!(l.deadline(None, true), Some(t0 + ms(2_900)));
        assert_eq!(
            l.on_timeout(t0 + ms(2_900), None, true),
            Due::Dead(K.timeout)
        );
        // Without calls waiting, the same quiet waits for the interval.
        let mut idle = Liveness::default();
        idle.enable(K, t0);
        assert_eq!(idle.on_timeout(t0 + ms(1_000), None, false), Due::Nothing);
        assert_eq!(idle.deadline(None, false), Some(t0 + K.interval));
    }

    #[test]
    fn a_long_call_is_probed_no_closer_than_the_hosts_ping_policy_allows() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert!(!l.on_call(t0));
        assert_eq!(l.on_timeout(t0 + ms(1_000), None, true), Due::Ping);
        // The pong: alive. The call still runs, and no call started since the ping: the next
        // waits for the interval (20 s), as the host's ping limit expects.
        l.on_received(t0 + ms(1_010));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(1_000) + K.interval));
        assert_eq!(l.on_timeout(t0 + ms(2_010), None, true), Due::Nothing);
        assert_eq!(
            l.on_timeout(t0 + ms(1_000) + K.interval, None, true),
            Due::Ping
        );
        // A call started since the last ping: the next may come a second after the last sign.
        l.on_received(t0 + ms(21_010));
        assert!(!l.on_call(t0 + ms(21_020)));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(22_010)));
        // With an interval below the spacing, the interval's own ping comes first, as keepalive
        // always did: busy pings add none closer than the spacing.
        let short = Keepalive {
            interval: ms(2_000),
            timeout: ms(1_000),
        };
        let mut l = Liveness::default();
        l.enable(short, t0);
        assert_eq!(l.on_timeout(t0 + ms(1_000), None, true), Due::Ping);
        l.on_received(t0 + ms(1_010));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(3_010)));
    }

    #[test]
    fn the_busy_wait_is_at_least_four_round_trips() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert_eq!(l.deadline(Some(ms(500)), true), Some(t0 + ms(2_000)));
        assert_eq!(l.deadline(Some(ms(10)), true), Some(t0 + BUSY_QUIET_MIN));
    }
}
