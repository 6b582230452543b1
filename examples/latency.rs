//! Small-call latency over loopback TCP: keel sync and async operations beside raw TCP
//! ping-pong, measured in the same run (10,000 calls each after 1,000 warm-up calls).
//!
//! ```text
//! cargo run --release --example latency            # table
//! cargo run --release --example latency -- --json  # and one JSON object as the last line
//! ```
//!
//! Loopback latency on a 2-core machine depends on whether both ends share a core, so each row
//! reports the distribution (p50, p99, max; from an HDR histogram of the call times, to 3
//! significant digits), not one number.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use keel_examples::calculator::{self, CalculatorBlockingClient, CalculatorClient};
use serde::Serialize;

const WARMUP: usize = 1_000;
const CALLS: usize = 10_000;

/// Small-call latency over loopback TCP: keel sync and async operations beside raw TCP
/// ping-pong, 10,000 calls each after 1,000 warm-up calls; prints p50, p99 and max per row.
#[derive(Debug, Parser)]
#[command(name = "latency")]
struct Cli {
    /// Also print one JSON object (p50 and p99 of every row, µs) as the last line
    #[arg(long)]
    json: bool,
}

/// Call times in ns, 1 ns to 60 s, to 3 significant digits (each within 0.1 %).
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
}

/// Latency distribution of one row, in microseconds (to 0.1 µs).
struct Row {
    name: &'static str,
    p50: f64,
    p99: f64,
    max: f64,
}

fn summarize(name: &'static str, h: &Histogram<u64>) -> Row {
    let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
    Row {
        name,
        p50: us(h.value_at_quantile(0.50)),
        p99: us(h.value_at_quantile(0.99)),
        max: us(h.max()),
    }
}

/// The `--json` line: p50 and p99 of each row, µs, in the table's order.
#[derive(Serialize)]
struct Json {
    raw_tcp_p50_us: f64,
    raw_tcp_p99_us: f64,
    keel_sync_p50_us: f64,
    keel_sync_p99_us: f64,
    keel_async_p50_us: f64,
    keel_async_p99_us: f64,
    keel_sync_async_client_p50_us: f64,
    keel_sync_async_client_p99_us: f64,
}

fn time_calls(mut call: impl FnMut()) -> Histogram<u64> {
    for _ in 0..WARMUP {
        call();
    }
    let mut h = histogram();
    for _ in 0..CALLS {
        let t = Instant::now();
        call();
        record(&mut h, t.elapsed());
    }
    h
}

/// Raw TCP ping-pong with 32-byte messages: the physical limit of a call here.
fn raw_tcp() -> Histogram<u64> {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = [0u8; 32];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_nodelay(true).expect("nodelay");
    let mut buf = [7u8; 32];
    let samples = time_calls(|| {
        c.write_all(&buf).expect("write");
        c.read_exact(&mut buf).expect("read");
    });
    drop(c);
    server.join().expect("server");
    samples
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let json = Cli::parse().json;
    let raw = raw_tcp();
    let host = calculator::host("tcp://127.0.0.1:0")?;
    let blocking = CalculatorBlockingClient::connect(host.url())?;
    let sync_op = time_calls(|| {
        blocking.add(1.0, 2.0).expect("add");
    });
    let async_op = time_calls(|| {
        blocking.multiply(3.0, 4.0).expect("multiply");
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let async_client = rt.block_on(CalculatorClient::connect(host.url()))?;
    let from_async = rt.block_on(async {
        let mut h = histogram();
        for i in 0..WARMUP + CALLS {
            let t = Instant::now();
            async_client.add(1.0, 2.0).await.expect("add");
            if i >= WARMUP {
                record(&mut h, t.elapsed());
            }
        }
        h
    });
    host.shutdown();

    let rows = [
        summarize("raw TCP ping-pong (32 B)", &raw),
        summarize("keel sync op, blocking client", &sync_op),
        summarize("keel async op, blocking client", &async_op),
        summarize("keel sync op, async client", &from_async),
    ];
    println!("{CALLS} calls each after {WARMUP} warm-up calls, loopback TCP, one client:");
    println!("{:<34} {:>9} {:>9} {:>9}", "", "p50 µs", "p99 µs", "max µs");
    for r in &rows {
        println!(
            "{:<34} {:>9.1} {:>9.1} {:>9.1}",
            r.name, r.p50, r.p99, r.max
        );
    }
    if json {
        let [raw, sync, async_op, async_client] = &rows;
        let line = Json {
            raw_tcp_p50_us: raw.p50,
            raw_tcp_p99_us: raw.p99,
            keel_sync_p50_us: sync.p50,
            keel_sync_p99_us: sync.p99,
            keel_async_p50_us: async_op.p50,
            keel_async_p99_us: async_op.p99,
            keel_sync_async_client_p50_us: async_client.p50,
            keel_sync_async_client_p99_us: async_client.p99,
        };
        println!("{}", serde_json::to_string(&line)?);
    }
    Ok(())
}
