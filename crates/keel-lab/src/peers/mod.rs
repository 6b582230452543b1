//! `keel-lab peers`: keel beside the systems people would use instead, on one operation ("add
//! two f64": a request of two doubles, a reply of one) and one server stream (small quotes, as
//! fast as the client takes them), each system with its own server (in a child process,
//! `keel-lab peers-serve`) and its own client (in this process).
//!
//! - [`system`]: the systems; [`raw`], [`tonic_peer`], [`tarpc_peer`], [`keel_peer`]: each
//!   one's server and client (`keel-grpc` is keel's host called by tonic's client, on the
//!   `.proto` keel exports); [`client`]: any of those clients behind one type; [`quote`]: the
//!   streamed message; [`ghz`]: the optional cross-check of the gRPC servers with ghz.
//! - [`serve`]: the child process; [`measure`]: the workloads (latency, throughput, memory,
//!   streaming, a stalled stream);
//!   [`ratios`]: the rows and keel ÷ each peer; [`median`]: one row per system from several
//!   rounds; [`goals`]: the targets keel is held to; [`html`]: the report section.

pub(crate) mod client;
pub(crate) mod ghz;
pub(crate) mod goals;
pub(crate) mod html;
pub(crate) mod keel_peer;
pub(crate) mod load;
pub(crate) mod measure;
pub(crate) mod median;
pub(crate) mod quote;
pub(crate) mod ratios;
pub(crate) mod raw;
pub(crate) mod serve;
pub(crate) mod system;
pub(crate) mod tarpc_peer;
pub(crate) mod tonic_peer;

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

pub(crate) use ratios::{Ratios, Row};
pub(crate) use system::System;

use crate::child::{allowed_cpus, loadavg, parse_cpu_list, status_kib, PinnedSelf};
use serve::PeerServer;

/// Flags of `keel-lab peers`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PeersArgs {
    /// Seconds of each throughput window (after a warm-up of a fifth of it).
    #[arg(long, default_value_t = 3.0)]
    pub(crate) seconds: f64,
    /// Rounds: every system runs once per round, the systems interleaved, and each number is
    /// the median over the rounds.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) rounds: u32,
    /// Seconds the stalled-stream check reads nothing (issue 31 says 10).
    #[arg(long, default_value_t = 10.0)]
    pub(crate) stall_seconds: f64,
    /// Only these systems (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) systems: Vec<System>,
    /// The quick version `keel-lab all` runs (2,000 timed calls, 1 s windows, 200 idle
    /// connections, a 2 s stall, one round); ignores --seconds, --stall-seconds and --rounds.
    #[arg(long)]
    pub(crate) quick: bool,
}

impl PeersArgs {
    /// What these flags ask for.
    pub(crate) fn params(&self) -> Params {
        let mut p = if self.quick {
            Params::quick()
        } else {
            Params {
                rounds: self.rounds as usize,
                stall_seconds: self.stall_seconds,
                ..Params::full(self.seconds)
            }
        };
        if !self.systems.is_empty() {
            p.systems = self.systems.clone();
        }
        p
    }
}

/// What a run does.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Params {
    /// The systems, in table order.
    pub(crate) systems: Vec<System>,
    /// Timed calls per latency run (one in flight).
    pub(crate) latency_calls: usize,
    /// Untimed calls before them.
    pub(crate) latency_warmup: usize,
    /// Calls in flight in the throughput runs (all connections together).
    pub(crate) inflight: usize,
    /// Connections of the second throughput run (the first has one).
    pub(crate) connections: usize,
    /// Each throughput window, s (after a warm-up of a fifth of it).
    pub(crate) seconds: f64,
    /// Idle connections opened for the memory workload (growth scaled to 1,000).
    pub(crate) idle_connections: usize,
    /// How long the stalled stream's client reads nothing, s.
    pub(crate) stall_seconds: f64,
    /// Rounds of every system; each number reported is the median over them.
    pub(crate) rounds: usize,
}

impl Params {
    /// `keel-lab peers`: 20,000 timed calls, 1,000 idle connections, `seconds` windows, a 10 s
    /// stall (issue 31's), three rounds.
    pub(crate) fn full(seconds: f64) -> Params {
        Params {
            systems: System::ALL.to_vec(),
            latency_calls: 20_000,
            latency_warmup: 2_000,
            inflight: 64,
            connections: 8,
            seconds,
            idle_connections: 1000,
            stall_seconds: 10.0,
            rounds: 3,
        }
    }

