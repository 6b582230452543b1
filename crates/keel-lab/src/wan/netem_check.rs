//! The TUN link ([`super::netem`]) measured against its settings (`keel-lab wan-netem-check`):
//! a raw TCP echo and a raw UDP echo take about one RTT per round trip, a random loss rate is
//! what ≥ 10k UDP packets see, and a bulk TCP transfer fills a capped link. Each check asserts
//! behaviour with wide margins (counts and ratios), not tight timings.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::netem::link::Impairments;
use super::netem::{Netem, NetemStats};

/// What to check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CheckParams {
    /// The echoes' and the bulk transfer's RTT, ms.
    pub(crate) rtt_ms: f64,
    /// The bulk transfer's cap, bytes/s.
    pub(crate) bytes_per_sec: u64,
    /// The loss check's rate, percent.
    pub(crate) loss_pct: f64,
    /// UDP packets the loss check sends.
    pub(crate) packets: u64,
    /// How long the bulk transfer runs, s (its first third is slow start, not counted).
    pub(crate) bulk_seconds: f64,
    /// Seeds the loss generator.
    pub(crate) seed: u64,
}

/// Round trips per echo check.
const ECHOES: usize = 5;

/// One echo check: the round trips of a small message, in RTTs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EchoCheck {
    /// `tcp` or `udp`.
    pub(crate) protocol: &'static str,
    /// TCP only: the connect, in RTTs (the handshake's one).
    pub(crate) connect_rtts: Option<f64>,
    /// Each round trip, in RTTs.
    pub(crate) round_trip_rtts: Vec<f64>,
    /// Whether every round trip took 0.9–1.5 RTT (and the connect as much).
    pub(crate) pass: bool,
}

/// The loss check.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LossCheck {
    /// The setting, percent.
    pub(crate) loss_pct: f64,
    /// Packets sent.
    pub(crate) sent: u64,
    /// Packets that arrived.
    pub(crate) received: u64,
    /// `(sent − received) / sent`, percent.
    pub(crate) measured_pct: f64,
    /// What the link counted.
    pub(crate) link: NetemStats,
    /// Whether the measured rate is within ±1/3 of the setting and every packet is accounted
    /// for (arrived or dropped by the link).
    pub(crate) pass: bool,
}

/// Bulk transfers the check makes at most. One TCP flow through a drop-tail queue now and then
/// recovers slowly from slow start's overshoot (0.77 × the cap once in CI, against 0.96–0.97 in
/// every run here, idle or loaded; a retransmission timeout is the likely cause, not
/// confirmed), so a transfer below the range is made again and every one is reported; a link
/// that does not deliver its cap fails all of them.
const BULK_ATTEMPTS: usize = 3;

/// One bulk transfer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BulkAttempt {
    /// What arrived per second after slow start.
    pub(crate) bytes_per_sec: f64,
    /// `bytes_per_sec / cap`.
    pub(crate) ratio: f64,
    /// Packets the link's queues dropped (both ways).
    pub(crate) queue_drops: u64,
}

/// The bulk check.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BulkCheck {
    /// The cap, bytes/s.
    pub(crate) cap_bytes_per_sec: u64,
    /// Every transfer made, in order (the last one passed, or all [`BULK_ATTEMPTS`] failed).
    pub(crate) attempts: Vec<BulkAttempt>,
    /// The last transfer's rate, bytes/s.
    pub(crate) bytes_per_sec: f64,
    /// The last transfer's `bytes_per_sec / cap`.
    pub(crate) ratio: f64,
    /// Whether a transfer's ratio was in 0.9–1.1. Above 1 is possible: bytes that arrived out
    /// of order before the window opened become readable inside it once a retransmission fills
    /// the hole (up to one BDP); a cap not applied at all would show many times the cap, and
    /// is not made again.
    pub(crate) pass: bool,
}

/// Every check (`keel-lab wan-netem-check --json` prints it).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NetemCheck {
    /// `wan-netem-check`.
    pub(crate) experiment: &'static str,
    /// The seed of the loss generator.
    pub(crate) seed: u64,
    /// The echoes' RTT, ms.
    pub(crate) rtt_ms: f64,
    /// TCP and UDP echoes.
    pub(crate) echoes: Vec<EchoCheck>,
    /// Random loss over many UDP packets.
    pub(crate) loss: LossCheck,
    /// A bulk TCP transfer through the cap.
    pub(crate) bulk: BulkCheck,
    /// Whether every check passed.
    pub(crate) pass: bool,
}

