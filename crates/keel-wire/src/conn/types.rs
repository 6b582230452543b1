//! The values the connection core takes and returns: [`Side`], [`Event`], [`ConnError`],
//! [`CallRejected`], [`Closed`].

use std::fmt;

use bytes::Bytes;

use crate::{FlowError, GoAway, Reply, Request, StatusCode};

/// Which end of a connection a [`Connection`](crate::Connection) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The end that connects, sends requests and receives replies.
    Client,
    /// The end that accepts, receives requests and sends replies.
    Host,
}

/// What the caller has to act on after [`Connection::handle`](crate::Connection::handle).
///
/// `C` is the payload the client gave [`Connection::start_call`](crate::Connection::start_call)
/// (for instance the oneshot sender a caller waits on).
#[derive(PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<C> {
    /// Host: a request arrived. If it is flagged [`streamed`](crate::RequestFlags::streamed),
    /// its inbound stream is already open, so the StreamData that follows is routed.
    Request(Request),
    /// Host: the client cancelled `call_id`; its inbound and outbound streams are already
    /// removed. Stop the call and send nothing more for it.
    Cancel {
        /// The cancelled call.
        call_id: u64,
    },
    /// Client: the reply to a pending call, which is no longer pending.
    ///
    /// If the reply is `Ok` and the call was started with `download`, the call's inbound stream
    /// is already open (opened before returning, so the StreamData that follows is routed). If
    /// the reply is not `Ok`, the call's outbound stream (its upload) is already stopped.
    Reply {
        /// The reply as it arrived.
        reply: Reply,
        /// The payload given to [`start_call`](crate::Connection::start_call).
        slot: C,
        /// Whether the call was started with `download`.
        download: bool,
    },
    /// Data on inbound stream `call_id`, within its window. Report it with
    /// [`Connection::consumed`](crate::Connection::consumed) once the application took it.
    StreamData {
        /// The stream's call.
        call_id: u64,
        /// The bytes (possibly empty).
        data: Bytes,
    },
    /// Inbound stream `call_id` ended and is removed: cleanly if `status` is
    /// [`StatusCode::Ok`], else the producer aborted it, for the reason in `message` (UTF-8
    /// text for humans).
    StreamEnd {
        /// The stream's call.
        call_id: u64,
        /// `Ok` for a clean end.
        status: StatusCode,
        /// Why the stream was aborted; empty for a clean end.
        message: Bytes,
    },
    /// The peer sent more than the window on inbound stream `call_id`: the stream is removed and
    /// a StopSending is queued. Fail the stream's consumer with `error` (the protocol has the
    /// consumer end the call with [`StatusCode::BadRequest`]).
    StreamFailed {
        /// The stream's call.
        call_id: u64,
        /// What the peer did ([`FlowError::WindowExceeded`]).
        error: FlowError,
    },
    /// Outbound stream `call_id` got more credit (see
    /// [`Connection::send_credit`](crate::Connection::send_credit)).
    Credit {
        /// The stream's call.
        call_id: u64,
    },
    /// Outbound stream `call_id` is stopped and removed; its producer must stop. Either the peer
    /// sent StopSending (`error` is `None`; a StreamEnd `Cancelled` "the receiver stopped
    /// reading" is queued), or its WindowUpdate overflowed the credit (`error` is
    /// [`FlowError::Overflow`]; a StreamEnd `BadRequest` "flow control window overflow" is
    /// queued).
    OutboundStopped {
        /// The stream's call.
        call_id: u64,
        /// `None` for a StopSending, else the peer's flow-control error.
        error: Option<FlowError>,
    },
    /// Client: the host sent GoAway. No new calls go to this connection (start_call fails with
    /// [`CallRejected::GoingAway`] from now on); pending calls up to `last_call_id` are still
    /// answered; later ones were not processed and will not be: take them with
    /// [`Connection::unprocessed_calls`](crate::Connection::unprocessed_calls) and send them
    /// again on a new connection.
    GoAway(GoAway),
}

