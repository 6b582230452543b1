//! Compile-time checks of `#[keel::contract]`, in `tests/ui.rs` (trybuild): every rule violation
//! is reported at the offending token with a clear message (`tests/compile_fail/`), and valid
//! contracts compile and run (`tests/compile_pass/`). The library is empty: the crate exists so
//! that trybuild builds keel with only the feature the cases need (see its Cargo.toml).
