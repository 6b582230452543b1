//! gRPC calls on the HTTP client's HTTP/2 connection (`grpc://`, `grpcs://`; GRPC.md, "keel's
//! client"). The connection, its keepalive, and what an attempt reports are the HTTP/2
//! binding's (`mod.rs`); what differs is the request (`POST /{package}.{Service}/{Method}`,
//! `application/grpc`, `te: trailers`, `grpc-timeout`, each message length-prefixed) and the
//! answer: one message then the status in trailers, a Trailers-Only answer, or a stream of
//! messages whose trailers end it.
//!
//! A reply stream is reframed as keel's message streams are (flags `0`, decompressed), its
//! trailers becoming keel's end frame when they carry an error, so the generated code's
//! `MessageStream` reads it as it reads every binding's. A request stream arrives framed that
//! way too; its messages go out as they are (keel's message frame is gRPC's uncompressed
//! length-prefixed message) or compressed one by one if the channel compresses, and an end frame with an error (the producer failed) resets the
//! stream, so the host never takes a part for the whole.

use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use ::http::header::{HeaderValue, CONTENT_TYPE, TE, USER_AGENT};
use ::http::{HeaderMap, Method, Request};
use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use http_body::Body as _;

use super::super::body;
use super::super::grpc::frame::{self, FrameError, Message, Reader, Scanner};
use super::super::grpc::{
    codes, details, timeout, FaultType, ACCEPTED_ENCODINGS, GRPC_ACCEPT_ENCODING, GRPC_ENCODING,
    GRPC_MESSAGE, GRPC_STATUS, GRPC_STATUS_DETAILS, GRPC_TIMEOUT,
};
use super::super::h2conn::{self, RecvBody, RequestBody};
use super::super::{details_decode, metadata_from_headers, metadata_to_headers, DETAILS};
use super::{HttpClient, Proto, Tried};
use crate::bindings::{Again, Answer, Attempt, GrpcTarget, Outgoing, Replied, StreamBack};
use crate::core::compress::{self, Compression};
use crate::core::error::{Error, Kind};
use crate::core::messages::framing::{
    decode_end, encode_error_end, encode_message, Decoder, Frame, Framing,
};
use crate::core::metadata::Metadata;
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::core::stream::ByteStream;
use crate::runtime::clock;

/// What the answer of one call is read against.
struct Expect {
    /// The largest message this client accepts (before and after decompression).
    max: u32,
    /// The type URL of the operation's typed fault, if it has one.
    fault: Option<String>,
}

impl HttpClient {
    /// One attempt of a gRPC call (see [`crate::bindings::ClientTransport::attempt`]): what it
    /// reports follows the HTTP/2 binding's rules, and a host that says it did not process the
    /// call (a keel host draining: `UNAVAILABLE` marked `keel-unprocessed`) gets it again.
    pub(super) async fn attempt_grpc(&self, call: &mut Outgoing, deadline: Instant) -> Attempt {
        let (service, operation) = (call.service, call.operation);
        let Some(target) = call.grpc else {
            let status = Status::new(
                StatusCode::Unimplemented,
                format!("{service}.{operation}: sessions are not carried over gRPC"),
            );
            return Attempt::Answered(Ok(Err(status)));
        };
        let (request, body, stream_back) = match self.grpc_request(call, target, deadline) {
            Ok(made) => made,
            Err(e) => return Attempt::Answered(Err(e)),
        };
        let expect = Expect {
            max: self.config.max_message_size,
            fault: fault_type_url(target),
        };
        let sent = self.send_grpc(request, body, call.download, expect);
        let why = match tokio::time::timeout_at(clock::to_tokio(deadline), sent).await {
            Ok(Tried::Done(answer)) => return Attempt::Answered(answer),
            Ok(Tried::NoConnection(e)) => Again::NoConnection(e),
            Ok(Tried::NotSent) => Again::NotSent,
            Ok(Tried::Unprocessed) => Again::Unprocessed,
            // Dropping the exchange reset the stream: the host stops the call.
            Err(_) => return Attempt::Answered(Err(call.timed_out())),
        };
        Attempt::Again { stream_back, why }
    }

