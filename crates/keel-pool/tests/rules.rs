//! One test (or a few) per rule of the pool: injection, warm floor, retirement, LIFO, the cap,
//! spawn failures, panics. Shutdown semantics are in `shutdown.rs`, the stress test in
//! `stress.rs`.

mod common;

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{wait_for, Latch};
use keel_pool::{JoinError, Pool, Task};

fn pool(min: usize, max: usize, keep_alive: Duration) -> Pool {
    Pool::builder()
        .min_threads(min)
        .max_threads(max)
        .keep_alive(keep_alive)
        .build()
        .unwrap()
}

fn spawn_blockers(pool: &Pool, latch: &Arc<Latch>, n: usize) {
    for _ in 0..n {
        let l = latch.clone();
        pool.spawn(move || l.enter()).ok().unwrap();
    }
}

#[test]
fn build_starts_the_floor_parked() {
    let p = pool(3, 8, Duration::from_secs(60));
    let m = p.metrics();
    assert_eq!((m.threads, m.idle, m.busy, m.queued), (3, 3, 0, 0));
    assert_eq!(m.created_total, 3);
}

/// Submits `n` tasks through `submit` that only finish when all `n` run at the same time, and
/// checks they did, with exactly `n` threads created in all and nothing left queued; then lets
/// them finish.
fn all_run_at_once(p: &Pool, n: usize, submit: impl FnOnce(&Arc<Latch>)) {
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    submit(&latch);
    wait_for(&format!("{n} tasks running at once"), || {
        latch.running() == n
    });
    let m = p.metrics();
    let n = n as u64;
    assert_eq!(
        (m.threads as u64, m.created_total, m.queued),
        (n, n, 0),
        "{m:?}"
    );
    latch.release();
    wait_for("all done", || p.metrics().completed_total == n);
}

#[test]
fn injection_runs_every_waiting_task_at_once() {
    // 50 tasks that only finish when all 50 run at the same time: passes only if the pool
    // creates one thread per waiting task (2 idle are woken, 48 created).
    // Exactly k − i new threads: 2 idle woken, 48 created, none wasted.
    let p = pool(2, 64, Duration::from_secs(60));
    all_run_at_once(&p, 50, |latch| spawn_blockers(&p, latch, 50));
}

#[test]
fn the_chain_of_wake_ups_reaches_every_idle_thread() {
    // 20 idle threads, 20 tasks that only finish when all 20 run at once: the chain (at most
    // one thread per core on its way at a time) must wake all of them, and no thread may be
    // created for tasks an idle thread was about to take.
    let p = pool(20, 64, Duration::from_secs(60));
    all_run_at_once(&p, 20, |latch| spawn_blockers(&p, latch, 20));
}

#[test]
fn threads_are_never_created_on_the_submitting_thread() {
    let creators = Arc::new(Mutex::new(Vec::new()));
    let armed = Arc::new(AtomicBool::new(false));
    let (c, a) = (creators.clone(), armed.clone());
    let p = Pool::builder()
        .min_threads(1)
        .max_threads(32)
        .spawn_hook(Arc::new(move || {
            if a.load(Ordering::SeqCst) {
                c.lock().unwrap().push(thread::current().id());
            }
            Ok(())
        }))
        .build()
        .unwrap();
    armed.store(true, Ordering::SeqCst);
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    spawn_blockers(&p, &latch, 20);
    drop(p.spawn_handle(|| ()));
    wait_for("20 running", || latch.running() == 20);
    latch.release();
    let creators = creators.lock().unwrap();
    assert!(creators.len() >= 19, "{} creations", creators.len());
    assert!(!creators.contains(&thread::current().id()));
}

#[test]
fn floor_never_retires() {
    let keep_alive = Duration::from_millis(10);
    let p = pool(3, 16, keep_alive);
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    spawn_blockers(&p, &latch, 10);
    wait_for("10 running", || latch.running() == 10);
    latch.release();
    wait_for("back to the floor", || p.metrics().threads == 3);
    // Watch for 30 keep-alive periods: never below the floor.
    let until = Instant::now() + keep_alive * 30;
    while Instant::now() < until {
        let m = p.metrics();
        assert_eq!(m.threads, 3, "{m:?}");
        thread::sleep(Duration::from_millis(2));
    }
    let m = p.metrics();
    assert_eq!(m.retired_total, m.created_total - 3);
    assert_eq!(m.idle, 3);
}

#[test]
fn threads_above_the_floor_retire_after_keep_alive() {
    let keep_alive = Duration::from_millis(150);
    let p = pool(1, 16, keep_alive);
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    spawn_blockers(&p, &latch, 8);
    wait_for("8 running", || latch.running() == 8);
    assert!(p.metrics().threads >= 8);
    latch.release();
    wait_for("tasks done", || p.metrics().completed_total == 8);
    let released = Instant::now();
    wait_for("retired down to the floor", || p.metrics().threads == 1);
    // No thread may retire before it has been idle for keep_alive (a lower bound only).
    assert!(released.elapsed() >= keep_alive.mul_f64(0.9));
    let m = p.metrics();
    assert_eq!(m.retired_total, m.created_total - 1);
    // And the pool still works, from the floor.
    assert_eq!(p.spawn_handle(|| 7).join().unwrap(), 7);
}

