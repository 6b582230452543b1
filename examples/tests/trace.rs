//! The trace example, run as it is run by hand: its client and its host (a child process) report
//! their OpenTelemetry spans, and they form one trace, over keel-wire and over HTTP, with
//! `tracing-opentelemetry`'s default settings on both sides.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The trace example's binary, beside this test's (`cargo test` builds the examples); built
/// with the cargo that runs this test if it is not there (`cargo test --test trace`).
fn example() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(find_or_build).clone()
}

fn find_or_build() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile_dir
        .join("examples")
        .join(format!("trace{}", std::env::consts::EXE_SUFFIX));
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "keel-examples", "--example", "trace"]);
        if profile_dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "cargo build --example trace: {status}");
    }
    path
}

fn run(args: &[&str]) -> (Output, String) {
    let out = Command::new(example())
        .args(args)
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, stdout)
}

/// One printed span: (trace id, span id, parent span id, process, kind, name, tracestate).
type Row = (String, String, String, String, String, String, String);

/// The span rows of the example's tree (the lines after its header, up to the blank line).
fn rows(stdout: &str) -> Vec<Row> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("trace id"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // checkout has no rpc.code; a keel.call span has one after its tracestate.
            let s = |i: usize| f.get(i).copied().unwrap_or_default().to_string();
            (s(0), s(1), s(2), s(3), s(4), s(5), s(6))
        })
        .collect()
}

#[test]
fn client_and_host_spans_form_one_trace_on_every_binding() {
    for url in ["tcp://127.0.0.1:0", "http://127.0.0.1:0"] {
        let (out, stdout) = run(&["--url", url]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{url}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("OK: one trace"), "{url}:\n{stdout}");

        // The example checks the tree itself; check it here too, from what it printed.
        let rows = rows(&stdout);
        assert_eq!(
            rows.len(),
            7,
            "{url}: checkout, 3 client and 3 host spans\n{stdout}"
        );
        let root = &rows[0];
        assert_eq!(
            (&*root.2, &*root.3, &*root.5, &*root.6),
            ("0000000000000000", "client", "checkout", "example=checkout"),
            "{url}:\n{stdout}"
        );
        for row in &rows {
            assert_eq!(row.0, root.0, "{url}: one trace id\n{stdout}");
            assert_eq!(row.6, "example=checkout", "{url}: tracestate\n{stdout}");
        }
        for op in ["add", "multiply", "divide"] {
            let name = format!("Calculator/{op}");
            let client: Vec<&Row> = rows
                .iter()
                .filter(|r| r.5 == name && r.3 == "client")
                .collect();
            let host: Vec<&Row> = rows
                .iter()
                .filter(|r| r.5 == name && r.3 == "host")
                .collect();
            let ([client], [host]) = (&client[..], &host[..]) else {
                panic!("{url}: one client and one host span for {name}\n{stdout}");
            };
            assert_eq!(
                (&*client.4, &client.2),
                ("client", &root.1),
                "{url}\n{stdout}"
            );
            assert_eq!(
                (&*host.4, &host.2),
                ("server", &client.1),
                "{url}\n{stdout}"
            );
        }
    }
}
