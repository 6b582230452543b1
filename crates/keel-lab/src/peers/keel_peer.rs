//! keel: one contract with the operation twice, async (on the host's runtime) and sync (on a
//! keel-pool thread), served over keel-wire (`tcp://`) or HTTP (`http://`, HTTP/1.1 or h2c as
//! the client asks, and gRPC to tonic's client); and the streaming workload's contract, a
//! server stream of quotes. Host and channels keep keel's defaults. [`protos`] is what keel
//! exports for the two contracts: the `.proto` files tonic's side is compiled from
//! (`proto/`, `build.rs`).

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

/// The `.proto` files keel exports for [`Adder`] and [`Ticker`] (`keel::proto::file`), each
/// with its name under `crates/keel-lab/proto/`, where they are committed for `build.rs`.
pub(crate) fn protos() -> anyhow::Result<[(&'static str, String); 2]> {
    Ok([
        ("adder.proto", keel::proto::file(AdderClient::descriptor())?),
        (
            "ticker.proto",
            keel::proto::file(TickerClient::descriptor())?,
        ),
    ])
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
        // keel's host announces `http://`; its gRPC is reached as `grpc://` (h2c).
        let grpc_url;
        let url = if system == System::KeelGrpcKeel {
            grpc_url = url.replacen("http://", "grpc://", 1);
            &grpc_url
        } else {
            url
        };
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// tonic's side is compiled from the committed files: they must be what the contracts
    /// export now, or the two servers would not run one schema. Regenerate them with
    /// `KEEL_BLESS=1 cargo test -p keel-lab the_committed_protos` and review the diff.
    #[test]
    fn the_committed_protos_are_what_the_contracts_export() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
        for (file, exported) in protos().unwrap() {
            let path = dir.join(file);
            if std::env::var_os("KEEL_BLESS").is_some() {
                std::fs::write(&path, &exported).unwrap();
                continue;
            }
            let committed = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                committed == exported,
                "{} differs from what keel::proto::file exports; regenerate it with \
                 `KEEL_BLESS=1 cargo test -p keel-lab the_committed_protos` and review the \
                 diff:\n{exported}",
                path.display()
            );
        }
        // The package tonic's code is generated in (`tonic_peer.rs`'s `include_proto!`).
        assert_eq!(AdderClient::descriptor().package, "keel_lab");
    }
}
