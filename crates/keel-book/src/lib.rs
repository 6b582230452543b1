//! The keel guide's code, tested: each chapter of `book/src` is the documentation of a module
//! here, so `cargo test --workspace` (`cargo test -p keel-book --doc` alone) compiles and runs
//! every Rust block in it. The modules exist only when rustdoc collects doc tests; the crate is
//! empty otherwise, and not published.

/// Includes `book/src/$file` as the doc tests of a module named `$name`.
macro_rules! chapters {
    ($($name:ident => $file:literal,)*) => {
        $(
            #[cfg(doctest)]
            #[doc = include_str!(concat!("../../../book/src/", $file))]
            mod $name {}
        )*
    };
}

chapters! {
    introduction => "introduction.md",
    getting_started => "getting-started.md",
    contracts => "contracts.md",
    hosting => "hosting.md",
    clients => "clients.md",
    errors => "errors.md",
    metadata => "metadata.md",
    limits => "limits.md",
    streaming => "streaming.md",
    grpc => "grpc.md",
    grpc_tools => "grpc-tools.md",
    observability => "observability.md",
    deployment => "deployment.md",
    evolution => "evolution.md",
    performance => "performance.md",
    from_wcf => "from-wcf.md",
    from_tonic => "from-tonic.md",
}
