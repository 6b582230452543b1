//! Burst benchmark: how long until N blocking tasks are all running, for keel-pool, tokio's
//! `spawn_blocking`, and raw `std::thread::spawn` (the physical limit); plus the start latency of
//! one task after an idle gap longer than the keep-alive.
//!
//! ```text
//! cargo run --release -p keel-pool --example burst -- [--json] [--reps N] [--only KEY-SUBSTRING]
//! ```
//!
//! Each task increments a counter (the N-th records the time) and then blocks on a latch that is
//! released once all N are running. Reported numbers are medians over the repetitions; every
//! cold scenario (keel, tokio and raw threads alike) first runs one untimed warm-up repetition,
//! so that process-level first-time costs (glibc's thread-stack cache, malloc arenas, page
//! faults) are not charged to whichever contestant happens to run first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use keel_pool::Pool;
use serde::Serialize;

/// Counts running tasks, records when the last one started, and holds them until released.
struct Latch {
    n: usize,
    running: AtomicUsize,
    finished: AtomicUsize,
    state: Mutex<(Option<Instant>, bool)>, // (all running at, released)
    cv: Condvar,
}

impl Latch {
    fn new(n: usize) -> Arc<Latch> {
        Arc::new(Latch {
            n,
            running: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            state: Mutex::new((None, false)),
            cv: Condvar::new(),
        })
    }

    /// The body of every task.
    fn task(&self) {
        if self.running.fetch_add(1, Ordering::SeqCst) + 1 == self.n {
            self.state.lock().unwrap().0 = Some(Instant::now());
            self.cv.notify_all();
        }
        let mut st = self.state.lock().unwrap();
        while !st.1 {
            st = self.cv.wait(st).unwrap();
        }
        drop(st);
        self.finished.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until all N run, releases them, and returns when all N started.
    fn wait_all_running_then_release(&self) -> Instant {
        let mut st = self.state.lock().unwrap();
        while st.0.is_none() {
            st = self.cv.wait(st).unwrap();
        }
        st.1 = true;
        self.cv.notify_all();
        st.0.unwrap()
    }

    fn wait_finished(&self) {
        while self.finished.load(Ordering::SeqCst) < self.n {
            thread::sleep(Duration::from_micros(200));
        }
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn poll_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

fn keel_burst(pool: &Pool, n: usize) -> Duration {
    let latch = Latch::new(n);
    let start = Instant::now();
    for _ in 0..n {
        let l = latch.clone();
        if pool.spawn(move || l.task()).is_err() {
            panic!("pool closed");
        }
    }
    let all = latch.wait_all_running_then_release();
    latch.wait_finished();
    all - start
}

fn keel_pool(keep_alive: Duration) -> Pool {
    Pool::builder()
        .min_threads(2)
        .max_threads(2000)
        .keep_alive(keep_alive)
        .build()
        .expect("build pool")
}

/// Cold: only the floor (2 threads) exists when the burst arrives.
fn keel_cold(n: usize, reps: usize) -> f64 {
    let pool = keel_pool(Duration::from_millis(100));
    let mut v = Vec::new();
    for rep in 0..=reps {
        poll_until("keel retirement", || pool.metrics().threads == 2);
        // Let the retired threads finish exiting (tokio's cold case starts from a joined pool).
        thread::sleep(Duration::from_millis(50));
        let d = us(keel_burst(&pool, n));
        if rep > 0 {
            v.push(d); // rep 0 is the untimed warm-up
        }
    }
    median(v)
}

/// Warm: N idle threads (well within their keep-alive) when the burst arrives.
fn keel_warm(n: usize, reps: usize) -> f64 {
    let pool = keel_pool(Duration::from_secs(60));
    keel_burst(&pool, n);
    let mut v = Vec::new();
    for _ in 0..reps {
        poll_until("keel idle", || pool.metrics().idle >= n);
        v.push(us(keel_burst(&pool, n)));
    }
    median(v)
}

fn tokio_rt(keep_alive: Option<Duration>) -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(2).max_blocking_threads(2000);
    if let Some(k) = keep_alive {
        b.thread_keep_alive(k);
    }
    b.build().expect("tokio runtime")
}

/// Submits from inside a runtime task, as a server would.
fn tokio_burst(rt: &tokio::runtime::Runtime, n: usize) -> Duration {
    let latch = Latch::new(n);
    let l = latch.clone();
    let start = rt.block_on(async move {
        tokio::spawn(async move {
            let start = Instant::now();
            for _ in 0..n {
                let l = l.clone();
                drop(tokio::task::spawn_blocking(move || l.task()));
            }
            start
        })
        .await
        .unwrap()
    });
    let all = latch.wait_all_running_then_release();
    latch.wait_finished();
    all - start
}

/// Cold: a fresh runtime per repetition (tokio's keep-alive is 10 s).
fn tokio_cold(n: usize, reps: usize) -> f64 {
    let v = (0..=reps)
        .map(|_| {
            let rt = tokio_rt(None);
            let d = tokio_burst(&rt, n);
            drop(rt);
            us(d)
        })
        .skip(1) // the untimed warm-up
        .collect();
    median(v)
}

fn tokio_warm(n: usize, reps: usize) -> f64 {
    let rt = tokio_rt(None);
    tokio_burst(&rt, n);
    let v = (0..reps)
        .map(|_| {
            thread::sleep(Duration::from_millis(5)); // let the threads park again
            us(tokio_burst(&rt, n))
        })
        .collect();
    median(v)
}

/// The physical limit: N raw threads created back to back.
fn spawn_limit(n: usize, reps: usize) -> f64 {
    let v = (0..=reps)
        .map(|_| {
            let latch = Latch::new(n);
            let start = Instant::now();
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    let l = latch.clone();
                    thread::spawn(move || l.task())
                })
                .collect();
            let all = latch.wait_all_running_then_release();
            for h in hs {
                h.join().unwrap();
            }
            us(all - start)
        })
        .skip(1) // the untimed warm-up
        .collect();
    median(v)
}