    /// The quick version `keel-lab all` runs: 2,000 timed calls, 1 s windows, 200 idle
    /// connections, a 2 s stall, one round.
    pub(crate) fn quick() -> Params {
        Params {
            latency_calls: 2_000,
            latency_warmup: 500,
            idle_connections: 200,
            stall_seconds: 2.0,
            rounds: 1,
            ..Params::full(1.0)
        }
    }
}

/// The result of `keel-lab peers`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Peers {
    /// Always `peers`.
    pub(crate) scenario: &'static str,
    /// What ran.
    pub(crate) params: Params,
    /// One per system: each number the median over the rounds.
    pub(crate) rows: Vec<Row>,
    /// Each round's rows, in the order they ran.
    pub(crate) rounds: Vec<Vec<Row>>,
    /// The targets: each the median of its value in each round ([`goals::over_rounds`]).
    pub(crate) goals: Vec<goals::Goal>,
    /// keel ÷ each peer, every metric (calls/s: higher is better; the rest: lower is better).
    pub(crate) ratios: Ratios,
    /// Where the pinned latency ran (`server CPU 0, client CPU 0`), or why it did not.
    pub(crate) placement: String,
    /// The machine's 1-minute load average when the run started and ended.
    pub(crate) loadavg: (f64, f64),
    /// ghz against the gRPC servers (tonic, keel-grpc), when ghz is on `PATH`; `None` when it
    /// is not (or no gRPC server ran).
    pub(crate) ghz: Option<Ghz>,
}

/// The ghz cross-check ([`ghz`]).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Ghz {
    /// `ghz --version`.
    pub(crate) version: String,
    /// One per gRPC server.
    pub(crate) rows: Vec<ghz::GhzRow>,
}

/// Runs every workload on every system of `p`, one system after the other, `p.rounds` times.
pub(crate) fn run(p: &Params) -> anyhow::Result<Peers> {
    let load0 = loadavg();
    // Pinned latency: the server under `taskset -c 0` and every thread of this process on CPU 0
    // too, so a call never crosses CPUs. Skipped where CPU 0 is not ours.
    let pin = allowed_cpus(None).is_some_and(|l| parse_cpu_list(&l).contains(&0));
    let placement = if pin {
        "pinned latency: server and client on CPU 0; everything else unpinned".to_string()
    } else {
        "CPU 0 not available: no pinned latency".to_string()
    };
    let mut rounds = Vec::new();
    for round in 1..=p.rounds {
        let mut rows = Vec::new();
        for (i, &system) in p.systems.iter().enumerate() {
            eprintln!(
                "[peers round {round}/{}, {}/{}] {}",
                p.rounds,
                i + 1,
                p.systems.len(),
                system.name()
            );
            rows.push(run_system(system, p, pin)?);
        }
        rounds.push(rows);
    }
    let ghz = match ghz::version() {
        Some(version) if p.systems.iter().any(|s| s.tonic_client()) => Some(Ghz {
            version,
            rows: ghz::run(p)?,
        }),
        _ => None,
    };
    let mut peers = Peers::new(p.clone(), rounds, placement, (load0, loadavg()));
    peers.ghz = ghz;
    Ok(peers)
}

impl Peers {
    /// The result of `rounds` (each one row per system, the systems in the same order in
    /// every round): the median rows and their ratios, and the goals over the rounds.
    pub(crate) fn new(
        params: Params,
        rounds: Vec<Vec<Row>>,
        placement: String,
        loadavg: (f64, f64),
    ) -> Peers {
        let systems = rounds.first().map_or(0, Vec::len);
        let rows: Vec<Row> = (0..systems)
            .map(|i| median::row(&rounds.iter().map(|r| r[i].clone()).collect::<Vec<_>>()))
            .collect();
        Peers {
            scenario: "peers",
            params,
            ratios: ratios::ratios(&rows),
            goals: goals::over_rounds(&rounds),
            rows,
            rounds,
            placement,
            loadavg,
            ghz: None,
        }
    }
}

