//! Liveness on keel-wire: a path that dies silently (a NAT or load balancer drops the
//! connection's state, so the connection stays open and carries nothing) is found by the
//! client's keepalive, not by waiting out a call's deadline.
//!
//! The proxy ([`common::Proxy`]) stands in for that middlebox: it forwards a connection until told to
//! blackhole it, then swallows everything both ways and keeps it open, while new connections
//! pass as before. TCP sees nothing wrong (the proxy acknowledges every byte), so only keel's
//! own pings can tell.
//!
//! Also here: calls' deadlines, which one timer per connection enforces against a host that
//! never answers, and a call that reads its own reply but is left unpolled, which must hold up
//! neither other calls nor keepalive.
//!
//! A dead path needs nothing but keel's timers to be found, so those tests run in keel's time
//! (`keel::testing::pause`, [`common::drive`]): the 20 s keepalive interval takes no 20 s. The
//! tests of live connections (pongs that must come back within a timeout), HTTP/2's pings
//! (tokio's timers) and one deadline test keep real time, and take
//! [`keel::testing::real_time`] so that no paused test stops keel's clock under them.

mod common;

use std::time::{Duration, Instant};

use common::{drive, eventually_within, host, ProbeClient, Proxy};
use keel::{Channel, StatusCode};

/// How far [`drive`] moves keel's clock at a time.
const STEP: Duration = Duration::from_millis(100);

/// The case, with default settings: an idle connection is blackholed. The client's
/// keepalive ping (after 20 s of quiet) goes unanswered, so the connection is dropped 1 s
/// later, and the first call after that goes to a new connection and succeeds at once.
/// In keel's time: the 21 s pass in steps of [`STEP`].
#[tokio::test]
async fn an_idle_connection_dropped_silently_is_replaced_before_the_next_call() {
    let clock = keel::testing::pause();
    let host = host();
    let proxy = Proxy::start(host.url()).await;
    let channel = Channel::new(proxy.url()).unwrap();
    let client = ProbeClient::new(channel.clone());
    assert_eq!(client.echo("before".into()).await.unwrap(), "before");
    proxy.blackhole_existing();

    // Interval (20 s) plus timeout (1 s), with room to spare.
    let detected = drive(&clock, STEP, Duration::from_secs(40), || {
        channel.stats().connections_open == 0
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the dead connection is still open after 40 s: {:?}",
            channel.stats()
        )
    });
    let start = Instant::now();
    assert_eq!(client.echo("after".into()).await.unwrap(), "after");
    let first_call = start.elapsed();
    println!(
        "silent drop found after {} ms; first call after it took {:.1} ms",
        detected.as_millis(),
        first_call.as_secs_f64() * 1e3
    );
    assert!(
        detected >= Duration::from_secs(20),
        "dropped before the keepalive interval: {detected:?}"
    );
    assert!(
        first_call < Duration::from_secs(2),
        "the first call after the drop took {first_call:?}"
    );
    assert_eq!(proxy.accepted(), 2);
    assert_eq!(channel.stats().connections_opened, 2);
}

/// A call made on a connection that has been quiet longer than the keepalive timeout carries a
/// ping. If the path died meanwhile, the call fails `Unavailable` at the ping's timeout (1 s),
/// not at its deadline (60 s), and the next call goes to a new connection. In keel's time.
#[tokio::test]
async fn a_call_on_a_dead_path_fails_at_the_ping_timeout_not_its_deadline() {
    let clock = keel::testing::pause();
    let host = host();
    let proxy = Proxy::start(host.url()).await;
    let channel = Channel::new(proxy.url()).unwrap();
    let client = ProbeClient::new(channel.clone());
    assert_eq!(client.echo("before".into()).await.unwrap(), "before");
    proxy.blackhole_existing();
    // Quiet for longer than the keepalive timeout, well short of its interval.
    clock.advance(Duration::from_millis(1_500));

    let lost = tokio::spawn({
        let client = client.clone();
        async move { client.echo("lost".into()).await }
    });
    // Past the call's deadline (60 s) if it comes to that.
    let failed_after = drive(&clock, STEP, Duration::from_secs(90), || lost.is_finished())
        .await
        .expect("the call on the dead path never ended");
    let err = lost.await.unwrap().unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::Unavailable), "{err}");
    // The same shape as a reset or closed connection.
    assert!(err.is_connection(), "{err}");
    assert!(
        failed_after < Duration::from_secs(30),
        "failed after {failed_after:?}: the deadline, not the ping"
    );
    let start = Instant::now();
    assert_eq!(client.echo("next".into()).await.unwrap(), "next");
    println!(
        "call on the dead path failed after {} ms ({err}); the next call took {:.1} ms",
        failed_after.as_millis(),
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(proxy.accepted(), 2);
}

