//! gRPC server reflection (`grpc/reflection/v1/reflection.proto`, and `v1alpha`, which
//! grpcurl still asks first): the services a host serves and, for each package, a
//! `FileDescriptorProto` derived from its contracts' types, so grpcurl, grpcui and Postman can
//! list, describe and call them without a `.proto` file. Extensions do not exist in proto3
//! files keel writes: asking for one is `NOT_FOUND`.

// The clients `#[keel::contract]` generates have `pub` methods, unreachable from outside
// this crate-private contract.
#![allow(unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use super::Link;
use crate::core::messages::MessageStream;
use crate::core::proto::descriptor;
use crate::core::proto::file::{self, MessageDef};
use crate::core::service::ServiceDescriptor;

/// `ServerReflectionRequest`: `host` (1), then one of fields 3 to 7 (a oneof in the spec:
/// each member an optional field here, the same bytes on the wire).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct ServerReflectionRequest {
    host: String,
    /// Field 2 is not used by the spec.
    reserved_2: Option<u32>,
    file_by_filename: Option<String>,
    file_containing_symbol: Option<String>,
    file_containing_extension: Option<ExtensionRequest>,
    all_extension_numbers_of_type: Option<String>,
    list_services: Option<String>,
}

/// `ExtensionRequest`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct ExtensionRequest {
    containing_type: String,
    extension_number: i32,
}

/// `ServerReflectionResponse`: `valid_host` (1), `original_request` (2), then one of fields
/// 4 to 7.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct ServerReflectionResponse {
    valid_host: String,
    original_request: Option<ServerReflectionRequest>,
    /// Field 3 is not used by the spec.
    reserved_3: Option<u32>,
    file_descriptor_response: Option<FileDescriptorResponse>,
    all_extension_numbers_response: Option<ExtensionNumberResponse>,
    list_services_response: Option<ListServiceResponse>,
    error_response: Option<ErrorResponse>,
}

/// `FileDescriptorResponse`: serialized `FileDescriptorProto`s.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct FileDescriptorResponse {
    file_descriptor_proto: Vec<Blob>,
}

/// Bytes that are protobuf `bytes` (not a sequence of numbers).
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct Blob(Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl serde::de::Visitor<'_> for Bytes {
            type Value = Blob;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Blob, E> {
                Ok(Blob(v.to_vec()))
            }
        }
        d.deserialize_bytes(Bytes)
    }
}

/// `ExtensionNumberResponse`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct ExtensionNumberResponse {
    base_type_name: String,
    extension_number: Vec<i32>,
}

/// `ListServiceResponse`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct ListServiceResponse {
    service: Vec<ServiceResponse>,
}

/// `ServiceResponse`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct ServiceResponse {
    name: String,
}

/// `ErrorResponse`: a gRPC status code and message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct ErrorResponse {
    error_code: i32,
    error_message: String,
}

pub(crate) mod v1 {
    use super::{ServerReflectionRequest, ServerReflectionResponse};
    use crate::core::messages::MessageStream;

    /// `grpc.reflection.v1.ServerReflection`.
    #[crate::contract(package = "grpc.reflection.v1")]
    pub(crate) trait ServerReflection {
        /// Answers each request in order.
        async fn server_reflection_info(
            &self,
            requests: MessageStream<ServerReflectionRequest>,
        ) -> MessageStream<ServerReflectionResponse>;
    }

    impl ServerReflection for super::Reflection {
        async fn server_reflection_info(
            &self,
            requests: MessageStream<ServerReflectionRequest>,
        ) -> MessageStream<ServerReflectionResponse> {
            self.answer(requests)
        }
    }
}

pub(crate) mod v1alpha {
    use super::{ServerReflectionRequest, ServerReflectionResponse};
    use crate::core::messages::MessageStream;

    /// `grpc.reflection.v1alpha.ServerReflection`, what older clients (and grpcurl, first)
    /// ask.
    #[crate::contract(package = "grpc.reflection.v1alpha")]
    pub(crate) trait ServerReflection {
        /// Answers each request in order.
        async fn server_reflection_info(
            &self,
            requests: MessageStream<ServerReflectionRequest>,
        ) -> MessageStream<ServerReflectionResponse>;
    }

    impl ServerReflection for super::Reflection {
        async fn server_reflection_info(
            &self,
            requests: MessageStream<ServerReflectionRequest>,
        ) -> MessageStream<ServerReflectionResponse> {
            self.answer(requests)
        }
    }
}

/// gRPC's `NOT_FOUND`.
const NOT_FOUND: i32 = 5;
/// gRPC's `INVALID_ARGUMENT`.
const INVALID_ARGUMENT: i32 = 3;

/// The reflection service of one host.
#[derive(Debug)]
pub(crate) struct Reflection {
    files: Arc<Files>,
}

impl Reflection {
    pub(crate) fn new(files: Arc<Files>) -> Self {
        Reflection { files }
    }

    fn answer(
        &self,
        mut requests: MessageStream<ServerReflectionRequest>,
    ) -> MessageStream<ServerReflectionResponse> {
        if !self.files.described() {
            // Switched off at run time (`Host::set_descriptions`): refused as
            // `GET /openapi.json` is.
            let (tx, refused) = MessageStream::channel(1);
            tokio::spawn(tx.abort(crate::dispatch::descriptions_off()));
            return refused;
        }
        let (tx, replies) = MessageStream::channel(4);
        let files = self.files.clone();
        tokio::spawn(async move {
            while let Some(Ok(request)) = requests.next().await {
                let reply = files.built().answer(request);
                if tx.send(reply).await.is_err() {
                    return;
                }
            }
        });
        replies
    }
}

