//! One gRPC call: its request translated into a dispatched call (the operation its path names,
//! the format its content type names, deadline, metadata, compressions, its messages within
//! the host's limits), and the call's answer into a gRPC answer.

use std::sync::atomic::Ordering;

use ::http::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use ::http::{Method, Request, Response, Version};
use bytes::Bytes;
use tokio::sync::oneshot;

use super::super::super::body::{self, Body, Received};
use super::super::super::grpc::{self, FaultType, GRPC_ACCEPT_ENCODING};
use super::super::call::{stream_args, CancelOnDrop};
use super::super::Ctx;
use super::format::message_format;
use super::messages::{read_unary, request_stream};
use super::reply::Answer;
use super::request::{head, route, HeadError};
use crate::core::codec;
use crate::core::format::Format;
use crate::core::messages::framing::Framing;
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::dispatch::{dispatch, Incoming, ReplyTo};

/// Whether `req` speaks gRPC (its content type is `application/grpc` or `application/grpc+…`).
pub(in crate::bindings::http::server) fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| grpc::subtype(ct).is_some())
}

/// Which protocol of the gRPC family a call speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::bindings::http::server) enum Dialect {
    /// gRPC itself (`application/grpc…`): HTTP/2 only, every kind of call.
    Grpc,
    /// gRPC-Web (`application/grpc-web…`, its body already decoded from base64 if it was
    /// text): HTTP/1.1 or HTTP/2, unary and server streaming only. The caller turns the
    /// answer's trailers into gRPC-Web's trailer frame.
    Web,
    /// Connect's unary calls (`application/proto`, `application/json`; `get`: a GET), turned
    /// into one length-prefixed message by the caller: HTTP/1.1 or HTTP/2, unary operations
    /// only, a GET only for `#[keel(idempotent)]` ones.
    ConnectUnary {
        /// The request was a GET.
        get: bool,
    },
    /// Connect's streaming calls (`application/connect+…`): every kind of call, bidirectional
    /// ones over HTTP/2 only.
    ConnectStream,
}

