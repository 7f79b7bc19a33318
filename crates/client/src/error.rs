//! Typed errors: every failed call carries the status code, the `ErrorInfo` reason and metadata,
//! the `BadRequest` field violations and the `RetryInfo` delay decoded from the status details,
//! whether the call went over gRPC or Connect.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// The catalogue of `ErrorInfo.reason` values (when each happens, its remedy): the API crate's, so
/// the client and the emulator cannot disagree on a name.
pub use cwsandbox_api::Reason;
use prost::Message;
pub use tonic::Code;
use tonic_types::StatusExt;

/// One `google.rpc.BadRequest.FieldViolation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// Path of the offending field, e.g. `managed_runner.etag`.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

impl fmt::Display for FieldViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.description)
    }
}

/// A server's refusal, decoded from `google.rpc.Status`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiStatus {
    /// The status code.
    pub code: Code,
    /// The human message.
    pub message: String,
    /// `ErrorInfo.reason` as sent (e.g. `CWSANDBOX_SANDBOX_NOT_FOUND`), empty when none was; see
    /// [`ApiStatus::known_reason`] for it as a [`Reason`].
    pub reason: String,
    /// `ErrorInfo.domain`.
    pub domain: String,
    /// `ErrorInfo.metadata`.
    pub metadata: HashMap<String, String>,
    /// `BadRequest.field_violations`.
    pub violations: Vec<FieldViolation>,
    /// `RetryInfo.retry_delay`.
    pub retry_delay: Option<Duration>,
}

impl ApiStatus {
    /// The reason, when it is one of the catalogue; a reason this client does not know (a newer
    /// server's) stays readable as the raw [`ApiStatus::reason`] string.
    pub fn known_reason(&self) -> Option<Reason> {
        Reason::from_wire(&self.reason)
    }
}

impl fmt::Display for ApiStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", code_name(self.code), self.message)?;
        if !self.reason.is_empty() {
            write!(f, " ({})", self.reason)?;
        }
        for violation in &self.violations {
            if !self.message.contains(&violation.description) {
                write!(f, "; {violation}")?;
            }
        }
        Ok(())
    }
}

/// Every error of the SDK.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a non-OK status.
    #[error("{0}")]
    Api(Box<ApiStatus>),
    /// The server could not be reached or the connection broke.
    #[error("transport: {0}")]
    Transport(String),
    /// Bad configuration (no base URL, an invalid token, …).
    #[error("configuration: {0}")]
    Config(String),
    /// `check()` on a command that exited non-zero.
    #[error("command exited with code {exit_code}: {stderr}")]
    CommandFailed {
        /// The exit code.
        exit_code: i32,
        /// Its standard error, lossily decoded.
        stderr: String,
    },
    /// The sandbox reached a terminal state while waiting for it to run.
    #[error("sandbox {sandbox_id} ended {state} while waiting for it to run: {reason}")]
    SandboxEnded {
        /// The sandbox.
        sandbox_id: String,
        /// Its state (`STATE_FAILED`, …).
        state: String,
        /// Its state reason.
        reason: String,
    },
    /// A wait ran out of time.
    #[error("timed out after {0:?}: {1}")]
    Timeout(Duration, String),
    /// The server broke the protocol (an exec stream without an exit, …).
    #[error("protocol: {0}")]
    Protocol(String),
}

/// Short alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The API status, when the server refused.
    pub fn status(&self) -> Option<&ApiStatus> {
        match self {
            Error::Api(status) => Some(status),
            _ => None,
        }
    }

    /// The status code (`Unknown` for errors that are not the server's).
    pub fn code(&self) -> Code {
        self.status().map(|status| status.code).unwrap_or(Code::Unknown)
    }

    /// The `ErrorInfo` reason, when the server sent one the catalogue knows (match on it; its
    /// [`Reason::remedy`] says what to do). [`Error::reason_str`] has the raw string of any reason.
    pub fn reason(&self) -> Option<Reason> {
        self.status().and_then(ApiStatus::known_reason)
    }

    /// The `ErrorInfo` reason as sent, empty when none; kept for reasons this client does not know.
    pub fn reason_str(&self) -> &str {
        self.status().map(|status| status.reason.as_str()).unwrap_or("")
    }

    /// The field violations, empty when none.
    pub fn violations(&self) -> &[FieldViolation] {
        self.status().map(|status| status.violations.as_slice()).unwrap_or(&[])
    }

    /// The server's suggested retry delay.
    pub fn retry_delay(&self) -> Option<Duration> {
        self.status().and_then(|status| status.retry_delay)
    }

    /// A stale etag on a policy update (FAILED_PRECONDITION naming the etag).
    pub fn is_stale_etag(&self) -> bool {
        self.status().is_some_and(|status| {
            status.code == Code::FailedPrecondition
                && (status.message.contains("etag") || status.violations.iter().any(|v| v.field.contains("etag")))
        })
    }
}

