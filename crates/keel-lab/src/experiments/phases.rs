//! Where a call's time went, from the host's own phase histograms as a Prometheus user scrapes
//! them: `keel_server_throttle_wait_seconds`, `keel_server_pool_wait_seconds`,
//! `keel_server_handler_seconds` and `keel_server_call_duration_seconds` (their `_sum` and
//! `_count`), read before and after a batch of calls. The difference of two scrapes is the
//! batch's: the mean per call of each phase, and what the host did not see (the client and the
//! network: the client-measured call time less the host's).

use std::time::Duration;

use serde::Serialize;

use crate::prom::Metrics;

/// The phase histograms, in the order a call passes them (the last holds the others).
pub(crate) const HISTOGRAMS: [&str; 4] = [
    "keel_server_throttle_wait_seconds",
    "keel_server_pool_wait_seconds",
    "keel_server_handler_seconds",
    "keel_server_call_duration_seconds",
];

/// Whether a scrape should keep series `name`: a phase histogram's `_sum` or `_count`.
pub(crate) fn wanted(name: &str) -> bool {
    let base = name
        .strip_suffix("_sum")
        .or_else(|| name.strip_suffix("_count"));
    base.is_some_and(|b| HISTOGRAMS.contains(&b))
}

/// One histogram's running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Totals {
    /// Seconds recorded.
    pub(crate) sum: f64,
    /// Observations.
    pub(crate) count: f64,
}

/// The phase histograms' running totals at one scrape, for the calls of some operations.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// `keel_server_throttle_wait_seconds`.
    pub(crate) throttle_wait: Totals,
    /// `keel_server_pool_wait_seconds`.
    pub(crate) pool_wait: Totals,
    /// `keel_server_handler_seconds`.
    pub(crate) handler: Totals,
    /// `keel_server_call_duration_seconds`.
    pub(crate) total: Totals,
}

impl Snapshot {
    /// The totals of the series carrying every label of `labels` (e.g. one service), added up
    /// over its operations; a histogram with no series yet counts as empty.
    pub(crate) fn read(m: &Metrics, labels: &[(&str, &str)]) -> Snapshot {
        let totals = |h: &str| Totals {
            sum: m.sum(&format!("{h}_sum"), labels).unwrap_or(0.0),
            count: m.sum(&format!("{h}_count"), labels).unwrap_or(0.0),
        };
        Snapshot {
            throttle_wait: totals(HISTOGRAMS[0]),
            pool_wait: totals(HISTOGRAMS[1]),
            handler: totals(HISTOGRAMS[2]),
            total: totals(HISTOGRAMS[3]),
        }
    }

    /// Calls answered (the total histogram's count).
    pub(crate) fn calls(&self) -> u64 {
        self.total.count.max(0.0) as u64
    }
}

/// A batch of calls' time, split into phases: means per call answered, ms. The server's phases
/// add up to `server_ms`; `server_ms` and `client_network_ms` add up to `client_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Phases {
    /// Calls the host answered between the two scrapes (what the means divide by).
    pub(crate) calls: u64,
    /// The call as the client timed it, ms.
    pub(crate) client_ms: f64,
    /// Queued in the throttle, ms.
    pub(crate) throttle_wait_ms: f64,
    /// From the hand-off to keel-pool to the start on a pool thread, ms.
    pub(crate) pool_wait_ms: f64,
    /// The handler (and encoding its reply), ms.
    pub(crate) handler_ms: f64,
    /// The rest of the host's time: reading and decoding the request, dispatch, writing the
    /// answer (`server_ms` less the three phases above), ms.
    pub(crate) server_other_ms: f64,
    /// The host's whole time, arrival to answer, ms.
    pub(crate) server_ms: f64,
    /// What the host did not see: the client and the network (`client_ms − server_ms`), ms.
    pub(crate) client_network_ms: f64,
}

/// A segment of the split: its name, its JSON key and its colour in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// How tables and legends name it.
    pub(crate) name: &'static str,
    /// Its key in [`Phases`]' JSON.
    pub(crate) key: &'static str,
    /// Its colour in the report's charts.
    pub(crate) colour: &'static str,
}

/// The segments a call's time is split into, in the order a call passes them (the client and
/// network last: it brackets the rest).
pub(crate) const SEGMENTS: [Segment; 5] = [
    Segment {
        name: "throttle wait",
        key: "throttle_wait_ms",
        colour: "#f59e0b",
    },
    Segment {
        name: "pool wait",
        key: "pool_wait_ms",
        colour: "#dc2626",
    },
    Segment {
        name: "handler",
        key: "handler_ms",
        colour: "#2563eb",
    },
    Segment {
        name: "server, other",
        key: "server_other_ms",
        colour: "#7c3aed",
    },
    Segment {
        name: "client + network",
        key: "client_network_ms",
        colour: "#9ca3af",
    },
];

/// Seconds to ms, to 1 µs.
fn ms3(secs: f64) -> f64 {
    (secs * 1e6).round() / 1e3
}

impl Phases {
    /// The split of the calls between scrapes `before` and `after`, whose mean client-timed
    /// call took `client_mean`; `None` if the host answered no call in between.
    pub(crate) fn between(
        before: &Snapshot,
        after: &Snapshot,
        client_mean: Duration,
    ) -> Option<Phases> {
        let calls = after.total.count - before.total.count;
        if calls < 1.0 {
            return None;
        }
        let mean = |a: Totals, b: Totals| (a.sum - b.sum).max(0.0) / calls;
        let throttle = mean(after.throttle_wait, before.throttle_wait);
        let pool = mean(after.pool_wait, before.pool_wait);
        let handler = mean(after.handler, before.handler);
        let server = mean(after.total, before.total);
        let client = client_mean.as_secs_f64();
        Some(Phases {
            calls: calls as u64,
            client_ms: ms3(client),
            throttle_wait_ms: ms3(throttle),
            pool_wait_ms: ms3(pool),
            handler_ms: ms3(handler),
            server_other_ms: ms3(server - throttle - pool - handler),
            server_ms: ms3(server),
            client_network_ms: ms3(client - server),
        })
    }

