//! `keel-lab attack`: hostile peers against a running host (any keel host, in another process),
//! from the outside, with raw bytes: keel-wire frames and HTTP/1.1 written by hand
//! ([`wire`]), HTTP/2 with the `h2` crate's client.
//!
//! Every attack runs the same way: sample the host's RSS (with `--pid`), start the probe (a
//! well-behaved client calling every 100 ms on a new connection), wait 1 s, attack until done or
//! `--duration`, close every attacking connection, keep probing for `--settle` seconds, report.
//!
//! | attack | binding | what |
//! |---|---|---|
//! | `idle` | tcp, http | `--conns` connections (default 10,000), tcp after the keel-wire handshake, http after one `GET /Calculator` (the proof the host accepted it); held idle |
//! | `noread` | tcp | one connection (or `--conns`, sharing the flood) floods pings (`--frames ping`, `--bytes`, default 1 GiB) or `add` requests (`--frames request`, `--requests`, default 2,000,000) and never reads |
//! | `h2-partial` | http | one HTTP/2 connection, `--conns` streams (default 400), each `POST` announcing `--message-bytes` (4 MiB) and sending all but its last byte |
//! | `half-frame` | tcp, http | `--conns` connections (default 200), each sending all but the last byte of a `--message-bytes` (4 MiB) keel-wire frame, or HTTP/1.1 request body |
//! | `slowloris` | tcp, http | `--conns` connections (default 200), each sending one byte of a never-ending frame (tcp) or request head (http) every `--interval-ms` |
//! | `connect-burst` | tcp, http | `--conns` connects (default 3,000; `--in-flight` at once, default all), each then handshaking (tcp) or asking `GET /Calculator` (http) |
//!
//! The host *held* (exit 0) when the probe never failed during or after the attack, the host's
//! RSS grew by at most `--max-growth-mib`, and the attack was contained in its own terms:
//! noread: the host neither took the whole flood nor kept the connection open to the end;
//! h2-partial: every stream answered or the connection closed; half-frame, slowloris: every
//! attacking connection closed by the host; connect-burst: every connect and every answer
//! within 1 s.

mod floods;
mod h2_partial;
mod probe;
mod wire;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::{json, Value};

use crate::experiments::round1;
use probe::{Probe, ProbeCall};

/// Which hostile peer to play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// Many connections that stay idle (finding 1).
    Idle,
    /// A peer that sends and never reads (finding 2).
    Noread,
    /// Partial bodies on many HTTP/2 streams of one connection (finding 3).
    H2Partial,
    /// Connections that send all but the last byte of a large message (finding 4).
    HalfFrame,
    /// Connections that trickle a message that never ends, one byte at a time (finding 4).
    Slowloris,
    /// Many connects at once (finding 5).
    ConnectBurst,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Idle => "idle",
            Kind::Noread => "noread",
            Kind::H2Partial => "h2-partial",
            Kind::HalfFrame => "half-frame",
            Kind::Slowloris => "slowloris",
            Kind::ConnectBurst => "connect-burst",
        }
    }

    /// (connections or streams, attack duration in s) by default.
    fn defaults(self) -> (usize, f64) {
        match self {
            Kind::Idle => (10_000, 30.0),
            Kind::Noread => (1, 45.0),
            Kind::H2Partial => (400, 45.0),
            Kind::HalfFrame => (200, 45.0),
            Kind::Slowloris => (200, 45.0),
            Kind::ConnectBurst => (3_000, 30.0),
        }
    }
}

/// What `noread` floods with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Flood {
    /// Ping frames (the host answers each with a Pong).
    Ping,
    /// `Calculator.add(1, 2)` requests (the host answers each with a Reply).
    Request,
}

