//! Issue 10, item 6: soak. A host in a child process (so that its `VmRSS` is its own) serves a
//! mixed load below its capacity for minutes: sync and async calls (Calculator `add`,
//! `multiply`), a blocking operation that sleeps (the lab's `work`), typed faults provoked on
//! purpose (`divide` by zero, checked for the right fault), streamed uploads and downloads
//! (Transfer), and reconnects (half of the clients close their channel, or drop it for a new
//! one, every few seconds). Every interval it prints the calls, the errors by kind, the p99 over
//! the interval and the host's RSS; at the end, the RSS at the end of warm-up against the RSS at
//! the end.
//!
//! Errors are answers the load did not ask for: a provoked fault is not an error, a missing or
//! wrong one is; Busy is an error (the load stays below capacity); so are wrong results, short
//! streams, and connections the host still holds after every client closed.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_examples::calculator::{CalculatorClient, DivideByZero};
use keel_examples::transfer::{self, TransferClient};
use serde::Serialize;

use super::{round1, Binding, Latencies};
use crate::child::{ChildHost, HostArgs};
use crate::lab_service::LabClient;
use crate::verdict::{self, Verdict};

/// The operation mix, one entry per call in a cycle of 20.
const MIX: [Op; 20] = [
    Op::Add,
    Op::Multiply,
    Op::Add,
    Op::Multiply,
    Op::DivideByZero,
    Op::Add,
    Op::Work,
    Op::Multiply,
    Op::Divide,
    Op::Upload,
    Op::Add,
    Op::Multiply,
    Op::Add,
    Op::Work,
    Op::DivideByZero,
    Op::Multiply,
    Op::Add,
    Op::Divide,
    Op::Multiply,
    Op::Download,
];
/// What `work` sleeps in the mix, µs.
const WORK_US: u64 = 500;
/// How long the host may take to notice the clients' connections closed at the end.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Add,
    Multiply,
    Divide,
    DivideByZero,
    Work,
    Upload,
    Download,
}

/// Settings of the soak.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Params {
    /// The transport.
    pub(crate) binding: Binding,
    /// How long the load runs, s.
    pub(crate) seconds: f64,
    /// Seconds between progress lines.
    pub(crate) interval_secs: f64,
    /// Concurrent clients, each with its own channel.
    pub(crate) clients: usize,
    /// Calls per second, all clients together (paced, below the host's capacity).
    pub(crate) rate: f64,
    /// Bytes of each streamed upload and download.
    pub(crate) stream_bytes: u64,
    /// How often each reconnecting client (every other one) reconnects, s.
    pub(crate) reconnect_secs: f64,
}

impl Params {
    /// The defaults of `keel-lab soak`: 8 clients, 2,000 calls/s, 256 KiB streams, reconnects
    /// every 5 s, a line every 10 s.
    pub(crate) fn defaults(binding: Binding, seconds: f64) -> Params {
        Params {
            binding,
            seconds,
            interval_secs: 10.0,
            clients: 8,
            rate: 2000.0,
            stream_bytes: 256 * 1024,
            reconnect_secs: 5.0,
        }
    }

    /// The warm-up whose end gives the baseline RSS: a tenth of the run, 5–60 s (never more
    /// than half the run).
    pub(crate) fn warmup_secs(&self) -> f64 {
        (self.seconds / 10.0)
            .clamp(5.0, 60.0)
            .min(self.seconds / 2.0)
    }
}

/// Counters of one interval (and, added up, of the run).
#[derive(Debug)]
struct Counters {
    calls: u64,
    faults_expected: u64,
    streams: u64,
    reconnects: u64,
    errors: BTreeMap<String, u64>,
    unary: Latencies,
    stream: Latencies,
}

impl Counters {
    fn new() -> Counters {
        Counters {
            calls: 0,
            faults_expected: 0,
            streams: 0,
            reconnects: 0,
            errors: BTreeMap::new(),
            unary: Latencies::new(),
            stream: Latencies::new(),
        }
    }
}

