//! Issue 10, item 2: overload. A host whose throttle runs C calls at once (and queues Q) serves
//! an operation that sleeps a fixed time (no CPU), so the throttle admits about C / work calls
//! per second. Three phases, each open-loop (calls are issued on a schedule, whatever is still
//! outstanding):
//!
//! 1. unloaded: a tenth of that capacity; the p99 every other number is compared to;
//! 2. overload: `factor` × capacity over several connections; admitted calls' latency, Busy
//!    answers' latency, the share answered Busy, any other error;
//! 3. recovery: the load stops; once its last call is answered (the drain, reported), the
//!    unloaded rate again at once: the first call and the p99.
//!
//! The host runs in a child process pinned to CPU 0 (`taskset -c 0`), the load generator (this
//! process, every thread) on CPU 1, when the machine lets both happen; the output says which.
//!
//! The bar's latencies are measured at the client, from just before the call to its answer,
//! over loopback. The host also times every call itself (the child host's interceptor, from
//! its `before`, as the call's header has been read and before the throttle, to its `after`,
//! just before the answer is written; [`crate::child::HostTimes`]), and those are reported
//! beside them: measured there, the unloaded p99 has no round trip in it, and a queued call's
//! wait of up to one work period (the running calls' ends bunch up under steady overload) puts
//! the admitted p99 at about 2 × the work. The host also reports its call count, checked
//! against the calls sent. Each phase also reports its client lag (how late calls
//! started against their schedule) and both processes' CPU use, which say whether the generator
//! kept up and whose core was the bottleneck.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{round1, Binding, Dist, Latencies};
use crate::child::{self, ChildHost, HostArgs, HostTimes, PinnedSelf};
use crate::lab_service::LabClient;
use crate::verdict::{self, OverloadNumbers, Verdict};

/// The CPU the host is pinned to.
pub(crate) const HOST_CPU: usize = 0;
/// The CPU the load generator is pinned to.
pub(crate) const CLIENT_CPU: usize = 1;
/// An unloaded p99 above this many p50s had outliers (the machine's, not the load's): warned.
const NOISY_BASELINE: f64 = 1.5;
/// How often the generator wakes to issue the calls that are due.
const TICK: Duration = Duration::from_micros(100);
/// Calls made before the unloaded phase and not measured (connections warm, pool threads up,
/// the child's first-touch page faults done: its first ~100 ms are slow).
const WARMUP: Duration = Duration::from_secs(2);
/// A phase whose calls started later than this against their schedule (p99) had a busy
/// generator: its latencies include the generator's own delays, and the output says so.
const LAG_WARN: Duration = Duration::from_millis(1);
/// The longest the drain after a phase may take before the experiment gives up.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Settings of the overload experiment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Params {
    /// The transport.
    #[serde(skip)]
    pub(crate) binding: Binding,
    /// Length of each phase, s.
    pub(crate) seconds: f64,
    /// Offered load under overload, in multiples of the capacity.
    pub(crate) factor: f64,
    /// Throttle: calls running at once.
    pub(crate) concurrency: usize,
    /// Throttle: calls waiting for a slot.
    pub(crate) queue: usize,
    /// What the operation sleeps, µs.
    pub(crate) work_us: u64,
    /// Connections (channels) the load is spread over.
    pub(crate) connections: usize,
    /// The unloaded and recovery phases' rate, as a share of the capacity.
    pub(crate) unloaded_share: f64,
    /// Pin the host and the load generator to CPUs of their own.
    pub(crate) pin: bool,
}

impl Params {
    /// The defaults of `keel-lab overload`: 8 running + 4 queued, 2 ms of work, 10 × 4,000
    /// calls/s over 8 connections, 5 s per phase.
    pub(crate) fn defaults(binding: Binding) -> Params {
        Params {
            binding,
            seconds: 5.0,
            factor: 10.0,
            concurrency: 8,
            queue: 4,
            work_us: 2000,
            connections: 8,
            unloaded_share: 0.1,
            pin: true,
        }
    }

    /// What the throttle admits, calls/s: C calls at once, each taking the work.
    pub(crate) fn capacity_per_sec(&self) -> f64 {
        self.concurrency as f64 * 1e6 / self.work_us as f64
    }
}

