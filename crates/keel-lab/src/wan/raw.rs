//! The limit of a link: the same bytes as a keel call, over plain TCP through the same proxy.
//! A request is an 8-byte length and the payload; the reply is the length again, followed by the
//! payload itself when it is small (an echo, like the small keel call). No framing beyond that,
//! no handshake, one connection.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Payloads up to this size are echoed back; larger ones are answered with their length only.
pub(crate) const ECHO_MAX: usize = 1024;

/// A raw TCP peer on a free loopback port, one thread per connection. Stops when dropped.
#[derive(Debug)]
pub(crate) struct RawServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl RawServer {
    /// Starts the peer on loopback.
    pub(crate) fn start() -> io::Result<RawServer> {
        RawServer::start_at(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// Starts the peer at `ip` (port 0).
    pub(crate) fn start_at(ip: IpAddr) -> io::Result<RawServer> {
        let listener = TcpListener::bind((ip, 0))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let accept = thread::Builder::new()
            .name("raw-accept".into())
            .spawn(move || {
                let _ = ready_tx.send(());
                for conn in listener.incoming() {
                    if st.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(s) = conn else { continue };
                    let _ = thread::Builder::new()
                        .name("raw-peer".into())
                        .spawn(move || {
                            let _ = serve(s);
                        });
                }
            })?;
        let _ = ready_rx.recv();
        Ok(RawServer {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(mut s: TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    let mut buf = Vec::new();
    loop {
        let mut len = [0u8; 8];
        match s.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let n = u64::from_be_bytes(len) as usize;
        buf.resize(n, 0);
        s.read_exact(&mut buf)?;
        let mut reply = len.to_vec();
        if n <= ECHO_MAX {
            reply.extend_from_slice(&buf);
        }
        s.write_all(&reply)?;
    }
}

/// A raw client's calls: the first (connect included) and a timed run of sequential calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RawRun {
    /// The first call of a fresh connection, connect included.
    pub(crate) first_call: Duration,
    /// Calls in the timed run (after the first).
    pub(crate) calls: u64,
    /// The timed run's duration.
    pub(crate) elapsed: Duration,
}

impl RawRun {
    /// Calls per second of the timed run.
    pub(crate) fn calls_per_sec(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }
}

/// One raw call on `s`: sends `payload`, reads the reply.
fn call(s: &mut TcpStream, payload: &[u8], reply: &mut Vec<u8>) -> io::Result<()> {
    let len = (payload.len() as u64).to_be_bytes();
    // One write: the length and the payload leave together, like one keel frame.
    let mut msg = Vec::with_capacity(8 + payload.len());
    msg.extend_from_slice(&len);
    msg.extend_from_slice(payload);
    s.write_all(&msg)?;
    let back = if payload.len() <= ECHO_MAX {
        8 + payload.len()
    } else {
        8
    };
    reply.resize(back, 0);
    s.read_exact(reply)?;
    if reply[..8] != len || (back > 8 && reply[8..] != *payload) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "wrong reply"));
    }
    Ok(())
}

/// Connects to `addr` (the proxy), makes one call (timed with the connect), then sequential
/// calls for `seconds` and at least `min_calls`.
pub(crate) fn run(
    addr: SocketAddr,
    payload: &[u8],
    seconds: f64,
    min_calls: u64,
) -> io::Result<RawRun> {
    let mut reply = Vec::new();
    let t = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    call(&mut s, payload, &mut reply)?;
    let first_call = t.elapsed();
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(seconds);
    let mut calls = 0;
    while calls < min_calls || Instant::now() < until {
        call(&mut s, payload, &mut reply)?;
        calls += 1;
    }
    let elapsed = start.elapsed();
    let _ = s.shutdown(Shutdown::Both);
    Ok(RawRun {
        first_call,
        calls,
        elapsed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_small_and_counts_large() {
        let server = RawServer::start().unwrap();
        let r = run(server.addr(), b"hi mom", 0.0, 3).unwrap();
        assert_eq!(r.calls, 3);
        let big = vec![7u8; 300_000];
        let r = run(server.addr(), &big, 0.0, 2).unwrap();
        assert_eq!(r.calls, 2);
        assert!(r.calls_per_sec() > 0.0);
    }
}
