//! The client side: a [`Channel`] is one logical connection to a host, shared by every client
//! (and every clone of a client) built on it. It owns its configuration ([`ChannelBuilder`])
//! and hands plain settings to its binding: on keel-wire, calls are multiplexed over one
//! connection; on HTTP, see [`crate::http`].

mod call;
mod rt;

pub use call::{call, call_fallible, call_one_way, call_stream, call_stream_fallible};
pub(crate) use rt::block_on;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bindings::{self, Answer, ClientSettings, ClientTransport, HttpVersion, Outgoing};
use crate::core::error::Error;
use crate::transport::Endpoint;

/// A channel's settings, as [`ChannelBuilder`] collects them and [`Channel::config`] reports
/// them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Deadline for each call unless the call sets its own. Default: 60 s.
    pub deadline: Duration,
    /// Limit for connecting plus the handshake. Default: 10 s.
    pub connect_timeout: Duration,
    /// Largest reply body this client accepts. Default: 4 MiB.
    pub max_message_size: u32,
    /// Largest flow-control window one streamed download may grow to (it starts at 256 KiB
    /// and grows toward the link's bandwidth-delay product). Default: 8 MiB.
    pub max_stream_window: u32,
    /// Whom to trust on TLS endpoints (`tcps://`, `https://`), and the client's certificate for
    /// mutual TLS. Default: `None`, which trusts the system's root certificates (loaded once per
    /// process, on the first TLS connection).
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::ClientTls>,
    /// The HTTP version spoken on `http://` and `https://` endpoints. Default:
    /// [`HttpVersion::Auto`].
    pub http_version: HttpVersion,
    /// HTTP/1.1: the most connections open at once (each carries one call at a time); a call
    /// that finds them all busy waits for one. Default: 32.
    pub http_max_connections: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            deadline: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_message_size: keel_wire::DEFAULT_MAX_MESSAGE_SIZE,
            max_stream_window: keel_wire::DEFAULT_MAX_WINDOW,
            #[cfg(feature = "tls")]
            tls: None,
            http_version: HttpVersion::Auto,
            http_max_connections: 32,
        }
    }
}

impl ClientConfig {
    /// What the bindings need of these settings.
    fn settings(&self) -> ClientSettings {
        ClientSettings {
            connect_timeout: self.connect_timeout,
            max_message_size: self.max_message_size,
            max_stream_window: self.max_stream_window,
            #[cfg(feature = "tls")]
            tls: self.tls.clone(),
            #[cfg(not(feature = "tls"))]
            tls: (),
            http_version: self.http_version,
            http_max_connections: self.http_max_connections,
        }
    }
}

/// Builds a [`Channel`]: the host's URL, then settings, then [`ChannelBuilder::build`] (nothing
/// connected yet) or [`ChannelBuilder::connect`] (connected and past the handshake). Every
/// setter documents its default.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn example() -> Result<(), keel::Error> {
/// let channel = keel::Channel::builder("http://127.0.0.1:7000")
///     .deadline(Duration::from_secs(5))
///     .http_version(keel::HttpVersion::Http2)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ChannelBuilder {
    url: String,
    config: ClientConfig,
}

impl ChannelBuilder {
    /// Deadline for each call unless the call sets its own. Default: 60 s.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.config.deadline = deadline;
        self
    }

    /// Limit for connecting plus the handshake. Default: 10 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Largest reply body this client accepts. Default: 4 MiB.
    pub fn max_message_size(mut self, bytes: u32) -> Self {
        self.config.max_message_size = bytes;
        self
    }

    /// Largest flow-control window one streamed download may grow to. Default: 8 MiB.
    pub fn max_stream_window(mut self, bytes: u32) -> Self {
        self.config.max_stream_window = bytes;
        self
    }

    /// Whom to trust on TLS endpoints, and the client's certificate for mutual TLS. Default:
    /// the system's root certificates, no client certificate.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::ClientTls) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// The HTTP version spoken on `http://` and `https://` endpoints. Default:
    /// [`HttpVersion::Auto`].
    pub fn http_version(mut self, version: HttpVersion) -> Self {
        self.config.http_version = version;
        self
    }

    /// HTTP/1.1: the most connections open at once. Default: 32.
    pub fn http_max_connections(mut self, n: usize) -> Self {
        self.config.http_max_connections = n;
        self
    }

    /// The channel; nothing is connected yet. Fails for an invalid URL or a binding this build
    /// leaves out.
    pub fn build(self) -> Result<Channel, Error> {
        let endpoint = Endpoint::parse(&self.url)?;
        #[cfg(not(feature = "tls"))]
        if endpoint.is_tls() {
            return Err(crate::transport::tls_feature_needed(&endpoint));
        }
        let transport = bindings::client(endpoint, self.config.settings())?;
        Ok(Channel {
            inner: Arc::new(Inner {
                config: self.config,
                transport,
                calls: AtomicU64::new(0),
            }),
        })
    }

    /// The channel, connected and past the handshake.
    pub async fn connect(self) -> Result<Channel, Error> {
        let channel = self.build()?;
        channel.open().await?;
        Ok(channel)
    }
}

