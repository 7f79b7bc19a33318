//! VolumeService: registered volumes naming a PersistentVolumeClaim of a runner's cluster (the
//! values' `persistentVolumeClaims`, each an organization's own in one cluster). Create and ValidateVolume answer VALIDATING; the claim is
//! checked by the simulation's next command, so the client's `wait_until_ready()` sees READY or
//! ERROR at its first poll.

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_sim::SimError;
use cwsandbox_sim::volumes::{ClaimSource, RegisteredVolume, VolumeState, VolumeUpdate};

use super::respond;
use crate::app::App;
use crate::auth::Caller;
use crate::convert;
use crate::errors::ApiError;

/// CreateVolume: idempotent by `request_id`.
pub async fn create_volume(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::CreateVolumeRequest>,
) -> Result<ConnectResponse<pb::Volume>, ConnectError> {
    let create = || {
        app.check_fields(caller.method(), &request)?;
        let volume = request.volume.as_ref().ok_or_else(|| ApiError::missing_field("volume"))?;
        let spec = volume.spec.as_ref().ok_or_else(|| ApiError::missing_field("volume.spec"))?;
        let Some(pb::volume_spec::Source::Pvc(pvc)) = &spec.source else {
            return Err(ApiError::missing_field("volume.spec.pvc"));
        };
        let source = ClaimSource {
            runner_id: pvc.runner_id.clone(),
            namespace: pvc.namespace.clone(),
            claim_name: pvc.claim_name.clone(),
            sub_path: pvc.sub_path.clone(),
        };
        let created = app.driver().with_world(|world| {
            world.create_volume(
                &caller.org,
                &volume.volume_id,
                source,
                spec.read_only,
                &spec.description,
                &request.request_id,
            )
        })?;
        tracing::info!(volume_id = %created.id, claim = %created.source.claim_name, "volume registered");
        Ok(volume_message(&created))
    };
    respond(caller.method(), create())
}

/// GetVolume.
pub async fn get_volume(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetVolumeRequest>,
) -> Result<ConnectResponse<pb::Volume>, ConnectError> {
    let get = || {
        let id = convert::required("volume_id", &request.volume_id)?;
        Ok(volume_message(&app.driver().with_world(|world| world.get_volume(&caller.org, id))?))
    };
    respond(caller.method(), get())
}

/// ListVolumes: the organization's volumes by id, filtered by state and runner.
pub async fn list_volumes(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListVolumesRequest>,
) -> Result<ConnectResponse<pb::ListVolumesResponse>, ConnectError> {
    let list = || {
        let mut states = Vec::with_capacity(request.states.len());
        for (index, state) in request.states.iter().enumerate() {
            let state = match pb::VolumeState::try_from(*state) {
                Ok(pb::VolumeState::Validating) => VolumeState::Validating,
                Ok(pb::VolumeState::Ready) => VolumeState::Ready,
                Ok(pb::VolumeState::Error) => VolumeState::Error,
                Ok(pb::VolumeState::Deleting) => VolumeState::Deleting,
                _ => {
                    return Err(ApiError::invalid_field(
                        &format!("states[{index}]"),
                        format!("{state} is not a volume state to filter on"),
                    ));
                }
            };
            states.push(state);
        }
        let (volumes, next_page_token) = app.driver().with_world(|world| {
            world.list_volumes(&caller.org, &states, &request.runner_ids, request.page_size, &request.page_token)
        })?;
        Ok(pb::ListVolumesResponse { volumes: volumes.iter().map(volume_message).collect(), next_page_token })
    };
    respond(caller.method(), list())
}

