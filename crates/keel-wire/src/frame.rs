//! Frame types. See the crate docs and `PROTOCOL.md` for the byte layout.

use std::borrow::Cow;

use bytes::Bytes;

/// One unit on a keel connection after the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Client → host: invoke an operation.
    Request(Request),
    /// Host → client: the outcome of a request (also the acknowledgement of a one-way call).
    Reply(Reply),
    /// Client → host: the caller no longer wants the reply of `call_id`; ends the whole call,
    /// its streams included.
    Cancel(Cancel),
    /// Either side: liveness probe; the peer answers with [`Frame::Pong`] carrying the same nonce.
    Ping(u64),
    /// Answer to [`Frame::Ping`].
    Pong(u64),
    /// Host → client: the host is closing this connection; requests with an id above
    /// `last_call_id` were not and will not be processed.
    GoAway(GoAway),
    /// Either side: a piece of a call's byte stream. Client → host it carries the request
    /// stream of a streamed request, host → client the response stream of a reply.
    StreamData(StreamData),
    /// Either side, from the producer of a stream: the stream of `call_id` is over, cleanly
    /// or aborted.
    StreamEnd(StreamEnd),
    /// Either side, from the consumer of a stream: the producer may send more data bytes.
    WindowUpdate(WindowUpdate),
    /// Either side, from the consumer of a stream: it wants no more data on that stream.
    StopSending(StopSending),
}

/// Per-request flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestFlags {
    /// One-way call: the host acknowledges receipt with an empty `Ok` reply before running it.
    pub one_way: bool,
    /// Streamed request: the request's byte stream follows as [`Frame::StreamData`] frames
    /// for this call id, ended by a [`Frame::StreamEnd`].
    pub streamed: bool,
    /// Version 2: the caller accepts a compressed reply body ([`Reply::compression`]).
    pub accepts_compressed: bool,
}

/// An operation invocation.
///
/// `B` holds the metadata block and the body: [`Bytes`] in a [`Frame`], or `&[u8]` in a request
/// decoded in place by [`Codec::decode_request_in_place`](crate::Codec::decode_request_in_place),
/// borrowing the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<B = Bytes> {
    /// Caller-chosen id, unique among the caller's calls in flight on this connection.
    pub call_id: u64,
    /// Flags.
    pub flags: RequestFlags,
    /// Remaining time budget in microseconds when the request was written; 0 means none.
    /// Relative, so the two sides' clocks never need to agree.
    pub deadline_us: u64,
    /// Service (contract) name, e.g. `Calculator`.
    ///
    /// A `Cow` so that a caller with a `&'static str` (a generated client) builds a request
    /// without allocating; a decoded name is owned.
    pub service: Cow<'static, str>,
    /// Operation name, e.g. `add`.
    pub operation: Cow<'static, str>,
    /// The call's metadata, as an encoded block (see [`metadata`](crate::metadata)); empty for
    /// none. Version 2 and later; a version-1 codec neither sends nor receives it.
    pub metadata: B,
    /// How `body` is compressed: 0 for not at all, else an id the application assigns (keel:
    /// 1 = zstd, 2 = gzip). Version 2 and later.
    pub compression: u8,
    /// The encoded arguments (keel: MessagePack in version 2, postcard in version 1).
    pub body: B,
}

/// The outcome of a request.
///
/// `B` holds the metadata block, the details and the body: [`Bytes`] in a [`Frame`] (and from
/// [`Codec::decode_reply`](crate::Codec::decode_reply)); the codec's parser uses ranges of the
/// frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<B = Bytes> {
    /// The id of the request this answers.
    pub call_id: u64,
    /// Outcome.
    pub status: StatusCode,
    /// Reply metadata, as an encoded block (see [`metadata`](crate::metadata)); empty for none.
    /// Version 2 and later.
    pub metadata: B,
    /// How `body` is compressed (0: not at all), as for [`Request::compression`]. Version 2
    /// and later.
    pub compression: u8,
    /// Structured error details for a status other than `Ok` (opaque to the protocol); empty
    /// for none. Version 2 and later.
    pub details: B,
    /// `Ok`: the encoded return value. `Fault`: the encoded typed fault. Anything else: a UTF-8
    /// message for humans.
    pub body: B,
}

impl Reply {
    /// The head of a streamed reply (the operation streams its result): `Ok`, the reply's
    /// `metadata`, and no body; the stream's frames follow (PROTOCOL.md, "Streams of messages").
    pub fn stream_head(call_id: u64, metadata: Bytes) -> Reply {
        Reply {
            call_id,
            status: StatusCode::Ok,
            metadata,
            compression: 0,
            details: Bytes::new(),
            body: Bytes::new(),
        }
    }
}

/// Cancellation of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancel {
    /// The id of the request to cancel.
    pub call_id: u64,
}

/// The host is closing the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// Highest call id the host accepted; later ids get no reply on this connection.
    pub last_call_id: u64,
    /// Why, for humans.
    pub reason: String,
}

/// A piece of a call's byte stream.
///
/// The direction says which stream: client → host it belongs to the request stream of
/// `call_id`, host → client to its response stream. Only `data.len()` counts against the
/// flow-control window (see [`RecvWindow`](crate::RecvWindow)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamData {
    /// The call whose stream this belongs to.
    pub call_id: u64,
    /// The bytes; may be empty. At most the message limit long.
    pub data: Bytes,
}

