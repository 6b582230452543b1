//! The QUIC binding (`quic://`, feature `quic`): keel-wire's calls on QUIC streams (quinn), one
//! bidirectional stream per call. TLS 1.3 runs inside QUIC's handshake (one round trip, with
//! the transport's), a resumed connection may carry idempotent calls as 0-RTT data, and a lost
//! packet delays only the calls whose streams it carried. The design is argued in PROTOCOL.md,
//! "QUIC".
//!
//! - [`frames`]: what both ends share: keel-wire frames on one QUIC stream, the application
//!   error codes;
//! - [`client`]: the channel's connection ([`client::QuicClient`], the [`ClientTransport`]);
//! - [`server`]: the host's UDP endpoint and its connections.
//!
//! [`ClientTransport`]: super::ClientTransport

pub(crate) mod client;
mod frames;
pub(crate) mod server;

use quinn::VarInt;
use std::sync::Arc;

/// The least time a QUIC connection waits, after its keepalive interval, for a sign of life.
const MIN_PING_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Room for one liveness ping, a one-byte QUIC datagram, with quinn's bookkeeping for it.
const PING_ROOM: usize = 64;

/// Unidirectional streams a client accepts from its host: the host opens one, for GoAway.
const CLIENT_UNI_STREAMS: u32 = 4;

/// One side's QUIC transport settings, from keel's limits: `max_calls` bidirectional streams
/// (calls) at once; at most `receive_window` bytes received and not yet read on the whole
/// connection, and on one stream at most that or the largest message, whichever is less (QUIC's
/// flow control, so a peer cannot make quinn buffer more); `send_window` bytes written and not
/// yet acknowledged; keepalive pings after `keepalive.interval` of quiet, and the connection
/// dead after `interval + timeout` (at least `interval` + 3 s) of silence; `congestion`'s
/// controller for what this side sends. `client`: the client's side (it accepts the host's
/// GoAway stream and opens every call stream).
pub(crate) fn transport_config(
    max_calls: usize,
    receive_window: usize,
    max_message_size: u32,
    send_window: usize,
    keepalive: Option<keel_wire::Keepalive>,
    congestion: super::QuicCongestion,
    client: bool,
) -> quinn::TransportConfig {
    let mut config = quinn::TransportConfig::default();
    let var = |n: u64| VarInt::from_u64(n).unwrap_or(VarInt::MAX);
    if client {
        config.max_concurrent_bidi_streams(VarInt::from_u32(0));
        config.max_concurrent_uni_streams(VarInt::from_u32(CLIENT_UNI_STREAMS));
    } else {
        config.max_concurrent_bidi_streams(var(max_calls as u64));
        config.max_concurrent_uni_streams(VarInt::from_u32(0));
    }
    let window = receive_window as u64;
    // A whole frame of the largest message fits one stream's window (plus its header).
    let stream_window =
        (u64::from(max_message_size) + u64::from(keel_wire::MAX_HEADER)).min(window);
    config.receive_window(var(window));
    config.stream_receive_window(var(stream_window));
    config.send_window(send_window as u64);
    let controller: Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> = match congestion {
        super::QuicCongestion::Bbr => Arc::new(quinn::congestion::BbrConfig::default()),
        super::QuicCongestion::Cubic => Arc::new(quinn::congestion::CubicConfig::default()),
    };
    config.congestion_controller_factory(controller);
    // Datagrams are a client's liveness pings only (`client::watch_busy`): each side holds at
    // most one unread (quinn drops the oldest for a new one, and refuses one larger; the
    // client's room is there only because quinn sends none without it); the host sends none.
    config.datagram_receive_buffer_size(Some(PING_ROOM));
    config.datagram_send_buffer_size(if client { PING_ROOM } else { 0 });
    match keepalive {
        Some(k) => {
            config.keep_alive_interval(Some(k.interval));
            // At least 3 s past the ping: time for QUIC to send a lost PING again (a probe
            // timeout is about three round trips) before the connection is declared dead.
            let idle = k.interval + k.timeout.max(MIN_PING_WAIT);
            config.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
        }
        None => {
            config.keep_alive_interval(None);
            // No pings: the connection lives until closed (the host's idle reaper closes one
            // without calls); a peer that vanished is found by a call's timeout.
            config.max_idle_timeout(None);
        }
    }
    config
}

/// The client's transport settings (see [`transport_config`]): the channel's largest stream
/// window on each stream, four of them on the connection.
pub(crate) fn client_transport_config(
    max_message_size: u32,
    max_stream_window: u32,
    keepalive: Option<keel_wire::Keepalive>,
    congestion: super::QuicCongestion,
) -> Arc<quinn::TransportConfig> {
    let window = u64::from(max_stream_window.max(max_message_size)) * 4;
    Arc::new(transport_config(
        0,
        usize::try_from(window).unwrap_or(usize::MAX),
        max_message_size.max(max_stream_window),
        16 * 1024 * 1024,
        keepalive,
        congestion,
        true,
    ))
}
