//! The serverless pool (`SANDBOX_MODE_SERVERLESS`, values `serverless:`): sandboxes that need no
//! runner and no SUNK run on the pool's own Nodes through the default scheduler and the kubelet;
//! a pool without room refuses at creation with a reason the published client spills over on; a
//! pool turned off refuses with one it never spills over on.

mod common;

use std::time::Duration;

use common::*;
use cwsandbox_api::sandbox_v1::{Container, ResourceRequirements, Resources, SandboxMode, SandboxSpec};
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::error::{Reason, SimError};
use cwsandbox_sim::sandbox::{Owner, SandboxFilter, SandboxState};
use cwsandbox_sim::world::{Effect, PodLaunch};

fn owner(org: &str) -> Owner {
    Owner { org: org.to_owned(), user: "alice".to_owned() }
}

/// What `Sandbox.run(placement_mode="serverless")` sends, asking for `cpu` and `memory`.
fn serverless_spec(cpu: &str, memory: &str) -> SandboxSpec {
    let resources = Resources { cpu: cpu.to_owned(), memory: memory.to_owned(), gpu: None };
    SandboxSpec {
        containers: vec![Container {
            resource_requirements: Some(ResourceRequirements {
                requests: Some(resources.clone()),
                limits: Some(resources),
            }),
            ..client_container()
        }],
        mode: SandboxMode::Serverless as i32,
        ..SandboxSpec::default()
    }
}

fn pool(modify: impl FnOnce(&mut Values)) -> Harness {
    let mut values = Values::scenario(Scenario::Ready);
    modify(&mut values);
    harness_with(values)
}

fn all(h: &Harness, org: &str) -> usize {
    let filter = SandboxFilter { show_terminated: true, ..Default::default() };
    h.world.list_sandboxes(org, &filter, 0, "").unwrap().0.len()
}