/// `keel-lab attack`'s options.
#[derive(Debug, Clone, Args)]
pub(crate) struct AttackArgs {
    /// The attack.
    #[arg(value_enum)]
    pub(crate) kind: Kind,
    /// The host: tcp://HOST:PORT (keel-wire) or http://HOST:PORT (HTTP/1.1, h2c).
    #[arg(long)]
    pub(crate) target: String,
    /// The host's process id, to sample its VmRSS from /proc/PID/status every 50 ms.
    #[arg(long)]
    pub(crate) pid: Option<u32>,
    /// Longest the attack runs, s (default: 30 for idle and connect-burst, 45 for the others).
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Attacking connections (h2-partial: streams). Default per attack, see the README.
    #[arg(long)]
    pub(crate) conns: Option<usize>,
    /// noread: what to send.
    #[arg(long, value_enum, default_value_t = Flood::Ping)]
    pub(crate) frames: Flood,
    /// noread --frames ping: bytes of pings to send at most.
    #[arg(long, default_value_t = 1 << 30)]
    pub(crate) bytes: u64,
    /// noread --frames request: requests to send at most.
    #[arg(long, default_value_t = 2_000_000)]
    pub(crate) requests: u64,
    /// half-frame, h2-partial: size of the message of which all but the last byte is sent
    /// (half-frame tcp: the whole frame, length prefix included; http: the body).
    #[arg(long, default_value_t = 4 << 20)]
    pub(crate) message_bytes: u64,
    /// connect-burst: connects in flight at once (1: one after the other; default: all at
    /// once).
    #[arg(long)]
    pub(crate) in_flight: Option<usize>,
    /// slowloris: ms between two bytes on a connection.
    #[arg(long, default_value_t = 1000)]
    pub(crate) interval_ms: u64,
    /// The probe's period, ms.
    #[arg(long, default_value_t = 100)]
    pub(crate) probe_ms: u64,
    /// After the attacking connections are closed, keep probing and sampling this long, s.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) settle: f64,
    /// The host held if its RSS grew by at most this much (MiB) over the attack.
    #[arg(long, default_value_t = 512)]
    pub(crate) max_growth_mib: u64,
}

/// The binding a target URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Scheme {
    /// keel-wire over TCP.
    Tcp,
    /// HTTP/1.1 or HTTP/2 (h2c).
    Http,
}

/// Where to attack.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) scheme: Scheme,
    pub(crate) addr: SocketAddr,
    /// `HOST:PORT` as given (the HTTP `Host`).
    pub(crate) authority: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> anyhow::Result<Target> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| anyhow!("`{url}`: expected tcp://HOST:PORT or http://HOST:PORT"))?;
        let scheme = match scheme {
            "tcp" => Scheme::Tcp,
            "http" => Scheme::Http,
            other => bail!("`{url}`: scheme `{other}` not supported (tcp or http)"),
        };
        let authority = rest.trim_end_matches('/').to_string();
        let addr = authority
            .to_socket_addrs()
            .with_context(|| format!("`{url}`: cannot resolve `{authority}`"))?
            .next()
            .ok_or_else(|| anyhow!("`{url}`: `{authority}` has no address"))?;
        Ok(Target {
            scheme,
            addr,
            authority,
        })
    }
}

/// What an attack needs, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) target: Target,
    pub(crate) conns: usize,
    pub(crate) frames: Flood,
    pub(crate) bytes: u64,
    pub(crate) requests: u64,
    pub(crate) message_bytes: u64,
    pub(crate) interval: Duration,
    /// connect-burst: connects in flight at once.
    pub(crate) in_flight: usize,
    /// When the attack stops (its connections are closed then at the latest).
    pub(crate) until: tokio::time::Instant,
}

/// Attacking connections, and which of them the host closed (times from the attack's start).
#[derive(Debug)]
pub(crate) struct Tracker {
    start: Instant,
    opened: AtomicUsize,
    closes: Mutex<Vec<f64>>,
}

impl Tracker {
    fn new(start: Instant) -> Tracker {
        Tracker {
            start,
            opened: AtomicUsize::new(0),
            closes: Mutex::new(Vec::new()),
        }
    }

    /// Seconds since the attack started.
    pub(crate) fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// An attacking connection is established.
    pub(crate) fn opened(&self) {
        self.opened.fetch_add(1, Ordering::Relaxed);
    }

    /// The host closed an attacking connection (call once per connection).
    pub(crate) fn host_closed(&self) {
        let t = self.now_s();
        self.closes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t);
    }

    /// Whether the host closed every attacking connection.
    pub(crate) fn all_closed(&self) -> bool {
        let closed = self.closes.lock().unwrap_or_else(|e| e.into_inner()).len();
        closed >= self.opened.load(Ordering::Relaxed)
    }

    fn report(&self) -> ConnsReport {
        let mut closes = self
            .closes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        closes.sort_by(f64::total_cmp);
        let opened = self.opened.load(Ordering::Relaxed);
        ConnsReport {
            opened,
            closed_by_host: closes.len(),
            first_close_s: closes.first().map(|t| round2(*t)),
            median_close_s: closes.get(closes.len() / 2).map(|t| round2(*t)),
            last_close_s: closes.last().map(|t| round2(*t)),
            open_at_end: opened.saturating_sub(closes.len()),
        }
    }
}

