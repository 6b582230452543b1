//! A latency-emulating TCP proxy: no netem on these machines, so the lab carries its own link.
//!
//! Each direction delays every chunk it reads by half the round-trip time, releasing chunks in
//! the order they were read (a chunk's delivery time never precedes the one before it, so
//! nothing is reordered). An optional cap per direction models a link of so many bytes/s: a
//! piece waits for the link to finish the pieces before it, then travels (a token bucket one
//! piece deep). A new connection's upstream connect waits one RTT, and nothing the client sent
//! is forwarded before then: on loopback a proxy would otherwise hide the TCP handshake.
//!
//! The proxy reads eagerly: it emulates delay and bandwidth, not TCP's congestion window, so
//! the flow control a protocol adds on top of TCP (stream windows, handshakes) is what shows.
//!
//! Threads, not tokio tasks: tokio's timer rounds every deadline up to a whole millisecond,
//! which at 1 ms RTT would add up to 2 ms per round trip. Each connection has four plain
//! threads (read and deliver, each way); a deliverer sleeps until a chunk's time, less what its
//! sleeps have been overshooting lately (Linux adds ~50 µs of timer slack, plus the wake-up),
//! then yields until the time comes. The proxy is meant for the handful of connections of one
//! experiment.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Largest piece the link delivers at once when capped (smaller pieces: a smoother link).
const PIECE: usize = 16 * 1024;
/// Read buffer per direction.
const READ_BUF: usize = 64 * 1024;

/// How the emulated link behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LinkConfig {
    /// Round-trip time: each direction is delayed by half of it.
    pub(crate) rtt: Duration,
    /// Bandwidth cap of each direction, bytes/s (`None`: no cap).
    pub(crate) bytes_per_sec: Option<u64>,
    /// How long a new connection waits before its upstream connect (one RTT: the TCP handshake).
    pub(crate) connect_delay: Duration,
}

impl LinkConfig {
    /// A link of `rtt`, uncapped, with a handshake of one RTT.
    pub(crate) fn new(rtt: Duration) -> LinkConfig {
        LinkConfig {
            rtt,
            bytes_per_sec: None,
            connect_delay: rtt,
        }
    }

    /// The same link capped at `bytes_per_sec` each way (`None` or 0: no cap).
    pub(crate) fn with_cap(self, bytes_per_sec: Option<u64>) -> LinkConfig {
        LinkConfig {
            bytes_per_sec: bytes_per_sec.filter(|&b| b > 0),
            ..self
        }
    }
}

/// One direction of the link: when bytes handed to it arrive at the far end. Pure (no clock).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    one_way: Duration,
    bytes_per_sec: Option<u64>,
    /// When the link finishes sending what it already carries (capped links only).
    free_at: Option<Instant>,
}

impl Line {
    /// One direction of `link`.
    pub(crate) fn new(link: &LinkConfig) -> Line {
        Line {
            one_way: link.rtt / 2,
            bytes_per_sec: link.bytes_per_sec,
            free_at: None,
        }
    }

    /// When `n` bytes handed to the link at `sent` arrive. Calls must come in the bytes' order
    /// with `sent` never decreasing; the results then never decrease either.
    pub(crate) fn deliver_at(&mut self, sent: Instant, n: usize) -> Instant {
        match self.bytes_per_sec {
            None => sent + self.one_way,
            Some(rate) => {
                let start = self.free_at.map_or(sent, |f| f.max(sent));
                let done = start + Duration::from_secs_f64(n as f64 / rate as f64);
                self.free_at = Some(done);
                done + self.one_way
            }
        }
    }

    /// The size of the pieces a chunk is delivered in.
    fn piece(&self) -> usize {
        if self.bytes_per_sec.is_some() {
            PIECE
        } else {
            usize::MAX
        }
    }
}

/// What a reader hands to its direction's deliverer.
enum Piece {
    /// Bytes, and when they were read.
    Data(Instant, Vec<u8>),
    /// The sender closed its side (FIN): forward it after the data.
    End,
    /// The connection broke.
    Failed,
}

#[derive(Debug, Default)]
struct Shared {
    accepted: AtomicU64,
    stop: AtomicBool,
    /// Every socket of every connection, to shut them down when the proxy stops.
    sockets: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn keep(&self, s: &TcpStream) {
        if let Ok(c) = s.try_clone() {
            self.sockets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(c);
        }
    }
}

/// A running proxy: listens on a loopback port, forwards every connection to `upstream` through
/// the emulated link. Stops (and cuts every connection) when dropped.
#[derive(Debug)]
pub(crate) struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port in front of `upstream`.
    pub(crate) fn start(upstream: SocketAddr, link: LinkConfig) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let (ready_tx, ready_rx) = mpsc::channel();
        let accept = thread::Builder::new()
            .name("wan-accept".into())
            .spawn(move || {
                let _ = ready_tx.send(());
                accept_loop(listener, upstream, link, sh)
            })?;
        // A connection's handshake RTT counts from its accept: have the accept thread running
        // before anyone connects, so that its start-up is not counted as well.
        let _ = ready_rx.recv();
        Ok(Proxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// Where clients connect.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        for s in self
            .shared
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: TcpListener, upstream: SocketAddr, link: LinkConfig, sh: Arc<Shared>) {
    for conn in listener.incoming() {
        let accepted_at = Instant::now();
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = conn else { continue };
        sh.accepted.fetch_add(1, Ordering::SeqCst);
        let sh = sh.clone();
        let _ = thread::Builder::new()
            .name("wan-conn".into())
            .spawn(move || connection(client, upstream, link, accepted_at, sh));
    }
}

