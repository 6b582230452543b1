//! Streams of typed messages on every binding (`binding_matrix!`): server streaming, client
//! streaming and bidirectional calls, from async and blocking handlers and clients; a stream
//! that ends with a typed fault; the deadline covering the whole stream; a consumer that stops
//! reading stopping the producer (no unbounded queue); a consumer that drops the stream
//! stopping the producer; the message size limit both ways; and, over HTTP/1.1, the refusal of
//! a bidirectional call that names HTTP/2.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use keel::{MessageStream, Status};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
/// One message.
pub struct Item {
    /// Its place in its stream.
    pub seq: u64,
    /// Some text, to give it a size.
    pub text: String,
}

fn item(seq: u64) -> Item {
    Item {
        seq,
        text: format!("item {seq}"),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
/// The typed fault `fail_after` ends its stream with.
pub struct Oops {
    /// Items sent before it.
    pub after: u32,
}

/// Every kind of stream of messages.
#[keel::contract]
pub trait Streams {
    /// `n` items, seq 0..n (server streaming, async).
    async fn count(&self, n: u64) -> MessageStream<Item>;
    /// The same from a plain `fn`.
    fn count_blocking(&self, n: u64) -> MessageStream<Item>;
    /// The sum of the items' seqs (client streaming, async).
    async fn sum(&self, items: MessageStream<Item>) -> Result<u64, Status>;
    /// The same from a plain `fn`, reading with a blocking iterator.
    fn sum_blocking(&self, items: MessageStream<Item>) -> Result<u64, Status>;
    /// Each item back as it arrives, seq doubled (bidirectional).
    async fn echo(&self, items: MessageStream<Item>) -> MessageStream<Item>;
    /// `after` items, then the typed fault.
    async fn fail_after(&self, after: u32) -> Result<MessageStream<Item>, Oops>;
    /// Items of `size` bytes until the receiver goes; the host's `sent` counts them.
    async fn endless(&self, size: u32) -> MessageStream<Item>;
    /// `n` items, one every `every_ms`.
    async fn slow(&self, n: u64, every_ms: u64) -> MessageStream<Item>;
}

#[derive(Default, Clone)]
struct Shared {
    /// Items `endless` handed to its stream.
    sent: Arc<AtomicU64>,
    /// `endless`'s producer saw its receiver go.
    stopped: Arc<AtomicBool>,
}

struct Impl(Shared);

impl Streams for Impl {
    async fn count(&self, n: u64) -> MessageStream<Item> {
        MessageStream::from_iter((0..n).map(item))
    }

    fn count_blocking(&self, n: u64) -> MessageStream<Item> {
        let (tx, rx) = MessageStream::channel(4);
        std::thread::spawn(move || {
            for i in 0..n {
                if tx.blocking_send(item(i)).is_err() {
                    return;
                }
            }
        });
        rx
    }

    async fn sum(&self, mut items: MessageStream<Item>) -> Result<u64, Status> {
        let mut sum = 0;
        while let Some(i) = items.next().await {
            sum += i?.seq;
        }
        Ok(sum)
    }

    fn sum_blocking(&self, items: MessageStream<Item>) -> Result<u64, Status> {
        let mut sum = 0;
        for i in items.blocking_iter() {
            sum += i?.seq;
        }
        Ok(sum)
    }

    async fn echo(&self, mut items: MessageStream<Item>) -> MessageStream<Item> {
        let (tx, rx) = MessageStream::channel(4);
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

    async fn fail_after(&self, after: u32) -> Result<MessageStream<Item>, Oops> {
        if after == 0 {
            return Err(Oops { after });
        }
        let (tx, rx) = MessageStream::channel(4);
        tokio::spawn(async move {
            for i in 0..after {
                let _ = tx.send(item(i.into())).await;
            }
            tx.fault(Oops { after }).await;
        });
        Ok(rx)
    }

    async fn endless(&self, size: u32) -> MessageStream<Item> {
        let (tx, rx) = MessageStream::channel(4);
        let shared = self.0.clone();
        tokio::spawn(async move {
            let text = "x".repeat(size as usize);
            let mut seq = 0;
            loop {
                let next = Item {
                    seq,
                    text: text.clone(),
                };
                if tx.send(next).await.is_err() {
                    break;
                }
                seq += 1;
                shared.sent.fetch_add(1, Ordering::SeqCst);
            }
            shared.stopped.store(true, Ordering::SeqCst);
        });
        rx
    }

    async fn slow(&self, n: u64, every_ms: u64) -> MessageStream<Item> {
        let (tx, rx) = MessageStream::channel(1);
        tokio::spawn(async move {
            for i in 0..n {
                tokio::time::sleep(Duration::from_millis(every_ms)).await;
                if tx.send(item(i)).await.is_err() {
                    return;
                }
            }
        });
        rx
    }
}

fn start(b: Binding, shared: &Shared) -> keel::Host {
    start_with(b, shared, |h| h)
}

fn start_with(
    b: Binding,
    shared: &Shared,
    settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
) -> keel::Host {
    b.start(settings(
        keel::Host::builder().service(StreamsServer::new(Impl(shared.clone()))),
    ))
}

async fn collect(mut s: MessageStream<Item>) -> Result<Vec<Item>, keel::Error> {
    let mut all = Vec::new();
    while let Some(i) = s.next().await {
        all.push(i?);
    }
    Ok(all)
}

async fn server_streams(b: Binding) {
    let shared = Shared::default();
    let host = start(b, &shared);
    let c = StreamsClient::new(b.channel(host.url()));
    for n in [0, 1, 10_000] {
        let got = collect(c.count(n).await.unwrap()).await.unwrap();
        assert_eq!(got.len() as u64, n, "{b:?}");
        assert!(got.iter().enumerate().all(|(i, it)| *it == item(i as u64)));
    }
    let got = collect(c.count_blocking(500).await.unwrap()).await.unwrap();
    assert_eq!(got, (0..500).map(item).collect::<Vec<_>>(), "{b:?}");
    host.shutdown_async().await;
}

async fn client_streams(b: Binding) {
    let shared = Shared::default();
    let host = start(b, &shared);
    let c = StreamsClient::new(b.channel(host.url()));
    let n = 20_000u64;
    let want = n * (n - 1) / 2;
    let up = || MessageStream::from_iter((0..n).map(item));
    assert_eq!(c.sum(up()).await.unwrap(), want, "{b:?}");
    assert_eq!(c.sum_blocking(up()).await.unwrap(), want, "{b:?}");
    assert_eq!(c.sum(MessageStream::empty()).await.unwrap(), 0);
    // From a channel fed by another task, as an application produces them.
    let (tx, rx) = MessageStream::channel(2);
    let producer = tokio::spawn(async move {
        for i in 0..100 {
            tx.send(item(i)).await.unwrap();
        }
    });
    assert_eq!(c.sum(rx).await.unwrap(), 4950);
    producer.await.unwrap();
    host.shutdown_async().await;
}

/// Messages go both ways at once: each reply is read before the next request is sent.
async fn bidirectional_streams_interleave(b: Binding) {
    let shared = Shared::default();
    let host = start(b, &shared);
    let c = StreamsClient::new(b.channel(host.url()));
    let (tx, rx) = MessageStream::channel(1);
    tx.send(item(1)).await.unwrap();
    let mut replies = c.echo(rx).await.unwrap();
    for i in 1..=200 {
        let got = tokio::time::timeout(Duration::from_secs(10), replies.next())
            .await
            .unwrap_or_else(|_| panic!("{b:?}: no reply to message {i}"))
            .unwrap()
            .unwrap();
        assert_eq!(got.seq, i * 2, "{b:?}");
        if i < 200 {
            tx.send(item(i + 1)).await.unwrap();
        }
    }
    drop(tx);
    assert!(
        replies.next().await.is_none(),
        "{b:?}: ends after the requests do"
    );
    host.shutdown_async().await;
}

/// HTTP/1.1 cannot carry a bidirectional stream: the host refuses it with a status whose
/// message names HTTP/2, and the connection carries on for other calls.
async fn bidirectional_over_http1_is_refused_naming_http2(b: Binding) {
    let shared = Shared::default();
    let host = start(b, &shared);
    let c = StreamsClient::new(b.channel(host.url()));
    let e = c
        .echo(MessageStream::from_iter([item(1)]))
        .await
        .unwrap_err();
    assert_eq!(
        e.status_code(),
        Some(keel::StatusCode::Unimplemented),
        "{e}"
    );
    assert!(e.message().contains("HTTP/2"), "{e}");
    assert_eq!(collect(c.count(3).await.unwrap()).await.unwrap().len(), 3);
    host.shutdown_async().await;
}

/// A stream that ends with a typed fault: the items before it, then the fault as the
/// contract's type; a fault before the stream is the call's error.
async fn a_stream_ends_with_a_typed_fault(b: Binding) {
    let shared = Shared::default();
    let host = start(b, &shared);
    let c = StreamsClient::new(b.channel(host.url()));
    let mut s = c.fail_after(3).await.unwrap();
    for i in 0..3 {
        assert_eq!(s.next().await.unwrap().unwrap(), item(i), "{b:?}");
    }
    let e = s.next().await.unwrap().unwrap_err();
    assert_eq!(e.fault::<Oops>(), Some(Oops { after: 3 }), "{b:?}: {e}");
    assert!(s.next().await.is_none(), "nothing after the end");
    let e = c.fail_after(0).await.unwrap_err();
    assert_eq!(e.fault::<Oops>(), Some(Oops { after: 0 }), "{b:?}: {e}");
    host.shutdown_async().await;
}

/// The call's deadline covers the whole stream, not only its first answer.
async fn the_deadline_covers_the_whole_stream(b: Binding) {
    let shared = Shared::default();
    let host = start(b, &shared);
    let c = StreamsClient::new(b.channel(host.url())).with_deadline(Duration::from_millis(500));
    let started = Instant::now();
    let mut s = c.slow(1_000, 20).await.unwrap();
    let mut got = 0;
    let e = loop {
        match s.next().await {
            Some(Ok(_)) => got += 1,
            Some(Err(e)) => break e,
            None => panic!("{b:?}: a 20 s stream ended within a 500 ms deadline"),
        }
    };
    assert!(e.is_timeout(), "{b:?}: {e}");
    assert!(got > 0 && got < 1_000, "{b:?}: {got}");
    assert!(started.elapsed() < Duration::from_secs(10), "{b:?}");
    host.shutdown_async().await;
}

/// A consumer that stops reading stops the producer: what the host produced stays within the
/// windows and buffers between them, and does not grow while nobody reads. Reading again
/// resumes it; dropping the stream stops the producer for good.
async fn a_consumer_that_stops_reading_stops_the_producer(b: Binding) {
    let shared = Shared::default();
    let host = start(b, &shared);
    let c = StreamsClient::new(b.channel(host.url()));
    let size = 1024;
    let mut s = c.endless(size).await.unwrap();
    assert_eq!(s.next().await.unwrap().unwrap().seq, 0);
    // Let the producer fill every window and buffer on the way.
    let settled = || async {
        let mut last = shared.sent.load(Ordering::SeqCst);
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = shared.sent.load(Ordering::SeqCst);
            if now == last {
                return now;
            }
            last = now;
        }
    };
    let held = tokio::time::timeout(Duration::from_secs(20), settled())
        .await
        .unwrap_or_else(|_| panic!("{b:?}: the producer never stopped while nobody read"));
    // Windows: 4 MiB per HTTP/2 stream, 1 MiB at most for keel-wire; plus socket buffers and
    // the batch being written. Nothing near an unbounded queue.
    let bound = (16 << 20) / u64::from(size);
    assert!(held < bound, "{b:?}: {held} items produced with one read");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        shared.sent.load(Ordering::SeqCst),
        held,
        "{b:?}: grew while nobody read"
    );
    // Reading resumes it, in order.
    for want in 1..=held + 10 {
        assert_eq!(s.next().await.unwrap().unwrap().seq, want, "{b:?}");
    }
    assert!(shared.sent.load(Ordering::SeqCst) > held);
    // Dropping the stream stops the producer.
    drop(s);
    let stopped = async {
        while !shared.stopped.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .unwrap_or_else(|_| panic!("{b:?}: the producer kept going after the stream was dropped"));
    // The connection carries on.
    assert_eq!(collect(c.count(3).await.unwrap()).await.unwrap().len(), 3);
    host.shutdown_async().await;
}

/// A message over the receiver's limit ends the stream with `TooLarge` on either side, and the
/// connection carries on.
async fn a_message_over_the_limit_is_refused_both_ways(b: Binding) {
    let shared = Shared::default();
    let host = start_with(b, &shared, |h| h.max_message_size(64 * 1024));
    let c = StreamsClient::new(b.channel(host.url()));
    let big = Item {
        seq: 1,
        text: "x".repeat(100_000),
    };
    let e = c
        .sum(MessageStream::from_iter([item(0), big]))
        .await
        .unwrap_err();
    assert_eq!(
        e.status_code(),
        Some(keel::StatusCode::TooLarge),
        "{b:?}: {e}"
    );
    // The host's replies to a client with a small limit.
    let small = StreamsClient::new(b.channel_with(host.url(), |c| c.max_message_size(4096)));
    let mut s = small.endless(10_000).await.unwrap();
    let e = s.next().await.unwrap().unwrap_err();
    assert!(e.is_too_large(), "{b:?}: {e}");
    assert_eq!(collect(c.count(3).await.unwrap()).await.unwrap().len(), 3);
    host.shutdown_async().await;
}

/// A drain lets a stream that ends within the close timeout finish, and ends one still
/// flowing at the close timeout with `ShuttingDown` (keel-wire says so; HTTP cuts the stream
/// off), counting it as abandoned.
async fn a_drain_lets_streams_finish_then_ends_them(b: Binding) {
    let shared = Shared::default();
    let host = start_with(b, &shared, |h| h.close_timeout(Duration::from_secs(2)));
    let c = StreamsClient::new(b.channel(host.url()));
    let short = c.slow(5, 100).await.unwrap();
    let mut long = c.slow(1_000, 50).await.unwrap();
    let shutdown = tokio::spawn(host.shutdown_async());
    let short = collect(short).await.unwrap();
    assert_eq!(
        short.len(),
        5,
        "{b:?}: a stream that ends within the close timeout finishes"
    );
    let mut got = 0;
    let e = loop {
        match long.next().await {
            Some(Ok(_)) => got += 1,
            Some(Err(e)) => break e,
            None => panic!("{b:?}: a 50 s stream ended cleanly in a 2 s drain"),
        }
    };
    assert!(got >= 10, "{b:?}: it flowed during the drain ({got} items)");
    if b.is_wire() {
        assert!(e.is_shutting_down(), "{b:?}: {e}");
    }
    let report = shutdown.await.unwrap();
    assert!(report.abandoned_calls >= 1, "{b:?}: {report:?}");
}

/// A connection may have only so many reply streams open: one more is `Busy` and does not
/// run; when one ends, a new one may open. (HTTP/1.1 carries one call per connection.)
async fn reply_streams_per_connection_are_limited(b: Binding) {
    let shared = Shared::default();
    let host = start_with(b, &shared, |h| h.max_reply_streams_per_connection(3));
    let c = StreamsClient::new(b.channel(host.url()));
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut s = c.endless(16).await.unwrap();
        s.next().await.unwrap().unwrap();
        open.push(s);
    }
    let e = c.count(1).await.unwrap_err();
    assert!(e.is_busy(), "{b:?}: {e}");
    assert!(
        e.message().contains("max_reply_streams_per_connection"),
        "{e}"
    );
    assert_eq!(c.sum(MessageStream::from_iter([item(2)])).await.unwrap(), 2);
    drop(open.pop());
    let reopened = async {
        loop {
            match c.count(2).await {
                Ok(s) => return collect(s).await.unwrap(),
                Err(e) if e.is_busy() => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => panic!("{b:?}: {e}"),
            }
        }
    };
    let got = tokio::time::timeout(Duration::from_secs(10), reopened)
        .await
        .unwrap_or_else(|_| panic!("{b:?}: no stream opened after one ended"));
    assert_eq!(got.len(), 2);
    drop(open);
    host.shutdown_async().await;
}

/// The blocking client streams too: a plain `fn main` reads a server stream with an iterator.
fn the_blocking_client_streams(b: Binding) {
    let shared = Shared::default();
    let host = start(b, &shared);
    let c = StreamsBlockingClient::new(b.channel(host.url()));
    let got: Vec<Item> = c
        .count(100)
        .unwrap()
        .blocking_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got.len(), 100);
    assert_eq!(
        c.sum(MessageStream::from_iter((0..10).map(item))).unwrap(),
        45
    );
    host.shutdown();
}

binding_matrix! {
    [] {
        async fn server_streams;
        async fn client_streams;
        async fn a_stream_ends_with_a_typed_fault;
        async fn the_deadline_covers_the_whole_stream;
        async fn a_consumer_that_stops_reading_stops_the_producer;
        async fn a_message_over_the_limit_is_refused_both_ways;
        async fn a_drain_lets_streams_finish_then_ends_them;
        fn the_blocking_client_streams;
    }
    [multiplexed] {
        async fn bidirectional_streams_interleave;
        async fn reply_streams_per_connection_are_limited;
    }
}

mod http1_only {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bidirectional_is_refused_over_http1() {
        bidirectional_over_http1_is_refused_naming_http2(Binding::Http1).await;
    }
}