/// Runs every check.
pub(crate) fn run(p: &CheckParams) -> anyhow::Result<NetemCheck> {
    anyhow::ensure!(p.rtt_ms > 0.0, "--rtt-ms must be positive");
    let rtt = Duration::from_secs_f64(p.rtt_ms / 1000.0);
    let plain = Impairments {
        rtt,
        bytes_per_sec: None,
        loss_pct: 0.0,
        seed: p.seed,
    };
    eprintln!("TCP and UDP echoes at {} ms...", p.rtt_ms);
    let echoes = vec![tcp_echo(plain)?, udp_echo(plain)?];
    eprintln!("{} UDP packets at {} % loss...", p.packets, p.loss_pct);
    let loss = loss(
        Impairments {
            rtt: Duration::from_millis(2),
            loss_pct: p.loss_pct,
            ..plain
        },
        p.packets,
    )?;
    eprintln!(
        "bulk TCP through {} KB/s for {} s...",
        p.bytes_per_sec / 1000,
        p.bulk_seconds
    );
    let bulk = bulk(
        Impairments {
            bytes_per_sec: Some(p.bytes_per_sec),
            ..plain
        },
        p.bulk_seconds,
    )?;
    let pass = echoes.iter().all(|e| e.pass) && loss.pass && bulk.pass;
    Ok(NetemCheck {
        experiment: "wan-netem-check",
        seed: p.seed,
        rtt_ms: p.rtt_ms,
        echoes,
        loss,
        bulk,
        pass,
    })
}

fn in_rtts(d: Duration, rtt: Duration) -> f64 {
    (d.as_secs_f64() / rtt.as_secs_f64() * 1000.0).round() / 1000.0
}

fn about_one(x: f64) -> bool {
    (0.9..=1.5).contains(&x)
}

fn tcp_echo(imp: Impairments) -> anyhow::Result<EchoCheck> {
    let link = Netem::start(imp)?;
    let ip = link.host_ip();
    let listener = link.run_in(move || TcpListener::bind((ip, 0)))??;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.set_nodelay(true);
            let mut r = match s.try_clone() {
                Ok(r) => r,
                Err(_) => return,
            };
            let _ = std::io::copy(&mut r, &mut s);
        }
    });
    let t = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    let connect = t.elapsed();
    s.set_nodelay(true)?;
    let mut trips = Vec::new();
    let mut buf = [0u8; 8];
    for i in 0..ECHOES as u64 {
        let t = Instant::now();
        s.write_all(&i.to_be_bytes())?;
        s.read_exact(&mut buf)?;
        anyhow::ensure!(buf == i.to_be_bytes(), "wrong TCP echo");
        trips.push(in_rtts(t.elapsed(), imp.rtt));
    }
    let _ = s.shutdown(Shutdown::Both);
    let connect_rtts = in_rtts(connect, imp.rtt);
    Ok(EchoCheck {
        protocol: "tcp",
        connect_rtts: Some(connect_rtts),
        pass: about_one(connect_rtts) && trips.iter().all(|&x| about_one(x)),
        round_trip_rtts: trips,
    })
}

fn udp_echo(imp: Impairments) -> anyhow::Result<EchoCheck> {
    let link = Netem::start(imp)?;
    let ip = link.host_ip();
    let server = link.run_in(move || UdpSocket::bind((ip, 0)))??;
    let addr = server.local_addr()?;
    server.set_read_timeout(Some(Duration::from_secs(10)))?;
    let echo = thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..ECHOES {
            let Ok((n, from)) = server.recv_from(&mut buf) else {
                return;
            };
            let _ = server.send_to(&buf[..n], from);
        }
    });
    let c = UdpSocket::bind((link.client_ip(), 0))?;
    c.connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut trips = Vec::new();
    let mut buf = [0u8; 64];
    for i in 0..ECHOES as u64 {
        let t = Instant::now();
        c.send(&i.to_be_bytes())?;
        let n = c.recv(&mut buf)?;
        anyhow::ensure!(buf[..n] == i.to_be_bytes(), "wrong UDP echo");
        trips.push(in_rtts(t.elapsed(), imp.rtt));
    }
    let _ = echo.join();
    Ok(EchoCheck {
        protocol: "udp",
        connect_rtts: None,
        pass: trips.iter().all(|&x| about_one(x)),
        round_trip_rtts: trips,
    })
}

