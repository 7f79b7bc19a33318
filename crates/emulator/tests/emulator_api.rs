//! The emulator's own API (`coreweave.sandbox.emulator.v1`) over gRPC with the generated tonic
//! client: a sandbox's placeholder job and Pod, scancel with COMPLETING until the Pod is gone,
//! values applied like `helm upgrade`, the clock driving a lifetime expiry, Slurm batch jobs,
//! nodes and partitions, reset, and PERMISSION_DENIED for users. The same RPCs over Connect JSON
//! with curl are in `emulator_api_connect.rs`.

mod common;

use std::collections::HashMap;

use common::*;
use cwsandbox_api::emulator_v1 as emu;
use cwsandbox_api::emulator_v1::emulator_service_client::EmulatorServiceClient;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::sandbox_service_client::SandboxServiceClient;
use cwsandbox_emulator::Emulator;
use tonic::Code;

type Admin = EmulatorServiceClient<Authed>;

async fn admin(emulator: &Emulator) -> Admin {
    EmulatorServiceClient::with_interceptor(channel(emulator).await, Bearer(emulator.info().admin_token.clone()))
}

async fn freeze(client: &mut Admin) -> emu::Clock {
    client.freeze_clock(emu::FreezeClockRequest {}).await.unwrap().into_inner().clock.unwrap()
}

/// The usual start of these tests: an admin client, a user's sandbox client, the clock frozen.
struct Frozen {
    emulator: Emulator,
    info: cwsandbox_emulator::ReadyInfo,
    client: Admin,
    sandboxes: SandboxServiceClient<Authed>,
    clock: emu::Clock,
}

async fn frozen(emulator: Emulator) -> Frozen {
    let info = emulator.info().clone();
    let mut client = admin(&emulator).await;
    let sandboxes = sandboxes(&emulator, &info.user_token).await;
    let clock = freeze(&mut client).await;
    Frozen { emulator, info, client, sandboxes, clock }
}

async fn advance_by(client: &mut Admin, seconds: i64) -> emu::Clock {
    let duration = pbjson_types::Duration { seconds, nanos: 0 };
    client
        .advance_clock(emu::AdvanceClockRequest { duration: Some(duration) })
        .await
        .unwrap()
        .into_inner()
        .clock
        .unwrap()
}

/// A sandbox with the annotations and requests the guide's examples use
/// (docs/facts/sunk-guide.md#step-4, docs/facts/sunk-guide.md#resources).
fn annotated_spec(runner_id: &str) -> pb::SandboxSpec {
    let mut spec = client_spec(runner_id);
    spec.annotations.insert("sunk.coreweave.com/partition".to_owned(), "hpc-prod".to_owned());
    spec.annotations.insert("sunk.coreweave.com/user-id".to_owned(), "1001".to_owned());
    let resources =
        |cpu: &str, memory: &str| Some(pb::Resources { cpu: cpu.to_owned(), memory: memory.to_owned(), gpu: None });
    spec.containers[0].resource_requirements =
        Some(pb::ResourceRequirements { requests: resources("1500m", "512Mi"), limits: resources("2", "1Gi") });
    spec
}

async fn jobs(client: &mut Admin, request: emu::ListJobsRequest) -> Vec<emu::Job> {
    client.list_jobs(request).await.unwrap().into_inner().jobs
}

async fn pods_with(client: &mut Admin, label_selector: &str) -> Vec<emu::Pod> {
    let request = emu::ListPodsRequest { label_selector: label_selector.to_owned(), ..Default::default() };
    client.list_pods(request).await.unwrap().into_inner().pods
}

fn source(job: &emu::Job) -> emu::JobSource {
    emu::JobSource::try_from(job.source).unwrap()
}

fn state(job: &emu::Job) -> emu::JobState {
    emu::JobState::try_from(job.state).unwrap()
}

