//! Small-call latency over loopback TCP: keel sync and async operations beside raw TCP
//! ping-pong, measured in the same run (10,000 calls each after 1,000 warm-up calls).
//!
//! ```text
//! cargo run --release --example latency            # table
//! cargo run --release --example latency -- --json  # and one JSON object as the last line
//! ```
//!
//! Loopback latency on a 2-core machine depends on whether both ends share a core, so each row
//! reports the distribution (p50, p99, max), not one number.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use keel_examples::calculator::{self, CalculatorBlockingClient, CalculatorClient};

const WARMUP: usize = 1_000;
const CALLS: usize = 10_000;

/// Latency distribution of one row, in microseconds.
struct Row {
    name: &'static str,
    p50: f64,
    p99: f64,
    max: f64,
}

fn summarize(name: &'static str, mut samples: Vec<Duration>) -> Row {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| us(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    Row {
        name,
        p50: at(0.50),
        p99: at(0.99),
        max: us(*samples.last().expect("samples")),
    }
}

fn time_calls(mut call: impl FnMut()) -> Vec<Duration> {
    for _ in 0..WARMUP {
        call();
    }
    (0..CALLS)
        .map(|_| {
            let t = Instant::now();
            call();
            t.elapsed()
        })
        .collect()
}

/// Raw TCP ping-pong with 32-byte messages: the physical limit of a call here.
fn raw_tcp() -> Vec<Duration> {
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
    let json = std::env::args().any(|a| a == "--json");
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
        let mut samples = Vec::with_capacity(CALLS);
        for i in 0..WARMUP + CALLS {
            let t = Instant::now();
            async_client.add(1.0, 2.0).await.expect("add");
            if i >= WARMUP {
                samples.push(t.elapsed());
            }
        }
        samples
    });
    host.shutdown();

    let rows = [
        summarize("raw TCP ping-pong (32 B)", raw),
        summarize("keel sync op, blocking client", sync_op),
        summarize("keel async op, blocking client", async_op),
        summarize("keel sync op, async client", from_async),
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
        let keys = [
            "raw_tcp",
            "keel_sync",
            "keel_async",
            "keel_sync_async_client",
        ];
        let fields: Vec<String> = keys
            .iter()
            .zip(&rows)
            .map(|(k, r)| format!("\"{k}_p50_us\":{:.1},\"{k}_p99_us\":{:.1}", r.p50, r.p99))
            .collect();
        println!("{{{}}}", fields.join(","));
    }
    Ok(())
}
