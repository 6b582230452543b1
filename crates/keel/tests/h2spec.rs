//! HTTP/2 conformance: h2spec (github.com/summerwind/h2spec, 2.2.1, the version `.ci/run`
//! installs) against an `http://` host (h2c with prior knowledge, on the port that also speaks
//! HTTP/1.1) and an `https://` host (ALPN `h2`). Every case of every section must pass; a
//! failure names the cases and what h2spec expected of them. One case races with the host's
//! answer and is run again alone if it fails ([`RACES`]).
//!
//! h2spec is a Go program, taken from `PATH`: `.ci/run` builds it from the Go module proxy with
//! its dependencies pinned (by hand, `go install
//! github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible` builds the same cases). A test
//! whose h2spec is missing skips with a note, unless `KEEL_REQUIRE_H2SPEC=1` (CI sets it), where
//! it fails. Both are in the `external` test group (`#[ignore]`):
//! `cargo test -p keel --test h2spec -- --ignored` runs them (`docs/testing.md`). Run with
//! `--nocapture` to see h2spec's report.
#![cfg(all(feature = "http", feature = "tls"))]
#![allow(missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;

/// The number of cases h2spec 2.2.1 runs against a server (its `generic`, `http2` and `hpack`
/// sections, without the strict ones).
const CASES: usize = 145;

/// The h2spec on PATH, or `None` (the caller skips) when it is missing and
/// `KEEL_REQUIRE_H2SPEC` is not `1`; with it, a missing h2spec fails the test.
fn h2spec_binary() -> Option<PathBuf> {
    let bin = PathBuf::from("h2spec");
    let runs = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if runs {
        return Some(bin);
    }
    let required = std::env::var("KEEL_REQUIRE_H2SPEC").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "KEEL_REQUIRE_H2SPEC=1 but h2spec is not on PATH (go install \
         github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible, or see .ci/run)"
    );
    println!(
        "SKIPPED: h2spec is not on PATH (go install \
         github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible; KEEL_REQUIRE_H2SPEC=1 \
         makes this a failure)"
    );
    None
}

/// A fresh directory for one run's report.
fn scratch_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "keel-h2spec-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One case of h2spec's JUnit report.
#[derive(Debug)]
struct Case {
    /// The section's id and the case's number in it, as h2spec prints them (`http2/8.1.2.6/1`).
    id: String,
    /// The case's description.
    desc: String,
    /// What h2spec expected and saw, for a case that failed; `skipped` for one skipped.
    failure: Option<String>,
}

/// The cases of h2spec's JUnit report (`-j`): `<testsuite package="http2/8.1.2.6" ...>` holding
/// `<testcase classname="description">`, with a `<failure>`, `<error>` or `<skipped>` child when
/// the case did not pass. Cases are numbered from 1 in each suite, as h2spec's own output does.
fn parse_report(xml: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for suite in xml.split("<testsuite ").skip(1) {
        let package = attribute(suite, "package").unwrap_or_default();
        for (n, case) in suite.split("<testcase ").skip(1).enumerate() {
            let head_end = case.find('>').unwrap_or(case.len());
            let head = &case[..head_end];
            let body = if head.ends_with('/') {
                ""
            } else {
                &case[head_end..case.find("</testcase>").unwrap_or(case.len())]
            };
            let failure = ["<failure", "<error"]
                .iter()
                .find_map(|tag| body.find(tag).map(|at| unescape(inner_text(&body[at..]))))
                .or_else(|| body.contains("<skipped").then(|| "skipped".to_string()));
            cases.push(Case {
                id: format!("{package}/{}", n + 1),
                desc: unescape(&attribute(head, "classname").unwrap_or_default()),
                failure,
            });
        }
    }
    cases
}

/// The value of `name="..."` in an element's head.
fn attribute(head: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let from = head.find(&key)? + key.len();
    let len = head[from..].find('"')?;
    Some(head[from..from + len].to_string())
}

/// The text of the element that `element` starts with.
fn inner_text(element: &str) -> &str {
    let from = element.find('>').map_or(element.len(), |i| i + 1);
    let to = element[from..]
        .find("</")
        .map_or(element.len(), |i| from + i);
    &element[from..to]
}

