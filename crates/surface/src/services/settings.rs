//! SettingsService: the organization's file-system snapshot bucket. The settings are validated,
//! stored and returned; the emulator keeps every snapshot on its own disk whichever bucket is
//! named (there is no object storage here). The other settings are refused by name (see
//! `fidelity::REFUSED_METHODS`).

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_sim::snapshots::{SnapshotBucket, SnapshotBucketUpdate};

use super::respond;
use crate::app::App;
use crate::auth::Caller;
use crate::errors::ApiError;

/// The bucket the platform manages for an organization that names none. The name is the
/// emulator's own: the real service's managed bucket names are not published.
fn managed_bucket_name(org: &str) -> String {
    format!("cwsandbox-snapshots-{org}")
}

fn bucket_message(org: &str, bucket: SnapshotBucket) -> pb::FileSystemSnapshotBucketConfig {
    let (mode, effective_bucket_name) = if bucket.bucket_name.is_empty() {
        (pb::FileSystemSnapshotBucketMode::CwManaged, managed_bucket_name(org))
    } else {
        (pb::FileSystemSnapshotBucketMode::BringYourOwn, bucket.bucket_name.clone())
    };
    pb::FileSystemSnapshotBucketConfig {
        bucket_name: bucket.bucket_name,
        region: bucket.region,
        mode: mode as i32,
        effective_bucket_name,
    }
}

/// GetFileSystemSnapshotBucketConfig: the caller's organization's settings.
pub async fn get_file_system_snapshot_bucket_config(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::GetFileSystemSnapshotBucketConfigRequest>,
) -> Result<ConnectResponse<pb::FileSystemSnapshotBucketConfig>, ConnectError> {
    let bucket = app.driver().with_world(|world| world.snapshot_bucket(&caller.org));
    respond(caller.method(), Ok(bucket_message(&caller.org, bucket)))
}

/// UpdateFileSystemSnapshotBucketConfig: the fields the mask names (`bucket_name`, `region`)
/// replace the stored ones; without a mask, those the request sets (AIP-134). An empty
/// `bucket_name` goes back to the managed bucket.
pub async fn update_file_system_snapshot_bucket_config(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::UpdateFileSystemSnapshotBucketConfigRequest>,
) -> Result<ConnectResponse<pb::FileSystemSnapshotBucketConfig>, ConnectError> {
    let update = || {
        let config = request
            .file_system_snapshot_bucket_config
            .as_ref()
            .ok_or_else(|| ApiError::missing_field("file_system_snapshot_bucket_config"))?;
        let paths: Vec<&str> = request
            .update_mask
            .as_ref()
            .map(|mask| mask.paths.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let mut change = SnapshotBucketUpdate::default();
        if paths.is_empty() {
            change.bucket_name = (!config.bucket_name.is_empty()).then(|| config.bucket_name.clone());
            change.region = (!config.region.is_empty()).then(|| config.region.clone());
        }
        for (index, path) in paths.iter().enumerate() {
            match *path {
                "bucket_name" | "bucketName" => change.bucket_name = Some(config.bucket_name.clone()),
                "region" => change.region = Some(config.region.clone()),
                other => {
                    return Err(ApiError::invalid_field(
                        &format!("update_mask.paths[{index}]"),
                        format!(
                            "{other:?}: not a field UpdateFileSystemSnapshotBucketConfig changes (bucket_name, region)"
                        ),
                    ));
                }
            }
        }
        let bucket = app.driver().with_world(|world| world.update_snapshot_bucket(&caller.org, change))?;
        tracing::info!(org = %caller.org, bucket = %bucket.bucket_name, "file-system snapshot bucket settings changed");
        Ok(bucket_message(&caller.org, bucket))
    };
    respond(caller.method(), update())
}
