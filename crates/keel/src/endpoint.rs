//! Endpoint URLs and the byte streams they open.
//!
//! | URL | binding |
//! |-----|---------|
//! | `tcp://host:port` | keel wire protocol over TCP |
//! | `tcps://host:port` | keel wire protocol over TLS |
//! | `unix:///path/to/socket` | keel wire protocol over a Unix socket |
//! | `http://host:port` | HTTP/1.1 and HTTP/2 (prior knowledge) on one port |
//! | `https://host:port` | HTTP/1.1 and HTTP/2 over TLS (ALPN) |
//!
//! Listening and connecting happen in two steps: the raw socket ([`Listener::accept`],
//! [`Endpoint::connect_raw`]) and the security layer on top of it ([`Endpoint::secure_client`],
//! [`Listener::secure`]), so that a slow TLS handshake runs in the connection's own task, never
//! in the accept loop.

use std::fmt;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use crate::error::{Error, Kind};

/// A byte stream keel can run its protocols over.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// Which protocol runs over an endpoint's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// The keel wire protocol (`keel-wire`).
    Wire,
    /// HTTP/1.1 or HTTP/2.
    Http,
}

/// Where a host listens or a client connects, parsed from a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `tcp://host:port`
    Tcp(String),
    /// `tcps://host:port`
    Tcps(String),
    /// `unix:///path`
    Unix(PathBuf),
    /// `http://host:port`
    Http(String),
    /// `https://host:port`
    Https(String),
}

/// A connected (and, for TLS schemes, secured) byte stream.
pub(crate) struct Connected {
    pub(crate) io: Box<dyn Io>,
    /// The protocol agreed by TLS ALPN, if any (`h2`, `http/1.1`, `keel/1`).
    pub(crate) alpn: Option<Vec<u8>>,
}

impl fmt::Debug for Connected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connected")
            .field("alpn", &self.alpn.as_deref().map(String::from_utf8_lossy))
            .finish_non_exhaustive()
    }
}

const SCHEMES: &str = "tcp, tcps, unix, http, https";

fn host_port(url: &str, scheme: &str, rest: &str) -> Result<String, Error> {
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || !authority.contains(':') || authority.contains('/') {
        return Err(Error::new(
            Kind::Config,
            format!("`{url}`: expected {scheme}://host:port"),
        ));
    }
    Ok(authority.to_string())
}

