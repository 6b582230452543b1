//! The gRPC protocol on http:// (h2c) and https:// endpoints, spoken by hand with the `h2`
//! crate: gRPC's JSON subtype (`application/grpc+json`), unary calls and every kind of stream
//! of messages, status codes and typed faults (`grpc-status-details-bin` decoded back),
//! `grpc-timeout`, metadata both ways, compression both ways, the message size limit, calls in
//! flight per connection, HTTP/1.1 refused, and a draining host. Hostile peers are in
//! `hostile.rs`.

#![cfg(feature = "http")]

mod common;

use std::io::Read as _;
use std::time::Duration;

use base64::Engine as _;
use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use h2::client::SendRequest;
use http::{HeaderMap, Request};
use keel::{Context, MessageStream, Status};
use rustls::pki_types::pem::PemObject as _;
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

/// What the gRPC tests call.
#[keel::contract(package = "keel_test.v1")]
pub trait Greeter {
    /// A greeting; echoes the caller's `x-tenant` and `trace-bin` metadata back.
    async fn say_hello(&self, name: String, ctx: Context) -> String;
    /// `a / b`, or the typed fault for a zero `b`.
    async fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
    /// Always NOT_FOUND.
    async fn find(&self, key: String) -> Result<u64, Status>;
    /// Sleeps, then returns `ms`.
    async fn sleep_ms(&self, ms: u64) -> u64;
    /// `n` bytes of text (a reply worth compressing).
    async fn text(&self, n: u64) -> String;
    /// Items 0..n (server streaming).
    async fn count(&self, n: u64) -> MessageStream<Item>;
    /// The sum of the items' seqs (client streaming).
    async fn sum(&self, items: MessageStream<Item>) -> Result<u64, Status>;
    /// Each item back as it arrives, seq doubled (bidirectional).
    async fn echo(&self, items: MessageStream<Item>) -> MessageStream<Item>;
    /// `after` items, then the status `aborted`.
    async fn abort_after(&self, after: u64) -> MessageStream<Item>;
    /// `after` items, then the typed fault.
    async fn fault_after(&self, after: u64) -> Result<MessageStream<Item>, DivideByZero>;
    /// Acknowledged on receipt.
    #[keel(one_way)]
    fn notify(&self, n: u64);
}

struct Impl;

