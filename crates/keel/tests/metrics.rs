//! Observability over real sockets: the admin endpoint's `/metrics` scraped over HTTP during a
//! burst of blocking calls, `promtool check metrics` on the text, `/healthz` and `/readyz`
//! through a readiness-aware drain, and an HTTP call whose handler time leaves out its upload.
//!
//! keel's Prometheus recorder is process-wide: each test uses a contract of its own, so its
//! per-operation series are its own.
#![cfg(feature = "prometheus")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use common::eventually_blocking;

/// Blocking operations that hold their pool thread until the test opens the gate.
#[keel::contract]
pub trait Burst {
    /// Waits for the gate, then returns `n`.
    fn work(&self, n: u64) -> u64;
}

static STARTED: AtomicUsize = AtomicUsize::new(0);
static GATE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

struct Gated;

impl Burst for Gated {
    fn work(&self, n: u64) -> u64 {
        STARTED.fetch_add(1, Ordering::SeqCst);
        let (open, cv) = &GATE;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        n
    }
}

/// One blocking and one async operation.
#[keel::contract]
pub trait Probe {
    /// Returns `n` (on keel-pool).
    fn ping(&self, n: u64) -> u64;
    /// Returns `n` (on the runtime).
    async fn slow_ping(&self, n: u64) -> u64;
}

struct Pong;

impl Probe for Pong {
    fn ping(&self, n: u64) -> u64 {
        n
    }
    async fn slow_ping(&self, n: u64) -> u64 {
        n
    }
}

/// `GET path` on `admin` (`http://ip:port`) over a fresh connection: status and body.
fn get(admin: &str, path: &str) -> (u16, String) {
    request(admin, "GET", path)
}

fn request(admin: &str, method: &str, path: &str) -> (u16, String) {
    let addr = admin.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect to the admin endpoint");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the admin answer");
    let text = String::from_utf8(raw).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// The value of the series `name{labels}` (labels exactly as rendered, in any order), if
/// present.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, v) = line.rsplit_once(' ')?;
            let (n, rest) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if n != name {
                return None;
            }
            let have: Vec<&str> = rest.split(',').filter(|s| !s.is_empty()).collect();
            let all = labels.len() == have.len()
                && labels
                    .iter()
                    .all(|(k, v)| have.contains(&format!("{k}=\"{v}\"").as_str()));
            all.then(|| v.parse().ok()).flatten()
        })
}

fn must(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    value(text, name, labels).unwrap_or_else(|| panic!("no series {name}{labels:?} in:\n{text}"))
}

