//! The connection core: the per-connection protocol state both ends of a keel connection keep,
//! sans-IO.
//!
//! A [`Connection`] is what a keel client and a keel host each hold for one connection once the
//! handshake is done (as quinn-proto's `Connection` is under quinn). It reads no socket and no
//! clock, spawns nothing and never blocks: the caller feeds it the frames it decodes with
//! [`Connection::handle`], tells it what the application did (a call started, stream bytes
//! consumed or sent, a call given up), takes the frames it wants sent with
//! [`Connection::poll_transmit`], and passes an [`Instant`] wherever time matters. The two
//! frames every call brings, a host's Request and a client's Reply, can also be fed by
//! reference ([`Connection::handle_request`], [`Connection::handle_reply`]), so the caller
//! keeps them without moving them in and out.
//!
//! # Who owns what
//!
//! The core owns the protocol state:
//!
//! - the client's call table: call ids (1, 2, 3, ...) and, per pending call, a payload `C` the
//!   caller chooses (typically the oneshot sender its caller waits on), returned in
//!   [`Event::Reply`] or when the call is cancelled, forgotten or the connection closes;
//! - flow-control accounting for every stream, inbound ([`RecvWindow`]) and outbound
//!   ([`SendWindow`]), keyed by call id;
//! - the round-trip-time estimate (from the client's handshake or the core's own pings), which
//!   inbound windows grow against;
//! - GoAway state, and which frames each side may receive.
//!
//! The caller owns everything else: the socket and the [`Codec`](crate::Codec), the clock and
//! timers (deadlines, when to [`ping`](Connection::ping)), the application-facing halves of
//! calls and streams (channels for stream chunks, wake-ups for producers waiting for credit), and
//! the frames that carry application data. The core never produces a Request, a Reply or a
//! StreamData: the caller writes those itself, after telling the core ([`start_call`] before a
//! Request, [`open_outbound`] before a streamed `Ok` Reply, [`send_credit`] and [`on_sent`] for
//! each StreamData). The core queues only control frames: Pong, Ping, WindowUpdate,
//! StopSending, StreamEnd, Cancel and GoAway.
//!
//! An async wrapper typically keeps the core behind a mutex and, after each call into it, moves
//! what [`poll_transmit`](Connection::poll_transmit) yields to the socket's send queue before
//! releasing the lock, so control frames and data frames keep their order (a StreamEnd never
//! overtakes the stream's last StreamData).
//!
//! The rules the core keeps (frame order, flow control, stopping streams) are those of
//! `PROTOCOL.md`.
//!
//! [`start_call`]: Connection::start_call
//! [`open_outbound`]: Connection::open_outbound
//! [`send_credit`]: Connection::send_credit
//! [`on_sent`]: Connection::on_sent
//!
//! # Example
//!
//! A client core and a host core exchange one call and one round-trip measurement. (A real
//! connection encodes every frame with a [`Codec`](crate::Codec) in between.)
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! use bytes::Bytes;
//! use keel_wire::{
//!     Connection, Event, Frame, Reply, Request, RequestFlags, Side, StatusCode, WindowConfig,
//! };
//!
//! let now = Instant::now();
//! // The client's slot would be the oneshot sender its caller waits on; here, a name.
//! let mut client = Connection::new(Side::Client, WindowConfig::default());
//! let mut host = Connection::<()>::new(Side::Host, WindowConfig::default());
//!
//! // The client registers the call, then writes the request itself.
//! let call_id = client.start_call("add", false, false).map_err(|(e, _)| e)?;
//! let request = Frame::Request(Request {
//!     call_id,
//!     flags: RequestFlags::default(),
//!     deadline_us: 0,
//!     service: "Calculator".into(),
//!     operation: "add".into(),
//!     metadata: Bytes::new(),
//!     compression: 0,
//!     body: Bytes::from_static(&[2, 3]),
//! });
//!
//! // The host's reader feeds what it decodes, runs the operation and writes the reply.
//! let Some(Event::Request(request)) = host.handle(request, now)? else {
//!     unreachable!("a request")
//! };
//! let reply = Frame::Reply(Reply {
//!     call_id: request.call_id,
//!     status: StatusCode::Ok,
//!     metadata: Bytes::new(),
//!     compression: 0,
//!     details: Bytes::new(),
//!     body: Bytes::from_static(&[5]),
//! });
//!
//! // The client's reader routes the reply to the waiting call.
//! match client.handle(reply, now)? {
//!     Some(Event::Reply { reply, slot, .. }) => {
//!         assert_eq!(slot, "add");
//!         assert_eq!(reply.body, Bytes::from_static(&[5]));
//!     }
//!     other => panic!("expected the reply, got {other:?}"),
//! }
//! assert_eq!(client.pending_calls(), 0);
//!
//! // The host measures the round-trip time; the client's core answers the ping.
//! host.ping(now);
//! let ping = host.poll_transmit().expect("a ping");
//! assert!(client.handle(ping, now)?.is_none());
//! let pong = client.poll_transmit().expect("a pong");
//! host.handle(pong, now + Duration::from_millis(3))?;
//! assert_eq!(host.rtt(), Some(Duration::from_millis(3)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::{
    Cancel, Frame, GoAway, RecvWindow, Reply, Request, SendWindow, StatusCode, StopSending,
    StreamEnd, WindowConfig, WindowUpdate, DEFAULT_INITIAL_WINDOW, MAX_WINDOW_SIZE,
};

