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
//!
//! TLS endpoints agree on their protocol with ALPN ([`Endpoint::alpn`]): `keel/1` on `tcps`;
//! `h2` or `http/1.1` on `https`. There is no plaintext fallback in either direction.

use std::fmt;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use crate::client::ClientConfig;
use crate::error::{Error, Kind};
use crate::host::HostConfig;

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

/// ALPN id of the keel wire protocol over TLS.
pub(crate) const ALPN_KEEL: &[u8] = b"keel/1";
/// ALPN id of HTTP/2.
pub(crate) const ALPN_H2: &[u8] = b"h2";
/// ALPN id of HTTP/1.1.
pub(crate) const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Whether `bytes` start like a TLS record (an alert or a handshake message): what a plaintext
/// client reads when it reached a TLS endpoint.
pub(crate) fn looks_like_tls(bytes: &[u8]) -> bool {
    matches!(bytes, [0x15 | 0x16, 0x03, ..])
}

/// The error for a TLS endpoint in a build without the `tls` feature.
#[cfg(not(feature = "tls"))]
pub(crate) fn tls_feature_needed(endpoint: &Endpoint) -> Error {
    Error::new(
        Kind::Config,
        format!("{endpoint}: TLS endpoints need keel's `tls` feature, which this build leaves out"),
    )
}

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

    /// The ALPN protocols of this endpoint's binding, most preferred first: what a host accepts,
    /// and what a client offers unless told otherwise.
    pub(crate) fn alpn(&self) -> &'static [&'static [u8]] {
        match self.protocol() {
            Protocol::Wire => &[ALPN_KEEL],
            Protocol::Http => &[ALPN_H2, ALPN_HTTP1],
        }
    }

    /// The host part of a network endpoint (`[::1]:80` gives `::1`): the name a TLS client
    /// checks the certificate against by default.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn host(&self) -> &str {
        let authority = self.authority().unwrap_or_default();
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
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

    /// Registers the listener with the current runtime; `security` runs over every connection
    /// it accepts (see [`Listener::secure`]).
    pub(crate) fn into_async(self, security: ServerSecurity) -> std::io::Result<Listener> {
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
            security,
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

/// What a listener runs over each accepted connection: TLS on `tcps` and `https`, nothing on
/// plain schemes. Built once per endpoint when a host starts.
#[derive(Clone, Default)]
pub(crate) struct ServerSecurity {
    #[cfg(feature = "tls")]
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl fmt::Debug for ServerSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[cfg(feature = "tls")]
        let tls = self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        let tls = false;
        f.debug_struct("ServerSecurity").field("tls", &tls).finish()
    }
}

impl ServerSecurity {
    /// The security layer of `endpoint` from a host's settings. A TLS endpoint needs
    /// [`HostConfig::tls`] (and the `tls` feature).
    pub(crate) fn for_endpoint(
        endpoint: &Endpoint,
        config: &HostConfig,
    ) -> Result<ServerSecurity, Error> {
        if !endpoint.is_tls() {
            return Ok(ServerSecurity::default());
        }
        #[cfg(feature = "tls")]
        {
            let tls = config.tls.as_ref().ok_or_else(|| {
                Error::new(
                    Kind::Config,
                    format!(
                        "{endpoint}: a TLS endpoint needs a certificate: call HostBuilder::tls \
                         (or set HostConfig::tls)"
                    ),
                )
            })?;
            Ok(ServerSecurity {
                tls: Some(tls.acceptor(endpoint.alpn())),
            })
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = config;
            Err(tls_feature_needed(endpoint))
        }
    }
}

/// A listener registered with a runtime.
#[derive(Debug)]
pub(crate) struct Listener {
    endpoint: Endpoint,
    socket: ListenSocket,
    /// Empty, and unread, in builds without TLS.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    security: ServerSecurity,
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

