//! EmulatorService AddFault, ListFaults, RemoveFault, ClearFaults (`crate::faults`). Scoped: an
//! organization's admin installs, sees and removes only faults that match its own calls.

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_sim::query::Scope;

use super::emulator::scoped;
use crate::app::App;
use crate::auth::Caller;
use crate::errors::ApiError;

/// The owner of faults in a scope: none for the operator, else the organization.
fn owner(scope: &Scope) -> Option<&str> {
    match scope {
        Scope::Cluster => None,
        Scope::Organization(org) => Some(org.as_str()),
    }
}

/// AddFault.
pub async fn add_fault(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::AddFaultRequest>,
) -> Result<ConnectResponse<pb::AddFaultResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let fault = request.fault.ok_or_else(|| ApiError::missing_field("fault"))?;
        let fault = app.faults().add(fault, owner(&scope))?;
        tracing::info!(id = fault.id, "fault added");
        Ok(pb::AddFaultResponse { fault: Some(fault) })
    })
}

/// ListFaults.
pub async fn list_faults(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::ListFaultsRequest>,
) -> Result<ConnectResponse<pb::ListFaultsResponse>, ConnectError> {
    scoped(&caller, |scope| Ok(pb::ListFaultsResponse { faults: app.faults().list(owner(&scope)) }))
}

/// RemoveFault.
pub async fn remove_fault(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::RemoveFaultRequest>,
) -> Result<ConnectResponse<pb::RemoveFaultResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let id = crate::convert::required("id", &request.id)?.trim();
        Ok(pb::RemoveFaultResponse { fault: Some(app.faults().remove(id, owner(&scope))?) })
    })
}

/// ClearFaults.
pub async fn clear_faults(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::ClearFaultsRequest>,
) -> Result<ConnectResponse<pb::ClearFaultsResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let removed = app.faults().clear(owner(&scope));
        Ok(pb::ClearFaultsResponse { removed: i32::try_from(removed).unwrap_or(i32::MAX) })
    })
}