/// The host's services and files, described once on first use.
#[derive(Debug)]
pub(crate) struct Files {
    link: Link,
    built: OnceLock<Built>,
}

impl Files {
    pub(crate) fn new(link: Link) -> Self {
        Files {
            link,
            built: OnceLock::new(),
        }
    }

    /// Whether the host describes its contracts now (`Host::set_descriptions`).
    fn described(&self) -> bool {
        self.link.dispatcher().is_none_or(|d| d.descriptions_on())
    }

    fn built(&self) -> &Built {
        self.built.get_or_init(|| {
            let services: Vec<&'static ServiceDescriptor> = match self.link.dispatcher() {
                Some(d) => d.all_services().map(|(_, desc)| desc).collect(),
                None => Vec::new(),
            };
            Built::new(&services)
        })
    }
}

/// One file per package of the host's contracts (those protobuf can describe).
#[derive(Debug)]
struct Built {
    /// Every service's full name, sorted.
    services: Vec<String>,
    /// Each file: its name, bytes, and the full names of what it defines.
    files: Vec<(String, Vec<u8>, Vec<String>)>,
}

impl Built {
    fn new(services: &[&'static ServiceDescriptor]) -> Built {
        let mut by_package: BTreeMap<&str, Vec<_>> = BTreeMap::new();
        for desc in services {
            if let Ok(schema) = desc.proto_schema() {
                by_package.entry(desc.package).or_default().push(schema);
            }
        }
        let mut names: Vec<String> = services.iter().map(|d| d.grpc_name()).collect();
        names.sort();
        let files = by_package
            .into_iter()
            .map(|(package, schemas)| {
                let file = file::build(package, &schemas);
                let name = if package.is_empty() {
                    "keel.proto".to_string()
                } else {
                    format!("{}.proto", package.replace('.', "/"))
                };
                let mut symbols = Vec::new();
                let full = |n: &str| {
                    if package.is_empty() {
                        n.to_string()
                    } else {
                        format!("{package}.{n}")
                    }
                };
                for s in &file.services {
                    symbols.push(full(&s.name));
                    for m in &s.methods {
                        symbols.push(format!("{}.{}", full(&s.name), m.name));
                    }
                }
                fn messages(prefix: &str, ms: &[MessageDef], out: &mut Vec<String>) {
                    for m in ms {
                        let name = format!("{prefix}.{}", m.name);
                        messages(&name, &m.nested, out);
                        out.push(name);
                    }
                }
                let prefix = full("");
                let prefix = prefix.trim_end_matches('.');
                let mut nested = Vec::new();
                messages(prefix, &file.messages, &mut nested);
                symbols.extend(
                    nested
                        .into_iter()
                        .map(|n| n.trim_start_matches('.').to_string()),
                );
                symbols.extend(file.enums.iter().map(|e| full(&e.name)));
                let bytes = descriptor::encode(&file, &name);
                (name, bytes, symbols)
            })
            .collect();
        Built {
            services: names,
            files,
        }
    }

    fn answer(&self, request: ServerReflectionRequest) -> ServerReflectionResponse {
        let mut reply = ServerReflectionResponse {
            valid_host: request.host.clone(),
            ..Default::default()
        };
        let file = |name: &str| -> Option<FileDescriptorResponse> {
            self.files
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, bytes, _)| FileDescriptorResponse {
                    file_descriptor_proto: vec![Blob(bytes.clone())],
                })
        };
        let containing = |symbol: &str| -> Option<FileDescriptorResponse> {
            self.files
                .iter()
                .find(|(_, _, symbols)| symbols.iter().any(|s| s == symbol))
                .map(|(_, bytes, _)| FileDescriptorResponse {
                    file_descriptor_proto: vec![Blob(bytes.clone())],
                })
        };
        let error = |code: i32, message: String| ErrorResponse {
            error_code: code,
            error_message: message,
        };
        if request.list_services.is_some() {
            reply.list_services_response = Some(ListServiceResponse {
                service: self
                    .services
                    .iter()
                    .map(|name| ServiceResponse { name: name.clone() })
                    .collect(),
            });
        } else if let Some(name) = &request.file_by_filename {
            match file(name) {
                Some(f) => reply.file_descriptor_response = Some(f),
                None => {
                    reply.error_response =
                        Some(error(NOT_FOUND, format!("no file `{name}` on this host")))
                }
            }
        } else if let Some(symbol) = &request.file_containing_symbol {
            match containing(symbol) {
                Some(f) => reply.file_descriptor_response = Some(f),
                None => {
                    reply.error_response = Some(error(
                        NOT_FOUND,
                        format!("no symbol `{symbol}` on this host"),
                    ))
                }
            }
        } else if let Some(ext) = &request.file_containing_extension {
            reply.error_response = Some(error(
                NOT_FOUND,
                format!(
                    "no extension {} of `{}`: keel's files are proto3, which has none",
                    ext.extension_number, ext.containing_type
                ),
            ));
        } else if let Some(ty) = &request.all_extension_numbers_of_type {
            if containing(ty).is_some() {
                reply.all_extension_numbers_response = Some(ExtensionNumberResponse {
                    base_type_name: ty.clone(),
                    extension_number: Vec::new(),
                });
            } else {
                reply.error_response =
                    Some(error(NOT_FOUND, format!("no type `{ty}` on this host")));
            }
        } else {
            reply.error_response = Some(error(
                INVALID_ARGUMENT,
                "the request asks for nothing (set one of its message_request fields)".into(),
            ));
        }
        reply.original_request = Some(request);
        reply
    }
}