/// UpdateVolume: `spec.read_only` and `spec.description` change (an empty mask: both); the claim
/// a volume names cannot.
pub async fn update_volume(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::UpdateVolumeRequest>,
) -> Result<ConnectResponse<pb::Volume>, ConnectError> {
    let update = || {
        let id = convert::required("volume_id", &request.volume_id)?;
        let volume = request.volume.as_ref().ok_or_else(|| ApiError::missing_field("volume"))?;
        let spec = volume.spec.clone().unwrap_or_default();
        let paths: Vec<&str> = request
            .update_mask
            .as_ref()
            .map(|mask| mask.paths.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let mut change = VolumeUpdate::default();
        if paths.is_empty() {
            change = VolumeUpdate {
                read_only: Some(spec.read_only),
                description: Some(spec.description.clone()),
                source: None,
            };
        }
        if let Some(pb::volume_spec::Source::Pvc(pvc)) = &spec.source {
            change.source = Some(ClaimSource {
                runner_id: pvc.runner_id.clone(),
                namespace: pvc.namespace.clone(),
                claim_name: pvc.claim_name.clone(),
                sub_path: pvc.sub_path.clone(),
            });
        }
        for (index, path) in paths.iter().enumerate() {
            match *path {
                "spec.read_only" | "spec.readOnly" => change.read_only = Some(spec.read_only),
                "spec.description" => change.description = Some(spec.description.clone()),
                other => {
                    let why = if other.starts_with("spec.pvc") || other == "spec" {
                        "the claim a volume names cannot change: register another volume"
                    } else {
                        "not a field UpdateVolume changes (spec.read_only, spec.description)"
                    };
                    return Err(ApiError::invalid_field(
                        &format!("update_mask.paths[{index}]"),
                        format!("{other:?}: {why}"),
                    ));
                }
            }
        }
        let updated = app.driver().with_world(|world| world.update_volume(&caller.org, id, change))?;
        Ok(volume_message(&updated))
    };
    respond(caller.method(), update())
}

/// DeleteVolume: the registration goes (the claim's data stays, as the claim does in a cluster).
pub async fn delete_volume(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DeleteVolumeRequest>,
) -> Result<ConnectResponse<pb::Volume>, ConnectError> {
    let delete = || {
        let id = convert::required("volume_id", &request.volume_id)?;
        match app.driver().with_world(|world| world.delete_volume(&caller.org, id, request.force)) {
            Ok(deleted) => Ok(volume_message(&deleted)),
            Err(SimError::NotFound { .. }) if request.allow_missing => Ok(pb::Volume::default()),
            Err(error) => Err(error.into()),
        }
    };
    respond(caller.method(), delete())
}

/// ValidateVolume: checks the claim again.
pub async fn validate_volume(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ValidateVolumeRequest>,
) -> Result<ConnectResponse<pb::Volume>, ConnectError> {
    let validate = || {
        let id = convert::required("volume_id", &request.volume_id)?;
        Ok(volume_message(&app.driver().with_world(|world| world.revalidate_volume(&caller.org, id))?))
    };
    respond(caller.method(), validate())
}

/// The API's view of a registered volume.
fn volume_message(volume: &RegisteredVolume) -> pb::Volume {
    pb::Volume {
        volume_id: volume.id.clone(),
        spec: Some(pb::VolumeSpec {
            source: Some(pb::volume_spec::Source::Pvc(pb::PvcVolumeSource {
                runner_id: volume.source.runner_id.clone(),
                namespace: volume.source.namespace.clone(),
                claim_name: volume.source.claim_name.clone(),
                sub_path: volume.source.sub_path.clone(),
            })),
            read_only: volume.read_only,
            description: volume.description.clone(),
        }),
        status: Some(pb::VolumeStatus {
            state: match volume.state {
                VolumeState::Validating => pb::VolumeState::Validating,
                VolumeState::Ready => pb::VolumeState::Ready,
                VolumeState::Error => pb::VolumeState::Error,
                VolumeState::Deleting => pb::VolumeState::Deleting,
            } as i32,
            state_reason: volume.state_reason.clone(),
            // A claim is in one runner's cluster.
            locality: pb::VolumeLocality::ClusterLocal as i32,
            create_time: Some(convert::timestamp(volume.created)),
            update_time: Some(convert::timestamp(volume.updated)),
            last_validated_time: volume.last_validated.map(convert::timestamp),
            access_modes: volume.access_modes.clone(),
            capacity: volume.capacity.clone(),
            attached_sandbox_count: i32::try_from(volume.attached_sandbox_count).unwrap_or(i32::MAX),
        }),
    }
}
