//! RunnerManagementService: the six RPCs on the world's runner registry. Every call needs
//! `sandbox_admin` and acts on the caller's organization.

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;

use super::respond;
use crate::app::App;
use crate::auth::Caller;
use crate::convert;
use crate::errors::ApiError;

/// CreateManagedRunner: idempotent by `request_id`; the runner starts PENDING.
pub async fn create_managed_runner(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::CreateManagedRunnerRequest>,
) -> Result<ConnectResponse<pb::ManagedRunner>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            let runner = request.managed_runner.ok_or_else(|| ApiError::missing_field("managed_runner"))?;
            let created = app.driver().with_world(|world| {
                let now = world.now();
                world.runners.create(&caller.org, runner, &request.request_id, now)
            })?;
            Ok(created)
        })(),
    )
}

/// GetManagedRunner: the runner, its policy and the policy's etag.
pub async fn get_managed_runner(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetManagedRunnerRequest>,
) -> Result<ConnectResponse<pb::ManagedRunner>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            let runner_id = convert::required("runner_id", &request.runner_id)?;
            Ok(app.driver().with_world(|world| world.runners.get(&caller.org, runner_id))?)
        })(),
    )
}

/// ListManagedRunners: runner-id order, filtered by cluster and zone.
pub async fn list_managed_runners(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListManagedRunnersRequest>,
) -> Result<ConnectResponse<pb::ListManagedRunnersResponse>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            let (managed_runners, next_page_token) = app.driver().with_world(|world| {
                world.runners.list(
                    &caller.org,
                    request.page_size,
                    &request.page_token,
                    &request.cluster_id,
                    &request.zone,
                )
            })?;
            Ok(pb::ListManagedRunnersResponse { managed_runners, next_page_token })
        })(),
    )
}

/// UpdateManagedRunner: the masked fields; a policy change needs the etag read with it.
pub async fn update_managed_runner(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::UpdateManagedRunnerRequest>,
) -> Result<ConnectResponse<pb::ManagedRunner>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            let runner_id = convert::required("runner_id", &request.runner_id)?;
            let patch = request.managed_runner.ok_or_else(|| ApiError::missing_field("managed_runner"))?;
            let mask = request.update_mask.unwrap_or_default();
            let updated = app.driver().with_world(|world| {
                let now = world.now();
                world.runners.update(&caller.org, runner_id, patch, &mask, now)
            })?;
            tracing::info!(runner_id, etag = %updated.etag, mask = ?mask.paths, "managed runner updated");
            Ok(updated)
        })(),
    )
}

/// DeleteManagedRunner: the runner turns DELETING and disappears later.
pub async fn delete_managed_runner(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DeleteManagedRunnerRequest>,
) -> Result<ConnectResponse<pbjson_types::Empty>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            let runner_id = convert::required("runner_id", &request.runner_id)?;
            app.driver().with_world(|world| {
                let now = world.now();
                world.runners.delete(&caller.org, runner_id, request.allow_missing, now)
            })?;
            Ok(pbjson_types::Empty {})
        })(),
    )
}

/// ApplyAvailableUpdate: starts a rollout when the channel offers a newer version.
pub async fn apply_available_update(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ApplyAvailableUpdateRequest>,
) -> Result<ConnectResponse<pb::ManagedRunner>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            let runner_id = convert::required("runner_id", &request.runner_id)?;
            Ok(app.driver().with_world(|world| {
                let now = world.now();
                world.runners.apply_available_update(&caller.org, runner_id, now)
            })?)
        })(),
    )
}
