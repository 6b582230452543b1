//! Sockets: connecting, binding and accepting on TCP and Unix sockets, and the security layer
//! (TLS or nothing) on top of each connection.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, TcpStream};

#[cfg(not(feature = "tls"))]
use super::tls_feature_needed;
use super::{ClientTlsSettings, ServerTlsSettings};
use super::{Endpoint, Io, SecuredStream};
use crate::core::error::{Error, Kind};

/// TCP keepalive, the backstop under keel's own liveness checks: a connection whose peer
/// vanished without a word (a crashed machine, a NAT or firewall that dropped its state) is
/// probed after this long without traffic...
pub(crate) const TCP_KEEPALIVE_TIME: std::time::Duration = std::time::Duration::from_secs(60);
/// ...every this long...
pub(crate) const TCP_KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// ...and closed by the kernel after this many unanswered probes (about 90 s in all).
pub(crate) const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// Sets up a TCP connection, either end: `TCP_NODELAY` (keel writes whole messages and wants
/// them on the wire now) and TCP keepalive.
fn tune(s: &TcpStream) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(TCP_KEEPALIVE_TIME)
        .with_interval(TCP_KEEPALIVE_INTERVAL);
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_vendor = "apple",
        target_os = "freebsd"
    ))]
    let keepalive = keepalive.with_retries(TCP_KEEPALIVE_RETRIES);
    socket2::SockRef::from(s).set_tcp_keepalive(&keepalive)
}

impl Endpoint {
    /// Opens the raw socket, with `TCP_NODELAY` and TCP keepalive set on TCP (see [`tune`]). No
    /// TLS yet (see [`Endpoint::secure_client`]).
    pub(crate) async fn connect_raw(&self) -> std::io::Result<Box<dyn Io>> {
        match self {
            Endpoint::Unix(path) => Ok(Box::new(connect_unix(path).await?)),
            _ => {
                let addr = self.authority().unwrap_or_default();
                let s = TcpStream::connect(addr).await?;
                tune(&s)?;
                Ok(Box::new(s))
            }
        }
    }

    /// Binds a listener for this endpoint. Synchronous, so a host can start from any context
    /// (including inside another runtime); [`BoundListener::into_async`] registers it with the
    /// host's runtime.
    pub(crate) fn bind(&self, backlog: u32) -> std::io::Result<BoundListener> {
        let socket = match self {
            Endpoint::Unix(path) => {
                let listener = bind_unix(path, backlog)?;
                BoundSocket::Unix(listener, SocketFile::bound(path))
            }
            _ => BoundSocket::Tcp(bind_tcp(self.authority().unwrap_or_default(), backlog)?),
        };
        Ok(BoundListener {
            endpoint: self.clone(),
            socket,
        })
    }
}

/// The error for a listener on `what` (an endpoint, or the admin URL) that could not be set up:
/// the address and the system's reason, and for the failures a newcomer meets, what to do.
pub(crate) fn listen_error(what: &dyn fmt::Display, e: std::io::Error) -> Error {
    use std::io::ErrorKind as E;
    let unix = what.to_string().starts_with("unix://");
    let fix = match e.kind() {
        E::AddrInUse if unix => {
            ". Another host listens on that socket: stop it, or pick another path"
        }
        E::AddrInUse => {
            ". Another process (or another endpoint of this host) holds that address: stop it, \
             or pick another port (port 0 picks a free one)"
        }
        E::AddrNotAvailable => {
            ". The address is not one of this machine's: listen on one of them, or on 0.0.0.0 \
             (every IPv4 address) or [::]"
        }
        E::PermissionDenied if !unix => {
            ". Ports below 1024 need privileges: pick a higher port, or give the program the \
             right to bind them (CAP_NET_BIND_SERVICE on Linux)"
        }
        _ => "",
    };
    Error::new(Kind::Config, format!("cannot listen on {what}: {e}{fix}")).with_source(e)
}

/// The listen backlog when the system's limit cannot be read (not Linux, or no `/proc`).
pub(crate) const FALLBACK_BACKLOG: u32 = 1024;
/// The largest default backlog: Linux kept the backlog in 16 bits before 5.x (a larger value
/// wrapped), and no accept queue needs more.
pub(crate) const MAX_DEFAULT_BACKLOG: u32 = 65_535;

/// The default listen backlog: the system's own limit, so that a burst of connects is never
/// dropped below what the kernel would queue. On Linux `net.core.somaxconn`
/// (`/proc/sys/net/core/somaxconn`, 4096 since Linux 5.4), at most [`MAX_DEFAULT_BACKLOG`];
/// [`FALLBACK_BACKLOG`] elsewhere or if it cannot be read.
pub(crate) fn system_backlog() -> u32 {
    #[cfg(target_os = "linux")]
    let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok();
    #[cfg(not(target_os = "linux"))]
    let somaxconn: Option<String> = None;
    backlog_from(somaxconn.as_deref())
}

