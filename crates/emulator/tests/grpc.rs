//! SandboxService, RunnerManagementService and DiscoveryService over gRPC with the generated tonic
//! clients: the life cycle the published client needs (docs/facts/client-contract.md#states: state
//! always set, terminal sandboxes readable, TERMINATING ends), the echo fields it reads
//! (docs/facts/client-contract.md#resource-shape), and the error model (codes, ErrorInfo,
//! BadRequest). G1–G18 are the gotchas of docs/facts/client-contract.md#g1 and after.

#![allow(clippy::cloned_ref_to_slice_refs)]

mod common;

use std::time::Duration;

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::discovery_service_client::DiscoveryServiceClient;
use cwsandbox_api::sandbox_v1::runner_management_service_client::RunnerManagementServiceClient;
use cwsandbox_api::sandbox_v1::settings_service_client::SettingsServiceClient;
use tonic::Code;

fn resources(cpu: &str, memory: &str) -> Option<pb::Resources> {
    Some(pb::Resources { cpu: cpu.to_owned(), memory: memory.to_owned(), gpu: None })
}

#[tokio::test]
async fn sandbox_life_cycle_create_get_list_delete() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;

    let mut spec = client_spec(&info.runner_id);
    spec.tags = vec!["flow-a".to_owned()];
    spec.annotations.insert("sunk.coreweave.com/partition".to_owned(), "hpc-prod".to_owned());
    spec.containers[0].resource_requirements =
        Some(pb::ResourceRequirements { requests: resources("500m", "512Mi"), limits: resources("1", "1Gi") });
    let created = client.create_sandbox(create_request(spec.clone(), "req-1")).await.unwrap().into_inner();
    assert!(!created.sandbox_id.is_empty());
    assert_ne!(state_of(&created), pb::State::Unspecified, "G1: the state is always set");
    let status = created.status.clone().unwrap();
    assert_eq!(status.runner_id, info.runner_id);
    assert_eq!(status.runner_group_id, "default");
    assert!(status.create_time.is_some());
    let effective = status.effective_resource_requirements.unwrap();
    assert_eq!(effective.requests, resources("500m", "512Mi"));
    assert_eq!(effective.limits, resources("1", "1Gi"));
    assert_eq!(status.effective_resources, resources("500m", "512Mi"));
    assert_eq!(created.spec.as_ref().unwrap().containers, spec.containers, "the spec is echoed");
    assert_eq!(status.container_statuses[0].name, "main");
    // No class asked and none by the policy: the Node's default runtime, named as the service does.
    assert_eq!(status.effective_runtime_class, "<node-default>");

    // The SUNK prolog locks the node, then the Pod runs.
    advance(&emulator, Duration::from_secs(2));
    let get = pb::GetSandboxRequest { sandbox_id: created.sandbox_id.clone() };
    let running = client.get_sandbox(get.clone()).await.unwrap().into_inner();
    assert_eq!(state_of(&running), pb::State::Running, "{:?}", running.status);
    assert!(running.status.as_ref().unwrap().start_time.is_some());

    let lister = client.clone();
    let list = |request: pb::ListSandboxesRequest| {
        let mut client = lister.clone();
        async move {
            client
                .list_sandboxes(request)
                .await
                .unwrap()
                .into_inner()
                .sandboxes
                .into_iter()
                .map(|s| s.sandbox_id)
                .collect::<Vec<_>>()
        }
    };
    let id = created.sandbox_id.clone();
    assert_eq!(list(pb::ListSandboxesRequest::default()).await, [id.clone()]);
    assert_eq!(
        list(pb::ListSandboxesRequest { tags: vec!["flow-a".to_owned()], ..Default::default() }).await,
        [id.clone()]
    );
    assert!(list(pb::ListSandboxesRequest { tags: vec!["other".to_owned()], ..Default::default() }).await.is_empty());
    assert_eq!(
        list(pb::ListSandboxesRequest { runner_ids: vec![info.runner_id.clone()], ..Default::default() }).await,
        [id.clone()]
    );
    assert_eq!(
        list(pb::ListSandboxesRequest { state: pb::State::Running as i32, ..Default::default() }).await,
        [id.clone()]
    );
    assert!(list(pb::ListSandboxesRequest { state: pb::State::Paused as i32, ..Default::default() }).await.is_empty());

    // stop(): DeleteSandbox with a 10 s grace, then Get until terminal.
    let delete = pb::DeleteSandboxRequest { sandbox_id: id.clone(), grace_period_seconds: 10, ..Default::default() };
    let deleted = client.delete_sandbox(delete.clone()).await.unwrap().into_inner();
    assert_eq!(state_of(deleted.sandbox.as_ref().unwrap()), pb::State::Terminating);
    assert_eq!(list(pb::ListSandboxesRequest::default()).await, [id.clone()], "TERMINATING is not terminal");
    advance(&emulator, Duration::from_secs(11));
    let ended = client.get_sandbox(get.clone()).await.unwrap().into_inner();
    assert_eq!(state_of(&ended), pb::State::Completed, "G2/G3: TERMINATING ends and stays readable");
    let ended_status = ended.status.unwrap();
    assert!(!ended_status.state_reason.is_empty());
    assert!(ended_status.end_time.is_some());
    // No process runs in this test, so nothing honoured SIGTERM: the grace ran out and the kill
    // ended it, as `exitCodeAfterStop` (on by default) reports.
    assert_eq!(ended_status.exit_code, Some(137), "a stop reports how the main process ended");
    assert!(list(pb::ListSandboxesRequest::default()).await.is_empty(), "terminal sandboxes are hidden by default");
    assert_eq!(list(pb::ListSandboxesRequest { show_terminated: true, ..Default::default() }).await, [id.clone()]);

    // Deleting again is fine; a missing sandbox is NOT_FOUND unless allow_missing.
    let again = client.delete_sandbox(delete).await.unwrap().into_inner();
    assert_eq!(state_of(again.sandbox.as_ref().unwrap()), pb::State::Completed);
    let missing = pb::DeleteSandboxRequest { sandbox_id: "0000000000000000".to_owned(), ..Default::default() };
    let error = client.delete_sandbox(missing.clone()).await.unwrap_err();
    assert_eq!(error.code(), Code::NotFound);
    assert_eq!(reason(&error), "CWSANDBOX_SANDBOX_NOT_FOUND");
    assert_eq!(details(&error).error_info().unwrap().metadata["sandbox_id"], "0000000000000000");
    let quiet =
        client.delete_sandbox(pb::DeleteSandboxRequest { allow_missing: true, ..missing }).await.unwrap().into_inner();
    assert_eq!(quiet.sandbox, None, "G14: an empty answer means it was already gone");
    emulator.stop().await;
}