/// One progress line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Interval {
    /// Since the start of the load, s.
    pub(crate) t_secs: f64,
    /// Calls completed in the interval (faults included).
    pub(crate) calls: u64,
    /// Faults provoked on purpose and received as expected.
    pub(crate) faults_expected: u64,
    /// Streamed calls (upload or download) in the interval.
    pub(crate) streams: u64,
    /// Reconnects in the interval.
    pub(crate) reconnects: u64,
    /// Errors by kind.
    pub(crate) errors: BTreeMap<String, u64>,
    /// p99 of the unary calls in the interval, ms.
    pub(crate) p99_ms: f64,
    /// p99 of the streamed calls in the interval, ms.
    pub(crate) stream_p99_ms: f64,
    /// The host's RSS at the end of the interval, KiB.
    pub(crate) host_rss_kib: u64,
}

/// What the soak measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Soak {
    /// `soak`.
    pub(crate) scenario: &'static str,
    /// The settings.
    pub(crate) params: Params,
    /// How long the warm-up was, s.
    pub(crate) warmup_secs: f64,
    /// Every progress line.
    pub(crate) intervals: Vec<Interval>,
    /// Calls completed.
    pub(crate) calls: u64,
    /// Streamed calls.
    pub(crate) streams: u64,
    /// Faults provoked and received as expected (not errors).
    pub(crate) faults_expected: u64,
    /// Reconnects.
    pub(crate) reconnects: u64,
    /// Unexplained errors.
    pub(crate) errors: u64,
    /// Them, by kind.
    pub(crate) error_kinds: BTreeMap<String, u64>,
    /// p99 of every unary call, ms.
    pub(crate) p99_ms: f64,
    /// The host's RSS at the end of warm-up, KiB.
    pub(crate) rss_warm_kib: u64,
    /// The host's RSS at the end of the load (the last sample, clients still calling), KiB.
    pub(crate) rss_end_kib: u64,
    /// The host's RSS after every client closed (information), KiB.
    pub(crate) rss_after_close_kib: u64,
    /// The host's peak RSS (`VmHWM`) over the whole run, KiB.
    pub(crate) rss_peak_kib: u64,
    /// `rss_end_kib − rss_warm_kib` (may be negative), KiB.
    pub(crate) rss_growth_kib: i64,
    /// The most growth that counts as flat, KiB: 10 % of the warm-up RSS.
    pub(crate) rss_limit_kib: u64,
    /// The rule behind `rss_limit_kib`, in words.
    pub(crate) rss_rule: &'static str,
    /// The host's anonymous memory (`RssAnon`: heap, stacks) at the end of warm-up and at the
    /// end, KiB (information: `VmRSS` also counts file pages, which the kernel may drop).
    pub(crate) rss_anon_kib: (u64, u64),
    /// The machine's 1-minute load average at the start and at the end (other work on it).
    pub(crate) loadavg: (f64, f64),
    /// Whether the RSS stayed flat.
    pub(crate) rss_flat: bool,
    /// Least-squares slope of the RSS samples after warm-up, KiB per minute (information).
    pub(crate) rss_slope_kib_per_min: f64,
    /// Connections the host had seen opened, and still open after every client closed.
    pub(crate) host_connections_opened: u64,
    /// Connections the host still held after every client closed (and a grace period).
    pub(crate) host_connections_left: usize,
    /// Whether the soak passed.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

enum Outcome {
    Unary,
    Stream,
    Fault,
    Error(String),
}

/// The clients of one worker over one channel.
struct Clients {
    channel: keel::Channel,
    calc: CalculatorClient,
    xfer: TransferClient,
    lab: LabClient,
}

impl Clients {
    fn new(url: &str) -> Result<Clients, keel::Error> {
        let channel = keel::Channel::builder(url)
            .deadline(Duration::from_secs(30))
            .build()?;
        Ok(Clients {
            calc: CalculatorClient::new(channel.clone()),
            xfer: TransferClient::new(channel.clone()),
            lab: LabClient::new(channel.clone()),
            channel,
        })
    }
}

