//! Streams of messages as clients nobody here wrote read them over HTTP (HTTP.md, "Streams of
//! messages"): headless Chromium, from a page of another origin allowed by CORS, reads a server
//! stream with `fetch()` and `response.body.getReader()` (NDJSON) and with `EventSource`
//! (Server-Sent Events, `GET ?args=`), message by message, and sees a stream that fails midway
//! end with its error; a page from an origin the host does not allow reads nothing. curl reads
//! NDJSON and SSE as they come (`-N`), sees a failing stream end with its error line,
//! posts an NDJSON body to a client-streaming operation, gets 501 for a bidirectional one over
//! HTTP/1.1, and streams both ways at once over h2c. And, with no tool at all, the bytes of a
//! failing NDJSON stream on an HTTP/1.1 connection: its error line, then the body's end.
//!
//! That a reader gets each message as it is produced is shown by cause, not by timing: the
//! stream `gated` produces its first message, then waits until someone opens its gate, which
//! the reader does only once it has read that first message (the page calls `open_gate`; the
//! curl tests open it themselves once curl has printed it). A host that held messages back
//! would never see the gate opened (the stream then fails after 30 s, and the test with it).
//! `open_gate` answers how many messages the stream had produced: 1.
//!
//! The Chromium tests need Debian's `chromium` on PATH and are in the `external` test group
//! (`#[ignore]`; `cargo test -p keel --test web_streams -- --ignored`; `docs/testing.md`):
//! skipped without the browser unless `KEEL_REQUIRE_CHROMIUM=1` (CI sets it). The curl tests
//! are in the default group, as the other curl tests are: skipped without curl unless
//! `KEEL_REQUIRE_CURL=1` (CI sets it).
#![cfg(feature = "http")]
#![allow(missing_docs)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::browser::{browse, chromium, new_origin, serve, Page, REPORT_JS};
use keel::{ByteStream, MessageStream, Status, StatusCode};
use serde::{Deserialize, Serialize};

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Item {
    /// Its place in its stream.
    pub seq: u64,
    /// Some text.
    pub text: String,
}

fn item(seq: u64) -> Item {
    Item {
        seq,
        text: format!("item {seq}"),
    }
}

/// An item as an NDJSON line (without its newline), as the host writes it.
fn line(seq: u64) -> String {
    serde_json::to_string(&item(seq)).unwrap()
}

/// The typed fault `fail_after` ends its stream with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Oops {
    /// Items sent before it.
    pub after: u32,
}

/// What the browser and curl call.
#[keel::contract]
pub trait Feed {
    /// Item 0, then, once [`open_gate`](Feed::open_gate) is called, items 1 to `n - 1`. Idempotent, so
    /// an `EventSource` may GET it.
    #[keel(idempotent)]
    async fn gated(&self, n: u64) -> MessageStream<Item>;
    /// Lets the `gated` stream that waits go on: how many items it had produced by then.
    async fn open_gate(&self) -> u64;
    /// `n` items at once.
    #[keel(idempotent)]
    async fn count(&self, n: u64) -> MessageStream<Item>;
    /// `after` items, then the typed fault.
    #[keel(idempotent)]
    async fn fail_after(&self, after: u32) -> Result<MessageStream<Item>, Oops>;
    /// The sum of the items' seqs (client streaming).
    async fn sum(&self, items: MessageStream<Item>) -> Result<u64, Status>;
    /// Each item back as it arrives, seq doubled (bidirectional).
    async fn echo(&self, items: MessageStream<Item>) -> MessageStream<Item>;
    /// Bytes that fail before the first one.
    async fn broken(&self) -> ByteStream;
}

/// How long `gated` waits for its gate before it fails its stream.
const GATE_LIMIT: Duration = Duration::from_secs(30);

/// What a host's `Feed` shares with its test.
#[derive(Debug, Default)]
struct Gate {
    /// Items the last `gated` call produced so far.
    produced: AtomicU64,
    opened: tokio::sync::Notify,
    /// Calls of `gated`, `count` and `fail_after`: a reconnecting `EventSource` would call again.
    gated_calls: AtomicU64,
    count_calls: AtomicU64,
    fail_calls: AtomicU64,
}

impl Gate {
    /// Lets the waiting `gated` stream go on; how many items it had produced by then.
    fn open(&self) -> u64 {
        let produced = self.produced.load(Ordering::SeqCst);
        self.opened.notify_one();
        produced
    }
}

