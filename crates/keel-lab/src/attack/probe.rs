//! The well-behaved client: on a thread of its own with blocking sockets (so the attack's
//! runtime cannot delay it), every period it opens a new connection, makes one call
//! (`Calculator.add(1, 2)`; keel-wire by hand, or HTTP/1.1 `POST /Calculator/add`) and closes.
//! A call is ok when the host answers it `ok` (HTTP 200) within the probe's timeout.

use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::wire::{self, Timed};
use super::{Scheme, Target};

/// How long one probe call (connect, handshake, answer) may take before it counts as failed.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One probe call.
#[derive(Debug, Clone)]
pub(crate) struct ProbeCall {
    /// When it started.
    pub(crate) at: Instant,
    /// How long it took (up to the timeout).
    pub(crate) took: Duration,
    /// `None` when ok, else why not.
    pub(crate) error: Option<String>,
}

/// A running probe; [`Probe::stop`] returns its calls.
#[derive(Debug)]
pub(crate) struct Probe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<ProbeCall>>,
}

impl Probe {
    /// Starts calling `target` every `period`.
    pub(crate) fn start(target: &Target, period: Duration) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, target) = (stop.clone(), target.clone());
        let thread = std::thread::Builder::new()
            .name("probe".into())
            .spawn(move || {
                let mut calls = Vec::new();
                let mut next = Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let error = call(&target).err();
                    calls.push(ProbeCall {
                        at,
                        took: at.elapsed(),
                        error,
                    });
                    next += period;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
                calls
            })
            .expect("spawn the probe thread");
        Probe { stop, thread }
    }

    /// Stops the probe; its calls in order.
    pub(crate) fn stop(self) -> Vec<ProbeCall> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One call on a new connection; `Err` says why it failed, in a few words.
fn call(target: &Target) -> Result<(), String> {
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let mut s = connect(target.addr).map_err(|e| format!("connect: {}", short(&e)))?;
    let _ = s.set_nodelay(true);
    let mut t = Timed {
        s: &mut s,
        deadline,
    };
    match target.scheme {
        Scheme::Tcp => call_wire(&mut t),
        Scheme::Http => call_http(&mut t, &target.authority),
    }
}

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)
}

fn call_wire(t: &mut Timed<'_>) -> Result<(), String> {
    t.write_all(&wire::hello())
        .map_err(|e| format!("hello: {}", short(&e)))?;
    let mut tag = [0u8; 1];
    t.read_exact(&mut tag)
        .map_err(|e| format!("handshake: {}", short(&e)))?;
    if tag[0] != 0 {
        return Err("handshake rejected".into());
    }
    let mut rest = [0u8; 6];
    t.read_exact(&mut rest)
        .map_err(|e| format!("handshake: {}", short(&e)))?;
    let mut req = Vec::new();
    wire::add_request(1, &mut req);
    t.write_all(&req)
        .map_err(|e| format!("request: {}", short(&e)))?;
    loop {
        let mut len = [0u8; 4];
        t.read_exact(&mut len)
            .map_err(|e| format!("reply: {}", short(&e)))?;
        let len = u32::from_le_bytes(len) as usize;
        if len == 0 || len > (8 << 20) {
            return Err(format!("reply: bad frame length {len}"));
        }
        let mut frame = vec![0u8; len];
        t.read_exact(&mut frame)
            .map_err(|e| format!("reply: {}", short(&e)))?;
        match frame[0] {
            wire::REPLY if len >= 10 && frame[1..9] == 1u64.to_le_bytes() => {
                return match frame[9] {
                    0 => Ok(()),
                    status => Err(format!("reply status {}", status_name(status))),
                };
            }
            wire::GO_AWAY => return Err("goaway".into()),
            _ => {} // the host's Ping, and anything else: not the answer
        }
    }
}

fn call_http(t: &mut Timed<'_>, authority: &str) -> Result<(), String> {
    let body = br#"{"a":1,"b":2}"#;
    let mut req = wire::http_post_head(authority, body.len() as u64, true).into_bytes();
    req.extend_from_slice(body);
    t.write_all(&req)
        .map_err(|e| format!("request: {}", short(&e)))?;
    // Connection: close, so the answer ends with the connection (or its Content-Length).
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(status) = wire::http_status(&buf) {
            if let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                if status != 200 {
                    return Err(format!("HTTP {status}"));
                }
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                if length.is_some_and(|n| buf.len() >= head_end + 4 + n) {
                    return Ok(());
                }
            }
        }
        match t.read(&mut chunk) {
            Ok(0) => {
                return match wire::http_status(&buf) {
                    Some(200) => Ok(()),
                    Some(s) => Err(format!("HTTP {s}")),
                    None if buf.is_empty() => Err("closed without an answer".into()),
                    None => Err("truncated answer".into()),
                }
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("answer: {}", short(&e))),
        }
    }
}

/// An I/O error in a few words.
pub(crate) fn short(e: &io::Error) -> String {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => "timed out".into(),
        ErrorKind::UnexpectedEof => "closed by the host".into(),
        ErrorKind::ConnectionRefused => "refused".into(),
        ErrorKind::ConnectionReset => "reset by the host".into(),
        ErrorKind::BrokenPipe => "broken pipe".into(),
        _ => e.to_string(),
    }
}

/// The name of a keel status value (PROTOCOL.md, "Reply status values").
fn status_name(s: u8) -> &'static str {
    const NAMES: [&str; 12] = [
        "ok",
        "fault",
        "unknown_service",
        "unknown_operation",
        "bad_request",
        "too_large",
        "busy",
        "deadline_exceeded",
        "cancelled",
        "shutting_down",
        "handler_panicked",
        "internal",
    ];
    NAMES.get(usize::from(s)).copied().unwrap_or("unknown")
}
