//! GPU models (`gpu.type`): a sandbox runs only on Nodes of the model it asks for, through the
//! SUNK Pod Scheduler (a typed GRES) and the default scheduler (a node selector); a model no Node
//! has is refused as the fleet refuses a sandbox no runner can host.

mod common;

use common::*;
use cwsandbox_api::sandbox_v1::{Container, Gpu, ResourceRequirements, Resources, SandboxMode, SandboxSpec, gpu};
use cwsandbox_sim::config::{NodeSetValues, Scenario, Values};
use cwsandbox_sim::error::{Reason, SimError};
use cwsandbox_sim::sandbox::{Owner, SandboxState};

fn alice() -> Owner {
    Owner { org: "default-org".to_owned(), user: "alice".to_owned() }
}

/// The guide's cluster plus one Node of 8 A100s and one of 8 H100s, each class mapped to its
/// GRES type, in the default partition.
fn gpu_cluster(route_through_sunk: bool) -> Values {
    let mut values = Values::scenario(Scenario::Ready);
    for (name, class) in [("a100", "A100"), ("h100", "H100")] {
        let mut set: NodeSetValues = values.node_sets[0].clone();
        set.name = name.to_owned();
        set.replicas = 1;
        set.gpus = 8;
        set.gpu_class = class.to_owned();
        values.node_sets.push(set);
        values.scheduler.gpu_types.insert(class.to_owned(), name.to_owned());
        values.slurm.partitions[0].node_sets.push(name.to_owned());
    }
    if !route_through_sunk {
        values.runners[0].policy = Some(serde_json::json!({}));
    }
    values
}

fn gpus(count: i64, model: &str) -> Resources {
    Resources {
        cpu: "1".to_owned(),
        memory: "1Gi".to_owned(),
        gpu: Some(Gpu { count, selector: Some(gpu::Selector::Type(model.to_owned())) }),
    }
}

/// What the client sends for `gpu={"count": n, "type": model}`: the GPU on both sides.
fn asking(requests: Resources, limits: Resources) -> SandboxSpec {
    SandboxSpec {
        containers: vec![Container {
            resource_requirements: Some(ResourceRequirements { requests: Some(requests), limits: Some(limits) }),
            ..client_container()
        }],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        ..SandboxSpec::default()
    }
}

fn asking_model(count: i64, model: &str) -> SandboxSpec {
    asking(gpus(count, model), gpus(count, model))
}

#[test]
fn through_sunk_a_model_is_a_typed_gres_and_only_its_nodes_take_the_job() {
    let mut h = harness_with(gpu_cluster(true));
    let a100 = h.world.create_sandbox(&alice(), asking_model(2, "A100"), "", "").unwrap();
    let h100 = h.world.create_sandbox(&alice(), asking_model(8, "H100"), "", "").unwrap();
    h.advance(2);
    for (sandbox, node, gres) in [(&a100, "node-a100-0", "a100"), (&h100, "node-h100-0", "h100")] {
        let running = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
        assert_eq!(running.state, SandboxState::Running, "{}", running.state_reason);
        assert_eq!(running.node_name.as_deref(), Some(node));
        let pod = h.world.cluster.pod(&running.pod_uid).unwrap();
        assert_eq!(pod.node_selector.get("gpu.nvidia.com/class").map(String::as_str), Some(&*gres.to_uppercase()));
        let job = h.world.slurm.job(running.job_id.unwrap()).unwrap();
        assert_eq!(job.gres_type.as_deref(), Some(gres));
        assert!(job.gres_type_required);
    }

    // Every H100 is taken and the A100 Node has 6 free: a typed job waits for its own model.
    let waiting = h.world.create_sandbox(&alice(), asking_model(1, "H100"), "", "").unwrap();
    h.advance(2);
    let waiting = h.world.get_sandbox("default-org", &waiting.id).unwrap();
    assert_eq!(waiting.state, SandboxState::Pending, "{}", waiting.state_reason);
    assert_eq!(waiting.node_name, None);
}

