//! `keel-lab wan-proxy-check`: the proxy measured against its own settings, so that a wan
//! result can be trusted. Ping-pong round trips through it should take the RTT within 5 % +
//! 0.3 ms (median); a new connection's first round trip two RTTs (the handshake's and its own,
//! each with that tolerance);
//! and a bulk upload through a capped link should arrive at the cap within 5 %.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::proxy::{LinkConfig, Proxy};
use crate::experiments::ms;

/// The round trip may miss the setting by this share of it...
pub(crate) const RTT_TOLERANCE_RATIO: f64 = 0.05;
/// ...plus this, ms.
pub(crate) const RTT_TOLERANCE_MS: f64 = 0.3;
/// Bulk throughput may miss the cap by this share of it.
pub(crate) const BULK_TOLERANCE_RATIO: f64 = 0.05;

/// Whether `measured_ms` is `rtts` round trips of `rtt_ms`, each within the tolerance.
pub(crate) fn rtt_ok(measured_ms: f64, rtt_ms: f64, rtts: f64) -> bool {
    (measured_ms - rtts * rtt_ms).abs() <= rtts * (RTT_TOLERANCE_RATIO * rtt_ms + RTT_TOLERANCE_MS)
}

/// Whether `measured` bytes/s is `cap` within the tolerance.
pub(crate) fn bulk_ok(measured: f64, cap: f64) -> bool {
    (measured / cap - 1.0).abs() <= BULK_TOLERANCE_RATIO
}

/// Ping-pong through the proxy at one RTT.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RttCheck {
    /// The setting, ms.
    pub(crate) rtt_ms: f64,
    /// Round trips measured.
    pub(crate) round_trips: usize,
    /// Their median, ms.
    pub(crate) median_ms: f64,
    /// Fastest and slowest, ms.
    pub(crate) min_ms: f64,
    /// Slowest, ms.
    pub(crate) max_ms: f64,
    /// A new connection: connect, then the first round trip, ms (should be 2 RTT).
    pub(crate) first_ms: f64,
    /// Whether the median and the first round trip are within the tolerance.
    pub(crate) pass: bool,
}

/// A bulk upload through a capped link.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BulkCheck {
    /// The link's RTT, ms.
    pub(crate) rtt_ms: f64,
    /// The cap, bytes/s.
    pub(crate) cap_bytes_per_sec: u64,
    /// Bytes sent.
    pub(crate) bytes: usize,
    /// Measured at the receiver, from its first read to its last, bytes/s.
    pub(crate) measured_bytes_per_sec: f64,
    /// `measured / cap`.
    pub(crate) ratio: f64,
    /// Whether within the tolerance.
    pub(crate) pass: bool,
}

/// The whole check (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProxyCheck {
    /// `wan-proxy-check`.
    pub(crate) experiment: &'static str,
    /// Ping-pong per RTT.
    pub(crate) rtt: Vec<RttCheck>,
    /// Bulk per RTT.
    pub(crate) bulk: Vec<BulkCheck>,
    /// Whether everything was within its tolerance.
    pub(crate) pass: bool,
}

/// An upstream that echoes 64-byte messages.
fn echo_server() -> std::io::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    thread::Builder::new()
        .name("check-echo".into())
        .spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let _ = s.set_nodelay(true);
                let mut b = [0u8; 64];
                while s.read_exact(&mut b).is_ok() {
                    if s.write_all(&b).is_err() {
                        return;
                    }
                }
            }
        })?;
    Ok(addr)
}

/// Ping-pong through a proxy at `rtt_ms`: the first round trip of a new connection, then about
/// two seconds' worth (10 to 200).
pub(crate) fn ping_pong(rtt_ms: f64) -> anyhow::Result<RttCheck> {
    let proxy = Proxy::start(
        echo_server()?,
        LinkConfig::new(Duration::from_secs_f64(rtt_ms / 1000.0)),
    )?;
    let mut b = [7u8; 64];
    let t = Instant::now();
    let mut c = TcpStream::connect(proxy.addr())?;
    c.set_nodelay(true)?;
    c.write_all(&b)?;
    c.read_exact(&mut b)?;
    let first_ms = ms(t.elapsed());
    let n = ((2000.0 / rtt_ms) as usize).clamp(10, 200);
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        c.write_all(&b)?;
        c.read_exact(&mut b)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let _ = c.shutdown(Shutdown::Both);
    times.sort_by(f64::total_cmp);
    let median_ms = times[n / 2];
    Ok(RttCheck {
        rtt_ms,
        round_trips: n,
        median_ms: round3(median_ms),
        min_ms: round3(times[0]),
        max_ms: round3(times[n - 1]),
        first_ms,
        pass: rtt_ok(median_ms, rtt_ms, 1.0) && rtt_ok(first_ms, rtt_ms, 2.0),
    })
}

