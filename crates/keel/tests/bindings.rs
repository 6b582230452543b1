//! The binding matrix: every behaviour test runs once per binding, over real sockets (the
//! `binding_matrix!` below; a new binding is one line in `common/matrix.rs`).
//!
//! Covered per binding: every operation kind, typed faults, where handlers run, deadlines,
//! 1,000 concurrent calls, reconnect, drain, the close timeout, nothing lost in a drain of
//! 1,000 calls, no call failing while a new host takes over a draining host's address, a client
//! killed mid-call, panic isolation, size limits,
//! unknown services, the throttle, the blocking client, and streamed transfer (up, down, both,
//! stopped early, many in sequence on one connection).

mod common;

use std::time::{Duration, Instant};

use common::*;
use keel::ByteStream;

/// Larger than the default 4 MiB message limit: only a stream can carry it.
const BIG: u64 = 5 * 1024 * 1024 + 12_345;

/// `n` bytes of the test pattern as a lazily produced upload, in chunks of `chunk` bytes.
fn upload_of(n: u64, chunk: u64) -> ByteStream {
    ByteStream::from_iter(
        (0..n.div_ceil(chunk))
            .map(move |i| pattern_bytes(i * chunk, (n - i * chunk).min(chunk) as usize)),
    )
}

async fn streamed_upload(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    let want = pattern_checksum(BIG);
    let (tag, len, sum) = c
        .upload("big".into(), upload_of(BIG, 100_000))
        .await
        .unwrap();
    assert_eq!((tag.as_str(), len, sum), ("big", want.len, want.sum));
    // Uneven, tiny and empty chunks arrive intact.
    let (_, len, sum) = c.upload("odd".into(), upload_of(10_007, 7)).await.unwrap();
    let want_odd = pattern_checksum(10_007);
    assert_eq!((len, sum), (want_odd.len, want_odd.sum));
    let (_, len, _) = c.upload("empty".into(), ByteStream::empty()).await.unwrap();
    assert_eq!(len, 0);
    // A plain `fn` operation reads its upload with blocking reads on the pool.
    assert_eq!(
        c.upload_sync(upload_of(BIG, 65_536)).await.unwrap(),
        (want.len, want.sum)
    );
    host.shutdown_async().await;
}

/// A streamed upload whose call ends stops: the client takes no more chunks from the caller's
/// stream and drops it, so the producer feeding it learns the receiver is gone, and the
/// connection carries the next call. Both ways a call ends early: its deadline passes (the host
/// knows the deadline too), and the caller drops it (only the client knows).
async fn an_upload_whose_call_ends_stops_being_sent(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    let endless = || {
        let (tx, rx) = ByteStream::channel(2);
        let producer = tokio::spawn(async move {
            let mut sent = 0u64;
            while tx.send(vec![7u8; 16 * 1024]).await.is_ok() {
                sent += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sent
        });
        (rx, producer)
    };
    let stopped = |producer: tokio::task::JoinHandle<u64>| async move {
        let sent = tokio::time::timeout(Duration::from_secs(10), producer)
            .await
            .unwrap_or_else(|_| {
                panic!("{b:?}: the upload was still read 10 s after its call ended")
            })
            .unwrap();
        assert!(sent > 0, "{b:?}");
    };

    let (rx, producer) = endless();
    let short = c.with_deadline(Duration::from_millis(300));
    let err = short.upload("endless".into(), rx).await.unwrap_err();
    assert!(err.is_timeout(), "{b:?}: {err}");
    stopped(producer).await;

    let (rx, producer) = endless();
    let call = tokio::spawn({
        let c = c.clone();
        async move { c.upload("dropped".into(), rx).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    call.abort();
    stopped(producer).await;

    assert_eq!(c.echo("after".into()).await.unwrap(), "after");
    host.shutdown_async().await;
}

async fn streamed_download(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    let want = pattern_checksum(BIG);
    assert_eq!(
        checksum(c.download(BIG, 100_000).await.unwrap())
            .await
            .unwrap(),
        want
    );
    assert_eq!(
        checksum(c.download_sync(BIG).await.unwrap()).await.unwrap(),
        want
    );
    assert_eq!(
        checksum(c.download(0, 10).await.unwrap()).await.unwrap(),
        Checksum::default()
    );
    // A fallible streamed operation: the fault instead of a stream, or the stream.
    let err = c.download_checked(-3).await.unwrap_err();
    assert_eq!(err.fault::<Negative>(), Some(Negative(-3)), "{err}");
    let s = c.download_checked(5000).await.unwrap();
    assert_eq!(checksum(s).await.unwrap(), pattern_checksum(5000));
    host.shutdown_async().await;
}

async fn streamed_both_ways(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    let echoed = c.echo_stream(upload_of(BIG, 50_000)).await.unwrap();
    assert_eq!(checksum(echoed).await.unwrap(), pattern_checksum(BIG));
    // Several at once on one client.
    let calls: Vec<_> = (0..4u64)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let n = 300_000 + i * 1000;
                let s = c.echo_stream(upload_of(n, 8192)).await.unwrap();
                assert_eq!(checksum(s).await.unwrap(), pattern_checksum(n));
            })
        })
        .collect();
    for h in calls {
        h.await.unwrap();
    }
    host.shutdown_async().await;
}

