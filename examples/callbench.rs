//! Call throughput and latency of one keel client against a host in another process:
//! `Calculator.add` (or, with `--payload`, an echo of that many bytes of text) with a number of
//! calls in flight on one connection, optionally with request metadata or compression, so that
//! the cost of a feature is measured beside the plain call.
//!
//! ```text
//! cargo run --release --example callbench                          # tcp, 64 in flight, 5 s
//! cargo run --release --example callbench -- --inflight 1 --metadata 5 --json
//! cargo run --release --example callbench -- --inflight 1 --async-op
//! cargo run --release --example callbench -- --payload 65536 --compression zstd
//! cargo run --release --example callbench -- --url http://127.0.0.1:0 --seconds 3
//! cargo run --release --example callbench -- --url http://127.0.0.1:0 --http2 --async-op
//! ```
//!
//! The host runs in a child process (this binary with `--serve`), so client and host do not
//! share a runtime; pin both with `taskset` to compare runs on a noisy machine.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use keel_examples::calculator::{self, CalculatorClient};
use keel_examples::wan::{WanClient, WanImpl, WanServer};

/// Small-call throughput and latency of one client against a host in a child process.
#[derive(Debug, Parser)]
#[command(name = "callbench")]
struct Cli {
    /// Where the host listens (port 0 picks one)
    #[arg(long, default_value = "tcp://127.0.0.1:0")]
    url: String,
    /// Calls in flight at once, all on one connection
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// Seconds to measure (after one second of warm-up)
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Request metadata entries sent with every call (each a 24-byte text value)
    #[arg(long, default_value_t = 0)]
    metadata: usize,
    /// Echo this many bytes of JSON-like text each way instead of `add(1, 2)`
    #[arg(long, default_value_t = 0)]
    payload: usize,
    /// Call `multiply` (an `async fn` operation, run on the host's runtime) instead of `add`
    /// (a `fn` operation, run on a keel-pool thread)
    #[arg(long)]
    async_op: bool,
    /// With an http:// URL: HTTP/2 (h2c, every call on one multiplexed connection) instead of
    /// HTTP/1.1 (a pool of connections, one call at a time each)
    #[arg(long)]
    http2: bool,
    /// Compress requests and ask for compressed replies: zstd or gzip
    #[arg(long)]
    compression: Option<String>,
    /// Print one JSON object as the last line
    #[arg(long)]
    json: bool,
    /// Host only (what the benchmark starts in its child process)
    #[arg(long, hide = true)]
    serve: bool,
    /// With --serve: an admin endpoint on URL (e.g. http://127.0.0.1:9464) serving GET
    /// /metrics (Prometheus text), /healthz and /readyz
    #[arg(long, value_name = "URL", requires = "serve")]
    admin: Option<String>,
}

fn main() {
    let cli = Cli::parse();
    if cli.serve {
        let builder = keel::Host::builder()
            .service(calculator::CalculatorServer::new(calculator::Calc))
            .service(WanServer::new(WanImpl))
            .endpoint(&cli.url);
        let host = keel_examples::with_admin(builder, cli.admin.as_deref())
            .start()
            .expect("host starts");
        keel_examples::serve_until_signal(host);
    }
    let (mut child, url) = spawn_host(&cli.url);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let result = rt.block_on(measure(&cli, &url));
    let _ = child.kill();
    let _ = child.wait();
    let (calls_per_sec, p50_us, p99_us) = result;
    let compression = cli.compression.as_deref().unwrap_or("none");
    println!(
        "{} in flight, {} metadata entries, payload {} B, compression {compression}: \
         {calls_per_sec:.0} calls/s, p50 {p50_us:.1} µs, p99 {p99_us:.1} µs",
        cli.inflight, cli.metadata, cli.payload
    );
    if cli.json {
        println!(
            "{{\"scenario\":\"callbench\",\"url\":\"{}\",\"inflight\":{},\"metadata\":{},\"payload\":{},\"compression\":\"{compression}\",\"calls_per_sec\":{calls_per_sec:.0},\"p50_us\":{p50_us:.2},\"p99_us\":{p99_us:.2}}}",
            url.split("://").next().unwrap_or(""),
            cli.inflight,
            cli.metadata,
            cli.payload
        );
    }
}

/// Starts this binary with `--serve` and reads the URL it listens on.
fn spawn_host(url: &str) -> (Child, String) {
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe)
        .args(["--serve", "--url", url])
        .stdout(Stdio::piped())
        .spawn()
        .expect("host process starts");
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines.next().expect("host output").expect("utf-8");
        if let Some(url) = line.strip_prefix("listening on ") {
            break url.to_string();
        }
    };
    // Keep draining the child's output so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, url)
}

async fn measure(cli: &Cli, url: &str) -> (f64, f64, f64) {
    let mut md = keel::Metadata::new();
    for i in 0..cli.metadata {
        md.insert(&format!("x-bench-key-{i}"), "abcdefghijklmnopqrstuvwx")
            .expect("valid metadata");
    }
    let mut builder = keel::Channel::builder(url);
    if cli.http2 {
        builder = builder.http_version(keel::client::HttpVersion::Http2);
    }
    if let Some(name) = &cli.compression {
        let codec = keel::Compression::from_token(name).expect("zstd or gzip");
        builder = builder.compression(codec);
    }
    let channel = builder.connect().await.expect("connect");
    let client = CalculatorClient::new(channel.clone()).with_metadata(md.clone());
    let wan = WanClient::new(channel).with_metadata(md);
    let text: String = "{\"id\": 12345, \"name\": \"an item\", \"tags\": [\"a\", \"b\"]}, "
        .chars()
        .cycle()
        .take(cli.payload)
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let async_op = cli.async_op;
    let mut tasks = Vec::new();
    for _ in 0..cli.inflight {
        let (client, wan, text, stop, counting, calls) = (
            client.clone(),
            wan.clone(),
            text.clone(),
            stop.clone(),
            counting.clone(),
            calls.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                if text.is_empty() && async_op {
                    let v = client.multiply(1.0, 2.0).await.expect("call");
                    assert_eq!(v, 2.0);
                } else if text.is_empty() {
                    let v = client.add(1.0, 2.0).await.expect("call");
                    assert_eq!(v, 3.0);
                } else {
                    let v = wan.echo(text.clone()).await.expect("call");
                    assert_eq!(v.len(), text.len());
                }
                if counting.load(Ordering::Relaxed) {
                    calls.fetch_add(1, Ordering::Relaxed);
                    h.saturating_record(t.elapsed().as_nanos() as u64);
                }
            }
            h
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    counting.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(cli.seconds)).await;
    counting.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed();
    let n = calls.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    for t in tasks {
        all.add(t.await.expect("task")).expect("same bounds");
    }
    (
        n as f64 / elapsed.as_secs_f64(),
        all.value_at_quantile(0.5) as f64 / 1000.0,
        all.value_at_quantile(0.99) as f64 / 1000.0,
    )
}
