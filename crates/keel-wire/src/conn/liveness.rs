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

impl Keepalive {
    /// How long calls may wait with nothing received before a ping checks the path: two round
    /// trips, and at least [`BUSY_QUIET_MIN`].
    fn busy_quiet(rtt: Option<Duration>) -> Duration {
        BUSY_QUIET_MIN.max(rtt.unwrap_or(Duration::ZERO).saturating_mul(2))
    }

    /// How long calls may wait with nothing received before the connection is judged dead, if
    /// the ping sent into that silence is unanswered: six round trips, or the timeout and at
    /// least [`BUSY_VERDICT_MIN`] less [`VERDICT_EARLY`]. Never less than the quiet time plus
    /// four round trips (6 × RTT ≥ 2 × RTT + 4 × RTT; 990 ms ≥ 250 ms + 4 × RTT while
    /// RTT ≤ 185 ms).
    fn busy_verdict(&self, rtt: Option<Duration>) -> Duration {
        BUSY_VERDICT_MIN
            .max(self.timeout)
            .saturating_sub(VERDICT_EARLY)
            .max(rtt.unwrap_or(Duration::ZERO).saturating_mul(6))
    }

    /// A client whose calls wait for replies, that last heard from its peer at `last`: when to
    /// ping if nothing arrives. `spaced_from`: the last ping, if it was answered and no call
    /// started since; the next is then not before the interval (at least
    /// [`BUSY_PING_SPACING`]) after it, since a host counts pings closer than its
    /// [`PingPolicy::min_interval`] with no call between as strikes. `rtt`: the smoothed round
    /// trip, if known. keel-wire's connections and keel's HTTP/2 client follow this rule.
    pub fn busy_ping_at(
        &self,
        last: Instant,
        rtt: Option<Duration>,
        spaced_from: Option<Instant>,
    ) -> Instant {
        let quiet = last + Keepalive::busy_quiet(rtt);
        match spaced_from {
            Some(ping) => quiet.max(ping + self.interval.max(BUSY_PING_SPACING)),
            None => quiet,
        }
    }

    /// A client whose calls wait for replies, that last heard from its peer at `last` and sent
    /// a ping at `pinged` still unanswered: when the connection is dead. Nothing has then
    /// arrived for a second or the timeout, less 10 ms (or six round trips), and the ping has
    /// had that less the quiet time to be answered (at least 740 ms and four round trips: a
    /// ping sent later than the quiet time after the last frame, with a call on a connection
    /// long quiet, say, gets that long too).
    pub fn busy_dead_at(&self, last: Instant, pinged: Instant, rtt: Option<Duration>) -> Instant {
        let verdict = self.busy_verdict(rtt);
        let answer_within = verdict.saturating_sub(Keepalive::busy_quiet(rtt));
        (last + verdict).max(pinged + answer_within)
    }
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

/// A client whose calls wait for replies pings once nothing has arrived for this long (or two
/// round trips, if longer), whatever the interval: well before [`BUSY_VERDICT_MIN`], so that
/// the ping has the rest of it to be answered.
pub const BUSY_QUIET_MIN: Duration = Duration::from_millis(250);

/// A client whose calls wait for replies judges the connection dead once nothing has arrived
/// for this long (or six round trips, or the keepalive timeout, whichever is longest) and its
/// ping, sent [`BUSY_QUIET_MIN`] into that silence, is unanswered: a host that froze or a path
/// that died under calls in flight is found about this long after the last frame that came
/// from it, not at the next interval. The ping is given at least this less the quiet time
/// (740 ms: a verdict lands 10 ms early, for the timer's lateness; and at least four round
/// trips) to be answered.
pub const BUSY_VERDICT_MIN: Duration = Duration::from_secs(1);

/// The verdict on a busy connection lands this much before its silence reaches
/// [`BUSY_VERDICT_MIN`] (or the keepalive timeout, if longer; not six round trips): the timer that finds it fires up to a tick (1 ms in
/// tokio) late and a balanced client's call then moves to another host, so calls that waited
/// on the dead connection are answered or failed within the bound itself.
const VERDICT_EARLY: Duration = Duration::from_millis(10);

/// Pings a client sends while its calls wait, with no new call between them, are at least its
/// keepalive interval and at least this far apart: a host's default [`PingPolicy`] in keel
/// allows one every 5 s.
pub const BUSY_PING_SPACING: Duration = Duration::from_secs(6);

/// What a call's start did to liveness (see [`Connection::probe_call`]).
///
/// [`Connection::probe_call`]: crate::Connection::probe_call
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Probe {
    /// A Ping was queued to go with the call (the connection had been quiet for the keepalive
    /// timeout); it is awaited from now.
    pub pinged: bool,
    /// The call may have made [`Connection::poll_timeout`] earlier: it is the first call since
    /// the last keepalive Ping, so the next ping no longer waits for the spacing a host's ping
    /// limit asks of pings with no call between them. (The first call waiting on a connection
    /// may move it too, as the caller knows.)
    ///
    /// [`Connection::poll_timeout`]: crate::Connection::poll_timeout
    pub timer_earlier: bool,
}

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

