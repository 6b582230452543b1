//! `keel-lab`: replays the seeds' experiments against a real keel host and real clients over
//! real sockets in one process, and reports keel's numbers beside WCF's.
//!
//! ```text
//! keel-lab all [--full] [--json]         every experiment, one table, target/keel-lab/report.html
//! keel-lab first-call                    seed 000
//! keel-lab concurrent --clients 10 --work-ms 1000                     seed 001
//! keel-lab burst --clients 100 --work-ms 2000 --rounds 3 --idle-ms 2500 --keep-alive-ms 1000
//! keel-lab overload [--seconds 5] [--factor 10]                       issue 10: overload
//! keel-lab soak --minutes 10                                          issue 10: soak
//! keel-lab idle --idle-ms 2500 --keep-alive-ms 1000 --gaps 5          seed 003
//! keel-lab wan --binding h2c --mode streamed --rtt-ms 200 --payload large   seed 004, one cell
//! keel-lab wan-matrix [--full]           seed 004: every binding × RTT × payload
//! keel-lab wan-proxy-check               the latency proxy against its settings
//! keel-lab wan --binding tcps --loss-pct 1 --concurrency 64   the TUN link with random loss (root)
//! keel-lab wan-netem-check                the TUN link against its settings (root)
//! keel-lab frozen [--every-ms 10] [--before-secs 1] [--stop-secs 3]  issue 33: a host gone
//! keel-lab hedge [--callers 8] [--calls 5000] [--percentile 90]          issue 33: hedging
//! keel-lab peers [--seconds 3] [--rounds 3]  keel beside raw TCP, tonic, tarpc (and ghz, if on PATH)
//! keel-lab attack <idle|noread|h2-partial|half-frame|slowloris|connect-burst> --target URL [--pid PID]
//! ```
//!
//! `attack` plays a hostile peer against a host running in another process (see [`attack`]).
//!
//! Each prints a readable summary; with `--json`, one JSON object is the last line of stdout.
//! The exit status is 1 when an experiment misses its bar, 2 on an error.

mod attack;
mod child;
mod dist;
mod experiments;
mod lab_service;
mod peers;
mod prom;
mod report;
mod scrape;
mod style;
mod verdict;
mod wan;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use experiments::{
    burst, concurrent, first_call, frozen, hedge, idle, isolation, overload, soak, Binding,
};

/// Replays the seeds' experiments against keel and reports keel's numbers beside WCF's.
#[derive(Debug, Parser)]
#[command(name = "keel-lab", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    common: Common,
}

