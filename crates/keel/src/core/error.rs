//! The caller's error type, [`Error`].
//!
//! It is separate from [`Status`] on purpose (as in tonic): a [`Status`] is what a host says
//! about a call; an [`Error`] is everything a caller can meet, including failures that never
//! reached a host (connect refused, local deadline, message too large to send).

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;

use bytes::Bytes;

use super::metadata::Metadata;
use super::status::{Status, StatusCode};

/// Everything that can go wrong with a call, as the caller sees it.
///
/// Opaque on purpose: ask it questions (`is_timeout()`, `is_busy()`, `fault::<E>()`, …) rather
/// than matching on its internals, so that keel can add cases without breaking callers.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: Kind,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync>>,
    /// The decoded typed fault, for `Kind::Status(Fault)`.
    fault: Option<Box<dyn Any + Send + Sync>>,
    /// The host's status details, for `Kind::Status`.
    details: Bytes,
    /// The reply metadata the host sent with its status.
    metadata: Metadata,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The host answered with a status other than Ok.
    Status(StatusCode),
    /// The caller's deadline passed before a reply arrived.
    Timeout,
    /// Could not connect or complete the handshake.
    Connect,
    /// The connection broke or was closed while the call was in flight.
    Connection,
    /// The message is larger than the peer accepts; it was not sent.
    TooLarge,
    /// The peer broke the protocol (bad handshake, version mismatch, malformed frame).
    Protocol,
    /// The arguments could not be encoded or the reply could not be decoded.
    Codec,
    /// The endpoint URL or the configuration is invalid.
    Config,
}

impl Error {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                source: None,
                fault: None,
                details: Bytes::new(),
                metadata: Metadata::new(),
            }),
        }
    }

    pub(crate) fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Error {
        self.inner.source = Some(Box::new(source));
        self
    }

    pub(crate) fn from_status(status: Status) -> Error {
        let (code, details, metadata) = (
            status.code,
            status.details().clone(),
            status.metadata().clone(),
        );
        let mut e = Error::new(Kind::Status(code), status.message);
        if code != StatusCode::Fault {
            e.inner.details = details;
        }
        e.inner.metadata = metadata;
        e
    }

    /// The status that reports this error to a peer (a stream a handler passes on, say): see
    /// `From<Error> for Status`.
    pub(crate) fn to_status(&self) -> Status {
        let code = match self.inner.kind {
            Kind::Status(c) => c,
            Kind::Timeout => StatusCode::DeadlineExceeded,
            Kind::TooLarge => StatusCode::TooLarge,
            Kind::Connect | Kind::Connection => StatusCode::Unavailable,
            Kind::Protocol | Kind::Codec | Kind::Config => StatusCode::Internal,
        };
        if code == StatusCode::Fault {
            // The fault was decoded into a value of the caller's type; its encoding is gone.
            return Status::new(
                StatusCode::Internal,
                "a fault from a stream that was passed on",
            );
        }
        Status::new(code, self.inner.message.clone()).with_details(self.inner.details.clone())
    }

    pub(crate) fn with_metadata(mut self, metadata: Metadata) -> Error {
        self.inner.metadata = metadata;
        self
    }

    /// The host's message, or this side's description of what went wrong.
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// The details of the host's status ([`Status::details`]); empty when it sent none, for
    /// faults (see [`Error::fault`]) and for errors on this side.
    pub fn details(&self) -> &[u8] {
        &self.inner.details
    }

    /// The reply metadata the host sent with its status (empty for errors on this side).
    pub fn metadata(&self) -> &Metadata {
        &self.inner.metadata
    }

    pub(crate) fn from_fault<E: Any + Send + Sync + fmt::Debug>(fault: E) -> Error {
        let mut e = Error::new(Kind::Status(StatusCode::Fault), format!("{fault:?}"));
        e.inner.fault = Some(Box::new(fault));
        e
    }

    pub(crate) fn kind(&self) -> Kind {
        self.inner.kind
    }

    /// The status code the host answered with, if the host answered; `Unavailable` when no
    /// host could be reached or it was lost while the call was in flight
    /// ([`is_connection`](Error::is_connection)), as gRPC reports it: a refused connect, a reset
    /// or closed connection and a host gone silent (no answer to a keepalive ping) all read the
    /// same, with the cause in the message and [`source`](std::error::Error::source). `None`
    /// for the failures that are the caller's own (a local deadline, a message too large to
    /// send, a configuration error, ...).
    pub fn status_code(&self) -> Option<StatusCode> {
        match self.inner.kind {
            Kind::Status(c) => Some(c),
            Kind::Connect | Kind::Connection => Some(StatusCode::Unavailable),
            _ => None,
        }
    }

    /// The deadline passed: locally while waiting, or at the host before the work started.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self.inner.kind,
            Kind::Timeout | Kind::Status(StatusCode::DeadlineExceeded)
        )
    }

    /// The host's throttle queue was full; nothing was run. Safe to retry later.
    pub fn is_busy(&self) -> bool {
        self.inner.kind == Kind::Status(StatusCode::Busy)
    }

    /// The host is shutting down and did not run the call.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.kind == Kind::Status(StatusCode::ShuttingDown)
    }

    /// The host has no such service or operation.
    pub fn is_unknown_operation(&self) -> bool {
        matches!(
            self.inner.kind,
            Kind::Status(StatusCode::UnknownOperation | StatusCode::UnknownService)
        )
    }

    /// The message exceeded a size limit (checked locally before sending, or by the host).
    pub fn is_too_large(&self) -> bool {
        matches!(
            self.inner.kind,
            Kind::TooLarge | Kind::Status(StatusCode::TooLarge)
        )
    }

    /// The host could not decode the arguments.
    pub fn is_bad_request(&self) -> bool {
        self.inner.kind == Kind::Status(StatusCode::BadRequest)
    }

    /// The handler panicked; the host kept serving.
    pub fn is_handler_panic(&self) -> bool {
        self.inner.kind == Kind::Status(StatusCode::HandlerPanicked)
    }

    /// The call was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.kind == Kind::Status(StatusCode::Cancelled)
    }

    /// Connecting failed, or the connection broke (reset, closed, or the host went silent)
    /// while the call was in flight: the host is gone, whichever way. Its
    /// [`status_code`](Error::status_code) is `Unavailable`.
    pub fn is_connection(&self) -> bool {
        matches!(self.inner.kind, Kind::Connect | Kind::Connection)
    }

    /// The peer broke the protocol, or speaks another version of it.
    pub fn is_protocol(&self) -> bool {
        self.inner.kind == Kind::Protocol
    }

    /// The operation returned its typed fault `E`.
    pub fn is_fault(&self) -> bool {
        self.inner.kind == Kind::Status(StatusCode::Fault)
    }

    /// The typed fault, if the operation returned one of type `E`.
    pub fn fault_ref<E: Any>(&self) -> Option<&E> {
        self.inner.fault.as_ref()?.downcast_ref::<E>()
    }

    /// The typed fault by value, if the operation returned one of type `E`.
    pub fn fault<E: Any + Clone>(&self) -> Option<E> {
        self.fault_ref::<E>().cloned()
    }

    /// Takes the typed fault out, or gives the error back.
    pub fn into_fault<E: Any>(mut self) -> Result<E, Error> {
        match self.inner.fault.take().map(|f| f.downcast::<E>()) {
            Some(Ok(e)) => Ok(*e),
            Some(Err(f)) => {
                self.inner.fault = Some(f);
                Err(self)
            }
            None => Err(self),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("keel::Error");
        d.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        if let Some(s) = &self.inner.source {
            d.field("source", s);
        }
        d.finish()
    }
}

