//! `Status` objects: how the Kubernetes API server says no. kubectl prints `message` after
//! `Error from server (<reason>): `, so the messages follow the API server's wording.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

use crate::errors::ApiError;

/// A failed request as a `meta/v1` Status.
#[derive(Debug, Clone)]
pub struct Status {
    code: u16,
    reason: &'static str,
    message: String,
    details: Option<Value>,
}

impl Status {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Status {
        Status { code, reason, message: message.into(), details: None }
    }

    fn with_details(mut self, kind: &str, name: &str) -> Status {
        let mut details = json!({ "kind": kind });
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        self.details = Some(details);
        self
    }

    /// 404 for a path the server does not serve.
    pub fn not_found_path() -> Status {
        Status::new(404, "NotFound", "the server could not find the requested resource").with_details("", "")
    }

    /// 404 for a missing object.
    pub fn not_found(plural: &str, name: &str) -> Status {
        Status::new(404, "NotFound", format!("{plural} \"{name}\" not found")).with_details(plural, name)
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(plural: &str, name: &str) -> Status {
        Status::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            .with_details(plural, name)
    }

    /// 400 for a malformed request.
    pub fn bad_request(message: impl Into<String>) -> Status {
        Status::new(400, "BadRequest", message)
    }

    /// 422 naming the invalid field.
    pub fn invalid(plural: &str, name: &str, field: &str, description: &str) -> Status {
        let mut status = Status::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {field}: Invalid value: {description}", plural_kind(plural)),
        )
        .with_details(plural, name);
        if let Some(details) = status.details.as_mut() {
            details["causes"] = json!([{ "reason": "FieldValueInvalid", "message": description, "field": field }]);
        }
        status
    }

    /// 401 for a missing or unknown token.
    pub fn unauthorized() -> Status {
        Status::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 for a caller without the role.
    pub fn forbidden(plural: &str, message: impl Into<String>) -> Status {
        Status::new(403, "Forbidden", message).with_details(plural, "")
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> Status {
        Status::new(500, "InternalError", message)
    }

    /// A domain error, through the one mapping of `errors.rs`.
    pub fn from_api(error: &ApiError, plural: &str, name: &str) -> Status {
        let (code, reason) = error.kube_status();
        Status::new(code, reason, error.message.clone()).with_details(plural, name)
    }

    /// A refusal of the simulation: an invalid field reads as the API server's "is invalid"
    /// (with the field in its JSON name), anything else by its code.
    pub fn from_sim(error: cwsandbox_sim::SimError, plural: &str, name: &str) -> Status {
        let error = ApiError::from(error);
        match error.violations.first() {
            Some((field, description)) if error.kube_status().0 == 422 => {
                Status::invalid(plural, name, &json_name(field), description)
            }
            _ => Status::from_api(&error, plural, name),
        }
    }

    /// The Status object.
    pub fn body(&self) -> Value {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            body["details"] = details.clone();
        }
        body
    }
}

/// `pods` → `Pod`, as the API server names the kind in "is invalid" messages.
fn plural_kind(plural: &str) -> String {
    let singular = plural.strip_suffix('s').unwrap_or(plural);
    let mut letters = singular.chars();
    letters.next().map(|first| first.to_uppercase().chain(letters).collect()).unwrap_or_default()
}

impl IntoResponse for Status {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        (code, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

/// `grace_period_seconds` → `gracePeriodSeconds`: the name a field has in JSON.
fn json_name(field: &str) -> String {
    let mut name = String::with_capacity(field.len());
    let mut upper = false;
    for character in field.chars() {
        match character {
            '_' => upper = true,
            _ if upper => {
                name.extend(character.to_uppercase());
                upper = false;
            }
            _ => name.push(character),
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_read_as_in_json() {
        assert_eq!(json_name("grace_period_seconds"), "gracePeriodSeconds");
        assert_eq!(json_name("pod.spec.terminationGracePeriodSeconds"), "pod.spec.terminationGracePeriodSeconds");
    }
}
