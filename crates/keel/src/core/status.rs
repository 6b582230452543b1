//! What a host says about a call: [`Status`], with keel's own [`StatusCode`].
//!
//! `StatusCode` is keel's, not the wire protocol's: each binding maps it to its own encoding
//! (keel-wire's status byte, HTTP's status line and `keel-status` header), so the public API does
//! not change when a binding's encoding does.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use super::metadata::Metadata;

/// The outcome of a call. Stable names ([`StatusCode::as_str`]); new codes may be added.
///
/// The set contains every gRPC code (`Ok`, `Cancelled`, `Unknown`, `InvalidArgument`,
/// `DeadlineExceeded`, `NotFound`, `AlreadyExists`, `PermissionDenied`, `ResourceExhausted`,
/// `FailedPrecondition`, `Aborted`, `OutOfRange`, `Unimplemented`, `Internal`, `Unavailable`,
/// `DataLoss`, `Unauthenticated`) plus keel's finer ones for what keel itself decides
/// (`Fault`, `UnknownService`, `UnknownOperation`, `BadRequest`, `TooLarge`, `Busy`,
/// `ShuttingDown`, `HandlerPanicked`). The HTTP mapping is in `HTTP.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StatusCode {
    /// Success.
    Ok,
    /// The handler returned its typed fault.
    Fault,
    /// No such service on this host.
    UnknownService,
    /// No such operation in the service.
    UnknownOperation,
    /// The request could not be decoded into the operation's parameters.
    BadRequest,
    /// The message exceeds the receiver's size limit.
    TooLarge,
    /// The host's throttle queue is full; retry later.
    Busy,
    /// The deadline passed before the work could start or finish.
    DeadlineExceeded,
    /// The call was cancelled.
    Cancelled,
    /// The host is shutting down and did not start the call.
    ShuttingDown,
    /// The handler panicked.
    HandlerPanicked,
    /// Any other failure inside the host.
    Internal,
    /// An error with no better code; also what a code this version does not know reads as.
    Unknown,
    /// The caller's argument is invalid whatever the state of the system (a handler's
    /// verdict; arguments that could not be decoded are [`StatusCode::BadRequest`]).
    InvalidArgument,
    /// A requested entity was not found.
    NotFound,
    /// The entity the caller tried to create already exists.
    AlreadyExists,
    /// The caller is known but may not do this.
    PermissionDenied,
    /// A resource (a quota, space) is exhausted.
    ResourceExhausted,
    /// The system is not in the state the operation requires.
    FailedPrecondition,
    /// The operation was aborted, typically by a concurrency conflict.
    Aborted,
    /// The operation was attempted past the valid range.
    OutOfRange,
    /// The operation is not implemented or not supported.
    Unimplemented,
    /// The service is unavailable right now; a retry may succeed.
    Unavailable,
    /// Unrecoverable data loss or corruption.
    DataLoss,
    /// The caller did not present valid credentials.
    Unauthenticated,
}

impl StatusCode {
    /// Every code, in a stable order.
    pub(crate) const ALL: [StatusCode; 25] = [
        StatusCode::Ok,
        StatusCode::Fault,
        StatusCode::UnknownService,
        StatusCode::UnknownOperation,
        StatusCode::BadRequest,
        StatusCode::TooLarge,
        StatusCode::Busy,
        StatusCode::DeadlineExceeded,
        StatusCode::Cancelled,
        StatusCode::ShuttingDown,
        StatusCode::HandlerPanicked,
        StatusCode::Internal,
        StatusCode::Unknown,
        StatusCode::InvalidArgument,
        StatusCode::NotFound,
        StatusCode::AlreadyExists,
        StatusCode::PermissionDenied,
        StatusCode::ResourceExhausted,
        StatusCode::FailedPrecondition,
        StatusCode::Aborted,
        StatusCode::OutOfRange,
        StatusCode::Unimplemented,
        StatusCode::Unavailable,
        StatusCode::DataLoss,
        StatusCode::Unauthenticated,
    ];

