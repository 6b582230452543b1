//! An OpenAPI 3.1 document of contracts, as the HTTP binding serves them (feature `openapi`).
//!
//! Each operation is a `POST /{Service}/{operation}` path whose request body is the JSON
//! object of its parameters by name and whose answers are those of the HTTP convention
//! ([`crate::http`]): the return value under 200 (202 without a body for one-way operations),
//! the typed fault under 422 as `{"code": "fault", "fault": ...}`, and the other statuses of the
//! convention's table with its error body. Every type is described by its JSON Schema, from
//! [`schemars`] (re-exported as `keel::schemars`), if it implements [`schemars::JsonSchema`];
//! see below for the others.
//!
//! A host with an `http://` endpoint serves the document of its contracts at
//! `GET /openapi.json`; [`document`] writes it offline, so it can be committed and diffed:
//!
//! ```
//! use keel::schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Serialize, Deserialize, JsonSchema)]
//! #[schemars(crate = "keel::schemars")]
//! pub struct DivideByZero { pub dividend: f64 }
//!
//! #[keel::contract]
//! pub trait Calculator {
//!     /// `a / b`, or the fault.
//!     fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
//! }
//!
//! let json = keel::openapi::document(&[CalculatorClient::descriptor()]);
//! assert!(json.contains("\"/Calculator/divide\""));
//! assert!(json.contains("\"DivideByZero\""));
//! ```
//!
//! # Types without a JSON Schema
//!
//! This feature puts no bound on a contract's types, so turning it on (in any crate of a
//! build: Cargo unifies features) never breaks a contract. A parameter, return or fault type
//! that does not implement [`schemars::JsonSchema`] (`serde_bytes::ByteBuf`, a type of your own
//! without the derive, or one that holds such a type) is described by an open schema: `{}`,
//! any JSON value, with a description that names the Rust type and says why; the call itself
//! is unaffected. The document stays valid OpenAPI 3.1; clients generated from it see an
//! untyped value there.
//!
//! To describe such a type, derive `JsonSchema` through `keel::schemars` (no dependency of your
//! own on schemars) and say what each field without a schema looks like in JSON: `uuid::Uuid`
//! and `chrono::DateTime` travel as strings, `ByteBuf` as an array of bytes (JSON) or a binary
//! (MessagePack, protobuf).
//!
//! ```
//! use keel::schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_bytes::ByteBuf;
//!
//! #[derive(Debug, Serialize, Deserialize, JsonSchema)]
//! #[schemars(crate = "keel::schemars")]
//! pub struct Item {
//!     #[schemars(with = "String", extend("format" = "uuid"))]
//!     pub id: uuid::Uuid,
//!     #[schemars(with = "String", extend("format" = "date-time"))]
//!     pub at: chrono::DateTime<chrono::Utc>,
//! }
//!
//! #[keel::contract]
//! pub trait Files {
//!     fn put(&self, item: Item, data: ByteBuf) -> u64;
//! }
//!
//! # fn main() {
//! let doc: serde_json::Value =
//!     serde_json::from_str(&keel::openapi::document(&[FilesClient::descriptor()])).unwrap();
//! let schemas = &doc["components"]["schemas"];
//! assert_eq!(schemas["Item"]["properties"]["id"]["format"], "uuid");
//! // `ByteBuf` has no schema: any JSON value, and the description says why.
//! let data = &schemas["Files_put_args"]["properties"]["data"];
//! assert!(data.get("type").is_none());
//! assert!(data["description"].as_str().unwrap().contains("serde_bytes::bytebuf::ByteBuf"));
//! # }
//! ```
//!
//! Streamed operations (a `ByteStream` or `MessageStream` parameter or return value) are
//! marked `"x-keel-streamed": true`; a byte stream's body is `application/octet-stream`, and a
//! streamed request's other parameters travel as JSON in the `keel-args` header. Streams of
//! messages are also marked `"x-keel-stream"`: `"server"`, `"client"` or `"bidirectional"`;
//! their bodies are `application/x-ndjson` with the schema of one message (a reply stream also
//! `text/event-stream`). One-way
//! operations are marked `"x-keel-one-way": true`, and `#[keel(idempotent)]` ones
//! `"x-keel-idempotent": true` (a client may send them again after a failure).

// What `#[keel::contract]` calls to describe a type (through `crate::__private`).
pub(crate) mod probe;

use schemars::generate::SchemaSettings;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

pub use crate::core::service::{OperationSchemas, SchemaFn};

use crate::core::service::{OperationInfo, ServiceDescriptor};

