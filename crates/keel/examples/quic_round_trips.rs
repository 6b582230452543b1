//! How many round trips a `quic://` client's first call takes, fresh and resumed, on loopback
//! behind a UDP forwarder that delays every datagram by half of `--rtt-ms` (default 100) each
//! way. A cross-check for keel-lab's WAN numbers, without keel-lab:
//!
//! ```text
//! cargo run -p keel --example quic_round_trips --features quic -- 200
//! ```
//!
//! Prints, for each case, the first call's time from the call (connecting included) to its
//! answer, in milliseconds and in round trips. Expected: a fresh client about 2 (QUIC's
//! handshake, then the call), a resumed client's idempotent call about 1 (0-RTT), a resumed
//! client's non-idempotent call about 2 (it waits for the handshake).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A counter with one idempotent operation and one that is not.
#[keel::contract]
pub trait Ledger {
    /// The count (idempotent: may go as 0-RTT data).
    #[keel(idempotent)]
    fn get(&self) -> u64;
    /// Adds `n` (not idempotent: waits for the handshake).
    fn add(&self, n: u64) -> u64;
}

#[derive(Default)]
struct Count(AtomicU64);

impl Ledger for Count {
    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn add(&self, n: u64) -> u64 {
        self.0.fetch_add(n, Ordering::SeqCst) + n
    }
}

/// Forwards UDP between one client and `host`, each datagram `delay` late, both ways, in the
/// order it came (one queue per direction: a path that delays, not one that reorders). Returns
/// the address clients connect to.
async fn delaying_forwarder(host: SocketAddr, delay: Duration) -> SocketAddr {
    let front = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let back = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    back.connect(host).await.unwrap();
    let addr = front.local_addr().unwrap();
    let client = Arc::new(std::sync::Mutex::new(None::<SocketAddr>));
    let (up_tx, mut up_rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let (down_tx, mut down_rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    {
        let (front, client) = (front.clone(), client.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok((n, from)) = front.recv_from(&mut buf).await {
                *client.lock().unwrap() = Some(from);
                let _ = up_tx.send((Instant::now() + delay, buf[..n].to_vec()));
            }
        });
    }
    {
        let back = back.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = back.recv(&mut buf).await {
                let _ = down_tx.send((Instant::now() + delay, buf[..n].to_vec()));
            }
        });
    }
    tokio::spawn(async move {
        while let Some((at, data)) = up_rx.recv().await {
            tokio::time::sleep_until(at.into()).await;
            let _ = back.send(&data).await;
        }
    });
    tokio::spawn(async move {
        while let Some((at, data)) = down_rx.recv().await {
            tokio::time::sleep_until(at.into()).await;
            let to = *client.lock().unwrap();
            if let Some(to) = to {
                let _ = front.send_to(&data, to).await;
            }
        }
    });
    addr
}

#[tokio::main]
async fn main() -> Result<(), keel::Error> {
    let rtt_ms: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let rtt = Duration::from_millis(rtt_ms);
    let cert = keel::tls::self_signed(&["localhost", "127.0.0.1"])?;
    let host = keel::Host::builder()
        .service(LedgerServer::new(Count::default()))
        .endpoint("quic://127.0.0.1:0")
        .tls(cert.server_tls()?)
        .start()?;
    let host_addr: SocketAddr = host.url().strip_prefix("quic://").unwrap().parse().unwrap();
    let front = delaying_forwarder(host_addr, rtt / 2).await;
    let channel = keel::Channel::builder(format!("quic://{front}"))
        .tls(cert.client_tls()?)
        .build()?;
    let client = LedgerClient::new(channel.clone());
    let report = |what: &str, took: Duration| {
        println!(
            "{what:<44} {:>8.1} ms  {:>5.2} RTT",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() / rtt.as_secs_f64()
        );
    };
    println!(
        "RTT {rtt_ms} ms (a UDP forwarder delaying each datagram {} ms)",
        rtt_ms / 2
    );

    let t = Instant::now();
    client.get().await?;
    report("fresh client, first call (idempotent)", t.elapsed());
    let t = Instant::now();
    client.get().await?;
    report("the same connection, next call", t.elapsed());

    channel.close().await;
    let t = Instant::now();
    client.get().await?;
    report("resumed client, first call idempotent (0-RTT)", t.elapsed());

    channel.close().await;
    let t = Instant::now();
    client.add(1).await?;
    report("resumed client, first call not idempotent", t.elapsed());

    let stats = channel.stats();
    println!(
        "connections opened {}, calls sent as 0-RTT data {}",
        stats.connections_opened, stats.calls_sent_early
    );
    host.shutdown_async().await;
    Ok(())
}
