//! `cwsandbox-sim`: the deterministic world behind the emulator.
//!
//! A pure, synchronous library: no I/O, no async runtime, no transport types. Callers issue
//! commands and advance time through a [`time::Clock`] they control; every decision leaves an
//! event with a reason and a message. See the crate README for the rooms.

pub mod compose;
pub mod config;
pub mod data_target;
pub mod discovery;
pub mod error;
pub mod ids;
pub mod k8s;
pub mod machine;
pub mod pager;
pub mod pods;
pub mod query;
pub mod readiness;
pub mod runners;
pub mod sandbox;
pub mod secret_stores;
pub mod slurm;
pub mod snapshots;
pub mod steps;
pub mod sunk;
pub mod templates;
pub mod time;
mod touched;
pub mod volumes;
pub mod world;

pub use error::{FieldViolation, Reason, SimError, SimResult};

// Policies, quantities and the resolved spec live in `cwsandbox-policy`; these paths are the ones
// the world and the emulator have always used.
pub use cwsandbox_policy as policy;
pub use cwsandbox_policy::{quantity, resolved};