/// A handler that meets an error (reading its request stream, calling another service) answers
/// with it: the host's status when the error is one, else `DeadlineExceeded` for a timeout,
/// `TooLarge`, `Unavailable` for a connection, `Internal` for the rest, with the error's
/// message. A typed fault is not passed on as one: it becomes `Internal`.
///
/// ```
/// #[keel::contract]
/// pub trait Totals {
///     async fn total(&self, values: keel::MessageStream<u64>) -> Result<u64, keel::Status>;
/// }
///
/// struct Adder;
/// impl Totals for Adder {
///     async fn total(&self, mut values: keel::MessageStream<u64>) -> Result<u64, keel::Status> {
///         let mut sum = 0;
///         while let Some(v) = values.next().await {
///             sum += v?; // A broken or oversized stream answers the call with its status.
///         }
///         Ok(sum)
///     }
/// }
/// ```
impl From<Error> for Status {
    fn from(e: Error) -> Status {
        e.to_status()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.inner.kind {
            Kind::Status(StatusCode::Fault) => "fault",
            Kind::Status(c) => c.as_str(),
            Kind::Timeout => "deadline exceeded",
            Kind::Connect => "connect failed",
            Kind::Connection => "connection lost",
            Kind::TooLarge => "message too large",
            Kind::Protocol => "protocol error",
            Kind::Codec => "encoding error",
            Kind::Config => "invalid configuration",
        };
        if self.inner.message.is_empty() {
            f.write_str(what)
        } else {
            write!(f, "{what}: {}", self.inner.message)
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|s| &**s as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct DivideByZero;

    #[test]
    fn queries_follow_the_kind() {
        let e = Error::from_status(Status::new(StatusCode::Busy, "queue full"));
        assert!(e.is_busy() && !e.is_timeout());
        assert_eq!(e.to_string(), "busy: queue full");
        assert!(Error::new(Kind::Timeout, "").is_timeout());
        assert!(Error::from_status(Status::new(StatusCode::DeadlineExceeded, "")).is_timeout());
        assert!(Error::new(Kind::TooLarge, "x").is_too_large());
    }

    #[test]
    fn a_host_gone_reads_the_same_however_it_went() {
        // Refused connect, reset or closed connection, a host gone silent: one shape.
        for kind in [Kind::Connect, Kind::Connection] {
            let e = Error::new(kind, "gone");
            assert!(e.is_connection());
            assert_eq!(e.status_code(), Some(StatusCode::Unavailable));
        }
        // The caller's own failures carry no status.
        assert_eq!(Error::new(Kind::TooLarge, "x").status_code(), None);
        assert_eq!(Error::new(Kind::Timeout, "x").status_code(), None);
    }

    #[test]
    fn typed_fault_round_trip() {
        let e = Error::from_fault(DivideByZero);
        assert!(e.is_fault());
        assert_eq!(e.fault::<DivideByZero>(), Some(DivideByZero));
        assert_eq!(e.fault::<String>(), None);
        let e = e.into_fault::<String>().unwrap_err();
        assert_eq!(e.into_fault::<DivideByZero>().unwrap(), DivideByZero);
    }
}
