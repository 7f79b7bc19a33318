//! Secret stores (SettingsService) over gRPC against an in-process emulator with the fake
//! runtime: each organization's own stores, seeded from the values; who may change them; what a
//! sandbox reads from them; and nothing of one organization's reaching another.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::settings_service_client::SettingsServiceClient;
use cwsandbox_emulator::Emulator;
use cwsandbox_emulator::runtime::SandboxRuntime;
use tonic::Code;

const OVERLAY: &str = r#"
runners:
  - {org: org-a, runnerId: runner-a, zone: us-east-04a, clusterId: cks-cluster, policy: {}}
  - {org: org-b, runnerId: runner-b, zone: us-east-04a, clusterId: cks-cluster, policy: {}}
secretStores:
  shared:
    secrets: {motd: hello}
    wandb: {apiUrl: "https://api.wandb.ai", team: everyone}
  team-a:
    organizations: [org-a]
    secrets: {db: {user: ann, password: s3cret}}
auth:
  tokens:
    - {token: a-admin, org: org-a, user: ann, uid: 0, roles: [sandbox_admin]}
    - {token: a-user, org: org-a, user: alice, uid: 1001, roles: [sandbox_user]}
    - {token: b-admin, org: org-b, user: ben, uid: 0, roles: [sandbox_admin]}
"#;

async fn start() -> (Emulator, Arc<FakeRuntime>) {
    let runtime = FakeRuntime::new();
    let emulator = start_with(OVERLAY, Some(runtime.clone() as Arc<dyn SandboxRuntime>)).await;
    emulator.app().driver().clock().freeze();
    (emulator, runtime)
}

async fn settings(emulator: &Emulator, token: &str) -> SettingsServiceClient<Authed> {
    SettingsServiceClient::with_interceptor(channel(emulator).await, Bearer(token.to_owned()))
}

fn wandb_store(name: &str, api_url: &str, team: &str) -> pb::SecretStore {
    pb::SecretStore {
        name: name.to_owned(),
        provider_type: pb::SecretStoreProviderType::Wandb as i32,
        provider_config: Some(pb::secret_store::ProviderConfig::Wandb(pb::WandBStoreConfig {
            api_url: api_url.to_owned(),
            team: team.to_owned(),
        })),
        ..Default::default()
    }
}

fn create(store: pb::SecretStore, request_id: &str) -> pb::CreateSecretStoreRequest {
    pb::CreateSecretStoreRequest { secret_store: Some(store), request_id: request_id.to_owned() }
}

async fn names(client: &mut SettingsServiceClient<Authed>) -> Vec<String> {
    let listed = client.list_secret_stores(pb::ListSecretStoresRequest::default()).await.unwrap().into_inner();
    listed.secret_stores.into_iter().map(|store| store.name).collect()
}

fn team_of(store: &pb::SecretStore) -> &str {
    match &store.provider_config {
        Some(pb::secret_store::ProviderConfig::Wandb(wandb)) => &wandb.team,
        None => "",
    }
}

fn violations(status: &tonic::Status) -> Vec<String> {
    details(status)
        .bad_request()
        .map(|bad| bad.field_violations.iter().map(|violation| violation.field.clone()).collect())
        .unwrap_or_default()
}

