//! Compiles, for tonic, the `.proto` files keel exports: those of the `keel-lab peers` contracts
//! (`proto/adder.proto`, `proto/ticker.proto`: `keel::proto::file` of `keel_peer.rs`'s `Adder`
//! and `Ticker`; tonic's server is the `tonic` row, its client drives the `tonic` and
//! `keel-grpc` rows; `keel_peer.rs`'s test `the_committed_protos_are_what_the_contracts_export`
//! keeps them equal to what the contracts export), and those of the examples' Calculator and
//! RouteGuide (`examples/proto/`, checked against `keel::proto::file` by
//! `examples/tests/proto.rs`; the tonic servers of `tests/grpc_interop.rs`). protoc comes from
//! protoc-bin-vendored, so no system protoc is needed.

const PROTOS: [&str; 2] = ["proto/adder.proto", "proto/ticker.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // prost-build finds protoc through PROTOC.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&PROTOS, &["proto"])?;
    let examples = [
        "../../examples/proto/calculator.proto",
        "../../examples/proto/routeguide.proto",
    ];
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_protos(&examples, &["../../examples/proto"])?;
    for file in PROTOS.iter().chain(&examples) {
        println!("cargo:rerun-if-changed={file}");
    }
    Ok(())
}
