//! gRPC-Web from a real browser: headless Chromium loads a page from another origin whose
//! script calls the examples' Calculator (unary, protobuf: `Add`, and `Divide`'s typed fault
//! read from the Trailers-Only headers CORS exposes) and the Ticker (server streaming,
//! `+json`, message by message, then the trailer frame) with gRPC-Web requests written by hand
//! in `fetch()`: binary framing, the `0x80` trailer frame parsed. A page from an origin the
//! host does not allow reads nothing.
//!
//! In the `external` test group (`#[ignore]`; docs/testing.md), skipped without Chromium unless
//! `KEEL_REQUIRE_CHROMIUM=1`: `cargo test -p keel-examples --test grpc_web_browser -- --ignored`.

#[allow(dead_code, unreachable_pub, missing_docs)]
#[path = "../../crates/keel/tests/common/browser.rs"]
mod browser;

use browser::{browse, chromium, new_origin, serve, REPORT_JS};
use keel_examples::{calculator, ticker};

/// The page's script: gRPC-Web by hand, then what it saw.
fn page(host_url: &str) -> String {
    format!(
        r#"<!doctype html><html><body><script>{REPORT_JS}
const host = "{host_url}";
// One length-prefixed message.
function frame(bytes) {{
  const out = new Uint8Array(5 + bytes.length);
  new DataView(out.buffer).setUint32(1, bytes.length);
  out.set(bytes, 5);
  return out;
}}
// A protobuf message of doubles, fields 1, 2, ...
function doubles(...values) {{
  const out = new Uint8Array(9 * values.length);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => {{ out[9 * i] = ((i + 1) << 3) | 1; view.setFloat64(9 * i + 1, v, true); }});
  return out;
}}
// Calls `method` with gRPC-Web; hands each message to onMessage as it arrives; resolves with
// the answer's head and the trailer frame's fields.
async function call(method, type, body, onMessage) {{
  const r = await fetch(host + "/keel_examples." + method, {{
    method: "POST",
    headers: {{"content-type": type, "x-grpc-web": "1", "x-user-agent": "hand-written", "grpc-timeout": "10S"}},
    body: frame(body),
  }});
  const reader = r.body.getReader();
  let buf = new Uint8Array(0);
  let trailers = null;
  for (;;) {{
    const chunk = await reader.read();
    if (chunk.done) break;
    const joined = new Uint8Array(buf.length + chunk.value.length);
    joined.set(buf); joined.set(chunk.value, buf.length);
    buf = joined;
    while (buf.length >= 5) {{
      const len = new DataView(buf.buffer, buf.byteOffset).getUint32(1);
      if (buf.length < 5 + len) break;
      const flags = buf[0], data = buf.slice(5, 5 + len);
      buf = buf.slice(5 + len);
      if (flags & 0x80) {{
        trailers = new TextDecoder().decode(data).split("\r\n").filter(l => l).join("; ");
      }} else {{
        onMessage(data);
      }}
    }}
  }}
  return {{status: r.status, type: r.headers.get("content-type"), grpcStatus: r.headers.get("grpc-status"),
           details: r.headers.get("grpc-status-details-bin") !== null, trailers}};
}}
(async () => {{
  let a = await call("Calculator/Add", "application/grpc-web+proto", doubles(1.5, 2.25), m => {{
    note("Add message: value " + new DataView(m.buffer).getFloat64(1, true));
  }});
  note("Add: " + a.status + " " + a.type + ", trailers " + a.trailers);
  a = await call("Calculator/Divide", "application/grpc-web+proto", doubles(22, 0), () => note("a message?"));
  note("Divide: grpc-status " + a.grpcStatus + " in the headers, details " + a.details + ", trailers " + a.trailers);
  const args = new TextEncoder().encode(JSON.stringify({{symbols: ["KEEL", "RUST"], count: 3, interval_ms: 1}}));
  a = await call("Ticker/Watch", "application/grpc-web+json", args, m => {{
    const q = JSON.parse(new TextDecoder().decode(m));
    note("quote " + q.seq + " " + q.symbol);
  }});
  note("Watch: " + a.type + ", trailers " + a.trailers);
}})().catch(e => note("failed: " + e.name)).finally(() => {{ note("done"); report(); }});
</script></body></html>"#
    )
}

#[test]
#[ignore = "external: runs Chromium"]
fn chromium_calls_the_calculator_and_the_ticker_with_grpc_web_through_cors() {
    let Some(browser) = chromium() else {
        eprintln!("SKIPPED: no chromium on PATH");
        return;
    };
    let (allowed, allowed_origin) = new_origin();
    let (refused, _) = new_origin();
    let cors = keel::http::Cors::allow_origins([allowed_origin.as_str()]).unwrap();
    let host = calculator::builder("http://127.0.0.1:0")
        .service(ticker::TickerServer::new(ticker::Quotes))
        .cors(cors)
        .start()
        .unwrap();
    let allowed = serve(allowed, page(host.url()));
    let refused = serve(refused, page(host.url()));
    let expected = [
        "Add message: value 3.75",
        "Add: 200 application/grpc-web+proto, trailers grpc-status: 0",
        "Divide: grpc-status 2 in the headers, details true, trailers null",
        "quote 0 KEEL",
        "quote 1 RUST",
        "quote 2 KEEL",
        "Watch: application/grpc-web+json, trailers grpc-status: 0",
        "done",
    ];
    assert_eq!(browse(browser, &allowed), expected.join("\n"));
    // Another origin: its preflight is refused, so the browser's fetch fails.
    assert_eq!(browse(browser, &refused), "failed: TypeError\ndone");
    host.shutdown();
}
