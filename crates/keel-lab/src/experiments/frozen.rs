//! Issue 33, item 5: a frozen host is found fast under any traffic. Three hosts, each in a
//! process of its own (`keel-lab frozen-host`, hidden), behind one balanced channel
//! (`Channel::balanced`); a call every 10 ms, every other one of an idempotent operation; then
//! one host goes away, three ways in three runs: frozen (SIGSTOP, for `stop_secs`, then
//! SIGCONT), killed (SIGKILL: the kernel resets its connections) and stopped (its port closed
//! after a drain). Reported per run: the longest wait of any call, how calls ended (answered,
//! answered after a wait (moved to another host), failed and with which status), and the
//! status a call made to that host alone gets (one that is not idempotent, on a channel of
//! its own: the error shape of "host gone").
//!
//! The goal: no call waits more than 1 s + 1 RTT before it fails or moves to another host,
//! and the status is the same (`Unavailable`) in all three runs. A call that moved is timed to
//! its answer from the other host, so its wait includes the retry's jittered backoff (under
//! 10 ms by default) and that call's own round trip.

// `#[keel::contract]` declares the generated clients' methods `pub` whatever the trait's
// visibility, which is unreachable in this binary.
#![allow(unreachable_pub)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{round1, Dist, Latencies};

/// What the frozen-host children serve.
#[keel::contract]
pub(crate) trait Frozen {
    /// Waits `ms`, then answers the host's port. Idempotent: sent again to another host when
    /// its host is gone.
    #[keel(idempotent)]
    async fn read(&self, ms: u64) -> u16;
    /// Waits `ms`, then answers the host's port. Not idempotent: never sent twice once it may
    /// have reached a host.
    async fn write(&self, ms: u64) -> u16;
}

struct Port(u16);

impl Frozen for Port {
    async fn read(&self, ms: u64) -> u16 {
        pause(ms).await;
        self.0
    }
    async fn write(&self, ms: u64) -> u16 {
        pause(ms).await;
        self.0
    }
}

/// Sleeps `ms`; not at all for 0 (tokio's timer would round it up to its next millisecond).
async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// `keel-lab frozen-host --port N`: serves [`Frozen`] on `tcp://127.0.0.1:N` with default
/// settings, prints `listening on URL`, and shuts down (draining) when stdin closes.
pub(crate) fn serve(port: u16) -> anyhow::Result<()> {
    let host = keel::Host::builder()
        .service(FrozenServer::new(Port(port)))
        .endpoint(format!("tcp://127.0.0.1:{port}"))
        .start()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", host.url())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        line?;
    }
    host.shutdown();
    Ok(())
}

/// How the host goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Gone {
    /// SIGSTOP: the process stops; its kernel keeps its connections open and acknowledges
    /// bytes. Only keel's liveness can tell.
    Sigstop,
    /// SIGKILL: the process ends; its kernel resets its connections.
    Sigkill,
    /// The host shuts down (a drain: GoAway, calls in flight finish), so its port is closed.
    ClosedPort,
}

impl Gone {
    fn name(self) -> &'static str {
        match self {
            Gone::Sigstop => "SIGSTOP",
            Gone::Sigkill => "SIGKILL",
            Gone::ClosedPort => "closed port",
        }
    }
}

/// Settings of the experiment.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Params {
    /// Milliseconds between two calls.
    pub(crate) every_ms: u64,
    /// Seconds of calls before the host goes away.
    pub(crate) before_secs: f64,
    /// Seconds of calls after it went away (SIGSTOP: it is stopped that long, then continued).
    pub(crate) stop_secs: f64,
}