/// Options every experiment takes.
#[derive(Debug, Args, Clone, Copy)]
struct Common {
    /// The transport the host and the clients use.
    #[arg(long, value_enum, default_value_t = Binding::Tcp, global = true)]
    binding: Binding,
    /// Also print one JSON object as the last line of stdout.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Seed 000: sync, async, async, sync tests on new clients; every call timed; in several
    /// fresh processes, judged on the median one, beside raw TCP's same sequence.
    FirstCall {
        /// Steady-state calls for the p50 (per client kind).
        #[arg(long, default_value_t = 1000)]
        steady_calls: usize,
        /// Rounds, each a fresh process.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// One round of `first-call`, in this process; prints the round as one JSON line.
    #[command(hide = true)]
    FirstCallRound {
        /// Steady-state calls for the p50 (per client kind).
        #[arg(long, default_value_t = 1000)]
        steady_calls: usize,
        /// Raw TCP's sequence before keel's, not after.
        #[arg(long)]
        raw_first: bool,
    },
    /// Seed 001: concurrent clients on their own threads, released together.
    Concurrent {
        /// Concurrent clients.
        #[arg(long, default_value_t = 10)]
        clients: usize,
        /// How long the operation sleeps, ms.
        #[arg(long, default_value_t = 1000)]
        work_ms: u64,
    },
    /// Seed 002: repeated bursts of concurrent blocking calls, separated by idle gaps.
    Burst {
        /// Clients per burst.
        #[arg(long, default_value_t = 100)]
        clients: usize,
        /// How long the operation sleeps, ms.
        #[arg(long, default_value_t = 2000)]
        work_ms: u64,
        /// Bursts.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Idle gap between bursts, ms (longer than the keep-alive, so threads retire).
        #[arg(long, default_value_t = 2500)]
        idle_ms: u64,
        /// The host pool's keep-alive, ms.
        #[arg(long, default_value_t = 1000)]
        keep_alive_ms: u64,
    },
    /// Seed 003: steady calls, then idle gaps longer than the keep-alive, each followed by one
    /// call; raw TCP around gaps of the same length, interleaved.
    Idle {
        /// Idle gap, ms.
        #[arg(long, default_value_t = 2500)]
        idle_ms: u64,
        /// The host pool's keep-alive, ms.
        #[arg(long, default_value_t = 1000)]
        keep_alive_ms: u64,
        /// Steady-state calls before the gap.
        #[arg(long, default_value_t = 1000)]
        steady_calls: usize,
        /// Skip the raw TCP ping-pong measured around the same gaps.
        #[arg(long)]
        no_raw_tcp: bool,
        /// Idle gaps measured (the bar takes medians over at least 5).
        #[arg(long, default_value_t = 5)]
        gaps: usize,
    },
    /// Overload: 10 × what the throttle admits; admitted latency, Busy latency, recovery.
    Overload {
        /// Length of each phase (unloaded, overload, recovery), s.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Offered load under overload, in multiples of what the throttle admits.
        #[arg(long, default_value_t = 10.0)]
        factor: f64,
        /// Throttle: calls running at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Throttle: calls waiting for a slot (beyond them: Busy).
        #[arg(long, default_value_t = 4)]
        queue: usize,
        /// What the operation sleeps, µs.
        #[arg(long, default_value_t = 2000)]
        work_us: u64,
        /// Connections the load is spread over.
        #[arg(long, default_value_t = 8)]
        connections: usize,
        /// Do not pin the host and the load generator to CPUs of their own.
        #[arg(long)]
        no_pin: bool,
    },
    /// Per-service throttles: a second service's p99 while a slow one has `callers` callers,
    /// with the host-wide throttle only and with the slow service on a throttle of its own.
    Isolation {
        /// Callers of the slow service.
        #[arg(long, default_value_t = 1000)]
        callers: usize,
        /// How long a slow call sleeps, ms.
        #[arg(long, default_value_t = 1000)]
        work_ms: u64,
        /// Places of each throttle (calls running at once).
        #[arg(long, default_value_t = 256)]
        places: usize,
        /// Calls of the fast service timed per phase.
        #[arg(long, default_value_t = 2000)]
        fast_calls: usize,
    },
    /// A frozen host found fast: 3 hosts in processes of their own behind one balanced
    /// channel, a call every `every-ms`; one host SIGSTOPped, SIGKILLed, or stopped (its port
    /// closed); the longest wait of any call and the status of the failures.
    Frozen {
        /// Milliseconds between two calls.
        #[arg(long, default_value_t = 10)]
        every_ms: u64,
        /// Seconds of calls before the host goes away.
        #[arg(long, default_value_t = 1.0)]
        before_secs: f64,
        /// Seconds of calls after it went (SIGSTOP: stopped that long, then continued).
        #[arg(long, default_value_t = 3.0)]
        stop_secs: f64,
    },
    /// A host for `frozen`'s child processes (serves until stdin closes).
    #[command(hide = true)]
    FrozenHost {
        /// The loopback port it listens on.
        #[arg(long)]
        port: u16,
    },
    /// Hedging: 3 hosts behind a balanced channel, 5 % of calls slow; p99 without and with
    /// hedging, hedges sent and won, extra load against the retry budget.
    Hedge {
        /// Concurrent callers.
        #[arg(long, default_value_t = 8)]
        callers: usize,
        /// Timed calls per phase.
        #[arg(long, default_value_t = 5000)]
        calls: usize,
        /// Percent of calls that sleep 100 ms (the rest sleep 1 ms).
        #[arg(long, default_value_t = 5.0)]
        slow_percent: f64,
        /// The hedging delay: this percentile of the channel's observed latency.
        #[arg(long, default_value_t = 90.0)]
        percentile: f64,
        /// A fixed hedging delay instead, ms.
        #[arg(long)]
        delay_ms: Option<u64>,
    },
    /// Soak: a mixed load below capacity for minutes; errors, p99 and the host's RSS.
    Soak {
        /// How long, minutes (fractions allowed).
        #[arg(long, conflicts_with = "seconds", required_unless_present = "seconds")]
        minutes: Option<f64>,
        /// How long, seconds (instead of --minutes).
        #[arg(long)]
        seconds: Option<f64>,
        /// Seconds between progress lines.
        #[arg(long, default_value_t = 10.0)]
        interval: f64,
        /// Concurrent clients, each with its own channel.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Calls per second, all clients together.
        #[arg(long, default_value_t = 2000.0)]
        rate: f64,
    },
    /// A keel host for the experiments' child processes (prints its URL, serves until stdin
    /// closes).
    #[command(hide = true)]
    Host(child::HostArgs),
    /// Seed 004, one cell: sequential calls through the latency proxy, beside raw TCP.
    Wan(wan::cli::WanArgs),
    /// Seed 004: every binding and mode at 1, 50, 100, 200 ms, both payloads, beside WCF.
    WanMatrix(wan::cli::MatrixArgs),
    /// The latency proxy measured against its own settings (RTT and bandwidth).
    WanProxyCheck(wan::cli::ProxyCheckArgs),
    /// The TUN link (random loss, UDP) measured against its own settings: TCP and UDP echoes,
    /// the loss rate over many UDP packets, a bulk transfer through the cap. Needs root.
    WanNetemCheck(wan::cli::NetemCheckArgs),
    /// A hostile peer against a running host (another process): idle connections, a peer
    /// that never reads, partial HTTP/2 bodies, half-sent messages, slowloris, a connect
    /// burst; with the host's RSS and a well-behaved probe's answers. Exit 1: the host did not
    /// hold.
    Attack(attack::AttackArgs),
    /// keel beside raw TCP, tonic and tarpc on "add two f64": latency, throughput, CPU per
    /// call, memory per idle connection; and on a server stream: messages/s, CPU per message,
    /// memory while its consumer stalls; servers in child processes.
    Peers(peers::PeersArgs),
    /// A server of one `peers` system (prints its address, serves until stdin closes).
    #[command(hide = true)]
    PeersServe(peers::serve::ServeArgs),
    /// The latency workload of `peers` alone, against a running `peers-serve` (for profiling
    /// one side: run it and the server under callgrind or perf).
    #[command(hide = true)]
    PeersLatency(peers::serve::LatencyArgs),
    /// The streaming workload of `peers` alone, against a running `peers-serve` (for profiling
    /// one side).
    #[command(hide = true)]
    PeersStreaming(peers::serve::StreamingArgs),
    /// The client of `peers`'s stalled-stream check, run by `peers` in a child process of its
    /// own (prints `stall {json}`).
    #[command(hide = true)]
    PeersStall(peers::serve::StallArgs),
    /// Every experiment (quick profile unless --full), one table, and the HTML report.
    All {
        /// The seeds' own timings: 15 s idle, 25 s between bursts, 5 rounds.
        #[arg(long)]
        full: bool,
        /// Where to write the HTML report.
        #[arg(long, default_value = "target/keel-lab/report.html")]
        report: PathBuf,
    },
}

fn main() -> ExitCode {
    // tarpc turns on tracing's `log` feature for this whole binary: with it, and no tracing
    // subscriber, every span records its fields for the `log` crate, a cost per span a service
    // built without tarpc does not pay (docs/history/performance-rounds.md, third round, "The
    // lab's tracing"). A subscriber that wants nothing ends that for every system measured here
    // alike.
    let _ = tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
    let cli = Cli::parse();
    match run(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("keel-lab: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Prints `text`, then the JSON line when asked; returns `pass`.
fn emit<T: Serialize>(json: bool, text: &str, result: &T, pass: bool) -> anyhow::Result<bool> {
    print!("{text}");
    if json {
        println!("{}", serde_json::to_string(result)?);
    }
    Ok(pass)
}

fn run(cli: &Cli) -> anyhow::Result<bool> {
    let Common { binding, json } = cli.common;
    let wan = matches!(cli.command, Command::Wan(_) | Command::WanMatrix(_));
    anyhow::ensure!(
        wan || binding == Binding::Tcp,
        "this experiment runs on tcp only so far (wan and wan-matrix take every binding)"
    );
    match &cli.command {
        &Command::FirstCall {
            steady_calls,
            rounds,
        } => {
            let r = first_call::run(&first_call::Params {
                binding,
                steady_calls,
                rounds,
            })?;
            emit(json, &first_call::summary(&r), &r, r.pass)
        }
        &Command::FirstCallRound {
            steady_calls,
            raw_first,
        } => {
            let round = first_call::run_round(binding, steady_calls, raw_first)?;
            println!("{}", serde_json::to_string(&round)?);
            Ok(true)
        }
        &Command::Concurrent { clients, work_ms } => {
            let r = concurrent::run(&concurrent::Params {
                binding,
                clients,
                work_ms,
            })?;
            emit(json, &concurrent::summary(&r), &r, r.pass)
        }
        &Command::Burst {
            clients,
            work_ms,
            rounds,
            idle_ms,
            keep_alive_ms,
        } => {
            let r = burst::run(&burst::Params {
                binding,
                clients,
                work_ms,
                rounds,
                idle_ms,
                keep_alive_ms,
            })?;
            emit(json, &burst::summary(&r), &r, r.pass)
        }
        &Command::Idle {
            idle_ms,
            keep_alive_ms,
            steady_calls,
            no_raw_tcp,
            gaps,
        } => {
            let r = idle::run(&idle::Params {
                binding,
                idle_ms,
                keep_alive_ms,
                steady_calls,
                raw_tcp: !no_raw_tcp,
                gaps,
            })?;
            emit(json, &idle::summary(&r), &r, r.pass)
        }
        &Command::Overload {
            seconds,
            factor,
            concurrency,
            queue,
            work_us,
            connections,
            no_pin,
        } => {
            let r = overload::run(&overload::Params {
                seconds,
                factor,
                concurrency,
                queue,
                work_us,
                connections,
                pin: !no_pin,
                ..overload::Params::defaults(binding)
            })?;
            emit(json, &overload::summary(&r), &r, r.pass)
        }
        &Command::Frozen {
            every_ms,
            before_secs,
            stop_secs,
        } => {
            let r = frozen::run(&frozen::Params {
                every_ms,
                before_secs,
                stop_secs,
            })?;
            emit(json, &frozen::summary(&r), &r, r.pass)
        }
        &Command::FrozenHost { port } => {
            frozen::serve(port)?;
            Ok(true)
        }
        &Command::Isolation {
            callers,
            work_ms,
            places,
            fast_calls,
        } => {
            let r = isolation::run(&isolation::Params {
                callers,
                work_ms,
                places,
                fast_calls,
            })?;
            emit(json, &isolation::summary(&r), &r, r.pass)
        }
        &Command::Hedge {
            callers,
            calls,
            slow_percent,
            percentile,
            delay_ms,
        } => {
            let r = hedge::run(&hedge::Params {
                callers,
                calls,
                slow_percent,
                percentile,
                delay_ms,
            })?;
            emit(json, &hedge::summary(&r), &r, r.pass)
        }
        &Command::Soak {
            minutes,
            seconds,
            interval,
            clients,
            rate,
        } => {
            let secs = seconds.unwrap_or_else(|| minutes.unwrap_or(0.0) * 60.0);
            let r = soak::run(&soak::Params {
                interval_secs: interval,
                clients,
                rate,
                ..soak::Params::defaults(binding, secs)
            })?;
            emit(json, &soak::summary(&r), &r, r.pass)
        }
        Command::Host(args) => {
            child::serve(args)?;
            Ok(true)
        }
        Command::Wan(a) => wan::cli::wan(binding, a, json),
        Command::WanMatrix(a) => wan::cli::matrix(a, json),
        Command::WanProxyCheck(a) => wan::cli::proxy_check(a, json),
        Command::WanNetemCheck(a) => wan::cli::netem_check(a, json),
        Command::Attack(args) => {
            let (r, text) = attack::run(args)?;
            emit(json, &text, &r, r.held)
        }
        Command::Peers(a) => {
            let r = peers::run(&a.params())?;
            emit(json, &peers::summary(&r), &r, true)
        }
        Command::PeersServe(a) => {
            peers::serve::serve(a)?;
            Ok(true)
        }
        Command::PeersLatency(a) if a.inflight > 1 => {
            let load = peers::measure::Load {
                inflight: a.inflight,
                connections: a.connections,
            };
            peers::measure::calls_in_flight(a.system, &a.addr, load, a.warmup, a.calls)?;
            println!(
                "{} calls, {} in flight over {} connections",
                a.calls, a.inflight, a.connections
            );
            Ok(true)
        }
        Command::PeersLatency(a) => {
            let l = peers::measure::latency(a.system, &a.addr, a.warmup, a.calls)?;
            println!(
                "{} calls: p50 {} µs, p99 {} µs, p99.9 {} µs",
                l.calls, l.p50_us, l.p99_us, l.p999_us
            );
            Ok(true)
        }
        Command::PeersStreaming(a) => {
            if let Some(n) = a.count {
                let t = peers::measure::stream_to_end(a.system, &a.addr, n)?;
                println!("{n} messages in {:.3} s", t.as_secs_f64());
                return Ok(true);
            }
            let window = std::time::Duration::from_secs_f64(a.seconds);
            let pid = a.server_pid.unwrap_or(0);
            let s = peers::measure::streaming(a.system, &a.addr, pid, window / 5, window)?;
            println!(
                "{} messages: {} /s, server / client CPU {} / {} µs per message",
                s.messages, s.messages_per_sec, s.server_cpu_us, s.client_cpu_us
            );
            Ok(true)
        }
        Command::PeersStall(a) => {
            let stall = std::time::Duration::from_secs_f64(a.seconds);
            let s = peers::measure::stall(a.system, &a.addr, a.server_pid, stall)?;
            println!("{}{}", peers::serve::STALL_LINE, serde_json::to_string(&s)?);
            Ok(true)
        }
        Command::All { full, report } => {
            let profile = if *full {
                report::Profile::full()
            } else {
                report::Profile::quick()
            };
            let all = report::run_all(binding, &profile)?;
            let text = report::table(&all);
            let html = report::html(&all);
            if let Some(dir) = report.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(report, html)?;
            let text = format!("{text}\nreport: {}\n", report.display());
            emit(json, &text, &all, all.pass)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_the_issue_commands() {
        let cli = Cli::try_parse_from([
            "keel-lab",
            "burst",
            "--clients",
            "1000",
            "--work-ms",
            "2000",
            "--rounds",
            "2",
            "--idle-ms",
            "3000",
            "--keep-alive-ms",
            "1000",
            "--json",
        ])
        .unwrap();
        assert!(cli.common.json);
        assert!(matches!(
            cli.command,
            Command::Burst {
                clients: 1000,
                rounds: 2,
                ..
            }
        ));
        let cli = Cli::try_parse_from(["keel-lab", "--binding", "tcp", "all", "--full"]).unwrap();
        assert!(matches!(cli.command, Command::All { full: true, .. }));
        assert!(Cli::try_parse_from(["keel-lab", "--binding", "carrier-pigeon", "all"]).is_err());
        let cli =
            Cli::try_parse_from(["keel-lab", "overload", "--seconds", "3", "--json"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Overload { seconds, factor, .. } if seconds == 3.0 && factor == 10.0
        ));
        let cli = Cli::try_parse_from(["keel-lab", "soak", "--minutes", "10"]).unwrap();
        assert!(
            matches!(cli.command, Command::Soak { minutes: Some(m), seconds: None, .. } if m == 10.0)
        );
        let cli = Cli::try_parse_from(["keel-lab", "soak", "--seconds", "15"]).unwrap();
        assert!(matches!(cli.command, Command::Soak { seconds: Some(s), .. } if s == 15.0));
        assert!(Cli::try_parse_from(["keel-lab", "soak"]).is_err());
        assert!(
            Cli::try_parse_from(["keel-lab", "soak", "--minutes", "1", "--seconds", "2"]).is_err()
        );
    }

    #[test]
    fn parses_the_peers_commands() {
        let cli = Cli::try_parse_from(["keel-lab", "peers", "--json"]).unwrap();
        assert!(cli.common.json);
        let Command::Peers(a) = &cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(a.params().seconds, 3.0);
        assert_eq!(a.params().systems, peers::System::ALL);
        assert_eq!(a.params().rounds, 3);
        assert_eq!(a.params().stall_seconds, 10.0);
        let cli =
            Cli::try_parse_from(["keel-lab", "peers", "--rounds", "5", "--stall-seconds", "4"])
                .unwrap();
        let Command::Peers(a) = &cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!((a.params().rounds, a.params().stall_seconds), (5, 4.0));
        assert!(Cli::try_parse_from(["keel-lab", "peers", "--rounds", "0"]).is_err());
        let cli = Cli::try_parse_from([
            "keel-lab",
            "peers",
            "--quick",
            "--systems",
            "raw,keel-tcp-sync",
        ])
        .unwrap();
        let Command::Peers(a) = &cli.command else {
            panic!("{:?}", cli.command)
        };
        let p = a.params();
        assert_eq!(
            (p.idle_connections, p.rounds, p.stall_seconds),
            (200, 1, 2.0)
        );
        assert_eq!(p.systems, [peers::System::Raw, peers::System::KeelTcpSync]);
        let cli = Cli::try_parse_from(["keel-lab", "peers-serve", "--system", "tonic"]).unwrap();
        assert!(
            matches!(cli.command, Command::PeersServe(ref s) if s.system == peers::System::Tonic)
        );
        assert!(Cli::try_parse_from(["keel-lab", "peers", "--systems", "grpc-web"]).is_err());
        let cli = Cli::try_parse_from([
            "keel-lab",
            "peers-latency",
            "--system",
            "keel-tcp-async",
            "--addr",
            "tcp://127.0.0.1:1",
            "--calls",
            "5",
        ])
        .unwrap();
        let Command::PeersLatency(a) = &cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(
            (a.system, a.warmup, a.calls, a.inflight, a.connections),
            (peers::System::KeelTcpAsync, 2_000, 5, 1, 1)
        );
        let cli = Cli::try_parse_from([
            "keel-lab",
            "peers-stall",
            "--system",
            "keel-tcp-async",
            "--addr",
            "tcp://127.0.0.1:1",
            "--server-pid",
            "42",
        ])
        .unwrap();
        let Command::PeersStall(a) = &cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!((a.server_pid, a.seconds), (42, 10.0));
        let cli = Cli::try_parse_from([
            "keel-lab",
            "peers-streaming",
            "--system",
            "tonic",
            "--addr",
            "127.0.0.1:1",
        ])
        .unwrap();
        let Command::PeersStreaming(a) = &cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!((a.server_pid, a.seconds, a.count), (None, 3.0, None));
    }

    #[test]
    fn parses_the_wan_commands() {
        let cli = Cli::try_parse_from([
            "keel-lab",
            "wan",
            "--binding",
            "https-h2",
            "--mode",
            "streamed",
            "--rtt-ms",
            "200",
            "--payload",
            "large",
            "--mbit",
            "20",
            "--json",
        ])
        .unwrap();
        assert_eq!(cli.common.binding, Binding::HttpsH2);
        let Command::Wan(a) = &cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(a.mode, wan::Mode::Streamed);
        assert_eq!(a.payload, wan::Payload::Large);
        assert_eq!((a.rtt_ms, a.mbit, a.seconds), (200.0, Some(20.0), 10.0));
        // Seed 004's setting by default: no loss, one call at a time, the proxy.
        assert_eq!(
            (a.loss_pct, a.concurrency, a.link, a.seed),
            (0.0, 1, None, None)
        );
        let cli = Cli::try_parse_from([
            "keel-lab",
            "wan",
            "--loss-pct",
            "3",
            "--concurrency",
            "64",
            "--link",
            "tun",
            "--seed",
            "36",
        ])
        .unwrap();
        let Command::Wan(a) = &cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(
            (a.loss_pct, a.concurrency, a.link, a.seed),
            (3.0, 64, Some(wan::path::LinkKind::Tun), Some(36))
        );
        // Loss on the proxy is refused before anything starts, with the reason.
        let cli =
            Cli::try_parse_from(["keel-lab", "wan", "--loss-pct", "1", "--link", "proxy"]).unwrap();
        let e = format!("{:#}", run(&cli).unwrap_err());
        assert!(e.contains("CAP_NET_ADMIN"), "{e}");
        let cli =
            Cli::try_parse_from(["keel-lab", "wan-netem-check", "--packets", "20000"]).unwrap();
        assert!(
            matches!(cli.command, Command::WanNetemCheck(ref c) if c.packets == 20_000 && c.loss_pct == 3.0)
        );
        for b in ["tcp", "tcps", "http1", "h2c", "https-h1", "https-h2"] {
            let cli = Cli::try_parse_from(["keel-lab", "wan", "--binding", b]).unwrap();
            assert_eq!(cli.common.binding.name(), b);
        }
        let cli = Cli::try_parse_from(["keel-lab", "wan-matrix", "--full"]).unwrap();
        assert!(matches!(cli.command, Command::WanMatrix(ref m) if m.full));
        let cli =
            Cli::try_parse_from(["keel-lab", "wan-proxy-check", "--rtt-ms", "1,200"]).unwrap();
        assert!(matches!(cli.command, Command::WanProxyCheck(ref c) if c.rtt_ms == [1.0, 200.0]));
        // The other experiments refuse a binding they do not run on yet.
        let cli = Cli::try_parse_from(["keel-lab", "idle", "--binding", "h2c"]).unwrap();
        assert!(run(&cli).is_err());
        let cli = Cli::try_parse_from([
            "keel-lab",
            "attack",
            "h2-partial",
            "--target",
            "http://127.0.0.1:7000",
            "--pid",
            "42",
            "--json",
        ])
        .unwrap();
        assert!(cli.common.json);
        match cli.command {
            Command::Attack(a) => {
                assert_eq!(a.kind, attack::Kind::H2Partial);
                assert_eq!(a.pid, Some(42));
            }
            other => panic!("expected attack, got {other:?}"),
        }
        assert!(Cli::try_parse_from(["keel-lab", "attack", "teardrop", "--target", "x"]).is_err());
    }
}
