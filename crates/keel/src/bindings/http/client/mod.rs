//! The client side: [`HttpClient`] carries a [`Channel`](crate::Channel)'s calls as HTTP
//! requests. HTTP/1.1 (hyper): a pool of keep-alive connections, one call at a time each, at
//! most `http_max_connections`. HTTP/2 (the `h2` crate, see [`super::h2conn`]): one
//! multiplexed connection, reconnected on the next call after it fails.
//!
//! On `grpc://` and `grpcs://` the same client speaks gRPC (`grpc.rs`): HTTP/2 only, the same
//! connection, keepalive and cancellation, with gRPC's framing, headers and trailers.

mod grpc;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ::http::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, CONNECTION, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_TYPE, HOST,
};
use ::http::uri::{self, Authority, PathAndQuery, Scheme};
use ::http::{Method, Request, Response, Uri};
use bytes::Bytes;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::body::{self, Body, ReadError, Received};
use super::conns::{ClientConns, Tasks};
use super::h2conn::{self, RecvBody, RequestBody};
use super::{
    details_decode, metadata_from_headers, metadata_to_headers, ARGS, DEADLINE, DETAILS,
    MSGPACK_CONTENT_TYPE, STATUS, STATUS_HEADER, STREAM_CONTENT_TYPE, UNPROCESSED,
};
use crate::bindings::{
    Again, Answer, Attempt, BoxFuture, ClientSettings, ClientTransport, ConnCounts, HttpVersion,
    Outgoing, Replied, StreamBack,
};
use crate::core::compress::Compression;
use crate::core::error::{Error, Kind};
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::runtime::clock;
use crate::transport::{Endpoint, ALPN_H2, ALPN_HTTP1};

/// The HTTP version of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
}

/// A channel's HTTP connections and how calls use them.
pub(crate) struct HttpClient {
    endpoint: Endpoint,
    config: ClientSettings,
    /// `Auto` over TLS: the version ALPN agreed on the first connection (HTTP/2 is tried first).
    negotiated: Mutex<Option<Proto>>,
    /// Idle HTTP/1.1 connections, most recently used last.
    idle: Arc<Mutex<Vec<H1ClientConn>>>,
    /// HTTP/1.1 connections draining a streamed answer the caller stopped reading.
    draining: Arc<body::Draining>,
    /// One permit per HTTP/1.1 call in progress, so at most `http_max_connections` exist.
    h1_slots: Arc<Semaphore>,
    /// The HTTP/2 connection, if any.
    h2: Mutex<Option<H2ClientConn>>,
    /// Serialises HTTP/2 connection attempts so a burst of first calls opens one connection.
    h2_connecting: tokio::sync::Mutex<()>,
    conns: Arc<ClientConns>,
    /// Calls are gRPC calls (`grpc://`, `grpcs://`): HTTP/2 only.
    grpc: bool,
    /// The scheme and authority of an HTTP/2 request's URI, parsed once; or why the endpoint
    /// has none (a Unix socket's has no authority).
    origin: Result<(Scheme, Authority), String>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("endpoint", &self.endpoint)
            .field("version", &self.config.http_version)
            .field("connections", &self.conns.open())
            .finish_non_exhaustive()
    }
}

/// A client's HTTP/1.1 connection: where its next request is sent.
struct H1ClientConn {
    sender: http1::SendRequest<Body>,
    id: u64,
}

/// A client's HTTP/2 connection: where its requests' streams are opened.
#[derive(Clone)]
struct H2ClientConn {
    sender: h2::client::SendRequest<Bytes>,
    id: u64,
    /// The connection's upload tasks, ended with it.
    tasks: Tasks,
    /// Its calls waiting for answers, for its keepalive.
    waiting: Arc<crate::bindings::Waiting>,
}

/// A stream opened on the HTTP/2 connection: its response's future, its upload's guard, the
/// connection's id, and the call's place among the connection's waiting calls (held until the
/// answer's head arrives, or the call ends).
type H2Stream = (
    h2::client::ResponseFuture,
    Option<h2conn::UploadGuard>,
    u64,
    crate::bindings::WaitingGuard,
);