impl Greeter for Impl {
    async fn say_hello(&self, name: String, ctx: Context) -> String {
        if let Some(tenant) = ctx.metadata().get("x-tenant") {
            ctx.insert_reply_metadata("x-tenant", tenant).unwrap();
        }
        if let Some(trace) = ctx.metadata().get_bin("trace-bin") {
            let mut md = keel::Metadata::new();
            md.insert_bin("trace-bin", trace.to_vec()).unwrap();
            ctx.merge_reply_metadata(&md);
        }
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
        Err(Status::not_found(format!("no such key: {key} (ü)")))
    }
    async fn sleep_ms(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
    async fn text(&self, n: u64) -> String {
        "keel ".repeat(n as usize / 5)
    }
    async fn count(&self, n: u64) -> MessageStream<Item> {
        MessageStream::from_iter((0..n).map(|seq| Item { seq }))
    }
    async fn sum(&self, mut items: MessageStream<Item>) -> Result<u64, Status> {
        let mut sum = 0;
        while let Some(i) = items.next().await {
            sum += i?.seq;
        }
        Ok(sum)
    }
    async fn echo(&self, mut items: MessageStream<Item>) -> MessageStream<Item> {
        let (tx, rx) = MessageStream::channel(4);
        tokio::spawn(async move {
            while let Some(Ok(mut i)) = items.next().await {
                i.seq *= 2;
                if tx.send(i).await.is_err() {
                    return;
                }
            }
        });
        rx
    }
    async fn abort_after(&self, after: u64) -> MessageStream<Item> {
        let (tx, rx) = MessageStream::channel(4);
        tokio::spawn(async move {
            for seq in 0..after {
                let _ = tx.send(Item { seq }).await;
            }
            tx.abort(Status::new(keel::StatusCode::Aborted, "stopped on purpose"))
                .await;
        });
        rx
    }
    async fn fault_after(&self, after: u64) -> Result<MessageStream<Item>, DivideByZero> {
        let (tx, rx) = MessageStream::channel(4);
        tokio::spawn(async move {
            for seq in 0..after {
                let _ = tx.send(Item { seq }).await;
            }
            tx.fault(DivideByZero { dividend: 7.0 }).await;
        });
        Ok(rx)
    }
    fn notify(&self, _n: u64) {}
}

const JSON: &str = "application/grpc+json";
const SERVICE: &str = "/keel_test.v1.Greeter";

fn host_with(
    tls: bool,
    settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
) -> keel::Host {
    let url = if tls {
        "https://127.0.0.1:0"
    } else {
        "http://127.0.0.1:0"
    };
    let builder = keel::Host::builder()
        .service(GreeterServer::new(Impl))
        .endpoint(url);
    let builder = if tls {
        builder.tls(test_cert().server_tls().unwrap())
    } else {
        builder
    };
    settings(builder).start().expect("host starts")
}

fn host(tls: bool) -> keel::Host {
    host_with(tls, |h| h)
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

fn tls_config() -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(test_cert().cert_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    std::sync::Arc::new(config)
}

/// An HTTP/2 connection to `url` (TLS with ALPN h2 for https://).
async fn connect(url: &str) -> SendRequest<Bytes> {
    let (scheme, addr) = url.split_once("://").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let io: Box<dyn Io> = if scheme == "https" {
        let connector = tokio_rustls::TlsConnector::from(tls_config());
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        Box::new(connector.connect(name, tcp).await.unwrap())
    } else {
        Box::new(tcp)
    };
    let (tx, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    tx
}

/// A gRPC request head for `path` with `headers` on top of gRPC's own.
fn request(path: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut req = Request::post(format!("http://keel{path}"))
        .header("content-type", JSON)
        .header("te", "trailers")
        .body(())
        .unwrap();
    for (k, v) in headers {
        let name = http::HeaderName::from_bytes(k.as_bytes()).unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    req
}

/// `message` as one length-prefixed message.
fn frame(message: &[u8], compressed: bool) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(compressed as u8);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

fn json_frame(v: &Value) -> Bytes {
    frame(&serde_json::to_vec(v).unwrap(), false)
}

/// A gRPC answer, read to its end.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: HeaderMap,
    /// Each message: compressed flag, bytes.
    messages: Vec<(u8, Bytes)>,
    trailers: Option<HeaderMap>,
}

impl Answer {
    /// Where the status is: the trailers, or the headers of a Trailers-Only answer.
    fn status_headers(&self) -> &HeaderMap {
        self.trailers.as_ref().unwrap_or(&self.headers)
    }

    fn grpc_status(&self) -> u32 {
        let v = self
            .status_headers()
            .get("grpc-status")
            .expect("grpc-status");
        v.to_str().unwrap().parse().unwrap()
    }

    fn grpc_message(&self) -> String {
        let raw = self
            .status_headers()
            .get("grpc-message")
            .map_or("", |v| v.to_str().unwrap());
        percent_decode(raw)
    }

    fn trailers_only(&self) -> bool {
        self.trailers.is_none() && self.messages.is_empty()
    }

    fn json(&self, i: usize) -> Value {
        serde_json::from_slice(&self.messages[i].1).unwrap()
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(byte) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// Reads the answer to a request whose body is being (or was) sent.
async fn answer(response: h2::client::ResponseFuture) -> Answer {
    try_answer(response).await.unwrap()
}

/// [`answer`], or the HTTP/2 error that ended the stream.
async fn try_answer(response: h2::client::ResponseFuture) -> Result<Answer, h2::Error> {
    let response = response.await?;
    let (parts, mut body) = response.into_parts();
    let mut buf = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        body.flow_control().release_capacity(chunk.len())?;
        buf.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await?;
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        messages: split_messages(buf.freeze()),
        trailers,
    })
}

fn split_messages(mut buf: Bytes) -> Vec<(u8, Bytes)> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let flags = buf[0];
        let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
        out.push((flags, buf.slice(5..5 + len)));
        buf = buf.slice(5 + len..);
    }
    out
}

/// One call with `body` as the whole request.
async fn call(
    tx: &mut SendRequest<Bytes>,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Answer {
    let mut tx = tx.clone().ready().await.unwrap();
    let (response, mut stream) = tx.send_request(request(path, headers), false).unwrap();
    // A host that answers before reading (an unknown method, a bad header) may have closed
    // the stream already: its answer is what counts.
    let _ = stream.send_data(body, true);
    answer(response).await
}

/// A unary call with `args` as its one message.
async fn unary(tx: &mut SendRequest<Bytes>, method: &str, args: Value) -> Answer {
    call(tx, &format!("{SERVICE}/{method}"), &[], json_frame(&args)).await
}

async fn unary_ok_on(url: &str) {
    let mut tx = connect(url).await;
    let a = unary(&mut tx, "SayHello", json!({"name": "grpc"})).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["content-type"], JSON);
    assert_eq!(a.grpc_status(), 0, "{a:?}");
    assert_eq!(a.messages.len(), 1);
    assert_eq!(a.json(0), json!("hello, grpc"));
    assert!(
        a.trailers.is_some(),
        "the status is in trailers after a message"
    );
    assert!(a.headers.get("grpc-accept-encoding").is_some());
    // Parameters after `;` are ignored; the connection carries on.
    let a = call(
        &mut tx,
        &format!("{SERVICE}/Divide"),
        &[("content-type", "application/grpc+json; charset=utf-8")],
        json_frame(&json!({"a": 9.0, "b": 2.0})),
    )
    .await;
    assert_eq!((a.grpc_status(), a.json(0)), (0, json!(4.5)));
    // A one-way operation: acknowledged with its `()`.
    let a = unary(&mut tx, "Notify", json!({"n": 1})).await;
    assert_eq!((a.grpc_status(), a.json(0)), (0, json!(null)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_over_h2c_and_https() {
    for tls in [false, true] {
        let host = host(tls);
        unary_ok_on(host.url()).await;
        host.shutdown_async().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keels_own_convention_still_works_beside_grpc() {
    let host = host(false);
    let mut tx = connect(host.url()).await;
    let req = Request::post("http://keel/Greeter/say_hello")
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let mut tx2 = tx.clone().ready().await.unwrap();
    let (response, mut stream) = tx2.send_request(req, false).unwrap();
    stream
        .send_data(Bytes::from_static(br#"{"name": "json"}"#), true)
        .unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["keel-status"], "ok");
    let mut body = response.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        got.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(got, br#""hello, json""#);
    let a = unary(&mut tx, "SayHello", json!({"name": "again"})).await;
    assert_eq!(a.grpc_status(), 0);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_typed_faults() {
    let host = host(false);
    let mut tx = connect(host.url()).await;
    // A status the handler returned: Trailers-Only, its code and message.
    let a = unary(&mut tx, "Find", json!({"key": "k"})).await;
    assert_eq!(a.status, 200);
    assert!(a.trailers_only(), "{a:?}");
    assert_eq!(a.grpc_status(), 5);
    assert_eq!(a.grpc_message(), "no such key: k (ü)");
    assert!(a.headers.get("grpc-status-details-bin").is_none());
    // A typed fault: UNKNOWN, and the fault in a google.rpc.Status.
    let a = unary(&mut tx, "Divide", json!({"a": 22.0, "b": 0.0})).await;
    assert!(a.trailers_only(), "{a:?}");
    assert_eq!(a.grpc_status(), 2);
    assert!(
        a.grpc_message().contains("DivideByZero"),
        "{}",
        a.grpc_message()
    );
    let details = a.headers["grpc-status-details-bin"].to_str().unwrap();
    let details = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(details)
        .unwrap();
    let (code, message, any) = decode_rpc_status(&details);
    assert_eq!(code, 2);
    assert_eq!(message, a.grpc_message());
    assert_eq!(any.len(), 1);
    assert_eq!(any[0].0, "type.googleapis.com/keel_test.v1.DivideByZero");
    let fault: DivideByZero = serde_json::from_slice(&any[0].1).unwrap();
    assert_eq!(fault, DivideByZero { dividend: 22.0 });
    // Arguments that do not decode: INTERNAL (gRPC's "error parsing request").
    let a = unary(&mut tx, "Divide", json!({"a": "x"})).await;
    assert_eq!(a.grpc_status(), 13, "{a:?}");
    host.shutdown_async().await;
}

/// A `google.rpc.Status`, decoded by hand: (code, message, [(type_url, value)]).
fn decode_rpc_status(mut b: &[u8]) -> (u64, String, Vec<(String, Vec<u8>)>) {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut n = 0;
        let mut shift = 0;
        loop {
            let byte = b[0];
            *b = &b[1..];
            n |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                return n;
            }
        }
    }
    fn bytes<'a>(b: &mut &'a [u8]) -> &'a [u8] {
        let len = varint(b) as usize;
        let (v, rest) = b.split_at(len);
        *b = rest;
        v
    }
    let (mut code, mut message, mut details) = (0, String::new(), Vec::new());
    while !b.is_empty() {
        match varint(&mut b) {
            0x08 => code = varint(&mut b),
            0x12 => message = String::from_utf8(bytes(&mut b).to_vec()).unwrap(),
            0x1a => {
                let mut any = bytes(&mut b);
                let (mut url, mut value) = (String::new(), Vec::new());
                while !any.is_empty() {
                    match varint(&mut any) {
                        0x0a => url = String::from_utf8(bytes(&mut any).to_vec()).unwrap(),
                        0x12 => value = bytes(&mut any).to_vec(),
                        other => panic!("unexpected Any field {other}"),
                    }
                }
                details.push((url, value));
            }
            other => panic!("unexpected Status field {other}"),
        }
    }
    (code, message, details)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_services_and_methods_are_unimplemented() {
    let host = host(false);
    let mut tx = connect(host.url()).await;
    for path in [
        "/keel_test.v1.Nope/SayHello",
        "/other.Greeter/SayHello",
        "/Greeter/SayHello",
        "/keel_test.v1.Greeter/Nope",
        "/keel_test.v1.Greeter/say_hello",
        "/keel_test.v1.Greeter",
    ] {
        let a = call(&mut tx, path, &[], json_frame(&json!({}))).await;
        assert_eq!(a.status, 200);
        assert!(a.trailers_only());
        assert_eq!(a.grpc_status(), 12, "{path}: {a:?}");
        assert!(!a.grpc_message().is_empty());
    }
    let a = call(
        &mut tx,
        "/keel_test.v1.Greeter/Nope",
        &[],
        json_frame(&json!({})),
    )
    .await;
    assert!(a.grpc_message().contains("Nope"), "{}", a.grpc_message());
    // gRPC calls are POSTs: anything else is refused as grpc-go refuses it.
    let mut ready = tx.clone().ready().await.unwrap();
    let mut get = request(&format!("{SERVICE}/SayHello"), &[]);
    *get.method_mut() = http::Method::GET;
    let (response, _) = ready.send_request(get, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    // Protobuf (GRPC.md "Types"): the parameters are fields 1, 2, ...; a reply that is not a
    // struct is field 1 of a wrapper; each message of a stream of structs is the struct.
    for ct in ["application/grpc", "application/grpc+proto"] {
        // SayHelloRequest { string name = 1; } with name = "ann".
        let a = call(
            &mut tx,
            &format!("{SERVICE}/SayHello"),
            &[("content-type", ct)],
            frame(b"\x0a\x03ann", false),
        )
        .await;
        assert_eq!(a.grpc_status(), 0, "{ct}: {}", a.grpc_message());
        assert_eq!(a.headers["content-type"], ct);
        let reply = &a.messages[0].1;
        assert_eq!(
            reply[0], 0x0a,
            "SayHelloResponse.value is field 1, a string"
        );
        assert!(
            std::str::from_utf8(&reply[2..]).unwrap().contains("ann"),
            "{reply:?}"
        );
    }
    // CountRequest { uint64 n = 1; } with n = 3: Items { uint64 seq = 1; } 0, 1, 2.
    let a = call(
        &mut tx,
        &format!("{SERVICE}/Count"),
        &[("content-type", "application/grpc")],
        frame(b"\x08\x03", false),
    )
    .await;
    assert_eq!(a.grpc_status(), 0, "{}", a.grpc_message());
    let items: Vec<&[u8]> = a.messages.iter().map(|(_, m)| &m[..]).collect();
    assert_eq!(items, [&b"\x08\x00"[..], b"\x08\x01", b"\x08\x02"]);
    // A body that is not the message: INTERNAL, as grpc-go answers what it cannot parse.
    let a = call(
        &mut tx,
        &format!("{SERVICE}/Count"),
        &[("content-type", "application/grpc")],
        frame(b"\x0a\x05ab", false),
    )
    .await;
    assert_eq!(a.grpc_status(), 13, "{}", a.grpc_message());
    assert!(
        a.grpc_message().contains("cut short"),
        "{}",
        a.grpc_message()
    );
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_malformed_and_passed() {
    let host = host(false);
    let mut tx = connect(host.url()).await;
    let path = format!("{SERVICE}/SleepMs");
    for bad in ["soon", "100", "123456789m", "5x"] {
        let a = call(
            &mut tx,
            &path,
            &[("grpc-timeout", bad)],
            json_frame(&json!({"ms": 0})),
        )
        .await;
        assert_eq!(a.grpc_status(), 13, "{bad}");
        assert!(
            a.grpc_message().contains("grpc-timeout"),
            "{}",
            a.grpc_message()
        );
    }
    let a = call(
        &mut tx,
        &path,
        &[("grpc-timeout", "50m")],
        json_frame(&json!({"ms": 10_000})),
    )
    .await;
    assert_eq!(a.grpc_status(), 4, "{a:?}");
    // A generous one changes nothing.
    let a = call(
        &mut tx,
        &path,
        &[("grpc-timeout", "1M")],
        json_frame(&json!({"ms": 1})),
    )
    .await;
    assert_eq!((a.grpc_status(), a.json(0)), (0, json!(1)));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_travels_both_ways() {
    let host = host(false);
    let mut tx = connect(host.url()).await;
    for trace in ["AAH/", "AAH/AA==", "AAH/AA"] {
        let a = call(
            &mut tx,
            &format!("{SERVICE}/SayHello"),
            &[("x-tenant", "acme"), ("trace-bin", trace)],
            json_frame(&json!({"name": "md"})),
        )
        .await;
        assert_eq!(a.grpc_status(), 0);
        assert_eq!(a.headers["x-tenant"], "acme");
        // Sent unpadded.
        let back = a.headers["trace-bin"].to_str().unwrap();
        assert!(!back.ends_with('='), "{back}");
        let want = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(trace.trim_end_matches('='))
            .unwrap();
        let got = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(back)
            .unwrap();
        assert_eq!(got, want);
    }
    host.shutdown_async().await;
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_both_ways() {
    let host = host(false);
    let mut tx = connect(host.url()).await;
    // A compressed request message.
    let args = serde_json::to_vec(&json!({"name": "zipped"})).unwrap();
    let a = call(
        &mut tx,
        &format!("{SERVICE}/SayHello"),
        &[("grpc-encoding", "gzip")],
        frame(&gzip(&args), true),
    )
    .await;
    assert_eq!((a.grpc_status(), a.json(0)), (0, json!("hello, zipped")));
    // zstd too.
    let packed = zstd::encode_all(&args[..], 1).unwrap();
    let a = call(
        &mut tx,
        &format!("{SERVICE}/SayHello"),
        &[("grpc-encoding", "zstd")],
        frame(&packed, true),
    )
    .await;
    assert_eq!((a.grpc_status(), a.json(0)), (0, json!("hello, zipped")));
    // A compressed client stream.
    let items: Vec<u8> = (1..=3u64)
        .flat_map(|seq| frame(&gzip(format!(r#"{{"seq": {seq}}}"#).as_bytes()), true).to_vec())
        .collect();
    let a = call(
        &mut tx,
        &format!("{SERVICE}/Sum"),
        &[("grpc-encoding", "gzip")],
        items.into(),
    )
    .await;
    assert_eq!((a.grpc_status(), a.json(0)), (0, json!(6)), "{a:?}");
    // A message that decompresses past the limit: RESOURCE_EXHAUSTED.
    let bomb = gzip(&[b' '; 8 << 20]);
    let a = call(
        &mut tx,
        &format!("{SERVICE}/SayHello"),
        &[("grpc-encoding", "gzip")],
        frame(&bomb, true),
    )
    .await;
    assert_eq!(a.grpc_status(), 8, "{a:?}");
    // A compressed reply for a caller that accepts gzip.
    let a = call(
        &mut tx,
        &format!("{SERVICE}/Text"),
        &[("grpc-accept-encoding", "gzip")],
        json_frame(&json!({"n": 10_000})),
    )
    .await;
    assert_eq!(a.grpc_status(), 0);
    assert_eq!(a.headers["grpc-encoding"], "gzip");
    assert_eq!(a.messages[0].0, 1, "the compressed flag");
    let text: String = serde_json::from_slice(&gunzip(&a.messages[0].1)).unwrap();
    assert_eq!(text.len(), 10_000);
    // And none for one that does not.
    let a = unary(&mut tx, "Text", json!({"n": 10_000})).await;
    assert_eq!(a.messages[0].0, 0);
    assert!(a.headers.get("grpc-encoding").is_none());
    // An encoding the host does not speak: UNIMPLEMENTED, and what it accepts.
    let a = call(
        &mut tx,
        &format!("{SERVICE}/SayHello"),
        &[("grpc-encoding", "snappy")],
        frame(b"??", true),
    )
    .await;
    assert_eq!(a.grpc_status(), 12);
    let accepted = a.headers["grpc-accept-encoding"].to_str().unwrap();
    assert!(accepted.contains("gzip"), "{accepted}");
    // A compressed flag without an encoding: INTERNAL.
    let a = call(
        &mut tx,
        &format!("{SERVICE}/SayHello"),
        &[],
        frame(&gzip(&args), true),
    )
    .await;
    assert_eq!(a.grpc_status(), 13);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_refused_before_it_arrives_and_the_connection_serves_on() {
    let host = host_with(false, |h| h.max_message_size(1024));
    let mut tx = connect(host.url()).await;
    let mut ready = tx.clone().ready().await.unwrap();
    let (response, mut stream) = ready
        .send_request(request(&format!("{SERVICE}/SayHello"), &[]), false)
        .unwrap();
    // The prefix announces 1 MiB; only 10 bytes follow, and the stream stays open.
    let mut head = BytesMut::new();
    head.put_u8(0);
    head.put_u32(1 << 20);
    head.put_slice(b"{\"name\": \"");
    stream.send_data(head.freeze(), false).unwrap();
    let a = answer(response).await;
    assert_eq!(a.grpc_status(), 8, "{a:?}");
    assert!(a.grpc_message().contains("1024"), "{}", a.grpc_message());
    drop(stream);
    let a = unary(&mut tx, "SayHello", json!({"name": "next"})).await;
    assert_eq!((a.grpc_status(), a.json(0)), (0, json!("hello, next")));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_a_connections_share_are_resource_exhausted() {
    let host = host_with(false, |h| h.max_calls_per_connection(2));
    let tx = connect(host.url()).await;
    let mut running = Vec::new();
    for _ in 0..2 {
        let mut tx = tx.clone();
        running.push(tokio::spawn(async move {
            unary(&mut tx, "SleepMs", json!({"ms": 300}))
                .await
                .grpc_status()
        }));
    }
    assert!(eventually(|| host.stats().calls_in_flight == 2).await);
    let mut third = tx.clone();
    let a = unary(&mut third, "SayHello", json!({"name": "third"})).await;
    assert_eq!(a.grpc_status(), 8, "{a:?}");
    for r in running {
        assert_eq!(r.await.unwrap(), 0);
    }
    // Served again once there is room.
    let a = unary(&mut third, "SayHello", json!({"name": "later"})).await;
    assert_eq!(a.grpc_status(), 0);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_request_needs_exactly_one_message() {
    let host = host(false);
    let mut tx = connect(host.url()).await;
    let path = format!("{SERVICE}/SayHello");
    let a = call(&mut tx, &path, &[], Bytes::new()).await;
    assert_eq!(a.grpc_status(), 12, "none: {a:?}");
    let one = json_frame(&json!({"name": "a"}));
    let two = [one.clone(), one].concat();
    let a = call(&mut tx, &path, &[], two.into()).await;
    assert_eq!(a.grpc_status(), 12, "two: {a:?}");
    // Half a message: the request ended inside it.
    let a = call(
        &mut tx,
        &path,
        &[],
        Bytes::from_static(&[0, 0, 0, 0, 9, b'{']),
    )
    .await;
    assert_eq!(a.grpc_status(), 13, "half: {a:?}");
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_client_and_bidirectional_streams() {
    for tls in [false, true] {
        let host = host(tls);
        let mut tx = connect(host.url()).await;
        // Server streaming: five messages, then OK in the trailers; no keel end frame.
        let a = unary(&mut tx, "Count", json!({"n": 5})).await;
        assert_eq!(a.grpc_status(), 0, "{a:?}");
        let seqs: Vec<Value> = (0..a.messages.len())
            .map(|i| a.json(i)["seq"].clone())
            .collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4]);
        assert!(a.messages.iter().all(|(flags, _)| *flags == 0));
        // Client streaming: the messages are the stream.
        let body: Vec<u8> = (1..=4)
            .flat_map(|seq| json_frame(&json!({"seq": seq})).to_vec())
            .collect();
        let a = call(&mut tx, &format!("{SERVICE}/Sum"), &[], body.into()).await;
        assert_eq!((a.grpc_status(), a.json(0)), (0, json!(10)), "{a:?}");
        // An empty client stream.
        let a = call(&mut tx, &format!("{SERVICE}/Sum"), &[], Bytes::new()).await;
        assert_eq!((a.grpc_status(), a.json(0)), (0, json!(0)));
        // Bidirectional: each reply arrives before the request stream ends.
        let mut ready = tx.clone().ready().await.unwrap();
        let (response, mut stream) = ready
            .send_request(request(&format!("{SERVICE}/Echo"), &[]), false)
            .unwrap();
        stream
            .send_data(json_frame(&json!({"seq": 1})), false)
            .unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.headers()["content-type"], JSON);
        let mut body = response.into_body();
        let mut got = BytesMut::new();
        for seq in [1u64, 2, 3] {
            if seq > 1 {
                stream
                    .send_data(json_frame(&json!({"seq": seq})), false)
                    .unwrap();
            }
            while split_messages_partial(&got).len() < seq as usize {
                let chunk = body.data().await.unwrap().unwrap();
                body.flow_control().release_capacity(chunk.len()).unwrap();
                got.extend_from_slice(&chunk);
            }
        }
        let replies: Vec<Value> = split_messages(got.freeze())
            .iter()
            .map(|(_, m)| serde_json::from_slice::<Value>(m).unwrap()["seq"].clone())
            .collect();
        assert_eq!(replies, [2, 4, 6]);
        stream.send_data(Bytes::new(), true).unwrap();
        assert!(body.data().await.is_none());
        let trailers = body.trailers().await.unwrap().unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        host.shutdown_async().await;
    }
}

/// The whole messages in `buf` so far.
fn split_messages_partial(buf: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut out = Vec::new();
    while buf.len() >= at + 5 {
        let len = u32::from_be_bytes(buf[at + 1..at + 5].try_into().unwrap()) as usize;
        if buf.len() < at + 5 + len {
            break;
        }
        out.push(len);
        at += 5 + len;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_end_with_a_status_or_a_fault() {
    let host = host(false);
    let mut tx = connect(host.url()).await;
    let a = unary(&mut tx, "AbortAfter", json!({"after": 2})).await;
    assert_eq!(a.messages.len(), 2, "{a:?}");
    assert!(a.trailers.is_some());
    assert_eq!(a.grpc_status(), 10);
    assert_eq!(a.grpc_message(), "stopped on purpose");
    let a = unary(&mut tx, "FaultAfter", json!({"after": 3})).await;
    assert_eq!(a.messages.len(), 3, "{a:?}");
    assert_eq!(a.grpc_status(), 2);
    let details = a.trailers.as_ref().unwrap()["grpc-status-details-bin"]
        .to_str()
        .unwrap();
    let details = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(details)
        .unwrap();
    let (_, _, any) = decode_rpc_status(&details);
    assert_eq!(any[0].0, "type.googleapis.com/keel_test.v1.DivideByZero");
    let fault: DivideByZero = serde_json::from_slice(&any[0].1).unwrap();
    assert_eq!(fault.dividend, 7.0);
    // A client stream with a message over the limit: RESOURCE_EXHAUSTED.
    let host2 = host_with(false, |h| h.max_message_size(64));
    let mut tx2 = connect(host2.url()).await;
    let big = json_frame(&json!({"seq": 1, "pad": "x".repeat(100)}));
    let a = call(&mut tx2, &format!("{SERVICE}/Sum"), &[], big).await;
    assert_eq!(a.grpc_status(), 8, "{a:?}");
    host2.shutdown_async().await;
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_http1_is_refused_and_closed() {
    let host = host(false);
    let addr = host.url().split_once("://").unwrap().1.to_string();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = json_frame(&json!({"name": "h1"}));
    let head = format!(
        "POST {SERVICE}/SayHello HTTP/1.1\r\nhost: keel\r\ncontent-type: {JSON}\r\n\
         te: trailers\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&body).await.unwrap();
    let mut got = Vec::new();
    // The host answers and closes: read_to_end returns.
    tcp.read_to_end(&mut got).await.unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 505"), "{text}");
    assert!(text.contains("gRPC requires HTTP/2"), "{text}");
    host.shutdown_async().await;
}

/// A call on a new connection to a host that may be draining.
async fn late_call(url: &str) -> Result<Answer, h2::Error> {
    let mut tx = connect(url).await.ready().await?;
    let path = format!("{SERVICE}/SayHello");
    let (response, mut stream) = tx.send_request(request(&path, &[]), false)?;
    stream.send_data(json_frame(&json!({"name": "late"})), true)?;
    try_answer(response).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_host_answers_unavailable() {
    let host = host(false);
    let url = host.url().to_string();
    let mut busy = connect(&url).await;
    let running = tokio::spawn(async move {
        let a = unary(&mut busy, "SleepMs", json!({"ms": 500})).await;
        a.grpc_status()
    });
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    let shutdown = tokio::spawn(host.shutdown_async());
    // A new connection made while the host drains.
    let mut late = None;
    for _ in 0..100 {
        // A request HTTP/2 refused (the host's GOAWAY came first) is sent again on a new
        // connection, as a client does.
        match late_call(&url).await {
            Ok(a) if a.grpc_status() != 0 => {
                late = Some(a);
                break;
            }
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    let a = late.expect("the drain began");
    assert_eq!(a.grpc_status(), 14, "{a:?}");
    assert!(a.trailers_only());
    // Marked as keel's convention marks it, so a keel client sends the call again.
    assert_eq!(a.headers["keel-unprocessed"], "1", "{a:?}");
    // The call in flight finished.
    assert_eq!(running.await.unwrap(), 0);
    assert_eq!(shutdown.await.unwrap().abandoned_calls, 0);
}

/// Refuses callers without `authorization` metadata, descriptions included.
struct TokenOnly;

impl keel::host::Interceptor for TokenOnly {
    fn before(&self, ctx: &Context) -> Result<(), Status> {
        match ctx.metadata().get("authorization") {
            Some(_) => Ok(()),
            None => Err(Status::unauthenticated("a token is required")),
        }
    }
}

/// Server reflection answers only callers the host's interceptors admit, and not at all while
/// the host's descriptions are switched off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_passes_the_interceptors_and_can_be_switched_off() {
    let host = host_with(false, |h| h.interceptor(TokenOnly));
    let mut tx = connect(host.url()).await;
    let path = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
    let list = || json_frame(&json!({"host": "", "list_services": ""}));
    let a = call(&mut tx, path, &[], list()).await;
    assert_eq!(a.grpc_status(), 16, "{a:?}");
    let token = [("authorization", "Bearer t")];
    let a = call(&mut tx, path, &token, list()).await;
    assert_eq!(a.grpc_status(), 0, "{a:?}");
    assert!(
        a.json(0).to_string().contains("keel_test.v1.Greeter"),
        "{a:?}"
    );
    host.set_descriptions(false);
    let a = call(&mut tx, path, &token, list()).await;
    assert_eq!(a.grpc_status(), 5, "{a:?}");
    assert!(a.grpc_message().contains("switched off"), "{a:?}");
    assert!(a.messages.is_empty(), "{a:?}");
    host.set_descriptions(true);
    let a = call(&mut tx, path, &token, list()).await;
    assert_eq!(a.grpc_status(), 0, "{a:?}");
    host.shutdown_async().await;
}
