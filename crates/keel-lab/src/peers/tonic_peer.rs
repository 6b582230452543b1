//! tonic: gRPC over HTTP/2, the messages of `proto/peers.proto` (compiled by `build.rs`): "add
//! two f64", and the streaming workload's `rpc Watch(WatchRequest) returns (stream Quote)`.

use std::net::SocketAddr;
use std::pin::Pin;

use futures::Stream;
use tokio::net::TcpListener;

use super::quote::{self, Quote};

/// The code tonic-prost-build generated from `proto/peers.proto`.
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all
)]
mod pb {
    tonic::include_proto!("peers");
}

use pb::adder_client::AdderClient;
use pb::adder_server::{Adder, AdderServer};
use pb::ticker_client::TickerClient;
use pb::ticker_server::{Ticker, TickerServer};
use pb::{AddReply, AddRequest, WatchRequest};

#[derive(Debug, Default)]
struct Add;

#[tonic::async_trait]
impl Adder for Add {
    async fn add(
        &self,
        request: tonic::Request<AddRequest>,
    ) -> Result<tonic::Response<AddReply>, tonic::Status> {
        let r = request.into_inner();
        Ok(tonic::Response::new(AddReply { sum: r.a + r.b }))
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

/// One tonic channel: one HTTP/2 connection, and the two services' clients on it.
#[derive(Debug, Clone)]
pub(crate) struct TonicConn {
    adder: AdderClient<tonic::transport::Channel>,
    ticker: TickerClient<tonic::transport::Channel>,
}

impl TonicConn {
    /// Connects to `addr`.
    pub(crate) async fn connect(addr: SocketAddr) -> anyhow::Result<TonicConn> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
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
        Ok(c.add(AddRequest { a, b }).await?.into_inner().sum)
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