/// The end of a call's byte stream, sent by its producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEnd {
    /// The call whose stream ends.
    pub call_id: u64,
    /// [`StatusCode::Ok`]: the stream ended cleanly (and `message` is empty). Anything else:
    /// the producer aborted the stream, for this reason.
    pub status: StatusCode,
    /// Why the stream was aborted: UTF-8 text for humans, at most
    /// [`MAX_REASON_LEN`](crate::MAX_REASON_LEN) bytes (encoders truncate longer text to a
    /// character boundary). Empty for a clean end.
    pub message: Bytes,
}

/// Flow-control credit, sent by the consumer of a call's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowUpdate {
    /// The call whose stream the credit is for.
    pub call_id: u64,
    /// How many more data bytes the producer may send; never 0.
    pub increment: u32,
}

/// The consumer of a call's stream wants no more data on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSending {
    /// The call whose stream should stop.
    pub call_id: u64,
}

/// Outcome of a call as it travels on the wire. Stable numeric values: never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum StatusCode {
    /// Success; the body is the return value.
    Ok = 0,
    /// The handler returned its typed fault; the body is the fault.
    Fault = 1,
    /// No such service on this host.
    UnknownService = 2,
    /// No such operation in the service.
    UnknownOperation = 3,
    /// The request body could not be decoded into the operation's parameters.
    BadRequest = 4,
    /// The message exceeds the receiver's size limit.
    TooLarge = 5,
    /// The host's throttle queue is full; retry later.
    Busy = 6,
    /// The deadline passed before the work could start or finish.
    DeadlineExceeded = 7,
    /// The call was cancelled.
    Cancelled = 8,
    /// The host is shutting down and did not start the call.
    ShuttingDown = 9,
    /// The handler panicked.
    HandlerPanicked = 10,
    /// Any other failure inside the host.
    Internal = 11,
    /// An error with no better code (also what a status byte this version does not know reads
    /// as).
    Unknown = 12,
    /// The caller's argument is invalid, whatever the state of the system (gRPC
    /// `INVALID_ARGUMENT`).
    InvalidArgument = 13,
    /// A requested entity was not found.
    NotFound = 14,
    /// The entity the caller tried to create already exists.
    AlreadyExists = 15,
    /// The caller is known but may not do this.
    PermissionDenied = 16,
    /// A resource (quota, space) is exhausted.
    ResourceExhausted = 17,
    /// The system is not in a state the operation requires.
    FailedPrecondition = 18,
    /// The operation was aborted, typically by a concurrency conflict.
    Aborted = 19,
    /// The operation was attempted past the valid range.
    OutOfRange = 20,
    /// The operation is not implemented or not supported.
    Unimplemented = 21,
    /// The service is unavailable right now; a retry may succeed.
    Unavailable = 22,
    /// Unrecoverable data loss or corruption.
    DataLoss = 23,
    /// The caller did not present valid credentials.
    Unauthenticated = 24,
}

impl StatusCode {
    /// The code for a wire byte, or `None` for a value this version does not know (decoders
    /// read such a value as [`StatusCode::Unknown`]).
    pub fn from_u8(v: u8) -> Option<StatusCode> {
        use StatusCode::*;
        Some(match v {
            0 => Ok,
            1 => Fault,
            2 => UnknownService,
            3 => UnknownOperation,
            4 => BadRequest,
            5 => TooLarge,
            6 => Busy,
            7 => DeadlineExceeded,
            8 => Cancelled,
            9 => ShuttingDown,
            10 => HandlerPanicked,
            11 => Internal,
            12 => Unknown,
            13 => InvalidArgument,
            14 => NotFound,
            15 => AlreadyExists,
            16 => PermissionDenied,
            17 => ResourceExhausted,
            18 => FailedPrecondition,
            19 => Aborted,
            20 => OutOfRange,
            21 => Unimplemented,
            22 => Unavailable,
            23 => DataLoss,
            24 => Unauthenticated,
            _ => return None,
        })
    }

    /// A stable, lower-case name for logs and HTTP bodies (e.g. `"deadline_exceeded"`).
    pub fn as_str(self) -> &'static str {
        use StatusCode::*;
        match self {
            Ok => "ok",
            Fault => "fault",
            UnknownService => "unknown_service",
            UnknownOperation => "unknown_operation",
            BadRequest => "bad_request",
            TooLarge => "too_large",
            Busy => "busy",
            DeadlineExceeded => "deadline_exceeded",
            Cancelled => "cancelled",
            ShuttingDown => "shutting_down",
            HandlerPanicked => "handler_panicked",
            Internal => "internal",
            Unknown => "unknown",
            InvalidArgument => "invalid_argument",
            NotFound => "not_found",
            AlreadyExists => "already_exists",
            PermissionDenied => "permission_denied",
            ResourceExhausted => "resource_exhausted",
            FailedPrecondition => "failed_precondition",
            Aborted => "aborted",
            OutOfRange => "out_of_range",
            Unimplemented => "unimplemented",
            Unavailable => "unavailable",
            DataLoss => "data_loss",
            Unauthenticated => "unauthenticated",
        }
    }
}
