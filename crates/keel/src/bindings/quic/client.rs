//! The client side of `quic://`: the channel's one QUIC connection, each call on a
//! bidirectional stream of its own, and 0-RTT on resumption for calls safe to replay.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_wire::{Codec, Frame, Limits};
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use super::client_transport_config;
use super::frames::{self, code, FrameReader, PumpFail, ReadFail};
use crate::bindings::{
    Again, Attempt, BoxFuture, ClientSettings, ClientTransport, ConnCounts, Outgoing, Replied,
    Waiting,
};
use crate::core::compress::Compression;
use crate::core::error::{Error, Kind};
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::runtime::clock;
use crate::transport::tls::ClientTls;
use crate::transport::Endpoint;

/// Largest StreamData frame a client writes (a request stream's chunks are split to it).
const MAX_CHUNK: usize = 64 * 1024;

/// A channel's `quic://` connection.
#[derive(Debug)]
pub(crate) struct QuicClient {
    endpoint: Endpoint,
    settings: ClientSettings,
    /// The UDP socket connections go out from (one per client, made on first use).
    socket: Mutex<Option<quinn::Endpoint>>,
    conn: Mutex<Option<Arc<ClientConn>>>,
    /// Serialises connection attempts so a burst of first calls opens one connection.
    connecting: tokio::sync::Mutex<()>,
    opened: AtomicU64,
    /// Calls answered that went out as 0-RTT data.
    early: Arc<AtomicU64>,
}

/// One QUIC connection of a client.
#[derive(Debug)]
struct ClientConn {
    connection: quinn::Connection,
    /// `None` while the handshake runs (calls sent now are 0-RTT data); then whether the host
    /// accepted the 0-RTT data.
    handshake: watch::Receiver<Option<bool>>,
    /// The host said GoAway: no new calls here.
    going_away: Arc<AtomicBool>,
    /// Calls waiting for their replies, for the liveness check ([`watch_busy`]).
    waiting: Arc<Waiting>,
    /// Why the liveness check closed the connection, if it did.
    unresponsive: Arc<std::sync::OnceLock<String>>,
}

impl ClientConn {
    fn is_open(&self) -> bool {
        self.connection.close_reason().is_none()
    }

    fn takes_calls(&self) -> bool {
        self.is_open() && !self.going_away.load(Ordering::Acquire)
    }
}

impl QuicClient {
    pub(crate) fn new(endpoint: Endpoint, settings: ClientSettings) -> QuicClient {
        QuicClient {
            endpoint,
            settings,
            socket: Mutex::new(None),
            conn: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            opened: AtomicU64::new(0),
            early: Arc::new(AtomicU64::new(0)),
        }
    }

    fn current(&self) -> Option<Arc<ClientConn>> {
        self.conn
            .lock()
            .as_ref()
            .filter(|c| c.takes_calls())
            .cloned()
    }

    /// The UDP socket for a host at `addr` (one of its address family).
    fn socket(&self, addr: SocketAddr) -> Result<quinn::Endpoint, Error> {
        let mut socket = self.socket.lock();
        if let Some(s) = socket.as_ref() {
            if s.local_addr().is_ok_and(|l| l.is_ipv4() == addr.is_ipv4()) {
                return Ok(s.clone());
            }
        }
        let local: SocketAddr = if addr.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let s = quinn::Endpoint::client(local).map_err(|e| {
            Error::new(
                Kind::Connect,
                format!("{}: cannot open a UDP socket: {e}", self.endpoint),
            )
            .with_source(e)
        })?;
        *socket = Some(s.clone());
        Ok(s)
    }

