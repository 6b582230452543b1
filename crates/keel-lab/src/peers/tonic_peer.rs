//! tonic: gRPC over HTTP/2, on the `.proto` files keel exports for the peers contracts
//! (`proto/adder.proto`, `proto/ticker.proto`, compiled by `build.rs`): "add two f64" (`Add`,
//! and `AddSync`, which tonic serves alike), and the streaming workload's
//! `rpc Watch(WatchRequest) returns (stream Quote)`. Its server is the `tonic` row's; its
//! client calls both the `tonic` row's server and keel's host (the `keel-grpc` row), so both
//! servers run the identical schema for the identical client.

use std::pin::Pin;

use futures::Stream;
use tokio::net::TcpListener;

use super::quote::{self, Quote};

/// The code tonic-prost-build generated from `proto/adder.proto` and `proto/ticker.proto`
/// (package `keel_lab`, the crate's name: what `#[keel::contract]` gives a contract without a
/// `package`).
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all
)]
mod pb {
    tonic::include_proto!("keel_lab");
}

use pb::adder_client::AdderClient;
use pb::adder_server::{Adder, AdderServer};
use pb::ticker_client::TickerClient;
use pb::ticker_server::{Ticker, TickerServer};
use pb::{AddRequest, AddResponse, AddSyncRequest, AddSyncResponse, WatchRequest};

#[derive(Debug, Default)]
struct Add;

#[tonic::async_trait]
impl Adder for Add {
    async fn add(
        &self,
        request: tonic::Request<AddRequest>,
    ) -> Result<tonic::Response<AddResponse>, tonic::Status> {
        let r = request.into_inner();
        Ok(tonic::Response::new(AddResponse { value: r.a + r.b }))
    }

    async fn add_sync(
        &self,
        request: tonic::Request<AddSyncRequest>,
    ) -> Result<tonic::Response<AddSyncResponse>, tonic::Status> {
        let r = request.into_inner();
        Ok(tonic::Response::new(AddSyncResponse { value: r.a + r.b }))
    }
}

#[derive(Debug, Default)]
struct Ticks;

#[tonic::async_trait]
impl Ticker for Ticks {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::Quote, tonic::Status>> + Send>>;

    async fn watch(
        &self,
        request: tonic::Request<WatchRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        let WatchRequest { symbol, count } = request.into_inner();
        // Pulled as the client makes room, as keel's `MessageStream::from_iter` is.
        let quotes = (0..count).map(move |seq| {
            Ok(pb::Quote {
                symbol: symbol.clone(),
                seq: seq as u32,
                price: quote::price(seq),
            })
        });
        Ok(tonic::Response::new(Box::pin(futures::stream::iter(
            quotes,
        ))))
    }
}

/// Serves on `listener` until the process ends.
pub(crate) async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(AdderServer::new(Add))
        .add_service(TickerServer::new(Ticks))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// One tonic channel: one HTTP/2 connection (h2c), and the two services' clients on it.
#[derive(Debug, Clone)]
pub(crate) struct TonicConn {
    adder: AdderClient<tonic::transport::Channel>,
    ticker: TickerClient<tonic::transport::Channel>,
}

impl TonicConn {
    /// Connects to `url` (`http://host:port`): tonic's server or keel's host.
    pub(crate) async fn connect(url: &str) -> anyhow::Result<TonicConn> {
        let channel = tonic::transport::Endpoint::from_shared(url.to_string())?
            .tcp_nodelay(true)
            .connect()
            .await?;
        Ok(TonicConn {
            adder: AdderClient::new(channel.clone()),
            ticker: TickerClient::new(channel),
        })
    }

    /// One call.
    pub(crate) async fn add(&self, a: f64, b: f64) -> anyhow::Result<f64> {
        // The generated client takes `&mut self`; clones share the connection.
        let mut c = self.adder.clone();
        Ok(c.add(AddRequest { a, b }).await?.into_inner().value)
    }

    /// A server stream of `count` quotes of `symbol`, on this channel's connection.
    pub(crate) async fn watch(&self, symbol: &str, count: u64) -> anyhow::Result<TonicQuotes> {
        let mut c = self.ticker.clone();
        let request = WatchRequest {
            symbol: symbol.to_string(),
            count,
        };
        Ok(TonicQuotes(c.watch(request).await?.into_inner()))
    }
}

/// A tonic server stream of quotes (dropping it resets the HTTP/2 stream).
#[derive(Debug)]
pub(crate) struct TonicQuotes(tonic::Streaming<pb::Quote>);

impl TonicQuotes {
    /// The next quote, `None` at the end.
    pub(crate) async fn next(&mut self) -> anyhow::Result<Option<Quote>> {
        Ok(self.0.message().await?.map(|q| Quote {
            symbol: q.symbol,
            seq: q.seq,
            price: q.price,
        }))
    }
}