/// One proxied connection; this thread ends up delivering the upstream direction.
fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    link: LinkConfig,
    accepted_at: Instant,
    sh: Arc<Shared>,
) {
    let _ = client.set_nodelay(true);
    sh.keep(&client);
    let Ok(client_r) = client.try_clone() else {
        return;
    };
    let (up_tx, up_rx) = mpsc::channel();
    if spawn("wan-up-read", move || read_into(client_r, up_tx)).is_err() {
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    // The handshake: nothing reaches the host before one RTT has passed.
    let open_at = accepted_at + link.connect_delay;
    sleep_until(open_at);
    let server = match TcpStream::connect(upstream) {
        Ok(s) => s,
        Err(_) => {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
    };
    let _ = server.set_nodelay(true);
    sh.keep(&server);
    let clones = (
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
    );
    let (Ok(server_r), Ok(client_w), Ok(server_x), Ok(client_x)) = clones else {
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
        return;
    };
    let (down_tx, down_rx) = mpsc::channel();
    let started = spawn("wan-down-read", move || read_into(server_r, down_tx)).and_then(|_| {
        spawn("wan-down-send", move || {
            deliver(down_rx, client_w, server_x, Line::new(&link), None)
        })
    });
    if started.is_err() {
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
        return;
    }
    deliver(up_rx, server, client_x, Line::new(&link), Some(open_at));
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
}

/// Reads `from` until it ends, stamping each chunk with the time it was read.
fn read_into(mut from: TcpStream, tx: mpsc::Sender<Piece>) {
    let mut buf = vec![0u8; READ_BUF];
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = tx.send(Piece::End);
                return;
            }
            Ok(n) => {
                if tx
                    .send(Piece::Data(Instant::now(), buf[..n].to_vec()))
                    .is_err()
                {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                let _ = tx.send(Piece::Failed);
                return;
            }
        }
    }
}

/// Writes each chunk to `to` when the link delivers it (never before `not_before`, the end of the
/// handshake); forwards the end, or cuts both sockets when either side broke.
fn deliver(
    rx: mpsc::Receiver<Piece>,
    mut to: TcpStream,
    from: TcpStream,
    mut line: Line,
    not_before: Option<Instant>,
) {
    let mut clock = Clock::default();
    let cut = |to: &TcpStream| {
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    };
    for piece in rx {
        match piece {
            Piece::Data(read_at, bytes) => {
                let sent = not_before.map_or(read_at, |t| t.max(read_at));
                for part in bytes.chunks(line.piece()) {
                    clock.wait_until(line.deliver_at(sent, part.len()));
                    if to.write_all(part).is_err() {
                        cut(&to);
                        return;
                    }
                }
            }
            Piece::End => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Piece::Failed => {
                cut(&to);
                return;
            }
        }
    }
    cut(&to);
}

/// Waits until an instant precisely: sleeps until a little before it (what the sleeps have been
/// overshooting lately), then yields until it comes.
#[derive(Debug)]
pub(crate) struct Clock {
    /// Recent overshoot of a sleep, ns (an exponentially weighted average).
    overshoot_ns: f64,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock {
            overshoot_ns: 60_000.0,
        }
    }
}

impl Clock {
    /// The most a sleep is assumed to overshoot.
    const MAX_OVERSHOOT_NS: f64 = 500_000.0;