    /// The request of `call`: its head, its body (one length-prefixed message, or the request
    /// stream's messages), and where a request stream comes back if nothing of it was taken.
    fn grpc_request(
        &self,
        call: &mut Outgoing,
        target: GrpcTarget,
        deadline: Instant,
    ) -> Result<(Request<()>, RequestBody, Option<StreamBack>), Error> {
        let desc = target.desc;
        let info = &desc.operations[target.op];
        let uri = self.uri(Proto::H2, [&desc.grpc_name(), &info.grpc_name()])?;
        let remaining = deadline.saturating_duration_since(clock::now());
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(super::super::grpc::CONTENT_TYPE),
        );
        headers.insert(TE, HeaderValue::from_static("trailers"));
        let budget =
            HeaderValue::try_from(timeout::encode(remaining)).map_err(|e| self.config_error(e))?;
        headers.insert(GRPC_TIMEOUT, budget);
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("grpc-keel/", env!("CARGO_PKG_VERSION"))),
        );
        metadata_to_headers(&call.metadata, headers);
        if call.accepts_compressed {
            headers.insert(
                GRPC_ACCEPT_ENCODING,
                HeaderValue::from_static(ACCEPTED_ENCODINGS),
            );
        }
        Ok(match call.upload.take() {
            // The request is the stream: a client-streaming operation has no other parameters
            // over gRPC (`ServiceDescriptor::grpc_codec` refuses one that has).
            Some(stream) => {
                let (body, returned) = body::replayable(outgoing_messages(stream));
                let body = match target.compress_messages {
                    Some((codec, above)) => {
                        headers.insert(GRPC_ENCODING, HeaderValue::from_static(codec.as_str()));
                        compressed_messages(body, codec, above)
                    }
                    None => body,
                };
                (request, RequestBody::Stream(body), Some(returned))
            }
            None => {
                let compressed = call.compression.is_some();
                if let Some(codec) = call.compression {
                    headers.insert(GRPC_ENCODING, HeaderValue::from_static(codec.as_str()));
                }
                let mut out = BytesMut::with_capacity(frame::PREFIX + call.body.len());
                frame::encode(compressed, &call.body, &mut out);
                (request, RequestBody::Full(out.freeze()), None)
            }
        })
    }

    /// Sends a gRPC request on the HTTP/2 connection and reads its answer: the whole of it for
    /// a unary reply, the head for a streamed one (its messages then flow to the caller).
    async fn send_grpc(
        &self,
        request: Request<()>,
        body: RequestBody,
        download: bool,
        expect: Expect,
    ) -> Tried {
        let (response, upload, id, _waiting) = match self.open_h2_stream(request, body).await {
            Ok(opened) => opened,
            Err(tried) => return tried,
        };
        let response = match response.await {
            Ok(response) => response,
            Err(e) if h2conn::refused_unprocessed(&e) => {
                self.forget_h2(id);
                return Tried::Unprocessed;
            }
            Err(e) => return Tried::Done(Err(self.broken(e))),
        };
        let (parts, stream) = response.into_parts();
        if parts.status != ::http::StatusCode::OK {
            // Not a gRPC answer (a proxy's, or a host that does not speak gRPC): gRPC's
            // mapping of HTTP statuses.
            let status = Status::new(
                codes::code_from_http(parts.status.as_u16()),
                format!(
                    "{}: HTTP {} to a gRPC call, without grpc-status",
                    self.endpoint, parts.status
                ),
            );
            return Tried::Done(Ok(Err(status)));
        }
        let metadata = metadata_from_headers(&parts.headers);
        if parts.headers.contains_key(GRPC_STATUS) {
            // Trailers-Only: the status is in the head, nothing follows.
            if unprocessed(&parts.headers) {
                // Its streams in flight finish; new calls go to a new connection.
                self.forget_h2(id);
                return Tried::Unprocessed;
            }
            return Tried::Done(match status(&parts.headers, metadata.clone(), &expect) {
                Err(e) => Err(e),
                Ok(Some(status)) => Ok(Err(status)),
                Ok(None) if download => Ok(Ok(Replied {
                    payload: Payload::Stream(ByteStream::empty()),
                    metadata,
                    compression: None,
                })),
                Ok(None) => Err(self.protocol("answered OK without a reply message")),
            });
        }
        let codec = match parts.headers.get(GRPC_ENCODING).map(|v| v.to_str()) {
            None => None,
            Some(Ok(v)) => match super::super::grpc::encoding(v) {
                Ok(codec) => codec,
                Err(()) => {
                    let why = format!("answered with grpc-encoding `{v}`, which it cannot read");
                    return Tried::Done(Err(self.protocol(&why)));
                }
            },
            Some(Err(_)) => return Tried::Done(Err(self.protocol("an unreadable grpc-encoding"))),
        };
        let body = RecvBody::new(stream, None, upload);
        if download {
            let replies = Replies {
                body,
                reader: Reader::new(expect.max),
                codec,
                expect,
                done: false,
            };
            return Tried::Done(Ok(Ok(Replied {
                payload: Payload::Stream(ByteStream::from_results(replies)),
                metadata,
                compression: None,
            })));
        }
        Tried::Done(self.unary(body, codec, metadata, &expect).await)
    }

    /// A unary answer's body: exactly one message (its size checked from its prefix before
    /// any of it is held), then the trailers.
    async fn unary(
        &self,
        mut body: RecvBody,
        codec: Option<Compression>,
        mut metadata: Metadata,
        expect: &Expect,
    ) -> Answer {
        let mut scanner = Scanner::new(expect.max, Some(1));
        let mut bytes = BytesMut::new();
        let mut trailers = None;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.map_err(|e| self.broken(e))?;
            match frame.into_data() {
                Ok(data) => {
                    scanner.feed(&data).map_err(|e| frame_error(&e))?;
                    bytes.extend_from_slice(&data);
                }
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        let Some(trailers) = trailers else {
            return Err(Error::new(
                Kind::Connection,
                format!("{}: the answer ended without trailers", self.endpoint),
            ));
        };
        for (key, value) in metadata_from_headers(&trailers).iter() {
            metadata.push_raw(key, Bytes::copy_from_slice(value));
        }
        if let Some(status) = status(&trailers, metadata.clone(), expect)? {
            return Ok(Err(status));
        }
        let message =
            frame::one_message(&bytes.freeze(), expect.max).map_err(|e| frame_error(&e))?;
        let Some(Message { compressed, bytes }) = message else {
            return Err(self.protocol("answered OK without a reply message"));
        };
        let compression = match (compressed, codec) {
            (false, _) => None,
            (true, Some(codec)) => Some(codec),
            (true, None) => {
                return Err(self.protocol("flagged its reply compressed without a grpc-encoding"))
            }
        };
        // Decompressed by the channel, within this client's message size.
        Ok(Ok(Replied {
            payload: Payload::Body(bytes),
            metadata,
            compression,
        }))
    }

    /// The error for an answer that breaks gRPC's protocol.
    fn protocol(&self, why: &str) -> Error {
        Error::new(
            Kind::Protocol,
            format!("{}: the gRPC host {why}", self.endpoint),
        )
    }
}