/// The canonical upper-case name of a code (`NOT_FOUND`).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        let details = status.get_error_details();
        let mut api = ApiStatus {
            code: status.code(),
            message: status.message().to_owned(),
            reason: String::new(),
            domain: String::new(),
            metadata: HashMap::new(),
            violations: Vec::new(),
            retry_delay: None,
        };
        if let Some(info) = details.error_info() {
            api.reason = info.reason.clone();
            api.domain = info.domain.clone();
            api.metadata = info.metadata.clone();
        }
        if let Some(bad) = details.bad_request() {
            api.violations = bad
                .field_violations
                .iter()
                .map(|v| FieldViolation { field: v.field.clone(), description: v.description.clone() })
                .collect();
        }
        if let Some(retry) = details.retry_info() {
            api.retry_delay = retry.retry_delay;
        }
        // A broken connection surfaces as UNAVAILABLE without details; keep it an API status so
        // callers can match on the code, as the Python client does.
        Error::Api(Box::new(api))
    }
}

impl From<tonic::transport::Error> for Error {
    fn from(error: tonic::transport::Error) -> Self {
        Error::Transport(error.to_string())
    }
}

fn connect_code(code: connectrpc_axum_client::Code) -> Code {
    match code.as_str() {
        "ok" => Code::Ok,
        "canceled" => Code::Cancelled,
        "invalid_argument" => Code::InvalidArgument,
        "deadline_exceeded" => Code::DeadlineExceeded,
        "not_found" => Code::NotFound,
        "already_exists" => Code::AlreadyExists,
        "permission_denied" => Code::PermissionDenied,
        "resource_exhausted" => Code::ResourceExhausted,
        "failed_precondition" => Code::FailedPrecondition,
        "aborted" => Code::Aborted,
        "out_of_range" => Code::OutOfRange,
        "unimplemented" => Code::Unimplemented,
        "internal" => Code::Internal,
        "unavailable" => Code::Unavailable,
        "data_loss" => Code::DataLoss,
        "unauthenticated" => Code::Unauthenticated,
        _ => Code::Unknown,
    }
}

impl From<connectrpc_axum_client::ClientError> for Error {
    fn from(error: connectrpc_axum_client::ClientError) -> Self {
        use connectrpc_axum_client::ClientError;
        let status = match error {
            ClientError::Rpc(status) => status,
            ClientError::Transport(message) => return Error::Transport(message),
            other => return Error::Protocol(other.to_string()),
        };
        let mut api = ApiStatus {
            code: connect_code(status.code()),
            message: status.message().unwrap_or_default().to_owned(),
            reason: String::new(),
            domain: String::new(),
            metadata: HashMap::new(),
            violations: Vec::new(),
            retry_delay: None,
        };
        for detail in status.details() {
            let type_url = detail.type_url();
            if type_url.ends_with("google.rpc.ErrorInfo") {
                if let Ok(info) = tonic_types::pb::ErrorInfo::decode(detail.value()) {
                    api.reason = info.reason;
                    api.domain = info.domain;
                    api.metadata = info.metadata;
                }
            } else if type_url.ends_with("google.rpc.BadRequest") {
                if let Ok(bad) = tonic_types::pb::BadRequest::decode(detail.value()) {
                    api.violations = bad
                        .field_violations
                        .into_iter()
                        .map(|v| FieldViolation { field: v.field, description: v.description })
                        .collect();
                }
            } else if type_url.ends_with("google.rpc.RetryInfo")
                && let Ok(retry) = tonic_types::pb::RetryInfo::decode(detail.value())
            {
                api.retry_delay = retry.retry_delay.and_then(|d| {
                    (d.seconds >= 0 && d.nanos >= 0).then(|| Duration::new(d.seconds as u64, d.nanos as u32))
                });
            }
        }
        Error::Api(Box::new(api))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    fn refused(reason: &str) -> Error {
        let details = ErrorDetails::with_error_info(reason, "cwsandbox.com", HashMap::new());
        Error::from(tonic::Status::with_error_details(Code::NotFound, "sandbox x not found", details))
    }

    #[test]
    fn a_catalogued_reason_reads_as_its_variant() {
        let error = refused("CWSANDBOX_SANDBOX_NOT_FOUND");
        assert_eq!(error.reason(), Some(Reason::SandboxNotFound));
        assert_eq!(error.reason_str(), "CWSANDBOX_SANDBOX_NOT_FOUND");
    }

    #[test]
    fn an_unknown_reason_stays_available_as_sent() {
        let error = refused("CWSANDBOX_FROM_A_NEWER_SERVER");
        assert_eq!(error.reason(), None);
        assert_eq!(error.reason_str(), "CWSANDBOX_FROM_A_NEWER_SERVER");
        assert_eq!(Error::Transport("down".to_owned()).reason(), None);
    }
}
