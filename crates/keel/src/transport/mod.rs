//! How bytes get between two machines: endpoint addresses, sockets (TCP and Unix) and TLS.
//! Knows nothing of calls or of any binding's protocol; takes plain
//! settings (TLS settings, timeouts), never a host's or a client's configuration.
//!
//! | URL | binding |
//! |-----|---------|
//! | `tcp://host:port` | keel wire protocol over TCP |
//! | `tcps://host:port` | keel wire protocol over TLS |
//! | `unix:///path/to/socket` | keel wire protocol over a Unix socket |
//! | `http://host:port` | HTTP/1.1 and HTTP/2 (prior knowledge) on one port |
//! | `https://host:port` | HTTP/1.1 and HTTP/2 over TLS (ALPN) |
//! | `grpc://host:port` | clients only: gRPC over HTTP/2 (prior knowledge) |
//! | `grpcs://host:port` | clients only: gRPC over HTTP/2 on TLS (ALPN `h2`) |
//!
//! Listening and connecting happen in two steps: the raw socket ([`socket::Listener::accept`],
//! [`Endpoint::connect_raw`]) and the security layer on top of it
//! ([`Endpoint::secure_client`], [`socket::Listener::secure`]), so that a slow TLS handshake
//! runs in the connection's own task, never in the accept loop.
//!
//! TLS endpoints agree on their protocol with ALPN ([`Endpoint::alpn`]): `keel/1` on `tcps`;
//! `h2` or `http/1.1` on `https`; `h2` on `grpcs`. There is no plaintext fallback in either
//! direction.

pub(crate) mod address;
pub(crate) mod sniff;
pub(crate) mod socket;
#[cfg(feature = "tls")]
pub mod tls;

use std::fmt;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, WriteHalf};

pub(crate) use address::{Endpoint, Protocol};

/// A byte stream keel can run its protocols over.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Splits the stream into a read half and a write half that can be used from different
    /// tasks at once. The default is `tokio::io::split`, whose halves share a lock taken on
    /// every poll of either; TCP and Unix sockets override it with their own halves, which
    /// need none (the socket can be read and written at once).
    fn split(self: Box<Self>) -> (IoReader, IoWriter) {
        let (rd, wr) = tokio::io::split(self);
        (Box::new(rd), IoWriter(Box::new(wr)))
    }
}

impl Io for tokio::net::TcpStream {
    fn split(self: Box<Self>) -> (IoReader, IoWriter) {
        let (rd, wr) = self.into_split();
        (Box::new(rd), IoWriter(Box::new(wr)))
    }
}

#[cfg(unix)]
impl Io for tokio::net::UnixStream {
    fn split(self: Box<Self>) -> (IoReader, IoWriter) {
        let (rd, wr) = self.into_split();
        (Box::new(rd), IoWriter(Box::new(wr)))
    }
}

#[cfg(feature = "tls")]
impl Io for tokio_rustls::server::TlsStream<Box<dyn Io>> {}

#[cfg(feature = "tls")]
impl Io for tokio_rustls::client::TlsStream<Box<dyn Io>> {}

/// The read half of a connection ([`Io::split`]).
pub(crate) type IoReader = Box<dyn AsyncRead + Unpin + Send>;

/// The write half of a connection ([`Io::split`]), or of any stream split with
/// `tokio::io::split`.
pub(crate) struct IoWriter(Box<dyn AsyncWrite + Unpin + Send>);

impl From<WriteHalf<Box<dyn Io>>> for IoWriter {
    fn from(wr: WriteHalf<Box<dyn Io>>) -> IoWriter {
        IoWriter(Box::new(wr))
    }
}

impl fmt::Debug for IoWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IoWriter")
    }
}

impl AsyncWrite for IoWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

/// A connected (and, for TLS schemes, secured) byte stream, with what its TLS handshake agreed.
pub(crate) struct SecuredStream {
    pub(crate) io: Box<dyn Io>,
    /// The protocol agreed by TLS ALPN, if any (`h2`, `http/1.1`, `keel/1`).
    pub(crate) alpn: Option<Vec<u8>>,
    /// The peer's TLS certificate chain (DER, its own first), when it presented one.
    pub(crate) peer_certificates: Option<std::sync::Arc<[bytes::Bytes]>>,
}

impl fmt::Debug for SecuredStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecuredStream")
            .field("alpn", &self.alpn.as_deref().map(String::from_utf8_lossy))
            .finish_non_exhaustive()
    }
}

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
pub(crate) fn tls_feature_needed(endpoint: &Endpoint) -> crate::core::error::Error {
    crate::core::error::Error::new(
        crate::core::error::Kind::Config,
        format!("{endpoint}: TLS endpoints need keel's `tls` feature, which this build leaves out"),
    )
}

/// The client's TLS settings as the transport takes them (nothing in builds without TLS).
#[cfg(feature = "tls")]
pub(crate) type ClientTlsSettings = Option<tls::ClientTls>;
/// The client's TLS settings as the transport takes them (nothing in builds without TLS).
#[cfg(not(feature = "tls"))]
pub(crate) type ClientTlsSettings = ();

/// The host's TLS settings as the transport takes them (nothing in builds without TLS).
#[cfg(feature = "tls")]
pub(crate) type ServerTlsSettings = Option<tls::ServerTls>;
/// The host's TLS settings as the transport takes them (nothing in builds without TLS).
#[cfg(not(feature = "tls"))]
pub(crate) type ServerTlsSettings = ();
