//! The admin endpoint ([`HostBuilder::admin`](super::HostBuilder::admin)): a small HTTP/1.1
//! server on the host's runtime, apart from the service endpoints, for operators and load
//! balancers: `GET /metrics`, `GET /healthz`, `GET /readyz`.
//!
//! A peer can reach it, so it is bounded like the rest of keel: a few connections at once
//! (more are closed as they arrive), a request head must arrive within a few seconds (an idle
//! keep-alive connection is closed after as long), a small head buffer, request bodies never
//! read, a connection's whole life capped.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ::http::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use ::http::{Method, Request, Response, StatusCode};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::registry::Registry;
use crate::core::error::{Error, Kind};

/// Admin connections open at once; more are closed as they arrive.
const MAX_CONNECTIONS: usize = 16;
/// Time to send a request head, and to start the next one on a kept-alive connection.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest one admin connection lives (a peer that stops reading cannot hold it).
const MAX_CONNECTION_LIFE: Duration = Duration::from_secs(60);
/// Request head buffer (hyper's minimum is 8 KiB).
const MAX_HEAD: usize = 16 * 1024;
/// Prometheus' text exposition format.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A bound admin endpoint, not yet serving.
#[derive(Debug)]
pub(super) struct Admin {
    listener: TcpListener,
    /// The bound URL (`http://ip:port`).
    pub(super) url: String,
    #[cfg(feature = "prometheus")]
    prometheus: Option<crate::metrics::Prometheus>,
}

/// Binds `url` (`http://host:port`) on the host's runtime and, with the `prometheus` feature,
/// installs keel's Prometheus recorder (unless the application installed a recorder of its own:
/// then `/metrics` answers 404 and keel's metrics go to that recorder).
pub(super) fn bind(url: &str, runtime: &tokio::runtime::Handle) -> Result<Admin, Error> {
    let config = |msg: String| Error::new(Kind::Config, msg);
    let endpoint = match crate::transport::Endpoint::parse(url)
        .map_err(|e| config(format!("admin URL: {e}")))?
    {
        endpoint @ crate::transport::Endpoint::Http(_) => endpoint,
        _ => {
            return Err(config(format!(
                "admin URL {url}: must be http://host:port (the admin endpoint speaks plain HTTP)"
            )))
        }
    };
    // `host:port`, an IPv6 host in brackets: the form `ToSocketAddrs` takes.
    let authority = endpoint.authority().unwrap_or_default();
    let listen_err = |e| crate::transport::socket::listen_error(&format!("admin {url}"), e);
    let std_listener = std::net::TcpListener::bind(authority).map_err(listen_err)?;
    std_listener.set_nonblocking(true).map_err(listen_err)?;
    let local = std_listener.local_addr().map_err(listen_err)?;
    let listener = {
        let _in_runtime = runtime.enter();
        TcpListener::from_std(std_listener).map_err(listen_err)?
    };
    Ok(Admin {
        listener,
        url: format!("http://{local}"),
        #[cfg(feature = "prometheus")]
        prometheus: crate::metrics::install_prometheus().ok(),
    })
}

/// Serves the admin endpoint until the task is aborted (its connections end with it).
pub(super) async fn serve(admin: Admin, registry: Arc<Registry>) {
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let admin = Arc::new(admin);
    // Dropped with this task: aborts every connection's task.
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = admin.listener.accept() => accepted,
            // Reap finished connections so the set stays small.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let Ok((io, _peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            drop(io);
            continue;
        };
        let (admin, registry) = (admin.clone(), registry.clone());
        conns.spawn(async move {
            let _place = place;
            let service = service_fn(move |req| {
                let answer = answer(&admin, &registry, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .serve_connection(TokioIo::new(io), service);
            let _ = tokio::time::timeout(MAX_CONNECTION_LIFE, conn).await;
        });
    }
}

fn answer(admin: &Admin, registry: &Registry, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz, /readyz\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if registry.dispatcher().is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n"),
        _ => metrics(admin, registry),
    }
}

#[cfg(feature = "prometheus")]
fn metrics(admin: &Admin, registry: &Registry) -> Response<Full<Bytes>> {
    let Some(prometheus) = &admin.prometheus else {
        return text(
            StatusCode::NOT_FOUND,
            "keel's metrics go to the application's own metrics recorder\n",
        );
    };
    registry.dispatcher().observe_metrics(&registry.bindings());
    let mut r = Response::new(Full::new(Bytes::from(prometheus.render())));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
    r
}

#[cfg(not(feature = "prometheus"))]
fn metrics(_admin: &Admin, _registry: &Registry) -> Response<Full<Bytes>> {
    let _ = METRICS_CONTENT_TYPE;
    text(
        StatusCode::NOT_FOUND,
        "keel was built without its `prometheus` feature\n",
    )
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
