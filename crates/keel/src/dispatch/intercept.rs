//! Host-side interceptors: an ordered chain that sees every call before and after it.

use crate::core::context::Context;
use crate::core::status::{Status, StatusCode};

/// Sees every call a host serves, in the order interceptors were added
/// ([`HostBuilder::interceptor`](crate::host::HostBuilder::interceptor)): `before` once the service
/// and operation are known and before the arguments are decoded, `after` (in reverse order)
/// once the call has an answer, before that answer is sent.
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