async fn call(c: &Clients, op: Op, n: u64, stream_bytes: u64) -> Outcome {
    let x = (n % 1000) as f64;
    let check = |ok: bool| {
        if ok {
            Outcome::Unary
        } else {
            Outcome::Error("wrong_result".to_string())
        }
    };
    let kind = |e: keel::Error| Outcome::Error(super::error_kind(&e));
    match op {
        Op::Add => c
            .calc
            .add(x, 2.0)
            .await
            .map_or_else(kind, |v| check(v == x + 2.0)),
        Op::Multiply => c
            .calc
            .multiply(x, 3.0)
            .await
            .map_or_else(kind, |v| check(v == x * 3.0)),
        Op::Divide => c
            .calc
            .divide(x, 4.0)
            .await
            .map_or_else(kind, |v| check(v == x / 4.0)),
        Op::DivideByZero => match c.calc.divide(x, 0.0).await {
            Ok(_) => Outcome::Error("fault_missing".to_string()),
            Err(e) => match e.fault::<DivideByZero>() {
                Some(f) if f.dividend == x => Outcome::Fault,
                Some(_) => Outcome::Error("fault_wrong".to_string()),
                None => kind(e),
            },
        },
        Op::Work => c
            .lab
            .work(WORK_US)
            .await
            .map_or_else(kind, |v| check(v == WORK_US)),
        Op::Upload => match c.xfer.upload(transfer::zeros(stream_bytes)).await {
            Ok(got) if got == stream_bytes => Outcome::Stream,
            Ok(_) => Outcome::Error("stream_short".to_string()),
            Err(e) => kind(e),
        },
        Op::Download => match c.xfer.download(stream_bytes).await {
            Ok(mut s) => {
                let mut got = 0u64;
                while let Some(chunk) = s.next().await {
                    match chunk {
                        Ok(b) => got += b.len() as u64,
                        Err(e) => return kind(e),
                    }
                }
                if got == stream_bytes {
                    Outcome::Stream
                } else {
                    Outcome::Error("stream_short".to_string())
                }
            }
            Err(e) => kind(e),
        },
    }
}

/// One client: paced calls from the mix until `end`; every other client reconnects every
/// `reconnect_secs`, alternately closing its channel (the next call reconnects) and replacing
/// it with a new one.
async fn worker(i: usize, url: String, p: Params, end: Instant, counters: Arc<Mutex<Counters>>) {
    let lock = || counters.lock().unwrap_or_else(|e| e.into_inner());
    let mut clients = match Clients::new(&url) {
        Ok(c) => c,
        Err(e) => {
            *lock()
                .errors
                .entry(format!("setup_{}", super::error_kind(&e)))
                .or_default() += 1;
            return;
        }
    };
    let per_client = p.rate / p.clients as f64;
    let reconnect_every = Duration::from_secs_f64(p.reconnect_secs);
    let start = tokio::time::Instant::now();
    // Clients start spread over one pacing period, and the reconnecting ones over one
    // reconnect period.
    let offset = Duration::from_secs_f64(i as f64 / p.clients as f64 / per_client);
    let mut next_reconnect =
        Instant::now() + reconnect_every.mul_f64((i + 1) as f64 / p.clients as f64);
    let mut replace = false;
    let mut n = 0u64;
    while Instant::now() < end {
        if i % 2 == 1 && Instant::now() >= next_reconnect {
            if replace {
                match Clients::new(&url) {
                    Ok(c) => clients = c,
                    Err(e) => {
                        *lock()
                            .errors
                            .entry(format!("setup_{}", super::error_kind(&e)))
                            .or_default() += 1;
                    }
                }
            } else {
                clients.channel.close().await;
            }
            replace = !replace;
            lock().reconnects += 1;
            next_reconnect += reconnect_every;
        }
        let op = MIX[((n + i as u64) % MIX.len() as u64) as usize];
        let t0 = Instant::now();
        let outcome = call(&clients, op, n, p.stream_bytes).await;
        let took = t0.elapsed();
        {
            let mut c = lock();
            c.calls += 1;
            match outcome {
                Outcome::Unary => c.unary.record(took),
                Outcome::Stream => {
                    c.streams += 1;
                    c.stream.record(took);
                }
                Outcome::Fault => {
                    c.faults_expected += 1;
                    c.unary.record(took);
                }
                Outcome::Error(k) => *c.errors.entry(k).or_default() += 1,
            }
        }
        n += 1;
        let at = start + offset + Duration::from_secs_f64(n as f64 / per_client);
        tokio::time::sleep_until(at).await;
    }
    clients.channel.close().await;
}