#[test]
fn idle_threads_are_reused_most_recently_idle_first() {
    let p = pool(4, 8, Duration::from_secs(60));
    let mut seen = HashSet::new();
    for _ in 0..20 {
        wait_for("all idle", || p.metrics().idle == 4);
        seen.insert(p.spawn_handle(|| thread::current().id()).join().unwrap());
    }
    assert_eq!(seen.len(), 1, "LIFO reuses the same warm thread");
}

#[test]
fn under_light_load_cold_threads_age_out() {
    // Four threads, then one task at a time: LIFO keeps reusing one thread, so the other three
    // stay idle long enough to retire even though the pool is never idle for `keep_alive`.
    let keep_alive = Duration::from_millis(100);
    let p = pool(0, 8, keep_alive);
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    spawn_blockers(&p, &latch, 4);
    wait_for("4 running", || latch.running() == 4);
    latch.release();
    wait_for("drained", || p.metrics().completed_total == 4);
    wait_for(
        "cold threads retired while a trickle of work continues",
        || {
            p.spawn_handle(|| thread::sleep(Duration::from_millis(1)))
                .join()
                .unwrap();
            thread::sleep(keep_alive / 5);
            p.metrics().threads == 1
        },
    );
}

#[test]
fn max_threads_is_respected_and_excess_work_waits_then_runs() {
    let p = pool(1, 4, Duration::from_secs(60));
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    spawn_blockers(&p, &latch, 10);
    wait_for("4 running, 6 queued", || {
        let m = p.metrics();
        latch.running() == 4 && m.queued == 6
    });
    thread::sleep(Duration::from_millis(30));
    let m = p.metrics();
    assert_eq!((m.threads, m.queued, latch.running()), (4, 6, 4), "{m:?}");
    latch.release();
    wait_for("all 10 ran", || latch.done() == 10);
    assert_eq!(latch.max_running(), 4);
    assert!(p.metrics().created_total <= 4);
}

/// A hook that makes every thread creation fail while `fail` is set, like EAGAIN from the OS.
fn failing_pool(min: usize, max: usize, fail: &Arc<AtomicBool>) -> Pool {
    let f = fail.clone();
    Pool::builder()
        .min_threads(min)
        .max_threads(max)
        .spawn_hook(Arc::new(move || {
            if f.load(Ordering::SeqCst) {
                Err(io::Error::from(io::ErrorKind::WouldBlock))
            } else {
                Ok(())
            }
        }))
        .build()
        .unwrap()
}

#[test]
fn refused_threads_leave_work_queued_until_creation_works_again() {
    let fail = Arc::new(AtomicBool::new(false));
    let p = failing_pool(1, 16, &fail);
    fail.store(true, Ordering::SeqCst);
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    spawn_blockers(&p, &latch, 6);
    wait_for("failures counted, work queued", || {
        let m = p.metrics();
        m.spawn_failures_total >= 2 && m.queued == 5 && latch.running() == 1
    });
    assert_eq!(p.metrics().threads, 1);
    fail.store(false, Ordering::SeqCst);
    wait_for("all 6 running once creation works", || latch.running() == 6);
    latch.release();
    wait_for("done", || latch.done() == 6);
}

#[test]
fn refused_threads_leave_work_for_existing_threads() {
    let fail = Arc::new(AtomicBool::new(false));
    let p = failing_pool(2, 16, &fail);
    fail.store(true, Ordering::SeqCst);
    let ran = Arc::new(AtomicUsize::new(0));
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    spawn_blockers(&p, &latch, 2);
    for _ in 0..20 {
        let r = ran.clone();
        p.spawn(move || {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .ok()
        .unwrap();
    }
    wait_for("a failure", || p.metrics().spawn_failures_total >= 1);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    latch.release(); // the floor threads are free again; OS still refusing
    wait_for("queued work ran on the existing threads", || {
        ran.load(Ordering::SeqCst) == 20
    });
    let m = p.metrics();
    assert_eq!((m.threads, m.created_total), (2, 2), "{m:?}");
}

#[test]
fn build_fails_cleanly_if_the_floor_cannot_be_created() {
    let fail = Arc::new(AtomicBool::new(true));
    let f = fail.clone();
    let err = Pool::builder()
        .min_threads(2)
        .spawn_hook(Arc::new(move || {
            if f.load(Ordering::SeqCst) {
                Err(io::Error::from(io::ErrorKind::WouldBlock))
            } else {
                Ok(())
            }
        }))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
}

#[test]
fn a_panicking_task_goes_to_its_handle_and_the_pool_keeps_running() {
    let p = pool(2, 8, Duration::from_secs(60));
    let err = p
        .spawn_handle(|| -> u32 { panic!("task exploded {}", std::hint::black_box(42)) })
        .join()
        .unwrap_err();
    assert!(err.is_panic() && !err.is_cancelled());
    assert_eq!(err.panic_message(), Some("task exploded 42"));
    assert_eq!(err.to_string(), "task panicked: task exploded 42");
    assert!(matches!(&err, JoinError::Panicked(_)));
    let payload = err.into_panic();
    assert_eq!(
        payload.downcast_ref::<String>().unwrap(),
        "task exploded 42"
    );

    p.spawn(|| panic!("fire-and-forget panic")).ok().unwrap();
    wait_for("both panics counted", || p.metrics().panicked_total == 2);
    for i in 0..10 {
        assert_eq!(p.spawn_handle(move || i * 2).join().unwrap(), i * 2);
    }
    // `join` returns as soon as the result is set; the worker counts the task just after.
    wait_for("all counted", || p.metrics().completed_total == 12);
    // No worker died of the panics. (How many threads there are depends on timing: a task
    // submitted while a worker still unwinds a panic gets a new thread, as the pool's rule
    // says; on a loaded machine that happens.)
    let m = p.metrics();
    assert_eq!((m.died_total, m.completed_total), (0, 12), "{m:?}");
    assert!(m.threads >= 2, "{m:?}");
    assert_eq!(m.threads as u64, m.created_total - m.retired_total, "{m:?}");
}

/// A panic payload whose own `Drop` panics: the worker that drops it dies for real.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("payload drop panicked");
    }
}

