//! Seed 003: steady calls, then an idle gap longer than the pool's keep-alive, then one call.
//! Before the steady calls a small burst grows the pool above its floor, so that the idle gap
//! really retires threads (the seed's "idle I/O threads were retired").

use std::time::{Duration, Instant};

use keel_examples::calculator::CalculatorBlockingClient;
use serde::Serialize;

use super::{start_host, us, Binding, HostSettings, Latencies};
use crate::verdict::{self, Verdict};

/// Clients of the burst that grows the pool above its floor before the steady calls.
const GROW_CLIENTS: usize = 8;
/// Work of each call of that burst, ms.
const GROW_WORK_MS: u64 = 50;

/// Settings of the idle experiment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// The transport.
    pub(crate) binding: Binding,
    /// Idle gap, ms.
    pub(crate) idle_ms: u64,
    /// The host pool's keep-alive, ms.
    pub(crate) keep_alive_ms: u64,
    /// Steady-state calls before the gap.
    pub(crate) steady_calls: usize,
    /// Also measure raw TCP ping-pong around the same gap (the machine's own after-idle cost).
    pub(crate) raw_tcp: bool,
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
    /// The last steady call before the gap, µs.
    pub(crate) before_us: f64,
    /// The first call after the gap, µs.
    pub(crate) after_us: f64,
    /// The next calls after that one, µs.
    pub(crate) after_next_us: Vec<f64>,
    /// p50 of the steady calls (same client, same kind), µs.
    pub(crate) steady_p50_us: f64,
    /// The steady calls.
    pub(crate) steady: super::Dist,
    /// Pool threads just before the gap.
    pub(crate) threads_before_idle: usize,
    /// Pool threads just after the gap (before the call).
    pub(crate) threads_after_idle: usize,
    /// Pool threads retired during the gap.
    pub(crate) retired_during_idle: u64,
    /// The physical limit measured the same way: raw TCP ping-pong (two threads, no keel),
    /// steady calls then the same idle gap then one call. Not part of the bar.
    pub(crate) raw_tcp: Option<RawTcp>,
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

/// Raw TCP ping-pong around the same idle gap: what the machine alone costs after idle.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct RawTcp {
    /// p50 of the steady round trips, µs.
    pub(crate) steady_p50_us: f64,
    /// The first round trip after the gap, µs.
    pub(crate) after_us: f64,
}

/// Raw TCP ping-pong on loopback (a 64-byte echo between two plain threads): `steady` round
/// trips, then `idle`, then one.
pub(crate) fn raw_tcp(steady: usize, idle: Duration) -> anyhow::Result<RawTcp> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut b = [0u8; 64];
        while s.read_exact(&mut b).is_ok() {
            s.write_all(&b)?;
        }
        Ok(())
    });
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    let mut buf = [7u8; 64];
    let mut once = |c: &mut TcpStream| -> std::io::Result<Duration> {
        let t = Instant::now();
        c.write_all(&buf)?;
        c.read_exact(&mut buf)?;
        Ok(t.elapsed())
    };
    let mut lat = Latencies::new();
    for _ in 0..steady {
        lat.record(once(&mut c)?);
    }
    super::idle_with_progress(idle, "idle: raw TCP peer, same gap");
    let after = once(&mut c)?;
    drop(c);
    let _ = echo.join();
    Ok(RawTcp {
        steady_p50_us: lat.dist().p50_us,
        after_us: us(after),
    })
}

/// Pool observations around the gap.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PoolObs {
    /// Threads just before the gap.
    pub(crate) before: usize,
    /// Threads just after the gap.
    pub(crate) after: usize,
    /// Retired during the gap.
    pub(crate) retired: u64,
}

/// Runs the experiment.
pub(crate) fn run(p: &Params) -> anyhow::Result<Idle> {
    let host = start_host(
        p.binding,
        HostSettings {
            keep_alive: Some(Duration::from_millis(p.keep_alive_ms)),
            clients: GROW_CLIENTS,
        },
    )?;
    let url = host.url().to_string();
    super::burst::fire(&url, GROW_CLIENTS, GROW_WORK_MS)?;

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
    let m0 = host.pool_metrics();
    super::idle_with_progress(
        Duration::from_millis(p.idle_ms),
        &format!("idle: {} ms (keep-alive {} ms)", p.idle_ms, p.keep_alive_ms),
    );
    let m1 = host.pool_metrics();
    let t = Instant::now();
    client.add(1.0, 2.0)?;
    let after = t.elapsed();
    let mut after_next_us = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        client.add(1.0, 2.0)?;
        after_next_us.push(us(t.elapsed()));
    }
    client.close();
    host.shutdown();
    let raw = if p.raw_tcp {
        Some(raw_tcp(p.steady_calls, Duration::from_millis(p.idle_ms))?)
    } else {
        None
    };
    let obs = PoolObs {
        before: m0.threads,
        after: m1.threads,
        retired: m1.retired_total - m0.retired_total,
    };
    Ok(evaluate(
        p,
        us(before),
        us(after),
        after_next_us,
        lat.dist(),
        obs,
        raw,
    ))
}

