//! `cwsandbox-policy`: runner policies, checked when an administrator writes one and applied to a
//! sandbox when it is created (docs/facts/policy.md; where the public material is silent,
//! docs/facts/runner-api.md#not-public).
//!
//! - [`validate_policy`] lists every problem of a document, each at its JSON path
//!   (`policy.base.spec.terminationGracePeriodSeconds`). The empty policy is valid.
//! - [`resolve`] merges [`RuntimeDefaults`], the policy's `base` and the sandbox spec, then checks
//!   the policy's constraints against the merged result, which it never rewrites; the result is a
//!   [`resolved::ResolvedSpec`], or a [`PolicyError`].
//! - [`BASE_SCHEMA`] is the one table of keys `base` may and may not carry.
//! - [`quantity`] parses and prints Kubernetes resource quantities exactly.
//!
//! Pure and deterministic: no I/O, no clock, no async runtime, and every list of violations comes
//! out in the same order for the same input.

mod base;
mod constraints;
pub mod error;
pub mod k8s_names;
mod network;
pub mod quantity;
mod resolve;
pub mod resolved;
mod validate;

pub use base::{BASE_SCHEMA, BaseSchema, KeyRules, MANAGED_BY_PLATFORM, NOT_ALLOWED_IN_BASE};
pub use error::{FieldViolation, PolicyError, RejectionKind};
pub use resolve::{PreparedPolicy, RuntimeDefaults, resolve, resolve_prepared};
pub use validate::validate_policy;

use crate::quantity::{Quantity, format_bytes};

/// The platform's longest sandbox lifetime: 30 days. No policy can raise it.
pub const MAX_LIFETIME_SECONDS: i32 = 2_592_000;

/// A map key as it appears in a field path: `annotations["sunk.coreweave.com/partition"]`.
fn quoted(key: &str) -> String {
    format!("{key:?}")
}

/// CPU as users write it: "2", "500m".
fn format_cpu(value: Quantity) -> String {
    value.to_string()
}

/// Memory as Kubernetes prints it: "512Mi", "2Gi", or plain bytes.
fn format_memory(value: Quantity) -> String {
    format_bytes(value.units_ceil())
}
