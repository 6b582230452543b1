//! What `#[keel::contract]` generates against: a service's description and the invocation of
//! one of its operations. The descriptors are public (for introspection); the rest is reached
//! only through `keel::__private`, the module generated code calls.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

use bytes::Bytes;

use super::context::Context;
use super::format::Format;
use super::proto::numbers::ProtoNumbers;
use super::proto::schema::{self, ProtoTypes, ServiceSchema};
use super::proto::ProtoCodec;
use super::status::Status;
use super::stream::ByteStream;

/// The operation name that opens a session on a service (see `bindings/session`). Not a Rust
/// identifier, so no contract's operation can have it.
pub(crate) const SESSION_OPERATION: &str = "@session";

/// A contract's description: its name and operations, in declaration order.
#[derive(Debug)]
#[non_exhaustive]
pub struct ServiceDescriptor {
    /// The contract (trait) name, e.g. `Calculator`.
    pub name: &'static str,
    /// The operations; an operation's index is its position here.
    pub operations: &'static [OperationInfo],
    /// The protobuf package of the contract's gRPC service and `.proto` file:
    /// `#[keel::contract(package = "...")]`, else the name of the crate that declares the
    /// contract (with `_` for `-`).
    pub package: &'static str,
    /// Field numbers pinned with `#[keel::contract(proto_numbers(...))]`.
    proto_numbers: &'static [ProtoNumbers],
    /// Its protobuf schema, traced from its types on first use.
    proto: OnceLock<Result<ServiceSchema, String>>,
}

impl ServiceDescriptor {
    /// A description (what generated code builds). Not a public API.
    #[doc(hidden)]
    pub const fn new(name: &'static str, operations: &'static [OperationInfo]) -> Self {
        ServiceDescriptor {
            name,
            operations,
            package: "",
            proto_numbers: &[],
            proto: OnceLock::new(),
        }
    }

