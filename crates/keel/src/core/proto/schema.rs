//! A contract's types traced into protobuf: serde-reflection runs each operation's argument,
//! return, message and fault types through serde's `Deserialize` to learn their shapes (no
//! derive of keel's own is needed), and this module decides what each becomes in the
//! contract's `.proto` file, refusing what protobuf cannot say with an error that names the
//! type.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde_reflection::{Tracer, TracerConfig};

use super::model::{self, ContainerFormat, Format, Registry, VariantFormat};
use super::names::is_args_struct;
use super::numbers::{self, ProtoNumbers};
use super::Layout;

/// Traces one type: what generated code stores per operation.
pub type TraceFn = fn(&mut Tracer) -> serde_reflection::Result<serde_reflection::Format>;

/// [`TraceFn`] of `T`: one pass over `T`'s shape (see `trace_all` for the passes an enum
/// needs).
pub fn trace_of<T: DeserializeOwned>(
    tracer: &mut Tracer,
) -> serde_reflection::Result<serde_reflection::Format> {
    let samples = serde_reflection::Samples::new();
    tracer
        .trace_type_once::<T>(&samples)
        .map(|(format, _)| format)
}

/// Passes at most over a contract's types: an enum needs about one per variant.
const MAX_PASSES: usize = 1024;

fn tracer() -> Tracer {
    Tracer::new(TracerConfig::default().is_human_readable(true))
}

/// Traces every type of `roots` into one registry, returning each root's format.
///
/// serde-reflection learns an enum's variant names in one pass but their indices one per
/// pass, and continues an enum only when told it is still incomplete by name; its own loop
/// does that for an enum at the top, not for one inside a struct. So a first pass finds every
/// enum's name, then passes run until none is left incomplete.
pub(crate) fn trace_all(roots: &[TraceFn]) -> Result<(Vec<Format>, Registry), String> {
    let mut probe = tracer();
    for f in roots {
        f(&mut probe).map_err(|e| e.to_string())?;
    }
    let enums: Vec<String> = probe
        .registry_unchecked()
        .into_iter()
        .filter(|(_, c)| matches!(c, serde_reflection::ContainerFormat::Enum(_)))
        .map(|(name, _)| name)
        .collect();
    let mut tracer = tracer();
    let mut formats: Vec<serde_reflection::Format> = Vec::new();
    for _ in 0..MAX_PASSES {
        formats = roots
            .iter()
            .map(|f| f(&mut tracer).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let mut incomplete = false;
        for name in &enums {
            incomplete |= tracer.check_incomplete_enum(name).is_some();
        }
        if !incomplete {
            break;
        }
    }
    let registry = tracer.registry().map_err(|e| e.to_string())?;
    Ok((
        formats.iter().map(model::format).collect(),
        model::registry(&registry),
    ))
}

/// The functions that trace an operation's types (what `#[keel::contract]` generates). Not a
/// public API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ProtoTypes {
    /// The arguments struct.
    pub args: TraceFn,
    /// The success type, or one message of a reply stream; `None` for a byte stream.
    pub returns: Option<TraceFn>,
    /// One message of a request stream of messages.
    pub request_message: Option<TraceFn>,
    /// The typed fault.
    pub fault: Option<TraceFn>,
}

impl ProtoTypes {
    /// An operation's trace functions (what generated code builds). Not a public API.
    #[doc(hidden)]
    pub const fn new(
        args: TraceFn,
        returns: Option<TraceFn>,
        request_message: Option<TraceFn>,
        fault: Option<TraceFn>,
    ) -> Self {
        ProtoTypes {
            args,
            returns,
            request_message,
            fault,
        }
    }
}

/// What a body (a request, a reply, one message of a stream, a fault) is in protobuf.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Body {
    /// The struct (or tuple struct) of this name itself.
    Message(String),
    /// The empty message (`()`, a unit struct, a one-way reply).
    Empty,
    /// Field 1, `value`, of a wrapper message.
    Wrapped(Format),
}

