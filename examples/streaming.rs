//! Streamed transfer with bounded memory: uploads and then downloads N bytes (default 1 GiB)
//! to a host running in a child process, and reports how much the host's resident memory grew
//! at its peak during each transfer (Linux: `/proc/PID/status`, peak reset per phase through
//! `/proc/PID/clear_refs`).
//!
//! ```text
//! cargo run --release --example streaming                                # 1 GiB over tcp
//! cargo run --release --example streaming -- --bytes 64MiB --binding unix --json
//! cargo run --release --example streaming -- --serve tcp://127.0.0.1:7002  # host only
//! ```

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use clap::{Parser, ValueEnum};
use keel_examples::transfer::{self, TransferClient};
use serde::Serialize;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Streamed transfer with bounded memory: uploads and then downloads N bytes to a host running in
/// a child process, and reports how much the host's resident memory grew at its peak during each
/// transfer (Linux).
#[derive(Debug, Parser)]
#[command(name = "streaming")]
struct Args {
    /// How much to upload and then download: 1GiB, 64MiB, 512KiB or a number of bytes
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    bytes: u64,
    /// The transport between this process and the host
    #[arg(long, value_enum, default_value_t = Binding::Tcp)]
    binding: Binding,
    /// Print one JSON object (the numbers of both phases) instead of the table
    #[arg(long)]
    json: bool,
    /// Host only, on URL, until interrupted (how the measuring run starts its child)
    #[arg(long, value_name = "URL")]
    serve: Option<String>,
    /// With --serve: an admin endpoint on URL (e.g. http://127.0.0.1:9464) serving GET
    /// /metrics (Prometheus text), /healthz and /readyz
    #[arg(long, value_name = "URL", requires = "serve")]
    admin: Option<String>,
}

/// The transports the host can listen on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Binding {
    /// keel-wire over TCP on loopback
    Tcp,
    /// keel-wire over a Unix socket in the temp directory
    Unix,
    /// HTTP on loopback
    Http,
}

impl Binding {
    /// The URL the host listens on (port 0: a free port).
    fn listen_url(self) -> String {
        match self {
            Binding::Tcp => "tcp://127.0.0.1:0".into(),
            Binding::Http => "http://127.0.0.1:0".into(),
            Binding::Unix => format!(
                "unix://{}/keel-streaming-{}.sock",
                std::env::temp_dir().display(),
                std::process::id()
            ),
        }
    }
}

impl std::fmt::Display for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.to_possible_value().expect("no variant is skipped");
        f.write_str(v.get_name())
    }
}

/// `1GiB`, `64MiB`, `512KiB` or a plain number of bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mul) = if let Some(n) = s.strip_suffix("GiB") {
        (n, 1 << 30)
    } else if let Some(n) = s.strip_suffix("MiB") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("KiB") {
        (n, 1 << 10)
    } else {
        (s, 1)
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("bad size `{s}` (e.g. 1GiB, 64MiB, 1000)"))
}

/// The host in a child process, so its memory is measured alone.
struct ChildHost {
    child: Child,
    url: String,
    /// Kept open: the host writes more lines after its URL.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl ChildHost {
    fn start(url: &str) -> Result<ChildHost, Box<dyn std::error::Error>> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--serve", url])
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(stdout);
        stdout.read_line(&mut line)?;
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("unexpected output from the host: {line:?}"))?
            .to_string();
        Ok(ChildHost {
            child,
            url,
            _stdout: stdout,
        })
    }

    /// `VmRSS` or `VmHWM` of the child, in KiB.
    fn mem_kib(&self, field: &str) -> Result<u64, Box<dyn std::error::Error>> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .ok_or_else(|| format!("no {field} in /proc/PID/status"))?;
        Ok(line
            .split_whitespace()
            .nth(1)
            .ok_or("malformed status line")?
            .parse()?)
    }

    /// Resets the peak (`VmHWM`) to the current RSS; returns the current RSS in KiB.
    fn reset_peak(&self) -> Result<u64, Box<dyn std::error::Error>> {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5")?;
        self.mem_kib("VmRSS")
    }
}