#[tokio::test]
async fn a_sandbox_shows_its_placeholder_job_and_its_pod() {
    let Frozen { emulator, info, mut client, mut sandboxes, .. } = frozen(start().await).await;
    let created =
        sandboxes.create_sandbox(create_request(annotated_spec(&info.runner_id), "")).await.unwrap().into_inner();
    let id = created.sandbox_id.clone();
    advance_by(&mut client, 2).await;

    let listed = jobs(&mut client, emu::ListJobsRequest::default()).await;
    let mine: Vec<&emu::Job> = listed.iter().filter(|job| job.name.contains(&id)).collect();
    assert_eq!(mine.len(), 2, "one queue row and one accounting row: {listed:#?}");
    assert_eq!((source(mine[0]), source(mine[1])), (emu::JobSource::Queue, emu::JobSource::Accounting));
    let job = mine[0];
    assert_eq!(job.job_id, mine[1].job_id);
    assert_eq!(job.partition, "hpc-prod", "from sunk.coreweave.com/partition");
    assert_eq!((job.user.as_str(), job.uid, job.gid), ("alice", 1001, 1001), "from sunk.coreweave.com/user-id");
    assert_eq!(job.account, "research");
    assert_eq!((job.req_cpus, job.alloc_cpus, job.req_mem_mb), (2, 2, 512), "1500m rounds up to 2 CPUs; 512Mi is 512M");
    assert_eq!(state(job), emu::JobState::Running);
    assert!(!job.completing);
    assert_eq!(job.extra, ": started", "the placeholder script started after the prolog");
    assert_eq!(emu::JobKind::try_from(job.kind).unwrap(), emu::JobKind::Placeholder);
    assert_eq!(emu::OverSubscribe::try_from(job.over_subscribe).unwrap(), emu::OverSubscribe::Ok);
    assert_eq!((job.exit_code, job.exit_signal, job.cancelled_by_uid), (0, 0, None));
    assert!(job.node_list.starts_with("slurm-cpu-"), "{}", job.node_list);
    assert_eq!(job.alloc_nodes, 1);
    assert_eq!(job.elapsed_seconds, 2, "allocated at submit, 2 s ago");
    assert!(job.start_time.is_some() && job.end_time.is_none());
    let pod_of_job = job.pod.clone().unwrap();
    assert_eq!((pod_of_job.sandbox_id.as_str(), pod_of_job.exists), (id.as_str(), true));

    let pods = pods_with(&mut client, &format!("sandbox.coreweave.com/sandbox-id={id}")).await;
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    let metadata = pod.metadata.clone().unwrap();
    let spec = pod.spec.clone().unwrap();
    let status = pod.status.clone().unwrap();
    assert_eq!(metadata.name, pod_of_job.name);
    assert_eq!(metadata.namespace, "sandbox-alice");
    assert_eq!(metadata.uid, pod_of_job.uid);
    assert!(metadata.creation_timestamp.is_some() && metadata.deletion_timestamp.is_none());
    assert!(!metadata.resource_version.is_empty());
    assert_eq!(metadata.annotations["sunk.coreweave.com/partition"], "hpc-prod");
    assert_eq!(spec.scheduler_name, "slurm-scheduler");
    let slurm_node = job.node_list.clone();
    assert_eq!(spec.node_name, slurm_node.replace("slurm-", "node-"), "bound to the Node hosting the Slurm node");
    assert_eq!(spec.termination_grace_period_seconds, 30);
    let container = &spec.containers[0];
    assert_eq!((container.name.as_str(), container.image.as_str()), ("main", "python:3.11"));
    assert_eq!(container.command, ["/bin/sh"]);
    assert_eq!(
        container.requests,
        HashMap::from([("cpu".to_owned(), "1500m".to_owned()), ("memory".to_owned(), "512Mi".to_owned())])
    );
    assert_eq!(container.limits["memory"], "1Gi");
    assert_eq!(status.phase, "Running");
    let conditions: Vec<(&str, &str)> =
        status.conditions.iter().map(|condition| (condition.r#type.as_str(), condition.status.as_str())).collect();
    assert_eq!(
        conditions,
        [("Initialized", "True"), ("Ready", "True"), ("ContainersReady", "True"), ("PodScheduled", "True")]
    );
    assert!(status.start_time.is_some());
    let container_status = &status.container_statuses[0];
    assert!(container_status.ready);
    assert!(matches!(container_status.state.as_ref().unwrap().state, Some(emu::container_state::State::Running(_))));
    let origin = pod.origin.clone().unwrap();
    assert_eq!(emu::PodOriginKind::try_from(origin.kind).unwrap(), emu::PodOriginKind::Sandbox);
    assert_eq!((origin.sandbox_id.as_str(), origin.placeholder_job_id), (id.as_str(), Some(job.job_id)));

    // Field selectors, namespaces and the other Pods of the cluster.
    let by_node =
        emu::ListPodsRequest { field_selector: format!("spec.nodeName={}", spec.node_name), ..Default::default() };
    let on_node = client.list_pods(by_node).await.unwrap().into_inner().pods;
    assert!(on_node.iter().any(|pod| pod.metadata.as_ref().unwrap().name == slurm_node), "the slurmd Pod is there too");
    let slurmd = pods_with(&mut client, "app.kubernetes.io/name in (slurmd)").await;
    assert_eq!(slurmd.len(), 4);
    let bad = emu::ListPodsRequest { field_selector: "spec.foo=1".to_owned(), ..Default::default() };
    let error = client.list_pods(bad).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(details(&error).bad_request().unwrap().field_violations[0].field, "field_selector");

    // The Node carries the lock taint and counts the Pod's requests.
    let nodes = client
        .list_nodes(emu::ListNodesRequest {
            field_selector: format!("metadata.name={}", spec.node_name),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .nodes;
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].slurm_node, slurm_node);
    assert!(nodes[0].taints.iter().any(|taint| taint.key == "sunk.coreweave.com/lock" && taint.effect == "NoExecute"));
    assert_eq!(nodes[0].allocatable["cpu"], "16");
    assert_eq!(nodes[0].requested["cpu"], "2500m", "slurmd's 1 CPU and the sandbox's 1500m");

    // Its Events tell the story.
    let events = client
        .list_events(emu::ListEventsRequest { involved_object_uid: metadata.uid.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .events;
    let reasons: Vec<&str> = events.iter().map(|event| event.reason.as_str()).collect();
    assert_eq!(reasons, ["Submitted", "Scheduled", "Started"]);
    assert_eq!(events[0].source.as_ref().unwrap().component, "sunk-scheduler");
    assert_eq!(events[0].metadata.as_ref().unwrap().namespace, "sandbox-alice");
    assert_eq!(events[0].count, 1);

    // Slurm nodes: the sandbox's node is mixed.
    let slurm_nodes = client
        .list_slurm_nodes(emu::ListSlurmNodesRequest { names: vec![slurm_node.clone()], ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .nodes;
    assert_eq!(slurm_nodes[0].alloc_cpus, 2);
    assert_eq!(slurm_nodes[0].job_ids, [job.job_id]);
    assert_eq!(emu::SlurmNodeState::try_from(slurm_nodes[0].state).unwrap(), emu::SlurmNodeState::Mixed);
    emulator.stop().await;
}

#[tokio::test]
async fn scancel_leaves_the_job_completing_in_the_queue_until_the_pod_is_gone() {
    let Frozen { emulator, info, mut client, mut sandboxes, .. } = frozen(start().await).await;
    let created =
        sandboxes.create_sandbox(create_request(annotated_spec(&info.runner_id), "")).await.unwrap().into_inner();
    advance_by(&mut client, 2).await;
    let job_id = jobs(&mut client, emu::ListJobsRequest::default()).await[0].job_id;

    let cancelled =
        client.cancel_job(emu::CancelJobRequest { job_id, uid: Some(1001) }).await.unwrap().into_inner().job.unwrap();
    assert_eq!(source(&cancelled), emu::JobSource::Queue);
    assert_eq!(state(&cancelled), emu::JobState::Cancelled);
    assert!(cancelled.completing, "CANCELLED|COMPLETING while the Pod terminates");
    // The queue row is the controller's: its ExitCode takes the script's SIGTERM.
    assert_eq!((cancelled.exit_code, cancelled.exit_signal), (0, 15));
    let accounting = jobs(
        &mut client,
        emu::ListJobsRequest { source: emu::JobSource::Accounting as i32, job_ids: vec![job_id], ..Default::default() },
    )
    .await;
    assert_eq!(accounting.len(), 1);
    assert_eq!(state(&accounting[0]), emu::JobState::Cancelled);
    assert!(!accounting[0].completing, "accounting never shows COMPLETING");
    assert_eq!(accounting[0].cancelled_by_uid, Some(1001), "sacct: CANCELLED by 1001");
    // The job line 0:0 as Slurm records it; the batch step carries SIGTERM.
    assert_eq!((accounting[0].exit_code, accounting[0].exit_signal), (0, 0));
    let batch = accounting[0].steps.iter().find(|step| step.name == "batch").expect("a batch step");
    assert_eq!((batch.exit_code, batch.exit_signal), (0, 15));
    assert!(accounting[0].end_time.is_some(), "End is the time of the cancel");

    let selector = format!("sandbox.coreweave.com/sandbox-id={}", created.sandbox_id);
    let terminating = pods_with(&mut client, &selector).await;
    assert!(terminating[0].metadata.as_ref().unwrap().deletion_timestamp.is_some(), "the Pod is Terminating");
    assert_eq!(terminating[0].metadata.as_ref().unwrap().deletion_grace_period_seconds, Some(30));

    // A second scancel is refused as Slurm refuses it; unknown ids are NOT_FOUND in Slurm's words.
    let again = client.cancel_job(emu::CancelJobRequest { job_id, uid: None }).await.unwrap_err();
    assert_eq!(again.code(), Code::FailedPrecondition);
    assert!(again.message().ends_with("Job/step already completing or completed"), "{}", again.message());
    let unknown = client.cancel_job(emu::CancelJobRequest { job_id: 424_242, uid: None }).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    assert_eq!(unknown.message(), "scancel: error: Kill job error on job id 424242: Invalid job id specified");
    assert_eq!(reason(&unknown), "CWSANDBOX_JOB_NOT_FOUND");

    // The Pod's grace (30 s) runs out: the Pod goes, the epilog ends COMPLETING, the job leaves.
    advance_by(&mut client, 29).await;
    let queue = emu::ListJobsRequest { source: emu::JobSource::Queue as i32, ..Default::default() };
    assert!(jobs(&mut client, queue.clone()).await[0].completing, "still completing before the grace is over");
    advance_by(&mut client, 2).await;
    assert!(pods_with(&mut client, &selector).await.is_empty());
    // No longer COMPLETING: the controller keeps the ended job for MinJobAge (squeue -t all,
    // scontrol show job), then only the accounting has it.
    let kept = jobs(&mut client, queue.clone()).await;
    assert_eq!(kept.len(), 1);
    assert!(!kept[0].completing && state(&kept[0]) == emu::JobState::Cancelled, "{kept:?}");
    advance_by(&mut client, 300).await;
    assert!(jobs(&mut client, queue).await.is_empty(), "squeue -t all no longer shows it");
    let after = jobs(&mut client, emu::ListJobsRequest::default()).await;
    assert_eq!(after.len(), 1);
    assert_eq!((source(&after[0]), state(&after[0])), (emu::JobSource::Accounting, emu::JobState::Cancelled));
    assert!(!after[0].pod.as_ref().unwrap().exists);
    assert_eq!(after[0].pod.as_ref().unwrap().sandbox_id, created.sandbox_id, "still linked through the sandbox");
    let sandbox = sandboxes
        .get_sandbox(pb::GetSandboxRequest { sandbox_id: created.sandbox_id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(&sandbox), pb::State::Terminated);
    emulator.stop().await;
}

fn scheduler_args(pods: &[emu::Pod]) -> Vec<String> {
    pods[0].spec.as_ref().unwrap().containers[0].args.clone()
}

#[tokio::test]
async fn apply_values_behaves_like_helm_upgrade_and_names_bad_keys() {
    let emulator = start_with("slurmConfig:\n  KillWait: 30\n", None).await;
    let mut client = admin(&emulator).await;
    let scheduler = "app.kubernetes.io/name=sunk-scheduler";
    assert!(scheduler_args(&pods_with(&mut client, scheduler).await).contains(&"--slurm-kill-wait=30s".to_owned()));

    let values = client.get_values(emu::GetValuesRequest::default()).await.unwrap().into_inner();
    assert!(values.yaml.contains("KillWait: 30"), "{}", values.yaml);
    assert!(values.values.unwrap().fields.contains_key("slurmConfig"));

    // The overlay of the brief as YAML text.
    let applied = client
        .apply_values(emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml("slurmConfig: {KillWait: 60}\n".to_owned())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(applied.yaml.contains("KillWait: 60"), "{}", applied.yaml);
    assert!(applied.yaml.contains("name: slurm-scheduler"), "untouched keys stay: {}", applied.yaml);
    assert_eq!(applied.changes, ["slurmConfig.KillWait: 30 -> 60"], "what the apply changed");
    let uids = |pods: &[emu::Pod]| {
        let mut uids: Vec<String> =
            pods.iter().filter_map(|pod| pod.metadata.as_ref()).map(|m| m.uid.clone()).collect();
        uids.sort();
        uids
    };
    let before = uids(&pods_with(&mut client, "").await);
    // The same values again change nothing and restart nothing, as `helm upgrade` does.
    let again = client
        .apply_values(emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml("slurmConfig: {KillWait: 60}\n".to_owned())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(again.changes.is_empty(), "{:?}", again.changes);
    assert_eq!(uids(&pods_with(&mut client, "").await), before, "no Pod was restarted");
    let args = scheduler_args(&pods_with(&mut client, scheduler).await);
    assert!(args.contains(&"--slurm-kill-wait=60s".to_owned()), "{args:?}");
    let config_maps = client
        .list_config_maps(emu::ListConfigMapsRequest { namespace: "tenant-slurm".to_owned(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .config_maps;
    assert!(config_maps[0].data["scheduler.conf"].contains("killWait: 60s"), "{:?}", config_maps[0].data);

    // The same as a Struct; validate_only changes nothing.
    let tree = serde_json::from_value(serde_json::json!({"slurmConfig": {"KillWait": 90}})).unwrap();
    let checked = client
        .apply_values(emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Values(tree)),
            validate_only: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(checked.yaml.contains("KillWait: 90"));
    assert_eq!(checked.changes, ["slurmConfig.KillWait: 60 -> 90"], "what it would change");
    assert!(scheduler_args(&pods_with(&mut client, scheduler).await).contains(&"--slurm-kill-wait=60s".to_owned()));

    // Bad keys are named, and nothing changes.
    let misspelt = client
        .apply_values(emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml("slurmConfig:\n  KillWiat: 5\n".to_owned())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(misspelt.code(), Code::InvalidArgument);
    assert!(
        misspelt.message().starts_with("yaml.slurmConfig.KillWiat: unknown field `KillWiat`"),
        "{}",
        misspelt.message()
    );
    assert_eq!(details(&misspelt).bad_request().unwrap().field_violations[0].field, "yaml.slurmConfig.KillWiat");
    let wrong_type = client
        .apply_values(emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml("slurmConfig: {KillWait: soon}\n".to_owned())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(wrong_type.message().starts_with("yaml.slurmConfig.KillWait: "), "{}", wrong_type.message());
    let incomplete = client
        .apply_values(emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml("slurmConfig: {KillWait: 60}\n".to_owned())),
            mode: emu::ApplyMode::Replace as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(incomplete.message().contains("missing field `sunk`"), "{}", incomplete.message());
    let tokens = client
        .apply_values(emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml("auth: {tokens: []}\n".to_owned())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(details(&tokens).bad_request().unwrap().field_violations[0].field, "yaml.auth");
    let bad_quantity = client
        .apply_values(emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml(
                "nodeSets:\n  - {name: cpu, replicas: 4, cpu: lots, memory: 64Gi, slurmd: {requests: {cpu: '1', memory: 4Gi}}}\n"
                    .to_owned(),
            )),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(bad_quantity.message().starts_with("nodeSets[0].cpu: "), "{}", bad_quantity.message());
    assert!(scheduler_args(&pods_with(&mut client, scheduler).await).contains(&"--slurm-kill-wait=60s".to_owned()));
    emulator.stop().await;
}

#[tokio::test]
async fn the_clock_drives_a_lifetime_expiry_deterministically() {
    let Frozen { emulator, info, mut client, mut sandboxes, clock: frozen, .. } = frozen(start().await).await;
    assert!(frozen.frozen);
    let start = frozen.now.unwrap();
    let mut spec = client_spec(&info.runner_id);
    spec.max_lifetime_seconds = 30;
    let created = sandboxes.create_sandbox(create_request(spec, "")).await.unwrap().into_inner();
    let get = pb::GetSandboxRequest { sandbox_id: created.sandbox_id.clone() };

    let clock = advance_by(&mut client, 29).await;
    assert_eq!(clock.now.unwrap().seconds, start.seconds + 29, "frozen time moves only by advances");
    let read = client.get_clock(emu::GetClockRequest {}).await.unwrap().into_inner().clock.unwrap();
    assert_eq!(read.now, clock.now);
    assert_eq!(state_of(&sandboxes.get_sandbox(get.clone()).await.unwrap().into_inner()), pb::State::Running);

    advance_by(&mut client, 1).await;
    assert_eq!(
        state_of(&sandboxes.get_sandbox(get.clone()).await.unwrap().into_inner()),
        pb::State::Terminating,
        "the lifetime timer fires exactly at 30 s"
    );
    advance_by(&mut client, 30).await;
    let ended = sandboxes.get_sandbox(get).await.unwrap().into_inner();
    assert_eq!(state_of(&ended), pb::State::Terminated);
    assert!(ended.status.unwrap().state_reason.contains("30"), "the reason names the lifetime");

    let resumed = client.resume_clock(emu::ResumeClockRequest {}).await.unwrap().into_inner().clock.unwrap();
    assert!(!resumed.frozen);
    assert!(resumed.now.unwrap().seconds >= start.seconds + 60, "time resumes from where it stood");
    let error = client.advance_clock(emu::AdvanceClockRequest { duration: None }).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    emulator.stop().await;
}

#[tokio::test]
async fn batch_jobs_nodes_partitions_pod_deletion_and_reset() {
    let Frozen { emulator, info, mut client, mut sandboxes, .. } = frozen(start().await).await;

    let partitions = client.list_partitions(emu::ListPartitionsRequest {}).await.unwrap().into_inner().partitions;
    let names: Vec<(&str, bool)> =
        partitions.iter().map(|partition| (partition.name.as_str(), partition.default)).collect();
    assert_eq!(names, [("cpu", true), ("hpc-prod", false), ("sandboxes", false)]);
    assert_eq!(partitions[0].nodes.len(), 4);
    assert_eq!(partitions[0].total_cpus, 64);
    assert_eq!(emu::PreemptMode::try_from(partitions[0].preempt_mode).unwrap(), emu::PreemptMode::Off);

    let submitted = client
        .submit_batch_job(emu::SubmitBatchJobRequest {
            name: "train".to_owned(),
            user: "bob".to_owned(),
            cpus: 16,
            mem_mb: 1024,
            over_subscribe: emu::OverSubscribe::No as i32,
            run_seconds: Some(600),
            command: "/home/bob/train.sh".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!((submitted.user.as_str(), submitted.uid, submitted.partition.as_str()), ("bob", 1002, "cpu"));
    assert_eq!(submitted.command, "/home/bob/train.sh", "scontrol show job's Command=");
    assert_eq!(state(&submitted), emu::JobState::Running);
    assert_eq!(emu::JobKind::try_from(submitted.kind).unwrap(), emu::JobKind::Batch);
    assert_eq!(emu::OverSubscribe::try_from(submitted.over_subscribe).unwrap(), emu::OverSubscribe::No);
    assert_eq!(submitted.run_seconds, Some(600));
    let node = client
        .list_slurm_nodes(emu::ListSlurmNodesRequest { names: vec![submitted.node_list.clone()], ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .nodes
        .remove(0);
    assert_eq!(emu::SlurmNodeState::try_from(node.state).unwrap(), emu::SlurmNodeState::Allocated);
    assert_eq!((node.cpus, node.alloc_cpus, node.real_memory_mb, node.alloc_memory_mb), (16, 16, 65536, 1024));
    let unknown_user = client
        .submit_batch_job(emu::SubmitBatchJobRequest { user: "mallory".to_owned(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(details(&unknown_user).bad_request().unwrap().field_violations[0].field, "user");
    let bad_partition = client
        .submit_batch_job(emu::SubmitBatchJobRequest { partition: "gpu".to_owned(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(bad_partition.message(), "partition: Batch job submission failed: Invalid partition name specified");

    let resumed = client
        .resume_node(emu::ResumeNodeRequest { node_name: "slurm-cpu-0".to_owned() })
        .await
        .unwrap()
        .into_inner()
        .node
        .unwrap();
    assert_eq!(resumed.drain_reason, "");
    // A drain records who set it (the uid given, else the caller's) and when.
    let now = client.get_clock(emu::GetClockRequest {}).await.unwrap().into_inner().clock.unwrap().now;
    let request =
        emu::DrainNodeRequest { node_name: "slurm-cpu-1".to_owned(), reason: "disk".to_owned(), uid: Some(1001) };
    let drained = client.drain_node(request).await.unwrap().into_inner().node.unwrap();
    assert_eq!((drained.drain_user.as_str(), drained.drain_uid), ("alice", Some(1001)));
    assert_eq!(drained.drain_time.map(|at| at.seconds), now.map(|now| now.seconds));
    assert!(drained.boot_time.is_some() && drained.last_busy_time.is_some(), "{drained:?}");
    let request = emu::DrainNodeRequest { node_name: "slurm-cpu-1".to_owned(), reason: "again".to_owned(), uid: None };
    let by_operator = client.drain_node(request).await.unwrap().into_inner().node.unwrap();
    assert_eq!(
        (by_operator.drain_user.as_str(), by_operator.drain_uid),
        ("root", Some(0)),
        "the operator's token is root's"
    );
    let config = client.get_slurm_config(emu::GetSlurmConfigRequest {}).await.unwrap().into_inner().config.unwrap();
    assert_eq!((config.cluster_name.as_str(), config.slurmctld_host.as_str()), ("slurm", "slurm-controller-0"));
    assert_eq!(config.kill_wait_seconds, 60);
    assert!(config.next_job_id > config.first_job_id, "{config:?}");
    client.resume_node(emu::ResumeNodeRequest { node_name: "slurm-cpu-1".to_owned() }).await.unwrap();
    let unknown_node =
        client.resume_node(emu::ResumeNodeRequest { node_name: "slurm-gpu-9".to_owned() }).await.unwrap_err();
    assert_eq!(unknown_node.code(), Code::NotFound);
    assert_eq!(reason(&unknown_node), "CWSANDBOX_NODE_NOT_FOUND");

    // kubectl delete pod on a sandbox Pod: Terminating for its grace, the sandbox with it.
    let created =
        sandboxes.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    advance_by(&mut client, 2).await;
    let pod =
        pods_with(&mut client, &format!("sandbox.coreweave.com/sandbox-id={}", created.sandbox_id)).await.remove(0);
    let metadata = pod.metadata.unwrap();
    let deleted = client
        .delete_pod(emu::DeletePodRequest {
            namespace: metadata.namespace.clone(),
            name: metadata.name.clone(),
            grace_period_seconds: Some(5),
        })
        .await
        .unwrap()
        .into_inner()
        .pod
        .unwrap();
    assert_eq!(deleted.metadata.unwrap().deletion_grace_period_seconds, Some(5));
    let missing = client
        .delete_pod(emu::DeletePodRequest {
            namespace: "default".to_owned(),
            name: "nope".to_owned(),
            grace_period_seconds: None,
        })
        .await
        .unwrap_err();
    assert_eq!((missing.code(), reason(&missing).as_str()), (Code::NotFound, "CWSANDBOX_POD_NOT_FOUND"));
    let namespaces =
        client.list_namespaces(emu::ListNamespacesRequest::default()).await.unwrap().into_inner().namespaces;
    assert!(namespaces.iter().any(|namespace| namespace.metadata.as_ref().unwrap().name == "sandbox-alice"));

    // Reset: the configured world again, with the clock kept.
    let before = client.get_clock(emu::GetClockRequest {}).await.unwrap().into_inner().clock.unwrap();
    let reset = client.reset(emu::ResetRequest::default()).await.unwrap().into_inner();
    assert_eq!(reset.clock.as_ref().unwrap().now, before.now);
    assert!(reset.clock.unwrap().frozen);
    assert!(jobs(&mut client, emu::ListJobsRequest::default()).await.is_empty());
    assert!(pods_with(&mut client, "sandbox.coreweave.com/sandbox-id").await.is_empty());
    let gone = sandboxes.get_sandbox(pb::GetSandboxRequest { sandbox_id: created.sandbox_id }).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let namespaces =
        client.list_namespaces(emu::ListNamespacesRequest::default()).await.unwrap().into_inner().namespaces;
    assert!(!namespaces.iter().any(|namespace| namespace.metadata.as_ref().unwrap().name == "sandbox-alice"));
    emulator.stop().await;
}

#[tokio::test]
async fn reset_stops_running_sandbox_processes_through_the_runtime() {
    let runtime = FakeRuntime::new();
    let Frozen { emulator, info, mut client, mut sandboxes, .. } = frozen(
        start_with("", Some(runtime.clone() as std::sync::Arc<dyn cwsandbox_emulator::runtime::SandboxRuntime>)).await,
    )
    .await;
    sandboxes.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap();
    advance_by(&mut client, 2).await;
    assert_eq!(runtime.started().len(), 1);
    let reset = client.reset(emu::ResetRequest::default()).await.unwrap().into_inner();
    assert_eq!(reset.stopped_pods, 1);
    let started = runtime.started()[0].pod_uid.to_string();
    cwsandbox_testkit::eventually("the old Pod's processes to be killed", || async {
        let killed = runtime.killed();
        if killed.contains(&started) { Ok(()) } else { Err(killed) }
    })
    .await;
    emulator.stop().await;
}

#[tokio::test]
async fn users_get_permission_denied_on_every_rpc() {
    let emulator = start().await;
    let mut user =
        EmulatorServiceClient::with_interceptor(channel(&emulator).await, Bearer(emulator.info().user_token.clone()));
    let mut codes = Vec::new();
    macro_rules! call {
        ($method:ident, $request:expr) => {
            codes.push((stringify!($method), user.$method($request).await.map(|_| ()).unwrap_err()))
        };
    }
    call!(get_values, emu::GetValuesRequest::default());
    call!(apply_values, emu::ApplyValuesRequest::default());
    call!(list_pods, emu::ListPodsRequest::default());
    call!(delete_pod, emu::DeletePodRequest::default());
    call!(list_nodes, emu::ListNodesRequest::default());
    call!(list_events, emu::ListEventsRequest::default());
    call!(list_config_maps, emu::ListConfigMapsRequest::default());
    call!(list_namespaces, emu::ListNamespacesRequest::default());
    call!(cancel_job, emu::CancelJobRequest::default());
    call!(submit_batch_job, emu::SubmitBatchJobRequest::default());
    call!(resume_node, emu::ResumeNodeRequest::default());
    call!(drain_node, emu::DrainNodeRequest::default());
    call!(freeze_clock, emu::FreezeClockRequest {});
    call!(advance_clock, emu::AdvanceClockRequest::default());
    call!(resume_clock, emu::ResumeClockRequest {});
    call!(reset, emu::ResetRequest::default());
    call!(prune_images, emu::PruneImagesRequest {});
    call!(list_images, emu::ListImagesRequest {});
    call!(remove_image, emu::RemoveImageRequest { name: "busybox:1".to_owned() });
    call!(load_images, futures::stream::iter([emu::LoadImagesRequest { chunk: vec![0; 16] }]));
    // The Slurm views (ListJobs, ListSlurmNodes, ListPartitions, ListSlurmUsers) and the clock
    // are every Slurm user's: tests/tenants_and_faults.rs.
    assert_eq!(codes.len(), 20);
    for (method, status) in &codes {
        assert_eq!(status.code(), Code::PermissionDenied, "{method}: {status:?}");
        assert_eq!(reason(status), "CWSANDBOX_PERMISSION_DENIED", "{method}");
    }
    let mut anonymous = EmulatorServiceClient::with_interceptor(channel(&emulator).await, Bearer(String::new()));
    let error = anonymous.get_clock(emu::GetClockRequest {}).await.unwrap_err();
    assert!(user.get_clock(emu::GetClockRequest {}).await.is_ok(), "the clock is every caller's");
    assert_eq!(error.code(), Code::Unauthenticated);
    emulator.stop().await;
}

/// PruneImages on an emulator that pulls no images (no runtime, or one without an image cache):
/// nothing to remove, said by an empty `image_cache`.
#[tokio::test]
async fn prune_images_without_an_image_cache_removes_nothing() {
    for runtime in [None, Some(FakeRuntime::new() as std::sync::Arc<dyn cwsandbox_emulator::runtime::SandboxRuntime>)] {
        let emulator = start_with("", runtime).await;
        let mut client = admin(&emulator).await;
        let pruned = client.prune_images(emu::PruneImagesRequest {}).await.unwrap().into_inner();
        assert_eq!(pruned, emu::PruneImagesResponse::default());
        emulator.stop().await;
    }
}

/// The other image RPCs on an emulator that runs no images: an empty listing; loading and
/// removing say why they cannot (FAILED_PRECONDITION), naming the runtime to use.
#[tokio::test]
async fn image_rpcs_without_an_image_cache_say_why() {
    for runtime in [None, Some(FakeRuntime::new() as std::sync::Arc<dyn cwsandbox_emulator::runtime::SandboxRuntime>)] {
        let emulator = start_with("", runtime).await;
        let mut client = admin(&emulator).await;
        let listed = client.list_images(emu::ListImagesRequest {}).await.unwrap().into_inner();
        assert_eq!(listed, emu::ListImagesResponse::default());
        let chunks = futures::stream::iter([emu::LoadImagesRequest { chunk: b"not an archive".to_vec() }]);
        let error = client.load_images(chunks).await.unwrap_err();
        assert_eq!(error.code(), Code::FailedPrecondition, "{error:?}");
        assert!(error.message().contains("runs no images") && error.message().contains("--runtime oci"), "{error:?}");
        let error = client.remove_image(emu::RemoveImageRequest { name: "busybox:1".to_owned() }).await.unwrap_err();
        assert_eq!(error.code(), Code::FailedPrecondition, "{error:?}");
        let error = client.remove_image(emu::RemoveImageRequest::default()).await.unwrap_err();
        assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
        emulator.stop().await;
    }
}
