//! EmulatorService and the kube facade between organizations: the operator (`cluster_admin`) sees
//! and acts on everything; an organization's `sandbox_admin` sees only its own sandboxes' Pods,
//! Events and jobs, another organization's objects are NOT_FOUND for it, its Reset resets only
//! its own part, and the calls that change the whole cluster are PERMISSION_DENIED for it.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use cwsandbox_api::emulator_v1 as emu;
use cwsandbox_api::emulator_v1::emulator_service_client::EmulatorServiceClient;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_emulator::Emulator;
use serde_json::Value;
use tonic::Code;

/// Two organizations with a runner each whose policy routes sandboxes through SUNK, the
/// operator, and an admin and a user per organization.
const OVERLAY: &str = r#"
runners:
  - {org: org-a, runnerId: runner-a, zone: us-east-04a, clusterId: cks-cluster,
     policy: {base: {spec: {schedulerName: slurm-scheduler}}}}
  - {org: org-b, runnerId: runner-b, zone: us-east-04a, clusterId: cks-cluster,
     policy: {base: {spec: {schedulerName: slurm-scheduler}}}}
auth:
  tokens:
    - {token: operator, org: operations, user: operator, uid: 0, roles: [cluster_admin]}
    - {token: a-admin, org: org-a, user: ann, uid: 0, roles: [sandbox_admin]}
    - {token: a-user, org: org-a, user: alice, uid: 1001, roles: [sandbox_user]}
    - {token: b-admin, org: org-b, user: ben, uid: 0, roles: [sandbox_admin]}
    - {token: b-user, org: org-b, user: bob, uid: 1002, roles: [sandbox_user]}
"#;

type Client = EmulatorServiceClient<Authed>;

/// Two organizations with a running sandbox each, on a frozen clock.
struct Tenants {
    emulator: Emulator,
    runtime: std::sync::Arc<FakeRuntime>,
    operator: Client,
    b_admin: Client,
    /// Org A's sandbox.
    a: pb::Sandbox,
    /// Org B's sandbox.
    b: pb::Sandbox,
}

async fn tenants() -> Tenants {
    let runtime = FakeRuntime::new();
    let emulator =
        start_with(OVERLAY, Some(runtime.clone() as std::sync::Arc<dyn cwsandbox_emulator::runtime::SandboxRuntime>))
            .await;
    let mut operator = emulator_service(&emulator, "operator").await;
    operator.freeze_clock(emu::FreezeClockRequest {}).await.unwrap();
    let a =
        sandboxes(&emulator, "a-user").await.create_sandbox(create_request(client_spec("runner-a"), "")).await.unwrap();
    let b =
        sandboxes(&emulator, "b-user").await.create_sandbox(create_request(client_spec("runner-b"), "")).await.unwrap();
    let duration = pbjson_types::Duration { seconds: 2, nanos: 0 };
    operator.advance_clock(emu::AdvanceClockRequest { duration: Some(duration) }).await.unwrap();
    let (a, b) = (
        sandbox_of(&emulator, "a-user", &a.into_inner().sandbox_id).await,
        sandbox_of(&emulator, "b-user", &b.into_inner().sandbox_id).await,
    );
    assert_eq!((state_of(&a), state_of(&b)), (pb::State::Running, pb::State::Running));
    let b_admin = emulator_service(&emulator, "b-admin").await;
    Tenants { emulator, runtime, operator, b_admin, a, b }
}

/// After its organization's reset, a sandbox is forgotten: NOT_FOUND for its own organization.
async fn assert_forgotten(emulator: &Emulator, token: &str, id: &str) {
    let error = sandboxes(emulator, token)
        .await
        .get_sandbox(pb::GetSandboxRequest { sandbox_id: id.to_owned() })
        .await
        .expect_err("the organization starts over");
    assert_eq!(error.code(), Code::NotFound, "the organization starts over: {error:?}");
}

/// A sandbox's Pod, as the operator lists it.
async fn pod_of(operator: &mut Client, sandbox: &pb::Sandbox) -> emu::Pod {
    let request = emu::ListPodsRequest {
        label_selector: format!("sandbox.coreweave.com/sandbox-id={}", sandbox.sandbox_id),
        ..Default::default()
    };
    let mut pods = operator.list_pods(request).await.unwrap().into_inner().pods;
    assert_eq!(pods.len(), 1, "{pods:?}");
    pods.remove(0)
}

/// Namespace and name.
fn name_of(pod: &emu::Pod) -> (String, String) {
    let metadata = pod.metadata.as_ref().expect("metadata");
    (metadata.namespace.clone(), metadata.name.clone())
}