/// Least-squares slope of `(t_secs, kib)` points, KiB per minute; 0 for fewer than 2 points.
pub(crate) fn slope_per_min(points: &[(f64, u64)]) -> f64 {
    if points.len() < 2 {
        return 0.0;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1 as f64).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 as f64 - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        round1(sxy / sxx * 60.0)
    }
}

/// One progress line, as printed.
pub(crate) fn interval_line(iv: &Interval, interval_secs: f64) -> String {
    let errors: u64 = iv.errors.values().sum();
    let mut s = format!(
        "  t={:>5.0} s  calls {:>6} ({:>5.0}/s)  errors {:>3}  faults {:>5} (provoked)  p99 {:>6.3} ms  streams {:>4} p99 {:>7.3} ms  reconnects {:>3}  host RSS {:>6.1} MiB",
        iv.t_secs,
        iv.calls,
        iv.calls as f64 / interval_secs.max(1e-9),
        errors,
        iv.faults_expected,
        iv.p99_ms,
        iv.streams,
        iv.stream_p99_ms,
        iv.reconnects,
        iv.host_rss_kib as f64 / 1024.0
    );
    if errors > 0 {
        let kinds: Vec<String> = iv
            .errors
            .iter()
            .map(|(k, n)| format!("{k} × {n}"))
            .collect();
        s.push_str(&format!("  [{}]", kinds.join(", ")));
    }
    s
}

