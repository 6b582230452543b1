//! gRPC-Web on http:// endpoints, spoken by hand: over HTTP/1.1 (raw requests) and HTTP/2 (the
//! `h2` crate), binary and base64 text (`application/grpc-web-text`), unary and server
//! streaming calls with the status in a trailer frame, Trailers-Only errors and typed faults,
//! client streaming refused, `grpc-timeout`, compression, the message size limit, a text body
//! that is not base64, and CORS. A browser calling it is `examples/tests/grpc_web_browser.rs`.

#![cfg(feature = "http")]

mod common;

use std::io::Read as _;
use std::time::Duration;

use base64::Engine as _;
use bytes::{BufMut, Bytes, BytesMut};
use keel::{MessageStream, Status};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
/// One message of a stream.
pub struct Item {
    /// Its place in its stream.
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
/// `divide`'s typed fault.
pub struct DivideByZero {
    /// The dividend.
    pub dividend: f64,
}

/// What the gRPC-Web tests call.
#[keel::contract(package = "keel_test.web")]
pub trait Web {
    /// Greets.
    async fn say_hello(&self, name: String) -> String;
    /// Divides; a typed fault for zero.
    async fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
    /// Sleeps, then says how long.
    async fn sleep_ms(&self, ms: u64) -> u64;
    /// `n` letters.
    async fn text(&self, n: u64) -> String;
    /// `n` items.
    async fn count(&self, n: u64) -> MessageStream<Item>;
    /// The sum of the items' `seq`.
    async fn sum(&self, items: MessageStream<Item>) -> Result<u64, Status>;
}

struct Impl;

impl Web for Impl {
    async fn say_hello(&self, name: String) -> String {
        format!("hello, {name}")
    }
    async fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero> {
        if b == 0.0 {
            Err(DivideByZero { dividend: a })
        } else {
            Ok(a / b)
        }
    }
    async fn sleep_ms(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
    async fn text(&self, n: u64) -> String {
        "a".repeat(n as usize)
    }
    async fn count(&self, n: u64) -> MessageStream<Item> {
        MessageStream::from_iter((0..n).map(|seq| Item { seq }))
    }
    async fn sum(&self, mut items: MessageStream<Item>) -> Result<u64, Status> {
        let mut sum = 0;
        while let Some(item) = items.next().await {
            sum += item?.seq;
        }
        Ok(sum)
    }
}

const SERVICE: &str = "/keel_test.web.Web";
const ORIGIN: &str = "http://page.test:8000";

fn host() -> keel::Host {
    keel::Host::builder()
        .service(WebServer::new(Impl))
        .endpoint("http://127.0.0.1:0")
        .cors(keel::http::Cors::allow_origins([ORIGIN]).unwrap())
        .max_message_size(64 * 1024)
        .start()
        .expect("host starts")
}

fn addr(host: &keel::Host) -> String {
    host.url().split_once("://").unwrap().1.to_string()
}

/// `message` as one length-prefixed message.
fn frame(message: &[u8], compressed: bool) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_u8(compressed as u8);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.to_vec()
}

fn json_frame(v: &Value) -> Vec<u8> {
    frame(&serde_json::to_vec(v).unwrap(), false)
}

/// A gRPC-Web answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Names lower-cased.
    headers: Vec<(String, String)>,
    /// Each data frame: flags, bytes.
    messages: Vec<(u8, Vec<u8>)>,
    /// The trailer frame's fields, if there was one.
    trailers: Option<Vec<(String, String)>>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The status: from the trailer frame, or the headers of a Trailers-Only answer.
    fn grpc_status(&self) -> u32 {
        self.field("grpc-status")
            .expect("grpc-status")
            .parse()
            .unwrap()
    }

    fn field(&self, name: &str) -> Option<&str> {
        match &self.trailers {
            Some(t) => t.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()),
            None => self.header(name),
        }
    }

    fn grpc_message(&self) -> String {
        let raw = self.field("grpc-message").unwrap_or("");
        let mut out = Vec::new();
        let b = raw.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' {
                out.push(u8::from_str_radix(&raw[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    fn json(&self, i: usize) -> Value {
        serde_json::from_slice(&self.messages[i].1).unwrap()
    }
}

/// Splits a gRPC-Web body (decoded) into messages and the trailer frame.
fn parse_body(mut buf: &[u8], status: u16, headers: Vec<(String, String)>) -> Answer {
    let mut messages = Vec::new();
    let mut trailers = None;
    while !buf.is_empty() {
        let flags = buf[0];
        let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
        let data = buf[5..5 + len].to_vec();
        buf = &buf[5 + len..];
        if flags & 0x80 != 0 {
            assert!(buf.is_empty(), "the trailer frame is the last");
            let text = String::from_utf8(data).unwrap();
            trailers = Some(
                text.split("\r\n")
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        let (k, v) = l.split_once(':').unwrap();
                        (k.trim().to_string(), v.trim().to_string())
                    })
                    .collect(),
            );
        } else {
            messages.push((flags, data));
        }
    }
    Answer {
        status,
        headers,
        messages,
        trailers,
    }
}

/// Decodes a `-text` body (padded base64 segments, one after another).
fn unbase64(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut run = Vec::new();
    for &c in text {
        run.push(c);
        if run.len().is_multiple_of(4) && c == b'=' {
            out.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(&run)
                    .unwrap(),
            );
            run.clear();
        }
    }
    out.extend(
        base64::engine::general_purpose::STANDARD
            .decode(&run)
            .unwrap(),
    );
    out
}