/// Header names and content types of the HTTP convention (as `crate::http` names them; kept
/// here so that this module does not depend on the binding).
const DEADLINE_HEADER: &str = "keel-deadline-ms";
const STATUS_HEADER: &str = "keel-status";
const DETAILS_HEADER: &str = "keel-status-details";
const ARGS_HEADER: &str = "keel-args";
const JSON: &str = "application/json";
const STREAM: &str = "application/octet-stream";
const NDJSON: &str = "application/x-ndjson";
const SSE: &str = "text/event-stream";

/// The error answers every call may meet besides its own 200 and 422, with the names of their
/// shared responses under `components/responses`, and the `keel-status` codes each carries.
const ERROR_ANSWERS: &[(&str, &str, &str)] = &[
    (
        "400",
        "BadRequest",
        "The body does not decode into the operation's parameters, or a header is invalid \
         (`bad_request`); or the handler answered `invalid_argument`, `failed_precondition` or \
         `out_of_range`; or the answer holds a number JSON cannot carry (infinity or NaN: \
         `out_of_range`).",
    ),
    (
        "401",
        "Unauthenticated",
        "No valid credentials (`unauthenticated`).",
    ),
    (
        "403",
        "PermissionDenied",
        "The caller may not do this (`permission_denied`).",
    ),
    (
        "404",
        "NotFound",
        "No such service or operation (`unknown_service`, `unknown_operation`), or the \
         handler did not find what was asked for (`not_found`).",
    ),
    (
        "408",
        "RequestTimeout",
        "The request body did not arrive within the host's frame timeout (`bad_request`).",
    ),
    (
        "409",
        "Conflict",
        "The handler answered `already_exists` or `aborted`.",
    ),
    (
        "413",
        "TooLarge",
        "The request body (or what it decompresses to) exceeds the host's `max_message_size` \
         (`too_large`).",
    ),
    (
        "415",
        "UnsupportedMediaType",
        "A `Content-Type` or `Content-Encoding` the host does not read (`bad_request`).",
    ),
    (
        "429",
        "ResourceExhausted",
        "A quota or resource is exhausted (`resource_exhausted`).",
    ),
    ("499", "Cancelled", "The call was cancelled (`cancelled`)."),
    (
        "500",
        "Internal",
        "The handler panicked (`handler_panicked`), failed inside the host (`internal`), or \
         answered `unknown` or `data_loss`.",
    ),
    (
        "501",
        "Unimplemented",
        "The handler answered `unimplemented`.",
    ),
    (
        "503",
        "Unavailable",
        "The host's throttle queue is full (`busy`, with `Retry-After: 1`), the host is \
         shutting down (`shutting_down`; with `keel-unprocessed: 1` nothing ran), or the \
         handler answered `unavailable`.",
    ),
    (
        "504",
        "DeadlineExceeded",
        "The `keel-deadline-ms` budget ran out before the work could start or finish \
         (`deadline_exceeded`).",
    ),
];

/// The OpenAPI 3.1 document of `services` as the HTTP binding serves them: pretty-printed
/// JSON with its object members in a stable (sorted) order, so that the same contracts always
/// give the same text. A host with an `http://` endpoint serves the same document for the
/// contracts it hosts at `GET /openapi.json`.
///
/// Get a contract's descriptor from its generated client (`CalculatorClient::descriptor()`)
/// or from a server ([`Service::descriptor`](crate::service::Service::descriptor)). The title lists
/// the services; the version is keel's, which the convention follows.
pub fn document(services: &[&ServiceDescriptor]) -> String {
    let mut text = serde_json::to_string_pretty(&sorted(document_value(services)))
        .expect("a document always serializes");
    text.push('\n');
    text
}