/// A host behind a proxy, a client that made a call through it, and a call of a minute in
/// flight on that client's connection (the host has it).
async fn a_long_call_through_a_proxy() -> (
    keel::Host,
    Proxy,
    ProbeClient,
    tokio::task::JoinHandle<Result<u64, keel::Error>>,
) {
    let host = host();
    let proxy = Proxy::start(host.url()).await;
    let client = ProbeClient::new(Channel::new(proxy.url()).unwrap());
    assert_eq!(client.echo("before".into()).await.unwrap(), "before");
    let long = tokio::spawn({
        let client = client.clone();
        async move { client.sleep_async_ms(60_000).await }
    });
    assert!(
        eventually_within(Duration::from_secs(10), || host.stats().calls_in_flight
            == 1)
        .await
    );
    (host, proxy, client, long)
}

/// The frozen host: a call is in flight when the path dies, and no other call follows
/// on the connection (a balanced channel sends them elsewhere), so no call carries a probe.
/// The client pings once nothing has arrived for a quarter second while a call waits, and the
/// call fails a second after the last frame (the ping unanswered), not at the 20 s interval.
/// In keel's time.
#[tokio::test]
async fn a_call_waiting_on_a_path_that_died_fails_within_a_second_with_no_other_call() {
    let clock = keel::testing::pause();
    let (_host, proxy, client, waiting) = a_long_call_through_a_proxy().await;
    proxy.blackhole_existing();
    let failed_after = drive(&clock, STEP, Duration::from_secs(90), || {
        waiting.is_finished()
    })
    .await
    .expect("the waiting call never ended");
    let err = waiting.await.unwrap().unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert_eq!(err.status_code(), Some(StatusCode::Unavailable), "{err}");
    // A second after the last frame (the call's reply to `before` or the Request's
    // acknowledgement, before the blackhole), and a step of the driven clock.
    assert!(
        failed_after <= Duration::from_millis(1_000) + STEP,
        "failed after {failed_after:?}: the 20 s interval, not the waiting call, found it"
    );
    assert_eq!(client.echo("next".into()).await.unwrap(), "next");
}

/// A long call's ping was answered, so the next waits for the interval (20 s) while no new
/// call starts. A new call lifts that: once the path dies, the new call fails within a second
/// of its start, not 20 s later (the connection's timer is re-armed when the call starts). In
/// keel's time.
#[tokio::test]
async fn a_new_call_after_an_answered_ping_is_not_held_to_the_interval() {
    let clock = keel::testing::pause();
    let (_host, proxy, client, long) = a_long_call_through_a_proxy().await;
    // The ping a quarter second into the long call's wait, answered (the path is alive).
    drive(&clock, STEP, Duration::from_millis(600), || false).await;
    assert!(!long.is_finished());
    proxy.blackhole_existing();
    let next = tokio::spawn({
        let client = client.clone();
        async move { client.echo("next".into()).await }
    });
    let failed_after = drive(&clock, STEP, Duration::from_secs(60), || next.is_finished())
        .await
        .expect("the new call never ended");
    let err = next.await.unwrap().unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::Unavailable), "{err}");
    assert!(
        failed_after <= Duration::from_millis(1_000) + STEP,
        "failed after {failed_after:?}: held to the keepalive interval"
    );
    assert!(long.await.unwrap().is_err());
}