    /// Runs the security layer of the endpoint over an accepted connection: the TLS handshake
    /// on TLS schemes (failing for a peer that does not speak TLS, or lacks a client
    /// certificate the host requires), nothing on plain ones.
    pub(crate) async fn secure(&self, io: Box<dyn Io>) -> std::io::Result<Connected> {
        #[cfg(feature = "tls")]
        if let Some(acceptor) = &self.security.tls {
            let (io, alpn) = crate::tls::accept(acceptor, io).await?;
            return Ok(Connected { io, alpn });
        }
        // A TLS endpoint without an acceptor cannot start (see `ServerSecurity::for_endpoint`).
        debug_assert!(!self.endpoint.is_tls());
        Ok(Connected { io, alpn: None })
    }
}

impl Endpoint {
    /// Runs the security layer of this endpoint over a raw client connection: on TLS schemes,
    /// the handshake with `config.tls` (the system roots if unset), offering the ALPN protocols
    /// `alpn` (usually [`Endpoint::alpn`]); nothing on plain schemes.
    ///
    /// Errors are `Connect` errors naming the endpoint and rustls's reason (e.g. "invalid peer
    /// certificate: UnknownIssuer"), or `Config` errors for unusable settings.
    pub(crate) async fn secure_client(
        &self,
        io: Box<dyn Io>,
        config: &ClientConfig,
        alpn: &[&[u8]],
    ) -> Result<Connected, Error> {
        if !self.is_tls() {
            return Ok(Connected { io, alpn: None });
        }
        #[cfg(feature = "tls")]
        {
            use crate::tls::{ClientTls, TlsConnectError};
            let system;
            let tls = match &config.tls {
                Some(tls) => tls,
                None => {
                    system = ClientTls::default_for_process().await?;
                    &system
                }
            };
            match tls.connect(io, self.host(), alpn).await {
                Ok((io, alpn)) => Ok(Connected { io, alpn }),
                Err(TlsConnectError::Config(e)) => Err(e),
                Err(TlsConnectError::Handshake(e)) => {
                    let message = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        format!(
                            "{self}: the host closed the connection during the TLS handshake \
                             (does it serve TLS on this port?)"
                        )
                    } else {
                        format!("{self}: TLS handshake failed: {e}")
                    };
                    Err(Error::new(Kind::Connect, message).with_source(e))
                }
            }
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = (io, config, alpn);
            Err(tls_feature_needed(self))
        }
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
    fn host_part_and_alpn() {
        for (url, host) in [
            ("tcps://localhost:1", "localhost"),
            ("tcps://127.0.0.1:443", "127.0.0.1"),
            ("https://[::1]:8443", "::1"),
        ] {
            assert_eq!(Endpoint::parse(url).unwrap().host(), host, "{url}");
        }
        assert_eq!(Endpoint::parse("tcps://h:1").unwrap().alpn(), &[b"keel/1"]);
        assert_eq!(
            Endpoint::parse("https://h:1").unwrap().alpn(),
            &[&b"h2"[..], &b"http/1.1"[..]]
        );
        assert!(looks_like_tls(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x0a]));
        assert!(!looks_like_tls(b"KEEL"));
    }

    #[test]
    fn a_tls_endpoint_needs_settings_or_the_feature() {
        let ep = Endpoint::parse("tcps://127.0.0.1:0").unwrap();
        let e = ServerSecurity::for_endpoint(&ep, &HostConfig::default()).unwrap_err();
        assert_eq!(e.kind(), Kind::Config);
        let expected = if cfg!(feature = "tls") {
            "call HostBuilder::tls"
        } else {
            "need keel's `tls` feature"
        };
        assert!(e.to_string().contains(expected), "{e}");
        assert!(e.to_string().contains("tcps://127.0.0.1:0"), "{e}");
        let plain = Endpoint::parse("tcp://127.0.0.1:0").unwrap();
        ServerSecurity::for_endpoint(&plain, &HostConfig::default()).unwrap();
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
