//! A frozen host behind a balanced channel (issue 33, item 5): a host process stopped with
//! SIGSTOP keeps its connections open and its kernel keeps acknowledging bytes, so only keel's
//! own liveness can tell. Calls in flight on it end within about a second of the last frame it
//! sent: an idempotent call is answered by another host, any other fails `Unavailable`, the
//! same status as for a host killed (SIGKILL: its connections reset) or a port nothing listens
//! on. Unix only (signals); the hosts run in child processes (this test binary, running only
//! `child_host`), in real time.
#![cfg(unix)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, serve_child_host, ChildHost};
use keel::{Channel, StatusCode};

/// Says which host answered.
#[keel::contract]
pub trait Frozen {
    /// Waits `ms`, then answers the host's port. Idempotent: safe to send again.
    #[keel(idempotent)]
    async fn read(&self, ms: u64) -> u16;
    /// Waits `ms`, then answers the host's port. Not idempotent: never sent twice once it may
    /// have reached a host.
    async fn write(&self, ms: u64) -> u16;
}

struct Port(u16);

impl Frozen for Port {
    async fn read(&self, ms: u64) -> u16 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.0
    }
    async fn write(&self, ms: u64) -> u16 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.0
    }
}

/// Not a test when run by `cargo test`: in a child process started by [`ChildHost`], the host.
#[test]
fn child_host() {
    serve_child_host(
        |url| {
            let port = url.rsplit_once(':').unwrap().1.parse().unwrap();
            let builder = keel::Host::builder()
                .service(FrozenServer::new(Port(port)))
                .endpoint(url);
            #[cfg(feature = "quic")]
            let builder = match url.starts_with("quic://") {
                true => builder.tls(common::test_cert().server_tls().unwrap()),
                false => builder,
            };
            builder.start().expect("child host starts")
        },
        |line| match line {
            // The child's certificate (for a quic:// host), one line: `|` for each newline.
            #[cfg(feature = "quic")]
            "cert" => common::test_cert().cert_pem.replace('\n', "|"),
            _ => String::new(),
        },
    );
}

/// A host in a child process, at a port of its own (which it answers).
fn start_host() -> ChildHost {
    start_host_at("tcp")
}

/// [`start_host`] with `scheme`'s binding.
fn start_host_at(scheme: &str) -> ChildHost {
    ChildHost::start(&format!("{scheme}://127.0.0.1:{}", free_port()))
}

/// The longest any call may wait. Generous (the machine is shared): keel's rule makes it
/// about 1 s; a client that found a frozen host only by its 20 s idle ping (plus the 1 s
/// timeout) would leave calls waiting 21 s.
const BOUND: Duration = Duration::from_secs(5);

/// One call's outcome: idempotent or not, how long it took, and its answer.
struct Ended {
    idempotent: bool,
    took: Duration,
    answer: Result<u16, keel::Error>,
}

