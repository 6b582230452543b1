//! The TUN link ([`super::netem`]) measured against its settings (`keel-lab wan-netem-check`):
//! a raw TCP echo and a raw UDP echo take about one RTT per round trip, a random loss rate is
//! what ≥ 10k UDP packets see, and UDP sent at 1.5 × a cap arrives at the cap, the rest dropped
//! by the queue. Each check asserts behaviour with wide margins (counts and ratios), not tight
//! timings. A bulk TCP transfer through the cap is measured and reported beside them, not
//! checked (see [`BulkTcp`]).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::netem::link::{Impairments, MTU};
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
    /// TCP only: the connect, in RTTs (the handshake's one), rounded to 0.001.
    pub(crate) connect_rtts: Option<f64>,
    /// Each round trip, in RTTs, rounded to 0.001.
    pub(crate) round_trip_rtts: Vec<f64>,
    /// Whether every round trip took 0.9–1.5 RTT (and the connect as much), judged on the
    /// unrounded times.
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

/// The cap check's offered load, in multiples of the cap.
const CAP_OFFERED: f64 = 1.5;

/// The cap check's datagram: a UDP payload that makes a full packet with the headers.
const CAP_PAYLOAD: usize = MTU - IP_UDP_HEADERS;

/// IPv4 and UDP headers, bytes: the link's cap counts whole packets.
const IP_UDP_HEADERS: usize = 28;

/// The cap check: UDP offered at [`CAP_OFFERED`] × the cap for the bulk time.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CapCheck {
    /// The cap, bytes/s.
    pub(crate) cap_bytes_per_sec: u64,
    /// The offered rate, packet bytes/s.
    pub(crate) offered_bytes_per_sec: f64,
    /// Datagrams sent.
    pub(crate) sent: u64,
    /// Datagrams that arrived.
    pub(crate) received: u64,
    /// Datagrams the link's queue dropped (drop-tail).
    pub(crate) queue_drops: u64,
    /// Packet bytes that arrived per second, after the first third (the queue filling).
    pub(crate) bytes_per_sec: f64,
    /// `bytes_per_sec / cap`.
    pub(crate) ratio: f64,
    /// Whether the ratio is 0.9–1.1 and every datagram is accounted for (arrived or dropped by
    /// the queue; the link loses nothing at random here).
    pub(crate) pass: bool,
}

/// A bulk TCP transfer through the cap: measured and reported, not checked.
///
/// What one TCP flow makes of a drop-tail queue is its congestion controller's doing, on top of
/// the link: slow start overshoots the queue (9–237 packets dropped in the runs here) and the
/// recovery is the controller's and the machine's. Here a dozen runs reached 0.948–0.966 × the cap
/// (bbr, cubic and reno on an idle machine, bbr beside three busy loops) and one 0.609 (bbr,
/// idle); in CI, three transfers in a row reached 0.52, 0.81 and 0.85, and the run failed on
/// them. The link's own promise, its cap and its
/// queue, is what [`CapCheck`] checks, with no controller in the way.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BulkTcp {
    /// The cap, bytes/s.
    pub(crate) cap_bytes_per_sec: u64,
    /// The sender's congestion controller (`TCP_CONGESTION`), when the kernel says.
    pub(crate) congestion_control: Option<String>,
    /// Payload bytes that arrived per second after the first third (slow start).
    pub(crate) bytes_per_sec: f64,
    /// `bytes_per_sec / cap` (payload against packet bytes: 1,448 of 1,500, so about 0.965 at
    /// most).
    pub(crate) ratio: f64,
    /// Packets the link's queues dropped (both ways).
    pub(crate) queue_drops: u64,
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
    /// UDP at 1.5 × the cap.
    pub(crate) cap: CapCheck,
    /// A bulk TCP transfer through the cap (reported, not part of `pass`).
    pub(crate) bulk_tcp: BulkTcp,
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
    let capped = Impairments {
        bytes_per_sec: Some(p.bytes_per_sec),
        ..plain
    };
    eprintln!(
        "UDP at {CAP_OFFERED} × a {} KB/s cap for {} s...",
        p.bytes_per_sec / 1000,
        p.bulk_seconds
    );
    let cap = cap(capped, p.bulk_seconds)?;
    eprintln!(
        "bulk TCP through {} KB/s for {} s...",
        p.bytes_per_sec / 1000,
        p.bulk_seconds
    );
    let bulk_tcp = bulk_tcp(capped, p.bulk_seconds)?;
    let pass = echoes.iter().all(|e| e.pass) && loss.pass && cap.pass;
    Ok(NetemCheck {
        experiment: "wan-netem-check",
        seed: p.seed,
        rtt_ms: p.rtt_ms,
        echoes,
        loss,
        cap,
        bulk_tcp,
        pass,
    })
}

