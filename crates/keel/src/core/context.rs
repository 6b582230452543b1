//! [`Context`]: what a handler (and an interceptor) knows about the call it serves.

use std::any::{Any, TypeId};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::compress::Compression;
use super::format::Framing;
use super::metadata::{Metadata, MetadataError};

/// The call a handler serves: who called, over what, with which metadata and deadline; a
/// signal that fires when the caller cancels or goes away; and the reply metadata the handler
/// sends back.
///
/// An operation receives it by declaring a parameter of type `keel::Context` (anywhere in its
/// parameter list). The parameter is not part of the contract: generated clients leave it out.
/// Cloning is cheap (a reference count).
///
/// ```
/// #[keel::contract]
/// pub trait Greeter {
///     async fn hello(&self, ctx: keel::Context, name: String) -> String;
/// }
///
/// struct Polite;
/// impl Greeter for Polite {
///     async fn hello(&self, ctx: keel::Context, name: String) -> String {
///         let tenant = ctx.metadata().get("tenant").unwrap_or("nobody").to_owned();
///         ctx.insert_reply_metadata("served-by", "polite").ok();
///         format!("hello {name} of {tenant}, via {}", ctx.binding())
///     }
/// }
/// ```
#[derive(Clone)]
pub struct Context {
    inner: Arc<Shared>,
}

/// Facts about a call, as the binding and dispatch know them.
#[derive(Debug)]
pub(crate) struct CallFacts {
    pub(crate) service: &'static str,
    pub(crate) operation: &'static str,
    pub(crate) binding: &'static str,
    pub(crate) peer_addr: Option<SocketAddr>,
    pub(crate) peer_certificates: Option<Arc<[Bytes]>>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) metadata: Metadata,
    /// How the reply body may be compressed, if the caller accepts that.
    pub(crate) reply_codec: Option<Compression>,
    /// The call's span (disabled when no subscriber wants it).
    pub(crate) span: tracing::Span,
    /// How a reply stream of messages is framed (the binding's choice: NDJSON, SSE, ...).
    pub(crate) reply_framing: Framing,
    /// How a request stream of messages is framed when the binding chose other than its
    /// format's own framing (gRPC: length-prefixed messages whatever the format); `None`:
    /// [`Framing::for_format`].
    pub(crate) request_framing: Option<Framing>,
    /// The largest message a request stream of messages may carry.
    pub(crate) max_message_size: u32,
    /// The session the call runs in, if any (the client layer's callback channel).
    pub(crate) session: Option<Arc<dyn Any + Send + Sync>>,
    /// For an operation with a stream of messages: its message counters (metrics).
    pub(crate) stream_counters: Option<super::metrics::StreamCounters>,
}

struct Shared {
    facts: CallFacts,
    cancelled: AtomicBool,
    /// Someone awaits (or awaited) [`Context::cancelled`]: `cancel` must notify.
    awaited: AtomicBool,
    notify: Notify,
    reply_metadata: Mutex<Metadata>,
    /// One value per type, in insertion order. A list, not a map: a call carries a few at
    /// most, and an empty list costs nothing to make (a `HashMap` reads its thread's random
    /// keys even when empty), on every call.
    extensions: Mutex<Vec<(TypeId, Box<dyn Any + Send + Sync>)>>,
    /// The task running the call's async handler, once it was spawned (one that completes at
    /// its first poll never is), so that stopping the call aborts it. Kept here rather than
    /// beside the context: the host's record of a call in flight is its context, one
    /// allocation per call instead of two.
    task: Mutex<Option<AbortHandle>>,
}

impl Context {
    pub(crate) fn new(facts: CallFacts) -> Context {
        Context {
            inner: Arc::new(Shared {
                facts,
                cancelled: AtomicBool::new(false),
                awaited: AtomicBool::new(false),
                notify: Notify::new(),
                reply_metadata: Mutex::new(Metadata::new()),
                extensions: Mutex::new(Vec::new()),
                task: Mutex::new(None),
            }),
        }
    }

    /// A context for a call that arrived on no connection (for tests and fuzzing that invoke a
    /// service directly). Not a public API.
    #[doc(hidden)]
    pub fn detached(service: &'static str, operation: &'static str) -> Context {
        Context::new(CallFacts {
            service,
            operation,
            binding: "none",
            peer_addr: None,
            peer_certificates: None,
            deadline: None,
            metadata: Metadata::new(),
            reply_codec: None,
            span: tracing::Span::none(),
            reply_framing: Framing::Envelope,
            request_framing: None,
            max_message_size: keel_wire::DEFAULT_MAX_MESSAGE_SIZE,
            session: None,
            stream_counters: None,
        })
    }

    /// The operation's message counters, for an operation with a stream of messages.
    pub(crate) fn stream_counters(&self) -> Option<&super::metrics::StreamCounters> {
        self.inner.facts.stream_counters.as_ref()
    }

