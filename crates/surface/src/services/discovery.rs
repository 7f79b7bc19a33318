//! DiscoveryService: the runners of the caller's organization, with health and capacity computed
//! from the simulated cluster.

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_sim::{Reason, SimError};

use super::respond;
use crate::app::App;
use crate::auth::Caller;
use crate::convert;
use crate::errors::ApiError;

/// ListAvailableRunners: the simulation filters and pages.
pub async fn list_available_runners(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListAvailableRunnersRequest>,
) -> Result<ConnectResponse<pb::ListAvailableRunnersResponse>, ConnectError> {
    respond(caller.method(), list(&app, &caller, &request))
}

fn list(
    app: &App,
    caller: &Caller,
    request: &pb::ListAvailableRunnersRequest,
) -> Result<pb::ListAvailableRunnersResponse, ApiError> {
    let (runners, next_page_token) =
        app.driver().with_world(|world| world.list_available_runners(&caller.org, request))?;
    Ok(pb::ListAvailableRunnersResponse { runners, next_page_token })
}

/// GetAvailableRunner: an unknown runner, or one of another organization, is NOT_FOUND with
/// reason `CWSANDBOX_RUNNER_NOT_FOUND`.
pub async fn get_available_runner(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetAvailableRunnerRequest>,
) -> Result<ConnectResponse<pb::AvailableRunner>, ConnectError> {
    respond(caller.method(), get(&app, &caller, &request))
}

fn get(app: &App, caller: &Caller, request: &pb::GetAvailableRunnerRequest) -> Result<pb::AvailableRunner, ApiError> {
    let runner_id = convert::required("runner_id", &request.runner_id)?;
    // Another organization's runners read as unknown ones.
    let org = if request.organization_id.is_empty() { caller.org.as_str() } else { request.organization_id.as_str() };
    let runner = if org == caller.org {
        app.driver().with_world(|world| world.available_runner(org, runner_id, request.view))
    } else {
        Err(SimError::NotFound {
            reason: Reason::RunnerNotFound,
            message: format!("no runner {runner_id:?} visible in organization {org:?}"),
        })
    };
    runner.map_err(|error| ApiError::from(error).with_metadata("runner_id", runner_id))
}
