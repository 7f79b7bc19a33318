//! `cwsandbox-surface`: the API as clients see it, above the host. The values document and its
//! tokens ([`config`], [`auth`], [`tenants`]), the one catalogue of RPCs ([`catalogue`]), the thin
//! handlers ([`services`]) and their conversions ([`convert`]), the one error mapping
//! ([`errors`]), the fidelity check ([`fidelity`]), fault rules ([`faults`]), the direct data
//! plane's certificate authority ([`direct`]) and the kube facade ([`kube`]); [`app`] is the
//! state every handler shares.
//!
//! It knows nothing of the port, TLS or the request guard (the edge, above it).

// Handlers must return connectrpc-axum's `ConnectError` (160 bytes), a foreign type we cannot box.
#![allow(clippy::result_large_err)]

pub mod app;
pub mod auth;
pub mod catalogue;
pub mod config;
pub mod connection;
pub mod convert;
pub mod direct;
pub mod endpoints;
pub mod errors;
pub mod faults;
pub mod fidelity;
pub mod identity;
pub mod json_path;
pub mod kube;
pub mod ports;
pub mod requests;
pub mod services;
pub mod tenants;
