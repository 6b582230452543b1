//! What the integration tests share: a contract with one operation per behaviour the tests
//! need and its implementation, the bindings ([`Binding`]) and the matrix that runs a test on
//! each ([`binding_matrix!`]), one polling helper ([`eventually`]), one TCP proxy ([`Proxy`]),
//! one host in a child process ([`ChildHost`]), one generator of test noise ([`XorShift`])
//! and a real browser ([`browser`]).
#![allow(
    dead_code,
    missing_docs,
    unreachable_pub,
    unused_imports,
    unused_macros
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel::ByteStream;
use serde::{Deserialize, Serialize};

pub mod browser;
pub mod child;
pub mod matrix;
pub mod poll;
pub mod proxy;
pub mod rng;

pub use child::{free_port, serve_child_host, ChildHost};
pub(crate) use matrix::binding_matrix;
pub use poll::{drive, eventually, eventually_blocking, eventually_within};
pub use proxy::Proxy;
pub use rng::XorShift;

/// The byte at offset `i` of every test stream.
pub fn pattern(i: u64) -> u8 {
    (i % 251) as u8
}

/// `n` bytes of [`pattern`] starting at offset `from`.
pub fn pattern_bytes(from: u64, n: usize) -> Vec<u8> {
    (from..from + n as u64).map(pattern).collect()
}

/// Order-sensitive checksum of a byte sequence, fed chunk by chunk.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Checksum {
    pub len: u64,
    pub sum: u64,
}

impl Checksum {
    pub fn add(&mut self, chunk: &[u8]) {
        for &b in chunk {
            self.sum = self.sum.wrapping_mul(31).wrapping_add(u64::from(b) + 1);
        }
        self.len += chunk.len() as u64;
    }
}

/// The checksum of `n` bytes of [`pattern`].
pub fn pattern_checksum(n: u64) -> Checksum {
    let mut c = Checksum::default();
    let mut at = 0;
    while at < n {
        let len = (n - at).min(64 * 1024) as usize;
        c.add(&pattern_bytes(at, len));
        at += len as u64;
    }
    c
}

/// Reads a whole stream into a checksum.
pub async fn checksum(mut s: ByteStream) -> Result<Checksum, keel::Error> {
    let mut c = Checksum::default();
    while let Some(chunk) = s.next().await {
        c.add(&chunk?);
    }
    Ok(c)
}