/// A freshly opened connection.
enum Established {
    H1(H1ClientConn),
    H2(H2ClientConn),
}

/// What one try of a call over one version ended with.
enum Tried {
    Done(Answer),
    /// No connection could be made: nothing was sent.
    NoConnection(Error),
    /// It never left: the connection opened for the call speaks the other version (ALPN), or
    /// the connection had closed or was going away before the request was sent.
    NotSent,
    /// The host did not process the call because it is going away (HTTP/2: GOAWAY named an
    /// earlier stream, or REFUSED_STREAM; any version: 503 marked `keel-unprocessed`).
    Unprocessed,
}

impl Tried {
    /// Connecting failed with `e`: nothing was sent if it could not connect (another host may
    /// take the call); any other failure (a bad TLS setting, ...) is the call's answer.
    fn connect_failed(e: Error) -> Tried {
        if e.kind() == Kind::Connect {
            Tried::NoConnection(e)
        } else {
            Tried::Done(Err(e))
        }
    }
}

/// The scheme and authority of `endpoint`'s HTTP/2 requests, or why it has none.
fn origin(endpoint: &Endpoint) -> Result<(Scheme, Authority), String> {
    let scheme = if endpoint.is_tls() {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    };
    let authority = endpoint.authority().unwrap_or_default();
    let authority = Authority::try_from(authority).map_err(|e| e.to_string())?;
    Ok((scheme, authority))
}

impl HttpClient {
    pub(crate) fn new(endpoint: Endpoint, config: ClientSettings) -> HttpClient {
        let slots = config.http_max_connections.clamp(1, Semaphore::MAX_PERMITS);
        HttpClient {
            negotiated: Mutex::new(None),
            idle: Arc::new(Mutex::new(Vec::new())),
            draining: Arc::default(),
            h1_slots: Arc::new(Semaphore::new(slots)),
            h2: Mutex::new(None),
            h2_connecting: tokio::sync::Mutex::new(()),
            conns: Arc::new(ClientConns::new(config.reconnects.clone())),
            origin: origin(&endpoint),
            endpoint,
            config,
            grpc: false,
        }
    }

    /// A client whose calls are gRPC calls over HTTP/2 (`grpc://`, `grpcs://`).
    pub(crate) fn new_grpc(endpoint: Endpoint, config: ClientSettings) -> HttpClient {
        let mut client = HttpClient::new(endpoint, config);
        client.grpc = true;
        client
    }

    /// The version the next call uses.
    fn proto(&self) -> Proto {
        if self.grpc {
            return Proto::H2;
        }
        match self.config.http_version {
            HttpVersion::Http1 => Proto::H1,
            HttpVersion::Http2 => Proto::H2,
            _ if self.endpoint.is_tls() => {
                let negotiated = *self.negotiated.lock().unwrap_or_else(|e| e.into_inner());
                negotiated.unwrap_or(Proto::H2)
            }
            _ => Proto::H1,
        }
    }

    /// Opens a connection now unless one is open.
    async fn open_inner(&self) -> Result<(), Error> {
        loop {
            match self.proto() {
                Proto::H2 => match self.h2_conn().await? {
                    Some(conn) => return self.settle_h2(conn).await,
                    None => continue,
                },
                Proto::H1 => {
                    if self.conns.open() > 0 {
                        return Ok(());
                    }
                    match self.connect(Proto::H1).await? {
                        Established::H1(c) => {
                            self.put_idle(c);
                            return Ok(());
                        }
                        Established::H2(c) => self.adopt_h2(c),
                    }
                }
            }
        }
    }

