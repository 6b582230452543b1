//! What a host says about a call: [`Status`], with keel's own [`StatusCode`].
//!
//! `StatusCode` is keel's, not the wire protocol's: each binding maps it to its own encoding
//! (keel-wire's status byte, HTTP's status line and `keel-status` header), so the public API does
//! not change when a binding's encoding does.

use std::error::Error as StdError;
use std::fmt;

use bytes::Bytes;

/// The outcome of a call. Stable names ([`StatusCode::as_str`]); new codes may be added.
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
}

impl StatusCode {
    /// Every code, in a stable order.
    pub(crate) const ALL: [StatusCode; 12] = [
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
        }
    }

    /// The code for keel-wire's status byte. A code this version does not know reads as
    /// `Internal`.
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
            _ => StatusCode::Internal,
        }
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a host says about a call that did not succeed: a code, a message for humans and, for
/// [`StatusCode::Fault`], the encoded typed fault.
#[derive(Clone, PartialEq, Eq)]
pub struct Status {
    pub(crate) code: StatusCode,
    pub(crate) message: String,
    details: Bytes,
}

impl Status {
    /// A status with a code and a message.
    pub fn new(code: StatusCode, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
            details: Bytes::new(),
        }
    }

    /// A typed fault whose encoded value is `details`.
    pub(crate) fn fault(details: Bytes) -> Status {
        Status {
            code: StatusCode::Fault,
            message: String::new(),
            details,
        }
    }

    /// The code.
    pub fn code(&self) -> StatusCode {
        self.code
    }

    /// The message for humans (empty for faults).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The encoded fault value, for [`StatusCode::Fault`]; empty otherwise.
    pub fn details(&self) -> &Bytes {
        &self.details
    }

    /// The body this status travels with on keel-wire: the fault for faults, else the message.
    pub(crate) fn into_body(self) -> Bytes {
        if self.code == StatusCode::Fault {
            self.details
        } else {
            Bytes::from(self.message.into_bytes())
        }
    }

    /// The status a wire reply carries.
    pub(crate) fn from_body(code: StatusCode, body: Bytes) -> Status {
        if code == StatusCode::Fault {
            Status::fault(body)
        } else {
            Status::new(code, String::from_utf8_lossy(&body).into_owned())
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Status")
            .field("code", &self.code)
            .field("message", &self.message)
            .field("details_len", &self.details.len())
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