impl Drop for ChildHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Phase {
    name: &'static str,
    secs: f64,
    rss_before_kib: u64,
    peak_kib: u64,
}

impl Phase {
    fn growth_mib(&self) -> f64 {
        self.peak_kib.saturating_sub(self.rss_before_kib) as f64 / 1024.0
    }
}

/// The `--json` line (CI reads `binding` and the `*_growth_mib` keys): per phase, seconds,
/// MiB/s, the host's RSS before it and its peak during it (KiB), and the growth (MiB).
#[derive(Serialize)]
struct Json {
    binding: Binding,
    bytes: u64,
    upload_secs: f64,
    upload_mib_per_s: f64,
    upload_rss_before_kib: u64,
    upload_peak_kib: u64,
    upload_growth_mib: f64,
    download_secs: f64,
    download_mib_per_s: f64,
    download_rss_before_kib: u64,
    download_peak_kib: u64,
    download_growth_mib: f64,
}

/// `x` rounded to `decimals` places (what the JSON line has always carried).
fn round(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(url) = args.serve {
        let builder = keel_examples::with_admin(transfer::builder(&url), args.admin.as_deref());
        keel_examples::serve_until_signal(builder.start()?);
    }
    let host = ChildHost::start(&args.binding.listen_url())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let phases = rt.block_on(async {
        let channel = keel::Channel::builder(&host.url)
            .deadline(std::time::Duration::from_secs(3600))
            .build()?;
        let client = TransferClient::new(channel);
        // Connect, and let the host settle, before measuring.
        client.upload(transfer::zeros(1024)).await?;

        let rss_before_kib = host.reset_peak()?;
        let started = Instant::now();
        let got = client.upload(transfer::zeros(args.bytes)).await?;
        let secs = started.elapsed().as_secs_f64();
        if got != args.bytes {
            return Err(format!("the host received {got} of {} bytes", args.bytes).into());
        }
        let upload = Phase {
            name: "upload",
            secs,
            rss_before_kib,
            peak_kib: host.mem_kib("VmHWM")?,
        };

        let rss_before_kib = host.reset_peak()?;
        let started = Instant::now();
        let mut stream = client.download(args.bytes).await?;
        let mut got = 0u64;
        while let Some(chunk) = stream.next().await {
            got += chunk?.len() as u64;
        }
        let secs = started.elapsed().as_secs_f64();
        if got != args.bytes {
            return Err(format!("received {got} of {} bytes", args.bytes).into());
        }
        let download = Phase {
            name: "download",
            secs,
            rss_before_kib,
            peak_kib: host.mem_kib("VmHWM")?,
        };
        Ok::<_, Box<dyn std::error::Error>>([upload, download])
    })?;

    let mib = args.bytes as f64 / (1024.0 * 1024.0);
    if args.json {
        let [upload, download] = &phases;
        let line = Json {
            binding: args.binding,
            bytes: args.bytes,
            upload_secs: round(upload.secs, 3),
            upload_mib_per_s: round(mib / upload.secs, 1),
            upload_rss_before_kib: upload.rss_before_kib,
            upload_peak_kib: upload.peak_kib,
            upload_growth_mib: round(upload.growth_mib(), 1),
            download_secs: round(download.secs, 3),
            download_mib_per_s: round(mib / download.secs, 1),
            download_rss_before_kib: download.rss_before_kib,
            download_peak_kib: download.peak_kib,
            download_growth_mib: round(download.growth_mib(), 1),
        };
        println!("{}", serde_json::to_string(&line)?);
    } else {
        println!(
            "{} of streamed transfer over {} (host in a child process):",
            human(args.bytes),
            args.binding
        );
        for p in &phases {
            println!(
                "  {:<8} {:>7.2} s  {:>7.1} MiB/s   host RSS {:>6.1} MiB -> peak {:>6.1} MiB \
                 (growth {:.1} MiB)",
                p.name,
                p.secs,
                mib / p.secs,
                p.rss_before_kib as f64 / 1024.0,
                p.peak_kib as f64 / 1024.0,
                p.growth_mib()
            );
        }
    }
    Ok(())
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
    } else {
        format!("{bytes} bytes")
    }
}