/// How one run's calls ended.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Run {
    /// How the host went away.
    pub(crate) gone: Gone,
    /// Calls made (half idempotent).
    pub(crate) calls: u64,
    /// Every call's wait, start to answer or failure.
    pub(crate) wait: Dist,
    /// The longest wait of a call, ms.
    pub(crate) longest_ms: f64,
    /// Whether that call was idempotent.
    pub(crate) longest_idempotent: bool,
    /// Calls answered by another host after waiting at least 100 ms (on the gone host: moved;
    /// idempotent ones, or ones the gone host never received).
    pub(crate) moved: u64,
    /// Calls sent while the host was gone and answered by it all the same (SIGSTOP: a call
    /// that waited on it until SIGCONT).
    pub(crate) answered_by_gone_host: u64,
    /// Calls failed, by status code (`none` for an error without one).
    pub(crate) failed: BTreeMap<String, u64>,
    /// Idempotent calls failed (the goal: none).
    pub(crate) idempotent_failed: u64,
    /// Retries the balanced channel made.
    pub(crate) retries: u64,
    /// The status of a call (not idempotent) to the gone host alone, on a channel of its own:
    /// in flight when it went (SIGSTOP, SIGKILL) or made after (closed port).
    pub(crate) alone_status: String,
    /// That call's error text.
    pub(crate) alone_error: String,
    /// How long that call waited, ms.
    pub(crate) alone_wait_ms: f64,
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FrozenResult {
    pub(crate) params: Params,
    /// The loopback round trip: the median of 200 calls before the first run, µs.
    pub(crate) rtt_us: f64,
    pub(crate) runs: Vec<Run>,
    /// The longest wait of any call in any run, ms.
    pub(crate) longest_ms: f64,
    /// The goal: 1 s + 1 RTT, ms.
    pub(crate) goal_ms: f64,
    /// `longest_ms` ≤ `goal_ms`.
    pub(crate) goal_met: bool,
    /// Every failure in every run, and every lone call, `unavailable`.
    pub(crate) same_status: bool,
    /// No idempotent call failed.
    pub(crate) no_idempotent_failed: bool,
    /// All three.
    pub(crate) pass: bool,
}

/// A `keel-lab frozen-host` child process.
struct FrozenHost {
    child: Child,
    stdin: Option<ChildStdin>,
    url: String,
    port: u16,
    /// Reaped: its pid may belong to another process now.
    exited: bool,
}

impl FrozenHost {
    fn start() -> anyhow::Result<FrozenHost> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut child = crate::child::lab_command(None)?
            .args(["frozen-host", "--port", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        out.read_line(&mut line)?;
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the frozen-host child did not start: {line:?}");
        };
        Ok(FrozenHost {
            url: url.to_string(),
            child,
            stdin,
            port,
            exited: false,
        })
    }

    fn signal(&self, signal: &str) -> anyhow::Result<()> {
        // The shell's own `kill`: no `kill` program needed.
        let status = Command::new("sh")
            .args(["-c", "kill -s \"$0\" \"$1\""])
            .arg(signal)
            .arg(self.child.id().to_string())
            .status()?;
        anyhow::ensure!(status.success(), "kill -{signal}: {status}");
        Ok(())
    }

    /// Closes stdin: the host drains and exits (its port closes); waits for that.
    fn stop(&mut self) {
        drop(self.stdin.take());
        crate::child::reap(&mut self.child, Duration::from_secs(5));
        self.exited = true;
    }
}

