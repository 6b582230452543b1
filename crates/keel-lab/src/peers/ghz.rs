//! The optional cross-check of the gRPC rows with another client: ghz (a gRPC load generator
//! written in Go, grpc-go's client), when `ghz` is on `PATH`, against tonic's server and keel's
//! host on the same `.proto` ([`super::keel_peer::protos`]), with the throughput workload's
//! shape: one connection, 64 calls in flight (`--connections 1 --concurrency 64`), a warm-up
//! run, then one measured run of the window's length. Printed beside the table; nothing is
//! judged on it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use super::serve::PeerServer;
use super::system::System;
use super::Params;
use crate::child::cpu_time;

/// One server's numbers under ghz.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct GhzRow {
    /// The server: `tonic` or `keel-grpc` (keel's host).
    pub(crate) system: System,
    /// Calls ghz counted in the measured run.
    pub(crate) calls: u64,
    /// Calls that did not end `OK`.
    pub(crate) errors: u64,
    /// ghz's requests per second.
    pub(crate) calls_per_sec: f64,
    /// ghz's median latency, µs.
    pub(crate) p50_us: f64,
    /// ghz's 99th percentile, µs.
    pub(crate) p99_us: f64,
    /// The server's CPU time (user + system) per call over the measured run, µs.
    pub(crate) server_cpu_us: f64,
}

/// ghz's version when it is on `PATH` and runs (what `ghz --version` prints, on either
/// stream: `dev` for a `go install` build, which does not stamp it).
pub(crate) fn version() -> Option<String> {
    let out = Command::new("ghz").arg("--version").output().ok()?;
    let printed = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    let v = printed(&out.stdout);
    out.status.success().then(|| {
        if v.is_empty() {
            printed(&out.stderr)
        } else {
            v
        }
    })
}

/// ghz against every gRPC server among `p.systems` (tonic, keel-grpc), one after the other.
pub(crate) fn run(p: &Params) -> anyhow::Result<Vec<GhzRow>> {
    let dir = std::env::temp_dir().join(format!("keel-lab-ghz-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for (file, text) in super::keel_peer::protos()? {
        std::fs::write(dir.join(file), text)?;
    }
    let window = Duration::from_secs_f64(p.seconds);
    let mut rows = Vec::new();
    for &system in p.systems.iter().filter(|s| s.tonic_client()) {
        eprintln!("[peers ghz] {}", system.name());
        let server = PeerServer::start(system, None)?;
        let target = server
            .addr()
            .strip_prefix("http://")
            .unwrap_or(server.addr());
        ghz(&dir, target, p.inflight, window / 5)?;
        let before = cpu_time(server.pid());
        let report = ghz(&dir, target, p.inflight, window)?;
        let after = cpu_time(server.pid());
        rows.push(row(system, &report, before, after)?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

/// One ghz run of `keel_lab.Adder.Add` against `target` (`host:port`): its JSON report.
fn ghz(
    dir: &Path,
    target: &str,
    inflight: usize,
    duration: Duration,
) -> anyhow::Result<serde_json::Value> {
    let proto: PathBuf = dir.join("adder.proto");
    let out = Command::new("ghz")
        .args(["--insecure", "--format", "json", "--connections", "1"])
        .arg("--proto")
        .arg(&proto)
        .arg("--import-paths")
        .arg(dir)
        .args(["--call", "keel_lab.Adder.Add", "-d", r#"{"a":1,"b":2}"#])
        .args(["--concurrency", &inflight.to_string()])
        .args(["--duration", &format!("{}ms", duration.as_millis().max(1))])
        .arg(target)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "ghz failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A row from ghz's JSON report and the server's CPU time around the run.
fn row(
    system: System,
    report: &serde_json::Value,
    before: Option<Duration>,
    after: Option<Duration>,
) -> anyhow::Result<GhzRow> {
    let calls = report["count"].as_u64().unwrap_or(0);
    anyhow::ensure!(calls > 0, "{}: ghz made no call", system.name());
    let ok = report["statusCodeDistribution"]["OK"].as_u64().unwrap_or(0);
    let percentile = |p: u64| {
        report["latencyDistribution"]
            .as_array()
            .and_then(|d| d.iter().find(|e| e["percentage"].as_u64() == Some(p)))
            .and_then(|e| e["latency"].as_f64())
            .map_or(f64::NAN, |ns| (ns / 10.0).round() / 100.0)
    };
    let server_cpu_us = match (before, after) {
        (Some(a), Some(b)) => {
            let us = b.saturating_sub(a).as_secs_f64() * 1e6 / calls as f64;
            (us * 100.0).round() / 100.0
        }
        _ => f64::NAN,
    };
    Ok(GhzRow {
        system,
        calls,
        errors: calls.saturating_sub(ok),
        calls_per_sec: report["rps"].as_f64().unwrap_or(f64::NAN).round(),
        p50_us: percentile(50),
        p99_us: percentile(99),
        server_cpu_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_from_ghz_json() {
        let report = serde_json::json!({
            "count": 200000,
            "rps": 66666.7,
            "statusCodeDistribution": {"OK": 199990, "Unavailable": 10},
            "latencyDistribution": [
                {"percentage": 50, "latency": 812345},
                {"percentage": 99, "latency": 2500000}
            ]
        });
        let ms = |n| Some(Duration::from_millis(n));
        let r = row(System::KeelGrpc, &report, ms(1000), ms(2000)).unwrap();
        assert_eq!((r.calls, r.errors, r.calls_per_sec), (200000, 10, 66667.0));
        assert_eq!((r.p50_us, r.p99_us), (812.35, 2500.0));
        // 1 s of CPU over 200,000 calls.
        assert_eq!(r.server_cpu_us, 5.0);
        let none = serde_json::json!({"count": 0});
        assert!(row(System::Tonic, &none, None, None).is_err());
    }
}
