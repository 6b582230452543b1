//! What `#[keel::contract]` generates against: a service's description and the invocation of
//! one of its operations. Hosts and bindings use these; users normally never name them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Status, StatusCode};
use crate::stream::ByteStream;

/// A contract's description: its name and operations, in declaration order.
#[derive(Debug)]
pub struct ServiceDescriptor {
    /// The contract (trait) name, e.g. `Calculator`.
    pub name: &'static str,
    /// The operations; an operation's index is its position here.
    pub operations: &'static [OperationInfo],
}

impl ServiceDescriptor {
    /// The index of the operation called `name`.
    pub fn operation_index(&self, name: &str) -> Option<usize> {
        self.operations.iter().position(|op| op.name == name)
    }
}

/// One operation of a contract.
#[derive(Debug)]
pub struct OperationInfo {
    /// The method name, e.g. `add`.
    pub name: &'static str,
    /// Parameters by name, in order.
    pub params: &'static [ParamInfo],
    /// The success type as written in the contract.
    pub returns: &'static str,
    /// The typed fault, for operations returning `Result<T, E>`.
    pub fault: Option<&'static str>,
    /// `#[keel(one_way)]`: acknowledged on receipt, no reply.
    pub one_way: bool,
    /// A plain `fn` (runs on keel-pool) rather than an `async fn` (runs on the runtime).
    pub blocking: bool,
    /// Takes a [`ByteStream`] parameter: the request body is streamed.
    pub stream_request: bool,
    /// Returns a [`ByteStream`]: the reply body is streamed.
    pub stream_response: bool,
}

impl OperationInfo {
    /// Whether either direction is streamed.
    pub fn streamed(&self) -> bool {
        self.stream_request || self.stream_response
    }
}

/// One parameter of an operation.
#[derive(Debug)]
pub struct ParamInfo {
    /// The parameter name.
    pub name: &'static str,
    /// Its type as written in the contract.
    pub ty: &'static str,
}

/// How message bodies are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// postcard: compact binary, keel's own clients.
    Postcard,
    /// JSON (`serde_json`): the HTTP binding's format for clients in any language. Arguments
    /// are an object of the parameters by name.
    Json,
}

/// What a successful operation sends back.
#[derive(Debug)]
pub enum Payload {
    /// The encoded return value, whole.
    Body(Bytes),
    /// A streamed reply: the chunks follow as the stream yields them.
    Stream(ByteStream),
}

impl Payload {
    /// The whole body; `None` for a stream.
    pub fn into_body(self) -> Option<Bytes> {
        match self {
            Payload::Body(b) => Some(b),
            Payload::Stream(_) => None,
        }
    }
}

/// The result of running an operation: the reply, or a status.
pub type Outcome = Result<Payload, Status>;

/// A decoded call, ready to run where its kind says it must run.
pub enum Invocation {
    /// A plain `fn` operation: must run on keel-pool, never on a runtime worker.
    Blocking(Box<dyn FnOnce() -> Outcome + Send>),
    /// An `async fn` operation: runs as a task on the host's runtime.
    Async(Pin<Box<dyn Future<Output = Outcome> + Send>>),
}

impl fmt::Debug for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invocation::Blocking(_) => "Invocation::Blocking",
            Invocation::Async(_) => "Invocation::Async",
        })
    }
}

/// A service a [`Host`](crate::Host) can serve. Implemented by the `{Contract}Server` types that
/// `#[keel::contract]` generates; not meant to be implemented by hand.
pub trait Service: Send + Sync + 'static {
    /// The contract's description.
    fn descriptor(&self) -> &'static ServiceDescriptor;
    /// Decodes the arguments of operation `op` and prepares its invocation. `stream` is the
    /// request stream (empty unless the caller streams one); an operation that takes none drops
    /// it, which tells the sender to stop.
    fn invoke(
        &self,
        op: usize,
        format: Format,
        body: &[u8],
        stream: ByteStream,
    ) -> Result<Invocation, Status>;
}

pub(crate) fn encode<T: Serialize + ?Sized>(format: Format, value: &T) -> Result<Bytes, String> {
    match format {
        Format::Postcard => postcard::to_stdvec(value)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
        Format::Json => serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
    }
}

pub(crate) fn decode<T: DeserializeOwned>(format: Format, body: &[u8]) -> Result<T, String> {
    match format {
        Format::Postcard => postcard::from_bytes(body).map_err(|e| e.to_string()),
        Format::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
    }
}

/// Decodes operation arguments; a failure is the caller's fault (`BadRequest`).
pub(crate) fn decode_args<T: DeserializeOwned>(format: Format, body: &[u8]) -> Result<T, Status> {
    decode(format, body).map_err(|e| {
        Status::new(
            StatusCode::BadRequest,
            format!("cannot decode arguments: {e}"),
        )
    })
}

/// Encodes a handler's return value.
pub(crate) fn encode_ok<T: Serialize>(format: Format, value: &T) -> Outcome {
    encode(format, value)
        .map(Payload::Body)
        .map_err(|e| Status::new(StatusCode::Internal, format!("cannot encode reply: {e}")))
}

/// Encodes a typed fault.
fn encode_fault<E: Serialize>(format: Format, fault: &E) -> Status {
    match encode(format, fault) {
        Ok(b) => Status::fault(b),
        Err(e) => Status::new(StatusCode::Internal, format!("cannot encode fault: {e}")),
    }
}

/// Encodes a handler's `Result<T, E>`: `Err` becomes a typed fault.
pub(crate) fn encode_fallible<T: Serialize, E: Serialize>(
    format: Format,
    value: &Result<T, E>,
) -> Outcome {
    match value {
        Ok(v) => encode_ok(format, v),
        Err(e) => Err(encode_fault(format, e)),
    }
}

/// A handler's streamed reply.
pub(crate) fn stream_ok(stream: ByteStream) -> Outcome {
    Ok(Payload::Stream(stream))
}

/// A handler's `Result<ByteStream, E>`: `Err` becomes a typed fault.
pub(crate) fn stream_fallible<E: Serialize>(
    format: Format,
    value: Result<ByteStream, E>,
) -> Outcome {
    match value {
        Ok(s) => Ok(Payload::Stream(s)),
        Err(e) => Err(encode_fault(format, &e)),
    }
}

pub(crate) fn unknown_operation(desc: &ServiceDescriptor, op: usize) -> Status {
    Status::new(
        StatusCode::UnknownOperation,
        format!("{} has no operation #{op}", desc.name),
    )
}
