//! `keel::testing` (feature `test-util`, on for keel's own tests): keel's clock stands still
//! while paused and moves only when advanced, never back; advancing wakes keel's timer thread at
//! once (a client's deadline, a host's idle reaper); a test that needs real time waits for a
//! paused one, and the other way round.
#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One operation that never answers, one that answers at once.
#[keel::contract]
pub trait Waits {
    async fn never(&self) -> u32;
    fn now(&self) -> u32;
}

struct Impl;

impl Waits for Impl {
    async fn never(&self) -> u32 {
        std::future::pending().await
    }
    fn now(&self) -> u32 {
        1
    }
}

fn host(settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder) -> keel::Host {
    settings(
        keel::Host::builder()
            .service(WaitsServer::new(Impl))
            .endpoint("tcp://127.0.0.1:0"),
    )
    .start()
    .unwrap()
}

#[test]
fn a_paused_clock_moves_only_when_advanced_and_never_back() {
    let clock = keel::testing::pause();
    let at = clock.now();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(clock.now(), at);
    assert_eq!(keel::testing::now(), at);
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(clock.now(), at + Duration::from_secs(3_600));
    drop(clock);
    // Running again, from where it stood (and kept running: no other test pauses it now).
    let _real = keel::testing::real_time();
    let after = keel::testing::now();
    assert!(after >= at + Duration::from_secs(3_600), "went back");
    std::thread::sleep(Duration::from_millis(5));
    assert!(keel::testing::now() > after, "stands still while running");
}

#[tokio::test]
async fn advancing_past_a_deadline_times_the_call_out_at_once() {
    let clock = keel::testing::pause();
    let host = host(|h| h);
    let channel = keel::Channel::builder(host.url())
        .keepalive(None)
        .build()
        .unwrap();
    let client = WaitsClient::new(channel);
    assert_eq!(client.now().await.unwrap(), 1);
    let call = tokio::spawn({
        let client = client.with_deadline(Duration::from_secs(3_600));
        async move { client.never().await }
    });
    // Real time passes, keel's does not: the hour-long deadline is far off.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !call.is_finished(),
        "timed out while keel's clock stood still"
    );
    clock.advance(Duration::from_secs(3_600));
    let err = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("advancing did not wake keel's timer")
        .unwrap()
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    host.shutdown_async().await;
}

#[tokio::test]
async fn a_fresh_connections_first_call_times_out_at_its_own_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A new connection's timer first looks a quarter second after it opened, so a first call
    // made at once wakes no timer task; a first call whose deadline comes sooner must. The
    // host is a hand-written one that completes the handshake and then answers nothing (a keel
    // host would end the call itself at its deadline).
    let clock = keel::testing::pause();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("tcp://{}", listener.local_addr().unwrap());
    let silent = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = bytes::BytesMut::new();
        while keel_wire::decode_hello(&mut buf).unwrap().is_none() {
            assert!(socket.read_buf(&mut buf).await.unwrap() > 0);
        }
        let mut out = bytes::BytesMut::new();
        let accept = keel_wire::HelloReply::Accept {
            version: keel_wire::VERSION,
            max_message_size: 1 << 20,
        };
        keel_wire::encode_hello_reply(&accept, &mut out);
        socket.write_all(&out).await.unwrap();
        while socket.read_buf(&mut buf).await.unwrap_or(0) > 0 {}
    });
    let channel = keel::Channel::builder(&url).connect().await.unwrap();
    let client = WaitsClient::new(channel);
    let call = tokio::spawn({
        let client = client.with_deadline(Duration::from_millis(50));
        async move { client.never().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !call.is_finished(),
        "timed out while keel's clock stood still"
    );
    // Past the deadline, well short of the first look.
    clock.advance(Duration::from_millis(60));
    let err = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the timer slept past the first call's deadline")
        .unwrap()
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    silent.abort();
}

#[tokio::test]
async fn advancing_past_the_idle_timeout_closes_the_connection() {
    let clock = keel::testing::pause();
    let host = host(|h| h.idle_timeout(Duration::from_secs(3_600)));
    let client = WaitsClient::connect(host.url()).await.unwrap();
    assert_eq!(client.now().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(host.stats().connections_timed_out, 0);
    clock.advance(Duration::from_secs(3_600));
    let closed = async {
        while host.stats().connections_timed_out == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the idle reaper did not follow keel's clock");
    host.shutdown_async().await;
}

#[test]
fn real_time_and_a_paused_clock_exclude_each_other() {
    let clock = keel::testing::pause();
    let through = Arc::new(AtomicBool::new(false));
    let waiter = std::thread::spawn({
        let through = through.clone();
        move || {
            let _real = keel::testing::real_time();
            through.store(true, Ordering::SeqCst);
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!through.load(Ordering::SeqCst), "real time while paused");
    drop(clock);
    waiter.join().unwrap();
    assert!(through.load(Ordering::SeqCst));

    // Any number of tests may hold real time together; a pause waits for all of them.
    let (a, b) = (keel::testing::real_time(), keel::testing::real_time());
    let paused = Arc::new(AtomicBool::new(false));
    let pauser = std::thread::spawn({
        let paused = paused.clone();
        move || {
            let _clock = keel::testing::pause();
            paused.store(true, Ordering::SeqCst);
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!paused.load(Ordering::SeqCst), "paused under real time");
    drop((a, b));
    pauser.join().unwrap();
    assert!(paused.load(Ordering::SeqCst));
}
