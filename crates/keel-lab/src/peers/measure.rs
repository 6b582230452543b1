//! The three workloads, for one system against a server in a child process: latency (one call
//! in flight), throughput (a fixed number of calls in flight, closed loop) and memory (idle
//! connections held by the server).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::client::Conn;
use super::load::{new_histogram, percentiles_us, Window};
use super::system::System;
use crate::child::{cpu_time, status_kib};

/// Latencies of calls made one at a time, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Latency {
    /// Calls timed (after the warm-up).
    pub(crate) calls: usize,
    /// Median.
    pub(crate) p50_us: f64,
    /// 99th percentile.
    pub(crate) p99_us: f64,
    /// 99.9th percentile.
    pub(crate) p999_us: f64,
}

/// `calls` calls one after the other on one connection (after `warmup` untimed ones), on a
/// single-threaded runtime in this process (the thread that calls this).
pub(crate) fn latency(
    system: System,
    addr: &str,
    warmup: usize,
    calls: usize,
) -> anyhow::Result<Latency> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let conn = Conn::connect(system, addr).await?;
        for _ in 0..warmup {
            conn.add(1.0, 2.0).await?;
        }
        let mut h = new_histogram();
        for i in 0..calls {
            let a = i as f64;
            let t = Instant::now();
            let v = conn.add(a, 2.0).await?;
            h.saturating_record(t.elapsed().as_nanos() as u64);
            anyhow::ensure!(v == a + 2.0, "{}: {a} + 2 = {v}", system.name());
        }
        let [p50_us, p99_us, p999_us] = percentiles_us(&h);
        Ok(Latency {
            calls,
            p50_us,
            p99_us,
            p999_us,
        })
    })
}

/// Calls per second with calls kept in flight, and the CPU each side spent per call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Throughput {
    /// Connections.
    pub(crate) connections: usize,
    /// Calls in flight, all connections together.
    pub(crate) inflight: usize,
    /// Calls answered per second in the window.
    pub(crate) calls_per_sec: f64,
    /// Median latency in the window, µs.
    pub(crate) p50_us: f64,
    /// 99th percentile in the window, µs.
    pub(crate) p99_us: f64,
    /// The server process's CPU time (user + system) per call, µs.
    pub(crate) server_cpu_us: f64,
    /// This (client) process's CPU time per call, µs.
    pub(crate) client_cpu_us: f64,
}

/// `inflight` calls in flight spread over `connections` connections: `warmup`, then `window`
/// measured. The client runs on a tokio runtime with one worker per CPU.
pub(crate) fn throughput(
    system: System,
    addr: &str,
    server_pid: u32,
    connections: usize,
    inflight: usize,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Throughput> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut conns = Vec::with_capacity(connections);
        for _ in 0..connections {
            conns.push(Conn::connect(system, addr).await?);
        }
        let w = Arc::new(Window::default());
        let per_conn = inflight.div_ceil(connections.max(1));
        let drivers: Vec<_> = conns
            .iter()
            .map(|c| {
                let (c, w) = (c.clone(), w.clone());
                tokio::spawn(async move { c.drive(per_conn, w).await })
            })
            .collect();
        tokio::time::sleep(warmup).await;
        let cpu = || (cpu_time(server_pid), cpu_time(std::process::id()));
        let (server0, client0) = cpu();
        w.set_counting(true);
        let t0 = Instant::now();
        tokio::time::sleep(window).await;
        w.set_counting(false);
        let elapsed = t0.elapsed();
        let (server1, client1) = cpu();
        w.stop();
        let mut h = new_histogram();
        for d in drivers {
            h.add(d.await??)?;
        }
        let calls = w.calls();
        anyhow::ensure!(
            calls > 0,
            "{}: no call answered in the window",
            system.name()
        );
        let per_call = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => round2(b.saturating_sub(a).as_secs_f64() * 1e6 / calls as f64),
            _ => f64::NAN,
        };
        let [p50_us, p99_us, _] = percentiles_us(&h);
        Ok(Throughput {
            connections,
            inflight: per_conn * connections,
            calls_per_sec: (calls as f64 / elapsed.as_secs_f64()).round(),
            p50_us,
            p99_us,
            server_cpu_us: per_call(server0, server1),
            client_cpu_us: per_call(client0, client1),
        })
    })
}

/// The server's resident memory, idle and with idle connections open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Memory {
    /// The server's VmRSS just after it started, KiB.
    pub(crate) idle_rss_kib: u64,
    /// Idle connections opened (each made one call, so it is fully set up).
    pub(crate) connections: usize,
    /// VmRSS with one connection open and used, before the idle ones, KiB.
    pub(crate) before_kib: u64,
    /// VmRSS with every idle connection open, KiB.
    pub(crate) after_kib: u64,
    /// (after − before) scaled to 1,000 connections, MiB.
    pub(crate) growth_per_1000_mib: f64,
}

/// Opens `connections` connections with the system's own client, one call on each, and reads
/// the server's VmRSS before and after. `idle_rss_kib` is read by the caller at start.
pub(crate) fn memory(
    system: System,
    addr: &str,
    server_pid: u32,
    idle_rss_kib: u64,
    connections: usize,
) -> anyhow::Result<Memory> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let first = Conn::connect(system, addr).await?;
        first.add(1.0, 2.0).await?;
        settle().await;
        let before_kib = status_kib(server_pid, "VmRSS")?;
        let mut conns = Vec::with_capacity(connections);
        for _ in 0..connections {
            let c = Conn::connect(system, addr).await?;
            c.add(1.0, 2.0).await?;
            conns.push(c);
        }
        settle().await;
        let after_kib = status_kib(server_pid, "VmRSS")?;
        drop(conns);
        Ok(Memory {
            idle_rss_kib,
            connections,
            before_kib,
            after_kib,
            growth_per_1000_mib: growth_per_1000_mib(before_kib, after_kib, connections),
        })
    })
}

/// Lets the server finish what the last calls started before its memory is read.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// RSS growth from `before` to `after` (KiB) over `connections`, scaled to 1,000, MiB (0.1).
pub(crate) fn growth_per_1000_mib(before_kib: u64, after_kib: u64, connections: usize) -> f64 {
    if connections == 0 {
        return 0.0;
    }
    let kib = after_kib as f64 - before_kib as f64;
    (kib / 1024.0 * 1000.0 / connections as f64 * 10.0).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_scales_to_a_thousand() {
        // 200 connections, 2,560 KiB more: 12.5 MiB per 1,000.
        assert_eq!(growth_per_1000_mib(10_000, 12_560, 200), 12.5);
        assert_eq!(growth_per_1000_mib(10_000, 14_915, 1000), 4.8);
        // Memory returned to the OS shows as a negative growth, not a wrap.
        assert_eq!(growth_per_1000_mib(10_000, 9_488, 1000), -0.5);
        assert_eq!(growth_per_1000_mib(1, 2, 0), 0.0);
    }
}
