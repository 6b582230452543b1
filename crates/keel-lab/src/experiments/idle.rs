//! Seed 003: steady calls, then idle gaps longer than the pool's keep-alive, each followed by
//! one call. Before each gap a small burst grows the pool above its floor, so that the gap
//! really retires threads (the seed's "idle I/O threads were retired").
//!
//! Raw TCP ping-pong (two plain threads, no keel) is interleaved in the same run: keel's gaps
//! and raw TCP's alternate, same length, so both meet the same machine. The bar compares
//! medians over the gaps: keel's after-idle ratio (the call after a gap / steady p50) may be at
//! most max(2, raw TCP's ratio), the call after idle under 1 ms, and no thread may be created
//! for it (keel-pool's count, and the process's threads in `/proc/self/task`).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use keel_examples::calculator::CalculatorBlockingClient;
use serde::Serialize;

use super::{start_host, us, Binding, HostSettings, Latencies};
use crate::verdict::{self, median, Verdict};

/// Clients of the burst that grows the pool above its floor before each gap.
const GROW_CLIENTS: usize = 8;
/// Work of each call of that burst, ms.
const GROW_WORK_MS: u64 = 50;
/// Calls (or raw round trips) just before each gap, so the gap follows steady traffic.
const WARM_CALLS: usize = 20;
/// Calls timed after the first one after a gap.
const NEXT_CALLS: usize = 5;

/// Settings of the idle experiment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// The transport.
    pub(crate) binding: Binding,
    /// Idle gap, ms.
    pub(crate) idle_ms: u64,
    /// The host pool's keep-alive, ms.
    pub(crate) keep_alive_ms: u64,
    /// Steady-state calls before the gaps.
    pub(crate) steady_calls: usize,
    /// Also measure raw TCP ping-pong around gaps of the same length, interleaved.
    pub(crate) raw_tcp: bool,
    /// Gaps measured (for keel, and as many for raw TCP).
    pub(crate) gaps: usize,
}

/// One of keel's gaps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Gap {
    /// The first call after the gap, µs.
    pub(crate) after_us: f64,
    /// The next calls, µs.
    pub(crate) next_us: Vec<f64>,
    /// Pool threads just before the gap.
    pub(crate) threads_before: usize,
    /// Pool threads just after the gap (before the call).
    pub(crate) threads_after: usize,
    /// Pool threads retired during the gap.
    pub(crate) retired: u64,
    /// Threads created for the call after the gap: keel-pool's, plus any new thread of the
    /// process (`/proc/self/task`, Linux).
    pub(crate) threads_created: u64,
}

/// What the idle experiment measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Idle {
    /// `idle`.
    pub(crate) experiment: &'static str,
    /// The transport.
    pub(crate) binding: Binding,
    /// Idle gap, ms.
    pub(crate) idle_ms: u64,
    /// The pool's keep-alive, ms.
    pub(crate) keep_alive_ms: u64,
    /// Gaps measured.
    pub(crate) gaps: usize,
    /// The last steady call before the first gap, µs.
    pub(crate) before_us: f64,
    /// The first call after a gap, median over the gaps, µs.
    pub(crate) after_us: f64,
    /// The first call after each gap, µs.
    pub(crate) after_each_us: Vec<f64>,
    /// The calls after that one, after the last gap, µs.
    pub(crate) after_next_us: Vec<f64>,
    /// p50 of the steady calls (same client, same kind), µs.
    pub(crate) steady_p50_us: f64,
    /// `after_us / steady_p50_us`.
    pub(crate) ratio: f64,
    /// The steady calls.
    pub(crate) steady: super::Dist,
    /// Pool threads just before the first gap.
    pub(crate) threads_before_idle: usize,
    /// Pool threads just after the first gap (before the call).
    pub(crate) threads_after_idle: usize,
    /// Pool threads retired during the gaps, in all.
    pub(crate) retired_during_idle: u64,
    /// Threads created for the calls after the gaps, in all.
    pub(crate) threads_created_after_gap: u64,
    /// Each gap.
    pub(crate) gap_results: Vec<Gap>,
    /// Raw TCP ping-pong around gaps of the same length, interleaved with keel's.
    pub(crate) raw_tcp: Option<RawTcp>,
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