/// XML's five escapes, and the numeric ones Go writes for newlines and tabs.
fn unescape(s: &str) -> String {
    s.replace("&#xA;", "\n")
        .replace("&#x9;", "\t")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Cases whose outcome depends on how h2spec's frames cross the host's answer: the host may
/// answer a request on its head (404) and finish its side of the stream before h2spec's next
/// frames arrive, and h2 then no longer checks what they say (HTTP.md, "HTTP/2 conformance").
/// One that fails is run again alone, up to [`RERUNS`] times, and passes if one of those passes:
/// that shows the host refuses what the case sends whenever it reads it before answering.
const RACES: &[&str] = &["http2/6.9.1/3"];

/// How many times a case of [`RACES`] that failed is run again alone.
const RERUNS: usize = 10;

/// Runs h2spec against `url`'s port (`tls`: over TLS, not verifying the test certificate), all
/// its cases or those `specs` names (`http2/6.9.1/3`), and returns them.
fn run_h2spec(bin: &Path, url: &str, tls: bool, specs: &[&str]) -> Vec<Case> {
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
        .unwrap_or_else(|| panic!("no port in {url}"));
    let dir = scratch_dir();
    let report = dir.join("report.xml");
    let mut cmd = Command::new(bin);
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-j"])
        .arg(&report);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    cmd.args(specs);
    let out = cmd.output().expect("h2spec runs");
    // h2spec exits non-zero when a case fails: the report says which.
    println!(
        "h2spec against {url}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let xml = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("h2spec wrote no report ({e}); status {}", out.status));
    let _ = std::fs::remove_dir_all(&dir);
    parse_report(&xml)
}

/// Runs each failed case of [`RACES`] again alone, and marks it passed if one run of it passes.
fn settle_races(bin: &Path, url: &str, tls: bool, cases: &mut [Case]) {
    let racing = cases
        .iter_mut()
        .filter(|c| c.failure.is_some() && RACES.contains(&c.id.as_str()));
    for case in racing {
        for run in 1..=RERUNS {
            let again = run_h2spec(bin, url, tls, &[&case.id]);
            if again.len() == 1 && again[0].failure.is_none() {
                println!(
                    "{} passed when run again alone (run {run}): it races with the host's \
                     answer (HTTP.md, \"HTTP/2 conformance\")",
                    case.id
                );
                case.failure = None;
                break;
            }
        }
    }
}

/// Asserts that h2spec ran all its cases and every one passed.
fn assert_all_pass(cases: &[Case], url: &str) {
    let failed: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            c.failure
                .as_ref()
                .map(|f| format!("{} {}\n{f}", c.id, c.desc))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "h2spec against {url}: {} of {} cases did not pass:\n\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n\n")
    );
    assert_eq!(cases.len(), CASES, "h2spec against {url}: cases run");
    println!("h2spec against {url}: {} of {CASES} passed", cases.len());
}

#[test]
#[ignore = "external: runs h2spec"]
fn h2spec_passes_against_h2c_on_the_port_that_also_speaks_http1() {
    let Some(bin) = h2spec_binary() else { return };
    let host = host_with(|h| h, "http://127.0.0.1:0");
    let mut cases = run_h2spec(&bin, host.url(), false, &[]);
    settle_races(&bin, host.url(), false, &mut cases);
    assert_all_pass(&cases, host.url());
}

#[test]
#[ignore = "external: runs h2spec"]
fn h2spec_passes_against_https_with_alpn_h2() {
    let Some(bin) = h2spec_binary() else { return };
    let host = host_with(
        |h| h.tls(test_cert().server_tls().expect("server TLS")),
        "https://127.0.0.1:0",
    );
    let mut cases = run_h2spec(&bin, host.url(), true, &[]);
    settle_races(&bin, host.url(), true, &mut cases);
    assert_all_pass(&cases, host.url());
}

#[test]
fn the_report_parser_reads_passes_failures_and_skips() {
    let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="3.5. HTTP/2 Connection Preface" package="http2/3.5" id="3.5" tests="2" skipped="0" failures="1" errors="0">
    <testcase package="http2/3.5" classname="Sends client connection preface" time="0.0010"></testcase>
    <testcase package="http2/3.5" classname="Sends invalid connection preface" time="2.0010">
      <failure>Expect:&#xA;Connection closed&#xA;Actual:&#xA;Timeout</failure>
    </testcase>
  </testsuite>
  <testsuite name="4.2. Maximum Table Size" package="hpack/4.2" id="4.2" tests="1" skipped="1" failures="0" errors="0">
    <testcase package="hpack/4.2" classname="Sends a &#34;dynamic table size update&#34;" time="0.0000">
      <skipped></skipped>
    </testcase>
  </testsuite>
</testsuites>"#;
    let cases = parse_report(xml);
    let ids: Vec<&str> = cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["http2/3.5/1", "http2/3.5/2", "hpack/4.2/1"]);
    assert_eq!(cases[0].failure, None);
    assert_eq!(
        cases[1].failure.as_deref(),
        Some("Expect:\nConnection closed\nActual:\nTimeout")
    );
    assert_eq!(cases[2].desc, "Sends a \"dynamic table size update\"");
    assert_eq!(cases[2].failure.as_deref(), Some("skipped"));
}
