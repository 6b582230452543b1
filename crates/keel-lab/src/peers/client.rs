//! The client side: one connection of any system, behind one type, so the workloads are
//! written once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;

use super::keel_peer::KeelConn;
use super::load::{new_histogram, Window};
use super::quote::Quote;
use super::raw::{RawConn, RawQuotes};
use super::system::System;
use super::tarpc_peer::TarpcConn;
use super::tonic_peer::{TonicConn, TonicQuotes};

/// One connection to a system's server, made by that system's own client.
#[derive(Debug, Clone)]
pub(crate) enum Conn {
    /// A raw TCP connection.
    Raw(Arc<RawConn>),
    /// A tonic channel (boxed: its two clients are large), to tonic's server or to keel's host
    /// over gRPC.
    Tonic(Box<TonicConn>),
    /// A tarpc client.
    Tarpc(TarpcConn),
    /// A keel channel.
    Keel(KeelConn),
}

impl Conn {
    /// Connects to the server of `system` at `addr` (as [`super::serve::PeerServer::addr`]).
    pub(crate) async fn connect(system: System, addr: &str) -> anyhow::Result<Conn> {
        if system.tonic_client() {
            // keel's host announces a URL; tonic's server `host:port`.
            let url = if addr.contains("://") {
                addr.to_string()
            } else {
                format!("http://{addr}")
            };
            return Ok(Conn::Tonic(Box::new(TonicConn::connect(&url).await?)));
        }
        if system.is_keel() {
            return Ok(Conn::Keel(KeelConn::connect(system, addr).await?));
        }
        let sa: SocketAddr = addr.parse()?;
        Ok(match system {
            System::Raw => Conn::Raw(Arc::new(RawConn::connect(sa).await?)),
            _ => Conn::Tarpc(TarpcConn::connect(sa).await?),
        })
    }

    /// One call, `a + b`.
    pub(crate) async fn add(&self, a: f64, b: f64) -> anyhow::Result<f64> {
        match self {
            Conn::Raw(c) => c.add(a, b).await,
            Conn::Tonic(c) => c.add(a, b).await,
            Conn::Tarpc(c) => c.add(a, b).await,
            Conn::Keel(c) => c.add(a, b).await,
        }
    }

    /// A server stream of `count` quotes of `symbol` ([`super::quote::ENDLESS`]: until the
    /// stream is dropped). keel and tonic stream on this connection; raw on a connection of
    /// its own, which the stream takes over. tarpc has no streaming: an error.
    pub(crate) async fn watch(&self, symbol: &str, count: u64) -> anyhow::Result<Quotes> {
        Ok(match self {
            Conn::Raw(c) => Quotes::Raw(c.watch(symbol, count).await?),
            Conn::Tonic(c) => Quotes::Tonic(c.watch(symbol, count).await?),
            Conn::Tarpc(_) => anyhow::bail!("tarpc has no streaming"),
            Conn::Keel(c) => Quotes::Keel(c.watch(symbol, count).await?),
        })
    }

    /// Keeps `inflight` calls going on this connection until `window` stops: raw pipelines them
    /// on its one socket; the others run `inflight` tasks each calling in a loop through clones
    /// of one client (sharing its connection). Returns the latencies counted in the window.
    pub(crate) async fn drive(
        &self,
        inflight: usize,
        window: Arc<Window>,
    ) -> anyhow::Result<Histogram<u64>> {
        match self {
            Conn::Raw(c) => c.pipeline(inflight, &window).await,
            Conn::Tonic(c) => callers(c, inflight, window).await,
            Conn::Tarpc(c) => callers(c, inflight, window).await,
            Conn::Keel(c) => callers(c, inflight, window).await,
        }
    }