impl Endpoint {
    /// Parses an endpoint URL (see the module docs for the schemes).
    pub(crate) fn parse(url: &str) -> Result<Endpoint, Error> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::new(
                Kind::Config,
                format!("`{url}` is not an endpoint URL (expected e.g. tcp://host:port)"),
            )
        })?;
        match scheme {
            "tcp" => host_port(url, scheme, rest).map(Endpoint::Tcp),
            "tcps" => host_port(url, scheme, rest).map(Endpoint::Tcps),
            "http" => host_port(url, scheme, rest).map(Endpoint::Http),
            "https" => host_port(url, scheme, rest).map(Endpoint::Https),
            "unix" => {
                if !rest.starts_with('/') || rest.len() < 2 {
                    return Err(Error::new(
                        Kind::Config,
                        format!("`{url}`: expected unix:///absolute/path"),
                    ));
                }
                Ok(Endpoint::Unix(PathBuf::from(rest)))
            }
            other => Err(Error::new(
                Kind::Config,
                format!("`{url}`: unsupported scheme `{other}` (supported: {SCHEMES})"),
            )),
        }
    }

    /// The protocol spoken over this endpoint.
    pub(crate) fn protocol(&self) -> Protocol {
        match self {
            Endpoint::Tcp(_) | Endpoint::Tcps(_) | Endpoint::Unix(_) => Protocol::Wire,
            Endpoint::Http(_) | Endpoint::Https(_) => Protocol::Http,
        }
    }

    /// The URL scheme, e.g. `tcp`.
    pub(crate) fn scheme(&self) -> &'static str {
        match self {
            Endpoint::Tcp(_) => "tcp",
            Endpoint::Tcps(_) => "tcps",
            Endpoint::Unix(_) => "unix",
            Endpoint::Http(_) => "http",
            Endpoint::Https(_) => "https",
        }
    }

    /// Whether the scheme runs over TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Endpoint::Tcps(_) | Endpoint::Https(_))
    }

    /// `host:port` for network schemes.
    pub(crate) fn authority(&self) -> Option<&str> {
        match self {
            Endpoint::Tcp(a) | Endpoint::Tcps(a) | Endpoint::Http(a) | Endpoint::Https(a) => {
                Some(a)
            }
            Endpoint::Unix(_) => None,
        }
    }

    /// Opens the raw socket, with `TCP_NODELAY` set on TCP: keel writes whole messages and
    /// wants them on the wire now. No TLS yet (see [`Endpoint::secure_client`]).
    pub(crate) async fn connect_raw(&self) -> std::io::Result<Box<dyn Io>> {
        match self {
            Endpoint::Unix(path) => Ok(Box::new(connect_unix(path).await?)),
            _ => {
                let addr = self.authority().unwrap_or_default();
                let s = TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                Ok(Box::new(s))
            }
        }
    }

    /// Binds a listener for this endpoint. Synchronous, so a host can start from any context
    /// (including inside another runtime); [`BoundListener::into_async`] registers it with the
    /// host's runtime.
    pub(crate) fn bind(&self) -> std::io::Result<BoundListener> {
        let socket = match self {
            Endpoint::Unix(path) => BoundSocket::Unix(bind_unix(path)?, path.clone()),
            _ => {
                let l = std::net::TcpListener::bind(self.authority().unwrap_or_default())?;
                l.set_nonblocking(true)?;
                BoundSocket::Tcp(l)
            }
        };
        Ok(BoundListener {
            endpoint: self.clone(),
            socket,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Tcps(a) => write!(f, "tcps://{a}"),
            Endpoint::Http(a) => write!(f, "http://{a}"),
            Endpoint::Https(a) => write!(f, "https://{a}"),
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

#[cfg(unix)]
async fn connect_unix(path: &Path) -> std::io::Result<tokio::net::UnixStream> {
    tokio::net::UnixStream::connect(path).await
}

#[cfg(not(unix))]
async fn connect_unix(_: &Path) -> std::io::Result<TcpStream> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "unix:// endpoints need a Unix platform",
    ))
}

/// Binds a Unix socket at `path`. A socket file left behind by a host that is gone (nobody
/// accepts on it) is replaced; a live one, or any other kind of file, is an error.
#[cfg(unix)]
fn bind_unix(path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::net::{UnixListener, UnixStream};
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("{} is in use by another listener", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(_) => {}
    }
    let l = UnixListener::bind(path)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

#[cfg(not(unix))]
fn bind_unix(_: &Path) -> std::io::Result<std::net::TcpListener> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "unix:// endpoints need a Unix platform",
    ))
}

#[derive(Debug)]
enum BoundSocket {
    Tcp(std::net::TcpListener),
    #[cfg(unix)]
    Unix(std::os::unix::net::UnixListener, PathBuf),
    #[cfg(not(unix))]
    Unix(std::net::TcpListener, PathBuf),
}

/// A bound listener not yet registered with a runtime.
#[derive(Debug)]
pub(crate) struct BoundListener {
    endpoint: Endpoint,
    socket: BoundSocket,
}

impl BoundListener {
    /// The URL clients can connect to (with the real port when bound to port 0).
    pub(crate) fn local_url(&self) -> std::io::Result<String> {
        Ok(match (&self.socket, &self.endpoint) {
            (BoundSocket::Unix(_, path), _) => format!("unix://{}", path.display()),
            (BoundSocket::Tcp(l), ep) => format!("{}://{}", ep.scheme(), l.local_addr()?),
        })
    }

