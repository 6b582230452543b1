//! How Rust and serde names become protobuf's: methods in `PascalCase`, identifiers made
//! valid, variants' members in `snake_case`, enum values in `SCREAMING_SNAKE_CASE`.

/// `snake_case` → `PascalCase`: each `_`-separated word capitalised, the `_`s dropped.
pub(crate) fn pascal_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for word in name.split('_').filter(|w| !w.is_empty()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// `name` with what protobuf identifiers cannot hold replaced by `_`, starting with a letter.
pub(crate) fn proto_ident(name: &str) -> String {
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
pub(crate) fn field_ident(name: &str) -> String {
    let ident = proto_ident(name);
    if name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        ident
    } else {
        format!("f{}", &ident[1..])
    }
}

/// `PascalCase` → `snake_case`.
pub(crate) fn snake(name: &str) -> String {
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
pub(crate) fn screaming(name: &str) -> String {
    snake(name).trim_start_matches('_').to_ascii_uppercase()
}

/// Whether `name` is the serde name of an operation's arguments struct (generated, hidden).
pub(crate) fn is_args_struct(name: &str) -> bool {
    name.starts_with("__") && name.ends_with("_args")
}