    pub(crate) fn wait_until(&mut self, t: Instant) {
        let now = Instant::now();
        if t <= now {
            return;
        }
        let early = Duration::from_nanos(self.overshoot_ns as u64);
        if t - now > early {
            let wake = t - early;
            thread::sleep(wake - now);
            let over = Instant::now().saturating_duration_since(wake).as_nanos() as f64;
            self.overshoot_ns = (0.8 * self.overshoot_ns + 0.2 * over).min(Self::MAX_OVERSHOOT_NS);
        }
        while Instant::now() < t {
            thread::yield_now();
        }
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

#[cfg(test)]
mod tests {
    //! Behaviour only: bytes intact and in order, the count, delays at least the setting. The
    //! accuracy of the delays is measured by `keel-lab wan-proxy-check`, not here.

    use super::*;

    /// An echo server: every connection echoes until its peer closes, then closes.
    fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                thread::spawn(move || {
                    let mut r = s.try_clone().unwrap();
                    let _ = io::copy(&mut r, &mut s);
                    let _ = s.shutdown(Shutdown::Write);
                });
            }
        });
        addr
    }

    fn pattern(n: usize) -> Vec<u8> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Sends `data` in uneven writes through the proxy and reads the echo to its end.
    fn round_trip(proxy: &Proxy, data: &[u8]) -> Vec<u8> {
        let mut c = TcpStream::connect(proxy.addr()).unwrap();
        let mut r = c.try_clone().unwrap();
        let reader = thread::spawn(move || {
            let mut got = Vec::new();
            r.read_to_end(&mut got).unwrap();
            got
        });
        let mut at = 0;
        let mut step = 1;
        while at < data.len() {
            let n = step.min(data.len() - at);
            c.write_all(&data[at..at + n]).unwrap();
            at += n;
            step = step * 7 % 40_009 + 1;
        }
        c.shutdown(Shutdown::Write).unwrap();
        reader.join().unwrap()
    }

    #[test]
    fn bytes_arrive_intact_and_in_order() {
        let data = pattern(600_000);
        let proxy = Proxy::start(echo_server(), LinkConfig::new(Duration::from_millis(2))).unwrap();
        assert!(round_trip(&proxy, &data) == data);
        // Capped (fast, so the test stays short): pieces still arrive whole and in order.
        let capped = LinkConfig::new(Duration::from_millis(2)).with_cap(Some(50_000_000));
        let proxy = Proxy::start(echo_server(), capped).unwrap();
        assert!(round_trip(&proxy, &data) == data);
        assert_eq!(proxy.accepted(), 1);
    }

    #[test]
    fn counts_the_connections_it_accepted() {
        let proxy = Proxy::start(echo_server(), LinkConfig::new(Duration::ZERO)).unwrap();
        assert_eq!(proxy.accepted(), 0);
        let conns: Vec<_> = (0..3)
            .map(|_| TcpStream::connect(proxy.addr()).unwrap())
            .collect();
        // Each answers once its connection is through, so all three were accepted.
        for mut c in conns {
            c.write_all(b"x").unwrap();
            let mut b = [0u8; 1];
            c.read_exact(&mut b).unwrap();
        }
        assert_eq!(proxy.accepted(), 3);
    }

    #[test]
    fn delays_are_at_least_the_setting() {
        let rtt = Duration::from_millis(30);
        let proxy = Proxy::start(echo_server(), LinkConfig::new(rtt)).unwrap();
        let t = Instant::now();
        let mut c = TcpStream::connect(proxy.addr()).unwrap();
        c.set_nodelay(true).unwrap();
        let mut b = [0u8; 8];
        c.write_all(b"12345678").unwrap();
        c.read_exact(&mut b).unwrap();
        // A new connection: the handshake's RTT, then the round trip.
        assert!(t.elapsed() >= 2 * rtt, "{:?}", t.elapsed());
        for _ in 0..3 {
            let t = Instant::now();
            c.write_all(b"abcdefgh").unwrap();
            c.read_exact(&mut b).unwrap();
            assert!(t.elapsed() >= rtt, "{:?}", t.elapsed());
            assert_eq!(&b, b"abcdefgh");
        }
    }

    #[test]
    fn a_capped_line_serialises_pieces() {
        let t0 = Instant::now();
        let link = LinkConfig::new(Duration::from_millis(100)).with_cap(Some(1000));
        let mut line = Line::new(&link);
        // 500 bytes at 1000 B/s: 0.5 s on the link, then 50 ms of travel.
        assert_eq!(line.deliver_at(t0, 500), t0 + Duration::from_millis(550));
        // Sent while the link is still busy: waits for it.
        assert_eq!(
            line.deliver_at(t0 + Duration::from_millis(100), 100),
            t0 + Duration::from_millis(650)
        );
        // Sent after the link went idle: no wait.
        assert_eq!(
            line.deliver_at(t0 + Duration::from_secs(2), 1000),
            t0 + Duration::from_millis(3050)
        );
        let mut free = Line::new(&LinkConfig::new(Duration::from_millis(100)));
        assert_eq!(free.deliver_at(t0, 1 << 30), t0 + Duration::from_millis(50));
        // No cap at 0.
        assert_eq!(
            LinkConfig::new(Duration::ZERO)
                .with_cap(Some(0))
                .bytes_per_sec,
            None
        );
    }

    #[test]
    fn deliveries_never_go_backwards() {
        let t0 = Instant::now();
        for cap in [None, Some(10_000)] {
            let mut line = Line::new(&LinkConfig::new(Duration::from_millis(20)).with_cap(cap));
            let mut last = t0;
            for i in 0..100u64 {
                let at =
                    line.deliver_at(t0 + Duration::from_micros(i * 37), (i as usize * 13) % 900);
                assert!(at >= last);
                last = at;
            }
        }
    }

    #[test]
    fn an_unreachable_upstream_closes_the_client() {
        // A port with nothing listening: bind, learn it, close.
        let dead = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let proxy = Proxy::start(dead, LinkConfig::new(Duration::ZERO)).unwrap();
        let mut c = TcpStream::connect(proxy.addr()).unwrap();
        let mut b = Vec::new();
        // Ends (EOF or reset) instead of hanging.
        let _ = c.read_to_end(&mut b);
        assert!(b.is_empty());
    }
}
