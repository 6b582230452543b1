//! The workloads, for one system against a server in a child process: latency (one call in
//! flight), throughput (a fixed number of calls in flight, closed loop), memory (idle
//! connections held by the server), streaming (one server stream read as fast as it comes) and
//! a stalled stream (a consumer that stops reading).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::client::{share_of, Conn};
use super::load::{new_histogram, percentiles_us, Window};
use super::quote::{Quote, ENDLESS, SYMBOL};
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

/// Calls kept in flight, spread over connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Calls in flight, all connections together.
    pub(crate) inflight: usize,
    /// Connections (each gets an equal share of the calls in flight and of the calls).
    pub(crate) connections: usize,
}

/// `warmup` and then `calls` calls, `load.inflight` of them in flight at once over
/// `load.connections` connections, on a runtime with one worker per CPU (as [`throughput`]'s):
/// a fixed amount of work, for counting each side's instructions, system calls or wake-ups per
/// call under load (`profile/icount.py` with `INFLIGHT` and `CONNECTIONS`).
pub(crate) fn calls_in_flight(
    system: System,
    addr: &str,
    load: Load,
    warmup: usize,
    calls: usize,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let conns = connect_each(system, addr, load.connections).await?;
        let per_conn = load.inflight.div_ceil(conns.len());
        for n in [warmup, calls] {
            let runs: Vec<_> = conns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let (c, share) = (c.clone(), share_of(n, conns.len(), i));
                    tokio::spawn(async move { c.fixed_calls(per_conn, share).await })
                })
                .collect();
            for r in runs {
                r.await??;
            }
        }
        Ok(())
    })
}

/// `connections` connections (at least one) with the system's own client.
async fn connect_each(system: System, addr: &str, connections: usize) -> anyhow::Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(connections.max(1));
    for _ in 0..connections.max(1) {
        conns.push(Conn::connect(system, addr).await?);
    }
    Ok(conns)
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
        let conns = connect_each(system, addr, connections).await?;
        let w = Arc::new(Window::default());
        let per_conn = inflight.div_ceil(conns.len());
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
        let calls = h.len();
        anyhow::ensure!(
            calls > 0,
            "{}: no call answered in the window",
            system.name()
        );
        let per_call = |a, b| round2(per_unit(a, b, calls));
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

/// One server stream's rate, and the CPU each side spent per message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Streaming {
    /// Messages received in the window.
    pub(crate) messages: u64,
    /// Messages received per second in the window.
    pub(crate) messages_per_sec: f64,
    /// The server process's CPU time (user + system) per message, µs.
    pub(crate) server_cpu_us: f64,
    /// This (client) process's CPU time per message, µs.
    pub(crate) client_cpu_us: f64,
}

/// Quotes of the short stream that sets up a connection's streaming path before a
/// measurement.
const WARM_QUOTES: u64 = 100;

/// One connection, one server-streaming call of endless quotes, read by one task as fast as
/// they come (each checked to be the next): `warmup`, then `window` counted. The client runs on
/// a tokio runtime with one worker per CPU, as the throughput workload's does.
pub(crate) fn streaming(
    system: System,
    addr: &str,
    server_pid: u32,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Streaming> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let conn = warm_stream(system, addr).await?;
        let mut quotes = conn.watch(SYMBOL, ENDLESS).await?;
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (received, stop) = (received.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let q = next_quote(system, &mut quotes).await?;
                    check_seq(system, &q, n)?;
                    n += 1;
                    received.store(n, Ordering::Relaxed);
                }
                // Dropping the stream stops the server's producer.
                drop(quotes);
                anyhow::Ok(n)
            })
        };
        tokio::time::sleep(warmup).await;
        let cpu = || (cpu_time(server_pid), cpu_time(std::process::id()));
        let (server0, client0) = cpu();
        let n0 = received.load(Ordering::Relaxed);
        let t0 = Instant::now();
        tokio::time::sleep(window).await;
        let n1 = received.load(Ordering::Relaxed);
        let elapsed = t0.elapsed();
        let (server1, client1) = cpu();
        stop.store(true, Ordering::Relaxed);
        reader.await??;
        let messages = n1 - n0;
        anyhow::ensure!(
            messages > 0,
            "{}: no message received in the window",
            system.name()
        );
        Ok(Streaming {
            messages,
            messages_per_sec: (messages as f64 / elapsed.as_secs_f64()).round(),
            // A message costs far less than a call: to 0.001 µs.
            server_cpu_us: round3(per_unit(server0, server1, messages)),
            client_cpu_us: round3(per_unit(client0, client1, messages)),
        })
    })
}

/// One stream of `n` quotes read to its end (after a short one, as [`streaming`] does), on a
/// current-thread runtime: how long it took.
pub(crate) fn stream_to_end(system: System, addr: &str, n: u64) -> anyhow::Result<Duration> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let conn = warm_stream(system, addr).await?;
        let t0 = Instant::now();
        let mut quotes = conn.watch(SYMBOL, n).await?;
        let mut seen = 0;
        while let Some(q) = quotes.next().await? {
            check_seq(system, &q, seen)?;
            seen += 1;
        }
        anyhow::ensure!(seen == n, "{}: {seen} quotes of {n}", system.name());
        Ok(t0.elapsed())
    })
}

