//! keel: one contract with the operation twice, async (on the host's runtime) and sync (on a
//! keel-pool thread), served over keel-wire (`tcp://`) or HTTP (`http://`, HTTP/1.1 or h2c as
//! the client asks); and the streaming workload's contract, a server stream of quotes. Host and
//! channels keep keel's defaults.

// `#[keel::contract]` declares the generated clients' methods `pub` whatever the trait's
// visibility, which is unreachable in this binary.
#![allow(unreachable_pub)]

use keel::MessageStream;

use super::quote::Quote;
use super::system::System;

/// "Add two f64", as both kinds of keel operation.
#[keel::contract]
pub(crate) trait Adder {
    /// `a + b`, on the host's runtime.
    async fn add(&self, a: f64, b: f64) -> f64;
    /// `a + b`, on a keel-pool thread.
    fn add_sync(&self, a: f64, b: f64) -> f64;
}

#[derive(Debug, Clone, Copy)]
struct Add;

impl Adder for Add {
    async fn add(&self, a: f64, b: f64) -> f64 {
        a + b
    }
    fn add_sync(&self, a: f64, b: f64) -> f64 {
        a + b
    }
}

/// The streaming workload: quotes, streamed.
#[keel::contract]
pub(crate) trait Ticker {
    /// `count` quotes of `symbol` (seq 0, 1, 2, ...), as fast as the client takes them.
    async fn watch(&self, symbol: String, count: u64) -> MessageStream<Quote>;
}

#[derive(Debug, Clone, Copy)]
struct Ticks;

impl Ticker for Ticks {
    async fn watch(&self, symbol: String, count: u64) -> MessageStream<Quote> {
        // Pulled as the client makes room: nothing is produced ahead of the stream's window.
        MessageStream::from_iter((0..count).map(move |seq| Quote::new(&symbol, seq)))
    }
}

/// A host with keel's defaults serving [`Adder`] and [`Ticker`] on `url` (port 0: a free one).
pub(crate) fn host(url: &str) -> anyhow::Result<keel::Host> {
    Ok(keel::Host::builder()
        .service(AdderServer::new(Add))
        .service(TickerServer::new(Ticks))
        .endpoint(url)
        .start()?)
}

/// One keel channel: one connection (HTTP/1.1: at most one, so that in-flight calls share it
/// as on the other systems), and which operation to call.
#[derive(Debug, Clone)]
pub(crate) struct KeelConn {
    client: AdderClient,
    ticker: TickerClient,
    sync_op: bool,
}

impl KeelConn {
    /// Connects to `url` the way `system` speaks.
    pub(crate) async fn connect(system: System, url: &str) -> anyhow::Result<KeelConn> {
        let b = keel::Channel::builder(url);
        let b = match system {
            System::KeelH1 => b
                .http_version(keel::client::HttpVersion::Http1)
                .http_max_connections(1),
            System::KeelH2 => b.http_version(keel::client::HttpVersion::Http2),
            _ => b,
        };
        let channel = b.connect().await?;
        Ok(KeelConn {
            client: AdderClient::new(channel.clone()),
            ticker: TickerClient::new(channel),
            sync_op: system == System::KeelTcpSync,
        })
    }

    /// One call.
    pub(crate) async fn add(&self, a: f64, b: f64) -> anyhow::Result<f64> {
        Ok(if self.sync_op {
            self.client.add_sync(a, b).await?
        } else {
            self.client.add(a, b).await?
        })
    }

    /// A server stream of `count` quotes of `symbol`, on this channel's connection.
    pub(crate) async fn watch(
        &self,
        symbol: &str,
        count: u64,
    ) -> anyhow::Result<MessageStream<Quote>> {
        Ok(self.ticker.watch(symbol.to_string(), count).await?)
    }
}