/// One gRPC call (a request [`is_grpc`] accepted, or a gRPC-Web one).
pub(in crate::bindings::http::server) async fn call<B: Received>(
    ctx: &Ctx,
    req: Request<B>,
    dialect: Dialect,
) -> Response<Body> {
    let received = crate::runtime::clock::now();
    // `is_grpc` (or gRPC-Web's check) found a content type of the family.
    let subtype = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| match dialect {
            Dialect::Grpc => grpc::subtype(ct),
            Dialect::Web => grpc::web::parse_content_type(ct).map(|(_, s)| s),
            // The Connect adapter names the codec as gRPC would.
            Dialect::ConnectUnary { .. } | Dialect::ConnectStream => grpc::subtype(ct),
        })
        .unwrap_or("");
    let mut answer = Answer {
        content_type: grpc::answer_content_type(subtype),
        fault: None,
        codec: None,
        compress_above: ctx.conn.dispatcher.limits.compress_replies_above,
    };
    let none = Metadata::new();
    if req.version() != Version::HTTP_2 && dialect == Dialect::Grpc {
        return needs_http2();
    }
    if req.method() != Method::POST {
        return not_post(req.method());
    }
    let (key, desc, op) = match route(&ctx.conn.dispatcher, req.uri().path()) {
        Ok(found) => found,
        Err(status) => return answer.trailers_only(&status, &none),
    };
    if (op.stream_request && !op.message_request) || (op.stream_response && !op.message_response) {
        let msg = format!(
            "{}/{} streams bytes, which gRPC does not carry (only streams of messages)",
            desc.grpc_name(),
            op.grpc_name()
        );
        return answer.trailers_only(&Status::new(StatusCode::Unimplemented, msg), &none);
    }
    if dialect == Dialect::Web && op.stream_request {
        let msg = format!(
            "{}/{} streams requests (client streaming or bidirectional), which gRPC-Web cannot \
             carry: call it over gRPC (HTTP/2) or Connect",
            desc.grpc_name(),
            op.grpc_name()
        );
        return answer.trailers_only(&Status::new(StatusCode::Unimplemented, msg), &none);
    }
    if let Some(msg) = connect_refusal(dialect, op, req.version()) {
        let msg = format!("{}/{}: {msg}", desc.grpc_name(), op.grpc_name());
        return answer.trailers_only(&Status::new(StatusCode::Unimplemented, msg), &none);
    }
    let format = match message_format(subtype, desc) {
        Ok(format) => format,
        Err(status) => return answer.trailers_only(&status, &none),
    };
    let head = match head(req.headers()) {
        Ok(mut head) => {
            if dialect == Dialect::Web {
                // What gRPC-Web clients say about themselves.
                head.metadata.remove("x-grpc-web");
                head.metadata.remove("x-user-agent");
            }
            head
        }
        Err(HeadError::Bad(status)) => return answer.trailers_only(&status, &none),
        Err(HeadError::Encoding(status)) => return answer.trailers_only(&status, &none),
    };
    answer.codec = head.reply_codec;
    answer.fault = op.fault.map(|written| FaultType {
        package: desc.package,
        // The message the contract's `.proto` names (the fault type's serde name, or a
        // wrapper's), else the type as written.
        written: desc.grpc_fault_name(op.name).unwrap_or(written),
    });
    // From here the call counts as in flight, so a drain waits for it; a call that arrives
    // while the host drains is not processed, and says so.
    let Some(arrival) = ctx.conn.dispatcher.admit() else {
        let status = Status::new(
            StatusCode::ShuttingDown,
            "the host is shutting down: the call was not processed",
        );
        let mut response = answer.trailers_only(&status, &none);
        // As keel's convention marks it: nothing ran, so a keel client sends it again.
        response.headers_mut().insert(
            super::super::super::UNPROCESSED,
            HeaderValue::from_static("1"),
        );
        return response;
    };
    let max = ctx.settings.max_message_size;
    // The arguments: keel-args beside a streamed request, else the one message, where it lies
    // in the request's body.
    // `held`: a unary message whose JSON was rewritten, kept for its room in the budget.
    let (args, unary, compression, stream, held) = if op.stream_request {
        // The messages are the stream; the other parameters travel as keel's HTTP convention
        // sends them beside a streamed body (`keel-args`).
        let args = match stream_args(&req, format) {
            Ok(args) => args,
            Err(status) => return answer.trailers_only(&status, &none),
        };
        // JSON messages as protobuf's JSON mapping writes them are read as unary ones are.
        let json = match (format, desc.proto_schema()) {
            (Format::Json, Ok(schema)) => Some((schema, op.name)),
            _ => None,
        };
        let stream = request_stream(req.into_body(), head.compression, max, json);
        (args, None, None, stream, None)
    } else {
        let unary = match read_unary(ctx, req.into_body()).await {
            Ok(unary) => unary,
            Err(status) => return answer.trailers_only(&status, &none),
        };
        let compression = match (unary.compressed, head.compression) {
            (false, _) => None,
            (true, Some(codec)) => Some(codec),
            (true, None) => {
                let status = Status::new(
                    StatusCode::BadRequest,
                    "the message is flagged compressed but the request has no grpc-encoding",
                );
                return answer.trailers_only(&status, &none);
            }
        };
        let empty = crate::core::stream::ByteStream::empty();
        if format == Format::Json {
            let bytes = Bytes::copy_from_slice(unary.message());
            match from_proto_json(desc, op.name, bytes, compression, max) {
                Ok((bytes, compression)) => (bytes, None, compression, empty, Some(unary)),
                Err(status) => return answer.trailers_only(&status, &none),
            }
        } else {
            (Bytes::new(), Some(unary), compression, empty, None)
        }
    };

    let call_id = ctx.next_call_id.fetch_add(1, Ordering::Relaxed);
    let (tx, answered) = oneshot::channel();
    // If hyper drops this future (the client went away, or reset the stream), stop the call.
    let mut guard = CancelOnDrop {
        conn: &ctx.conn,
        call_id,
        armed: true,
    };
    let incoming = Incoming {
        // Messages both ways are length-prefixed, whatever their format.
        reply_framing: Framing::Envelope,
        request_framing: Some(Framing::Envelope),
        session: None,
        call_id,
        one_way: op.one_way,
        deadline: head.deadline,
        service: key,
        operation: op.name,
        metadata: head.metadata,
        compression,
        // Reply messages are compressed one by one here, not as a body.
        reply_codec: None,
        format,
        body: unary.as_ref().map_or(&args[..], |u| u.message()),
        stream,
        arrival,
        reply_to: ReplyTo::waiter(tx),
    };
    let mut clock = crate::runtime::clock::now();
    dispatch(&ctx.conn, incoming, received, &mut clock, None);
    // The arguments are decoded: the message's memory (and its room in the budget) is free
    // again.
    drop(args);
    drop(unary);
    drop(held);
    let answered = answered.await;
    guard.armed = false;
    match answered {
        Ok(a) => match a.outcome {
            Ok(Payload::Body(reply)) if !op.one_way => answer.unary(&reply, &a.metadata),
            // A one-way operation is answered on receipt, with its `()`.
            Ok(Payload::Body(_)) => match codec::encode(format, &()) {
                Ok(unit) => answer.unary(&unit, &a.metadata),
                Err(e) => answer.trailers_only(&Status::new(StatusCode::Internal, e), &none),
            },
            Ok(Payload::Stream(stream)) => answer.stream(stream, &a.metadata),
            Err(status) => answer.trailers_only(&status, &a.metadata),
        },
        Err(_) => {
            let status = Status::new(StatusCode::Internal, "the call ended without an answer");
            answer.trailers_only(&status, &none)
        }
    }
}

