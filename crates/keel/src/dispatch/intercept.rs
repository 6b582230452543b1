//! Host-side interceptors: an ordered chain that sees every call before and after it, the
//! synchronous ones first ([`Interceptor`]), then those that may wait ([`AsyncInterceptor`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::core::context::Context;
use crate::core::metadata::Metadata;
use crate::core::status::{Status, StatusCode};

use super::panics::CatchUnwind;
use super::{Dispatcher, HostConnInfo};

/// The operation name in the [`Context`] an interceptor sees for a request for a description
/// of the host's contracts rather than a call: `GET /{Service}` (service: that contract's
/// name) and `GET /openapi.json` (service: [`ALL_SERVICES`], as for a `GET /{Service}` naming
/// no contract the host serves). gRPC's server reflection is a
/// service like any other (`grpc.reflection.v1.ServerReflection`, operation
/// `ServerReflectionInfo`). No operation can have this name (it is not a Rust identifier).
///
/// An interceptor that demands credentials for calls demands them for descriptions too; one
/// that wants descriptions open lets them through:
///
/// ```
/// use keel::host::{Interceptor, DESCRIBE};
/// use keel::{Context, Status};
///
/// struct CallsNeedAToken;
///
/// impl Interceptor for CallsNeedAToken {
///     fn before(&self, ctx: &Context) -> Result<(), Status> {
///         if ctx.operation() == DESCRIBE || ctx.metadata().get("authorization").is_some() {
///             Ok(())
///         } else {
///             Err(Status::unauthenticated("a bearer token is required"))
///         }
///     }
/// }
/// ```
pub const DESCRIBE: &str = "@describe";

/// The service name in the [`Context`] of a request for a description of every contract the
/// host serves (`GET /openapi.json`), and of a `GET /{Service}` that names none it serves (so a
/// refusal tells nothing of what it serves); see [`DESCRIBE`].
pub const ALL_SERVICES: &str = "*";

/// Sees every call a host serves, in the order interceptors were added
/// ([`HostBuilder::interceptor`](crate::host::HostBuilder::interceptor)): `before` once the service
/// and operation are known and before the arguments are decoded, `after` (in reverse order)
/// once the call has an answer, before that answer is sent. Requests for a description of the
/// host's contracts (`GET /{Service}`, `GET /openapi.json`) pass through them too, as an
/// operation named [`DESCRIBE`]; gRPC's standard services are services like any other.
///
/// `before` may refuse the call with a [`Status`] (later interceptors and the handler do not
/// run), add reply metadata, and record facts for the handler in the context's extensions
/// ([`Context::insert_extension`]). `after` runs for every call whose `before` ran, with the
/// code of its answer (`Cancelled` for a call the caller cancelled), so it can time the call.
///
/// Both hooks run on the connection's task or the call's thread: keep them short and never
/// block. An interceptor that needs I/O (a token introspection, a database) is an
/// [`AsyncInterceptor`].
///
/// ```
/// use keel::host::Interceptor;
/// use keel::{Context, Status, StatusCode};
///
/// /// Lets in only callers that present `Authorization: Bearer <token>`.
/// struct Auth {
///     token: String,
/// }
///
/// impl Interceptor for Auth {
///     fn before(&self, ctx: &Context) -> Result<(), Status> {
///         let presented = ctx.metadata().get("authorization").and_then(|v| v.strip_prefix("Bearer "));
///         if presented == Some(self.token.as_str()) {
///             ctx.insert_extension(String::from("the-token-holder"));
///             Ok(())
///         } else {
///             Err(Status::unauthenticated("a valid bearer token is required"))
///         }
///     }
/// }
/// ```
pub trait Interceptor: Send + Sync + 'static {
    /// Runs before the call; an `Err` answers the call with that status instead.
    fn before(&self, ctx: &Context) -> Result<(), Status> {
        let _ = ctx;
        Ok(())
    }

    /// Runs after the call, with the code of its answer.
    fn after(&self, ctx: &Context, code: StatusCode) {
        let _ = (ctx, code);
    }
}