impl<C> fmt::Debug for Event<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Request(r) => f.debug_tuple("Request").field(r).finish(),
            Event::Cancel { call_id } => {
                f.debug_struct("Cancel").field("call_id", call_id).finish()
            }
            Event::Reply {
                reply, download, ..
            } => f
                .debug_struct("Reply")
                .field("reply", reply)
                .field("download", download)
                .finish_non_exhaustive(),
            Event::StreamData { call_id, data } => f
                .debug_struct("StreamData")
                .field("call_id", call_id)
                .field("len", &data.len())
                .finish(),
            Event::StreamEnd {
                call_id,
                status,
                message,
            } => f
                .debug_struct("StreamEnd")
                .field("call_id", call_id)
                .field("status", status)
                .field("message", message)
                .finish(),
            Event::StreamFailed { call_id, error } => f
                .debug_struct("StreamFailed")
                .field("call_id", call_id)
                .field("error", error)
                .finish(),
            Event::Credit { call_id } => {
                f.debug_struct("Credit").field("call_id", call_id).finish()
            }
            Event::OutboundStopped { call_id, error } => f
                .debug_struct("OutboundStopped")
                .field("call_id", call_id)
                .field("error", error)
                .finish(),
            Event::GoAway(g) => f.debug_tuple("GoAway").field(g).finish(),
        }
    }
}

/// The peer broke the protocol in a way that concerns the whole connection, or stopped
/// answering: close it (a host first sends a GoAway with this error's text as the reason).
///
/// Flow-control errors are not among these: they concern one call (see
/// [`Event::StreamFailed`] and [`Event::OutboundStopped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnError {
    /// The client received a frame only a client sends ([`Frame::Request`](crate::Frame::Request)
    /// or [`Frame::Cancel`](crate::Frame::Cancel)).
    ClientOnlyFrame {
        /// The frame's type: `"Request"` or `"Cancel"`.
        frame: &'static str,
    },
    /// The host received a frame only a host sends ([`Frame::Reply`](crate::Frame::Reply) or
    /// [`Frame::GoAway`](crate::Frame::GoAway)).
    HostOnlyFrame {
        /// The frame's type: `"Reply"` or `"GoAway"`.
        frame: &'static str,
    },
    /// The host received more pings than its [`PingPolicy`](crate::PingPolicy) allows.
    TooManyPings,
    /// Nothing arrived from the peer for `waited` after a keepalive ping
    /// ([`Connection::handle_timeout`](crate::Connection::handle_timeout)): it or the path to
    /// it is gone.
    Unresponsive {
        /// How long the ping went unanswered.
        waited: std::time::Duration,
    },
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnError::ClientOnlyFrame { frame } => write!(
                f,
                "protocol error: the host sent a client-only frame ({frame})"
            ),
            ConnError::HostOnlyFrame { frame } => write!(
                f,
                "protocol error: the client sent a host-only frame ({frame})"
            ),
            ConnError::TooManyPings => f.write_str("too many pings"),
            ConnError::Unresponsive { waited } => write!(
                f,
                "the peer sent nothing for {} ms after a keepalive ping",
                waited.as_millis()
            ),
        }
    }
}

impl std::error::Error for ConnError {}

/// Why [`Connection::start_call`](crate::Connection::start_call) refused a new call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallRejected {
    /// The connection was closed, for this reason (the one given to
    /// [`Connection::close`](crate::Connection::close) first).
    Closed(String),
    /// The host sent GoAway: new calls must go to a new connection.
    GoingAway,
}

impl fmt::Display for CallRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallRejected::Closed(reason) => write!(f, "connection closed: {reason}"),
            CallRejected::GoingAway => {
                write!(
                    f,
                    "the host is going away: it takes no new calls on this connection"
                )
            }
        }
    }
}

impl std::error::Error for CallRejected {}

/// What was still open when [`Connection::close`](crate::Connection::close) was called, so the
/// caller can fail it. Every list is sorted by call id.
#[non_exhaustive]
pub struct Closed<C> {
    /// Client: the calls still waiting for a reply, with their slots.
    pub calls: Vec<(u64, C)>,
    /// The inbound streams still open (their consumers should fail).
    pub inbound: Vec<u64>,
    /// The outbound streams still registered (their producers should stop).
    pub outbound: Vec<u64>,
}

impl<C> fmt::Debug for Closed<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let calls: Vec<u64> = self.calls.iter().map(|(id, _)| *id).collect();
        f.debug_struct("Closed")
            .field("calls", &calls)
            .field("inbound", &self.inbound)
            .field("outbound", &self.outbound)
            .finish()
    }
}