/// Uploads `bytes` as fast as possible through a proxy at `rtt_ms` capped at `cap`; the
/// receiver times its first and last reads.
pub(crate) fn bulk(rtt_ms: f64, cap: u64, bytes: usize) -> anyhow::Result<BulkCheck> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let sink = thread::Builder::new().name("check-sink".into()).spawn(
        move || -> std::io::Result<(usize, usize, Duration)> {
            let (mut s, _) = l.accept()?;
            let mut buf = vec![0u8; 64 * 1024];
            let (mut total, mut first_len) = (0, 0);
            let (mut first, mut last) = (None, Instant::now());
            loop {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                last = Instant::now();
                if first.is_none() {
                    first = Some(last);
                    first_len = n;
                }
                total += n;
            }
            Ok((total, first_len, last - first.unwrap_or(last)))
        },
    )?;
    let link = LinkConfig::new(Duration::from_secs_f64(rtt_ms / 1000.0)).with_cap(Some(cap));
    let proxy = Proxy::start(addr, link)?;
    let data = super::incompressible(bytes);
    let mut c = TcpStream::connect(proxy.addr())?;
    c.write_all(&data)?;
    c.shutdown(Shutdown::Write)?;
    let (total, first_len, span) = sink
        .join()
        .map_err(|_| anyhow::anyhow!("sink panicked"))??;
    anyhow::ensure!(total == bytes, "{total} of {bytes} bytes arrived");
    let measured = (total - first_len) as f64 / span.as_secs_f64();
    Ok(BulkCheck {
        rtt_ms,
        cap_bytes_per_sec: cap,
        bytes,
        measured_bytes_per_sec: measured.round(),
        ratio: round3(measured / cap as f64),
        pass: bulk_ok(measured, cap as f64),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Runs the check at each RTT: ping-pong, and a bulk upload of about a second at `cap`.
pub(crate) fn run(rtts_ms: &[f64], cap: u64) -> anyhow::Result<ProxyCheck> {
    anyhow::ensure!(cap > 0, "the check needs a cap");
    anyhow::ensure!(rtts_ms.iter().all(|&r| r > 0.0), "RTTs must be positive");
    let mut rtt = Vec::new();
    let mut bulks = Vec::new();
    for &r in rtts_ms {
        let p = ping_pong(r)?;
        eprintln!(
            "ping-pong at {r} ms: median {:.3} ms (min {:.3}, max {:.3}), new connection {:.1} ms",
            p.median_ms, p.min_ms, p.max_ms, p.first_ms
        );
        rtt.push(p);
        let b = bulk(r, cap, cap as usize)?;
        eprintln!(
            "bulk at {r} ms, cap {cap} B/s: {:.0} B/s ({:.3} × the cap)",
            b.measured_bytes_per_sec, b.ratio
        );
        bulks.push(b);
    }
    let pass = rtt.iter().all(|r| r.pass) && bulks.iter().all(|b| b.pass);
    Ok(ProxyCheck {
        experiment: "wan-proxy-check",
        rtt,
        bulk: bulks,
        pass,
    })
}

/// The readable summary.
pub(crate) fn summary(c: &ProxyCheck) -> String {
    let mut s = String::from(
        "wan-proxy-check: the latency proxy against its settings (round trip within 5 % + 0.3 ms; bulk within 5 % of the cap)\n",
    );
    for r in &c.rtt {
        s.push_str(&format!(
            "  RTT {} ms: median {:.3} ms over {} round trips (min {:.3}, max {:.3}); new connection {:.1} ms (want {:.0}): {}\n",
            r.rtt_ms,
            r.median_ms,
            r.round_trips,
            r.min_ms,
            r.max_ms,
            r.first_ms,
            2.0 * r.rtt_ms,
            if r.pass { "PASS" } else { "FAIL" }
        ));
    }
    for b in &c.bulk {
        s.push_str(&format!(
            "  bulk at {} ms: {} bytes at {:.0} B/s = {:.3} × the cap {}: {}\n",
            b.rtt_ms,
            b.bytes,
            b.measured_bytes_per_sec,
            b.ratio,
            b.cap_bytes_per_sec,
            if b.pass { "PASS" } else { "FAIL" }
        ));
    }
    s.push_str(if c.pass {
        "verdict: PASS\n"
    } else {
        "verdict: FAIL\n"
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerances() {
        // 5 % + 0.3 ms.
        assert!(rtt_ok(1.34, 1.0, 1.0));
        assert!(!rtt_ok(1.36, 1.0, 1.0));
        assert!(rtt_ok(209.9, 200.0, 1.0));
        assert!(!rtt_ok(210.4, 200.0, 1.0));
        assert!(rtt_ok(190.0, 200.0, 1.0));
        // A new connection: two round trips, each with its tolerance.
        assert!(rtt_ok(2.69, 1.0, 2.0));
        assert!(!rtt_ok(2.71, 1.0, 2.0));
        assert!(bulk_ok(2_400_000.0, 2_500_000.0));
        assert!(!bulk_ok(2_300_000.0, 2_500_000.0));
        assert!(!bulk_ok(2_700_000.0, 2_500_000.0));
    }

    #[test]
    fn bulk_arrives_whole() {
        // Fast, so the test is short; the rate itself is not asserted here.
        let b = bulk(1.0, 100_000_000, 300_000).unwrap();
        assert_eq!(b.bytes, 300_000);
        assert!(b.measured_bytes_per_sec > 0.0);
    }
}
