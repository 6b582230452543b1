//! Client-side interceptors: an ordered chain that sees every call a channel makes.

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
