//! A contract's `.proto` file: the protobuf description gRPC tools and code generators read,
//! derived from the contract's serde types (GRPC.md, "Types", says how each type maps).
//!
//! ```
//! #[keel::contract(package = "calculator.v1")]
//! pub trait Calculator {
//!     fn add(&self, a: f64, b: f64) -> f64;
//! }
//!
//! let proto = keel::proto::file(CalculatorClient::descriptor()).unwrap();
//! assert!(proto.contains("package calculator.v1;"));
//! assert!(proto.contains("rpc Add(AddRequest) returns (AddResponse);"));
//! assert!(proto.contains("double a = 1;"));
//! ```

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};

use crate::core::proto::model::{ContainerFormat, Format, Named, Registry, VariantFormat};
use crate::core::proto::schema::{is_c_like, resolve, Body, OpSchema, ServiceSchema};
use crate::core::service::ServiceDescriptor;

/// A contract whose types protobuf cannot describe, and why (the type and field it means).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SchemaError {}

/// The `.proto` file (proto3) of the contract `descriptor` describes: its gRPC service, one
/// request and one response message per operation, and a message or enum for each type they
/// use. Operations gRPC cannot call (byte streams) are listed in a comment that says why.
pub fn file(descriptor: &'static ServiceDescriptor) -> Result<String, SchemaError> {
    let schema = descriptor.proto_schema().map_err(|e| SchemaError {
        message: e.to_string(),
    })?;
    Ok(Writer::new(schema).write())
}

/// Whether `name` is the serde name of an operation's arguments struct (generated, hidden).
fn is_args_struct(name: &str) -> bool {
    name.starts_with("__") && name.ends_with("_args")
}

struct Writer<'a> {
    schema: &'a ServiceSchema,
    reg: &'a Registry,
    out: String,
}

impl<'a> Writer<'a> {
    fn new(schema: &'a ServiceSchema) -> Self {
        Writer {
            schema,
            reg: &schema.registry,
            out: String::new(),
        }
    }

    fn write(mut self) -> String {
        let s = self.schema;
        let _ = writeln!(
            self.out,
            "// The contract `{}`, described by keel from its Rust types (keel::proto::file).\n\
             // Regenerate it rather than editing it: it changes when the contract does.\n\
             syntax = \"proto3\";\n",
            s.service
        );
        if !s.package.is_empty() {
            let _ = writeln!(self.out, "package {};\n", s.package);
        }
        let _ = writeln!(self.out, "service {} {{", s.service);
        for op in &s.ops {
            self.rpc(op);
        }
        self.out.push_str("}\n");
        for op in &s.ops {
            if op.unavailable.is_some() {
                continue;
            }
            self.body_message(&op.request, &format!("{}Request", op.method), true);
            self.body_message(&op.response, &format!("{}Response", op.method), false);
            if let Some(fault) = &op.fault {
                self.body_message(fault, &format!("{}Fault", op.method), false);
            }
        }
        let names: BTreeSet<&String> = s.used.iter().filter(|n| !is_args_struct(n)).collect();
        for name in names {
            self.container(name, &self.reg[name]);
        }
        self.out
    }

    /// The name a body's message has in the file.
    fn body_name(&self, body: &Body, wrapper: &str) -> String {
        match body {
            Body::Message(name) if !is_args_struct(name) => proto_ident(name),
            _ => wrapper.to_string(),
        }
    }

    fn rpc(&mut self, op: &OpSchema) {
        if let Some(why) = &op.unavailable {
            let _ = writeln!(self.out, "  // {}: not callable over gRPC: {why}.", op.name);
            return;
        }
        if let Some(fault) = &op.fault {
            let name = self.body_name(fault, &format!("{}Fault", op.method));
            let _ = writeln!(
                self.out,
                "  // Fails with a {name} in grpc-status-details-bin (a google.rpc.Status)."
            );
        }
        let request = self.body_name(&op.request, &format!("{}Request", op.method));
        let response = self.body_name(&op.response, &format!("{}Response", op.method));
        let _ = writeln!(
            self.out,
            "  rpc {}({}{request}) returns ({}{response});",
            op.method,
            if op.client_streaming { "stream " } else { "" },
            if op.server_streaming { "stream " } else { "" },
        );
    }

    /// The message of a body that is not a contract struct: the arguments (`args`), a
    /// wrapper, or the empty message.
    fn body_message(&mut self, body: &Body, name: &str, args: bool) {
        match body {
            Body::Message(n) if args && is_args_struct(n) => {
                if let Some(ContainerFormat::Struct(fields)) = self.reg.get(n) {
                    let fields = fields.clone();
                    self.message(name, &fields, "");
                }
            }
            Body::Message(_) => {}
            Body::Empty => {
                let _ = writeln!(self.out, "\nmessage {name} {{}}");
            }
            Body::Wrapped(format) => {
                let field = self.field("value", format, 1, false);
                let _ = writeln!(self.out, "\nmessage {name} {{\n  {field}\n}}");
            }
        }
    }

    fn message(&mut self, name: &str, fields: &[Named<Format>], indent: &str) {
        let _ = writeln!(self.out, "\n{indent}message {name} {{");
        for (i, f) in fields.iter().enumerate() {
            let line = self.field(&field_ident(&f.name), &f.value, i + 1, !indent.is_empty());
            let _ = writeln!(self.out, "{indent}  {line}");
        }
        let _ = writeln!(self.out, "{indent}}}");
    }

