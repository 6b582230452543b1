//! keel: a service (RPC) framework whose latency stays flat — on the first call, under a burst
//! of blocking work, after an idle hour, and on a high-latency link.
//!
//! # A tour
//!
//! A contract is a trait marked [`contract`]. Plain `fn` operations run on keel-pool (an
//! elastic thread pool that never makes a burst wait); `async fn` operations run on the host's
//! runtime. `Result<T, E>` operations send `E` to the caller as a typed fault.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//!
//! // A type that also derives `JsonSchema` is described in the OpenAPI document (the default
//! // feature `openapi`; see [`openapi`]); without it, the document says "any JSON value".
//! #[derive(Debug, Clone, Serialize, Deserialize, keel::schemars::JsonSchema)]
//! #[schemars(crate = "keel::schemars")]
//! pub struct DivideByZero;
//!
//! #[keel::contract]
//! pub trait Calculator {
//!     fn add(&self, a: f64, b: f64) -> f64;
//!     async fn multiply(&self, a: f64, b: f64) -> f64;
//!     fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
//! }
//!
//! struct Calc;
//! impl Calculator for Calc {
//!     fn add(&self, a: f64, b: f64) -> f64 { a + b }
//!     async fn multiply(&self, a: f64, b: f64) -> f64 { a * b }
//!     fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero> {
//!         if b == 0.0 { Err(DivideByZero) } else { Ok(a / b) }
//!     }
//! }
//!
//! // The host owns its runtime and thread pool: no runtime needed here.
//! let host = keel::Host::builder()
//!     .service(CalculatorServer::new(Calc))
//!     .endpoint("tcp://127.0.0.1:0")
//!     .start()?;
//!
//! // `connect` opens the connection and completes the handshake: the first call pays no setup.
//! let client = CalculatorBlockingClient::connect(host.url())?;
//! assert_eq!(client.add(1.0, 2.0)?, 3.0);
//! assert_eq!(client.multiply(3.0, 4.0)?, 12.0);
//! let err = client.divide(1.0, 0.0).unwrap_err();
//! assert!(err.fault::<DivideByZero>().is_some());
//!
//! host.shutdown();
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! From async code, use the generated `CalculatorClient` instead: the same methods, `async`.
//!
//! # Where things are
//!
//! The names above are keel's everyday ones, at the root: [`contract`], [`Host`], [`Channel`],
//! [`Context`], [`Error`], [`Status`] and [`StatusCode`], [`Metadata`], [`ByteStream`],
//! [`Compression`]. The rest is grouped by who uses it:
//!
//! - [`host`]: building and running a host ([`HostBuilder`](host::HostBuilder), its
//!   [`HostConfig`](host::HostConfig) and [`HostStats`](host::HostStats)), and the host's
//!   [`Interceptor`](host::Interceptor);
//! - [`client`]: building a channel ([`ChannelBuilder`](client::ChannelBuilder)), retries, the
//!   client's [`Interceptor`](client::Interceptor), reply metadata;
//! - [`metadata`], [`stream`], [`service`]: the parts of a call and of a contract;
//! - [`tls`], [`http`], [`metrics`], [`openapi`], [`pool`]: TLS settings and certificates, the
//!   HTTP convention (and embedding a host in another HTTP server), metrics names and the
//!   Prometheus recorder, the OpenAPI document, the worker pool.
//!
//! # Cargo features
//!
//! | feature | default | what it adds | crates it costs |
//! |---|---|---|---|
//! | `http` | on | `http://` endpoints and clients (HTTP/1.1, HTTP/2, gRPC, gRPC-Web, Connect), [`http`] | hyper, h2, http |
//! | `tls` | on | `tcps://`, `https://`, `grpcs://`; [`tls`] | rustls, ring |
//! | `prometheus` | on | the Prometheus recorder whose text the admin endpoint serves (needs `http`) | metrics-exporter-prometheus (evmap, quanta, rand) |
//! | `openapi` | on | the OpenAPI document, JSON Schema by schemars | schemars |
//! | `quic` | off | `quic://` endpoints and clients: keel's calls on QUIC (turns `tls` on) | quinn, quinn-proto, quinn-udp |
//! | `dev-cert` | off | `keel::tls::self_signed`, with `tls`: **development and tests only** | rcgen (time, yasna, pem) |
//! | `wire-v1` | off | clients of keel's wire protocol version 1 and `application/x-keel-postcard` bodies | postcard (heapless) |
//! | `test-util` | off | `keel::testing`, keel's clock paused and moved by tests: **tests only** | none |
//!
//! A crate that depends on keel has about 120 crates in its build with the defaults and about
//! 60 with `default-features = false` (`cargo tree -e normal`).
//!
//! # Metadata, context, status codes, interceptors
//!
//! A call carries [`Metadata`] beside its arguments (an auth token, a tenant, a trace id): per
//! call with a generated client's `with_metadata`, for every call of a channel with
//! [`ChannelBuilder::default_metadata`](client::ChannelBuilder::default_metadata), or added by a [`client::Interceptor`]. A handler that
//! declares a [`Context`] parameter sees it, with the caller's address, the binding, its TLS
//! certificate under mutual TLS, the deadline and a cancellation signal; it can send metadata
//! back ([`Context::insert_reply_metadata`], read by the caller through [`ReplyMetadata`](client::ReplyMetadata)). An
//! operation returning `Result<T, keel::Status>` answers with any code of gRPC's set
//! ([`Status::not_found`], [`Status::unauthenticated`], ...) with a message and details. An
//! [`host::Interceptor`] added to the host sees every call before and after it, and may refuse it;
//! requests for the host's descriptions pass it too (as operation [`host::DESCRIBE`]).
//!
//! ```
//! use keel::host::Interceptor;
//! use keel::{Context, Status};
//!
//! #[keel::contract]
//! pub trait Accounts {
//!     async fn whoami(&self, ctx: Context) -> String;
//!     async fn balance(&self, id: u64) -> Result<i64, Status>;
//! }
//!
//! struct Bank;
//! impl Accounts for Bank {
//!     async fn whoami(&self, ctx: Context) -> String {
//!         ctx.extension::<String>().unwrap_or_default()
//!     }
//!     async fn balance(&self, id: u64) -> Result<i64, Status> {
//!         if id == 1 { Ok(100) } else { Err(Status::not_found(format!("no account {id}"))) }
//!     }
//! }
//!
//! /// Admits only `authorization: Bearer s3cret`, as the user `demo`.
//! struct Auth;
//! impl Interceptor for Auth {
//!     fn before(&self, ctx: &Context) -> Result<(), Status> {
//!         match ctx.metadata().get("authorization") {
//!             Some("Bearer s3cret") => Ok(ctx.insert_extension(String::from("demo"))),
//!             _ => Err(Status::unauthenticated("a valid bearer token is required")),
//!         }
//!     }
//! }
//!
//! let host = keel::Host::builder()
//!     .service(AccountsServer::new(Bank))
//!     .interceptor(Auth)
//!     .endpoint("tcp://127.0.0.1:0")
//!     .start()?;
//! let anonymous = AccountsBlockingClient::connect(host.url())?;
//! assert_eq!(anonymous.whoami().unwrap_err().status_code(), Some(keel::StatusCode::Unauthenticated));
//!
//! let mut token = keel::Metadata::new();
//! token.insert("authorization", "Bearer s3cret").unwrap();
//! let client = anonymous.with_metadata(token);
//! assert_eq!(client.whoami()?, "demo");
//! assert_eq!(client.balance(7).unwrap_err().status_code(), Some(keel::StatusCode::NotFound));
//! host.shutdown();
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! # Contracts that evolve
//!
//! keel's clients encode arguments as MessagePack maps keyed by name, so a client and a host
//! built from two versions of a contract keep working together in both directions when the
//! newer one adds an operation, a trailing parameter marked `#[keel(default)]`, or a struct
//! field marked `#[serde(default)]`: what a side does not know it ignores, what it expects
//! and does not get takes its default. (Renaming or removing what the other side still sends
//! is not compatible; neither is changing a type.) The wire protocol negotiates its version
//! and skips frame types it does not know (`PROTOCOL.md`).
//!
//! # Endpoints and TLS
//!
//! | URL | host | client |
//! |---|---|---|
//! | `tcp://host:port` | keel's wire protocol | keel's wire protocol |
//! | `tcps://host:port` | the same over TLS | the same over TLS |
//! | `unix:///path` | keel's wire protocol on a Unix socket | the same |
//! | `http://host:port` | HTTP/1.1 and HTTP/2 (prior knowledge) on one port: keel's convention ([`http`]), gRPC, OpenAPI | keel's convention, HTTP/1.1 (or HTTP/2, [`ChannelBuilder::http_version`](client::ChannelBuilder::http_version)) |
//! | `https://host:port` | the same over TLS (ALPN) | the same over TLS, HTTP/2 if ALPN agrees |
//! | `grpc://host:port` | (refused: hosts serve gRPC on `http://`) | gRPC over HTTP/2 (prior knowledge), to any gRPC server whose messages match the contract's `.proto` (`GRPC.md`, "keel's client") |
//! | `grpcs://host:port` | (refused: hosts serve gRPC on `https://`) | gRPC over HTTP/2 on TLS (ALPN `h2`) |
//! | `quic://host:port` | keel's calls on QUIC (UDP; TLS 1.3, ALPN `keel/1`; feature `quic`) | the same; 0-RTT on resumption for idempotent calls |
//!
//! A host listens on any mix of `tcp://host:port`, `tcps://host:port` (TLS), and
//! `unix:///path`. TLS endpoints need the host's certificate ([`HostBuilder::tls`](host::HostBuilder::tls)); clients
//! trust the system's root certificates unless told otherwise (`ChannelBuilder::tls`). For
//! development, `keel::tls::self_signed` (feature `dev-cert`, off by default: it is for
//! development and tests, not production builds) makes a self-signed certificate and both sides'
//! settings:
//!
//! ```
//! # #[cfg(all(feature = "tls", feature = "dev-cert"))]
//! # fn main() -> Result<(), keel::Error> {
//! #[keel::contract]
//! pub trait Greeter {
//!     fn hello(&self, name: String) -> String;
//! }
//!
//! struct English;
//! impl Greeter for English {
//!     fn hello(&self, name: String) -> String { format!("hello, {name}") }
//! }
//!
//! let cert = keel::tls::self_signed(&["localhost", "127.0.0.1"])?;
//! let host = keel::Host::builder()
//!     .service(GreeterServer::new(English))
//!     .endpoint("tcps://127.0.0.1:0")
//!     .tls(cert.server_tls()?)
//!     .start()?;
//!
//! let channel = keel::Channel::builder(host.url()).tls(cert.client_tls()?).build()?;
//! let client = GreeterBlockingClient::new(channel);
//! assert_eq!(client.hello("world".into())?, "hello, world");
//! host.shutdown();
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "tls", feature = "dev-cert")))]
//! # fn main() {}
//! ```
//!
//! # Over HTTP
//!
//! The same host also serves `http://` endpoints: HTTP/1.1 and HTTP/2 on one port, JSON for
//! curl and any language, MessagePack for keel's own clients (the convention is in [`http`]).
//!
//! ```
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Debug, Clone, Serialize, Deserialize, keel::schemars::JsonSchema)]
//! # #[schemars(crate = "keel::schemars")]
//! # pub struct DivideByZero;
//! # #[keel::contract]
//! # pub trait Calculator {
//! #     fn add(&self, a: f64, b: f64) -> f64;
//! #     fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
//! # }
//! # struct Calc;
//! # impl Calculator for Calc {
//! #     fn add(&self, a: f64, b: f64) -> f64 { a + b }
//! #     fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero> {
//! #         if b == 0.0 { Err(DivideByZero) } else { Ok(a / b) }
//! #     }
//! # }
//! # #[cfg(feature = "http")] {
//! let host = keel::Host::builder()
//!     .service(CalculatorServer::new(Calc))
//!     .endpoint("http://127.0.0.1:0")
//!     .start()?;
//!
//! // `curl <url>/Calculator/add --json '{"a": 1, "b": 2}'` answers `3.0`; keel's client speaks
//! // HTTP/1.1 (a pool of keep-alive connections) or, with `HttpVersion::Http2`, one HTTP/2
//! // connection.
//! let channel = keel::Channel::builder(host.url())
//!     .http_version(keel::client::HttpVersion::Http2)
//!     .build()?;
//! let client = CalculatorBlockingClient::new(channel);
//! client.open()?;
//! assert_eq!(client.add(1.0, 2.0)?, 3.0);
//! assert!(client.divide(1.0, 0.0).unwrap_err().fault::<DivideByZero>().is_some());
//! assert_eq!(client.channel().stats().connections_opened, 1);
//!
//! host.shutdown();
//! # }
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! Any language can call it from its OpenAPI 3.1 document: an `http://` endpoint serves the
//! document of every contract it hosts at `GET /openapi.json`, and [`openapi::document`]
//! writes it offline (to commit it and review its diff), with the JSON Schema of every
//! parameter, return and fault type that implements [`schemars::JsonSchema`] (derived through
//! `keel::schemars`), and an open schema that says so for any other (feature `openapi`, on by
//! default). OpenAPI generators (openapi-python-client, openapi-typescript, ...) make clients
//! from it.
//!
//! # Settings, and running inside your application
//!
//! Every setting has a setter with its default in its docs: [`HostBuilder`](host::HostBuilder) for hosts (throttle,
//! pool, limits, timeouts, TLS), [`ChannelBuilder`](client::ChannelBuilder) for clients (deadline, limits, TLS, HTTP
//! version). [`Host::config`] and [`Channel::config`] report what is in force.
//!
//! A host builds its own runtime unless given the application's with
//! [`HostBuilder::runtime`](host::HostBuilder::runtime); blocking operations run on keel-pool either way. Its HTTP binding
//! is also a `tower::Service` ([`Host::http_service`]), so an axum app can serve keel contracts
//! beside its own routes on one port (see [`http::HttpService`]). `ARCHITECTURE.md` in the
//! repository shows the layers and one call's path through the files.
//!
//! # Dead connections, retries and many hosts
//!
//! A NAT or load balancer that drops a quiet connection's state tells neither end. keel's
//! client pings a keel-wire connection it has heard nothing on for 20 s, and pings along with
//! a call that starts after a quiet second; a host that answers nothing within 1 s (at least
//! four round trips) is gone: the connection's calls fail [`StatusCode::Unavailable`] then,
//! not at their deadlines, and the next call opens a new connection. Calls that wait are
//! watched closer: after 250 ms with nothing arriving the client pings, and 1 s after the last
//! frame, that ping unanswered, a frozen host's calls fail (or go to another host, if
//! idempotent), the same `Unavailable` as a killed host's or a closed port's
//! ([`ChannelBuilder::keepalive`](client::ChannelBuilder::keepalive); the host's side is [`HostBuilder::keepalive`](host::HostBuilder::keepalive) and its limit
//! on a client's pings [`HostBuilder::ping_policy`](host::HostBuilder::ping_policy); the frames are in `PROTOCOL.md`).
//!
//! Calls of operations marked `#[keel(idempotent)]` are sent again after a failure that says
//! the host could not take them: `Unavailable`, `Busy`, `ShuttingDown`, or a connection that
//! could not be made or broke. Up to 3 attempts, with jittered exponential backoff (an HTTP
//! host's `Retry-After` is waited out), under a budget of 10 % of the channel's calls plus 10
//! a second, so retries cannot multiply the load of an outage ([`RetryPolicy`](client::RetryPolicy);
//! [`ChannelStats::retries`](client::ChannelStats::retries) counts them). Calls of other operations are never sent again once
//! they may have reached a host; those a host says it did not process (after a GoAway) are, on
//! any binding.
//!
//! ```
//! #[keel::contract]
//! pub trait Inventory {
//!     /// Reading twice is harmless: retried after a lost connection.
//!     #[keel(idempotent)]
//!     fn stock(&self, sku: String) -> u32;
//!     /// Never sent twice.
//!     fn reserve(&self, sku: String, n: u32) -> bool;
//! }
//! ```
//!
//! [`Channel::balanced`] spreads one channel's calls over several hosts: every address of
//! every URL it is given (a Kubernetes headless Service's name gives every ready pod),
//! resolved again every 30 s and after a connect failure. Each call goes to the less busy of
//! two hosts drawn at random; a host whose connection fails is left out for 1 s, doubling up
//! to 30 s while it keeps failing; a call that could not connect goes to another host,
//! whatever its operation (nothing was sent).
//!
//! # Calls that chain
//!
//! A handler that calls another service passes its [`Context`] to the client:
//! `with_context(&ctx)` on a generated client (async or blocking). The outgoing call then
//! - has at most the time the incoming call has left, less the channel's
//!   [`propagation_margin`](client::ChannelBuilder::propagation_margin) (default zero, as gRPC),
//!   and no more than its own deadline; with no time left it fails at once, timed out, without
//!   being sent;
//! - ends, [`StatusCode::Cancelled`], when the incoming call is cancelled (its caller cancelled
//!   or went away), on every binding, from an async handler and from a blocking one (a blocked
//!   call wakes); when the incoming call's deadline passes, the outgoing one's (no later) has
//!   passed too and it ends timed out. The host of the outgoing call is told as for any
//!   dropped call (a Cancel frame, a reset HTTP/2 stream, a closed HTTP/1.1 connection), so
//!   its handler sees the cancellation within one round trip. For an operation with a stream
//!   of messages or bytes, this covers the call until its answer's head arrives: a stream
//!   returned after that is not cut when the incoming call is cancelled (drop it, or watch
//!   [`Context::cancelled`], to stop it);
//! - carries the incoming call's values of the channel's
//!   [`propagate_metadata`](client::ChannelBuilder::propagate_metadata) keys (default
//!   `x-request-id`, `traceparent`, `tracestate`; the call's own metadata wins);
//! - has its client span a child of the incoming call's span, so a trace shows the hop.
//!
//! Explicit, not implicit: a context held in a task-local would silently not follow work a
//! handler spawns, and would chain calls that were meant to outlive the incoming one. A call
//! made without `with_context` starts from nothing, as before.
//!
//! ```
//! # use keel::{Context, Status};
//! #[keel::contract]
//! pub trait Backend {
//!     async fn work(&self, delay_ms: u64) -> u64;
//! }
//! #[keel::contract]
//! pub trait Frontdesk {
//!     async fn ask(&self, ctx: Context, delay_ms: u64) -> Result<u64, Status>;
//! }
//! struct Desk {
//!     next: BackendClient,
//! }
//! impl Frontdesk for Desk {
//!     async fn ask(&self, ctx: Context, delay_ms: u64) -> Result<u64, Status> {
//!         // The caller's deadline, cancellation and request id go along.
//!         Ok(self.next.with_context(&ctx).work(delay_ms).await?)
//!     }
//! }
//! ```
//!
//! `examples/chain.rs` runs the two hops: a caller with a 200 ms deadline asking for 2 s of
//! work gets `deadline_exceeded`, and the work two hops down is cancelled at once.
//!
//! # Metrics, health and a readiness-aware drain
//!
//! keel reports calls (by code, in flight, throttle wait, pool wait, handler and total time,
//! per operation), the throttle, the pool's threads, connections per binding and calls per
//! connection, and client calls, latency and reconnects through the `metrics` facade: any
//! recorder the application installs gets them, **if installed before hosts and channels are
//! built** (names and labels in [`metrics`]). With the `prometheus` feature (on by default), a
//! host's admin endpoint ([`HostBuilder::admin`](host::HostBuilder::admin)) serves them as Prometheus text at
//! `GET /metrics`, with `GET /healthz` and `GET /readyz` beside. A shutdown first turns
//! `/readyz` to 503 and keeps serving for [`HostBuilder::drain_grace`](host::HostBuilder::drain_grace), so that a load balancer
//! stops sending work before GoAway closes connections.
//!
//! ```
//! # #[cfg(feature = "prometheus")] {
//! # #[keel::contract] pub trait Echo { fn echo(&self, s: String) -> String; }
//! # struct E;
//! # impl Echo for E { fn echo(&self, s: String) -> String { s } }
//! use std::time::Duration;
//!
//! let host = keel::Host::builder()
//!     .service(EchoServer::new(E))
//!     .endpoint("tcp://127.0.0.1:0")
//!     .admin("http://127.0.0.1:0") // GET /metrics, /healthz, /readyz
//!     .drain_grace(Duration::from_millis(10))
//!     .start()?;
//! let client = EchoBlockingClient::connect(host.url())?;
//! client.echo("hi".into())?;
//! let text = keel::metrics::install_prometheus()?.render();
//! assert!(text.contains(r#"keel_server_calls_total{service="Echo",operation="echo",code="ok"}"#));
//! assert!(host.is_ready());
//! host.shutdown();
//! # }
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! # Tracing, and the blocking watchdog
//!
//! Every call has a [`tracing`](https://docs.rs/tracing) span on each side, named `keel.call`
//! at level INFO, target `keel::server` on the host and `keel::client` on the channel, with
//! OpenTelemetry's field names: `otel.kind` (`server` / `client`), `otel.name`
//! (`Service/operation`), `rpc.system` (`keel`), `rpc.service`, `rpc.method`, `keel.binding`
//! (the URL scheme), `client.address` (the peer, host side), `keel.call_id` (host side),
//! `server.address` (the channel's URL, client side) and `rpc.code` (the answer's
//! [`StatusCode::as_str`], `unavailable` for a host that could not be reached or was lost, or
//! `transport_error` for the caller's own failures, see [`Error::status_code`]). A client's
//! interceptors
//! run inside the client's span, so one can inject the current trace context into the call's
//! metadata (W3C `traceparent` and `tracestate`). On the host, decoding and the handler run
//! inside the span, and interceptors get it before it is entered ([`Context::span`]), so one
//! can give it the caller's context as its parent: an OpenTelemetry pipeline
//! (`tracing-opentelemetry`, default settings) then shows one trace across both processes.
//! `examples/trace.rs` does it end to end, with the interceptors in `keel_examples::otel`.
//! With no subscriber interested, a span is a disabled handle: nothing is formatted or
//! allocated.
//!
//! The host also watches its `async` operations for handlers that block their runtime worker
//! (a `std::thread::sleep`, a blocking read or lock in an `async fn`), the mistake that brings
//! the seeds' stalls back in async Rust: a poll longer than 10 ms is reported, naming the
//! operation, in a `log` warning, the counter `keel_server_handler_blocking_total` and
//! [`HostStats::handlers_blocked`](host::HostStats::handlers_blocked) ([`HostBuilder::blocking_watchdog`](host::HostBuilder::blocking_watchdog)).
//!
//! # Limits
//!
//! Everything a peer can make a host hold is bounded, with a safe default and a setter on
//! [`HostBuilder`](host::HostBuilder); what a host does at each limit is defined (a status, or a close with a
//! reason), and every other client keeps being served.
//!
//! | resource | limit (setter) | default | at the limit |
//! |---|---|---|---|
//! | connections | [`max_connections`](host::HostBuilder::max_connections) | 10,000 | the oldest handshake, or else the connection idle longest (one that never carried a call first), is closed to admit the newcomer; refused only if all have calls in flight |
//! | time to connect | [`handshake_timeout`](host::HostBuilder::handshake_timeout) | 10 s | closed (TLS and keel's handshakes each) |
//! | idle time | [`idle_timeout`](host::HostBuilder::idle_timeout) | 2 h | closed (GoAway on keel-wire); the client reconnects on its next call |
//! | a peer that vanished (keel-wire, HTTP/2) | [`keepalive`](host::HostBuilder::keepalive) | a Ping after 60 s with nothing received; nothing back in 20 s | closed, its calls stopped (keel's client pings its own quiet connections every 20 s and gives a silent host 1 s: [`ChannelBuilder::keepalive`](client::ChannelBuilder::keepalive)) |
//! | pings (keel-wire) | [`ping_policy`](host::HostBuilder::ping_policy) | 5 s between pings with no call between them; 2 strikes | GoAway `too many pings`, closed |
//! | a peer that vanished (TCP) | fixed: TCP keepalive | probes after 60 s without traffic, every 10 s, 3 of them | the kernel closes the connection (about 90 s); calls on it fail and the client reconnects |
//! | connection age | [`max_connection_age`](host::HostBuilder::max_connection_age) | off (grace 30 s) | GoAway at the age ±10 % (HTTP/2 GOAWAY; HTTP/1.1 `connection: close` on the next answer); the client moves its next calls to a new connection without failing one; calls still running after the grace are answered `ShuttingDown` |
//! | time to finish a frame, request head or body | [`frame_timeout`](host::HostBuilder::frame_timeout) | 30 s | closed (an HTTP body: 408) |
//! | unsent output | [`max_unsent_bytes`](host::HostBuilder::max_unsent_bytes) | 1 MiB | the connection is not read until its peer reads; closed if it does not within `frame_timeout` |
//! | bytes being received (frames and bodies over 64 KiB), per connection | [`max_receive_bytes_per_connection`](host::HostBuilder::max_receive_bytes_per_connection) | 16 MiB | waits for room within `frame_timeout`, then closed (an HTTP body: 408) |
//! | bytes being received, whole host | [`max_receive_bytes`](host::HostBuilder::max_receive_bytes) | 256 MiB | the same |
//! | message size | [`max_message_size`](host::HostBuilder::max_message_size) | 4 MiB | `TooLarge` (413), checked before allocating, and for a compressed body while it decompresses; the connection is kept |
//! | calls in flight per connection | [`max_calls_per_connection`](host::HostBuilder::max_calls_per_connection) | a quarter of the throttle's places (512) | `Busy` (503) |
//! | HTTP/2 streams per connection | follows the above | max(calls per connection, 128) | the client waits (`SETTINGS_MAX_CONCURRENT_STREAMS`) |
//! | QUIC streams per connection (`quic://`) | follows the above | max(calls per connection, 128) | the client waits (`MAX_STREAMS`); the other limits map onto QUIC as `PROTOCOL.md`, "QUIC" says (a frame not finished in time ends its stream, not the connection) |
//! | HTTP request head | fixed | 64 KiB (HTTP/1.1 buffer, HTTP/2 header list) | 431, or the connection is closed |
//! | calls running, host-wide | [`max_concurrent_calls`](host::HostBuilder::max_concurrent_calls) | 1,024 | queued |
//! | calls queued | [`max_queued_calls`](host::HostBuilder::max_queued_calls) | 1,024 | `Busy` (503 with `Retry-After`) at once |
//! | stream window | [`max_stream_window`](host::HostBuilder::max_stream_window) | 8 MiB | the sender waits for credit |
//! | streamed uploads per connection (keel-wire) | [`max_streams_per_connection`](host::HostBuilder::max_streams_per_connection) | 16 (an upload counts until its handler drops it, its last bytes read or not) | `Busy`, and the upload is told to stop |
//! | reply streams and sessions open per connection | [`max_reply_streams_per_connection`](host::HostBuilder::max_reply_streams_per_connection) | 100 | `Busy` (503), the call does not run |
//! | a message in a stream of messages | [`max_message_size`](host::HostBuilder::max_message_size) | 4 MiB | the stream ends `TooLarge`, checked before the message is buffered |
//! | messages buffered per stream | the stream window | the stream's flow-control window (keel-wire: 256 KiB to start, growing with the link's bandwidth-delay product up to `max_stream_window`; HTTP/2: 4 MiB), plus one gathered write of at most 32 KiB | the producer's `send` waits |
//! | calls queued in a session | fixed | 64 | the session's stream is not read until they run (its client's sends wait for the window) |
//! | a reply stream in a drain | [`close_timeout`](host::HostBuilder::close_timeout) | 10 s | ended with `ShuttingDown`, counted in [`ShutdownReport`](host::ShutdownReport)`::abandoned_calls` |
//! | pool threads | [`max_threads`](host::HostBuilder::max_threads) | 1,024 (see [`pool::DEFAULT_MAX_THREADS`]) | work queues, never dropped |
//! | listen backlog | [`listen_backlog`](host::HostBuilder::listen_backlog) | the system's limit: `net.core.somaxconn` on Linux (4,096 since 5.4), at most 65,535; 1,024 elsewhere or if unreadable | the kernel's (`somaxconn` caps it): a connect beyond it waits for a SYN retry |
//! | admin endpoint ([`admin`](host::HostBuilder::admin)) | fixed | 16 connections, 5 s per request head (and idle), 16 KiB heads, bodies not read, 60 s per connection | a newcomer is closed; a slow head or an idle connection is closed |
//! | metadata per message | fixed ([`MAX_METADATA_BYTES`]) | 16 KiB (keel-wire); over HTTP, the 64 KiB head | keel-wire: malformed, the connection is closed; keel's clients refuse to send more |
//!
//! # What `#[keel::contract]` generates
//!
//! For `trait Calculator`:
//! - the trait itself, with `async fn` operations returning `Send` futures and
//!   `Send + Sync + 'static` as supertraits;
//! - `CalculatorServer<S>`: wraps an implementation for [`HostBuilder::service`](host::HostBuilder::service);
//! - `CalculatorClient`: async methods returning `Result<T, keel::Error>`, plus `connect`,
//!   `new(Channel)`, `with_deadline`, `with_metadata`, `with_reply_metadata`, `open`, `close`;
//! - `CalculatorBlockingClient`: the same, blocking, for code without a runtime;
//! - `CalculatorClient::descriptor()`: the contract's [`ServiceDescriptor`](service::ServiceDescriptor), for
//!   [`openapi::document`].
//!
//! Rules, checked at compile time: operations take `&self`; parameters are `name: Type` with
//! owned serde types (`schemars::JsonSchema` too, if the OpenAPI document is to describe them:
//! never required); no generics; `#[keel(one_way)]` operations return `()` (the host
//! acknowledges receipt, the caller gets no result); at most one [`ByteStream`] parameter, and
//! none on a one-way operation. `#[keel(idempotent)]` lets clients retry an operation (see
//! "Dead connections and retries"; a call with a request stream is never retried).
//!
//! # Streamed transfer
//!
//! An operation may take a [`ByteStream`] (an upload), return one (a download), or both. A
//! stream's size has no limit and its memory is bounded: the sender only gets ahead of the
//! receiver by a flow-control window, which grows toward the link's bandwidth-delay product.
//! A receiver that stops early tells the sender to stop; the connection carries on.
//!
//! ```
//! use keel::ByteStream;
//!
//! #[keel::contract]
//! pub trait Files {
//!     /// Stores an upload under `name`; returns its size.
//!     async fn put(&self, name: String, data: ByteStream) -> u64;
//!     /// Sends `n` bytes back.
//!     async fn get(&self, n: u64) -> ByteStream;
//! }
//!
//! struct Store;
//! impl Files for Store {
//!     async fn put(&self, _name: String, mut data: ByteStream) -> u64 {
//!         let mut size = 0;
//!         while let Some(chunk) = data.next().await {
//!             size += chunk.map_or(0, |c| c.len() as u64);
//!         }
//!         size
//!     }
//!     async fn get(&self, n: u64) -> ByteStream {
//!         ByteStream::from(vec![0u8; n as usize])
//!     }
//! }
//!
//! let host = keel::Host::builder()
//!     .service(FilesServer::new(Store))
//!     .endpoint("tcp://127.0.0.1:0")
//!     .start()?;
//! let client = FilesBlockingClient::connect(host.url())?;
//! let chunks = (0..100).map(|_| vec![1u8; 10_000]);
//! assert_eq!(client.put("a".into(), ByteStream::from_iter(chunks))?, 1_000_000);
//! let mut download = client.get(5)?;
//! assert_eq!(download.blocking_next().unwrap()?.len(), 5);
//! host.shutdown();
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! # Streams of messages
//!
//! An operation may take a [`MessageStream<T>`](MessageStream) (client streaming), return one
//! (server streaming), or both (bidirectional), for any serde `T`, in `fn` and `async fn`
//! operations and in both generated clients: what gRPC's streaming calls do. Each message is
//! encoded as a unary body is (MessagePack for keel's clients, JSON for others), so contract
//! evolution applies per message. A stream ends cleanly, or with a [`Status`] or the
//! operation's typed fault ([`stream::MessageSender::abort`], [`stream::MessageSender::fault`]).
//! The flow control of streamed transfer holds: a consumer that stops reading stops the
//! producer (its `send` waits), and one that drops the stream stops it for good (its `send`
//! fails). The call's deadline covers the whole stream. Over HTTP, JSON callers read NDJSON or
//! Server-Sent Events (`HTTP.md`, "Streams of messages"); a bidirectional call needs keel-wire or
//! HTTP/2, and HTTP/1.1 refuses it with `Unimplemented`.
//!
//! ```
//! use keel::{MessageStream, Status};
//!
//! #[keel::contract]
//! pub trait Numbers {
//!     /// `0..n`, one message each (server streaming).
//!     async fn count(&self, n: u32) -> MessageStream<u32>;
//!     /// The sum of a stream of numbers (client streaming).
//!     fn sum(&self, numbers: MessageStream<u32>) -> Result<u64, Status>;
//!     /// Each number doubled, as it arrives (bidirectional).
//!     async fn double(&self, numbers: MessageStream<u32>) -> MessageStream<u32>;
//! }
//!
//! struct N;
//! impl Numbers for N {
//!     async fn count(&self, n: u32) -> MessageStream<u32> {
//!         MessageStream::from_iter(0..n)
//!     }
//!     fn sum(&self, numbers: MessageStream<u32>) -> Result<u64, Status> {
//!         let mut sum = 0;
//!         for n in numbers.blocking_iter() {
//!             sum += u64::from(n?);
//!         }
//!         Ok(sum)
//!     }
//!     async fn double(&self, mut numbers: MessageStream<u32>) -> MessageStream<u32> {
//!         let (tx, doubled) = MessageStream::channel(8);
//!         tokio::spawn(async move {
//!             while let Some(Ok(n)) = numbers.next().await {
//!                 if tx.send(n * 2).await.is_err() {
//!                     break; // The caller stopped reading.
//!                 }
//!             }
//!         });
//!         doubled
//!     }
//! }
//!
//! let host = keel::Host::builder()
//!     .service(NumbersServer::new(N))
//!     .endpoint("tcp://127.0.0.1:0")
//!     .start()?;
//! let client = NumbersBlockingClient::connect(host.url())?;
//! let counted: Vec<u32> = client.count(3)?.blocking_iter().collect::<Result<_, _>>()?;
//! assert_eq!(counted, [0, 1, 2]);
//! assert_eq!(client.sum(MessageStream::from_iter(1..=4))?, 10);
//! let doubled: Vec<u32> = client
//!     .double(MessageStream::from_iter([1, 2]))?
//!     .blocking_iter()
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(doubled, [2, 4]);
//! host.shutdown();
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! # Sessions and duplex contracts
//!
//! What WCF's sessions and `CallbackContract` do. A generated client's `open_session` opens a
//! session: a client whose calls go over one bidirectional stream to one instance of the
//! service and run one at a time, in the order they were made (WCF's
//! `ConcurrencyMode.Single`). `{Contract}Server::per_session(|ctx| ...)` makes that instance
//! per session (`InstanceContextMode.PerSession`): created when the session opens, dropped when
//! it closes or its client's connection goes, so per-caller state needs no map keyed by
//! connection. A contract declared with `#[keel::contract(callback = Callback)]` is duplex: the
//! client opens its session with an implementation of `Callback`, and a handler reaches a
//! client of it with [`Context::callback`] at any time while the session lives, including after
//! the call that started it returned; one-way and request-reply callbacks run on the client one
//! at a time, in order. Sessions run wherever a bidirectional stream does (keel-wire, HTTP/2);
//! a drain waits for open sessions up to its close timeout. `examples/duplex.rs` ports WCF's
//! Calculator Duplex sample.
//!
//! ```
//! use std::sync::Mutex;
//!
//! #[keel::contract]
//! pub trait Progress {
//!     #[keel(one_way)]
//!     fn total(&self, value: u64);
//! }
//!
//! #[keel::contract(callback = Progress)]
//! pub trait Tally {
//!     #[keel(one_way)]
//!     fn add(&self, ctx: keel::Context, n: u64);
//! }
//!
//! #[derive(Default)]
//! struct PerSession(Mutex<u64>);
//! impl Tally for PerSession {
//!     fn add(&self, ctx: keel::Context, n: u64) {
//!         let total = {
//!             let mut t = self.0.lock().unwrap();
//!             *t += n;
//!             *t
//!         };
//!         let progress = ctx.callback::<ProgressBlockingClient>().expect("in a session");
//!         progress.total(total).ok();
//!     }
//! }
//!
//! struct Printer(std::sync::mpsc::Sender<u64>);
//! impl Progress for Printer {
//!     fn total(&self, value: u64) {
//!         self.0.send(value).ok();
//!     }
//! }
//!
//! let host = keel::Host::builder()
//!     .service(TallyServer::per_session(|_| PerSession::default()))
//!     .endpoint("tcp://127.0.0.1:0")
//!     .start()?;
//! let (tx, totals) = std::sync::mpsc::channel();
//! let session = TallyBlockingClient::connect(host.url())?.open_session(Printer(tx))?;
//! session.add(2)?;
//! session.add(3)?;
//! assert_eq!(totals.recv().unwrap(), 2);
//! assert_eq!(totals.recv().unwrap(), 5);
//! session.close();
//! host.shutdown();
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! # Features
//!
//! Each feature adds to the others and to none: any set of them builds (CI checks none, each
//! alone, and all), and turning one on in one crate never breaks another crate's contracts.
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `http` | on | `http://` endpoints and clients: keel's HTTP convention ([`http`]), gRPC, gRPC-Web, Connect |
//! | `tls` | on | `tcps://` (and `https://` with `http`), with rustls ([`tls`]) |
//! | `prometheus` | on | the Prometheus recorder and `GET /metrics` on the admin endpoint (turns `http` on) |
//! | `openapi` | on | [`openapi`] and `GET /openapi.json`; [`schemars`] re-exported. No bound on contract types: those without `JsonSchema` get an open schema (`{}`) that names them |
//! | `quic` | off | `quic://` endpoints and clients: one QUIC stream per call, 0-RTT for idempotent calls on resumption (`PROTOCOL.md`, "QUIC"; turns `tls` on) |
//! | `test-util` | off | `keel::testing`: keel's clock under a test's control; never for production |
//!
//! # Testing in keel's time
//!
//! With the feature `test-util` (for tests, never for production), `keel::testing` pauses the
//! clock keel reads for keepalive, deadlines and a connection's age and idleness, and moves it
//! forward: a test of a 20 s keepalive takes no 20 s. keel's own tests use it.

