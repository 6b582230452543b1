//! The options of `keel-lab wan`, `wan-matrix` and `wan-proxy-check`, and what each runs.

use std::path::PathBuf;

use clap::Args;

use super::{cell, check, html, matrix, Mode, Payload, Variant};
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
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lab-client")
        .enable_all()
        .build()?;
    cell::warm_up(&rt, &[binding])?;
    eprintln!("raw TCP through the proxy...");
    let raw = cell::measure_raw(&p)?;
    eprintln!("keel {} through the proxy...", p.variant.name());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mbit() {
        assert_eq!(mbit_to_bytes(20.0), Some(2_500_000));
        assert_eq!(mbit_to_bytes(0.0), None);
    }
}