/// connection that answers its pings is never dropped, however long its calls run.
#[tokio::test]
async fn a_quiet_but_live_connection_is_kept() {
    // Real time: live pings must be answered within their real timeout.
    let _real = keel::testing::real_time();
    // The host's ping limit must allow this client's pings (300 ms apart, with no call
    // between them while the long call runs).
    let host = common::host_with(
        |h| h.ping_policy(keel::host::PingPolicy::new(Duration::from_millis(100), 2)),
        "tcp://127.0.0.1:0",
    );
    let proxy = Proxy::start(host.url()).await;
    let keepalive =
        keel::host::Keepalive::new(Duration::from_millis(300), Duration::from_millis(200));
    let channel = Channel::builder(proxy.url())
        .keepalive(Some(keepalive))
        .build()
        .unwrap();
    let client = ProbeClient::new(channel.clone());
    // Nothing arrives on the connection for 3 s but the replies to the client's pings.
    assert_eq!(client.sleep_async_ms(3_000).await.unwrap(), 3_000);
    assert_eq!(client.sleep_async_ms(10).await.unwrap(), 10);
    assert_eq!(channel.stats().connections_opened, 1);
    assert_eq!(proxy.accepted(), 1);

    // Now the path dies under a call in flight: it fails once the pings go unanswered.
    let long = tokio::spawn({
        let client = client.clone();
        async move { client.sleep_async_ms(30_000).await }
    });
    assert!(
        eventually_within(Duration::from_secs(10), || host.stats().calls_in_flight
            == 1)
        .await
    );
    proxy.blackhole_existing();
    let start = Instant::now();
    let err = long.await.unwrap().unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::Unavailable), "{err}");
    // The same shape as a reset or closed connection.
    assert!(err.is_connection(), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(client.echo("next".into()).await.unwrap(), "next");
    assert_eq!(proxy.accepted(), 2);
}

/// An operation that runs for `ms` of keel's clock (so a paused test can make it long).
#[keel::contract]
pub trait Slow {
    /// Returns `ms` once keel's clock has moved that far since it started.
    async fn take(&self, ms: u64) -> u64;
}

struct SlowImpl;

impl Slow for SlowImpl {
    async fn take(&self, ms: u64) -> u64 {
        let until = keel::testing::now() + Duration::from_millis(ms);
        while keel::testing::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        ms
    }
}

/// A client whose calls all take 10 s pings while they wait (a quarter second into each
/// silence, then no closer than its keepalive interval with no call between), and stays
/// within the host's default ping limit (5 s, 2 strikes): no GoAway `too many pings`, one
/// connection throughout. Calls one after another, overlapping (one every 4 s), and alone.
/// Default settings on both ends; in keel's time.
#[tokio::test]
async fn calls_that_all_take_ten_seconds_stay_within_the_hosts_default_ping_limit() {
    let clock = keel::testing::pause();
    let host = keel::Host::builder()
        .service(SlowServer::new(SlowImpl))
        .endpoint("tcp://127.0.0.1:0")
        .start()
        .unwrap();
    let channel = Channel::new(host.url()).unwrap();
    let slow = SlowClient::new(channel.clone());
    let take = |ms| {
        let slow = slow.clone();
        tokio::spawn(async move { slow.take(ms).await })
    };
    // One after another.
    for _ in 0..3 {
        let call = take(10_000);
        drive(&clock, STEP, Duration::from_secs(30), || call.is_finished())
            .await
            .expect("a 10 s call did not end within 30 s");
        assert_eq!(call.await.unwrap().unwrap(), 10_000);
    }
    // Overlapping: one every 4 s, each 10 s.
    let mut calls = Vec::new();
    for _ in 0..4 {
        calls.push(take(10_000));
        drive(&clock, STEP, Duration::from_secs(4), || false).await;
    }
    drive(&clock, STEP, Duration::from_secs(30), || {
        calls.iter().all(|c| c.is_finished())
    })
    .await
    .expect("the overlapping calls did not end");
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), 10_000);
    }
    // Alone, after the connection was quiet past the host's ping limit.
    drive(&clock, STEP, Duration::from_secs(6), || false).await;
    let call = take(10_000);
    drive(&clock, STEP, Duration::from_secs(30), || call.is_finished())
        .await
        .expect("the last call did not end");
    assert_eq!(call.await.unwrap().unwrap(), 10_000);
    let stats = channel.stats();
    assert_eq!(stats.connections_opened, 1, "{stats:?}");
    assert_eq!(host.stats().connections_opened, 1);
}

/// A store whose reads may be retried.
#[keel::contract]
pub trait Store {
    /// Reads a value: running it twice is harmless.
    #[keel(idempotent)]
    fn get(&self, key: String) -> String;
}

struct StoreImpl;