/// One operation in protobuf.
#[derive(Debug)]
pub(crate) struct OpSchema {
    /// The operation's name in the contract.
    pub(crate) name: &'static str,
    /// The RPC's name (`PascalCase`).
    pub(crate) method: String,
    /// Its request: the arguments, or one message of its request stream.
    pub(crate) request: Body,
    /// Its reply: the return value, or one message of its reply stream.
    pub(crate) response: Body,
    /// The request is a stream of messages.
    pub(crate) client_streaming: bool,
    /// The reply is a stream of messages.
    pub(crate) server_streaming: bool,
    /// The typed fault, if any.
    pub(crate) fault: Option<Body>,
    /// The name of the typed fault's message (the type's own, or `{Method}Fault`).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fault_name: Option<String>,
    /// Why gRPC cannot call it, when it cannot (a byte stream, parameters beside a stream).
    pub(crate) unavailable: Option<String>,
}

/// A contract in protobuf: its operations and every type they use.
#[derive(Debug)]
pub(crate) struct ServiceSchema {
    /// The contract's name (the gRPC service's).
    pub(crate) service: &'static str,
    /// Every struct and enum the operations use, by serde name.
    pub(crate) registry: Registry,
    /// The names of those the operations callable over gRPC use.
    pub(crate) used: BTreeSet<String>,
    /// The operations, in declaration order.
    pub(crate) ops: Vec<OpSchema>,
    /// Which enums are protobuf enums, which messages' numbers are pinned.
    pub(crate) layout: Layout,
}

/// What the schema needs to know of an operation (from its `OperationInfo`).
#[derive(Debug, Clone)]
pub(crate) struct OpShape {
    /// Its name in the contract.
    pub(crate) name: &'static str,
    /// Its RPC's name.
    pub(crate) method: String,
    /// `#[keel(one_way)]`.
    pub(crate) one_way: bool,
    /// The request is streamed (bytes or messages).
    pub(crate) stream_request: bool,
    /// The reply is streamed (bytes or messages).
    pub(crate) stream_response: bool,
    /// The request stream carries messages.
    pub(crate) message_request: bool,
    /// The reply stream carries messages.
    pub(crate) message_response: bool,
    /// How to trace its types.
    pub(crate) proto: Option<ProtoTypes>,
}

/// A contract's name and operations.
pub(crate) struct Contract {
    /// The contract's name.
    pub(crate) name: &'static str,
    /// Its operations, in declaration order.
    pub(crate) operations: Vec<OpShape>,
    /// The field numbers it pins.
    pub(crate) numbers: &'static [ProtoNumbers],
}

