//! `keel-lab peers`: keel beside the systems people would use instead, on one operation ("add
//! two f64": a request of two doubles, a reply of one), each system with its own server (in a
//! child process, `keel-lab peers-serve`) and its own client (in this process).
//!
//! - [`system`]: the systems; [`raw`], [`tonic_peer`], [`tarpc_peer`], [`keel_peer`]: each
//!   one's server and client; [`client`]: any of those clients behind one type.
//! - [`serve`]: the child process; [`measure`]: the workloads (latency, throughput, memory);
//!   [`ratios`]: the rows and keel ÷ each peer; [`html`]: the report section.

pub(crate) mod client;
pub(crate) mod html;
pub(crate) mod keel_peer;
pub(crate) mod load;
pub(crate) mod measure;
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
    /// Only these systems (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) systems: Vec<System>,
    /// The quick version `keel-lab all` runs (2,000 timed calls, 1 s windows, 200 idle
    /// connections); ignores --seconds.
    #[arg(long)]
    pub(crate) quick: bool,
}

impl PeersArgs {
    /// What these flags ask for.
    pub(crate) fn params(&self) -> Params {
        let mut p = if self.quick {
            Params::quick()
        } else {
            Params::full(self.seconds)
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
}

impl Params {
    /// `keel-lab peers`: 20,000 timed calls, 1,000 idle connections, `seconds` windows.
    pub(crate) fn full(seconds: f64) -> Params {
        Params {
            systems: System::ALL.to_vec(),
            latency_calls: 20_000,
            latency_warmup: 2_000,
            inflight: 64,
            connections: 8,
            seconds,
            idle_connections: 1000,
        }
    }

    /// The quick version `keel-lab all` runs: 2,000 timed calls, 1 s windows, 200 idle
    /// connections.
    pub(crate) fn quick() -> Params {
        Params {
            latency_calls: 2_000,
            latency_warmup: 500,
            idle_connections: 200,
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
    /// One per system.
    pub(crate) rows: Vec<Row>,
    /// keel ÷ each peer, every metric (calls/s: higher is better; the rest: lower is better).
    pub(crate) ratios: Ratios,
    /// Where the pinned latency ran (`server CPU 0, client CPU 0`), or why it did not.
    pub(crate) placement: String,
    /// The machine's 1-minute load average when the run started and ended.
    pub(crate) loadavg: (f64, f64),
}

/// Runs every workload on every system of `p`, one system after the other.
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
    let mut rows = Vec::new();
    for (i, &system) in p.systems.iter().enumerate() {
        eprintln!("[peers {}/{}] {}", i + 1, p.systems.len(), system.name());
        rows.push(run_system(system, p, pin)?);
    }
    let ratios = ratios::ratios(&rows);
    Ok(Peers {
        scenario: "peers",
        params: p.clone(),
        rows,
        ratios,
        placement,
        loadavg: (load0, loadavg()),
    })
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
        let p = Peers {
            scenario: "peers",
            params: Params::quick(),
            ratios: ratios::ratios(&rows),
            rows,
            placement: String::new(),
            loadavg: (0.0, 0.0),
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["scenario"], "peers");
        assert_eq!(v["rows"][1]["system"], "keel-tcp-async");
        assert_eq!(v["rows"][0]["latency_pinned"]["p50_us"], 1.0);
        assert_eq!(v["ratios"]["keel-tcp-async"]["raw"]["p50_pinned_us"], 2.0);
        let text = summary(&p);
        assert_eq!(text.lines().count(), 3 + 2);
        assert!(text.contains("| keel-tcp-async | 2.0 / 4.0 / 6.0 |"));
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
    }
}