/// An interceptor whose `before` may wait (token introspection, a database, a remote policy
/// check), added with
/// [`HostBuilder::async_interceptor`](crate::host::HostBuilder::async_interceptor).
///
/// The host's async interceptors run after every synchronous [`Interceptor`] admitted the
/// call, in the order they were added; like those, before the arguments are decoded, so a
/// refused caller costs no decoding. `before` may refuse the call with a [`Status`], add reply
/// metadata, and put what it learnt (an identity, say) in the context's extensions for the
/// handler ([`Context::insert_extension`]), after an await. It is bounded by the call's
/// deadline (`DeadlineExceeded` when it passes) and stops if the caller cancels the call. A
/// panic in it answers the call `Internal`. `after` runs, in reverse order and before the
/// synchronous interceptors' `after`, for every call whose `before` started.
///
/// A host without async interceptors pays nothing for them; a host with one runs the rest of a
/// call's admission as a task of its own (and copies the call's arguments out of the read
/// buffer for it), once per call. Calls waiting on an async interceptor are not yet in the
/// throttle's queue: what bounds them is the per-connection call limit
/// ([`HostBuilder::max_calls_per_connection`](crate::host::HostBuilder::max_calls_per_connection)),
/// each holding its arguments (at most the message size), and the deadline. An interceptor
/// that calls a slow service should bound its own wait (a timeout, a cache).
///
/// For a request for a description (`GET /{Service}`, `GET /openapi.json`), `after` does not
/// run if the caller goes away while `before` waits (its request is dropped).
///
/// ```
/// use std::time::Duration;
/// use keel::host::AsyncInterceptor;
/// use keel::{Context, Status};
///
/// /// Who a token belongs to, for the handler.
/// #[derive(Clone)]
/// struct Caller(String);
///
/// /// Asks a (here simulated) token service who the caller is.
/// struct Introspect;
///
/// impl AsyncInterceptor for Introspect {
///     async fn before(&self, ctx: &Context) -> Result<(), Status> {
///         let token = ctx.metadata().get("authorization").map(str::to_owned);
///         tokio::time::sleep(Duration::from_millis(1)).await; // the token service's answer
///         match token.as_deref().and_then(|t| t.strip_prefix("Bearer ")) {
///             Some(user) => {
///                 ctx.insert_extension(Caller(user.to_owned()));
///                 Ok(())
///             }
///             None => Err(Status::unauthenticated("a bearer token is required")),
///         }
///     }
/// }
///
/// let host = keel::Host::builder()
///     .async_interceptor(Introspect)
///     .endpoint("tcp://127.0.0.1:0")
///     .start()?;
/// host.shutdown();
/// # Ok::<(), keel::Error>(())
/// ```
pub trait AsyncInterceptor: Send + Sync + 'static {
    /// Runs before the call (after the synchronous interceptors' `before`); an `Err` answers
    /// the call with that status instead.
    fn before(&self, ctx: &Context) -> impl Future<Output = Result<(), Status>> + Send;

    /// Runs after the call, with the code of its answer. It cannot wait: work that needs I/O
    /// (an audit log, say) is spawned from here.
    fn after(&self, ctx: &Context, code: StatusCode) {
        let _ = (ctx, code);
    }
}

/// An [`AsyncInterceptor`] with its future boxed, so that a host keeps a list of them.
pub(crate) trait DynAsyncInterceptor: Send + Sync + 'static {
    /// [`AsyncInterceptor::before`], boxed.
    fn before<'a>(&'a self, ctx: &'a Context) -> BoxedVerdict<'a>;
    /// [`AsyncInterceptor::after`].
    fn after(&self, ctx: &Context, code: StatusCode);
}

/// An async interceptor's `before`, boxed.
pub(crate) type BoxedVerdict<'a> = Pin<Box<dyn Future<Output = Result<(), Status>> + Send + 'a>>;