#[test]
fn a_thread_that_dies_anyway_is_replaced() {
    let p = pool(2, 8, Duration::from_secs(60));
    p.spawn(|| std::panic::panic_any(Bomb)).ok().unwrap();
    wait_for("death recorded", || p.metrics().died_total == 1);
    wait_for("floor restored", || {
        let m = p.metrics();
        m.threads == 2 && m.idle == 2
    });
    assert_eq!(p.metrics().created_total, 3);
    let latch = Latch::new();
    let _release = latch.release_on_drop();
    spawn_blockers(&p, &latch, 4);
    wait_for("still injects", || latch.running() == 4);
    latch.release();
}

#[test]
fn metrics_add_up_and_record_queue_wait() {
    let p = pool(2, 8, Duration::from_secs(60));
    let handles: Vec<_> = (0..100).map(|i| p.spawn_handle(move || i)).collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), i);
    }
    wait_for("counted", || p.metrics().completed_total == 100);
    let m = p.metrics();
    assert_eq!(m.queue_wait.count(), 100);
    assert_eq!(m.busy + m.idle, m.threads);
    assert_eq!(
        m.created_total - m.retired_total - m.died_total,
        m.threads as u64
    );
    let (p50, p99) = (m.queue_wait_quantile(0.5), m.queue_wait_quantile(0.99));
    assert!(p50 <= p99 && p99 <= m.queue_wait_quantile(1.0));
    assert!(p50 > Duration::ZERO && p99 < Duration::from_secs(10));
}

#[test]
fn join_handle_is_a_future() {
    let p = pool(2, 8, Duration::from_secs(60));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let v = rt.block_on(async {
        let a = p.spawn_handle(|| {
            thread::sleep(Duration::from_millis(20));
            "slow"
        });
        let b = p.spawn_handle(|| "fast");
        (a.await.unwrap(), b.await.unwrap())
    });
    assert_eq!(v, ("slow", "fast"));
    let err = rt
        .block_on(p.spawn_handle(|| -> () { panic!("async panic") }))
        .unwrap_err();
    assert_eq!(err.panic_message(), Some("async panic"));
}

#[test]
fn a_detached_handle_still_runs_its_task() {
    let p = pool(1, 4, Duration::from_secs(60));
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    drop(p.spawn_handle(move || r.store(true, Ordering::SeqCst)));
    wait_for("ran", || ran.load(Ordering::SeqCst));
}

#[test]
fn a_batch_runs_every_task_at_once_like_single_spawns() {
    // 2 idle threads and a batch of 30 tasks that only finish when all 30 run at the same
    // time: the batch is queued together, the idle threads take what they can and the
    // spawner creates exactly the rest.
    let p = pool(2, 64, Duration::from_secs(60));
    all_run_at_once(&p, 30, |latch| {
        let tasks = (0..30).map(|_| {
            let l = latch.clone();
            Task::new(move || l.enter())
        });
        p.spawn_batch(tasks).unwrap();
    });
    // An empty batch is nothing to do; a single task goes as `spawn` would.
    p.spawn_batch(std::iter::empty()).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    p.spawn_task(Task::new(move || r.store(true, Ordering::SeqCst)))
        .unwrap();
    wait_for("the single task ran", || ran.load(Ordering::SeqCst));
}

#[test]
fn a_batch_for_a_closed_pool_comes_back_whole() {
    let p = pool(1, 4, Duration::from_secs(60));
    assert!(p.shutdown(Duration::from_secs(5)));
    let ran = Arc::new(AtomicUsize::new(0));
    let tasks = (0..3).map(|_| {
        let r = ran.clone();
        Task::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
        })
    });
    let refused = p.spawn_batch(tasks).unwrap_err().0;
    assert_eq!(refused.len(), 3);
    for task in refused {
        task.run();
    }
    let r = ran.clone();
    let single = Task::new(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    p.spawn_task(single).unwrap_err().0.run();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        4,
        "the caller can still run them"
    );
}
