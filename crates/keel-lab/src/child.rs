//! A keel host in a child process (`keel-lab host`, hidden), so that its CPU can be pinned apart
//! from the load generator's and its memory (`VmRSS`) and CPU time are its own; plus the
//! `/proc` readings and the CPU pinning the overload and soak experiments use (Linux).
//!
//! The child prints `listening on URL`, then answers each `stats` line on its stdin with one
//! `stats {json}` line ([`HostStatsLine`]) and each `times` line with one `times {json}` line
//! ([`HostTimes`]: the host time of the calls answered since the last `times`); when its stdin
//! closes it shuts down and exits.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::dist::{Dist, Latencies};
use crate::lab_service::{LabImpl, LabServer};

/// Settings of the child host (the hidden `keel-lab host` subcommand takes them as flags).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args, Serialize)]
pub(crate) struct HostArgs {
    /// The endpoint the host binds (port 0: a free port).
    #[arg(long, default_value = "tcp://127.0.0.1:0")]
    pub(crate) endpoint: String,
    /// Throttle: calls running at once.
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_concurrent_calls: usize,
    /// Throttle: calls waiting for a slot; one more is answered Busy.
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_queued_calls: usize,
    /// The pool's warm floor (keel-pool's default when absent).
    #[arg(long)]
    pub(crate) min_threads: Option<usize>,
    /// Runtime worker threads (tokio's default when absent).
    #[arg(long)]
    pub(crate) worker_threads: Option<usize>,
}

impl Default for HostArgs {
    fn default() -> Self {
        HostArgs {
            endpoint: "tcp://127.0.0.1:0".to_string(),
            max_concurrent_calls: 1024,
            max_queued_calls: 1024,
            min_threads: None,
            worker_threads: None,
        }
    }
}

impl HostArgs {
    /// These settings as `keel-lab host` flags.
    pub(crate) fn to_flags(&self) -> Vec<String> {
        let mut v = vec![
            "--endpoint".to_string(),
            self.endpoint.clone(),
            "--max-concurrent-calls".to_string(),
            self.max_concurrent_calls.to_string(),
            "--max-queued-calls".to_string(),
            self.max_queued_calls.to_string(),
        ];
        if let Some(n) = self.min_threads {
            v.extend(["--min-threads".to_string(), n.to_string()]);
        }
        if let Some(n) = self.worker_threads {
            v.extend(["--worker-threads".to_string(), n.to_string()]);
        }
        v
    }
}

/// The host's counters, as the child reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct HostStatsLine {
    /// Connections past the handshake since start.
    pub(crate) connections_opened: u64,
    /// Of those, closed since.
    pub(crate) connections_closed: u64,
    /// Open now.
    pub(crate) connections_open: usize,
    /// Calls admitted and not yet answered.
    pub(crate) calls_in_flight: usize,
    /// Calls waiting in the throttle queue.
    pub(crate) calls_queued: usize,
    /// Calls accepted since start (answered, refused Busy, or in flight).
    pub(crate) calls_total: u64,
    /// Live pool threads.
    pub(crate) pool_threads: usize,
}

/// Host time of the calls answered since the last `times` command, split by answer: from the
/// call's arrival (the [`Timing`] interceptor's `before`, after its header is read and before
/// the throttle) to its answer (`after`, just before the reply is written).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct HostTimes {
    /// Calls answered with their result, µs.
    pub(crate) ok: Dist,
    /// Calls answered Busy, µs.
    pub(crate) busy: Dist,
}

/// When a call arrived (a context extension of the [`Timing`] interceptor).
#[derive(Debug, Clone, Copy)]
struct Arrived(Instant);

/// The child host's interceptor that times every call at the host ([`HostTimes`]).
#[derive(Debug)]
struct Timing(std::sync::Arc<Mutex<(Latencies, Latencies)>>);

impl keel::host::Interceptor for Timing {
    fn before(&self, ctx: &keel::Context) -> Result<(), keel::Status> {
        ctx.insert_extension(Arrived(Instant::now()));
        Ok(())
    }

    fn after(&self, ctx: &keel::Context, code: keel::StatusCode) {
        let Some(Arrived(t)) = ctx.extension::<Arrived>() else {
            return;
        };
        let took = t.elapsed();
        let mut times = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match code {
            keel::StatusCode::Ok => times.0.record(took),
            keel::StatusCode::Busy => times.1.record(took),
            _ => {}
        }
    }
}

