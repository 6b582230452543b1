//! The limit: "add two f64" as bare length-prefixed frames over TCP. A request is a 4-byte
//! big-endian length (16) and two `f64`s; the reply a length (8) and their sum. The server is one
//! tokio task per connection with 1 KiB buffers each way that answers every request it has read,
//! then writes the replies at once; the client keeps its calls in flight pipelined in order and
//! likewise writes the requests it has at once. Coalescing is what makes this the limit: with
//! one `write` per request (and the server's coalescing) raw made 330 k calls/s here, with one
//! `write` per message on both sides 270 k/s; coalesced on both, 10 × that.

use std::net::SocketAddr;
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};

use super::load::{new_histogram, Window};

/// Serves on `listener` until the process ends.
pub(crate) async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            let _ = serve_connection(stream).await;
        });
    }
}

async fn serve_connection(stream: TcpStream) -> std::io::Result<()> {
    let (r, w) = stream.into_split();
    let mut r = BufReader::with_capacity(1024, r);
    let mut w = BufWriter::with_capacity(1024, w);
    let mut body = [0u8; 16];
    loop {
        let len = r.read_u32().await? as usize;
        if len != body.len() {
            return Err(std::io::Error::other("bad frame length"));
        }
        r.read_exact(&mut body).await?;
        let (a, b) = decode_request(&body);
        let mut reply = [0u8; 12];
        reply[..4].copy_from_slice(&8u32.to_be_bytes());
        reply[4..].copy_from_slice(&(a + b).to_be_bytes());
        w.write_all(&reply).await?;
        if r.buffer().is_empty() {
            w.flush().await?;
        }
    }
}

/// The two operands of a request body.
pub(crate) fn decode_request(body: &[u8; 16]) -> (f64, f64) {
    let (a, b) = body.split_at(8);
    (
        f64::from_be_bytes(a.try_into().expect("8 bytes")),
        f64::from_be_bytes(b.try_into().expect("8 bytes")),
    )
}

/// A whole request frame: length prefix and body.
pub(crate) fn encode_request(a: f64, b: f64) -> [u8; 20] {
    let mut f = [0u8; 20];
    f[..4].copy_from_slice(&16u32.to_be_bytes());
    f[4..12].copy_from_slice(&a.to_be_bytes());
    f[12..].copy_from_slice(&b.to_be_bytes());
    f
}

/// One raw connection.
#[derive(Debug)]
pub(crate) struct RawConn {
    stream: tokio::sync::Mutex<BufStream>,
}

type BufStream = (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    BufWriter<tokio::net::tcp::OwnedWriteHalf>,
);

impl RawConn {
    /// Connects to `addr`.
    pub(crate) async fn connect(addr: SocketAddr) -> anyhow::Result<RawConn> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok(RawConn {
            stream: tokio::sync::Mutex::new((BufReader::new(r), BufWriter::new(w))),
        })
    }

    /// One call (the connection carries one at a time through this method).
    pub(crate) async fn add(&self, a: f64, b: f64) -> anyhow::Result<f64> {
        let mut s = self.stream.lock().await;
        let (r, w) = &mut *s;
        w.write_all(&encode_request(a, b)).await?;
        w.flush().await?;
        read_reply(r).await
    }

    /// `inflight` calls pipelined on this connection until `window` says stop: a reply read,
    /// the next request written; replies come in order, so each latency is taken against the
    /// oldest send time. Returns the histogram of the calls answered while `window` counted.
    pub(crate) async fn pipeline(
        &self,
        inflight: usize,
        window: &Window,
    ) -> anyhow::Result<Histogram<u64>> {
        let mut h = new_histogram();
        let mut s = self.stream.lock().await;
        let (r, w) = &mut *s;
        let mut sent = std::collections::VecDeque::with_capacity(inflight);
        for _ in 0..inflight {
            w.write_all(&encode_request(1.0, 2.0)).await?;
            sent.push_back(Instant::now());
        }
        w.flush().await?;
        while !window.stopped() {
            let v = read_reply(r).await?;
            anyhow::ensure!(v == 3.0, "raw: 1 + 2 = {v}");
            let t = sent.pop_front().expect("a call in flight");
            window.record(&mut h, t);
            w.write_all(&encode_request(1.0, 2.0)).await?;
            sent.push_back(Instant::now());
            if r.buffer().is_empty() {
                w.flush().await?;
            }
        }
        // Drain what is still in flight so the connection can be used again.
        w.flush().await?;
        for _ in 0..sent.len() {
            read_reply(r).await?;
        }
        Ok(h)
    }
}

async fn read_reply(r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> anyhow::Result<f64> {
    let len = r.read_u32().await?;
    anyhow::ensure!(len == 8, "raw: reply of {len} bytes");
    let mut v = [0u8; 8];
    r.read_exact(&mut v).await?;
    Ok(f64::from_be_bytes(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let f = encode_request(1.5, -2.25);
        assert_eq!(&f[..4], &[0, 0, 0, 16]);
        let body: [u8; 16] = f[4..].try_into().unwrap();
        assert_eq!(decode_request(&body), (1.5, -2.25));
    }
}