#[test]
fn a_serverless_sandbox_runs_on_the_pool_with_no_runner_and_no_slurm_job() {
    let mut h = pool(|_| {});
    // An organization with no runner at all: serverless needs none.
    let created = h.world.create_sandbox(&owner("no-runners-org"), serverless_spec("1", "1Gi"), "", "r-1").unwrap();
    assert_eq!(created.state, SandboxState::Running, "{}", created.state_reason);
    assert!(created.node_name.as_deref().is_some_and(|node| node.starts_with("node-serverless-")), "{created:?}");
    assert_eq!(created.runner_id, "serverless");
    assert_eq!(created.job_id, None);
    assert_eq!(h.world.slurm.accounted_jobs(), 0, "SUNK never saw it");
    assert_eq!(created.spec().mode, SandboxMode::Serverless as i32, "the mode is echoed");
    let pod = h.world.cluster.pod(&created.pod_uid).unwrap().clone();
    assert_eq!(pod.scheduler_name, "default-scheduler", "the runner policy's schedulerName is not applied");
    assert_eq!(pod.labels["sandbox.coreweave.com/mode"], "serverless");
    let effects = h.world.take_effects();
    assert!(
        effects.iter().any(
            |effect| matches!(effect, Effect::StartPod(PodLaunch { sandbox_id: Some(id), .. }) if *id == created.id)
        ),
        "its command runs: {effects:?}"
    );
    // The same organization's CKS placement still needs a runner.
    let mut cks = serverless_spec("1", "1Gi");
    cks.mode = SandboxMode::Cks as i32;
    let error = h.world.create_sandbox(&owner("no-runners-org"), cks, "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::NoSuitableRunner));

    // It lives the ordinary life: its main process exits, it completes with the code.
    h.world.sandbox_exited(&created.id, 0);
    let ended = h.world.get_sandbox("no-runners-org", &created.id).unwrap();
    assert_eq!((ended.state, ended.exit_code), (SandboxState::Completed, Some(0)));
    assert_eq!(h.world.get_sandbox("default-org", &created.id).unwrap_err().reason(), Some(Reason::SandboxNotFound));
}

#[test]
fn the_runner_policy_does_not_apply_to_serverless_sandboxes() {
    let mut h = pool(|values| {
        values.runners[0].policy = Some(serde_json::json!({
            "base": {"spec": {"schedulerName": "slurm-scheduler"}},
            "constraints": {"resources": {"cpuCeiling": "1"}}
        }));
    });
    let mut cks = serverless_spec("2", "1Gi");
    cks.mode = SandboxMode::Cks as i32;
    let error = h.world.create_sandbox(&owner("default-org"), cks, "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::ResourceCeilingExceeded), "the runner's ceiling holds on CKS");
    let created = h.world.create_sandbox(&owner("default-org"), serverless_spec("2", "1Gi"), "", "").unwrap();
    assert_eq!(created.state, SandboxState::Running, "{}", created.state_reason);
    assert_eq!(created.resolved.containers[0].requests.cpu.unwrap().millis(), 2000);
}

#[test]
fn the_organizations_quota_refuses_with_a_spillover_reason_until_a_sandbox_is_gone() {
    let mut h = pool(|values| values.serverless.max_sandboxes_per_organization = 1);
    let first = h.world.create_sandbox(&owner("default-org"), serverless_spec("1", "1Gi"), "", "").unwrap();
    let error = h.world.create_sandbox(&owner("default-org"), serverless_spec("1", "1Gi"), "", "").unwrap_err();
    match &error {
        SimError::ResourceExhausted { reason, retry_after, message } => {
            assert_eq!(*reason, Reason::RunnerCapacityExhausted);
            assert!(retry_after.is_some(), "a retry may succeed");
            assert!(message.contains("maxSandboxesPerOrganization"), "{message}");
        }
        other => panic!("expected RESOURCE_EXHAUSTED, got {other:?}"),
    }
    assert_eq!(all(&h, "default-org"), 1, "a refusal creates nothing");
    // The quota is the organization's: another one still gets a sandbox.
    h.world.create_sandbox(&owner("other-org"), serverless_spec("1", "1Gi"), "", "").unwrap();

    // A terminating sandbox still holds its room; once its Pod is gone the room is free.
    h.world.delete_sandbox("default-org", &first.id, 5).unwrap();
    assert_eq!(h.world.get_sandbox("default-org", &first.id).unwrap().state, SandboxState::Terminating);
    let error = h.world.create_sandbox(&owner("default-org"), serverless_spec("1", "1Gi"), "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::RunnerCapacityExhausted));
    h.advance(5);
    assert_eq!(h.world.get_sandbox("default-org", &first.id).unwrap().state, SandboxState::Completed);
    let second = h.world.create_sandbox(&owner("default-org"), serverless_spec("1", "1Gi"), "", "").unwrap();
    assert_eq!(second.state, SandboxState::Running);
}

#[test]
fn a_pool_without_room_refuses_and_a_sandbox_no_node_holds_is_over_the_ceiling() {
    let mut h = pool(|values| {
        values.serverless.nodes = 1;
        values.serverless.cpu = "2".to_owned();
        values.serverless.memory = "4Gi".to_owned();
    });
    let org = owner("default-org");
    let first = h.world.create_sandbox(&org, serverless_spec("1500m", "1Gi"), "", "").unwrap();
    assert_eq!(first.node_name.as_deref(), Some("node-serverless-0"));
    let error = h.world.create_sandbox(&org, serverless_spec("1", "1Gi"), "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::RunnerCapacityExhausted), "{error}");
    assert!(error.to_string().contains("no serverless node has 1 cpu"), "{error}");
    h.world.create_sandbox(&org, serverless_spec("500m", "1Gi"), "", "").unwrap();

    for (cpu, memory, said) in [("4", "1Gi", "serverless.cpu 2"), ("1", "8Gi", "serverless.memory 4Gi")] {
        let error = h.world.create_sandbox(&org, serverless_spec(cpu, memory), "", "").unwrap_err();
        assert!(matches!(error, SimError::InvalidArgument { .. }), "{error:?}");
        assert_eq!(error.reason(), Some(Reason::ResourceCeilingExceeded));
        assert_eq!(error.violations()[0].field, "sandbox.spec.containers");
        assert!(error.to_string().contains(said), "{error}");
    }
    let mut gpu = serverless_spec("1", "1Gi");
    let requests = gpu.containers[0].resource_requirements.as_mut().unwrap();
    for side in [requests.requests.as_mut().unwrap(), requests.limits.as_mut().unwrap()] {
        side.gpu = Some(cwsandbox_api::sandbox_v1::Gpu { count: 1, selector: None });
    }
    let error = h.world.create_sandbox(&org, gpu, "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::ResourceCeilingExceeded), "{error}");
    assert_eq!(all(&h, "default-org"), 2);
}

#[test]
fn a_pool_turned_off_refuses_with_serverless_disabled_and_has_no_nodes() {
    let mut h = pool(|values| values.serverless.enabled = false);
    let error = h.world.create_sandbox(&owner("default-org"), serverless_spec("1", "1Gi"), "", "").unwrap_err();
    assert!(matches!(error, SimError::FailedPrecondition { reason: Reason::ServerlessDisabled, .. }), "{error:?}");
    assert!(!h.world.cluster.nodes.keys().any(|node| node.starts_with("node-serverless-")));
    assert_eq!(all(&h, "default-org"), 0);
}

#[test]
fn runner_ids_with_serverless_placement_stay_invalid() {
    let mut h = pool(|_| {});
    let mut spec = serverless_spec("1", "1Gi");
    spec.runner_ids = vec!["cks-runner".to_owned()];
    let error = h.world.create_sandbox(&owner("default-org"), spec, "", "").unwrap_err();
    assert!(matches!(error, SimError::InvalidArgument { .. }));
    assert_eq!(error.violations()[0].field, "sandbox.spec.mode");
}

#[test]
fn other_pods_never_land_on_the_pool() {
    let mut h = pool(|values| {
        values.serverless.cpu = "64".to_owned();
        values.serverless.memory = "256Gi".to_owned();
    });
    // More than any other Node has: only a serverless Node could hold it, and the pool is not the
    // cluster's to offer (nor counted in the scheduler's message).
    let mut request = with_requests(sunk_pod("big"), Some("32"), Some("1Gi"), None);
    request.namespace = "default".to_owned();
    request.scheduler_name = String::new();
    let uid = h.create(request);
    let pod = h.pod(&uid);
    assert_eq!(pod.node_name, None);
    let (_, _, message) = pod.scheduled_condition.expect("unschedulable");
    assert_eq!(message, "0/5 nodes are available: 5 Insufficient cpu.");
    h.advance(60);
    assert_eq!(h.pod(&uid).node_name, None);
}

#[test]
fn a_replayed_request_id_returns_the_sandbox_even_when_the_pool_is_full() {
    let mut h = pool(|values| values.serverless.max_sandboxes_per_organization = 1);
    let first = h.world.create_sandbox(&owner("default-org"), serverless_spec("1", "1Gi"), "", "same").unwrap();
    h.clock.advance(Duration::from_secs(1));
    let again = h.world.create_sandbox(&owner("default-org"), serverless_spec("1", "1Gi"), "", "same").unwrap();
    assert_eq!(first.id, again.id);
}

#[test]
fn a_sidecar_that_ends_shows_its_own_end_and_keeps_it_when_the_sandbox_ends() {
    use cwsandbox_sim::k8s::ContainerState;
    let mut h = pool(|_| {});
    let mut spec = serverless_spec("1", "1Gi");
    let sidecar = Container { name: "migrate".to_owned(), primary: None, ..spec.containers[0].clone() };
    spec.containers[0].primary = Some(true);
    spec.containers.push(sidecar);
    let created = h.world.create_sandbox(&owner("org"), spec, "", "").unwrap();
    assert_eq!(created.state, SandboxState::Running);
    h.world.container_exited(&created.pod_uid, "migrate", 3);
    let running = h.world.get_sandbox("org", &created.id).unwrap();
    assert_eq!(running.state, SandboxState::Running, "the sandbox goes on");
    assert_eq!(running.ended_containers, [("migrate".to_owned(), 3)]);
    h.world.container_exited(&created.pod_uid, "no-such-container", 1);
    h.world.container_exited(&created.pod_uid, &created.resolved.containers[0].name, 9);
    assert_eq!(h.world.get_sandbox("org", &created.id).unwrap().ended_containers.len(), 1, "only a known sidecar");
    h.world.sandbox_exited(&created.id, 0);
    let pod = h.world.cluster.pod(&created.pod_uid).unwrap();
    let states: Vec<(String, i32)> = pod
        .containers
        .iter()
        .map(|container| match container.state {
            ContainerState::Terminated { exit_code, .. } => (container.name.clone(), exit_code),
            ref other => panic!("{other:?}"),
        })
        .collect();
    assert!(states.contains(&("migrate".to_owned(), 3)), "the sidecar keeps its own end: {states:?}");
}