/// `type.googleapis.com/{package}.{Fault}`: what the `Any` of the operation's typed fault names
/// (the message its `.proto` names), if it has one.
fn fault_type_url(target: GrpcTarget) -> Option<String> {
    let desc = target.desc;
    let info = &desc.operations[target.op];
    let written = info.fault?;
    Some(
        FaultType {
            package: desc.package,
            written: desc.grpc_fault_name(info.name).unwrap_or(written),
        }
        .type_url(),
    )
}

/// Whether a Trailers-Only answer says the host did not process the call: `UNAVAILABLE` marked
/// `keel-unprocessed: 1`, as a draining keel host answers a call it did not admit. (A bare
/// `UNAVAILABLE` may come from a handler that ran: it is an answer, retried only as the retry
/// policy says.)
fn unprocessed(headers: &HeaderMap) -> bool {
    headers
        .get(GRPC_STATUS)
        .is_some_and(|v| v.as_bytes() == b"14")
        && headers
            .get(super::super::UNPROCESSED)
            .is_some_and(|v| v.as_bytes() == b"1")
}

/// The status `headers` (trailers, or a Trailers-Only head) carry: `None` for `OK`. A typed
/// fault is `grpc-status: 2` with a `google.rpc.Status` in `grpc-status-details-bin` whose
/// `Any` names the operation's fault type; other details are kept as the status's details
/// (`keel-status-details` from a keel host, else the `google.rpc.Status` bytes).
fn status(
    headers: &HeaderMap,
    metadata: Metadata,
    expect: &Expect,
) -> Result<Option<Status>, Error> {
    let Some(code) = headers.get(GRPC_STATUS) else {
        return Err(Error::new(
            Kind::Protocol,
            "a gRPC answer ended without grpc-status",
        ));
    };
    // A code that is not a number reads as UNKNOWN, as gRPC's libraries read it.
    let code = std::str::from_utf8(code.as_bytes())
        .ok()
        .and_then(|c| c.trim().parse::<u32>().ok())
        .unwrap_or(2);
    if code == 0 {
        return Ok(None);
    }
    let message = headers
        .get(GRPC_MESSAGE)
        .map(|v| codes::percent_decode(v.as_bytes()))
        .unwrap_or_default();
    let rpc_status = headers
        .get(GRPC_STATUS_DETAILS)
        .and_then(|v| details_decode(v.as_bytes()));
    if code == 2 {
        let fault = rpc_status
            .as_deref()
            .and_then(details::decode)
            .and_then(|s| {
                s.details
                    .into_iter()
                    .find(|any| expect.fault.as_deref() == Some(any.type_url.as_str()))
            });
        if let Some(any) = fault {
            return Ok(Some(
                Status::fault(Bytes::from(any.value)).with_metadata(metadata),
            ));
        }
    }
    let mut status = Status::new(codes::code_from_grpc(code), message);
    let keel_details = headers
        .get(DETAILS)
        .and_then(|v| details_decode(v.as_bytes()));
    if let Some(details) = keel_details.or(rpc_status) {
        status = status.with_details(details);
    }
    Ok(Some(status.with_metadata(metadata)))
}