/// Traces `desc`'s types into its protobuf schema, or says why it has none.
pub(crate) fn trace(desc: &Contract) -> Result<ServiceSchema, String> {
    // Each type once, in order: per operation its arguments, then what it has of return,
    // request message and fault. An operation whose types cannot be traced is left out (and
    // is not callable over gRPC); the others are traced together.
    let mut roots: Vec<TraceFn> = Vec::new();
    let mut shapes = Vec::new();
    let mut untraceable = Vec::new();
    for op in &desc.operations {
        let Some(types) = op.proto else {
            return Err(format!(
                "{}.{} was not compiled with protobuf descriptions",
                desc.name, op.name
            ));
        };
        let optional = [types.returns, types.request_message, types.fault];
        let own: Vec<TraceFn> = std::iter::once(types.args)
            .chain(optional.into_iter().flatten())
            .collect();
        if let Err(e) = trace_all(&own) {
            untraceable.push((
                op,
                format!("its types cannot be described in protobuf: {e}"),
            ));
            continue;
        }
        roots.extend(own);
        shapes.push((op, optional.map(|f| f.is_some())));
    }
    let (formats, registry) = trace_all(&roots).map_err(|e| {
        format!(
            "{}: its types cannot be described in protobuf together: {e}",
            desc.name
        )
    })?;
    let mut formats = formats.into_iter();
    let mut ops = Vec::new();
    for (op, [returns, request_message, fault]) in shapes {
        let mut next = |present: bool| present.then(|| formats.next().expect("a format per root"));
        let args = next(true).expect("arguments are traced");
        let (returns, request_message, fault) = (next(returns), next(request_message), next(fault));
        let used: Vec<Format> = [
            Some(&args),
            returns.as_ref(),
            request_message.as_ref(),
            fault.as_ref(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        let unfit = check_formats(&used.iter().collect::<Vec<_>>(), &registry).err();
        let mut schema = op_schema(op, &registry, &args, returns, request_message, fault);
        if schema.unavailable.is_none() {
            schema.unavailable = unfit;
        }
        ops.push((schema, used));
    }
    let requests: Vec<(String, String)> = ops
        .iter()
        .filter_map(|(op, _)| match &op.request {
            Body::Message(n) if is_args_struct(n) => {
                Some((format!("{}Request", op.method), n.clone()))
            }
            _ => None,
        })
        .collect();
    let pinned = numbers::resolve(desc.name, desc.numbers, &requests, &registry)?;
    let layout = Layout::new(
        registry
            .iter()
            .filter(|(_, c)| is_c_like(c))
            .map(|(name, _)| name.clone()),
    )
    .with_numbers(pinned);
    // What the callable operations use, for the `.proto` file.
    let mut used = BTreeSet::new();
    for (op, formats) in &ops {
        if op.unavailable.is_none() {
            for f in formats {
                reach(f, &registry, &mut used);
            }
        }
    }
    let mut ops: Vec<OpSchema> = ops.into_iter().map(|(op, _)| op).collect();
    for (op, why) in untraceable {
        ops.push(OpSchema {
            name: op.name,
            method: op.method.clone(),
            request: Body::Empty,
            response: Body::Empty,
            client_streaming: op.message_request,
            server_streaming: op.message_response,
            fault: None,
            fault_name: None,
            unavailable: Some(why),
        });
    }
    // In declaration order.
    let order = |name: &str| desc.operations.iter().position(|o| o.name == name);
    ops.sort_by_key(|op| order(op.name));
    Ok(ServiceSchema {
        service: desc.name,
        registry,
        used,
        ops,
        layout,
    })
}

/// Adds the names of the structs and enums `format` reaches to `used`.
fn reach(format: &Format, reg: &Registry, used: &mut BTreeSet<String>) {
    match format {
        Format::TypeName(name) => {
            if !used.insert(name.clone()) {
                return;
            }
            match reg.get(name) {
                Some(ContainerFormat::NewTypeStruct(f)) => reach(f, reg, used),
                Some(ContainerFormat::TupleStruct(fs)) => {
                    fs.iter().for_each(|f| reach(f, reg, used))
                }
                Some(ContainerFormat::Struct(fs)) => {
                    fs.iter().for_each(|f| reach(&f.value, reg, used))
                }
                Some(ContainerFormat::Enum(vs)) => {
                    for v in vs.values() {
                        match &v.value {
                            VariantFormat::NewType(f) => reach(f, reg, used),
                            VariantFormat::Tuple(fs) => fs.iter().for_each(|f| reach(f, reg, used)),
                            VariantFormat::Struct(fs) => {
                                fs.iter().for_each(|f| reach(&f.value, reg, used))
                            }
                            VariantFormat::Unit => {}
                        }
                    }
                }
                Some(ContainerFormat::UnitStruct) | None => {}
            }
        }
        Format::Option(f) | Format::Seq(f) => reach(f, reg, used),
        Format::TupleArray { content } => reach(content, reg, used),
        Format::Map { key, value } => {
            reach(key, reg, used);
            reach(value, reg, used);
        }
        Format::Tuple(fs) => fs.iter().for_each(|f| reach(f, reg, used)),
        _ => {}
    }
}

/// Whether an enum's variants all carry nothing.
pub(crate) fn is_c_like(container: &ContainerFormat) -> bool {
    matches!(container, ContainerFormat::Enum(variants)
        if variants.values().all(|v| matches!(v.value, VariantFormat::Unit)))
}

fn op_schema(
    op: &OpShape,
    registry: &Registry,
    args: &Format,
    returns: Option<Format>,
    request_message: Option<Format>,
    fault: Option<Format>,
) -> OpSchema {
    let bytes_in = op.stream_request && !op.message_request;
    let bytes_out = op.stream_response && !op.message_response;
    let args_empty = matches!(args, Format::TypeName(n)
        if matches!(registry.get(n), Some(ContainerFormat::Struct(f)) if f.is_empty()));
    let unavailable = if bytes_in || bytes_out {
        Some("it streams bytes (keel::ByteStream), which gRPC has no type for".to_string())
    } else if op.message_request && !args_empty {
        Some(
            "it takes parameters beside its stream of messages, and a gRPC call's request is \
             its stream"
                .to_string(),
        )
    } else {
        None
    };
    let request = match request_message {
        Some(m) => body(&m, registry),
        None => body(args, registry),
    };
    let response = match (op.one_way, returns) {
        (true, _) | (_, None) => Body::Empty,
        (false, Some(r)) => body(&r, registry),
    };
    OpSchema {
        name: op.name,
        method: op.method.clone(),
        request,
        response,
        client_streaming: op.message_request,
        server_streaming: op.message_response,
        fault_name: fault.as_ref().map(|f| match body(f, registry) {
            Body::Message(name) => super::names::proto_ident(&name),
            _ => format!("{}Fault", op.method),
        }),
        fault: fault.map(|f| body(&f, registry)),
        unavailable,
    }
}

/// What a body of type `format` is: the struct itself, the empty message, or wrapped.
pub(crate) fn body(format: &Format, registry: &Registry) -> Body {
    match format {
        Format::Unit => Body::Empty,
        Format::TypeName(name) => match registry.get(name) {
            Some(ContainerFormat::Struct(_)) => Body::Message(name.clone()),
            Some(ContainerFormat::UnitStruct) => Body::Empty,
            Some(ContainerFormat::NewTypeStruct(inner)) => body(inner, registry),
            _ => Body::Wrapped(format.clone()),
        },
        other => Body::Wrapped(other.clone()),
    }
}

/// `format` with newtype structs replaced by what they hold (they are transparent).
pub(crate) fn resolve<'a>(format: &'a Format, registry: &'a Registry) -> &'a Format {
    match format {
        Format::TypeName(name) => match registry.get(name) {
            Some(ContainerFormat::NewTypeStruct(inner)) => resolve(inner, registry),
            _ => format,
        },
        other => other,
    }
}

/// Refuses the shapes protobuf has no field for in what `roots` (an operation's bodies)
/// reach, naming where they are.
fn check_formats(roots: &[&Format], reg: &Registry) -> Result<(), String> {
    let mut used = BTreeSet::new();
    for root in roots {
        reach(root, reg, &mut used);
        // A body that is not a struct is a wrapper's field.
        if !matches!(resolve(root, reg), Format::TypeName(n)
            if matches!(reg.get(n), Some(ContainerFormat::Struct(_) | ContainerFormat::UnitStruct)))
            && !matches!(resolve(root, reg), Format::Unit)
        {
            check_field(root, reg)?;
        }
    }
    for name in &used {
        let Some(container) = reg.get(name) else {
            continue;
        };
        let fields: Vec<(String, &Format)> = match container {
            ContainerFormat::Struct(fs) => fs.iter().map(|f| (f.name.clone(), &f.value)).collect(),
            ContainerFormat::TupleStruct(fs) => fs
                .iter()
                .enumerate()
                .map(|(i, f)| (format!("field {}", i + 1), f))
                .collect(),
            ContainerFormat::Enum(variants) => {
                let mut out = Vec::new();
                for v in variants.values() {
                    match &v.value {
                        VariantFormat::NewType(f) => {
                            let f = resolve(f, reg);
                            if matches!(f, Format::Seq(_) | Format::Map { .. } | Format::Option(_))
                            {
                                return Err(format!(
                                    "variant {name}::{} holds a sequence, map or option, which \
                                     a protobuf oneof member cannot be; wrap it in a struct",
                                    v.name
                                ));
                            }
                            out.push((format!("variant {}", v.name), f));
                        }
                        VariantFormat::Tuple(fs) => {
                            out.extend(fs.iter().map(|f| (format!("variant {}", v.name), f)))
                        }
                        VariantFormat::Struct(fs) => {
                            out.extend(fs.iter().map(|f| {
                                (format!("variant {}, field {}", v.name, f.name), &f.value)
                            }))
                        }
                        VariantFormat::Unit => {}
                    }
                }
                out
            }
            _ => Vec::new(),
        };
        for (field, format) in fields {
            check_field(format, reg).map_err(|e| format!("{name}, {field}: {e}"))?;
        }
    }
    Ok(())
}

/// Whether a field of type `format` has a protobuf type.
fn check_field(format: &Format, reg: &Registry) -> Result<(), String> {
    match resolve(format, reg) {
        Format::I128 | Format::U128 => Err("128-bit integers have no protobuf type".into()),
        Format::Unit => Err("`()` is not a field type in protobuf".into()),
        Format::Tuple(_) | Format::TupleArray { .. } => {
            Err("tuples and arrays have no protobuf type; use a struct or a Vec".into())
        }
        Format::Option(inner) => match resolve(inner, reg) {
            Format::Option(_) => Err("Option<Option<T>> has no protobuf type".into()),
            other => check_field(other, reg),
        },
        Format::Seq(inner) => match resolve(inner, reg) {
            Format::Seq(_) | Format::Map { .. } | Format::Option(_) => Err(
                "a repeated field's elements cannot be repeated, maps or optional; wrap the \
                 element in a struct"
                    .into(),
            ),
            other => check_field(other, reg),
        },
        Format::Map { key, value } => {
            match resolve(key, reg) {
                Format::Bool
                | Format::Str
                | Format::Char
                | Format::I8
                | Format::I16
                | Format::I32
                | Format::I64
                | Format::U8
                | Format::U16
                | Format::U32
                | Format::U64 => {}
                _ => return Err("a protobuf map's keys are integers, bools or strings".to_string()),
            }
            match resolve(value, reg) {
                Format::Seq(_) | Format::Map { .. } | Format::Option(_) => {
                    Err("a protobuf map's values cannot be repeated, maps or optional".into())
                }
                other => check_field(other, reg),
            }
        }
        _ => Ok(()),
    }
}

/// Contracts of one package share its messages by name (one `.proto` file, one reflection
/// descriptor): a message two of `schemas` use must be numbered alike in both, pinned the same
/// way or not at all. Else says which contracts and message disagree.
pub(crate) fn check_shared_numbers(schemas: &[&ServiceSchema]) -> Result<(), String> {
    // Message name → the first contract that uses it, and how that one numbers it.
    let mut seen = std::collections::HashMap::new();
    for schema in schemas {
        for name in &schema.used {
            let pinned = schema.layout.pinned(name);
            match seen.get(name) {
                Some(&(first, theirs)) if theirs != pinned => {
                    return Err(format!(
                        "contracts `{first}` and `{}` share the protobuf package and its message \
                         `{name}`, but number its fields differently (proto_numbers): pin it the \
                         same way in both, or in neither",
                        schema.service
                    ));
                }
                Some(_) => {}
                None => {
                    seen.insert(name, (schema.service, pinned));
                }
            }
        }
    }
    Ok(())
}
