//! `POST /{Service}/{operation}`: one request translated into a dispatched call (format,
//! deadline, metadata, compression, the body within its limits), and the call's answer into a
//! response.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ::http::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, CACHE_CONTROL, CONNECTION, CONTENT_ENCODING,
    CONTENT_TYPE, VARY,
};
use ::http::{Request, Response, Version};
use bytes::Bytes;
use tokio::sync::oneshot;

use super::super::accept_encoding;
use super::super::body::{self, Body, ReadError, Received};
use super::super::{
    metadata_from_headers, metadata_to_headers, ARGS, ARGS_HEADER, DEADLINE, DEADLINE_HEADER,
    JSON_CONTENT_TYPE, MESSAGES_CONTENT_TYPE, MSGPACK_CONTENT_TYPE, NDJSON_CONTENT_TYPE,
    POSTCARD_CONTENT_TYPE, SSE_CONTENT_TYPE, STREAM_CONTENT_TYPE,
};
use super::cut::flushed_before_cut;
use super::responses::{
    content_type, error, set_content_type, set_status_header, unprocessed, unsupported_encoding,
    unsupported_media_type,
};
use super::Ctx;
use crate::core::compress::Compression;
use crate::core::format::Format;
use crate::core::messages::framing::Framing;
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::dispatch::{dispatch, HostConn, Incoming, ReplyTo};