fn pattern_stream(n: u64, chunk: u32) -> ByteStream {
    let chunk = u64::from(chunk.max(1));
    ByteStream::from_iter(
        (0..n.div_ceil(chunk))
            .map(move |i| pattern_bytes(i * chunk, (n - i * chunk).min(chunk) as usize)),
    )
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Negative(pub i64);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct ThreadInfo {
    pub name: String,
    pub in_runtime: bool,
}

#[keel::contract]
pub trait Probe {
    fn echo(&self, s: String) -> String;
    async fn echo_async(&self, s: String) -> String;
    fn sleep_ms(&self, ms: u64) -> u64;
    async fn sleep_async_ms(&self, ms: u64) -> u64;
    #[keel(one_way)]
    fn record(&self, v: u64);
    fn recorded(&self) -> Vec<u64>;
    fn check(&self, v: i64) -> Result<i64, Negative>;
    async fn check_async(&self, v: i64) -> Result<i64, Negative>;
    fn panic_sync(&self) -> u32;
    async fn panic_async(&self) -> u32;
    fn thread_info(&self) -> ThreadInfo;
    async fn async_thread_info(&self) -> ThreadInfo;
    fn blob_len(&self, data: Vec<u8>) -> u64;
    fn make_blob(&self, n: u64) -> Vec<u8>;
    /// Reads the whole upload; returns its length and checksum (see [`checksum`]).
    async fn upload(&self, tag: String, data: ByteStream) -> (String, u64, u64);
    /// The same from a plain `fn` (reads with `blocking_next`).
    fn upload_sync(&self, data: ByteStream) -> (u64, u64);
    /// Reads at most `n` bytes of the upload, then returns, dropping the rest.
    async fn upload_prefix(&self, data: ByteStream, n: u64) -> u64;
    /// `n` bytes of [`pattern`], produced lazily in chunks of `chunk` bytes.
    async fn download(&self, n: u64, chunk: u32) -> ByteStream;
    /// The same from a plain `fn`, through a channel fed by a thread.
    fn download_sync(&self, n: u64) -> ByteStream;
    /// Sends the upload back as it arrives.
    async fn echo_stream(&self, data: ByteStream) -> ByteStream;
    /// A typed fault instead of a stream when `v` is negative.
    async fn download_checked(&self, v: i64) -> Result<ByteStream, Negative>;
    /// Counts itself in [`ProbeImpl::started`], sleeps `ms`, then counts itself in
    /// [`ProbeImpl::completed`].
    async fn counted_sleep_ms(&self, ms: u64) -> u64;
    /// Sleeps `ms`; counts in [`ProbeImpl::dropped`] if its future is dropped before then.
    async fn sleep_until_dropped_ms(&self, ms: u64) -> u64;
}

/// A contract the hosts in these tests never serve.
#[keel::contract]
pub trait Unserved {
    fn nothing(&self) -> u32;
}

#[derive(Default, Clone)]
pub struct ProbeImpl {
    pub recorded: Arc<Mutex<Vec<u64>>>,
    /// `counted_sleep_ms` calls that started.
    pub started: Arc<AtomicU64>,
    /// `counted_sleep_ms` calls that ran to their end.
    pub completed: Arc<AtomicU64>,
    /// `sleep_until_dropped_ms` calls whose future was dropped before they ended.
    pub dropped: Arc<AtomicU64>,
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

fn thread_info() -> ThreadInfo {
    ThreadInfo {
        name: std::thread::current().name().unwrap_or("").to_string(),
        in_runtime: tokio::runtime::Handle::try_current().is_ok(),
    }
}

impl Probe for ProbeImpl {
    fn echo(&self, s: String) -> String {
        s
    }
    async fn echo_async(&self, s: String) -> String {
        s
    }
    fn sleep_ms(&self, ms: u64) -> u64 {
        std::thread::sleep(Duration::from_millis(ms));
        ms
    }
    async fn sleep_async_ms(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
    fn record(&self, v: u64) {
        self.recorded.lock().unwrap().push(v);
    }
    fn recorded(&self) -> Vec<u64> {
        self.recorded.lock().unwrap().clone()
    }
    fn check(&self, v: i64) -> Result<i64, Negative> {
        if v < 0 {
            Err(Negative(v))
        } else {
            Ok(v)
        }
    }
    async fn check_async(&self, v: i64) -> Result<i64, Negative> {
        if v < 0 {
            Err(Negative(v))
        } else {
            Ok(v)
        }
    }
    fn panic_sync(&self) -> u32 {
        panic!("sync handler exploded")
    }
    async fn panic_async(&self) -> u32 {
        panic!("async handler exploded")
    }
    fn thread_info(&self) -> ThreadInfo {
        thread_info()
    }
    async fn async_thread_info(&self) -> ThreadInfo {
        thread_info()
    }
    fn blob_len(&self, data: Vec<u8>) -> u64 {
        data.len() as u64
    }
    fn make_blob(&self, n: u64) -> Vec<u8> {
        vec![7; n as usize]
    }
    async fn upload(&self, tag: String, data: ByteStream) -> (String, u64, u64) {
        let c = checksum(data).await.unwrap_or_default();
        (tag, c.len, c.sum)
    }
    fn upload_sync(&self, mut data: ByteStream) -> (u64, u64) {
        let mut c = Checksum::default();
        while let Some(Ok(chunk)) = data.blocking_next() {
            c.add(&chunk);
        }
        (c.len, c.sum)
    }
    async fn upload_prefix(&self, mut data: ByteStream, n: u64) -> u64 {
        let mut got = 0;
        while got < n {
            match data.next().await {
                Some(Ok(chunk)) => got += chunk.len() as u64,
                _ => break,
            }
        }
        got
    }
    async fn download(&self, n: u64, chunk: u32) -> ByteStream {
        pattern_stream(n, chunk)
    }
    fn download_sync(&self, n: u64) -> ByteStream {
        let (tx, rx) = ByteStream::channel(4);
        std::thread::spawn(move || {
            let mut at = 0;
            while at < n {
                let len = (n - at).min(100_000);
                if tx.blocking_send(pattern_bytes(at, len as usize)).is_err() {
                    return;
                }
                at += len;
            }
        });
        rx
    }
    async fn echo_stream(&self, data: ByteStream) -> ByteStream {
        data
    }
    async fn download_checked(&self, v: i64) -> Result<ByteStream, Negative> {
        if v < 0 {
            Err(Negative(v))
        } else {
            Ok(pattern_stream(v as u64, 1000))
        }
    }
    async fn counted_sleep_ms(&self, ms: u64) -> u64 {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.completed.fetch_add(1, Ordering::SeqCst);
        ms
    }
    async fn sleep_until_dropped_ms(&self, ms: u64) -> u64 {
        let mut guard = DropGuard(self.dropped.clone(), true);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        guard.1 = false;
        ms
    }
}

pub fn host_with(
    settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
    url: &str,
) -> keel::Host {
    settings(
        keel::Host::builder()
            .service(ProbeServer::new(ProbeImpl::default()))
            .endpoint(url),
    )
    .start()
    .expect("host starts")
}

pub fn host() -> keel::Host {
    host_with(|h| h, "tcp://127.0.0.1:0")
}

/// A binding under test: how a host listens and how a client connects. [`binding_matrix!`]
/// runs a test once per variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    Tcp,
    Unix,
    /// `http://`, spoken as HTTP/1.1 (a pool of keep-alive connections).
    Http1,
    /// `http://`, spoken as HTTP/2 with prior knowledge (one multiplexed connection).
    Http2,
    /// `https://`, HTTP/2 or HTTP/1.1 as ALPN agrees (h2 preferred).
    #[cfg(feature = "tls")]
    Https,
    #[cfg(feature = "tls")]
    Tcps,
    /// `quic://`: keel-wire's calls on QUIC streams.
    #[cfg(feature = "quic")]
    Quic,
}

/// Whether curl runs (the tests that call keel from outside Rust with it skip without it);
/// panics if it does not and `KEEL_REQUIRE_CURL=1` (CI sets it).
pub fn have_curl() -> bool {
    let found = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os("KEEL_REQUIRE_CURL").is_some_and(|v| v == "1") {
            panic!("KEEL_REQUIRE_CURL=1 but no curl on PATH (apt-get install curl)");
        }
        eprintln!("SKIPPED: `curl` is not installed, so this test cannot run");
    }
    found
}

/// One self-signed certificate per test process, for "localhost" and "127.0.0.1".
#[cfg(feature = "tls")]
pub fn test_cert() -> &'static keel::tls::SelfSigned {
    static CERT: std::sync::OnceLock<keel::tls::SelfSigned> = std::sync::OnceLock::new();
    CERT.get_or_init(|| keel::tls::self_signed(&["localhost", "127.0.0.1"]).expect("certificate"))
}

