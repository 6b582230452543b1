//! Field numbers a contract pins (`#[keel::contract(proto_numbers(Point(x = 2, y = 1)))]`):
//! checked against its traced types, and turned into each pinned message's numbers in serde's
//! field order, which the codec (`Layout`) and the `.proto` file (`file.rs`) both use.
//!
//! The rule (GRPC.md, "Field numbers"): a message the contract names has every field pinned,
//! each to its own number; a message it does not name keeps the numbers of declaration order.

use std::collections::HashMap;

use super::model::{ContainerFormat, Registry};
use super::names::{field_ident, proto_ident};
use super::Pins;

/// One message's pinned numbers, as `#[keel::contract(proto_numbers(...))]` lists them (what
/// generated code builds). Not a public API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ProtoNumbers {
    /// The message: a struct's name, or `{Method}Request` for an operation's parameters.
    pub message: &'static str,
    /// Each field's name and number.
    pub fields: &'static [(&'static str, u32)],
}

impl ProtoNumbers {
    /// The numbers `fields` of `message` (what generated code builds). Not a public API.
    #[doc(hidden)]
    pub const fn new(message: &'static str, fields: &'static [(&'static str, u32)]) -> Self {
        ProtoNumbers { message, fields }
    }
}

/// The smallest and largest numbers protobuf reserves for itself.
const RESERVED: std::ops::RangeInclusive<u32> = 19_000..=19_999;

/// The largest field number (2^29 - 1).
const MAX: u32 = 536_870_911;

/// Each pinned message's fields (serde name, number), by the message's serde name; or what does not fit
/// the contract `contract`'s types. `requests` names the arguments struct of each operation
/// whose request is its parameters: (`{Method}Request`, the struct's serde name).
pub(crate) fn resolve(
    contract: &str,
    pins: &[ProtoNumbers],
    requests: &[(String, String)],
    registry: &Registry,
) -> Result<HashMap<String, Pins>, String> {
    let mut out = HashMap::new();
    for pin in pins {
        let fail = |why: String| format!("{contract}: proto_numbers: {}: {why}", pin.message);
        let serde_name = requests
            .iter()
            .find(|(request, _)| request == pin.message)
            .map(|(_, args)| args.as_str())
            .or_else(|| {
                registry
                    .keys()
                    .find(|name| *name == pin.message || proto_ident(name) == pin.message)
                    .map(String::as_str)
            })
            .ok_or_else(|| {
                fail(
                    "no message of this contract has this name (name a struct its operations \
                      use, or `{Method}Request` for an operation's parameters)"
                        .to_string(),
                )
            })?;
        let Some(ContainerFormat::Struct(fields)) = registry.get(serde_name) else {
            return Err(fail(
                "only a struct with named fields, or an operation's parameters, has field \
                 numbers to pin"
                    .to_string(),
            ));
        };
        let field_names = || {
            fields
                .iter()
                .map(|f| field_ident(&f.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut numbers = Vec::with_capacity(fields.len());
        for field in fields {
            let ident = field_ident(&field.name);
            let number = pin
                .fields
                .iter()
                .find(|(name, _)| *name == field.name || *name == ident)
                .map(|(_, n)| *n)
                .ok_or_else(|| {
                    fail(format!(
                        "field `{ident}` has no number: a message that pins numbers pins all \
                         of its fields ({})",
                        field_names()
                    ))
                })?;
            if number == 0 || number > MAX || RESERVED.contains(&number) {
                return Err(fail(format!(
                    "{number} is not a field number (1 to {MAX}, not 19000 to 19999)"
                )));
            }
            if numbers.iter().any(|&(_, n)| n == number) {
                return Err(fail(format!("field number {number} is given twice")));
            }
            numbers.push((field.name.clone(), number));
        }
        if let Some((unknown, _)) = pin.fields.iter().find(|(name, _)| {
            !fields
                .iter()
                .any(|f| f.name == *name || field_ident(&f.name) == *name)
        }) {
            return Err(fail(format!(
                "it has no field `{unknown}` (its fields: {})",
                field_names()
            )));
        }
        if out
            .insert(serde_name.to_string(), numbers.into_boxed_slice())
            .is_some()
        {
            return Err(fail("this message is pinned twice".to_string()));
        }
    }
    Ok(out)
}
