//! Sessions and duplex contracts (WCF's `PerSession` instances and `CallbackContract`), on
//! every binding that carries a bidirectional stream (keel-wire, HTTP/2), and HTTP/1.1's
//! refusal: calls in a session run in order on the session's own instance; the handler calls
//! the client back through its `Context`, one-way and request-reply, also after the call that
//! started it returned; the instance is dropped when the session closes or its client
//! disappears; a per-session service refuses calls made outside a session.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use keel::Context;

/// What the service calls on the client.
#[keel::contract]
pub trait Notes {
    /// A one-way note.
    #[keel(one_way)]
    fn note(&self, text: String);
    /// A question the client answers.
    async fn ask(&self, question: String) -> String;
}

/// A per-session counter with callbacks.
#[keel::contract(callback = Notes)]
pub trait Counter {
    /// Adds `n`; calls back `note("+n=total")`.
    #[keel(one_way)]
    fn add(&self, ctx: Context, n: u64);
    /// The session's total.
    async fn total(&self) -> u64;
    /// Asks the client a question through the callback and returns its answer.
    async fn ask_client(&self, ctx: Context, question: String) -> String;
    /// Returns at once, then calls back `count` notes from a task of its own, after it
    /// returned.
    async fn notes_later(&self, ctx: Context, count: u32);
}

/// One session's instance; `live` counts the instances of its host.
struct Session {
    total: Mutex<u64>,
    live: Arc<AtomicUsize>,
}

impl Session {
    fn new(live: &Arc<AtomicUsize>) -> Session {
        live.fetch_add(1, Ordering::SeqCst);
        Session {
            total: Mutex::new(0),
            live: live.clone(),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Counter for Session {
    fn add(&self, ctx: Context, n: u64) {
        let total = {
            let mut t = self.total.lock().unwrap();
            *t += n;
            *t
        };
        let notes = ctx.callback::<NotesBlockingClient>().expect("in a session");
        notes.note(format!("+{n}={total}")).unwrap();
    }
    async fn total(&self) -> u64 {
        *self.total.lock().unwrap()
    }
    async fn ask_client(&self, ctx: Context, question: String) -> String {
        let notes = ctx.callback::<NotesClient>().expect("in a session");
        notes.ask(question).await.unwrap()
    }
    async fn notes_later(&self, ctx: Context, count: u32) {
        let notes = ctx.callback::<NotesClient>().expect("in a session");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            for i in 0..count {
                notes.note(format!("later {i}")).await.unwrap();
            }
        });
    }
}

/// The client's callback: records notes, answers questions.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Notes for Recorder {
    fn note(&self, text: String) {
        self.0.lock().unwrap().push(text);
    }
    async fn ask(&self, question: String) -> String {
        format!("answer to {question}")
    }
}

