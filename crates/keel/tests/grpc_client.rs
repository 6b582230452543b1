//! keel's own client over gRPC (`grpc://`, `grpcs://`) to a keel host: every kind of call
//! (unary, one-way, each stream of messages), typed faults and status codes, metadata both
//! ways, deadlines, cancellation reaching the handler, compression, the reply size limit, a
//! host that drains mid-call, and the operations gRPC cannot carry (refused before anything is
//! sent). A server keel did not write (tonic) is in `examples/tests/`.

#![cfg(feature = "http")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use keel::{ByteStream, Context, MessageStream, Status, StatusCode};
use serde::{Deserialize, Serialize};

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

/// What the gRPC client tests call.
#[keel::contract(package = "keel_client_test.v1")]
pub trait Greeter {
    /// A greeting; echoes the caller's `x-tenant` and `trace-bin` metadata back.
    async fn say_hello(&self, name: String, ctx: Context) -> String;
    /// `a / b`, or the typed fault for a zero `b`.
    async fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
    /// Always NOT_FOUND.
    async fn find(&self, key: String) -> Result<u64, Status>;
    /// Sleeps, then returns `ms`; counts in `dropped` if its future is dropped first.
    async fn sleep_ms(&self, ms: u64) -> u64;
    /// `n` bytes of text (a reply worth compressing).
    async fn text(&self, n: u64) -> String;
    /// Items 0..n (server streaming).
    async fn count(&self, n: u64) -> MessageStream<Item>;
    /// The sum of the items' seqs (client streaming).
    async fn sum(&self, items: MessageStream<Item>) -> Result<u64, Status>;
    /// The total length of the texts (client streaming).
    async fn total_len(&self, texts: MessageStream<String>) -> Result<u64, Status>;
    /// Each item back as it arrives, seq doubled (bidirectional).
    async fn echo(&self, items: MessageStream<Item>) -> MessageStream<Item>;
    /// `after` items, then the status `aborted`.
    async fn abort_after(&self, after: u64) -> MessageStream<Item>;
    /// `after` items, then the typed fault.
    async fn fault_after(&self, after: u64) -> Result<MessageStream<Item>, DivideByZero>;
    /// Counts its calls in `notified`; acknowledged on receipt.
    #[keel(one_way)]
    fn notify(&self, n: u64);
    /// A tuple, which protobuf cannot describe.
    async fn pair(&self, p: (u32, u32)) -> u32;
    /// Bytes, which gRPC has no type for.
    async fn download(&self, n: u64) -> ByteStream;
    /// UNAVAILABLE on its first two calls, then how many calls it took.
    #[keel(idempotent)]
    async fn flaky(&self) -> Result<u64, Status>;
}

#[derive(Default, Clone)]
struct Impl {
    dropped: Arc<AtomicU64>,
    notified: Arc<AtomicU64>,
    flaky: Arc<AtomicU64>,
}

/// Counts in `0` when dropped unless disarmed.
struct DropGuard(Arc<AtomicU64>, bool);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

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
        let mut guard = DropGuard(self.dropped.clone(), true);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        guard.1 = false;
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
    async fn total_len(&self, mut texts: MessageStream<String>) -> Result<u64, Status> {
        let mut total = 0;
        while let Some(t) = texts.next().await {
            total += t?.len() as u64;
        }
        Ok(total)
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
            tx.abort(Status::new(StatusCode::Aborted, "stopped on purpose"))
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
    fn notify(&self, _n: u64) {
        self.notified.fetch_add(1, Ordering::SeqCst);
    }
    async fn pair(&self, p: (u32, u32)) -> u32 {
        p.0 + p.1
    }
    async fn download(&self, n: u64) -> ByteStream {
        ByteStream::from_bytes(vec![7u8; n as usize])
    }
    async fn flaky(&self) -> Result<u64, Status> {
        match self.flaky.fetch_add(1, Ordering::SeqCst) + 1 {
            n @ 3.. => Ok(n),
            _ => Err(Status::new(StatusCode::Unavailable, "not yet")),
        }
    }
}

/// A keel host serving `service` on http:// (or https://), with `settings`.
fn host_with(
    tls: bool,
    service: Impl,
    settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
) -> keel::Host {
    let binding = if tls { Binding::Https } else { Binding::Http2 };
    binding.start(settings(
        keel::Host::builder().service(GreeterServer::new(service)),
    ))
}

/// The `grpc://` (or `grpcs://`) URL of `host`'s endpoint.
fn grpc_url(host: &keel::Host) -> String {
    grpc_url_of(host.url())
}

