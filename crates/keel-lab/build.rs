//! Compiles the `.proto` files keel exports for the `keel-lab peers` contracts
//! (`proto/adder.proto`, `proto/ticker.proto`: `keel::proto::file` of `keel_peer.rs`'s `Adder`
//! and `Ticker`) for tonic, whose server (the `tonic` row) and client (the `tonic` and
//! `keel-grpc` rows) speak them. protoc comes from protoc-bin-vendored, so no system protoc is
//! needed. `keel_peer.rs`'s test `the_committed_protos_are_what_the_contracts_export` keeps the
//! files equal to what the contracts export.

const PROTOS: [&str; 2] = ["proto/adder.proto", "proto/ticker.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // prost-build finds protoc through PROTOC.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&PROTOS, &["proto"])?;
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
