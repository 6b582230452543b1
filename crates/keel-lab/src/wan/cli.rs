//! The options of `keel-lab wan`, `wan-matrix` and `wan-proxy-check`, and what each runs.

use std::path::PathBuf;

use clap::Args;

use super::path::LinkKind;
use super::{cell, check, html, matrix, netem_check, Mode, Payload, Variant};
use crate::experiments::Binding;

/// `keel-lab wan`: one cell (the binding is the global `--binding`).
#[derive(Debug, Clone, Args)]
pub(crate) struct WanArgs {
    /// buffered: the payload as an ordinary argument; streamed: as a ByteStream.
    #[arg(long, value_enum, default_value_t = Mode::Buffered)]
    pub(crate) mode: Mode,
    /// The link's round-trip time, ms.
    #[arg(long, default_value_t = 200.0)]
    pub(crate) rtt_ms: f64,
    /// small: "hi mom" echoed; large: 277 KiB up, its length back.
    #[arg(long, value_enum, default_value_t = Payload::Small)]
    pub(crate) payload: Payload,
    /// How long the timed calls run, s (the seed's loops: 10).
    #[arg(long, default_value_t = 10.0)]
    pub(crate) seconds: f64,
    /// The fewest timed calls, however long they take.
    #[arg(long, default_value_t = 5)]
    pub(crate) min_calls: u64,
    /// The link's cap each way, Mbit/s; 0: none. Default: 20 (2,500 KB/s) for the large
    /// payload, none for the small one.
    #[arg(long)]
    pub(crate) mbit: Option<f64>,
    /// Random packet loss each way, percent. Above 0 the calls run on the TUN link (root or
    /// CAP_NET_ADMIN needed).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) loss_pct: f64,
    /// Calls in flight at once on the client's one connection.
    #[arg(long, default_value_t = 1)]
    pub(crate) concurrency: usize,
    /// proxy: the userland TCP proxy (no root, no loss); tun: TUN devices and a network
    /// namespace (root; loss, and UDP). Default: tun with --loss-pct above 0, else proxy.
    #[arg(long, value_enum)]
    pub(crate) link: Option<LinkKind>,
    /// Seeds the loss generator (default: from the clock; printed either way).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// quic: the congestion controller of both ends (bbr, keel's default, or cubic).
    #[arg(long, value_enum, default_value_t = Congestion::Bbr)]
    pub(crate) quic_congestion: Congestion,
}

/// A `quic://` congestion controller, as `--quic-congestion` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Congestion {
    /// BBR (keel's default).
    Bbr,
    /// CUBIC.
    Cubic,
}

impl From<Congestion> for keel::client::QuicCongestion {
    fn from(c: Congestion) -> Self {
        match c {
            Congestion::Bbr => keel::client::QuicCongestion::Bbr,
            Congestion::Cubic => keel::client::QuicCongestion::Cubic,
        }
    }
}

/// `keel-lab wan-netem-check`.
#[derive(Debug, Clone, Args)]
pub(crate) struct NetemCheckArgs {
    /// The echoes' and the bulk transfer's RTT, ms.
    #[arg(long, default_value_t = 200.0)]
    pub(crate) rtt_ms: f64,
    /// The bulk transfer's cap, Mbit/s.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) mbit: f64,
    /// The loss check's rate, percent.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) loss_pct: f64,
    /// UDP packets the loss check sends.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) packets: u64,
    /// How long the bulk transfer runs, s (its first third is not counted: slow start).
    #[arg(long, default_value_t = 9.0)]
    pub(crate) bulk_seconds: f64,
    /// Seeds the loss generator (default: from the clock; printed either way).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
}

/// A seed from the clock, for runs not given one.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `keel-lab wan-matrix`.
#[derive(Debug, Clone, Args)]
pub(crate) struct MatrixArgs {
    /// 10 s per cell, as the seed (default: 1.5 s and at least 5 calls).
    #[arg(long)]
    pub(crate) full: bool,
    /// Where to write the HTML page (tables and charts).
    #[arg(long, default_value = "target/keel-lab/wan.html")]
    pub(crate) report: PathBuf,
    /// tun: every cell through the TUN link (root), with quic's rows added; proxy: the
    /// userland TCP proxy, as the seed's bars were set (no quic).
    #[arg(long, value_enum, default_value_t = LinkKind::Proxy)]
    pub(crate) link: LinkKind,
}

