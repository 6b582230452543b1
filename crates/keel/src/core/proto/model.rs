//! The shapes of a contract's types, as serde-reflection traces them, in values that can be
//! kept in a `static` and shared between threads (serde-reflection's own hold `Rc`s while it
//! traces). Same names and structure as serde-reflection's, less what only tracing needs.

use std::collections::BTreeMap;

/// Every struct and enum a contract uses, by serde name.
pub(crate) type Registry = BTreeMap<String, ContainerFormat>;

/// A name and what it names (a field, a variant).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Named<T> {
    pub(crate) name: String,
    pub(crate) value: T,
}

/// The shape of a value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Format {
    TypeName(String),
    Unit,
    Bool,
    I8,
    I16,
    I32,
    I64,
    I128,
    U8,
    U16,
    U32,
    U64,
    U128,
    F32,
    F64,
    Char,
    Str,
    Bytes,
    Option(Box<Format>),
    Seq(Box<Format>),
    Map {
        key: Box<Format>,
        value: Box<Format>,
    },
    Tuple(Vec<Format>),
    TupleArray {
        content: Box<Format>,
    },
}

/// The shape of a named type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ContainerFormat {
    UnitStruct,
    NewTypeStruct(Box<Format>),
    TupleStruct(Vec<Format>),
    Struct(Vec<Named<Format>>),
    Enum(BTreeMap<u32, Named<VariantFormat>>),
}

/// The shape of an enum's variant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum VariantFormat {
    Unit,
    NewType(Box<Format>),
    Tuple(Vec<Format>),
    Struct(Vec<Named<Format>>),
}

use serde_reflection as sr;

fn named(fields: &[sr::Named<sr::Format>]) -> Vec<Named<Format>> {
    fields
        .iter()
        .map(|f| Named {
            name: f.name.clone(),
            value: format(&f.value),
        })
        .collect()
}

/// serde-reflection's format (complete: no variables left) as ours.
pub(crate) fn format(f: &sr::Format) -> Format {
    let boxed = |f: &sr::Format| Box::new(format(f));
    match f {
        sr::Format::Variable(v) => match v.borrow().as_ref() {
            Some(f) => format(f),
            None => Format::Unit,
        },
        sr::Format::TypeName(n) => Format::TypeName(n.clone()),
        sr::Format::Unit => Format::Unit,
        sr::Format::Bool => Format::Bool,
        sr::Format::I8 => Format::I8,
        sr::Format::I16 => Format::I16,
        sr::Format::I32 => Format::I32,
        sr::Format::I64 => Format::I64,
        sr::Format::I128 => Format::I128,
        sr::Format::U8 => Format::U8,
        sr::Format::U16 => Format::U16,
        sr::Format::U32 => Format::U32,
        sr::Format::U64 => Format::U64,
        sr::Format::U128 => Format::U128,
        sr::Format::F32 => Format::F32,
        sr::Format::F64 => Format::F64,
        sr::Format::Char => Format::Char,
        sr::Format::Str => Format::Str,
        sr::Format::Bytes => Format::Bytes,
        sr::Format::Option(f) => Format::Option(boxed(f)),
        sr::Format::Seq(f) => Format::Seq(boxed(f)),
        sr::Format::Map { key, value } => Format::Map {
            key: boxed(key),
            value: boxed(value),
        },
        sr::Format::Tuple(fs) => Format::Tuple(fs.iter().map(format).collect()),
        sr::Format::TupleArray { content, .. } => Format::TupleArray {
            content: boxed(content),
        },
    }
}

/// serde-reflection's registry as ours.
pub(crate) fn registry(r: &sr::Registry) -> Registry {
    r.iter()
        .map(|(name, c)| {
            let c = match c {
                sr::ContainerFormat::UnitStruct => ContainerFormat::UnitStruct,
                sr::ContainerFormat::NewTypeStruct(f) => {
                    ContainerFormat::NewTypeStruct(Box::new(format(f)))
                }
                sr::ContainerFormat::TupleStruct(fs) => {
                    ContainerFormat::TupleStruct(fs.iter().map(format).collect())
                }
                sr::ContainerFormat::Struct(fs) => ContainerFormat::Struct(named(fs)),
                sr::ContainerFormat::Enum(vs) => ContainerFormat::Enum(
                    vs.iter()
                        .map(|(i, v)| {
                            let value = match &v.value {
                                sr::VariantFormat::NewType(f) => {
                                    VariantFormat::NewType(Box::new(format(f)))
                                }
                                sr::VariantFormat::Tuple(fs) => {
                                    VariantFormat::Tuple(fs.iter().map(format).collect())
                                }
                                sr::VariantFormat::Struct(fs) => VariantFormat::Struct(named(fs)),
                                sr::VariantFormat::Unit | sr::VariantFormat::Variable(_) => {
                                    VariantFormat::Unit
                                }
                            };
                            (
                                *i,
                                Named {
                                    name: v.name.clone(),
                                    value,
                                },
                            )
                        })
                        .collect(),
                ),
            };
            (name.clone(), c)
        })
        .collect()
}