#![forbid(unsafe_code)]

// The layers, from the bottom: runtime, core, transport, dispatch, bindings, then host and
// client; each imports only layers below it (ARCHITECTURE.md). `client` and `host` are also the
// public modules of their side; the others are reached through the re-exports below.
// `#[keel::contract]` inside keel (gRPC's standard services) refers to `::keel`.
extern crate self as keel;

mod bindings;
pub mod client;
mod core;
mod dispatch;
pub mod host;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod proto;
mod runtime;
mod transport;

// The everyday names, at the root: a contract, a host and a channel, what a handler gets and
// what a caller gets back.
/// The chunk type of a [`ByteStream`] (the `bytes` crate's, re-exported).
pub use bytes::Bytes;
pub use keel_macros::contract;

pub use crate::client::Channel;
pub use crate::core::compress::Compression;
pub use crate::core::context::Context;
pub use crate::core::error::Error;
pub use crate::core::messages::MessageStream;
pub use crate::core::metadata::Metadata;
pub use crate::core::status::{Status, StatusCode};
pub use crate::core::stream::ByteStream;
pub use crate::host::Host;

#[cfg(feature = "http")]
pub use crate::bindings::http;
pub use crate::core::metrics;
#[cfg(feature = "tls")]
pub use crate::transport::tls;