/// What one attack found besides the common measurements.
#[derive(Debug, Default)]
pub(crate) struct Details {
    /// Readable lines.
    pub(crate) lines: Vec<String>,
    /// The same, for the JSON report.
    pub(crate) json: serde_json::Map<String, Value>,
    /// Whether the attack was contained in the attack's own terms (e.g. the flood stalled).
    pub(crate) contained: Option<bool>,
}

impl Details {
    pub(crate) fn line(&mut self, s: impl Into<String>) {
        self.lines.push(s.into());
    }

    pub(crate) fn set(&mut self, key: &str, v: impl Serialize) {
        self.json.insert(
            key.to_string(),
            serde_json::to_value(v).unwrap_or(Value::Null),
        );
    }
}

/// Attacking connections and the host closing them.
#[derive(Debug, Serialize)]
pub(crate) struct ConnsReport {
    opened: usize,
    closed_by_host: usize,
    first_close_s: Option<f64>,
    median_close_s: Option<f64>,
    last_close_s: Option<f64>,
    open_at_end: usize,
}

/// The host's RSS.
#[derive(Debug, Serialize)]
pub(crate) struct RssReport {
    before_mib: f64,
    peak_mib: f64,
    peak_at_s: f64,
    after_mib: f64,
    /// (s since the attack started, MiB), one every 500 ms.
    samples: Vec<(f64, f64)>,
}

/// The probe's calls in one window.
#[derive(Debug, Serialize)]
pub(crate) struct ProbeWindow {
    ok: usize,
    failed: usize,
    max_ms: f64,
    p50_ms: f64,
    first_failure_s: Option<f64>,
    last_failure_s: Option<f64>,
    /// Failures by reason.
    errors: BTreeMap<String, usize>,
    /// Failed calls and calls slower than 100 ms: (s since the attack started, ms, error), the
    /// first 200.
    slow_or_failed: Vec<(f64, f64, Option<String>)>,
}

impl ProbeWindow {
    fn of(calls: &[&ProbeCall], t0: Instant) -> ProbeWindow {
        let mut ms: Vec<f64> = calls.iter().map(|c| c.took.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let failures: Vec<_> = calls.iter().filter(|c| c.error.is_some()).collect();
        let mut errors = BTreeMap::new();
        for c in &failures {
            *errors
                .entry(c.error.clone().unwrap_or_default())
                .or_insert(0) += 1;
        }
        let rel = |c: &&&ProbeCall| round2(signed_s(c.at, t0));
        let slow_or_failed = calls
            .iter()
            .filter(|c| c.error.is_some() || c.took >= Duration::from_millis(100))
            .take(200)
            .map(|c| {
                let ms = round1(c.took.as_secs_f64() * 1e3);
                (round2(signed_s(c.at, t0)), ms, c.error.clone())
            })
            .collect();
        ProbeWindow {
            ok: calls.len() - failures.len(),
            failed: failures.len(),
            max_ms: round1(ms.last().copied().unwrap_or(0.0)),
            p50_ms: round1(ms.get(ms.len() / 2).copied().unwrap_or(0.0)),
            first_failure_s: failures.first().map(rel),
            last_failure_s: failures.last().map(rel),
            errors,
            slow_or_failed,
        }
    }

    fn line(&self) -> String {
        let mut s = format!(
            "{} ok / {} failed, p50 {:.1} ms, max {:.1} ms",
            self.ok, self.failed, self.p50_ms, self.max_ms
        );
        if let (Some(a), Some(b)) = (self.first_failure_s, self.last_failure_s) {
            s += &format!(", failures from {a:.1} s to {b:.1} s");
            let reasons: Vec<String> = self
                .errors
                .iter()
                .map(|(e, n)| format!("{e} ×{n}"))
                .collect();
            s += &format!(" ({})", reasons.join(", "));
        }
        s
    }
}

/// The probe before, during and after the attack.
#[derive(Debug, Serialize)]
pub(crate) struct ProbeReport {
    baseline: ProbeWindow,
    during: ProbeWindow,
    after: ProbeWindow,
}

/// Everything one attack measured.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    attack: Kind,
    target: String,
    scheme: Scheme,
    pid: Option<u32>,
    params: Value,
    /// How long the attack ran, s (until its connections were closed).
    attack_s: f64,
    conns: ConnsReport,
    rss: Option<RssReport>,
    probe: ProbeReport,
    details: serde_json::Map<String, Value>,
    /// The probe never failed during or after the attack, RSS grew at most `max_growth_mib`,
    /// and the attack was contained in its own terms (see the README).
    pub(crate) held: bool,
}

