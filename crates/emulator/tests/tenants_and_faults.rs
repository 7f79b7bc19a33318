//! Tenants made at run time (CreateTenant, DeleteTenant, ListTenants) and reproducible faults
//! (AddFault, ListFaults, RemoveFault, ClearFaults, the values' `faults:`, the one-call header),
//! through real gRPC clients on an in-process emulator.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use cwsandbox_api::emulator_v1 as emu;
use cwsandbox_api::emulator_v1::emulator_service_client::EmulatorServiceClient;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_emulator::Emulator;
use cwsandbox_emulator::runtime::SandboxRuntime;
use tonic::Code;

type Client = EmulatorServiceClient<Authed>;

async fn with_runtime(overlay: &str) -> (Emulator, Arc<FakeRuntime>) {
    let runtime = FakeRuntime::new();
    let emulator = start_with(overlay, Some(runtime.clone() as Arc<dyn SandboxRuntime>)).await;
    (emulator, runtime)
}

async fn create_tenant(operator: &mut Client, request: emu::CreateTenantRequest) -> emu::Tenant {
    operator.create_tenant(request).await.expect("tenant created").into_inner().tenant.expect("tenant")
}

/// A RUNNING sandbox of `token` on `runner`, with `tags`.
async fn running(emulator: &Emulator, token: &str, runner: &str, tags: &[&str]) -> pb::Sandbox {
    let mut spec = client_spec(runner);
    spec.tags = tags.iter().map(|tag| (*tag).to_owned()).collect();
    let mut client = sandboxes(emulator, token).await;
    let created = client.create_sandbox(create_request(spec, "")).await.expect("created").into_inner();
    advance(emulator, Duration::from_secs(2));
    let sandbox =
        client.get_sandbox(pb::GetSandboxRequest { sandbox_id: created.sandbox_id }).await.unwrap().into_inner();
    assert_eq!(state_of(&sandbox), pb::State::Running);
    sandbox
}

fn violation(status: &tonic::Status) -> String {
    details(status).bad_request().map(|bad| bad.field_violations[0].field.clone()).unwrap_or_default()
}

