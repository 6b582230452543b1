//! The HTTP binding as any HTTP client sees it: raw requests with JSON bodies (a bare hyper
//! client, HTTP/1.1 and HTTP/2), every answer of the convention in `HTTP.md`, connection reuse,
//! and cancellation by a dropped HTTP/2 request.
#![cfg(feature = "http")]
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::{Request, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct DivideByZero {
    pub dividend: f64,
}

/// A small contract whose description is checked in full, and a counter that shows whether a
/// handler ran.
#[keel::contract]
pub trait Calc {
    fn add(&self, a: f64, b: f64) -> f64;
    fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
    #[keel(one_way)]
    fn note(&self, text: String);
    fn bump(&self) -> u64;
}

#[derive(Clone, Default)]
struct CalcImpl {
    bumps: Arc<AtomicU64>,
}

impl Calc for CalcImpl {
    fn add(&self, a: f64, b: f64) -> f64 {
        a + b
    }
    fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero> {
        if b == 0.0 {
            Err(DivideByZero { dividend: a })
        } else {
            Ok(a / b)
        }
    }
    fn note(&self, _text: String) {}
    fn bump(&self) -> u64 {
        self.bumps.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// A host serving the probe and `Calc` over `http://127.0.0.1:0`.
fn host_with(
    settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
    calc: CalcImpl,
) -> keel::Host {
    settings(
        keel::Host::builder()
            .service(ProbeServer::new(ProbeImpl::default()))
            .service(CalcServer::new(calc))
            .endpoint("http://127.0.0.1:0"),
    )
    .start()
    .expect("host starts")
}

fn host() -> keel::Host {
    host_with(|h| h, CalcImpl::default())
}

/// A bare HTTP client on one connection: HTTP/1.1 or HTTP/2 with prior knowledge.
enum Raw {
    H1(http1::SendRequest<Full<Bytes>>, String),
    H2(http2::SendRequest<Full<Bytes>>, String),
}

struct Answer {
    status: u16,
    version: Version,
    headers: hyper::HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
    fn keel_status(&self) -> &str {
        self.header("keel-status")
            .expect("every answer has keel-status")
    }
}

impl Raw {
    async fn connect(url: &str, h2: bool) -> Raw {
        let addr = url.strip_prefix("http://").unwrap().to_string();
        let io = TokioIo::new(tokio::net::TcpStream::connect(&addr).await.unwrap());
        if h2 {
            let (tx, conn) = http2::handshake(TokioExecutor::new(), io).await.unwrap();
            tokio::spawn(conn);
            Raw::H2(tx, addr)
        } else {
            let (tx, conn) = http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Raw::H1(tx, addr)
        }
    }

    fn request(&self, method: &str, path: &str) -> hyper::http::request::Builder {
        match self {
            Raw::H1(_, addr) => Request::builder()
                .method(method)
                .uri(path)
                .header("host", addr.as_str()),
            Raw::H2(_, addr) => Request::builder()
                .method(method)
                .uri(format!("http://{addr}{path}")),
        }
    }

    /// `POST path` with a JSON body and extra headers.
    async fn post(&mut self, path: &str, json: &str, headers: &[(&str, &str)]) -> Answer {
        let mut req = self
            .request("POST", path)
            .body(Full::new(Bytes::from(json.to_string())))
            .unwrap();
        let h = req.headers_mut();
        h.insert("content-type", "application/json".parse().unwrap());
        for (k, v) in headers {
            h.insert(
                hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        self.send(req).await
    }

    async fn get(&mut self, path: &str) -> Answer {
        let req = self.request("GET", path).body(Full::default()).unwrap();
        self.send(req).await
    }

    async fn send(&mut self, req: Request<Full<Bytes>>) -> Answer {
        let response = match self {
            Raw::H1(tx, _) => {
                tx.ready().await.unwrap();
                tx.send_request(req).await.unwrap()
            }
            Raw::H2(tx, _) => {
                tx.ready().await.unwrap();
                tx.send_request(req).await.unwrap()
            }
        };
        let (parts, body) = response.into_parts();
        Answer {
            status: parts.status.as_u16(),
            version: parts.version,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes(),
        }
    }
}

fn channel(url: &str, version: keel::client::HttpVersion) -> keel::Channel {
    keel::Channel::builder(url)
        .http_version(version)
        .build()
        .unwrap()
}

async fn one_connection_for_sequential_calls(version: keel::client::HttpVersion) {
    let host = host();
    let c = ProbeClient::new(channel(host.url(), version));
    c.open().await.unwrap();
    for i in 0..100 {
        assert_eq!(c.echo(i.to_string()).await.unwrap(), i.to_string());
    }
    let stats = host.stats();
    assert_eq!(stats.connections_opened, 1, "{stats:?}");
    assert_eq!(stats.connections_open, 1, "{stats:?}");
    assert_eq!(stats.calls_total, 100);
    let conns = host.connections();
    assert_eq!(conns.len(), 1);
    assert_eq!((conns[0].binding, conns[0].calls), ("http", 100));
    let cs = c.channel().stats();
    assert_eq!(
        (cs.connections_opened, cs.connections_open, cs.calls),
        (1, 1, 100),
        "{cs:?}"
    );
    c.close().await;
    let cs = c.channel().stats();
    assert_eq!(
        (cs.connections_closed, cs.connections_open),
        (1, 0),
        "{cs:?}"
    );
    assert!(eventually(|| host.stats().connections_open == 0).await);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sequential_calls_use_one_http1_connection() {
    one_connection_for_sequential_calls(keel::client::HttpVersion::Http1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sequential_calls_use_one_http2_connection() {
    one_connection_for_sequential_calls(keel::client::HttpVersion::Http2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_stats_count_the_wire_connection_too() {
    let host = Binding::Tcp.host();
    let c = Binding::Tcp.client(&host).await;
    for _ in 0..10 {
        c.echo("x".into()).await.unwrap();
    }
    let cs = c.channel().stats();
    assert_eq!(
        (cs.connections_opened, cs.connections_open, cs.calls),
        (1, 1, 10)
    );
    c.close().await;
    let cs = c.channel().stats();
    assert_eq!((cs.connections_closed, cs.connections_open), (1, 0));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_and_h2c_share_one_port() {
    let host = host();
    let mut h1 = Raw::connect(host.url(), false).await;
    let mut h2 = Raw::connect(host.url(), true).await;
    for (raw, version) in [(&mut h1, Version::HTTP_11), (&mut h2, Version::HTTP_2)] {
        let a = raw.post("/Calc/add", r#"{"a": 1.5, "b": 2}"#, &[]).await;
        assert_eq!((a.status, a.version), (200, version));
        assert_eq!(a.json(), json!(3.5));
        assert_eq!(a.keel_status(), "ok");
        assert_eq!(a.header("content-type"), Some("application/json"));
    }
    // A request without a content type is JSON; an operation without parameters takes `{}` or
    // nothing.
    let req = h1
        .request("POST", "/Calc/bump")
        .body(Full::default())
        .unwrap();
    assert_eq!(h1.send(req).await.json(), json!(1));
    assert_eq!(h2.post("/Calc/bump", "{}", &[]).await.json(), json!(2));
    assert_eq!(host.stats().connections_opened, 2);
    host.shutdown_async().await;
}

/// JSON has no infinity or NaN, and serde_json writes them as `null`: a reply holding one is
/// answered 400 `out_of_range` over JSON rather than 200 `null` (which schemathesis found
/// against the Calculator), while keel's own client (MessagePack) still receives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_finite_reply_is_out_of_range_over_json() {
    let host = host();
    let mut raw = Raw::connect(host.url(), false).await;
    let a = raw
        .post(
            "/Calc/add",
            r#"{"a": 1.7976931348623157e308, "b": 1e308}"#,
            &[],
        )
        .await;
    assert_eq!((a.status, a.keel_status()), (400, "out_of_range"));
    assert_eq!(a.json()["code"], json!("out_of_range"));
    assert!(a.json()["message"]
        .as_str()
        .unwrap()
        .contains("JSON cannot carry"));
    let client = CalcClient::connect(host.url()).await.unwrap();
    assert_eq!(client.add(f64::MAX, 1e308).await.unwrap(), f64::INFINITY);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_answer_over_raw_json() {
    let host = host();
    for h2 in [false, true] {
        let mut raw = Raw::connect(host.url(), h2).await;

        let a = raw.post("/Probe/nope", "{}", &[]).await;
        assert_eq!((a.status, a.keel_status()), (404, "unknown_operation"));
        assert_eq!(a.json()["code"], "unknown_operation");
        assert!(a.json()["message"].as_str().unwrap().contains("nope"));

        let a = raw.post("/Nope/echo", "{}", &[]).await;
        assert_eq!((a.status, a.keel_status()), (404, "unknown_service"));

        for path in ["/", "/Probe/echo/more", "/Probe/"] {
            let a = raw.get(path).await;
            assert_eq!(a.status, 404, "{path}");
            assert!(a.json()["message"].is_string());
        }

        let a = raw.post("/Probe/echo", r#"{"s": "#, &[]).await;
        assert_eq!((a.status, a.keel_status()), (400, "bad_request"));
        assert_eq!(a.json()["code"], "bad_request");
        let a = raw.post("/Probe/echo", r#"{"s": 5}"#, &[]).await;
        assert_eq!(a.status, 400);

        let a = raw
            .post(
                "/Probe/echo",
                r#"{"s": "x"}"#,
                &[("keel-deadline-ms", "soon")],
            )
            .await;
        assert_eq!((a.status, a.keel_status()), (400, "bad_request"));
        assert!(a.json()["message"]
            .as_str()
            .unwrap()
            .contains("keel-deadline-ms"));

        let a = raw
            .post(
                "/Probe/echo",
                r#"{"s": "x"}"#,
                &[("content-type", "text/plain")],
            )
            .await;
        assert_eq!((a.status, a.keel_status()), (415, "bad_request"));
        let form = [("content-type", "application/x-www-form-urlencoded")];
        let a = raw.post("/Probe/echo", r#"{"s": "x"}"#, &form).await;
        assert_eq!(a.status, 415);
        assert!(a.json()["message"].as_str().unwrap().contains("--json"));

        // A newcomer who puts the arguments of an operation that takes no stream in
        // `keel-args` is told that the header is for streams, and where they go instead.
        let a = raw
            .post("/Calc/add", "", &[("keel-args", r#"{"a": 1, "b": 2}"#)])
            .await;
        assert_eq!((a.status, a.keel_status()), (400, "bad_request"));
        let message = a.json()["message"].as_str().unwrap().to_string();
        for words in [
            "keel-args",
            "take a stream",
            "Calc.add takes none",
            "request body",
        ] {
            assert!(message.contains(words), "{words:?} not in {message:?}");
        }

        let a = raw.get("/Probe/echo").await;
        assert_eq!((a.status, a.header("allow")), (405, Some("POST")));
        let a = raw.post("/Probe", "{}", &[]).await;
        assert_eq!((a.status, a.header("allow")), (405, Some("GET")));

        let a = raw
            .post(
                "/Probe/sleep_async_ms",
                r#"{"ms": 2000}"#,
                &[("keel-deadline-ms", "50")],
            )
            .await;
        assert_eq!((a.status, a.keel_status()), (504, "deadline_exceeded"));
        assert_eq!(a.json()["code"], "deadline_exceeded");

        let a = raw.post("/Calc/divide", r#"{"a": 22, "b": 0}"#, &[]).await;
        assert_eq!((a.status, a.keel_status()), (422, "fault"));
        assert_eq!(
            a.json(),
            json!({"code": "fault", "fault": {"dividend": 22.0}})
        );
        let a = raw.post("/Probe/check", r#"{"v": -3}"#, &[]).await;
        assert_eq!(a.json(), json!({"code": "fault", "fault": -3}));

        for op in ["panic_sync", "panic_async"] {
            let a = raw.post(&format!("/Probe/{op}"), "{}", &[]).await;
            assert_eq!((a.status, a.keel_status()), (500, "handler_panicked"));
            assert!(a.json()["message"]
                .as_str()
                .unwrap()
                .contains("handler exploded"));
        }

        let a = raw.post("/Calc/note", r#"{"text": "hi"}"#, &[]).await;
        assert_eq!((a.status, a.keel_status()), (202, "ok"));
        assert!(a.body.is_empty());
        let a = raw.post("/Probe/record", r#"{"v": 7}"#, &[]).await;
        assert_eq!(a.status, 202);
        // The recording runs after the answer.
        let mut recorded = false;
        for _ in 0..200 {
            let seen = raw.post("/Probe/recorded", "{}", &[]).await.json();
            recorded = seen.as_array().unwrap().contains(&json!(7));
            if recorded {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(recorded, "the one-way call never ran");

        // Every answer above came over this one connection.
        let a = raw.post("/Probe/echo", r#"{"s": "still"}"#, &[]).await;
        assert_eq!(a.json(), json!("still"));
    }
    assert_eq!(host.stats().connections_opened, 2);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_503_with_retry_after() {
    let host = host_with(
        |h| h.max_concurrent_calls(1).max_queued_calls(0),
        CalcImpl::default(),
    );
    for h2 in [false, true] {
        let mut sleeper = Raw::connect(host.url(), h2).await;
        let running = tokio::spawn(async move {
            sleeper
                .post("/Probe/sleep_ms", r#"{"ms": 400}"#, &[])
                .await
                .status
        });
        assert!(eventually(|| host.stats().calls_in_flight == 1).await);
        let mut raw = Raw::connect(host.url(), h2).await;
        let a = raw.post("/Probe/echo", r#"{"s": "x"}"#, &[]).await;
        assert_eq!((a.status, a.keel_status()), (503, "busy"));
        assert_eq!(a.header("retry-after"), Some("1"));
        assert_eq!(a.json()["code"], "busy");
        assert_eq!(running.await.unwrap(), 200);
    }
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_is_503_with_retry_after() {
    let host = host();
    let mut sleeper = Raw::connect(host.url(), false).await;
    let running = tokio::spawn(async move {
        let a = sleeper
            .post("/Probe/sleep_async_ms", r#"{"ms": 500}"#, &[])
            .await;
        (a.status, a.header("connection").map(str::to_string))
    });
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    let url = host.url().to_string();
    let shutdown = tokio::spawn(host.shutdown_async());
    tokio::time::sleep(Duration::from_millis(100)).await;
    for h2 in [false, true] {
        let mut raw = Raw::connect(&url, h2).await;
        let a = raw.post("/Probe/echo", r#"{"s": "late"}"#, &[]).await;
        assert_eq!((a.status, a.keel_status()), (503, "shutting_down"));
        assert_eq!(a.header("retry-after"), Some("1"));
        assert_eq!(a.json()["code"], "shutting_down");
        if !h2 {
            assert_eq!(a.header("connection"), Some("close"));
        }
    }
    // The call in flight finished, and its HTTP/1.1 connection closes after it.
    assert_eq!(running.await.unwrap(), (200, Some("close".to_string())));
    assert_eq!(shutdown.await.unwrap().abandoned_calls, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_is_413_and_the_connection_carries_on() {
    let host = host_with(|h| h.max_message_size(1024), CalcImpl::default());
    // 4 KiB arrives whole; 1 MiB is still being sent (HTTP/2: beyond the flow-control window)
    // when the host answers.
    let small = serde_json::to_string(&json!({ "data": vec![0u8; 4096] })).unwrap();
    let large = serde_json::to_string(&json!({ "data": vec![0u8; 1 << 20] })).unwrap();
    for h2 in [false, true] {
        let mut raw = Raw::connect(host.url(), h2).await;
        for big in [&small, &large] {
            let a = raw.post("/Probe/blob_len", big, &[]).await;
            assert_eq!((a.status, a.keel_status()), (413, "too_large"));
            assert!(
                a.json()["message"].as_str().unwrap().contains("1024"),
                "{:?}",
                a.json()
            );
            let kept = a.header("connection");
            assert_eq!(kept, None, "HTTP/1.1 keeps the connection");
            let a = raw
                .post("/Probe/blob_len", r#"{"data": [1, 2, 3]}"#, &[])
                .await;
            assert_eq!(a.json(), json!(3));
        }
    }
    assert_eq!(host.stats().connections_opened, 2, "{:?}", host.stats());
    host.shutdown_async().await;
}

#[test]
fn a_body_past_the_drain_limit_is_refused_on_its_headers_and_the_connection_closed() {
    use std::io::{Read, Write};
    let host = host_with(|h| h.max_message_size(1024), CalcImpl::default());
    let addr = host.url().strip_prefix("http://").unwrap().to_string();
    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Headers only: the host must not wait for 100 MB it will never accept.
    write!(
        sock,
        "POST /Probe/blob_len HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: 100000000\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    sock.read_to_string(&mut answer).unwrap();
    let head = answer.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 413"), "{answer}");
    assert!(head.contains("keel-status: too_large"), "{answer}");
    assert!(head.contains("connection: close"), "{answer}");
    assert!(answer.contains("100000000 bytes"), "{answer}");
    host.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_answers_the_contract_as_json() {
    let host = host();
    let mut raw = Raw::connect(host.url(), false).await;
    let a = raw.get("/Calc").await;
    assert_eq!((a.status, a.keel_status()), (200, "ok"));
    assert_eq!(a.header("content-type"), Some("application/json"));
    // Without the `openapi` feature, types as written in the Rust contract.
    #[cfg(not(feature = "openapi"))]
    let f64_pair = json!([{"name": "a", "type": "f64"}, {"name": "b", "type": "f64"}]);
    #[cfg(not(feature = "openapi"))]
    assert_eq!(
        a.json(),
        json!({
            "service": "Calc",
            "operations": [
                {"name": "add", "params": f64_pair, "returns": "f64", "fault": null,
                 "one_way": false, "streamed": false},
                {"name": "divide", "params": f64_pair, "returns": "f64",
                 "fault": "DivideByZero", "one_way": false, "streamed": false},
                {"name": "note", "params": [{"name": "text", "type": "String"}],
                 "returns": "()", "fault": null, "one_way": true, "streamed": false},
                {"name": "bump", "params": [], "returns": "u64", "fault": null,
                 "one_way": false, "streamed": false},
            ]
        })
    );
    // With it, JSON Schema: a `$ref` into `$defs` for a named type.
    #[cfg(feature = "openapi")]
    {
        let f64 = json!({"type": "number", "format": "double"});
        let f64_pair = json!([{"name": "a", "type": f64}, {"name": "b", "type": f64}]);
        assert_eq!(
            a.json(),
            json!({
                "service": "Calc",
                "operations": [
                    {"name": "add", "params": f64_pair, "returns": f64, "fault": null,
                     "one_way": false, "streamed": false},
                    {"name": "divide", "params": f64_pair, "returns": f64,
                     "fault": {"$ref": "#/$defs/DivideByZero"}, "one_way": false,
                     "streamed": false},
                    {"name": "note", "params": [{"name": "text", "type": {"type": "string"}}],
                     "returns": {"type": "null"}, "fault": null, "one_way": true,
                     "streamed": false},
                    {"name": "bump", "params": [],
                     "returns": {"type": "integer", "format": "uint64", "minimum": 0},
                     "fault": null, "one_way": false, "streamed": false},
                ],
                "$defs": {
                    "DivideByZero": {
                        "type": "object",
                        "properties": {"dividend": f64},
                        "required": ["dividend"],
                    },
                },
            })
        );
    }
    // Field order as documented.
    let text = std::str::from_utf8(&a.body).unwrap();
    assert!(text.starts_with(r#"{"service":"Calc","operations":[{"name":"add","params""#));
    let a = raw.get("/Nope").await;
    assert_eq!((a.status, a.keel_status()), (404, "unknown_service"));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_h2_request_cancels_its_call() {
    let calc = CalcImpl::default();
    let host = host_with(
        |h| h.max_concurrent_calls(1).max_queued_calls(10),
        calc.clone(),
    );
    let raw = Raw::connect(host.url(), true).await;
    let Raw::H2(tx, addr) = raw else {
        unreachable!()
    };
    let post = |path: &str, json: &'static str| {
        let mut tx = tx.clone();
        let req = Request::post(format!("http://{addr}{path}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(json.as_bytes())))
            .unwrap();
        tokio::spawn(async move {
            tx.ready().await.unwrap();
            tx.send_request(req).await.map(|r| r.status().as_u16())
        })
    };

    // A running async call: the reset stream aborts it.
    let running = post("/Probe/sleep_async_ms", r#"{"ms": 10000}"#);
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    running.abort();
    assert!(
        eventually(|| host.stats().calls_in_flight == 0).await,
        "{:?}",
        host.stats()
    );

    // A queued call: reset before it gets a slot, it never runs.
    let blocker = post("/Probe/sleep_ms", r#"{"ms": 400}"#);
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    let queued = post("/Calc/bump", "{}");
    assert!(eventually(|| host.stats().calls_queued == 1).await);
    queued.abort();
    assert!(
        eventually(|| host.stats().calls_in_flight == 1).await,
        "{:?}",
        host.stats()
    );
    assert_eq!(blocker.await.unwrap().unwrap(), 200);
    assert!(eventually(|| host.stats().calls_queued == 0).await);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calc.bumps.load(Ordering::SeqCst), 0, "a cancelled call ran");
    assert_eq!(host.stats().calls_in_flight, 0);
    // The connection is still fine.
    assert_eq!(post("/Calc/bump", "{}").await.unwrap().unwrap(), 200);
    assert_eq!(host.stats().connections_opened, 1);
    host.shutdown_async().await;
}

#[test]
fn an_http1_client_hanging_up_cancels_its_call() {
    use std::io::Write;
    let host = host();
    let addr = host.url().strip_prefix("http://").unwrap().to_string();
    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    let body = r#"{"ms": 10000}"#;
    write!(
        sock,
        "POST /Probe/sleep_async_ms HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        assert!(eventually(|| host.stats().calls_in_flight == 1).await);
        drop(sock);
        assert!(
            eventually(|| host.stats().calls_in_flight == 0).await,
            "{:?}",
            host.stats()
        );
        assert!(eventually(|| host.stats().connections_open == 0).await);
    });
    host.shutdown();
}