struct FeedImpl(Arc<Gate>);

impl Feed for FeedImpl {
    async fn gated(&self, n: u64) -> MessageStream<Item> {
        let gate = self.0.clone();
        gate.gated_calls.fetch_add(1, Ordering::SeqCst);
        gate.produced.store(0, Ordering::SeqCst);
        let (tx, rx) = MessageStream::channel(1);
        tokio::spawn(async move {
            for i in 0..n {
                if i == 1
                    && tokio::time::timeout(GATE_LIMIT, gate.opened.notified())
                        .await
                        .is_err()
                {
                    let msg = "nobody opened the gate within 30 s: item 0 did not reach the \
                               reader while the rest waited";
                    tx.abort(Status::new(StatusCode::Internal, msg)).await;
                    return;
                }
                // Counted before it is sent: `open_gate` never sees an item the reader may have.
                gate.produced.fetch_add(1, Ordering::SeqCst);
                if tx.send(item(i)).await.is_err() {
                    return;
                }
            }
        });
        rx
    }

    async fn open_gate(&self) -> u64 {
        self.0.open()
    }

    async fn count(&self, n: u64) -> MessageStream<Item> {
        self.0.count_calls.fetch_add(1, Ordering::SeqCst);
        MessageStream::from_iter((0..n).map(item))
    }

    async fn fail_after(&self, after: u32) -> Result<MessageStream<Item>, Oops> {
        self.0.fail_calls.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = MessageStream::channel(4);
        tokio::spawn(async move {
            for i in 0..after {
                let _ = tx.send(item(i.into())).await;
            }
            tx.fault(Oops { after }).await;
        });
        Ok(rx)
    }

    async fn sum(&self, mut items: MessageStream<Item>) -> Result<u64, Status> {
        let mut sum = 0;
        while let Some(i) = items.next().await {
            sum += i?.seq;
        }
        Ok(sum)
    }

    async fn echo(&self, mut items: MessageStream<Item>) -> MessageStream<Item> {
        let (tx, rx) = MessageStream::channel(1);
        tokio::spawn(async move {
            while let Some(i) = items.next().await {
                let Ok(mut i) = i else { return };
                i.seq *= 2;
                if tx.send(i).await.is_err() {
                    return;
                }
            }
        });
        rx
    }

    async fn broken(&self) -> ByteStream {
        let (tx, rx) = ByteStream::channel(1);
        tx.abort("broken before the first byte");
        rx
    }
}

/// A host of `Feed` on `http://127.0.0.1:0`, with `cors` if given.
fn feed_host(cors: Option<keel::http::Cors>) -> (keel::Host, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let builder = keel::Host::builder()
        .service(FeedServer::new(FeedImpl(gate.clone())))
        .endpoint("http://127.0.0.1:0");
    let builder = match cors {
        Some(c) => builder.cors(c),
        None => builder,
    };
    (builder.start().expect("host starts"), gate)
}

// ---------------------------------------------------------------------------------------------
// On the wire

/// A failing NDJSON stream as bytes on an HTTP/1.1 connection, without any tool: the
/// messages and the error line in the chunked body, which then ends as any body does (its
/// last chunk), the error line being the stream's end.
#[test]
fn an_ndjson_stream_that_fails_ends_with_its_error_line_on_the_wire() {
    let (host, _gate) = feed_host(None);
    let addr = host.url().strip_prefix("http://").unwrap().to_owned();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = r#"{"after": 2}"#;
    let req = format!(
        "POST /Feed/fail_after HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, chunked) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    // Decode the chunks: every one complete, up to the last (empty) one.
    let mut rest = chunked;
    let mut decoded = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size, 16).unwrap();
        if size == 0 {
            assert_eq!(after, "\r\n", "nothing after the last chunk\n{raw}");
            break;
        }
        decoded.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap();
    }
    let want = format!(
        "{}\n{}\n{}\n",
        line(0),
        line(1),
        r#"{"error":{"code":"fault","fault":{"after":2}}}"#
    );
    assert_eq!(decoded, want);
    host.shutdown();
}

// ---------------------------------------------------------------------------------------------
// curl

/// How long a running curl gets for its next line before the test fails: reached only when a
/// line never comes.
const LINE_LIMIT: Duration = Duration::from_secs(30);

/// A curl running in the background, its output read line by line as it prints it.
struct Curl {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    args: Vec<String>,
}