const IDLE_KEEP_ALIVE: Duration = Duration::from_millis(200);
const IDLE_GAP: Duration = Duration::from_millis(500);

/// Submit → start of one task after an idle gap longer than the keep-alive.
fn keel_after_idle(reps: usize) -> f64 {
    let pool = keel_pool(IDLE_KEEP_ALIVE);
    let v = (0..reps)
        .map(|_| {
            thread::sleep(IDLE_GAP);
            let (tx, rx) = std::sync::mpsc::channel();
            let start = Instant::now();
            pool.spawn(move || tx.send(Instant::now()).unwrap())
                .ok()
                .unwrap();
            us(rx.recv().unwrap() - start)
        })
        .collect();
    median(v)
}

fn tokio_after_idle(reps: usize) -> f64 {
    let rt = tokio_rt(Some(IDLE_KEEP_ALIVE));
    let v = (0..reps)
        .map(|_| {
            thread::sleep(IDLE_GAP);
            let d = rt.block_on(async {
                tokio::spawn(async {
                    let start = Instant::now();
                    let started = tokio::task::spawn_blocking(Instant::now).await.unwrap();
                    started - start
                })
                .await
                .unwrap()
            });
            us(d)
        })
        .collect();
    median(v)
}

/// Burst benchmark: how long until N blocking tasks are all running, for keel-pool, tokio's
/// `spawn_blocking` and raw `std::thread::spawn`, plus the start latency of one task after an
/// idle gap; medians over the repetitions, µs.
#[derive(Debug, Parser)]
#[command(name = "burst")]
struct Cli {
    /// Also print one JSON object (every scenario's median, µs) as the last line
    #[arg(long)]
    json: bool,
    /// Timed repetitions per scenario (at most 5 of them for the after-idle ones)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 7,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    reps: usize,
    /// Run only the scenarios whose key contains this, and print just their numbers
    #[arg(long, value_name = "KEY-SUBSTRING")]
    only: Option<String>,
}

