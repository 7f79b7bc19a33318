//! `cwsandbox-edge`: the port, above the API surface. The accept loop with its timeouts and
//! connection cap ([`transport`]), TLS beside plain HTTP and the direct data plane's mutual TLS
//! ([`tls`]), the request guard every RPC passes before a decoder runs ([`guard`], with
//! [`decoded_size`], the fault cuts of [`fault_stream`] and the request log's entries of
//! [`call_record`]), and the router that puts gRPC,
//! Connect, gRPC-Web and the kube facade on one port ([`server`]).

// Handlers must return connectrpc-axum's `ConnectError` (160 bytes), a foreign type we cannot box.
#![allow(clippy::result_large_err)]

pub mod call_record;
pub mod decoded_size;
pub mod fault_stream;
pub mod guard;
pub mod server;
pub mod tls;
pub mod transport;