/// Samples VmRSS of a process every 50 ms on a thread of its own.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(Instant, u64)>>,
}

impl RssSampler {
    fn start(pid: u32) -> anyhow::Result<RssSampler> {
        let path = format!("/proc/{pid}/status");
        read_rss_kib(&path).with_context(|| format!("cannot read VmRSS from {path}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rss".into())
            .spawn(move || {
                let mut samples = Vec::new();
                while !flag.load(Ordering::Relaxed) {
                    if let Some(kib) = read_rss_kib(&path) {
                        samples.push((Instant::now(), kib));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if let Some(kib) = read_rss_kib(&path) {
                    samples.push((Instant::now(), kib));
                }
                samples
            })?;
        Ok(RssSampler { stop, thread })
    }

    fn stop(self) -> Vec<(Instant, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

fn read_rss_kib(path: &str) -> Option<u64> {
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn signed_s(at: Instant, t0: Instant) -> f64 {
    if at >= t0 {
        (at - t0).as_secs_f64()
    } else {
        -(t0 - at).as_secs_f64()
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn mib(kib: u64) -> f64 {
    round1(kib as f64 / 1024.0)
}

/// Runs one attack; returns the report and its readable summary.
pub(crate) fn run(args: &AttackArgs) -> anyhow::Result<(Report, String)> {
    let target = Target::parse(&args.target)?;
    match (args.kind, target.scheme) {
        (Kind::Noread, Scheme::Http) => bail!("noread speaks keel-wire: give a tcp:// target"),
        (Kind::H2Partial, Scheme::Tcp) => bail!("h2-partial speaks HTTP/2: give an http:// target"),
        _ => {}
    }
    let (default_conns, default_duration) = args.kind.defaults();
    let conns = args.conns.unwrap_or(default_conns).max(1);
    let duration = Duration::from_secs_f64(args.duration.unwrap_or(default_duration).max(0.1));
    let params = json!({
        "conns": conns,
        "duration_s": duration.as_secs_f64(),
        "frames": args.frames,
        "bytes": args.bytes,
        "requests": args.requests,
        "message_bytes": args.message_bytes,
        "interval_ms": args.interval_ms,
        "in_flight": args.in_flight.unwrap_or(conns),
        "probe_ms": args.probe_ms,
        "settle_s": args.settle,
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let sampler = args.pid.map(RssSampler::start).transpose()?;
    let probe = Probe::start(&target, Duration::from_millis(args.probe_ms.max(1)));
    std::thread::sleep(Duration::from_secs(1));

    let t0 = Instant::now();
    let tracker = Arc::new(Tracker::new(t0));
    let details = runtime.block_on(async {
        let plan = Plan {
            target: target.clone(),
            conns,
            frames: args.frames,
            bytes: args.bytes,
            requests: args.requests,
            message_bytes: args.message_bytes.max(2),
            interval: Duration::from_millis(args.interval_ms.max(1)),
            in_flight: args.in_flight.unwrap_or(conns),
            until: tokio::time::Instant::now() + duration,
        };
        // The attacks stop at `until` on their own; this only guards against a stuck one.
        let attack = async {
            match args.kind {
                Kind::Idle => floods::idle(&plan, &tracker).await,
                Kind::Noread => floods::noread(&plan, &tracker).await,
                Kind::H2Partial => h2_partial::partial(&plan, &tracker).await,
                Kind::HalfFrame => floods::half_frame(&plan, &tracker).await,
                Kind::Slowloris => floods::slowloris(&plan, &tracker).await,
                Kind::ConnectBurst => floods::connect_burst(&plan, &tracker).await,
            }
        };
        tokio::time::timeout(duration + Duration::from_secs(30), attack)
            .await
            .map_err(|_| anyhow!("the attack did not stop within 30 s of its end"))?
    })?;
    let t_end = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.settle.max(0.0)));
    let calls = probe.stop();
    let samples = sampler.map(RssSampler::stop);
    runtime.shutdown_timeout(Duration::from_secs(1));

    let window = |from: Option<Instant>, to: Option<Instant>| {
        let picked: Vec<&ProbeCall> = calls
            .iter()
            .filter(|c| from.is_none_or(|f| c.at >= f) && to.is_none_or(|t| c.at < t))
            .collect();
        ProbeWindow::of(&picked, t0)
    };
    let probe = ProbeReport {
        baseline: window(None, Some(t0)),
        during: window(Some(t0), Some(t_end)),
        after: window(Some(t_end), None),
    };
    let rss = samples.filter(|s| !s.is_empty()).map(|s| {
        let before = s.iter().rev().find(|(t, _)| *t < t0).unwrap_or(&s[0]).1;
        let (peak_at, peak) = s
            .iter()
            .filter(|(t, _)| *t >= t0)
            .max_by_key(|(_, k)| *k)
            .copied()
            .unwrap_or(s[s.len() - 1]);
        let after = s[s.len() - 1].1;
        let mut every = Vec::new();
        let mut next = s[0].0;
        for (t, k) in &s {
            if *t >= next {
                every.push((round2(signed_s(*t, t0)), mib(*k)));
                next = *t + Duration::from_millis(500);
            }
        }
        RssReport {
            before_mib: mib(before),
            peak_mib: mib(peak),
            peak_at_s: round2(signed_s(peak_at, t0)),
            after_mib: mib(after),
            samples: every,
        }
    });
    let grew_ok = rss
        .as_ref()
        .is_none_or(|r| r.peak_mib - r.before_mib <= args.max_growth_mib as f64);
    let probe_ok = probe.during.failed == 0 && probe.after.failed == 0;
    let held = probe_ok && grew_ok && details.contained.unwrap_or(true);
    let report = Report {
        attack: args.kind,
        target: args.target.clone(),
        scheme: target.scheme,
        pid: args.pid,
        params,
        attack_s: round2((t_end - t0).as_secs_f64()),
        conns: tracker.report(),
        rss,
        probe,
        details: details.json.clone(),
        held,
    };
    let text = summary(&report, &details, args);
    Ok((report, text))
}

fn summary(r: &Report, d: &Details, args: &AttackArgs) -> String {
    let mut s = format!(
        "attack {} against {}{}: {:.1} s\n",
        r.attack.name(),
        r.target,
        r.pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        r.attack_s
    );
    for l in &d.lines {
        s += &format!("  {l}\n");
    }
    let c = &r.conns;
    s += &format!(
        "  host closed {} of {} attacking connections",
        c.closed_by_host, c.opened
    );
    if let (Some(a), Some(m), Some(b)) = (c.first_close_s, c.median_close_s, c.last_close_s) {
        s += &format!(" (first at {a:.1} s, median {m:.1} s, last {b:.1} s)");
    }
    s += &format!("; {} still open when the attack ended\n", c.open_at_end);
    match &r.rss {
        Some(m) => {
            s += &format!(
                "  host RSS: before {:.1} MiB, peak {:.1} MiB (at {:.1} s), after {:.1} MiB\n",
                m.before_mib, m.peak_mib, m.peak_at_s, m.after_mib
            )
        }
        None => s += "  host RSS: not sampled (no --pid)\n",
    }
    s += &format!(
        "  probe (new connection every {} ms) before: {}\n",
        args.probe_ms,
        r.probe.baseline.line()
    );
    s += &format!("  probe during: {}\n", r.probe.during.line());
    s += &format!("  probe after:  {}\n", r.probe.after.line());
    s += &format!(
        "  verdict: {}\n",
        if r.held {
            "the host held"
        } else {
            "the host did NOT hold"
        }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = Target::parse("tcp://127.0.0.1:7000").unwrap();
        assert_eq!((t.scheme, t.addr.port()), (Scheme::Tcp, 7000));
        let t = Target::parse("http://127.0.0.1:7001/").unwrap();
        assert_eq!(
            (t.scheme, t.authority.as_str()),
            (Scheme::Http, "127.0.0.1:7001")
        );
        assert!(Target::parse("https://127.0.0.1:1").is_err());
        assert!(Target::parse("127.0.0.1:1").is_err());
    }

    #[test]
    fn closes_are_summarised() {
        let t = Tracker::new(Instant::now());
        t.opened();
        t.opened();
        t.host_closed();
        let r = t.report();
        assert_eq!((r.opened, r.closed_by_host, r.open_at_end), (2, 1, 1));
        assert!(r.first_close_s.is_some());
    }
}