impl Drop for FrozenHost {
    fn drop(&mut self) {
        if self.exited {
            return;
        }
        // A stopped process dies of SIGKILL too; continued first, it also frees its port
        // like any other.
        let _ = self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One call's outcome.
struct Ended {
    idempotent: bool,
    /// Sent after the host went away (and, SIGSTOP, before it continued).
    sent_while_gone: bool,
    took: Duration,
    answer: Result<u16, keel::Error>,
}

/// Runs the three cases.
pub(crate) fn run(p: &Params) -> anyhow::Result<FrozenResult> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()?;
    let (rtt, runs) = rt.block_on(async {
        let rtt = measure_rtt().await?;
        let mut runs = Vec::new();
        for gone in [Gone::Sigstop, Gone::Sigkill, Gone::ClosedPort] {
            runs.push(one_run(p, gone).await?);
        }
        anyhow::Ok((rtt, runs))
    })?;
    let longest_ms = runs.iter().map(|r| r.longest_ms).fold(0.0, f64::max);
    let goal_ms = 1_000.0 + rtt.as_secs_f64() * 1e3;
    let same_status = runs.iter().all(|r| {
        r.alone_status == "unavailable" && r.failed.keys().all(|code| code == "unavailable")
    });
    let no_idempotent_failed = runs.iter().all(|r| r.idempotent_failed == 0);
    let goal_met = longest_ms <= goal_ms;
    Ok(FrozenResult {
        params: *p,
        rtt_us: round1(rtt.as_secs_f64() * 1e6),
        runs,
        longest_ms: round1(longest_ms),
        goal_ms: (goal_ms * 1e3).round() / 1e3,
        goal_met,
        same_status,
        no_idempotent_failed,
        pass: goal_met && same_status && no_idempotent_failed,
    })
}

/// The median of 200 calls to one host: the loopback round trip (and a call's own cost).
async fn measure_rtt() -> anyhow::Result<Duration> {
    let host = tokio::task::spawn_blocking(FrozenHost::start).await??;
    let client = FrozenClient::new(keel::Channel::new(&host.url)?);
    client.read(0).await?;
    let mut latencies = Latencies::new();
    for _ in 0..200 {
        let start = Instant::now();
        client.read(0).await?;
        latencies.record(start.elapsed());
    }
    Ok(Duration::from_secs_f64(latencies.dist().p50_us / 1e6))
}

async fn one_run(p: &Params, gone: Gone) -> anyhow::Result<Run> {
    let mut hosts = tokio::task::spawn_blocking(|| {
        (0..3)
            .map(|_| FrozenHost::start())
            .collect::<anyhow::Result<Vec<_>>>()
    })
    .await??;
    let urls: Vec<String> = hosts.iter().map(|h| h.url.clone()).collect();
    let channel = keel::Channel::balanced(urls).build()?;
    let client = FrozenClient::new(channel.clone());
    for _ in 0..30 {
        client.read(0).await?;
    }
    let victim_port = hosts[1].port;
    // The lone call: to the victim only, not idempotent, in flight when it goes.
    let alone = FrozenClient::new(keel::Channel::new(&hosts[1].url)?);
    alone.write(0).await?;
    let mut alone_call = None;

    let ended = Arc::new(Mutex::new(Vec::new()));
    let every = Duration::from_millis(p.every_ms);
    let start = Instant::now();
    let went_at = start + Duration::from_secs_f64(p.before_secs);
    let back_at = went_at + Duration::from_secs_f64(p.stop_secs);
    let end = back_at + Duration::from_secs(1);
    let (mut went, mut back) = (None, false);
    let mut calls = Vec::new();
    let mut alone_began = None;
    for n in 0u64.. {
        let at = start + every * n as u32;
        if at >= end {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        // The lone call leaves 20 ms before the host goes, so that it is in flight then. (A
        // call that had waited past a ping the host answered, with no call since, would be
        // judged only after the next ping, which keeps the keepalive interval: PROTOCOL.md.)
        if gone != Gone::ClosedPort
            && alone_call.is_none()
            && at + Duration::from_millis(20) >= went_at
        {
            let alone = alone.clone();
            alone_call = Some(tokio::spawn(async move {
                // A reply first, so that the connection is not quiet when the call starts
                // (a call on a quiet one carries a ping; see above).
                if let Err(e) = alone.write(0).await {
                    return (Err(e), Instant::now());
                }
                let r = alone.write(600_000).await;
                (r, Instant::now())
            }));
        }
        if went.is_none() && at >= went_at {
            match gone {
                Gone::Sigstop => hosts[1].signal("STOP")?,
                Gone::Sigkill => hosts[1].signal("KILL")?,
                Gone::ClosedPort => tokio::task::block_in_place(|| hosts[1].stop()),
            }
            went = Some(Instant::now());
            alone_began = went;
        }
        if gone == Gone::Sigstop && !back && at >= back_at {
            hosts[1].signal("CONT")?;
            back = true;
        }
        let sent_while_gone = went.is_some() && !back;
        let (client, ended) = (client.clone(), ended.clone());
        calls.push(tokio::spawn(async move {
            let idempotent = n % 2 == 0;
            let began = Instant::now();
            let answer = if idempotent {
                client.read(0).await
            } else {
                client.write(0).await
            };
            let took = began.elapsed();
            ended.lock().unwrap_or_else(|e| e.into_inner()).push(Ended {
                idempotent,
                sent_while_gone,
                took,
                answer,
            });
        }));
    }
    for call in calls {
        call.await?;
    }
    let outcome = |r: &Result<u16, keel::Error>| match r {
        Ok(port) => (format!("answered by {port}"), String::new()),
        Err(e) => (code_name(e), e.to_string()),
    };
    let ((alone_status, alone_error), alone_wait) = match alone_call {
        Some(call) => match tokio::time::timeout(Duration::from_secs(30), call).await {
            Ok(ended) => {
                let (r, at) = ended?;
                (outcome(&r), at - alone_began.unwrap_or(at))
            }
            Err(_) => (
                ("still waiting after 30 s".to_string(), String::new()),
                Duration::from_secs(30),
            ),
        },
        None => {
            let began = Instant::now();
            let r = alone.write(0).await;
            (outcome(&r), began.elapsed())
        }
    };
    let ended = std::mem::take(&mut *ended.lock().unwrap_or_else(|e| e.into_inner()));
    let mut latencies = Latencies::new();
    let mut failed = BTreeMap::new();
    let (mut moved, mut answered_by_gone_host, mut idempotent_failed) = (0, 0, 0);
    let mut longest = (Duration::ZERO, false);
    for e in &ended {
        latencies.record(e.took);
        if e.took > longest.0 {
            longest = (e.took, e.idempotent);
        }
        match &e.answer {
            Ok(port) => {
                if *port != victim_port && e.took >= Duration::from_millis(100) {
                    moved += 1;
                }
                if *port == victim_port && e.sent_while_gone {
                    answered_by_gone_host += 1;
                }
            }
            Err(err) => {
                *failed.entry(code_name(err)).or_insert(0) += 1;
                if e.idempotent {
                    idempotent_failed += 1;
                }
            }
        }
    }
    let retries = channel.stats().retries;
    drop(hosts);
    Ok(Run {
        gone,
        calls: ended.len() as u64,
        wait: latencies.dist(),
        longest_ms: round1(longest.0.as_secs_f64() * 1e3),
        longest_idempotent: longest.1,
        moved,
        answered_by_gone_host,
        failed,
        idempotent_failed,
        retries,
        alone_status,
        alone_error,
        alone_wait_ms: round1(alone_wait.as_secs_f64() * 1e3),
    })
}

/// An error's status code as its name (`unavailable`), or `none`.
fn code_name(e: &keel::Error) -> String {
    e.status_code()
        .map_or_else(|| "none".to_string(), |c| c.as_str().to_string())
}

/// The text report.
pub(crate) fn summary(r: &FrozenResult) -> String {
    let p = &r.params;
    let mut s = format!(
        "frozen (issue 33, item 5): 3 hosts in processes of their own, one balanced channel, a \
         call every {} ms (every other one idempotent); after {} s one host goes away for {} s; \
         loopback RTT {:.1} µs\n",
        p.every_ms, p.before_secs, p.stop_secs, r.rtt_us
    );
    for run in &r.runs {
        let failed: Vec<String> = run
            .failed
            .iter()
            .map(|(code, n)| format!("{n} {code}"))
            .collect();
        s.push_str(&format!(
            "  {:<12} {} calls: longest wait {:>7.1} ms ({}), p99 {:.1} ms; {} answered after a \
             wait ≥ 100 ms (moved), {} retries; failed: {}; idempotent failed: {}\n",
            run.gone.name(),
            run.calls,
            run.longest_ms,
            if run.longest_idempotent {
                "idempotent"
            } else {
                "not idempotent"
            },
            run.wait.p99_us / 1e3,
            run.moved,
            run.retries,
            if failed.is_empty() {
                "none".to_string()
            } else {
                failed.join(", ")
            },
            run.idempotent_failed
        ));
        s.push_str(&format!(
            "  {:<12} a call to that host alone: {} after {:.1} ms ({})\n",
            "", run.alone_status, run.alone_wait_ms, run.alone_error
        ));
    }
    s.push_str(&format!(
        "  longest wait {:.1} ms against 1 s + 1 RTT = {:.3} ms: {}; one status for a host gone: \
         {}; no idempotent call failed: {}\n",
        r.longest_ms,
        r.goal_ms,
        if r.goal_met { "met" } else { "NOT met" },
        if r.same_status { "yes" } else { "NO" },
        if r.no_idempotent_failed { "yes" } else { "NO" }
    ));
    s
}
