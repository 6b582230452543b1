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
//!
//! Fields are numbered from 1 in declaration order. A contract that reorders a struct's fields
//! or an operation's parameters keeps their old numbers by pinning them, naming each message as
//! its `.proto` does (`{Method}Request` for an operation's parameters). A pinned message pins
//! every field; numbers that do not fit the contract's types stop a host at start and make this
//! function fail, with the reason:
//!
//! ```
//! #[derive(serde::Serialize, serde::Deserialize)]
//! pub struct Point {
//!     pub label: String, // was third
//!     pub x: i32,
//!     pub y: i32,
//! }
//!
//! #[keel::contract(
//!     package = "shapes.v1",
//!     proto_numbers(Point(x = 1, y = 2, label = 3), ShiftRequest(at = 1, by = 2))
//! )]
//! pub trait Shapes {
//!     fn shift(&self, by: i32, at: Point) -> Point; // the parameters were (at, by)
//! }
//!
//! # fn main() {
//! let proto = keel::proto::file(ShapesClient::descriptor()).unwrap();
//! assert!(proto.contains("string label = 3;"));
//! assert!(proto.contains("Point at = 1;"));
//! # }
//! ```

use std::fmt::{self, Write as _};

use crate::core::proto::file::{self, FieldDef, FieldType, FileDef, Label, MessageDef};
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
/// use. Operations gRPC cannot call (byte streams, types protobuf has no field for) are listed
/// in a comment that says why.
pub fn file(descriptor: &'static ServiceDescriptor) -> Result<String, SchemaError> {
    let schema = descriptor.proto_schema().map_err(|e| SchemaError {
        message: e.to_string(),
    })?;
    let file = file::build(descriptor.package, &[schema]);
    Ok(text(&file))
}

/// The `.proto` text of `file`.
fn text(file: &FileDef) -> String {
    let mut out = String::new();
    let services: Vec<&str> = file.services.iter().map(|s| s.name.as_str()).collect();
    let _ = writeln!(
        out,
        "// The contract `{}`, described by keel from its Rust types (keel::proto::file).\n\
         // Regenerate it rather than editing it: it changes when the contract does.\n\
         syntax = \"proto3\";\n",
        services.join("`, `")
    );
    if !file.package.is_empty() {
        let _ = writeln!(out, "package {};\n", file.package);
    }
    let short = |full: &str| -> String {
        full.strip_prefix(&format!("{}.", file.package))
            .filter(|_| !file.package.is_empty())
            .unwrap_or(full)
            .to_string()
    };
    for service in &file.services {
        let _ = writeln!(out, "service {} {{", service.name);
        for m in &service.methods {
            if let Some(fault) = &m.fault {
                let _ = writeln!(
                    out,
                    "  // Fails with a {} in grpc-status-details-bin (a google.rpc.Status).",
                    short(fault)
                );
            }
            let _ = writeln!(
                out,
                "  rpc {}({}{}) returns ({}{});",
                m.name,
                if m.client_streaming { "stream " } else { "" },
                short(&m.input),
                if m.server_streaming { "stream " } else { "" },
                short(&m.output),
            );
        }
        for (op, why) in &service.left_out {
            let _ = writeln!(out, "  // {op}: not callable over gRPC: {why}.");
        }
        out.push_str("}\n");
    }
    for m in &file.messages {
        message(&mut out, m, "", &short);
    }
    for e in &file.enums {
        let _ = writeln!(out, "\nenum {} {{", e.name);
        for (name, value) in &e.values {
            let _ = writeln!(out, "  {name} = {value};");
        }
        out.push_str("}\n");
    }
    out
}

/// A message's text; a nested one (`indent` not empty) names types by their full name, as a
/// variant's message could hide a type of the same name.
fn message(out: &mut String, m: &MessageDef, indent: &str, short: &dyn Fn(&str) -> String) {
    if m.fields.is_empty() && m.nested.is_empty() {
        let _ = writeln!(out, "\n{indent}message {} {{}}", m.name);
        return;
    }
    let _ = writeln!(out, "\n{indent}message {} {{", m.name);
    let qualified = !indent.is_empty() || !m.oneofs.is_empty();
    let name = |ty: &FieldType| type_name(ty, qualified, short);
    let (members, plain): (Vec<&FieldDef>, Vec<&FieldDef>) =
        m.fields.iter().partition(|f| f.oneof.is_some());
    for f in plain {
        let label = match f.label {
            Label::Singular => "",
            Label::Optional => "optional ",
            Label::Repeated if matches!(f.ty, FieldType::Map { .. }) => "",
            Label::Repeated => "repeated ",
        };
        let _ = writeln!(
            out,
            "{indent}  {label}{} {} = {};",
            name(&f.ty),
            f.name,
            f.number
        );
    }
    for (i, oneof) in m.oneofs.iter().enumerate() {
        let _ = writeln!(out, "{indent}  oneof {oneof} {{");
        for f in members.iter().filter(|f| f.oneof == Some(i)) {
            let _ = writeln!(
                out,
                "{indent}    {} {} = {};",
                name(&f.ty),
                f.name,
                f.number
            );
        }
        let _ = writeln!(out, "{indent}  }}");
    }
    let nested_indent = format!("{indent}  ");
    for n in m.nested.iter().filter(|n| !n.map_entry) {
        message(out, n, &nested_indent, short);
    }
    let _ = writeln!(out, "{indent}}}");
}

