//! The maximum connection age: a host tells connections past it GoAway, so that clients spread
//! again over the replicas behind an L4 balancer. Clients move to new connections without
//! failing a call; calls in flight finish within the grace, and are answered `ShuttingDown`
//! after it. Every binding.
//!
//! The replacement test runs in keel's time (`keel::testing::pause`): its 2 s of calls on each
//! binding take no 2 s. The grace test and `off_by_default` keep real time, the host's age
//! reaper waking on its own, and take [`keel::testing::real_time`].
#![cfg(all(feature = "http", feature = "tls"))]
#![allow(missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::*;

fn bindings() -> [Binding; 6] {
    [
        Binding::Tcp,
        Binding::Unix,
        Binding::Http1,
        Binding::Http2,
        Binding::Tcps,
        Binding::Https,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_connections_are_replaced_without_a_failed_call() {
    let clock = keel::testing::pause();
    for b in bindings() {
        let host = b.host_with(|h| {
            h.max_connection_age(Duration::from_millis(300), Duration::from_secs(10))
        });
        let c = b.client(&host).await;
        // Calls for 2 s of keel's time, 10 ms apart; every 20th starts one more (400 ms of real
        // time) that stays in flight while keel's clock moves on across age boundaries.
        let until = clock.now() + Duration::from_secs(2);
        let mut calls = 0;
        let mut spanning = Vec::new();
        while clock.now() < until {
            let s = format!("call {calls}");
            assert_eq!(c.echo(s.clone()).await.unwrap(), s, "{b:?}");
            if calls % 20 == 0 {
                let c = c.clone();
                spanning.push(tokio::spawn(async move { c.sleep_async_ms(400).await }));
            }
            calls += 1;
            clock.advance(Duration::from_millis(10));
        }
        for call in spanning {
            assert_eq!(call.await.unwrap().unwrap(), 400, "{b:?}");
        }
        // A keel-wire connection told GoAway closes at a tick of the host's reaper once its
        // calls are done, and these were done only now: its clock moves on for a few ticks.
        drive(
            &clock,
            Duration::from_millis(10),
            Duration::from_secs(1),
            || host.stats().connections_closed >= 1,
        )
        .await;
        let stats = host.stats();
        // About one connection per 300 ms (±10 %), not one for the whole run.
        assert!(
            stats.connections_opened >= 3,
            "{b:?}: {calls} calls, {stats:?}"
        );
        assert!(stats.connections_closed >= 1, "{b:?}: {stats:?}");
        host.shutdown_async().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_grace_is_answered_shutting_down() {
    // Real time: the age reaper on keel's timer thread, waking by itself.
    let _real = keel::testing::real_time();
    for b in [Binding::Tcp, Binding::Http2] {
        let host = b.host_with(|h| {
            h.max_connection_age(Duration::from_millis(200), Duration::from_millis(300))
        });
        let c = b.client(&host).await;
        let started = Instant::now();
        let err = c.sleep_async_ms(5_000).await.unwrap_err();
        assert_eq!(
            err.status_code(),
            Some(keel::StatusCode::ShuttingDown),
            "{b:?}: {err}"
        );
        // Age (≤ 220 ms) + grace (300 ms), checked every 10 ms: well before the call's 5 s.
        assert!(started.elapsed() < Duration::from_secs(3), "{b:?}");
        // The next call goes to a new connection.
        assert_eq!(c.echo("after".into()).await.unwrap(), "after");
        host.shutdown_async().await;
    }
}

#[tokio::test]
async fn off_by_default() {
    let _real = keel::testing::real_time();
    assert_eq!(keel::host::HostConfig::default().max_connection_age, None);
    let host = Binding::Tcp.host();
    let c = Binding::Tcp.client(&host).await;
    for _ in 0..3 {
        assert_eq!(c.echo("x".into()).await.unwrap(), "x");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(host.stats().connections_opened, 1);
    host.shutdown_async().await;
}