/// The caller's error for reply messages that are not well framed.
fn frame_error(e: &FrameError) -> Error {
    match e {
        FrameError::TooLarge { len, max } => Error::new(
            Kind::TooLarge,
            format!("a reply message of {len} bytes exceeds this client's limit of {max} bytes"),
        ),
        FrameError::TooMany => Error::new(
            Kind::Protocol,
            "the gRPC host answered a unary call with more than one message",
        ),
        e => Error::new(Kind::Protocol, format!("the gRPC host's reply: {e}")),
    }
}

/// A reply stream's messages, framed as keel's message streams are: each decompressed (within
/// the message size) and reframed; the trailers end it, an error status as keel's end frame.
struct Replies {
    body: RecvBody,
    reader: Reader,
    codec: Option<Compression>,
    expect: Expect,
    done: bool,
}

impl Replies {
    /// Moves the whole messages the reader holds to `out`, reframed.
    fn reframe(&mut self, out: &mut BytesMut) -> Result<(), Error> {
        while let Some(m) = self.reader.next().map_err(|e| frame_error(&e))? {
            if !m.compressed {
                encode_message(Framing::Envelope, &m.bytes, out);
                continue;
            }
            let Some(codec) = self.codec else {
                return Err(Error::new(
                    Kind::Protocol,
                    "the gRPC host flagged a message compressed without a grpc-encoding",
                ));
            };
            let max = self.expect.max as usize;
            let plain = compress::decompress(codec, &m.bytes, max).map_err(|e| match e {
                compress::DecompressError::TooLarge { limit } => Error::new(
                    Kind::TooLarge,
                    format!(
                        "a {codec} reply message decompresses to more than this client's \
                         limit of {limit} bytes"
                    ),
                ),
                compress::DecompressError::Malformed(why) => Error::new(
                    Kind::Protocol,
                    format!("a {codec} reply message does not decompress: {why}"),
                ),
            })?;
            encode_message(Framing::Envelope, &plain, out);
        }
        Ok(())
    }
}

