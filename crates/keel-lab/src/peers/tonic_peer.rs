//! tonic: gRPC over HTTP/2, the messages of `proto/peers.proto` (compiled by `build.rs`).

use std::net::SocketAddr;

use tokio::net::TcpListener;

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
use pb::{AddReply, AddRequest};

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

/// Serves on `listener` until the process ends.
pub(crate) async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(AdderServer::new(Add))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// One tonic channel: one HTTP/2 connection.
#[derive(Debug, Clone)]
pub(crate) struct TonicConn(AdderClient<tonic::transport::Channel>);

impl TonicConn {
    /// Connects to `addr`.
    pub(crate) async fn connect(addr: SocketAddr) -> anyhow::Result<TonicConn> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .tcp_nodelay(true)
            .connect()
            .await?;
        Ok(TonicConn(AdderClient::new(channel)))
    }

    /// One call.
    pub(crate) async fn add(&self, a: f64, b: f64) -> anyhow::Result<f64> {
        // The generated client takes `&mut self`; clones share the connection.
        let mut c = self.0.clone();
        Ok(c.add(AddRequest { a, b }).await?.into_inner().sum)
    }
}