/// The `--json` line: scenario keys to medians (µs, to 0.1), in the order they ran.
struct JsonLine<'a>(&'a [(&'a str, f64)]);

impl Serialize for JsonLine<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|&(k, v)| (k, (v * 10.0).round() / 10.0)))
    }
}

fn main() {
    let Cli { json, reps, only } = Cli::parse();
    let idle_reps = reps.min(5);
    let t0 = Instant::now();
    type Scenario = (&'static str, Box<dyn Fn() -> f64>);
    let scenarios: Vec<Scenario> = vec![
        (
            "spawn_limit_100_us",
            Box::new(move || spawn_limit(100, reps)),
        ),
        ("keel_cold_100_us", Box::new(move || keel_cold(100, reps))),
        ("tokio_cold_100_us", Box::new(move || tokio_cold(100, reps))),
        ("keel_warm_100_us", Box::new(move || keel_warm(100, reps))),
        ("tokio_warm_100_us", Box::new(move || tokio_warm(100, reps))),
        (
            "spawn_limit_1000_us",
            Box::new(move || spawn_limit(1000, reps)),
        ),
        ("keel_cold_1000_us", Box::new(move || keel_cold(1000, reps))),
        (
            "tokio_cold_1000_us",
            Box::new(move || tokio_cold(1000, reps)),
        ),
        ("keel_warm_1000_us", Box::new(move || keel_warm(1000, reps))),
        (
            "tokio_warm_1000_us",
            Box::new(move || tokio_warm(1000, reps)),
        ),
        (
            "keel_after_idle_us",
            Box::new(move || keel_after_idle(idle_reps)),
        ),
        (
            "tokio_after_idle_us",
            Box::new(move || tokio_after_idle(idle_reps)),
        ),
    ];
    if let Some(only) = &only {
        for (key, run) in scenarios.iter().filter(|s| s.0.contains(only.as_str())) {
            println!("{key}: {:.1}", run());
        }
        return;
    }
    let rows: Vec<(&str, f64)> = scenarios.iter().map(|(k, run)| (*k, run())).collect();
    let get = |k: &str| rows.iter().find(|r| r.0 == k).unwrap().1;

    println!(
        "keel-pool burst benchmark: medians of {reps} repetitions ({idle_reps} for after-idle), µs"
    );
    println!(
        "{:<34} {:>12} {:>12} {:>12}",
        "scenario", "keel", "tokio", "raw threads"
    );
    for (label, n) in [("all N running, cold", 100), ("all N running, cold", 1000)] {
        println!(
            "{:<34} {:>12.0} {:>12.0} {:>12.0}",
            format!("{label}, N={n}"),
            get(&format!("keel_cold_{n}_us")),
            get(&format!("tokio_cold_{n}_us")),
            get(&format!("spawn_limit_{n}_us")),
        );
    }
    for n in [100, 1000] {
        println!(
            "{:<34} {:>12.0} {:>12.0} {:>12}",
            format!("all N running, warm, N={n}"),
            get(&format!("keel_warm_{n}_us")),
            get(&format!("tokio_warm_{n}_us")),
            "-",
        );
    }
    println!(
        "{:<34} {:>12.1} {:>12.1} {:>12}",
        "one task after 500 ms idle",
        get("keel_after_idle_us"),
        get("tokio_after_idle_us"),
        "-",
    );
    let cold = get("keel_cold_100_us");
    println!(
        "keel cold 100 / raw limit = {:.2} (target <= 1.6), / tokio cold = {:.2} (target <= 0.5); total {:.1} s",
        cold / get("spawn_limit_100_us"),
        cold / get("tokio_cold_100_us"),
        t0.elapsed().as_secs_f64(),
    );
    if json {
        let line = serde_json::to_string(&JsonLine(&rows)).expect("numbers serialize");
        println!("{line}");
    }
}