    /// A stable, lower-case name for logs and HTTP (e.g. `"deadline_exceeded"`).
    pub fn as_str(self) -> &'static str {
        self.to_wire().as_str()
    }

    /// The code whose [`StatusCode::as_str`] is `name`.
    pub fn from_name(name: &str) -> Option<StatusCode> {
        StatusCode::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// keel-wire's status byte for this code.
    pub(crate) fn to_wire(self) -> keel_wire::StatusCode {
        use keel_wire::StatusCode as W;
        match self {
            StatusCode::Ok => W::Ok,
            StatusCode::Fault => W::Fault,
            StatusCode::UnknownService => W::UnknownService,
            StatusCode::UnknownOperation => W::UnknownOperation,
            StatusCode::BadRequest => W::BadRequest,
            StatusCode::TooLarge => W::TooLarge,
            StatusCode::Busy => W::Busy,
            StatusCode::DeadlineExceeded => W::DeadlineExceeded,
            StatusCode::Cancelled => W::Cancelled,
            StatusCode::ShuttingDown => W::ShuttingDown,
            StatusCode::HandlerPanicked => W::HandlerPanicked,
            StatusCode::Internal => W::Internal,
            StatusCode::Unknown => W::Unknown,
            StatusCode::InvalidArgument => W::InvalidArgument,
            StatusCode::NotFound => W::NotFound,
            StatusCode::AlreadyExists => W::AlreadyExists,
            StatusCode::PermissionDenied => W::PermissionDenied,
            StatusCode::ResourceExhausted => W::ResourceExhausted,
            StatusCode::FailedPrecondition => W::FailedPrecondition,
            StatusCode::Aborted => W::Aborted,
            StatusCode::OutOfRange => W::OutOfRange,
            StatusCode::Unimplemented => W::Unimplemented,
            StatusCode::Unavailable => W::Unavailable,
            StatusCode::DataLoss => W::DataLoss,
            StatusCode::Unauthenticated => W::Unauthenticated,
        }
    }

    /// The code for keel-wire's status byte. A code this version does not know reads as
    /// `Unknown`.
    pub(crate) fn from_wire(code: keel_wire::StatusCode) -> StatusCode {
        use keel_wire::StatusCode as W;
        match code {
            W::Ok => StatusCode::Ok,
            W::Fault => StatusCode::Fault,
            W::UnknownService => StatusCode::UnknownService,
            W::UnknownOperation => StatusCode::UnknownOperation,
            W::BadRequest => StatusCode::BadRequest,
            W::TooLarge => StatusCode::TooLarge,
            W::Busy => StatusCode::Busy,
            W::DeadlineExceeded => StatusCode::DeadlineExceeded,
            W::Cancelled => StatusCode::Cancelled,
            W::ShuttingDown => StatusCode::ShuttingDown,
            W::HandlerPanicked => StatusCode::HandlerPanicked,
            W::Internal => StatusCode::Internal,
            W::Unknown => StatusCode::Unknown,
            W::InvalidArgument => StatusCode::InvalidArgument,
            W::NotFound => StatusCode::NotFound,
            W::AlreadyExists => StatusCode::AlreadyExists,
            W::PermissionDenied => StatusCode::PermissionDenied,
            W::ResourceExhausted => StatusCode::ResourceExhausted,
            W::FailedPrecondition => StatusCode::FailedPrecondition,
            W::Aborted => StatusCode::Aborted,
            W::OutOfRange => StatusCode::OutOfRange,
            W::Unimplemented => StatusCode::Unimplemented,
            W::Unavailable => StatusCode::Unavailable,
            W::DataLoss => StatusCode::DataLoss,
            W::Unauthenticated => StatusCode::Unauthenticated,
            _ => StatusCode::Unknown,
        }
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a host says about a call that did not succeed: a code, a message for humans, optional
/// details (opaque bytes for programs; for [`StatusCode::Fault`], the encoded typed fault) and
/// metadata sent back with it.
///
/// A handler returns one to answer with a code of its choice, as an operation that returns
/// `Result<T, keel::Status>`:
///
/// ```
/// #[keel::contract]
/// pub trait Accounts {
///     async fn balance(&self, id: u64) -> Result<i64, keel::Status>;
/// }
///
/// struct Bank;
/// impl Accounts for Bank {
///     async fn balance(&self, id: u64) -> Result<i64, keel::Status> {
///         match id {
///             1 => Ok(100),
///             _ => Err(keel::Status::not_found(format!("no account {id}"))),
///         }
///     }
/// }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Status {
    pub(crate) code: StatusCode,
    pub(crate) message: String,
    details: Bytes,
    metadata: Metadata,
    /// How long the host asked the caller to wait before trying again (HTTP `Retry-After`).
    retry_after: Option<Duration>,
}

macro_rules! constructors {
    ($($(#[$doc:meta])* $name:ident => $code:ident,)*) => {
        $(
            $(#[$doc])*
            pub fn $name(message: impl Into<String>) -> Status {
                Status::new(StatusCode::$code, message)
            }
        )*
    };
}

impl Status {
    /// A status with a code and a message.
    pub fn new(code: StatusCode, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
            details: Bytes::new(),
            metadata: Metadata::new(),
            retry_after: None,
        }
    }

    /// How long the host asked the caller to wait before trying again (an HTTP host's
    /// `Retry-After` on a 503), if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Records the wait the host asked for (the HTTP client reads `Retry-After`).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn with_retry_after(mut self, wait: Option<Duration>) -> Status {
        self.retry_after = wait;
        self
    }

    constructors! {
        /// [`StatusCode::Cancelled`].
        cancelled => Cancelled,
        /// [`StatusCode::Unknown`].
        unknown => Unknown,
        /// [`StatusCode::InvalidArgument`].
        invalid_argument => InvalidArgument,
        /// [`StatusCode::DeadlineExceeded`].
        deadline_exceeded => DeadlineExceeded,
        /// [`StatusCode::NotFound`].
        not_found => NotFound,
        /// [`StatusCode::AlreadyExists`].
        already_exists => AlreadyExists,
        /// [`StatusCode::PermissionDenied`].
        permission_denied => PermissionDenied,
        /// [`StatusCode::ResourceExhausted`].
        resource_exhausted => ResourceExhausted,
        /// [`StatusCode::FailedPrecondition`].
        failed_precondition => FailedPrecondition,
        /// [`StatusCode::Aborted`].
        aborted => Aborted,
        /// [`StatusCode::OutOfRange`].
        out_of_range => OutOfRange,
        /// [`StatusCode::Unimplemented`].
        unimplemented => Unimplemented,
        /// [`StatusCode::Internal`].
        internal => Internal,
        /// [`StatusCode::Unavailable`].
        unavailable => Unavailable,
        /// [`StatusCode::DataLoss`].
        data_loss => DataLoss,
        /// [`StatusCode::Unauthenticated`].
        unauthenticated => Unauthenticated,
    }

    /// This status with `details`: bytes for programs (for example an encoded error record),
    /// at most the message size limit together with the message. Ignored on a fault.
    pub fn with_details(mut self, details: impl Into<Bytes>) -> Status {
        if self.code != StatusCode::Fault {
            self.details = details.into();
        }
        self
    }

    /// This status with `metadata` sent back to the caller (merged with what the handler set
    /// through its [`Context`](crate::Context)).
    pub fn with_metadata(mut self, metadata: Metadata) -> Status {
        self.metadata = metadata;
        self
    }

    /// A typed fault whose encoded value is `details`.
    pub(crate) fn fault(details: Bytes) -> Status {
        Status {
            code: StatusCode::Fault,
            message: String::new(),
            details,
            metadata: Metadata::new(),
            retry_after: None,
        }
    }

    /// The metadata sent back with this status.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    pub(crate) fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// The code.
    pub fn code(&self) -> StatusCode {
        self.code
    }

    /// The message for humans (empty for faults).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The details: the encoded fault value for [`StatusCode::Fault`], else what the handler
    /// set with [`Status::with_details`] (often empty).
    pub fn details(&self) -> &Bytes {
        &self.details
    }

    /// What this status travels as on keel-wire: `(body, details, metadata)`. The body is the
    /// fault for faults, else the message.
    pub(crate) fn into_wire_parts(self) -> (Bytes, Bytes, Metadata) {
        if self.code == StatusCode::Fault {
            (self.details, Bytes::new(), self.metadata)
        } else {
            (
                Bytes::from(self.message.into_bytes()),
                self.details,
                self.metadata,
            )
        }
    }

    /// The status a wire reply carries.
    pub(crate) fn from_wire_parts(
        code: StatusCode,
        body: Bytes,
        details: Bytes,
        metadata: Metadata,
    ) -> Status {
        let status = if code == StatusCode::Fault {
            Status::fault(body)
        } else {
            Status::new(code, String::from_utf8_lossy(&body).into_owned()).with_details(details)
        };
        status.with_metadata(metadata)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Status")
            .field("code", &self.code)
            .field("message", &self.message)
            .field("details_len", &self.details.len())
            .field("metadata", &self.metadata)
            .finish()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code.as_str())
        } else {
            write!(f, "{}: {}", self.code.as_str(), self.message)
        }
    }
}

impl StdError for Status {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_maps_to_the_wire_and_back_and_has_a_unique_name() {
        for c in StatusCode::ALL {
            assert_eq!(StatusCode::from_wire(c.to_wire()), c);
            assert_eq!(StatusCode::from_name(c.as_str()), Some(c));
        }
        let mut names: Vec<_> = StatusCode::ALL.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), StatusCode::ALL.len());
        // Every code keel-wire knows has a keel code.
        for b in 0..=u8::MAX {
            if let Some(w) = keel_wire::StatusCode::from_u8(b) {
                assert_eq!(StatusCode::from_wire(w).to_wire(), w);
            }
        }
        assert_eq!(StatusCode::from_name("nope"), None);
    }
}
