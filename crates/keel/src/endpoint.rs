//! Endpoint URLs and the byte streams they open.

use std::fmt;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use crate::error::{Error, Kind};

/// A byte stream keel can run its wire protocol over.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// Where a host listens or a client connects, parsed from a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `tcp://host:port`: keel-wire over TCP.
    Tcp(String),
}

impl Endpoint {
    /// Parses `tcp://host:port`.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, Error> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::new(
                Kind::Config,
                format!("`{url}` is not an endpoint URL (expected tcp://host:port)"),
            )
        })?;
        match scheme {
            "tcp" => {
                let authority = rest.trim_end_matches('/');
                if authority.is_empty() || !authority.contains(':') || authority.contains('/') {
                    return Err(Error::new(
                        Kind::Config,
                        format!("`{url}`: expected tcp://host:port"),
                    ));
                }
                Ok(Endpoint::Tcp(authority.to_string()))
            }
            other => Err(Error::new(
                Kind::Config,
                format!("`{url}`: unsupported scheme `{other}` (supported: tcp)"),
            )),
        }
    }

    /// Connects, with `TCP_NODELAY` set: keel writes whole frames and wants them on the wire now.
    pub(crate) async fn connect(&self) -> std::io::Result<Box<dyn Io>> {
        match self {
            Endpoint::Tcp(addr) => {
                let s = TcpStream::connect(addr.as_str()).await?;
                s.set_nodelay(true)?;
                Ok(Box::new(s))
            }
        }
    }

    /// Binds a listener for this endpoint. Synchronous, so a host can start from any context
    /// (including inside another runtime); [`BoundListener::into_async`] registers it with the
    /// host's runtime.
    pub(crate) fn bind(&self) -> std::io::Result<BoundListener> {
        match self {
            Endpoint::Tcp(addr) => {
                let l = std::net::TcpListener::bind(addr.as_str())?;
                l.set_nonblocking(true)?;
                Ok(BoundListener::Tcp(l))
            }
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

/// A bound listener not yet registered with a runtime.
#[derive(Debug)]
pub(crate) enum BoundListener {
    Tcp(std::net::TcpListener),
}

impl BoundListener {
    /// The URL clients can connect to (with the real port when bound to port 0).
    pub(crate) fn local_url(&self) -> std::io::Result<String> {
        match self {
            BoundListener::Tcp(l) => Ok(format!("tcp://{}", l.local_addr()?)),
        }
    }

    /// Registers the listener with the current runtime.
    pub(crate) fn into_async(self) -> std::io::Result<Listener> {
        match self {
            BoundListener::Tcp(l) => Ok(Listener::Tcp(TcpListener::from_std(l)?)),
        }
    }
}

/// A listener registered with a runtime.
#[derive(Debug)]
pub(crate) enum Listener {
    Tcp(TcpListener),
}

impl Listener {
    /// Accepts one connection.
    pub(crate) async fn accept(&self) -> std::io::Result<(Box<dyn Io>, Option<SocketAddr>)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok((Box::new(s), Some(peer)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_and_rejects_the_rest() {
        assert_eq!(
            Endpoint::parse("tcp://127.0.0.1:0").unwrap(),
            Endpoint::Tcp("127.0.0.1:0".into())
        );
        assert_eq!(
            Endpoint::parse("tcp://localhost:80/").unwrap(),
            Endpoint::Tcp("localhost:80".into())
        );
        for bad in [
            "127.0.0.1:80",
            "tcp://",
            "tcp://host",
            "ftp://h:1",
            "tcp://h:1/x",
        ] {
            let e = Endpoint::parse(bad).unwrap_err();
            assert_eq!(e.kind(), Kind::Config, "{bad}");
        }
    }
}