/// A unary JSON request as keel's JSON reads it: decompressed here (so it can be read), and
/// what protobuf's JSON mapping says differently (lowerCamelCase names, 64-bit integers as
/// strings, bytes in base64) rewritten along the operation's types (GRPC.md, "JSON names").
fn from_proto_json(
    desc: &'static crate::core::service::ServiceDescriptor,
    op: &str,
    bytes: Bytes,
    compression: Option<crate::core::compress::Compression>,
    max: u32,
) -> Result<(Bytes, Option<crate::core::compress::Compression>), Status> {
    let Ok(schema) = desc.proto_schema() else {
        return Ok((bytes, compression));
    };
    let plain = match compression {
        None => bytes,
        Some(codec) => crate::core::compress::decompress(codec, &bytes, max as usize)
            .map_err(|e| super::messages::decompress_status(codec, e))?,
    };
    let rewritten = super::messages::from_proto_json(schema, op, &plain, max)?;
    Ok((rewritten.map_or(plain, Bytes::from), None))
}

/// Why Connect cannot make this call (`None`: it can).
fn connect_refusal(
    dialect: Dialect,
    op: &crate::core::service::OperationInfo,
    version: Version,
) -> Option<&'static str> {
    match dialect {
        Dialect::ConnectUnary { .. } if op.stream_request || op.message_response => Some(
            "streams messages, which Connect carries as a streaming call: send \
             application/connect+proto or application/connect+json",
        ),
        Dialect::ConnectUnary { get: true } if !op.idempotent => {
            Some("is not #[keel(idempotent)], so it cannot be called with GET: POST it")
        }
        Dialect::ConnectStream if version != Version::HTTP_2 && op.bidirectional() => {
            Some("streams messages both ways, which needs HTTP/2; this request came over HTTP/1.1")
        }
        _ => None,
    }
}

/// gRPC over HTTP/1.1: refused as grpc-go refuses it (505), and the connection closes (the
/// request body is not read).
fn needs_http2() -> Response<Body> {
    let mut response = Response::new(body::full(Bytes::from_static(
        b"gRPC requires HTTP/2: this request came over HTTP/1.1\n",
    )));
    *response.status_mut() = ::http::StatusCode::HTTP_VERSION_NOT_SUPPORTED;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    headers.insert(
        GRPC_ACCEPT_ENCODING,
        HeaderValue::from_static(grpc::ACCEPTED_ENCODINGS),
    );
    response
}

/// A gRPC request that is not a POST: refused as grpc-go refuses it (405).
fn not_post(method: &Method) -> Response<Body> {
    let text = format!("gRPC calls are POST requests, not {method}\n");
    let mut response = Response::new(body::full(Bytes::from(text)));
    *response.status_mut() = ::http::StatusCode::METHOD_NOT_ALLOWED;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(ALLOW, HeaderValue::from_static("POST"));
    response
}
