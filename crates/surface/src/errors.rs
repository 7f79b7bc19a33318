//! The one mapping from failures to status codes and `google.rpc` details, shared by every
//! transport.
//!
//! Every failure a handler returns is an [`ApiError`]: a status code, a message, an
//! `ErrorInfo` reason (domain `cwsandbox.com`) with metadata, `BadRequest` field violations and,
//! where a retry can succeed, a `RetryInfo` delay. [`SimError`] and [`RuntimeError`] convert into it
//! here and nowhere else. An `ApiError` becomes a `tonic::Status` carrying the details in
//! `grpc-status-details-bin` (built with `tonic-types`), and a Connect error from that status, so
//! the Connect JSON error's `details` hold the same messages (`{"type": "google.rpc.ErrorInfo",
//! "value": <base64>}`).
//!
//! Reasons are the one catalogue [`Reason`] (the API crate's, shared with the simulation and the
//! client); [`codes`] gives each the status codes it is sent with, and `docs/errors.md`, generated
//! from both (`errors_doc` below), lists every reason with its codes, when it happens and its
//! remedy. The reasons the emulator adds to the public list
//! (docs/facts/client-contract.md#reasons), such as `CWSANDBOX_UNAUTHENTICATED` or
//! `CWSANDBOX_OVERLOADED`, are none the client treats specially, so it classifies those errors by
//! status code, as it would without a reason.

use std::collections::HashMap;
use std::time::Duration;

use connectrpc_axum::ConnectError;
use cwsandbox_sim::{Reason, SimError};
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

use crate::direct::DirectError;
use cwsandbox_host::runtime::RuntimeError;

/// The `ErrorInfo.domain` of every error.
pub const DOMAIN: &str = "cwsandbox.com";

/// The status codes a reason is sent with, the usual one first: the one place a reason meets its
/// code. Every [`ApiError`] is checked against it (in debug builds), and `docs/errors.md` is
/// generated from it, so the catalogue lists every code a client can see with each reason.
pub fn codes(reason: Reason) -> &'static [Code] {
    match reason {
        // The transport's own decoding faults take the code gRPC prescribes for them (a stalled
        // body DEADLINE_EXCEEDED, a unary call with other than one message UNIMPLEMENTED), and a
        // state the emulator could not render is INTERNAL.
        Reason::InvalidRequest => &[Code::InvalidArgument, Code::DeadlineExceeded, Code::Unimplemented, Code::Internal],
        Reason::RequestIdConflict => &[Code::InvalidArgument],
        Reason::SandboxNotFound => &[Code::NotFound],
        Reason::TemplateNotFound => &[Code::NotFound],
        Reason::RunnerNotFound => &[Code::NotFound],
        Reason::RunnerUnavailable => &[Code::Unavailable],
        Reason::NoSuitableRunner => &[Code::FailedPrecondition],
        Reason::RunnerCapacityExhausted => &[Code::ResourceExhausted],
        Reason::ServerlessDisabled => &[Code::FailedPrecondition],
        Reason::PlacementRejected => &[Code::InvalidArgument],
        Reason::ResourceCeilingExceeded => &[Code::InvalidArgument],
        Reason::PreconditionFailed => &[Code::FailedPrecondition],
        Reason::NotImplemented => &[Code::Unimplemented],
        Reason::AlreadyExists => &[Code::AlreadyExists],
        Reason::FssNotFound => &[Code::NotFound],
        Reason::FssNotReady => &[Code::FailedPrecondition],
        Reason::FssNotSupported => &[Code::FailedPrecondition],
        Reason::FssQuotaExceeded => &[Code::ResourceExhausted],
        Reason::VolumeInUse => &[Code::FailedPrecondition],
        Reason::VolumeNotFound => &[Code::NotFound],
        Reason::VolumeNotReady => &[Code::FailedPrecondition],
        Reason::VolumePlacementConflict => &[Code::InvalidArgument],
        Reason::VolumeRunnerIneligible => &[Code::InvalidArgument],
        Reason::JobNotFound => &[Code::NotFound],
        Reason::NodeNotFound => &[Code::NotFound],
        Reason::PodNotFound => &[Code::NotFound],
        Reason::TenantNotFound => &[Code::NotFound],
        Reason::FaultNotFound => &[Code::NotFound],
        Reason::ImageNotFound => &[Code::NotFound],
        Reason::SecretNotFound => &[Code::NotFound],
        Reason::SecretStoreNotFound => &[Code::NotFound],
        Reason::Unauthenticated => &[Code::Unauthenticated],
        Reason::PermissionDenied => &[Code::PermissionDenied],
        // INTERNAL when the executor reports that it failed to run the command.
        Reason::BackendUnavailable => &[Code::Unavailable, Code::Internal],
        Reason::SandboxNotRunning => &[Code::FailedPrecondition],
        // INVALID_ARGUMENT with a BadRequest violation on `container`: the published client
        // reads a NOT_FOUND of a data operation as "Sandbox … not found", and the violation
        // as a validation error that keeps the message.
        Reason::ContainerNotFound => &[Code::InvalidArgument],
        Reason::FileNotFound => &[Code::NotFound],
        Reason::FileIsDirectory => &[Code::FailedPrecondition],
        Reason::FilePermissionDenied => &[Code::PermissionDenied],
        Reason::FileTooLarge => &[Code::ResourceExhausted],
        // An I/O error, a path that is not a regular file, a transfer out of time.
        Reason::FileIoFailed => &[Code::Internal, Code::FailedPrecondition, Code::DeadlineExceeded],
        Reason::CommandTimeout => &[Code::DeadlineExceeded],
        Reason::DeadlineExceeded => &[Code::DeadlineExceeded],
        Reason::RequestTooLarge => &[Code::ResourceExhausted],
        Reason::ResponseTooLarge => &[Code::ResourceExhausted],
        Reason::Overloaded => &[Code::ResourceExhausted],
    }
}