impl<T: AsyncInterceptor> DynAsyncInterceptor for T {
    fn before<'a>(&'a self, ctx: &'a Context) -> BoxedVerdict<'a> {
        Box::pin(AsyncInterceptor::before(self, ctx))
    }

    fn after(&self, ctx: &Context, code: StatusCode) {
        AsyncInterceptor::after(self, ctx, code)
    }
}

/// What a host puts around its calls: the synchronous interceptors, which run first, then the
/// async ones, and (feature `tower`) a tower layer around the handler.
#[derive(Default, Clone)]
pub(crate) struct Interceptors {
    pub(crate) sync: Vec<Arc<dyn Interceptor>>,
    pub(crate) deferred: Vec<Arc<dyn DynAsyncInterceptor>>,
    /// The layered service each admitted call runs through (`HostBuilder::layer`).
    #[cfg(feature = "tower")]
    pub(crate) layer: Option<Arc<dyn super::Layered>>,
}

impl Interceptors {
    /// No interceptor of either kind.
    pub(crate) fn is_empty(&self) -> bool {
        self.sync.is_empty() && self.deferred.is_empty()
    }

    /// How many there are (for `Debug`).
    pub(crate) fn len(&self) -> usize {
        self.sync.len() + self.deferred.len()
    }
}

/// Awaits an async interceptor's `before`, a panic in it answered `Internal`.
pub(crate) async fn verdict(before: BoxedVerdict<'_>) -> Result<(), Status> {
    CatchUnwind::new(before, |_| {
        Err(Status::new(StatusCode::Internal, "an interceptor panicked"))
    })
    .await
}

impl Dispatcher {
    /// Admits a request for a description of `service` ([`ALL_SERVICES`] for all) that arrived
    /// on `conn` with `metadata`: refused when the host's descriptions are switched off, else
    /// passed through the interceptors as a call of the operation [`DESCRIBE`] would be. `Err`
    /// is the status to answer with.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) async fn admit_description(
        &self,
        conn: &HostConnInfo,
        service: &'static str,
        metadata: Metadata,
    ) -> Result<(), Status> {
        if !self.descriptions_on() {
            return Err(descriptions_off());
        }
        let chain = &self.interceptors;
        if chain.is_empty() {
            return Ok(());
        }
        let max = self.limits.max_message_size;
        let ctx = conn.context_outside_a_call(service, DESCRIBE, metadata, max, None);
        let (mut ran, mut ran_async) = (0, 0);
        let mut answer = Ok(());
        for interceptor in &chain.sync {
            ran += 1;
            if let Err(status) = interceptor.before(&ctx) {
                answer = Err(status);
                break;
            }
        }
        if answer.is_ok() {
            for interceptor in &chain.deferred {
                ran_async += 1;
                if let Err(status) = verdict(interceptor.before(&ctx)).await {
                    answer = Err(status);
                    break;
                }
            }
        }
        let code = answer
            .as_ref()
            .map_or_else(Status::code, |_| StatusCode::Ok);
        for interceptor in chain.deferred[..ran_async].iter().rev() {
            interceptor.after(&ctx, code);
        }
        for interceptor in chain.sync[..ran].iter().rev() {
            interceptor.after(&ctx, code);
        }
        answer
    }

    /// Whether the host answers requests for descriptions of its contracts (`GET /{Service}`,
    /// `GET /openapi.json`, gRPC server reflection).
    pub(crate) fn descriptions_on(&self) -> bool {
        self.descriptions.load(Ordering::Relaxed)
    }

    /// Switches the descriptions on or off, for requests that arrive from now on.
    pub(crate) fn set_descriptions(&self, on: bool) {
        self.descriptions.store(on, Ordering::Relaxed);
    }
}

/// The answer to a request for a description while descriptions are switched off.
pub(crate) fn descriptions_off() -> Status {
    Status::new(
        StatusCode::NotFound,
        "this host does not describe its contracts (descriptions are switched off: \
         HostBuilder::descriptions, Host::set_descriptions)",
    )
}