#[test]
fn metrics_during_a_burst_of_blocking_calls() {
    const BURST: usize = 12;
    let host = keel::Host::builder()
        .service(BurstServer::new(Gated))
        .endpoint("tcp://127.0.0.1:0")
        .admin("http://127.0.0.1:0")
        .min_threads(1)
        .max_threads(64)
        .start()
        .unwrap();
    let admin = host.admin_url().expect("an admin endpoint").to_string();
    let client = BurstBlockingClient::connect(host.url()).unwrap();

    std::thread::scope(|scope| {
        let calls: Vec<_> = (0..BURST)
            .map(|i| {
                let client = &client;
                scope.spawn(move || client.work(i as u64))
            })
            .collect();
        // Every call of the burst holds a pool thread: none waits for another to finish.
        assert!(
            eventually_blocking(Duration::from_secs(60), || {
                STARTED.load(Ordering::SeqCst) == BURST
            }),
            "timed out waiting until the whole burst runs"
        );

        let (status, text) = get(&admin, "/metrics");
        assert_eq!(status, 200);
        let op = [("service", "Burst"), ("operation", "work")];
        assert_eq!(
            must(&text, "keel_server_calls_in_flight", &op),
            BURST as f64
        );
        assert!(must(&text, "keel_pool_threads", &[("state", "busy")]) >= BURST as f64);
        assert!(must(&text, "keel_pool_threads_created_total", &[]) >= BURST as f64);
        assert_eq!(must(&text, "keel_pool_tasks_queued", &[]), 0.0);
        assert_eq!(
            must(&text, "keel_throttle_calls_running", &[]),
            BURST as f64
        );
        assert_eq!(must(&text, "keel_throttle_calls_queued", &[]), 0.0);
        assert_eq!(must(&text, "keel_pool_min_threads", &[]), 1.0);
        assert_eq!(must(&text, "keel_host_ready", &[]), 1.0);
        assert_eq!(
            must(&text, "keel_server_connections_open", &[("binding", "tcp")]),
            1.0
        );
        // Every call of the burst started (above) while the others still held their threads,
        // so no call waited for a thread to come free: every pool wait is in the lowest
        // buckets, far below the time the handlers block.
        assert_eq!(
            must(&text, "keel_server_pool_wait_seconds_count", &op),
            BURST as f64
        );
        let near_zero = [op[0], op[1], ("le", "0.1")];
        assert_eq!(
            must(&text, "keel_server_pool_wait_seconds_bucket", &near_zero),
            BURST as f64,
            "every pool wait under 100 ms:\n{text}"
        );
        assert_eq!(
            must(&text, "keel_server_throttle_wait_seconds_count", &op),
            BURST as f64
        );
        assert!(text.contains("# TYPE keel_server_call_duration_seconds histogram"));
        assert!(text.contains("# HELP keel_pool_threads "));

        let (open, cv) = &GATE;
        *open.lock().unwrap() = true;
        cv.notify_all();
        for (i, call) in calls.into_iter().enumerate() {
            assert_eq!(call.join().unwrap().unwrap(), i as u64);
        }
    });

    let (_, text) = get(&admin, "/metrics");
    let ok = [("service", "Burst"), ("operation", "work"), ("code", "ok")];
    assert_eq!(must(&text, "keel_server_calls_total", &ok), BURST as f64);
    let op = [("service", "Burst"), ("operation", "work")];
    assert_eq!(must(&text, "keel_server_calls_in_flight", &op), 0.0);
    assert_eq!(
        must(&text, "keel_server_call_duration_seconds_count", &op),
        BURST as f64
    );
    assert_eq!(
        must(&text, "keel_server_handler_seconds_count", &op),
        BURST as f64
    );
    let client_ok = [
        ("service", "Burst"),
        ("operation", "work"),
        ("binding", "tcp"),
        ("code", "ok"),
    ];
    assert_eq!(
        must(&text, "keel_client_calls_total", &client_ok),
        BURST as f64
    );

    // The burst shared one connection: as it closes, it reports every call.
    drop(client);
    assert!(
        eventually_blocking(Duration::from_secs(60), || {
            host.stats().connections_open == 0
        }),
        "timed out waiting until the connection closes"
    );
    let (_, text) = get(&admin, "/metrics");
    let tcp = [("binding", "tcp")];
    assert!(must(&text, "keel_server_connection_calls_sum", &tcp) >= BURST as f64);
    assert!(must(&text, "keel_server_connections_closed_total", &tcp) >= 1.0);
    assert_eq!(must(&text, "keel_server_connections_open", &tcp), 0.0);
    host.shutdown();
}

/// Runs `promtool check metrics` on the host's `/metrics` text. Skipped without promtool,
/// unless `KEEL_REQUIRE_PROMTOOL=1` (CI), where a missing promtool fails. In the `external` test
/// group: `cargo test -p keel --test metrics -- --ignored` runs it (`docs/testing.md`).
#[test]
#[ignore = "external: runs promtool"]
fn promtool_accepts_the_metrics() {
    let required = std::env::var("KEEL_REQUIRE_PROMTOOL").is_ok_and(|v| v == "1");
    let found = std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            !required,
            "KEEL_REQUIRE_PROMTOOL=1 but promtool is not on PATH (Debian: apt-get install prometheus)"
        );
        eprintln!("SKIPPED: promtool not on PATH");
        return;
    }
    // A throttle of its own for Probe: its labelled series beside the host-wide ones.
    let host = keel::Host::builder()
        .service(ProbeServer::new(Pong))
        .service_throttle("Probe", keel::host::ThrottleConfig::new(8, 8))
        .endpoint("tcp://127.0.0.1:0")
        .endpoint("http://127.0.0.1:0")
        .admin("http://127.0.0.1:0")
        .start()
        .unwrap();
    for url in host.urls() {
        let client = ProbeBlockingClient::connect(url).unwrap();
        assert_eq!(client.ping(1).unwrap(), 1);
        assert_eq!(client.slow_ping(2).unwrap(), 2);
    }
    // A refusal too, so that a second code shows.
    let client = ProbeBlockingClient::connect(host.url()).unwrap();
    let _ = client.with_deadline(Duration::ZERO).ping(3);
    let (status, text) = get(host.admin_url().unwrap(), "/metrics");
    assert_eq!(status, 200);
    assert!(text.contains("keel_server_calls_total{"), "{text}");

    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- the text:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    host.shutdown();
}

