//! keel's timer for long waits that are nearly always armed (a connection's keepalive and its
//! calls' deadlines, the host's reapers), on one thread of its own instead of the runtime's
//! timer wheel.
//!
//! Why not tokio's timers: while any timer is armed in a runtime's wheel, each park of its
//! threads is an `epoll_wait` with a timeout, and the kernel arms and cancels a high-resolution
//! timer for every one of them. On the project's VM that cost ~0.9 µs per call with one call in
//! flight, client and host together (`docs/history/performance-rounds.md`, "Sixth round"). A
//! connection has a keepalive deadline and, on a client, the earliest of its calls' deadlines
//! armed at all times, so the runtime's parks would always pay it. Here the runtime's threads
//! park without a timeout, and this thread sleeps until the earliest deadline: a keepalive or a
//! default call deadline is seconds away, so in steady traffic it does not wake at all.
//!
//! Its precision is the OS's (a condition variable's timed wait), about the same as tokio's
//! 1 ms wheel. Short waits that are armed only now and then (a frame's timeout, a queued call's
//! wait) stay on tokio's timers.
//!
//! Its deadlines are on keel's clock ([`clock`]); a test that moves the clock
//! (`keel::testing`, feature `test-util`) wakes this thread, which fires what is due at once.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::clock;

/// A future that completes at `at` (at once if `at` has passed).
pub(crate) fn sleep_until(at: Instant) -> Sleep {
    Sleep { at, key: None }
}

/// See [`sleep_until`]. Dropping it before it fires takes its entry off the timer.
#[derive(Debug)]
pub(crate) struct Sleep {
    at: Instant,
    /// Its entry on the timer, once it waited.
    key: Option<Key>,
}

/// A timer entry's key: its deadline, then a number that makes it unique.
type Key = (Instant, u64);

struct Timer {
    state: Mutex<State>,
    /// Wakes the timer thread when the earliest deadline moved earlier (or, with `test-util`,
    /// the clock moved).
    moved: Condvar,
    /// Tells [`clock_moved`] that the thread has woken what was due.
    #[cfg(feature = "test-util")]
    settled: Condvar,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<Key, Entry>,
    next_id: u64,
    /// Times a test moved the clock.
    #[cfg(feature = "test-util")]
    moves: u64,
    /// Of those, the moves after which the thread has woken every entry due.
    #[cfg(feature = "test-util")]
    settled: u64,
}

/// A sleeper's waker (the entry leaves the map when its deadline passed).
struct Entry {
    waker: Waker,
}

/// The timer, once a wait started it.
static TIMER: OnceLock<&'static Timer> = OnceLock::new();

fn timer() -> &'static Timer {
    TIMER.get_or_init(|| {
        let t: &'static Timer = Box::leak(Box::new(Timer {
            state: Mutex::new(State::default()),
            moved: Condvar::new(),
            #[cfg(feature = "test-util")]
            settled: Condvar::new(),
        }));
        if let Err(e) = std::thread::Builder::new()
            .name("keel-timer".into())
            .stack_size(64 * 1024)
            .spawn(move || t.run())
        {
            // Without its thread no keel timer fires: keepalive and client deadlines would
            // never end a wait. A process that cannot start one thread is failing anyway.
            panic!("keel: cannot start the timer thread: {e}");
        }
        t
    })
}

impl Timer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut st = self.lock();
        loop {
            // Read before the clock: a move counted here is in the reading.
            #[cfg(feature = "test-util")]
            let moves = st.moves;
            let now = clock::now();
            // Wakers are woken outside the lock.
            let mut due = Vec::new();
            while let Some(entry) = st.entries.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove().waker);
            }
            if !due.is_empty() {
                drop(st);
                for waker in due {
                    waker.wake();
                }
                st = self.lock();
                continue;
            }
            #[cfg(feature = "test-util")]
            if st.settled < moves {
                st.settled = moves;
                self.settled.notify_all();
            }
            st = match st.entries.first_key_value() {
                Some((&(at, _), _)) => {
                    let wait = at.saturating_duration_since(now);
                    self.moved
                        .wait_timeout(st, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.moved.wait(st).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let t = timer();
        let mut st = t.lock();
        match self.key {
            Some(key) => match st.entries.get_mut(&key) {
                // Fired: the timer took the entry off.
                None => {
                    self.key = None;
                    return Poll::Ready(());
                }
                Some(entry) => {
                    if !entry.waker.will_wake(cx.waker()) {
                        entry.waker = cx.waker().clone();
                    }
                    return Poll::Pending;
                }
            },
            None if self.at <= clock::now() => return Poll::Ready(()),
            None => {}
        }
        let key = (self.at, st.next_id);
        st.next_id += 1;
        let earliest = st.entries.first_key_value().is_none_or(|(k, _)| key < *k);
        st.entries.insert(
            key,
            Entry {
                waker: cx.waker().clone(),
            },
        );
        self.key = Some(key);
        drop(st);
        if earliest {
            t.moved.notify_one();
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            timer().lock().entries.remove(&key);
        }
    }
}

/// keel's clock moved (`keel::testing`): the thread looks again, and this returns once it has
/// woken every entry due by the clock's new reading. Nothing to do before the thread exists:
/// no entry does either.
#[cfg(feature = "test-util")]
pub(crate) fn clock_moved() {
    let Some(t) = TIMER.get() else {
        return;
    };
    let mut st = t.lock();
    st.moves += 1;
    let moved = st.moves;
    t.moved.notify_one();
    while st.settled < moved {
        st = t.settled.wait(st).unwrap_or_else(|e| e.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn sleeps_end_at_their_deadlines_in_order() {
        let start = Instant::now();
        let ms = |n| start + Duration::from_millis(n);
        let (a, b) = tokio::join!(
            async {
                sleep_until(ms(120)).await;
                Instant::now()
            },
            async {
                sleep_until(ms(40)).await;
                Instant::now()
            }
        );
        assert!(
            b >= ms(40) && a >= ms(120),
            "{:?} {:?}",
            b - start,
            a - start
        );
        assert!(b < a);
        // A deadline in the past is at once; a dropped sleep leaves nothing behind.
        sleep_until(start).await;
        let dropped = tokio::time::timeout(Duration::from_millis(10), sleep_until(ms(60_000)));
        assert!(dropped.await.is_err());
        assert!(timer()
            .lock()
            .entries
            .keys()
            .all(|(at, _)| *at != ms(60_000)));
    }

    #[tokio::test]
    async fn an_earlier_deadline_wakes_the_thread_from_a_later_one() {
        let start = Instant::now();
        let far = tokio::spawn(sleep_until(start + Duration::from_secs(30)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let near = start + Duration::from_millis(80);
        tokio::time::timeout(Duration::from_secs(5), sleep_until(near))
            .await
            .expect("the near deadline waited for the far one");
        assert!(Instant::now() >= near);
        far.abort();
    }
}
