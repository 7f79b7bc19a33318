//! File-system snapshots: SandboxService's snapshot RPCs and DeleteSandbox's `snapshot_volumes`.
//! The simulation checks what may be captured and keeps the records; the runtime copies the
//! volume's files. A capture answers once the copy is done, READY or FAILED, so the client's
//! wait for READY ends at its first GetFileSystemSnapshot.

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_sim::snapshots::{FileSystemSnapshot, SnapshotCapture, SnapshotState, SnapshotTrigger};

use super::respond;
use crate::app::App;
use crate::auth::Caller;
use crate::convert;
use crate::errors::ApiError;

/// CreateFileSystemSnapshot: copies the sandbox's scratch volume (the only one, or the one named).
pub async fn create_file_system_snapshot(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::CreateFileSystemSnapshotRequest>,
) -> Result<ConnectResponse<pb::FileSystemSnapshot>, ConnectError> {
    respond(caller.method(), create(&app, &caller, &request).await)
}

async fn create(
    app: &App,
    caller: &Caller,
    request: &pb::CreateFileSystemSnapshotRequest,
) -> Result<pb::FileSystemSnapshot, ApiError> {
    let sandbox_id = convert::required("sandbox_id", &request.sandbox_id)?;
    let volumes: Vec<String> =
        if request.scratch_volume_name.is_empty() { Vec::new() } else { vec![request.scratch_volume_name.clone()] };
    let captures = app.driver().with_world(|world| {
        world.begin_snapshots(&caller.org, sandbox_id, &volumes, &request.request_id, SnapshotTrigger::Manual)
    })?;
    let taken = capture(app, captures).await;
    // A capture that began always has its one snapshot.
    taken.first().map(snapshot).ok_or_else(|| {
        ApiError::new(tonic::Code::Internal, cwsandbox_sim::Reason::InvalidRequest, "a capture began no snapshot")
    })
}

/// Copies the files of the snapshots that began, in order, and records each outcome; a replayed
/// request's snapshots are answered as they are.
pub(crate) async fn capture(app: &App, captures: Vec<SnapshotCapture>) -> Vec<FileSystemSnapshot> {
    let mut taken = Vec::with_capacity(captures.len());
    for SnapshotCapture { snapshot, pod_uid, copy } in captures {
        if !copy {
            taken.push(snapshot);
            continue;
        }
        // Reached from CreateFileSystemSnapshot and from DeleteSandbox's snapshots on delete.
        let outcome = match app.runtime("CreateFileSystemSnapshot") {
            Ok(runtime) => runtime
                .snapshot_volume(pod_uid.to_string(), snapshot.source_volume_name.clone(), snapshot.id.to_string())
                .await
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.message),
        };
        if let Err(why) = &outcome {
            tracing::warn!(snapshot_id = %snapshot.id, sandbox_id = %snapshot.source_sandbox_id, %why, "snapshot failed");
        }
        let finished = app.driver().with_world(|world| world.finish_snapshot(&snapshot.id, outcome));
        taken.push(finished.unwrap_or(snapshot));
    }
    taken
}

/// GetFileSystemSnapshot.
pub async fn get_file_system_snapshot(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetFileSystemSnapshotRequest>,
) -> Result<ConnectResponse<pb::FileSystemSnapshot>, ConnectError> {
    let get = || {
        let id = convert::required("file_system_snapshot_id", &request.file_system_snapshot_id)?;
        let record = app.driver().with_world(|world| world.get_snapshot(&caller.org, id))?;
        Ok(snapshot(&record))
    };
    respond(caller.method(), get())
}

/// ListFileSystemSnapshots: the organization's snapshots, oldest first.
pub async fn list_file_system_snapshots(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListFileSystemSnapshotsRequest>,
) -> Result<ConnectResponse<pb::ListFileSystemSnapshotsResponse>, ConnectError> {
    let list = || {
        let (records, next_page_token) = app.driver().with_world(|world| {
            world.list_snapshots(&caller.org, &request.source_sandbox_id, request.page_size, &request.page_token)
        })?;
        Ok(pb::ListFileSystemSnapshotsResponse {
            file_system_snapshots: records.iter().map(snapshot).collect(),
            next_page_token,
        })
    };
    respond(caller.method(), list())
}

/// DeleteFileSystemSnapshot: answers the snapshot as DELETING, then removes its files.
pub async fn delete_file_system_snapshot(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DeleteFileSystemSnapshotRequest>,
) -> Result<ConnectResponse<pb::FileSystemSnapshot>, ConnectError> {
    respond(caller.method(), delete(&app, &caller, &request).await)
}

async fn delete(
    app: &App,
    caller: &Caller,
    request: &pb::DeleteFileSystemSnapshotRequest,
) -> Result<pb::FileSystemSnapshot, ApiError> {
    let id = convert::required("file_system_snapshot_id", &request.file_system_snapshot_id)?;
    let record = match app.driver().with_world(|world| world.delete_snapshot(&caller.org, id)) {
        Ok(record) => record,
        Err(cwsandbox_sim::SimError::NotFound { .. }) if request.allow_missing => {
            return Ok(pb::FileSystemSnapshot::default());
        }
        Err(error) => return Err(error.into()),
    };
    if let Ok(runtime) = app.runtime(caller.method())
        && let Err(error) = runtime.delete_snapshot(id.to_owned()).await
    {
        tracing::warn!(snapshot_id = id, %error, "a deleted snapshot's files could not be removed");
    }
    Ok(snapshot(&record))
}

/// The API's view of a snapshot.
pub(crate) fn snapshot(record: &FileSystemSnapshot) -> pb::FileSystemSnapshot {
    pb::FileSystemSnapshot {
        file_system_snapshot_id: record.id.to_string(),
        state: match record.state {
            SnapshotState::Creating => pb::SnapshotState::Creating,
            SnapshotState::Ready => pb::SnapshotState::Ready,
            SnapshotState::Failed => pb::SnapshotState::Failed,
            SnapshotState::Deleting => pb::SnapshotState::Deleting,
        } as i32,
        state_reason: record.state_reason.clone(),
        size_bytes: i64::try_from(record.size_bytes).unwrap_or(i64::MAX),
        source_sandbox_id: record.source_sandbox_id.clone(),
        trigger: match record.trigger {
            SnapshotTrigger::Manual => pb::SnapshotTrigger::Manual,
            SnapshotTrigger::OnDelete => pb::SnapshotTrigger::OnDelete,
        } as i32,
        create_time: Some(convert::timestamp(record.created)),
        complete_time: record.completed.map(convert::timestamp),
        source_volume_name: record.source_volume_name.clone(),
        // Kept on the emulator's disk, in no bucket.
        object_bucket: String::new(),
        updated_at: Some(convert::timestamp(record.updated)),
        request_id: record.request_id.clone(),
    }
}