    fn container(&mut self, name: &str, container: &ContainerFormat) {
        let ident = proto_ident(name);
        match container {
            ContainerFormat::UnitStruct => {
                let _ = writeln!(self.out, "\nmessage {ident} {{}}");
            }
            // Transparent: where it is used, it is what it holds.
            ContainerFormat::NewTypeStruct(_) => {}
            ContainerFormat::Struct(fields) => self.message(&ident, fields, ""),
            ContainerFormat::TupleStruct(fields) => {
                let fields = numbered(fields);
                self.message(&ident, &fields, "");
            }
            ContainerFormat::Enum(variants) if is_c_like(container) => {
                let prefix = screaming(name);
                let _ = writeln!(self.out, "\nenum {ident} {{");
                for (i, v) in variants {
                    let _ = writeln!(self.out, "  {prefix}_{} = {i};", screaming(&v.name));
                }
                self.out.push_str("}\n");
            }
            ContainerFormat::Enum(variants) => {
                let _ = writeln!(self.out, "\nmessage {ident} {{");
                let oneof = if variants.values().any(|v| snake(&v.name) == "kind") {
                    "kind_"
                } else {
                    "kind"
                };
                let _ = writeln!(self.out, "  oneof {oneof} {{");
                let mut nested = Vec::new();
                for (i, v) in variants {
                    let member = snake(&v.name);
                    let variant = proto_ident(&v.name);
                    let ty = match &v.value {
                        VariantFormat::NewType(f) => self.type_name(f, true),
                        VariantFormat::Unit => {
                            nested.push((variant.clone(), Vec::new()));
                            format!("{ident}.{variant}")
                        }
                        VariantFormat::Tuple(fs) => {
                            nested.push((variant.clone(), numbered(fs)));
                            format!("{ident}.{variant}")
                        }
                        VariantFormat::Struct(fs) => {
                            nested.push((variant.clone(), fs.clone()));
                            format!("{ident}.{variant}")
                        }
                    };
                    let _ = writeln!(self.out, "    {ty} {member} = {};", i + 1);
                }
                self.out.push_str("  }\n");
                for (variant, fields) in nested {
                    if fields.is_empty() {
                        let _ = writeln!(self.out, "\n  message {variant} {{}}");
                    } else {
                        self.message(&variant, &fields, "  ");
                    }
                }
                self.out.push_str("}\n");
            }
        }
    }

    /// One field's line: `[label] type name = number;`. `qualified`: name types by their full
    /// name (inside an enum's message, where a variant's message could hide a type).
    fn field(&self, name: &str, format: &Format, number: usize, qualified: bool) -> String {
        match resolve(format, self.reg) {
            Format::Option(inner) => match resolve(inner, self.reg) {
                inner @ (Format::Seq(_) | Format::Map { .. }) => {
                    self.field(name, inner, number, qualified)
                }
                inner if self.is_message(inner) => {
                    format!("{} {name} = {number};", self.type_name(inner, qualified))
                }
                inner => format!(
                    "optional {} {name} = {number};",
                    self.type_name(inner, qualified)
                ),
            },
            Format::Seq(inner) => format!(
                "repeated {} {name} = {number};",
                self.type_name(inner, qualified)
            ),
            Format::Map { key, value } => format!(
                "map<{}, {}> {name} = {number};",
                self.type_name(key, qualified),
                self.type_name(value, qualified)
            ),
            other => format!("{} {name} = {number};", self.type_name(other, qualified)),
        }
    }

    fn is_message(&self, format: &Format) -> bool {
        match format {
            Format::TypeName(n) => !matches!(self.reg.get(n), Some(c) if is_c_like(c)),
            _ => false,
        }
    }

    fn type_name(&self, format: &Format, qualified: bool) -> String {
        let scalar = match resolve(format, self.reg) {
            Format::Bool => "bool",
            Format::U8 | Format::U16 | Format::U32 => "uint32",
            Format::U64 => "uint64",
            Format::I8 | Format::I16 | Format::I32 => "int32",
            Format::I64 => "int64",
            Format::F32 => "float",
            Format::F64 => "double",
            Format::Char | Format::Str => "string",
            Format::Bytes => "bytes",
            Format::TypeName(n) => {
                let ident = proto_ident(n);
                return match (qualified, self.schema.package) {
                    (false, _) => ident,
                    (true, "") => format!(".{ident}"),
                    (true, package) => format!(".{package}.{ident}"),
                };
            }
            // Refused by the schema's checks before a file is written.
            _ => "bytes",
        };
        scalar.to_string()
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

/// `name` with what protobuf identifiers cannot hold replaced by `_`, starting with a letter.
fn proto_ident(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert(0, 'T');
    }
    out
}

/// A field's name: as serde names it, made a protobuf identifier.
fn field_ident(name: &str) -> String {
    let ident = proto_ident(name);
    if name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        ident
    } else {
        format!("f{}", &ident[1..])
    }
}

/// `PascalCase` → `snake_case`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert(0, 'v');
    }
    out
}

/// `PascalCase` → `SCREAMING_SNAKE_CASE` (protobuf's enum values).
fn screaming(name: &str) -> String {
    snake(name).trim_start_matches('_').to_ascii_uppercase()
}