impl Store for StoreImpl {
    fn get(&self, key: String) -> String {
        format!("value of {key}")
    }
}

/// With retries, the first call after a silent drop succeeds, if its operation is idempotent:
/// the ping that went with it finds the path dead within 1 s, and the call goes again on a
/// new connection. (A call of an operation that is not idempotent fails `Unavailable`
/// instead: it may have run.) In keel's time, up to the retry; keel's clock then stands while
/// the retry's backoff and the new connection take their real time.
#[tokio::test]
async fn an_idempotent_call_after_a_silent_drop_succeeds_within_two_seconds() {
    let clock = keel::testing::pause();
    let host = keel::Host::builder()
        .service(StoreServer::new(StoreImpl))
        .endpoint("tcp://127.0.0.1:0")
        .start()
        .unwrap();
    let proxy = Proxy::start(host.url()).await;
    let channel = Channel::new(proxy.url()).unwrap();
    let store = StoreClient::new(channel.clone());
    assert_eq!(store.get("a".into()).await.unwrap(), "value of a");
    proxy.blackhole_existing();
    clock.advance(Duration::from_millis(1_500));

    let b = tokio::spawn({
        let store = store.clone();
        async move { store.get("b".into()).await }
    });
    let took = drive(&clock, STEP, Duration::from_secs(90), || {
        channel.stats().retries > 0 || b.is_finished()
    })
    .await
    .expect("the call after the drop was neither retried nor answered");
    let b = tokio::time::timeout(Duration::from_secs(10), b)
        .await
        .expect("the retry did not end within 10 s, keel's clock standing still");
    assert_eq!(b.unwrap().unwrap(), "value of b");
    println!(
        "idempotent call after the drop succeeded in {} ms ({} retry)",
        took.as_millis(),
        channel.stats().retries
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(channel.stats().retries, 1);
    assert_eq!(proxy.accepted(), 2);
}

/// HTTP/2 pings too (the client's keepalive, with the channel's settings): a silently dropped
/// connection is closed and the next call opens a new one.
#[cfg(feature = "http")]
#[tokio::test]
async fn http2_pings_find_a_silent_drop_too() {
    // Real time: HTTP/2 keepalive waits on tokio's timers, which keel's clock does not move.
    let _real = keel::testing::real_time();
    let host = common::host_with(|h| h, "http://127.0.0.1:0");
    let proxy = Proxy::start(host.url()).await;
    let channel = Channel::builder(proxy.url())
        .http_version(keel::client::HttpVersion::Http2)
        .keepalive(Some(keel::client::Keepalive::new(
            Duration::from_millis(500),
            Duration::from_millis(500),
        )))
        .build()
        .unwrap();
    let client = ProbeClient::new(channel.clone());
    assert_eq!(client.echo("before".into()).await.unwrap(), "before");
    // Alive and quiet: kept across several ping intervals.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(channel.stats().connections_open, 1);
    proxy.blackhole_existing();
    assert!(
        eventually_within(Duration::from_secs(20), || channel.stats().connections_open
            == 0)
        .await,
        "{:?}",
        channel.stats()
    );
    assert_eq!(client.echo("after".into()).await.unwrap(), "after");
    assert_eq!(proxy.accepted(), 2);
}

/// A channel to `url` with keepalive off: only a call's deadline can end its wait.
fn without_keepalive(url: &str) -> (Channel, ProbeClient) {
    let channel = Channel::builder(url).keepalive(None).build().unwrap();
    (channel.clone(), ProbeClient::new(channel))
}

/// A host that never answers (its path blackholed, keepalive off): the call fails as a timeout
/// at its deadline, by the connection's own timer, and the connection stays usable for the
/// host's answers to later calls on a new path.
#[tokio::test]
async fn a_call_nobody_answers_times_out_at_its_deadline() {
    // Real time: the one deadline test on keel's timer thread waiting by itself.
    let _real = keel::testing::real_time();
    let host = host();
    let proxy = Proxy::start(host.url()).await;
    let (_channel, client) = without_keepalive(proxy.url());
    assert_eq!(client.echo("before".into()).await.unwrap(), "before");
    proxy.blackhole_existing();
    for deadline in [Duration::from_millis(200), Duration::from_millis(400)] {
        let start = Instant::now();
        let err = client
            .with_deadline(deadline)
            .echo("lost".into())
            .await
            .unwrap_err();
        let took = start.elapsed();
        assert!(err.is_timeout(), "{err}");
        assert!(
            took >= deadline,
            "timed out after {took:?}, before {deadline:?}"
        );
        assert!(
            took < deadline + Duration::from_secs(2),
            "timed out after {took:?} for a deadline of {deadline:?}"
        );
    }
}

/// One timer serves a connection's calls: a call with a short deadline, started while one with
/// a long deadline waits, still times out at its own deadline, and the long one keeps waiting.
/// In keel's time, 10 ms at a step: not before the deadline either.
#[tokio::test]
async fn a_short_deadline_behind_a_long_one_fires_on_time() {
    let clock = keel::testing::pause();
    let host = host();
    let proxy = Proxy::start(host.url()).await;
    let (_channel, client) = without_keepalive(proxy.url());
    assert_eq!(client.echo("before".into()).await.unwrap(), "before");
    proxy.blackhole_existing();
    let long = tokio::spawn({
        let client = client.with_deadline(Duration::from_secs(60));
        async move { client.echo("long".into()).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    clock.advance(Duration::from_millis(50));
    let deadline = Duration::from_millis(300);
    let short = tokio::spawn({
        let client = client.with_deadline(deadline);
        async move { client.echo("short".into()).await }
    });
    let took = drive(
        &clock,
        Duration::from_millis(10),
        Duration::from_secs(3),
        || short.is_finished(),
    )
    .await;
    let took = took.unwrap_or_else(|| panic!("the short call did not time out within 3 s"));
    let err = short.await.unwrap().unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(
        took >= deadline,
        "timed out after {took:?}, before {deadline:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "the short call timed out after {took:?}"
    );
    assert!(
        !long.is_finished(),
        "the long call ended with the short one"
    );
    long.abort();
}

/// Polls `fut` once, with a waker that does nothing, and leaves it (not dropped).
fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    fut.poll(&mut cx).is_pending()
}

/// A call alone in flight reads its own reply. One polled once and then left (neither polled
/// nor dropped, as a future kept aside can be) holds up no other call: the next one is
/// answered at once, and the one left aside gets its answer when it is polled again.
#[tokio::test]
async fn a_call_left_unpolled_holds_up_no_other_call() {
    // Keel's clock running: no paused test may stop it, or move it past the calls' deadlines.
    let _real = keel::testing::real_time();
    let host = host();
    let (channel, client) = without_keepalive(host.url());
    assert_eq!(client.echo("first".into()).await.unwrap(), "first");
    let mut aside = Box::pin(client.sleep_async_ms(200));
    assert!(poll_once(aside.as_mut()), "answered before the host could");
    let next = tokio::time::timeout(Duration::from_secs(5), client.echo("next".into())).await;
    assert_eq!(
        next.expect("the next call waits for the one left aside")
            .unwrap(),
        "next"
    );
    assert_eq!(aside.await.unwrap(), 200);
    assert_eq!(
        channel.stats().connections_opened,
        1,
        "{:?}",
        channel.stats()
    );
}

/// The same, alone: a call left unpolled for several keepalive intervals and timeouts does not
/// make its live host look dead (the connection's timer reads before it judges).
#[tokio::test]
async fn a_call_left_unpolled_does_not_fail_keepalive() {
    // Real time: the pongs must be read within their real timeout.
    let _real = keel::testing::real_time();
    // A host that allows this client's pings (100 ms apart).
    let host = common::host_with(
        |h| h.ping_policy(keel::host::PingPolicy::new(Duration::from_millis(20), 2)),
        "tcp://127.0.0.1:0",
    );
    let keepalive =
        keel::host::Keepalive::new(Duration::from_millis(100), Duration::from_millis(300));
    let channel = Channel::builder(host.url())
        .keepalive(Some(keepalive))
        .build()
        .unwrap();
    let client = ProbeClient::new(channel.clone());
    assert_eq!(client.echo("first".into()).await.unwrap(), "first");
    let mut alone = Box::pin(client.sleep_async_ms(10));
    assert!(poll_once(alone.as_mut()), "answered before the host could");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(alone.await.unwrap(), 10);
    assert_eq!(
        channel.stats().connections_opened,
        1,
        "{:?}",
        channel.stats()
    );
}