#[tokio::test]
async fn tenants_share_the_configured_runners_and_see_nothing_of_each_other() {
    let (emulator, runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    // The configured organization's alice comes first and has `sandbox-alice`.
    running(&emulator, &info.user_token, &info.runner_id, &[]).await;
    let one = create_tenant(&mut operator, emu::CreateTenantRequest::default()).await;
    let two =
        create_tenant(&mut operator, emu::CreateTenantRequest { user: "alice".to_owned(), ..Default::default() }).await;
    assert_eq!((one.organization.as_str(), one.user.as_str(), one.uid), ("tenant-1", "tenant-1", 20_000));
    assert_eq!((two.organization.as_str(), two.user.as_str(), two.uid), ("tenant-2", "alice", 20_001));
    assert_eq!(one.runner_ids, vec![info.runner_id.clone()], "the values' runner, in the tenant's own organization");
    assert_eq!(one.roles, ["sandbox_user"]);

    let a = running(&emulator, &one.user_token, &info.runner_id, &[]).await;
    let b = running(&emulator, &two.user_token, &info.runner_id, &[]).await;
    let listed = |token: String| {
        let emulator = &emulator;
        async move {
            let mut client = sandboxes(emulator, &token).await;
            let list = client.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap().into_inner();
            list.sandboxes.into_iter().map(|sandbox| sandbox.sandbox_id).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(one.user_token.clone()).await, vec![a.sandbox_id.clone()]);
    assert_eq!(listed(two.user_token.clone()).await, vec![b.sandbox_id.clone()]);
    let error = sandboxes(&emulator, &one.user_token)
        .await
        .get_sandbox(pb::GetSandboxRequest { sandbox_id: b.sandbox_id.clone() })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::NotFound);

    // Each tenant's admin token sees its own Pods, in a namespace of its own, and its job.
    let mut one_admin = emulator_service(&emulator, &one.admin_token).await;
    let pods = one_admin.list_pods(emu::ListPodsRequest::default()).await.unwrap().into_inner().pods;
    assert_eq!(pods.len(), 1, "only its sandbox's Pod");
    let namespace = pods[0].metadata.as_ref().unwrap().namespace.clone();
    assert_eq!(namespace, "sandbox-tenant-1");
    let all = operator.list_pods(emu::ListPodsRequest::default()).await.unwrap().into_inner().pods;
    let namespaces: Vec<String> = all
        .iter()
        .filter(|pod| pod.origin.as_ref().is_some_and(|origin| !origin.sandbox_id.is_empty()))
        .map(|pod| pod.metadata.as_ref().unwrap().namespace.clone())
        .collect();
    assert!(namespaces.contains(&"sandbox-alice".to_owned()), "{namespaces:?}");
    assert!(namespaces.contains(&"sandbox-alice-tenant-2".to_owned()), "another organization's alice: {namespaces:?}");

    // A batch job of the tenant runs as its Slurm user, on its account.
    let job = one_admin
        .submit_batch_job(emu::SubmitBatchJobRequest { name: "train".to_owned(), cpus: 1, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!((job.user.as_str(), job.uid, job.account.as_str()), ("tenant-1", 20_000, "tenant-1"));

    // Deleting a tenant ends its tokens and its sandboxes, and leaves the other alone.
    let deleted = operator
        .delete_tenant(emu::DeleteTenantRequest { organization: "tenant-1".to_owned() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.stopped_pods, 1);
    let pod_uid_of_a = runtime
        .started()
        .iter()
        .find(|launch| launch.sandbox_id.as_deref() == Some(a.sandbox_id.as_str()))
        .unwrap()
        .pod_uid
        .to_string();
    assert!(runtime.killed().contains(&pod_uid_of_a), "its process is stopped");
    let error = sandboxes(&emulator, &one.user_token)
        .await
        .list_sandboxes(pb::ListSandboxesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated);
    assert_eq!(listed(two.user_token.clone()).await, vec![b.sandbox_id.clone()]);
    let tenants = operator.list_tenants(emu::ListTenantsRequest {}).await.unwrap().into_inner().tenants;
    assert_eq!(tenants.iter().map(|tenant| tenant.organization.as_str()).collect::<Vec<_>>(), ["tenant-2"]);
    let again =
        operator.delete_tenant(emu::DeleteTenantRequest { organization: "tenant-1".to_owned() }).await.unwrap_err();
    assert_eq!((again.code(), reason(&again).as_str()), (Code::NotFound, "CWSANDBOX_TENANT_NOT_FOUND"));
    let configured =
        operator.delete_tenant(emu::DeleteTenantRequest { organization: info.org.clone() }).await.unwrap_err();
    assert!(configured.message().contains("configured"), "{configured:?}");
}

#[tokio::test]
async fn a_full_reset_keeps_the_tenants_and_their_runners() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let tenant = create_tenant(&mut operator, emu::CreateTenantRequest::default()).await;
    running(&emulator, &tenant.user_token, &info.runner_id, &[]).await;
    operator.reset(emu::ResetRequest::default()).await.unwrap();
    let mut client = sandboxes(&emulator, &tenant.user_token).await;
    let list = client.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap().into_inner();
    assert!(list.sandboxes.is_empty(), "the world starts over");
    running(&emulator, &tenant.user_token, &info.runner_id, &[]).await;
}

#[tokio::test]
async fn bad_tenant_requests_name_their_field_and_only_the_operator_makes_tenants() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let cases = [
        (emu::CreateTenantRequest { organization: "Bad_Name".to_owned(), ..Default::default() }, "organization"),
        (emu::CreateTenantRequest { user: "-x".to_owned(), ..Default::default() }, "user"),
        (emu::CreateTenantRequest { uid: Some(0), ..Default::default() }, "uid"),
        (emu::CreateTenantRequest { roles: vec!["cluster_admin".to_owned()], ..Default::default() }, "roles[0]"),
        (emu::CreateTenantRequest { roles: vec!["root".to_owned()], ..Default::default() }, "roles[0]"),
    ];
    for (request, field) in cases {
        let error = operator.create_tenant(request).await.unwrap_err();
        assert_eq!((error.code(), violation(&error)), (Code::InvalidArgument, field.to_owned()), "{error:?}");
    }
    let taken = operator
        .create_tenant(emu::CreateTenantRequest { organization: info.org.clone(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Code::AlreadyExists);
    // uid 1001 is Slurm's alice: a tenant of another name cannot take it.
    let uid = operator
        .create_tenant(emu::CreateTenantRequest { uid: Some(1001), user: "mallory".to_owned(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(uid.code(), Code::AlreadyExists, "{uid:?}");
    let tenants = operator.list_tenants(emu::ListTenantsRequest {}).await.unwrap().into_inner().tenants;
    assert!(tenants.is_empty(), "no failed create left a tenant: {tenants:?}");

    let mut user = emulator_service(&emulator, &info.user_token).await;
    let denied = user.create_tenant(emu::CreateTenantRequest::default()).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let admin = create_tenant(&mut operator, emu::CreateTenantRequest::default()).await;
    let mut tenant_admin = emulator_service(&emulator, &admin.admin_token).await;
    let denied = tenant_admin.create_tenant(emu::CreateTenantRequest::default()).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "a tenant's admin is one organization's");
}

fn fault(method: &str, code: &str, schedule: emu::FaultSchedule) -> emu::Fault {
    emu::Fault {
        r#match: Some(emu::FaultMatch { method: method.to_owned(), ..Default::default() }),
        action: Some(emu::FaultAction { code: code.to_owned(), ..Default::default() }),
        schedule: Some(schedule),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_fault_fails_the_first_calls_with_its_details_and_counts_its_hits() {
    let (emulator, runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let mut rule = fault("CreateSandbox", "UNAVAILABLE", emu::FaultSchedule { times: 2, ..Default::default() });
    let action = rule.action.as_mut().unwrap();
    action.reason = "CWSANDBOX_BACKEND_UNAVAILABLE".to_owned();
    action.retry_delay = Some(pbjson_types::Duration { seconds: 1, nanos: 0 });
    let added =
        operator.add_fault(emu::AddFaultRequest { fault: Some(rule) }).await.unwrap().into_inner().fault.unwrap();
    assert_eq!(added.id, "fault-1");

    let mut client = sandboxes(&emulator, &info.user_token).await;
    for attempt in 0..2 {
        let error = client.create_sandbox(create_request(client_spec(&info.runner_id), "retry")).await.unwrap_err();
        assert_eq!(error.code(), Code::Unavailable, "attempt {attempt}");
        assert_eq!(error.message(), "injected by fault fault-1");
        let details = details(&error);
        assert_eq!(details.retry_info().unwrap().retry_delay, Some(Duration::from_secs(1)));
        let info = details.error_info().unwrap();
        assert_eq!(
            (info.reason.as_str(), info.metadata["fault"].as_str()),
            ("CWSANDBOX_BACKEND_UNAVAILABLE", "fault-1")
        );
    }
    assert!(runtime.started().is_empty(), "a failed call changes nothing");
    client.create_sandbox(create_request(client_spec(&info.runner_id), "retry")).await.expect("the third succeeds");
    let listed = operator.list_faults(emu::ListFaultsRequest {}).await.unwrap().into_inner().faults;
    assert_eq!((listed[0].matched, listed[0].hits), (3, 2));

    let removed = operator.remove_fault(emu::RemoveFaultRequest { id: "fault-1".to_owned() }).await.unwrap();
    assert_eq!(removed.into_inner().fault.unwrap().hits, 2);
    let gone = operator.remove_fault(emu::RemoveFaultRequest { id: "fault-1".to_owned() }).await.unwrap_err();
    assert_eq!((gone.code(), reason(&gone).as_str()), (Code::NotFound, "CWSANDBOX_FAULT_NOT_FOUND"));
}

#[tokio::test]
async fn bad_faults_are_refused_by_field() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let typo = fault("CreateSandbx", "UNAVAILABLE", emu::FaultSchedule::default());
    let error = operator.add_fault(emu::AddFaultRequest { fault: Some(typo) }).await.unwrap_err();
    assert_eq!((error.code(), violation(&error)), (Code::InvalidArgument, "fault.match.method".to_owned()));
    let error = operator.add_fault(emu::AddFaultRequest { fault: None }).await.unwrap_err();
    assert_eq!(violation(&error), "fault");
    let mut user = emulator_service(&emulator, &info.user_token).await;
    let denied = user
        .add_fault(emu::AddFaultRequest { fault: Some(fault("", "UNAVAILABLE", Default::default())) })
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(operator.list_faults(emu::ListFaultsRequest {}).await.unwrap().into_inner().faults.is_empty());
}

#[tokio::test]
async fn an_organizations_faults_touch_only_its_calls_and_go_with_its_reset() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let one = create_tenant(&mut operator, emu::CreateTenantRequest::default()).await;
    let two = create_tenant(&mut operator, emu::CreateTenantRequest::default()).await;
    let mut one_admin = emulator_service(&emulator, &one.admin_token).await;
    one_admin
        .add_fault(emu::AddFaultRequest {
            fault: Some(fault("ListSandboxes", "PERMISSION_DENIED", Default::default())),
        })
        .await
        .unwrap();
    let list = |token: String| {
        let emulator = &emulator;
        async move { sandboxes(emulator, &token).await.list_sandboxes(pb::ListSandboxesRequest::default()).await }
    };
    assert_eq!(list(one.user_token.clone()).await.unwrap_err().code(), Code::PermissionDenied);
    assert!(list(two.user_token.clone()).await.is_ok(), "another tenant's calls are untouched");
    assert!(list(info.user_token.clone()).await.is_ok());
    let mut two_admin = emulator_service(&emulator, &two.admin_token).await;
    assert!(two_admin.list_faults(emu::ListFaultsRequest {}).await.unwrap().into_inner().faults.is_empty());
    let foreign = two_admin.remove_fault(emu::RemoveFaultRequest { id: "fault-1".to_owned() }).await.unwrap_err();
    assert_eq!(foreign.code(), Code::NotFound);
    let mut aimed = fault("", "UNAVAILABLE", Default::default());
    aimed.r#match.as_mut().unwrap().organization = one.organization.clone();
    let denied = two_admin.add_fault(emu::AddFaultRequest { fault: Some(aimed) }).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "no fault for another organization");

    one_admin.reset(emu::ResetRequest::default()).await.unwrap();
    assert!(list(one.user_token.clone()).await.is_ok(), "its reset removed its fault");
}

#[tokio::test]
async fn faults_match_sandbox_tags_and_header_values() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let flaky = running(&emulator, &info.user_token, &info.runner_id, &["flaky"]).await;
    let steady = running(&emulator, &info.user_token, &info.runner_id, &["steady"]).await;
    let mut rule = fault("GetSandbox", "INTERNAL", Default::default());
    rule.r#match.as_mut().unwrap().tags = vec!["flaky".to_owned()];
    operator.add_fault(emu::AddFaultRequest { fault: Some(rule) }).await.unwrap();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let get = |id: &str| pb::GetSandboxRequest { sandbox_id: id.to_owned() };
    assert_eq!(client.get_sandbox(get(&flaky.sandbox_id)).await.unwrap_err().code(), Code::Internal);
    assert!(client.get_sandbox(get(&steady.sandbox_id)).await.is_ok());
    // CreateSandbox matches on the request's own tags.
    let mut create = fault("CreateSandbox", "RESOURCE_EXHAUSTED", Default::default());
    create.r#match.as_mut().unwrap().tags = vec!["big".to_owned()];
    operator.add_fault(emu::AddFaultRequest { fault: Some(create) }).await.unwrap();
    let mut big = client_spec(&info.runner_id);
    big.tags = vec!["big".to_owned()];
    assert_eq!(client.create_sandbox(create_request(big, "")).await.unwrap_err().code(), Code::ResourceExhausted);
    operator.clear_faults(emu::ClearFaultsRequest {}).await.unwrap();

    let mut by_header = fault("", "ABORTED", Default::default());
    by_header.r#match.as_mut().unwrap().headers.insert("x-test-case".to_owned(), "retry-*".to_owned());
    operator.add_fault(emu::AddFaultRequest { fault: Some(by_header) }).await.unwrap();
    let mut request = tonic::Request::new(get(&steady.sandbox_id));
    request.metadata_mut().insert("x-test-case", "retry-2".parse().unwrap());
    assert_eq!(client.get_sandbox(request).await.unwrap_err().code(), Code::Aborted);
    let mut request = tonic::Request::new(get(&steady.sandbox_id));
    request.metadata_mut().insert("x-test-case", "smoke".parse().unwrap());
    assert!(client.get_sandbox(request).await.is_ok());
}

#[tokio::test]
async fn the_fault_header_fails_one_call_for_an_administrator_only() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut admin = sandboxes(&emulator, &info.admin_token).await;
    let header = |value: &str| {
        let mut request = tonic::Request::new(pb::ListSandboxesRequest::default());
        request.metadata_mut().insert("x-cwsandbox-emulator-fault", value.parse().unwrap());
        request
    };
    let error = admin.list_sandboxes(header(r#"{"code":"UNAVAILABLE","retryDelay":"3s"}"#)).await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(details(&error).retry_info().unwrap().retry_delay, Some(Duration::from_secs(3)));
    assert!(admin.list_sandboxes(pb::ListSandboxesRequest::default()).await.is_ok(), "one call only");
    let error = admin.list_sandboxes(header("SOMETIMES")).await.unwrap_err();
    assert_eq!(
        (error.code(), violation(&error)),
        (Code::InvalidArgument, "x-cwsandbox-emulator-fault.code".to_owned())
    );
    let mut user = sandboxes(&emulator, &info.user_token).await;
    let denied = user.list_sandboxes(header("UNAVAILABLE")).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "a user cannot fail calls on purpose");
}

#[tokio::test]
async fn a_stream_fault_ends_stream_logs_after_n_messages() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let sandbox = running(&emulator, &info.user_token, &info.runner_id, &[]).await;
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let mut rule = fault("StreamLogs", "DATA_LOSS", emu::FaultSchedule { times: 1, ..Default::default() });
    rule.action.as_mut().unwrap().stream_messages = Some(1);
    operator.add_fault(emu::AddFaultRequest { fault: Some(rule) }).await.unwrap();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let request = pb::StreamLogsRequest { sandbox_id: sandbox.sandbox_id.clone(), ..Default::default() };
    let mut stream = client.stream_logs(request.clone()).await.unwrap().into_inner();
    let first = stream.message().await.expect("one message comes through").expect("a message");
    assert_eq!(first.data, b"started\n");
    let error = stream.message().await.unwrap_err();
    assert_eq!((error.code(), error.message()), (Code::DataLoss, "injected by fault fault-1"));
    // Once only: the next stream is whole.
    let mut stream = client.stream_logs(request).await.unwrap().into_inner();
    let mut count = 0;
    while stream.message().await.unwrap().is_some() {
        count += 1;
    }
    assert_eq!(count, 2);
}

#[tokio::test]
async fn the_values_faults_are_installed_at_start_and_again_by_a_full_reset() {
    let overlay = r#"
faults:
  - match: {method: GetClock}
    action: {code: UNAVAILABLE, message: "clock down"}
    schedule: {times: 1}
"#;
    let (emulator, _runtime) = with_runtime(overlay).await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let error = operator.get_clock(emu::GetClockRequest {}).await.unwrap_err();
    assert_eq!(error.message(), "clock down");
    assert!(operator.get_clock(emu::GetClockRequest {}).await.is_ok());
    operator.reset(emu::ResetRequest::default()).await.unwrap();
    let faults = operator.list_faults(emu::ListFaultsRequest {}).await.unwrap().into_inner().faults;
    assert_eq!((faults.len(), faults[0].hits), (1, 0), "fresh counts");
    assert!(operator.get_clock(emu::GetClockRequest {}).await.is_err());
}

#[tokio::test]
async fn a_stream_fault_ends_connect_streams_and_stream_exec_too() {
    use cwsandbox_api::sandbox_v1::sandbox_service_connect_client::SandboxServiceClient as ConnectClient;
    use futures::StreamExt;
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let sandbox = running(&emulator, &info.user_token, &info.runner_id, &[]).await;
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let mut rule = fault("*/Stream*", "UNAVAILABLE", Default::default());
    rule.action.as_mut().unwrap().stream_messages = Some(1);
    operator.add_fault(emu::AddFaultRequest { fault: Some(rule) }).await.unwrap();

    for (proto, h2c) in [(false, false), (true, true)] {
        let mut builder = ConnectClient::builder(info.base_url.clone())
            .default_header("authorization", format!("Bearer {}", info.user_token));
        if proto {
            builder = builder.use_proto();
        }
        if h2c {
            builder = builder.http2_prior_knowledge();
        }
        let client = builder.build().unwrap();
        let request = pb::StreamLogsRequest { sandbox_id: sandbox.sandbox_id.clone(), ..Default::default() };
        let items: Vec<_> = client.stream_logs(&request).await.unwrap().into_inner().collect().await;
        assert_eq!(items.len(), 2, "proto={proto}: one message, then the error");
        assert_eq!(items[0].as_ref().unwrap().data, b"started\n");
        let Err(connectrpc_axum_client::ClientError::Rpc(status)) = &items[1] else { panic!("{:?}", items[1]) };
        assert_eq!(status.code(), connectrpc_axum_client::Code::Unavailable, "proto={proto}");
    }

    // StreamExec over gRPC: the Ready message comes through, then the stream ends.
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let init = pb::ExecStreamRequest {
        message: Some(pb::exec_stream_request::Message::Init(pb::ExecStreamInit {
            sandbox_id: sandbox.sandbox_id.clone(),
            command: vec!["echo".to_owned(), "cut".to_owned()],
            ..Default::default()
        })),
    };
    let mut stream = client.stream_exec(futures::stream::iter(vec![init])).await.unwrap().into_inner();
    let ready = stream.message().await.unwrap().unwrap();
    assert!(matches!(ready.message, Some(pb::exec_stream_response::Message::Ready(_))));
    assert_eq!(stream.message().await.unwrap_err().code(), Code::Unavailable);
}

fn domain_fault(kind: emu::domain_fault::Kind, method: &str) -> emu::Fault {
    emu::Fault {
        r#match: Some(emu::FaultMatch { method: method.to_owned(), ..Default::default() }),
        domain: Some(emu::DomainFault { kind: Some(kind) }),
        schedule: Some(emu::FaultSchedule { times: 1, ..Default::default() }),
        ..Default::default()
    }
}

fn seconds(seconds: i64) -> pbjson_types::Duration {
    pbjson_types::Duration { seconds, nanos: 0 }
}

async fn pod_of(operator: &mut Client, id: &str) -> emu::Pod {
    let request =
        emu::ListPodsRequest { label_selector: format!("sandbox.coreweave.com/sandbox-id={id}"), ..Default::default() };
    operator.list_pods(request).await.unwrap().into_inner().pods.remove(0)
}

async fn events_of(operator: &mut Client, pod: &emu::Pod) -> Vec<(String, String)> {
    let name = pod.metadata.as_ref().unwrap().name.clone();
    let events = operator.list_events(emu::ListEventsRequest::default()).await.unwrap().into_inner().events;
    events
        .into_iter()
        .filter(|event| event.involved_object.as_ref().is_some_and(|object| object.name == name))
        .map(|event| (event.reason, event.message))
        .collect()
}

fn waiting_reason(pod: &emu::Pod) -> String {
    let status = pod.status.as_ref().unwrap();
    match status.container_statuses[0].state.as_ref().and_then(|state| state.state.clone()) {
        Some(emu::container_state::State::Waiting(waiting)) => waiting.reason,
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn a_held_sandbox_stays_pending_for_its_virtual_time() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let fault = domain_fault(emu::domain_fault::Kind::PendingFor(seconds(30)), "");
    operator.add_fault(emu::AddFaultRequest { fault: Some(fault) }).await.unwrap();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let held = client.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    // The create's answer reads CREATING, as the cloud's does; the Gets then show PENDING.
    assert_eq!(state_of(&held), pb::State::Creating, "{held:?}");
    assert!(held.status.as_ref().unwrap().state_reason.contains("held unscheduled"), "{held:?}");
    assert_eq!(state_of(&sandbox_of(&emulator, &info.user_token, &held.sandbox_id).await), pb::State::Pending);
    let free = running(&emulator, &info.user_token, &info.runner_id, &[]).await;
    assert_eq!(state_of(&free), pb::State::Running, "the fault hit once");
    advance(&emulator, Duration::from_secs(20));
    let now = sandbox_of(&emulator, &info.user_token, &held.sandbox_id).await;
    assert_eq!(state_of(&now), pb::State::Pending);
    assert!(
        now.status.as_ref().unwrap().state_reason.contains("held unscheduled for 30s (injected by fault-1)"),
        "{now:?}"
    );
    let pod = pod_of(&mut operator, &held.sandbox_id).await;
    assert!(events_of(&mut operator, &pod).await.iter().any(|(reason, _)| reason == "FailedScheduling"));
    advance(&emulator, Duration::from_secs(12));
    assert_eq!(state_of(&sandbox_of(&emulator, &info.user_token, &held.sandbox_id).await), pb::State::Running);
    let faults = operator.list_faults(emu::ListFaultsRequest {}).await.unwrap().into_inner().faults;
    assert_eq!((faults[0].matched, faults[0].hits), (2, 1));
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_shows_err_image_pull_then_back_off() {
    let (emulator, runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let mut fault = domain_fault(emu::domain_fault::Kind::ImagePull("python:*".to_owned()), "CreateSandbox");
    fault.schedule = None;
    operator.add_fault(emu::AddFaultRequest { fault: Some(fault) }).await.unwrap();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let created = client.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));
    let sandbox = sandbox_of(&emulator, &info.user_token, &created.sandbox_id).await;
    assert_eq!(state_of(&sandbox), pb::State::Pending);
    let reason = sandbox.status.unwrap().state_reason;
    assert!(reason.starts_with("ErrImagePull: ") && reason.contains("python:3.11"), "{reason}");
    let pod = pod_of(&mut operator, &created.sandbox_id).await;
    assert_eq!(waiting_reason(&pod), "ErrImagePull");
    assert!(!pod.spec.as_ref().unwrap().node_name.is_empty(), "bound to its Node");
    let events = events_of(&mut operator, &pod).await;
    assert!(
        events.iter().any(|(reason, message)| reason == "Failed" && message.contains("Failed to pull image")),
        "{events:?}"
    );
    assert!(runtime.started().is_empty(), "nothing runs");
    // A sandbox deleted while its image does not come ends as deleted.
    let stuck = client.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(1));
    let deleted = client
        .delete_sandbox(pb::DeleteSandboxRequest { sandbox_id: stuck.sandbox_id.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(&deleted.sandbox.unwrap()), pb::State::Completed);

    // At the back-off (kubelet.imagePullBackOffSeconds, 10 s) the runner gives up.
    advance(&emulator, Duration::from_secs(10));
    let pod = pod_of(&mut operator, &created.sandbox_id).await;
    assert_eq!(waiting_reason(&pod), "ImagePullBackOff");
    assert_eq!(pod.status.as_ref().unwrap().phase, "Failed");
    let failed = sandbox_of(&emulator, &info.user_token, &created.sandbox_id).await;
    assert_eq!(state_of(&failed), pb::State::Failed);
    let reason = failed.status.unwrap().state_reason;
    assert!(reason.starts_with("ImagePullBackOff: Back-off pulling image \"python:3.11\""), "{reason}");

    // Another image is pulled.
    let mut other = client_spec(&info.runner_id);
    other.containers[0].image = "ubuntu:24.04".to_owned();
    let fine = client.create_sandbox(create_request(other, "")).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));
    assert_eq!(state_of(&sandbox_of(&emulator, &info.user_token, &fine.sandbox_id).await), pb::State::Running);
}

#[tokio::test]
async fn an_oom_kill_fails_the_sandbox_with_137_and_a_lost_node_fails_its_sandboxes() {
    let (emulator, runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let oom = domain_fault(emu::domain_fault::Kind::OomKillAfter(seconds(5)), "");
    operator.add_fault(emu::AddFaultRequest { fault: Some(oom) }).await.unwrap();
    let killed = running(&emulator, &info.user_token, &info.runner_id, &[]).await;
    advance(&emulator, Duration::from_secs(5));
    let ended = sandbox_of(&emulator, &info.user_token, &killed.sandbox_id).await;
    assert_eq!(state_of(&ended), pb::State::Failed);
    let status = ended.status.unwrap();
    assert_eq!(status.exit_code, Some(137));
    assert!(status.state_reason.starts_with("OOMKilled"), "{}", status.state_reason);
    let pod_uid = pod_of(&mut operator, &killed.sandbox_id).await.metadata.unwrap().uid;
    assert!(runtime.killed().contains(&pod_uid), "its processes are killed");
    let pod = pod_of(&mut operator, &killed.sandbox_id).await;
    let state = pod.status.unwrap().container_statuses[0].state.clone().unwrap().state;
    let Some(emu::container_state::State::Terminated(terminated)) = state else { panic!("{state:?}") };
    assert_eq!((terminated.exit_code, terminated.reason.as_str()), (137, "OOMKilled"));

    operator.clear_faults(emu::ClearFaultsRequest {}).await.unwrap();
    let lost = domain_fault(emu::domain_fault::Kind::NodeNotReadyAfter(seconds(3)), "");
    operator.add_fault(emu::AddFaultRequest { fault: Some(lost) }).await.unwrap();
    let victim = running(&emulator, &info.user_token, &info.runner_id, &[]).await;
    let node = pod_of(&mut operator, &victim.sandbox_id).await.spec.unwrap().node_name;
    advance(&emulator, Duration::from_secs(3));
    let ended = sandbox_of(&emulator, &info.user_token, &victim.sandbox_id).await;
    assert_eq!(state_of(&ended), pb::State::Failed);
    assert!(ended.status.unwrap().state_reason.starts_with("NodeLost: "));
    let nodes = operator.list_nodes(emu::ListNodesRequest::default()).await.unwrap().into_inner().nodes;
    let node = nodes.iter().find(|candidate| candidate.metadata.as_ref().unwrap().name == node).unwrap();
    assert_eq!(node.conditions[0].status, "False");
    assert!(node.taints.iter().any(|taint| taint.key == "node.kubernetes.io/unreachable"));
    let slurm = operator
        .list_slurm_nodes(emu::ListSlurmNodesRequest { names: vec![node.slurm_node.clone()], ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .nodes;
    assert!(slurm[0].drain_reason.contains("NotReady"), "{:?}", slurm[0]);
    // The next sandbox goes elsewhere.
    let next = running(&emulator, &info.user_token, &info.runner_id, &[]).await;
    let next_node = pod_of(&mut operator, &next.sandbox_id).await.spec.unwrap().node_name;
    assert_ne!(next_node, node.metadata.as_ref().unwrap().name);
}

#[tokio::test]
async fn bad_domain_faults_name_their_field() {
    let (emulator, _runtime) = with_runtime("").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let mut wrong_method = domain_fault(emu::domain_fault::Kind::PendingFor(seconds(1)), "GetSandbox");
    let error = operator.add_fault(emu::AddFaultRequest { fault: Some(wrong_method.clone()) }).await.unwrap_err();
    assert_eq!(violation(&error), "fault.match.method");
    wrong_method.r#match = None;
    wrong_method.action = Some(emu::FaultAction { code: "UNAVAILABLE".to_owned(), ..Default::default() });
    let error = operator.add_fault(emu::AddFaultRequest { fault: Some(wrong_method) }).await.unwrap_err();
    assert_eq!(violation(&error), "fault.action");
    let empty = emu::Fault { domain: Some(emu::DomainFault { kind: None }), ..Default::default() };
    let error = operator.add_fault(emu::AddFaultRequest { fault: Some(empty) }).await.unwrap_err();
    assert_eq!(violation(&error), "fault.domain");
    let negative = domain_fault(emu::domain_fault::Kind::OomKillAfter(seconds(-1)), "");
    let error = operator.add_fault(emu::AddFaultRequest { fault: Some(negative) }).await.unwrap_err();
    assert_eq!(violation(&error), "fault.domain.oom_kill_after");
}

#[tokio::test]
async fn dev_tokens_are_fixed_on_loopback_and_refused_elsewhere() {
    use cwsandbox_emulator::config::EmulatorConfig;
    use cwsandbox_emulator::{Options, StartError};
    use cwsandbox_sim::config::Scenario;
    let config = |overlay: &str| {
        EmulatorConfig::from_overlays(Scenario::Ready, [(std::path::Path::new("test.yaml"), overlay)]).unwrap()
    };
    let mut options = Options::new(config(""));
    options.dev_tokens = true;
    let emulator = Emulator::start(options).await.expect("starts");
    assert_eq!(emulator.info().admin_token, cwsandbox_emulator::auth::DEV_ADMIN_TOKEN);
    assert_eq!(emulator.info().user_token, cwsandbox_emulator::auth::DEV_USER_TOKEN);
    let mut operator = emulator_service(&emulator, "cwsbx-dev-admin").await;
    assert!(operator.get_values(emu::GetValuesRequest::default()).await.is_ok(), "the fixed operator token works");
    emulator.stop().await;

    let mut everywhere = Options::new(config(""));
    everywhere.dev_tokens = true;
    everywhere.listen = "0.0.0.0:0".parse().unwrap();
    let refused = Emulator::start(everywhere).await.expect_err("public tokens on every address");
    assert!(matches!(&refused, StartError::DevTokens(why) if why.contains("loopback")), "{refused}");

    let mut both =
        Options::new(config("auth:\n  tokens:\n    - {token: t, org: o, user: u, uid: 1, roles: [sandbox_user]}\n"));
    both.dev_tokens = true;
    let refused = Emulator::start(both).await.expect_err("two sources of tokens");
    assert!(matches!(&refused, StartError::DevTokens(why) if why.contains("auth.tokens")), "{refused}");
}

/// Any Slurm user reads the queue, the nodes, the partitions and the users; with the values'
/// `slurmConfig.PrivateData: jobs`, a user who administers nothing sees only its own jobs.
#[tokio::test]
async fn a_sandbox_user_reads_the_slurm_views_and_private_data_hides_other_users_jobs() {
    let (emulator, _runtime) = with_runtime("slurmConfig:\n  PrivateData: jobs\n").await;
    let info = emulator.info().clone();
    let mut operator = emulator_service(&emulator, &info.admin_token).await;
    let tenant = create_tenant(&mut operator, emu::CreateTenantRequest::default()).await;
    let mut admin = emulator_service(&emulator, &tenant.admin_token).await;
    let mut user = emulator_service(&emulator, &tenant.user_token).await;
    let submit = |name: &str, user: &str| emu::SubmitBatchJobRequest {
        name: name.to_owned(),
        user: user.to_owned(),
        cpus: 1,
        ..Default::default()
    };
    let own = admin.submit_batch_job(submit("own", "")).await.unwrap().into_inner().job.unwrap();
    let alices = admin.submit_batch_job(submit("alices", "alice")).await.unwrap().into_inner().job.unwrap();
    assert_eq!((own.uid, alices.uid), (tenant.uid, 1001));

    let names = |jobs: Vec<emu::Job>| {
        let mut names: Vec<String> = jobs.into_iter().map(|job| job.name).collect();
        names.sort();
        names.dedup();
        names
    };
    let listed = user.list_jobs(emu::ListJobsRequest::default()).await.expect("a user reads the queue");
    assert_eq!(names(listed.into_inner().jobs), ["own"], "PrivateData=jobs: only its own");
    let listed = admin.list_jobs(emu::ListJobsRequest::default()).await.unwrap();
    assert_eq!(names(listed.into_inner().jobs), ["alices", "own"], "an administrator sees the organization's");
    assert!(!user.list_slurm_nodes(emu::ListSlurmNodesRequest::default()).await.unwrap().into_inner().nodes.is_empty());
    assert!(!user.list_partitions(emu::ListPartitionsRequest {}).await.unwrap().into_inner().partitions.is_empty());
    let users = user.list_slurm_users(emu::ListSlurmUsersRequest {}).await.unwrap().into_inner();
    assert_eq!(users.caller_uid, tenant.uid);
    assert!(users.users.iter().any(|each| each.name == "alice" && each.uid == 1001), "{users:?}");
    let config = user.get_slurm_config(emu::GetSlurmConfigRequest {}).await.expect("slurm.conf is readable");
    let config = config.into_inner().config.unwrap();
    assert_eq!(config.private_data, "jobs", "{config:?}");
    // Writes stay the administrators'.
    let denied = user.submit_batch_job(submit("mine", "")).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    // Without PrivateData (Slurm's default) every job of the organization is readable.
    let yaml = "slurmConfig:\n  PrivateData: null\n".to_owned();
    let request = emu::ApplyValuesRequest {
        document: Some(emu::apply_values_request::Document::Yaml(yaml)),
        ..Default::default()
    };
    operator.apply_values(request).await.expect("values applied");
    let listed = user.list_jobs(emu::ListJobsRequest::default()).await.unwrap();
    assert_eq!(names(listed.into_inner().jobs), ["alices", "own"]);
}