/// `keel-lab host`: serves the lab's contract and the examples' (Calculator, Service1,
/// Transfer) until stdin closes.
pub(crate) fn serve(args: &HostArgs) -> anyhow::Result<()> {
    use keel_examples::calculator::{Calc, CalculatorServer};
    use keel_examples::service1::{Service1Impl, Service1Server};
    use keel_examples::transfer::{TransferImpl, TransferServer};
    let times = std::sync::Arc::new(Mutex::new((Latencies::new(), Latencies::new())));
    let mut b = keel::Host::builder()
        .interceptor(Timing(times.clone()))
        .service(LabServer::new(LabImpl))
        .service(CalculatorServer::new(Calc))
        .service(Service1Server::new(Service1Impl))
        .service(TransferServer::new(TransferImpl))
        .endpoint(args.endpoint.clone())
        .max_concurrent_calls(args.max_concurrent_calls)
        .max_queued_calls(args.max_queued_calls);
    if let Some(n) = args.min_threads {
        b = b.min_threads(n);
    }
    if let Some(n) = args.worker_threads {
        b = b.worker_threads(n);
    }
    let host = b.start()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", host.url())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        match line.trim() {
            "stats" => {
                let s = host.stats();
                let stats = HostStatsLine {
                    connections_opened: s.connections_opened,
                    connections_closed: s.connections_closed,
                    connections_open: s.connections_open,
                    calls_in_flight: s.calls_in_flight,
                    calls_queued: s.calls_queued,
                    calls_total: s.calls_total,
                    pool_threads: host.pool_metrics().threads,
                };
                writeln!(out, "stats {}", serde_json::to_string(&stats)?)?;
                out.flush()?;
            }
            "times" => {
                let mut t = times.lock().unwrap_or_else(|e| e.into_inner());
                let line = HostTimes {
                    ok: t.0.dist(),
                    busy: t.1.dist(),
                };
                *t = (Latencies::new(), Latencies::new());
                drop(t);
                writeln!(out, "times {}", serde_json::to_string(&line)?)?;
                out.flush()?;
            }
            "quit" => break,
            other => anyhow::bail!("unknown command {other:?}"),
        }
    }
    host.shutdown();
    Ok(())
}

/// This keel-lab binary as a command for a child process; with `cpus` (a `taskset` list such
/// as `0`), pinned there from its first instruction (`taskset -c CPUS keel-lab ...`).
pub(crate) fn lab_command(cpus: Option<&str>) -> anyhow::Result<Command> {
    let exe = std::env::current_exe()?;
    Ok(match cpus {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus]).arg(exe);
            c
        }
        None => Command::new(exe),
    })
}

/// A `keel-lab host` child process.
#[derive(Debug)]
pub(crate) struct ChildHost {
    child: Child,
    url: String,
    io: Mutex<Option<(ChildStdin, BufReader<ChildStdout>)>>,
}

impl ChildHost {
    /// Starts the child; with `cpus` (a `taskset` list such as `0`), pinned there from its
    /// first instruction (`taskset -c CPUS keel-lab host ...`).
    pub(crate) fn start(args: &HostArgs, cpus: Option<&str>) -> anyhow::Result<ChildHost> {
        let mut child = lab_command(cpus)?
            .arg("host")
            .args(args.to_flags())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the child host did not start: {line:?}");
        };
        Ok(ChildHost {
            url: url.to_string(),
            child,
            io: Mutex::new(Some((stdin, stdout))),
        })
    }

    /// The URL the host listens on.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The host's counters now.
    pub(crate) fn stats(&self) -> anyhow::Result<HostStatsLine> {
        self.ask("stats")
    }

    /// The host time of the calls answered since the last call of this (or since the start).
    pub(crate) fn times(&self) -> anyhow::Result<HostTimes> {
        self.ask("times")
    }

    /// Sends `command` and parses the JSON of its `command {json}` answer.
    fn ask<T: serde::de::DeserializeOwned>(&self, command: &str) -> anyhow::Result<T> {
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let (stdin, stdout) = io
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("the child host was stopped"))?;
        writeln!(stdin, "{command}")?;
        stdin.flush()?;
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let json = line
            .trim()
            .strip_prefix(command)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or_else(|| anyhow::anyhow!("unexpected answer from the child host: {line:?}"))?;
        Ok(serde_json::from_str(json)?)
    }

    /// The child's resident memory (`VmRSS`), KiB.
    pub(crate) fn rss_kib(&self) -> anyhow::Result<u64> {
        status_kib(self.pid(), "VmRSS")
    }

    /// CPU time the child has used (user + system, all threads).
    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        cpu_time(self.pid())
    }

    /// Closes the child's stdin (it shuts its host down and exits) and waits up to `grace`,
    /// then kills it.
    pub(crate) fn stop(&mut self, grace: Duration) {
        drop(self.io.lock().unwrap_or_else(|e| e.into_inner()).take());
        reap(&mut self.child, grace);
    }
}