/// The key/value pairs that travel with a call ([`Metadata`]), and their limits.
pub mod metadata {
    pub use crate::core::metadata::{Metadata, MetadataError, MAX_METADATA_BYTES};
}

/// What flows instead of arriving whole: [`ByteStream`] (bytes in chunks) and
/// [`MessageStream`] (typed messages), the sending halves a handler or caller writes into, and
/// blocking readers for plain `fn` operations.
pub mod stream {
    pub use crate::core::messages::{BlockingIter, MessageSender, MessageStream};
    pub use crate::core::stream::{BlockingReader, ByteSender, ByteStream};
}

/// What `#[keel::contract]` describes: a contract's [`ServiceDescriptor`](service::ServiceDescriptor)
/// (its operations and parameters), and the [`Service`](service::Service) trait a generated
/// `{Contract}Server` implements for [`HostBuilder::service`](host::HostBuilder::service).
pub mod service {
    pub use crate::core::service::{OperationInfo, ParamInfo, Service, ServiceDescriptor};
}

/// The `schemars` crate (feature `openapi`), whose [`JsonSchema`](schemars::JsonSchema) a
/// contract's parameter, return and fault types implement to be described in the OpenAPI
/// document ([`openapi`]; the others get an open schema): derive it as
/// `#[derive(keel::schemars::JsonSchema)]` with `#[schemars(crate = "keel::schemars")]`,
/// without a dependency of your own on schemars.
#[cfg(feature = "openapi")]
pub use schemars;