/// [`system_backlog`] from the text of `somaxconn`, if it was read.
fn backlog_from(somaxconn: Option<&str>) -> u32 {
    somaxconn
        .and_then(|t| t.trim().parse::<u32>().ok())
        .filter(|&n| n > 0)
        .map_or(FALLBACK_BACKLOG, |n| n.min(MAX_DEFAULT_BACKLOG))
}

/// The backlog as `listen(2)` takes it (the kernel caps it at `net.core.somaxconn`).
fn backlog_arg(backlog: u32) -> i32 {
    i32::try_from(backlog).unwrap_or(i32::MAX).max(1)
}

/// Binds the first of `authority`'s addresses that can be bound, listening with `backlog`
/// (std's `TcpListener::bind` always asks for 128).
fn bind_tcp(authority: &str, backlog: u32) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    use std::net::ToSocketAddrs;
    let mut last = None;
    for addr in authority.to_socket_addrs()? {
        let bound = (|| {
            let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
            // As std does on Unix: a restarted host can bind while old connections linger.
            #[cfg(unix)]
            socket.set_reuse_address(true)?;
            socket.bind(&addr.into())?;
            socket.listen(backlog_arg(backlog))?;
            socket.set_nonblocking(true)?;
            Ok::<_, std::io::Error>(std::net::TcpListener::from(socket))
        })();
        match bound {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{authority} resolves to no address"),
        )
    }))
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
fn bind_unix(path: &Path, backlog: u32) -> std::io::Result<std::os::unix::net::UnixListener> {
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
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.bind(&socket2::SockAddr::unix(path)?)?;
    socket.listen(backlog_arg(backlog))?;
    socket.set_nonblocking(true)?;
    Ok(UnixListener::from(std::os::fd::OwnedFd::from(socket)))
}

#[cfg(not(unix))]
fn bind_unix(_: &Path, _: u32) -> std::io::Result<std::net::TcpListener> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "unix:// endpoints need a Unix platform",
    ))
}