    /// Exactly `calls` calls on this connection, `inflight` at a time: `inflight` tasks, each
    /// making its share in a loop through its own clone of the client (a fixed amount of work,
    /// for `profile/icount.py`).
    pub(crate) async fn fixed_calls(&self, inflight: usize, calls: usize) -> anyhow::Result<()> {
        match self {
            Conn::Raw(c) => fixed_calls(c, inflight, calls).await,
            Conn::Tonic(c) => fixed_calls(c, inflight, calls).await,
            Conn::Tarpc(c) => fixed_calls(c, inflight, calls).await,
            Conn::Keel(c) => fixed_calls(c, inflight, calls).await,
        }
    }
}

/// A system's client as [`callers`] uses it: one call, `a + b`.
trait Adds: Clone + Send + Sync + 'static {
    fn add(&self, a: f64, b: f64) -> impl Future<Output = anyhow::Result<f64>> + Send;
}

impl Adds for Arc<RawConn> {
    fn add(&self, a: f64, b: f64) -> impl Future<Output = anyhow::Result<f64>> + Send {
        RawConn::add(self, a, b)
    }
}

impl Adds for Box<TonicConn> {
    fn add(&self, a: f64, b: f64) -> impl Future<Output = anyhow::Result<f64>> + Send {
        TonicConn::add(self, a, b)
    }
}

impl Adds for TarpcConn {
    fn add(&self, a: f64, b: f64) -> impl Future<Output = anyhow::Result<f64>> + Send {
        TarpcConn::add(self, a, b)
    }
}

impl Adds for KeelConn {
    fn add(&self, a: f64, b: f64) -> impl Future<Output = anyhow::Result<f64>> + Send {
        KeelConn::add(self, a, b)
    }
}

/// `inflight` tasks, each calling through its own clone of `client` in a loop until `window`
/// stops. Each task's loop is made for the one client type (no dispatch over [`Conn`]'s
/// systems per call, no future the size of the largest system's), so the client's CPU per
/// call is the system's own as far as the harness can make it.
async fn callers<C: Adds>(
    client: &C,
    inflight: usize,
    window: Arc<Window>,
) -> anyhow::Result<Histogram<u64>> {
    let mut tasks = Vec::with_capacity(inflight);
    for _ in 0..inflight {
        let (client, window) = (client.clone(), window.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = new_histogram();
            while !window.stopped() {
                let t = Instant::now();
                let v = client.add(1.0, 2.0).await?;
                anyhow::ensure!(v == 3.0, "1 + 2 = {v}");
                window.record(&mut h, t);
            }
            anyhow::Ok(h)
        }));
    }
    let mut all = new_histogram();
    for t in tasks {
        all.add(t.await??)?;
    }
    Ok(all)
}

/// `calls` calls through clones of `client`, `inflight` tasks each making its share (the first
/// `calls % inflight` one more) in a loop: no count shared between them.
async fn fixed_calls<C: Adds>(client: &C, inflight: usize, calls: usize) -> anyhow::Result<()> {
    let inflight = inflight.max(1);
    let tasks: Vec<_> = (0..inflight)
        .map(|i| {
            let client = client.clone();
            let share = share_of(calls, inflight, i);
            tokio::spawn(async move {
                for _ in 0..share {
                    let v = client.add(1.0, 2.0).await?;
                    anyhow::ensure!(v == 3.0, "1 + 2 = {v}");
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Part `i` of `total` split into `parts` parts as even as can be (the first `total % parts`
/// one more).
pub(crate) fn share_of(total: usize, parts: usize, i: usize) -> usize {
    total / parts + usize::from(i < total % parts)
}

/// A server stream of quotes of any system; dropping it stops the server's producer.
#[derive(Debug)]
pub(crate) enum Quotes {
    /// Raw frames on a connection of their own.
    Raw(RawQuotes),
    /// A gRPC server stream.
    Tonic(TonicQuotes),
    /// A keel `MessageStream`.
    Keel(keel::MessageStream<Quote>),
}

impl Quotes {
    /// The next quote, `None` at the end.
    pub(crate) async fn next(&mut self) -> anyhow::Result<Option<Quote>> {
        match self {
            Quotes::Raw(q) => q.next().await,
            Quotes::Tonic(q) => q.next().await,
            Quotes::Keel(q) => Ok(q.next().await.transpose()?),
        }
    }
}
