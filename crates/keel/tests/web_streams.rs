//! Streams of messages as clients nobody here wrote read them over HTTP (HTTP.md, "Streams of
//! messages"). Here, with no tool at all, the bytes of a failing NDJSON stream on an HTTP/1.1
//! connection: its error line, then no last chunk.
#![cfg(feature = "http")]
#![allow(missing_docs)]

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
/// messages and the error line in the chunked body, then the connection closes without the
/// last chunk.
#[test]
fn an_ndjson_stream_that_fails_ends_with_its_error_line_then_a_cut_on_the_wire() {
    let (host, _gate) = feed_host(None);
    let addr = host.url().strip_prefix("http://").unwrap().to_owned();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = r#"{"after": 2}"#;
    let req = format!(
        "POST /Feed/fail_after HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, chunked) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    // Decode the chunks: every one complete, and no last (empty) chunk.
    let mut rest = chunked;
    let mut decoded = String::new();
    while !rest.is_empty() {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size, 16).unwrap();
        assert_ne!(size, 0, "the last chunk: a complete answer\n{raw}");
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
