//! Compiles `proto/peers.proto` (the tonic side of `keel-lab peers`) with the protoc binary
//! protoc-bin-vendored ships, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // prost-build finds protoc through PROTOC.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/peers.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/peers.proto");
    Ok(())
}