/// A channel's connection and call counters, from [`Channel::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelStats {
    /// Connections opened (connected and, on keel-wire, past the handshake), since creation.
    pub connections_opened: u64,
    /// Of those, connections closed since (by either side, or broken).
    pub connections_closed: u64,
    /// Connections open now.
    pub connections_open: usize,
    /// Calls made on the channel, whatever their outcome.
    pub calls: u64,
}

/// Per-call options carried by a generated client (see its `with_deadline`).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct CallOptions {
    deadline: Option<Duration>,
}

impl CallOptions {
    /// These options with a per-call deadline.
    pub fn with_deadline(self, deadline: Duration) -> CallOptions {
        CallOptions {
            deadline: Some(deadline),
        }
    }
}

/// One logical connection to a keel host: connected by [`Channel::open`] (or lazily by the first
/// call), kept for the channel's life, reconnected on the next call after it breaks.
///
/// Cheap to clone; clones share the connection.
#[derive(Clone, Debug)]
pub struct Channel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ClientConfig,
    transport: Box<dyn ClientTransport>,
    /// Calls made, for [`Channel::stats`].
    calls: AtomicU64,
}

impl Channel {
    /// A builder for a channel to `url` (e.g. `tcp://127.0.0.1:7000`).
    pub fn builder(url: impl Into<String>) -> ChannelBuilder {
        ChannelBuilder {
            url: url.into(),
            config: ClientConfig::default(),
        }
    }

    /// A channel to `url` with default settings; nothing is connected yet.
    pub fn new(url: &str) -> Result<Channel, Error> {
        Channel::builder(url).build()
    }

    /// Creates a channel with default settings and opens it: the returned channel is connected
    /// and past the handshake.
    pub async fn connect(url: &str) -> Result<Channel, Error> {
        Channel::builder(url).connect().await
    }

    /// Connects and completes the handshake now, unless already connected. (HTTP/1.1: opens
    /// one pooled connection unless one is open.)
    pub async fn open(&self) -> Result<(), Error> {
        self.inner.transport.open().await
    }

    /// Closes the connection. Calls in flight fail with a connection error; the next call
    /// reconnects.
    pub async fn close(&self) {
        self.inner.transport.close();
    }

    /// Whether a connection is open right now.
    pub fn is_connected(&self) -> bool {
        self.inner.transport.is_connected()
    }

    /// The settings this channel was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Connection and call counters: e.g. that a client's calls share one connection.
    pub fn stats(&self) -> ChannelStats {
        let counts = self.inner.transport.counts();
        ChannelStats {
            connections_opened: counts.opened,
            connections_closed: counts.closed,
            connections_open: counts.open,
            calls: self.inner.calls.load(Ordering::Relaxed),
        }
    }

    /// Sends one request and waits for its reply. The outer error is the caller's side (could
    /// not send, no reply in time); the inner `Status` is the host's answer.
    ///
    /// The deadline bounds the call until its reply arrives; a streamed reply then flows until
    /// it ends or the caller drops it.
    pub(crate) async fn call(&self, call: Outgoing, options: &CallOptions) -> Answer {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let deadline = options.deadline.unwrap_or(self.inner.config.deadline);
        self.inner
            .transport
            .call(call, Instant::now() + deadline)
            .await
    }
}