async fn streams_stopped_early_keep_the_connection(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    // The caller stops reading a download after its first chunk.
    let mut s = c.download(2 * 1024 * 1024, 16_384).await.unwrap();
    assert!(s.next().await.unwrap().is_ok());
    drop(s);
    // The handler stops reading an upload after a prefix; the reply still arrives.
    let got = c
        .upload_prefix(upload_of(2 * 1024 * 1024, 16_384), 100_000)
        .await
        .unwrap();
    assert!(got >= 100_000, "{got}");
    // The same connection serves what comes next.
    assert_eq!(c.echo("after".into()).await.unwrap(), "after");
    let s = c.download(1000, 100).await.unwrap();
    assert_eq!(checksum(s).await.unwrap(), pattern_checksum(1000));
    if b.multiplexed() {
        // Streams of any size stop without touching the connection.
        let mut s = c.download(1 << 40, 65_536).await.unwrap();
        assert!(s.next().await.unwrap().is_ok());
        drop(s);
        let got = c
            .upload_prefix(upload_of(1 << 40, 65_536), 1_000_000)
            .await
            .unwrap();
        assert!(got >= 1_000_000, "{got}");
        assert_eq!(c.echo("still".into()).await.unwrap(), "still");
    }
    assert_eq!(host.stats().connections_opened, 1, "{:?}", host.stats());
    host.shutdown_async().await;
}

async fn many_sequential_streamed_calls_use_one_connection(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    // More than 100 of each kind: h2 closes a connection that received more than 100 empty
    // DATA frames, which an echoed stream used to send once per call.
    for i in 0..330u64 {
        let n = 1000 + i * 37;
        match i % 3 {
            0 => {
                let (_, len, _) = c.upload(i.to_string(), upload_of(n, 500)).await.unwrap();
                assert_eq!(len, n);
            }
            1 => {
                let s = c.download(n, 400).await.unwrap();
                assert_eq!(checksum(s).await.unwrap().len, n);
            }
            _ => {
                let s = c.echo_stream(upload_of(n, 300)).await.unwrap();
                assert_eq!(checksum(s).await.unwrap().len, n);
            }
        }
    }
    let stats = host.stats();
    assert_eq!(stats.connections_opened, 1, "{stats:?}");
    assert_eq!(stats.calls_total, 330);
    host.shutdown_async().await;
}

common::binding_matrix! {
    [] {
        async fn every_operation_kind;
        async fn typed_faults_arrive_as_the_same_type;
        async fn sync_ops_run_on_the_pool_and_async_ops_on_the_runtime;
        async fn per_call_deadline_fails_promptly_as_a_timeout;
        async fn a_thousand_concurrent_calls;
        async fn reconnects_after_the_server_restarts;
        async fn shutdown_drains_calls_in_flight_and_refuses_new_ones;
        async fn calls_still_running_at_the_close_timeout_are_answered;
        async fn a_panicking_handler_faults_only_its_caller;
        async fn oversized_messages_get_a_clear_error_and_nothing_else_breaks;
        async fn unknown_service_is_reported;
        async fn the_throttle_queues_then_refuses_with_busy;
        async fn a_queued_call_whose_deadline_passes_never_runs;
        async fn streamed_upload;
        async fn an_upload_whose_call_ends_stops_being_sent;
        async fn streamed_download;
        async fn streamed_both_ways;
        async fn streams_stopped_early_keep_the_connection;
        async fn many_sequential_streamed_calls_use_one_connection;
        async fn graceful_shutdown_with_a_thousand_calls_in_flight_loses_none;
        async fn a_client_killed_mid_call_frees_its_slot_and_cancels_the_handler;
        async fn a_client_whose_connection_closes_mid_call_frees_its_slot;
        fn the_blocking_client_needs_no_runtime;
    }
    [stream_socket] {
        async fn a_new_host_taking_over_a_draining_hosts_address_loses_no_call;
    }
}