    /// When a ping sent at `since` and still unanswered makes the connection dead: the
    /// keepalive timeout after it, or, while calls wait (`busy`), possibly sooner
    /// ([`Keepalive::busy_dead_at`]).
    fn dead_at(
        &self,
        k: &Keepalive,
        last: Instant,
        since: Instant,
        rtt: Option<Duration>,
        busy: bool,
    ) -> Instant {
        let idle = since + self.timeout(k, rtt);
        if busy {
            idle.min(k.busy_dead_at(last, since, rtt))
        } else {
            idle
        }
    }

    /// Client, with calls waiting for replies: when to ping if nothing arrives
    /// ([`Keepalive::busy_ping_at`]; the spacing counts from the last ping unless a call
    /// started since).
    fn busy_due(&self, k: &Keepalive, last: Instant, rtt: Option<Duration>) -> Instant {
        let spaced_from = self.last_sent_ping.filter(|_| !self.call_since_ping);
        k.busy_ping_at(last, rtt, spaced_from)
    }

    /// A liveness ping goes out at `now`, awaited from then.
    fn pinged(&mut self, now: Instant) {
        self.awaiting = Some(now);
        self.last_sent_ping = Some(now);
        self.call_since_ping = false;
    }

    /// A call starts at `now`: if nothing arrived for the timeout, a ping goes with it
    /// (`pinged`: send one; it is awaited from now). `timer_earlier`: the first call since a
    /// keepalive ping that was answered, which lifts the spacing off the next one.
    pub(super) fn on_call(&mut self, now: Instant) -> Probe {
        let first_since_ping = !self.call_since_ping;
        self.call_since_ping = true;
        let (Some(k), Some(last)) = (self.keepalive, self.last_received) else {
            return Probe::default();
        };
        let timer_earlier =
            first_since_ping && self.awaiting.is_none() && self.last_sent_ping.is_some();
        // `now < last + timeout`, an addition and a comparison rather than a subtraction of
        // instants (std's is branchy): this runs on every call.
        let quiet_too_long = last.checked_add(k.timeout).is_some_and(|due| now >= due);
        if self.awaiting.is_some() || !quiet_too_long {
            return Probe {
                pinged: false,
                timer_earlier,
            };
        }
        self.pinged(now);
        Probe {
            pinged: true,
            timer_earlier: false,
        }
    }

    /// When the caller should call [`Liveness::on_timeout`] next; `busy`: calls wait for
    /// replies (client).
    pub(super) fn deadline(&self, rtt: Option<Duration>, busy: bool) -> Option<Instant> {
        let k = self.keepalive?;
        let last = self.last_received?;
        match self.awaiting {
            Some(since) => Some(self.dead_at(&k, last, since, rtt, busy)),
            None if busy => Some((last + k.interval).min(self.busy_due(&k, last, rtt))),
            None => Some(last + k.interval),
        }
    }