#[test]
fn readyz_fails_during_the_drain_grace_while_calls_succeed() {
    let host = keel::Host::builder()
        .service(ProbeServer::new(Pong))
        .endpoint("tcp://127.0.0.1:0")
        .admin("http://127.0.0.1:0")
        .drain_grace(Duration::from_secs(5))
        .start()
        .unwrap();
    let admin = host.admin_url().unwrap().to_string();
    assert_eq!(get(&admin, "/healthz"), (200, "ok\n".into()));
    assert_eq!(get(&admin, "/readyz").0, 200);
    assert_eq!(get(&admin, "/nope").0, 404);
    assert_eq!(request(&admin, "POST", "/metrics").0, 405);
    let client = ProbeBlockingClient::connect(host.url()).unwrap();
    assert_eq!(client.ping(1).unwrap(), 1);

    let shutdown = std::thread::spawn(move || host.shutdown());
    assert!(
        eventually_blocking(Duration::from_secs(60), || get(&admin, "/readyz").0 == 503),
        "timed out waiting until /readyz answers 503"
    );
    // During the grace the host still serves, on the open connection and on new ones, and
    // the process is still live.
    assert_eq!(client.ping(2).unwrap(), 2);
    assert_eq!(client.slow_ping(3).unwrap(), 3);
    assert_eq!(client.channel().stats().connections_opened, 1);
    assert_eq!(get(&admin, "/healthz").0, 200);
    let (_, text) = get(&admin, "/metrics");
    assert_eq!(must(&text, "keel_host_ready", &[]), 0.0);
    assert_eq!(shutdown.join().unwrap().abandoned_calls, 0);
    // After the grace the drain ran: the host said GoAway and stopped.
    assert!(client.ping(4).is_err());
}

/// One blocking and one async operation, called over HTTP with a slow upload.
#[keel::contract]
pub trait Upload {
    /// Returns `n` (on keel-pool).
    fn take(&self, n: u64) -> u64;
    /// Returns `n` (on the runtime).
    async fn take_async(&self, n: u64) -> u64;
}

struct Taker;

impl Upload for Taker {
    fn take(&self, n: u64) -> u64 {
        n
    }
    async fn take_async(&self, n: u64) -> u64 {
        n
    }
}

#[test]
fn an_http_calls_handler_time_does_not_include_its_upload() {
    const PAUSE: Duration = Duration::from_millis(300);
    let host = keel::Host::builder()
        .service(UploadServer::new(Taker))
        .endpoint("http://127.0.0.1:0")
        .admin("http://127.0.0.1:0")
        .start()
        .unwrap();
    let addr = host.url().trim_start_matches("http://").to_string();
    for op in ["take", "take_async"] {
        // The head at once, the body after a pause: the call arrived with its head, but its
        // handler can only start once the body is there.
        let body = r#"{"n": 7}"#;
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "POST /Upload/{op} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        s.flush().unwrap();
        std::thread::sleep(PAUSE);
        s.write_all(body.as_bytes()).unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
        assert!(raw.ends_with('7'), "{raw}");
    }
    let (status, text) = get(host.admin_url().unwrap(), "/metrics");
    assert_eq!(status, 200);
    for op in ["take", "take_async"] {
        let labels = [("service", "Upload"), ("operation", op)];
        let total = must(&text, "keel_server_call_duration_seconds_sum", &labels);
        let handler = must(&text, "keel_server_handler_seconds_sum", &labels);
        // The whole server time covers the upload (from the head's arrival, a little after
        // the client's pause began); the handler's does not.
        assert!(total > PAUSE.as_secs_f64() / 2.0, "{op}: total {total} s");
        assert!(
            handler < PAUSE.as_secs_f64() / 2.0,
            "{op}: handler {handler} s includes the upload"
        );
    }
    let labels = [("service", "Upload"), ("operation", "take")];
    let pool_wait = must(&text, "keel_server_pool_wait_seconds_sum", &labels);
    assert!(
        pool_wait < PAUSE.as_secs_f64() / 2.0,
        "pool wait {pool_wait} s includes the upload"
    );
    host.shutdown();
}

/// Streams of messages both ways.
#[keel::contract]
pub trait Ticks {
    /// `0..n` (server streaming).
    async fn ticks(&self, n: u32) -> keel::MessageStream<u32>;
    /// How many it received (client streaming).
    async fn swallow(&self, values: keel::MessageStream<u32>) -> u64;
}

struct Ticker;
impl Ticks for Ticker {
    async fn ticks(&self, n: u32) -> keel::MessageStream<u32> {
        keel::MessageStream::from_iter(0..n)
    }
    async fn swallow(&self, mut values: keel::MessageStream<u32>) -> u64 {
        let mut n = 0;
        while let Some(Ok(_)) = values.next().await {
            n += 1;
        }
        n
    }
}