fn loss(imp: Impairments, packets: u64) -> anyhow::Result<LossCheck> {
    let link = Netem::start(imp)?;
    let ip = link.host_ip();
    let server = link.run_in(move || UdpSocket::bind((ip, 0)))??;
    let addr: SocketAddr = server.local_addr()?;
    server.set_read_timeout(Some(Duration::from_millis(500)))?;
    let counter = thread::spawn(move || {
        let mut got = 0u64;
        let mut buf = [0u8; 64];
        while got < packets && server.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    let c = UdpSocket::bind((link.client_ip(), 0))?;
    c.connect(addr)?;
    // Paced (20 packets per ms at most), so that neither the device's queue nor a socket
    // buffer drops anything: every drop is the link's.
    for i in 0..packets {
        c.send(&i.to_be_bytes())?;
        if i % 20 == 19 {
            thread::sleep(Duration::from_millis(1));
        }
    }
    let received = counter
        .join()
        .map_err(|_| anyhow::anyhow!("the counter panicked"))?;
    let stats = link.stats();
    let measured_pct = (packets - received) as f64 / packets as f64 * 100.0;
    let accounted = received + stats.up_lost + stats.up_queue_full == packets;
    let near = (measured_pct - imp.loss_pct).abs() <= imp.loss_pct / 3.0;
    Ok(LossCheck {
        loss_pct: imp.loss_pct,
        sent: packets,
        received,
        measured_pct: (measured_pct * 1000.0).round() / 1000.0,
        link: stats,
        pass: accounted && near,
    })
}

fn bulk(imp: Impairments, seconds: f64) -> anyhow::Result<BulkCheck> {
    let cap = imp.bytes_per_sec.unwrap_or(0);
    let in_range = |ratio: f64| (0.9..=1.1).contains(&ratio);
    let mut attempts = Vec::new();
    loop {
        let attempt = bulk_once(imp, seconds)?;
        let ratio = attempt.ratio;
        attempts.push(attempt);
        // Only a transfer below the range is made again: above it, the cap was not applied.
        if in_range(ratio) || ratio > 1.1 || attempts.len() == BULK_ATTEMPTS {
            break;
        }
        eprintln!("bulk TCP at {ratio:.3} × the cap: once more");
    }
    let last = attempts.last().expect("one attempt at least");
    Ok(BulkCheck {
        cap_bytes_per_sec: cap,
        bytes_per_sec: last.bytes_per_sec,
        ratio: last.ratio,
        pass: in_range(last.ratio),
        attempts,
    })
}

/// One bulk transfer through a fresh link.
fn bulk_once(imp: Impairments, seconds: f64) -> anyhow::Result<BulkAttempt> {
    let cap = imp.bytes_per_sec.unwrap_or(0);
    let link = Netem::start(imp)?;
    let ip = link.host_ip();
    let listener = link.run_in(move || TcpListener::bind((ip, 0)))??;
    let addr = listener.local_addr()?;
    let total = Duration::from_secs_f64(seconds);
    // The receiver counts what arrives after the first third (slow start).
    let receiver = thread::spawn(move || -> std::io::Result<f64> {
        let (mut s, _) = listener.accept()?;
        let start = Instant::now();
        let skip = start + total / 3;
        let mut buf = vec![0u8; 64 * 1024];
        let mut counted = 0u64;
        let mut from: Option<Instant> = None;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            let now = Instant::now();
            match from {
                Some(_) => counted += n as u64,
                None if now >= skip => from = Some(now),
                None => {}
            }
        }
        let secs = from.map_or(0.0, |f| f.elapsed().as_secs_f64());
        Ok(if secs > 0.0 {
            counted as f64 / secs
        } else {
            0.0
        })
    });
    let mut s = TcpStream::connect(addr)?;
    let chunk = vec![0x5au8; 64 * 1024];
    let until = Instant::now() + total;
    while Instant::now() < until {
        s.write_all(&chunk)?;
    }
    s.shutdown(Shutdown::Write)?;
    let rate = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiver panicked"))??;
    let stats = link.stats();
    Ok(BulkAttempt {
        bytes_per_sec: rate.round(),
        ratio: (rate / cap as f64 * 1000.0).round() / 1000.0,
        queue_drops: stats.up_queue_full + stats.down_queue_full,
    })
}

/// The readable summary.
pub(crate) fn summary(c: &NetemCheck) -> String {
    let mut s = format!(
        "wan-netem-check: the TUN link against its settings (seed {})\n",
        c.seed
    );
    for e in &c.echoes {
        let connect = e
            .connect_rtts
            .map_or(String::new(), |x| format!("connect {x:.3} RTT; "));
        s.push_str(&format!(
            "  {} echo at {} ms: {connect}round trips {:?} RTT (each 0.9–1.5): {}\n",
            e.protocol,
            c.rtt_ms,
            e.round_trip_rtts,
            verdict(e.pass)
        ));
    }
    let l = &c.loss;
    s.push_str(&format!(
        "  loss {} %: {} of {} UDP packets arrived, {:.3} % lost (link: {} lost, {} queue drops): {}\n",
        l.loss_pct,
        l.received,
        l.sent,
        l.measured_pct,
        l.link.up_lost,
        l.link.up_queue_full,
        verdict(l.pass)
    ));
    let b = &c.bulk;
    for (i, a) in b.attempts.iter().enumerate() {
        let last = i + 1 == b.attempts.len();
        s.push_str(&format!(
            "  bulk TCP, transfer {} of {} at most: {:.0} KB/s through a {} KB/s cap = {:.3} × the cap (0.9–1.1; {} queue drops): {}\n",
            i + 1,
            BULK_ATTEMPTS,
            a.bytes_per_sec / 1000.0,
            b.cap_bytes_per_sec / 1000,
            a.ratio,
            a.queue_drops,
            if last { verdict(b.pass) } else { "below, made again" }
        ));
    }
    s
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}
