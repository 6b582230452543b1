//! `shutdown`, `shutdown_now` and `Drop` semantics.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{wait_for, Latch, PATIENCE};
use keel_pool::{Pool, PoolClosed};

fn pool(min: usize, max: usize) -> Pool {
    Pool::builder()
        .min_threads(min)
        .max_threads(max)
        .build()
        .unwrap()
}

fn counting(counter: &Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
    let c = counter.clone();
    move || {
        c.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn shutdown_runs_everything_queued_then_joins() {
    let p = Arc::new(pool(1, 1));
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    let l = latch.clone();
    p.spawn(move || l.enter()).ok().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        p.spawn(counting(&ran)).ok().unwrap();
    }
    wait_for("queued behind the blocker", || p.metrics().queued == 5);
    let p2 = p.clone();
    let shutting = thread::spawn(move || p2.shutdown(PATIENCE));
    // New work is refused as soon as shutdown starts, and the closure comes back.
    wait_for("closed", || p.spawn(|| ()).is_err());
    let ran_later = Arc::new(AtomicUsize::new(0));
    match p.spawn(counting(&ran_later)) {
        Err(PoolClosed(f)) => f(),
        Ok(()) => panic!("accepted after shutdown"),
    }
    assert_eq!(ran_later.load(Ordering::SeqCst), 1);
    latch.release();
    assert!(shutting.join().unwrap(), "all threads joined");
    assert_eq!(ran.load(Ordering::SeqCst), 5);
    let m = p.metrics();
    // 6, plus any no-op probes accepted before the shutdown began.
    assert!(
        m.threads == 0 && m.queued == 0 && m.completed_total >= 6,
        "{m:?}"
    );
}

#[test]
fn shutdown_creates_threads_for_the_queue_it_drains() {
    let p = pool(0, 16);
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    for _ in 0..8 {
        let l = latch.clone();
        p.spawn(move || l.enter()).ok().unwrap();
    }
    let l = latch.clone();
    thread::spawn(move || {
        // Only returns once all 8 ran concurrently, which needs 8 threads during shutdown.
        wait_for("8 running", || l.running() == 8);
        l.release();
    });
    assert!(p.shutdown(PATIENCE));
    assert_eq!(latch.done(), 8);
}

#[test]
fn shutdown_returns_false_on_timeout_and_can_be_retried() {
    let p = pool(1, 2);
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    let l = latch.clone();
    p.spawn(move || l.enter()).ok().unwrap();
    wait_for("running", || latch.running() == 1);
    assert!(!p.shutdown(Duration::from_millis(30)));
    assert!(p.spawn(|| ()).is_err());
    latch.release();
    assert!(p.shutdown(PATIENCE));
    assert_eq!(p.metrics().threads, 0);
}

#[test]
fn shutdown_now_cancels_queued_work_and_lets_running_work_finish() {
    let p = Arc::new(pool(1, 1));
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    let l = latch.clone();
    let running = p.spawn_handle(move || {
        l.enter();
        "finished"
    });
    wait_for("running", || latch.running() == 1);
    let ran = Arc::new(AtomicUsize::new(0));
    let queued: Vec<_> = (0..5)
        .map(|_| {
            let f = counting(&ran);
            p.spawn_handle(f)
        })
        .collect();
    wait_for("queued", || p.metrics().queued == 5);
    let p2 = p.clone();
    let stopping = thread::spawn(move || p2.shutdown_now());
    for h in queued {
        let err = h.join().unwrap_err();
        assert!(err.is_cancelled(), "{err:?}");
        assert_eq!(
            err.to_string(),
            "task cancelled: the pool shut down before it ran"
        );
    }
    assert!(!stopping.is_finished(), "waits for the running task");
    latch.release();
    assert!(stopping.join().unwrap());
    assert_eq!(running.join().unwrap(), "finished");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let m = p.metrics();
    assert_eq!(
        (m.threads, m.cancelled_total, m.completed_total),
        (0, 5, 1),
        "{m:?}"
    );
}

#[test]
fn spawn_handle_after_shutdown_resolves_to_cancelled() {
    let p = pool(1, 2);
    assert!(p.shutdown(PATIENCE));
    assert!(p.spawn_handle(|| 1).join().unwrap_err().is_cancelled());
    assert!(p.shutdown_now(), "repeat shutdowns are fine");
}

#[test]
fn drop_is_a_graceful_shutdown_that_joins() {
    let ran = Arc::new(AtomicUsize::new(0));
    let p = pool(2, 4);
    for _ in 0..12 {
        let r = ran.clone();
        p.spawn(move || {
            thread::sleep(Duration::from_millis(5));
            r.fetch_add(1, Ordering::SeqCst);
        })
        .ok()
        .unwrap();
    }
    // Each task holds a clone of this Arc until it finishes; after the drop only ours is left,
    // which shows the worker threads (and their closures) are gone.
    let token = Arc::new(());
    for _ in 0..4 {
        let t = token.clone();
        p.spawn(move || drop(t)).ok().unwrap();
    }
    drop(p);
    assert_eq!(ran.load(Ordering::SeqCst), 12);
    assert_eq!(Arc::strong_count(&token), 1);
}

#[test]
fn shutdown_and_drop_from_inside_a_task_do_not_deadlock() {
    let p = Arc::new(pool(2, 4));
    let p2 = p.clone();
    // `shutdown` from a task cannot join its own thread: it waits for the others, then false.
    let inner = p.spawn_handle(move || p2.shutdown(PATIENCE));
    assert!(!inner.join().unwrap());
    assert!(p.shutdown(PATIENCE));

    // Dropping the last reference inside a task (a common shape when tasks own the pool).
    let p = Arc::new(pool(2, 4));
    let p2 = p.clone();
    let h = p.spawn_handle(move || {
        thread::sleep(Duration::from_millis(20));
        drop(p2);
    });
    drop(p);
    h.join().unwrap();
}