/// A failed request, ready for either transport.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// gRPC status code.
    pub code: Code,
    /// Human-readable message.
    pub message: String,
    /// `ErrorInfo.reason`.
    pub reason: Reason,
    /// `ErrorInfo.metadata`, in insertion order.
    pub metadata: Vec<(String, String)>,
    /// `BadRequest.field_violations` as (field, description).
    pub violations: Vec<(String, String)>,
    /// `RetryInfo.retry_delay`.
    pub retry_after: Option<Duration>,
}

impl ApiError {
    /// An error with a code, a reason and a message. The code is one [`codes`] lists for the
    /// reason; a debug build panics otherwise, so the catalogue cannot fall behind.
    pub fn new(code: Code, reason: Reason, message: impl Into<String>) -> ApiError {
        debug_assert!(
            codes(reason).contains(&code),
            "{reason} is sent with {code:?}, which errors::codes does not list for it: add it there and regenerate \
             docs/errors.md (CWSANDBOX_REGENERATE_DOCS=1 cargo test -p cwsandbox-emulator --lib errors_doc)"
        );
        ApiError {
            code,
            message: message.into(),
            reason,
            metadata: Vec::new(),
            violations: Vec::new(),
            retry_after: None,
        }
    }

    /// Adds an `ErrorInfo.metadata` entry.
    pub fn with_metadata(mut self, key: &str, value: impl Into<String>) -> ApiError {
        self.metadata.retain(|(existing, _)| existing != key);
        self.metadata.push((key.to_owned(), value.into()));
        self
    }

    /// INVALID_ARGUMENT with one field violation; the message names the field.
    pub fn invalid_field(field: &str, description: impl Into<String>) -> ApiError {
        let description = description.into();
        let mut error = ApiError::new(Code::InvalidArgument, Reason::InvalidRequest, format!("{field}: {description}"));
        error.violations.push((field.to_owned(), description));
        error
    }