async fn every_operation_kind(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    assert_eq!(c.echo("hi".into()).await.unwrap(), "hi");
    assert_eq!(c.echo_async("there".into()).await.unwrap(), "there");
    assert_eq!(c.check(5).await.unwrap(), 5);
    assert_eq!(c.check_async(6).await.unwrap(), 6);
    for v in [1, 2, 3] {
        c.record(v).await.unwrap();
    }
    // One-way calls are acknowledged on receipt; the recording runs on the pool soon after.
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = c.recorded().await.unwrap();
        if seen.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    seen.sort();
    assert_eq!(seen, vec![1, 2, 3]);
    host.shutdown_async().await;
}

async fn typed_faults_arrive_as_the_same_type(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    for err in [
        c.check(-4).await.unwrap_err(),
        c.check_async(-4).await.unwrap_err(),
    ] {
        assert!(err.is_fault(), "{err}");
        assert_eq!(err.fault::<Negative>(), Some(Negative(-4)));
        assert_eq!(err.status_code(), Some(keel::StatusCode::Fault));
    }
    host.shutdown_async().await;
}

async fn sync_ops_run_on_the_pool_and_async_ops_on_the_runtime(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    let sync = c.thread_info().await.unwrap();
    assert!(
        sync.name.starts_with("keel-handler"),
        "sync op ran on {sync:?}"
    );
    assert!(!sync.in_runtime, "sync op ran inside a runtime: {sync:?}");
    let async_ = c.async_thread_info().await.unwrap();
    assert!(
        async_.name.starts_with("keel-host"),
        "async op ran on {async_:?}"
    );
    assert!(async_.in_runtime);
    host.shutdown_async().await;
}

async fn per_call_deadline_fails_promptly_as_a_timeout(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    for slow in [true, false] {
        let started = Instant::now();
        let quick = c.with_deadline(Duration::from_millis(50));
        let err = if slow {
            quick.sleep_ms(1000).await.unwrap_err()
        } else {
            quick.sleep_async_ms(1000).await.unwrap_err()
        };
        let took = started.elapsed();
        assert!(err.is_timeout(), "{err}");
        // Generous bound: the point is not waiting for the 1 s operation.
        assert!(
            took < Duration::from_millis(900),
            "timed out after {took:?}"
        );
    }
    // The channel's default deadline applies to other calls, and the connection still works.
    assert_eq!(c.echo("after".into()).await.unwrap(), "after");
    host.shutdown_async().await;
}

async fn a_thousand_concurrent_calls(b: Binding) {
    // One connection may have a fair share of the throttle in flight (512 by default): let
    // this one have all thousand.
    let host = b.host_with(|h| h.max_calls_per_connection(1000));
    let c = b.client(&host).await;
    let calls = (0..1000u64).map(|i| {
        let c = c.clone();
        tokio::spawn(async move {
            let s = i.to_string();
            let got = if i % 2 == 0 {
                c.echo(s.clone()).await
            } else {
                c.echo_async(s.clone()).await
            };
            assert_eq!(got.unwrap(), s);
        })
    });
    for h in calls.collect::<Vec<_>>() {
        h.await.unwrap();
    }
    let stats = host.stats();
    if b.multiplexed() {
        assert_eq!(stats.connections_opened, 1, "{stats:?}");
    }
    assert_eq!(stats.calls_total, 1000);
    host.shutdown_async().await;
}

async fn reconnects_after_the_server_restarts(b: Binding) {
    let host = b.host();
    let url = host.url().to_string();
    let c = ProbeClient::new(b.channel(&url));
    assert_eq!(c.echo("one".into()).await.unwrap(), "one");
    host.shutdown_async().await;
    // The host is gone: the client notices the closed connection; calls fail as connection errors.
    assert!(eventually(|| !c.channel().is_connected()).await);
    let err = c.echo("none".into()).await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    // Same address, new host: the next call reconnects by itself.
    let host = b.host_at(|h| h, &url);
    assert_eq!(c.echo("two".into()).await.unwrap(), "two");
    assert_eq!(host.stats().connections_opened, 1);
    host.shutdown_async().await;
}