fn job_of(pod: &emu::Pod) -> u32 {
    pod.origin.as_ref().and_then(|origin| origin.placeholder_job_id).expect("a placeholder job")
}

async fn pods(client: &mut Client) -> Vec<emu::Pod> {
    client.list_pods(emu::ListPodsRequest::default()).await.unwrap().into_inner().pods
}

async fn jobs(client: &mut Client) -> Vec<emu::Job> {
    client.list_jobs(emu::ListJobsRequest::default()).await.unwrap().into_inner().jobs
}

fn sandbox_ids(pods: &[emu::Pod]) -> Vec<&str> {
    pods.iter().map(|pod| pod.origin.as_ref().map_or("", |origin| origin.sandbox_id.as_str())).collect()
}

#[tokio::test]
async fn another_organizations_admin_lists_none_of_its_pods_events_or_jobs() {
    let Tenants { emulator, mut operator, mut b_admin, a, b, .. } = tenants().await;
    let (a_id, b_id) = (a.sandbox_id.as_str(), b.sandbox_id.as_str());

    let seen = pods(&mut b_admin).await;
    assert_eq!(sandbox_ids(&seen), [b_id], "only its own sandbox's Pod: no slurmd, scheduler or org A Pod");
    let seen_jobs = jobs(&mut b_admin).await;
    assert!(!seen_jobs.is_empty());
    let b_job = job_of(&pod_of(&mut operator, &b).await);
    assert!(seen_jobs.iter().all(|job| job.job_id == b_job), "only its placeholder job: {seen_jobs:?}");
    let events = b_admin.list_events(emu::ListEventsRequest::default()).await.unwrap().into_inner();
    assert!(!events.events.is_empty(), "its own Pod's Events");
    let namespaces = b_admin.list_namespaces(emu::ListNamespacesRequest::default()).await.unwrap().into_inner();
    let names: Vec<String> =
        namespaces.namespaces.iter().map(|namespace| namespace.metadata.as_ref().unwrap().name.clone()).collect();
    assert_eq!(names, ["sandbox-bob"]);
    let config_maps = b_admin.list_config_maps(emu::ListConfigMapsRequest::default()).await.unwrap().into_inner();
    assert!(config_maps.config_maps.is_empty(), "the operator's configuration");
    // Cluster information Slurm shows every user stays readable.
    assert!(!b_admin.list_nodes(emu::ListNodesRequest::default()).await.unwrap().into_inner().nodes.is_empty());
    assert!(
        !b_admin.list_slurm_nodes(emu::ListSlurmNodesRequest::default()).await.unwrap().into_inner().nodes.is_empty()
    );
    assert!(!b_admin.list_partitions(emu::ListPartitionsRequest {}).await.unwrap().into_inner().partitions.is_empty());

    // Org A's sandbox id appears nowhere in what org B's admin read.
    let everything = format!("{seen:?}{seen_jobs:?}{events:?}{namespaces:?}");
    assert!(!everything.contains(a_id), "org A's sandbox id leaked to org B");
    assert!(!everything.contains("sandbox-alice"), "org A's namespace leaked to org B");

    // Org A's admin sees its own; the operator sees both and the cluster's own Pods.
    let mut a_admin = emulator_service(&emulator, "a-admin").await;
    assert_eq!(sandbox_ids(&pods(&mut a_admin).await), [a_id]);
    let all = pods(&mut operator).await;
    let ids = sandbox_ids(&all);
    assert!(ids.contains(&a_id) && ids.contains(&b_id) && ids.contains(&""), "{ids:?}");
    assert!(jobs(&mut operator).await.len() > seen_jobs.len());
    emulator.stop().await;
}