/// Runs the soak, printing a line every interval to stdout.
pub(crate) fn run(p: &Params) -> anyhow::Result<Soak> {
    anyhow::ensure!(
        p.seconds > 0.0 && p.interval_secs > 0.0 && p.clients > 0 && p.rate > 0.0,
        "need seconds, interval, clients and rate > 0"
    );
    let host = ChildHost::start(
        &HostArgs {
            endpoint: p.binding.listen_url().to_string(),
            ..HostArgs::default()
        },
        None,
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lab-soak")
        .enable_all()
        .build()?;
    let counters = Arc::new(Mutex::new(Counters::new()));
    let mut total = Counters::new();
    let warmup = Duration::from_secs_f64(p.warmup_secs());
    let run_for = Duration::from_secs_f64(p.seconds);
    let every = Duration::from_secs_f64(p.interval_secs);
    println!(
        "soak, binding {}: {} clients, {:.0} calls/s, {} KiB streams, reconnects every {} s, {:.0} s (warm-up {:.0} s); host pid {}",
        p.binding.name(),
        p.clients,
        p.rate,
        p.stream_bytes / 1024,
        p.reconnect_secs,
        p.seconds,
        warmup.as_secs_f64(),
        host.pid()
    );
    let load0 = crate::child::loadavg();
    let start = Instant::now();
    let end = start + run_for;
    let handles: Vec<_> = (0..p.clients)
        .map(|i| rt.spawn(worker(i, host.url().to_string(), *p, end, counters.clone())))
        .collect();
    let mut intervals = Vec::new();
    let mut rss_warm: Option<u64> = None;
    let mut anon_warm: Option<u64> = None;
    // (VmRSS, RssAnon) at the end of the load, clients still calling.
    let load_end: (u64, u64);
    let mut after_warmup: Vec<(f64, u64)> = Vec::new();
    let mut next_line = start + every;
    let warm_at = start + warmup;
    loop {
        let now = Instant::now();
        let wake = if rss_warm.is_none() {
            next_line.min(warm_at).min(end)
        } else {
            next_line.min(end)
        };
        if wake > now {
            std::thread::sleep(wake - now);
        }
        let now = Instant::now();
        let t = (now - start).as_secs_f64();
        let rss = host.rss_kib()?;
        if rss_warm.is_none() && now >= warm_at {
            rss_warm = Some(rss);
            anon_warm = Some(crate::child::status_kib(host.pid(), "RssAnon")?);
        }
        if rss_warm.is_some() {
            after_warmup.push((t, rss));
        }
        if now >= next_line || now >= end {
            let c = std::mem::replace(
                &mut *counters.lock().unwrap_or_else(|e| e.into_inner()),
                Counters::new(),
            );
            let iv = Interval {
                t_secs: round1(t),
                calls: c.calls,
                faults_expected: c.faults_expected,
                streams: c.streams,
                reconnects: c.reconnects,
                errors: c.errors.clone(),
                p99_ms: c.unary.dist().p99_us / 1000.0,
                stream_p99_ms: c.stream.dist().p99_us / 1000.0,
                host_rss_kib: rss,
            };
            let secs = (t - intervals.last().map_or(0.0, |l: &Interval| l.t_secs)).max(1e-9);
            println!("{}", interval_line(&iv, secs));
            let _ = std::io::stdout().flush();
            merge(&mut total, c);
            intervals.push(iv);
            next_line += every;
        }
        if now >= end {
            load_end = (rss, crate::child::status_kib(host.pid(), "RssAnon")?);
            break;
        }
    }
    // The clients finish their last call and close.
    rt.block_on(async {
        for h in handles {
            let _ = h.await;
        }
    });
    merge(
        &mut total,
        std::mem::replace(
            &mut *counters.lock().unwrap_or_else(|e| e.into_inner()),
            Counters::new(),
        ),
    );
    let (rss_end, anon_end) = load_end;
    let rss_peak = crate::child::status_kib(host.pid(), "VmHWM")?;
    let closed_by = Instant::now() + CLOSE_GRACE;
    let mut stats = host.stats()?;
    while stats.connections_open > 0 && Instant::now() < closed_by {
        std::thread::sleep(Duration::from_millis(50));
        stats = host.stats()?;
    }
    let rss_after_close = host.rss_kib()?;
    drop(rt);
    Ok(evaluate(
        p,
        &total,
        Host {
            intervals,
            rss_warm_kib: rss_warm.unwrap_or(rss_end),
            rss_end_kib: rss_end,
            rss_after_close_kib: rss_after_close,
            rss_peak_kib: rss_peak,
            rss_slope_kib_per_min: slope_per_min(&after_warmup),
            connections_opened: stats.connections_opened,
            connections_left: stats.connections_open,
            rss_anon_kib: (anon_warm.unwrap_or(anon_end), anon_end),
            loadavg: (load0, crate::child::loadavg()),
        },
    ))
}

fn merge(total: &mut Counters, c: Counters) {
    total.calls += c.calls;
    total.faults_expected += c.faults_expected;
    total.streams += c.streams;
    total.reconnects += c.reconnects;
    for (k, n) in c.errors {
        *total.errors.entry(k).or_default() += n;
    }
    total.unary.add(&c.unary);
    total.stream.add(&c.stream);
}

/// What was sampled besides the calls: the progress lines, the host's memory and connections,
/// the machine's load.
#[derive(Debug, Clone)]
struct Host {
    intervals: Vec<Interval>,
    rss_warm_kib: u64,
    rss_end_kib: u64,
    rss_after_close_kib: u64,
    rss_peak_kib: u64,
    rss_slope_kib_per_min: f64,
    connections_opened: u64,
    connections_left: usize,
    rss_anon_kib: (u64, u64),
    loadavg: (f64, f64),
}

/// Builds the result and its verdict.
fn evaluate(p: &Params, total: &Counters, h: Host) -> Soak {
    let mut error_kinds = total.errors.clone();
    if h.connections_left > 0 {
        *error_kinds
            .entry("host_connections_left_open".to_string())
            .or_default() += h.connections_left as u64;
    }
    let errors: u64 = error_kinds.values().sum();
    let verdict = verdict::soak(errors, h.rss_warm_kib, h.rss_end_kib);
    let rss_limit_kib = verdict::soak_rss_limit_kib(h.rss_warm_kib);
    let rss_growth_kib = h.rss_end_kib as i64 - h.rss_warm_kib as i64;
    Soak {
        scenario: "soak",
        params: *p,
        warmup_secs: p.warmup_secs(),
        intervals: h.intervals,
        calls: total.calls,
        streams: total.streams,
        faults_expected: total.faults_expected,
        reconnects: total.reconnects,
        errors,
        error_kinds,
        p99_ms: total.unary.dist().p99_us / 1000.0,
        rss_warm_kib: h.rss_warm_kib,
        rss_end_kib: h.rss_end_kib,
        rss_after_close_kib: h.rss_after_close_kib,
        rss_peak_kib: h.rss_peak_kib,
        rss_growth_kib,
        rss_limit_kib,
        rss_rule: "growth after warm-up ≤ 10 % of the RSS at the end of warm-up",
        rss_anon_kib: h.rss_anon_kib,
        loadavg: h.loadavg,
        rss_flat: rss_growth_kib <= rss_limit_kib as i64,
        rss_slope_kib_per_min: h.rss_slope_kib_per_min,
        host_connections_opened: h.connections_opened,
        host_connections_left: h.connections_left,
        pass: verdict.pass,
        verdict,
    }
}

/// The final summary (the progress lines were printed as they came).
pub(crate) fn summary(r: &Soak) -> String {
    let mib = |k: u64| k as f64 / 1024.0;
    let mut s = format!(
        "soak summary: {:.0} s, {} calls ({} streamed, {} faults provoked and received, {} reconnects), unary p99 {:.3} ms\n",
        r.params.seconds, r.calls, r.streams, r.faults_expected, r.reconnects, r.p99_ms
    );
    if r.errors == 0 {
        s.push_str("  unexplained errors: 0\n");
    } else {
        let kinds: Vec<String> = r
            .error_kinds
            .iter()
            .map(|(k, n)| format!("{k} × {n}"))
            .collect();
        s.push_str(&format!(
            "  unexplained errors: {} ({})\n",
            r.errors,
            kinds.join(", ")
        ));
    }
    s.push_str(&format!(
        "  host RSS: {:.1} MiB at the end of warm-up ({:.0} s), {:.1} MiB at the end of the load ({:+.1} MiB), peak {:.1} MiB, {:.1} MiB after the clients closed; slope after warm-up {:+.1} KiB/min\n",
        mib(r.rss_warm_kib),
        r.warmup_secs,
        mib(r.rss_end_kib),
        r.rss_growth_kib as f64 / 1024.0,
        mib(r.rss_peak_kib),
        mib(r.rss_after_close_kib),
        r.rss_slope_kib_per_min
    ));
    s.push_str(&format!(
        "  RSS {}: growth limit {:.1} MiB (10 % of the RSS at the end of warm-up); anonymous memory {:.1} → {:.1} MiB\n",
        if r.rss_flat { "flat" } else { "NOT flat" },
        mib(r.rss_limit_kib),
        mib(r.rss_anon_kib.0),
        mib(r.rss_anon_kib.1)
    ));
    s.push_str(&format!(
        "  machine load average (1 min): {:.2} at the start, {:.2} at the end\n",
        r.loadavg.0, r.loadavg.1
    ));
    s.push_str(&format!(
        "  host connections: {} opened, {} still open after the clients closed\n",
        r.host_connections_opened, r.host_connections_left
    ));
    s.push_str(&super::first_call::verdict_line(&r.verdict));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(errors: &[(&str, u64)]) -> Counters {
        let mut c = Counters::new();
        c.calls = 1000;
        c.faults_expected = 100;
        c.streams = 100;
        c.reconnects = 4;
        for (k, n) in errors {
            c.errors.insert(k.to_string(), *n);
        }
        for i in 1..=800u64 {
            c.unary.record(Duration::from_micros(100 + i % 50));
        }
        c
    }

    fn host(warm_mib: u64, end_mib: u64, left: usize) -> Host {
        Host {
            intervals: vec![interval()],
            rss_warm_kib: warm_mib * 1024,
            rss_end_kib: end_mib * 1024,
            rss_after_close_kib: end_mib * 1024,
            rss_peak_kib: warm_mib.max(end_mib) * 1024,
            rss_slope_kib_per_min: 12.0,
            connections_opened: 40,
            connections_left: left,
            rss_anon_kib: (4000, 4100),
            loadavg: (0.5, 0.6),
        }
    }

    fn interval() -> Interval {
        Interval {
            t_secs: 10.0,
            calls: 20_000,
            faults_expected: 2000,
            streams: 2000,
            reconnects: 8,
            errors: BTreeMap::new(),
            p99_ms: 0.25,
            stream_p99_ms: 3.5,
            host_rss_kib: 20 * 1024,
        }
    }

    #[test]
    fn warmup_is_a_tenth_within_bounds() {
        let p = |s| Params::defaults(Binding::Tcp, s);
        assert_eq!(p(600.0).warmup_secs(), 60.0);
        assert_eq!(p(3600.0).warmup_secs(), 60.0);
        assert_eq!(p(120.0).warmup_secs(), 12.0);
        assert_eq!(p(15.0).warmup_secs(), 5.0);
        assert_eq!(p(6.0).warmup_secs(), 3.0);
    }

    #[test]
    fn the_mix_has_every_kind() {
        for op in [
            Op::Add,
            Op::Multiply,
            Op::Divide,
            Op::DivideByZero,
            Op::Work,
            Op::Upload,
            Op::Download,
        ] {
            assert!(MIX.contains(&op), "{op:?}");
        }
    }

    #[test]
    fn slope() {
        assert_eq!(slope_per_min(&[]), 0.0);
        assert_eq!(slope_per_min(&[(0.0, 100)]), 0.0);
        assert_eq!(
            slope_per_min(&[(0.0, 100), (60.0, 160), (120.0, 220)]),
            60.0
        );
        assert_eq!(slope_per_min(&[(0.0, 100), (30.0, 100)]), 0.0);
    }

    #[test]
    fn verdict_and_json_shape() {
        let p = Params::defaults(Binding::Tcp, 600.0);
        let r = evaluate(&p, &totals(&[]), host(20, 21, 0));
        assert!(r.pass, "{:?}", r.verdict);
        assert!(r.rss_flat);
        assert_eq!(r.rss_limit_kib, 2048);
        assert_eq!(r.rss_growth_kib, 1024);
        assert!(summary(&r).contains("RSS flat"));
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "scenario",
            "calls",
            "errors",
            "error_kinds",
            "rss_warm_kib",
            "rss_end_kib",
            "rss_flat",
            "intervals",
            "pass",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["scenario"], "soak");
        assert_eq!(v["errors"], 0);
        assert_eq!(v["intervals"][0]["host_rss_kib"], 20 * 1024);

        // Errors fail it, and are listed by kind.
        let r = evaluate(&p, &totals(&[("busy", 2)]), host(20, 20, 0));
        assert!(!r.pass);
        assert!(summary(&r).contains("busy × 2"));
        // So do connections the host still holds, and RSS growth.
        let r = evaluate(&p, &totals(&[]), host(20, 20, 3));
        assert!(!r.pass);
        assert_eq!(r.error_kinds["host_connections_left_open"], 3);
        let r = evaluate(&p, &totals(&[]), host(20, 23, 0));
        assert!(!r.pass && !r.rss_flat);
        assert!(summary(&r).contains("NOT flat"));
        // Shrinking is flat.
        let r = evaluate(&p, &totals(&[]), host(30, 20, 0));
        assert!(r.pass && r.rss_growth_kib < 0);
    }

    #[test]
    fn line_lists_error_kinds() {
        let mut iv = interval();
        assert!(!interval_line(&iv, 10.0).contains('['));
        iv.errors.insert("timeout".to_string(), 2);
        let l = interval_line(&iv, 10.0);
        assert!(
            l.contains("errors   2") && l.contains("[timeout × 2]"),
            "{l}"
        );
        assert!(l.contains("2000/s"), "{l}");
    }
}
