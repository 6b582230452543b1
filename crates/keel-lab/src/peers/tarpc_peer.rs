//! tarpc over TCP with its serde transport and the bincode codec (the fastest of the codecs it
//! offers: bincode, JSON), one tokio task per call on the server as tarpc's examples do.

// `#[tarpc::service]` declares its generated items `pub`, which is unreachable in this binary.
#![allow(unreachable_pub, missing_docs)]

use std::net::SocketAddr;

use futures::{future, StreamExt};
use tarpc::server::{BaseChannel, Channel};
use tarpc::tokio_serde::formats::Bincode;
use tokio::net::{TcpListener, TcpStream};

#[tarpc::service]
trait Adder {
    /// `a + b`.
    async fn add(a: f64, b: f64) -> f64;
}

#[derive(Debug, Clone, Copy)]
struct Add;

impl Adder for Add {
    async fn add(self, _: tarpc::context::Context, a: f64, b: f64) -> f64 {
        a + b
    }
}

/// Serves on `listener` until the process ends: each connection's requests are executed on
/// tasks of their own (`Channel::execute` + spawn, as tarpc's example server does).
pub(crate) async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let channel = BaseChannel::with_defaults(tarpc::serde_transport::Transport::from((
            stream,
            Bincode::default(),
        )));
        tokio::spawn(channel.execute(Add.serve()).for_each(|call| {
            tokio::spawn(call);
            future::ready(())
        }));
    }
}

/// One tarpc client: one TCP connection with its dispatch task.
#[derive(Debug, Clone)]
pub(crate) struct TarpcConn(AdderClient);

impl TarpcConn {
    /// Connects to `addr`.
    pub(crate) async fn connect(addr: SocketAddr) -> anyhow::Result<TarpcConn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let t = tarpc::serde_transport::Transport::from((stream, Bincode::default()));
        Ok(TarpcConn(
            AdderClient::new(tarpc::client::Config::default(), t).spawn(),
        ))
    }

    /// One call.
    pub(crate) async fn add(&self, a: f64, b: f64) -> anyhow::Result<f64> {
        Ok(self.0.add(tarpc::context::current(), a, b).await?)
    }
}