    /// The contract's protobuf schema (traced from its types the first time it is asked
    /// for), or why its types have none.
    pub(crate) fn proto_schema(&self) -> Result<&ServiceSchema, &str> {
        self.proto
            .get_or_init(|| {
                let operations = self
                    .operations
                    .iter()
                    .map(|op| schema::OpShape {
                        name: op.name,
                        method: op.grpc_name(),
                        one_way: op.one_way,
                        stream_request: op.stream_request,
                        stream_response: op.stream_response,
                        message_request: op.message_request,
                        message_response: op.message_response,
                        proto: op.proto,
                    })
                    .collect();
                schema::trace(&schema::Contract {
                    name: self.name,
                    operations,
                    numbers: self.proto_numbers,
                })
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// The name of operation `op`'s typed fault message in the contract's protobuf package
    /// (what a gRPC fault's `Any` type URL names), if it has one and protobuf can say it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn grpc_fault_name(&self, op: &str) -> Option<&str> {
        let schema = self.proto_schema().ok()?;
        schema
            .ops
            .iter()
            .find(|o| o.name == op)?
            .fault_name
            .as_deref()
    }

    /// The protobuf encoding of the contract's types, or why they have none.
    pub(crate) fn proto_codec(&'static self) -> Result<ProtoCodec, &'static str> {
        self.proto_schema().map(|s| ProtoCodec::new(&s.layout))
    }

    /// The protobuf encoding of operation `op`'s messages, for a gRPC client; or why gRPC
    /// cannot call it (its contract's types have no protobuf description, it streams bytes, or
    /// its `.proto` leaves it out for a reason it names).
    pub(crate) fn grpc_codec(&'static self, op: usize) -> Result<ProtoCodec, String> {
        let info = &self.operations[op];
        let cannot = |why: &str| {
            format!(
                "{}/{} cannot be called over gRPC: {why}",
                self.grpc_name(),
                info.grpc_name()
            )
        };
        if (info.stream_request && !info.message_request)
            || (info.stream_response && !info.message_response)
        {
            return Err(cannot(
                "it streams bytes (keel::ByteStream), which gRPC has no type for",
            ));
        }
        let schema = self.proto_schema().map_err(cannot)?;
        match schema.ops.iter().find(|o| o.name == info.name) {
            Some(o) => match &o.unavailable {
                Some(why) => Err(cannot(why)),
                None => Ok(ProtoCodec::new(&schema.layout)),
            },
            None => Err(cannot("its types cannot be described in protobuf")),
        }
    }

    /// This description in the protobuf package `package` (what generated code builds). Not
    /// a public API.
    #[doc(hidden)]
    pub const fn with_package(mut self, package: &'static str) -> Self {
        self.package = package;
        self
    }

    /// This description with the field numbers `numbers` pinned (what generated code builds).
    /// Not a public API.
    #[doc(hidden)]
    pub const fn with_proto_numbers(mut self, numbers: &'static [ProtoNumbers]) -> Self {
        self.proto_numbers = numbers;
        self
    }

    /// Whether the contract pins field numbers (`proto_numbers`): then a host refuses to
    /// start when they do not fit its types.
    pub(crate) fn pins_proto_numbers(&self) -> bool {
        !self.proto_numbers.is_empty()
    }

    /// The gRPC service's full name, `{package}.{name}` (just `{name}` without a package):
    /// the first part of its calls' paths, `/{full name}/{Method}`.
    pub fn grpc_name(&self) -> String {
        if self.package.is_empty() {
            self.name.to_string()
        } else {
            format!("{}.{}", self.package, self.name)
        }
    }

    /// The index of the operation called `name`.
    pub fn operation_index(&self, name: &str) -> Option<usize> {
        // A name keel-wire decoded as one the host knows is this descriptor's own `&'static
        // str`: its address finds it without comparing bytes (`ptr::eq` on `str`s compares
        // address and length).
        self.operations
            .iter()
            .position(|op| std::ptr::eq(op.name, name) || op.name == name)
    }
}

/// One operation of a contract.
#[derive(Debug)]
#[non_exhaustive]
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
    /// Takes a [`ByteStream`] or a [`MessageStream`](crate::MessageStream) parameter: the
    /// request body is streamed.
    pub stream_request: bool,
    /// Returns a [`ByteStream`] or a [`MessageStream`](crate::MessageStream): the reply body
    /// is streamed.
    pub stream_response: bool,
    /// The request stream is a [`MessageStream`](crate::MessageStream) of typed messages
    /// (client streaming), not bytes.
    pub message_request: bool,
    /// The reply stream is a [`MessageStream`](crate::MessageStream) of typed messages (server
    /// streaming), not bytes. Both: a bidirectional stream.
    pub message_response: bool,
    /// `#[keel(idempotent)]`: running it twice has the effect of running it once, so a client
    /// may send it again after a failure that leaves unknown whether it ran (see
    /// [`RetryPolicy`](crate::client::RetryPolicy)).
    pub idempotent: bool,
    /// The JSON Schema of its parameters, return value and fault, and its documentation: what
    /// the OpenAPI document ([`crate::openapi`]) is made of. Always `Some` for a contract
    /// compiled with the `openapi` feature.
    #[cfg(feature = "openapi")]
    pub schemas: Option<OperationSchemas>,
    /// How to trace its types into protobuf (from `#[keel::contract]`).
    #[doc(hidden)]
    pub proto: Option<ProtoTypes>,
}

impl OperationInfo {
    /// A description of one operation (what generated code builds). Not a public API.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        name: &'static str,
        params: &'static [ParamInfo],
        returns: &'static str,
        fault: Option<&'static str>,
        one_way: bool,
        blocking: bool,
        stream_request: bool,
        stream_response: bool,
    ) -> Self {
        OperationInfo {
            name,
            params,
            returns,
            fault,
            one_way,
            blocking,
            stream_request,
            stream_response,
            message_request: false,
            message_response: false,
            idempotent: false,
            #[cfg(feature = "openapi")]
            schemas: None,
            proto: None,
        }
    }

    /// This description with the functions that trace its types into protobuf (what
    /// generated code builds). Not a public API.
    #[doc(hidden)]
    pub const fn with_proto(mut self, proto: ProtoTypes) -> Self {
        self.proto = Some(proto);
        self
    }

    /// This description with the operation's schemas (what generated code builds). Not a
    /// public API.
    #[cfg(feature = "openapi")]
    #[doc(hidden)]
    pub const fn with_schemas(self, schemas: OperationSchemas) -> Self {
        OperationInfo {
            schemas: Some(schemas),
            ..self
        }
    }

    /// Marks the operation idempotent (what generated code does for `#[keel(idempotent)]`).
    /// Not a public API.
    #[doc(hidden)]
    pub const fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Marks the streams that carry typed messages (what generated code does for
    /// `MessageStream<T>`). Not a public API.
    #[doc(hidden)]
    pub const fn with_messages(mut self, request: bool, response: bool) -> Self {
        self.message_request = request;
        self.message_response = response;
        self
    }

    /// Streams messages both ways: a bidirectional stream (which HTTP/1.1 cannot carry).
    pub fn bidirectional(&self) -> bool {
        self.message_request && self.message_response
    }

    /// Whether either direction is streamed.
    pub fn streamed(&self) -> bool {
        self.stream_request || self.stream_response
    }

    /// The operation's gRPC method name: its name in `PascalCase` (`get_feature` →
    /// `GetFeature`), as protobuf's style guide names RPCs.
    pub fn grpc_name(&self) -> String {
        super::proto::names::pascal_case(self.name)
    }
}

/// Adds the JSON Schema of a type to a generator (a `$ref` for types kept in its definitions).
#[cfg(feature = "openapi")]
pub type SchemaFn = fn(&mut schemars::SchemaGenerator) -> schemars::Schema;

/// The JSON Schema of an operation's parameters, return value and fault, as functions that add
/// them to a [`schemars::SchemaGenerator`] (from `#[keel::contract]` with the `openapi`
/// feature; see [`crate::openapi`]).
#[cfg(feature = "openapi")]
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct OperationSchemas {
    /// The JSON body of a call: an object with one member per parameter (the `ByteStream`
    /// and `Context` parameters are not in it).
    pub args: SchemaFn,
    /// The JSON body of a success: the return value (`T` of `Result<T, _>`); for a
    /// `MessageStream<T>`, one message `T`; `None` when it is a `ByteStream` or the operation
    /// is one-way.
    pub returns: Option<SchemaFn>,
    /// One message of the request stream, when it is a `MessageStream<T>`.
    pub request_message: Option<SchemaFn>,
    /// The typed fault (`E` of `Result<T, E>`), if the operation has one.
    pub fault: Option<SchemaFn>,
    /// The operation's documentation (its doc comment), or `""`.
    pub docs: &'static str,
}

#[cfg(feature = "openapi")]
impl OperationSchemas {
    /// An operation's schemas (what generated code builds). Not a public API.
    #[doc(hidden)]
    pub const fn new(
        args: SchemaFn,
        returns: Option<SchemaFn>,
        fault: Option<SchemaFn>,
        docs: &'static str,
    ) -> Self {
        OperationSchemas {
            args,
            returns,
            request_message: None,
            fault,
            docs,
        }
    }

    /// These schemas with the request stream's message schema (what generated code builds).
    /// Not a public API.
    #[doc(hidden)]
    pub const fn with_request_message(mut self, message: Option<SchemaFn>) -> Self {
        self.request_message = message;
        self
    }
}

/// One parameter of an operation.
#[derive(Debug)]
#[non_exhaustive]
pub struct ParamInfo {
    /// The parameter name.
    pub name: &'static str,
    /// Its type as written in the contract.
    pub ty: &'static str,
}

impl ParamInfo {
    /// A description of one parameter (what generated code builds). Not a public API.
    #[doc(hidden)]
    pub const fn new(name: &'static str, ty: &'static str) -> Self {
        ParamInfo { name, ty }
    }
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
/// `#[keel::contract]` generates; not meant to be implemented by hand (its hidden method may
/// change in any release).
pub trait Service: Send + Sync + 'static {
    /// The contract's description.
    fn descriptor(&self) -> &'static ServiceDescriptor;
    /// Generated code's part, not a public API. Decodes the arguments of operation `op` and
    /// prepares its invocation. `stream` is the request stream (empty unless the caller streams
    /// one); an operation that takes none drops it, which tells the sender to stop. `ctx` goes
    /// to an operation that declares a `keel::Context` parameter.
    #[doc(hidden)]
    fn invoke(
        &self,
        op: usize,
        format: Format,
        body: &[u8],
        stream: ByteStream,
        ctx: &Context,
    ) -> Result<Invocation, Status>;

    /// Generated code's part, not a public API. The service a session opened with `ctx` calls:
    /// a new instance for a service built with `per_session`, else this one.
    #[doc(hidden)]
    fn open_session(&self, ctx: &Context) -> Result<std::sync::Arc<dyn Service>, Status> {
        let _ = ctx;
        Err(Status::new(
            super::status::StatusCode::Unimplemented,
            format!(
                "service `{}` does not open sessions",
                self.descriptor().name
            ),
        ))
    }
}