/// The document of [`document`], as a JSON value.
pub(crate) fn document_value(services: &[&ServiceDescriptor]) -> Value {
    let mut gen = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let mut paths = Map::new();
    // The bodies of the operations themselves (arguments, faults), by name: generators name
    // their types after these.
    let mut bodies = Map::new();
    for service in services {
        for op in service.operations {
            paths.insert(
                format!("/{}/{}", service.name, op.name),
                json!({ "post": operation(&mut gen, &mut bodies, service.name, op) }),
            );
        }
    }
    let mut schemas = gen.take_definitions(true);
    schemas.extend(bodies);
    schemas.insert("KeelError".into(), error_schema());
    let names: Vec<&str> = services.iter().map(|s| s.name).collect();
    let mut responses = Map::new();
    for (_, name, description) in ERROR_ANSWERS {
        let mut headers = Map::new();
        headers.insert(
            STATUS_HEADER.into(),
            json!({"$ref": "#/components/headers/Status"}),
        );
        headers.insert(
            DETAILS_HEADER.into(),
            json!({"$ref": "#/components/headers/StatusDetails"}),
        );
        if *name == "Unavailable" {
            headers.insert(
                "retry-after".into(),
                json!({"description": "`1` for `busy` and `shutting_down`.", "schema": {"type": "string"}}),
            );
        }
        responses.insert(
            (*name).into(),
            json!({
                "description": description,
                "headers": headers,
                "content": {JSON: {"schema": {"$ref": "#/components/schemas/KeelError"}}},
            }),
        );
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": names.join(", "),
            "version": env!("CARGO_PKG_VERSION"),
            "description": "keel services over HTTP: one `POST /{Service}/{operation}` per call, \
                with the parameters as a JSON object by name. Every answer carries `keel-status`. \
                Any other request header whose name is a valid metadata key is the call's \
                metadata, and reply metadata comes back as response headers.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": responses,
            "parameters": {
                "Deadline": {
                    "name": DEADLINE_HEADER,
                    "in": "header",
                    "required": false,
                    "description": "The caller's remaining time budget in whole milliseconds; \
                        work that cannot start (or finish) within it is answered 504. Without \
                        it the call has no deadline.",
                    "schema": {"type": "integer", "minimum": 0, "maximum": u64::MAX},
                },
            },
            "headers": {
                "Status": {
                    "description": "The call's status code: `ok`, `fault`, `busy`, ... (see the \
                        HTTP convention's table).",
                    "required": true,
                    "schema": {"type": "string"},
                },
                "StatusDetails": {
                    "description": "The status's details, standard base64 without padding.",
                    "schema": {"type": "string"},
                },
            },
        },
    })
}

/// The `post` of one operation; adds the schemas of its arguments and fault to `bodies`, as
/// `{Service}_{operation}_args` and `{Service}_{operation}_fault`.
fn operation(
    gen: &mut SchemaGenerator,
    bodies: &mut Map<String, Value>,
    service: &str,
    op: &OperationInfo,
) -> Value {
    let schemas = op
        .schemas
        .expect("a contract compiled with the `openapi` feature describes its schemas");
    let mut args = (schemas.args)(gen).to_value();
    if let Some(object) = args.as_object_mut() {
        let description = format!("The parameters of `{service}.{}`, by name.", op.name);
        object.insert("description".into(), description.into());
    }
    let args_required = args
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    let args_name = format!("{service}_{}_args", op.name);
    bodies.insert(args_name.clone(), args);
    let args = json!({"$ref": format!("#/components/schemas/{args_name}")});
    let mut parameters = vec![json!({"$ref": "#/components/parameters/Deadline"})];
    let request = if op.stream_request {
        parameters.push(json!({
            "name": ARGS_HEADER,
            "in": "header",
            "required": args_required,
            "description": "The operation's other parameters, as a JSON object (ASCII: other \
                characters escaped as \\uXXXX). No header means `{}`.",
            "content": {JSON: {"schema": args}},
        }));
        match schemas.request_message {
            Some(message) => json!({
                "required": true,
                "description": "The request stream of messages, as NDJSON: one JSON message of \
                    this schema per line.",
                "content": {NDJSON: {"schema": message(gen).to_value()}},
            }),
            None => json!({
                "required": true,
                "description": "The request stream, of any length.",
                "content": {STREAM: {"schema": {"type": "string", "format": "binary"}}},
            }),
        }
    } else {
        json!({
            "required": true,
            "description": "The parameters, one member per parameter by name (`{}` when there \
                are none; an empty body is read as `{}`).",
            "content": {JSON: {"schema": args}},
        })
    };
    let status_header = json!({"$ref": "#/components/headers/Status"});
    let mut responses = Map::new();
    if op.one_way {
        responses.insert(
            "202".into(),
            json!({
                "description": "Received; the operation runs after this answer, and its \
                    outcome is not reported.",
                "headers": {STATUS_HEADER: status_header},
            }),
        );
    } else {
        let content = match schemas.returns {
            Some(message) if op.message_response => {
                let message = message(gen).to_value();
                json!({NDJSON: {"schema": message}, SSE: {"schema": {"type": "string"}}})
            }
            Some(returns) => json!({JSON: {"schema": returns(gen).to_value()}}),
            None => json!({STREAM: {"schema": {"type": "string", "format": "binary"}}}),
        };
        let description = if op.message_response {
            "The reply stream of messages: NDJSON, one JSON message of this schema per line \
                (or Server-Sent Events with `Accept: text/event-stream`); a stream that fails \
                midway ends with a last line `{\"error\": ...}`."
        } else if op.stream_response {
            "The reply stream; a stream that fails midway is cut off, never ended cleanly."
        } else {
            "The return value."
        };
        responses.insert(
            "200".into(),
            json!({
                "description": description,
                "headers": {STATUS_HEADER: status_header},
                "content": content,
            }),
        );
    }
    if let Some(fault) = schemas.fault {
        let fault_name = format!("{service}_{}_fault", op.name);
        bodies.insert(
            fault_name.clone(),
            json!({
                "description": format!("The typed fault of `{service}.{}`.", op.name),
                "type": "object",
                "required": ["code", "fault"],
                "properties": {
                    "code": {"const": "fault"},
                    "fault": fault(gen).to_value(),
                },
            }),
        );
        responses.insert(
            "422".into(),
            json!({
                "description": "The operation's typed fault (`keel-status: fault`).",
                "headers": {STATUS_HEADER: status_header},
                "content": {JSON: {"schema": {"$ref": format!("#/components/schemas/{fault_name}")}}},
            }),
        );
    }
    for (status, name, _) in ERROR_ANSWERS {
        responses.insert(
            (*status).into(),
            json!({"$ref": format!("#/components/responses/{name}")}),
        );
    }
    let mut post = Map::new();
    post.insert(
        "operationId".into(),
        format!("{service}_{}", op.name).into(),
    );
    post.insert("tags".into(), json!([service]));
    if !schemas.docs.is_empty() {
        let summary = schemas.docs.lines().next().unwrap_or_default();
        post.insert("summary".into(), summary.into());
        post.insert("description".into(), schemas.docs.into());
    }
    post.insert("parameters".into(), parameters.into());
    post.insert("requestBody".into(), request);
    post.insert("responses".into(), responses.into());
    if op.streamed() {
        post.insert("x-keel-streamed".into(), true.into());
    }
    let messages = match (op.message_request, op.message_response) {
        (true, true) => Some("bidirectional"),
        (true, false) => Some("client"),
        (false, true) => Some("server"),
        (false, false) => None,
    };
    if let Some(kind) = messages {
        post.insert("x-keel-stream".into(), kind.into());
    }
    if op.one_way {
        post.insert("x-keel-one-way".into(), true.into());
    }
    if op.idempotent {
        post.insert("x-keel-idempotent".into(), true.into());
    }
    Value::Object(post)
}