    /// Exchanges one request on a new HTTP/2 connection, so that the host's SETTINGS (its
    /// flow-control windows) are in force before the first call: until they arrive a client
    /// may send only HTTP/2's default 64 KiB on a stream, and a first large upload would stall
    /// for a round trip. (`OPTIONS /` asks nothing of the host; any answer will do.)
    async fn settle_h2(&self, conn: H2ClientConn) -> Result<(), Error> {
        let authority = self.endpoint.authority().unwrap_or_default();
        let uri = format!("{}://{authority}/", self.endpoint.http_scheme());
        let request = Request::builder()
            .method(Method::OPTIONS)
            .uri(uri)
            .body(())
            .map_err(|e| Error::new(Kind::Config, format!("{}: {e}", self.endpoint)))?;
        let answered = async {
            let mut sender = conn.sender.ready().await?;
            let (response, _) = sender.send_request(request, true)?;
            response.await
        };
        match tokio::time::timeout(self.config.connect_timeout, answered).await {
            Ok(Ok(_)) => Ok(()),
            // A gRPC server (or a proxy that routes only gRPC) may reset the stream: an answer
            // too, after the host's SETTINGS.
            Ok(Err(e)) if self.grpc && e.is_reset() && e.is_remote() => Ok(()),
            Ok(Err(e)) => Err(self.broken(e)),
            Err(_) => Err(Error::new(
                Kind::Connect,
                format!(
                    "{}: no HTTP/2 answer within the connect timeout",
                    self.endpoint
                ),
            )),
        }
    }

    /// One attempt of a call: one request, one response, within `deadline` (see
    /// [`ClientTransport::attempt`]).
    ///
    /// The deadline bounds the call until the answer's head arrives; a streamed answer then
    /// flows until it ends or the caller drops it. For a call the host refused unprocessed, or
    /// that never left, the request stream comes back unless a chunk of it was taken.
    async fn attempt_inner(&self, call: &mut Outgoing, deadline: Instant) -> Attempt {
        if self.grpc {
            return self.attempt_grpc(call, deadline).await;
        }
        let proto = self.proto();
        let (service, operation) = (call.service, call.operation);
        let made = self.request(
            proto,
            (service, operation),
            (&call.metadata, call.compression, call.accepts_compressed),
            &call.body,
            call.upload.take(),
            deadline,
        );
        let (request, body, stream_back) = match made {
            Ok(made) => made,
            Err(e) => return Attempt::Answered(Err(e)),
        };
        let sent = async {
            match proto {
                Proto::H1 => {
                    let request = request.map(|()| body.into_body());
                    self.send_h1(request, call.download, call.fresh).await
                }
                Proto::H2 => self.send_h2(request, body, call.download).await,
            }
        };
        let why = match tokio::time::timeout_at(clock::to_tokio(deadline), sent).await {
            Ok(Tried::Done(answer)) => return Attempt::Answered(answer),
            Ok(Tried::NoConnection(e)) => Again::NoConnection(e),
            Ok(Tried::NotSent) => Again::NotSent,
            Ok(Tried::Unprocessed) => Again::Unprocessed,
            Err(_) => return Attempt::Answered(Err(call.timed_out())),
        };
        Attempt::Again { stream_back, why }
    }

    /// A call over HTTP/1.1: an idle pooled connection, or a new one below the cap, or wait.
    /// `fresh`: a new connection in any case (the host refused the call on a pooled one).
    async fn send_h1(&self, request: Request<Body>, download: bool, fresh: bool) -> Tried {
        let Ok(permit) = self.h1_slots.clone().acquire_owned().await else {
            unreachable!("the semaphore is never closed");
        };
        let conn = loop {
            if fresh {
                // Idle ones may lead to the host that is going away.
                self.drop_idle();
            } else {
                if let Some(c) = self.take_idle() {
                    break c;
                }
                // A connection finishing a drain is free soon: cheaper than a new one.
                if self.draining.wait_one().await {
                    continue;
                }
            }
            match self.connect(Proto::H1).await {
                Ok(Established::H1(c)) => break c,
                Ok(Established::H2(c)) => {
                    self.adopt_h2(c);
                    return Tried::NotSent;
                }
                Err(e) => return Tried::connect_failed(e),
            }
        };
        // Until the answer is read to its end the connection cannot carry another call:
        // dropped early (deadline, caller gone), the lease closes it, which also tells the host
        // to stop the call.
        let mut lease = Lease {
            idle: self.idle.clone(),
            conns: self.conns.clone(),
            conn: Some(conn),
            keep: false,
            _permit: Some(permit),
        };
        let sender = &mut lease.conn.as_mut().expect("leased").sender;
        if sender.ready().await.is_err() {
            // A pooled connection the host had closed meanwhile.
            return Tried::NotSent;
        }
        match sender.try_send_request(request).await {
            Ok(response) if unprocessed(&response) => {
                // Its host is going away: so may the others' (closed, as is this one).
                self.drop_idle();
                Tried::Unprocessed
            }
            Ok(response) => {
                let (result, reusable) = self.answer(response, download, Some(&mut lease)).await;
                lease.keep = reusable;
                Tried::Done(result)
            }
            Err(mut e) => match e.take_message() {
                // Given back unsent: a pooled connection the host had closed meanwhile.
                Some(_) => Tried::NotSent,
                None => Tried::Done(Err(self.broken(e.into_error()))),
            },
        }
    }