/// Waits up to `grace` for `child` to exit (its stdin closed by the caller), then kills it.
pub(crate) fn reap(child: &mut Child, grace: Duration) {
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for ChildHost {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(2));
    }
}

/// A `KiB` field (`VmRSS`, `VmHWM`) of `/proc/PID/status`.
pub(crate) fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_status_kib(&status, field)
        .ok_or_else(|| anyhow::anyhow!("no {field} in /proc/{pid}/status"))
}

/// The value of a `KiB` field in the text of `/proc/PID/status`.
pub(crate) fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time (user + system, all threads) of process `pid`, from `/proc/PID/stat`.
pub(crate) fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_stat_ticks(&stat)?;
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

/// utime + stime (clock ticks) from the text of `/proc/PID/stat`.
pub(crate) fn parse_stat_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's value, if that fails).
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// The machine's 1-minute load average (`/proc/loadavg`; NaN if unreadable): how much else
/// was running beside an experiment.
pub(crate) fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The CPUs process `pid` (this process: `None`) may run on, from `Cpus_allowed_list`.
pub(crate) fn allowed_cpus(pid: Option<u32>) -> Option<String> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix("Cpus_allowed_list:")
            .map(|v| v.trim().to_string())
    })
}

/// The distinct `Cpus_allowed_list`s of every thread of this process, joined by `/`: shows that
/// pinning reached every thread.
pub(crate) fn own_threads_cpus() -> String {
    let mut lists = std::collections::BTreeSet::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("status")) {
                if let Some(l) = s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
                    lists.insert(l.trim().to_string());
                }
            }
        }
    }
    lists.into_iter().collect::<Vec<_>>().join("/")
}

/// CPUs in a list such as `0-3,6`.
pub(crate) fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<usize>().ok()),
        }
    }
    cpus
}

/// This process pinned to some CPUs, every thread (`taskset -a -p`); dropping it restores the
/// CPUs it had. Threads started later inherit the pinning from the thread that starts them.
#[derive(Debug)]
pub(crate) struct PinnedSelf {
    restore: String,
}

impl PinnedSelf {
    /// Pins every thread of this process to `cpus` (a `taskset` list).
    pub(crate) fn pin(cpus: &str) -> anyhow::Result<PinnedSelf> {
        let restore = allowed_cpus(None).ok_or_else(|| anyhow::anyhow!("no Cpus_allowed_list"))?;
        taskset_self(cpus)?;
        Ok(PinnedSelf { restore })
    }
}

impl Drop for PinnedSelf {
    fn drop(&mut self) {
        let _ = taskset_self(&self.restore);
    }
}

fn taskset_self(cpus: &str) -> anyhow::Result<()> {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus])
        .arg(std::process::id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "taskset -a -p -c {cpus} failed: {status}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_flags_round_trip() {
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            host: HostArgs,
        }
        use clap::Parser;
        let args = HostArgs {
            max_concurrent_calls: 8,
            max_queued_calls: 4,
            min_threads: Some(8),
            worker_threads: Some(1),
            ..HostArgs::default()
        };
        let parsed =
            Cli::try_parse_from(std::iter::once("host".to_string()).chain(args.to_flags()))
                .unwrap();
        assert_eq!(parsed.host, args);
        let parsed = Cli::try_parse_from(["host"]).unwrap();
        assert_eq!(parsed.host, HostArgs::default());
    }

    #[test]
    fn proc_parsers() {
        let status =
            "Name:\tkeel-lab\nVmHWM:\t   20480 kB\nVmRSS:\t   16384 kB\nCpus_allowed_list:\t0-1\n";
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(16384));
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(20480));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
        let stat = "1234 (keel (lab) x) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 9 0";
        assert_eq!(parse_stat_ticks(stat), Some(300));
        assert_eq!(parse_cpu_list("0-1"), vec![0, 1]);
        assert_eq!(parse_cpu_list("0,2-4, 7"), vec![0, 2, 3, 4, 7]);
        assert!(parse_cpu_list("").is_empty());
    }

    #[test]
    fn own_cpu_readings() {
        // Linux only (CI and the lab's machines).
        let list = allowed_cpus(None).expect("Cpus_allowed_list");
        assert!(!parse_cpu_list(&list).is_empty());
        assert!(!own_threads_cpus().is_empty());
        assert!(cpu_time(std::process::id()).is_some());
        assert!(loadavg() >= 0.0);
    }
}