    /// A data operation named a container the sandbox does not have; `field` is where the
    /// request named it (`container`, `init.container`).
    pub fn container_not_found(field: &str, message: String, container: &str) -> ApiError {
        let mut error = ApiError::new(Code::InvalidArgument, Reason::ContainerNotFound, message.clone())
            .with_metadata("container", container);
        error.violations.push((field.to_owned(), message));
        error
    }

    /// INVALID_ARGUMENT for a required field left empty.
    pub fn missing_field(field: &str) -> ApiError {
        ApiError::invalid_field(field, "required")
    }

    /// UNAUTHENTICATED.
    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::Unauthenticated, Reason::Unauthenticated, message)
    }

    /// PERMISSION_DENIED for a missing role.
    pub fn permission_denied(role: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(Code::PermissionDenied, Reason::PermissionDenied, message).with_metadata("required_role", role)
    }

    /// UNIMPLEMENTED with reason `CWSANDBOX_NOT_IMPLEMENTED`.
    pub fn not_implemented(what: &str) -> ApiError {
        ApiError::new(Code::Unimplemented, Reason::NotImplemented, format!("{what} is not emulated"))
            .with_metadata("method", what)
    }

    /// UNIMPLEMENTED with reason `CWSANDBOX_NOT_IMPLEMENTED` for request fields the emulator would
    /// otherwise ignore (`crate::fidelity`): one violation per field (its path in the request, and
    /// why), the message naming them all.
    pub fn fields_not_implemented(method: &str, fields: Vec<(String, String)>) -> ApiError {
        let names: Vec<&str> = fields.iter().map(|(field, _)| field.as_str()).collect();
        let names = names.join(", ");
        let mut error = ApiError::new(
            Code::Unimplemented,
            Reason::NotImplemented,
            format!(
                "{method}: {names}: not emulated, so refused rather than ignored (the values' `strictness: loose` \
                 accepts them and logs a warning)"
            ),
        )
        .with_metadata("method", method)
        .with_metadata("fields", names);
        error.violations = fields;
        error
    }

    /// UNAVAILABLE: no process executor is attached to this emulator.
    pub fn backend_unavailable(operation: &str) -> ApiError {
        ApiError::new(
            Code::Unavailable,
            Reason::BackendUnavailable,
            format!(
                "{operation} needs a process executor, and none is attached to this emulator: sandboxes are \
                 scheduled and their state is emulated, but their processes do not run"
            ),
        )
        .with_metadata("operation", operation)
    }

    /// The `tonic::Status` with `grpc-status-details-bin`.
    pub fn to_status(&self) -> tonic::Status {
        let mut details = ErrorDetails::new();
        details.set_error_info(self.reason.as_str(), DOMAIN, self.metadata.iter().cloned().collect::<HashMap<_, _>>());
        if !self.violations.is_empty() {
            for (field, description) in &self.violations {
                details.add_bad_request_violation(field.clone(), description.clone());
            }
        }
        if let Some(delay) = self.retry_after {
            details.set_retry_info(Some(delay));
        }
        tonic::Status::with_error_details(self.code, self.message.clone(), details)
    }
}

