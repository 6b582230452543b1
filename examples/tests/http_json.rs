//! The Calculator over HTTP from outside Rust: the stdlib-only Python client in
//! `clients/calculator.py`, and curl over HTTP/2 (prior knowledge) and HTTP/1.1. Each test is
//! skipped, with a printed reason, when its tool is not installed (curl's fails instead under
//! `KEEL_REQUIRE_CURL=1`, as in CI).

use std::path::Path;
use std::process::{Command, Output};

use keel_examples::calculator;

/// Whether `tool --version` runs; prints why the test is skipped if not (fails instead for
/// curl under `KEEL_REQUIRE_CURL=1`, as in CI).
fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if tool == "curl" && std::env::var_os("KEEL_REQUIRE_CURL").is_some_and(|v| v == "1") {
            panic!("KEEL_REQUIRE_CURL=1 but no curl on PATH (apt-get install curl)");
        }
        eprintln!("SKIPPED: `{tool}` is not installed, so this test cannot run");
    }
    found
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_python_client_calls_every_operation() {
    if !have("python3") {
        return;
    }
    let host = calculator::http_host().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/calculator.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(host.url())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "calculator.py failed\n{stdout}\n{stderr}"
    );
    for line in [
        "Add(100, 15.99) = (200, 'ok', 115.99)",
        "Divide(22, 0) = (422, 'fault', {'code': 'fault', 'fault': {'dividend': 22.0}})",
        "all answers as expected",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in\n{stdout}");
    }
    // Five calls ran; the unknown operation was refused before admission.
    assert_eq!(host.stats().calls_total, 5);
    host.shutdown();
}

/// `curl` one call to `add`; returns (body, HTTP version, status code) as curl reports them.
fn curl_add(url: &str, version_flag: &str) -> (String, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", version_flag])
        .args(["-H", "content-type: application/json"])
        .args(["-d", r#"{"a": 1, "b": 2}"#])
        .args(["-w", "\n%{http_version} %{http_code}"])
        .arg(format!("{url}/Calculator/add"))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "curl {version_flag} failed: {stderr}");
    let (body, meta) = stdout.rsplit_once('\n').expect("curl's -w line");
    let (version, code) = meta.split_once(' ').expect("version and code");
    (body.to_string(), version.to_string(), code.to_string())
}

#[test]
fn curl_over_http2_prior_knowledge_and_http1() {
    if !have("curl") {
        return;
    }
    let host = calculator::http_host().unwrap();
    let h2 = curl_add(host.url(), "--http2-prior-knowledge");
    assert_eq!(h2, ("3.0".into(), "2".into(), "200".into()));
    let h1 = curl_add(host.url(), "--http1.1");
    assert_eq!(h1, ("3.0".into(), "1.1".into(), "200".into()));
    assert_eq!(host.stats().connections_opened, 2);
    host.shutdown();
}