#[cfg(feature = "test-util")]
pub use crate::runtime::testing;

/// The elastic worker pool that runs blocking operations (the `keel-pool` crate).
pub use keel_pool as pool;

// The previous release's root names, hidden and deprecated for one release: each warns with
// its new path. (Traits cannot be aliased: `Interceptor` is now `host::Interceptor`,
// `Interceptor` is `client::Interceptor`, `Service` is `service::Service`.)
#[doc(hidden)]
#[deprecated(note = "moved to `keel::client::ChannelBuilder`")]
pub type ChannelBuilder = client::ChannelBuilder;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::client::ChannelStats`")]
pub type ChannelStats = client::ChannelStats;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::client::ClientCall`")]
pub type ClientCall = client::ClientCall;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::client::ClientConfig`")]
pub type ClientConfig = client::ClientConfig;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::client::ReplyMetadata`")]
pub type ReplyMetadata = client::ReplyMetadata;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::client::RetryPolicy`")]
pub type RetryPolicy = client::RetryPolicy;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::client::HttpVersion`")]
pub type HttpVersion = client::HttpVersion;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::HostBuilder`")]
pub type HostBuilder = host::HostBuilder;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::HostConfig`")]
pub type HostConfig = host::HostConfig;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::HostStats`")]
pub type HostStats = host::HostStats;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::PoolConfig`")]
pub type PoolConfig = host::PoolConfig;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::ShutdownReport`")]
pub type ShutdownReport = host::ShutdownReport;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::ConnectionInfo`")]
pub type ConnectionInfo = host::ConnectionInfo;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::ThrottleConfig`")]
pub type ThrottleConfig = host::ThrottleConfig;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::Keepalive`")]
pub type Keepalive = host::Keepalive;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::host::PingPolicy`")]
pub type PingPolicy = host::PingPolicy;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::metadata::MetadataError`")]
pub type MetadataError = metadata::MetadataError;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::service::OperationInfo`")]
pub type OperationInfo = service::OperationInfo;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::service::ParamInfo`")]
pub type ParamInfo = service::ParamInfo;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::service::ServiceDescriptor`")]
pub type ServiceDescriptor = service::ServiceDescriptor;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::stream::BlockingReader`")]
pub type BlockingReader = stream::BlockingReader;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::stream::ByteSender`")]
pub type ByteSender = stream::ByteSender;
#[doc(hidden)]
#[deprecated(note = "moved to `keel::metadata::MAX_METADATA_BYTES`")]
pub const MAX_METADATA_BYTES: usize = metadata::MAX_METADATA_BYTES;

/// What generated code calls (as tonic's `codegen`). Not a public API: may change in any
/// release; `#[keel::contract]` and keel are always used at the same version.
#[doc(hidden)]
pub mod __private {
    pub use crate::client::call::CallOptions;
    pub use crate::client::call::{
        call, call_fallible, call_messages, call_messages_fallible, call_one_way, call_stream,
        call_stream_fallible, upload_messages,
    };
    pub use crate::core::compress::DecompressError;
    pub use crate::core::context::Context;
    pub use crate::core::format::Format;
    pub use crate::core::proto::numbers::ProtoNumbers;
    pub use crate::core::proto::schema::{trace_of as proto_trace, ProtoTypes, TraceFn};
    pub use crate::core::proto::ProtoCodec;
    #[cfg(feature = "openapi")]
    pub use crate::core::service::OperationSchemas;
    pub use crate::core::service::{
        Invocation, OperationInfo, Outcome, ParamInfo, Payload, Service, ServiceDescriptor,
    };
    #[cfg(feature = "openapi")]
    pub use crate::openapi::probe::{
        args_schema, ArgSchema, HasSchema, NotOption, OpenSchema, SchemaProbe,
    };
    #[cfg(feature = "openapi")]
    pub use schemars;
    pub use serde;