async fn shutdown_drains_calls_in_flight_and_refuses_new_ones(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    let in_flight: Vec<_> = (0..4)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    c.sleep_ms(600).await
                } else {
                    c.sleep_async_ms(600).await
                }
            })
        })
        .collect();
    assert!(eventually(|| host.stats().calls_in_flight == 4).await);
    let shutdown = tokio::spawn(host.shutdown_async());
    // Well inside the 600 ms the calls in flight take: the host is draining.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = c.echo("late".into()).await.unwrap_err();
    assert!(err.is_shutting_down(), "{err}");
    for h in in_flight {
        assert_eq!(
            h.await.unwrap().unwrap(),
            600,
            "a call in flight was not allowed to finish"
        );
    }
    let report = shutdown.await.unwrap();
    assert_eq!(report.abandoned_calls, 0);
}

async fn calls_still_running_at_the_close_timeout_are_answered(b: Binding) {
    let host = b.host_with(|h| h.close_timeout(Duration::from_millis(100)));
    let c = b.client(&host).await;
    let call = tokio::spawn({
        let c = c.clone();
        async move { c.sleep_async_ms(5_000).await }
    });
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    let report = host.shutdown_async().await;
    assert_eq!(report.abandoned_calls, 1);
    let err = call.await.unwrap().unwrap_err();
    assert!(err.is_shutting_down() || err.is_connection(), "{err}");
    assert!(
        err.is_shutting_down(),
        "expected an explicit answer, got {err}"
    );
}

async fn a_panicking_handler_faults_only_its_caller(b: Binding) {
    let host = b.host();
    let c = b.client(&host).await;
    let other = b.client(&host).await;
    let e = c.panic_sync().await.unwrap_err();
    assert!(e.is_handler_panic(), "{e}");
    assert!(e.to_string().contains("sync handler exploded"), "{e}");
    let e = c.panic_async().await.unwrap_err();
    assert!(e.is_handler_panic(), "{e}");
    assert_eq!(c.echo("still here".into()).await.unwrap(), "still here");
    assert_eq!(other.echo("me too".into()).await.unwrap(), "me too");
    assert_eq!(host.stats().connections_opened, 2);
    host.shutdown_async().await;
}

async fn oversized_messages_get_a_clear_error_and_nothing_else_breaks(b: Binding) {
    let host = b.host_with(|h| h.max_message_size(1024));
    let c = b.client(&host).await;
    let other = b.client(&host).await;
    let err = c.blob_len(vec![0; 4096]).await.unwrap_err();
    assert!(err.is_too_large(), "{err}");
    assert!(
        err.to_string().contains("1024"),
        "the limit should be in the message: {err}"
    );
    assert_eq!(c.blob_len(vec![0; 100]).await.unwrap(), 100);
    // A reply larger than the client accepts is refused by the host, with the same clarity.
    let small = b.channel_with(host.url(), |c| c.max_message_size(512));
    let small = ProbeClient::new(small);
    let err = small.make_blob(10_000).await.unwrap_err();
    assert!(err.is_too_large(), "{err}");
    assert_eq!(small.make_blob(10).await.unwrap().len(), 10);
    assert_eq!(other.echo("fine".into()).await.unwrap(), "fine");
    host.shutdown_async().await;
}

async fn unknown_service_is_reported(b: Binding) {
    let host = b.host();
    let c = UnservedClient::new(b.channel(host.url()));
    let err = c.nothing().await.unwrap_err();
    assert!(err.is_unknown_operation(), "{err}");
    assert!(err.to_string().contains("Unserved"), "{err}");
    host.shutdown_async().await;
}

async fn the_throttle_queues_then_refuses_with_busy(b: Binding) {
    let host = b.host_with(|h| h.max_concurrent_calls(1).max_queued_calls(1));
    let c = b.client(&host).await;
    let running = tokio::spawn({
        let c = c.clone();
        async move { c.sleep_ms(400).await }
    });
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    let queued = tokio::spawn({
        let c = c.clone();
        async move { c.echo("queued".into()).await }
    });
    assert!(eventually(|| host.stats().calls_queued == 1).await);
    let err = c.echo("refused".into()).await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert_eq!(running.await.unwrap().unwrap(), 400);
    assert_eq!(queued.await.unwrap().unwrap(), "queued");
    host.shutdown_async().await;
}

