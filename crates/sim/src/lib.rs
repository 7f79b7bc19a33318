//! `cwsandbox-sim`: the deterministic world behind the emulator.
//!
//! A pure, synchronous library: no I/O, no async runtime, no transport types. Callers issue
//! commands and advance time through a [`time::Clock`] they control; every decision leaves an
//! event with a reason and a message. See the crate README for the rooms.

pub mod error;
pub mod policy;
pub mod quantity;
pub mod resolved;
pub mod time;

pub use error::{FieldViolation, Reason, SimError, SimResult};
