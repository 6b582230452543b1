//! A [`FileDef`] as a `google.protobuf.FileDescriptorProto`: what gRPC server reflection
//! serves, so grpcurl, grpcui and Postman can list and call a host's contracts without a
//! `.proto` file. Encoded with keel's own codec, from structs whose fields are numbered as
//! `descriptor.proto` numbers them (a field that `descriptor.proto` skips is an `Option` that
//! is never set: absent on the wire).

use serde::Serialize;

use super::file::{FieldDef, FieldType, FileDef, Label, MessageDef};
use super::Layout;

/// `FileDescriptorProto` (fields 1 to 12).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct FileProto {
    name: String,
    package: Option<String>,
    dependency: Vec<String>,
    pub(crate) message_type: Vec<MessageProto>,
    enum_type: Vec<EnumProto>,
    pub(crate) service: Vec<ServiceProto>,
    extension: Option<u32>,
    options: Option<u32>,
    source_code_info: Option<u32>,
    public_dependency: Option<u32>,
    weak_dependency: Option<u32>,
    syntax: String,
}

/// `DescriptorProto` (fields 1 to 8).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct MessageProto {
    name: String,
    field: Vec<FieldProto>,
    nested_type: Vec<MessageProto>,
    enum_type: Vec<EnumProto>,
    extension_range: Option<u32>,
    extension: Option<u32>,
    options: Option<MessageOptions>,
    oneof_decl: Vec<OneofProto>,
}

/// `MessageOptions` up to `map_entry` (7).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct MessageOptions {
    message_set_wire_format: Option<bool>,
    no_standard_descriptor_accessor: Option<bool>,
    deprecated: Option<bool>,
    reserved_4: Option<bool>,
    reserved_5: Option<bool>,
    reserved_6: Option<bool>,
    map_entry: Option<bool>,
}

/// `OneofDescriptorProto` (field 1).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct OneofProto {
    name: String,
}

/// `FieldDescriptorProto` (fields 1 to 17).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct FieldProto {
    name: String,
    extendee: Option<String>,
    number: i32,
    label: i32,
    r#type: i32,
    type_name: Option<String>,
    default_value: Option<String>,
    options: Option<u32>,
    oneof_index: Option<i32>,
    json_name: Option<String>,
    reserved_11: Option<u32>,
    reserved_12: Option<u32>,
    reserved_13: Option<u32>,
    reserved_14: Option<u32>,
    reserved_15: Option<u32>,
    reserved_16: Option<u32>,
    proto3_optional: Option<bool>,
}

/// `EnumDescriptorProto` (fields 1 and 2).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct EnumProto {
    name: String,
    value: Vec<EnumValueProto>,
}

/// `EnumValueDescriptorProto` (fields 1 and 2).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct EnumValueProto {
    name: String,
    number: i32,
}

/// `ServiceDescriptorProto` (fields 1 and 2).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct ServiceProto {
    name: String,
    method: Vec<MethodProto>,
}

/// `MethodDescriptorProto` (fields 1 to 6).
#[derive(Serialize)]
#[cfg_attr(test, derive(serde::Deserialize, Debug, PartialEq))]
pub(crate) struct MethodProto {
    name: String,
    input_type: String,
    output_type: String,
    options: Option<u32>,
    client_streaming: Option<bool>,
    server_streaming: Option<bool>,
}

/// `FileDescriptorSet`, what `protoc --descriptor_set_out` writes (tests compare with it).
#[cfg(test)]
#[derive(serde::Deserialize, Debug)]
pub(crate) struct FileSet {
    pub(crate) file: Vec<FileProto>,
}

/// The bytes of a `FileDescriptorProto`, decoded (for tests).
#[cfg(test)]
pub(crate) fn decode(bytes: &[u8]) -> FileProto {
    super::decode::decode(&Layout::default(), bytes).expect("a FileDescriptorProto")
}

const LABEL_OPTIONAL: i32 = 1;
const LABEL_REPEATED: i32 = 3;
const TYPE_MESSAGE: i32 = 11;
const TYPE_ENUM: i32 = 14;