async fn a_queued_call_whose_deadline_passes_never_runs(b: Binding) {
    let host = b.host_with(|h| h.max_concurrent_calls(1).max_queued_calls(10));
    let c = b.client(&host).await;
    let blocker = tokio::spawn({
        let c = c.clone();
        async move { c.sleep_ms(500).await }
    });
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    let err = c.with_deadline(Duration::from_millis(50)).record(99).await;
    // One-way calls are acknowledged on receipt, so this succeeds; the work must not run.
    err.unwrap();
    blocker.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !c.recorded().await.unwrap().contains(&99),
        "expired one-way call ran"
    );
    host.shutdown_async().await;
}

/// Nothing lost in a drain: with 1,000 calls in flight, every call is answered with its
/// result or an explicit `ShuttingDown`, and the calls that succeeded are exactly the ones the
/// host completed and the handler counted. Half the calls end well inside the close timeout,
/// half cannot (they are answered `ShuttingDown` at it, their handlers stopped).
async fn graceful_shutdown_with_a_thousand_calls_in_flight_loses_none(b: Binding) {
    use std::sync::atomic::Ordering;
    const SHORT: u64 = 2_000;
    const LONG: u64 = 60_000;
    let probe = ProbeImpl::default();
    let host = b.host_serving(
        probe.clone(),
        |h| {
            h.max_concurrent_calls(2_000)
                .max_queued_calls(2_000)
                .max_calls_per_connection(2_000)
                .close_timeout(Duration::from_secs(4))
        },
        &b.listen_url(),
    );
    let c = ProbeClient::new(b.channel_with(host.url(), |c| c.http_max_connections(1_100)));
    c.open().await.unwrap();
    let calls: Vec<_> = (0..1000u64)
        .map(|i| {
            let c = c.clone();
            let ms = if i % 2 == 0 { SHORT } else { LONG };
            tokio::spawn(async move { (ms, c.counted_sleep_ms(ms).await) })
        })
        .collect();
    // In flight counts a call from its arrival, accepted (`calls_total`) once it decoded:
    // wait for both, or a call still decoding is counted in one and not the other.
    assert!(
        eventually(|| {
            let s = host.stats();
            s.calls_in_flight == 1000 && s.calls_total == 1000
        })
        .await,
        "{:?}",
        host.stats()
    );
    let accepted = host.stats().calls_total;
    assert_eq!(accepted, 1000);
    let shutdown = tokio::spawn(host.shutdown_async());
    // Calls made while the host drains are refused explicitly. A call may still be served
    // before the drain has begun (the shutdown task runs when the runtime gets to it), so wait
    // for the first refusal; every call after it is refused too. (`echo_async` is not counted
    // in `completed`, which the end checks.)
    let mut first_refusal = None;
    for _ in 0..1_000 {
        match c.echo_async("drain".into()).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => {
                first_refusal = Some(e);
                break;
            }
        }
    }
    let err = first_refusal.expect("a call made while the host drains is refused");
    assert!(err.is_shutting_down(), "{err}");
    for _ in 0..10 {
        let err = c.echo_async("drain".into()).await.unwrap_err();
        assert!(err.is_shutting_down(), "{err}");
    }
    let report = shutdown.await.unwrap();
    let (mut ok, mut shutting_down) = (0u64, 0u64);
    for call in calls {
        match call.await.unwrap() {
            (ms, Ok(got)) => {
                assert_eq!((ms, got), (SHORT, SHORT));
                ok += 1;
            }
            (ms, Err(e)) if e.is_shutting_down() => {
                assert_eq!(ms, LONG, "a call that had time to finish was cut: {e}");
                shutting_down += 1;
            }
            (_, Err(e)) => panic!("neither an answer nor ShuttingDown: {e}"),
        }
    }
    assert_eq!((ok, shutting_down), (500, 500));
    assert_eq!(report.abandoned_calls as u64, shutting_down);
    // Completed by the host (accepted, not abandoned) = counted by the handler = succeeded.
    assert_eq!(accepted - report.abandoned_calls as u64, ok);
    assert_eq!(probe.completed.load(Ordering::SeqCst), ok);
}

