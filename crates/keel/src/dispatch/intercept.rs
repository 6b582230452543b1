//! Host-side interceptors: an ordered chain that sees every call before and after it.

use std::sync::atomic::Ordering;

use crate::core::context::Context;
use crate::core::metadata::Metadata;
use crate::core::status::{Status, StatusCode};

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
/// block (an interceptor that needs I/O belongs in the handler, or in front of the host).
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

impl Dispatcher {
    /// Admits a request for a description of `service` ([`ALL_SERVICES`] for all) that arrived
    /// on `conn` with `metadata`: refused when the host's descriptions are switched off, else
    /// passed through the interceptors as a call of the operation [`DESCRIBE`] would be. `Err`
    /// is the status to answer with.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn admit_description(
        &self,
        conn: &HostConnInfo,
        service: &'static str,
        metadata: Metadata,
    ) -> Result<(), Status> {
        if !self.descriptions_on() {
            return Err(descriptions_off());
        }
        if self.interceptors.is_empty() {
            return Ok(());
        }
        let max = self.limits.max_message_size;
        let ctx = conn.context_outside_a_call(service, DESCRIBE, metadata, max, None);
        let mut ran = 0;
        let mut answer = Ok(());
        for interceptor in &self.interceptors {
            ran += 1;
            if let Err(status) = interceptor.before(&ctx) {
                answer = Err(status);
                break;
            }
        }
        let code = answer
            .as_ref()
            .map_or_else(Status::code, |_| StatusCode::Ok);
        for interceptor in self.interceptors[..ran].iter().rev() {
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