    /// The live connection, connecting if there is none.
    async fn conn(&self) -> Result<Arc<ClientConn>, Error> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let conn = Arc::new(self.connect().await?);
        if self.opened.fetch_add(1, Ordering::Relaxed) > 0 {
            self.settings.reconnects.increment(1);
        }
        *self.conn.lock() = Some(conn.clone());
        Ok(conn)
    }

    /// Opens a connection. With a session to resume, it is usable at once (0-RTT) and its
    /// handshake completes beside the first calls; without, the handshake completes first.
    /// Either way the handshake must complete within the connect timeout.
    async fn connect(&self) -> Result<ClientConn, Error> {
        let ep = &self.endpoint;
        let timeout = self.settings.connect_timeout;
        let authority = ep.authority().unwrap_or_default();
        let addr = tokio::time::timeout(timeout, tokio::net::lookup_host(authority))
            .await
            .map_err(|_| connect_err(format!("{ep}: name lookup took longer than {timeout:?}")))?
            .map_err(|e| connect_err(format!("{ep}: cannot resolve {authority}: {e}")))?
            .next()
            .ok_or_else(|| connect_err(format!("{ep}: {authority} resolves to no address")))?;
        let system;
        let tls = match &self.settings.tls {
            Some(tls) => tls,
            None => {
                system = ClientTls::default_for_process().await?;
                &system
            }
        };
        let (crypto, name) = tls.quic_config(ep.host(), ep.alpn())?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(client_transport_config(
            self.settings.max_message_size,
            self.settings.max_stream_window,
            self.settings.keepalive,
            self.settings.quic_congestion,
        ));
        let connecting = self
            .socket(addr)?
            .connect_with(config, addr, &name)
            .map_err(|e| connect_err(format!("{ep}: {e}")))?;
        let (handshake_tx, handshake) = watch::channel(None);
        let connection = match connecting.into_0rtt() {
            Ok((connection, accepted)) => {
                // Resumed: calls safe to replay go now; the handshake must still complete in
                // time, or the connection is closed (and what waited for it fails).
                let c = connection.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(timeout, accepted).await {
                        Ok(accepted) => {
                            let _ = handshake_tx.send(Some(accepted));
                        }
                        Err(_) => c.close(code::TIMED_OUT, b"handshake timeout"),
                    }
                });
                connection
            }
            Err(connecting) => {
                let connection = match tokio::time::timeout(timeout, connecting).await {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => return Err(handshake_failed(ep, &e)),
                    Err(_) => return Err(no_answer(ep, timeout)),
                };
                let _ = handshake_tx.send(Some(false));
                connection
            }
        };
        let going_away = Arc::new(AtomicBool::new(false));
        tokio::spawn(watch_go_away(connection.clone(), going_away.clone()));
        let waiting = Arc::new(Waiting::default());
        let unresponsive = Arc::new(std::sync::OnceLock::new());
        if let Some(keepalive) = self.settings.keepalive {
            let watch = watch_busy(
                connection.clone(),
                waiting.clone(),
                keepalive,
                unresponsive.clone(),
            );
            tokio::spawn(watch);
        }
        Ok(ClientConn {
            connection,
            handshake,
            going_away,
            waiting,
            unresponsive,
        })
    }

    /// [`conn`](QuicClient::conn), failing with a timeout at `deadline`.
    async fn conn_by(&self, deadline: Instant) -> Result<Arc<ClientConn>, Error> {
        match tokio::time::timeout_at(clock::to_tokio(deadline), self.conn()).await {
            Ok(conn) => conn,
            Err(_) => Err(Error::new(
                Kind::Timeout,
                "deadline passed while connecting",
            )),
        }
    }

    /// One attempt of `call` (see [`ClientTransport::attempt`]).
    async fn attempt_inner(&self, call: &mut Outgoing, deadline: Instant) -> Attempt {
        let conn = match self.current() {
            Some(conn) => conn,
            None => match self.conn_by(deadline).await {
                Ok(conn) => conn,
                Err(e) if e.kind() == Kind::Connect => {
                    return Attempt::again(Again::NoConnection(e))
                }
                Err(e) => return Attempt::Answered(Err(e)),
            },
        };
        let tokio_deadline = clock::to_tokio(deadline);
        // 0-RTT data may be replayed by an attacker: only a call safe to run twice goes before
        // the handshake completes.
        let replay_safe = call.idempotent && call.upload.is_none();
        let mut handshake = conn.handshake.clone();
        if handshake.borrow().is_none() && !replay_safe {
            match tokio::time::timeout_at(tokio_deadline, handshake.wait_for(Option::is_some)).await
            {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => {
                    // The handshake did not complete (the connection was closed meanwhile).
                    let e = no_answer(&self.endpoint, self.settings.connect_timeout);
                    return Attempt::again(Again::NoConnection(e));
                }
                Err(_) => return Attempt::Answered(Err(call.timed_out())),
            }
        }
        let opened = tokio::time::timeout_at(tokio_deadline, conn.connection.open_bi()).await;
        let sent_early = handshake.borrow().is_none();
        let (mut send, recv) = match opened {
            Ok(Ok(streams)) => streams,
            Ok(Err(e)) => return self.lost_before_sending(&conn, e),
            Err(_) => return Attempt::Answered(Err(call.timed_out())),
        };
        let call_id = send.id().index();
        let _waiting = conn.waiting.enter();
        let metadata_block = match call.metadata.to_wire() {
            Ok(m) => m,
            Err(e) => return Attempt::Answered(Err(Error::new(Kind::TooLarge, e.to_string()))),
        };
        let upload = call.upload.take();
        let remaining = deadline.saturating_duration_since(clock::now());
        let request = call.wire_request(call_id, metadata_block, upload.is_some(), remaining);
        let out_codec = Codec::new(Limits::with_max_message_size(
            u32::MAX - keel_wire::MAX_HEADER,
        ));
        let bytes = match frames::encode(&out_codec, &request) {
            Ok(b) => b,
            Err(e) => {
                call.upload = upload;
                let _ = send.reset(code::CANCELLED);
                return Attempt::Answered(Err(Error::new(Kind::TooLarge, e.to_string())));
            }
        };
        // From here on, a dropped future (the caller gave up) resets the stream both ways.
        let mut guard = Guard {
            cancel: None,
            send: None,
        };
        match send.write_chunk(bytes).await {
            Ok(()) => {}
            Err(quinn::WriteError::ZeroRttRejected) => {
                call.upload = upload;
                return Attempt::again(Again::Unprocessed);
            }
            Err(quinn::WriteError::Stopped(c)) if c == code::UNPROCESSED => {
                call.upload = upload;
                return Attempt::again(Again::Unprocessed);
            }
            Err(e) => {
                call.upload = upload;
                return Attempt::Answered(Err(Error::new(Kind::Connection, e.to_string())));
            }
        }
        match upload {
            Some(stream) => {
                let (cancel, cancelled) = oneshot::channel::<()>();
                guard.cancel = Some(cancel);
                tokio::spawn(async move {
                    tokio::select! {
                        pumped = frames::pump(&mut send, &out_codec, stream, MAX_CHUNK, None) => {
                            match pumped {
                                Ok(()) => { let _ = send.finish(); }
                                Err(PumpFail::Broken | PumpFail::TimedOut) => {
                                    let _ = send.reset(code::CANCELLED);
                                }
                            }
                        }
                        // Only a sent cancel: a dropped sender (the call was answered) is not one.
                        Ok(()) = cancelled => { let _ = send.reset(code::CANCELLED); }
                    }
                });
            }
            None => {
                let _ = send.finish();
                guard.send = Some(send);
            }
        }
        let mut reader = FrameReader::new(recv, codec(self.settings.max_message_size), None, None);
        let read = tokio::time::timeout_at(tokio_deadline, reader.next()).await;
        let reply = match read {
            Err(_) => {
                let _ = reader.recv_mut().stop(code::CANCELLED);
                return Attempt::Answered(Err(call.timed_out()));
            }
            Ok(Ok(Some((Frame::Reply(reply), _)))) => reply,
            Ok(Ok(_)) => {
                return Attempt::Answered(Err(Error::new(
                    Kind::Protocol,
                    "the host ended the call's stream without a reply",
                )))
            }
            Ok(Err(ReadFail::ZeroRttRejected)) => return Attempt::again(Again::Unprocessed),
            Ok(Err(ReadFail::Reset(c))) if c == u64::from(code::UNPROCESSED) => {
                return Attempt::again(Again::Unprocessed)
            }
            Ok(Err(ReadFail::Reset(c))) => {
                return Attempt::Answered(Err(Error::new(
                    Kind::Connection,
                    format!("the host reset the call's stream (code {c})"),
                )))
            }
            Ok(Err(ReadFail::TooLarge(e))) => {
                let _ = reader.recv_mut().stop(code::PROTOCOL);
                return Attempt::Answered(Err(Error::new(Kind::TooLarge, e.to_string())));
            }
            Ok(Err(ReadFail::Malformed(e))) => {
                return Attempt::Answered(Err(Error::new(Kind::Protocol, e.to_string())))
            }
            Ok(Err(ReadFail::TimedOut)) => return Attempt::Answered(Err(call.timed_out())),
            Ok(Err(ReadFail::Broken(why))) => {
                let why = match conn.unresponsive.get() {
                    Some(silent) => format!("{}: {silent}", self.endpoint),
                    None => why,
                };
                return Attempt::Answered(Err(Error::new(Kind::Connection, why)));
            }
        };
        // Answered: nothing to reset (an upload still flowing goes on).
        guard.cancel = None;
        guard.send = None;
        if sent_early {
            self.early.fetch_add(1, Ordering::Relaxed);
        }
        let metadata = Metadata::from_wire(&reply.metadata);
        let compression = match Compression::from_wire_id(reply.compression) {
            Ok(c) => c,
            Err(id) => {
                let why = format!("the host compressed a reply with unknown id {id}");
                return Attempt::Answered(Err(Error::new(Kind::Protocol, why)));
            }
        };
        if reply.status != keel_wire::StatusCode::Ok {
            let code = StatusCode::from_wire(reply.status);
            let status = Status::from_wire_parts(code, reply.body, reply.details, metadata);
            return Attempt::Answered(Ok(Err(status)));
        }
        let payload = if call.download {
            Payload::Stream(frames::inbound(reader, None))
        } else {
            Payload::Body(reply.body)
        };
        Attempt::Answered(Ok(Ok(Replied {
            payload,
            metadata,
            compression,
        })))
    }

    /// What an attempt whose stream could not be opened reports: nothing was sent.
    fn lost_before_sending(&self, conn: &ClientConn, e: quinn::ConnectionError) -> Attempt {
        if conn.handshake.borrow().is_none() {
            let e = no_answer(&self.endpoint, self.settings.connect_timeout);
            return Attempt::again(Again::NoConnection(e));
        }
        let _ = e;
        Attempt::again(Again::NotSent)
    }
}