    /// The session the call runs in, if any.
    pub(crate) fn session(&self) -> Option<&Arc<dyn Any + Send + Sync>> {
        self.inner.facts.session.as_ref()
    }

    /// How a reply stream of messages is framed.
    pub(crate) fn reply_framing(&self) -> Framing {
        self.inner.facts.reply_framing
    }

    /// How a request stream of messages in `format` is framed.
    pub(crate) fn request_framing(&self, format: super::format::Format) -> Framing {
        self.inner
            .facts
            .request_framing
            .unwrap_or_else(|| Framing::for_format(format))
    }

    /// The largest message a request stream of messages may carry.
    pub(crate) fn max_message_size(&self) -> usize {
        self.inner.facts.max_message_size as usize
    }

    /// How the reply may be compressed (the caller accepts this codec).
    pub(crate) fn reply_codec(&self) -> Option<Compression> {
        self.inner.facts.reply_codec
    }

    /// The contract (service) name, e.g. `Calculator`.
    pub fn service(&self) -> &'static str {
        self.inner.facts.service
    }

    /// The operation name, e.g. `add`.
    pub fn operation(&self) -> &'static str {
        self.inner.facts.operation
    }

    /// The binding the call came over, as its URL scheme: `tcp`, `tcps`, `unix`, `http` or
    /// `https`.
    pub fn binding(&self) -> &'static str {
        self.inner.facts.binding
    }

    /// The caller's address; `None` on a Unix socket.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.facts.peer_addr
    }

    /// The caller's TLS certificate chain (DER, its own certificate first), when it presented
    /// one: under mutual TLS (see `keel::tls::ServerTls`). `None` on plain bindings.
    pub fn peer_certificates(&self) -> Option<&[Bytes]> {
        self.inner.facts.peer_certificates.as_deref()
    }

    /// The call's [`tracing`](https://docs.rs/tracing) span on the host (`keel.call`, target
    /// `keel::server`; its fields are in the crate docs, "Tracing"). Decoding and the handler
    /// run inside it. When interceptors run `before`, it has not been entered yet, so an
    /// interceptor can still give it a parent, such as the caller's trace context from the
    /// metadata (`tracing_opentelemetry::OpenTelemetrySpanExt::set_parent`, with that crate's
    /// default settings); `examples/trace.rs` does. A disabled span when no subscriber wants
    /// it.
    pub fn span(&self) -> &tracing::Span {
        &self.inner.facts.span
    }

    /// The request metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.inner.facts.metadata
    }

    /// When the caller stops waiting, if it set a deadline (keel's clients always do).
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.facts.deadline
    }

    /// Time left until the deadline (zero once it passed); `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline()
            .map(|d| d.saturating_duration_since(crate::runtime::clock::now()))
    }

    /// Whether the call is over for the host: the caller cancelled it or went away, its
    /// deadline passed, a drain ran out of time, or it was answered (as in gRPC, a context
    /// ends with its call). A blocking handler polls this to stop early; an async handler is
    /// simply dropped, and tasks it spawned can await [`Context::cancelled`].
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Completes when the call is cancelled (see [`Context::is_cancelled`]).
    pub async fn cancelled(&self) {
        // Said before the flag is read, so that `cancel` either notifies or was seen here
        // (both sides SeqCst: see `cancel`).
        self.inner.awaited.store(true, Ordering::SeqCst);
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inner.cancelled.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// Sets reply metadata `key` to a text value (replacing earlier values), sent back with the
    /// answer whatever it is. See [`Metadata::insert`] for the rules.
    pub fn insert_reply_metadata(&self, key: &str, value: &str) -> Result<(), MetadataError> {
        self.reply_metadata().insert(key, value).map(|_| ())
    }

    /// Adds every entry of `metadata` to the reply metadata (replacing values of the same keys).
    pub fn merge_reply_metadata(&self, metadata: &Metadata) {
        self.reply_metadata().merge(metadata);
    }

    fn reply_metadata(&self) -> MutexGuard<'_, Metadata> {
        self.inner.reply_metadata.lock()
    }

    /// Stores a value for later steps of this call (one per type): an interceptor records the
    /// caller's identity, the handler reads it with [`Context::extension`].
    pub fn insert_extension<T: Clone + Send + Sync + 'static>(&self, value: T) {
        let mut extensions = self.extensions();
        let value: Box<dyn Any + Send + Sync> = Box::new(value);
        match extensions.iter_mut().find(|(t, _)| *t == TypeId::of::<T>()) {
            Some((_, old)) => *old = value,
            None => extensions.push((TypeId::of::<T>(), value)),
        }
    }

    /// The value of type `T` stored with [`Context::insert_extension`], if any.
    pub fn extension<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        self.extensions()
            .iter()
            .find(|(t, _)| *t == TypeId::of::<T>())
            .and_then(|(_, v)| v.downcast_ref::<T>())
            .cloned()
    }

    fn extensions(&self) -> MutexGuard<'_, Vec<(TypeId, Box<dyn Any + Send + Sync>)>> {
        self.inner.extensions.lock()
    }

    /// Fires the cancellation signal.
    pub(crate) fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        // Every call's context is cancelled when the call ends, and most were never awaited:
        // those skip the notification (it takes a lock). A waiter that set `awaited` after
        // this load reads `cancelled` after the store above, and returns without waiting.
        if self.inner.awaited.load(Ordering::SeqCst) {
            self.inner.notify.notify_waiters();
        }
    }

    /// The call's async handler now runs in the task `task`: [`stop`](Context::stop) aborts it.
    /// A call stopped (or ended) before this gets its task aborted here: the task is spawned
    /// before it is set, and a `stop` from another thread in between (its connection closing)
    /// found no task to abort. (Seen in CI: a QUIC call whose connection closed went on for its
    /// whole 30 s, its place on the host already freed.) Aborting the task of a call that ended
    /// does nothing: it has no await left.
    pub(crate) fn set_task(&self, task: AbortHandle) {
        *self.inner.task.lock() = Some(task.clone());
        if self.is_cancelled() {
            task.abort();
        }
    }

    /// [`set_task`](Context::set_task) for a task that may itself have started the handler's
    /// own task (and set it) already: keeps that one. A call stopped before this gets its task
    /// aborted here.
    pub(crate) fn set_task_unless_set(&self, task: AbortHandle) {
        {
            let mut slot = self.inner.task.lock();
            if slot.is_none() {
                *slot = Some(task.clone());
            }
        }
        if self.is_cancelled() {
            task.abort();
        }
    }

    /// The call will not be answered by its handler: the cancellation signal fires (a blocking
    /// job that has not started must not start; one already running finishes, as threads
    /// cannot be interrupted, but sees it is cancelled), and an async handler's task, if it
    /// has one, is aborted.
    pub(crate) fn stop(&self) {
        self.cancel();
        let task = self.inner.task.lock().take();
        if let Some(task) = task {
            task.abort();
        }
    }

    /// The reply metadata set so far, taken out.
    pub(crate) fn take_reply_metadata(&self) -> Metadata {
        std::mem::take(&mut *self.reply_metadata())
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let facts = &self.inner.facts;
        f.debug_struct("Context")
            .field("service", &facts.service)
            .field("operation", &facts.operation)
            .field("binding", &facts.binding)
            .field("peer_addr", &facts.peer_addr)
            .field("deadline", &facts.deadline)
            .field("metadata", &facts.metadata)
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context::new(CallFacts {
            service: "S",
            operation: "op",
            binding: "tcp",
            peer_addr: None,
            peer_certificates: None,
            deadline: None,
            metadata: Metadata::new(),
            reply_codec: None,
            span: tracing::Span::none(),
            reply_framing: Framing::Envelope,
            request_framing: None,
            max_message_size: keel_wire::DEFAULT_MAX_MESSAGE_SIZE,
            session: None,
            stream_counters: None,
        })
    }

    /// `stop` between the handler's task being spawned and being set (another thread closing
    /// the connection): the task is aborted when it is set.
    #[tokio::test]
    async fn a_task_set_after_its_call_was_stopped_is_aborted() {
        let c = ctx();
        let task = tokio::spawn(std::future::pending::<()>());
        c.stop();
        c.set_task(task.abort_handle());
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("the stopped call's task still runs");
        assert!(ended.unwrap_err().is_cancelled());
    }

    #[tokio::test]
    async fn cancellation_wakes_waiters_and_sticks() {
        let c = ctx();
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.cancelled().await }
        });
        tokio::task::yield_now().await;
        assert!(!c.is_cancelled());
        c.cancel();
        waiter.await.unwrap();
        assert!(c.is_cancelled());
        c.cancelled().await; // already fired: returns at once
    }

    #[test]
    fn extensions_and_reply_metadata() {
        let c = ctx();
        c.insert_extension(String::from("alice"));
        assert_eq!(c.extension::<String>().as_deref(), Some("alice"));
        assert_eq!(c.extension::<u32>(), None);
        // One value per type: a second insert replaces the first.
        c.insert_extension(7u32);
        c.insert_extension(String::from("bob"));
        assert_eq!(c.extension::<String>().as_deref(), Some("bob"));
        assert_eq!(c.extension::<u32>(), Some(7));
        c.insert_reply_metadata("a", "1").unwrap();
        assert!(c.insert_reply_metadata("bad key", "1").is_err());
        assert_eq!(c.take_reply_metadata().get("a"), Some("1"));
        assert!(c.take_reply_metadata().is_empty());
    }
}