/// One HTTP/1.1 gRPC-Web exchange on a new connection (`connection: close`).
async fn h1(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: keel\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| *k == "content-type") {
        head.push_str("content-type: application/grpc-web+json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("x-grpc-web: 1\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut got = Vec::new();
    tcp.read_to_end(&mut got).await.unwrap();
    let split = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(got[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let mut body = got[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    let text = headers
        .iter()
        .any(|(k, v)| k == "content-type" && v.starts_with("application/grpc-web-text"));
    if text {
        body = unbase64(&body);
    }
    parse_body(&body, status, headers)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap().trim(), 16).unwrap();
        b = &b[line + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_over_http1_binary_and_text() {
    let host = host();
    let addr = addr(&host);
    let path = format!("{SERVICE}/SayHello");
    let a = h1(&addr, &path, &[], &json_frame(&json!({"name": "web"}))).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/grpc-web+json"));
    assert_eq!(a.messages.len(), 1);
    assert_eq!(a.json(0), json!("hello, web"));
    let trailers = a.trailers.as_ref().expect("a trailer frame");
    assert_eq!(trailers[0], ("grpc-status".to_string(), "0".to_string()));
    assert_eq!(a.header("grpc-status"), None, "the status is in the body");

    // The same call in base64: the request in two padded segments, as some clients send it.
    let body = json_frame(&json!({"name": "text"}));
    let text = [
        base64::engine::general_purpose::STANDARD.encode(&body[..4]),
        base64::engine::general_purpose::STANDARD.encode(&body[4..]),
    ]
    .concat();
    let ct = [("content-type", "application/grpc-web-text+json")];
    let a = h1(&addr, &path, &ct, text.as_bytes()).await;
    assert_eq!(
        a.header("content-type"),
        Some("application/grpc-web-text+json")
    );
    assert_eq!((a.grpc_status(), a.json(0)), (0, json!("hello, text")));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_messages() {
    let host = host();
    let addr = addr(&host);
    // divide(a: 9.0, b: 2.0): fields 1 and 2, doubles.
    let mut args = vec![0x09];
    args.extend_from_slice(&9.0f64.to_le_bytes());
    args.push(0x11);
    args.extend_from_slice(&2.0f64.to_le_bytes());
    for ct in ["application/grpc-web", "application/grpc-web+proto"] {
        let a = h1(
            &addr,
            &format!("{SERVICE}/Divide"),
            &[("content-type", ct)],
            &frame(&args, false),
        )
        .await;
        assert_eq!(a.grpc_status(), 0, "{a:?}");
        assert_eq!(a.header("content-type"), Some(ct));
        let reply = &a.messages[0].1;
        assert!(
            reply.windows(8).any(|w| w == 4.5f64.to_le_bytes()),
            "{reply:?}"
        );
    }
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_trailers_only_and_faults_carry_details() {
    let host = host();
    let addr = addr(&host);
    let a = h1(
        &addr,
        &format!("{SERVICE}/Divide"),
        &[],
        &json_frame(&json!({"a": 1.0, "b": 0.0})),
    )
    .await;
    assert_eq!(a.status, 200);
    assert!(a.trailers.is_none() && a.messages.is_empty(), "{a:?}");
    assert_eq!(a.grpc_status(), 2);
    assert!(a.grpc_message().contains("DivideByZero"), "{a:?}");
    let details = a.header("grpc-status-details-bin").expect("details");
    let details = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(details)
        .unwrap();
    let details = String::from_utf8_lossy(&details);
    assert!(
        details.contains("type.googleapis.com/keel_test.web.DivideByZero"),
        "{details}"
    );
    assert!(details.contains(r#"{"dividend":1.0}"#), "{details}");

    let a = h1(
        &addr,
        &format!("{SERVICE}/Nope"),
        &[],
        &json_frame(&json!({})),
    )
    .await;
    assert_eq!(a.grpc_status(), 12);
    assert!(a.grpc_message().contains("Nope"), "{a:?}");

    // A gRPC-Web request that is not a POST: refused as gRPC refuses it.
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "GET {SERVICE}/SayHello HTTP/1.1\r\nhost: keel\r\nconnection: close\r\n\
         content-type: application/grpc-web\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut got = String::new();
    tcp.read_to_string(&mut got).await.unwrap();
    assert!(got.starts_with("HTTP/1.1 405"), "{got}");
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_streaming_ends_with_the_trailer_frame_and_client_streaming_is_refused() {
    let host = host();
    let addr = addr(&host);
    let a = h1(
        &addr,
        &format!("{SERVICE}/Count"),
        &[("content-type", "application/grpc-web-text+json")],
        base64::engine::general_purpose::STANDARD
            .encode(json_frame(&json!({"n": 3})))
            .as_bytes(),
    )
    .await;
    assert_eq!(a.messages.len(), 3, "{a:?}");
    for i in 0..3 {
        assert_eq!(a.json(i), json!({"seq": i}));
    }
    assert_eq!(a.grpc_status(), 0);

    for method in ["Sum"] {
        let a = h1(
            &addr,
            &format!("{SERVICE}/{method}"),
            &[],
            &json_frame(&json!({"seq": 1})),
        )
        .await;
        assert_eq!(a.grpc_status(), 12, "{a:?}");
        assert!(a.grpc_message().contains("gRPC-Web"), "{a:?}");
    }
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_and_compression_hold() {
    let host = host();
    let addr = addr(&host);
    let a = h1(
        &addr,
        &format!("{SERVICE}/SleepMs"),
        &[("grpc-timeout", "20m")],
        &json_frame(&json!({"ms": 60_000})),
    )
    .await;
    assert_eq!(a.grpc_status(), 4, "{a:?}");

    // A gzip request message, and a reply compressed because the caller accepts gzip.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, br#"{"n": 4000}"#).unwrap();
    let packed = gz.finish().unwrap();
    let a = h1(
        &addr,
        &format!("{SERVICE}/Text"),
        &[("grpc-encoding", "gzip"), ("grpc-accept-encoding", "gzip")],
        &frame(&packed, true),
    )
    .await;
    assert_eq!(a.grpc_status(), 0, "{a:?}");
    assert_eq!(a.header("grpc-encoding"), Some("gzip"));
    assert_eq!(a.messages[0].0, 1, "flagged compressed");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&a.messages[0].1[..])
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, format!("\"{}\"", "a".repeat(4000)));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_malformed_bodies() {
    let host = host();
    let addr = addr(&host);
    let path = format!("{SERVICE}/SayHello");
    // A prefix announcing 4 GiB: refused from the prefix.
    let a = h1(&addr, &path, &[], &[0, 0xff, 0xff, 0xff, 0xff]).await;
    assert_eq!(a.grpc_status(), 8, "{a:?}");
    // A text body that is not base64.
    let ct = [("content-type", "application/grpc-web-text")];
    let a = h1(&addr, &path, &ct, b"this is not base64!!").await;
    assert_eq!(a.grpc_status(), 13, "{a:?}");
    assert!(a.grpc_message().contains("base64"), "{a:?}");
    // Text that stops inside a group of four.
    let a = h1(&addr, &path, &ct, b"AAAAA").await;
    assert_eq!(a.grpc_status(), 13, "{a:?}");
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_carries_the_trailers_in_the_body_too() {
    let host = host();
    let tcp = tokio::net::TcpStream::connect(addr(&host)).await.unwrap();
    let (tx, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut tx = tx.ready().await.unwrap();
    let req = http::Request::post(format!("http://keel{SERVICE}/Count"))
        .header("content-type", "application/grpc-web+json")
        .header("x-grpc-web", "1")
        .body(())
        .unwrap();
    let (response, mut stream) = tx.send_request(req, false).unwrap();
    stream
        .send_data(Bytes::from(json_frame(&json!({"n": 2}))), true)
        .unwrap();
    let response = response.await.unwrap();
    let (parts, mut body) = response.into_parts();
    let mut buf = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        buf.extend_from_slice(&chunk);
    }
    assert!(body.trailers().await.unwrap().is_none(), "no HTTP trailers");
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    let a = parse_body(&buf, parts.status.as_u16(), headers);
    assert_eq!(a.messages.len(), 2);
    assert_eq!(a.grpc_status(), 0);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_lets_an_allowed_page_read_the_status() {
    let host = host();
    let addr = addr(&host);
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "OPTIONS {SERVICE}/SayHello HTTP/1.1\r\nhost: keel\r\nconnection: close\r\n\
         origin: {ORIGIN}\r\naccess-control-request-method: POST\r\n\
         access-control-request-headers: content-type,x-grpc-web,x-user-agent,grpc-timeout\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut got = String::new();
    tcp.read_to_string(&mut got).await.unwrap();
    assert!(got.starts_with("HTTP/1.1 204"), "{got}");
    assert!(
        got.contains(
            "access-control-allow-headers: content-type,x-grpc-web,x-user-agent,grpc-timeout"
        ),
        "{got}"
    );

    let path = format!("{SERVICE}/Divide");
    let args = json_frame(&json!({"a": 1.0, "b": 0.0}));
    let a = h1(&addr, &path, &[("origin", ORIGIN)], &args).await;
    assert_eq!(a.header("access-control-allow-origin"), Some(ORIGIN));
    let exposed = a.header("access-control-expose-headers").unwrap();
    for name in ["grpc-status", "grpc-message", "grpc-status-details-bin"] {
        assert!(exposed.contains(name), "{exposed}");
    }
    // Another origin: nothing that lets its page read the answer.
    let a = h1(&addr, &path, &[("origin", "http://evil.test")], &args).await;
    assert_eq!(a.header("access-control-allow-origin"), None);
    host.shutdown_async().await;
}