    /// The timer fired at `now`; `busy`: calls wait for replies (client). A quiet connection
    /// is pinged after the interval, a connection whose calls wait with nothing arriving after
    /// [`Keepalive::busy_ping_at`], whatever the traffic the caller sends on it. An unanswered
    /// ping makes the peer dead after the timeout, or, while calls wait, once nothing has
    /// arrived long enough ([`Keepalive::busy_dead_at`]).
    pub(super) fn on_timeout(&mut self, now: Instant, rtt: Option<Duration>, busy: bool) -> Due {
        let (Some(k), Some(last)) = (self.keepalive, self.last_received) else {
            return Due::Nothing;
        };
        match self.awaiting {
            Some(since) => {
                if now >= self.dead_at(&k, last, since, rtt, busy) {
                    Due::Dead(now.saturating_duration_since(since))
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
        assert!(!l.on_call(t0 + ms(500)).pinged);
        assert!(l.on_call(t0 + ms(1_010)).pinged);
        // One ping awaited at a time.
        assert!(!l.on_call(t0 + ms(1_500)).pinged);
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
        assert!(l.on_call(t0 + ms(1_000)).pinged);
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
        assert_eq!(l.on_call(t0 + ms(60_000)), Probe::default());
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
    fn calls_waiting_with_nothing_arriving_are_probed_after_a_quarter_second() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        // Replies keep arriving: the connection is not quiet.
        l.on_received(t0 + ms(900));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(1_150)));
        assert_eq!(l.on_timeout(t0 + ms(1_149), None, true), Due::Nothing);
        // Nothing for 250 ms while calls wait: a ping, whatever the interval says.
        assert_eq!(l.on_timeout(t0 + ms(1_150), None, true), Due::Ping);
        // Dead a second (less `VERDICT_EARLY`) after the last frame, the ping unanswered for
        // 740 ms.
        assert_eq!(l.deadline(None, true), Some(t0 + ms(1_890)));
        assert_eq!(l.on_timeout(t0 + ms(1_889), None, true), Due::Nothing);
        assert_eq!(l.on_timeout(t0 + ms(1_890), None, true), Due::Dead(ms(740)));
        // Without calls waiting, the same quiet waits for the interval.
        let mut idle = Liveness::default();
        idle.enable(K, t0);
        assert_eq!(idle.on_timeout(t0 + ms(1_000), None, false), Due::Nothing);
        assert_eq!(idle.deadline(None, false), Some(t0 + K.interval));
    }

    /// The frozen host: calls answered every 10 ms, then nothing. The verdict lands a
    /// second after the last frame, so no call waits longer than that (a call that started
    /// after the last frame waits less).
    #[test]
    fn a_host_that_freezes_under_traffic_is_judged_a_second_after_its_last_frame() {
        let t0 = Instant::now();
        let rtt = Some(Duration::from_micros(100));
        let mut l = Liveness::default();
        l.enable(K, t0);
        let mut t = t0;
        for _ in 0..100 {
            t += ms(10);
            assert!(!l.on_call(t).pinged);
            assert_eq!(l.on_timeout(t, rtt, true), Due::Nothing);
            l.on_received(t + Duration::from_micros(100));
        }
        let last = t + Duration::from_micros(100);
        // Frozen: calls go on starting (one started right at the last frame waits longest).
        let oldest = last;
        assert!(!l.on_call(oldest).pinged);
        assert_eq!(l.deadline(rtt, true), Some(last + BUSY_QUIET_MIN));
        assert_eq!(l.on_timeout(last + BUSY_QUIET_MIN, rtt, true), Due::Ping);
        for n in 1..50 {
            assert!(!l.on_call(last + ms(10 * n)).pinged, "one ping at a time");
        }
        let verdict = last + BUSY_VERDICT_MIN - VERDICT_EARLY;
        assert_eq!(l.deadline(rtt, true), Some(verdict));
        assert_eq!(
            l.on_timeout(verdict - Duration::from_micros(1), rtt, true),
            Due::Nothing
        );
        assert!(matches!(l.on_timeout(verdict, rtt, true), Due::Dead(_)));
        assert!(verdict - oldest < BUSY_VERDICT_MIN);
    }

    /// Anything that arrives after the ping is a sign of life, however long calls have waited.
    #[test]
    fn a_busy_connection_that_receives_anything_is_never_judged_dead() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert!(!l.on_call(t0).pinged);
        assert_eq!(l.on_timeout(t0 + ms(250), None, true), Due::Ping);
        // A frame read before the ping left proves nothing.
        l.on_received(t0 + ms(200));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(1_190)));
        // One after it does: the ping is answered.
        l.on_received(t0 + ms(900));
        for at in [1_000, 1_200, 1_900, 5_000] {
            assert_eq!(
                l.on_timeout(t0 + ms(at), None, true),
                Due::Nothing,
                "{at} ms"
            );
        }
    }

    /// A handler that takes 5 s on a live host: its pings are answered, it is never judged
    /// dead, and the pings with no call between them keep the spacing.
    #[test]
    fn a_slow_handler_on_a_live_host_is_never_judged_dead() {
        let t0 = Instant::now();
        let rtt = Some(ms(1));
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert!(!l.on_call(t0).pinged);
        let mut pings = Vec::new();
        let mut t = t0;
        // Every 10 ms for 5 s, the timer fires if due; a pong answers each ping 1 ms later.
        while t < t0 + ms(5_000) {
            t += ms(10);
            if l.deadline(rtt, true).is_some_and(|due| due <= t) {
                match l.on_timeout(t, rtt, true) {
                    Due::Ping => {
                        pings.push(t - t0);
                        l.on_received(t + ms(1));
                    }
                    Due::Nothing => {}
                    Due::Dead(w) => panic!("judged dead at {:?} after {w:?}", t - t0),
                }
            }
        }
        // One ping a quarter second in, the next not before the interval.
        assert_eq!(pings, vec![ms(250)]);
        assert_eq!(l.deadline(rtt, true), Some(t0 + ms(250) + K.interval));
    }

    #[test]
    fn a_call_on_a_long_quiet_connection_gives_its_ping_740_ms() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        let start = t0 + ms(5_000);
        assert!(l.on_call(start).pinged);
        // Calls wait: nothing for far more than a second, but the ping gets its 740 ms (a
        // second less the quarter second and `VERDICT_EARLY`).
        assert_eq!(l.deadline(None, true), Some(start + ms(740)));
        assert_eq!(l.on_timeout(start + ms(739), None, true), Due::Nothing);
        assert_eq!(
            l.on_timeout(start + ms(740), None, true),
            Due::Dead(ms(740))
        );
        // With no call waiting (a probe whose call was given up), the timeout.
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert!(l.on_call(start).pinged);
        assert_eq!(l.deadline(None, false), Some(start + K.timeout));
    }

    /// On a long path everything scales with the round trip: the ping after two, the verdict
    /// after six, so the ping has four to be answered.
    #[test]
    fn the_busy_verdict_scales_with_the_round_trip() {
        let t0 = Instant::now();
        let rtt = Some(ms(300));
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert!(!l.on_call(t0).pinged);
        assert_eq!(l.deadline(rtt, true), Some(t0 + ms(600)));
        assert_eq!(l.on_timeout(t0 + ms(600), rtt, true), Due::Ping);
        assert_eq!(l.deadline(rtt, true), Some(t0 + ms(1_800)));
        // An answer after four round trips less a millisecond keeps it.
        let mut alive = Liveness::default();
        alive.enable(K, t0);
        assert!(!alive.on_call(t0).pinged);
        assert_eq!(alive.on_timeout(t0 + ms(600), rtt, true), Due::Ping);
        alive.on_received(t0 + ms(1_799));
        assert_eq!(alive.on_timeout(t0 + ms(1_800), rtt, true), Due::Nothing);
        assert_eq!(
            l.on_timeout(t0 + ms(1_800), rtt, true),
            Due::Dead(ms(1_200))
        );
    }

    /// A longer keepalive timeout than a second is honoured under calls too.
    #[test]
    fn the_busy_verdict_is_at_least_the_keepalive_timeout() {
        let t0 = Instant::now();
        let patient = Keepalive {
            interval: Duration::from_secs(20),
            timeout: Duration::from_secs(5),
        };
        let mut l = Liveness::default();
        l.enable(patient, t0);
        assert!(!l.on_call(t0).pinged);
        assert_eq!(l.on_timeout(t0 + ms(250), None, true), Due::Ping);
        assert_eq!(l.deadline(None, true), Some(t0 + ms(4_990)));
    }

    #[test]
    fn the_first_call_after_an_answered_ping_may_move_the_timer_earlier() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        // No keepalive ping yet: nothing to lift.
        assert_eq!(l.on_call(t0), Probe::default());
        assert_eq!(l.on_timeout(t0 + ms(250), None, true), Due::Ping);
        // While the ping is awaited, the verdict does not move.
        assert_eq!(l.on_call(t0 + ms(251)), Probe::default());
        l.on_received(t0 + ms(260));
        // Answered, and a call since: the next one lifts nothing more.
        assert!(!l.on_call(t0 + ms(300)).timer_earlier);
        assert_eq!(l.deadline(None, true), Some(t0 + ms(510)));
        // A ping answered with no call since: spaced; the next call lifts the spacing.
        assert_eq!(l.on_timeout(t0 + ms(510), None, true), Due::Ping);
        l.on_received(t0 + ms(511));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(510) + K.interval));
        assert_eq!(
            l.on_call(t0 + ms(1_000)),
            Probe {
                pinged: false,
                timer_earlier: true
            }
        );
        assert_eq!(l.deadline(None, true), Some(t0 + ms(761)));
    }

    #[test]
    fn a_long_call_is_probed_no_closer_than_the_hosts_ping_policy_allows() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert!(!l.on_call(t0).pinged);
        assert_eq!(l.on_timeout(t0 + ms(250), None, true), Due::Ping);
        // The pong: alive. The call still runs, and no call started since the ping: the next
        // waits for the interval (20 s), as the host's ping limit expects.
        l.on_received(t0 + ms(260));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(250) + K.interval));
        assert_eq!(l.on_timeout(t0 + ms(2_010), None, true), Due::Nothing);
        assert_eq!(
            l.on_timeout(t0 + ms(250) + K.interval, None, true),
            Due::Ping
        );
        // A call started since the last ping: the next may come a quarter second after the
        // last sign.
        l.on_received(t0 + ms(20_260));
        assert!(!l.on_call(t0 + ms(20_270)).pinged);
        assert_eq!(l.deadline(None, true), Some(t0 + ms(20_510)));
        // With an interval below the spacing, the interval's own ping comes first, as keepalive
        // always did: busy pings add none closer than the spacing.
        let short = Keepalive {
            interval: ms(2_000),
            timeout: ms(1_000),
        };
        let mut l = Liveness::default();
        l.enable(short, t0);
        assert_eq!(l.on_timeout(t0 + ms(250), None, true), Due::Ping);
        l.on_received(t0 + ms(260));
        assert_eq!(l.deadline(None, true), Some(t0 + ms(2_260)));
    }

    #[test]
    fn the_busy_quiet_is_at_least_two_round_trips() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.enable(K, t0);
        assert_eq!(l.deadline(Some(ms(500)), true), Some(t0 + ms(1_000)));
        assert_eq!(l.deadline(Some(ms(10)), true), Some(t0 + BUSY_QUIET_MIN));
    }

    /// A client whose calls all take 10 s, against a host's default ping limit (keel's: 5 s,
    /// 2 strikes): one call at a time back to back, overlapping calls started every 4 s, and
    /// calls with idle gaps. Every ping the client's liveness sends reaches the host's, which
    /// never finds one too many. In 5 ms steps over two minutes; replies and pongs take 1 ms.
    #[test]
    fn a_client_whose_calls_all_take_ten_seconds_stays_within_the_hosts_ping_limit() {
        let policy = PingPolicy {
            min_interval: Duration::from_secs(5),
            max_strikes: 2,
        };
        let rtt = Some(ms(1));
        // (start, end) of each call, in ms.
        let back_to_back: Vec<(u64, u64)> =
            (0..12).map(|i| (i * 10_001, i * 10_001 + 10_000)).collect();
        let overlapping: Vec<(u64, u64)> =
            (0..28).map(|i| (i * 4_000, i * 4_000 + 10_000)).collect();
        let with_gaps: Vec<(u64, u64)> =
            (0..6).map(|i| (i * 17_000, i * 17_000 + 10_000)).collect();
        for (name, calls) in [
            ("back to back", back_to_back),
            ("overlapping", overlapping),
            ("with gaps", with_gaps),
        ] {
            let t0 = Instant::now();
            let mut client = Liveness::default();
            client.enable(K, t0);
            let mut host = Liveness {
                policy: Some(policy),
                ..Liveness::default()
            };
            let (mut pings, mut started, mut answered) = (0, 0, 0);
            for step in 0..24_000u64 {
                let at = step * 5;
                let now = t0 + ms(at);
                for &(start, end) in &calls {
                    if start == at {
                        host.on_request();
                        if client.on_call(now).pinged {
                            pings += 1;
                            assert!(host.on_ping(now), "{name}: too many pings at {at} ms");
                            client.on_received(now + ms(1));
                        }
                        started += 1;
                    }
                    if end == at {
                        client.on_received(now + ms(1));
                        answered += 1;
                    }
                }
                let busy = started > answered;
                if client.deadline(rtt, busy).is_some_and(|due| due <= now) {
                    match client.on_timeout(now, rtt, busy) {
                        Due::Ping => {
                            pings += 1;
                            assert!(host.on_ping(now), "{name}: too many pings at {at} ms");
                            client.on_received(now + ms(1));
                        }
                        Due::Nothing => {}
                        Due::Dead(w) => panic!("{name}: judged dead at {at} ms after {w:?}"),
                    }
                }
            }
            assert!(pings > 0, "{name}: the calls were probed");
            assert_eq!(host.strikes, 0, "{name}");
        }
    }
}
