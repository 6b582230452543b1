//! What protobuf's JSON mapping sends, read as keel's serde JSON: a request message from a
//! Connect, gRPC-Web or gRPC client that speaks protobuf JSON (field names in lowerCamelCase,
//! 64-bit integers as strings, bytes in base64) rewritten, along the contract's traced types,
//! into what the operation's serde types read. What keel's own JSON already says is left as it
//! is, so a request in keel's JSON is unchanged.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::model::{ContainerFormat, Format, Registry};
use super::schema::{Body, ServiceSchema};

/// `json`, a request message of operation `op` (its contract name) of `schema`, with what
/// protobuf JSON says differently rewritten; `None` when nothing needed rewriting (or `json` is
/// not JSON: the operation's decoder says why).
pub(crate) fn request_from_proto_json(
    schema: &ServiceSchema,
    op: &str,
    json: &[u8],
) -> Option<Vec<u8>> {
    let op = schema.ops.iter().find(|o| o.name == op)?;
    let Body::Message(name) = &op.request else {
        return None;
    };
    let mut value: Value = serde_json::from_slice(json).ok()?;
    let changed = rewrite(
        &Format::TypeName(name.clone()),
        &schema.registry,
        &mut value,
    );
    changed.then(|| serde_json::to_vec(&value).expect("JSON of JSON values"))
}

/// Rewrites `value` as keel's serde JSON of `format`; whether anything changed.
fn rewrite(format: &Format, reg: &Registry, value: &mut Value) -> bool {
    match (format, value) {
        (Format::TypeName(name), value) => match reg.get(name) {
            Some(ContainerFormat::Struct(fields)) => {
                let Value::Object(map) = value else {
                    return false;
                };
                let mut changed = false;
                let old = std::mem::take(map);
                let mut out = Map::with_capacity(old.len());
                for (key, mut v) in old {
                    let field = fields
                        .iter()
                        .find(|f| f.name == key)
                        .or_else(|| fields.iter().find(|f| lower_camel(&f.name) == key));
                    match field {
                        Some(f) => {
                            changed |= f.name != key;
                            changed |= rewrite(&f.value, reg, &mut v);
                            out.insert(f.name.clone(), v);
                        }
                        None => {
                            out.insert(key, v);
                        }
                    }
                }
                *map = out;
                changed
            }
            Some(ContainerFormat::NewTypeStruct(inner)) => rewrite(inner, reg, value),
            _ => false,
        },
        (
            Format::I64 | Format::I128 | Format::U64 | Format::U128 | Format::I32 | Format::U32,
            v,
        ) => {
            let Value::String(s) = &*v else {
                return false;
            };
            match s
                .parse::<i128>()
                .ok()
                .and_then(|n| serde_json::from_str::<serde_json::Number>(&n.to_string()).ok())
            {
                Some(n) => {
                    *v = Value::Number(n);
                    true
                }
                None => false,
            }
        }
        (Format::Bytes, v) => {
            let Value::String(s) = &*v else {
                return false;
            };
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(s.trim_end_matches('='))
                .or_else(|_| {
                    base64::engine::general_purpose::STANDARD_NO_PAD.decode(s.trim_end_matches('='))
                })
                .or_else(|_| {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s.trim_end_matches('='))
                });
            match decoded {
                Ok(bytes) => {
                    *v = Value::Array(bytes.into_iter().map(Value::from).collect());
                    true
                }
                Err(_) => false,
            }
        }
        (Format::Option(inner), v) if !v.is_null() => rewrite(inner, reg, v),
        (Format::Seq(inner), Value::Array(items)) => items
            .iter_mut()
            .fold(false, |changed, item| rewrite(inner, reg, item) | changed),
        (Format::Map { value: inner, .. }, Value::Object(map)) => map
            .values_mut()
            .fold(false, |changed, item| rewrite(inner, reg, item) | changed),
        _ => false,
    }
}

/// `snake_case` → `lowerCamelCase`, as protobuf's JSON names fields.
fn lower_camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = !out.is_empty();
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::model::Named;
    use super::*;

    fn field(name: &str, value: Format) -> Named<Format> {
        Named {
            name: name.into(),
            value,
        }
    }

    #[test]
    fn names_and_integers_and_bytes_are_rewritten_along_the_types() {
        let mut reg = Registry::new();
        reg.insert(
            "Args".into(),
            ContainerFormat::Struct(vec![
                field("account_id", Format::U64),
                field("interval_ms", Format::U32),
                field("tags", Format::Seq(Box::new(Format::Str))),
                field("blob", Format::Bytes),
                field(
                    "inner",
                    Format::Option(Box::new(Format::TypeName("Inner".into()))),
                ),
            ]),
        );
        reg.insert(
            "Inner".into(),
            ContainerFormat::Struct(vec![field("big_n", Format::I64)]),
        );
        let mut v = serde_json::json!({
            "accountId": "18446744073709551615",
            "intervalMs": 5,
            "tags": ["1"],
            "blob": "AQI=",
            "inner": {"bigN": "-3"},
            "unknown": 1,
        });
        assert!(rewrite(&Format::TypeName("Args".into()), &reg, &mut v));
        assert_eq!(
            v,
            serde_json::json!({
                "account_id": 18446744073709551615u64,
                "interval_ms": 5,
                "tags": ["1"],
                "blob": [1, 2],
                "inner": {"big_n": -3},
                "unknown": 1,
            })
        );
        // keel's own JSON: nothing to do.
        let mut own = serde_json::json!({"account_id": 1, "tags": [], "inner": null});
        assert!(!rewrite(&Format::TypeName("Args".into()), &reg, &mut own));
    }

    #[test]
    fn lower_camel_case() {
        assert_eq!(lower_camel("interval_ms"), "intervalMs");
        assert_eq!(lower_camel("a"), "a");
        assert_eq!(lower_camel("_x_y"), "xY");
    }
}