#[test]
fn through_the_default_scheduler_a_model_is_a_node_selector() {
    let mut h = harness_with(gpu_cluster(false));
    let sandbox = h.world.create_sandbox(&alice(), asking_model(1, "H100"), "", "").unwrap();
    h.advance(2);
    let running = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
    assert_eq!(running.state, SandboxState::Running, "{}", running.state_reason);
    assert_eq!(running.node_name.as_deref(), Some("node-h100-0"));
    assert_eq!(running.job_id, None, "the default scheduler placed it");

    // More H100s than the one H100 Node has: Pending, though the A100 Node has room.
    let waiting = h.world.create_sandbox(&alice(), asking_model(8, "H100"), "", "").unwrap();
    h.advance(2);
    let waiting = h.world.get_sandbox("default-org", &waiting.id).unwrap();
    assert_eq!(waiting.state, SandboxState::Pending, "{}", waiting.state_reason);
}

#[test]
fn a_model_no_node_has_is_refused_as_no_runner_can_host_it_and_nothing_is_made() {
    let mut h = harness_with(gpu_cluster(true));
    let error = h.world.create_sandbox(&alice(), asking_model(1, "B200"), "", "").unwrap_err();
    assert!(matches!(error, SimError::FailedPrecondition { .. }), "{error:?}");
    assert_eq!(error.reason(), Some(Reason::NoSuitableRunner));
    let message = error.to_string();
    for expected in ["\"B200\"", "\"A100\", \"H100\"", "resourceRequirements.requests.gpu.type"] {
        assert!(message.contains(expected), "{expected}: {message}");
    }
    assert_eq!(h.world.every_sandbox().count(), 0);

    // The guide's cluster has no GPUs at all.
    let mut plain = harness_with(Values::scenario(Scenario::Ready));
    let error = plain.world.create_sandbox(&alice(), asking_model(1, "A100"), "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::NoSuitableRunner));
    assert!(error.to_string().contains("no GPUs"), "{error}");
}

#[test]
fn models_that_disagree_or_lack_a_count_are_refused_naming_the_field() {
    let mut h = harness_with(gpu_cluster(true));
    let cases = [
        (asking(gpus(1, "A100"), gpus(1, "H100")), "resourceRequirements.limits.gpu.type", "differs"),
        (asking_model(0, "A100"), "resourceRequirements.requests.gpu.type", "count"),
        (asking_model(1, " "), "resourceRequirements.requests.gpu.type", "empty"),
    ];
    for (spec, field, words) in cases {
        let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
        let SimError::InvalidArgument { violations, .. } = &error else { panic!("{error:?}") };
        assert!(
            violations
                .iter()
                .any(|violation| violation.field.ends_with(field) && violation.description.contains(words)),
            "{field}: {violations:?}"
        );
    }
    // Two containers of one Pod share its Node, so they cannot ask for different models.
    let mut spec = asking_model(1, "A100");
    let mut side = spec.containers[0].clone();
    side.name = "side".to_owned();
    side.resource_requirements = Some(ResourceRequirements { requests: Some(gpus(1, "H100")), limits: None });
    spec.containers.push(side);
    let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
    assert!(error.to_string().contains("share one Node"), "{error}");
    assert_eq!(h.world.every_sandbox().count(), 0);
}

#[test]
fn a_class_the_sunk_scheduler_cannot_map_to_gres_is_rejected_with_a_warning() {
    let mut values = gpu_cluster(true);
    values.scheduler.gpu_types.remove("H100");
    let mut h = harness_with(values);
    let sandbox = h.world.create_sandbox(&alice(), asking_model(1, "H100"), "", "").unwrap();
    h.advance(2);
    let pending = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
    assert_eq!(pending.state, SandboxState::Pending);
    let warnings = h.warnings_for(&pending.pod_uid);
    assert!(
        warnings.iter().any(|event| event.message.contains("gpuTypes") && event.message.contains("\"H100\"")),
        "{warnings:?}"
    );
}
