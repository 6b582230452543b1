//! CORS over real sockets: a browser's preflight and call as bytes on the wire (every header
//! checked), and the same from a real browser: headless Chromium loads a page from another
//! origin whose script calls the host with `fetch`.
//!
//! The Chromium test needs Debian's `chromium` on PATH; it is skipped without it, unless
//! `KEEL_REQUIRE_CHROMIUM=1` (CI sets it), when a missing browser fails it. It is in the
//! `external` test group (`#[ignore]`): `cargo test --workspace` leaves it out, CI runs it, and
//! `cargo test -p keel --test cors -- --ignored` runs it (`docs/testing.md`).
#![cfg(feature = "http")]
#![allow(missing_docs)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::browser::{browse, chromium, new_origin, serve, REPORT_JS};
use common::*;

/// One HTTP/1.1 exchange on a new connection (`Connection: close`): status, headers (names
/// lower-cased), body.
fn exchange(addr: &str, head: &str, body: &str) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "{head}\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
    }
    let mut rest = String::new();
    r.read_to_string(&mut rest).unwrap();
    (status, headers, rest)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn cors_host(cors: Option<keel::http::Cors>) -> (keel::Host, String) {
    let host = host_with(
        |h| match cors {
            Some(c) => h.cors(c),
            None => h,
        },
        "http://127.0.0.1:0",
    );
    let addr = host.url().strip_prefix("http://").unwrap().to_owned();
    (host, addr)
}

const PREFLIGHT: &str = "OPTIONS /Probe/echo HTTP/1.1\r\naccess-control-request-method: POST\r\naccess-control-request-headers: content-type, x-user";

#[test]
fn preflights_and_calls_on_the_wire() {
    let page = "http://127.0.0.1:8000";
    let cors = keel::http::Cors::allow_origins([page]).unwrap();
    let (host, addr) = cors_host(Some(cors));

    // The preflight of an allowed origin: 204, and what the call may do.
    let (status, h, _) = exchange(&addr, &format!("{PREFLIGHT}\r\norigin: {page}"), "");
    assert_eq!(status, 204, "{h:?}");
    assert_eq!(header(&h, "access-control-allow-origin"), Some(page));
    assert_eq!(
        header(&h, "access-control-allow-methods"),
        Some("GET, POST")
    );
    assert_eq!(
        header(&h, "access-control-allow-headers"),
        Some("content-type, x-user")
    );
    assert_eq!(header(&h, "access-control-max-age"), Some("600"));

    // Another origin: 403, nothing allowed.
    let (status, h, body) = exchange(
        &addr,
        &format!("{PREFLIGHT}\r\norigin: http://evil.test"),
        "",
    );
    assert_eq!(status, 403, "{h:?}");
    assert_eq!(header(&h, "access-control-allow-origin"), None);
    assert!(body.contains("permission_denied"), "{body}");

    // The call itself from the allowed origin: answered, readable by the page.
    let call = "POST /Probe/echo HTTP/1.1\r\ncontent-type: application/json";
    let (status, h, body) = exchange(&addr, &format!("{call}\r\norigin: {page}"), r#"{"s":"hi"}"#);
    assert_eq!((status, body.as_str()), (200, r#""hi""#));
    assert_eq!(header(&h, "access-control-allow-origin"), Some(page));
    assert_eq!(header(&h, "vary"), Some("origin"));
    // A fault's status header is exposed to the page.
    let check = "POST /Probe/check HTTP/1.1\r\ncontent-type: application/json";
    let (status, h, _) = exchange(&addr, &format!("{check}\r\norigin: {page}"), r#"{"v":-1}"#);
    assert_eq!(status, 422);
    let exposed = header(&h, "access-control-expose-headers").unwrap_or_default();
    assert!(exposed.contains("keel-status"), "{h:?}");

    // From another origin, or without one (curl): served, but nothing for a browser.
    for origin in ["\r\norigin: http://evil.test", ""] {
        let (status, h, _) = exchange(&addr, &format!("{call}{origin}"), r#"{"s":"hi"}"#);
        assert_eq!(status, 200);
        assert_eq!(header(&h, "access-control-allow-origin"), None, "{h:?}");
    }
    host.shutdown();

    // CORS off (the default): a preflight is a wrong method, as before.
    let (host, addr) = cors_host(None);
    let (status, h, _) = exchange(&addr, &format!("{PREFLIGHT}\r\norigin: {page}"), "");
    assert_eq!(status, 405, "{h:?}");
    assert_eq!(header(&h, "access-control-allow-origin"), None);
    host.shutdown();
}

/// The page's script: a JSON call with a metadata header (so the browser sends a preflight),
/// its answer reported.
fn page_calling(host_url: &str) -> String {
    format!(
        r#"<!doctype html><html><body><script>{REPORT_JS}
fetch("{host_url}/Probe/echo", {{
  method: "POST",
  headers: {{"content-type": "application/json", "x-user": "ada"}},
  body: JSON.stringify({{s: "hello from the browser"}})
}}).then(async r => {{
  note("status " + r.status + ": " + await r.json());
}}).catch(e => {{
  note("failed: " + e);
}}).finally(report);
</script></body></html>"#
    )
}

#[test]
#[ignore = "external: runs Chromium"]
fn a_page_from_another_origin_calls_the_host_in_chromium() {
    let Some(browser) = chromium() else {
        eprintln!("skipped: no chromium on PATH");
        return;
    };
    // Two pages on origins of their own; the host allows the first.
    let (allowed, allowed_origin) = new_origin();
    let (refused, _) = new_origin();
    let (host, _) = cors_host(Some(
        keel::http::Cors::allow_origins([allowed_origin.as_str()]).unwrap(),
    ));
    let url = host.url().to_string();
    let allowed = serve(allowed, page_calling(&url));
    let refused = serve(refused, page_calling(&url));

    assert_eq!(
        browse(browser, &allowed),
        "status 200: hello from the browser"
    );
    let text = browse(browser, &refused);
    assert!(text.starts_with("failed: TypeError"), "{text}");
    host.shutdown();
}