/// `d` in RTTs, unrounded: the checks judge this; the report rounds it ([`round3`]).
fn in_rtts(d: Duration, rtt: Duration) -> f64 {
    d.as_secs_f64() / rtt.as_secs_f64()
}

/// Rounded to three decimal places, for the report.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
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
        connect_rtts: Some(round3(connect_rtts)),
        pass: about_one(connect_rtts) && trips.iter().all(|&x| about_one(x)),
        round_trip_rtts: trips.into_iter().map(round3).collect(),
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
        round_trip_rtts: trips.into_iter().map(round3).collect(),
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
        measured_pct: round3(measured_pct),
        link: stats,
        pass: accounted && near,
    })
}

fn cap(imp: Impairments, seconds: f64) -> anyhow::Result<CapCheck> {
    let cap = imp.bytes_per_sec.unwrap_or(0);
    let link = Netem::start(imp)?;
    let ip = link.host_ip();
    let server = link.run_in(move || UdpSocket::bind((ip, 0)))??;
    let addr: SocketAddr = server.local_addr()?;
    // The queue holds a BDP (or 64 packets) and drains at the cap in about one RTT: silence
    // this long means the last datagram is in.
    server.set_read_timeout(Some(imp.rtt + Duration::from_millis(500)))?;
    let total = Duration::from_secs_f64(seconds);
    // Counts every datagram, and the packet bytes that arrive after the first third.
    let receiver = thread::spawn(move || {
        let mut buf = vec![0u8; MTU];
        let mut received = 0u64;
        let mut counted = 0u64;
        let mut first: Option<Instant> = None;
        let mut from: Option<Instant> = None;
        let mut last = Instant::now();
        while let Ok(n) = server.recv(&mut buf) {
            let now = Instant::now();
            received += 1;
            let skip = *first.get_or_insert(now) + total / 3;
            match from {
                Some(_) => counted += (n + IP_UDP_HEADERS) as u64,
                None if now >= skip => from = Some(now),
                None => {}
            }
            last = now;
        }
        let secs = from.map_or(0.0, |f| (last - f).as_secs_f64());
        let rate = if secs > 0.0 {
            counted as f64 / secs
        } else {
            0.0
        };
        (received, rate)
    });
    let c = UdpSocket::bind((link.client_ip(), 0))?;
    c.connect(addr)?;
    // Paced each millisecond to the offered rate: the queue, not a socket or the device,
    // is what drops the excess.
    let offered = cap as f64 * CAP_OFFERED;
    let datagram = vec![0x5au8; CAP_PAYLOAD];
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= total {
            break;
        }
        let due = (offered * elapsed.as_secs_f64() / MTU as f64) as u64;
        while sent < due {
            c.send(&datagram)?;
            sent += 1;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let (received, rate) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiver panicked"))?;
    let stats = link.stats();
    let ratio = rate / cap as f64;
    let accounted = received + stats.up_queue_full + stats.up_lost == sent;
    Ok(CapCheck {
        cap_bytes_per_sec: cap,
        offered_bytes_per_sec: offered,
        sent,
        received,
        queue_drops: stats.up_queue_full,
        bytes_per_sec: rate.round(),
        ratio: round3(ratio),
        pass: accounted && (0.9..=1.1).contains(&ratio),
    })
}

/// One bulk TCP transfer through a fresh link.
fn bulk_tcp(imp: Impairments, seconds: f64) -> anyhow::Result<BulkTcp> {
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
    let congestion_control = rustix::net::sockopt::tcp_congestion(&s).ok();
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
    Ok(BulkTcp {
        cap_bytes_per_sec: cap,
        congestion_control,
        bytes_per_sec: rate.round(),
        ratio: round3(rate / cap as f64),
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
    let k = &c.cap;
    s.push_str(&format!(
        "  cap: UDP offered at {:.0} KB/s through a {} KB/s cap: {:.0} KB/s arrived = {:.3} × the cap (0.9–1.1); {} sent = {} arrived + {} dropped by the queue: {}\n",
        k.offered_bytes_per_sec / 1000.0,
        k.cap_bytes_per_sec / 1000,
        k.bytes_per_sec / 1000.0,
        k.ratio,
        k.sent,
        k.received,
        k.queue_drops,
        verdict(k.pass)
    ));
    let b = &c.bulk_tcp;
    s.push_str(&format!(
        "  bulk TCP ({}), reported: {:.0} KB/s through the cap = {:.3} × ({} queue drops)\n",
        b.congestion_control
            .as_deref()
            .unwrap_or("controller unknown"),
        b.bytes_per_sec / 1000.0,
        b.ratio,
        b.queue_drops,
    ));
    s
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}
