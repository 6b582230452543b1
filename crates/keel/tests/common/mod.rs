//! A contract with one operation per behaviour the tests need, and its implementation.
#![allow(dead_code, missing_docs, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Negative(pub i64);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

/// A contract the hosts in these tests never serve.
#[keel::contract]
pub trait Unserved {
    fn nothing(&self) -> u32;
}

#[derive(Default, Clone)]
pub struct ProbeImpl {
    pub recorded: Arc<Mutex<Vec<u64>>>,
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
}

pub fn host_with(config: keel::HostConfig, url: &str) -> keel::Host {
    keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint(url)
        .config(config)
        .start()
        .expect("host starts")
}

pub fn host() -> keel::Host {
    host_with(keel::HostConfig::default(), "tcp://127.0.0.1:0")
}

/// A binding under test: how a host listens and how a client connects. The matrix in
/// `bindings.rs` runs every behaviour test once per variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    Tcp,
    Unix,
    /// `http://`, spoken as HTTP/1.1 (a pool of keep-alive connections).
    Http1,
    /// `http://`, spoken as HTTP/2 with prior knowledge (one multiplexed connection).
    Http2,
}

impl Binding {
    /// A fresh URL to listen on (port 0, or a new socket path).
    pub fn listen_url(self) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        match self {
            Binding::Tcp => "tcp://127.0.0.1:0".to_string(),
            Binding::Http1 | Binding::Http2 => "http://127.0.0.1:0".to_string(),
            Binding::Unix => format!(
                "unix://{}/keel-test-{}-{}.sock",
                std::env::temp_dir().display(),
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// A host serving the probe at `url` with `config`.
    pub fn host_at(self, config: keel::HostConfig, url: &str) -> keel::Host {
        keel::Host::builder()
            .service(ProbeServer::new(ProbeImpl::default()))
            .endpoint(url)
            .config(config)
            .start()
            .expect("host starts")
    }

    pub fn host_with(self, config: keel::HostConfig) -> keel::Host {
        self.host_at(config, &self.listen_url())
    }

    pub fn host(self) -> keel::Host {
        self.host_with(keel::HostConfig::default())
    }

    /// Client settings that work with this binding's hosts (e.g. trust for TLS).
    pub fn client_config(self) -> keel::ClientConfig {
        let mut config = keel::ClientConfig::default();
        match self {
            Binding::Http1 => config.http_version = keel::HttpVersion::Http1,
            Binding::Http2 => config.http_version = keel::HttpVersion::Http2,
            Binding::Tcp | Binding::Unix => {}
        }
        config
    }

    /// A channel to `url` with `config` (which must come from [`Binding::client_config`]).
    pub fn channel_with(self, url: &str, config: keel::ClientConfig) -> keel::Channel {
        keel::Channel::with_config(url, config).expect("channel")
    }

    pub fn channel(self, url: &str) -> keel::Channel {
        self.channel_with(url, self.client_config())
    }

    /// A connected probe client.
    pub async fn client(self, host: &keel::Host) -> ProbeClient {
        let c = ProbeClient::new(self.channel(host.url()));
        c.open().await.expect("connect");
        c
    }

    /// Whether concurrent calls share one connection (HTTP/1.1 needs one per call in flight).
    pub fn multiplexed(self) -> bool {
        self != Binding::Http1
    }
}

/// Polls `cond` every 5 ms for up to 10 s.
pub async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..2000 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}
