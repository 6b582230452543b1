//! The server side: `keel-lab peers-serve --system S` (a hidden subcommand) serves one system
//! in a child process until its stdin closes; [`PeerServer`] starts and stops that child.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::time::Duration;

use super::system::System;
use super::{keel_peer, raw, tarpc_peer, tonic_peer};

/// Flags of `keel-lab peers-serve`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServeArgs {
    /// The system to serve.
    #[arg(long, value_enum)]
    pub(crate) system: System,
}

/// Flags of `keel-lab peers-latency`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LatencyArgs {
    /// The system `addr` serves.
    #[arg(long, value_enum)]
    pub(crate) system: System,
    /// What `peers-serve` printed after `listening on`.
    #[arg(long)]
    pub(crate) addr: String,
    /// Untimed calls first.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) warmup: usize,
    /// Timed calls.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) calls: usize,
    /// Calls in flight at once on the one connection. Above 1 the calls run as that many
    /// tasks on a runtime with one worker per CPU, as `peers`' throughput workload does, until
    /// `warmup` and then `calls` have been made (no latencies: for profiling each side's cost
    /// per call under load, e.g. `INFLIGHT=64 profile/icount.py`).
    #[arg(long, default_value_t = 1)]
    pub(crate) inflight: usize,
    /// Connections the calls in flight are spread over (with `inflight` above 1), as `peers`'
    /// throughput workload over 8 connections does (`INFLIGHT=64 CONNECTIONS=8
    /// profile/icount.py`).
    #[arg(long, default_value_t = 1)]
    pub(crate) connections: usize,
}

/// Flags of `keel-lab peers-streaming`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StreamingArgs {
    /// The system `addr` serves.
    #[arg(long, value_enum)]
    pub(crate) system: System,
    /// What `peers-serve` printed after `listening on`.
    #[arg(long)]
    pub(crate) addr: String,
    /// The server's process id, for its CPU per message (none: not measured).
    #[arg(long)]
    pub(crate) server_pid: Option<u32>,
    /// Seconds counted (after a warm-up of a fifth of it).
    #[arg(long, default_value_t = 3.0)]
    pub(crate) seconds: f64,
    /// Instead of a timed window: one stream of this many quotes, read to its end (for
    /// `profile/icount.py`, which needs a count of messages that does not depend on time).
    #[arg(long)]
    pub(crate) count: Option<u64>,
}

/// Flags of `keel-lab peers-stall`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StallArgs {
    /// The system `addr` serves.
    #[arg(long, value_enum)]
    pub(crate) system: System,
    /// What `peers-serve` printed after `listening on`.
    #[arg(long)]
    pub(crate) addr: String,
    /// The server's process id (its RSS is read too).
    #[arg(long)]
    pub(crate) server_pid: u32,
    /// Seconds the client reads nothing.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) seconds: f64,
}

/// The line `keel-lab peers-stall` prints its result on (then the result as JSON).
pub(crate) const STALL_LINE: &str = "stall ";

/// Runs the stalled-stream check's client in a child process of its own (`keel-lab
/// peers-stall`), so that the client RSS it reads is the stream's alone, not what this
/// process's earlier workloads left in its heap (memory they freed, which the stream would
/// reuse unseen).
pub(crate) fn stall_in_child(
    system: System,
    addr: &str,
    server_pid: u32,
    stall: Duration,
) -> anyhow::Result<super::measure::Stall> {
    let out = crate::child::lab_command(None)?
        .args(["peers-stall", "--system", system.name(), "--addr", addr])
        .args(["--server-pid", &server_pid.to_string()])
        .args(["--seconds", &stall.as_secs_f64().to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(json) = stdout.lines().find_map(|l| l.strip_prefix(STALL_LINE)) else {
        anyhow::bail!(
            "{}: peers-stall failed ({}): {stdout:?}",
            system.name(),
            out.status
        );
    };
    Ok(serde_json::from_str(json)?)
}

/// `keel-lab peers-serve`: prints `listening on ADDR` (a URL for keel, `host:port` for the
/// others) and serves until stdin closes.
pub(crate) fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let system = args.system;
    if system.is_keel() {
        let host = keel_peer::host(system.listen_url())?;
        announce(host.url())?;
        wait_for_stdin_eof();
        host.shutdown();
        return Ok(());
    }
    // The peers on a tokio runtime with its defaults (one worker per CPU), as their docs use.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(system.listen_url()).await?;
        announce(&listener.local_addr()?.to_string())?;
        let server = tokio::spawn(async move {
            match system {
                System::Raw => raw::serve(listener).await,
                System::Tonic => tonic_peer::serve(listener).await,
                _ => tarpc_peer::serve(listener).await,
            }
        });
        tokio::task::spawn_blocking(wait_for_stdin_eof).await?;
        server.abort();
        anyhow::Ok(())
    })?;
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

fn announce(addr: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {addr}")?;
    out.flush()?;
    Ok(())
}

fn wait_for_stdin_eof() {
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
}

/// A `keel-lab peers-serve` child process.
#[derive(Debug)]
pub(crate) struct PeerServer {
    child: Child,
    stdin: Option<ChildStdin>,
    addr: String,
}

impl PeerServer {
    /// Starts a server of `system`; with `cpus` (a `taskset` list such as `0`), pinned there
    /// from its first instruction.
    pub(crate) fn start(system: System, cpus: Option<&str>) -> anyhow::Result<PeerServer> {
        let mut child = crate::child::lab_command(cpus)?
            .args(["peers-serve", "--system", system.name()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the {} server did not start: {line:?}", system.name());
        };
        Ok(PeerServer {
            addr: addr.to_string(),
            child,
            stdin,
        })
    }

    /// Where it listens: a URL for keel, `host:port` for the others.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        crate::child::reap(&mut self.child, Duration::from_secs(2));
    }
}
