//! The baseline of the 1,000-client burst (issue 35): a plain thread-per-connection TCP server,
//! the way a server was written before pools. `std::net::TcpListener`, one OS thread per
//! accepted connection, each request a line `"<i> <work_ms>\n"`, answered after the same sleep
//! with `"You entered: <i>\n"`. The burst's clients are the same client threads keel's bursts
//! use ([`super::fire::fire_with`]), with a blocking socket each instead of a keel client.
//!
//! Its server threads exist before the release (one per accepted connection), so what its
//! burst costs above the work is the machine's own: waking the client threads and as many
//! server threads on the CPUs there are, loopback, and the sleeps' timer slack. keel's bursts
//! are judged against it in the same run.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::fire::{BurstClient, Fired, CLIENT_STACK};

/// The listen backlog: every client connects at once before a burst (std's `bind` asks for
/// 128, and an overflow would hold a connect for a SYN retry).
const BACKLOG: i32 = 4096;

/// A thread-per-connection server on loopback, serving until dropped.
#[derive(Debug)]
pub(crate) struct ThreadServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl ThreadServer {
    /// Binds a free port on 127.0.0.1 and starts accepting, one thread per connection.
    pub(crate) fn start() -> anyhow::Result<ThreadServer> {
        let listener = listen()?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("baseline-accept".into())
                .spawn(move || accept_loop(&listener, &stop))?
        };
        Ok(ThreadServer {
            addr,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Opens `clients` connections, each on its own client thread, and releases their calls at
    /// once, as [`super::fire::fire`] does for keel.
    pub(crate) fn fire(&self, clients: usize, work_ms: u64) -> anyhow::Result<Fired> {
        let addr = self.addr();
        super::fire::fire_with(clients, work_ms, |_| LineClient::connect(addr))
    }
}

impl Drop for ThreadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the acceptor, blocked in accept(2), with a connection of its own.
        let _ = TcpStream::connect(self.addr);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

/// A listener with [`BACKLOG`], through socket2 (std's `bind` fixes the backlog at 128).
fn listen() -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let addr: SocketAddr = ([127, 0, 0, 1], 0).into();
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(TcpListener::from(socket))
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool) {
    loop {
        let conn = listener.accept();
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok((stream, _)) = conn else { continue };
        // Connection threads are detached: each ends when its client closes.
        let spawned = std::thread::Builder::new()
            .name("baseline-conn".into())
            .stack_size(CLIENT_STACK)
            .spawn(move || serve(stream));
        if spawned.is_err() {
            // Out of threads: the connection is dropped and its client sees it closed.
            continue;
        }
    }
}

/// Answers one connection's requests until its client closes it.
fn serve(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut lines = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match lines.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut parts = line.split_whitespace();
        let (Some(i), Some(work_ms)) = (parts.next(), parts.next()) else {
            return;
        };
        let Ok(work_ms) = work_ms.parse::<u64>() else {
            return;
        };
        std::thread::sleep(Duration::from_millis(work_ms));
        if out
            .write_all(format!("You entered: {i}\n").as_bytes())
            .is_err()
        {
            return;
        }
    }
}

/// A blocking line-protocol client of [`ThreadServer`].
#[derive(Debug)]
pub(crate) struct LineClient {
    out: TcpStream,
    lines: BufReader<TcpStream>,
}

impl LineClient {
    /// Connects to `addr`.
    pub(crate) fn connect(addr: SocketAddr) -> anyhow::Result<LineClient> {
        let out = TcpStream::connect(addr)?;
        out.set_nodelay(true)?;
        let lines = BufReader::new(out.try_clone()?);
        Ok(LineClient { out, lines })
    }
}

impl BurstClient for LineClient {
    fn call(&mut self, i: usize, work_ms: u64) -> anyhow::Result<String> {
        self.out.write_all(format!("{i} {work_ms}\n").as_bytes())?;
        let mut reply = String::new();
        anyhow::ensure!(
            self.lines.read_line(&mut reply)? > 0,
            "the baseline server closed the connection"
        );
        Ok(reply.trim_end().to_string())
    }

    fn close(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_like_service1() {
        let server = ThreadServer::start().unwrap();
        let mut c = LineClient::connect(server.addr()).unwrap();
        assert_eq!(c.call(7, 1).unwrap(), "You entered: 7");
        assert_eq!(c.call(8, 0).unwrap(), "You entered: 8");
        c.close();
        let fired = server.fire(20, 1).unwrap();
        assert_eq!(fired.calls.len(), 20);
        drop(server);
    }
}
