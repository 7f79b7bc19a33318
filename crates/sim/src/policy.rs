//! Policy validation.
//!
//! STUB, replaced on merge: the real `validate_policy` (every rule of research/runner-api.md §2.3)
//! is written on another branch with exactly this signature. This stub accepts every policy so the
//! runner registry can be built and tested against the contract in the meantime.

use cwsandbox_api::sandbox_v1::Policy;

use crate::error::FieldViolation;

/// Every problem of `policy`, one violation per offending field; empty when the policy is valid.
pub fn validate_policy(_: &Policy) -> Vec<FieldViolation> {
    Vec::new()
}