mod liveness;
mod types;

pub use liveness::{
    Keepalive, PingPolicy, Probe, BUSY_PING_SPACING, BUSY_QUIET_MIN, BUSY_VERDICT_MIN,
};
pub use types::{CallRejected, Closed, ConnError, Event, Side};

use liveness::{Due, Liveness};

/// The reason a producer gives in the StreamEnd it sends after a StopSending.
const STOPPED_READING: &[u8] = b"the receiver stopped reading";

/// The reason a producer gives in the StreamEnd it sends after a WindowUpdate overflowed its
/// credit.
const WINDOW_OVERFLOW: &[u8] = b"flow control window overflow";

/// The first measurement ping's nonce ("keelrtt"); later ones count up from it.
const RTT_PING: u64 = 0x006b_6565_6c72_7474;

/// A client's call waiting for its reply.
struct Pending<C> {
    slot: C,
    /// The reply is streamed: an `Ok` reply opens the inbound stream.
    download: bool,
    /// The request is streamed: its outbound stream was registered by `start_call`.
    upload: bool,
}

/// Per-connection protocol state shared by both ends: the client's call table (a payload `C` per
/// pending call), per-call stream flow-control accounting in both directions, ping/pong and the
/// round-trip-time estimate, GoAway state, and which frames each side may receive.
///
/// Frames the core wants sent (Pong, Ping, WindowUpdate, StopSending, StreamEnd, Cancel, GoAway)
/// are queued and taken with [`Connection::poll_transmit`]. See the [module docs](self) for who
/// owns what, and an example.
pub struct Connection<C> {
    side: Side,
    /// Windows of the streams we receive. `initial` starts at [`DEFAULT_INITIAL_WINDOW`] and
    /// rises (announced with a WindowUpdate on call 0) as streams learn the link.
    inbound_config: WindowConfig,
    /// The credit the peer lets our new streams start with (raised by its WindowUpdates on
    /// call 0).
    outbound_initial: u32,
    /// Client: calls waiting for their reply, by the ids this side chose (foldhash: cheaper
    /// than SipHash, and no peer picks the keys).
    calls: HashMap<u64, Pending<C>, foldhash::fast::RandomState>,
    /// Client: the id the next call gets.
    next_call_id: u64,
    /// Host: the highest call id received.
    last_call_id: u64,
    /// Streams we receive, by call id.
    inbound: HashMap<u64, RecvWindow>,
    /// Streams we send, by call id.
    outbound: HashMap<u64, SendWindow>,
    /// Frames to send, oldest first.
    transmit: VecDeque<Frame>,
    /// Smoothed round-trip time (RFC 6298), once there is a sample.
    srtt: Option<Duration>,
    /// The outstanding measurement ping: its nonce and when it was queued.
    ping: Option<(u64, Instant)>,
    /// The nonce the next measurement ping gets.
    next_ping: u64,
    /// Keepalive pings, the verdict on a silent peer, a host's limit on pings.
    liveness: Liveness,
    /// Host: GoAway sent. Client: GoAway received.
    going_away: bool,
    /// Set by `close`: the reason.
    closed: Option<String>,
}

impl<C> fmt::Debug for Connection<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("side", &self.side)
            .field("pending_calls", &self.calls.len())
            .field("last_call_id", &self.last_call_id)
            .field("inbound_streams", &self.inbound.len())
            .field("outbound_streams", &self.outbound.len())
            .field("queued_frames", &self.transmit.len())
            .field("rtt", &self.srtt)
            .field("going_away", &self.going_away)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

/// The call id that names the connection rather than a call: a WindowUpdate on it raises the
/// initial window of the streams its receiver starts from then on.
pub const CONNECTION: u64 = 0;

/// The most a learned initial window rises to (a stream still grows beyond it on its own): what
/// one new stream may have in flight before its consumer has read anything.
pub const MAX_LEARNED_INITIAL_WINDOW: u32 = 1 << 20;

