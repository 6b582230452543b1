//! One `.proto` file's contents, decided once from contracts' schemas: its services, messages
//! and enums with every name, number and label. The `.proto` text (`keel::proto`) and the
//! `FileDescriptorProto` gRPC reflection serves (`descriptor.rs`) are two renderings of it.

use std::collections::BTreeSet;

use super::model::{ContainerFormat, Format, Named, Registry, VariantFormat};
use super::names::{field_ident, is_args_struct, pascal_case, proto_ident, screaming, snake};
use super::schema::{is_c_like, resolve, Body, OpSchema, ServiceSchema};
use super::Layout;

/// A file: one package's services and the types they use.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FileDef {
    /// The protobuf package (may be empty).
    pub(crate) package: String,
    pub(crate) services: Vec<ServiceDef>,
    pub(crate) messages: Vec<MessageDef>,
    pub(crate) enums: Vec<EnumDef>,
}

/// A gRPC service.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServiceDef {
    pub(crate) name: String,
    pub(crate) methods: Vec<MethodDef>,
    /// Operations gRPC cannot call, each with the reason.
    pub(crate) left_out: Vec<(String, String)>,
}

/// An RPC.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MethodDef {
    pub(crate) name: String,
    /// The request message's full name (`package.Name`).
    pub(crate) input: String,
    /// The response message's full name.
    pub(crate) output: String,
    pub(crate) client_streaming: bool,
    pub(crate) server_streaming: bool,
    /// The typed fault's message, full name.
    pub(crate) fault: Option<String>,
}

/// A message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessageDef {
    pub(crate) name: String,
    pub(crate) fields: Vec<FieldDef>,
    /// Its oneofs' names (a data-carrying enum's one `kind`).
    pub(crate) oneofs: Vec<String>,
    pub(crate) nested: Vec<MessageDef>,
    /// A map field's entry message (`map<K, V>` in text).
    pub(crate) map_entry: bool,
}

/// How a field repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label {
    /// Present or at its default (proto3's implicit presence).
    Singular,
    /// `optional`: present or absent (proto3's explicit presence).
    Optional,
    /// `repeated`.
    Repeated,
}

/// A field's type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FieldType {
    /// A scalar: its name in a `.proto` and its `FieldDescriptorProto.Type`.
    Scalar(&'static str, i32),
    /// A message, by full name.
    Message(String),
    /// An enum, by full name.
    Enum(String),
    /// `map<key, value>`: in descriptors a repeated entry message, `entry` its full name.
    Map {
        key: Box<FieldType>,
        value: Box<FieldType>,
        entry: String,
    },
}

/// A field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldDef {
    pub(crate) name: String,
    pub(crate) number: u32,
    pub(crate) label: Label,
    pub(crate) ty: FieldType,
    /// The oneof it is a member of (an index into the message's `oneofs`).
    pub(crate) oneof: Option<usize>,
}

/// An enum.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EnumDef {
    pub(crate) name: String,
    pub(crate) values: Vec<(String, i32)>,
}

/// The file of `schemas` (contracts in one package, sharing its types by name).
pub(crate) fn build(package: &str, schemas: &[&ServiceSchema]) -> FileDef {
    let mut b = Builder {
        package,
        reg: &schemas[0].registry,
        layout: &schemas[0].layout,
        file: FileDef {
            package: package.to_string(),
            services: Vec::new(),
            messages: Vec::new(),
            enums: Vec::new(),
        },
    };
    let mut types = BTreeSet::new();
    for schema in schemas {
        b.reg = &schema.registry;
        b.layout = &schema.layout;
        let mut service = ServiceDef {
            name: schema.service.to_string(),
            methods: Vec::new(),
            left_out: Vec::new(),
        };
        for op in &schema.ops {
            if let Some(why) = &op.unavailable {
                service.left_out.push((op.name.to_string(), why.clone()));
                continue;
            }
            service.methods.push(b.method(op));
        }
        b.file.services.push(service);
        for name in schema.used.iter().filter(|n| !is_args_struct(n)) {
            if types.insert(name.clone()) {
                b.container(name, &schema.registry[name]);
            }
        }
    }
    b.file
}