impl Recorder {
    async fn wait_for(&self, n: usize) -> Vec<String> {
        for _ in 0..1000 {
            let notes = self.0.lock().unwrap().clone();
            if notes.len() >= n {
                return notes;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("only {:?} after 10 s", self.0.lock().unwrap());
    }
}

/// A host with one `Session` per session; the counter of its live instances.
fn start(b: Binding) -> (keel::Host, Arc<AtomicUsize>) {
    let live = Arc::new(AtomicUsize::new(0));
    let counted = live.clone();
    let server = CounterServer::per_session(move |_| Session::new(&counted));
    (b.start(keel::Host::builder().service(server)), live)
}

/// Waits until `live` is `n`.
async fn live_becomes(live: &AtomicUsize, n: usize, b: Binding) {
    for _ in 0..1000 {
        if live.load(Ordering::SeqCst) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{b:?}: {} live instances, expected {n}",
        live.load(Ordering::SeqCst)
    );
}

async fn duplex_session(b: Binding) {
    let (host, live) = start(b);
    let client = CounterClient::new(b.channel(host.url()));
    let recorder = Recorder::default();
    let session = client.open_session(recorder.clone()).await.unwrap();
    for n in 1..=5 {
        session.add(n).await.unwrap();
    }
    assert_eq!(
        session.total().await.unwrap(),
        15,
        "{b:?}: in order, on one instance"
    );
    assert_eq!(
        recorder.wait_for(5).await,
        ["+1=1", "+2=3", "+3=6", "+4=10", "+5=15"],
        "{b:?}"
    );
    assert_eq!(
        session.ask_client("life".into()).await.unwrap(),
        "answer to life",
        "{b:?}: a request-reply callback"
    );
    session.notes_later(3).await.unwrap();
    let notes = recorder.wait_for(8).await;
    assert_eq!(notes[5..], ["later 0", "later 1", "later 2"], "{b:?}");
    // A second session has an instance of its own.
    let other = client.open_session(Recorder::default()).await.unwrap();
    assert_eq!(other.total().await.unwrap(), 0, "{b:?}");
    // Outside a session, a per-session service refuses.
    let e = client.total().await.unwrap_err();
    assert_eq!(
        e.status_code(),
        Some(keel::StatusCode::FailedPrecondition),
        "{e}"
    );
    assert_eq!(live.load(Ordering::SeqCst), 2, "{b:?}");
    // A session's instance goes when its client closes it...
    session.close().await;
    live_becomes(&live, 1, b).await;
    // ... or when its client disappears (its connection closes under it).
    client.close().await;
    live_becomes(&live, 0, b).await;
    let e = other.total().await.unwrap_err();
    assert!(e.is_connection(), "{b:?}: {e}");
    let report = host.shutdown_async().await;
    assert_eq!(report.abandoned_calls, 0, "{b:?}: no session left open");
}

/// Without `per_session`, sessions share the host's one instance; a session without a
/// callback is refused nothing but callbacks.
async fn sessions_of_a_shared_instance(b: Binding) {
    let live = Arc::new(AtomicUsize::new(0));
    let server = CounterServer::new(Session::new(&live));
    let host = b.start(keel::Host::builder().service(server));
    let client = CounterClient::new(b.channel(host.url()));
    let a = client.open_session(Recorder::default()).await.unwrap();
    let c = client.open_session(Recorder::default()).await.unwrap();
    a.add(2).await.unwrap();
    c.add(3).await.unwrap();
    // Calls are in order within a session, not across sessions: each session's `total` runs
    // after its own `add`.
    assert!(a.total().await.unwrap() >= 2, "{b:?}");
    assert_eq!(
        c.total().await.unwrap() + a.total().await.unwrap(),
        10,
        "{b:?}"
    );
    assert_eq!(
        client.total().await.unwrap(),
        5,
        "{b:?}: and outside a session"
    );
    assert_eq!(live.load(Ordering::SeqCst), 1);
    // A drain waits for open sessions (up to the close timeout): these close now.
    a.close().await;
    c.close().await;
    let report = host.shutdown_async().await;
    assert_eq!(report.abandoned_calls, 0, "{b:?}");
}

/// A drain waits for an open session up to the close timeout, then ends it: the client's
/// calls in it fail, and the instance goes.
async fn a_drain_ends_open_sessions_at_the_close_timeout(b: Binding) {
    let live = Arc::new(AtomicUsize::new(0));
    let counted = live.clone();
    let server = CounterServer::per_session(move |_| Session::new(&counted));
    let host = b.start(
        keel::Host::builder()
            .service(server)
            .close_timeout(Duration::from_millis(500)),
    );
    let client = CounterClient::new(b.channel(host.url()));
    let session = client.open_session(Recorder::default()).await.unwrap();
    session.add(1).await.unwrap();
    let report = host.shutdown_async().await;
    assert_eq!(report.abandoned_calls, 1, "{b:?}: the session");
    assert!(session.total().await.is_err(), "{b:?}");
    live_becomes(&live, 0, b).await;
}

/// HTTP/1.1 cannot carry a session (a bidirectional stream): refused, naming HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_over_http1_is_refused_naming_http2() {
    let b = Binding::Http1;
    let (host, live) = start(b);
    let client = CounterClient::new(b.channel(host.url()));
    let e = client.open_session(Recorder::default()).await.unwrap_err();
    assert_eq!(
        e.status_code(),
        Some(keel::StatusCode::Unimplemented),
        "{e}"
    );
    assert!(e.message().contains("HTTP/2"), "{e}");
    assert_eq!(live.load(Ordering::SeqCst), 0, "no instance was made");
    host.shutdown_async().await;
}

binding_matrix! {
    [multiplexed] {
        async fn duplex_session;
        async fn sessions_of_a_shared_instance;
        async fn a_drain_ends_open_sessions_at_the_close_timeout;
    }
}