/// One phase's measurements.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Phase {
    /// `unloaded`, `overload` or `recovery`.
    pub(crate) name: &'static str,
    /// The rate asked for, calls/s.
    pub(crate) target_per_sec: f64,
    /// How long calls were issued, s.
    pub(crate) seconds: f64,
    /// Calls issued.
    pub(crate) sent: u64,
    /// Calls issued per second (the offered load actually achieved).
    pub(crate) offered_per_sec: f64,
    /// Calls answered with the operation's result, µs.
    pub(crate) admitted: Dist,
    /// Calls answered Busy, µs.
    pub(crate) busy: Dist,
    /// Other answers (and wrong results), by kind.
    pub(crate) errors: BTreeMap<String, u64>,
    /// The phase's first call, µs, and how it was answered (`ok`, `busy` or an error kind).
    pub(crate) first_us: f64,
    /// How the first call was answered.
    pub(crate) first_outcome: String,
    /// How late calls started against their schedule, µs (the generator keeping up).
    pub(crate) lag: Dist,
    /// From the last call issued to the last answer, ms.
    pub(crate) drain_ms: f64,
    /// The host process's CPU use over the phase, % of one CPU.
    pub(crate) host_cpu_pct: Option<f64>,
    /// This process's CPU use over the phase, % of one CPU.
    pub(crate) client_cpu_pct: Option<f64>,
    /// The same calls timed at the host, from arrival to answer (`None`: not measured).
    pub(crate) host: Option<HostTimes>,
}

impl Phase {
    /// Answers other than a result or Busy.
    pub(crate) fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Where the two sides ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Placement {
    /// Whether the host and the generator were pinned to CPUs of their own.
    pub(crate) pinned: bool,
    /// The host process's allowed CPUs, as read back from `/proc`.
    pub(crate) host_cpus: Option<String>,
    /// This process's threads' allowed CPUs, as read back from `/proc` (distinct lists).
    pub(crate) client_cpus: String,
    /// Why not pinned, when not.
    pub(crate) note: Option<String>,
}

/// What the overload experiment measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Overload {
    /// `overload`.
    pub(crate) scenario: &'static str,
    /// The transport.
    pub(crate) binding: Binding,
    /// Where the bar's latencies were taken: `client`.
    pub(crate) measured_at: &'static str,
    /// The unloaded phase's p99 timed at the host, ms (`null`: not measured).
    pub(crate) host_unloaded_p99_ms: Option<f64>,
    /// The admitted calls' p99 under overload timed at the host, ms (`null`: not measured).
    pub(crate) host_admitted_p99_ms: Option<f64>,
    /// The settings.
    pub(crate) params: Params,
    /// Where the host and the generator ran.
    pub(crate) placement: Placement,
    /// What the throttle admits, calls/s.
    pub(crate) capacity_per_sec: f64,
    /// The overload phase's achieved offered rate, calls/s.
    pub(crate) offered_per_sec: f64,
    /// Calls answered with a result per second under overload.
    pub(crate) admitted_per_sec: f64,
    /// p99 of the unloaded phase, ms.
    pub(crate) unloaded_p99_ms: f64,
    /// p99 of the admitted calls under overload, ms.
    pub(crate) admitted_p99_ms: f64,
    /// p99 of the Busy answers under overload, ms (`null`: none).
    pub(crate) busy_p99_ms: Option<f64>,
    /// Share of the overload's calls answered Busy.
    pub(crate) busy_fraction: f64,
    /// The first call after the load stopped (and drained), ms.
    pub(crate) recovery_first_ms: f64,
    /// p99 of the calls after the load stopped, ms.
    pub(crate) recovery_p99_ms: f64,
    /// From the last overload call issued to its last answer, ms.
    pub(crate) drain_ms: f64,
    /// Answers other than a result or Busy, all phases.
    pub(crate) errors: u64,
    /// Calls the host counted (accepted, answered or refused), warm-up included.
    pub(crate) host_calls: u64,
    /// Calls the generator sent, warm-up included.
    pub(crate) client_calls: u64,
    /// The machine's 1-minute load average at the start and at the end (other work on it).
    pub(crate) loadavg: (f64, f64),
    /// What may make the numbers less than they claim (a late generator, a busy machine).
    pub(crate) warnings: Vec<String>,
    /// The three phases.
    pub(crate) phases: Vec<Phase>,
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

/// What the calls of one phase share: the recorders and the outstanding-call count.
#[derive(Debug, Default)]
struct Shared {
    rec: Mutex<Recorder>,
    outstanding: AtomicU64,
    last_done: Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct Recorder {
    admitted: Latencies,
    busy: Latencies,
    lag: Latencies,
    errors: BTreeMap<String, u64>,
    /// (issue order, latency, outcome) of the earliest-issued call.
    first: Option<(u64, Duration, String)>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            admitted: Latencies::new(),
            busy: Latencies::new(),
            lag: Latencies::new(),
            errors: BTreeMap::new(),
            first: None,
        }
    }
}

