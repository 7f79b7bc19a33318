//! SettingsService: the organization's file-system snapshot bucket and secret stores. The bucket
//! settings are validated, stored and returned; the emulator keeps every snapshot on its own disk
//! whichever bucket is named (there is no object storage here). Secret stores are the
//! organization's own ([`cwsandbox_sim::secret_stores`]): W&B settings stored and returned, the
//! secrets read from the values. The other settings are refused by name (see
//! `fidelity::REFUSED_METHODS`).

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_sim::secret_stores::{SecretStore, SecretStoreInput, SecretStoreUpdate, WandbSettings};
use cwsandbox_sim::snapshots::{SnapshotBucket, SnapshotBucketUpdate};

use super::respond;
use crate::app::App;
use crate::auth::Caller;
use crate::convert;
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

fn store_message(store: SecretStore) -> pb::SecretStore {
    pb::SecretStore {
        name: store.name,
        provider_type: pb::SecretStoreProviderType::Wandb as i32,
        provider_config: Some(pb::secret_store::ProviderConfig::Wandb(pb::WandBStoreConfig {
            api_url: store.wandb.api_url,
            team: store.wandb.team,
        })),
        create_time: Some(convert::timestamp(store.created)),
        update_time: Some(convert::timestamp(store.updated)),
    }
}

/// The provider a request names: W&B, the API's only one. Unset is allowed where the store
/// exists already (an update keeps its provider).
fn check_provider(provider_type: i32, unset_allowed: bool) -> Result<(), ApiError> {
    let field = "secret_store.provider_type";
    match pb::SecretStoreProviderType::try_from(provider_type) {
        Ok(pb::SecretStoreProviderType::Wandb) => Ok(()),
        Ok(pb::SecretStoreProviderType::Unspecified) if unset_allowed => Ok(()),
        Ok(pb::SecretStoreProviderType::Unspecified) => {
            Err(ApiError::invalid_field(field, "required: SECRET_STORE_PROVIDER_TYPE_WANDB".to_owned()))
        }
        Err(_) => Err(ApiError::invalid_field(field, format!("{provider_type} is not a provider type"))),
    }
}

fn wandb_of(store: &pb::SecretStore) -> Option<&pb::WandBStoreConfig> {
    match &store.provider_config {
        Some(pb::secret_store::ProviderConfig::Wandb(wandb)) => Some(wandb),
        None => None,
    }
}

/// CreateSecretStore: a store of the caller's organization, idempotent by `request_id`.
pub async fn create_secret_store(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::CreateSecretStoreRequest>,
) -> Result<ConnectResponse<pb::SecretStore>, ConnectError> {
    let create = || {
        let store = request.secret_store.as_ref().ok_or_else(|| ApiError::missing_field("secret_store"))?;
        check_provider(store.provider_type, false)?;
        let wandb = wandb_of(store).map_or_else(WandbSettings::default, |wandb| WandbSettings {
            api_url: wandb.api_url.clone(),
            team: wandb.team.clone(),
        });
        let input = SecretStoreInput { name: store.name.clone(), wandb };
        let created =
            app.driver().with_world(|world| world.create_secret_store(&caller.org, input, &request.request_id))?;
        tracing::info!(org = %caller.org, store = %created.name, "secret store created");
        Ok(store_message(created))
    };
    respond(caller.method(), create())
}

/// GetSecretStore: a store of the caller's organization.
pub async fn get_secret_store(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetSecretStoreRequest>,
) -> Result<ConnectResponse<pb::SecretStore>, ConnectError> {
    let get = || {
        let name = convert::required("name", &request.name)?;
        let store = app.driver().with_world(|world| world.secret_store(&caller.org, name))?;
        Ok(store_message(store))
    };
    respond(caller.method(), get())
}

/// ListSecretStores: the caller's organization's stores by name, a page at a time.
pub async fn list_secret_stores(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListSecretStoresRequest>,
) -> Result<ConnectResponse<pb::ListSecretStoresResponse>, ConnectError> {
    let list = || {
        let (stores, next_page_token) = app
            .driver()
            .with_world(|world| world.list_secret_stores(&caller.org, request.page_size, &request.page_token))?;
        Ok(pb::ListSecretStoresResponse {
            secret_stores: stores.into_iter().map(store_message).collect(),
            next_page_token,
        })
    };
    respond(caller.method(), list())
}

/// UpdateSecretStore: the W&B settings the mask names (`wandb`, `wandb.api_url`, `wandb.team`);
/// without a mask, those the request sets (AIP-134). The name and provider stay.
pub async fn update_secret_store(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::UpdateSecretStoreRequest>,
) -> Result<ConnectResponse<pb::SecretStore>, ConnectError> {
    let update = || {
        let store = request.secret_store.as_ref().ok_or_else(|| ApiError::missing_field("secret_store"))?;
        let name = convert::required("secret_store.name", &store.name)?;
        check_provider(store.provider_type, true)?;
        let wandb = wandb_of(store).cloned().unwrap_or_default();
        let paths: Vec<&str> = request
            .update_mask
            .as_ref()
            .map(|mask| mask.paths.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let mut change = SecretStoreUpdate::default();
        if paths.is_empty() {
            change.api_url = (!wandb.api_url.is_empty()).then(|| wandb.api_url.clone());
            change.team = (!wandb.team.is_empty()).then(|| wandb.team.clone());
        }
        for (index, path) in paths.iter().enumerate() {
            match *path {
                "wandb" => {
                    change.api_url = Some(wandb.api_url.clone());
                    change.team = Some(wandb.team.clone());
                }
                "wandb.api_url" | "wandb.apiUrl" => change.api_url = Some(wandb.api_url.clone()),
                "wandb.team" => change.team = Some(wandb.team.clone()),
                // The only provider: naming it changes nothing, and check_provider refused others.
                "provider_type" | "providerType" => {}
                other => {
                    return Err(ApiError::invalid_field(
                        &format!("update_mask.paths[{index}]"),
                        format!(
                            "{other:?}: not a field UpdateSecretStore changes (wandb, wandb.api_url, wandb.team, provider_type)"
                        ),
                    ));
                }
            }
        }
        let updated = app.driver().with_world(|world| world.update_secret_store(&caller.org, name, change))?;
        tracing::info!(org = %caller.org, store = %updated.name, "secret store changed");
        Ok(store_message(updated))
    };
    respond(caller.method(), update())
}

/// DeleteSecretStore: `allow_missing` turns NOT_FOUND into an empty answer.
pub async fn delete_secret_store(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DeleteSecretStoreRequest>,
) -> Result<ConnectResponse<pbjson_types::Empty>, ConnectError> {
    let delete = || {
        let name = convert::required("name", &request.name)?;
        app.driver().with_world(|world| world.delete_secret_store(&caller.org, name, request.allow_missing))?;
        tracing::info!(org = %caller.org, store = %name, "secret store deleted");
        Ok(pbjson_types::Empty {})
    };
    respond(caller.method(), delete())
}