/// Resets the call's stream both ways unless disarmed: the caller gave up.
struct Guard {
    /// Tells the upload's task to reset its stream.
    cancel: Option<oneshot::Sender<()>>,
    send: Option<quinn::SendStream>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            let _ = cancel.send(());
        }
        if let Some(mut send) = self.send.take() {
            let _ = send.reset(code::CANCELLED);
        }
    }
}

/// The reading codec of a client: keel-wire version 2, the channel's message limit.
fn codec(max_message_size: u32) -> Codec {
    let mut codec = Codec::new(Limits::with_max_message_size(max_message_size));
    codec.set_version(2);
    codec
}

fn connect_err(message: String) -> Error {
    Error::new(Kind::Connect, message)
}

/// The host did not answer the handshake within `timeout`: UDP may be dropped on the way.
fn no_answer(ep: &Endpoint, timeout: Duration) -> Error {
    connect_err(format!(
        "{ep}: no QUIC handshake within the connect timeout ({timeout:?}): nothing answered on \
         UDP. Check that the host serves quic:// on this port; if a firewall or middlebox on \
         the way drops UDP, connect with tcps:// instead (the same calls and TLS settings), or \
         list both in a balanced channel"
    ))
}

/// The handshake failed with `e` (a certificate the client does not trust, no common ALPN).
fn handshake_failed(ep: &Endpoint, e: &quinn::ConnectionError) -> Error {
    let hint = match e {
        quinn::ConnectionError::ConnectionClosed(c) if c.error_code.to_string().contains("120") => {
            ": the host speaks QUIC on this port, but not keel (no common ALPN protocol)"
        }
        _ => "",
    };
    connect_err(format!("{ep}: the QUIC handshake failed: {e}{hint}"))
}

