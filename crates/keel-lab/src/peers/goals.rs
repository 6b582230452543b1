//! The targets keel-tcp, keel-h2 and keel-grpc are held to against their peers, each a ratio (or, for the
//! server's CPU, an amount) computed from one round's rows, so that both sides of a ratio were
//! measured minutes apart at most; over several rounds, the median of the rounds' values.
//! They are the goals of the "widen the lead" work (docs/history/performance-rounds.md; the
//! model it left is docs/performance.md) and issue 31's for streams of messages, kept here so
//! that every `keel-lab peers` run says whether it still meets them. keel-grpc's two are issue
//! 32's: keel's host over gRPC against tonic's server, both called by tonic's client on the
//! same `.proto`, one connection, 64 in flight.

use serde::Serialize;

use super::median::median;
use super::ratios::Row;
use super::system::System;

/// One target and where a set of rows puts it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Goal {
    /// What is measured, e.g. `keel-tcp-async calls/s ÷ tonic`.
    pub(crate) name: &'static str,
    /// The bar: at least this when `at_least`, at most this otherwise.
    pub(crate) bar: f64,
    /// Whether the value must reach the bar from below (throughput) or stay under it.
    pub(crate) at_least: bool,
    /// The value (to 0.01); `None` when a system it needs did not run.
    pub(crate) value: Option<f64>,
    /// Whether the value meets the bar; `None` when there is no value.
    pub(crate) met: Option<bool>,
}

fn find(rows: &[Row], system: System) -> Option<&Row> {
    rows.iter().find(|r| r.system == system)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 && a.is_finite() && b.is_finite() => Some(a / b),
        _ => None,
    }
}

/// Every goal over `rounds`: each goal's value the median of its value in each round (none if a
/// round has none).
pub(crate) fn over_rounds(rounds: &[Vec<Row>]) -> Vec<Goal> {
    let by_round: Vec<Vec<Goal>> = rounds.iter().map(|rows| goals(rows)).collect();
    let mut out = goals(&[]);
    for (i, goal) in out.iter_mut().enumerate() {
        let values: Option<Vec<f64>> = by_round.iter().map(|r| r[i].value).collect();
        goal.value = values
            .filter(|v| !v.is_empty())
            .map(|v| (median(v) * 100.0).round() / 100.0);
        goal.met = goal.value.map(|v| goal.meets(v));
    }
    out
}

impl Goal {
    /// Whether `value` is on the right side of the bar.
    fn meets(&self, value: f64) -> bool {
        if self.at_least {
            value >= self.bar
        } else {
            value <= self.bar
        }
    }
}

/// The most a stalled stream may grow either side's RSS, KiB. The stream's flow-control window
/// bounds what it holds: at most 1 MiB when the stream starts
/// ([`keel_wire::MAX_LEARNED_INITIAL_WINDOW`]; 256 KiB on a fresh connection) unconsumed at the
/// client, which the server holds in its send queue and the client in its stream's buffer,
/// plus the server encoder's 32 KiB batch; socket buffers are the kernel's, outside VmRSS.
/// Four windows leave room for the allocator's slack while an unbounded queue (megabytes a
/// second at this rate) is far beyond it.
pub(crate) const STALL_RSS_BAR_KIB: f64 =
    4.0 * keel_wire::MAX_LEARNED_INITIAL_WINDOW as f64 / 1024.0;