impl Curl {
    /// Starts `curl -sS -N <args>` (`-N`: each piece of the answer printed as it arrives); its
    /// stdin is a pipe when `stdin` is true. Not `--max-time`: with it, curl 7.88 holds what
    /// it reads from a non-blocking stdin (`-T .`) until more arrives. A curl the test gives up
    /// on is killed when dropped.
    fn start(args: &[&str], stdin: bool) -> Curl {
        let mut child = Command::new("curl")
            .args(["-sS", "-N"])
            .args(args)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l.trim_end_matches('\r').to_owned()).is_err() {
                    break;
                }
            }
        });
        Curl {
            stdin: child.stdin.take(),
            child,
            lines,
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// The next line curl prints.
    fn line(&self) -> String {
        self.lines
            .recv_timeout(LINE_LIMIT)
            .unwrap_or_else(|e| panic!("curl {:?}: no next line ({e})", self.args))
    }

    /// The response head curl printed (`-i`): the status code, and the headers (names
    /// lower-cased).
    fn head(&self) -> (u16, Vec<(String, String)>) {
        let status = self.line();
        let code = status.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let l = self.line();
            if l.is_empty() {
                return (code, headers);
            }
            let (k, v) = l.split_once(':').unwrap();
            headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
        }
    }

    /// Sends `text` on curl's stdin.
    fn send(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin and waits for curl to exit: the lines it printed since the last read, its
    /// exit status, and what it wrote to stderr.
    fn finish(mut self) -> (Vec<String>, ExitStatus, String) {
        drop(self.stdin.take());
        let mut rest = Vec::new();
        loop {
            match self.lines.recv_timeout(LINE_LIMIT) {
                Ok(l) => rest.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!(
                    "curl {:?}: did not finish ({e}); printed {rest:?}",
                    self.args
                ),
            }
        }
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        (rest, status, stderr)
    }
}

