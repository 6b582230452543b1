//! The committed `.proto` files (`examples/proto/*.proto`) are what the contracts generate
//! today, and protoc accepts them without a warning. Regenerate them with
//! `KEEL_BLESS=1 cargo test -p keel-examples --test proto`, or with the examples' `--proto`
//! flag.

use std::path::{Path, PathBuf};
use std::process::Command;

use keel_examples::{accounts, calculator, routeguide, ticker};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("proto")
}

fn files() -> [(&'static str, String); 4] {
    [
        ("calculator.proto", calculator::proto()),
        ("accounts.proto", accounts::proto()),
        ("routeguide.proto", routeguide::proto()),
        ("ticker.proto", ticker::proto()),
    ]
}

#[test]
fn the_proto_files_are_committed() {
    for (file, generated) in files() {
        let path = dir().join(file);
        if std::env::var_os("KEEL_BLESS").is_some() {
            std::fs::write(&path, &generated).unwrap();
            continue;
        }
        let committed =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            committed == generated,
            "{} differs from the file the contract generates; regenerate it with \
             `KEEL_BLESS=1 cargo test -p keel-examples --test proto` and review the diff",
            path.display()
        );
    }
}

#[test]
fn protoc_accepts_every_generated_file_without_a_warning() {
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("protoc-bin-vendored has protoc");
    let scratch = std::env::temp_dir().join(format!("keel-proto-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for (file, generated) in files() {
        // Each file alone (they share a package): what a user compiles.
        let dir = scratch.join(file.trim_end_matches(".proto"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), &generated).unwrap();
        let out = Command::new(&protoc)
            .arg(format!("--proto_path={}", dir.display()))
            .arg(format!(
                "--descriptor_set_out={}",
                dir.join("set.pb").display()
            ))
            .arg(file)
            .output()
            .expect("protoc runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "protoc refused or warned about {file}:\n{stderr}\n{generated}"
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn the_calculator_maps_as_grpc_md_says() {
    let proto = calculator::proto();
    for line in [
        "syntax = \"proto3\";",
        "package keel_examples;",
        "service Calculator {",
        "rpc Add(AddRequest) returns (AddResponse);",
        "// Fails with a DivideByZero in grpc-status-details-bin (a google.rpc.Status).",
        "message AddRequest {\n  double a = 1;\n  double b = 2;\n}",
        "message AddResponse {\n  double value = 1;\n}",
    ] {
        assert!(proto.contains(line), "no {line:?} in\n{proto}");
    }
}

#[test]
fn the_route_guide_has_every_kind_of_call() {
    let proto = routeguide::proto();
    for line in [
        "rpc GetFeature(GetFeatureRequest) returns (Feature);",
        "rpc ListFeatures(ListFeaturesRequest) returns (stream Feature);",
        "rpc RecordRoute(stream Point) returns (RouteSummary);",
        "rpc RouteChat(stream RouteNote) returns (stream RouteNote);",
    ] {
        assert!(proto.contains(line), "no {line:?} in\n{proto}");
    }
}