impl<C> Connection<C> {
    /// A core for a connection whose handshake just completed.
    ///
    /// `inbound` sizes the windows of the streams this end receives. Its `initial` must be
    /// [`DEFAULT_INITIAL_WINDOW`] today, since the handshake does not negotiate it (checked in
    /// debug builds); its `max` is raised to at least `initial`.
    pub fn new(side: Side, inbound: WindowConfig) -> Self {
        debug_assert_eq!(
            inbound.initial, DEFAULT_INITIAL_WINDOW,
            "the initial window is fixed by the protocol"
        );
        Connection {
            side,
            inbound_config: WindowConfig {
                initial: inbound.initial,
                max: inbound.max.max(inbound.initial),
            },
            outbound_initial: DEFAULT_INITIAL_WINDOW,
            calls: HashMap::default(),
            next_call_id: 1,
            last_call_id: 0,
            inbound: HashMap::new(),
            outbound: HashMap::new(),
            transmit: VecDeque::new(),
            srtt: None,
            ping: None,
            next_ping: RTT_PING,
            liveness: Liveness::default(),
            going_away: false,
            closed: None,
        }
    }

    /// Which end this core runs.
    pub fn side(&self) -> Side {
        self.side
    }

    // ---- client: the call table

    /// Client: registers a new call and returns its id (1, 2, 3, ...); write its Request next.
    /// Requests must be written in the order their ids were given (queue the Request before
    /// the next call starts), so that a GoAway's `last_call_id` divides the calls the host
    /// received from those it did not (see [`unprocessed_calls`](Self::unprocessed_calls)).
    ///
    /// `slot` comes back in [`Event::Reply`], or from [`cancel_call`](Self::cancel_call),
    /// [`forget_call`](Self::forget_call) or [`close`](Self::close). `download`: the reply is
    /// streamed (an `Ok` reply opens an inbound stream before the event is returned). `upload`:
    /// the request is streamed; its outbound stream is registered now with
    /// [`DEFAULT_INITIAL_WINDOW`] of credit, so credit and StopSending for it are routed from
    /// the start.
    ///
    /// Fails, giving the slot back, with [`CallRejected::Closed`] after [`close`](Self::close)
    /// and with [`CallRejected::GoingAway`] once a GoAway arrived (new calls must go to a new
    /// connection).
    ///
    /// # Panics
    ///
    /// On a [`Side::Host`] core.
    pub fn start_call(
        &mut self,
        slot: C,
        download: bool,
        upload: bool,
    ) -> Result<u64, (CallRejected, C)> {
        assert_eq!(self.side, Side::Client, "only a client starts calls");
        if let Some(reason) = &self.closed {
            return Err((CallRejected::Closed(reason.clone()), slot));
        }
        if self.going_away {
            return Err((CallRejected::GoingAway, slot));
        }
        let call_id = self.next_call_id;
        self.next_call_id += 1;
        self.calls.insert(
            call_id,
            Pending {
                slot,
                download,
                upload,
            },
        );
        if upload {
            self.open_outbound(call_id);
        }
        Ok(call_id)
    }

    /// Client: the caller gave up on `call_id` (deadline, dropped future). Stops its outbound
    /// stream (without a StreamEnd) and, if the call was still pending, removes it, queues a
    /// Cancel and returns its slot. `None` if it was not pending (answered, or unknown).
    pub fn cancel_call(&mut self, call_id: u64) -> Option<C> {
        self.outbound.remove(&call_id);
        let pending = self.calls.remove(&call_id)?;
        self.transmit.push_back(Frame::Cancel(Cancel { call_id }));
        Some(pending.slot)
    }

