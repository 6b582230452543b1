//! Compile-time checks of `#[keel::contract]`: every rule violation is reported at the
//! offending token with a clear message, and a valid contract compiles.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}

#[test]
fn compile_pass() {
    let t = trybuild::TestCases::new();
    t.pass("tests/compile_pass/*.rs");
}
