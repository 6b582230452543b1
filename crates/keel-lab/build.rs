//! Compiles `proto/peers.proto` (the tonic side of `keel-lab peers`), and the `.proto` files keel
//! exports for the examples' Calculator and RouteGuide (`examples/proto/`, checked against
//! `keel::proto::file` by `examples/tests/proto.rs`; the tonic servers of
//! `tests/grpc_interop.rs`), with the protoc binary protoc-bin-vendored ships, so no system
//! protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // prost-build finds protoc through PROTOC.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/peers.proto"], &["proto"])?;
    let examples = [
        "../../examples/proto/calculator.proto",
        "../../examples/proto/routeguide.proto",
    ];
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_protos(&examples, &["../../examples/proto"])?;
    println!("cargo:rerun-if-changed=proto/peers.proto");
    for file in examples {
        println!("cargo:rerun-if-changed={file}");
    }
    Ok(())
}
