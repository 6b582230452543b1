//! One request's route: gRPC, gRPC-Web and Connect (by content type), `POST /{Service}/{operation}` (a call),
//! `GET /{Service}` (its description), `GET /openapi.json`, CORS preflights; and what every
//! answer gets on its way out (`connection: close` while the host drains, CORS headers).

use ::http::header::{HeaderValue, CONNECTION, ORIGIN};
use ::http::{Method, Request, Response, Version};

use super::super::body::{self, Body, Received};
use super::call::call;
use super::connect::{self, ConnectRequest};
use super::describe::describe;
#[cfg(feature = "openapi")]
use super::describe::openapi;
use super::grpc;
use super::grpc_web;
use super::responses::{error, head_too_large, wrong_method};
use super::Ctx;
use crate::core::format::Format;
use crate::core::status::{Status, StatusCode};

/// One request: routes it and answers.
pub(in crate::bindings::http) async fn handle<B: Received>(
    ctx: &Ctx,
    req: Request<B>,
) -> Response<Body> {
    let _in_request = ctx.watch.as_ref().map(|w| w.request());
    let conn = &ctx.conn;
    let h1 = req.version() <= Version::HTTP_11;
    if h1 && ctx.watch.is_some() && head_size(&req) > super::super::H1_MAX_BUF {
        // hyper bounds the buffer it reads a head into, not the head: one that arrived in a
        // single large read passes its check.
        return head_too_large();
    }
    let cors = ctx.settings.cors.as_ref();
    let origin = cors.and_then(|_| req.headers().get(ORIGIN).cloned());
    if let Some(answer) = cors.and_then(|c| c.preflight(req.method(), req.headers())) {
        return preflight_answer(answer);
    }
    if grpc::is_grpc(&req) {
        // gRPC's own paths, framing and status (a browser cannot speak it: no CORS).
        return grpc::call(ctx, req, grpc::Dialect::Grpc).await;
    }
    let path = req.uri().path().to_string();
    let web = grpc_web::content_type(&req);
    let connect = connect::classify(&req);
    let mut segments = path.strip_prefix('/').unwrap_or(&path).split('/');
    let mut response = match (segments.next(), segments.next(), segments.next()) {
        // gRPC-Web: gRPC's paths and status, for browsers (so CORS applies).
        _ if web.is_some() => {
            let (text, subtype) = web.unwrap_or_default();
            grpc_web::call(ctx, req, text, &subtype).await
        }
        // Connect: through the gRPC path too (GRPC.md, "Connect").
        _ if connect.is_some() => match connect {
            Some(ConnectRequest::Unary(codec)) => connect::unary_call(ctx, req, Some(codec)).await,
            Some(ConnectRequest::Get) => connect::unary_call(ctx, req, None).await,
            Some(ConnectRequest::Streaming(codec)) => connect::stream_call(ctx, req, &codec).await,
            None => unreachable!("matched on is_some"),
        },
        #[cfg(feature = "openapi")]
        (Some("openapi.json"), None, _) => {
            if req.method() == Method::GET {
                openapi(conn, req.headers()).await
            } else {
                wrong_method(req.method(), &path, Method::GET)
            }
        }
        (Some(service), None, _) if !service.is_empty() => {
            if req.method() == Method::GET {
                describe(conn, service, req.headers()).await
            } else {
                wrong_method(req.method(), &path, Method::GET)
            }
        }
        (Some(service), Some(operation), None) if !service.is_empty() && !operation.is_empty() => {
            if req.method() == Method::POST
                || (req.method() == Method::GET && gettable(conn, service, operation))
            {
                call(ctx, req, service, operation).await
            } else {
                wrong_method(req.method(), &path, Method::POST)
            }
        }
        _ => error(
            Status::new(
                StatusCode::UnknownOperation,
                format!("nothing at `{path}`: calls are POST /{{Service}}/{{operation}}, descriptions GET /{{Service}}"),
            ),
            Format::Json,
        ),
    };
    if h1 && (conn.dispatcher.is_shutting_down() || conn.is_going_away()) {
        // A draining host (or one retiring this connection for its age) answers this one and
        // closes, so the client reconnects elsewhere.
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    if let Some(cors) = cors {
        cors.decorate(origin.as_ref(), response.headers_mut());
    }
    response
}

/// Whether `GET /{service}/{operation}?args=...` may call the operation: it streams messages
/// back, takes no stream, and is `#[keel(idempotent)]`. That is what a browser's
/// `EventSource` needs (it can only GET, without headers). The contract's promise that running
/// it again changes nothing is why a GET, which any page can make a browser send without a
/// CORS preflight, may run it.
fn gettable(conn: &crate::dispatch::HostConn, service: &str, operation: &str) -> bool {
    conn.dispatcher.service(service).is_some_and(|s| {
        let desc = s.descriptor();
        desc.operation_index(operation).is_some_and(|i| {
            let op = &desc.operations[i];
            op.message_response && !op.stream_request && op.idempotent
        })
    })
}

/// The answer to a CORS preflight: 204 with the headers that allow the call, or 403.
fn preflight_answer(answer: Result<::http::HeaderMap, String>) -> Response<Body> {
    match answer {
        Ok(headers) => {
            let mut response = Response::new(body::empty());
            *response.status_mut() = ::http::StatusCode::NO_CONTENT;
            *response.headers_mut() = headers;
            response
        }
        Err(msg) => {
            let mut response = error(Status::new(StatusCode::PermissionDenied, msg), Format::Json);
            *response.status_mut() = ::http::StatusCode::FORBIDDEN;
            response
        }
    }
}

/// About how many bytes `req`'s head took on the wire (request line and header fields).
fn head_size<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len()
        + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + " HTTP/1.1\r\n".len()
        + 1;
    let fields: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + ": \r\n".len())
        .sum();
    line + fields + "\r\n".len()
}
