//! The schema of a contract type whether or not it implements [`JsonSchema`]: what
//! `#[keel::contract]` calls, so that the `openapi` feature adds a document and never a bound.
//!
//! Contract types are concrete (a contract has no generics), so the macro can pick between two
//! methods of the same name by method resolution on stable Rust ("autoref specialization"):
//! `(&SchemaProbe::<T>::new()).schema(g)` finds [`HasSchema::schema`] on `SchemaProbe<T>` at
//! the first step, where its receiver is `&SchemaProbe<T>`, if `T: JsonSchema`; otherwise the
//! next step finds [`OpenSchema::schema`], implemented for `&SchemaProbe<T>` and every `T`.
//! `SchemaProbe::<T>::new().is_option()` likewise finds the inherent method of
//! `SchemaProbe<Option<T>>` before the trait method [`NotOption::is_option`]. Both hold only
//! where `T` is a concrete type at the call, which the generated code guarantees.

use std::any::type_name;
use std::marker::PhantomData;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::{Map, Value};

/// Stands for the type `T` in method resolution; holds nothing.
#[derive(Debug)]
pub struct SchemaProbe<T: ?Sized>(PhantomData<fn() -> Box<T>>);

impl<T: ?Sized> SchemaProbe<T> {
    /// The probe of `T`.
    pub const fn new() -> Self {
        SchemaProbe(PhantomData)
    }
}

impl<T: ?Sized> Default for SchemaProbe<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The schema of a type that implements [`JsonSchema`]: chosen first.
pub trait HasSchema {
    /// The type's schema as the generator's subschema (a `$ref` for the types it keeps in its
    /// definitions).
    fn schema(&self, g: &mut SchemaGenerator) -> Schema;
}

impl<T: JsonSchema + ?Sized> HasSchema for SchemaProbe<T> {
    fn schema(&self, g: &mut SchemaGenerator) -> Schema {
        g.subschema_for::<T>()
    }
}

/// The schema of any other type: open (any JSON value), with a description that names the
/// type and says why.
pub trait OpenSchema {
    /// `{}` with a description naming the type.
    fn schema(&self, g: &mut SchemaGenerator) -> Schema;
}

impl<T: ?Sized> OpenSchema for &SchemaProbe<T> {
    fn schema(&self, _: &mut SchemaGenerator) -> Schema {
        open_schema(type_name::<T>())
    }
}

/// The open schema of the Rust type named `type_name`: any JSON value, described.
pub(crate) fn open_schema(type_name: &str) -> Schema {
    let description = format!(
        "Any JSON value: `{type_name}` does not implement `schemars::JsonSchema`, so this \
         document does not describe it (its serde form is what travels)."
    );
    json_schema!({ "description": description })
}

impl<T> SchemaProbe<Option<T>> {
    /// An `Option`: a caller may leave the member out (serde reads it as `None`).
    pub fn is_option(&self) -> bool {
        true
    }
}

/// Any type but an `Option`: its member is required (unless `#[keel(default)]`).
pub trait NotOption {
    /// `false`.
    fn is_option(&self) -> bool {
        false
    }
}

impl<T: ?Sized> NotOption for SchemaProbe<T> {}

/// One member of an operation's arguments object: what [`args_schema`] needs of a parameter.
#[derive(Debug)]
pub struct ArgSchema {
    name: &'static str,
    schema: Schema,
    required: bool,
    default: Option<Value>,
}

impl ArgSchema {
    /// The parameter `name` with its `schema`; required unless `optional` (an `Option`).
    pub fn new(name: &'static str, schema: Schema, optional: bool) -> Self {
        ArgSchema {
            name,
            schema,
            required: !optional,
            default: None,
        }
    }

    /// A `#[keel(default)]` parameter: never required, and its schema carries the default
    /// value (`T::default()` as JSON), as `#[serde(default)]` does in a derived schema.
    pub fn with_default<T: Default + Serialize>(mut self) -> Self {
        self.required = false;
        self.default = serde_json::to_value(T::default()).ok();
        self
    }
}

/// The schema of an operation's arguments: an object with one member per parameter, in
/// order, and the required ones listed (the same schema `schemars` derives for a struct of
/// those fields, without needing their types to implement `JsonSchema`).
pub fn args_schema(args: Vec<ArgSchema>) -> Schema {
    let mut object = Map::new();
    object.insert("type".into(), "object".into());
    if !args.is_empty() {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for arg in args {
            let mut schema = arg.schema;
            if let Some(default) = arg.default {
                schema.insert("default".into(), default);
            }
            properties.insert(arg.name.into(), schema.into());
            if arg.required {
                required.push(Value::from(arg.name));
            }
        }
        object.insert("properties".into(), properties.into());
        if !required.is_empty() {
            object.insert("required".into(), required.into());
        }
    }
    Schema::from(object)
}