/// How often a connection whose calls wait looks for a sign of life from its host: what
/// arrived is counted by quinn, not seen by keel, so "the last time something arrived" is
/// known to within this.
const BUSY_LOOK: Duration = Duration::from_millis(20);

/// How long before a ping is due the connection is looked at every [`BUSY_LOOK`] (before
/// then, once).
const BUSY_NEAR: Duration = Duration::from_millis(500);

/// Watches a connection while calls wait for replies, by keel-wire's rule
/// ([`keel_wire::Keepalive::busy_ping_at`] and [`busy_dead_at`]; PROTOCOL.md "Liveness"): after a
/// quarter second (or two round trips) in which no packet arrived, a ping (a one-byte QUIC
/// datagram, which the host's QUIC stack acknowledges without keel reading it); if nothing has
/// arrived a second (less 10 ms, or six round trips) after the last packet, with the ping
/// unanswered, the host is taken for dead and the connection closed: its calls fail as a lost
/// connection (`unavailable`), and an idempotent one on a balanced channel goes to another
/// host at once. While calls wait after an answered ping and none started since, the next
/// waits for the interval, as keel-wire's do. QUIC's own keepalive and idle timeout watch an
/// idle connection. `unresponsive`: set to why, when the check closes the connection.
///
/// [`busy_dead_at`]: keel_wire::Keepalive::busy_dead_at
async fn watch_busy(
    connection: quinn::Connection,
    waiting: Arc<Waiting>,
    keepalive: keel_wire::Keepalive,
    unresponsive: Arc<std::sync::OnceLock<String>>,
) {
    let arrived = || connection.stats().udp_rx.datagrams;
    // The last ping answered, and the calls started by then.
    let mut answered: Option<(Instant, u64)> = None;
    loop {
        if !waiting.busy() {
            tokio::select! {
                () = waiting.until_call_starts() => {}
                _ = connection.closed() => return,
            }
            answered = None;
        }
        // Counted from when calls began to wait: packets before are no news of the host now.
        let mut seen = arrived();
        let mut last = clock::now();
        while waiting.busy() {
            if connection.close_reason().is_some() {
                return;
            }
            let now = clock::now();
            let count = arrived();
            if count != seen {
                (seen, last) = (count, now);
            }
            let rtt = Some(connection.rtt());
            let spaced_from = answered
                .filter(|&(_, started)| waiting.started() == started)
                .map(|(at, _)| at);
            let due = keepalive.busy_ping_at(last, rtt, spaced_from);
            if now < due {
                // Looks every BUSY_LOOK near the ping; a ping spaced out to the interval (a long
                // call on a live host) is slept towards, not looked for 50 times a second, until
                // a call starts (which ends the spacing).
                let far = due.saturating_duration_since(now).saturating_sub(BUSY_NEAR);
                let wake = clock::to_tokio(due.min(now + BUSY_LOOK.max(far)));
                tokio::select! {
                    () = tokio::time::sleep_until(wake) => {}
                    () = waiting.until_call_starts(), if far > BUSY_LOOK => {}
                }
                continue;
            }
            if connection
                .send_datagram(bytes::Bytes::from_static(&[0]))
                .is_err()
            {
                // No datagrams (a host that takes none, or the connection closed): QUIC's idle
                // timeout watches it alone.
                return;
            }
            let (pinged, started) = (now, waiting.started());
            let dead_at = keepalive.busy_dead_at(last, pinged, rtt);
            loop {
                let now = clock::now();
                let count = arrived();
                if count != seen {
                    (seen, last) = (count, now);
                    answered = Some((now, started));
                    break;
                }
                if connection.close_reason().is_some() {
                    // Closed for another reason: its calls say which.
                    return;
                }
                if now >= dead_at {
                    let silent = now.saturating_duration_since(last).as_millis();
                    let _ = unresponsive.set(format!(
                        "the host sent nothing for {silent} ms, with calls waiting and a \
                         keepalive ping unanswered"
                    ));
                    connection.close(code::TIMED_OUT, b"the host stopped answering");
                    return;
                }
                if !waiting.busy() {
                    break;
                }
                tokio::time::sleep_until(clock::to_tokio(dead_at.min(now + BUSY_LOOK))).await;
            }
        }
    }
}