/// The show: three hosts, one balanced channel, a call every 10 ms (every other one
/// idempotent), then one host SIGSTOPped for 3 s. No call waits past [`BOUND`]; every
/// idempotent call is answered (by another host if it was sent to the frozen one); calls that
/// fail are not idempotent and fail `Unavailable`; and some call did wait on the frozen host
/// (the case was exercised: without one, this test proves nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_host_costs_no_idempotent_call_and_no_call_waits_long() {
    let _real = keel::testing::real_time();
    let hosts: Vec<ChildHost> = (0..3).map(|_| start_host()).collect();
    let urls: Vec<String> = hosts.iter().map(|h| h.url().to_string()).collect();
    let frozen_port = hosts[1].port();
    let channel = Channel::balanced(urls).build().unwrap();
    let client = FrozenClient::new(channel.clone());
    // Every host answers before the freeze.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..60 {
        seen.insert(client.read(0).await.unwrap());
    }
    assert_eq!(seen.len(), 3, "{seen:?}");

    let ended = Arc::new(Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    let start = Instant::now();
    let mut frozen_at = None;
    for n in 0u32.. {
        let at = start + Duration::from_millis(10 * u64::from(n));
        if at > start + Duration::from_millis(3_500) {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        if frozen_at.is_none() && at >= start + Duration::from_millis(500) {
            tokio::task::block_in_place(|| hosts[1].signal("STOP"));
            frozen_at = Some(Instant::now());
        }
        let (client, ended) = (client.clone(), ended.clone());
        calls.push(tokio::spawn(async move {
            let idempotent = n % 2 == 0;
            let began = Instant::now();
            let answer = if idempotent {
                client.read(1).await
            } else {
                client.write(1).await
            };
            ended.lock().unwrap().push(Ended {
                idempotent,
                took: began.elapsed(),
                answer,
            });
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    tokio::task::block_in_place(|| hosts[1].signal("CONT"));
    let ended = std::mem::take(&mut *ended.lock().unwrap());
    let stats = channel.stats();

    let longest = ended.iter().map(|e| e.took).max().unwrap();
    let waited: Vec<&Ended> = ended
        .iter()
        .filter(|e| e.took >= Duration::from_millis(200))
        .collect();
    let failed: Vec<&Ended> = ended.iter().filter(|e| e.answer.is_err()).collect();
    println!(
        "{} calls, host {frozen_port} frozen after {:?}: longest {:.1} ms; {} waited ≥ 200 ms \
         ({} idempotent); {} failed; retries {}",
        ended.len(),
        frozen_at.unwrap() - start,
        longest.as_secs_f64() * 1e3,
        waited.len(),
        waited.iter().filter(|e| e.idempotent).count(),
        failed.len(),
        stats.retries
    );
    for e in &failed {
        println!(
            "  failed after {:.1} ms: {}",
            e.took.as_secs_f64() * 1e3,
            e.answer.as_ref().unwrap_err()
        );
    }
    assert!(longest < BOUND, "a call waited {longest:?}");
    assert!(
        !waited.is_empty(),
        "no call waited on the frozen host: the case was not exercised"
    );
    for e in &ended {
        match &e.answer {
            Ok(port) => assert!(
                *port != frozen_port || e.took < BOUND,
                "answered by the frozen host"
            ),
            Err(err) => {
                assert!(!e.idempotent, "an idempotent call failed: {err}");
                assert_eq!(err.status_code(), Some(StatusCode::Unavailable), "{err}");
            }
        }
    }
}

/// The error a call in flight gets when its only host goes away, one way or another.
async fn error_when_the_host(gone: impl FnOnce(&mut ChildHost)) -> keel::Error {
    let mut host = start_host();
    let channel = Channel::new(host.url()).unwrap();
    let client = FrozenClient::new(channel);
    assert_eq!(client.write(0).await.unwrap(), host.port());
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.write(30_000).await }
    });
    // The request on its way and taken by the host before it goes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::block_in_place(|| gone(&mut host));
    let began = Instant::now();
    let err = tokio::time::timeout(BOUND, call)
        .await
        .unwrap_or_else(|_| panic!("the call still waits after {BOUND:?}"))
        .unwrap()
        .unwrap_err();
    println!(
        "  after {:.1} ms: {err}",
        began.elapsed().as_secs_f64() * 1e3
    );
    host.kill();
    err
}

/// One status for "host gone": a call in flight on a host frozen (SIGSTOP) or killed (SIGKILL),
/// and a call to a port nothing listens on any more (the host stopped), all fail
/// `Unavailable` (a call that is not idempotent, so nothing retries it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_a_killed_and_a_closed_host_fail_calls_with_the_same_status() {
    let _real = keel::testing::real_time();
    println!("SIGSTOP:");
    let frozen = error_when_the_host(|h| h.signal("STOP")).await;
    println!("SIGKILL:");
    let killed = error_when_the_host(ChildHost::kill).await;
    println!("closed port:");
    let mut host = start_host();
    let url = host.url().to_string();
    tokio::task::block_in_place(|| host.kill());
    let client = FrozenClient::new(Channel::new(&url).unwrap());
    let closed = client.write(0).await.unwrap_err();
    println!("  {closed}");
    for err in [&frozen, &killed, &closed] {
        assert_eq!(err.status_code(), Some(StatusCode::Unavailable), "{err}");
    }
}

/// A call in flight through `client` on `host` (its only host) fails `Unavailable` within the
/// bound once `host` is frozen; `host` is killed after.
async fn a_call_fails_unavailable_when_the_host_freezes(
    client: &FrozenClient,
    host: &mut ChildHost,
) {
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.write(30_000).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::block_in_place(|| host.signal("STOP"));
    let began = Instant::now();
    let err = tokio::time::timeout(BOUND, call)
        .await
        .unwrap_or_else(|_| panic!("the call still waits after {BOUND:?}"))
        .unwrap()
        .unwrap_err();
    println!("after {:.1} ms: {err}", began.elapsed().as_secs_f64() * 1e3);
    assert_eq!(err.status_code(), Some(StatusCode::Unavailable), "{err}");
    tokio::task::block_in_place(|| host.kill());
}

/// HTTP/2 too: a call in flight on a host that froze fails `Unavailable` within the bound, not
/// at the 20 s interval's PING (its connection's keepalive pings a quarter second into the
/// silence while calls wait, and closes the connection when that PING goes unanswered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_frozen_http2_host_fails_unavailable_within_the_bound() {
    let _real = keel::testing::real_time();
    let mut host = tokio::task::block_in_place(|| start_host_at("http"));
    let channel = Channel::builder(host.url())
        .http_version(keel::client::HttpVersion::Http2)
        .build()
        .unwrap();
    let client = FrozenClient::new(channel);
    assert!(client.write(0).await.is_ok());
    a_call_fails_unavailable_when_the_host_freezes(&client, &mut host).await;
}

/// QUIC too: a call in flight on a host that froze fails `Unavailable` within the bound, not at
/// QUIC's idle timeout (the 20 s interval and at least 3 s more): while calls wait, the client
/// pings a quarter second into the silence (a QUIC datagram) and closes the connection when
/// nothing answers. A call that waits on a live host the same time is not failed.
#[cfg(feature = "quic")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_frozen_quic_host_fails_unavailable_within_the_bound() {
    let _real = keel::testing::real_time();
    let mut host = tokio::task::block_in_place(|| start_host_at("quic"));
    let cert = tokio::task::block_in_place(|| host.ask("cert")).replace('|', "\n");
    let tls = keel::tls::ClientTls::from_roots_pem(cert.as_bytes()).unwrap();
    let channel = Channel::builder(host.url()).tls(tls).build().unwrap();
    let client = FrozenClient::new(channel);
    // A live host that answers after 2.5 s: the pings are answered, the call is not failed.
    assert_eq!(client.write(2_500).await.unwrap(), host.port());
    a_call_fails_unavailable_when_the_host_freezes(&client, &mut host).await;
}
