//! Why a policy refuses a sandbox. The simulation turns these into its `SimError` (one `From` impl
//! in `cwsandbox-sim`), which gives each its gRPC code and `ErrorInfo.reason`; the messages are
//! written here, once.

use std::fmt;

/// One problem with one input field, named by its JSON-style path (`policy.base.spec.x`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// Path of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

impl FieldViolation {
    /// A violation of `field`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        FieldViolation { field: field.into(), description: description.into() }
    }
}

/// Which kind of constraint refused a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionKind {
    /// At least one refusal is not a ceiling: the sandbox cannot run on this runner as it is.
    Placement,
    /// Every refusal is a `cpuCeiling` / `memoryCeiling` one (the only rejection eligible for
    /// serverless spillover).
    CeilingExceeded,
}

/// Why resolving a sandbox against its runner's policy failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The sandbox spec itself is malformed (bad quantities, lifetime out of range, invalid
    /// annotation keys, malformed network rules…).
    #[error("{}", Listed(violations))]
    InvalidSpec { violations: Vec<FieldViolation> },
    /// The policy's constraints refuse the sandbox.
    #[error("the runner's policy rejects the sandbox: {}", Listed(violations))]
    Rejected { kind: RejectionKind, violations: Vec<FieldViolation> },
    /// The stored policy is itself invalid, which validation at write time should have prevented.
    #[error("the runner's policy is invalid and must be fixed before sandboxes can use it: {}", Listed(problems))]
    InvalidPolicy { problems: Vec<FieldViolation> },
}

impl PolicyError {
    /// The violations, each at its field: the sandbox's for `InvalidSpec` and `Rejected`, the
    /// policy's for `InvalidPolicy`.
    pub fn violations(&self) -> &[FieldViolation] {
        match self {
            PolicyError::InvalidSpec { violations } | PolicyError::Rejected { violations, .. } => violations,
            PolicyError::InvalidPolicy { problems } => problems,
        }
    }
}

/// `field: description; field: description`.
struct Listed<'a>(&'a [FieldViolation]);

impl fmt::Display for Listed<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, violation) in self.0.iter().enumerate() {
            if index > 0 {
                formatter.write_str("; ")?;
            }
            write!(formatter, "{}: {}", violation.field, violation.description)?;
        }
        Ok(())
    }
}
