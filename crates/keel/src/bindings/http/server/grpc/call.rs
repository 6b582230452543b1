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

/// One gRPC call (a request [`is_grpc`] accepted).
pub(in crate::bindings::http::server) async fn call<B: Received>(
    ctx: &Ctx,
    req: Request<B>,
) -> Response<Body> {
    let received = crate::runtime::clock::now();
    // `is_grpc` found a gRPC content type.
    let subtype = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(grpc::subtype)
        .unwrap_or("");
    let mut answer = Answer {
        content_type: grpc::answer_content_type(subtype),
        fault: None,
        codec: None,
        compress_above: ctx.conn.dispatcher.limits.compress_replies_above,
    };
    let none = Metadata::new();
    if req.version() != Version::HTTP_2 {
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
    let format = match message_format(subtype, desc) {
        Ok(format) => format,
        Err(status) => return answer.trailers_only(&status, &none),
    };
    let head = match head(req.headers()) {
        Ok(head) => head,
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
        return answer.trailers_only(&status, &none);
    };
    let max = ctx.settings.max_message_size;
    // The arguments: keel-args beside a streamed request, else the one message, where it lies
    // in the request's body.
    let (args, unary, compression, stream) = if op.stream_request {
        // The messages are the stream; the other parameters travel as keel's HTTP convention
        // sends them beside a streamed body (`keel-args`).
        let args = match stream_args(&req, format) {
            Ok(args) => args,
            Err(status) => return answer.trailers_only(&status, &none),
        };
        let stream = request_stream(req.into_body(), head.compression, max);
        (args, None, None, stream)
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
        (Bytes::new(), Some(unary), compression, empty)
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