impl Stream for Replies {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            let mut out = BytesMut::new();
            if let Err(e) = this.reframe(&mut out) {
                this.done = true;
                return Poll::Ready(Some(Err(e)));
            }
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(out.freeze())));
            }
            let frame = match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => {
                    this.done = true;
                    let e = Error::new(Kind::Connection, format!("the reply stream broke: {e}"));
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    this.done = true;
                    let e = Error::new(
                        Kind::Connection,
                        "the reply stream ended without grpc-status",
                    );
                    return Poll::Ready(Some(Err(e)));
                }
            };
            let trailers = match frame.into_data() {
                Ok(data) => {
                    this.reader.push(&data);
                    continue;
                }
                Err(frame) => frame.into_trailers().unwrap_or_default(),
            };
            this.done = true;
            if let Err(e) = this.reader.finish() {
                return Poll::Ready(Some(Err(frame_error(&e))));
            }
            let metadata = metadata_from_headers(&trailers);
            return Poll::Ready(match status(&trailers, metadata, &this.expect) {
                Ok(None) => None,
                Ok(Some(status)) => Some(Ok(encode_error_end(Framing::Envelope, status))),
                Err(e) => Some(Err(e)),
            });
        }
    }
}

/// `body`, chunks of whole gRPC messages as [`outgoing_messages`] yields them, with each message
/// of at least `above` bytes compressed with `codec` (when that makes it smaller). Applied
/// after the body that gives its stream back unsent ([`body::replayable`]), so what a retry
/// gets back is the uncompressed stream.
fn compressed_messages(body: body::Body, codec: Compression, above: usize) -> body::Body {
    use http_body_util::BodyExt as _;
    body.map_frame(move |frame| frame.map_data(|chunk| compress_chunk(&chunk, codec, above)))
        .boxed()
}

/// [`compressed_messages`] of one chunk of whole messages (a chunk that is not, which
/// [`outgoing_messages`] never yields, goes as it is).
fn compress_chunk(chunk: &Bytes, codec: Compression, above: usize) -> Bytes {
    // No message of the chunk can be long enough: nothing to read through.
    if chunk.len() < frame::PREFIX + above {
        return chunk.clone();
    }
    let mut out = BytesMut::with_capacity(chunk.len());
    let mut rest = &chunk[..];
    let mut compressed = false;
    while !rest.is_empty() {
        let Some((&[flags, a, b, c, d], tail)) = rest.split_first_chunk::<{ frame::PREFIX }>()
        else {
            return chunk.clone();
        };
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        if flags != 0 || tail.len() < len {
            return chunk.clone();
        }
        let (message, tail) = tail.split_at(len);
        let packed = (len >= above).then(|| compress::compress(codec, message));
        match packed {
            Some(packed) if packed.len() < len => {
                compressed = true;
                frame::encode(true, &packed, &mut out);
            }
            _ => frame::encode(false, message, &mut out),
        }
        rest = tail;
    }
    // Nothing worth compressing: the chunk as it came, not the copy.
    if compressed {
        out.freeze()
    } else {
        chunk.clone()
    }
}

/// A request stream (keel's message frames) as gRPC's messages: each message as it is, an end
/// frame with an error as the stream's error (the upload then resets the HTTP/2 stream).
/// What it yields is keel's framing again, so a stream given back unsent passes through it
/// unchanged on the next attempt.
fn outgoing_messages(stream: ByteStream) -> ByteStream {
    ByteStream::from_results(UploadFrames {
        source: stream,
        // The caller's own messages: its encoder made them.
        decoder: Decoder::new(Framing::Envelope, u32::MAX as usize),
        done: false,
    })
}

/// See [`outgoing_messages`].
struct UploadFrames {
    source: ByteStream,
    decoder: Decoder,
    done: bool,
}