    /// A call over the HTTP/2 connection: the caller's task opens the stream, sends a
    /// buffered body and awaits the answer (see [`super::h2conn`]).
    ///
    /// Dropping this future (deadline, caller gone) resets the stream: the host stops the
    /// call. The connection carries on.
    async fn send_h2(&self, request: Request<()>, body: RequestBody, download: bool) -> Tried {
        let (response, upload, id, _waiting) = match self.open_h2_stream(request, body).await {
            Ok(opened) => opened,
            Err(tried) => return tried,
        };
        match response.await {
            Ok(response) if unprocessed(&response) => {
                // Its streams in flight finish; new calls go to a new connection.
                self.forget_h2(id);
                Tried::Unprocessed
            }
            Ok(response) => {
                let (parts, stream) = response.into_parts();
                let declared = parts
                    .headers
                    .get(CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok());
                let response = Response::from_parts(parts, RecvBody::new(stream, declared, upload));
                Tried::Done(self.answer(response, download, None).await.0)
            }
            Err(e) if h2conn::refused_unprocessed(&e) => {
                self.forget_h2(id);
                Tried::Unprocessed
            }
            Err(e) => Tried::Done(Err(self.broken(e))),
        }
    }

    /// Opens a stream for `request` on the HTTP/2 connection (connecting if there is none) and
    /// sends `body` on it: the response's future, the upload's guard, and the connection's id;
    /// or what the try ended with if the request could not be sent.
    async fn open_h2_stream(
        &self,
        request: Request<()>,
        body: RequestBody,
    ) -> Result<H2Stream, Tried> {
        let conn = match self.h2_conn().await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(Tried::NotSent),
            Err(e) => return Err(Tried::connect_failed(e)),
        };
        let id = conn.id;
        let Ok(mut sender) = conn.sender.ready().await else {
            // Closed, or the host said GOAWAY: new calls go to a new connection.
            self.forget_h2(id);
            return Err(Tried::NotSent);
        };
        let tasks = conn.tasks;
        let waiting = conn.waiting.enter();
        match h2conn::send(&mut sender, request, body, |pipe| tasks.spawn(pipe)) {
            Ok((response, upload)) => Ok((response, upload, id, waiting)),
            Err(e) if e.is_io() || e.is_go_away() || e.is_reset() => {
                self.forget_h2(id);
                Err(Tried::NotSent)
            }
            Err(e) => Err(Tried::Done(Err(self.broken(e)))),
        }
    }

    /// The live HTTP/2 connection, connecting if there is none; `None` if ALPN chose HTTP/1.1.
    async fn h2_conn(&self) -> Result<Option<H2ClientConn>, Error> {
        if let Some(c) = self.current_h2() {
            return Ok(Some(c));
        }
        let _connecting = self.h2_connecting.lock().await;
        if let Some(c) = self.current_h2() {
            return Ok(Some(c));
        }
        match self.connect(Proto::H2).await? {
            Established::H2(c) => {
                *self.h2.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
                Ok(Some(c))
            }
            Established::H1(c) => {
                *self.negotiated.lock().unwrap_or_else(|e| e.into_inner()) = Some(Proto::H1);
                self.put_idle(c);
                Ok(None)
            }
        }
    }

    fn current_h2(&self) -> Option<H2ClientConn> {
        let slot = self.h2.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().filter(|c| self.conns.is_open(c.id)).cloned()
    }

    /// Stops using HTTP/2 connection `id` for new calls; streams in flight on it finish.
    fn forget_h2(&self, id: u64) {
        let mut slot = self.h2.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|c| c.id == id) {
            *slot = None;
        }
    }

    /// An HTTP/2 connection opened where HTTP/1.1 was expected (ALPN): use it from now on.
    fn adopt_h2(&self, conn: H2ClientConn) {
        *self.negotiated.lock().unwrap_or_else(|e| e.into_inner()) = Some(Proto::H2);
        let old = self
            .h2
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(conn);
        if let Some(old) = old {
            self.conns.kill(old.id);
        }
    }

    fn take_idle(&self) -> Option<H1ClientConn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(c) = idle.pop() {
            if !c.sender.is_closed() && self.conns.is_open(c.id) {
                return Some(c);
            }
            self.conns.kill(c.id);
        }
        None
    }

    /// Closes every idle HTTP/1.1 connection.
    fn drop_idle(&self) {
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        for c in idle {
            self.conns.kill(c.id);
        }
    }

    fn put_idle(&self, conn: H1ClientConn) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
    }

    /// Connects, secures and handshakes one connection within the connect timeout.
    async fn connect(&self, want: Proto) -> Result<Established, Error> {
        let endpoint = &self.endpoint;
        let connect_err = |e: std::io::Error| {
            Error::new(Kind::Connect, format!("{endpoint}: {e}")).with_source(e)
        };
        fn handshake_err<E>(endpoint: &Endpoint, e: E) -> Error
        where
            E: std::error::Error + Send + Sync + 'static,
        {
            Error::new(Kind::Connect, format!("{endpoint}: HTTP handshake: {e}")).with_source(e)
        }
        let connect = async {
            let raw = endpoint.connect_raw().await.map_err(connect_err)?;
            let alpn: &[&[u8]] = match self.config.http_version {
                _ if self.grpc => &[ALPN_H2],
                HttpVersion::Http1 => &[ALPN_HTTP1],
                HttpVersion::Http2 => &[ALPN_H2],
                _ => &[ALPN_H2, ALPN_HTTP1],
            };
            let connected = endpoint.secure_client(raw, &self.config.tls, alpn).await?;
            // What TLS agreed wins; without ALPN (cleartext) the configured version is spoken.
            let proto = match connected.alpn.as_deref() {
                Some(b"h2") => Proto::H2,
                Some(b"http/1.1") => Proto::H1,
                _ => want,
            };
            if proto != want && self.grpc {
                return Err(Error::new(
                    Kind::Protocol,
                    format!("{endpoint}: TLS agreed on {proto:?}, but gRPC needs HTTP/2"),
                ));
            }
            if proto != want && self.config.http_version != HttpVersion::Auto {
                return Err(Error::new(
                    Kind::Protocol,
                    format!(
                        "{endpoint}: TLS agreed on {proto:?}, but this client is configured for {:?}",
                        self.config.http_version
                    ),
                ));
            }
            Ok(match proto {
                Proto::H1 => {
                    let (sender, driver) = http1::Builder::new()
                        .handshake(TokioIo::new(connected.io))
                        .await
                        .map_err(|e| handshake_err(endpoint, e))?;
                    let id = self.conns.spawn(driver, None);
                    Established::H1(H1ClientConn { sender, id })
                }
                Proto::H2 => {
                    let io = h2conn::Counted::new(connected.io);
                    let read = io.read.clone();
                    let (sender, driver) = h2conn::builder()
                        .handshake::<_, Bytes>(io)
                        .await
                        .map_err(|e| handshake_err(endpoint, e))?;
                    let tasks = Tasks::default();
                    let waiting = Arc::new(crate::bindings::Waiting::default());
                    // HTTP/2 PINGs after a keepalive interval without a byte from the host, or
                    // a quarter second while calls wait; no answer closes the connection (its
                    // calls fail as a lost connection; the next call reconnects).
                    let driver =
                        h2conn::drive(driver, read, waiting.clone(), self.config.keepalive);
                    let id = self.conns.spawn(driver, Some(tasks.clone()));
                    Established::H2(H2ClientConn {
                        sender,
                        id,
                        tasks,
                        waiting,
                    })
                }
            })
        };
        match tokio::time::timeout(self.config.connect_timeout, connect).await {
            Ok(result) => result,
            Err(_) => Err(Error::new(
                Kind::Connect,
                format!(
                    "{endpoint}: no connection within {:?}",
                    self.config.connect_timeout
                ),
            )),
        }
    }

    /// The URI of a request for `/{segments[0]}/{segments[1]}`: the path alone on HTTP/1.1
    /// (its Host header carries the authority), with the endpoint's scheme and authority on
    /// HTTP/2 (its pseudo-headers). Put together from parts, not formatted and parsed.
    fn uri(&self, proto: Proto, segments: [&str; 2]) -> Result<Uri, Error> {
        let mut path = String::with_capacity(segments[0].len() + segments[1].len() + 2);
        for segment in segments {
            path.push('/');
            path.push_str(segment);
        }
        let path = PathAndQuery::try_from(path).map_err(|e| self.config_error(e))?;
        if proto == Proto::H1 {
            return Ok(Uri::from(path));
        }
        let (scheme, authority) = self
            .origin
            .as_ref()
            .map_err(|why| Error::new(Kind::Config, format!("{}: {why}", self.endpoint)))?;
        let mut parts = uri::Parts::default();
        parts.scheme = Some(scheme.clone());
        parts.authority = Some(authority.clone());
        parts.path_and_query = Some(path);
        Uri::from_parts(parts).map_err(|e| self.config_error(e))
    }

    /// A request this client's endpoint cannot make (a bad URI or header value): a
    /// configuration error naming the endpoint.
    fn config_error(&self, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::new(Kind::Config, format!("{}: {e}", self.endpoint)).with_source(e)
    }

    /// `POST /{service}/{operation}` with a postcard body and the remaining deadline; or, for a
    /// streamed upload, the stream as the body and the other arguments (`body`) in the
    /// `keel-args` header, and where the stream comes back if the request is dropped before a
    /// chunk of it was taken. The request's head, its body, and that.
    fn request(
        &self,
        proto: Proto,
        (service, operation): (&str, &str),
        (metadata, compression, accepts_compressed): (&Metadata, Option<Compression>, bool),
        body: &Bytes,
        upload: Option<ByteStream>,
        deadline: Instant,
    ) -> Result<(Request<()>, RequestBody, Option<StreamBack>), Error> {
        let authority = self.endpoint.authority().unwrap_or_default();
        let uri = self.uri(proto, [service, operation])?;
        let remaining = deadline.saturating_duration_since(clock::now());
        // Rounded up, so a sub-millisecond remainder is not sent as "no time at all".
        let remaining_ms = remaining.as_micros().div_ceil(1000).max(1);
        let remaining_ms = u64::try_from(remaining_ms).unwrap_or(u64::MAX);
        // The head is built in place (`Request::builder` moves its parts through a `Result`
        // at every step), with header names that need no parsing. After the metadata, headers
        // are appended, as the builder did.
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(ACCEPT, HeaderValue::from_static(MSGPACK_CONTENT_TYPE));
        headers.insert(DEADLINE, HeaderValue::from(remaining_ms));
        if proto == Proto::H1 {
            let host = HeaderValue::from_str(authority).map_err(|e| self.config_error(e))?;
            headers.insert(HOST, host);
        }
        metadata_to_headers(metadata, headers);
        if accepts_compressed {
            headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("zstd, gzip"));
        }
        let (body, returned) = match upload {
            Some(stream) => {
                headers.append(CONTENT_TYPE, HeaderValue::from_static(STREAM_CONTENT_TYPE));
                let args = HeaderValue::try_from(super::args_encode(body))
                    .map_err(|e| self.config_error(e))?;
                headers.append(ARGS, args);
                let (body, returned) = body::replayable(stream);
                (RequestBody::Stream(body), Some(returned))
            }
            None => {
                headers.append(CONTENT_TYPE, HeaderValue::from_static(MSGPACK_CONTENT_TYPE));
                if let Some(codec) = compression {
                    headers.append(CONTENT_ENCODING, HeaderValue::from_static(codec.as_str()));
                }
                // hyper adds it on HTTP/1.1; on HTTP/2 it lets the host refuse an oversized
                // body before reading it.
                if proto == Proto::H2 {
                    headers.append(CONTENT_LENGTH, HeaderValue::from(body.len()));
                }
                (RequestBody::Full(body.clone()), None)
            }
        };
        Ok((request, body, returned))
    }

    /// Reads an answer; also says whether its HTTP/1.1 connection (`lease`) can carry another
    /// call now. A streamed answer takes the lease along: the connection returns to the pool
    /// when the stream was read to its end (or drained after an early stop).
    async fn answer<B: Received>(
        &self,
        response: Response<B>,
        download: bool,
        lease: Option<&mut Lease>,
    ) -> (Answer, bool) {
        let (parts, incoming) = response.into_parts();
        let closing = parts
            .headers
            .get(CONNECTION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
        let ok = parts.headers.get(STATUS).and_then(|v| v.to_str().ok())
            == Some(StatusCode::Ok.as_str());
        if download && ok {
            let stream = match lease {
                None => body::received(incoming, None, |_| {}),
                Some(lease) => {
                    let lease = lease.take();
                    let drain = (body::DRAIN_LIMIT, self.draining.clone());
                    body::received(incoming, Some(drain), move |whole| {
                        let mut lease = lease;
                        lease.keep = whole && !closing;
                        drop(lease); // Back to the pool, or closed.
                    })
                }
            };
            let replied = Replied {
                payload: Payload::Stream(stream),
                metadata: metadata_from_headers(&parts.headers),
                compression: None,
            };
            return (Ok(Ok(replied)), false);
        }
        let limit = self.config.max_message_size;
        let drain = match lease {
            Some(_) => body::DRAIN_LIMIT,
            None => 0,
        };
        let body = match body::read_limited(incoming, limit, drain, None).await {
            Ok((b, _)) => b,
            Err(ReadError::TooLarge { size, drained }) => {
                let size = size.map_or_else(|| "more than".to_string(), |n| format!("{n}"));
                let msg = format!(
                    "reply body of {size} bytes exceeds this client's limit of {limit} bytes"
                );
                return (Err(Error::new(Kind::TooLarge, msg)), drained && !closing);
            }
            Err(ReadError::Broken(e)) => {
                let e = Error::new(Kind::Connection, format!("{}: {e}", self.endpoint));
                return (Err(e), false);
            }
            Err(ReadError::NoRoom) => unreachable!("no budget on the client"),
        };
        let metadata = metadata_from_headers(&parts.headers);
        let compression = match parts.headers.get(CONTENT_ENCODING).map(|v| v.to_str()) {
            None => None,
            Some(Ok(v)) if v.trim().eq_ignore_ascii_case("identity") => None,
            Some(Ok(v)) => match Compression::from_token(v) {
                Some(c) => Some(c),
                None => {
                    let why = format!(
                        "{}: the host answered with content encoding `{v}`",
                        self.endpoint
                    );
                    return (Err(Error::new(Kind::Protocol, why)), !closing);
                }
            },
            Some(Err(_)) => {
                let why = format!("{}: an unreadable content encoding", self.endpoint);
                return (Err(Error::new(Kind::Protocol, why)), !closing);
            }
        };
        let details = parts
            .headers
            .get(DETAILS)
            .and_then(|v| details_decode(v.as_bytes()))
            .unwrap_or_default();
        let ok = |body| {
            let payload = Payload::Body(body);
            Ok(Ok(Replied {
                compression,
                payload,
                metadata: metadata.clone(),
            }))
        };
        let result = match parts.headers.get(STATUS).map(|v| v.to_str()) {
            Some(Ok(code)) => match StatusCode::from_name(code) {
                Some(StatusCode::Ok) => ok(body),
                Some(code) => {
                    // A JSON error body is for other clients; keel's asks for postcard, so the
                    // body is the message (or the fault).
                    Ok(Err(Status::from_wire_parts(
                        code,
                        body,
                        details.into(),
                        metadata.clone(),
                    )
                    .with_retry_after(retry_after(&parts.headers))))
                }
                // A code this client does not know: `unknown`, with its name kept.
                None => Ok(Err(Status::new(
                    StatusCode::Unknown,
                    format!("{code}: {}", String::from_utf8_lossy(&body)),
                )
                .with_details(details)
                .with_metadata(metadata.clone()))),
            },
            _ if parts.status.is_success() => ok(body),
            _ if parts.status == ::http::StatusCode::PAYLOAD_TOO_LARGE => Err(Error::new(
                Kind::TooLarge,
                format!(
                    "{}: HTTP 413 without a {STATUS_HEADER} header",
                    self.endpoint
                ),
            )),
            _ => {
                let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                Err(Error::new(
                    Kind::Protocol,
                    format!(
                        "{}: HTTP {} without a {STATUS_HEADER} header (not a keel host?): {text}",
                        self.endpoint, parts.status
                    ),
                ))
            }
        };
        (result, !closing)
    }

    fn broken<E: std::error::Error + Send + Sync + 'static>(&self, e: E) -> Error {
        Error::new(Kind::Connection, format!("{}: {e}", self.endpoint)).with_source(e)
    }
}

