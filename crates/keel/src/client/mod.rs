//! The client side: a [`Channel`] is one logical connection to a host, shared by every client
//! (and every clone of a client) built on it. Calls are multiplexed over one connection.

mod conn;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::endpoint::{Endpoint, Protocol};
use crate::error::{Error, Kind, Status};
use crate::service::Payload;
use crate::stream::ByteStream;
use conn::Conn;

/// Client settings. Every field has a documented default.
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
        }
    }
}

impl ClientConfig {
    /// These settings with `tls` for TLS endpoints (see [`ClientConfig::tls`]).
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: crate::tls::ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }
}

/// Per-call options carried by a generated client (see its `with_deadline`).
#[derive(Debug, Clone, Copy, Default)]
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
    endpoint: Endpoint,
    config: ClientConfig,
    /// The live connection, if any. A std mutex: held only to clone or swap the `Arc`.
    conn: Mutex<Option<Arc<Conn>>>,
    /// Serialises connection attempts so a burst of first calls opens one connection.
    connecting: tokio::sync::Mutex<()>,
}

impl Channel {
    /// A channel to `url` with default settings; nothing is connected yet.
    pub fn new(url: &str) -> Result<Channel, Error> {
        Channel::with_config(url, ClientConfig::default())
    }

    /// A channel to `url` with `config`; nothing is connected yet.
    pub fn with_config(url: &str, config: ClientConfig) -> Result<Channel, Error> {
        let endpoint = Endpoint::parse(url)?;
        if endpoint.protocol() == Protocol::Http {
            return Err(Error::new(
                Kind::Config,
                format!("{endpoint}: the HTTP binding is not built yet"),
            ));
        }
        #[cfg(not(feature = "tls"))]
        if endpoint.is_tls() {
            return Err(crate::endpoint::tls_feature_needed(&endpoint));
        }
        Ok(Channel {
            inner: Arc::new(Inner {
                endpoint,
                config,
                conn: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Creates a channel and opens it: the returned channel is connected and past the handshake.
    pub async fn connect(url: &str) -> Result<Channel, Error> {
        let ch = Channel::new(url)?;
        ch.open().await?;
        Ok(ch)
    }

    /// Connects and completes the handshake now, unless already connected.
    pub async fn open(&self) -> Result<(), Error> {
        self.conn().await.map(drop)
    }

    /// Closes the connection. Calls in flight fail with a connection error; the next call
    /// reconnects.
    pub async fn close(&self) {
        let conn = self
            .inner
            .conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(c) = conn {
            c.close("closed by the client");
        }
    }

    /// Whether a connection is open right now.
    pub fn is_connected(&self) -> bool {
        self.current().is_some()
    }

    /// The settings this channel was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    fn current(&self) -> Option<Arc<Conn>> {
        let guard = self.inner.conn.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().filter(|c| c.is_open()).cloned()
    }

    async fn conn(&self) -> Result<Arc<Conn>, Error> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _connecting = self.inner.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let conn = Arc::new(Conn::connect(&self.inner.endpoint, &self.inner.config).await?);
        *self.inner.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Sends one request and waits for its reply. The outer error is the caller's side (could
    /// not send, no reply in time); the inner `Status` is the host's answer.
    ///
    /// The deadline bounds the call until its reply arrives; a streamed reply then flows until
    /// it ends or the caller drops it.
    pub(crate) async fn call(
        &self,
        call: Outgoing,
        options: &CallOptions,
    ) -> Result<Result<Payload, Status>, Error> {
        let deadline = options.deadline.unwrap_or(self.inner.config.deadline);
        let deadline = Instant::now() + deadline;
        let conn = match tokio::time::timeout_at(deadline.into(), self.conn()).await {
            Ok(conn) => conn?,
            Err(_) => {
                return Err(Error::new(
                    Kind::Timeout,
                    "deadline passed while connecting",
                ))
            }
        };
        conn.call(call, deadline).await
    }
}

/// One call on its way out, whatever the binding.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) service: &'static str,
    pub(crate) operation: &'static str,
    pub(crate) one_way: bool,
    /// The encoded arguments.
    pub(crate) body: Bytes,
    /// The request stream, for operations that take one.
    pub(crate) upload: Option<ByteStream>,
    /// The operation streams its reply.
    pub(crate) download: bool,
}
