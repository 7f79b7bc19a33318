//! The RPC handlers, one module per service. Handlers are thin: check the caller and the
//! request, call the simulation (or the runtime), convert the answer (`convert`), map failures
//! (`errors`). Each handler serves both gRPC and Connect: connectrpc-axum registers it once for
//! each transport.

pub mod data;
pub mod discovery;
pub mod emulator;
pub mod faults;
pub mod images;
pub mod runners;
pub mod sandbox;
pub mod settings;
pub mod snapshots;
pub mod templates;
pub mod tenants;
pub mod volumes;

use connectrpc_axum::{ConnectError, ConnectResponse};

use crate::errors::ApiError;

/// Wraps a handler's result for the transports, logging failures.
pub fn respond<T>(method: &str, result: Result<T, ApiError>) -> Result<ConnectResponse<T>, ConnectError> {
    match result {
        Ok(response) => Ok(ConnectResponse::new(response)),
        Err(error) => {
            if error.code == tonic::Code::Internal {
                tracing::warn!(method, "{error}");
            } else {
                tracing::debug!(method, "{error}");
            }
            Err(error.into())
        }
    }
}

/// A unary handler that authenticates the caller and answers UNIMPLEMENTED with reason
/// `CWSANDBOX_NOT_IMPLEMENTED`.
#[macro_export]
macro_rules! not_implemented {
    ($request:ty, $response:ty) => {
        |caller: $crate::auth::Caller, _request: connectrpc_axum::ConnectRequest<$request>| async move {
            let what = format!("{}.{}", caller.service(), caller.method());
            $crate::services::respond::<$response>(
                caller.method(),
                Err($crate::errors::ApiError::not_implemented(&what)),
            )
        }
    };
}