/// Reads the host's unidirectional streams: a GoAway frame marks the connection as taking no
/// new calls (the calls on it finish).
async fn watch_go_away(connection: quinn::Connection, going_away: Arc<AtomicBool>) {
    while let Ok(recv) = connection.accept_uni().await {
        let mut reader =
            FrameReader::new(recv, codec(keel_wire::DEFAULT_MAX_MESSAGE_SIZE), None, None);
        if let Ok(Some((Frame::GoAway(_), _))) = reader.next().await {
            going_away.store(true, Ordering::Release);
        }
    }
}

impl ClientTransport for QuicClient {
    fn attempt<'a>(&'a self, call: &'a mut Outgoing, deadline: Instant) -> BoxFuture<'a, Attempt> {
        Box::pin(self.attempt_inner(call, deadline))
    }

    fn open(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let mut handshake = conn.handshake.clone();
            let timeout = self.settings.connect_timeout;
            let done = tokio::time::timeout(timeout, handshake.wait_for(Option::is_some))
                .await
                .is_ok_and(|r| r.is_ok());
            if done {
                Ok(())
            } else {
                Err(no_answer(&self.endpoint, timeout))
            }
        })
    }

    fn close(&self) {
        if let Some(c) = self.conn.lock().take() {
            c.connection.close(code::NO_ERROR, b"closed by the client");
        }
    }

    fn is_connected(&self) -> bool {
        self.current().is_some()
    }

    fn counts(&self) -> ConnCounts {
        let open = usize::from(self.conn.lock().as_ref().is_some_and(|c| c.is_open()));
        let opened = self.opened.load(Ordering::Relaxed);
        ConnCounts {
            opened,
            closed: opened - open as u64,
            open,
            sent_early: self.early.load(Ordering::Relaxed),
        }
    }
}