fn run_system(system: System, p: &Params, pin: bool) -> anyhow::Result<Row> {
    let server = PeerServer::start(system, None)?;
    std::thread::sleep(Duration::from_millis(100));
    let idle_rss_kib = status_kib(server.pid(), "VmRSS")?;
    // Memory first, on a server nothing else has touched yet.
    let memory = measure::memory(
        system,
        server.addr(),
        server.pid(),
        idle_rss_kib,
        p.idle_connections,
    )?;
    let latency = measure::latency(system, server.addr(), p.latency_warmup, p.latency_calls)?;
    let window = Duration::from_secs_f64(p.seconds);
    let warmup = window / 5;
    let throughput_1 = measure::throughput(
        system,
        server.addr(),
        server.pid(),
        1,
        p.inflight,
        warmup,
        window,
    )?;
    let throughput_8 = measure::throughput(
        system,
        server.addr(),
        server.pid(),
        p.connections,
        p.inflight,
        warmup,
        window,
    )?;
    let streaming = if system.streams() {
        Some(measure::streaming(
            system,
            server.addr(),
            server.pid(),
            warmup,
            window,
        )?)
    } else {
        None
    };
    let stall = if system.stalls() {
        let stall = Duration::from_secs_f64(p.stall_seconds);
        Some(serve::stall_in_child(
            system,
            server.addr(),
            server.pid(),
            stall,
        )?)
    } else {
        None
    };
    drop(server);
    let latency_pinned = if pin {
        let _pinned = PinnedSelf::pin("0")?;
        let server = PeerServer::start(system, Some("0"))?;
        Some(measure::latency(
            system,
            server.addr(),
            p.latency_warmup,
            p.latency_calls,
        )?)
    } else {
        None
    };
    Ok(Row {
        system,
        latency_pinned,
        latency,
        throughput_1,
        throughput_8,
        memory,
        streaming,
        stall,
    })
}

/// The readable table.
pub(crate) fn summary(r: &Peers) -> String {
    let mut s = String::new();
    let t1 = r.params.inflight;
    let c = r.params.connections;
    let _ = writeln!(
        s,
        "peers: \"add two f64\", server in a child process; {}; load average {:.1} → {:.1}",
        r.placement, r.loadavg.0, r.loadavg.1
    );
    if r.rounds.len() > 1 {
        let _ = writeln!(
            s,
            "each number: the median of {} rounds (every system once per round, interleaved)",
            r.rounds.len()
        );
    }
    let _ = writeln!(
        s,
        "| system | p50 / p99 / p99.9 µs pinned | p50 / p99 / p99.9 µs unpinned | calls/s {t1} in flight, 1 conn | server / client CPU µs/call | calls/s {t1} in flight, {c} conns | server / client CPU µs/call | idle RSS MiB | RSS per 1,000 idle conns MiB |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    let lat =
        |l: &measure::Latency| format!("{:.1} / {:.1} / {:.1}", l.p50_us, l.p99_us, l.p999_us);
    for row in &r.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0}k | {:.2} / {:.2} | {:.0}k | {:.2} / {:.2} | {:.1} | {:.1} |",
            row.system.name(),
            row.latency_pinned.as_ref().map_or("-".to_string(), lat),
            lat(&row.latency),
            row.throughput_1.calls_per_sec / 1000.0,
            row.throughput_1.server_cpu_us,
            row.throughput_1.client_cpu_us,
            row.throughput_8.calls_per_sec / 1000.0,
            row.throughput_8.server_cpu_us,
            row.throughput_8.client_cpu_us,
            row.memory.idle_rss_kib as f64 / 1024.0,
            row.memory.growth_per_1000_mib,
        );
    }
    s.push_str(&streaming_table(r));
    s.push_str(&ghz_table(r));
    s.push_str(&goals_table(r));
    s
}

/// The ghz cross-check's table; nothing when ghz did not run.
fn ghz_table(r: &Peers) -> String {
    let mut s = String::new();
    let Some(g) = &r.ghz else {
        return s;
    };
    let _ = writeln!(
        s,
        "\nghz ({}) as the client: 1 connection, {} in flight, one {} s run after a warm-up",
        g.version, r.params.inflight, r.params.seconds
    );
    let _ = writeln!(
        s,
        "| server | calls/s | p50 / p99 µs | server CPU µs/call | calls (not OK) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for row in &g.rows {
        let _ = writeln!(
            s,
            "| {} | {:.0}k | {:.1} / {:.1} | {:.2} | {} ({}) |",
            row.system.name(),
            row.calls_per_sec / 1000.0,
            row.p50_us,
            row.p99_us,
            row.server_cpu_us,
            row.calls,
            row.errors
        );
    }
    s
}