#[test]
fn stream_messages_are_counted_per_operation_on_both_sides() {
    let host = keel::Host::builder()
        .service(TicksServer::new(Ticker))
        .endpoint("tcp://127.0.0.1:0")
        .admin("http://127.0.0.1:0")
        .start()
        .unwrap();
    let admin = host.admin_url().expect("an admin endpoint").to_string();
    let client = TicksBlockingClient::connect(host.url()).unwrap();
    let got: Vec<u32> = client
        .ticks(5)
        .unwrap()
        .blocking_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got.len(), 5);
    assert_eq!(
        client
            .swallow(keel::MessageStream::from_iter([1, 2, 3]))
            .unwrap(),
        3
    );
    let (status, text) = get(&admin, "/metrics");
    assert_eq!(status, 200);
    let op = |name| [("service", "Ticks"), ("operation", name)];
    let with_binding = |name| {
        [
            ("service", "Ticks"),
            ("operation", name),
            ("binding", "tcp"),
        ]
    };
    assert_eq!(
        must(
            &text,
            "keel_server_stream_messages_sent_total",
            &op("ticks")
        ),
        5.0
    );
    assert_eq!(
        must(
            &text,
            "keel_server_stream_messages_received_total",
            &op("swallow")
        ),
        3.0
    );
    assert_eq!(
        must(
            &text,
            "keel_client_stream_messages_received_total",
            &with_binding("ticks")
        ),
        5.0
    );
    assert_eq!(
        must(
            &text,
            "keel_client_stream_messages_sent_total",
            &with_binding("swallow")
        ),
        3.0
    );
    host.shutdown();
}

/// A service with a throttle of its own.
#[keel::contract]
pub trait Metered {
    /// Returns `n`.
    fn echo(&self, n: u64) -> u64;
}

struct Meter;

impl Metered for Meter {
    fn echo(&self, n: u64) -> u64 {
        n
    }
}

#[test]
fn a_services_own_throttle_has_the_throttle_metrics_labelled_with_the_service() {
    let host = keel::Host::builder()
        .service(MeteredServer::new(Meter))
        .service_throttle("Metered", keel::host::ThrottleConfig::new(3, 7))
        .endpoint("tcp://127.0.0.1:0")
        .admin("http://127.0.0.1:0")
        .start()
        .unwrap();
    let client = MeteredBlockingClient::connect(host.url()).unwrap();
    assert_eq!(client.echo(5).unwrap(), 5);
    let (status, text) = get(host.admin_url().unwrap(), "/metrics");
    assert_eq!(status, 200);
    let service = [("service", "Metered")];
    assert_eq!(
        must(&text, "keel_throttle_max_concurrent_calls", &service),
        3.0
    );
    assert_eq!(must(&text, "keel_throttle_max_queued_calls", &service), 7.0);
    assert_eq!(must(&text, "keel_throttle_calls_running", &service), 0.0);
    assert_eq!(must(&text, "keel_throttle_calls_queued", &service), 0.0);
    assert_eq!(must(&text, "keel_throttle_rejected_total", &service), 0.0);
    // The host-wide throttle keeps its unlabelled series.
    assert!(value(&text, "keel_throttle_max_concurrent_calls", &[]).is_some());
    host.shutdown();
}

/// An operation whose first call stalls.
#[keel::contract]
pub trait Lookup {
    /// Returns `n`; the first call waits 30 s first (or until cancelled).
    #[keel(idempotent)]
    async fn find(&self, n: u64) -> u64;
}

struct Stalls(std::sync::atomic::AtomicU64);
impl Lookup for Stalls {
    async fn find(&self, n: u64) -> u64 {
        if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        n
    }
}

#[test]
fn hedges_sent_and_won_are_counted_per_operation() {
    use keel::client::{HedgeDelay, HedgingPolicy};
    let host = keel::Host::builder()
        .service(LookupServer::new(Stalls(Default::default())))
        .endpoint("tcp://127.0.0.1:0")
        .admin("http://127.0.0.1:0")
        .start()
        .unwrap();
    let admin = host.admin_url().expect("an admin endpoint").to_string();
    let channel = keel::Channel::builder(host.url())
        .hedging(HedgingPolicy::default().delay(HedgeDelay::Fixed(Duration::from_millis(20))))
        .build()
        .unwrap();
    let client = LookupBlockingClient::new(channel);
    assert_eq!(client.find(7).unwrap(), 7);
    assert_eq!(client.find(8).unwrap(), 8);
    let (status, text) = get(&admin, "/metrics");
    assert_eq!(status, 200);
    let labels = [
        ("service", "Lookup"),
        ("operation", "find"),
        ("binding", "tcp"),
    ];
    assert_eq!(must(&text, "keel_client_hedges_total", &labels), 1.0);
    assert_eq!(must(&text, "keel_client_hedges_won_total", &labels), 1.0);
    host.shutdown();
}
