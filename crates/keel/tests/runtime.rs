//! A host on the application's own runtime: serving its endpoints there, and mounted in an axum
//! app beside ordinary routes, on one port.
#![cfg(feature = "http")]

use std::time::Duration;

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A contract with one blocking and one async operation.
#[keel::contract]
pub trait Greeter {
    /// Greets `name` (runs on keel-pool).
    fn hello(&self, name: String) -> String;
    /// `words` in capitals (runs on the runtime).
    async fn shout(&self, words: String) -> String;
}

struct English;

impl Greeter for English {
    fn hello(&self, name: String) -> String {
        format!("hello {name}")
    }
    async fn shout(&self, words: String) -> String {
        words.to_uppercase()
    }
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

/// One HTTP/1.1 request over a fresh connection; the status code and the body.
async fn raw_http(addr: &str, request: String) -> (u16, String) {
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    sock.read_to_string(&mut answer).await.unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

/// A `Greeter` host on tcp:// that runs on the calling test's runtime.
fn host_on_this_runtime() -> keel::Host {
    keel::Host::builder()
        .service(GreeterServer::new(English))
        .endpoint("tcp://127.0.0.1:0")
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_runs_on_the_callers_runtime() {
    let host = host_on_this_runtime();
    // No runtime of its own: its I/O runs on this test's workers.
    assert_eq!(threads_named("keel-host"), 0);
    let client = GreeterClient::connect(host.url()).await.unwrap();
    assert_eq!(client.hello("you".into()).await.unwrap(), "hello you");
    assert_eq!(client.shout("hey".into()).await.unwrap(), "HEY");
    // Blocking operations still ran on keel-pool, not on the runtime's workers. The pool counts
    // a task once it returns, which is just after its reply left: the caller can hear the reply
    // first, so look until it is counted.
    let counted = std::time::Instant::now();
    while host.pool_metrics().completed_total == 0 {
        assert!(
            counted.elapsed() < Duration::from_secs(10),
            "no task completed on keel-pool"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let report = host.shutdown_async().await;
    assert_eq!(report.abandoned_calls, 0);
    // The runtime is the caller's: it lives on and serves other work.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let err = client.hello("again".into()).await.unwrap_err();
    assert!(err.is_connection(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_axum_app_serves_a_keel_contract_and_an_ordinary_route_on_one_port() {
    let host = keel::Host::builder()
        .service(GreeterServer::new(English))
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap();
    let app = axum::Router::new()
        .route("/health", get(|| async { "ok" }))
        .fallback_service(host.http_service());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // The ordinary route.
    let get_health = format!("GET /health HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    assert_eq!(raw_http(&addr, get_health).await, (200, "ok".to_string()));

    // The contract, as curl would call it: JSON over HTTP/1.1.
    let body = r#"{"name": "curl"}"#;
    let post = format!(
        "POST /Greeter/hello HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(
        raw_http(&addr, post).await,
        (200, r#""hello curl""#.to_string())
    );
    let unknown = format!(
        "POST /Greeter/nope HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
    );
    assert_eq!(raw_http(&addr, unknown).await.0, 404);

    // keel's own client, over HTTP/1.1 and HTTP/2 (h2c), to the same port.
    for version in [
        keel::client::HttpVersion::Http1,
        keel::client::HttpVersion::Http2,
    ] {
        let channel = keel::Channel::builder(format!("http://{addr}"))
            .http_version(version)
            .build()
            .unwrap();
        let client = GreeterClient::new(channel);
        assert_eq!(client.hello("keel".into()).await.unwrap(), "hello keel");
        assert_eq!(client.shout("quiet".into()).await.unwrap(), "QUIET");
    }

    // Every call went through the host's dispatcher; the connections are axum's, not the
    // host's.
    assert_eq!(host.stats().calls_total, 5);
    assert!(host.connections().is_empty());

    server.abort();
    host.shutdown_async().await;
}

/// A blocking client called from async code panics with keel's message, which names the fix,
/// instead of tokio's "Cannot start a runtime from within a runtime".
#[tokio::test]
async fn a_blocking_client_in_async_code_names_the_fix() {
    let panic = std::panic::catch_unwind(|| {
        let _ = GreeterBlockingClient::connect("tcp://127.0.0.1:1");
    })
    .expect_err("a blocking client in async code panics");
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .expect("a message");
    // The cause (a blocking client, called in a runtime) and both fixes.
    for words in [
        "blocking client",
        "called from async code, inside a tokio runtime",
        "use the async client ({Contract}Client) with `.await` there",
        "spawn_blocking",
    ] {
        assert!(message.contains(words), "{words:?} not in {message:?}");
    }
}

/// From `spawn_blocking`, where blocking is what the thread is for, a blocking client works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_client_works_from_spawn_blocking() {
    let host = host_on_this_runtime();
    let url = host.url().to_string();
    let hello = tokio::task::spawn_blocking(move || {
        GreeterBlockingClient::connect(&url)
            .unwrap()
            .hello("pool".into())
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(hello, "hello pool");
    host.shutdown_async().await;
}
