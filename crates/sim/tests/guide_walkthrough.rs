//! The guide, replayed on the `fresh` scenario: each step's failure appears, then disappears after
//! its fix (policy → scheduler scope → KillWait → slurmd requests). The steps are those of
//! docs/facts/sunk-guide.md ("step 1.5" is docs/facts/sunk-guide.md#step-1-5).

mod common;

use common::*;
use cwsandbox_api::sandbox_v1::{Container, SandboxMode, SandboxSpec};
use cwsandbox_api::wkt::FieldMask;
use cwsandbox_sim::config::{Scenario, ScopeType, Values};
use cwsandbox_sim::k8s::PodPhase;
use cwsandbox_sim::sandbox::{Owner, SandboxState, SandboxView};

fn run_sandbox(h: &mut Harness) -> SandboxView {
    let spec = SandboxSpec {
        containers: vec![Container {
            name: "main".to_owned(),
            image: "python:3.11".to_owned(),
            ..Container::default()
        }],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        ..SandboxSpec::default()
    };
    let owner = Owner { org: "default-org".to_owned(), user: "alice".to_owned() };
    let id = h.world.create_sandbox(&owner, spec, "", "").unwrap().id.clone();
    h.advance(2);
    h.world.get_sandbox("default-org", &id).unwrap()
}

#[test]
fn the_guide_on_a_fresh_cluster() {
    let mut h = harness_with(Values::scenario(Scenario::Fresh));

    // Before step 2 the empty policy leaves sandboxes to kube-scheduler: they run, but Slurm never sees them.
    let unrouted = run_sandbox(&mut h);
    assert_eq!(unrouted.state, SandboxState::Running);
    assert_eq!(unrouted.job_id, None, "sacct shows nothing");

    // Step 1.1 and 1.2: the scheduler runs and its name is in the ConfigMap.
    let scheduler = h
        .world
        .cluster
        .pods_iter()
        .find(|pod| pod.labels.get("app.kubernetes.io/name").map(String::as_str) == Some("sunk-scheduler"));
    assert_eq!(scheduler.map(|pod| pod.namespace.as_str()), Some("tenant-slurm"));
    let conf = h.world.cluster.config_maps.values().find_map(|map| map.data.get("scheduler.conf")).unwrap();
    assert!(conf.contains("name: slurm-scheduler"));

    // Step 2: read the runner, set base.spec.schedulerName, write it back with the etag.
    let runner = h.world.runners.get("default-org", "cks-runner").unwrap();
    let mut policy = serde_json::to_value(runner.policy.clone().unwrap()).unwrap();
    policy["base"] = serde_json::json!({"spec": {"schedulerName": "slurm-scheduler"}});
    let mut patch = runner.clone();
    patch.policy = Some(serde_json::from_value(policy).unwrap());
    let now = h.world.now();
    h.world.runners.update("default-org", "cks-runner", patch, &FieldMask::new(["policy"]), now).unwrap();

    // Failure of step 1.5: the scheduler only watches its own namespace.
    let out_of_scope = run_sandbox(&mut h);
    assert_eq!(out_of_scope.state, SandboxState::Pending);
    assert!(
        out_of_scope.state_reason.contains("does not watch namespace \"sandbox-alice\""),
        "{}",
        out_of_scope.state_reason
    );
    assert!(h.warnings_for(&out_of_scope.pod_uid).is_empty(), "the scheduler is silent about Pods it does not watch");

    let mut values = h.world.values().clone();
    values.scheduler.scope.scope_type = ScopeType::Cluster;
    h.world.apply_values(values).unwrap();

    // Failure of step 1.4: the default 30 s grace is not below KillWait 30 − 5.
    let grace = run_sandbox(&mut h);
    assert_eq!(grace.state, SandboxState::Pending);
    assert!(
        grace.state_reason.contains("termination grace period must be less than Slurm KillWait - 5s"),
        "{}",
        grace.state_reason
    );
    let earlier = h.world.get_sandbox("default-org", &out_of_scope.id).unwrap();
    assert!(earlier.state_reason.contains("termination grace period"), "the newly watched Pod is validated too");

    let mut values = h.world.values().clone();
    values.slurm_config.kill_wait = 60;
    h.world.apply_values(values).unwrap();
    let scheduler = h
        .world
        .cluster
        .pods_iter()
        .find(|pod| pod.labels.get("app.kubernetes.io/name").map(String::as_str) == Some("sunk-scheduler"))
        .unwrap();
    assert!(scheduler.containers[0].args.contains(&"--slurm-kill-wait=60s".to_owned()));

    // Failure of step 1.6: slurmd's requests leave no room, so kubelet refuses the bound Pod.
    let starved = run_sandbox(&mut h);
    assert_eq!(starved.state, SandboxState::Failed);
    assert!(starved.state_reason.starts_with("OutOfcpu: Pod was rejected"), "{}", starved.state_reason);
    assert!(starved.job_id.is_some(), "Slurm allocated it first");

    let mut values = h.world.values().clone();
    values.node_sets[0].slurmd.requests.cpu = "1".to_owned();
    values.node_sets[0].slurmd.requests.memory = "4Gi".to_owned();
    h.world.apply_values(values).unwrap();

    // Done: the sandbox runs through Slurm, next to the jobs.
    let working = run_sandbox(&mut h);
    assert_eq!(working.state, SandboxState::Running, "{}", working.state_reason);
    let job = h.world.slurm.job(working.job_id.unwrap()).unwrap();
    assert!(job.name.contains(working.id.as_str()));
    assert_eq!(h.world.cluster.pod(&working.pod_uid).unwrap().phase, PodPhase::Running);
}