struct Builder<'a> {
    package: &'a str,
    reg: &'a Registry,
    layout: &'a Layout,
    file: FileDef,
}

impl Builder<'_> {
    fn full(&self, name: &str) -> String {
        if self.package.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.package)
        }
    }

    /// The method of `op`, adding the messages made for it (arguments, wrappers).
    fn method(&mut self, op: &OpSchema) -> MethodDef {
        let input = self.body(&op.request, &format!("{}Request", op.method));
        let output = self.body(&op.response, &format!("{}Response", op.method));
        let fault = op
            .fault
            .as_ref()
            .map(|f| self.body(f, &format!("{}Fault", op.method)));
        MethodDef {
            name: op.method.clone(),
            input,
            output,
            client_streaming: op.client_streaming,
            server_streaming: op.server_streaming,
            fault,
        }
    }

    /// The full name of a body's message, adding it when it is made for the body (the
    /// arguments as `name`, a wrapper, the empty message).
    fn body(&mut self, body: &Body, name: &str) -> String {
        let (fields, pinned) = match body {
            Body::Message(n) if !is_args_struct(n) => return self.full(&proto_ident(n)),
            Body::Message(n) => match self.reg.get(n) {
                Some(ContainerFormat::Struct(fields)) => (fields.clone(), self.layout.pinned(n)),
                _ => (Vec::new(), None),
            },
            Body::Empty => (Vec::new(), None),
            Body::Wrapped(format) => (
                vec![Named {
                    name: "value".to_string(),
                    value: format.clone(),
                }],
                None,
            ),
        };
        let message = self.message(name, &fields, pinned, &self.full(name));
        self.file.messages.push(message);
        self.full(name)
    }

    /// A message of `fields`, numbered from 1 or as `pinned` says; `full` is its own full
    /// name (for its maps' entries).
    fn message(
        &self,
        name: &str,
        fields: &[Named<Format>],
        pinned: Option<&[(String, u32)]>,
        full: &str,
    ) -> MessageDef {
        let mut message = MessageDef {
            name: name.to_string(),
            fields: Vec::new(),
            oneofs: Vec::new(),
            nested: Vec::new(),
            map_entry: false,
        };
        for (i, f) in fields.iter().enumerate() {
            self.field(
                &mut message,
                &field_ident(&f.name),
                &f.value,
                pinned
                    .and_then(|p| super::pinned_number(p, &f.name))
                    .unwrap_or(i as u32 + 1),
                full,
            );
        }
        message
    }

    /// Adds the field `name` of type `format` to `message` (whose full name is `full`).
    fn field(
        &self,
        message: &mut MessageDef,
        name: &str,
        format: &Format,
        number: u32,
        full: &str,
    ) {
        let (label, inner) = match resolve(format, self.reg) {
            Format::Option(inner) => match resolve(inner, self.reg) {
                Format::Seq(inner) => (Label::Repeated, &**inner),
                inner @ Format::Map { .. } => (Label::Singular, inner),
                inner if self.is_message(inner) => (Label::Singular, inner),
                inner => (Label::Optional, inner),
            },
            Format::Seq(inner) => (Label::Repeated, &**inner),
            other => (Label::Singular, other),
        };
        let ty = match resolve(inner, self.reg) {
            Format::Map { key, value } => {
                let entry_name = format!("{}Entry", pascal_case(name));
                let entry_full = format!("{full}.{entry_name}");
                let mut entry = MessageDef {
                    name: entry_name,
                    fields: Vec::new(),
                    oneofs: Vec::new(),
                    nested: Vec::new(),
                    map_entry: true,
                };
                for (n, (field, f)) in [("key", key), ("value", value)].into_iter().enumerate() {
                    entry.fields.push(FieldDef {
                        name: field.to_string(),
                        number: n as u32 + 1,
                        label: Label::Singular,
                        ty: self.type_of(f),
                        oneof: None,
                    });
                }
                message.nested.push(entry);
                FieldType::Map {
                    key: Box::new(self.type_of(key)),
                    value: Box::new(self.type_of(value)),
                    entry: entry_full,
                }
            }
            other => self.type_of(other),
        };
        message.fields.push(FieldDef {
            name: name.to_string(),
            number,
            label,
            ty,
            oneof: None,
        });
    }

    fn is_message(&self, format: &Format) -> bool {
        match format {
            Format::TypeName(n) => !matches!(self.reg.get(n), Some(c) if is_c_like(c)),
            _ => false,
        }
    }

    /// The type of a value of `format` (not repeated, optional or a map: the schema's checks
    /// refused those where a single value must be).
    fn type_of(&self, format: &Format) -> FieldType {
        let (name, code) = match resolve(format, self.reg) {
            Format::F64 => ("double", 1),
            Format::F32 => ("float", 2),
            Format::I64 => ("int64", 3),
            Format::U64 => ("uint64", 4),
            Format::I8 | Format::I16 | Format::I32 => ("int32", 5),
            Format::Bool => ("bool", 8),
            Format::Char | Format::Str => ("string", 9),
            Format::Bytes => ("bytes", 12),
            Format::U8 | Format::U16 | Format::U32 => ("uint32", 13),
            Format::TypeName(n) => {
                let full = self.full(&proto_ident(n));
                return match self.reg.get(n) {
                    Some(c) if is_c_like(c) => FieldType::Enum(full),
                    _ => FieldType::Message(full),
                };
            }
            _ => ("bytes", 12),
        };
        FieldType::Scalar(name, code)
    }

    /// Adds the message or enum of the contract type `name`.
    fn container(&mut self, name: &str, container: &ContainerFormat) {
        let ident = proto_ident(name);
        let full = self.full(&ident);
        match container {
            // Transparent: where it is used, it is what it holds.
            ContainerFormat::NewTypeStruct(_) => {}
            ContainerFormat::UnitStruct => {
                let m = self.message(&ident, &[], None, &full);
                self.file.messages.push(m);
            }
            ContainerFormat::Struct(fields) => {
                let m = self.message(&ident, fields, self.layout.pinned(name), &full);
                self.file.messages.push(m);
            }
            ContainerFormat::TupleStruct(fields) => {
                let m = self.message(&ident, &numbered(fields), None, &full);
                self.file.messages.push(m);
            }
            ContainerFormat::Enum(variants) if is_c_like(container) => {
                let prefix = screaming(name);
                self.file.enums.push(EnumDef {
                    name: ident,
                    values: variants
                        .iter()
                        .map(|(i, v)| (format!("{prefix}_{}", screaming(&v.name)), *i as i32))
                        .collect(),
                });
            }
            ContainerFormat::Enum(variants) => {
                let oneof = if variants.values().any(|v| snake(&v.name) == "kind") {
                    "kind_"
                } else {
                    "kind"
                };
                let mut message = MessageDef {
                    name: ident.clone(),
                    fields: Vec::new(),
                    oneofs: vec![oneof.to_string()],
                    nested: Vec::new(),
                    map_entry: false,
                };
                for (i, v) in variants {
                    let variant = proto_ident(&v.name);
                    let nested_full = format!("{full}.{variant}");
                    let ty = match &v.value {
                        VariantFormat::NewType(f) => self.type_of(f),
                        VariantFormat::Unit => {
                            message
                                .nested
                                .push(self.message(&variant, &[], None, &nested_full));
                            FieldType::Message(nested_full)
                        }
                        VariantFormat::Tuple(fs) => {
                            let m = self.message(&variant, &numbered(fs), None, &nested_full);
                            message.nested.push(m);
                            FieldType::Message(nested_full)
                        }
                        VariantFormat::Struct(fs) => {
                            message
                                .nested
                                .push(self.message(&variant, fs, None, &nested_full));
                            FieldType::Message(nested_full)
                        }
                    };
                    message.fields.push(FieldDef {
                        name: snake(&v.name),
                        number: i + 1,
                        label: Label::Singular,
                        ty,
                        oneof: Some(0),
                    });
                }
                self.file.messages.push(message);
            }
        }
    }
}

/// A tuple's elements as fields `field_1`, `field_2`, ...
fn numbered(fields: &[Format]) -> Vec<Named<Format>> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| Named {
            name: format!("field_{}", i + 1),
            value: f.clone(),
        })
        .collect()
}