#[tokio::test]
async fn another_organizations_objects_are_not_found_and_stay_as_they_are() {
    let Tenants { emulator, mut operator, mut b_admin, a, .. } = tenants().await;
    let a_pod = pod_of(&mut operator, &a).await;
    let (namespace, name) = name_of(&a_pod);
    let error = b_admin
        .delete_pod(emu::DeletePodRequest {
            namespace: namespace.clone(),
            name: name.clone(),
            grace_period_seconds: Some(0),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::NotFound, "{error:?}");
    assert_eq!(error.message(), format!("pods \"{name}\" not found"), "as for a Pod that never existed");

    let a_job = job_of(&a_pod);
    let error = b_admin.cancel_job(emu::CancelJobRequest { job_id: a_job, uid: None }).await.unwrap_err();
    assert_eq!(error.code(), Code::NotFound, "{error:?}");
    let unknown = b_admin.cancel_job(emu::CancelJobRequest { job_id: 4_242_424, uid: None }).await.unwrap_err();
    assert_eq!(error.message(), unknown.message().replace("4242424", &a_job.to_string()), "as for an unknown id");

    let after = sandbox_of(&emulator, "a-user", &a.sandbox_id).await;
    assert_eq!(state_of(&after), pb::State::Running, "nothing changed");
    let queued = operator
        .list_jobs(emu::ListJobsRequest {
            job_ids: vec![a_job],
            source: emu::JobSource::Queue as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .jobs;
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].state, emu::JobState::Running as i32, "org A's job still runs");
    emulator.stop().await;
}

#[tokio::test]
async fn an_organizations_admin_acts_on_its_own_objects() {
    let Tenants { emulator, mut operator, mut b_admin, b, .. } = tenants().await;
    let submitted = b_admin
        .submit_batch_job(emu::SubmitBatchJobRequest { name: "train".to_owned(), cpus: 1, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .job
        .expect("its row");
    assert!(jobs(&mut b_admin).await.iter().any(|job| job.job_id == submitted.job_id), "its own batch job");
    let mut a_admin = emulator_service(&emulator, "a-admin").await;
    assert!(jobs(&mut a_admin).await.iter().all(|job| job.job_id != submitted.job_id), "not org A's");
    b_admin.cancel_job(emu::CancelJobRequest { job_id: submitted.job_id, uid: None }).await.unwrap();

    let (namespace, name) = name_of(&pod_of(&mut operator, &b).await);
    let deleted = b_admin
        .delete_pod(emu::DeletePodRequest { namespace, name, grace_period_seconds: Some(0) })
        .await
        .unwrap()
        .into_inner();
    assert!(deleted.pod.is_none(), "gone at once with grace 0");
    let after = sandbox_of(&emulator, "b-user", &b.sandbox_id).await;
    assert_eq!(state_of(&after), pb::State::Terminated, "its Pod took the sandbox with it");
    emulator.stop().await;
}

#[tokio::test]
async fn an_organizations_reset_leaves_the_others_running() {
    let Tenants { emulator, runtime, mut operator, mut b_admin, a, b } = tenants().await;
    let b_pod = pod_of(&mut operator, &b).await.metadata.expect("metadata").uid;
    let reset = b_admin.reset(emu::ResetRequest::default()).await.unwrap().into_inner();
    assert_eq!(reset.stopped_pods, 1, "its own running Pod");
    assert_forgotten(&emulator, "b-user", &b.sandbox_id).await;
    assert!(pods(&mut b_admin).await.is_empty() && jobs(&mut b_admin).await.is_empty());
    assert!(emulator.app().driver().effects_applied(Duration::from_secs(30)).await);
    assert!(runtime.killed().contains(&b_pod), "its processes are killed");

    assert_eq!(
        state_of(&sandbox_of(&emulator, "a-user", &a.sandbox_id).await),
        pb::State::Running,
        "org A is untouched"
    );
    assert!(sandbox_ids(&pods(&mut operator).await).contains(&a.sandbox_id.as_str()));
    let clock = operator.get_clock(emu::GetClockRequest {}).await.unwrap().into_inner().clock.unwrap();
    assert!(clock.frozen, "the cluster's clock is the operator's");
    emulator.stop().await;
}

#[tokio::test]
async fn the_operator_resets_one_organization_by_name_and_an_organization_only_its_own() {
    let Tenants { emulator, mut operator, mut b_admin, a, b, .. } = tenants().await;
    let refused = b_admin.reset(emu::ResetRequest { organization: "org-a".to_owned() }).await.unwrap_err();
    assert_eq!((refused.code(), reason(&refused).as_str()), (Code::PermissionDenied, "CWSANDBOX_PERMISSION_DENIED"));
    assert_eq!(
        state_of(&sandbox_of(&emulator, "a-user", &a.sandbox_id).await),
        pb::State::Running,
        "refused: nothing reset"
    );

    let reset = operator.reset(emu::ResetRequest { organization: "org-b".to_owned() }).await.unwrap().into_inner();
    assert_eq!(reset.stopped_pods, 1, "org B's running Pod");
    assert_forgotten(&emulator, "b-user", &b.sandbox_id).await;
    assert_eq!(
        state_of(&sandbox_of(&emulator, "a-user", &a.sandbox_id).await),
        pb::State::Running,
        "org A is untouched"
    );
    let own = b_admin.reset(emu::ResetRequest { organization: "org-b".to_owned() }).await.unwrap().into_inner();
    assert_eq!(own.stopped_pods, 0, "naming its own organization is its own reset");
    emulator.stop().await;
}

#[tokio::test]
async fn cluster_wide_calls_need_cluster_admin() {
    let Tenants { emulator, mut b_admin, .. } = tenants().await;
    let mut refused = Vec::new();
    macro_rules! call {
        ($method:ident, $request:expr) => {
            refused.push((stringify!($method), b_admin.$method($request).await.map(|_| ()).unwrap_err()))
        };
    }
    call!(get_values, emu::GetValuesRequest::default());
    call!(
        apply_values,
        emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml("slurmConfig: {KillWait: 5}".to_owned())),
            ..Default::default()
        }
    );
    call!(resume_node, emu::ResumeNodeRequest { node_name: "slurm-cpu-0".to_owned() });
    call!(freeze_clock, emu::FreezeClockRequest {});
    call!(advance_clock, emu::AdvanceClockRequest { duration: Some(pbjson_types::Duration { seconds: 1, nanos: 0 }) });
    call!(resume_clock, emu::ResumeClockRequest {});
    for (method, status) in &refused {
        assert_eq!(status.code(), Code::PermissionDenied, "{method}: {status:?}");
        assert!(status.message().contains("lacks the cluster_admin role"), "{method}: {}", status.message());
        let info = details(status).error_info().cloned().expect("ErrorInfo");
        assert_eq!(info.metadata.get("required_role").map(String::as_str), Some("cluster_admin"), "{method}");
    }
    let mut operator = emulator_service(&emulator, "operator").await;
    let clock = operator.get_clock(emu::GetClockRequest {}).await.unwrap().into_inner().clock.unwrap();
    assert!(clock.frozen, "still frozen: org B's ResumeClock changed nothing");
    emulator.stop().await;
}

/// GET (or another method) on the kube facade with curl in the clear; the HTTP status and body.
async fn kube(base_url: &str, token: &str, method: &str, path: &str) -> (u16, Value) {
    let (url, token, method) = (format!("{base_url}{path}"), token.to_owned(), method.to_owned());
    tokio::task::spawn_blocking(move || {
        let output = Command::new("curl")
            .args(["--silent", "--show-error", "--max-time", "30", "-X", &method, "-w", "\n%{http_code}"])
            .args(["-H", &format!("Authorization: Bearer {token}"), &url])
            .output()
            .expect("curl runs");
        assert!(output.status.success(), "curl failed: {}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8(output.stdout).expect("utf-8");
        let (json, status) = text.rsplit_once('\n').expect("status line");
        (status.parse().expect("HTTP status"), serde_json::from_str(json).unwrap_or(Value::Null))
    })
    .await
    .expect("curl task")
}

fn item_names(list: &Value) -> Vec<String> {
    list["items"].as_array().map_or_else(Vec::new, |items| {
        items.iter().map(|item| item["metadata"]["name"].as_str().unwrap_or_default().to_owned()).collect()
    })
}

#[tokio::test]
async fn the_kube_facade_shows_an_organization_only_its_own_pods() {
    let Tenants { emulator, mut operator, a, b, .. } = tenants().await;
    let base = emulator.info().base_url.clone();
    let ((a_namespace, a_name), (_, b_name)) =
        (name_of(&pod_of(&mut operator, &a).await), name_of(&pod_of(&mut operator, &b).await));

    let (status, list) = kube(&base, "b-admin", "GET", "/api/v1/pods").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(item_names(&list), std::slice::from_ref(&b_name), "{list}");
    let (status, events) = kube(&base, "b-admin", "GET", "/api/v1/events").await;
    assert_eq!(status, 200);
    assert!(!events.to_string().contains(&a.sandbox_id), "org A's Events leaked: {events}");

    let object = format!("/api/v1/namespaces/{a_namespace}/pods/{a_name}");
    for (method, path) in [("GET", object.clone()), ("GET", format!("{object}/log")), ("DELETE", object.clone())] {
        let (status, body) = kube(&base, "b-admin", method, &path).await;
        assert_eq!((status, body["reason"].as_str()), (404, Some("NotFound")), "{method} {path}: {body}");
    }
    assert_eq!(
        state_of(&sandbox_of(&emulator, "a-user", &a.sandbox_id).await),
        pb::State::Running,
        "the DELETE changed nothing"
    );

    let (status, list) = kube(&base, "operator", "GET", "/api/v1/pods").await;
    assert_eq!(status, 200);
    let names = item_names(&list);
    assert!(names.contains(&a_name) && names.contains(&b_name), "{names:?}");
    let (status, body) = kube(&base, "a-user", "GET", "/api/v1/pods").await;
    assert_eq!(status, 403, "{body}");
    assert!(body["message"].as_str().unwrap_or_default().contains("sandbox_admin or cluster_admin"), "{body}");
    emulator.stop().await;
}