/// The JSON error body of the HTTP convention.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "description": "An error answer: its `keel-status` code, a message for people, and \
            the status's details (standard base64 without padding) if it has any.",
        "required": ["code"],
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "details": {"type": "string"},
        },
    })
}

/// The JSON description of one contract that `GET /{Service}` answers: its operations with
/// the JSON Schema of every parameter, return value and fault (`$ref`s point into `$defs`).
/// Members in the documented order: `service`, `operations`, `$defs`.
#[cfg(feature = "http")]
#[derive(Debug, serde::Serialize)]
pub(crate) struct Description {
    service: &'static str,
    operations: Vec<OperationDescription>,
    #[serde(rename = "$defs")]
    defs: Value,
}

#[cfg(feature = "http")]
#[derive(Debug, serde::Serialize)]
struct OperationDescription {
    name: &'static str,
    params: Vec<ParamDescription>,
    returns: Value,
    fault: Option<Value>,
    one_way: bool,
    streamed: bool,
}

#[cfg(feature = "http")]
#[derive(Debug, serde::Serialize)]
struct ParamDescription {
    name: &'static str,
    #[serde(rename = "type")]
    ty: Value,
}

#[cfg(feature = "http")]
impl Description {
    /// The description of `service`.
    pub(crate) fn of(service: &ServiceDescriptor) -> Description {
        let mut gen = SchemaSettings::draft2020_12()
            .with(|s| s.meta_schema = None)
            .into_generator();
        let stream = json!({"type": "string", "format": "binary"});
        let operations = service
            .operations
            .iter()
            .map(|op| {
                let schemas = op
                    .schemas
                    .expect("a contract compiled with the `openapi` feature describes its schemas");
                let args = (schemas.args)(&mut gen).to_value();
                let params = op
                    .params
                    .iter()
                    .map(|p| ParamDescription {
                        name: p.name,
                        ty: args
                            .get("properties")
                            .and_then(|props| props.get(p.name))
                            .cloned()
                            .map_or_else(|| stream.clone(), sorted),
                    })
                    .collect();
                let returns = match schemas.returns {
                    Some(f) => sorted(f(&mut gen).to_value()),
                    None if op.one_way => json!({"type": "null"}),
                    None => stream.clone(),
                };
                OperationDescription {
                    name: op.name,
                    params,
                    returns,
                    fault: schemas.fault.map(|f| sorted(f(&mut gen).to_value())),
                    one_way: op.one_way,
                    streamed: op.streamed(),
                }
            })
            .collect();
        Description {
            service: service.name,
            operations,
            defs: sorted(Value::Object(gen.take_definitions(true))),
        }
    }
}

/// `value` with every object's members in sorted order, whatever order `serde_json`'s map
/// keeps (its `preserve_order` feature may be on in a build through another crate).
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(String, Value)> = map.into_iter().collect();
            members.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(members.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