/// `keel-lab wan-proxy-check`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ProxyCheckArgs {
    /// RTTs to check, ms, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 50.0, 100.0, 200.0])]
    pub(crate) rtt_ms: Vec<f64>,
    /// The cap for the bulk check, Mbit/s.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) mbit: f64,
}

/// Mbit/s to bytes/s (`0`: no cap).
pub(crate) fn mbit_to_bytes(mbit: f64) -> Option<u64> {
    let b = (mbit * 125_000.0).round();
    (b >= 1.0).then_some(b as u64)
}

/// Runs `keel-lab wan`.
pub(crate) fn wan(binding: Binding, a: &WanArgs, json: bool) -> anyhow::Result<bool> {
    anyhow::ensure!(a.rtt_ms > 0.0, "--rtt-ms must be positive");
    let p = cell::Params {
        variant: Variant {
            binding,
            mode: a.mode,
        },
        rtt_ms: a.rtt_ms,
        payload: a.payload,
        bytes_per_sec: a.mbit.map_or(a.payload.default_cap(), mbit_to_bytes),
        seconds: a.seconds,
        min_calls: a.min_calls,
        link: a
            .link
            .unwrap_or(LinkKind::default_for(a.loss_pct, binding.over_udp())),
        loss_pct: a.loss_pct,
        seed: a.seed.unwrap_or_else(clock_seed),
        concurrency: a.concurrency,
        congestion: a.quic_congestion.into(),
    };
    anyhow::ensure!(a.concurrency >= 1, "--concurrency must be at least 1");
    p.link_spec().validate()?;
    if p.loss_pct > 0.0 {
        eprintln!("loss seed: {} (replay with --seed {})", p.seed, p.seed);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lab-client")
        .enable_all()
        .build()?;
    cell::warm_up(&rt, &[binding])?;
    let link = match p.link {
        LinkKind::Proxy => "the proxy",
        LinkKind::Tun => "the TUN link",
    };
    eprintln!("raw TCP through {link}...");
    let raw = cell::measure_raw(&p)?;
    eprintln!("keel {} through {link}...", p.variant.name());
    let r = cell::run(&rt, &p, &raw);
    crate::emit(json, &cell::summary(&r), &r, r.pass)
}

/// Runs `keel-lab wan-matrix` and writes its page.
pub(crate) fn matrix(a: &MatrixArgs, json: bool) -> anyhow::Result<bool> {
    let p = if a.full {
        matrix::MatrixParams::full()
    } else {
        matrix::MatrixParams::quick()
    };
    let p = match a.link {
        LinkKind::Tun => p.on_tun(),
        LinkKind::Proxy => p,
    };
    let m = matrix::run(&p)?;
    if let Some(dir) = a.report.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&a.report, html::page(&m, crate::style::CSS))?;
    let text = format!("{}\nreport: {}\n", matrix::table(&m), a.report.display());
    crate::emit(json, &text, &m, m.pass)
}

/// Runs `keel-lab wan-proxy-check`.
pub(crate) fn proxy_check(a: &ProxyCheckArgs, json: bool) -> anyhow::Result<bool> {
    let cap = mbit_to_bytes(a.mbit).ok_or_else(|| anyhow::anyhow!("--mbit must be positive"))?;
    let c = check::run(&a.rtt_ms, cap)?;
    crate::emit(json, &check::summary(&c), &c, c.pass)
}

/// Runs `keel-lab wan-netem-check`.
pub(crate) fn netem_check(a: &NetemCheckArgs, json: bool) -> anyhow::Result<bool> {
    let cap = mbit_to_bytes(a.mbit).ok_or_else(|| anyhow::anyhow!("--mbit must be positive"))?;
    anyhow::ensure!(a.packets > 0, "--packets must be positive");
    let c = netem_check::run(&netem_check::CheckParams {
        rtt_ms: a.rtt_ms,
        bytes_per_sec: cap,
        loss_pct: a.loss_pct,
        packets: a.packets,
        bulk_seconds: a.bulk_seconds,
        seed: a.seed.unwrap_or_else(clock_seed),
    })?;
    crate::emit(json, &netem_check::summary(&c), &c, c.pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mbit() {
        assert_eq!(mbit_to_bytes(20.0), Some(2_500_000));
        assert_eq!(mbit_to_bytes(0.0), None);
    }
}
