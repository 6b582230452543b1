//! The OpenAPI documents against standard tools from outside Rust, each run against a real host:
//!
//! - `openapi-spec-validator` (PyPI) validates the served and the committed documents as
//!   OpenAPI 3.1;
//! - `openapi-python-client` (PyPI) generates a Python client from the served document, and a
//!   script calls the Calculator with it, typed fault (422) included;
//! - `schemathesis` (PyPI) fuzzes a host of the examples' contracts from its served document:
//!   any 500, or any answer that does not match the document, fails.
//!
//! Each test is skipped, with a printed reason, when its tool is not on `PATH`, unless
//! `KEEL_REQUIRE_OPENAPI_TOOLS=1` (set by `.ci/run`, which installs the pinned versions), where
//! a missing tool fails it.
//!
//! All three are in the `external` test group (`#[ignore]`): `cargo test --workspace` leaves
//! them out, CI runs them, and `cargo test -p keel-examples --test openapi_tools -- --ignored`
//! runs them (`docs/testing.md`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use keel_examples::{accounts, calculator, transfer};

/// Whether `tool` is on `PATH`; prints why the test is skipped if not, or fails if CI requires
/// the tools.
fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        let required = std::env::var("KEEL_REQUIRE_OPENAPI_TOOLS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "KEEL_REQUIRE_OPENAPI_TOOLS=1 but `{tool}` is not on PATH (.ci/run installs it with pip)"
        );
        eprintln!("SKIPPED: `{tool}` is not on PATH, so this test cannot run");
    }
    found
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd` to its end, killing it after `limit`; its output, and whether it timed out.
fn run(cmd: &mut Command, limit: Duration) -> (Output, bool) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    (output, timed_out)
}

/// A fresh directory under the target directory (removed first if a run left it).
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The served document of `host`, fetched over HTTP with a plain GET (no keel client).
fn served_document(host: &keel::Host) -> String {
    let url = host.url().strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(url).unwrap();
    use std::io::Write;
    write!(
        stream,
        "GET /openapi.json HTTP/1.1\r\nhost: {url}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    body.to_string()
}

/// The host schemathesis fuzzes: the Calculator, the Accounts (behind the auth example's
/// bearer token, for every call of the host) and the streamed Transfer, over HTTP.
fn examples_host() -> keel::Host {
    accounts::builder("http://127.0.0.1:0", accounts::DEFAULT_TOKEN)
        .service(calculator::CalculatorServer::new(calculator::Calc))
        .service(transfer::TransferServer::new(transfer::TransferImpl))
        .start()
        .unwrap()
}

#[test]
#[ignore = "external: runs openapi-spec-validator"]
fn openapi_spec_validator_accepts_the_documents() {
    if !have("openapi-spec-validator") {
        return;
    }
    let host = examples_host();
    let dir = scratch("openapi-validator");
    let served = dir.join("served.json");
    let document = served_document(&host);
    assert_eq!(document, host.openapi());
    std::fs::write(&served, document).unwrap();
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi");
    let (out, timed_out) = run(
        Command::new("openapi-spec-validator")
            .arg(&served)
            .arg(committed.join("calculator.json"))
            .arg(committed.join("accounts.json")),
        Duration::from_secs(60),
    );
    let (stdout, stderr) = text(&out);
    println!("{stdout}{stderr}");
    assert!(
        out.status.success() && !timed_out,
        "openapi-spec-validator refused a document\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.matches(": OK").count(), 3, "{stdout}");
    host.shutdown();
}

/// The script that calls the Calculator through the generated client (package
/// `calculator_client`, as openapi-python-client names it from the document's title).
const CLIENT_SCRIPT: &str = r#"
import sys
from calculator_client import Client
from calculator_client.api.calculator import calculator_add, calculator_divide, calculator_multiply
from calculator_client.models import CalculatorAddArgs, CalculatorDivideArgs, CalculatorMultiplyArgs
from calculator_client.models import CalculatorDivideFault

client = Client(base_url=sys.argv[1], raise_on_unexpected_status=True)
with client as c:
    r = calculator_add.sync_detailed(client=c, body=CalculatorAddArgs(a=100, b=15.99))
    print("add", r.status_code.value, r.headers["keel-status"], r.parsed)
    r = calculator_multiply.sync_detailed(client=c, body=CalculatorMultiplyArgs(a=9, b=81.25))
    print("multiply", r.status_code.value, r.headers["keel-status"], r.parsed)
    r = calculator_divide.sync_detailed(client=c, body=CalculatorDivideArgs(a=22, b=0))
    fault = r.parsed
    assert isinstance(fault, CalculatorDivideFault), type(fault)
    print("divide", r.status_code.value, r.headers["keel-status"], fault.code, fault.fault.dividend)
    r = calculator_divide.sync_detailed(client=c, body=CalculatorDivideArgs(a=22, b=8), keel_deadline_ms=5000)
    print("divide", r.status_code.value, r.headers["keel-status"], r.parsed)
print("generated client: all answers as expected")
"#;

#[test]
#[ignore = "external: runs openapi-python-client"]
fn a_generated_python_client_calls_the_calculator() {
    if !have("openapi-python-client") || !have("python3") {
        return;
    }
    let host = calculator::http_host().unwrap();
    let dir = scratch("openapi-python-client");
    let document = dir.join("calculator.json");
    std::fs::write(&document, served_document(&host)).unwrap();
    let (out, timed_out) = run(
        Command::new("openapi-python-client")
            .args(["generate", "--meta", "none", "--overwrite", "--path"])
            .arg(&document)
            .arg("--output-path")
            .arg(dir.join("calculator_client")),
        Duration::from_secs(120),
    );
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success() && !timed_out,
        "openapi-python-client failed\n{stdout}\n{stderr}"
    );
    println!("{stdout}{stderr}");
    let script = dir.join("call.py");
    std::fs::write(&script, CLIENT_SCRIPT).unwrap();
    let (out, timed_out) = run(
        Command::new("python3")
            .arg(&script)
            .arg(host.url())
            .env("PYTHONPATH", &dir),
        Duration::from_secs(60),
    );
    let (stdout, stderr) = text(&out);
    println!("{stdout}{stderr}");
    assert!(
        out.status.success() && !timed_out,
        "the generated client's script failed\n{stdout}\n{stderr}"
    );
    for line in [
        "add 200 ok 115.99",
        "multiply 200 ok 731.25",
        "divide 422 fault fault 22.0",
        "divide 200 ok 2.75",
        "generated client: all answers as expected",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in\n{stdout}");
    }
    assert_eq!(host.stats().calls_total, 4);
    host.shutdown();
}

#[test]
#[ignore = "external: runs schemathesis"]
fn schemathesis_finds_no_error_and_no_answer_off_the_document() {
    if !have("schemathesis") {
        return;
    }
    let host = examples_host();
    let dir = scratch("schemathesis");
    // A bounded run by default (100 examples per operation: ~10 s on 2 cores); a longer hunt with
    // KEEL_SCHEMATHESIS_EXAMPLES=1000 KEEL_SCHEMATHESIS_SEED=<n>.
    let examples = std::env::var("KEEL_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "100".into());
    let seed = std::env::var("KEEL_SCHEMATHESIS_SEED").unwrap_or_else(|_| "16".into());
    // Any 5xx but 504 (see below), and any answer off the document; KEEL_SCHEMATHESIS_CHECKS
    // (e.g. `all`) asks for others.
    let checks = std::env::var("KEEL_SCHEMATHESIS_CHECKS").unwrap_or_else(|_| {
        "not_a_server_error,status_code_conformance,content_type_conformance,\
         response_headers_conformance,response_schema_conformance"
            .into()
    });
    // Every 5xx is a failure but 504, the answer to a call whose own `keel-deadline-ms` (which
    // schemathesis sets to 0 or 1 among others) ran out before it could start.
    let config = dir.join("schemathesis.toml");
    std::fs::write(
        &config,
        "[checks.not_a_server_error]\nexpected-statuses = [\"2xx\", \"3xx\", \"4xx\", \"504\"]\n",
    )
    .unwrap();
    let (out, timed_out) = run(
        Command::new("schemathesis")
            .arg("--config-file")
            .arg(&config)
            .arg("run")
            .arg(format!("{}/openapi.json", host.url()))
            .args([
                "--checks",
                &checks,
                "--max-examples",
                &examples,
                "--seed",
                &seed,
                "--workers",
                "2",
                "--request-timeout",
                "20",
                "--header",
            ])
            .arg(format!("authorization: Bearer {}", accounts::DEFAULT_TOKEN))
            // Its `n` bytes would be as many as a fuzzer picks: a stream of exabytes.
            .args(["--exclude-operation-id", "Transfer_download"])
            .arg("--report-dir")
            .arg(&dir)
            // Its cache (`.schemathesis/`) goes there too, not into the source tree.
            .current_dir(&dir)
            .env("NO_COLOR", "1")
            .env("SCHEMATHESIS_HOOKS", ""),
        Duration::from_secs(240),
    );
    let (stdout, stderr) = text(&out);
    println!("{stdout}{stderr}");
    assert!(!timed_out, "schemathesis ran over 240 s");
    assert!(
        out.status.success(),
        "schemathesis found failures (exit {:?})",
        out.status.code()
    );
    host.shutdown();
}