impl Stream for UploadFrames {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            let mut out = BytesMut::new();
            loop {
                match this.decoder.next() {
                    Ok(Some(Frame::Message(m))) => encode_message(Framing::Envelope, &m, &mut out),
                    Ok(Some(Frame::End(payload))) => {
                        this.done = true;
                        return Poll::Ready(Some(Err(stream_failed(payload))));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        this.done = true;
                        let e = Error::new(Kind::Codec, format!("a request stream: {e}"));
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(out.freeze())));
            }
            match ready!(this.source.poll_chunk(cx)) {
                Some(Ok(chunk)) => this.decoder.push(&chunk),
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    this.done = true;
                    return Poll::Ready(match this.decoder.finish() {
                        Ok(None) => None,
                        Ok(Some(Frame::Message(m))) => {
                            let mut out = BytesMut::new();
                            encode_message(Framing::Envelope, &m, &mut out);
                            Some(Ok(out.freeze()))
                        }
                        Ok(Some(Frame::End(payload))) => Some(Err(stream_failed(payload))),
                        Err(e) => Some(Err(Error::new(
                            Kind::Codec,
                            format!("a request stream: {e}"),
                        ))),
                    });
                }
            }
        }
    }
}

/// The error a request stream's end frame carries (its producer failed).
fn stream_failed(payload: Bytes) -> Error {
    match decode_end(payload) {
        Some(status) => Error::from_status(status),
        None => Error::new(
            Kind::Codec,
            "a request stream ended with a malformed end frame",
        ),
    }
}

#[cfg(test)]
mod tests {
    use ::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const FAULT: &str = "type.googleapis.com/p.DivideByZero";

    fn expect() -> Expect {
        Expect {
            max: 1 << 20,
            fault: Some(FAULT.into()),
        }
    }

    #[test]
    fn only_unavailable_marked_unprocessed_was_not_processed() {
        assert!(unprocessed(&headers(&[
            ("grpc-status", "14"),
            ("keel-unprocessed", "1")
        ])));
        // A bare UNAVAILABLE may come from a handler that ran.
        assert!(!unprocessed(&headers(&[("grpc-status", "14")])));
        assert!(!unprocessed(&headers(&[
            ("grpc-status", "13"),
            ("keel-unprocessed", "1")
        ])));
    }

    #[test]
    fn trailers_map_back_to_keels_status() {
        let md = Metadata::new;
        assert_eq!(
            status(&headers(&[("grpc-status", "0")]), md(), &expect()).unwrap(),
            None
        );
        let s = status(
            &headers(&[
                ("grpc-status", "5"),
                ("grpc-message", "no such key: %C3%BC"),
            ]),
            md(),
            &expect(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.code(), StatusCode::NotFound);
        assert_eq!(s.message(), "no such key: ü");
        // A number out of gRPC's range, or none at all, is UNKNOWN; no grpc-status is an error.
        for code in ["99", "x"] {
            let s = status(&headers(&[("grpc-status", code)]), md(), &expect());
            assert_eq!(s.unwrap().unwrap().code(), StatusCode::Unknown, "{code}");
        }
        assert!(status(&HeaderMap::new(), md(), &expect()).is_err());
    }

    #[test]
    fn a_fault_is_the_any_of_the_operations_fault_type() {
        let details = |type_url: &str| {
            let encoded = details::encode(&details::RpcStatus {
                code: 2,
                message: "fault".into(),
                details: vec![details::Any {
                    type_url: type_url.into(),
                    value: vec![9, 1],
                }],
            });
            super::super::super::details_encode(&encoded)
        };
        let h = headers(&[
            ("grpc-status", "2"),
            ("grpc-status-details-bin", &details(FAULT)),
        ]);
        let s = status(&h, Metadata::new(), &expect()).unwrap().unwrap();
        assert_eq!(s.code(), StatusCode::Fault);
        assert_eq!(&s.details()[..], &[9, 1]);
        // Another type is no fault of this operation: UNKNOWN, the details kept as they came.
        let other = details("type.googleapis.com/p.Other");
        let h = headers(&[("grpc-status", "2"), ("grpc-status-details-bin", &other)]);
        let s = status(&h, Metadata::new(), &expect()).unwrap().unwrap();
        assert_eq!(s.code(), StatusCode::Unknown);
        assert!(!s.details().is_empty());
    }
}
