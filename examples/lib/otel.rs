//! W3C trace context in keel's metadata: one OpenTelemetry trace across client and host.
//!
//! Every keel call has a `keel.call` span on each side (see keel's crate docs, "Tracing"). With
//! a `tracing-opentelemetry` layer installed:
//!
//! - [`InjectTraceContext`], a [`keel::client::Interceptor`], writes the client span's
//!   OpenTelemetry context into the call's metadata as `traceparent` and `tracestate`;
//! - [`ExtractTraceContext`], a [`keel::host::Interceptor`], reads them on the host and makes the
//!   host's `keel.call` span a child of the client's.
//!
//! ```no_run
//! use keel_examples::calculator::{CalculatorClient, CalculatorServer, Calc};
//! use keel_examples::otel::{ExtractTraceContext, InjectTraceContext};
//!
//! # async fn demo() -> Result<(), keel::Error> {
//! let host = keel::Host::builder()
//!     .service(CalculatorServer::new(Calc))
//!     .interceptor(ExtractTraceContext::new())
//!     .endpoint("tcp://127.0.0.1:0")
//!     .start()?;
//! let channel = keel::Channel::builder(host.url())
//!     .interceptor(InjectTraceContext::new())
//!     .build()?;
//! let sum = CalculatorClient::new(channel).add(1.0, 2.0).await?;
//! # let _ = sum;
//! # Ok(())
//! # }
//! ```
//!
//! # Why the host's span can still take a parent
//!
//! `tracing-opentelemetry` (0.32 and later) starts a span's OpenTelemetry span when the span is
//! first entered, and a started span's parent can no longer change
//! ([`set_parent`](tracing_opentelemetry::OpenTelemetrySpanExt::set_parent) fails with
//! `AlreadyStarted`). keel hands host interceptors the call's span through
//! [`Context::span`] *before* entering it, so [`ExtractTraceContext`] can set its parent with
//! the layer's default settings. (If something entered it first anyway, the interceptor logs
//! one warning and the host's spans keep a trace of their own.) A client needs nothing special:
//! its interceptors run inside the client's span, which is what [`InjectTraceContext`] reads.
//!
//! The propagator is W3C Trace Context ([`TraceContextPropagator`]); any other
//! [`TextMapPropagator`] works the same way through [`MetadataInjector`] and
//! [`MetadataExtractor`].

use std::sync::atomic::{AtomicBool, Ordering};

use keel::client::{self, ClientCall};
use keel::host::Interceptor;
use keel::{Context, Metadata, Status};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::{OpenTelemetrySpanExt as _, SetParentError};

/// Writes a propagator's fields (`traceparent`, `tracestate`, ...) into keel [`Metadata`].
///
/// A field keel refuses (a reserved key, a value that is not printable ASCII) is left out: a
/// trace context that cannot travel must not fail the call.
#[derive(Debug)]
pub struct MetadataInjector<'a>(pub &'a mut Metadata);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let Err(e) = self.0.insert(key, &value) {
            tracing::debug!("trace context field `{key}` not sent: {e}");
        }
    }
}

/// Reads a propagator's fields from keel [`Metadata`].
#[derive(Debug)]
pub struct MetadataExtractor<'a>(pub &'a Metadata);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(key, _)| key).collect()
    }
}

/// A client interceptor that sends the current span's OpenTelemetry context with every call, as
/// W3C `traceparent` and `tracestate` metadata.
///
/// It runs inside the channel's `keel.call` span, so the context sent is that span's: the host's
/// span becomes its child, and through it a child of whatever span the caller was in. Sends
/// nothing when there is no OpenTelemetry layer or the span is not sampled in.
#[derive(Debug, Clone, Default)]
pub struct InjectTraceContext {
    propagator: TraceContextPropagator,
}

impl InjectTraceContext {
    /// With the W3C Trace Context propagator.
    pub fn new() -> InjectTraceContext {
        InjectTraceContext::default()
    }
}

impl client::Interceptor for InjectTraceContext {
    fn before(&self, call: &mut ClientCall) -> Result<(), Status> {
        let cx = tracing::Span::current().context();
        self.propagator
            .inject_context(&cx, &mut MetadataInjector(call.metadata_mut()));
        Ok(())
    }
}

/// A host interceptor that makes the host's `keel.call` span a child of the caller's span, from
/// the call's `traceparent` and `tracestate` metadata.
///
/// A call without a valid `traceparent` is left alone: its span starts a trace, or stays the
/// child of the span it was opened in. Never refuses a call. Works with the host's
/// `tracing-opentelemetry` layer as it comes (see the [module docs](self)).
#[derive(Debug, Clone, Default)]
pub struct ExtractTraceContext {
    propagator: TraceContextPropagator,
}

impl ExtractTraceContext {
    /// With the W3C Trace Context propagator.
    pub fn new() -> ExtractTraceContext {
        ExtractTraceContext::default()
    }
}

/// Whether the "already started" warning was logged (once per process).
static WARNED: AtomicBool = AtomicBool::new(false);

impl Interceptor for ExtractTraceContext {
    fn before(&self, ctx: &Context) -> Result<(), Status> {
        let parent = self.propagator.extract(&MetadataExtractor(ctx.metadata()));
        if !parent.span().span_context().is_valid() {
            return Ok(());
        }
        // keel's span for this call, not entered yet: its parent can still be set.
        match ctx.span().set_parent(parent) {
            Ok(()) => {}
            Err(SetParentError::AlreadyStarted) => {
                if !WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "keel.call spans cannot join their callers' traces: the OpenTelemetry \
                         span had already started (something entered keel's span before this \
                         interceptor ran)"
                    );
                }
            }
            // No OpenTelemetry layer, or keel's span is disabled: nothing to join.
            Err(_) => {}
        }
        Ok(())
    }
}
