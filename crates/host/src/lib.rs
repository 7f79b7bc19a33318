//! `cwsandbox-host`: where the pure simulation meets this machine. The world behind a lock, ticked
//! by a clock that can be frozen and advanced ([`driver`], [`clock`]); the seam a runtime plugs
//! into ([`runtime`]) and the process executor behind it ([`executor_runtime`], with the kubelet's
//! image pulls in [`image_puller`]); the ready file and state directory ([`state_dir`]).
//!
//! Above `cwsandbox-sim`, `cwsandbox-executor` and `cwsandbox-images`; below the API surface. It
//! knows nothing of protobuf, tokens or the transport.

pub mod clock;
pub mod driver;
pub mod executor_runtime;
pub mod image_puller;
pub mod runtime;
pub mod runtime_config;
pub mod sandbox_network;
pub mod state_dir;