/// `POST /{Service}/{operation}`: one call.
pub(super) async fn call<B: Received>(
    ctx: &Ctx,
    req: Request<B>,
    service: &str,
    operation: &str,
) -> Response<Body> {
    let received = crate::runtime::clock::now();
    let Ctx {
        conn, next_call_id, ..
    } = ctx;
    let h1 = req.version() <= Version::HTTP_11;
    let op = conn.dispatcher.service(service).and_then(|s| {
        let desc = s.descriptor();
        desc.operation_index(operation).map(|i| &desc.operations[i])
    });
    let one_way = op.is_some_and(|op| op.one_way);
    // A session (keel's clients) is a bidirectional stream of messages.
    let session = operation == crate::core::service::SESSION_OPERATION;
    let stream_request = session || op.is_some_and(|op| op.stream_request);
    let messages_out = session || op.is_some_and(|op| op.message_response);
    if h1 && (session || op.is_some_and(|op| op.bidirectional())) {
        // HTTP/1.1 has no way to send the answer while the request is still arriving that
        // every client and proxy supports.
        let msg = format!(
            "{service}.{operation} streams messages both ways, which needs HTTP/2 (or keel-wire); \
             this request came over HTTP/1.1"
        );
        let mut response = error(Status::new(StatusCode::Unimplemented, msg), Format::Json);
        // The request body is not read: the connection cannot carry another request.
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    // A streamed upload's body is the stream: its format is what it asks for with `Accept`.
    let format = match req.headers().get(CONTENT_TYPE).map(|v| v.to_str()) {
        _ if stream_request => accepted_format(&req),
        None => Format::Json,
        Some(Ok(ct)) => match ct.split(';').next().unwrap_or("").trim() {
            t if t.eq_ignore_ascii_case(JSON_CONTENT_TYPE) => Format::Json,
            t if t.eq_ignore_ascii_case(MSGPACK_CONTENT_TYPE) => Format::MsgPack,
            t if cfg!(feature = "wire-v1") && t.eq_ignore_ascii_case(POSTCARD_CONTENT_TYPE) => {
                Format::Postcard
            }
            other => return unsupported_media_type(other),
        },
        Some(Err(_)) => return unsupported_media_type("(not text)"),
    };
    // `keel-args` carries a streamed request's other parameters; on any other operation the
    // header would be ignored, and a caller who put the arguments there would see them missing.
    if op.is_some() && !stream_request && req.headers().contains_key(ARGS) {
        let msg = format!(
            "the {ARGS_HEADER} header is for operations that take a stream, and \
             {service}.{operation} takes none. Send its arguments as the request body (a JSON \
             object, or the format Content-Type names) and leave the header out."
        );
        return error(Status::new(StatusCode::BadRequest, msg), format);
    }
    // A reply stream of JSON messages is NDJSON, or Server-Sent Events for a caller that asks
    // for them.
    let reply_framing = match Framing::for_format(format) {
        Framing::Ndjson if messages_out && accepts(&req, SSE_CONTENT_TYPE) => Framing::Sse,
        framing => framing,
    };
    let deadline = match req.headers().get(DEADLINE) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(ms) => Some(Duration::from_millis(ms)),
            None => {
                let msg =
                    format!("invalid {DEADLINE_HEADER} header {v:?}: expected whole milliseconds");
                return error(Status::new(StatusCode::BadRequest, msg), format);
            }
        },
    };
    let metadata = metadata_from_headers(req.headers());
    let compression = match req.headers().get(CONTENT_ENCODING).map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) if v.trim().eq_ignore_ascii_case("identity") => None,
        Some(Ok(v)) => match Compression::from_token(v) {
            Some(c) if !stream_request => Some(c),
            _ => return unsupported_encoding(v),
        },
        Some(Err(_)) => return unsupported_encoding("(not text)"),
    };
    let reply_codec = req
        .headers()
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .fold(None::<String>, |acc, v| {
            Some(acc.map_or(v.to_string(), |a| a + "," + v))
        })
        .and_then(|header| accept_encoding::pick(&header, &Compression::ALL));
    // From here the call counts as in flight, so a drain waits for it; a call that arrives
    // while the host drains is not processed, and says so.
    let Some(arrival) = conn.dispatcher.admit() else {
        return unprocessed(format);
    };
    let (format, body, stream, reserved) = if req.method() == ::http::Method::GET {
        // An `EventSource` (see `route::gettable`): the arguments are the `args` query
        // parameter, a JSON object.
        let args = req.uri().query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "args")
                .map(|(_, v)| Bytes::from(v.into_owned()))
        });
        let args = args.unwrap_or_else(|| Bytes::from_static(b"{}"));
        if args.len() > ctx.settings.max_message_size as usize {
            let msg = "the `args` query parameter exceeds this host's message size limit";
            return error(Status::new(StatusCode::TooLarge, msg), format);
        }
        (format, args, ByteStream::empty(), None)
    } else if stream_request {
        // The body is the stream; the other parameters travel in the `keel-args` header.
        let args = match stream_args(&req, format) {
            Ok(args) => args,
            Err(status) => return error(status, format),
        };
        let drain = h1.then(|| (body::DRAIN_LIMIT, Arc::new(body::Draining::default())));
        let stream = body::received(req.into_body(), drain, |_| {});
        (format, args, stream, None)
    } else {
        let limit = ctx.settings.max_message_size;
        let drain = if h1 { body::DRAIN_LIMIT } else { 0 };
        // The body must arrive within the frame timeout, in memory the budgets allow.
        let deadline = tokio::time::Instant::now() + ctx.settings.frame_timeout;
        let read = body::read_limited(req.into_body(), limit, drain, Some((&ctx.budget, deadline)));
        let read = match tokio::time::timeout_at(deadline, read).await {
            Ok(read) => read,
            Err(_) => Err(ReadError::NoRoom),
        };
        let (body, reserved) = match read {
            Ok((b, r)) if b.is_empty() && format == Format::Json => (Bytes::from_static(b"{}"), r),
            Ok(read) => read,
            Err(ReadError::NoRoom) => {
                conn.dispatcher.timed_out(conn.info.binding);
                let msg = "the request body did not arrive in time, or the host had no room \
                           for it";
                let mut response = error(Status::new(StatusCode::BadRequest, msg), format);
                *response.status_mut() = ::http::StatusCode::REQUEST_TIMEOUT;
                if h1 {
                    response
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                return response;
            }
            Err(ReadError::TooLarge { size, drained }) => {
                let size = size.map_or_else(|| "more than".to_string(), |n| format!("{n}"));
                let msg = format!(
                    "request body of {size} bytes exceeds this host's limit of {limit} bytes"
                );
                let mut response = error(Status::new(StatusCode::TooLarge, msg), format);
                if h1 && !drained {
                    response
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                return response;
            }
            Err(ReadError::Broken(e)) => {
                let msg = format!("cannot read the request body: {e}");
                return error(Status::new(StatusCode::BadRequest, msg), format);
            }
        };
        (format, body, ByteStream::empty(), Some(reserved))
    };

    let call_id = next_call_id.fetch_add(1, Ordering::Relaxed);
    let (tx, answer) = oneshot::channel();
    // If hyper drops this future (the client went away, or reset the stream), stop the call.
    let mut guard = CancelOnDrop {
        conn,
        call_id,
        armed: true,
    };
    let incoming = Incoming {
        reply_framing,
        request_framing: None,
        session: None,
        call_id,
        one_way,
        deadline,
        service,
        operation,
        metadata,
        compression,
        reply_codec,
        format,
        body: &body,
        stream,
        arrival,
        reply_to: ReplyTo::waiter(tx),
    };
    // The call starts now, with its body read: `received` is when its head arrived, and a
    // handler's (and a pool wait's) time must not include the upload.
    let mut clock = crate::runtime::clock::now();
    dispatch(conn, incoming, received, &mut clock, None);
    // The arguments are decoded: the body's memory is free again.
    drop(body);
    drop(reserved);
    let answer = answer.await;
    guard.armed = false;
    let (outcome, reply_metadata, encoding) = match answer {
        Ok(a) => (Ok(a.outcome), a.metadata, a.compression),
        Err(e) => (Err(e), Metadata::new(), None),
    };
    let mut response = match outcome {
        Ok(Ok(_)) if one_way => {
            let mut response = Response::new(body::empty());
            *response.status_mut() = ::http::StatusCode::ACCEPTED;
            set_status_header(&mut response, StatusCode::Ok);
            response
        }
        Ok(Ok(Payload::Body(reply))) => {
            let mut response = Response::new(body::full(reply));
            set_content_type(&mut response, content_type(format));
            set_status_header(&mut response, StatusCode::Ok);
            if let Some(codec) = encoding {
                let headers = response.headers_mut();
                headers.insert(CONTENT_ENCODING, HeaderValue::from_static(codec.as_str()));
                headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
            }
            response
        }
        Ok(Ok(Payload::Stream(stream))) => {
            // A byte stream that fails midway is cut off once what it sent before has left
            // (a stream of messages ends with its error line or event instead).
            let stream = flushed_before_cut(stream, ctx.watch.clone());
            let mut response = Response::new(body::streamed(stream));
            let content_type = match reply_framing {
                _ if !messages_out => STREAM_CONTENT_TYPE,
                Framing::Envelope => MESSAGES_CONTENT_TYPE,
                Framing::Ndjson => NDJSON_CONTENT_TYPE,
                Framing::Sse => SSE_CONTENT_TYPE,
            };
            set_content_type(&mut response, content_type);
            if reply_framing == Framing::Sse {
                // Proxies that buffer (nginx) pass each event on as it comes.
                response
                    .headers_mut()
                    .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            }
            set_status_header(&mut response, StatusCode::Ok);
            response
        }
        Ok(Err(status)) => error(status, format),
        Err(_) => {
            let status = Status::new(StatusCode::Internal, "the call ended without an answer");
            error(status, format)
        }
    };
    metadata_to_headers(&reply_metadata, response.headers_mut());
    response
}

/// The format a streamed-upload call asks for with `Accept` (JSON unless it names postcard).
fn accepted_format<B>(req: &Request<B>) -> Format {
    if accepts(req, MSGPACK_CONTENT_TYPE) {
        Format::MsgPack
    } else if cfg!(feature = "wire-v1") && accepts(req, POSTCARD_CONTENT_TYPE) {
        Format::Postcard
    } else {
        Format::Json
    }
}

/// Whether the request's `Accept` names the media type `wanted`.
fn accepts<B>(req: &Request<B>, wanted: &str) -> bool {
    req.headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(wanted)
        })
}