/// A connection whose streaming path has run once: one short stream read to its end.
async fn warm_stream(system: System, addr: &str) -> anyhow::Result<Conn> {
    let conn = Conn::connect(system, addr).await?;
    let mut warm = conn.watch(SYMBOL, WARM_QUOTES).await?;
    let mut n = 0;
    while let Some(q) = warm.next().await? {
        check_seq(system, &q, n)?;
        n += 1;
    }
    anyhow::ensure!(
        n == WARM_QUOTES,
        "{}: {n} quotes of {WARM_QUOTES}",
        system.name()
    );
    Ok(conn)
}

async fn next_quote(system: System, quotes: &mut super::client::Quotes) -> anyhow::Result<Quote> {
    quotes
        .next()
        .await?
        .ok_or_else(|| anyhow::anyhow!("{}: the endless stream ended", system.name()))
}

fn check_seq(system: System, q: &Quote, n: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        q.seq == n as u32 && q.symbol == SYMBOL,
        "{}: quote {n} came as {q:?}",
        system.name()
    );
    Ok(())
}

/// A process's resident memory through a stalled stream, KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Rss {
    /// VmRSS before the call (its connection set up, a short stream read on it).
    pub(crate) before_kib: u64,
    /// VmRSS once the client read the stream's first message.
    pub(crate) first_kib: u64,
    /// VmRSS after the stall.
    pub(crate) after_kib: u64,
    /// What the stalled stream cost in all: after − before. Kept beside the readings so that
    /// over rounds it is the median of each round's growth, not the difference of medians.
    pub(crate) growth_kib: f64,
    /// What it grew while nobody read: after − first.
    pub(crate) stall_growth_kib: f64,
}

impl Rss {
    /// The three readings and the growths between them.
    pub(crate) fn new(before_kib: u64, first_kib: u64, after_kib: u64) -> Rss {
        Rss {
            before_kib,
            first_kib,
            after_kib,
            growth_kib: after_kib as f64 - before_kib as f64,
            stall_growth_kib: after_kib as f64 - first_kib as f64,
        }
    }
}

/// A consumer that stops reading: each side's RSS through it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stall {
    /// How long the client read nothing, s.
    pub(crate) seconds: f64,
    /// The server process's VmRSS.
    pub(crate) server: Rss,
    /// This (client) process's VmRSS.
    pub(crate) client: Rss,
}

/// One connection, one server-streaming call of endless quotes: the client reads one message,
/// then nothing for `stall`, then one more (the stream must go on where it stopped). Each
/// side's VmRSS is read before the call, after the first message and after the stall; the
/// client's is this process's, so `keel-lab peers` runs this in a child process of its own
/// ([`super::serve::stall_in_child`]).
///
/// The bound it is held to ([`super::goals`]): the producer may have only the stream's window
/// unconsumed at the client, so neither side may hold more than about one window of it. A
/// keel-wire stream's window starts at 256 KiB and is at most 1 MiB when a stream starts
/// (`keel_wire::MAX_LEARNED_INITIAL_WINDOW`; it grows further only as its consumer reads). The
/// server holds at most that in its send queue plus the encoder's batch (32 KiB); the client
/// at most that in its stream's buffer. Bytes in the sockets' buffers are the kernel's, not in
/// either VmRSS. Anything that grew with the stall's length instead (an unbounded queue) would
/// cross any fixed bar in time.
pub(crate) fn stall(
    system: System,
    addr: &str,
    server_pid: u32,
    stall: Duration,
) -> anyhow::Result<Stall> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let conn = warm_stream(system, addr).await?;
        settle().await;
        let rss = || -> anyhow::Result<(u64, u64)> {
            Ok((
                status_kib(server_pid, "VmRSS")?,
                status_kib(std::process::id(), "VmRSS")?,
            ))
        };
        let before = rss()?;
        let mut quotes = conn.watch(SYMBOL, ENDLESS).await?;
        check_seq(system, &next_quote(system, &mut quotes).await?, 0)?;
        let first = rss()?;
        tokio::time::sleep(stall).await;
        let after = rss()?;
        check_seq(system, &next_quote(system, &mut quotes).await?, 1)?;
        drop(quotes);
        settle().await;
        let at = |i: fn(&(u64, u64)) -> u64| Rss::new(i(&before), i(&first), i(&after));
        Ok(Stall {
            seconds: stall.as_secs_f64(),
            server: at(|r| r.0),
            client: at(|r| r.1),
        })
    })
}

/// CPU time from `a` to `b` per unit of `n`, µs; NaN when either is unknown.
fn per_unit(a: Option<Duration>, b: Option<Duration>, n: u64) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64() * 1e6 / n as f64,
        _ => f64::NAN,
    }
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

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
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

    #[test]
    fn cpu_per_unit_and_rss_growth() {
        let ms = |n| Some(Duration::from_millis(n));
        // 30 ms over 10,000 messages: 3 µs each.
        assert_eq!(round2(per_unit(ms(100), ms(130), 10_000)), 3.0);
        assert_eq!(round3(per_unit(ms(0), ms(1), 3_000)), 0.333);
        assert!(per_unit(None, ms(1), 1).is_nan());
        let r = Rss::new(1000, 1300, 1296);
        assert_eq!((r.growth_kib, r.stall_growth_kib), (296.0, -4.0));
    }
}