impl Binding {
    /// A fresh URL to listen on (port 0, or a new socket path).
    pub fn listen_url(self) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        match self {
            Binding::Tcp => "tcp://127.0.0.1:0".to_string(),
            #[cfg(feature = "tls")]
            Binding::Tcps => "tcps://127.0.0.1:0".to_string(),
            #[cfg(feature = "quic")]
            Binding::Quic => "quic://127.0.0.1:0".to_string(),
            Binding::Http1 | Binding::Http2 => "http://127.0.0.1:0".to_string(),
            #[cfg(feature = "tls")]
            Binding::Https => "https://127.0.0.1:0".to_string(),
            Binding::Unix => format!(
                "unix://{}/keel-test-{}-{}.sock",
                std::env::temp_dir().display(),
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// A host serving the probe at `url`, with `settings` on top of what this binding needs.
    pub fn host_at(
        self,
        settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
        url: &str,
    ) -> keel::Host {
        self.host_serving(ProbeImpl::default(), settings, url)
    }

    /// A host serving `probe` (whose counters the caller keeps) at `url`.
    pub fn host_serving(
        self,
        probe: ProbeImpl,
        settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
        url: &str,
    ) -> keel::Host {
        let builder = keel::Host::builder()
            .service(ProbeServer::new(probe))
            .endpoint(url);
        #[cfg(feature = "tls")]
        let builder = match self {
            Binding::Tcps | Binding::Https => {
                builder.tls(test_cert().server_tls().expect("server tls"))
            }
            #[cfg(feature = "quic")]
            Binding::Quic => builder.tls(test_cert().server_tls().expect("server tls")),
            _ => builder,
        };
        settings(builder).start().expect("host starts")
    }

    /// Starts `builder` (services and settings of the caller's) on a fresh endpoint of this
    /// binding, with what the binding needs (a certificate for TLS).
    pub fn start(self, builder: keel::host::HostBuilder) -> keel::Host {
        let builder = builder.endpoint(self.listen_url());
        #[cfg(feature = "tls")]
        let builder = match self {
            Binding::Tcps | Binding::Https => {
                builder.tls(test_cert().server_tls().expect("server tls"))
            }
            #[cfg(feature = "quic")]
            Binding::Quic => builder.tls(test_cert().server_tls().expect("server tls")),
            _ => builder,
        };
        builder.start().expect("host starts")
    }

    pub fn host_with(
        self,
        settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
    ) -> keel::Host {
        self.host_at(settings, &self.listen_url())
    }

    pub fn host(self) -> keel::Host {
        self.host_with(|h| h)
    }

    /// A channel builder for `url` with what this binding's hosts need (e.g. trust for TLS).
    pub fn channel_builder(self, url: &str) -> keel::client::ChannelBuilder {
        let builder = keel::Channel::builder(url);
        match self {
            #[cfg(feature = "tls")]
            Binding::Tcps | Binding::Https => {
                builder.tls(test_cert().client_tls().expect("client tls"))
            }
            #[cfg(feature = "quic")]
            Binding::Quic => builder.tls(test_cert().client_tls().expect("client tls")),
            Binding::Http1 => builder.http_version(keel::client::HttpVersion::Http1),
            Binding::Http2 => builder.http_version(keel::client::HttpVersion::Http2),
            Binding::Tcp | Binding::Unix => builder,
        }
    }

    /// A channel to `url`, with `settings` on top of what this binding needs.
    pub fn channel_with(
        self,
        url: &str,
        settings: impl FnOnce(keel::client::ChannelBuilder) -> keel::client::ChannelBuilder,
    ) -> keel::Channel {
        settings(self.channel_builder(url))
            .build()
            .expect("channel")
    }

    pub fn channel(self, url: &str) -> keel::Channel {
        self.channel_with(url, |c| c)
    }

    /// A connected probe client.
    pub async fn client(self, host: &keel::Host) -> ProbeClient {
        let c = ProbeClient::new(self.channel(host.url()));
        c.open().await.expect("connect");
        c
    }

    /// Whether it speaks keel-wire (`tcp://`, `unix://`, `tcps://`).
    #[allow(dead_code)] // Not every test file asks.
    pub fn is_wire(self) -> bool {
        match self {
            Binding::Tcp | Binding::Unix => true,
            #[cfg(feature = "tls")]
            Binding::Tcps => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Whether concurrent calls share one connection (HTTP/1.1 needs one per call in flight).
    pub fn multiplexed(self) -> bool {
        self != Binding::Http1
    }
}

/// Arguments as keel's clients encode them (protocol version 2): MessagePack, a map of the
/// parameters by name. For peers written by hand.
pub fn args<T: Serialize>(params: &[(&str, T)]) -> Vec<u8> {
    let map: std::collections::BTreeMap<&str, &T> = params.iter().map(|(k, v)| (*k, v)).collect();
    msgpack(&map)
}

/// A value as keel encodes bodies on protocol version 2 (structs as maps, bytes as `bin`).
pub fn msgpack<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut se = rmp_serde::Serializer::new(&mut buf)
        .with_struct_map()
        .with_bytes(rmp_serde::config::BytesMode::ForceIterables);
    value.serialize(&mut se).unwrap();
    buf
}

/// The arguments of `Probe.echo(s)`.
pub fn echo_args(s: &str) -> Vec<u8> {
    args(&[("s", s)])
}