#[tokio::test]
async fn listing_pages_until_the_token_is_empty() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    for index in 0..5 {
        client.create_sandbox(create_request(client_spec(&info.runner_id), &format!("page-{index}"))).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_sandboxes(pb::ListSandboxesRequest { page_size: 2, page_token: token.clone(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert!(page.sandboxes.len() <= 2);
        seen.extend(page.sandboxes.into_iter().map(|sandbox| sandbox.sandbox_id));
        if page.next_page_token.is_empty() {
            break;
        }
        assert_ne!(page.next_page_token, token, "G16: a token never repeats");
        token = page.next_page_token;
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 5);
    let error = client
        .list_sandboxes(pb::ListSandboxesRequest { page_token: "garbage".to_owned(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(details(&error).bad_request().unwrap().field_violations[0].field, "page_token");
}

#[tokio::test]
async fn create_is_idempotent_by_request_id() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let first = client.create_sandbox(create_request(client_spec(&info.runner_id), "same")).await.unwrap().into_inner();
    let second =
        client.create_sandbox(create_request(client_spec(&info.runner_id), "same")).await.unwrap().into_inner();
    assert_eq!(first.sandbox_id, second.sandbox_id);
    let mut other = client_spec(&info.runner_id);
    other.tags = vec!["different".to_owned()];
    let error = client.create_sandbox(create_request(other, "same")).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(reason(&error), "CWSANDBOX_REQUEST_ID_CONFLICT");
    assert_eq!(details(&error).bad_request().unwrap().field_violations[0].field, "request_id");
}

#[tokio::test]
async fn a_share_token_is_answered_by_the_create_and_its_replay_only() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let mut spec = client_spec(&info.runner_id);
    spec.services = vec![pb::Service {
        port: 8000,
        visibility: pb::Visibility::Public as i32,
        endpoint: Some(pb::EndpointSpec {
            kind: pb::EndpointKind::Https as i32,
            auth: pb::EndpointAuth::ShareToken as i32,
            request_timeout_seconds: 0,
        }),
        ..Default::default()
    }];
    let first = client.create_sandbox(create_request(spec.clone(), "share")).await.unwrap().into_inner();
    assert_eq!(first.endpoint_share_token.len(), 43, "{first:?}");
    let replayed = client.create_sandbox(create_request(spec, "share")).await.unwrap().into_inner();
    assert_eq!(
        (replayed.sandbox_id.as_str(), replayed.endpoint_share_token.as_str()),
        (first.sandbox_id.as_str(), first.endpoint_share_token.as_str())
    );
    let read = sandbox_of(&emulator, &info.user_token, &first.sandbox_id).await;
    assert_eq!(read.endpoint_share_token, "", "a Get never shows it");
    let listed = client.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap().into_inner();
    assert!(listed.sandboxes.iter().all(|sandbox| sandbox.endpoint_share_token.is_empty()), "nor a List");
    let endpoint = &read.status.unwrap().services[0].endpoint.clone().unwrap();
    assert!(endpoint.url.starts_with("https://127.0.0.1:"), "{endpoint:?}");
    assert_eq!(endpoint.request_timeout_seconds, 15, "the default, echoed");
    // A plain sandbox has none.
    let plain = client.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    assert_eq!(plain.endpoint_share_token, "");
}

#[tokio::test]
async fn bad_requests_name_the_field_in_a_bad_request_detail() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let field_of = |error: &tonic::Status| {
        assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
        let info = details(error).error_info().cloned().expect("ErrorInfo");
        assert_eq!((info.reason.as_str(), info.domain.as_str()), ("CWSANDBOX_INVALID_REQUEST", "cwsandbox.com"));
        details(error).bad_request().expect("BadRequest").field_violations[0].field.clone()
    };

    let error = client.create_sandbox(pb::CreateSandboxRequest::default()).await.unwrap_err();
    assert_eq!(field_of(&error), "sandbox");
    let empty = pb::SandboxSpec { containers: vec![], ..client_spec(&info.runner_id) };
    let error = client.create_sandbox(create_request(empty, "")).await.unwrap_err();
    assert_eq!(field_of(&error), "sandbox.spec.containers");
    let mut no_image = client_spec(&info.runner_id);
    no_image.containers[0].image.clear();
    let error = client.create_sandbox(create_request(no_image, "")).await.unwrap_err();
    assert_eq!(field_of(&error), "sandbox.spec.containers[0].image");
    let error = client.get_sandbox(pb::GetSandboxRequest::default()).await.unwrap_err();
    assert_eq!(field_of(&error), "sandbox_id");
    let error = client
        .delete_sandbox(pb::DeleteSandboxRequest {
            sandbox_id: "x".to_owned(),
            grace_period_seconds: -1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(field_of(&error), "grace_period_seconds");

    // A lone unnamed container is called `main` (docs/facts/client-contract.md#validation).
    let mut unnamed = client_spec(&info.runner_id);
    unnamed.containers[0].name.clear();
    let created = client.create_sandbox(create_request(unnamed, "")).await.unwrap().into_inner();
    assert_eq!(created.spec.unwrap().containers[0].name, "main");

    // Unknown runners and serverless placement.
    let error = client.create_sandbox(create_request(client_spec("no-such-runner"), "")).await.unwrap_err();
    assert_eq!(error.code(), Code::NotFound);
    assert_eq!(reason(&error), "CWSANDBOX_RUNNER_NOT_FOUND");
    let serverless = pb::SandboxSpec { mode: pb::SandboxMode::Serverless as i32, ..client_spec(&info.runner_id) };
    let error = client.create_sandbox(create_request(serverless, "")).await.unwrap_err();
    assert_eq!(field_of(&error), "sandbox.spec.mode");
}

#[tokio::test]
async fn tokens_roles_and_organizations() {
    let overlay = r#"
auth:
  tokens:
    - {token: admin-a, org: default-org, user: admin, uid: 0, roles: [sandbox_admin]}
    - {token: alice-a, org: default-org, user: alice, uid: 1001, roles: [sandbox_user]}
    - {token: bob-b, org: other-org, user: bob, uid: 1002, roles: [sandbox_user]}
"#;
    let emulator = start_with(overlay, None).await;
    let runner = emulator.info().runner_id.clone();

    let error = sandboxes(&emulator, "").await.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated, "G12: no header");
    let error =
        sandboxes(&emulator, "wrong").await.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated);

    let mut alice = sandboxes(&emulator, "alice-a").await;
    let created = alice.create_sandbox(create_request(client_spec(&runner), "")).await.unwrap().into_inner();
    let mut bob = sandboxes(&emulator, "bob-b").await;
    let error = bob.get_sandbox(pb::GetSandboxRequest { sandbox_id: created.sandbox_id.clone() }).await.unwrap_err();
    assert_eq!(error.code(), Code::NotFound, "another organization's sandbox is invisible");
    assert!(bob.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap().into_inner().sandboxes.is_empty());
    let error = bob
        .delete_sandbox(pb::DeleteSandboxRequest { sandbox_id: created.sandbox_id.clone(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::NotFound);
    let error = bob.create_sandbox(create_request(client_spec(&runner), "")).await.unwrap_err();
    assert_eq!(error.code(), Code::NotFound, "bob's organization has no runner {runner}");

    let channel = channel(&emulator).await;
    let get = pb::GetManagedRunnerRequest { runner_id: runner.clone() };
    let mut as_alice = RunnerManagementServiceClient::with_interceptor(channel.clone(), Bearer("alice-a".to_owned()));
    let error = as_alice.get_managed_runner(get.clone()).await.unwrap_err();
    assert_eq!(error.code(), Code::PermissionDenied);
    assert_eq!(reason(&error), "CWSANDBOX_PERMISSION_DENIED");
    let mut as_admin = RunnerManagementServiceClient::with_interceptor(channel, Bearer("admin-a".to_owned()));
    assert_eq!(as_admin.get_managed_runner(get).await.unwrap().into_inner().identity.unwrap().runner_id, runner);
    // sandbox_admin includes sandbox_user.
    sandboxes(&emulator, "admin-a").await.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap();
}

#[tokio::test]
async fn rpcs_that_are_not_emulated_say_so() {
    let emulator = start().await;
    let token = emulator.info().user_token.clone();
    let mut client = sandboxes(&emulator, &token).await;
    let error = client.purge_sandboxes(pb::PurgeSandboxesRequest::default()).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::Unimplemented, "CWSANDBOX_NOT_IMPLEMENTED"));
    let mut settings = SettingsServiceClient::with_interceptor(channel(&emulator).await, Bearer(token));
    let error = settings.get_build_storage_config(pb::GetBuildStorageConfigRequest::default()).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::Unimplemented, "CWSANDBOX_NOT_IMPLEMENTED"));
}

