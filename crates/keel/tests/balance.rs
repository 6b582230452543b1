//! One channel over several hosts ([`keel::Channel::balanced`]): calls spread over them, a host
//! killed in the middle of a run costs no failed idempotent call, and calls come back to it
//! once it is restarted.
//!
//! The hosts run in child processes (this test binary, running only `child_host`), so that
//! one can be killed for real (SIGKILL: no GoAway, no FIN from a drain; the kernel resets its
//! connections) and started again on the same port.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually_within, free_port, serve_child_host, ChildHost};
use keel::Channel;

/// Says which host answered.
#[keel::contract]
pub trait Whoami {
    /// Works for `ms`, then answers the host's port. Idempotent: safe to send again.
    #[keel(idempotent)]
    async fn work(&self, ms: u64) -> u16;
    /// The host's port; not idempotent (never sent twice).
    fn once(&self) -> u16;
}

struct Port(u16);

impl Whoami for Port {
    async fn work(&self, ms: u64) -> u16 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.0
    }
    fn once(&self) -> u16 {
        self.0
    }
}

/// Not a test when run by `cargo test`: in a child process started by [`ChildHost`], the host.
#[test]
fn child_host() {
    serve_child_host(
        |url| {
            let port = url.rsplit_once(':').unwrap().1.parse().unwrap();
            keel::Host::builder()
                .service(WhoamiServer::new(Port(port)))
                .endpoint(url)
                .start()
                .expect("child host starts")
        },
        |_| String::new(),
    );
}

/// A host in a child process, listening at `port`.
fn child_host_at(port: u16) -> ChildHost {
    ChildHost::start(&format!("tcp://127.0.0.1:{port}"))
}

/// The phases of the killed-host run. A call counts in the phase it was sent in, not the one
/// its answer was counted in: a reply can arrive before a kill and be counted after it.
const ALL_UP: usize = 0;
/// Sent once the killed host's process was gone: no answer of it can come from that host.
const DOWN: usize = 1;
const RESTARTED: usize = 2;

/// Calls answered per port, by the phase they were sent in, and calls failed.
#[derive(Default)]
struct Tally {
    /// The phase calls are sent in now.
    phase: AtomicUsize,
    answered: Mutex<[BTreeMap<u16, u64>; 3]>,
    failed: AtomicU64,
}

impl Tally {
    /// Calls sent in `phase` and answered so far, per port.
    fn answered(&self, phase: usize) -> BTreeMap<u16, u64> {
        self.answered.lock().unwrap()[phase].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_and_restarted_mid_run_costs_no_idempotent_call() {
    let ports = [free_port(), free_port(), free_port()];
    let mut hosts: Vec<ChildHost> = ports.iter().map(|&p| child_host_at(p)).collect();
    let urls: Vec<String> = hosts.iter().map(|h| h.url().to_string()).collect();
    let channel = Channel::balanced(urls).build().unwrap();
    let client = WhoamiClient::new(channel.clone());

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (client, tally, stop) = (client.clone(), tally.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let phase = tally.phase.load(Ordering::SeqCst);
                    match client.work(5).await {
                        Ok(port) => {
                            *tally.answered.lock().unwrap()[phase]
                                .entry(port)
                                .or_default() += 1
                        }
                        Err(e) => {
                            eprintln!("failed: {e}");
                            tally.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();

    // All three up.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let up = tally.answered(ALL_UP);
    // One killed, with calls in flight on it.
    let victim = hosts[1].port();
    hosts[1].kill();
    tally.phase.store(DOWN, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Before the restart: no call sent while it was down can have reached the new process yet.
    let down = tally.answered(DOWN);
    // Back on the same port: calls find it again.
    hosts[1] = tokio::task::spawn_blocking(move || child_host_at(victim))
        .await
        .unwrap();
    tally.phase.store(RESTARTED, Ordering::SeqCst);
    let start = Instant::now();
    let back = eventually_within(Duration::from_secs(20), || {
        tally.answered(RESTARTED).get(&victim).copied().unwrap_or(0) > 50
    })
    .await;
    let came_back_after = start.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let after = tally.answered(RESTARTED);
    let stats = channel.stats();
    println!("3 hosts, 8 callers, 5 ms calls of an idempotent operation");
    println!("  all up (1 s):                 {up:?}");
    println!("  {victim} killed (2 s):           {down:?}");
    println!(
        "  {victim} restarted (calls back after {} ms), until the end: {after:?}",
        came_back_after.as_millis()
    );
    println!(
        "  failed calls: {}; calls {}, retries {} (refused by the budget: {}); connections opened {}",
        tally.failed.load(Ordering::Relaxed),
        stats.calls,
        stats.retries,
        stats.retries_refused_by_budget,
        stats.connections_opened
    );

    assert_eq!(tally.failed.load(Ordering::Relaxed), 0, "failed calls");
    for p in ports {
        assert!(
            up.get(&p).copied().unwrap_or(0) > 0,
            "{p} got no call: {up:?}"
        );
    }
    assert_eq!(down.get(&victim).copied().unwrap_or(0), 0, "{down:?}");
    assert!(down.values().sum::<u64>() > 0);
    assert!(back, "calls never came back to {victim}: {after:?}");
    assert_eq!(stats.retries_refused_by_budget, 0);
}

/// A name is every address it resolves to; one that refuses connections is left out, and no
/// call fails.
#[tokio::test]
async fn a_name_is_all_its_addresses() {
    let host = child_host_at(free_port());
    let channel = Channel::balanced([format!("tcp://localhost:{}", host.port())])
        .build()
        .unwrap();
    let client = WhoamiClient::new(channel.clone());
    for _ in 0..50 {
        assert_eq!(client.work(0).await.unwrap(), host.port());
    }
}

#[test]
fn a_balanced_channel_takes_one_scheme() {
    let err = Channel::balanced(["tcp://127.0.0.1:1", "http://127.0.0.1:2"])
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("one scheme"), "{err}");
    let none: [&str; 0] = [];
    assert!(Channel::balanced(none).build().is_err());
}

/// A host that cannot be reached costs no call, not even one of an operation that is never
/// retried: nothing was sent, so the call goes to another host.
#[tokio::test]
async fn an_unreachable_host_costs_no_call_of_any_kind() {
    let host = child_host_at(free_port());
    let nobody = free_port();
    let channel = Channel::balanced([host.url().to_string(), format!("tcp://127.0.0.1:{nobody}")])
        .retry(keel::client::RetryPolicy::disabled())
        .build()
        .unwrap();
    let client = WhoamiClient::new(channel.clone());
    for _ in 0..50 {
        assert_eq!(client.once().await.unwrap(), host.port());
    }
    assert_eq!(channel.stats().retries, 0);
}