impl ApiError {
    /// The HTTP status and `Status.reason` the Kubernetes API server uses for this failure (the
    /// kube facade's answer to the same domain error).
    pub fn kube_status(&self) -> (u16, &'static str) {
        match self.code {
            Code::InvalidArgument | Code::OutOfRange => (422, "Invalid"),
            Code::NotFound => (404, "NotFound"),
            Code::AlreadyExists => (409, "AlreadyExists"),
            Code::FailedPrecondition | Code::Aborted => (409, "Conflict"),
            Code::Unauthenticated => (401, "Unauthorized"),
            Code::PermissionDenied => (403, "Forbidden"),
            Code::ResourceExhausted => (429, "TooManyRequests"),
            Code::Unavailable => (503, "ServiceUnavailable"),
            Code::DeadlineExceeded => (504, "Timeout"),
            Code::Unimplemented => (405, "MethodNotAllowed"),
            _ => (500, "InternalError"),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {}: {}", self.code, self.reason, self.message)
    }
}

impl From<ApiError> for tonic::Status {
    fn from(error: ApiError) -> tonic::Status {
        error.to_status()
    }
}

impl From<ApiError> for ConnectError {
    fn from(error: ApiError) -> ConnectError {
        ConnectError::from(error.to_status())
    }
}

impl From<SimError> for ApiError {
    fn from(error: SimError) -> ApiError {
        let message = error.to_string();
        let reason = error.reason().unwrap_or(Reason::InvalidRequest);
        let mut api = match &error {
            SimError::InvalidArgument { .. } => ApiError::new(Code::InvalidArgument, reason, message),
            SimError::NotFound { .. } => ApiError::new(Code::NotFound, reason, message),
            SimError::AlreadyExists { .. } => ApiError::new(Code::AlreadyExists, reason, message),
            SimError::FailedPrecondition { .. } => ApiError::new(Code::FailedPrecondition, reason, message),
            SimError::ResourceExhausted { retry_after, .. } => {
                let mut api = ApiError::new(Code::ResourceExhausted, reason, message);
                api.retry_after = *retry_after;
                api
            }
            SimError::Unavailable { retry_after, .. } => {
                let mut api = ApiError::new(Code::Unavailable, reason, message);
                api.retry_after = *retry_after;
                api
            }
            SimError::Unimplemented { .. } => ApiError::new(Code::Unimplemented, Reason::NotImplemented, message),
        };
        api.violations = error
            .violations()
            .iter()
            .map(|violation| (violation.field.clone(), violation.description.clone()))
            .collect();
        api
    }
}

impl From<RuntimeError> for ApiError {
    fn from(error: RuntimeError) -> ApiError {
        let message = error.to_string();
        match error {
            RuntimeError::NotRunning(_) => ApiError::new(Code::FailedPrecondition, Reason::SandboxNotRunning, message),
            RuntimeError::ContainerNotFound(name) => ApiError::container_not_found("container", message, &name),
            RuntimeError::FileNotFound { path } => {
                ApiError::new(Code::NotFound, Reason::FileNotFound, message).with_metadata("filepath", path)
            }
            RuntimeError::IsDirectory { path } => {
                ApiError::new(Code::FailedPrecondition, Reason::FileIsDirectory, message)
                    .with_metadata("filepath", path)
            }
            RuntimeError::PermissionDenied { path } => {
                ApiError::new(Code::PermissionDenied, Reason::FilePermissionDenied, message)
                    .with_metadata("filepath", path)
            }
            RuntimeError::FileTooLarge { path, size_bytes, max_size_bytes } => {
                ApiError::new(Code::ResourceExhausted, Reason::FileTooLarge, message)
                    .with_metadata("filepath", path)
                    .with_metadata("size_bytes", size_bytes.to_string())
                    .with_metadata("max_size_bytes", max_size_bytes.to_string())
            }
            RuntimeError::Io { path, .. } => {
                ApiError::new(Code::Internal, Reason::FileIoFailed, message).with_metadata("filepath", path)
            }
            RuntimeError::NotRegularFile { path, .. } => {
                ApiError::new(Code::FailedPrecondition, Reason::FileIoFailed, message).with_metadata("filepath", path)
            }
            RuntimeError::FileTimeout { path, .. } => {
                ApiError::new(Code::DeadlineExceeded, Reason::FileIoFailed, message).with_metadata("filepath", path)
            }
            RuntimeError::CommandTimeout(_) => ApiError::new(Code::DeadlineExceeded, Reason::CommandTimeout, message),
            RuntimeError::Unavailable(_) => ApiError::new(Code::Unavailable, Reason::BackendUnavailable, message),
            RuntimeError::StartFailed(_) => ApiError::new(Code::FailedPrecondition, Reason::SandboxNotRunning, message),
            RuntimeError::InvalidArgument { field, description } => ApiError::invalid_field(&field, description),
        }
    }
}

impl From<DirectError> for ApiError {
    fn from(error: DirectError) -> ApiError {
        let message = error.to_string();
        match error {
            DirectError::Csr(_) => ApiError::invalid_field("csr_der", message),
            // The client reads INTERNAL from ConnectSandbox as "use the gateway".
            DirectError::Signing(_) => ApiError::new(Code::Internal, Reason::BackendUnavailable, message),
            DirectError::TooMany => {
                let mut error = ApiError::new(Code::ResourceExhausted, Reason::Overloaded, message);
                error.retry_after = Some(crate::direct::CERTIFICATE_LIFETIME / 10);
                error
            }
            DirectError::Unknown | DirectError::Expired { .. } => {
                ApiError::unauthenticated(message).with_metadata("credentials", "client_certificate")
            }
            DirectError::OtherSandbox { bound, asked } => {
                ApiError::new(Code::PermissionDenied, Reason::PermissionDenied, message)
                    .with_metadata("sandbox_id", asked)
                    .with_metadata("certificate_sandbox_id", bound)
            }
            DirectError::NotGranted { permission, sandbox_id, .. } => {
                ApiError::new(Code::PermissionDenied, Reason::PermissionDenied, message)
                    .with_metadata("sandbox_id", sandbox_id)
                    .with_metadata("permission", permission.method())
            }
        }
    }
}

/// Connect request-decoding failures (malformed JSON, unknown fields, bad binary messages) are
/// answered by connectrpc-axum before any handler runs, with a bare `invalid_argument`. This gives
/// them the same details as every other error: `ErrorInfo` with `CWSANDBOX_INVALID_REQUEST`, and a
/// `BadRequest` naming the field. With the request's JSON at hand (`request_json`, kept by the
/// request guard for unary Connect JSON), the field is the JSON path where the decoder stopped
/// (`sandbox.spec.containers[1].name`, see [`crate::json_path`]), and the message starts with it;
/// without, it is the field an unknown- or missing-field message names. Other responses pass
/// through.
pub async fn enrich_connect_error(
    response: axum::response::Response,
    request_json: Option<&bytes::Bytes>,
) -> axum::response::Response {
    const MAX_ERROR_BODY: usize = 64 << 10;
    const DECODER_PREFIX: &str = "failed to decode JSON message: ";
    let is_json_error = response.status() == http::StatusCode::BAD_REQUEST
        && response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|content_type| content_type.starts_with("application/json"));
    if !is_json_error {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        return axum::response::Response::from_parts(parts, axum::body::Body::empty());
    };
    let rebuilt = || axum::response::Response::from_parts(parts.clone(), axum::body::Body::from(bytes.clone()));
    let Ok(error) = serde_json::from_slice::<serde_json::Value>(&bytes) else { return rebuilt() };
    let has_details =
        error.get("details").and_then(|details| details.as_array()).is_some_and(|details| !details.is_empty());
    if error.get("code").and_then(|code| code.as_str()) != Some("invalid_argument") || has_details {
        return rebuilt();
    }
    let message = error.get("message").and_then(|message| message.as_str()).unwrap_or("invalid request").to_owned();
    let located = request_json.zip(message.strip_prefix(DECODER_PREFIX)).and_then(|(json, fault)| {
        let (line, column) = crate::json_path::position(fault)?;
        let eof = fault.starts_with("EOF while parsing");
        let mut stop = crate::json_path::offset(json, line, column);
        // pbjson reads a number through an untagged enum, whose error serde_json places after
        // the bracket that follows the number rather than after the number.
        if fault.contains("untagged enum") && stop > 0 && matches!(json[stop - 1], b'}' | b']') {
            stop -= 1;
        }
        let path = crate::json_path::locate(json, stop, eof);
        (!path.is_empty()).then(|| (path, crate::json_path::without_position(fault).to_owned()))
    });
    let api = match located {
        Some((path, fault)) => ApiError::invalid_field(&path, fault),
        None => {
            let field = ["unknown field `", "missing field `"].iter().find_map(|marker| {
                message.split_once(marker).and_then(|(_, rest)| rest.split_once('`')).map(|(name, _)| name.to_owned())
            });
            let mut api = ApiError::new(Code::InvalidArgument, Reason::InvalidRequest, message.clone());
            if let Some(field) = field {
                api.violations.push((field, message));
            }
            api
        }
    };
    let mut response = axum::response::IntoResponse::into_response(ConnectError::from(api));
    for (name, value) in parts.headers.iter().filter(|(name, _)| *name != http::header::CONTENT_LENGTH) {
        response.headers_mut().entry(name.clone()).or_insert(value.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwsandbox_sim::FieldViolation;
    use prost::Message;

    fn details(status: &tonic::Status) -> ErrorDetails {
        status.get_error_details()
    }

    #[test]
    fn invalid_argument_carries_reason_and_field_violations() {
        let error = SimError::invalid(
            Reason::InvalidRequest,
            vec![FieldViolation::new("sandbox.spec.containers", "at least one container is required")],
        );
        let status = ApiError::from(error).to_status();
        assert_eq!(status.code(), Code::InvalidArgument);
        let details = details(&status);
        let info = details.error_info().unwrap();
        assert_eq!((info.reason.as_str(), info.domain.as_str()), ("CWSANDBOX_INVALID_REQUEST", DOMAIN));
        let violations = &details.bad_request().unwrap().field_violations;
        assert_eq!(violations[0].field, "sandbox.spec.containers");
    }

    #[test]
    fn retryable_errors_carry_retry_info_and_others_do_not() {
        let unavailable = SimError::Unavailable {
            reason: Reason::RunnerUnavailable,
            message: "runner not ready".to_owned(),
            retry_after: Some(Duration::from_secs(5)),
        };
        let status = ApiError::from(unavailable).to_status();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(details(&status).retry_info().unwrap().retry_delay, Some(Duration::from_secs(5)));
        let stale = SimError::FailedPrecondition { reason: Reason::PreconditionFailed, message: "stale".to_owned() };
        let status = ApiError::from(stale).to_status();
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert!(details(&status).retry_info().is_none());
    }

    #[test]
    fn connect_errors_carry_the_same_details() {
        let error = ApiError::invalid_field("runner_id", "required");
        let connect = ConnectError::from(error.clone());
        assert_eq!(connect.code(), connectrpc_axum::Code::InvalidArgument);
        let types: Vec<&str> = connect.details().iter().map(|detail| detail.type_url()).collect();
        assert_eq!(types, ["type.googleapis.com/google.rpc.ErrorInfo", "type.googleapis.com/google.rpc.BadRequest"]);
        let info = tonic_types::pb::ErrorInfo::decode(connect.details()[0].value()).unwrap();
        assert_eq!(info.reason, "CWSANDBOX_INVALID_REQUEST");
        let json = serde_json::to_value(connect.status()).unwrap();
        assert_eq!(json["code"], "invalid_argument");
        assert_eq!(json["details"][0]["type"], "google.rpc.ErrorInfo");
    }

    /// The catalogue's codes are the ones sent: a reason with a code `codes` does not list is a
    /// bug caught where the error is built.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "which errors::codes does not list for it")]
    fn a_reason_sent_with_an_unlisted_code_is_caught() {
        let _ = ApiError::new(Code::NotFound, Reason::Overloaded, "the budget is gone");
    }

    /// The name gRPC's own documents use for a code (`INVALID_ARGUMENT`).
    fn grpc_name(code: Code) -> String {
        let mut name = String::new();
        for (index, letter) in format!("{code:?}").chars().enumerate() {
            if letter.is_uppercase() && index > 0 {
                name.push('_');
            }
            name.push(letter.to_ascii_uppercase());
        }
        name
    }

    /// `docs/errors.md` as the code describes it: every reason, its codes on each transport, when
    /// it happens and its remedy.
    fn errors_markdown() -> String {
        let mut text = String::from(
            "# Error reasons\n\n\
             <!-- Generated by `errors_doc` in crates/surface/src/errors.rs from `cwsandbox_api::Reason` and \
             `errors::codes`; do not edit. Regenerate with \
             `CWSANDBOX_REGENERATE_DOCS=1 cargo test -p cwsandbox-emulator --lib errors_doc`. -->\n\n\
             Every failure the emulator's handlers and request guard answer carries a `google.rpc.ErrorInfo` \
             (domain `cwsandbox.com`) whose `reason` is one of these, over gRPC (`grpc-status-details-bin`), \
             Connect and gRPC-Web alike; the Kubernetes facade answers the same failures with a Kubernetes \
             `Status`. Where a reason is sent with more than one code, the first is the usual one. Some failures \
             carry no ErrorInfo: a fault's answer carries exactly the details its action names (ErrorInfo only \
             with a `reason`, RetryInfo only with a `retryDelay`), so a bare injected `UNAVAILABLE` is what a \
             proxy in front of the real service sends, which the published client maps by its status code alone; \
             and on gRPC a request whose protobuf does not decode (`INVALID_ARGUMENT`) or that names no method \
             of the API (`UNIMPLEMENTED`) is answered by tonic without details (Connect answers the first with \
             `CWSANDBOX_INVALID_REQUEST`, and an unknown path with HTTP 404). In Rust, `cwsandbox_api::Reason` holds this table \
             (`Reason::ALL`, `description()`, `remedy()`), and `cwsandbox_client::Error::reason()` returns it.\n\n\
             | Reason | gRPC code | Connect code (HTTP) | Kubernetes facade | When | Remedy |\n\
             |---|---|---|---|---|---|\n",
        );
        for &reason in Reason::ALL {
            let column = |cell: &dyn Fn(Code) -> String| {
                codes(reason).iter().map(|&code| cell(code)).collect::<Vec<_>>().join(", ")
            };
            let grpc = column(&|code| format!("`{}`", grpc_name(code)));
            let connect = column(&|code| {
                let error = ConnectError::from(tonic::Status::new(code, ""));
                let name = error.code().as_str().to_owned();
                let http = axum::response::IntoResponse::into_response(error).status().as_u16();
                format!("`{name}` ({http})")
            });
            let kube = column(&|code| {
                let (http, kube_reason) = ApiError::new(code, reason, "").kube_status();
                format!("{http} `{kube_reason}`")
            });
            text.push_str(&format!(
                "| `{reason}` | {grpc} | {connect} | {kube} | {} | {} |\n",
                reason.description().replace('|', "\\|"),
                reason.remedy().replace('|', "\\|")
            ));
        }
        text
    }

    /// Keeps `docs/errors.md` complete and current: it must be what the code generates.
    #[test]
    fn errors_doc() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
        let generated = errors_markdown();
        if std::env::var_os("CWSANDBOX_REGENERATE_DOCS").is_some() {
            std::fs::write(&path, &generated).unwrap();
            return;
        }
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            current == generated,
            "docs/errors.md is not what the code generates (a reason, its codes or its remedy changed); \
             regenerate it with `CWSANDBOX_REGENERATE_DOCS=1 cargo test -p cwsandbox-emulator --lib errors_doc` \
             and commit the result"
        );
        for &reason in Reason::ALL {
            assert!(!codes(reason).is_empty(), "{reason} has no status code");
            assert!(current.contains(&format!("| `{reason}` |")), "{reason} is missing from docs/errors.md");
        }
    }

    #[test]
    fn file_errors_use_the_client_reasons() {
        let status =
            ApiError::from(RuntimeError::FileTooLarge { path: "/big".to_owned(), size_bytes: 40, max_size_bytes: 32 })
                .to_status();
        let details = details(&status);
        let info = details.error_info().unwrap();
        assert_eq!(info.reason, "CWSANDBOX_FILE_TOO_LARGE");
        assert_eq!(info.metadata["max_size_bytes"], "32");
    }
}