/// One address, two hosts: where a client's new connections go, switched from host A to host
/// B while A drains. TCP: a proxy in front of both; Unix: the socket path, whose file B
/// replaces (A's listener keeps accepting nothing more).
enum Address {
    Forwarded(Proxy),
    Path,
}

impl Address {
    /// The address clients use for `a`, a host of binding `b`.
    async fn of(b: Binding, a: &keel::Host) -> (Address, String) {
        if b == Binding::Unix {
            return (Address::Path, a.url().to_string());
        }
        let proxy = Proxy::start(a.url()).await;
        let url = proxy.url().to_string();
        (Address::Forwarded(proxy), url)
    }

    /// Starts host B at the address (`url`) and sends new connections to it from now on.
    fn take_over(&self, b: Binding, probe: ProbeImpl, url: &str) -> keel::Host {
        match self {
            Address::Forwarded(proxy) => {
                let host = b.host_serving(probe, |h| h, &b.listen_url());
                proxy.forward_to(host.url());
                host
            }
            Address::Path => {
                // A's file goes; B binds the path anew.
                let path = url.strip_prefix("unix://").unwrap();
                std::fs::remove_file(path).unwrap();
                b.host_serving(probe, |h| h, url)
            }
        }
    }
}

/// A host hands its address to a new one while calls keep coming: host A drains
/// (`Host::shutdown`) as host B takes over the address, with about 1,000 calls a second from
/// several callers on one channel. Calls in flight on A finish there (one long call is in
/// flight when the drain begins), calls A did not take go to B on new connections, and not
/// one call fails. Nothing here depends on timing: the phases wait for counts of calls.
async fn a_new_host_taking_over_a_draining_hosts_address_loses_no_call(b: Binding) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    const CALLERS: u64 = 8;
    /// Each caller makes about 125 calls a second: 1,000 in all.
    const PACE: Duration = Duration::from_millis(8);
    const PHASE: u64 = 500;

    let probe_a = ProbeImpl::default();
    let a = b.host_serving(probe_a.clone(), |h| h, &b.listen_url());
    let (address, url) = Address::of(b, &a).await;
    let c = ProbeClient::new(b.channel(&url));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..CALLERS)
        .map(|n| {
            let (c, ok, failed, stop) = (c.clone(), ok.clone(), failed.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let want = format!("caller {n} call {i}");
                    let got = if i.is_multiple_of(2) {
                        c.echo(want.clone()).await
                    } else {
                        c.echo_async(want.clone()).await
                    };
                    match got {
                        Ok(got) if got == want => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        other => failed.lock().unwrap().push(format!("{want}: {other:?}")),
                    }
                    tokio::time::sleep(PACE).await;
                }
            })
        })
        .collect();
    let until = |n: u64| {
        let ok = ok.clone();
        async move {
            for _ in 0..12_000 {
                if ok.load(Ordering::SeqCst) >= n {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            false
        }
    };
    assert!(until(PHASE).await, "calls to host A do not get through");

    // A call in flight on A when its drain begins: it finishes there.
    let long = tokio::spawn({
        let c = c.clone();
        async move { c.counted_sleep_ms(400).await }
    });
    assert!(eventually(|| probe_a.started.load(Ordering::SeqCst) == 1).await);
    let probe_b = ProbeImpl::default();
    let host_b = address.take_over(b, probe_b.clone(), &url);
    let report = a.shutdown_async().await;
    assert_eq!(report.abandoned_calls, 0);
    let after_a = ok.load(Ordering::SeqCst);
    assert!(
        until(after_a + PHASE).await,
        "calls stopped getting through once host A was gone ({after_a} before)"
    );
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.unwrap();
    }
    assert_eq!(long.await.unwrap().unwrap(), 400);
    assert_eq!(probe_a.completed.load(Ordering::SeqCst), 1);
    let failed = std::mem::take(&mut *failed.lock().unwrap());
    assert!(
        failed.is_empty(),
        "{} of {} calls failed across the handover, e.g. {:?}",
        failed.len(),
        failed.len() as u64 + ok.load(Ordering::SeqCst),
        &failed[..failed.len().min(5)]
    );
    assert!(host_b.stats().calls_total >= PHASE, "{:?}", host_b.stats());
    // A new client finds B at the address (A's going did not take B's socket file with it).
    let newcomer = ProbeClient::new(b.channel(&url));
    assert_eq!(newcomer.echo("B".into()).await.unwrap(), "B");
    host_b.shutdown_async().await;
}

