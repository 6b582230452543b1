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
/// protobuf JSON says differently rewritten; `Ok(None)` when nothing needed rewriting (or
/// `json` is not JSON: the operation's decoder says why). `Err(TooLarge)` when the bytes fields
/// given in base64 would take more than `max` bytes as keel's JSON writes them: found before
/// they are decoded into lists, so the rewrite never holds more than that.
pub(crate) fn request_from_proto_json(
    schema: &ServiceSchema,
    op: &str,
    json: &[u8],
    max: usize,
) -> Result<Option<Vec<u8>>, TooLarge> {
    let Some(op) = schema.ops.iter().find(|o| o.name == op) else {
        return Ok(None);
    };
    let Body::Message(name) = &op.request else {
        return Ok(None);
    };
    let Ok(mut value) = serde_json::from_slice::<Value>(json) else {
        return Ok(None);
    };
    let mut budget = Budget {
        left: max,
        exceeded: false,
    };
    let changed = rewrite(
        &Format::TypeName(name.clone()),
        &schema.registry,
        &mut value,
        &mut budget,
    );
    if budget.exceeded {
        return Err(TooLarge);
    }
    Ok(changed.then(|| serde_json::to_vec(&value).expect("JSON of JSON values")))
}

/// A rewritten message's bytes fields would not fit the message size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge;

/// What bytes fields may still grow to, as lists of numbers.
struct Budget {
    left: usize,
    exceeded: bool,
}

/// Rewrites `value` as keel's serde JSON of `format`; whether anything changed.
fn rewrite(format: &Format, reg: &Registry, value: &mut Value, budget: &mut Budget) -> bool {
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
                            changed |= rewrite(&f.value, reg, &mut v, budget);
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
            Some(ContainerFormat::NewTypeStruct(inner)) => rewrite(inner, reg, value, budget),
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
            // Each byte as keel's JSON writes it: up to three digits and a comma. Counted from
            // the base64 text (3 bytes for 4 characters) before anything is decoded.
            let written = (s.len() / 4 + 1) * 3 * 4 + 2;
            if budget.exceeded || written > budget.left {
                budget.exceeded = true;
                return false;
            }
            budget.left -= written;
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
        (Format::Option(inner), v) if !v.is_null() => rewrite(inner, reg, v, budget),
        (Format::Seq(inner), Value::Array(items)) => {
            items.iter_mut().fold(false, |changed, item| {
                rewrite(inner, reg, item, budget) | changed
            })
        }
        (Format::Map { value: inner, .. }, Value::Object(map)) => {
            map.values_mut().fold(false, |changed, item| {
                rewrite(inner, reg, item, budget) | changed
            })
        }
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
        let mut budget = Budget {
            left: 1 << 20,
            exceeded: false,
        };
        assert!(rewrite(
            &Format::TypeName("Args".into()),
            &reg,
            &mut v,
            &mut budget
        ));
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
        assert!(!rewrite(
            &Format::TypeName("Args".into()),
            &reg,
            &mut own,
            &mut budget
        ));
        assert!(!budget.exceeded);
        // Bytes that would not fit: left as they came, and the budget says so.
        let mut small = Budget {
            left: 8,
            exceeded: false,
        };
        let mut big = serde_json::json!({"blob": "AQIDBAUGBwgJ"});
        assert!(!rewrite(
            &Format::TypeName("Args".into()),
            &reg,
            &mut big,
            &mut small
        ));
        assert!(small.exceeded);
        assert_eq!(big, serde_json::json!({"blob": "AQIDBAUGBwgJ"}));
    }

    #[test]
    fn lower_camel_case() {
        assert_eq!(lower_camel("interval_ms"), "intervalMs");
        assert_eq!(lower_camel("a"), "a");
        assert_eq!(lower_camel("_x_y"), "xY");
    }
}
