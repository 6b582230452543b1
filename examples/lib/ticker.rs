//! A server-streaming contract: quotes for some symbols, one every `interval_ms`, `count` per
//! call. The keel counterpart of a gRPC `rpc Watch(WatchRequest) returns (stream Quote)`.

use std::time::Duration;

use keel::MessageStream;
use serde::{Deserialize, Serialize};

/// One price quote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Quote {
    /// The symbol quoted.
    pub symbol: String,
    /// Counts the call's quotes from 0.
    pub seq: u32,
    /// The price.
    pub price: f64,
}

/// Quotes, streamed.
#[keel::contract]
pub trait Ticker {
    /// `count` quotes, one every `interval_ms`, cycling through `symbols` (seq counts from 0).
    /// Idempotent: watching again changes nothing, so a browser's `EventSource` may call it
    /// with `GET /Ticker/watch?args=...`.
    #[keel(idempotent)]
    async fn watch(
        &self,
        symbols: Vec<String>,
        count: u32,
        interval_ms: u32,
    ) -> Result<MessageStream<Quote>, keel::Status>;
}

/// The Ticker implementation: made-up prices that drift.
#[derive(Debug, Default, Clone, Copy)]
pub struct Quotes;

impl Ticker for Quotes {
    async fn watch(
        &self,
        symbols: Vec<String>,
        count: u32,
        interval_ms: u32,
    ) -> Result<MessageStream<Quote>, keel::Status> {
        if symbols.is_empty() {
            return Err(keel::Status::invalid_argument("name at least one symbol"));
        }
        let (tx, quotes) = MessageStream::channel(16);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(interval_ms.into()));
            for seq in 0..count {
                tick.tick().await;
                let symbol = symbols[seq as usize % symbols.len()].clone();
                let price = 100.0 + f64::from(seq % 50) * 0.25;
                if tx.send(Quote { symbol, seq, price }).await.is_err() {
                    return; // The watcher went away.
                }
            }
        });
        Ok(quotes)
    }
}

/// The builder of a host serving [`Quotes`] on `url`.
pub fn builder(url: &str) -> keel::host::HostBuilder {
    keel::Host::builder()
        .service(TickerServer::new(Quotes))
        .endpoint(url)
}

/// The contract's `.proto` file, as gRPC tools and code generators read it (committed as
/// `examples/proto/ticker.proto`).
pub fn proto() -> String {
    keel::proto::file(TickerClient::descriptor())
        .expect("every type of the contract has a protobuf type")
}