/// Builds the result and its verdict from the measurements.
pub(crate) fn evaluate(
    p: &Params,
    before_us: f64,
    after_us: f64,
    after_next_us: Vec<f64>,
    steady: super::Dist,
    pool: PoolObs,
    raw_tcp: Option<RawTcp>,
) -> Idle {
    let verdict = verdict::idle(after_us, steady.p50_us);
    Idle {
        experiment: "idle",
        binding: p.binding,
        idle_ms: p.idle_ms,
        keep_alive_ms: p.keep_alive_ms,
        before_us,
        after_us,
        after_next_us,
        steady_p50_us: steady.p50_us,
        steady,
        threads_before_idle: pool.before,
        threads_after_idle: pool.after,
        retired_during_idle: pool.retired,
        raw_tcp,
        pass: verdict.pass,
        verdict,
    }
}

/// The readable summary.
pub(crate) fn summary(r: &Idle) -> String {
    let mut s = format!(
        "idle (seed 003), binding {}: idle {} ms, pool keep-alive {} ms\n",
        r.binding.name(),
        r.idle_ms,
        r.keep_alive_ms
    );
    s.push_str(&format!(
        "  steady: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs ({} calls); last before idle {:.1} µs\n",
        r.steady.p50_us, r.steady.p99_us, r.steady.max_us, r.steady.count, r.before_us
    ));
    s.push_str(&format!(
        "  pool threads {} → {} during the gap ({} retired)\n",
        r.threads_before_idle, r.threads_after_idle, r.retired_during_idle
    ));
    let next: Vec<String> = r.after_next_us.iter().map(|x| format!("{x:.1}")).collect();
    s.push_str(&format!(
        "  first call after idle {:.1} µs; the next: {} µs\n",
        r.after_us,
        next.join(", ")
    ));
    if let Some(raw) = &r.raw_tcp {
        s.push_str(&format!(
            "  raw TCP ping-pong (no keel), same gap: p50 {:.1} µs, after idle {:.1} µs ({:.1} × p50)\n",
            raw.steady_p50_us,
            raw.after_us,
            raw.after_us / raw.steady_p50_us
        ));
    }
    if r.idle_ms <= r.keep_alive_ms {
        s.push_str("  note: the gap is not longer than the keep-alive: nothing retires\n");
    }
    s.push_str(&super::first_call::verdict_line(&r.verdict));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::Dist;

    fn params() -> Params {
        Params {
            binding: Binding::Tcp,
            idle_ms: 2500,
            keep_alive_ms: 1000,
            steady_calls: 1000,
            raw_tcp: false,
        }
    }

    fn steady(p50: f64) -> Dist {
        Dist {
            count: 1000,
            min_us: p50 / 2.0,
            p50_us: p50,
            p99_us: p50 * 2.0,
            max_us: p50 * 3.0,
        }
    }

    #[test]
    fn verdict_uses_the_steady_p50() {
        let obs = PoolObs {
            before: 8,
            after: 2,
            retired: 6,
        };
        assert!(evaluate(&params(), 30.0, 60.0, vec![], steady(30.0), obs, None).pass);
        let r = evaluate(&params(), 30.0, 61.0, vec![], steady(30.0), obs, None);
        assert!(!r.pass);
        assert!(summary(&r).contains("FAIL"));
    }

    #[test]
    fn json_shape() {
        let r = evaluate(
            &params(),
            30.0,
            40.0,
            vec![31.0],
            steady(30.0),
            PoolObs::default(),
            Some(RawTcp {
                steady_p50_us: 13.5,
                after_us: 60.0,
            }),
        );
        let v = serde_json::to_value(&r).unwrap();
        for k in ["before_us", "after_us", "steady_p50_us", "pass"] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert!(v["pass"].is_boolean());
        assert_eq!(v["after_us"], 40.0);
        assert_eq!(v["steady_p50_us"], 30.0);
        assert_eq!(v["raw_tcp"]["after_us"], 60.0);
    }
}
