//! The committed OpenAPI documents (`examples/openapi/*.json`) are what the contracts generate
//! today: a change to a contract (or to how keel describes one) shows up as a diff there.
//! Regenerate them with `KEEL_BLESS=1 cargo test -p keel-examples --test openapi`, or with the
//! examples' `--openapi` flag.

use std::path::Path;

use keel_examples::{accounts, calculator};

fn check(file: &str, generated: String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("openapi")
        .join(file);
    if std::env::var_os("KEEL_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        committed == generated,
        "{} differs from the document the contract generates; regenerate it with \
         `KEEL_BLESS=1 cargo test -p keel-examples --test openapi` and review the diff",
        path.display()
    );
}

#[test]
fn the_calculator_document_is_committed() {
    check("calculator.json", calculator::openapi());
}

#[test]
fn the_accounts_document_is_committed() {
    check("accounts.json", accounts::openapi());
}

#[test]
fn a_host_serves_the_document_of_its_contracts() {
    let host = calculator::http_host().unwrap();
    assert_eq!(host.openapi(), calculator::openapi());
    host.shutdown();
}
