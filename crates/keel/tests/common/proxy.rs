//! The one TCP proxy of the tests: it forwards each connection it accepts to a target it can be
//! told to change, counts the bytes it carries, and can blackhole the connections open at a
//! moment (the middlebox that lost a connection's state: nothing passes, nothing closes).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// A TCP forwarder on a port of its own, in front of a host. Dropped, it stops accepting and
/// closes every connection it carries.
#[derive(Debug)]
pub struct Proxy {
    url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    /// Where new connections go: `ip:port`.
    target: Mutex<String>,
    /// Bytes carried, both ways, since the last [`Proxy::take_bytes`].
    bytes: AtomicU64,
    /// One flag per connection forwarded: set, it carries nothing more.
    conns: Mutex<Vec<Arc<AtomicBool>>>,
}

impl Proxy {
    /// A proxy in front of `target_url`; its own URL has the same scheme.
    pub async fn start(target_url: &str) -> Proxy {
        let (scheme, target) = target_url.split_once("://").expect("a URL");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared {
            target: Mutex::new(target.to_string()),
            bytes: AtomicU64::new(0),
            conns: Mutex::default(),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Proxy { url, shared, task }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// `ip:port` of the proxy.
    pub fn addr(&self) -> SocketAddr {
        self.url.split_once("://").unwrap().1.parse().unwrap()
    }

    /// New connections go to `url` (a host's URL) from now on; open ones stay where they are.
    pub fn forward_to(&self, url: &str) {
        let authority = url.split_once("://").map_or(url, |(_, a)| a);
        *self.shared.target.lock().unwrap() = authority.to_string();
    }

    /// Bytes carried both ways since the last call (or the start).
    pub fn take_bytes(&self) -> u64 {
        self.shared.bytes.swap(0, Ordering::Relaxed)
    }

    /// Every connection open now carries nothing more, either way, and stays open; new
    /// connections pass as before.
    pub fn blackhole_existing(&self) {
        for dead in self.shared.conns.lock().unwrap().iter() {
            dead.store(true, Ordering::SeqCst);
        }
    }

    /// Connections forwarded so far.
    pub fn accepted(&self) -> usize {
        self.shared.conns.lock().unwrap().len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The connections are in the accept task's JoinSet: they go with it.
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            return;
        };
        let target = shared.target.lock().unwrap().clone();
        let Ok(outbound) = TcpStream::connect(target).await else {
            continue;
        };
        inbound.set_nodelay(true).unwrap();
        outbound.set_nodelay(true).unwrap();
        let dead = Arc::new(AtomicBool::new(false));
        shared.conns.lock().unwrap().push(dead.clone());
        let (ci, co) = inbound.into_split();
        let (hi, ho) = outbound.into_split();
        conns.spawn(pipe(ci, ho, dead.clone(), shared.clone()));
        conns.spawn(pipe(hi, co, dead, shared.clone()));
        // Reap the finished ones as we go.
        while conns.try_join_next().is_some() {}
    }
}

/// Copies `from` to `to`, counting, until `from` ends (then closes `to`: a close on one side is
/// passed on as a close of the other) or `dead` is set; from then on it reads and drops
/// everything, as a path that lost the connection's state would, and never closes.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    dead: Arc<AtomicBool>,
    shared: Arc<Shared>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if dead.load(Ordering::SeqCst) {
            continue;
        }
        // Counted before it is passed on: once the peer has it, the count has it too.
        shared.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    if dead.load(Ordering::SeqCst) {
        // Keep the other side open: a blackholed path sends no FIN either.
        std::future::pending::<()>().await;
    } else {
        let _ = to.shutdown().await;
    }
}
