//! The errors of the store. A [`PullError`]'s Display reads like what the kubelet puts after
//! `Failed to pull image "X": ` in a Pod's events (containerd's wording where there is one).

use std::path::PathBuf;

use thiserror::Error;

use crate::reference::InvalidReference;
use crate::unpack::{LimitExceeded, UnpackError};

/// The store's directory could not be made ready.
#[derive(Debug, Error)]
#[error("image store {}: {source}", path.display())]
pub struct StoreError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Why an image could not be had.
#[derive(Debug, Error)]
pub enum PullError {
    /// The name cannot be parsed: Kubernetes' `InvalidImageName`.
    #[error(transparent)]
    InvalidReference(#[from] InvalidReference),
    /// The registry has no such repository, tag or digest (or no image for this platform).
    #[error("failed to resolve reference \"{reference}\": {reference}: not found ({message})")]
    NotFound { reference: String, message: String },
    /// The registry asks for credentials, or refused the ones given.
    #[error(
        "failed to resolve reference \"{reference}\": pull access denied, repository does not exist or may require authorization: {message}"
    )]
    Unauthorized { reference: String, message: String },
    /// The registry could not be reached: no such host, connection refused, timed out.
    #[error("failed to resolve reference \"{reference}\": failed to do request to {registry}: {reason}")]
    Unreachable { reference: String, registry: String, reason: String },
    /// Pull policy `Never` and no such image here: Kubernetes' `ErrImageNeverPull` (whose event
    /// is this message alone, without "Failed to pull image").
    #[error("Container image \"{reference}\" is not present with pull policy of Never")]
    NeverPull { reference: String },
    /// Anything else the registry answered (server errors, bad manifests, digest mismatches).
    #[error("failed to pull and unpack image \"{reference}\": {message}")]
    Registry { reference: String, message: String },
    /// The layers could not be written here (disk full, a layer that is no tar, an entry that
    /// refuses to be made).
    #[error("failed to pull and unpack image \"{reference}\": {source}")]
    Unpack {
        reference: String,
        #[source]
        source: UnpackError,
    },
    /// The image's layers unpack to more than the store's limits allow (`max_image_bytes`,
    /// `max_image_entries`); what was unpacked of it is removed.
    #[error("failed to pull and unpack image \"{reference}\": {limit}")]
    TooLarge {
        reference: String,
        #[source]
        limit: LimitExceeded,
    },
    /// The cache could not be read or written.
    #[error("failed to pull and unpack image \"{reference}\": {context}: {source}")]
    Cache {
        reference: String,
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl PullError {
    /// Whether no registry answered at all (host unknown, nothing listening, timed out): where
    /// the emulator's `auto` runtime may fall back to running on the host.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }

    /// Kubernetes' waiting reason for a container whose image this error stops:
    /// `InvalidImageName`, `ErrImageNeverPull` or `ErrImagePull`.
    pub fn kubernetes_reason(&self) -> &'static str {
        match self {
            Self::InvalidReference(_) => "InvalidImageName",
            Self::NeverPull { .. } => "ErrImageNeverPull",
            _ => "ErrImagePull",
        }
    }
}

/// The error and its causes on one line, as a Go error chain prints.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