impl Shared {
    fn record(&self, seq: u64, lag: Duration, took: Duration, outcome: &str) {
        {
            let mut r = self.rec.lock().unwrap_or_else(|e| e.into_inner());
            r.lag.record(lag);
            match outcome {
                "ok" => r.admitted.record(took),
                "busy" => r.busy.record(took),
                other => *r.errors.entry(other.to_string()).or_default() += 1,
            }
            if r.first.as_ref().is_none_or(|f| seq < f.0) {
                r.first = Some((seq, took, outcome.to_string()));
            }
        }
        *self.last_done.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Issues `work(work_us)` calls at `rate` per second for `dur`, round-robin over `clients`,
/// open-loop, from this thread (waking every [`TICK`]); waits for the last answer.
fn drive(
    rt: &tokio::runtime::Runtime,
    clients: &[LabClient],
    name: &'static str,
    rate: f64,
    dur: Duration,
    work_us: u64,
    host: &ChildHost,
) -> anyhow::Result<Phase> {
    anyhow::ensure!(rate > 0.0 && !clients.is_empty(), "need a rate and clients");
    let shared = Arc::new(Shared::default());
    // Clears the host's timings: what it reports after the drain is this phase's.
    host.times()?;
    let host_cpu0 = host.cpu_time();
    let self_cpu0 = child::cpu_time(std::process::id());
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= dur {
            break;
        }
        // The call due at t = 0 goes at once; then one every 1/rate s.
        let due = (elapsed.as_secs_f64() * rate).floor() as u64 + 1;
        while sent < due {
            let scheduled = start + Duration::from_secs_f64(sent as f64 / rate);
            let client = clients[(sent % clients.len() as u64) as usize].clone();
            let sh = shared.clone();
            let seq = sent;
            sh.outstanding.fetch_add(1, Ordering::AcqRel);
            rt.spawn(async move {
                let t0 = Instant::now();
                let answer = client.work(work_us).await;
                let took = t0.elapsed();
                let outcome = match answer {
                    Ok(v) if v == work_us => "ok".to_string(),
                    Ok(_) => "wrong_result".to_string(),
                    Err(e) => super::error_kind(&e),
                };
                sh.record(seq, t0.saturating_duration_since(scheduled), took, &outcome);
            });
            sent += 1;
        }
        std::thread::sleep(TICK);
    }
    let stopped = Instant::now();
    let issued_for = stopped - start;
    while shared.outstanding.load(Ordering::Acquire) > 0 {
        anyhow::ensure!(
            stopped.elapsed() < DRAIN_LIMIT,
            "{name}: calls still unanswered {DRAIN_LIMIT:?} after the load stopped"
        );
        std::thread::sleep(Duration::from_micros(50));
    }
    let host_times = host.times()?;
    let last_done = shared.last_done.lock().unwrap_or_else(|e| e.into_inner());
    let drain = last_done.map_or(Duration::ZERO, |t| t.saturating_duration_since(stopped));
    let wall = start.elapsed().as_secs_f64();
    let pct = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) => Some(round1(b.saturating_sub(a).as_secs_f64() / wall * 100.0)),
        _ => None,
    };
    let host_cpu_pct = pct(host_cpu0, host.cpu_time());
    let client_cpu_pct = pct(self_cpu0, child::cpu_time(std::process::id()));
    let rec = shared.rec.lock().unwrap_or_else(|e| e.into_inner());
    let (first_us, first_outcome) = rec
        .first
        .as_ref()
        .map_or((f64::NAN, "none".to_string()), |f| {
            (super::us(f.1), f.2.clone())
        });
    let secs = issued_for.as_secs_f64();
    Ok(Phase {
        name,
        target_per_sec: rate,
        seconds: (secs * 1000.0).round() / 1000.0,
        sent,
        offered_per_sec: round1(sent as f64 / secs),
        admitted: rec.admitted.dist(),
        busy: rec.busy.dist(),
        errors: rec.errors.clone(),
        first_us,
        first_outcome,
        lag: rec.lag.dist(),
        drain_ms: super::ms(drain),
        host_cpu_pct,
        client_cpu_pct,
        host: Some(host_times),
    })
}

