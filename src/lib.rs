//! The `coreweave.sandbox.v1` API, and the emulator's own `coreweave.sandbox.emulator.v1`, as Rust
//! types generated at build time from `proto/`.
//!
//! - Messages are prost types with proto3 JSON (pbjson): lowerCamelCase on output, both spellings
//!   on input, unknown fields rejected, int64 as strings, enums by name.
//! - Feature `server`: tonic gRPC services and connectrpc-axum Connect routes for every service;
//!   the gRPC servers decode with [`codec::ServerCodec`] (INVALID_ARGUMENT for undecodable requests).
//! - Feature `client`: tonic gRPC clients and typed Connect clients.
//! - [`Reason`]: every `google.rpc.ErrorInfo.reason` the emulator sends, with its remedy (plain Rust).
//! - [`FILE_DESCRIPTOR_SET`] holds every file (with imports and comments) for gRPC reflection.

#![allow(clippy::all, missing_docs, rustdoc::all)]

pub mod wkt;

/// The `ErrorInfo.reason` catalogue, shared by the simulation, the emulator and the client.
pub mod reason;
pub use reason::Reason;

#[cfg(feature = "server")]
pub mod codec;

include!(concat!(env!("OUT_DIR"), "/cwsandbox_api.rs"));

/// `google.protobuf.FileDescriptorSet` of `proto/` and everything it imports, with source info.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cwsandbox_descriptor_set.bin"));

/// The API package, re-exported under a short name.
pub use coreweave::sandbox::v1 as sandbox_v1;

/// The emulator's own API (`coreweave.sandbox.emulator.v1`), re-exported under a short name.
pub use coreweave::sandbox::emulator::v1 as emulator_v1;