#[derive(Debug)]
enum BoundSocket {
    Tcp(std::net::TcpListener),
    #[cfg(unix)]
    Unix(std::os::unix::net::UnixListener, SocketFile),
    #[cfg(not(unix))]
    Unix(std::net::TcpListener, SocketFile),
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
            (BoundSocket::Unix(_, file), _) => format!("unix://{}", file.path.display()),
            (BoundSocket::Tcp(l), ep) => format!("{}://{}", ep.scheme(), l.local_addr()?),
        })
    }

    /// Registers the listener with the current runtime; `security` runs over every connection
    /// it accepts (see [`Listener::secure`]).
    pub(crate) fn into_async(self, security: ServerSecurity) -> std::io::Result<Listener> {
        let (socket, unlink) = match self.socket {
            BoundSocket::Tcp(l) => (ListenSocket::Tcp(TcpListener::from_std(l)?), None),
            #[cfg(unix)]
            BoundSocket::Unix(l, file) => (
                ListenSocket::Unix(tokio::net::UnixListener::from_std(l)?),
                Some(file),
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

/// A bound Unix socket's file, removed when its listener goes away, unless the path names
/// another file by then: a new host that took the address over while this one drained (the
/// old file removed, a new socket bound at the path) keeps its file.
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    /// The file's device and inode when it was bound.
    id: Option<(u64, u64)>,
}

impl SocketFile {
    /// The file just bound at `path`.
    fn bound(path: &Path) -> SocketFile {
        SocketFile {
            path: path.to_path_buf(),
            id: file_id(path),
        }
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The device and inode of the file at `path` (not following a symlink).
#[cfg(unix)]
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn file_id(_: &Path) -> Option<(u64, u64)> {
    None
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
    tls: Option<std::sync::Arc<super::tls::AcceptorSlot>>,
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
    /// The security layer of `endpoint` with the host's TLS settings. A TLS endpoint needs
    /// them (and the `tls` feature).
    pub(crate) fn for_endpoint(
        endpoint: &Endpoint,
        tls: &ServerTlsSettings,
    ) -> Result<ServerSecurity, Error> {
        if !endpoint.is_tls() {
            return Ok(ServerSecurity::default());
        }
        #[cfg(feature = "tls")]
        {
            let tls = tls.as_ref().ok_or_else(|| {
                Error::new(
                    Kind::Config,
                    format!(
                        "{endpoint}: a TLS endpoint needs a certificate: call HostBuilder::tls"
                    ),
                )
            })?;
            Ok(ServerSecurity {
                tls: Some(super::tls::AcceptorSlot::new(tls, endpoint.alpn())),
            })
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = tls;
            Err(tls_feature_needed(endpoint))
        }
    }
}

#[cfg(feature = "tls")]
impl ServerSecurity {
    /// The endpoint's TLS acceptor, which a certificate reload replaces (`None` on plain
    /// schemes).
    pub(crate) fn tls_slot(&self) -> Option<&std::sync::Arc<super::tls::AcceptorSlot>> {
        self.tls.as_ref()
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
    _unlink: Option<SocketFile>,
}

impl Listener {
    /// The endpoint this listener serves.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Accepts one raw connection, with the other end's address (`None` on a Unix socket).
    pub(crate) async fn accept(&self) -> std::io::Result<(Box<dyn Io>, Option<SocketAddr>)> {
        match &self.socket {
            ListenSocket::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                tune(&s)?;
                Ok((Box::new(s), Some(peer)))
            }
            #[cfg(unix)]
            ListenSocket::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok((Box::new(s), None))
            }
        }
    }

    /// Runs the security layer of the endpoint over an accepted connection: the TLS handshake
    /// on TLS schemes (failing for a peer that does not speak TLS, or lacks a client
    /// certificate the host requires), nothing on plain ones.
    pub(crate) async fn secure(&self, io: Box<dyn Io>) -> std::io::Result<SecuredStream> {
        #[cfg(feature = "tls")]
        if let Some(slot) = &self.security.tls {
            return super::tls::accept(&slot.current(), io).await;
        }
        // A TLS endpoint without an acceptor cannot start (see `ServerSecurity::for_endpoint`).
        debug_assert!(!self.endpoint.is_tls());
        Ok(SecuredStream {
            io,
            alpn: None,
            peer_certificates: None,
        })
    }
}

impl Endpoint {
    /// Runs the security layer of this endpoint over a raw client connection: on TLS schemes,
    /// the handshake with `tls` (the system roots if unset), offering the ALPN protocols
    /// `alpn` (usually [`Endpoint::alpn`]); nothing on plain schemes.
    ///
    /// Errors are `Connect` errors naming the endpoint and rustls's reason (e.g. "invalid peer
    /// certificate: UnknownIssuer"), or `Config` errors for unusable settings.
    pub(crate) async fn secure_client(
        &self,
        io: Box<dyn Io>,
        tls: &ClientTlsSettings,
        alpn: &[&[u8]],
    ) -> Result<SecuredStream, Error> {
        if !self.is_tls() {
            return Ok(SecuredStream {
                io,
                alpn: None,
                peer_certificates: None,
            });
        }
        #[cfg(feature = "tls")]
        {
            use super::tls::{ClientTls, TlsConnectError};
            let system;
            let tls = match tls {
                Some(tls) => tls,
                None => {
                    system = ClientTls::default_for_process().await?;
                    &system
                }
            };
            match tls.connect(io, self.host(), alpn).await {
                Ok((io, alpn)) => Ok(SecuredStream {
                    io,
                    alpn,
                    peer_certificates: None,
                }),
                Err(TlsConnectError::Config(e)) => Err(e),
                Err(TlsConnectError::Handshake(e)) => {
                    let message = tls_handshake_failure(self, tls, &e);
                    Err(Error::new(Kind::Connect, message).with_source(e))
                }
            }
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = (io, tls, alpn);
            Err(tls_feature_needed(self))
        }
    }
}

/// Why a client's TLS handshake with `ep` failed, and for the failures a newcomer meets (a
/// port that does not serve TLS, a certificate for another name), what to do.
#[cfg(feature = "tls")]
fn tls_handshake_failure(ep: &Endpoint, tls: &super::tls::ClientTls, e: &std::io::Error) -> String {
    use rustls::{CertificateError, Error as TlsError, InvalidMessage};
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return format!(
            "{ep}: the host closed the connection during the TLS handshake, so it does not \
             seem to serve TLS on this port. Connect with the plain scheme it serves there \
             (tcp:// for keel-wire, http:// for HTTP), or to the port where it serves TLS"
        );
    }
    match e.get_ref().and_then(|e| e.downcast_ref::<TlsError>()) {
        Some(TlsError::InvalidMessage(InvalidMessage::InvalidContentType)) => format!(
            "{ep}: the host answered in plaintext, not TLS, as an HTTP server does, so it does \
             not serve TLS on this port. Connect with an http:// URL, or to the port where the \
             host serves TLS"
        ),
        Some(TlsError::InvalidCertificate(
            c @ (CertificateError::NotValidForName
            | CertificateError::NotValidForNameContext { .. }),
        )) => {
            let checked = tls.server_name().unwrap_or(ep.host());
            format!(
                "{ep}: the host's certificate is not valid for `{checked}`, the name this \
                 client checked ({c}). Connect by a name the certificate has, or name one of \
                 them with ClientTls::with_server_name"
            )
        }
        Some(TlsError::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)) => {
            format!(
                "{ep}: the host serves TLS on this port, but for another protocol than {}:// \
                 (TLS found none both speak, ALPN). Connect with the URL scheme it serves \
                 there: tcps:// for keel-wire, https:// for HTTP",
                ep.scheme()
            )
        }
        _ => format!("{ep}: TLS handshake failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_endpoint_needs_settings_or_the_feature() {
        let ep = Endpoint::parse("tcps://127.0.0.1:0").unwrap();
        let e = ServerSecurity::for_endpoint(&ep, &Default::default()).unwrap_err();
        assert_eq!(e.kind(), Kind::Config);
        let expected = if cfg!(feature = "tls") {
            "call HostBuilder::tls"
        } else {
            "need keel's `tls` feature"
        };
        assert!(e.to_string().contains(expected), "{e}");
        assert!(e.to_string().contains("tcps://127.0.0.1:0"), "{e}");
        let plain = Endpoint::parse("tcp://127.0.0.1:0").unwrap();
        ServerSecurity::for_endpoint(&plain, &Default::default()).unwrap();
    }
}

#[cfg(test)]
mod backlog_tests {
    use super::*;

    #[test]
    fn the_default_backlog_follows_somaxconn() {
        assert_eq!(backlog_from(Some("4096\n")), 4096);
        assert_eq!(backlog_from(Some("128")), 128);
        assert_eq!(backlog_from(Some("1000000")), MAX_DEFAULT_BACKLOG);
        for unreadable in [None, Some(""), Some("0"), Some("-1"), Some("many")] {
            assert_eq!(backlog_from(unreadable), FALLBACK_BACKLOG, "{unreadable:?}");
        }
        #[cfg(target_os = "linux")]
        if let Ok(t) = std::fs::read_to_string("/proc/sys/net/core/somaxconn") {
            let n: u32 = t.trim().parse().unwrap();
            assert_eq!(system_backlog(), n.min(MAX_DEFAULT_BACKLOG));
        }
        assert_eq!(
            crate::host::HostConfig::default().listen_backlog,
            system_backlog()
        );
    }

    /// More connects than the old default (1,024) complete while nobody accepts: the kernel
    /// queues them because the listener asked for the system's limit. (With a full accept
    /// queue Linux drops the SYN, and the connect waits a second for its retry.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_listener_queues_up_to_the_system_limit() {
        const N: usize = 1500;
        let backlog = system_backlog();
        if (backlog as usize) < N {
            eprintln!("somaxconn is {backlog}: nothing to show beyond 1,024 here");
            return;
        }
        let ep = Endpoint::parse("tcp://127.0.0.1:0").unwrap();
        let bound = ep.bind(backlog).unwrap();
        let BoundSocket::Tcp(listener) = &bound.socket else {
            unreachable!()
        };
        let addr = listener.local_addr().unwrap();
        // Blocking connects, none accepted; each must complete at once, not after a SYN retry.
        let retry = std::time::Duration::from_millis(900);
        let conns: Vec<_> = (0..N)
            .map(|i| {
                std::net::TcpStream::connect_timeout(&addr, retry)
                    .unwrap_or_else(|e| panic!("connect {} of {N} (none accepted): {e}", i + 1))
            })
            .collect();
        assert_eq!(conns.len(), N);
    }
}

#[cfg(test)]
mod keepalive_tests {
    use super::*;

    #[tokio::test]
    async fn tcp_connections_are_tuned_with_keepalive() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        for s in [client.unwrap(), accepted.unwrap().0] {
            tune(&s).unwrap();
            let sock = socket2::SockRef::from(&s);
            assert!(s.nodelay().unwrap());
            assert!(sock.keepalive().unwrap());
            assert_eq!(sock.tcp_keepalive_time().unwrap(), TCP_KEEPALIVE_TIME);
            #[cfg(target_os = "linux")]
            {
                assert_eq!(
                    sock.tcp_keepalive_interval().unwrap(),
                    TCP_KEEPALIVE_INTERVAL
                );
                assert_eq!(sock.tcp_keepalive_retries().unwrap(), TCP_KEEPALIVE_RETRIES);
            }
        }
    }
}