/// The wait a `Retry-After: <seconds>` header asks for (an HTTP date is not honoured: keel's
/// hosts send seconds).
fn retry_after(headers: &::http::HeaderMap) -> Option<std::time::Duration> {
    let seconds: u64 = headers
        .get(::http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(std::time::Duration::from_secs(seconds))
}

/// Whether an answer says the host did not process the call because it is going away (503
/// with `keel-unprocessed: 1`).
fn unprocessed<B>(response: &Response<B>) -> bool {
    response.status() == ::http::StatusCode::SERVICE_UNAVAILABLE
        && response
            .headers()
            .get(UNPROCESSED)
            .is_some_and(|v| v.as_bytes() == b"1")
}

impl ClientTransport for HttpClient {
    fn attempt<'a>(&'a self, call: &'a mut Outgoing, deadline: Instant) -> BoxFuture<'a, Attempt> {
        Box::pin(self.attempt_inner(call, deadline))
    }

    fn open(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.open_inner())
    }

    fn close(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
        *self.h2.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.conns.kill_all();
    }

    fn is_connected(&self) -> bool {
        self.conns.open() > 0
    }

    fn counts(&self) -> ConnCounts {
        let c = &self.conns;
        ConnCounts {
            opened: c.opened.load(Ordering::Relaxed),
            closed: c.closed.load(Ordering::Relaxed),
            open: c.open(),
            sent_early: 0,
        }
    }
}

impl Drop for HttpClient {
    fn drop(&mut self) {
        self.conns.kill_all();
    }
}

/// An HTTP/1.1 connection in use by one call: back to the pool if the call read its answer to
/// the end on a connection that stays open, closed otherwise.
struct Lease {
    idle: Arc<Mutex<Vec<H1ClientConn>>>,
    conns: Arc<ClientConns>,
    conn: Option<H1ClientConn>,
    keep: bool,
    /// The call's place under `http_max_connections`, held until the connection is free.
    _permit: Option<OwnedSemaphorePermit>,
}

impl Lease {
    /// Moves the connection (and the permit) to a new lease, for a streamed answer to return
    /// when it is done; this one is left empty.
    fn take(&mut self) -> Lease {
        Lease {
            idle: self.idle.clone(),
            conns: self.conns.clone(),
            conn: self.conn.take(),
            keep: false,
            _permit: self._permit.take(),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.keep {
                self.idle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(conn);
            } else {
                self.conns.kill(conn.id);
            }
        }
    }
}