/// Pins the host's CPU and this process's, when the machine has both; the reason when not.
fn placement_plan(pin: bool) -> Result<(), String> {
    if !pin {
        return Err("not pinned (--no-pin)".to_string());
    }
    let cpus = child::allowed_cpus(None)
        .map(|l| child::parse_cpu_list(&l))
        .unwrap_or_default();
    if !(cpus.contains(&HOST_CPU) && cpus.contains(&CLIENT_CPU)) {
        return Err(format!(
            "not pinned: this process may not run on both CPU {HOST_CPU} and CPU {CLIENT_CPU}"
        ));
    }
    Ok(())
}

/// Runs the experiment.
pub(crate) fn run(p: &Params) -> anyhow::Result<Overload> {
    anyhow::ensure!(
        p.seconds > 0.0 && p.factor > 0.0 && p.concurrency > 0 && p.work_us > 0,
        "need seconds, factor, concurrency and work > 0"
    );
    anyhow::ensure!(p.connections > 0, "need connections > 0");
    let host_args = HostArgs {
        endpoint: p.binding.listen_url().to_string(),
        max_concurrent_calls: p.concurrency,
        max_queued_calls: p.queue,
        // The warm floor covers the throttle: no thread is created while measuring.
        min_threads: Some(p.concurrency),
        worker_threads: None,
    };
    let load0 = child::loadavg();
    let plan = placement_plan(p.pin);
    let (pinned_self, note) = match &plan {
        Ok(()) => match PinnedSelf::pin(&CLIENT_CPU.to_string()) {
            Ok(g) => (Some(g), None),
            Err(e) => (None, Some(format!("not pinned: {e}"))),
        },
        Err(why) => (None, Some(why.clone())),
    };
    let host_cpu = pinned_self.as_ref().map(|_| HOST_CPU.to_string());
    let host = ChildHost::start(&host_args, host_cpu.as_deref())?;
    let result = measure(p, &host, pinned_self.is_some(), note);
    drop(host);
    drop(pinned_self);
    let (placement, phases, host_calls, client_calls) = result?;
    Ok(evaluate(
        p,
        placement,
        phases,
        host_calls,
        client_calls,
        (load0, child::loadavg()),
    ))
}

/// The placement, the three phases, the calls the host counted and the calls sent.
type Measured = (Placement, Vec<Phase>, u64, u64);

fn measure(
    p: &Params,
    host: &ChildHost,
    pinned: bool,
    note: Option<String>,
) -> anyhow::Result<Measured> {
    // The generator's runtime: one worker (the generator has one CPU), on this process's CPU.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("lab-load")
        .enable_all()
        .build()?;
    let clients = rt.block_on(async {
        let mut v = Vec::with_capacity(p.connections);
        for _ in 0..p.connections {
            let ch = keel::Channel::builder(host.url())
                .deadline(Duration::from_secs(30))
                .connect()
                .await?;
            v.push(LabClient::new(ch));
        }
        Ok::<_, keel::Error>(v)
    })?;
    let placement = Placement {
        pinned,
        host_cpus: child::allowed_cpus(Some(host.pid())),
        client_cpus: child::own_threads_cpus(),
        note,
    };
    let stats0 = host.stats()?;
    let cap = p.capacity_per_sec();
    let low = p.unloaded_share * cap;
    let dur = Duration::from_secs_f64(p.seconds);
    let pb = super::spinner(format!("overload: warm-up, {low:.0} calls/s"));
    let warm = drive(&rt, &clients, "warm-up", low, WARMUP, p.work_us, host)?;
    pb.set_message(format!("overload: unloaded, {low:.0} calls/s"));
    let unloaded = drive(&rt, &clients, "unloaded", low, dur, p.work_us, host)?;
    let high = p.factor * cap;
    pb.set_message(format!(
        "overload: {:.0} × capacity, {high:.0} calls/s",
        p.factor
    ));
    let overload = drive(&rt, &clients, "overload", high, dur, p.work_us, host)?;
    pb.set_message(format!("overload: recovery, {low:.0} calls/s"));
    let recovery = drive(&rt, &clients, "recovery", low, dur, p.work_us, host)?;
    pb.finish_and_clear();
    let stats1 = host.stats()?;
    rt.block_on(async {
        for c in &clients {
            c.close().await;
        }
    });
    let client_calls = warm.sent + unloaded.sent + overload.sent + recovery.sent;
    Ok((
        placement,
        vec![unloaded, overload, recovery],
        stats1.calls_total - stats0.calls_total,
        client_calls,
    ))
}