/// The `grpc://` (or `grpcs://`) URL of the `http://` (or `https://`) URL `url`.
fn grpc_url_of(url: &str) -> String {
    match url.strip_prefix("https://") {
        Some(rest) => format!("grpcs://{rest}"),
        None => format!(
            "grpc://{}",
            url.strip_prefix("http://").expect("an http URL")
        ),
    }
}

/// A channel builder for `url`, trusting the test certificate.
fn channel_builder(url: &str) -> keel::client::ChannelBuilder {
    let builder = keel::Channel::builder(url);
    if url.starts_with("grpcs://") {
        builder.tls(test_cert().client_tls().expect("client tls"))
    } else {
        builder
    }
}

fn client(host: &keel::Host) -> GreeterClient {
    GreeterClient::new(channel_builder(&grpc_url(host)).build().unwrap())
}

async fn collect(mut s: MessageStream<Item>) -> (Vec<u64>, Option<keel::Error>) {
    let mut seqs = Vec::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(i) => seqs.push(i.seq),
            Err(e) => return (seqs, Some(e)),
        }
    }
    (seqs, None)
}

async fn every_kind_of_call_on(tls: bool) {
    let service = Impl::default();
    let host = host_with(tls, service.clone(), |h| h);
    let client = client(&host);
    assert_eq!(
        client.say_hello("grpc".into()).await.unwrap(),
        "hello, grpc"
    );
    assert_eq!(client.divide(9.0, 3.0).await.unwrap(), 3.0);
    // Acknowledged on receipt: the handler runs after.
    client.notify(5).await.unwrap();
    assert!(eventually(|| service.notified.load(Ordering::SeqCst) == 1).await);
    // Server streaming.
    let (seqs, end) = collect(client.count(5).await.unwrap()).await;
    assert_eq!(seqs, [0, 1, 2, 3, 4]);
    assert!(end.is_none(), "{end:?}");
    // Client streaming.
    let items = MessageStream::from_iter((1..=4).map(|seq| Item { seq }));
    assert_eq!(client.sum(items).await.unwrap(), 10);
    // Bidirectional: each reply arrives while the request stream is still open.
    let (tx, items) = MessageStream::channel(4);
    let mut replies = client.echo(items).await.unwrap();
    for seq in 1..=3 {
        tx.send(Item { seq }).await.unwrap();
        let back = replies.next().await.unwrap().unwrap();
        assert_eq!(back.seq, seq * 2);
    }
    drop(tx);
    assert!(replies.next().await.is_none());
    // All on one HTTP/2 connection.
    assert_eq!(client.channel().stats().connections_opened, 1);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_call_over_grpc() {
    every_kind_of_call_on(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_call_over_grpcs() {
    every_kind_of_call_on(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_faults_and_status_codes_come_back_as_on_other_bindings() {
    for tls in [false, true] {
        let host = host_with(tls, Impl::default(), |h| h);
        let client = client(&host);
        let e = client.divide(1.5, 0.0).await.unwrap_err();
        assert_eq!(
            e.fault::<DivideByZero>(),
            Some(DivideByZero { dividend: 1.5 })
        );
        let e = client.find("k".into()).await.unwrap_err();
        assert_eq!(e.status_code(), Some(StatusCode::NotFound), "{e:?}");
        assert!(e.message().contains("no such key: k (ü)"), "{e:?}");
        // A stream that ends with a status, and one that ends with the typed fault.
        let (seqs, end) = collect(client.abort_after(2).await.unwrap()).await;
        assert_eq!(seqs, [0, 1]);
        let end = end.expect("the stream ends with its status");
        assert_eq!(end.status_code(), Some(StatusCode::Aborted), "{end:?}");
        assert!(end.message().contains("stopped on purpose"), "{end:?}");
        let (seqs, end) = collect(client.fault_after(3).await.unwrap()).await;
        assert_eq!(seqs, [0, 1, 2]);
        let end = end.expect("the stream ends with the fault");
        assert_eq!(
            end.fault::<DivideByZero>(),
            Some(DivideByZero { dividend: 7.0 })
        );
        host.shutdown_async().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_travels_both_ways() {
    for tls in [false, true] {
        let host = host_with(tls, Impl::default(), |h| h);
        let client = client(&host);
        let mut md = keel::Metadata::new();
        md.insert("x-tenant", "acme").unwrap();
        md.insert_bin("trace-bin", vec![0u8, 1, 255]).unwrap();
        let reply = keel::client::ReplyMetadata::new();
        let hello = client
            .with_metadata(md)
            .with_reply_metadata(&reply)
            .say_hello("md".into())
            .await
            .unwrap();
        assert_eq!(hello, "hello, md");
        let back = reply.get();
        assert_eq!(back.get("x-tenant"), Some("acme"), "{back:?}");
        assert_eq!(
            back.get_bin("trace-bin"),
            Some(&[0u8, 1, 255][..]),
            "{back:?}"
        );
        host.shutdown_async().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_ends_the_call_and_reaches_the_handler_as_cancellation() {
    for tls in [false, true] {
        let service = Impl::default();
        let host = host_with(tls, service.clone(), |h| h);
        let client = client(&host);
        let e = client
            .with_deadline(Duration::from_millis(50))
            .sleep_ms(60_000)
            .await
            .unwrap_err();
        assert!(
            e.is_timeout() || e.status_code() == Some(StatusCode::DeadlineExceeded),
            "{e:?}"
        );
        assert!(eventually(|| service.dropped.load(Ordering::SeqCst) == 1).await);
        host.shutdown_async().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_resets_its_stream_and_the_handler_is_cancelled() {
    let service = Impl::default();
    let host = host_with(false, service.clone(), |h| h);
    let client = client(&host);
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.sleep_ms(60_000).await }
    });
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    call.abort();
    assert!(eventually(|| service.dropped.load(Ordering::SeqCst) == 1).await);
    assert!(eventually(|| host.stats().calls_in_flight == 0).await);
    // The connection carries on.
    assert_eq!(
        client.say_hello("again".into()).await.unwrap(),
        "hello, again"
    );
    assert_eq!(client.channel().stats().connections_opened, 1);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_both_ways() {
    for codec in [keel::Compression::Gzip, keel::Compression::Zstd] {
        let host = host_with(false, Impl::default(), |h| h);
        let channel = channel_builder(&grpc_url(&host))
            .compression(codec)
            .compress_above(0)
            .build()
            .unwrap();
        let client = GreeterClient::new(channel);
        let long = "x".repeat(20_000);
        assert_eq!(
            client.say_hello(long.clone()).await.unwrap(),
            format!("hello, {long}")
        );
        let text = client.text(50_000).await.unwrap();
        assert_eq!(text.len(), 50_000);
        let (seqs, end) = collect(client.count(100).await.unwrap()).await;
        assert_eq!(seqs.len(), 100);
        assert!(end.is_none());
        host.shutdown_async().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_stream_messages_go_compressed_when_the_channel_compresses() {
    // 20 messages of 10 kB of text, through a proxy that counts the bytes.
    let host = host_with(false, Impl::default(), |h| h);
    let proxy = Proxy::start(host.url()).await;
    let texts =
        || MessageStream::from_iter((0..20).map(|i| format!("{i:02}{}", "keel ".repeat(2000))));
    let mut carried = Vec::new();
    for codec in [
        None,
        Some(keel::Compression::Gzip),
        Some(keel::Compression::Zstd),
    ] {
        let mut builder = channel_builder(&grpc_url_of(proxy.url()));
        if let Some(codec) = codec {
            // Above 100 bytes: every message is worth it.
            builder = builder.compression(codec).compress_above(100);
        }
        let client = GreeterClient::new(builder.build().unwrap());
        proxy.take_bytes();
        assert_eq!(client.total_len(texts()).await.unwrap(), 20 * 10_002);
        carried.push(proxy.take_bytes());
    }
    // Uncompressed: the 200 kB themselves; compressed: a small part of them.
    assert!(carried[0] > 200_000, "{carried:?}");
    assert!(carried[1] < carried[0] / 10, "gzip: {carried:?}");
    assert!(carried[2] < carried[0] / 10, "zstd: {carried:?}");
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_the_size_limit_is_refused() {
    let host = host_with(false, Impl::default(), |h| h);
    let channel = channel_builder(&grpc_url(&host))
        .max_message_size(1000)
        .build()
        .unwrap();
    let client = GreeterClient::new(channel);
    let e = client.text(5000).await.unwrap_err();
    assert!(e.is_too_large(), "{e:?}");
    // Compressed, the limit holds after decompression too.
    let channel = channel_builder(&grpc_url(&host))
        .max_message_size(1000)
        .compression(keel::Compression::Gzip)
        .build()
        .unwrap();
    let client = GreeterClient::new(channel);
    let e = client.text(50_000).await.unwrap_err();
    assert!(e.is_too_large(), "{e:?}");
    // And within it, calls go on.
    assert_eq!(client.text(500).await.unwrap().len(), 500);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_drains_mid_call_finishes_it() {
    let host = host_with(false, Impl::default(), |h| h);
    let client = client(&host);
    let running = tokio::spawn({
        let client = client.clone();
        async move { client.sleep_ms(300).await }
    });
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    let shutdown = tokio::spawn(host.shutdown_async());
    assert_eq!(running.await.unwrap().unwrap(), 300);
    assert_eq!(shutdown.await.unwrap().abandoned_calls, 0);
    // Nothing is listening any more: the next call fails, it does not hang.
    let e = client.say_hello("late".into()).await.unwrap_err();
    assert!(
        e.is_connection() || e.status_code() == Some(StatusCode::Unavailable),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_grpc_cannot_carry_fail_before_anything_is_sent() {
    let host = host_with(false, Impl::default(), |h| h);
    let client = client(&host);
    let e = client.pair((1, 2)).await.unwrap_err();
    assert_eq!(e.status_code(), Some(StatusCode::Unimplemented), "{e:?}");
    assert!(e.message().contains("Pair"), "{e:?}");
    assert!(e.message().contains("protobuf"), "{e:?}");
    let e = client.download(10).await.unwrap_err();
    assert_eq!(e.status_code(), Some(StatusCode::Unimplemented), "{e:?}");
    assert!(e.message().contains("streams bytes"), "{e:?}");
    // Nothing reached the host: not even a connection.
    assert_eq!(client.channel().stats().connections_opened, 0);
    assert_eq!(host.stats().connections_opened, 0);
    host.shutdown_async().await;
}

#[test]
fn a_host_refuses_the_client_schemes() {
    let e = keel::Host::builder()
        .service(GreeterServer::new(Impl::default()))
        .endpoint("grpc://127.0.0.1:0")
        .start()
        .unwrap_err();
    assert!(e.message().contains("client schemes"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balanced_channel_over_grpc_urls_goes_around_a_host_that_is_down() {
    let up = host_with(false, Impl::default(), |h| h);
    let down = host_with(false, Impl::default(), |h| h);
    let down_url = grpc_url(&down);
    down.shutdown_async().await;
    let channel = keel::Channel::balanced([down_url, grpc_url(&up)])
        .build()
        .unwrap();
    let client = GreeterClient::new(channel);
    for i in 0..10 {
        let name = format!("call {i}");
        assert_eq!(
            client.say_hello(name.clone()).await.unwrap(),
            format!("hello, {name}")
        );
    }
    let (seqs, _) = collect(client.count(3).await.unwrap()).await;
    assert_eq!(seqs, [0, 1, 2]);
    up.shutdown_async().await;
}

/// Adds `x-tenant` to every call and records each outcome's code.
#[derive(Default, Clone)]
struct Tenant {
    outcomes: Arc<std::sync::Mutex<Vec<Option<StatusCode>>>>,
}

impl keel::client::Interceptor for Tenant {
    fn before(&self, call: &mut keel::client::ClientCall) -> Result<(), Status> {
        call.metadata_mut()
            .insert("x-tenant", "intercepted")
            .unwrap();
        Ok(())
    }
    fn after(&self, _call: &keel::client::ClientCall, outcome: Result<(), &keel::Error>) {
        let code = match outcome {
            Ok(()) => Some(StatusCode::Ok),
            Err(e) => e.status_code(),
        };
        self.outcomes.lock().unwrap().push(code);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interceptors_see_grpc_calls_as_any_other() {
    let host = host_with(false, Impl::default(), |h| h);
    let tenant = Tenant::default();
    let channel = channel_builder(&grpc_url(&host))
        .interceptor(tenant.clone())
        .build()
        .unwrap();
    let client = GreeterClient::new(channel);
    let reply = keel::client::ReplyMetadata::new();
    client
        .with_reply_metadata(&reply)
        .say_hello("i".into())
        .await
        .unwrap();
    assert_eq!(reply.get().get("x-tenant"), Some("intercepted"));
    client.find("k".into()).await.unwrap_err();
    assert_eq!(
        *tenant.outcomes.lock().unwrap(),
        [Some(StatusCode::Ok), Some(StatusCode::NotFound)]
    );
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_call_answered_unavailable_is_retried_by_the_attempt_loop() {
    let host = host_with(false, Impl::default(), |h| h);
    let retry = keel::client::RetryPolicy::default()
        .max_attempts(4)
        .backoff(Duration::from_millis(1), Duration::from_millis(1));
    let channel = channel_builder(&grpc_url(&host))
        .retry(retry)
        .build()
        .unwrap();
    let client = GreeterClient::new(channel.clone());
    assert_eq!(client.flaky().await.unwrap(), 3);
    assert_eq!(channel.stats().retries, 2);
    host.shutdown_async().await;
}
