//! The host side: one task per HTTP connection (HTTP/1.1 and h2c on the same port, or what ALPN
//! agreed), one call per request. Requests reach the same dispatcher as keel-wire frames; each
//! call's answer comes back on a oneshot to the request that is waiting for it
//! ([`ReplyTo::Waiter`](crate::dispatch::ReplyTo::Waiter)), and a [`StopResponder`] stops the
//! connection when the host asks.
//!
//! One concern per file:
//! - `mod.rs`: what every request of a connection shares ([`Ctx`]) and how the host stops it
//!   ([`Stop`], [`StopResponder`]);
//! - `driver.rs`: the connection's task ([`serve`]): hyper's server, the HTTP/2 request futures
//!   run in the connection's task, the stop signal, the timeouts;
//! - `first_line.rs`: without ALPN, a connection's first line must be HTTP/1 or HTTP/2's
//!   preface, or it is closed unanswered;
//! - `io_watch.rs`: the IO watchdog (a request head that does not finish, output the peer does
//!   not read, a connection where nothing moves) and the count of the connection's flushes;
//! - `route.rs`: one request's route ([`handle`]): calls, descriptions, OpenAPI, CORS;
//! - `unread.rs`: after an HTTP/2 answer given on a request's head, its body is read on, so
//!   that h2 still refuses a malformed one (RFC 9113 §8.1.2.6) rather than ignore it;
//! - `call.rs`: `POST /{Service}/{operation}`: headers, body and arguments into a dispatched
//!   call, its answer into a response;
//! - `cut.rs`: a streamed answer that fails midway, cut off only once what it sent before has
//!   been flushed (its NDJSON error line reaches the reader);
//! - `grpc/`: the gRPC protocol (requests whose content type is `application/grpc…`);
//! - `connect/`: Connect (`application/proto`, `application/connect+…`, ...), through `grpc/`;
//! - `grpc_web.rs`: gRPC-Web (`application/grpc-web…`), through `grpc/`, trailers in the body;
//! - `describe.rs`: `GET /{Service}` and `GET /openapi.json`;
//! - `responses.rs`: error answers and the headers every answer carries.

mod call;
mod connect;
mod cut;
mod describe;
mod driver;
mod first_line;
mod grpc;
mod grpc_web;
mod io_watch;
mod responses;
mod route;
mod unread;

pub(crate) use driver::serve;
pub(super) use route::handle;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::sync::watch;

use crate::bindings::ServerSettings;
use crate::core::status::{Status, StatusCode};
use crate::dispatch::{Dispatcher, HostConn, HostConnInfo, ReceiveBudget};
use io_watch::HeadWatch;

/// How far the host has asked an HTTP connection to stop (the shared [`Stop`], raised by
/// [`StopResponder`]). `GoingAway`: HTTP/2 gets `GOAWAY`; an HTTP/1.1 connection is not closed
/// while idle, as a request may be on its way (a client that sees the close only after sending
/// could not tell whether the host took its call): the next request on it is answered with
/// `connection: close`, and a drain's answer says the call was not processed. `Closing`:
/// HTTP/1.1 once the answer in progress is written (at once if idle); HTTP/2 after `GOAWAY`,
/// once the streams in flight are answered. Answers go to each call's waiter, not through the
/// connection.
pub(super) use crate::bindings::Stop;
use crate::bindings::StopResponder;

/// What every request of one HTTP connection shares.
#[derive(Debug, Clone)]
pub(super) struct Ctx {
    pub(super) conn: Arc<HostConn>,
    /// The next call's id: the key of its entry among the connection's calls in flight (HTTP
    /// carries no call ids).
    next_call_id: Arc<AtomicU64>,
    pub(super) settings: Arc<ServerSettings>,
    /// Bytes of request bodies this connection (and the host) may hold at once.
    budget: ReceiveBudget,
    /// The connection's IO watchdog: the HTTP/1.1 request head being received, the flushes of
    /// its output (none for `HttpService`).
    watch: Option<Arc<HeadWatch>>,
}

impl Ctx {
    /// A connection's shared state; `stop` is told when the host wants it to go away or close.
    /// It has at most `max_calls` calls in flight; `watch` follows its request heads.
    pub(super) fn new(
        dispatcher: &Arc<Dispatcher>,
        settings: Arc<ServerSettings>,
        info: HostConnInfo,
        stop: watch::Sender<Stop>,
        max_calls: usize,
        watch: Option<Arc<HeadWatch>>,
    ) -> Ctx {
        let (conn, budget) = StopResponder::conn(stop, info, max_calls, dispatcher, &settings);
        Ctx {
            conn,
            next_call_id: Arc::new(AtomicU64::new(0)),
            settings,
            budget,
            watch,
        }
    }

    /// The connection is gone: nobody can receive answers, so stop what still runs for it.
    pub(super) fn abandon(&self) {
        let gone = Status::new(StatusCode::Cancelled, "connection closed");
        self.conn.abandon_all(&gone);
    }
}