/// Raw TCP ping-pong around the same gaps: what the machine alone costs after idle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RawTcp {
    /// p50 of the steady round trips, µs.
    pub(crate) steady_p50_us: f64,
    /// The first round trip after a gap, median over the gaps, µs.
    pub(crate) after_us: f64,
    /// The first round trip after each gap, µs.
    pub(crate) after_each_us: Vec<f64>,
    /// `after_us / steady_p50_us`.
    pub(crate) ratio: f64,
}

impl RawTcp {
    /// Summarises raw TCP's round trips.
    pub(crate) fn new(steady_p50_us: f64, after_each_us: Vec<f64>) -> RawTcp {
        let after_us = median(&after_each_us);
        RawTcp {
            steady_p50_us,
            after_us,
            ratio: round2(after_us / steady_p50_us),
            after_each_us,
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A raw TCP echo peer on loopback (64 bytes, two plain threads) and its client.
struct RawPeer {
    client: TcpStream,
    buf: [u8; 64],
    echo: std::thread::JoinHandle<()>,
}

impl RawPeer {
    fn start() -> anyhow::Result<RawPeer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let echo = std::thread::Builder::new()
            .name("raw-echo".into())
            .spawn(move || {
                let Ok((mut s, _)) = listener.accept() else {
                    return;
                };
                let _ = s.set_nodelay(true);
                let mut b = [0u8; 64];
                while s.read_exact(&mut b).is_ok() {
                    if s.write_all(&b).is_err() {
                        return;
                    }
                }
            })?;
        let client = TcpStream::connect(addr)?;
        client.set_nodelay(true)?;
        Ok(RawPeer {
            client,
            buf: [7u8; 64],
            echo,
        })
    }

    fn once(&mut self) -> std::io::Result<Duration> {
        let t = Instant::now();
        self.client.write_all(&self.buf)?;
        self.client.read_exact(&mut self.buf)?;
        Ok(t.elapsed())
    }

    fn stop(self) {
        drop(self.client);
        let _ = self.echo.join();
    }
}

/// The process's thread ids (empty where `/proc` is missing).
fn thread_ids() -> BTreeSet<u64> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs the experiment.
pub(crate) fn run(p: &Params) -> anyhow::Result<Idle> {
    anyhow::ensure!(
        p.gaps > 0 && p.steady_calls > 0,
        "need gaps and steady calls"
    );
    let host = start_host(
        p.binding,
        HostSettings {
            keep_alive: Some(Duration::from_millis(p.keep_alive_ms)),
            clients: GROW_CLIENTS,
        },
    )?;
    let url = host.url().to_string();
    let mut raw = if p.raw_tcp {
        Some(RawPeer::start()?)
    } else {
        None
    };
    super::fire::fire(&url, GROW_CLIENTS, GROW_WORK_MS)?;

    let client = CalculatorBlockingClient::connect(&url)?;
    let mut lat = Latencies::new();
    let mut before = Duration::ZERO;
    let pb = super::bar(p.steady_calls as u64, "idle: steady calls");
    for i in 0..p.steady_calls {
        let t = Instant::now();
        client.add(i as f64, 1.0)?;
        before = t.elapsed();
        lat.record(before);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let raw_steady = match raw.as_mut() {
        Some(r) => {
            let mut l = Latencies::new();
            for _ in 0..p.steady_calls {
                l.record(r.once()?);
            }
            Some(l.dist().p50_us)
        }
        None => None,
    };

    let idle = Duration::from_millis(p.idle_ms);
    let mut gaps = Vec::new();
    let mut raw_after = Vec::new();
    for g in 1..=p.gaps {
        super::fire::fire(&url, GROW_CLIENTS, GROW_WORK_MS)?;
        for _ in 0..WARM_CALLS {
            client.add(1.0, 2.0)?;
        }
        let m0 = host.pool_metrics();
        super::idle_with_progress(
            idle,
            &format!(
                "idle {g}/{}: keel, {} ms (keep-alive {} ms)",
                p.gaps, p.idle_ms, p.keep_alive_ms
            ),
        );
        let m1 = host.pool_metrics();
        let tids = thread_ids();
        let t = Instant::now();
        client.add(1.0, 2.0)?;
        let after = t.elapsed();
        let m2 = host.pool_metrics();
        let new_threads = thread_ids().difference(&tids).count() as u64;
        let mut next_us = Vec::new();
        for _ in 0..NEXT_CALLS {
            let t = Instant::now();
            client.add(1.0, 2.0)?;
            next_us.push(us(t.elapsed()));
        }
        gaps.push(Gap {
            after_us: us(after),
            next_us,
            threads_before: m0.threads,
            threads_after: m1.threads,
            retired: m1.retired_total - m0.retired_total,
            threads_created: (m2.created_total - m1.created_total) + new_threads,
        });
        if let Some(r) = raw.as_mut() {
            for _ in 0..WARM_CALLS {
                r.once()?;
            }
            super::idle_with_progress(idle, &format!("idle {g}/{}: raw TCP, same gap", p.gaps));
            raw_after.push(us(r.once()?));
        }
    }
    client.close();
    host.shutdown();
    if let Some(r) = raw {
        r.stop();
    }
    let raw = raw_steady.map(|p50| RawTcp::new(p50, raw_after));
    Ok(evaluate(p, us(before), gaps, lat.dist(), raw))
}

/// Builds the result and its verdict from the measurements.
pub(crate) fn evaluate(
    p: &Params,
    before_us: f64,
    gaps: Vec<Gap>,
    steady: super::Dist,
    raw_tcp: Option<RawTcp>,
) -> Idle {
    let after_each_us: Vec<f64> = gaps.iter().map(|g| g.after_us).collect();
    let after_us = median(&after_each_us);
    let threads_created_after_gap = gaps.iter().map(|g| g.threads_created).sum();
    let verdict = verdict::idle(
        after_us,
        steady.p50_us,
        raw_tcp.as_ref().map(|r| r.ratio),
        gaps.len(),
        threads_created_after_gap,
    );
    Idle {
        experiment: "idle",
        binding: p.binding,
        idle_ms: p.idle_ms,
        keep_alive_ms: p.keep_alive_ms,
        gaps: gaps.len(),
        before_us,
        after_us,
        after_each_us,
        after_next_us: gaps.last().map(|g| g.next_us.clone()).unwrap_or_default(),
        steady_p50_us: steady.p50_us,
        ratio: round2(after_us / steady.p50_us),
        steady,
        threads_before_idle: gaps.first().map_or(0, |g| g.threads_before),
        threads_after_idle: gaps.first().map_or(0, |g| g.threads_after),
        retired_during_idle: gaps.iter().map(|g| g.retired).sum(),
        threads_created_after_gap,
        gap_results: gaps,
        raw_tcp,
        pass: verdict.pass,
        verdict,
    }
}

fn list(values: &[f64]) -> String {
    values
        .iter()
        .map(|x| format!("{x:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The readable summary.
pub(crate) fn summary(r: &Idle) -> String {
    let mut s = format!(
        "idle (seed 003), binding {}: {} gaps of {} ms, pool keep-alive {} ms\n",
        r.binding.name(),
        r.gaps,
        r.idle_ms,
        r.keep_alive_ms
    );
    s.push_str(&format!(
        "  steady: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs ({} calls); last before idle {:.1} µs\n",
        r.steady.p50_us, r.steady.p99_us, r.steady.max_us, r.steady.count, r.before_us
    ));
    s.push_str(&format!(
        "  pool threads {} → {} during a gap ({} retired over all gaps); threads created for the calls after the gaps: {}\n",
        r.threads_before_idle, r.threads_after_idle, r.retired_during_idle, r.threads_created_after_gap
    ));
    s.push_str(&format!(
        "  keel: first call after idle {:.1} µs median = {:.2} × p50 (each gap: {} µs); next calls {} µs\n",
        r.after_us,
        r.ratio,
        list(&r.after_each_us),
        list(&r.after_next_us)
    ));
    if let Some(raw) = &r.raw_tcp {
        s.push_str(&format!(
            "  raw TCP ping-pong (no keel), same gaps interleaved: p50 {:.1} µs, after idle {:.1} µs median = {:.2} × p50 (each gap: {} µs)\n",
            raw.steady_p50_us,
            raw.after_us,
            raw.ratio,
            list(&raw.after_each_us)
        ));
    }
    if r.idle_ms <= r.keep_alive_ms {
        s.push_str("  note: the gap is not longer than the keep-alive: nothing retires\n");
    }
    s.push_str(&super::first_call::verdict_line(&r.verdict));
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::experiments::Dist;

    pub(crate) fn params() -> Params {
        Params {
            binding: Binding::Tcp,
            idle_ms: 2500,
            keep_alive_ms: 1000,
            steady_calls: 1000,
            raw_tcp: true,
            gaps: 5,
        }
    }

    pub(crate) fn steady(p50: f64) -> Dist {
        Dist {
            count: 1000,
            min_us: p50 / 2.0,
            p50_us: p50,
            p99_us: p50 * 2.0,
            max_us: p50 * 3.0,
        }
    }

    /// Five gaps with these first calls after idle, 6 threads retired each, none created.
    pub(crate) fn gaps(after: &[f64]) -> Vec<Gap> {
        after
            .iter()
            .map(|&a| Gap {
                after_us: a,
                next_us: vec![31.0, 30.0],
                threads_before: 8,
                threads_after: 2,
                retired: 6,
                threads_created: 0,
            })
            .collect()
    }

    #[test]
    fn verdict_uses_medians_and_raw_tcp() {
        let raw = |after: &[f64]| Some(RawTcp::new(15.0, after.to_vec()));
        // keel 2 × p50 (median; one slow gap does not count): within the floor of 2.
        let r = evaluate(
            &params(),
            30.0,
            gaps(&[60.0, 55.0, 900.0, 58.0, 61.0]),
            steady(30.0),
            raw(&[20.0; 5]),
        );
        assert_eq!(r.after_us, 60.0);
        assert_eq!(r.ratio, 2.0);
        assert!(r.pass, "{:?}", r.verdict);
        assert_eq!(r.retired_during_idle, 30);
        // 4 × p50: fails against a raw ratio of 1.33, passes against raw's 5 ×.
        let slow = gaps(&[120.0; 5]);
        assert!(!evaluate(&params(), 30.0, slow.clone(), steady(30.0), raw(&[20.0; 5])).pass);
        let r = evaluate(&params(), 30.0, slow.clone(), steady(30.0), raw(&[75.0; 5]));
        assert!(r.pass, "{:?}", r.verdict);
        assert_eq!(r.raw_tcp.as_ref().unwrap().ratio, 5.0);
        // Without raw TCP the floor of 2 is the bar.
        assert!(!evaluate(&params(), 30.0, slow, steady(30.0), None).pass);
        // A thread created after a gap fails.
        let mut g = gaps(&[40.0; 5]);
        g[3].threads_created = 1;
        let r = evaluate(&params(), 30.0, g, steady(30.0), raw(&[20.0; 5]));
        assert!(!r.pass);
        assert_eq!(r.threads_created_after_gap, 1);
        assert!(summary(&r).contains("FAIL"));
    }

    #[test]
    fn json_shape() {
        let r = evaluate(
            &params(),
            30.0,
            gaps(&[40.0, 41.0, 42.0, 43.0, 44.0]),
            steady(30.0),
            Some(RawTcp::new(13.5, vec![60.0; 5])),
        );
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "before_us",
            "after_us",
            "after_each_us",
            "after_next_us",
            "steady_p50_us",
            "ratio",
            "gaps",
            "retired_during_idle",
            "threads_created_after_gap",
            "pass",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert!(v["pass"].is_boolean());
        assert_eq!(v["after_us"], 42.0);
        assert_eq!(v["steady_p50_us"], 30.0);
        assert_eq!(v["raw_tcp"]["after_us"], 60.0);
        assert_eq!(v["raw_tcp"]["ratio"], 4.44);
        assert_eq!(v["gap_results"].as_array().unwrap().len(), 5);
    }
}
