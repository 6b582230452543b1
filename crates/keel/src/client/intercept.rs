//! Client-side interceptors: an ordered chain that sees every call a channel makes, the
//! synchronous ones first ([`Interceptor`]), then those that may wait ([`AsyncInterceptor`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::error::Error;
use crate::core::metadata::Metadata;
use crate::core::status::Status;

/// One call as an [`Interceptor`] sees it: which operation, its request metadata (which
/// `before` may change), and when it started.
#[derive(Debug)]
pub struct ClientCall {
    service: &'static str,
    operation: &'static str,
    metadata: Metadata,
    started: Instant,
}

impl ClientCall {
    pub(crate) fn new(service: &'static str, operation: &'static str, metadata: Metadata) -> Self {
        ClientCall {
            service,
            operation,
            metadata,
            started: Instant::now(),
        }
    }

    /// The contract (service) name.
    pub fn service(&self) -> &'static str {
        self.service
    }

    /// The operation name.
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The request metadata: the channel's defaults, then the call's own.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The request metadata, to add to (in `before`).
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// Time since the call started (since the first interceptor's `before`).
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Sees every call a channel makes, in the order interceptors were added
/// ([`ChannelBuilder::interceptor`](crate::client::ChannelBuilder::interceptor)): `before` ahead of
/// encoding and sending (it may add metadata, or refuse the call with a [`Status`], which the
/// caller then gets as its error without anything being sent), `after` (in reverse order) once
/// the call has its outcome.
///
/// ```
/// use keel::client::{ClientCall, Interceptor};
/// use keel::Status;
///
/// /// Sends a bearer token with every call.
/// struct Bearer(String);
///
/// impl Interceptor for Bearer {
///     fn before(&self, call: &mut ClientCall) -> Result<(), Status> {
///         call.metadata_mut()
///             .insert("authorization", &format!("Bearer {}", self.0))
///             .map_err(|e| Status::invalid_argument(e.to_string()))?;
///         Ok(())
///     }
/// }
///
/// let channel = keel::Channel::builder("tcp://127.0.0.1:7000")
///     .interceptor(Bearer("s3cret".into()))
///     .build()?;
/// # Ok::<(), keel::Error>(())
/// ```
pub trait Interceptor: Send + Sync + 'static {
    /// Runs before the call is sent; an `Err` fails the call with that status.
    fn before(&self, call: &mut ClientCall) -> Result<(), Status> {
        let _ = call;
        Ok(())
    }

    /// Runs once the call has its outcome (`Ok` for success).
    fn after(&self, call: &ClientCall, outcome: Result<(), &Error>) {
        let _ = (call, outcome);
    }
}

/// A client interceptor whose `before` may wait: it fetches or refreshes a token from an
/// identity provider, asks a policy service, ... Added with
/// [`ChannelBuilder::async_interceptor`](crate::client::ChannelBuilder::async_interceptor).
///
/// A channel's async interceptors run after its synchronous ones, in the order they were
/// added, before the call is sent; the call's deadline runs meanwhile. `before` may add
/// metadata or refuse the call with a [`Status`] (the caller gets it as its error, nothing is
/// sent). `after` runs, in reverse order and before the synchronous interceptors' `after`,
/// once the call has its outcome. A channel without async interceptors pays nothing for them.
///
/// ```
/// use std::sync::Arc;
/// use keel::client::{AsyncInterceptor, ClientCall};
/// use keel::Status;
/// use tokio::sync::RwLock;
///
/// /// Sends the current token, which another task refreshes.
/// struct Bearer(Arc<RwLock<String>>);
///
/// impl AsyncInterceptor for Bearer {
///     async fn before(&self, call: &mut ClientCall) -> Result<(), Status> {
///         let token = self.0.read().await.clone();
///         call.metadata_mut()
///             .insert("authorization", &format!("Bearer {token}"))
///             .map_err(|e| Status::invalid_argument(e.to_string()))?;
///         Ok(())
///     }
/// }
///
/// let token = Arc::new(RwLock::new(String::from("s3cret")));
/// let channel = keel::Channel::builder("tcp://127.0.0.1:7000")
///     .async_interceptor(Bearer(token))
///     .build()?;
/// # Ok::<(), keel::Error>(())
/// ```
pub trait AsyncInterceptor: Send + Sync + 'static {
    /// Runs before the call is sent (after the synchronous interceptors' `before`); an `Err`
    /// fails the call with that status.
    fn before(&self, call: &mut ClientCall) -> impl Future<Output = Result<(), Status>> + Send;

    /// Runs once the call has its outcome (`Ok` for success). It cannot wait.
    fn after(&self, call: &ClientCall, outcome: Result<(), &Error>) {
        let _ = (call, outcome);
    }
}

/// An [`AsyncInterceptor`] with its future boxed, so that a channel keeps a list of them.
pub(crate) trait DynAsyncInterceptor: Send + Sync + 'static {
    /// [`AsyncInterceptor::before`], boxed.
    fn before<'a>(&'a self, call: &'a mut ClientCall) -> BoxedVerdict<'a>;
    /// [`AsyncInterceptor::after`].
    fn after(&self, call: &ClientCall, outcome: Result<(), &Error>);
}

/// An async interceptor's `before`, boxed.
pub(crate) type BoxedVerdict<'a> = Pin<Box<dyn Future<Output = Result<(), Status>> + Send + 'a>>;

impl<T: AsyncInterceptor> DynAsyncInterceptor for T {
    fn before<'a>(&'a self, call: &'a mut ClientCall) -> BoxedVerdict<'a> {
        Box::pin(AsyncInterceptor::before(self, call))
    }

    fn after(&self, call: &ClientCall, outcome: Result<(), &Error>) {
        AsyncInterceptor::after(self, call, outcome)
    }
}

/// A channel's interceptors: the synchronous ones, which run first, then the async ones.
#[derive(Default, Clone)]
pub(crate) struct Interceptors {
    pub(crate) sync: Vec<Arc<dyn Interceptor>>,
    pub(crate) deferred: Vec<Arc<dyn DynAsyncInterceptor>>,
}

impl Interceptors {
    /// How many there are (for `Debug`).
    pub(crate) fn len(&self) -> usize {
        self.sync.len() + self.deferred.len()
    }
}