/// Builds the result and its verdict from the three phases (unloaded, overload, recovery).
pub(crate) fn evaluate(
    p: &Params,
    placement: Placement,
    phases: Vec<Phase>,
    host_calls: u64,
    client_calls: u64,
    loadavg: (f64, f64),
) -> Overload {
    let ms = |us: f64| (us * 10.0).round() / 10_000.0;
    let get = |name: &str| phases.iter().find(|ph| ph.name == name);
    let (unloaded, over, recovery) = (get("unloaded"), get("overload"), get("recovery"));
    let unloaded_p99_ms = unloaded.map_or(f64::NAN, |u| ms(u.admitted.p99_us));
    let admitted_p99_ms = over.map_or(f64::NAN, |o| ms(o.admitted.p99_us));
    let busy_p99_ms = over.filter(|o| o.busy.count > 0).map(|o| ms(o.busy.p99_us));
    let busy_fraction = over.map_or(f64::NAN, |o| {
        if o.sent == 0 {
            f64::NAN
        } else {
            (o.busy.count as f64 / o.sent as f64 * 10_000.0).round() / 10_000.0
        }
    });
    let recovery_p99_ms = recovery.map_or(f64::NAN, |r| ms(r.admitted.p99_us));
    let host_p99 = |ph: Option<&Phase>| {
        ph.and_then(|ph| ph.host.as_ref())
            .filter(|h| h.ok.count > 0)
            .map(|h| ms(h.ok.p99_us))
    };
    let recovery_first_ms = recovery.map_or(f64::NAN, |r| ms(r.first_us));
    let errors: u64 = phases.iter().map(Phase::error_count).sum();
    let busy_when_unloaded = [unloaded, recovery]
        .iter()
        .flatten()
        .map(|ph| ph.busy.count)
        .sum();
    let offered_per_sec = over.map_or(f64::NAN, |o| o.offered_per_sec);
    let admitted_per_sec = over.map_or(f64::NAN, |o| {
        round1(o.admitted.count as f64 / o.seconds.max(1e-9))
    });
    let verdict = verdict::overload(&OverloadNumbers {
        unloaded_p99_ms,
        unloaded_lag_p99_ms: unloaded.map_or(f64::NAN, |u| u.lag.p99_us / 1000.0),
        admitted_p99_ms,
        busy_p99_ms,
        recovery_first_ms,
        recovery_p99_ms,
        errors,
        busy_when_unloaded,
        target_per_sec: p.factor * p.capacity_per_sec(),
        offered_per_sec,
    });
    let mut warnings = Vec::new();
    for ph in &phases {
        if ph.lag.p99_us > LAG_WARN.as_secs_f64() * 1e6 {
            warnings.push(format!(
                "{}: calls started {:.3} ms late (p99) against their schedule: the generator's CPU was busy, and its latencies include that",
                ph.name,
                ph.lag.p99_us / 1000.0
            ));
        }
    }
    if let Some(u) = unloaded {
        if u.admitted.p99_us > NOISY_BASELINE * u.admitted.p50_us {
            warnings.push(format!(
                "unloaded p99 {:.3} ms > {NOISY_BASELINE} × its p50 {:.3} ms: outliers in the baseline loosen the 2 × bars",
                u.admitted.p99_us / 1000.0,
                u.admitted.p50_us / 1000.0
            ));
        }
    }
    if host_calls != client_calls {
        warnings.push(format!(
            "the host counted {host_calls} calls, the generator sent {client_calls}"
        ));
    }
    let busiest = loadavg.0.max(loadavg.1);
    if busiest > 1.0 {
        warnings.push(format!(
            "load average up to {busiest:.2} on this machine: other work shared the CPUs"
        ));
    }
    if !placement.pinned {
        warnings.push("host and generator not pinned: they shared CPUs".to_string());
    }
    Overload {
        scenario: "overload",
        binding: p.binding,
        measured_at: "client",
        host_unloaded_p99_ms: host_p99(unloaded),
        host_admitted_p99_ms: host_p99(over),
        params: *p,
        placement,
        capacity_per_sec: round1(p.capacity_per_sec()),
        offered_per_sec,
        admitted_per_sec,
        unloaded_p99_ms,
        admitted_p99_ms,
        busy_p99_ms,
        busy_fraction,
        recovery_first_ms,
        recovery_p99_ms,
        drain_ms: over.map_or(f64::NAN, |o| o.drain_ms),
        errors,
        host_calls,
        client_calls,
        loadavg,
        warnings,
        pass: verdict.pass,
        verdict,
        phases,
    }
}

