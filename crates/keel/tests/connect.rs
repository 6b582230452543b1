//! The Connect protocol on http:// endpoints, spoken by hand: unary POST over HTTP/1.1 and
//! HTTP/2 (`application/json`, `application/proto`), how a JSON POST is told from keel's own
//! convention, errors as Connect's JSON with their HTTP statuses and typed faults in
//! `details`, `Connect-Timeout-Ms`, metadata as headers, gzip both ways, GET for an
//! idempotent operation (and refused for others), streaming calls (server, client, bidi on
//! HTTP/2) with their end-of-stream message, and the limits.

#![cfg(feature = "http")]

mod common;

use std::io::Read as _;
use std::time::Duration;

use base64::Engine as _;
use bytes::{BufMut, Bytes, BytesMut};
use keel::{Context, MessageStream, Status};
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

/// A message with a bytes field (base64 in protobuf's JSON, a list of numbers in keel's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blob {
    /// The bytes.
    pub data: serde_bytes::ByteBuf,
}

/// What the Connect tests call.
#[keel::contract(package = "keel_test.connect")]
pub trait Conn {
    /// Greets, and says so in the reply metadata.
    #[keel(idempotent)]
    async fn say_hello(&self, name: String, ctx: Context) -> String;
    /// Divides; a typed fault for zero.
    async fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
    /// Finds nothing.
    async fn find(&self, key: String) -> Result<u64, Status>;
    /// Sleeps, then says how long.
    async fn sleep_ms(&self, ms: u64) -> u64;
    /// `n` letters.
    async fn text(&self, n: u64) -> String;
    /// `word` `word_count` times.
    async fn repeat(&self, word_count: u64, word: String) -> String;
    /// `n` items.
    async fn count(&self, n: u64) -> MessageStream<Item>;
    /// The sum of the items' `seq`.
    async fn sum(&self, items: MessageStream<Item>) -> Result<u64, Status>;
    /// Each item back.
    async fn echo(&self, items: MessageStream<Item>) -> MessageStream<Item>;
    /// The blob's length.
    async fn blob_len(&self, blob: serde_bytes::ByteBuf) -> u64;
    /// The blobs' lengths, added.
    async fn blob_lens(&self, blobs: MessageStream<Blob>) -> Result<u64, Status>;
}

struct Impl;

impl Conn for Impl {
    async fn say_hello(&self, name: String, ctx: Context) -> String {
        let tenant = ctx.metadata().get("x-tenant").unwrap_or("none").to_string();
        ctx.insert_reply_metadata("x-served-for", &tenant).ok();
        format!("hello, {name}")
    }
    async fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero> {
        if b == 0.0 {
            Err(DivideByZero { dividend: a })
        } else {
            Ok(a / b)
        }
    }
    async fn find(&self, key: String) -> Result<u64, Status> {
        Err(Status::not_found(format!("no {key}")))
    }
    async fn sleep_ms(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
    async fn text(&self, n: u64) -> String {
        "a".repeat(n as usize)
    }
    async fn repeat(&self, word_count: u64, word: String) -> String {
        word.repeat(word_count as usize)
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
    async fn echo(&self, mut items: MessageStream<Item>) -> MessageStream<Item> {
        let (tx, rx) = MessageStream::channel(4);
        tokio::spawn(async move {
            while let Some(Ok(item)) = items.next().await {
                if tx.send(item).await.is_err() {
                    break;
                }
            }
        });
        rx
    }
    async fn blob_len(&self, blob: serde_bytes::ByteBuf) -> u64 {
        blob.len() as u64
    }
    async fn blob_lens(&self, mut blobs: MessageStream<Blob>) -> Result<u64, Status> {
        let mut sum = 0;
        while let Some(blob) = blobs.next().await {
            sum += blob?.data.len() as u64;
        }
        Ok(sum)
    }
}

const SERVICE: &str = "/keel_test.connect.Conn";

fn host() -> keel::Host {
    keel::Host::builder()
        .service(ConnServer::new(Impl))
        .endpoint("http://127.0.0.1:0")
        .max_message_size(64 * 1024)
        .start()
        .expect("host starts")
}

fn addr(host: &keel::Host) -> String {
    host.url().split_once("://").unwrap().1.to_string()
}

/// An HTTP/1.1 answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Names lower-cased.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// A streaming answer's envelopes: flags, bytes.
    fn envelopes(&self) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut b = &self.body[..];
        while !b.is_empty() {
            let len = u32::from_be_bytes(b[1..5].try_into().unwrap()) as usize;
            out.push((b[0], b[5..5 + len].to_vec()));
            b = &b[5 + len..];
        }
        out
    }
}