/// The streaming workload's table: the systems it ran on, and tarpc's line saying why it did
/// not run there. Nothing when no system streamed.
fn streaming_table(r: &Peers) -> String {
    let mut s = String::new();
    let shown: Vec<&Row> = r
        .rows
        .iter()
        .filter(|row| row.streaming.is_some() || row.system == System::Tarpc)
        .collect();
    if !shown.iter().any(|row| row.streaming.is_some()) {
        return s;
    }
    let stall = r.params.stall_seconds;
    let _ = writeln!(
        s,
        "\nserver streaming: one call on one connection, quotes {{ symbol, seq, price }} as fast as the client takes them; stalled: the client reads one quote, then none for {stall} s"
    );
    let _ = writeln!(
        s,
        "| system | messages/s | server / client CPU µs/message | stalled {stall} s: server / client RSS growth KiB (during the stall) |"
    );
    let _ = writeln!(s, "|---|---|---|---|");
    for row in shown {
        let Some(st) = &row.streaming else {
            let _ = writeln!(
                s,
                "| {} | - ({} has no streaming) | - | - |",
                row.system.name(),
                row.system.name()
            );
            continue;
        };
        let stalled = row.stall.map_or("-".to_string(), |t| {
            format!(
                "{:.0} / {:.0} ({:.0} / {:.0})",
                t.server.growth_kib,
                t.client.growth_kib,
                t.server.stall_growth_kib,
                t.client.stall_growth_kib
            )
        });
        let _ = writeln!(
            s,
            "| {} | {:.0}k | {:.3} / {:.3} | {stalled} |",
            row.system.name(),
            st.messages_per_sec / 1000.0,
            st.server_cpu_us,
            st.client_cpu_us,
        );
    }
    s
}

