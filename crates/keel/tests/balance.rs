//! One channel over several hosts ([`keel::Channel::balanced`]): calls spread over them, a host
//! killed in the middle of a run costs no failed idempotent call, and calls come back to it
//! once it is restarted.
//!
//! The hosts run in child processes (this test binary, running only `child_host`), so that
//! one can be killed for real (SIGKILL: no GoAway, no FIN from a drain; the kernel resets its
//! connections) and started again on the same port.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

const CHILD_PORT: &str = "KEEL_TEST_CHILD_HOST_PORT";

/// Not a test when run by `cargo test`: in a child process started by [`ChildHost`], the host.
#[test]
fn child_host() {
    let Ok(port) = std::env::var(CHILD_PORT) else {
        return;
    };
    let port: u16 = port.parse().unwrap();
    let _host = keel::Host::builder()
        .service(WhoamiServer::new(Port(port)))
        .endpoint(format!("tcp://127.0.0.1:{port}"))
        .start()
        .expect("child host starts");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// A host in a child process.
struct ChildHost {
    port: u16,
    child: Option<Child>,
}

impl ChildHost {
    fn start(port: u16) -> ChildHost {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["child_host", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_PORT, port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child host");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "child host on {port}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        ChildHost {
            port,
            child: Some(child),
        }
    }

    /// SIGKILL: the process dies mid-call, without a word to its clients.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn url(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }
}

impl Drop for ChildHost {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Calls answered per port, and calls failed.
#[derive(Default)]
struct Tally {
    answered: Mutex<BTreeMap<u16, u64>>,
    failed: AtomicU64,
}

impl Tally {
    fn snapshot(&self) -> BTreeMap<u16, u64> {
        self.answered.lock().unwrap().clone()
    }
}

fn since(now: &BTreeMap<u16, u64>, before: &BTreeMap<u16, u64>) -> BTreeMap<u16, u64> {
    now.iter()
        .map(|(p, n)| (*p, n - before.get(p).copied().unwrap_or(0)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_and_restarted_mid_run_costs_no_idempotent_call() {
    let ports = [free_port(), free_port(), free_port()];
    let mut hosts: Vec<ChildHost> = ports.iter().map(|&p| ChildHost::start(p)).collect();
    let urls: Vec<String> = hosts.iter().map(ChildHost::url).collect();
    let channel = Channel::balanced(urls).build().unwrap();
    let client = WhoamiClient::new(channel.clone());

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (client, tally, stop) = (client.clone(), tally.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match client.work(5).await {
                        Ok(port) => *tally.answered.lock().unwrap().entry(port).or_default() += 1,
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
    let up = tally.snapshot();
    // One killed, with calls in flight on it.
    let victim = hosts[1].port;
    hosts[1].kill();
    let killed_at = tally.snapshot();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let down = since(&tally.snapshot(), &killed_at);
    // Back on the same port: calls find it again.
    hosts[1] = tokio::task::spawn_blocking(move || ChildHost::start(victim))
        .await
        .unwrap();
    let restarted_at = tally.snapshot();
    let start = Instant::now();
    let mut back = false;
    while start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = since(&tally.snapshot(), &restarted_at);
        if now.get(&victim).copied().unwrap_or(0) > 50 {
            back = true;
            break;
        }
    }
    let came_back_after = start.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let after = since(&tally.snapshot(), &restarted_at);
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
    let host = ChildHost::start(free_port());
    let channel = Channel::balanced([format!("tcp://localhost:{}", host.port)])
        .build()
        .unwrap();
    let client = WhoamiClient::new(channel.clone());
    for _ in 0..50 {
        assert_eq!(client.work(0).await.unwrap(), host.port);
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
    let host = ChildHost::start(free_port());
    let nobody = free_port();
    let channel = Channel::balanced([host.url(), format!("tcp://127.0.0.1:{nobody}")])
        .retry(keel::RetryPolicy::disabled())
        .build()
        .unwrap();
    let client = WhoamiClient::new(channel.clone());
    for _ in 0..50 {
        assert_eq!(client.once().await.unwrap(), host.port);
    }
    assert_eq!(channel.stats().retries, 0);
}