/// One HTTP/1.1 exchange on a new connection (`connection: close`).
async fn h1(addr: &str, head: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{head} HTTP/1.1\r\nhost: keel\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
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
    Answer {
        status,
        headers,
        body,
    }
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

fn post(method: &str) -> String {
    format!("POST {SERVICE}/{method}")
}

const JSON: (&str, &str) = ("content-type", "application/json");
const VERSION: (&str, &str) = ("connect-protocol-version", "1");

fn envelope(flags: u8, message: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_u8(flags);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_json_and_proto_with_metadata() {
    let host = host();
    let addr = addr(&host);
    let a = h1(
        &addr,
        &post("SayHello"),
        &[JSON, VERSION, ("x-tenant", "t1")],
        br#"{"name": "connect"}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert_eq!(a.json(), json!("hello, connect"));
    assert_eq!(a.header("x-served-for"), Some("t1"));
    assert_eq!(a.header("grpc-status"), None, "no gRPC headers leak");

    // The path names a package: Connect without the version header too.
    let a = h1(&addr, &post("Divide"), &[JSON], br#"{"a": 9, "b": 2}"#).await;
    assert_eq!((a.status, a.json()), (200, json!(4.5)));

    // Protobuf: divide(a: 9.0, b: 2.0) as fields 1 and 2.
    let mut args = vec![0x09];
    args.extend_from_slice(&9.0f64.to_le_bytes());
    args.push(0x11);
    args.extend_from_slice(&2.0f64.to_le_bytes());
    let a = h1(
        &addr,
        &post("Divide"),
        &[("content-type", "application/proto")],
        &args,
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/proto"));
    assert!(
        a.body.windows(8).any(|w| w == 4.5f64.to_le_bytes()),
        "{a:?}"
    );
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_json_names_and_64_bit_strings_are_accepted() {
    let host = host();
    let addr = addr(&host);
    // What a protobuf-JSON client sends: lowerCamelCase, a uint64 as a string.
    let a = h1(
        &addr,
        &post("Repeat"),
        &[JSON],
        br#"{"wordCount": "3", "word": "ab"}"#,
    )
    .await;
    assert_eq!((a.status, a.json()), (200, json!("ababab")), "{a:?}");
    // keel's own JSON, unchanged; a string that is a string stays one.
    let a = h1(
        &addr,
        &post("Repeat"),
        &[JSON],
        br#"{"word_count": 2, "word": "7"}"#,
    )
    .await;
    assert_eq!((a.status, a.json()), (200, json!("77")));
    // The same through gRPC-Web's JSON, over HTTP/1.1.
    let a = h1(
        &addr,
        &post("Repeat"),
        &[("content-type", "application/grpc-web+json")],
        &envelope(0, br#"{"wordCount": "2", "word": "x"}"#),
    )
    .await;
    assert_eq!(&a.envelopes()[0].1, br#""xx""#, "{a:?}");
    // Each message of a streamed request too (Connect's streaming JSON): a uint64 as a string,
    // beside one in keel's JSON.
    let mut body = Vec::new();
    for message in [
        &br#"{"seq": "4"}"#[..],
        br#"{"seq": 1}"#,
        br#"{"seq": "5"}"#,
    ] {
        body.extend(envelope(0, message));
    }
    let ct = ("content-type", "application/connect+json");
    let a = h1(&addr, &post("Sum"), &[ct], &body).await;
    let env = a.envelopes();
    assert_eq!(
        serde_json::from_slice::<Value>(&env[0].1).unwrap(),
        json!(10),
        "{a:?}"
    );
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keels_own_json_convention_is_not_connect() {
    let host = host();
    let addr = addr(&host);
    // keel's path, JSON, no Connect-Protocol-Version: keel's convention answers (keel-status).
    let a = h1(&addr, "POST /Conn/divide", &[JSON], br#"{"a": 9, "b": 2}"#).await;
    assert_eq!((a.status, a.json()), (200, json!(4.5)));
    assert_eq!(a.header("keel-status"), Some("ok"));
    let a = h1(&addr, "POST /Conn/find", &[JSON], br#"{"key": "k"}"#).await;
    assert_eq!(a.header("keel-status"), Some("not_found"), "{a:?}");
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_connect_json_with_http_statuses() {
    let host = host();
    let addr = addr(&host);
    let a = h1(&addr, &post("Find"), &[JSON], br#"{"key": "k"}"#).await;
    assert_eq!(a.status, 404);
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert_eq!(a.json(), json!({"code": "not_found", "message": "no k"}));

    let a = h1(&addr, &post("Divide"), &[JSON], br#"{"a": 1, "b": 0}"#).await;
    assert_eq!(a.status, 500);
    let e = a.json();
    assert_eq!(e["code"], "unknown");
    assert_eq!(e["details"][0]["type"], "keel_test.connect.DivideByZero");
    let value = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(e["details"][0]["value"].as_str().unwrap())
        .unwrap();
    assert_eq!(value, br#"{"dividend":1.0}"#);

    let a = h1(&addr, &post("Nope"), &[JSON], b"{}").await;
    assert_eq!(
        (a.status, &a.json()["code"]),
        (501, &json!("unimplemented"))
    );
    // A streaming operation called as a unary one.
    let a = h1(&addr, &post("Count"), &[JSON], br#"{"n": 1}"#).await;
    assert_eq!(a.status, 501, "{a:?}");
    assert!(a.json()["message"]
        .as_str()
        .unwrap()
        .contains("application/connect+"));
    // A deadline.
    let a = h1(
        &addr,
        &post("SleepMs"),
        &[JSON, ("connect-timeout-ms", "20")],
        br#"{"ms": 60000}"#,
    )
    .await;
    assert_eq!(
        (a.status, &a.json()["code"]),
        (504, &json!("deadline_exceeded"))
    );
    let a = h1(
        &addr,
        &post("SleepMs"),
        &[JSON, ("connect-timeout-ms", "soon")],
        br#"{"ms": 1}"#,
    )
    .await;
    assert_eq!(a.status, 500, "{a:?}");
    assert!(a.json()["message"]
        .as_str()
        .unwrap()
        .contains("connect-timeout-ms"));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_both_ways() {
    let host = host();
    let addr = addr(&host);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, br#"{"n": 4000}"#).unwrap();
    let packed = gz.finish().unwrap();
    let a = h1(
        &addr,
        &post("Text"),
        &[
            JSON,
            ("content-encoding", "gzip"),
            ("accept-encoding", "gzip"),
        ],
        &packed,
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&a.body[..])
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, format!("\"{}\"", "a".repeat(4000)));
    let a = h1(
        &addr,
        &post("Text"),
        &[JSON, ("content-encoding", "br")],
        b"??",
    )
    .await;
    assert_eq!(
        (a.status, &a.json()["code"]),
        (501, &json!("unimplemented"))
    );
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_for_idempotent_operations_only() {
    let host = host();
    let addr = addr(&host);
    let a = h1(
        &addr,
        &format!(
            "GET {SERVICE}/SayHello?connect=v1&encoding=json&message=%7B%22name%22%3A%22get%22%7D"
        ),
        &[],
        b"",
    )
    .await;
    assert_eq!((a.status, a.json()), (200, json!("hello, get")), "{a:?}");
    assert!(a.header("vary").unwrap().contains("accept-encoding"));
    let message = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"name":"b64"}"#);
    let a = h1(
        &addr,
        &format!("GET {SERVICE}/SayHello?connect=v1&encoding=json&base64=1&message={message}"),
        &[],
        b"",
    )
    .await;
    assert_eq!((a.status, a.json()), (200, json!("hello, b64")));
    // Not idempotent: not by GET.
    let a = h1(
        &addr,
        &format!("GET {SERVICE}/Divide?connect=v1&encoding=json&message=%7B%7D"),
        &[],
        b"",
    )
    .await;
    assert_eq!(a.status, 501, "{a:?}");
    assert!(a.json()["message"].as_str().unwrap().contains("idempotent"));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_over_http1_server_and_client() {
    let host = host();
    let addr = addr(&host);
    let ct = ("content-type", "application/connect+json");
    let a = h1(&addr, &post("Count"), &[ct], &envelope(0, br#"{"n": 3}"#)).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/connect+json"));
    let env = a.envelopes();
    assert_eq!(env.len(), 4, "{a:?}");
    for (i, (flags, m)) in env[..3].iter().enumerate() {
        assert_eq!(*flags, 0);
        assert_eq!(
            serde_json::from_slice::<Value>(m).unwrap(),
            json!({"seq": i})
        );
    }
    assert_eq!(env[3].0, 0x02);
    assert_eq!(
        serde_json::from_slice::<Value>(&env[3].1).unwrap(),
        json!({})
    );

    let mut body = Vec::new();
    for seq in [1, 2, 3] {
        body.extend(envelope(
            0,
            &serde_json::to_vec(&json!({"seq": seq})).unwrap(),
        ));
    }
    let a = h1(&addr, &post("Sum"), &[ct], &body).await;
    let env = a.envelopes();
    assert_eq!(
        serde_json::from_slice::<Value>(&env[0].1).unwrap(),
        json!(6)
    );
    assert_eq!(env[1].0, 0x02);

    // An error: the end-of-stream message carries it, HTTP 200.
    let a = h1(
        &addr,
        &post("Divide"),
        &[ct],
        &envelope(0, br#"{"a":1,"b":0}"#),
    )
    .await;
    assert_eq!(a.status, 200);
    let env = a.envelopes();
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].0, 0x02);
    let end: Value = serde_json::from_slice(&env[0].1).unwrap();
    assert_eq!(end["error"]["code"], "unknown", "{end}");
    assert_eq!(
        end["error"]["details"][0]["type"],
        "keel_test.connect.DivideByZero"
    );

    // Bidirectional needs HTTP/2.
    let a = h1(&addr, &post("Echo"), &[ct], &envelope(0, br#"{"seq":1}"#)).await;
    let end: Value = serde_json::from_slice(&a.envelopes()[0].1).unwrap();
    assert_eq!(end["error"]["code"], "unimplemented", "{end}");
    assert!(end["error"]["message"].as_str().unwrap().contains("HTTP/2"));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidirectional_over_http2_flows_while_the_request_does() {
    let host = host();
    let tcp = tokio::net::TcpStream::connect(addr(&host)).await.unwrap();
    let (tx, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut tx = tx.ready().await.unwrap();
    let req = http::Request::post(format!("http://keel{SERVICE}/Echo"))
        .header("content-type", "application/connect+json")
        .header("connect-protocol-version", "1")
        .body(())
        .unwrap();
    let (response, mut stream) = tx.send_request(req, false).unwrap();
    stream
        .send_data(Bytes::from(envelope(0, br#"{"seq":7}"#)), false)
        .unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    // The first item comes back before the request ends.
    let chunk = body.data().await.unwrap().unwrap();
    assert_eq!(&chunk[5..], br#"{"seq":7}"#);
    stream.send_data(Bytes::new(), true).unwrap();
    let mut rest = Vec::new();
    while let Some(c) = body.data().await {
        rest.extend_from_slice(&c.unwrap());
    }
    assert_eq!(rest[0], 0x02, "{rest:?}");
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_over_http2() {
    let host = host();
    let tcp = tokio::net::TcpStream::connect(addr(&host)).await.unwrap();
    let (tx, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    for (method, body, status, expected) in [
        ("SayHello", r#"{"name": "h2"}"#, 200, json!("hello, h2")),
        (
            "Find",
            r#"{"key": "k"}"#,
            404,
            json!({"code": "not_found", "message": "no k"}),
        ),
    ] {
        let mut tx = tx.clone().ready().await.unwrap();
        let req = http::Request::post(format!("http://keel{SERVICE}/{method}"))
            .header("content-type", "application/json")
            .header("connect-protocol-version", "1")
            .header("connect-timeout-ms", "10000")
            .body(())
            .unwrap();
        let (response, mut stream) = tx.send_request(req, false).unwrap();
        stream.send_data(Bytes::from(body), true).unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(response.headers()["content-type"], "application/json");
        let mut body = response.into_body();
        let mut got = Vec::new();
        while let Some(c) = body.data().await {
            got.extend_from_slice(&c.unwrap());
        }
        assert_eq!(serde_json::from_slice::<Value>(&got).unwrap(), expected);
        assert!(body.trailers().await.unwrap().is_none(), "no HTTP trailers");
    }
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits() {
    let host = host();
    let addr = addr(&host);
    // Bytes in base64 (protobuf's JSON) within the limit of 64 KiB, rewritten as keel's JSON
    // (a list of numbers) past it: refused as a longer message is, unary and streamed. A small
    // one passes both ways.
    use base64::Engine as _;
    let b64 = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![200u8; n]);
    let unary = |n| format!(r#"{{"blob": "{}"}}"#, b64(n)).into_bytes();
    let a = h1(&addr, &post("BlobLen"), &[JSON], &unary(1000)).await;
    assert_eq!((a.status, a.json()), (200, json!(1000)), "{a:?}");
    let big = unary(30 * 1024);
    assert!(big.len() < 64 * 1024);
    let a = h1(&addr, &post("BlobLen"), &[JSON], &big).await;
    assert_eq!(
        (a.status, &a.json()["code"]),
        (429, &json!("resource_exhausted")),
        "{a:?}"
    );
    let ct = ("content-type", "application/connect+json");
    let streamed = |n| envelope(0, format!(r#"{{"data": "{}"}}"#, b64(n)).as_bytes());
    let a = h1(&addr, &post("BlobLens"), &[ct], &streamed(1000)).await;
    let env = a.envelopes();
    assert_eq!(
        serde_json::from_slice::<Value>(&env[0].1).unwrap(),
        json!(1000),
        "{a:?}"
    );
    let a = h1(&addr, &post("BlobLens"), &[ct], &streamed(30 * 1024)).await;
    let end: Value = serde_json::from_slice(&a.envelopes().last().unwrap().1).unwrap();
    assert_eq!(end["error"]["code"], "resource_exhausted", "{end}");
    // A unary body past the message size limit.
    let big = vec![b' '; 70 * 1024];
    let a = h1(&addr, &post("Text"), &[JSON], &big).await;
    assert_eq!(
        (a.status, &a.json()["code"]),
        (429, &json!("resource_exhausted"))
    );
    // A streaming envelope announcing 4 GiB: refused from its prefix.
    let ct = ("content-type", "application/connect+json");
    let a = h1(&addr, &post("Count"), &[ct], &[0, 0xff, 0xff, 0xff, 0xff]).await;
    let end: Value = serde_json::from_slice(&a.envelopes()[0].1).unwrap();
    assert_eq!(end["error"]["code"], "resource_exhausted", "{end}");
    // A GET whose message is past the message size limit (within the head's), on a host
    // whose limit is 1 KiB.
    let small = keel::Host::builder()
        .service(ConnServer::new(Impl))
        .endpoint("http://127.0.0.1:0")
        .max_message_size(1024)
        .start()
        .unwrap();
    let message = "a".repeat(4 * 1024);
    let a = h1(
        &self::addr(&small),
        &format!("GET {SERVICE}/SayHello?connect=v1&encoding=json&message={message}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(
        (a.status, &a.json()["code"]),
        (429, &json!("resource_exhausted")),
        "{a:?}"
    );
    small.shutdown_async().await;
    // An enormous one: past the limit of a request head, refused before routing.
    let message = "a".repeat(100 * 1024);
    let a = h1(
        &addr,
        &format!("GET {SERVICE}/SayHello?connect=v1&encoding=json&message={message}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(a.status, 431, "{a:?}");
    host.shutdown_async().await;
}