/// Every goal, evaluated on one round's `rows`.
pub(crate) fn goals(rows: &[Row]) -> Vec<Goal> {
    let calls = |s| find(rows, s).map(|r| r.throughput_1.calls_per_sec);
    let p50_pinned = |s| find(rows, s).and_then(|r| r.latency_pinned.map(|l| l.p50_us));
    let growth = |s| find(rows, s).map(|r| r.memory.growth_per_1000_mib);
    let messages = |s| find(rows, s).and_then(|r| r.streaming.map(|m| m.messages_per_sec));
    let stall = |s| find(rows, s).and_then(|r| r.stall);
    use System::*;
    let server_cpu_of = |s| {
        find(rows, s)
            .map(|r| r.throughput_1.server_cpu_us)
            .filter(|v| v.is_finite())
    };
    let server_cpu = server_cpu_of(KeelTcpAsync);
    [
        (
            "keel-tcp-async calls/s ÷ tonic",
            4.0,
            true,
            ratio(calls(KeelTcpAsync), calls(Tonic)),
        ),
        (
            "keel-tcp-async calls/s ÷ raw",
            0.3,
            true,
            ratio(calls(KeelTcpAsync), calls(Raw)),
        ),
        ("keel-tcp-async server CPU µs/call", 3.5, false, server_cpu),
        (
            "keel-tcp-async pinned p50 ÷ raw",
            1.1,
            false,
            ratio(p50_pinned(KeelTcpAsync), p50_pinned(Raw)),
        ),
        (
            "keel-tcp-sync calls/s ÷ keel-tcp-async",
            0.8,
            true,
            ratio(calls(KeelTcpSync), calls(KeelTcpAsync)),
        ),
        (
            "keel-h2 calls/s ÷ tonic",
            1.3,
            true,
            ratio(calls(KeelH2), calls(Tonic)),
        ),
        (
            "keel-tcp-async RSS per idle conn ÷ tonic",
            0.6,
            false,
            ratio(growth(KeelTcpAsync), growth(Tonic)),
        ),
        (
            "keel-tcp-async messages/s ÷ tonic",
            3.0,
            true,
            ratio(messages(KeelTcpAsync), messages(Tonic)),
        ),
        (
            "keel-tcp-async messages/s ÷ raw",
            0.5,
            true,
            ratio(messages(KeelTcpAsync), messages(Raw)),
        ),
        (
            "keel-tcp-async stalled stream server RSS growth KiB",
            STALL_RSS_BAR_KIB,
            false,
            stall(KeelTcpAsync).map(|s| s.server.growth_kib),
        ),
        (
            "keel-tcp-async stalled stream client RSS growth KiB",
            STALL_RSS_BAR_KIB,
            false,
            stall(KeelTcpAsync).map(|s| s.client.growth_kib),
        ),
        (
            "keel-grpc calls/s ÷ tonic",
            2.0,
            true,
            ratio(calls(KeelGrpc), calls(Tonic)),
        ),
        (
            "keel-grpc server CPU per call ÷ tonic",
            0.5,
            false,
            ratio(server_cpu_of(KeelGrpc), server_cpu_of(Tonic)),
        ),
    ]
    .into_iter()
    .map(|(name, bar, at_least, value)| {
        let mut goal = Goal {
            name,
            bar,
            at_least,
            value: value.map(|v| (v * 100.0).round() / 100.0),
            met: None,
        };
        goal.met = goal.value.map(|v| goal.meets(v));
        goal
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::super::measure::Rss;
    use super::super::ratios::tests::row;
    use super::*;

    fn by_name<'a>(g: &'a [Goal], name: &str) -> &'a Goal {
        g.iter().find(|g| g.name == name).unwrap()
    }

    #[test]
    fn ratios_against_their_bars() {
        // Rows whose every number is x: raw 1, tonic 4, keel async 2, sync 1.5, h2 6.
        let rows = [
            row(System::Raw, 1.0),
            row(System::Tonic, 4.0),
            row(System::KeelTcpAsync, 2.0),
            row(System::KeelTcpSync, 1.5),
            row(System::KeelH2, 6.0),
            row(System::KeelGrpc, 10.0),
        ];
        let g = goals(&rows);
        assert_eq!(g.len(), 13);
        let t = by_name(&g, "keel-tcp-async calls/s ÷ tonic");
        assert_eq!((t.value, t.met), (Some(0.5), Some(false)));
        let r = by_name(&g, "keel-tcp-async calls/s ÷ raw");
        assert_eq!((r.value, r.met), (Some(2.0), Some(true)));
        let cpu = by_name(&g, "keel-tcp-async server CPU µs/call");
        assert_eq!((cpu.value, cpu.met), (Some(2.0), Some(true)));
        // Lower is better: 2 ÷ 1 is over the 1.1 bar.
        let p50 = by_name(&g, "keel-tcp-async pinned p50 ÷ raw");
        assert_eq!((p50.value, p50.met), (Some(2.0), Some(false)));
        let sync = by_name(&g, "keel-tcp-sync calls/s ÷ keel-tcp-async");
        assert_eq!((sync.value, sync.met), (Some(0.75), Some(false)));
        let h2 = by_name(&g, "keel-h2 calls/s ÷ tonic");
        assert_eq!((h2.value, h2.met), (Some(1.5), Some(true)));
        let rss = by_name(&g, "keel-tcp-async RSS per idle conn ÷ tonic");
        assert_eq!((rss.value, rss.met), (Some(0.5), Some(true)));
        let m = by_name(&g, "keel-tcp-async messages/s ÷ tonic");
        assert_eq!((m.value, m.met), (Some(0.5), Some(false)));
        let m = by_name(&g, "keel-tcp-async messages/s ÷ raw");
        assert_eq!((m.value, m.met), (Some(2.0), Some(true)));
        // 200 KiB each side (the sample rows grow by 100 × x).
        let srv = by_name(&g, "keel-tcp-async stalled stream server RSS growth KiB");
        assert_eq!((srv.bar, srv.at_least), (4096.0, false));
        assert_eq!((srv.value, srv.met), (Some(200.0), Some(true)));
        let cli = by_name(&g, "keel-tcp-async stalled stream client RSS growth KiB");
        assert_eq!((cli.value, cli.met), (Some(200.0), Some(true)));
        // keel-grpc 10 against tonic 4: 2.5 × the calls (met), 2.5 × the CPU (not met).
        let grpc = by_name(&g, "keel-grpc calls/s ÷ tonic");
        assert_eq!((grpc.value, grpc.met), (Some(2.5), Some(true)));
        let cpu = by_name(&g, "keel-grpc server CPU per call ÷ tonic");
        assert_eq!((cpu.bar, cpu.at_least), (0.5, false));
        assert_eq!((cpu.value, cpu.met), (Some(2.5), Some(false)));
    }

    #[test]
    fn a_stall_over_the_bar_misses_and_a_missing_stream_leaves_it_open() {
        let mut keel = row(System::KeelTcpAsync, 1.0);
        keel.stall.as_mut().unwrap().client = Rss::new(2000, 2100, 7000);
        let mut tonic = row(System::Tonic, 1.0);
        tonic.streaming = None;
        let g = goals(&[row(System::Raw, 1.0), tonic, keel]);
        let cli = by_name(&g, "keel-tcp-async stalled stream client RSS growth KiB");
        assert_eq!((cli.value, cli.met), (Some(5000.0), Some(false)));
        let srv = by_name(&g, "keel-tcp-async stalled stream server RSS growth KiB");
        assert_eq!(srv.met, Some(true));
        let t = by_name(&g, "keel-tcp-async messages/s ÷ tonic");
        assert_eq!((t.value, t.met), (None, None));
        assert_eq!(
            by_name(&g, "keel-tcp-async messages/s ÷ raw").met,
            Some(true)
        );
    }

    #[test]
    fn over_rounds_each_goal_is_the_median_of_the_rounds_ratios() {
        // The h2 ratio of each round: 1.5, 1.2, 1.25. The median rows (h2 6, tonic 4) would
        // say 1.5, met; the median of the rounds' own ratios says 1.25, not met.
        let round = |h2: f64, tonic: f64| {
            vec![
                row(System::Tonic, tonic),
                row(System::KeelH2, h2),
                row(System::KeelTcpAsync, 2.0),
            ]
        };
        let g = over_rounds(&[round(6.0, 4.0), round(6.0, 5.0), round(5.0, 4.0)]);
        let h2 = by_name(&g, "keel-h2 calls/s ÷ tonic");
        assert_eq!((h2.value, h2.met), (Some(1.25), Some(false)));
        // Needs raw, absent from every round.
        assert_eq!(by_name(&g, "keel-tcp-async calls/s ÷ raw").value, None);
        assert_eq!(
            over_rounds(&[])
                .iter()
                .filter(|g| g.value.is_some())
                .count(),
            0
        );
    }

    #[test]
    fn a_missing_system_leaves_its_goals_open() {
        let mut raw = row(System::Raw, 1.0);
        raw.latency_pinned = None;
        let g = goals(&[raw, row(System::KeelTcpAsync, 1.0)]);
        let p50 = by_name(&g, "keel-tcp-async pinned p50 ÷ raw");
        assert_eq!((p50.value, p50.met), (None, None));
        let h2 = by_name(&g, "keel-h2 calls/s ÷ tonic");
        assert_eq!((h2.value, h2.met), (None, None));
        assert_eq!(by_name(&g, "keel-tcp-async calls/s ÷ raw").met, Some(true));
    }
}