    /// Registers the listener with the current runtime.
    pub(crate) fn into_async(self) -> std::io::Result<Listener> {
        let (socket, unlink) = match self.socket {
            BoundSocket::Tcp(l) => (ListenSocket::Tcp(TcpListener::from_std(l)?), None),
            #[cfg(unix)]
            BoundSocket::Unix(l, path) => (
                ListenSocket::Unix(tokio::net::UnixListener::from_std(l)?),
                Some(UnlinkOnDrop(path)),
            ),
            #[cfg(not(unix))]
            BoundSocket::Unix(..) => unreachable!("bind_unix fails off Unix"),
        };
        Ok(Listener {
            endpoint: self.endpoint,
            socket,
            _unlink: unlink,
        })
    }
}

/// Removes a Unix socket's file when its listener goes away.
#[derive(Debug)]
struct UnlinkOnDrop(PathBuf);

impl Drop for UnlinkOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[derive(Debug)]
enum ListenSocket {
    Tcp(TcpListener),
    #[cfg(unix)]
    Unix(tokio::net::UnixListener),
}

/// A listener registered with a runtime.
#[derive(Debug)]
pub(crate) struct Listener {
    endpoint: Endpoint,
    socket: ListenSocket,
    /// A Unix socket's file, removed with the listener.
    _unlink: Option<UnlinkOnDrop>,
}

impl Listener {
    /// The endpoint this listener serves.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Accepts one raw connection; `peer` describes the other end for logs.
    pub(crate) async fn accept(&self) -> std::io::Result<(Box<dyn Io>, String)> {
        match &self.socket {
            ListenSocket::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok((Box::new(s), peer.to_string()))
            }
            #[cfg(unix)]
            ListenSocket::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok((Box::new(s), "unix".to_string()))
            }
        }
    }

    /// Runs the security layer of the endpoint over an accepted connection: nothing for plain
    /// schemes.
    pub(crate) async fn secure(&self, io: Box<dyn Io>) -> std::io::Result<Connected> {
        if self.endpoint.is_tls() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "TLS endpoints are not built yet",
            ));
        }
        Ok(Connected { io, alpn: None })
    }
}

impl Endpoint {
    /// Runs the security layer of this endpoint over a raw client connection: nothing for plain
    /// schemes.
    pub(crate) async fn secure_client(&self, io: Box<dyn Io>) -> std::io::Result<Connected> {
        if self.is_tls() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "TLS endpoints are not built yet",
            ));
        }
        Ok(Connected { io, alpn: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme_and_rejects_the_rest() {
        assert_eq!(
            Endpoint::parse("tcp://127.0.0.1:0").unwrap(),
            Endpoint::Tcp("127.0.0.1:0".into())
        );
        assert_eq!(
            Endpoint::parse("tcp://localhost:80/").unwrap(),
            Endpoint::Tcp("localhost:80".into())
        );
        assert_eq!(
            Endpoint::parse("tcps://h:1").unwrap(),
            Endpoint::Tcps("h:1".into())
        );
        assert_eq!(
            Endpoint::parse("http://h:1").unwrap(),
            Endpoint::Http("h:1".into())
        );
        assert_eq!(
            Endpoint::parse("https://h:1/").unwrap(),
            Endpoint::Https("h:1".into())
        );
        assert_eq!(
            Endpoint::parse("unix:///tmp/k.sock").unwrap(),
            Endpoint::Unix("/tmp/k.sock".into())
        );
        for bad in [
            "127.0.0.1:80",
            "tcp://",
            "tcp://host",
            "ftp://h:1",
            "tcp://h:1/x",
            "unix://relative.sock",
            "unix://",
            "http://h",
        ] {
            let e = Endpoint::parse(bad).unwrap_err();
            assert_eq!(e.kind(), Kind::Config, "{bad}");
        }
    }

    #[test]
    fn display_round_trips() {
        for url in [
            "tcp://h:1",
            "tcps://h:1",
            "unix:///tmp/x.sock",
            "http://h:1",
            "https://h:1",
        ] {
            assert_eq!(Endpoint::parse(url).unwrap().to_string(), url);
        }
    }
}