    /// The segments' values, ms, in [`SEGMENTS`]' order; they add up to `client_ms`.
    pub(crate) fn values(&self) -> [f64; 5] {
        [
            self.throttle_wait_ms,
            self.pool_wait_ms,
            self.handler_ms,
            self.server_other_ms,
            self.client_network_ms,
        ]
    }
}

/// The mean of `calls` (zero if there are none).
pub(crate) fn mean(calls: &[Duration]) -> Duration {
    match u32::try_from(calls.len()) {
        Ok(0) | Err(_) => Duration::ZERO,
        Ok(n) => calls.iter().sum::<Duration>() / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(sum: f64, count: f64) -> Totals {
        Totals { sum, count }
    }

    #[test]
    fn split_of_a_round() {
        // 2 calls of an earlier round already counted; this round adds 100 calls that each
        // waited 0.1 ms in the throttle, 3 ms for a pool thread, ran 2000 ms, and spent 0.5 ms
        // more in the host; the client timed 2004 ms on average.
        let before = Snapshot {
            throttle_wait: totals(0.001, 2.0),
            pool_wait: totals(0.010, 2.0),
            handler: totals(4.0, 2.0),
            total: totals(4.2, 2.0),
        };
        let after = Snapshot {
            throttle_wait: totals(0.001 + 0.01, 102.0),
            pool_wait: totals(0.010 + 0.3, 102.0),
            handler: totals(4.0 + 200.0, 102.0),
            total: totals(4.2 + 200.36, 102.0),
        };
        let p = Phases::between(&before, &after, Duration::from_millis(2004)).unwrap();
        assert_eq!(p.calls, 100);
        assert_eq!(p.throttle_wait_ms, 0.1);
        assert_eq!(p.pool_wait_ms, 3.0);
        assert_eq!(p.handler_ms, 2000.0);
        assert_eq!(p.server_ms, 2003.6);
        assert_eq!(p.server_other_ms, 0.5);
        assert_eq!(p.client_ms, 2004.0);
        assert_eq!(p.client_network_ms, 0.4);
        // The segments add up to the client's time.
        let sum: f64 = p.values().iter().sum();
        assert!((sum - p.client_ms).abs() < 0.005, "{sum}");
    }

    #[test]
    fn no_calls_no_split() {
        let s = Snapshot {
            total: totals(1.0, 5.0),
            ..Snapshot::default()
        };
        assert_eq!(Phases::between(&s, &s, Duration::from_millis(1)), None);
        assert_eq!(
            Phases::between(&Snapshot::default(), &Snapshot::default(), Duration::ZERO),
            None
        );
    }

    #[test]
    fn reads_a_scrape() {
        let text = "\
keel_server_handler_seconds_bucket{service=\"Service1\",operation=\"get_data\",le=\"+Inf\"} 3
keel_server_handler_seconds_sum{service=\"Service1\",operation=\"get_data\"} 6.0
keel_server_handler_seconds_count{service=\"Service1\",operation=\"get_data\"} 3
keel_server_call_duration_seconds_sum{service=\"Service1\",operation=\"get_data\"} 6.3
keel_server_call_duration_seconds_count{service=\"Service1\",operation=\"get_data\"} 3
keel_server_call_duration_seconds_sum{service=\"Calculator\",operation=\"add\"} 9
keel_server_call_duration_seconds_count{service=\"Calculator\",operation=\"add\"} 9
keel_pool_threads{state=\"idle\"} 2
";
        let m = Metrics::parse_only(text, wanted).unwrap();
        // Buckets and other metrics are not kept.
        assert_eq!(m.samples.len(), 6);
        let s = Snapshot::read(&m, &[("service", "Service1")]);
        assert_eq!(s.handler, totals(6.0, 3.0));
        assert_eq!(s.total, totals(6.3, 3.0));
        assert_eq!(s.pool_wait, Totals::default());
        assert_eq!(s.calls(), 3);
        assert_eq!(Snapshot::read(&m, &[]).calls(), 12);
    }

    #[test]
    fn names_and_means() {
        assert!(wanted("keel_server_pool_wait_seconds_sum"));
        assert!(wanted("keel_server_call_duration_seconds_count"));
        assert!(!wanted("keel_server_pool_wait_seconds_bucket"));
        assert!(!wanted("keel_pool_queue_wait_seconds_sum"));
        assert_eq!(
            mean(&[Duration::from_millis(1), Duration::from_millis(3)]),
            Duration::from_millis(2)
        );
        assert_eq!(mean(&[]), Duration::ZERO);
        let keys: Vec<&str> = SEGMENTS.iter().map(|s| s.key).collect();
        let p = Phases {
            calls: 1,
            client_ms: 5.0,
            throttle_wait_ms: 1.0,
            pool_wait_ms: 1.0,
            handler_ms: 1.0,
            server_other_ms: 1.0,
            server_ms: 4.0,
            client_network_ms: 1.0,
        };
        // Every segment names a key of the JSON.
        let v = serde_json::to_value(p).unwrap();
        for k in keys {
            assert_eq!(v[k], 1.0, "{k}");
        }
    }
}