/// A sandbox of runner `runner` whose main container reads `path` (and `field`) of `store` into
/// `SECRET`.
fn reading(runner: &str, store: &str, path: &str, field: &str) -> pb::CreateSandboxRequest {
    pb::CreateSandboxRequest {
        sandbox: Some(pb::Sandbox {
            spec: Some(pb::SandboxSpec {
                containers: vec![pb::Container {
                    name: "main".to_owned(),
                    image: "python:3.11".to_owned(),
                    command: "sleep".to_owned(),
                    args: vec!["infinity".to_owned()],
                    secret_stores: vec![pb::SecretStoreReference {
                        store_name: store.to_owned(),
                        secrets: vec![pb::SecretMapping {
                            path: path.to_owned(),
                            field: field.to_owned(),
                            env_var: "SECRET".to_owned(),
                        }],
                    }],
                    ..Default::default()
                }],
                runner_ids: vec![runner.to_owned()],
                mode: pb::SandboxMode::Cks as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn stores_are_the_organizations_own_seeded_from_the_values_and_changed_by_its_admins() {
    let (emulator, _) = start().await;
    let mut a_admin = settings(&emulator, "a-admin").await;
    let mut a_user = settings(&emulator, "a-user").await;
    let mut b_admin = settings(&emulator, "b-admin").await;

    // Seeds: every organization has `shared`; only org-a has `team-a`.
    assert_eq!(names(&mut a_user).await, ["shared", "team-a"]);
    assert_eq!(names(&mut b_admin).await, ["shared"]);
    let shared = a_user.get_secret_store(pb::GetSecretStoreRequest { name: "shared".to_owned() }).await.unwrap();
    let shared = shared.into_inner();
    assert_eq!(shared.provider_type, pb::SecretStoreProviderType::Wandb as i32);
    assert_eq!(team_of(&shared), "everyone");
    assert!(shared.create_time.is_some() && shared.update_time.is_some());

    // An admin creates one; a replay answers the same store, another body under its id conflicts.
    let created = a_admin.create_secret_store(create(wandb_store("ml", "", "ml-team"), "req-1")).await.unwrap();
    let created = created.into_inner();
    assert_eq!((created.name.as_str(), team_of(&created)), ("ml", "ml-team"));
    let replay = a_admin.create_secret_store(create(wandb_store("ml", "", "ml-team"), "req-1")).await.unwrap();
    assert_eq!(replay.into_inner(), created);
    let conflict = a_admin.create_secret_store(create(wandb_store("ml", "", "other"), "req-1")).await.unwrap_err();
    assert_eq!(reason(&conflict), "CWSANDBOX_REQUEST_ID_CONFLICT");
    let taken = a_admin.create_secret_store(create(wandb_store("ml", "", ""), "")).await.unwrap_err();
    assert_eq!(taken.code(), Code::AlreadyExists);

    // A user reads but does not write; another organization neither sees nor reaches the store.
    let denied = a_user.create_secret_store(create(wandb_store("mine", "", ""), "")).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert_eq!(names(&mut b_admin).await, ["shared"]);
    let hidden = b_admin.get_secret_store(pb::GetSecretStoreRequest { name: "ml".to_owned() }).await.unwrap_err();
    assert_eq!((hidden.code(), reason(&hidden).as_str()), (Code::NotFound, "CWSANDBOX_SECRET_STORE_NOT_FOUND"));
    // The same name in org-b is a store of org-b's own.
    b_admin.create_secret_store(create(wandb_store("ml", "", "b-team"), "req-1")).await.unwrap();

    // Updates: the masked W&B fields; no mask, the fields set; the name selects.
    let update = |store: pb::SecretStore, paths: &[&str]| pb::UpdateSecretStoreRequest {
        secret_store: Some(store),
        update_mask: (!paths.is_empty())
            .then(|| cwsandbox_api::wkt::FieldMask { paths: paths.iter().map(|path| (*path).to_owned()).collect() }),
    };
    advance(&emulator, Duration::from_secs(5));
    let changed = a_admin
        .update_secret_store(update(wandb_store("ml", "https://wandb.example.test", "ignored"), &["wandb.api_url"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(team_of(&changed), "ml-team", "the mask names only api_url");
    assert!(changed.update_time.unwrap().seconds >= created.create_time.unwrap().seconds + 5);
    let changed = a_admin.update_secret_store(update(wandb_store("ml", "", "new-team"), &[])).await.unwrap();
    assert_eq!(team_of(&changed.into_inner()), "new-team");
    let b_view = b_admin.get_secret_store(pb::GetSecretStoreRequest { name: "ml".to_owned() }).await.unwrap();
    assert_eq!(team_of(&b_view.into_inner()), "b-team", "org-b's store did not change");

    // Deletes: the seed too, for this organization only; allow_missing turns NOT_FOUND into success.
    a_admin
        .delete_secret_store(pb::DeleteSecretStoreRequest { name: "shared".to_owned(), allow_missing: false })
        .await
        .unwrap();
    assert_eq!(names(&mut a_user).await, ["ml", "team-a"]);
    assert_eq!(names(&mut b_admin).await, ["ml", "shared"]);
    let gone = a_admin
        .delete_secret_store(pb::DeleteSecretStoreRequest { name: "shared".to_owned(), allow_missing: false })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    a_admin
        .delete_secret_store(pb::DeleteSecretStoreRequest { name: "shared".to_owned(), allow_missing: true })
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_stores_and_masks_are_refused_naming_the_field() {
    let (emulator, _) = start().await;
    let mut admin = settings(&emulator, "a-admin").await;
    let cases = [
        (wandb_store("Bad_Name", "", ""), "secret_store.name"),
        (wandb_store("", "", ""), "secret_store.name"),
        (wandb_store("ok", "api.wandb.ai", ""), "secret_store.wandb.api_url"),
        (pb::SecretStore { provider_type: 0, ..wandb_store("ok", "", "") }, "secret_store.provider_type"),
        (pb::SecretStore { provider_type: 9, ..wandb_store("ok", "", "") }, "secret_store.provider_type"),
    ];
    for (store, field) in cases {
        let error = admin.create_secret_store(create(store, "")).await.unwrap_err();
        assert_eq!(error.code(), Code::InvalidArgument, "{field}: {error:?}");
        assert_eq!(violations(&error), [field], "{error:?}");
    }
    let missing = admin.create_secret_store(pb::CreateSecretStoreRequest::default()).await.unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument);
    let bad_mask = admin
        .update_secret_store(pb::UpdateSecretStoreRequest {
            secret_store: Some(wandb_store("shared", "", "")),
            update_mask: Some(cwsandbox_api::wkt::FieldMask { paths: vec!["name".to_owned()] }),
        })
        .await
        .unwrap_err();
    assert_eq!(violations(&bad_mask), ["update_mask.paths[0]"]);
    let unknown = admin
        .update_secret_store(pb::UpdateSecretStoreRequest {
            secret_store: Some(wandb_store("nope", "", "t")),
            update_mask: None,
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    assert_eq!(names(&mut admin).await, ["shared", "team-a"], "nothing was made");
}

#[tokio::test]
async fn a_sandbox_reads_only_its_organizations_stores() {
    let (emulator, runtime) = start().await;
    let mut a_admin = settings(&emulator, "a-admin").await;
    let mut b_admin = settings(&emulator, "b-admin").await;
    let mut a_sandboxes = sandboxes(&emulator, "a-user").await;
    let mut b_sandboxes = sandboxes(&emulator, "b-admin").await;

    let ok = a_sandboxes.create_sandbox(reading("runner-a", "team-a", "db", "password")).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));
    let launched = runtime.started();
    let launch = launched.iter().find(|launch| launch.sandbox_id.as_deref() == Some(&ok.sandbox_id)).unwrap();
    assert_eq!(launch.containers[0].env.get("SECRET").map(String::as_str), Some("s3cret"));

    // org-b has no store team-a, and its own store of that name holds none of org-a's secrets.
    let refused = b_sandboxes.create_sandbox(reading("runner-b", "team-a", "db", "password")).await.unwrap_err();
    assert_eq!((refused.code(), reason(&refused).as_str()), (Code::NotFound, "CWSANDBOX_SECRET_NOT_FOUND"));
    assert!(refused.message().contains("storeName"), "{}", refused.message());
    b_admin.create_secret_store(create(wandb_store("team-a", "", ""), "")).await.unwrap();
    let empty = b_sandboxes.create_sandbox(reading("runner-b", "team-a", "db", "password")).await.unwrap_err();
    assert_eq!(reason(&empty), "CWSANDBOX_SECRET_NOT_FOUND");
    assert!(empty.message().contains("secrets[0].path"), "{}", empty.message());

    // A deleted store is no longer read; a sandbox made before keeps what it was given.
    a_admin
        .delete_secret_store(pb::DeleteSecretStoreRequest { name: "team-a".to_owned(), allow_missing: false })
        .await
        .unwrap();
    let after = a_sandboxes.create_sandbox(reading("runner-a", "team-a", "db", "password")).await.unwrap_err();
    assert_eq!(reason(&after), "CWSANDBOX_SECRET_NOT_FOUND");
    let still = a_sandboxes.get_sandbox(pb::GetSandboxRequest { sandbox_id: ok.sandbox_id.clone() }).await.unwrap();
    assert_eq!(still.into_inner().status.unwrap().state, pb::State::Running as i32);
}