    /// A type that travels in a contract (a parameter, a return value, a fault, a stream's
    /// message): keel encodes it with serde, both ways.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot travel in a keel contract: it does not implement serde's \
                   `Serialize` and `Deserialize`",
        label = "a parameter, return, fault or message type of a keel contract",
        note = "derive serde::Serialize/Deserialize on it: \
                `#[derive(serde::Serialize, serde::Deserialize)]`; for a type of another \
                crate, turn on that crate's `serde` feature, or wrap it in a type of your own"
    )]
    pub trait ContractType: serde::Serialize + serde::de::DeserializeOwned {}
    impl<T: serde::Serialize + serde::de::DeserializeOwned> ContractType for T {}

    /// Asks the compiler to check that `T` travels ([`ContractType`]); the contract macro calls
    /// it at the span of each type as written, so that its error is the first, and there.
    pub fn travels<T: ContractType>() {}

    /// A contract's fault type (`E` of `Result<T, E>`): it travels, and becomes an
    /// [`Error`](crate::Error)'s fault, which is `Debug`, `Send` and `Sync`.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a keel fault: a fault type implements serde's \
                   `Serialize` and `Deserialize`, and `Debug`, `Send`, `Sync` and `'static`",
        label = "the fault type of a keel operation",
        note = "derive serde::Serialize/Deserialize and Debug on it: \
                `#[derive(Debug, serde::Serialize, serde::Deserialize)]`"
    )]
    pub trait FaultType: ContractType + std::fmt::Debug + Send + Sync + 'static {}
    impl<T: ContractType + std::fmt::Debug + Send + Sync + 'static> FaultType for T {}

    /// As [`travels`], for a fault type ([`FaultType`]).
    pub fn is_fault<T: FaultType>() {}

    use crate::core::codec;
    use crate::core::status::Status;

    /// The protobuf format of the contract `descriptor` describes (gRPC's encoding), or why
    /// its types have none.
    pub fn proto_format(descriptor: &'static ServiceDescriptor) -> Result<Format, String> {
        descriptor
            .proto_codec()
            .map(Format::Protobuf)
            .map_err(str::to_string)
    }

    /// Decodes operation arguments; failure is a `BadRequest` status.
    pub fn decode_args<T: serde::de::DeserializeOwned>(
        format: Format,
        body: &[u8],
    ) -> Result<T, Status> {
        codec::decode_args(format, body)
    }
    /// Encodes a plain return value.
    pub fn encode_ok<T: serde::Serialize>(format: Format, value: &T) -> Outcome {
        codec::encode_ok(format, value)
    }
    /// Encodes a `Result<T, E>` return value.
    pub fn encode_fallible<T: serde::Serialize, E: serde::Serialize>(
        format: Format,
        value: &Result<T, E>,
    ) -> Outcome {
        codec::encode_fallible(format, value)
    }
    /// A streamed reply.
    pub fn stream_ok(stream: crate::ByteStream) -> Outcome {
        codec::stream_ok(stream)
    }
    /// A `Result<T, keel::Status>` return value: the status is the answer.
    pub fn encode_or_status<T: serde::Serialize>(
        format: Format,
        value: Result<T, Status>,
    ) -> Outcome {
        value.and_then(|v| codec::encode_ok(format, &v))
    }
    /// A `Result<ByteStream, keel::Status>` return value.
    pub fn stream_or_status(value: Result<crate::ByteStream, Status>) -> Outcome {
        value.and_then(codec::stream_ok)
    }
    /// A `Result<ByteStream, E>` reply.
    pub fn stream_fallible<E: serde::Serialize>(
        format: Format,
        value: Result<crate::ByteStream, E>,
    ) -> Outcome {
        codec::stream_fallible(format, value)
    }
    /// The request stream of an operation that takes a `MessageStream<T>`: the call's bytes,
    /// decoded as its binding frames them, within the host's message size and the call's
    /// deadline.
    pub fn request_messages<T: serde::de::DeserializeOwned>(
        stream: crate::ByteStream,
        format: Format,
        ctx: &Context,
    ) -> crate::MessageStream<T> {
        crate::MessageStream::decode(
            stream,
            format,
            ctx.request_framing(format),
            ctx.max_message_size(),
            ctx.deadline(),
            None,
            ctx.stream_counters().map(|c| c.received.clone()),
        )
        .sent_by_caller()
    }
    /// Where a reply stream of messages goes: its format, the framing the binding chose and
    /// the call's deadline (taken from the context before the handler runs).
    pub fn reply_messages(format: Format, ctx: &Context) -> ReplyMessages {
        ReplyMessages {
            format,
            framing: ctx.reply_framing(),
            deadline: ctx.deadline(),
            counted: ctx.stream_counters().map(|c| c.sent.clone()),
        }
    }
    /// See [`reply_messages`].
    #[derive(Debug, Clone)]
    pub struct ReplyMessages {
        format: Format,
        framing: crate::core::messages::framing::Framing,
        deadline: Option<std::time::Instant>,
        counted: Option<metrics::Counter>,
    }
    impl ReplyMessages {
        /// A handler's `MessageStream<T>`.
        pub fn ok<T: serde::Serialize + Send + 'static>(
            self,
            messages: crate::MessageStream<T>,
        ) -> Outcome {
            Ok(Payload::Stream(messages.encode(
                self.format,
                self.framing,
                self.deadline,
                self.counted,
            )))
        }
        /// A handler's `Result<MessageStream<T>, keel::Status>`.
        pub fn or_status<T: serde::Serialize + Send + 'static>(
            self,
            value: Result<crate::MessageStream<T>, Status>,
        ) -> Outcome {
            value.and_then(|m| self.ok(m))
        }
        /// A handler's `Result<MessageStream<T>, E>`: `Err` is a typed fault.
        pub fn fallible<T: serde::Serialize + Send + 'static, E: serde::Serialize>(
            self,
            value: Result<crate::MessageStream<T>, E>,
        ) -> Outcome {
            match value {
                Ok(m) => self.ok(m),
                Err(e) => Err(codec::encode_fault(self.format, &e)),
            }
        }
    }
    /// Opens a session on `desc`'s service over `ch` (a generated client's `open_session`).
    pub async fn open_session(
        ch: &crate::Channel,
        opts: &CallOptions,
        desc: &'static ServiceDescriptor,
        callback: Option<std::sync::Arc<dyn Service>>,
    ) -> Result<crate::Channel, crate::Error> {
        ch.open_session(opts, desc, callback).await
    }
    /// The answer to a call of a service built with `per_session` made outside a session.
    pub fn needs_session(desc: &ServiceDescriptor) -> Status {
        Status::new(
            crate::StatusCode::FailedPrecondition,
            format!(
                "service `{}` keeps one instance per session: open a session \
                 (`{}Client::open_session`) and call it there",
                desc.name, desc.name
            ),
        )
    }
    /// The status for an operation index the service does not have.
    pub fn unknown_operation(desc: &ServiceDescriptor, op: usize) -> Status {
        codec::unknown_operation(desc, op)
    }
    /// Compresses a whole body (for the fuzz targets).
    pub fn compress(c: crate::Compression, data: &[u8]) -> crate::Bytes {
        crate::core::compress::compress(c, data)
    }
    /// Decompresses a whole body, refusing more than `limit` bytes of output (for the fuzz
    /// targets and `tests/zip_bomb.rs`).
    pub fn decompress(
        c: crate::Compression,
        data: &[u8],
        limit: usize,
    ) -> Result<crate::Bytes, DecompressError> {
        crate::core::compress::decompress(c, data, limit)
    }
    /// How streams of messages are framed (`src/core/messages/framing.rs`), for the fuzz target
    /// `message_frames` and `tests/message_frames.rs`: the sans-IO decoder hosts and clients
    /// run on a stream's bytes, and the encoders whose frames it must read back.
    pub use crate::core::messages::framing::{
        decode_end, encode_error_end, encode_message, Decoder, Frame, FrameError, Framing,
        ENVELOPE_HEADER,
    };
    /// Runs a future to completion on keel's client runtime (blocking clients).
    pub fn block_on<F: std::future::Future>(fut: F) -> F::Output {
        crate::client::block_on(fut)
    }
}
