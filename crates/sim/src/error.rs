//! The one error type of the simulation. Each variant is a gRPC status class; the emulator maps
//! them to codes and `google.rpc` details in one place. Reasons are the public `ErrorInfo.reason`
//! strings (domain `cwsandbox.com`), catalogued in `cwsandbox_api::Reason` (`docs/errors.md`).

use std::time::Duration;

use cwsandbox_policy::{PolicyError, RejectionKind};

/// A stable, documented error code sent as `ErrorInfo.reason`: the API crate's catalogue, shared
/// with the emulator and the client (each variant says when it happens and its remedy).
pub use cwsandbox_api::Reason;

/// One problem with one input field; the policy crate's, so its violations need no copying.
pub use cwsandbox_policy::FieldViolation;

/// Why a command failed. Nothing is changed in the world when a command fails.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// Bad input: the caller must change the request.
    #[error("{message}")]
    InvalidArgument { reason: Reason, message: String, violations: Vec<FieldViolation> },
    /// The named thing does not exist (or is not visible to the caller).
    #[error("{message}")]
    NotFound { reason: Reason, message: String },
    /// The thing to create exists already.
    #[error("{message}")]
    AlreadyExists { reason: Reason, message: String },
    /// The world is not in a state that allows the operation (stale etag, busy runner).
    #[error("{message}")]
    FailedPrecondition { reason: Reason, message: String },
    /// Capacity is short now; a retry may succeed.
    #[error("{message}")]
    ResourceExhausted { reason: Reason, message: String, retry_after: Option<Duration> },
    /// A dependency is down now; a retry may succeed.
    #[error("{message}")]
    Unavailable { reason: Reason, message: String, retry_after: Option<Duration> },
    /// The operation, or an input it was given, is not emulated; the violations name the inputs.
    #[error("{message}")]
    Unimplemented { message: String, violations: Vec<FieldViolation> },
}

impl SimError {
    /// Bad input with field violations; the message summarizes them.
    pub fn invalid(reason: Reason, violations: Vec<FieldViolation>) -> SimError {
        SimError::InvalidArgument { reason, message: summary(&violations), violations }
    }

    /// Bad input in one field.
    pub fn invalid_field(field: impl Into<String>, description: impl Into<String>) -> SimError {
        SimError::invalid(Reason::InvalidRequest, vec![FieldViolation::new(field, description)])
    }

    /// A create's `request_id` replayed with another body (INVALID_ARGUMENT on `request_id`).
    pub fn request_id_conflict(request_id: &str) -> SimError {
        SimError::invalid(
            Reason::RequestIdConflict,
            vec![FieldViolation::new(
                "request_id",
                format!("request id {request_id:?} was used with a different request"),
            )],
        )
    }

    /// Inputs the emulator does not honour, refused by name rather than ignored; the message
    /// summarizes them.
    pub fn not_emulated(violations: Vec<FieldViolation>) -> SimError {
        let message = format!("not emulated, so refused rather than ignored: {}", summary(&violations));
        SimError::Unimplemented { message, violations }
    }

    /// The ErrorInfo reason, when the error has one.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            SimError::InvalidArgument { reason, .. }
            | SimError::NotFound { reason, .. }
            | SimError::AlreadyExists { reason, .. }
            | SimError::FailedPrecondition { reason, .. }
            | SimError::ResourceExhausted { reason, .. }
            | SimError::Unavailable { reason, .. } => Some(*reason),
            SimError::Unimplemented { .. } => Some(Reason::NotImplemented),
        }
    }

    /// The field violations, for a BadRequest detail.
    pub fn violations(&self) -> &[FieldViolation] {
        match self {
            SimError::InvalidArgument { violations, .. } | SimError::Unimplemented { violations, .. } => violations,
            _ => &[],
        }
    }
}

/// Each violation as `field: description`, joined.
fn summary(violations: &[FieldViolation]) -> String {
    violations
        .iter()
        .map(|violation| format!("{}: {}", violation.field, violation.description))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The one place a policy's refusal gets its gRPC class and reason; the message is the policy's.
impl From<PolicyError> for SimError {
    fn from(error: PolicyError) -> SimError {
        let message = error.to_string();
        match error {
            PolicyError::InvalidSpec { violations } => {
                SimError::InvalidArgument { reason: Reason::InvalidRequest, message, violations }
            }
            PolicyError::Rejected { kind, violations } => {
                let reason = match kind {
                    RejectionKind::Placement => Reason::PlacementRejected,
                    RejectionKind::CeilingExceeded => Reason::ResourceCeilingExceeded,
                };
                SimError::InvalidArgument { reason, message, violations }
            }
            PolicyError::InvalidPolicy { .. } => {
                SimError::FailedPrecondition { reason: Reason::PreconditionFailed, message }
            }
        }
    }
}

/// Shorthand for results of simulation commands.
pub type SimResult<T> = Result<T, SimError>;
