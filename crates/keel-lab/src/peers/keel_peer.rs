//! keel: one contract with the operation twice, async (on the host's runtime) and sync (on a
//! keel-pool thread), served over keel-wire (`tcp://`) or HTTP (`http://`, HTTP/1.1 or h2c as
//! the client asks). Host and channels keep keel's defaults.

// `#[keel::contract]` declares the generated clients' methods `pub` whatever the trait's
// visibility, which is unreachable in this binary.
#![allow(unreachable_pub)]

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

/// A host with keel's defaults serving [`Adder`] on `url` (port 0: a free one).
pub(crate) fn host(url: &str) -> anyhow::Result<keel::Host> {
    Ok(keel::Host::builder()
        .service(AdderServer::new(Add))
        .endpoint(url)
        .start()?)
}

/// One keel channel: one connection (HTTP/1.1: at most one, so that in-flight calls share it
/// as on the other systems), and which operation to call.
#[derive(Debug, Clone)]
pub(crate) struct KeelConn {
    client: AdderClient,
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
            client: AdderClient::new(channel),
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
}
