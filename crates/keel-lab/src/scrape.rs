//! Scraping a host's admin endpoint the way Prometheus does: `GET /metrics` over a real HTTP/1.1
//! connection (one per scrape, `Connection: close`), the answer read into [`Metrics`].
//!
//! A plain blocking socket, no runtime: the lab's sampler is a thread of its own, and a scrape
//! must not lean on any runtime the measured clients use.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::Context;

use crate::prom::Metrics;

/// How long a scrape may take (connect, and each read or write).
const TIMEOUT: Duration = Duration::from_secs(2);
/// The most a `/metrics` answer may be.
const MAX_ANSWER: u64 = 16 * 1024 * 1024;

/// Scrapes one admin endpoint (`http://host:port`, as `keel::Host::admin_url` reports it).
#[derive(Debug, Clone)]
pub(crate) struct Scraper {
    /// `host:port`.
    authority: String,
}

impl Scraper {
    /// A scraper of the admin endpoint at `admin_url`.
    pub(crate) fn new(admin_url: &str) -> anyhow::Result<Scraper> {
        let authority = admin_url
            .strip_prefix("http://")
            .with_context(|| format!("admin URL {admin_url}: not http://"))?
            .trim_end_matches('/');
        anyhow::ensure!(
            !authority.is_empty() && !authority.contains('/'),
            "admin URL {admin_url}: want http://host:port"
        );
        Ok(Scraper {
            authority: authority.to_string(),
        })
    }

    /// `GET /metrics`: the body, as text.
    pub(crate) fn text(&self) -> anyhow::Result<String> {
        let addr = self
            .authority
            .to_socket_addrs()?
            .next()
            .with_context(|| format!("{}: no address", self.authority))?;
        let mut conn = TcpStream::connect_timeout(&addr, TIMEOUT)?;
        conn.set_read_timeout(Some(TIMEOUT))?;
        conn.set_write_timeout(Some(TIMEOUT))?;
        conn.set_nodelay(true)?;
        write!(
            conn,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n",
            self.authority
        )?;
        let mut answer = Vec::new();
        conn.take(MAX_ANSWER).read_to_end(&mut answer)?;
        body_of(&answer)
    }

    /// `GET /metrics`, keeping the samples whose name `keep` accepts.
    pub(crate) fn metrics(&self, keep: impl Fn(&str) -> bool) -> anyhow::Result<Metrics> {
        Ok(Metrics::parse_only(&self.text()?, keep)?)
    }
}

/// The body of a whole HTTP/1.1 answer (read to the connection's close): a 200's body, by its
/// `Content-Length`, chunked, or up to the close.
fn body_of(answer: &[u8]) -> anyhow::Result<String> {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of the answer's head")?;
    let head = std::str::from_utf8(&answer[..split]).context("answer head not UTF-8")?;
    let rest = &answer[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split_whitespace().nth(1);
    anyhow::ensure!(
        status.starts_with("HTTP/1.") && code == Some("200"),
        "GET /metrics answered {status:?}"
    );
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = header("content-length") {
        let len: usize = len.parse().context("bad Content-Length")?;
        anyhow::ensure!(
            rest.len() >= len,
            "answer cut short: {} of {len} bytes",
            rest.len()
        );
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    String::from_utf8(body).context("metrics not UTF-8")
}

/// Joins a chunked body's chunks (trailers ignored).
fn dechunk(mut s: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = s
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("chunk size line cut short")?;
        let line = std::str::from_utf8(&s[..eol]).context("chunk size not UTF-8")?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).context("bad chunk size")?;
        s = &s[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        anyhow::ensure!(s.len() >= size + 2, "chunk cut short");
        out.extend_from_slice(&s[..size]);
        s = &s[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn bodies() {
        let a = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(body_of(a).unwrap(), "hello");
        let a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(body_of(a).unwrap(), "hello");
        let a = b"HTTP/1.0 200 OK\r\n\r\nto the close";
        assert_eq!(body_of(a).unwrap(), "to the close");
        assert!(body_of(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_err());
        assert!(body_of(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort").is_err());
        assert!(body_of(b"HTTP/1.1 200 OK\r\n").is_err());
    }

    #[test]
    fn urls() {
        assert!(Scraper::new("http://127.0.0.1:9090").is_ok());
        assert!(Scraper::new("http://127.0.0.1:9090/").is_ok());
        assert!(Scraper::new("https://127.0.0.1:9090").is_err());
        assert!(Scraper::new("http://127.0.0.1:9090/metrics").is_err());
    }

    /// A scrape over a real socket, against a one-shot server that checks the request.
    #[test]
    fn scrapes_over_http() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8];
            while !head.ends_with(b"\r\n\r\n") {
                c.read_exact(&mut byte).unwrap();
                head.push(byte[0]);
            }
            let body = "keel_pool_threads{state=\"idle\"} 2\nkeel_pool_threads{state=\"busy\"} 3\n";
            write!(
                c,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            String::from_utf8(head).unwrap()
        });
        let m = Scraper::new(&url)
            .unwrap()
            .metrics(|n| n == "keel_pool_threads")
            .unwrap();
        assert_eq!(m.sum("keel_pool_threads", &[]), Some(5.0));
        let head = server.join().unwrap();
        assert!(head.starts_with("GET /metrics HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("Connection: close\r\n"), "{head}");
    }
}