/// A client that goes away mid-call frees its place on the host, and the handler hears of
/// it: an async operation's future is dropped. Here the caller gives up (the call's future is
/// dropped); [`a_client_whose_connection_closes_mid_call_frees_its_slot`] closes the
/// connection under the call instead.
async fn a_client_killed_mid_call_frees_its_slot_and_cancels_the_handler(b: Binding) {
    killed_mid_call(b, false).await
}

/// Kills a client mid-call: drops the call (`close_connection` false) or closes the channel
/// under it (true). The call's place on the host is freed and its handler's future dropped.
async fn killed_mid_call(b: Binding, close_connection: bool) {
    use std::sync::atomic::Ordering;
    let probe = ProbeImpl::default();
    let host = b.host_serving(probe.clone(), |h| h, &b.listen_url());
    let survivor = b.client(&host).await;
    let c = b.client(&host).await;
    let call = tokio::spawn({
        let c = c.clone();
        async move { c.sleep_until_dropped_ms(30_000).await }
    });
    assert!(eventually(|| host.stats().calls_in_flight == 1).await);
    if close_connection {
        c.close().await;
        let err = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the call outlived its closed channel")
            .unwrap()
            .unwrap_err();
        assert!(err.is_connection(), "{err}");
    } else {
        call.abort();
    }
    drop(c);
    assert!(
        eventually(|| host.stats().calls_in_flight == 0).await,
        "the call still holds its place: {:?}",
        host.stats()
    );
    assert!(
        eventually(|| probe.dropped.load(Ordering::SeqCst) == 1).await,
        "the handler never heard the caller went away"
    );
    assert_eq!(
        survivor.echo("unaffected".into()).await.unwrap(),
        "unaffected"
    );
    host.shutdown_async().await;
}

/// The other way a client dies mid-call: its connection closes under the call (the channel
/// closed).
async fn a_client_whose_connection_closes_mid_call_frees_its_slot(b: Binding) {
    killed_mid_call(b, true).await
}

fn the_blocking_client_needs_no_runtime(b: Binding) {
    let host = b.host();
    let c = ProbeBlockingClient::new(b.channel(host.url()));
    assert_eq!(c.echo("plain main".into()).unwrap(), "plain main");
    assert_eq!(
        c.check(-1).unwrap_err().fault::<Negative>(),
        Some(Negative(-1))
    );
    c.close();
    assert!(!c.channel().is_connected());
    assert_eq!(c.echo("reopened".into()).unwrap(), "reopened");
    host.shutdown();
}

#[test]
fn connect_to_nothing_is_a_connection_error() {
    // A port nobody listens on.
    let port = free_port();
    let err = ProbeBlockingClient::connect(&format!("tcp://127.0.0.1:{port}")).unwrap_err();
    assert!(err.is_connection(), "{err}");
    let err = ProbeBlockingClient::connect("ftp://127.0.0.1:1").unwrap_err();
    // The cause, and the fix: the schemes keel knows, with the feature each optional one needs.
    let text = err.to_string();
    assert!(text.contains("unknown scheme `ftp`"), "{err}");
    for known in [
        "tcp://", "tcps://", "unix:///", "http://", "https://", "grpc://",
    ] {
        assert!(text.contains(known), "{err}");
    }
    assert!(
        text.contains("feature `tls`") && text.contains("feature `http`"),
        "{err}"
    );
}

#[test]
fn a_unix_socket_file_is_removed_with_its_host_and_a_live_one_is_not_taken() {
    let url = Binding::Unix.listen_url();
    let path = std::path::PathBuf::from(url.strip_prefix("unix://").unwrap());
    let host = Binding::Unix.host_at(|h| h, &url);
    assert!(path.exists());
    let err = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint(url.as_str())
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    let c = ProbeBlockingClient::new(Binding::Unix.channel(&url));
    assert_eq!(c.echo("still served".into()).unwrap(), "still served");
    host.shutdown();
    assert!(!path.exists(), "the socket file outlived its host");
    // A file left behind by a host that is gone is replaced.
    let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(stale);
    assert!(path.exists());
    let host = Binding::Unix.host_at(|h| h, &url);
    assert_eq!(c.echo("new host".into()).unwrap(), "new host");
    host.shutdown();
}