/// The non-stream parameters of a streamed-upload call, from the `keel-args` header: a JSON
/// object, or postcard in unpadded URL-safe base64. Absent: no parameters (`{}`).
pub(super) fn stream_args<B>(req: &Request<B>, format: Format) -> Result<Bytes, Status> {
    let Some(v) = req.headers().get(ARGS) else {
        return Ok(match format {
            // An empty message.
            Format::Postcard | Format::Protobuf(_) => Bytes::new(),
            // An empty map.
            Format::MsgPack => Bytes::from_static(&[0x80]),
            _ => Bytes::from_static(b"{}"),
        });
    };
    let bad = |why: &str| Status::new(StatusCode::BadRequest, format!("{ARGS_HEADER}: {why}"));
    match format {
        Format::Postcard | Format::MsgPack | Format::Protobuf(_) => {
            super::super::args_decode(v.as_bytes())
                .map(Bytes::from)
                .ok_or_else(|| bad("expected binary arguments in unpadded URL-safe base64"))
        }
        _ => Ok(Bytes::copy_from_slice(v.as_bytes())),
    }
}

/// Cancels a call whose request future is dropped before its answer arrived.
pub(super) struct CancelOnDrop<'a> {
    pub(super) conn: &'a Arc<HostConn>,
    pub(super) call_id: u64,
    pub(super) armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.cancel(self.call_id);
        }
    }
}