fn ms3(us: f64) -> String {
    format!("{:.3}", us / 1000.0)
}

fn pct(x: Option<f64>) -> String {
    x.map_or("?".to_string(), |v| format!("{v:.0} %"))
}

/// The readable summary.
pub(crate) fn summary(r: &Overload) -> String {
    let p = &r.params;
    let mut s = format!(
        "overload (issue 10), binding {}: throttle {} running + {} queued, work {} ms (a sleep), {} connections\n",
        r.binding.name(),
        p.concurrency,
        p.queue,
        p.work_us as f64 / 1000.0,
        p.connections
    );
    let pl = &r.placement;
    if pl.pinned {
        s.push_str(&format!(
            "  host: child process on CPU {}; load generator: this process, every thread on CPU {}\n",
            pl.host_cpus.as_deref().unwrap_or("?"),
            pl.client_cpus
        ));
    } else {
        s.push_str(&format!(
            "  {} (host on CPUs {}, generator on {})\n",
            pl.note.as_deref().unwrap_or("not pinned"),
            pl.host_cpus.as_deref().unwrap_or("?"),
            pl.client_cpus
        ));
    }
    s.push_str("  latencies measured at the client (call sent → answer received, loopback), the bar's; the host's own timing (arrival → answer) below\n");
    s.push_str(&format!(
        "  capacity {:.0} calls/s ({} / {} ms); overload {} × = {:.0} calls/s offered, {:.0} achieved\n",
        r.capacity_per_sec,
        p.concurrency,
        p.work_us as f64 / 1000.0,
        p.factor,
        p.factor * r.capacity_per_sec,
        r.offered_per_sec
    ));
    s.push_str("  phase      calls/s   sent    result  p50/p99 ms     Busy    p50/p99 ms     errors  lag p99 ms  host CPU  client CPU\n");
    for ph in &r.phases {
        let busy = if ph.busy.count > 0 {
            format!("{}/{}", ms3(ph.busy.p50_us), ms3(ph.busy.p99_us))
        } else {
            "-".to_string()
        };
        s.push_str(&format!(
            "  {:<9} {:>8.0} {:>7} {:>7} {:<14} {:>6} {:<14} {:>6} {:>11} {:>9} {:>11}\n",
            ph.name,
            ph.offered_per_sec,
            ph.sent,
            ph.admitted.count,
            format!("{}/{}", ms3(ph.admitted.p50_us), ms3(ph.admitted.p99_us)),
            ph.busy.count,
            busy,
            ph.error_count(),
            ms3(ph.lag.p99_us),
            pct(ph.host_cpu_pct),
            pct(ph.client_cpu_pct)
        ));
    }
    for ph in &r.phases {
        if let Some(h) = &ph.host {
            s.push_str(&format!(
                "  {:<9} at the host: result {} {}/{}, Busy {} {}/{}\n",
                ph.name,
                h.ok.count,
                ms3(h.ok.p50_us),
                ms3(h.ok.p99_us),
                h.busy.count,
                ms3(h.busy.p50_us),
                ms3(h.busy.p99_us)
            ));
        }
    }
    for ph in &r.phases {
        for (k, n) in &ph.errors {
            s.push_str(&format!("  {} errors: {k} × {n}\n", ph.name));
        }
    }
    s.push_str(&format!(
        "  unloaded p99 {:.3} ms; admitted p99 {:.3} ms ({:.2} ×); Busy p99 {}; {:.1} % answered Busy; {:.0} results/s\n",
        r.unloaded_p99_ms,
        r.admitted_p99_ms,
        r.admitted_p99_ms / r.unloaded_p99_ms,
        r.busy_p99_ms.map_or("-".to_string(), |b| format!("{b:.3} ms")),
        r.busy_fraction * 100.0,
        r.admitted_per_sec
    ));
    if let (Some(u), Some(a)) = (r.host_unloaded_p99_ms, r.host_admitted_p99_ms) {
        s.push_str(&format!(
            "  at the host: unloaded p99 {u:.3} ms; admitted p99 {a:.3} ms ({:.2} ×)\n",
            a / u
        ));
    }
    let first = r.phases.iter().find(|ph| ph.name == "recovery");
    s.push_str(&format!(
        "  load stopped: last answer {:.1} ms later; then first call {:.3} ms ({}), recovery p99 {:.3} ms\n",
        r.drain_ms,
        r.recovery_first_ms,
        first.map_or("?", |f| f.first_outcome.as_str()),
        r.recovery_p99_ms
    ));
    s.push_str(&format!(
        "  the host counted {} calls; the generator sent {}\n",
        r.host_calls, r.client_calls
    ));
    s.push_str(&format!(
        "  machine load average (1 min): {:.2} at the start, {:.2} at the end\n",
        r.loadavg.0, r.loadavg.1
    ));
    for w in &r.warnings {
        s.push_str(&format!("  warning: {w}\n"));
    }
    s.push_str(&super::first_call::verdict_line(&r.verdict));
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn dist(p50_us: f64, p99_us: f64, count: u64) -> Dist {
        Dist {
            count,
            min_us: p50_us * 0.9,
            p50_us,
            p99_us,
            max_us: p99_us * 1.2,
        }
    }

    fn phase(name: &'static str, admitted: Dist, busy: Dist, errors: u64) -> Phase {
        let mut e = BTreeMap::new();
        if errors > 0 {
            e.insert("timeout".to_string(), errors);
        }
        Phase {
            name,
            target_per_sec: 400.0,
            seconds: 5.0,
            sent: admitted.count + busy.count + errors,
            offered_per_sec: (admitted.count + busy.count + errors) as f64 / 5.0,
            admitted,
            busy,
            errors: e,
            first_us: 2150.0,
            first_outcome: "ok".to_string(),
            lag: dist(50.0, 120.0, admitted.count),
            drain_ms: 3.1,
            host_cpu_pct: Some(40.0),
            client_cpu_pct: Some(55.0),
            host: None,
        }
    }

    fn placement() -> Placement {
        Placement {
            pinned: true,
            host_cpus: Some("0".to_string()),
            client_cpus: "1".to_string(),
            note: None,
        }
    }

    /// A result like a passing run's (admitted p99 and errors given), for the report's tests.
    pub(crate) fn sample(admitted_p99_us: f64, errors: u64) -> Overload {
        let p = Params::defaults(Binding::Tcp);
        let none = dist(0.0, 0.0, 0);
        let over = Phase {
            target_per_sec: 40_000.0,
            ..phase(
                "overload",
                dist(3100.0, admitted_p99_us, 19_500),
                dist(90.0, 400.0, 180_500),
                errors,
            )
        };
        evaluate(
            &p,
            placement(),
            vec![
                phase("unloaded", dist(2100.0, 2200.0, 2000), none, 0),
                over,
                phase("recovery", dist(2100.0, 2250.0, 2000), none, 0),
            ],
            204_000,
            204_000,
            (0.3, 0.4),
        )
    }

    #[test]
    fn capacity_of_the_defaults() {
        let p = Params::defaults(Binding::Tcp);
        assert_eq!(p.capacity_per_sec(), 4000.0);
        assert_eq!(p.factor * p.capacity_per_sec(), 40_000.0);
    }

    #[test]
    fn verdict_and_numbers() {
        let r = sample(3300.0, 0);
        assert!(r.pass, "{:?}", r.verdict);
        assert_eq!(r.unloaded_p99_ms, 2.2);
        assert_eq!(r.admitted_p99_ms, 3.3);
        assert_eq!(r.busy_p99_ms, Some(0.4));
        assert_eq!(r.recovery_p99_ms, 2.25);
        assert_eq!(r.recovery_first_ms, 2.15);
        assert_eq!(r.busy_fraction, 0.9025);
        assert_eq!(r.offered_per_sec, 40_000.0);
        assert_eq!(r.admitted_per_sec, 3900.0);
        assert!(summary(&r).contains("PASS"));
        assert!(summary(&r).contains("measured at the client"));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let slow = sample(4500.0, 0);
        assert!(!slow.pass);
        assert!(summary(&slow).contains("FAIL"));
        let errs = sample(3300.0, 3);
        assert!(!errs.pass);
        assert_eq!(errs.errors, 3);
        assert!(summary(&errs).contains("overload errors: timeout × 3"));
        // A late generator, a busy machine or a count mismatch are warned about; a generator
        // late in the unloaded phase also fails the run (its baseline is not a baseline).
        let mut late = sample(3300.0, 0);
        late.phases[0].lag = dist(500.0, 2500.0, 2000);
        let late = evaluate(&late.params, placement(), late.phases, 5, 6, (3.5, 1.0));
        assert!(!late.pass);
        assert_eq!(late.warnings.len(), 3, "{:?}", late.warnings);
        assert!(summary(&late).contains("warning: unloaded: calls started 2.500 ms late"));
        let mut noisy = sample(3300.0, 0);
        noisy.phases[0].admitted = dist(2100.0, 3200.0, 2000);
        let noisy = evaluate(&noisy.params, placement(), noisy.phases, 1, 1, (0.3, 0.3));
        assert!(noisy.pass);
        assert!(
            noisy.warnings[0].contains("outliers in the baseline"),
            "{:?}",
            noisy.warnings
        );
    }

    #[test]
    fn json_shape() {
        let v = serde_json::to_value(sample(3300.0, 0)).unwrap();
        for k in [
            "scenario",
            "unloaded_p99_ms",
            "admitted_p99_ms",
            "busy_p99_ms",
            "busy_fraction",
            "offered_per_sec",
            "capacity_per_sec",
            "recovery_p99_ms",
            "errors",
            "pass",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["scenario"], "overload");
        assert_eq!(v["measured_at"], "client");
        assert!(v["pass"].is_boolean());
        assert!(v["errors"].is_u64());
        assert_eq!(v["capacity_per_sec"], 4000.0);
        assert_eq!(v["phases"].as_array().unwrap().len(), 3);
        assert_eq!(v["phases"][1]["name"], "overload");
        assert_eq!(v["placement"]["host_cpus"], "0");
        assert!(v["params"].get("binding").is_none());
        // No Busy answer at all: null, and the verdict says the overload was not measured.
        let mut r = sample(3300.0, 0);
        r.phases[1].busy = dist(0.0, 0.0, 0);
        let r = evaluate(&r.params, placement(), r.phases, 1, 1, (0.3, 0.4));
        assert!(!r.pass);
        assert!(serde_json::to_value(&r).unwrap()["busy_p99_ms"].is_null());
    }

    /// The host's own timings are reported beside the client's, and do not decide the verdict.
    #[test]
    fn host_timings_are_reported_beside() {
        let r = sample(3300.0, 0);
        assert_eq!(r.host_admitted_p99_ms, None);
        assert!(!summary(&r).contains("at the host"));
        let mut phases = r.phases.clone();
        let none = dist(0.0, 0.0, 0);
        phases[0].host = Some(HostTimes {
            ok: dist(2050.0, 2150.0, 2000),
            busy: none,
        });
        phases[1].host = Some(HostTimes {
            ok: dist(3000.0, 4400.0, 19_500),
            busy: dist(1.0, 2.0, 180_500),
        });
        let r = evaluate(&r.params, placement(), phases, 204_000, 204_000, (0.3, 0.4));
        assert!(r.pass, "{:?}", r.verdict);
        assert_eq!(r.host_unloaded_p99_ms, Some(2.15));
        assert_eq!(r.host_admitted_p99_ms, Some(4.4));
        let text = summary(&r);
        assert!(
            text.contains("at the host: unloaded p99 2.150 ms; admitted p99 4.400 ms (2.05 ×)"),
            "{text}"
        );
        assert!(
            text.contains("  overload  at the host: result 19500 3.000/4.400, Busy 180500"),
            "{text}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["host_admitted_p99_ms"], 4.4);
        assert_eq!(v["phases"][1]["host"]["ok"]["p99_us"], 4400.0);
    }
}
