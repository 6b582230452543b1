//! keel ÷ each peer, for every number a row has: the ratios of `keel-lab peers --json`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::measure::{Latency, Memory, Stall, Streaming, Throughput};
use super::system::System;

/// One system's results.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// The system.
    pub(crate) system: System,
    /// One call in flight, server and client pinned to one CPU.
    pub(crate) latency_pinned: Option<Latency>,
    /// One call in flight, nothing pinned.
    pub(crate) latency: Latency,
    /// 64 in flight on one connection.
    pub(crate) throughput_1: Throughput,
    /// 64 in flight over 8 connections.
    pub(crate) throughput_8: Throughput,
    /// Idle RSS and growth per 1,000 idle connections.
    pub(crate) memory: Memory,
    /// One server stream read as fast as it comes; `None` for a system not in the streaming
    /// workload ([`System::streams`]).
    pub(crate) streaming: Option<Streaming>,
    /// A server stream whose consumer stopped reading; `None` for a system not in it
    /// ([`System::stalls`]).
    pub(crate) stall: Option<Stall>,
}

impl Row {
    /// Every number of the row, by the name the ratios use.
    pub(crate) fn metrics(&self) -> Vec<(&'static str, f64)> {
        let mut m = Vec::new();
        if let Some(l) = &self.latency_pinned {
            m.extend([
                ("p50_pinned_us", l.p50_us),
                ("p99_pinned_us", l.p99_us),
                ("p999_pinned_us", l.p999_us),
            ]);
        }
        let l = &self.latency;
        m.extend([
            ("p50_unpinned_us", l.p50_us),
            ("p99_unpinned_us", l.p99_us),
            ("p999_unpinned_us", l.p999_us),
        ]);
        for (t, [cps, srv, cli]) in [
            (
                &self.throughput_1,
                [
                    "calls_per_sec_1conn",
                    "server_cpu_us_per_call_1conn",
                    "client_cpu_us_per_call_1conn",
                ],
            ),
            (
                &self.throughput_8,
                [
                    "calls_per_sec_8conn",
                    "server_cpu_us_per_call_8conn",
                    "client_cpu_us_per_call_8conn",
                ],
            ),
        ] {
            m.extend([
                (cps, t.calls_per_sec),
                (srv, t.server_cpu_us),
                (cli, t.client_cpu_us),
            ]);
        }
        m.extend([
            ("idle_rss_mib", self.memory.idle_rss_kib as f64 / 1024.0),
            (
                "rss_growth_per_1000_conns_mib",
                self.memory.growth_per_1000_mib,
            ),
        ]);
        if let Some(st) = &self.streaming {
            m.extend([
                ("messages_per_sec", st.messages_per_sec),
                ("server_cpu_us_per_message", st.server_cpu_us),
                ("client_cpu_us_per_message", st.client_cpu_us),
            ]);
        }
        // The stall is keel's alone (no peer to divide by): its bar is absolute (goals.rs).
        m
    }
}

/// keel variant → peer → metric → keel's value ÷ the peer's (to 0.01; absent when the peer's
/// value is zero or not a number).
pub(crate) type Ratios = BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>;

/// The ratios of every keel row to every other (non-keel) row.
pub(crate) fn ratios(rows: &[Row]) -> Ratios {
    let mut out = Ratios::new();
    for k in rows.iter().filter(|r| r.system.is_keel()) {
        let km = k.metrics();
        let per_peer = out.entry(k.system.name().to_string()).or_default();
        for p in rows.iter().filter(|r| !r.system.is_keel()) {
            let pm = p.metrics();
            let m = per_peer.entry(p.system.name().to_string()).or_default();
            for (name, kv) in &km {
                let Some((_, pv)) = pm.iter().find(|(n, _)| n == name) else {
                    continue;
                };
                if *pv != 0.0 && pv.is_finite() && kv.is_finite() {
                    m.insert(name.to_string(), (kv / pv * 100.0).round() / 100.0);
                }
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::measure::Rss;
    use super::*;

    /// A row whose every number is `x` (calls/s: 1,000 × `x`).
    pub(crate) fn row(system: System, x: f64) -> Row {
        let l = Latency {
            calls: 100,
            p50_us: x,
            p99_us: 2.0 * x,
            p999_us: 3.0 * x,
        };
        let t = Throughput {
            connections: 1,
            inflight: 64,
            calls_per_sec: 1000.0 * x,
            p50_us: x,
            p99_us: x,
            server_cpu_us: x,
            client_cpu_us: x,
        };
        Row {
            system,
            latency_pinned: Some(l),
            latency: l,
            throughput_1: t,
            throughput_8: Throughput {
                connections: 8,
                ..t
            },
            memory: Memory {
                idle_rss_kib: (1024.0 * x) as u64,
                connections: 1000,
                before_kib: 0,
                after_kib: 0,
                growth_per_1000_mib: x,
            },
            // messages/s: 1,000,000 × `x`.
            streaming: Some(Streaming {
                messages: (1e6 * x) as u64,
                messages_per_sec: 1e6 * x,
                server_cpu_us: x,
                client_cpu_us: x,
            }),
            // Grew by 100 × `x` KiB each side, none of it during the stall.
            stall: Some(Stall {
                seconds: 10.0,
                server: Rss::new(1000, 1000 + (100.0 * x) as u64, 1000 + (100.0 * x) as u64),
                client: Rss::new(2000, 2000 + (100.0 * x) as u64, 2000 + (100.0 * x) as u64),
            }),
        }
    }

    #[test]
    fn keel_over_each_peer_for_every_metric() {
        let rows = [
            row(System::Raw, 1.0),
            row(System::Tonic, 4.0),
            row(System::KeelTcpAsync, 2.0),
            row(System::KeelH2, 3.0),
        ];
        let r = ratios(&rows);
        assert_eq!(r.keys().collect::<Vec<_>>(), ["keel-h2", "keel-tcp-async"]);
        let a = &r["keel-tcp-async"];
        assert_eq!(a.keys().collect::<Vec<_>>(), ["raw", "tonic"]);
        assert_eq!(a["raw"]["p50_pinned_us"], 2.0);
        assert_eq!(a["tonic"]["p50_pinned_us"], 0.5);
        assert_eq!(a["tonic"]["calls_per_sec_8conn"], 0.5);
        assert_eq!(r["keel-h2"]["tonic"]["rss_growth_per_1000_conns_mib"], 0.75);
        assert_eq!(a["tonic"]["messages_per_sec"], 0.5);
        assert_eq!(a["raw"].len(), rows[0].metrics().len());
        assert_eq!(a["raw"].len(), 17);
    }

    #[test]
    fn zero_or_missing_peer_values_give_no_ratio() {
        let mut raw = row(System::Raw, 1.0);
        raw.memory.growth_per_1000_mib = 0.0;
        raw.latency_pinned = None;
        let mut sync = row(System::KeelTcpSync, 2.0);
        sync.streaming = None;
        let r = ratios(&[raw, sync]);
        let m = &r["keel-tcp-sync"]["raw"];
        assert!(!m.contains_key("rss_growth_per_1000_conns_mib"));
        assert!(!m.contains_key("p50_pinned_us"));
        assert!(!m.contains_key("messages_per_sec"));
        assert_eq!(m["p50_unpinned_us"], 2.0);
    }
}