impl Drop for Curl {
    fn drop(&mut self) {
        // A test that failed midway leaves no curl behind.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `GET /Feed/{op}?args=<args, URL-encoded>` on `host`, as an `EventSource` would call it.
fn get_url(host: &keel::Host, op: &str, args: &str) -> String {
    let query: String = url_encode(args);
    format!("{}/Feed/{op}?args={query}", host.url())
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const VERSIONS: [&str; 2] = ["--http1.1", "--http2-prior-knowledge"];

#[test]
fn curl_reads_ndjson_and_sse_streams_as_they_come() {
    if !common::have_curl() {
        return;
    }
    let (host, gate) = feed_host(None);
    for version in VERSIONS {
        // NDJSON, for a POST with a JSON body.
        let url = format!("{}/Feed/gated", host.url());
        let c = Curl::start(&[version, "-i", "--json", r#"{"n": 3}"#, &url], false);
        let (code, h) = c.head();
        assert_eq!(code, 200, "{version}: {h:?}");
        assert_eq!(header(&h, "content-type"), Some("application/x-ndjson"));
        assert_eq!(header(&h, "keel-status"), Some("ok"));
        assert_eq!(c.line(), line(0), "{version}");
        // curl printed item 0 while the handler waited for the gate with nothing more made.
        assert_eq!(gate.open(), 1, "{version}");
        let (rest, status, stderr) = c.finish();
        assert_eq!(rest, [line(1), line(2)], "{version}");
        assert!(status.success(), "{version}: {status} {stderr}");

        // Server-Sent Events, for a GET as an EventSource sends it.
        let url = get_url(&host, "gated", r#"{"n": 3}"#);
        let c = Curl::start(
            &[version, "-i", "-H", "accept: text/event-stream", &url],
            false,
        );
        let (code, h) = c.head();
        assert_eq!(code, 200, "{version}: {h:?}");
        assert_eq!(header(&h, "content-type"), Some("text/event-stream"));
        assert_eq!(header(&h, "cache-control"), Some("no-cache"));
        assert_eq!(c.line(), format!("data: {}", line(0)), "{version}");
        assert_eq!(c.line(), "", "{version}");
        assert_eq!(gate.open(), 1, "{version}");
        let (rest, status, stderr) = c.finish();
        let want = [
            format!("data: {}", line(1)),
            String::new(),
            format!("data: {}", line(2)),
            String::new(),
            "event: end".into(),
            "data: {}".into(),
            String::new(),
        ];
        assert_eq!(rest, want, "{version}");
        assert!(status.success(), "{version}: {status} {stderr}");
    }
    assert_eq!(gate.gated_calls.load(Ordering::SeqCst), 4);
    host.shutdown();
}

#[test]
fn curl_sees_a_stream_that_fails_midway_end_with_its_error() {
    if !common::have_curl() {
        return;
    }
    let (host, _gate) = feed_host(None);
    for version in VERSIONS {
        let url = format!("{}/Feed/fail_after", host.url());
        let c = Curl::start(&[version, "--json", r#"{"after": 2}"#, &url], false);
        let (lines, status, stderr) = c.finish();
        let want = [
            line(0),
            line(1),
            r#"{"error":{"code":"fault","fault":{"after":2}}}"#.to_string(),
        ];
        assert_eq!(lines, want, "{version}: {stderr}");
        // The error line is the stream's end: the answer itself ends as any does.
        assert!(status.success(), "{version}: {status} {stderr}");

        let url = get_url(&host, "fail_after", r#"{"after": 2}"#);
        let c = Curl::start(&[version, "-H", "accept: text/event-stream", &url], false);
        let (lines, status, stderr) = c.finish();
        let want = [
            format!("data: {}", line(0)),
            String::new(),
            format!("data: {}", line(1)),
            String::new(),
            "event: error".into(),
            r#"data: {"code":"fault","fault":{"after":2}}"#.into(),
            String::new(),
        ];
        assert_eq!(lines, want, "{version}: {stderr}");
        assert!(status.success(), "{version}: {status} {stderr}");
    }
    host.shutdown();
}

#[test]
fn curl_posts_an_ndjson_body_to_a_client_stream() {
    if !common::have_curl() {
        return;
    }
    let (host, _gate) = feed_host(None);
    let url = format!("{}/Feed/sum", host.url());
    // `\r\n`, an empty line, and a last line without its newline.
    let body = format!("{}\r\n\n{}\n{}", line(1), line(2), line(39));
    for version in VERSIONS {
        // A complete body (content-length), and one streamed from stdin as it is read
        // (HTTP/1.1: chunked).
        for upload in [["--data-binary", "@-"], ["-T", "-"]] {
            let mut c = Curl::start(
                &[
                    version,
                    "-X",
                    "POST",
                    "-H",
                    "content-type: application/x-ndjson",
                    upload[0],
                    upload[1],
                    "-w",
                    "\n%{http_code}",
                    &url,
                ],
                true,
            );
            c.send(&body);
            let (lines, status, stderr) = c.finish();
            assert!(status.success(), "{version} {upload:?}: {status} {stderr}");
            assert_eq!(lines, ["42", "200"], "{version} {upload:?}");
        }
    }
    host.shutdown();
}

#[test]
fn curl_gets_501_for_a_bidirectional_stream_over_http1_and_streams_both_ways_over_h2c() {
    if !common::have_curl() {
        return;
    }
    let (host, _gate) = feed_host(None);
    let url = format!("{}/Feed/echo", host.url());
    let c = Curl::start(
        &[
            "--http1.1",
            "-H",
            "content-type: application/x-ndjson",
            "--data-binary",
            &line(1),
            "-w",
            "\n%{http_code}",
            &url,
        ],
        false,
    );
    let (lines, status, stderr) = c.finish();
    assert!(status.success(), "{status} {stderr}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1], "501");
    let body: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(body["code"], "unimplemented", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("HTTP/2"),
        "{body}"
    );

    // h2c: `-T .` uploads stdin as it comes without waiting on it (curl's non-blocking stdin),
    // so each answer is printed while the request body is still open: the next line is sent
    // only after the answer to the last one was read.
    let mut c = Curl::start(
        &[
            "--http2-prior-knowledge",
            "-X",
            "POST",
            "-H",
            "content-type: application/x-ndjson",
            "-T",
            ".",
            &url,
        ],
        true,
    );
    for seq in 1..=3 {
        c.send(&format!("{}\n", line(seq)));
        let got: Item = serde_json::from_str(&c.line()).unwrap();
        assert_eq!(got.seq, seq * 2);
    }
    let (rest, status, stderr) = c.finish();
    assert!(rest.is_empty(), "{rest:?}");
    assert!(status.success(), "{status} {stderr}");
    host.shutdown();
}

#[test]
fn curl_sees_a_byte_stream_that_fails_before_its_first_byte_cut_off() {
    if !common::have_curl() {
        return;
    }
    let (host, _gate) = feed_host(None);
    let url = format!("{}/Feed/broken", host.url());
    for version in VERSIONS {
        // Nothing was written before the failure: over HTTP/2 no frame is waiting to wake the
        // connection, and the reset still comes (`finish` gives up after 30 s).
        let c = Curl::start(&[version, "--json", "{}", &url], false);
        let (lines, status, stderr) = c.finish();
        assert!(lines.is_empty(), "{version}: {lines:?}");
        assert!(!status.success(), "{version}: {status} {stderr}");
    }
    host.shutdown();
}

// ---------------------------------------------------------------------------------------------
// Chromium

/// What every page's script starts with, after [`REPORT_JS`] (`note`, `report`): `post` calls
/// an operation with `fetch`, `lines` reads an NDJSON answer as it arrives, `events` reads an
/// `EventSource`.
fn script_prelude(host_url: &str) -> String {
    format!(
        r#"{REPORT_JS}
const host = "{host_url}";
function post(op, args) {{
  return fetch(host + "/Feed/" + op, {{
    method: "POST",
    headers: {{"content-type": "application/json"}},
    body: JSON.stringify(args),
  }});
}}
// Reads an NDJSON body chunk by chunk as the browser receives it, handing each line to onLine
// (awaited before the next is read); resolves "end" at the body's end, "cut: <error>" if it
// broke off.
async function lines(response, onLine) {{
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {{
    let chunk;
    try {{ chunk = await reader.read(); }} catch (e) {{ return "cut: " + e.name; }}
    if (chunk.done) return buf ? "end, with an unfinished line " + buf : "end";
    buf += chunk.value;
    for (let i; (i = buf.indexOf("\n")) >= 0; ) {{
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line) await onLine(line);
    }}
  }}
}}
// Reads GET /Feed/{{op}}?args=... with an EventSource, handing each message's data to onMessage;
// resolves with how it ended: the `end` event, the host's `error` event (closing the
// EventSource on either), or the EventSource giving up. A connection error after which the
// EventSource would reconnect is noted.
function events(op, args, onMessage) {{
  return new Promise(resolve => {{
    const es = new EventSource(host + "/Feed/" + op + "?args=" + encodeURIComponent(JSON.stringify(args)));
    es.onmessage = e => onMessage(e.data);
    es.addEventListener("end", e => {{ es.close(); resolve("end " + e.data); }});
    es.onerror = e => {{
      if (e.data !== undefined) {{ es.close(); resolve("error event " + e.data); return; }}
      const state = es.readyState;
      if (state === EventSource.CLOSED) {{ resolve("EventSource failed (closed)"); return; }}
      note("connection error, readyState " + state + ": the EventSource would reconnect");
      es.close();
      resolve("closed after a connection error");
    }};
  }});
}}
"#
    )
}

/// A page whose script is the prelude and `body` (an async function's body), then notes
/// `done` and reports.
fn page(host_url: &str, body: &str) -> String {
    format!(
        r#"<!doctype html><html><body><script>{}
(async () => {{
{body}
}})().catch(e => note("failed: " + e)).finally(() => {{ note("done"); report(); }});
</script></body></html>"#,
        script_prelude(host_url)
    )
}

/// Reads `gated` with fetch, opening its gate after the first message, then `fail_after`.
const FETCH_NDJSON: &str = r#"
let r = await post("gated", {n: 4});
note(r.status + " " + r.headers.get("content-type") + ", keel-status " + r.headers.get("keel-status"));
note(await lines(r, async line => {
  const m = JSON.parse(line);
  note("message " + m.seq);
  if (m.seq === 0) {
    const opened = await post("open_gate", {});
    note("opened the gate after " + await opened.json() + " produced");
  }
}));
r = await post("fail_after", {after: 2});
note(r.status + " " + r.headers.get("content-type"));
note(await lines(r, async line => note(line)));
"#;

/// Reads the same with EventSource.
const EVENT_SOURCE: &str = r#"
let opened = null;
note(await events("gated", {n: 4}, data => {
  const m = JSON.parse(data);
  note("message " + m.seq);
  // The host's answer to `open_gate` and message 1 race to the page: the answer is noted at the end.
  if (m.seq === 0) post("open_gate", {}).then(r => r.json()).then(n => opened = n);
}));
await new Promise(resolve => { const wait = () => opened === null ? setTimeout(wait, 10) : resolve(); wait(); });
note("opened the gate after " + opened + " produced");
note(await events("fail_after", {after: 2}, data => note(data)));
"#;

/// From an origin the host does not allow: the same calls, which the browser must refuse.
const REFUSED: &str = r#"
try {
  const r = await post("count", {n: 3});
  note("fetch read an answer: " + r.status);
} catch (e) {
  note("fetch failed: " + e.name);
}
let got = 0;
note(await events("count", {n: 3}, () => got++));
note("EventSource messages read: " + got);
"#;

/// Two origins, the host allowing the first; the page of `script` served on each.
struct Pages {
    browser: &'static str,
    allowed: Page,
    refused: Page,
    host: keel::Host,
    gate: Arc<Gate>,
}

fn pages(script: &str) -> Option<Pages> {
    let Some(browser) = chromium() else {
        eprintln!("skipped: no chromium on PATH");
        return None;
    };
    let (allowed, allowed_origin) = new_origin();
    let (refused, _) = new_origin();
    let cors = keel::http::Cors::allow_origins([allowed_origin.as_str()]).unwrap();
    let (host, gate) = feed_host(Some(cors));
    let allowed = serve(allowed, page(host.url(), script));
    let refused = serve(refused, page(host.url(), script));
    Some(Pages {
        browser,
        allowed,
        refused,
        host,
        gate,
    })
}

#[test]
#[ignore = "external: runs Chromium"]
fn chromium_reads_an_ndjson_stream_with_fetch_message_by_message() {
    let Some(p) = pages(FETCH_NDJSON) else { return };
    let expected = [
        "200 application/x-ndjson, keel-status ok".to_string(),
        "message 0".into(),
        // The page saw message 0 while the host had produced nothing more.
        "opened the gate after 1 produced".into(),
        "message 1".into(),
        "message 2".into(),
        "message 3".into(),
        "end".into(),
        "200 application/x-ndjson".into(),
        line(0),
        line(1),
        // The error line reaches the page as the stream's last line.
        r#"{"error":{"code":"fault","fault":{"after":2}}}"#.into(),
        "end".into(),
        "done".into(),
    ];
    assert_eq!(browse(p.browser, &p.allowed), expected.join("\n"));
    p.host.shutdown();
}

#[test]
#[ignore = "external: runs Chromium"]
fn chromium_reads_a_stream_with_event_source_and_closes_at_its_end() {
    let Some(p) = pages(EVENT_SOURCE) else { return };
    let expected = [
        "message 0".to_string(),
        "message 1".into(),
        "message 2".into(),
        "message 3".into(),
        // The `end` event came before the connection closed, so the page closed the
        // EventSource instead of it reconnecting.
        "end {}".into(),
        "opened the gate after 1 produced".into(),
        line(0),
        line(1),
        r#"error event {"code":"fault","fault":{"after":2}}"#.into(),
        "done".into(),
    ];
    assert_eq!(browse(p.browser, &p.allowed), expected.join("\n"));
    // One call each: no EventSource came back for more.
    assert_eq!(p.gate.gated_calls.load(Ordering::SeqCst), 1);
    assert_eq!(p.gate.fail_calls.load(Ordering::SeqCst), 1);
    p.host.shutdown();
}

#[test]
#[ignore = "external: runs Chromium"]
fn a_page_from_an_origin_not_allowed_reads_no_stream_in_chromium() {
    let Some(p) = pages(REFUSED) else { return };
    // The page's own origin would read it (the same script, allowed).
    assert_eq!(
        browse(p.browser, &p.allowed),
        "fetch read an answer: 200\nend {}\nEventSource messages read: 3\ndone"
    );
    let calls_allowed = p.gate.count_calls.load(Ordering::SeqCst);
    assert_eq!(calls_allowed, 2);
    assert_eq!(
        browse(p.browser, &p.refused),
        "fetch failed: TypeError\nEventSource failed (closed)\nEventSource messages read: 0\ndone"
    );
    // The POST was stopped at its preflight; the EventSource's GET, a request any page may
    // send, ran (which is why only idempotent operations may be called so), its answer hidden
    // from the page, and was not sent again.
    assert_eq!(p.gate.count_calls.load(Ordering::SeqCst), calls_allowed + 1);
    p.host.shutdown();
}