/// How a field's type is written: a scalar's name, `map<K, V>`, or a message's or enum's
/// name (its full name with a leading dot when `qualified`).
fn type_name(ty: &FieldType, qualified: bool, short: &dyn Fn(&str) -> String) -> String {
    match ty {
        FieldType::Scalar(name, _) => name.to_string(),
        FieldType::Message(full) | FieldType::Enum(full) if qualified => format!(".{full}"),
        FieldType::Message(full) | FieldType::Enum(full) => short(full),
        FieldType::Map { key, value, .. } => format!(
            "map<{}, {}>",
            type_name(key, qualified, short),
            type_name(value, qualified, short)
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use crate::core::proto::descriptor::{self, FileSet};
    use crate::core::proto::file;
    use crate::core::proto::schema::{self, trace_of, Contract, OpShape, ProtoTypes};

    #[derive(Serialize, Deserialize)]
    struct Point {
        x: i32,
        y: Option<i64>,
    }

    #[derive(Serialize, Deserialize)]
    enum Color {
        Red,
        Green,
    }

    #[derive(Serialize, Deserialize)]
    enum Shape {
        Dot,
        Circle(f64),
        Rect { a: Point, b: Point },
        Pair(u32, String),
    }

    #[allow(dead_code)]
    #[derive(Serialize, Deserialize)]
    struct DrawArgs {
        shapes: Vec<Shape>,
        color: Color,
        labels: BTreeMap<String, Point>,
        weights: Vec<f32>,
        note: Option<String>,
    }

    #[derive(Serialize, Deserialize)]
    struct NoArgs {}

    fn op(name: &'static str, types: ProtoTypes, streams: (bool, bool)) -> OpShape {
        OpShape {
            name,
            method: crate::core::proto::names::pascal_case(name),
            one_way: false,
            stream_request: streams.0,
            stream_response: streams.1,
            message_request: streams.0,
            message_response: streams.1,
            proto: Some(types),
        }
    }

    /// A contract of every shape, built as the macro builds one, then as text and as a
    /// descriptor.
    fn sample() -> (String, Vec<u8>) {
        let contract = Contract {
            name: "Drawing",
            numbers: &[],
            operations: vec![
                op(
                    "draw",
                    ProtoTypes::new(
                        trace_of::<DrawArgs>,
                        Some(trace_of::<Vec<Point>>),
                        None,
                        Some(trace_of::<String>),
                    ),
                    (false, false),
                ),
                op(
                    "watch",
                    ProtoTypes::new(
                        trace_of::<NoArgs>,
                        Some(trace_of::<Shape>),
                        Some(trace_of::<Point>),
                        None,
                    ),
                    (true, true),
                ),
            ],
        };
        let schema = schema::trace(&contract).unwrap();
        let file = file::build("draw.v1", &[&schema]);
        (
            super::text(&file),
            descriptor::encode(&file, "drawing.proto"),
        )
    }

    #[test]
    fn reflection_descriptors_are_what_protoc_makes_of_the_proto_text() {
        let (text, ours) = sample();
        let dir = std::env::temp_dir().join(format!("keel-descriptor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("drawing.proto"), &text).unwrap();
        let protoc = protoc_bin_vendored::protoc_bin_path().unwrap();
        let out = std::process::Command::new(protoc)
            .arg(format!("--proto_path={}", dir.display()))
            .arg(format!(
                "--descriptor_set_out={}",
                dir.join("set.pb").display()
            ))
            .arg("drawing.proto")
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "protoc: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        let set = std::fs::read(dir.join("set.pb")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let set: FileSet = crate::core::proto::decode::decode(&Default::default(), &set).unwrap();
        let theirs = &set.file[0];
        assert!(
            theirs.message_type.len() >= 5 && theirs.service.len() == 1,
            "{theirs:?}"
        );
        assert_eq!(descriptor::decode(&ours), *theirs, "\n{text}");
    }
}
