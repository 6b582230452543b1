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

use keel_examples::transfer::{self, TransferClient};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

struct Args {
    bytes: u64,
    binding: String,
    json: bool,
    serve: Option<String>,
}

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
        .map(|n| n * mul)
        .map_err(|_| format!("bad size `{s}` (e.g. 1GiB, 64MiB, 1000)"))
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        bytes: 1 << 30,
        binding: "tcp".into(),
        json: false,
        serve: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bytes" => args.bytes = parse_size(&it.next().ok_or("--bytes needs a size")?)?,
            "--binding" => args.binding = it.next().ok_or("--binding needs a name")?,
            "--json" => args.json = true,
            "--serve" => args.serve = Some(it.next().ok_or("--serve needs a URL")?),
            other => {
                return Err(format!(
                    "unknown argument `{other}`; usage: [--bytes N] [--binding tcp|unix|http] \
                     [--json] | --serve URL"
                ))
            }
        }
    }
    Ok(args)
}

fn listen_url(binding: &str) -> Result<String, String> {
    Ok(match binding {
        "tcp" => "tcp://127.0.0.1:0".into(),
        "http" => "http://127.0.0.1:0".into(),
        "unix" => format!(
            "unix://{}/keel-streaming-{}.sock",
            std::env::temp_dir().display(),
            std::process::id()
        ),
        other => return Err(format!("unknown binding `{other}` (tcp, unix, http)")),
    })
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

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    if let Some(url) = args.serve {
        keel_examples::serve_forever(transfer::host(&url)?);
    }
    let host = ChildHost::start(&listen_url(&args.binding)?)?;
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
        let mut phases = Vec::new();

        let rss_before_kib = host.reset_peak()?;
        let started = Instant::now();
        let got = client.upload(transfer::zeros(args.bytes)).await?;
        let secs = started.elapsed().as_secs_f64();
        if got != args.bytes {
            return Err(format!("the host received {got} of {} bytes", args.bytes).into());
        }
        phases.push(Phase {
            name: "upload",
            secs,
            rss_before_kib,
            peak_kib: host.mem_kib("VmHWM")?,
        });

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
        phases.push(Phase {
            name: "download",
            secs,
            rss_before_kib,
            peak_kib: host.mem_kib("VmHWM")?,
        });
        Ok::<_, Box<dyn std::error::Error>>(phases)
    })?;

    let mib = args.bytes as f64 / (1024.0 * 1024.0);
    if args.json {
        let fields: Vec<String> = phases
            .iter()
            .map(|p| {
                format!(
                    "\"{0}_secs\":{1:.3},\"{0}_mib_per_s\":{2:.1},\"{0}_rss_before_kib\":{3},\
                     \"{0}_peak_kib\":{4},\"{0}_growth_mib\":{5:.1}",
                    p.name,
                    p.secs,
                    mib / p.secs,
                    p.rss_before_kib,
                    p.peak_kib,
                    p.growth_mib()
                )
            })
            .collect();
        println!(
            "{{\"binding\":\"{}\",\"bytes\":{},{}}}",
            args.binding,
            args.bytes,
            fields.join(",")
        );
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
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
    } else {
        format!("{bytes} bytes")
    }
}