/// `file`, named `name`, as the bytes of a `FileDescriptorProto`.
pub(crate) fn encode(file: &FileDef, name: &str) -> Vec<u8> {
    let proto = FileProto {
        name: name.to_string(),
        package: (!file.package.is_empty()).then(|| file.package.clone()),
        dependency: Vec::new(),
        message_type: file.messages.iter().map(message).collect(),
        enum_type: file
            .enums
            .iter()
            .map(|e| EnumProto {
                name: e.name.clone(),
                value: e
                    .values
                    .iter()
                    .map(|(name, number)| EnumValueProto {
                        name: name.clone(),
                        number: *number,
                    })
                    .collect(),
            })
            .collect(),
        service: file
            .services
            .iter()
            .map(|s| ServiceProto {
                name: s.name.clone(),
                method: s
                    .methods
                    .iter()
                    .map(|m| MethodProto {
                        name: m.name.clone(),
                        input_type: format!(".{}", m.input),
                        output_type: format!(".{}", m.output),
                        options: None,
                        client_streaming: m.client_streaming.then_some(true),
                        server_streaming: m.server_streaming.then_some(true),
                    })
                    .collect(),
            })
            .collect(),
        extension: None,
        options: None,
        source_code_info: None,
        public_dependency: None,
        weak_dependency: None,
        syntax: "proto3".to_string(),
    };
    super::encode::encode(&Layout::default(), &proto).expect("descriptors always encode")
}

fn message(m: &MessageDef) -> MessageProto {
    let mut oneof_decl: Vec<OneofProto> = m
        .oneofs
        .iter()
        .map(|name| OneofProto { name: name.clone() })
        .collect();
    let mut field = Vec::new();
    for f in &m.fields {
        // A proto3 `optional` field is the one member of a oneof of its own (a "synthetic"
        // oneof, `_name`), after the real ones, as protoc writes it.
        let synthetic = (f.label == Label::Optional).then(|| {
            oneof_decl.push(OneofProto {
                name: format!("_{}", f.name),
            });
            oneof_decl.len() as i32 - 1
        });
        field.push(field_proto(f, synthetic));
    }
    let map_entry = m.map_entry.then_some(MessageOptions {
        message_set_wire_format: None,
        no_standard_descriptor_accessor: None,
        deprecated: None,
        reserved_4: None,
        reserved_5: None,
        reserved_6: None,
        map_entry: Some(true),
    });
    MessageProto {
        name: m.name.clone(),
        field,
        nested_type: m.nested.iter().map(message).collect(),
        enum_type: Vec::new(),
        extension_range: None,
        extension: None,
        options: map_entry,
        oneof_decl,
    }
}

fn field_proto(f: &FieldDef, synthetic_oneof: Option<i32>) -> FieldProto {
    let (r#type, type_name) = match &f.ty {
        FieldType::Scalar(_, code) => (*code, None),
        FieldType::Message(full) => (TYPE_MESSAGE, Some(format!(".{full}"))),
        FieldType::Enum(full) => (TYPE_ENUM, Some(format!(".{full}"))),
        FieldType::Map { entry, .. } => (TYPE_MESSAGE, Some(format!(".{entry}"))),
    };
    let label = match (&f.label, &f.ty) {
        (Label::Repeated, _) | (_, FieldType::Map { .. }) => LABEL_REPEATED,
        _ => LABEL_OPTIONAL,
    };
    FieldProto {
        name: f.name.clone(),
        extendee: None,
        number: f.number as i32,
        label,
        r#type,
        type_name,
        default_value: None,
        options: None,
        oneof_index: f.oneof.map(|i| i as i32).or(synthetic_oneof),
        json_name: Some(json_name(&f.name)),
        reserved_11: None,
        reserved_12: None,
        reserved_13: None,
        reserved_14: None,
        reserved_15: None,
        reserved_16: None,
        proto3_optional: synthetic_oneof.map(|_| true),
    }
}

/// protoc's JSON name of a field: `lower_camel` (`point_count` → `pointCount`).
fn json_name(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
