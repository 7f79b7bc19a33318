//! DiscoveryService: the runners of the caller's organization, with health and capacity computed
//! from the simulated cluster.

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_sim::{Reason, SimError};

use super::respond;
use crate::app::App;
use crate::auth::{Caller, Role};
use crate::convert;
use crate::errors::ApiError;

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

/// ListAvailableRunners: filters, then pages by position (tokens are opaque offsets).
pub async fn list_available_runners(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListAvailableRunnersRequest>,
) -> Result<ConnectResponse<pb::ListAvailableRunnersResponse>, ConnectError> {
    respond("ListAvailableRunners", list(&app, &caller, &request))
}

fn list(
    app: &App,
    caller: &Caller,
    request: &pb::ListAvailableRunnersRequest,
) -> Result<pb::ListAvailableRunnersResponse, ApiError> {
    caller.require(Role::SandboxUser)?;
    let size = match usize::try_from(request.page_size) {
        Err(_) => return Err(ApiError::invalid_field("page_size", "must not be negative")),
        Ok(0) => DEFAULT_PAGE_SIZE,
        Ok(size) => size.min(MAX_PAGE_SIZE),
    };
    let start = if request.page_token.is_empty() {
        0
    } else {
        request
            .page_token
            .strip_prefix("runners:")
            .and_then(|offset| offset.parse::<usize>().ok())
            .ok_or_else(|| ApiError::invalid_field("page_token", "not a token this server issued"))?
    };
    let runners: Vec<pb::AvailableRunner> = app.driver().with_world(|world| {
        world
            .runners
            .iter(&caller.org)
            .map(|runner| convert::available_runner(world, &caller.org, runner))
            .filter(|runner| request.runner_group_id.is_empty() || runner.runner_group_id == request.runner_group_id)
            .filter(|runner| !request.healthy_only || runner.healthy)
            .filter(|runner| {
                let capabilities = runner.capabilities.clone().unwrap_or_default();
                (request.gpu_type.is_empty() || capabilities.supported_gpu_types.contains(&request.gpu_type))
                    && (request.architecture.is_empty()
                        || capabilities.supported_architectures.contains(&request.architecture))
                    && (request.service_visibility == pb::Visibility::Unspecified as i32
                        || capabilities.supported_service_visibilities.contains(&request.service_visibility))
            })
            .collect()
    });
    let page: Vec<pb::AvailableRunner> = runners.iter().skip(start).take(size).cloned().collect();
    let next_page_token =
        if start + page.len() < runners.len() { format!("runners:{}", start + page.len()) } else { String::new() };
    Ok(pb::ListAvailableRunnersResponse { runners: page, next_page_token })
}

/// GetAvailableRunner: an unknown runner, or one of another organization, is NOT_FOUND with
/// reason `CWSANDBOX_RUNNER_NOT_FOUND`.
pub async fn get_available_runner(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetAvailableRunnerRequest>,
) -> Result<ConnectResponse<pb::AvailableRunner>, ConnectError> {
    respond("GetAvailableRunner", get(&app, &caller, &request))
}

fn get(app: &App, caller: &Caller, request: &pb::GetAvailableRunnerRequest) -> Result<pb::AvailableRunner, ApiError> {
    caller.require(Role::SandboxUser)?;
    let runner_id = convert::required("runner_id", &request.runner_id)?;
    let org = if request.organization_id.is_empty() { caller.org.as_str() } else { request.organization_id.as_str() };
    let not_found = || SimError::NotFound {
        reason: Reason::RunnerNotFound,
        message: format!("no runner {runner_id:?} visible in organization {org:?}"),
    };
    if org != caller.org {
        return Err(ApiError::from(not_found()).with_metadata("runner_id", runner_id));
    }
    let runner = app.driver().with_world(|world| {
        world.runners.get(org, runner_id).map(|runner| convert::available_runner(world, org, &runner))
    });
    runner.map_err(|_| ApiError::from(not_found()).with_metadata("runner_id", runner_id))
}
