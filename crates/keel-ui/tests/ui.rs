//! Compile-time checks of `#[keel::contract]`: every rule violation is reported at the
//! offending token with a clear message, and a valid contract compiles.
//!
//! Both are in the `slow` test group (`#[ignore]`: trybuild compiles keel and then each
//! case, minutes on a fresh clone): `cargo test --workspace` leaves them out, CI runs them, and
//! `cargo test -p keel-ui --test ui -- --ignored` runs them after a change to `keel-macros`
//! (`docs/testing.md`).

#[test]
#[ignore = "slow: trybuild compiles every case"]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}

#[test]
#[ignore = "slow: trybuild compiles every case"]
fn compile_pass() {
    let t = trybuild::TestCases::new();
    t.pass("tests/compile_pass/*.rs");
}