    /// Client: cancels every pending call `expired` picks (a deadline that passed, say), as
    /// [`cancel_call`](Self::cancel_call) does each: its outbound stream stops and a Cancel is
    /// queued. Returns them with their slots, oldest first.
    pub fn cancel_calls_where(&mut self, mut expired: impl FnMut(&C) -> bool) -> Vec<(u64, C)> {
        let mut ids: Vec<u64> = self
            .calls
            .iter()
            .filter(|(_, p)| expired(&p.slot))
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.cancel_call(id).map(|slot| (id, slot)))
            .collect()
    }

    /// Client: whether `call_id` waits for its reply.
    pub fn is_pending(&self, call_id: u64) -> bool {
        self.calls.contains_key(&call_id)
    }

    /// Client: the calls waiting for their reply, with their slots, in no particular order.
    pub fn pending(&self) -> impl Iterator<Item = (u64, &C)> + '_ {
        self.calls.iter().map(|(&id, p)| (id, &p.slot))
    }

    /// Client: removes a pending call without telling the peer, for instance because its
    /// request could not be sent. Its outbound stream, if `start_call` registered one, goes
    /// with it. Returns the slot; `None` if the call was not pending.
    pub fn forget_call(&mut self, call_id: u64) -> Option<C> {
        let pending = self.calls.remove(&call_id)?;
        if pending.upload {
            self.outbound.remove(&call_id);
        }
        Some(pending.slot)
    }

    /// Client: removes and returns the pending calls a `GoAway(last_call_id)` says the host did
    /// not and will not process (those with a higher id), oldest first, with their outbound
    /// streams. Nothing is sent: they are safe to send again on a new connection. A Reply the
    /// host still sends for one of them finds nobody (see [`handle`](Self::handle)).
    ///
    /// The guarantee holds because a client writes its Requests in the order of their ids
    /// (see [`start_call`](Self::start_call)): every call at or below `last_call_id` reached
    /// the host before its GoAway.
    pub fn unprocessed_calls(&mut self, last_call_id: u64) -> Vec<(u64, C)> {
        let mut ids: Vec<u64> = self
            .calls
            .keys()
            .copied()
            .filter(|&id| id > last_call_id)
            .collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.forget_call(id).map(|slot| (id, slot)))
            .collect()
    }

    /// Client: the number of calls waiting for their reply.
    pub fn pending_calls(&self) -> usize {
        self.calls.len()
    }

    // ---- host

    /// Host: the highest call id received so far (0 before the first request); what a GoAway
    /// carries.
    pub fn last_call_id(&self) -> u64 {
        self.last_call_id
    }

    /// Host: queues `GoAway { last_call_id, reason }`, once: later calls, or calls after
    /// [`close`](Self::close), do nothing. From then on [`is_going_away`](Self::is_going_away)
    /// is true.
    ///
    /// # Panics
    ///
    /// On a [`Side::Client`] core (only a host sends GoAway).
    pub fn go_away(&mut self, reason: &str) {
        assert_eq!(self.side, Side::Host, "only a host sends GoAway");
        if self.going_away || self.closed.is_some() {
            return;
        }
        self.going_away = true;
        self.transmit.push_back(Frame::GoAway(GoAway {
            last_call_id: self.last_call_id,
            reason: reason.to_string(),
        }));
    }

    /// Host: GoAway was sent ([`go_away`](Self::go_away)). Client: GoAway was received.
    pub fn is_going_away(&self) -> bool {
        self.going_away
    }

    // ---- incoming frames

    /// Host: [`handle`](Self::handle) for a Request, which stays the caller's: the same
    /// bookkeeping without moving the request in and out again (a Request is the frame a host
    /// handles most). It may be one decoded in place
    /// ([`Codec::decode_request_in_place`](crate::Codec::decode_request_in_place)). Returns whether the caller is to process it: false after
    /// [`close`](Self::close), when `handle` would have returned `Ok(None)`.
    ///
    /// # Errors
    ///
    /// [`ConnError::ClientOnlyFrame`] on a client, as for `handle`.
    pub fn handle_request<B>(
        &mut self,
        request: &Request<B>,
        now: Instant,
    ) -> Result<bool, ConnError> {
        if self.closed.is_some() {
            return Ok(false);
        }
        self.liveness.on_received(now);
        self.request(request, now)?;
        Ok(true)
    }

    /// Client: [`handle`](Self::handle) for a Reply, which stays the caller's (as
    /// [`handle_request`](Self::handle_request) is for a host): the slot of the call it
    /// answers and whether its response is a stream (as [`Event::Reply`] has them), or `None`
    /// if no call waits for it (or after [`close`](Self::close)).
    ///
    /// # Errors
    ///
    /// [`ConnError::HostOnlyFrame`] on a host, as for `handle`.
    pub fn handle_reply(
        &mut self,
        reply: &Reply,
        now: Instant,
    ) -> Result<Option<(C, bool)>, ConnError> {
        if self.closed.is_some() {
            return Ok(None);
        }
        self.liveness.on_received(now);
        self.reply(reply, now)
    }

    /// What a Reply arriving at `now` changes: its call is over (its slot comes back, with
    /// whether a response stream follows, whose window opens now), or a StopSending is queued
    /// for a call nobody waits for.
    fn reply(&mut self, reply: &Reply, now: Instant) -> Result<Option<(C, bool)>, ConnError> {
        if self.side == Side::Host {
            return Err(ConnError::HostOnlyFrame { frame: "Reply" });
        }
        let call_id = reply.call_id;
        let Some(pending) = self.calls.remove(&call_id) else {
            // The caller gave up. An Ok reply may open a response stream nobody wants.
            if reply.status == StatusCode::Ok {
                self.transmit
                    .push_back(Frame::StopSending(StopSending { call_id }));
            }
            return Ok(None);
        };
        if reply.status != StatusCode::Ok {
            // The call is over: an upload still running stops.
            if pending.upload {
                self.outbound.remove(&call_id);
            }
        } else if pending.download {
            // Opened before the next frame is handled: its data follows this reply.
            self.open_inbound(call_id, now);
        }
        Ok(Some((pending.slot, pending.download)))
    }

    /// What a Request arriving at `now` changes: the call id the GoAway would name, keepalive's
    /// ping policy, and the window of its request stream if it has one.
    fn request<B>(&mut self, request: &Request<B>, now: Instant) -> Result<(), ConnError> {
        if self.side == Side::Client {
            return Err(ConnError::ClientOnlyFrame { frame: "Request" });
        }
        self.liveness.on_request();
        self.last_call_id = self.last_call_id.max(request.call_id);
        if request.flags.streamed {
            self.open_inbound(request.call_id, now);
            // The round-trip time is what the stream windows grow against, and only a streamed
            // request needs one: measured now, a host spends no Ping (and the client no Pong)
            // on a connection of unary calls, and a fresh client's first call shares its round
            // trip with no other frame.
            if self.srtt.is_none() {
                self.ping(now);
            }
        }
        Ok(())
    }

    /// Feeds one frame decoded from the peer; `now` is when it arrived.
    ///
    /// Handled here: Ping (a Pong is queued), Pong (a round-trip sample if it answers the
    /// core's measurement ping; others are ignored), and the flow-control accounting of stream
    /// frames. A host's first streamed Request, while it has no round-trip sample, also queues
    /// a measurement [`ping`](Self::ping): that stream's window grows against the sample. The rest is routed as an [`Event`]; `Ok(None)` means there is nothing for the
    /// caller to do. Stream frames for a call without a stream in that direction are dropped
    /// (they may have been in flight when it ended), as is a Reply for a call no longer pending
    /// (if its status is `Ok`, a StopSending is queued in case a response stream follows).
    /// After [`close`](Self::close) every frame is dropped.
    ///
    /// # Errors
    ///
    /// [`ConnError`] when the peer sent a frame this side must never receive (a client: Request
    /// or Cancel; a host: Reply or GoAway). The caller closes the connection (a host after
    /// sending [`go_away`](Self::go_away) with the error's text).
    pub fn handle(&mut self, frame: Frame, now: Instant) -> Result<Option<Event<C>>, ConnError> {
        if self.closed.is_some() {
            return Ok(None);
        }
        self.liveness.on_received(now);
        match frame {
            Frame::Request(request) => {
                self.request(&request, now)?;
                Ok(Some(Event::Request(request)))
            }
            Frame::Cancel(Cancel { call_id }) => {
                if self.side == Side::Client {
                    return Err(ConnError::ClientOnlyFrame { frame: "Cancel" });
                }
                self.inbound.remove(&call_id);
                self.outbound.remove(&call_id);
                Ok(Some(Event::Cancel { call_id }))
            }
            Frame::Reply(reply) => {
                Ok(self
                    .reply(&reply, now)?
                    .map(|(slot, download)| Event::Reply {
                        reply,
                        slot,
                        download,
                    }))
            }
            Frame::GoAway(go_away) => {
                if self.side == Side::Host {
                    return Err(ConnError::HostOnlyFrame { frame: "GoAway" });
                }
                self.going_away = true;
                Ok(Some(Event::GoAway(go_away)))
            }
            Frame::Ping(nonce) => {
                if self.side == Side::Host && !self.liveness.on_ping(now) {
                    return Err(ConnError::TooManyPings);
                }
                self.transmit.push_back(Frame::Pong(nonce));
                Ok(None)
            }
            Frame::Pong(nonce) => {
                if let Some((ours, sent)) = self.ping {
                    if nonce == ours {
                        self.ping = None;
                        self.set_rtt(now.saturating_duration_since(sent));
                    }
                }
                Ok(None)
            }
            Frame::StreamData(d) => {
                let Some(window) = self.inbound.get_mut(&d.call_id) else {
                    return Ok(None);
                };
                match window.on_data(d.data.len()) {
                    Ok(()) => Ok(Some(Event::StreamData {
                        call_id: d.call_id,
                        data: d.data,
                    })),
                    Err(error) => {
                        self.inbound.remove(&d.call_id);
                        self.transmit
                            .push_back(Frame::StopSending(StopSending { call_id: d.call_id }));
                        Ok(Some(Event::StreamFailed {
                            call_id: d.call_id,
                            error,
                        }))
                    }
                }
            }
            Frame::StreamEnd(end) => {
                Ok(self.inbound.remove(&end.call_id).map(|_| Event::StreamEnd {
                    call_id: end.call_id,
                    status: end.status,
                    message: end.message,
                }))
            }
            Frame::WindowUpdate(WindowUpdate {
                call_id: CONNECTION,
                increment,
            }) => {
                // The peer learned the link: our next streams may start with more credit.
                self.outbound_initial = self
                    .outbound_initial
                    .saturating_add(increment)
                    .min(MAX_WINDOW_SIZE);
                Ok(None)
            }
            Frame::WindowUpdate(WindowUpdate { call_id, increment }) => {
                let Some(window) = self.outbound.get_mut(&call_id) else {
                    return Ok(None);
                };
                match window.grant(increment) {
                    Ok(()) => Ok(Some(Event::Credit { call_id })),
                    Err(error) => {
                        // The consumer granted more than the protocol allows: end that stream.
                        self.outbound.remove(&call_id);
                        self.transmit.push_back(Frame::StreamEnd(StreamEnd {
                            call_id,
                            status: StatusCode::BadRequest,
                            message: Bytes::from_static(WINDOW_OVERFLOW),
                        }));
                        Ok(Some(Event::OutboundStopped {
                            call_id,
                            error: Some(error),
                        }))
                    }
                }
            }
            Frame::StopSending(StopSending { call_id }) => {
                if self.outbound.remove(&call_id).is_none() {
                    return Ok(None);
                }
                self.transmit.push_back(Frame::StreamEnd(StreamEnd {
                    call_id,
                    status: StatusCode::Cancelled,
                    message: Bytes::from_static(STOPPED_READING),
                }));
                Ok(Some(Event::OutboundStopped {
                    call_id,
                    error: None,
                }))
            }
        }
    }

    // ---- streams (both sides)

    /// Starts receiving the stream of `call_id`, with a fresh window (replacing any open one).
    ///
    /// Done automatically by [`handle`](Self::handle) for a host's streamed Request and a
    /// client's `Ok` Reply to a `download` call; exposed for tests and symmetry. Does nothing
    /// after [`close`](Self::close).
    pub fn open_inbound(&mut self, call_id: u64, now: Instant) {
        if self.closed.is_none() {
            let window = RecvWindow::new(self.inbound_config, now);
            self.inbound.insert(call_id, window);
        }
    }

    /// The application consumed `n` bytes of inbound stream `call_id` at `now`: may queue a
    /// WindowUpdate ([`RecvWindow::on_consumed`] with the core's RTT estimate: without one
    /// the window grows at most once). `n` counts at most the bytes received and not yet
    /// reported; an unknown stream is ignored.
    pub fn consumed(&mut self, call_id: u64, n: usize, now: Instant) {
        let Some(window) = self.inbound.get_mut(&call_id) else {
            return;
        };
        // A consumer of an earlier stream with the same id (the peer may reuse ids) must not
        // trip the window's debug assertion.
        let n = n.min(usize::try_from(window.buffered()).unwrap_or(usize::MAX));
        let rtt = self.srtt.unwrap_or(Duration::ZERO);
        if let Some(increment) = window.on_consumed(n, now, rtt) {
            self.transmit
                .push_back(Frame::WindowUpdate(WindowUpdate { call_id, increment }));
        }
        // A window that grew says what the link carries: the peer's next streams start there,
        // instead of ramping up from the default each time.
        let grown = window.window().min(MAX_LEARNED_INITIAL_WINDOW);
        if grown > self.inbound_config.initial {
            let increment = grown - self.inbound_config.initial;
            self.inbound_config.initial = grown;
            self.transmit.push_back(Frame::WindowUpdate(WindowUpdate {
                call_id: CONNECTION,
                increment,
            }));
        }
    }

    /// The consumer dropped inbound stream `call_id` before its end: forgets it and queues a
    /// StopSending. Returns whether it was open.
    pub fn abandon_inbound(&mut self, call_id: u64) -> bool {
        if self.inbound.remove(&call_id).is_none() {
            return false;
        }
        self.transmit
            .push_back(Frame::StopSending(StopSending { call_id }));
        true
    }

    /// Forgets inbound stream `call_id` without a frame (the call was cancelled or failed).
    /// Returns whether it was open.
    pub fn close_inbound(&mut self, call_id: u64) -> bool {
        self.inbound.remove(&call_id).is_some()
    }

    /// Registers an outbound stream for `call_id` with [`DEFAULT_INITIAL_WINDOW`] of credit
    /// (replacing any registered one), so the peer's credit and StopSending for it are routed.
    ///
    /// A host calls it before sending the `Ok` Reply of a streamed reply; a client's uploads are
    /// registered by [`start_call`](Self::start_call). Does nothing after
    /// [`close`](Self::close).
    pub fn open_outbound(&mut self, call_id: u64) {
        if self.closed.is_none() {
            self.outbound
                .insert(call_id, SendWindow::new(self.outbound_initial));
        }
    }

    /// Data bytes outbound stream `call_id` may send now; `None` if it is not registered
    /// (never opened, stopped, finished, or the connection closed): its producer must stop.
    pub fn send_credit(&self, call_id: u64) -> Option<u32> {
        self.outbound
            .get(&call_id)
            .map(|w| w.available().min(u64::from(MAX_WINDOW_SIZE)) as u32)
    }

    /// `n` data bytes of StreamData for `call_id` are being sent. Sending more than
    /// [`send_credit`](Self::send_credit) is a bug in the caller (it panics in debug builds);
    /// an unregistered stream is ignored.
    pub fn on_sent(&mut self, call_id: u64, n: usize) {
        if let Some(window) = self.outbound.get_mut(&call_id) {
            window.consume(n);
        }
    }

    /// The producer of outbound stream `call_id` finished (`status` `Ok`, empty `message`) or
    /// aborted. If the stream was still registered, removes it, queues
    /// `StreamEnd { status, message }` and returns true; if the peer stopped it first (or it is
    /// unknown), returns false and queues nothing.
    pub fn finish_outbound(&mut self, call_id: u64, status: StatusCode, message: Bytes) -> bool {
        if self.outbound.remove(&call_id).is_none() {
            return false;
        }
        self.transmit.push_back(Frame::StreamEnd(StreamEnd {
            call_id,
            status,
            message,
        }));
        true
    }

    /// Stops outbound stream `call_id` without a StreamEnd (the call was cancelled or refused).
    /// Returns whether it was registered.
    pub fn stop_outbound(&mut self, call_id: u64) -> bool {
        self.outbound.remove(&call_id).is_some()
    }

    // ---- ping / RTT

    /// Queues a measurement Ping at `now`; the Pong that answers it gives a round-trip sample.
    /// The core chooses the nonce. A host core calls this itself at its first streamed Request
    /// if it has no sample by then (see [`handle`](Self::handle)). At most one measurement ping is outstanding: while one is,
    /// and after [`close`](Self::close), this does nothing.
    pub fn ping(&mut self, now: Instant) {
        if self.ping.is_some() || self.closed.is_some() {
            return;
        }
        let nonce = self.next_ping;
        self.next_ping = self.next_ping.wrapping_add(1);
        self.ping = Some((nonce, now));
        self.transmit.push_back(Frame::Ping(nonce));
    }

    // ---- liveness

    /// Turns keepalive on from `now`: a ping once nothing has arrived for
    /// `keepalive.interval`, and the peer judged dead if nothing arrives within
    /// `keepalive.timeout` (at least four round trips) after a ping. Run a timer for
    /// [`poll_timeout`](Self::poll_timeout) and call [`handle_timeout`](Self::handle_timeout)
    /// when it fires.
    pub fn set_keepalive(&mut self, keepalive: Keepalive, now: Instant) {
        self.liveness.enable(keepalive, now);
    }

    /// The keepalive settings, if keepalive is on.
    pub fn keepalive(&self) -> Option<Keepalive> {
        self.liveness.keepalive
    }

    /// Host: limits how often the client may ping (see [`PingPolicy`]); past it,
    /// [`handle`](Self::handle) fails with [`ConnError::TooManyPings`].
    pub fn set_ping_policy(&mut self, policy: PingPolicy) {
        self.liveness.policy = Some(policy);
    }

    /// Client, as a call starts at `now`: if keepalive is on and nothing has arrived for its
    /// timeout, queues a Ping to go with the call, so a path that died while the connection
    /// was quiet is found within the timeout rather than at the call's deadline. Returns
    /// whether it did ([`poll_timeout`](Self::poll_timeout) is then earlier).
    pub fn probe(&mut self, now: Instant) -> bool {
        self.probe_call(now).pinged
    }

    /// Client: [`probe`](Self::probe), also telling whether the call may have made
    /// [`poll_timeout`](Self::poll_timeout) earlier without a ping (see [`Probe`]), so a
    /// caller that re-reads it only when it may have moved knows to.
    pub fn probe_call(&mut self, now: Instant) -> Probe {
        if self.closed.is_some() {
            return Probe::default();
        }
        let probe = self.liveness.on_call(now);
        if probe.pinged {
            self.liveness_ping(now);
        }
        probe
    }

    /// A Ping now, even if a measurement ping is outstanding (its Pong, if it ever comes, is
    /// then no sample): a peer that leaves one ping unanswered must still see the next.
    fn liveness_ping(&mut self, now: Instant) {
        self.ping = None;
        self.ping(now);
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next: `None` if keepalive is off
    /// or the connection is closed. It changes when a frame arrives, a timeout is handled or
    /// [`probe`](Self::probe) queues a ping.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        self.liveness.deadline(self.srtt, !self.calls.is_empty())
    }

    /// The keepalive timer fired at `now`: queues a keepalive Ping if nothing has arrived for
    /// the interval (and then returns `Ok(true)`).
    ///
    /// # Errors
    ///
    /// [`ConnError::Unresponsive`] if nothing arrived within the timeout after a ping: the peer
    /// or the path to it is gone. Close the connection (its calls fail; new ones go to a new
    /// connection).
    pub fn handle_timeout(&mut self, now: Instant) -> Result<bool, ConnError> {
        if self.closed.is_some() {
            return Ok(false);
        }
        match self
            .liveness
            .on_timeout(now, self.srtt, !self.calls.is_empty())
        {
            Due::Nothing => Ok(false),
            Due::Ping => {
                self.liveness_ping(now);
                Ok(true)
            }
            Due::Dead(waited) => Err(ConnError::Unresponsive { waited }),
        }
    }

    /// The ping awaited since [`handle_timeout`](Self::handle_timeout) or
    /// [`probe`](Self::probe) queued it has not left this end yet (a large frame ahead of it
    /// is still being written to a slow link, say): the peer cannot have answered, so the
    /// timeout starts again from `now`. Does nothing if no ping is awaited.
    pub fn restart_keepalive_wait(&mut self, now: Instant) {
        self.liveness.restart_wait(now);
    }

    /// Feeds a round-trip sample measured elsewhere (the client's handshake) into the estimate,
    /// as a Pong would.
    pub fn set_rtt(&mut self, rtt: Duration) {
        // Zero means "unknown" to RecvWindow: a sample is at least 1 µs.
        let sample = rtt.max(Duration::from_micros(1));
        self.srtt = Some(match self.srtt {
            None => sample,
            // RFC 6298: SRTT <- 7/8 SRTT + 1/8 R'.
            Some(srtt) => (srtt / 8).saturating_mul(7).saturating_add(sample / 8),
        });
    }

    /// The window our next inbound stream starts with (what the peer may send before our first
    /// WindowUpdate for it): [`DEFAULT_INITIAL_WINDOW`] until a stream's window grew.
    pub fn inbound_initial_window(&self) -> u32 {
        self.inbound_config.initial
    }

    /// The credit our next outbound stream starts with, as the peer last announced it.
    pub fn outbound_initial_window(&self) -> u32 {
        self.outbound_initial
    }

    /// The round-trip-time estimate; `None` until a sample. It is the smoothed RTT of RFC 6298
    /// (the first sample, then `7/8 · estimate + 1/8 · sample` for each later one), at least
    /// 1 µs.
    pub fn rtt(&self) -> Option<Duration> {
        self.srtt
    }

    // ---- outgoing

    /// The next frame the core wants sent, oldest first; `None` when there is none.
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        self.transmit.pop_front()
    }

    // ---- end

    /// The connection is gone (`reason` says why, for humans). Returns what was still open so the
    /// caller can fail it: the pending calls with their slots, the inbound and the outbound
    /// streams. Afterwards [`start_call`](Self::start_call) fails with
    /// [`CallRejected::Closed`] and this reason, frames fed to [`handle`](Self::handle) are
    /// dropped, and nothing new is queued; frames queued before stay queued (a host may still
    /// deliver the GoAway it queued). Closing again returns nothing and keeps the first reason.
    pub fn close(&mut self, reason: &str) -> Closed<C> {
        if self.closed.is_none() {
            self.closed = Some(reason.to_string());
        }
        self.ping = None;
        let mut calls: Vec<(u64, C)> = self.calls.drain().map(|(id, p)| (id, p.slot)).collect();
        calls.sort_unstable_by_key(|(id, _)| *id);
        let mut inbound: Vec<u64> = self.inbound.drain().map(|(id, _)| id).collect();
        inbound.sort_unstable();
        let mut outbound: Vec<u64> = self.outbound.drain().map(|(id, _)| id).collect();
        outbound.sort_unstable();
        Closed {
            calls,
            inbound,
            outbound,
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }
}
