//! The keel wire protocol binding (`tcp://`, `tcps://`, `unix://`): every call of a client
//! multiplexed over one connection, in frames from `keel-wire`.
//!
//! - [`client`]: one client connection ([`client::WireClientConn`]);
//! - [`read`]: a client connection's read side: a reader task routing replies, or the one
//!   call in flight reading its own;
//! - [`server`]: one host connection, handshake then a reader handing requests to dispatch;
//! - [`conn`]: one connection's state, the same on both ends: keel-wire's sans-IO core plus
//!   the async ends of its streams;
//! - [`sink`]: one connection's write path, the same on both ends (frames written by the thread
//!   that has them; a flusher task only when the socket is full).
//!
//! [`WireClient`] is the binding's [`ClientTransport`]: the channel's one connection, opened
//! on first use and replaced on the next call after it breaks.

pub(crate) mod client;
mod conn;
mod read;
pub(crate) mod server;
mod sink;

pub(crate) use server::serve;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Again, Attempt, BoxFuture, ClientSettings, ClientTransport, ConnCounts, Outgoing};
use crate::core::error::{Error, Kind};
use crate::runtime::clock;
use crate::transport::Endpoint;
use client::WireClientConn;

/// A channel's keel-wire connection.
#[derive(Debug)]
pub(crate) struct WireClient {
    endpoint: Endpoint,
    settings: ClientSettings,
    /// The connection new calls go to, if any. A std mutex: held only to clone or swap an
    /// `Arc`.
    conn: Mutex<Option<Arc<WireClientConn>>>,
    /// Connections the host said GoAway on: no new calls, but the calls and streams already on
    /// them finish there. Kept until they close.
    draining: Mutex<Vec<Arc<WireClientConn>>>,
    /// Serialises connection attempts so a burst of first calls opens one connection.
    connecting: tokio::sync::Mutex<()>,
    opened: AtomicU64,
}

impl WireClient {
    pub(crate) fn new(endpoint: Endpoint, settings: ClientSettings) -> WireClient {
        WireClient {
            endpoint,
            settings,
            conn: Mutex::new(None),
            draining: Mutex::new(Vec::new()),
            connecting: tokio::sync::Mutex::new(()),
            opened: AtomicU64::new(0),
        }
    }

    /// The connection new calls go to: open, and the host has not said GoAway.
    fn current(&self) -> Option<Arc<WireClientConn>> {
        let guard = self.conn.lock();
        guard.as_ref().filter(|c| c.takes_calls()).cloned()
    }

    /// The live connection, connecting if there is none.
    async fn conn(&self) -> Result<Arc<WireClientConn>, Error> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let conn = Arc::new(WireClientConn::connect(&self.endpoint, &self.settings).await?);
        if self.opened.fetch_add(1, Ordering::Relaxed) > 0 {
            self.settings.reconnects.increment(1);
        }
        let old = self.conn.lock().replace(conn.clone());
        let mut draining = self.draining.lock();
        draining.retain(|c| c.is_open());
        // Dropping a connection closes it: one the host is draining stays until it closes.
        if let Some(old) = old.filter(|c| c.is_open()) {
            draining.push(old);
        }
        Ok(conn)
    }

    /// [`conn`](WireClient::conn), failing with a timeout at `deadline`.
    async fn conn_by(&self, deadline: Instant) -> Result<Arc<WireClientConn>, Error> {
        match tokio::time::timeout_at(clock::to_tokio(deadline), self.conn()).await {
            Ok(conn) => conn,
            Err(_) => Err(Error::new(
                Kind::Timeout,
                "deadline passed while connecting",
            )),
        }
    }

    /// One attempt of `call` on the channel's connection, connecting first if there is none
    /// (see [`ClientTransport::attempt`]). A connection the host said GoAway on takes no new
    /// calls: the next attempt connects anew.
    ///
    /// `started`: when the caller started the call (read from the clock just before) and its
    /// time budget then; its request is sent with those as its "now" and its remaining budget
    /// if nothing waited since (a connection was up), sparing a clock read and a subtraction.
    pub(crate) async fn attempt_inner(
        &self,
        call: &mut Outgoing,
        deadline: Instant,
        started: Option<(Instant, Duration)>,
    ) -> Attempt {
        // Connected (the common case): no timer to set up. Connecting is boxed: its state is
        // large (~2 KB), and every call's future would otherwise carry it.
        let (conn, started) = match self.current() {
            Some(conn) => (conn, started),
            None => match Box::pin(self.conn_by(deadline)).await {
                Ok(conn) => (conn, None),
                Err(e) if e.kind() == Kind::Connect => {
                    return Attempt::again(Again::NoConnection(e))
                }
                Err(e) => return Attempt::Answered(Err(e)),
            },
        };
        let (now, remaining) = started.unwrap_or_else(|| {
            let now = clock::now();
            (now, deadline.saturating_duration_since(now))
        });
        conn.attempt(call, deadline, now, remaining).await
    }
}

impl ClientTransport for WireClient {
    fn attempt<'a>(&'a self, call: &'a mut Outgoing, deadline: Instant) -> BoxFuture<'a, Attempt> {
        Box::pin(self.attempt_inner(call, deadline, None))
    }

    fn open(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            // Calls pipeline the handshake; `open` completes it.
            let conn = self.conn().await?;
            let timeout = self.settings.connect_timeout;
            match tokio::time::timeout(timeout, conn.handshake()).await {
                Ok(done) => done,
                Err(_) => Err(Error::new(
                    Kind::Connect,
                    format!("{}: no handshake within {timeout:?}", self.endpoint),
                )),
            }
        })
    }

    fn close(&self) {
        let conn = self.conn.lock().take();
        let draining = std::mem::take(&mut *self.draining.lock());
        for c in conn.into_iter().chain(draining) {
            c.close("closed by the client");
        }
    }

    fn is_connected(&self) -> bool {
        self.current().is_some()
    }

    fn counts(&self) -> ConnCounts {
        let current = self.conn.lock().clone();
        let draining = self.draining.lock().clone();
        let open = current
            .iter()
            .chain(draining.iter())
            .filter(|c| c.is_open())
            .count();
        let opened = self.opened.load(Ordering::Relaxed);
        ConnCounts {
            opened,
            closed: opened - open as u64,
            open,
            sent_early: 0,
        }
    }
}