/// The goals: the bar, the value (the median over the rounds), and each round's.
fn goals_table(r: &Peers) -> String {
    let mut s = String::new();
    let by_round: Vec<Vec<goals::Goal>> = r.rounds.iter().map(|rows| goals::goals(rows)).collect();
    let show = |g: &goals::Goal| match (g.value, g.met) {
        (Some(v), Some(met)) => format!("{v:.2}{}", if met { "" } else { " ✗" }),
        _ => "-".to_string(),
    };
    // Each round's own column only when there are several (one round's value is the value).
    let round_columns = if by_round.len() > 1 {
        by_round.len()
    } else {
        0
    };
    let _ = write!(s, "\n| goal | bar | value |");
    for i in 1..=round_columns {
        let _ = write!(s, " round {i} |");
    }
    let _ = writeln!(s, "\n|{}", "---|".repeat(3 + round_columns));
    for (i, g) in r.goals.iter().enumerate() {
        let bar = format!("{} {}", if g.at_least { "≥" } else { "≤" }, g.bar);
        let _ = write!(s, "| {} | {bar} | {} |", g.name, show(g));
        for round in by_round.iter().take(round_columns) {
            let _ = write!(s, " {} |", show(&round[i]));
        }
        let _ = writeln!(s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let rows = vec![
            ratios::tests::row(System::Raw, 1.0),
            ratios::tests::row(System::KeelTcpAsync, 2.0),
        ];
        let p = Peers::new(Params::quick(), vec![rows], String::new(), (0.0, 0.0));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["scenario"], "peers");
        assert_eq!(v["rows"][1]["system"], "keel-tcp-async");
        assert_eq!(v["rows"][0]["latency_pinned"]["p50_us"], 1.0);
        assert_eq!(v["ratios"]["keel-tcp-async"]["raw"]["p50_pinned_us"], 2.0);
        assert_eq!(v["rounds"].as_array().unwrap().len(), 1);
        assert_eq!(v["goals"][1]["name"], "keel-tcp-async calls/s ÷ raw");
        assert_eq!(v["goals"][1]["value"], 2.0);
        assert_eq!(v["rows"][1]["streaming"]["messages_per_sec"], 2e6);
        assert_eq!(v["rows"][1]["stall"]["client"]["after_kib"], 2200);
        assert_eq!(
            v["ratios"]["keel-tcp-async"]["raw"]["messages_per_sec"],
            2.0
        );
        assert_eq!(v["params"]["stall_seconds"], 2.0);
        let text = summary(&p);
        // The heading, the table (2 rows), the streaming table (a blank line, its heading and 2
        // rows), a blank line, the goals (13) and no round columns.
        assert_eq!(text.lines().count(), 3 + 2 + 4 + 2 + 1 + 2 + 13);
        assert!(text.contains("| keel-tcp-async | 2.0 / 4.0 / 6.0 |"));
        assert!(text.contains("then none for 2 s\n"));
        assert!(text.contains("| keel-tcp-async | 2000k | 2.000 / 2.000 | 200 / 200 (0 / 0) |\n"));
        assert!(text.contains("| keel-tcp-async messages/s ÷ raw | ≥ 0.5 | 2.00 |\n"));
        assert!(text.contains(
            "| keel-tcp-async stalled stream client RSS growth KiB | ≤ 4096 | 200.00 |\n"
        ));
        assert!(text.contains("| keel-tcp-async pinned p50 ÷ raw | ≤ 1.1 | 2.00 ✗ |\n"));
        assert!(text.contains("| keel-h2 calls/s ÷ tonic | ≥ 1.3 | - |\n"));
        assert!(text.contains("| keel-grpc calls/s ÷ tonic | ≥ 2 | - |\n"));
        assert!(!text.contains("round 1"));
        assert!(v["ghz"].is_null());
        assert!(!text.contains("ghz"));
    }

    #[test]
    fn the_ghz_table_follows_the_streaming_table_when_ghz_ran() {
        let rows = vec![
            ratios::tests::row(System::Tonic, 1.0),
            ratios::tests::row(System::KeelGrpc, 2.0),
        ];
        let mut p = Peers::new(Params::full(3.0), vec![rows], String::new(), (0.0, 0.0));
        p.ghz = Some(Ghz {
            version: "v0.120.0".to_string(),
            rows: vec![ghz::GhzRow {
                system: System::KeelGrpc,
                calls: 300_000,
                errors: 0,
                calls_per_sec: 100_000.0,
                p50_us: 600.0,
                p99_us: 1500.0,
                server_cpu_us: 4.25,
            }],
        });
        let text = summary(&p);
        assert!(text.contains("ghz (v0.120.0) as the client: 1 connection, 64 in flight"));
        assert!(text.contains("| keel-grpc | 100k | 600.0 / 1500.0 | 4.25 | 300000 (0) |\n"));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["ghz"]["rows"][0]["system"], "keel-grpc");
        assert_eq!(v["ghz"]["rows"][0]["calls_per_sec"], 100_000.0);
    }

    #[test]
    fn rounds_give_medians_and_a_column_each() {
        let round = |async_x: f64| {
            vec![
                ratios::tests::row(System::Raw, 1.0),
                ratios::tests::row(System::KeelTcpAsync, async_x),
            ]
        };
        let p = Peers::new(
            Params::full(1.0),
            vec![round(1.0), round(3.0), round(1.05)],
            String::new(),
            (0.0, 0.0),
        );
        assert_eq!(p.rows[1].latency_pinned.unwrap().p50_us, 1.05);
        assert_eq!(p.goals[3].value, Some(1.05));
        let text = summary(&p);
        assert!(text.contains("the median of 3 rounds"));
        assert!(text.contains(
            "| goal | bar | value | round 1 | round 2 | round 3 |\n|---|---|---|---|---|---|\n"
        ));
        assert!(text.contains(
            "| keel-tcp-async pinned p50 ÷ raw | ≤ 1.1 | 1.05 | 1.00 | 3.00 ✗ | 1.05 |\n"
        ));
    }

    #[test]
    fn the_streaming_table_says_tarpc_has_no_streaming_and_skips_the_rest() {
        let mut rows: Vec<Row> = System::ALL
            .iter()
            .map(|&s| ratios::tests::row(s, 1.0))
            .collect();
        for r in &mut rows {
            if !r.system.streams() {
                r.streaming = None;
            }
            if !r.system.stalls() {
                r.stall = None;
            }
        }
        let p = Peers::new(Params::full(3.0), vec![rows], String::new(), (0.0, 0.0));
        let text = summary(&p);
        assert!(text.contains("then none for 10 s\n"));
        assert!(text.contains("| raw | 1000k | 1.000 / 1.000 | - |\n"));
        assert!(text.contains("| tarpc | - (tarpc has no streaming) | - | - |\n"));
        assert!(text.contains("| keel-tcp-async | 1000k | 1.000 / 1.000 | 100 / 100 (0 / 0) |\n"));
        assert!(!text.contains("| keel-tcp-sync | 1000k"));
        // Without any system that streams, no streaming table.
        let mut rows = vec![ratios::tests::row(System::Tarpc, 1.0)];
        rows[0].streaming = None;
        let p = Peers::new(Params::full(3.0), vec![rows], String::new(), (0.0, 0.0));
        assert!(!summary(&p).contains("server streaming"));
    }

    #[test]
    fn quick_is_smaller_than_full() {
        let (q, f) = (Params::quick(), Params::full(3.0));
        assert!(q.latency_calls < f.latency_calls && q.idle_connections < f.idle_connections);
        assert_eq!(
            (f.latency_calls, f.idle_connections, f.inflight),
            (20_000, 1000, 64)
        );
        assert_eq!(q.systems, System::ALL);
        assert_eq!((q.rounds, f.rounds), (1, 3));
        // Issue 31's stall is 10 s; the quick one shorter.
        assert_eq!((q.stall_seconds, f.stall_seconds), (2.0, 10.0));
    }
}
