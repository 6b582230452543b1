//! The limit: "add two f64" as bare length-prefixed frames over TCP. A request is a 4-byte
//! big-endian length (16) and two `f64`s; the reply a length (8) and their sum. The server is one
//! tokio task per connection with 1 KiB buffers each way that answers every request it has read,
//! then writes the replies at once; the client keeps its calls in flight pipelined in order and
//! likewise writes the requests it has at once. Coalescing is what makes this the limit: with
//! one `write` per request (and the server's coalescing) raw made 330 k calls/s here, with one
//! `write` per message on both sides 270 k/s; coalesced on both, 10 × that.
//!
//! The streaming workload's limit: a request whose length has its top bit set ([`WATCH`]) asks
//! for a stream of quotes (its body: the count, a big-endian `u64`, then the symbol), and turns
//! the connection into that stream: the server writes every quote as a frame (a length, then
//! `seq` (`u32`), `price` (`f64`) and the symbol's bytes) through a 32 KiB `BufWriter`, one
//! `write` per full buffer, then closes the connection; a client stops the stream by closing
//! it. The client reads through a 32 KiB `BufReader` and decodes each frame into a [`Quote`]
//! (the symbol into a `String` of its own, as every system's client does).

use std::net::SocketAddr;
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};

use super::load::{new_histogram, Window};
use super::quote::{self, Quote};

/// The bit of a request's length that makes it a watch request.
pub(crate) const WATCH: u32 = 1 << 31;

/// The buffers of a stream of quotes, each way (keel's encoder gathers up to as much).
const STREAM_BUFFER: usize = 32 * 1024;

/// Bytes of a quote frame after its length and before its symbol: `seq` and `price`.
const QUOTE_FIXED: usize = 4 + 8;

/// The longest symbol a watch request may name.
const MAX_SYMBOL: usize = 255;

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
        let len = r.read_u32().await?;
        if len & WATCH != 0 {
            let (symbol, count) = read_watch(&mut r, len & !WATCH).await?;
            w.flush().await?;
            return stream_quotes(w.into_inner(), &symbol, count).await;
        }
        if len as usize != body.len() {
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

/// The body of a watch request of `len` bytes: the symbol and the count.
async fn read_watch(
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    len: u32,
) -> std::io::Result<(Vec<u8>, u64)> {
    let len = len as usize;
    if !(8..=8 + MAX_SYMBOL).contains(&len) {
        return Err(std::io::Error::other("bad watch request length"));
    }
    let count = r.read_u64().await?;
    let mut symbol = vec![0; len - 8];
    r.read_exact(&mut symbol).await?;
    Ok((symbol, count))
}

/// Writes `count` quotes of `symbol` as fast as the socket takes them, then closes it.
async fn stream_quotes(w: OwnedWriteHalf, symbol: &[u8], count: u64) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(STREAM_BUFFER, w);
    let mut frame = Vec::with_capacity(4 + QUOTE_FIXED + symbol.len());
    for seq in 0..count {
        frame.clear();
        frame.extend_from_slice(&((QUOTE_FIXED + symbol.len()) as u32).to_be_bytes());
        frame.extend_from_slice(&(seq as u32).to_be_bytes());
        frame.extend_from_slice(&quote::price(seq).to_be_bytes());
        frame.extend_from_slice(symbol);
        w.write_all(&frame).await?;
    }
    w.flush().await?;
    w.shutdown().await
}

/// A whole watch request frame: length (with [`WATCH`]), count and symbol.
pub(crate) fn encode_watch(symbol: &str, count: u64) -> Vec<u8> {
    let mut f = Vec::with_capacity(12 + symbol.len());
    f.extend_from_slice(&(WATCH | (8 + symbol.len()) as u32).to_be_bytes());
    f.extend_from_slice(&count.to_be_bytes());
    f.extend_from_slice(symbol.as_bytes());
    f
}

/// The quote in a frame's body (after its length).
pub(crate) fn decode_quote(body: &[u8]) -> anyhow::Result<Quote> {
    anyhow::ensure!(
        body.len() >= QUOTE_FIXED,
        "raw: a quote of {} bytes",
        body.len()
    );
    let (fixed, symbol) = body.split_at(QUOTE_FIXED);
    Ok(Quote {
        seq: u32::from_be_bytes(fixed[..4].try_into().expect("4 bytes")),
        price: f64::from_be_bytes(fixed[4..].try_into().expect("8 bytes")),
        symbol: std::str::from_utf8(symbol)?.to_owned(),
    })
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
    addr: SocketAddr,
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
            addr,
        })
    }

    /// A stream of `count` quotes of `symbol`, on a connection of its own: the stream takes
    /// the connection over, and closing it is how the client stops it.
    pub(crate) async fn watch(&self, symbol: &str, count: u64) -> anyhow::Result<RawQuotes> {
        let mut s = TcpStream::connect(self.addr).await?;
        s.set_nodelay(true)?;
        s.write_all(&encode_watch(symbol, count)).await?;
        Ok(RawQuotes {
            r: BufReader::with_capacity(STREAM_BUFFER, s),
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

/// A raw stream of quotes (dropping it closes its connection, which stops the server).
#[derive(Debug)]
pub(crate) struct RawQuotes {
    r: BufReader<TcpStream>,
}

impl RawQuotes {
    /// The next quote, `None` when the server closed the connection after its last.
    pub(crate) async fn next(&mut self) -> anyhow::Result<Option<Quote>> {
        let buf = self.r.buffer();
        if buf.len() >= 4 {
            // A whole frame in the buffer: decoded in place.
            let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
            if buf.len() >= 4 + len {
                let q = decode_quote(&buf[4..4 + len])?;
                self.r.consume(4 + len);
                return Ok(Some(q));
            }
        } else if buf.is_empty() && self.r.fill_buf().await?.is_empty() {
            return Ok(None);
        }
        // A frame across the buffer's end.
        let len = self.r.read_u32().await? as usize;
        anyhow::ensure!(
            (QUOTE_FIXED..=QUOTE_FIXED + MAX_SYMBOL).contains(&len),
            "raw: a quote frame of {len} bytes"
        );
        let mut body = [0u8; QUOTE_FIXED + MAX_SYMBOL];
        self.r.read_exact(&mut body[..len]).await?;
        decode_quote(&body[..len]).map(Some)
    }
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
        let w = encode_watch("KEEL", 7);
        assert_eq!(&w[..4], &(WATCH | 12).to_be_bytes());
        assert_eq!(
            (&w[4..12], &w[12..]),
            (&7u64.to_be_bytes()[..], &b"KEEL"[..])
        );
    }

    #[tokio::test]
    async fn a_watch_streams_its_quotes_then_ends() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener));
        let conn = RawConn::connect(addr).await.unwrap();
        // Enough quotes to cross the buffers' ends many times.
        let n = 10_000;
        let mut quotes = conn.watch("KEEL", n).await.unwrap();
        for seq in 0..n {
            let q = quotes.next().await.unwrap().unwrap();
            assert_eq!(q, Quote::new("KEEL", seq));
        }
        assert!(quotes.next().await.unwrap().is_none());
        // The connection of the calls is another one, untouched.
        assert_eq!(conn.add(1.0, 2.0).await.unwrap(), 3.0);
    }
}
