//! Lost wake-ups on keel-wire's client: a reply that arrived must reach its call without any
//! timer's help. With keepalive off nothing but the reply can wake a waiting call, so a call
//! that misses its wake-up waits until its deadline: every call must be answered, not time
//! out, with the machine busy (spinning threads on every core make the runtime's threads be
//! preempted at random points, which is where a lost wake-up hides). With keepalive on (the
//! default), the connection's timer may rescue such a call: the runs print how many calls
//! took 200 ms or more (the busy keepalive timer is at least 250 ms), a reproduction to read,
//! not a bound the tests assert (the machine is noisy).
//!
//! In the `slow` group (docs/testing.md): `cargo test --release -p keel --test wakeup --
//! --ignored --nocapture`. `KEEL_WAKEUP_CALLS` sets how many calls each run makes (default
//! 2000), for a longer reproduction; each run prints the max and p99.9 of its calls'
//! latencies. The race the timer's rescue hid is tested deterministically in
//! `src/bindings/wire/read.rs`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Binding, ProbeClient};

/// Busy loops on every core until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start() -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn calls() -> usize {
    std::env::var("KEEL_WAKEUP_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// `in_flight` callers share one channel (a 20 s deadline; keepalive as the default, or off),
/// each making calls one after another; every call must be answered. Prints the latencies'
/// max and p99.9.
async fn run(binding: Binding, in_flight: usize, keepalive: bool) {
    let host = binding.host();
    let channel = binding.channel_with(host.url(), |c| {
        let c = c.deadline(Duration::from_secs(20));
        if keepalive {
            c
        } else {
            c.keepalive(None)
        }
    });
    let client = ProbeClient::new(channel);
    client.open().await.expect("connect");
    let per_caller = calls() / in_flight;
    let _load = Load::start();
    let callers: Vec<_> = (0..in_flight)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut took = Vec::with_capacity(per_caller);
                for i in 0..per_caller {
                    let start = Instant::now();
                    let r = client.echo(format!("{i}")).await;
                    took.push(start.elapsed());
                    if let Err(e) = r {
                        return Err((i, e, took));
                    }
                }
                Ok(took)
            })
        })
        .collect();
    let mut all = Vec::new();
    for c in callers {
        match c.await.unwrap() {
            Ok(took) => all.extend(took),
            Err((i, e, took)) => panic!(
                "{binding:?}, {in_flight} in flight: call {i} failed after {:?}: {e}",
                took.last()
            ),
        }
    }
    all.sort();
    let p999 = all[(all.len() * 999 / 1000).min(all.len() - 1)];
    println!(
        "{binding:?}, {in_flight} in flight, keepalive {keepalive}: {} calls, max {:.1} ms, p99.9 {:.1} ms, \
         over 200 ms: {}",
        all.len(),
        all.last().unwrap().as_secs_f64() * 1e3,
        p999.as_secs_f64() * 1e3,
        all.iter().filter(|d| **d >= Duration::from_millis(200)).count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: spins every core for seconds"]
async fn sequential_calls_under_load_all_answered_tcp() {
    run(Binding::Tcp, 1, false).await;
    run(Binding::Tcp, 1, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: spins every core for seconds"]
async fn pipelined_calls_under_load_all_answered_tcp() {
    for keepalive in [false, true] {
        run(Binding::Tcp, 2, keepalive).await;
        run(Binding::Tcp, 4, keepalive).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: spins every core for seconds"]
async fn sequential_calls_under_load_all_answered_unix() {
    for keepalive in [false, true] {
        run(Binding::Unix, 1, keepalive).await;
        run(Binding::Unix, 3, keepalive).await;
    }
}

#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: spins every core for seconds"]
async fn sequential_calls_under_load_all_answered_tcps() {
    for keepalive in [false, true] {
        run(Binding::Tcps, 1, keepalive).await;
        run(Binding::Tcps, 3, keepalive).await;
    }
}