#[tokio::test]
async fn the_snapshot_bucket_settings_are_validated_stored_and_returned() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut user = SettingsServiceClient::with_interceptor(channel(&emulator).await, Bearer(info.user_token.clone()));
    let mut admin = SettingsServiceClient::with_interceptor(channel(&emulator).await, Bearer(info.admin_token.clone()));
    let get = pb::GetFileSystemSnapshotBucketConfigRequest::default();
    let managed = user.get_file_system_snapshot_bucket_config(get).await.unwrap().into_inner();
    assert_eq!(managed.mode, pb::FileSystemSnapshotBucketMode::CwManaged as i32);
    assert_eq!((managed.bucket_name.as_str(), managed.region.as_str()), ("", ""));
    assert_eq!(managed.effective_bucket_name, format!("cwsandbox-snapshots-{}", info.org));

    let update = |bucket_name: &str, region: &str, paths: &[&str]| pb::UpdateFileSystemSnapshotBucketConfigRequest {
        file_system_snapshot_bucket_config: Some(pb::FileSystemSnapshotBucketConfig {
            bucket_name: bucket_name.to_owned(),
            region: region.to_owned(),
            ..Default::default()
        }),
        update_mask: (!paths.is_empty())
            .then(|| cwsandbox_api::wkt::FieldMask { paths: paths.iter().map(|path| (*path).to_owned()).collect() }),
    };
    // Settings are the organization's administrators' to change.
    let denied = user.update_file_system_snapshot_bucket_config(update("team-a", "", &[])).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    // Without a mask, the fields the request sets.
    let own = admin
        .update_file_system_snapshot_bucket_config(update("team-snapshots", "US-EAST-04A", &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(own.mode, pb::FileSystemSnapshotBucketMode::BringYourOwn as i32);
    assert_eq!(
        (own.bucket_name.as_str(), own.region.as_str(), own.effective_bucket_name.as_str()),
        ("team-snapshots", "US-EAST-04A", "team-snapshots")
    );
    assert_eq!(user.get_file_system_snapshot_bucket_config(get).await.unwrap().into_inner(), own);
    // A mask changes only what it names.
    let moved = admin
        .update_file_system_snapshot_bucket_config(update("", "US-WEST-01A", &["region"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((moved.bucket_name.as_str(), moved.region.as_str()), ("team-snapshots", "US-WEST-01A"));

    // Bad input names its field and changes nothing.
    let bad_name =
        admin.update_file_system_snapshot_bucket_config(update("Team_Snapshots", "", &[])).await.unwrap_err();
    assert_eq!(bad_name.code(), Code::InvalidArgument);
    let fields = |error: &tonic::Status| -> Vec<String> {
        details(error)
            .bad_request()
            .map(|bad| bad.field_violations.iter().map(|v| v.field.clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(fields(&bad_name), ["file_system_snapshot_bucket_config.bucket_name"]);
    let bad_path = admin.update_file_system_snapshot_bucket_config(update("x", "", &["bucket"])).await.unwrap_err();
    assert_eq!((bad_path.code(), fields(&bad_path)), (Code::InvalidArgument, vec!["update_mask.paths[0]".to_owned()]));
    let orphan_region =
        admin.update_file_system_snapshot_bucket_config(update("", "", &["bucket_name"])).await.unwrap_err();
    assert_eq!(fields(&orphan_region), ["file_system_snapshot_bucket_config.region"]);
    assert_eq!(user.get_file_system_snapshot_bucket_config(get).await.unwrap().into_inner(), moved);

    // Clearing both goes back to the managed bucket.
    let back = admin
        .update_file_system_snapshot_bucket_config(update("", "", &["bucket_name", "region"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(back, managed);
}

#[tokio::test]
async fn data_operations_are_unavailable_without_an_executor() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let created = client.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));
    let id = created.sandbox_id.clone();

    let error = client
        .read_file(pb::ReadFileRequest {
            sandbox_id: id.clone(),
            path: "/etc/hostname".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::Unavailable, "CWSANDBOX_BACKEND_UNAVAILABLE"));
    assert!(error.message().contains("executor"), "{}", error.message());
    let error = client
        .exec(pb::ExecRequest { sandbox_id: id.clone(), command: vec!["true".to_owned()], ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    let init = pb::ExecStreamRequest {
        message: Some(pb::exec_stream_request::Message::Init(pb::ExecStreamInit {
            sandbox_id: id.clone(),
            command: vec!["hostname".to_owned()],
            ..Default::default()
        })),
    };
    let error = client.stream_exec(futures::stream::iter(vec![init])).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::Unavailable, "CWSANDBOX_BACKEND_UNAVAILABLE"));
    let error = client
        .stream_logs(pb::StreamLogsRequest { sandbox_id: "missing".to_owned(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::NotFound, "CWSANDBOX_SANDBOX_NOT_FOUND"));
}

/// A runner's policy refusing a sandbox, as the wire carries it: the reason tells a placement
/// refusal from a ceiling-only one (the one a client may retry serverless), the message lists
/// every violation, and the BadRequest names the sandbox field with the constraint that refused it.
#[tokio::test]
async fn policy_rejections_carry_their_reason_message_and_fields() {
    // Loose: the ceiling sums the requests of every container, and strictness refuses a second
    // container before the policy sees it (tests/fidelity.rs).
    let emulator = start_with("strictness: loose\n", None).await;
    let info = emulator.info().clone();
    let mut runners =
        RunnerManagementServiceClient::with_interceptor(channel(&emulator).await, Bearer(info.admin_token.clone()));
    let current = runners
        .get_managed_runner(pb::GetManagedRunnerRequest { runner_id: info.runner_id.clone() })
        .await
        .unwrap()
        .into_inner();
    let policy: pb::Policy =
        serde_json::from_value(serde_json::json!({"constraints": {"resources": {"maxCpu": "2", "cpuCeiling": "3"}}}))
            .unwrap();
    let update = pb::UpdateManagedRunnerRequest {
        runner_id: info.runner_id.clone(),
        managed_runner: Some(pb::ManagedRunner { policy: Some(policy), etag: current.etag, ..Default::default() }),
        update_mask: Some(cwsandbox_api::wkt::FieldMask { paths: vec!["policy".to_owned()] }),
    };
    runners.update_managed_runner(update).await.unwrap();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let refusal = |error: &tonic::Status| {
        assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
        let violations = details(error).bad_request().expect("BadRequest").field_violations.clone();
        let violations: Vec<(String, String)> =
            violations.into_iter().map(|violation| (violation.field, violation.description)).collect();
        (reason(error), error.message().to_owned(), violations)
    };

    let mut over_max = client_spec(&info.runner_id);
    over_max.containers[0].resource_requirements =
        Some(pb::ResourceRequirements { requests: resources("4", "1Gi"), limits: None });
    let error = client.create_sandbox(create_request(over_max, "")).await.unwrap_err();
    // Over the maximum and the ceiling: a placement refusal, both violations listed.
    let max = (
        "sandbox.spec.containers[0].resourceRequirements.requests.cpu",
        "4 exceeds policy constraints.resources.maxCpu 2",
    );
    let ceiling = ("sandbox.spec.containers", "total cpu requests 4 exceed policy constraints.resources.cpuCeiling 3");
    assert_eq!(
        refusal(&error),
        (
            "CWSANDBOX_PLACEMENT_REJECTED".to_owned(),
            format!("the runner's policy rejects the sandbox: {}: {}; {}: {}", max.0, max.1, ceiling.0, ceiling.1),
            vec![(max.0.to_owned(), max.1.to_owned()), (ceiling.0.to_owned(), ceiling.1.to_owned())]
        )
    );

    let mut over_ceiling = client_spec(&info.runner_id);
    let mut second = over_ceiling.containers[0].clone();
    second.name = "second".to_owned();
    over_ceiling.containers.push(second);
    for container in &mut over_ceiling.containers {
        container.resource_requirements =
            Some(pb::ResourceRequirements { requests: resources("2", "1Gi"), limits: None });
    }
    let error = client.create_sandbox(create_request(over_ceiling, "")).await.unwrap_err();
    // Over the ceiling alone: the ceiling's own reason.
    assert_eq!(
        refusal(&error),
        (
            "CWSANDBOX_RESOURCE_CEILING_EXCEEDED".to_owned(),
            format!("the runner's policy rejects the sandbox: {}: {}", ceiling.0, ceiling.1),
            vec![(ceiling.0.to_owned(), ceiling.1.to_owned())]
        )
    );
}

#[tokio::test]
async fn runner_management_over_grpc() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut runners =
        RunnerManagementServiceClient::with_interceptor(channel(&emulator).await, Bearer(info.admin_token.clone()));

    let listed = runners.list_managed_runners(pb::ListManagedRunnersRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.managed_runners.len(), 1);
    let current = runners
        .get_managed_runner(pb::GetManagedRunnerRequest { runner_id: info.runner_id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert!(!current.etag.is_empty());

    let mut policy = current.policy.clone().unwrap();
    policy.display_name = "changed".to_owned();
    let update = pb::UpdateManagedRunnerRequest {
        runner_id: info.runner_id.clone(),
        managed_runner: Some(pb::ManagedRunner {
            policy: Some(policy),
            etag: current.etag.clone(),
            ..Default::default()
        }),
        update_mask: Some(cwsandbox_api::wkt::FieldMask { paths: vec!["policy".to_owned()] }),
    };
    let updated = runners.update_managed_runner(update.clone()).await.unwrap().into_inner();
    assert_ne!(updated.etag, current.etag);
    let error = runners.update_managed_runner(update).await.unwrap_err();
    assert_eq!(error.code(), Code::FailedPrecondition);
    assert!(error.message().contains("etag is stale"), "{}", error.message());
    let no_mask = pb::UpdateManagedRunnerRequest {
        runner_id: info.runner_id.clone(),
        managed_runner: Some(pb::ManagedRunner::default()),
        update_mask: None,
    };
    assert_eq!(runners.update_managed_runner(no_mask).await.unwrap_err().code(), Code::InvalidArgument);

    let new_runner = pb::ManagedRunner {
        identity: Some(pb::RunnerIdentity {
            runner_id: "second".to_owned(),
            zone: "us-east-04a".to_owned(),
            cluster_id: "cks-cluster".to_owned(),
            ..Default::default()
        }),
        policy: Some(pb::Policy::default()),
        ..Default::default()
    };
    let created = runners
        .create_managed_runner(pb::CreateManagedRunnerRequest {
            managed_runner: Some(new_runner),
            request_id: "r".to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.install_status, pb::RunnerInstallStatus::Pending as i32);
    let ready = runners
        .get_managed_runner(pb::GetManagedRunnerRequest { runner_id: "second".to_owned() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ready.install_status, pb::RunnerInstallStatus::Ready as i32);
    let error = runners
        .apply_available_update(pb::ApplyAvailableUpdateRequest { runner_id: "second".to_owned() })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::FailedPrecondition);
    runners
        .delete_managed_runner(pb::DeleteManagedRunnerRequest { runner_id: "second".to_owned(), allow_missing: false })
        .await
        .unwrap();
    let error =
        runners.get_managed_runner(pb::GetManagedRunnerRequest { runner_id: "second".to_owned() }).await.unwrap_err();
    assert_eq!(error.code(), Code::NotFound);
    runners
        .delete_managed_runner(pb::DeleteManagedRunnerRequest { runner_id: "second".to_owned(), allow_missing: true })
        .await
        .unwrap();
}

#[tokio::test]
async fn discovery_reports_health_and_capacity_from_the_cluster() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut discovery =
        DiscoveryServiceClient::with_interceptor(channel(&emulator).await, Bearer(info.user_token.clone()));
    // List's default view is BASIC, which leaves out what the runner has free now.
    let basic =
        discovery.list_available_runners(pb::ListAvailableRunnersRequest::default()).await.unwrap().into_inner();
    assert_eq!(basic.runners.len(), 1);
    assert!(basic.runners[0].resources.is_none() && basic.runners[0].capabilities.is_some());
    let full = pb::ListAvailableRunnersRequest { view: pb::RunnerView::Full as i32, ..Default::default() };
    let listed = discovery.list_available_runners(full).await.unwrap().into_inner();
    assert_eq!(listed.runners.len(), 1);
    let runner = &listed.runners[0];
    assert_eq!((runner.runner_id.as_str(), runner.healthy), (info.runner_id.as_str(), true));
    assert_eq!(runner.organization_id, info.org);
    // The ready scenario: 4 Nodes of 16 CPUs and 64Gi, slurmd requesting 1 CPU and 4Gi on each.
    let capabilities = runner.capabilities.clone().unwrap();
    assert_eq!(capabilities.max_cpu_millicores, 15_000);
    assert_eq!(capabilities.max_memory_bytes, 60 << 30);
    let before = runner.resources.unwrap();
    assert_eq!(before.available_cpu_millicores, 60_000);
    assert_eq!(before.running_sandboxes, 0);

    let mut client = sandboxes(&emulator, &info.user_token).await;
    let mut spec = client_spec(&info.runner_id);
    spec.containers[0].resource_requirements =
        Some(pb::ResourceRequirements { requests: resources("2", "1Gi"), limits: resources("2", "1Gi") });
    client.create_sandbox(create_request(spec, "")).await.unwrap();
    advance(&emulator, Duration::from_secs(2));
    let get = pb::GetAvailableRunnerRequest {
        runner_id: info.runner_id.clone(),
        organization_id: info.org.clone(),
        ..Default::default()
    };
    let after = discovery.get_available_runner(get.clone()).await.unwrap().into_inner().resources.unwrap();
    assert_eq!(after.running_sandboxes, 1);
    assert_eq!(after.available_cpu_millicores, 58_000);

    let error = discovery
        .get_available_runner(pb::GetAvailableRunnerRequest {
            organization_id: "someone-else".to_owned(),
            ..get.clone()
        })
        .await
        .unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::NotFound, "CWSANDBOX_RUNNER_NOT_FOUND"));
    let error = discovery
        .get_available_runner(pb::GetAvailableRunnerRequest { runner_id: "nope".to_owned(), ..get })
        .await
        .unwrap_err();
    assert_eq!(reason(&error), "CWSANDBOX_RUNNER_NOT_FOUND");
    let healthy_only = pb::ListAvailableRunnersRequest {
        healthy_only: true,
        runner_group_id: "other".to_owned(),
        ..Default::default()
    };
    assert!(discovery.list_available_runners(healthy_only).await.unwrap().into_inner().runners.is_empty());
}

#[tokio::test]
async fn health_and_reflection_answer() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let emulator = start().await;
    let channel = channel(&emulator).await;
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "coreweave.sandbox.v1.SandboxService", "coreweave.sandbox.v1.RunnerManagementService"] {
        let answer = health.check(HealthCheckRequest { service: service.to_owned() }).await.unwrap().into_inner();
        assert_eq!(answer.status, ServingStatus::Serving as i32, "{service:?}");
    }

    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers =
        reflection.server_reflection_info(futures::stream::iter(vec![request])).await.unwrap().into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(services)) = answer.message_response else {
        panic!("unexpected reflection answer {answer:?}")
    };
    let names: Vec<String> = services.service.into_iter().map(|service| service.name).collect();
    for wanted in
        ["coreweave.sandbox.v1.SandboxService", "coreweave.sandbox.v1.RunnerManagementService", "grpc.health.v1.Health"]
    {
        assert!(names.iter().any(|name| name == wanted), "{wanted} missing from {names:?}");
    }
}
