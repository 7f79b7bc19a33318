//! One test per model behaviour of the SUNK checklist (docs/facts/sunk-checklist.md, items 1–29,
//! 43, 44), named after it: `item_03_…` checks docs/facts/sunk-checklist.md#item-3, and so on.

mod common;

use common::*;
use cwsandbox_sim::config::ScopeType;
use cwsandbox_sim::k8s::PodPhase;
use cwsandbox_sim::query::Scope;
use cwsandbox_sim::slurm::{IllegalJobTransition, JobBaseState, JobPhase, JobTransition};
use cwsandbox_sim::world::{PodLaunch, Transition};

#[test]
fn item_01_other_scheduler_name_is_ignored() {
    let mut h = harness(|_| {});
    let mut pod = sunk_pod("other");
    pod.scheduler_name = "some-other-scheduler".to_owned();
    let uid = h.create(pod);
    h.advance(60);
    assert_eq!(h.job_id(&uid), None);
    assert!(h.events_for(&uid).is_empty(), "no Event: {:?}", h.events_for(&uid));
    assert_eq!(h.pod(&uid).phase, PodPhase::Pending);
}

#[test]
fn item_02_namespace_scope_ignores_other_namespaces_cluster_scope_handles_them() {
    let mut h = harness(|values| {
        values.scheduler.scope.scope_type = ScopeType::Namespace;
        values.scheduler.scope.namespaces.clear();
    });
    let mut pod = sunk_pod("scoped");
    pod.namespace = "x".to_owned();
    let uid = h.create(pod);
    h.advance(60);
    assert_eq!(h.job_id(&uid), None);
    assert!(h.events_for(&uid).is_empty());
    assert_eq!(h.pod(&uid).phase, PodPhase::Pending);

    let mut h = harness(|values| values.scheduler.scope.scope_type = ScopeType::Cluster);
    let mut pod = sunk_pod("scoped");
    pod.namespace = "x".to_owned();
    let uid = h.create(pod);
    assert!(h.job_id(&uid).is_some());
}

#[test]
fn item_03_default_grace_with_killwait_30_is_rejected_once_without_retry() {
    let mut h = harness(|_| {});
    let mut pod = sunk_pod("grace");
    pod.termination_grace_period_seconds = None;
    let uid = h.create(pod);
    h.advance(300);
    let warnings = h.warnings_for(&uid);
    assert_eq!(warnings.len(), 1, "exactly one Warning after 5 minutes: {warnings:?}");
    assert_eq!(warnings[0].reason, "FailedScheduling");
    assert!(
        warnings[0].message.contains("termination grace period must be less than Slurm KillWait - 5s"),
        "{}",
        warnings[0].message
    );
    assert_eq!(h.job_id(&uid), None);
    assert_eq!(h.total_jobs(), 0, "sacct and squeue are empty");
    assert_eq!(h.pod(&uid).phase, PodPhase::Pending);
}

/// The guide's fix for item 3 is raising KillWait with a values upgrade
/// (docs/facts/sunk-guide.md#step-1-4): the restarted scheduler reconciles the Pod it refused,
/// which now becomes a placeholder job and runs.
#[test]
fn item_03_a_refused_pod_is_placed_once_kill_wait_is_raised() {
    let mut h = harness(|_| {});
    let mut pod = sunk_pod("grace");
    pod.termination_grace_period_seconds = None;
    let uid = h.create(pod);
    h.advance(5);
    assert_eq!(h.job_id(&uid), None, "refused under KillWait 30");
    let mut values = h.world.values().clone();
    values.slurm_config.kill_wait = 60;
    h.world.apply_values(values).expect("the upgrade");
    h.advance(5);
    assert!(h.job_id(&uid).is_some(), "reconciled after the upgrade: {:?}", h.warnings_for(&uid));
    let pod = h.pod(&uid);
    assert!(
        pod.scheduled_condition.as_ref().is_none_or(|(_, _, message)| !message.contains("KillWait")),
        "the stale reason is gone: {:?}",
        pod.scheduled_condition
    );
}

#[test]
fn item_04_grace_25_rejected_grace_24_accepted() {
    let mut h = harness(|_| {});
    let mut pod = sunk_pod("g25");
    pod.termination_grace_period_seconds = Some(25);
    let rejected = h.create(pod);
    assert_eq!(h.job_id(&rejected), None);
    assert_eq!(h.warnings_for(&rejected).len(), 1);
    let mut pod = sunk_pod("g24");
    pod.termination_grace_period_seconds = Some(24);
    let accepted = h.create(pod);
    assert!(h.job_id(&accepted).is_some());
}

#[test]
fn item_05_killwait_60_accepts_50_rejects_55() {
    let mut h = harness(|values| values.slurm_config.kill_wait = 60);
    let mut pod = sunk_pod("g50");
    pod.termination_grace_period_seconds = Some(50);
    let accepted = h.create(pod);
    assert!(h.job_id(&accepted).is_some());
    let mut pod = sunk_pod("g55");
    pod.termination_grace_period_seconds = Some(55);
    let rejected = h.create(pod);
    assert_eq!(h.job_id(&rejected), None);
}

#[test]
fn item_06_missing_or_zero_cpu_or_memory_requests_are_rejected() {
    let mut h = harness(|_| {});
    for (name, cpu, memory) in [
        ("nocpu", None, Some("1Gi")),
        ("zerocpu", Some("0"), Some("1Gi")),
        ("nomem", Some("1"), None),
        ("zeromem", Some("1"), Some("0")),
    ] {
        let uid = h.create(with_requests(sunk_pod(name), cpu, memory, None));
        assert_eq!(h.job_id(&uid), None, "{name}");
        let warnings = h.warnings_for(&uid);
        assert_eq!(warnings.len(), 1, "{name}");
        let resource = if name.contains("cpu") { "cpu" } else { "memory" };
        assert!(
            warnings[0].message.contains(&format!("must request a non-zero {resource}")),
            "{name}: {}",
            warnings[0].message
        );
    }
}

#[test]
fn item_07_invalid_exclusive_value_is_rejected() {
    let mut h = harness(|_| {});
    let uid = h.create(annotated(sunk_pod("bogus"), &[("exclusive", "bogus")]));
    assert_eq!(h.job_id(&uid), None);
    let warnings = h.warnings_for(&uid);
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].message.contains("exclusive") && warnings[0].message.contains("bogus"),
        "{}",
        warnings[0].message
    );
}

#[test]
fn item_08_unknown_partition_is_refused_by_slurm() {
    let mut h = harness(|_| {});
    let uid = h.create(annotated(sunk_pod("nosuch"), &[("partition", "nosuch")]));
    assert_eq!(h.job_id(&uid), None);
    assert_eq!(h.pod(&uid).phase, PodPhase::Pending);
    let warnings = h.warnings_for(&uid);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].message.contains("Invalid partition name specified"), "{}", warnings[0].message);
}

#[test]
fn item_09_valid_pod_goes_pending_then_running_and_binds_to_the_slurmd_node() {
    let mut h = harness(|values| values.node_sets[0].replicas = 1);
    let blocker = h.world.submit_batch_job(&Scope::Cluster, batch(8, Some(30))).unwrap();
    let uid = h.create(sunk_pod("valid"));
    let job = h.job(&uid);
    assert_eq!(job.state, JobBaseState::Pending, "PD while the node is full");
    assert_eq!(&*job.user, "root");
    assert!(h.pod(&uid).node_name.is_none());
    h.advance(30);
    assert!(h.queued(blocker).is_none(), "the batch job left the queue");
    let job = h.job(&uid);
    assert_eq!(job.state, JobBaseState::Running, "R once the node frees");
    assert!(h.pod(&uid).node_name.is_none(), "not bound during the prolog");
    h.advance(1);
    let pod = h.pod(&uid);
    assert_eq!(pod.node_name.as_deref(), Some("node-cpu-0"), "bound to the Node of slurm-cpu-0");
    assert_eq!(h.job(&uid).node.as_deref(), Some("slurm-cpu-0"));
    assert_eq!(pod.phase, PodPhase::Running);
}

#[test]
fn item_10_prolog_shows_running_with_reason_prolog_then_extra_started_and_binding() {
    let mut h = harness(|values| values.scheduler.prolog_seconds = 3);
    let uid = h.create(sunk_pod("prolog"));
    let job = h.job(&uid);
    assert_eq!((job.state, job.reason.as_str()), (JobBaseState::Running, "Prolog"));
    assert!(!job.extra.ends_with(": started"));
    assert!(h.pod(&uid).node_name.is_none());
    h.advance(2);
    assert!(h.pod(&uid).node_name.is_none(), "still in the prolog");
    h.advance(1);
    let job = h.job(&uid);
    assert!(job.extra.ends_with(": started"), "Extra={:?}", job.extra);
    assert_eq!(job.reason, "None");
    assert!(h.pod(&uid).node_name.is_some());
}

#[test]
fn item_11_node_lock_taint_annotation_and_eviction() {
    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.scheduler.prolog_seconds = 2;
    });
    let mut plain = sunk_pod("plain");
    plain.scheduler_name = String::new();
    let plain = h.create(plain);
    assert_eq!(h.pod(&plain).phase, PodPhase::Running, "default scheduler placed it");
    let other_sunk = h.create(sunk_pod("other-sunk"));
    h.advance(2);
    assert_eq!(h.pod(&other_sunk).phase, PodPhase::Running);
    // The first SUNK Pod locked the node already; the plain Pod was evicted then.
    assert!(h.node_locked("node-cpu-0"));
    assert_eq!(h.slurmd_lock("slurm-cpu-0"), "locked_strict");
    assert!(h.pod(&plain).deletion_timestamp.is_some(), "non-tolerating non-SUNK Pod evicted (Terminating)");
    assert!(h.world.transitions.get(Transition::PodEvicted) >= 1);
    let second = h.create(sunk_pod("second"));
    assert_eq!(h.slurmd_lock("slurm-cpu-0"), "locked_strict");
    h.advance(2);
    assert_eq!(h.pod(&second).phase, PodPhase::Running, "other SUNK Pods are not evicted");
    h.advance(20);
    assert!(!h.pod_exists(&plain), "gone after its grace period");
    assert_eq!(h.pod(&other_sunk).phase, PodPhase::Running);
}

#[test]
fn item_11_lock_moves_from_false_through_pending() {
    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.scheduler.prolog_seconds = 2;
    });
    assert_eq!(h.slurmd_lock("slurm-cpu-0"), "false");
    assert!(!h.node_locked("node-cpu-0"));
    let uid = h.create(sunk_pod("lock"));
    assert_eq!(h.slurmd_lock("slurm-cpu-0"), "pending");
    assert!(h.node_locked("node-cpu-0"));
    h.advance(2);
    assert_eq!(h.slurmd_lock("slurm-cpu-0"), "locked_strict");
    h.world.delete_pod(&Scope::Cluster, "sandboxes", "lock", Some(0)).unwrap();
    assert!(!h.pod_exists(&uid));
    assert_eq!(h.slurmd_lock("slurm-cpu-0"), "false");
    assert!(!h.node_locked("node-cpu-0"), "lock taint removed");
    let batch_job = h.world.submit_batch_job(&Scope::Cluster, batch(1, None)).unwrap();
    assert_eq!(h.queued(batch_job).unwrap().state, JobBaseState::Running);
    assert_eq!(h.slurmd_lock("slurm-cpu-0"), "locked", "ordinary Slurm jobs take a normal lock");
}

#[test]
fn item_12_annotations_set_account_partition_qos_comment_reservation() {
    let mut h = harness(|_| {});
    let uid = h.create(annotated(
        sunk_pod("annotated"),
        &[("account", "a1"), ("partition", "cpu"), ("qos", "q"), ("comment", "c"), ("reservation", "r")],
    ));
    let job = h.job(&uid);
    assert_eq!(
        (&*job.account, &*job.partition, &*job.qos, job.comment.as_str(), job.reservation.as_str()),
        ("a1", "cpu", "q", "c", "r")
    );
}

#[test]
fn item_13_user_id_annotation_sets_the_owner_default_is_root() {
    let mut h = harness(|_| {});
    let alice = h.create(annotated(sunk_pod("alice"), &[("user-id", "1001")]));
    let job = h.job(&alice);
    assert_eq!((&*job.user, job.uid), ("alice", 1001));
    let root = h.create(sunk_pod("root"));
    let job = h.job(&root);
    assert_eq!((&*job.user, job.uid), ("root", 0));
}

#[test]
fn item_14_cpus_and_memory_map_to_alloc_cpus_and_req_mem() {
    let mut h = harness(|values| values.node_sets[0].replicas = 1);
    let blocker = h.world.submit_batch_job(&Scope::Cluster, batch(8, Some(10))).unwrap();
    let uid = h.create(with_requests(sunk_pod("sized"), Some("2"), Some("512Mi"), None));
    let pending = h.job(&uid);
    assert_eq!((pending.alloc_cpus, pending.req_cpus, pending.req_mem_mb), (0, 2, 512), "AllocCPUS 0 while pending");
    h.advance(10);
    assert!(h.queued(blocker).is_none());
    let running = h.job(&uid);
    assert_eq!((running.alloc_cpus, running.req_mem_mb), (2, 512));
    let uid = h.create(with_requests(sunk_pod("mib1536"), Some("1"), Some("1536Mi"), None));
    assert_eq!(h.job(&uid).req_mem_mb, 1536);
    let uid = h.create(with_requests(sunk_pod("gib1"), Some("1"), Some("1Gi"), None));
    assert_eq!(h.job(&uid).req_mem_mb, 1024);
}

#[test]
fn item_15_gpu_requests_become_gres_of_the_node_type_without_shared_indices() {
    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.node_sets[0].gpus = 8;
        values.node_sets[0].gpu_class = "H100".to_owned();
        values.scheduler.gpu_types.insert("H100".to_owned(), "h100".to_owned());
    });
    let first = h.create(with_requests(sunk_pod("gpu-a"), Some("1"), Some("1Gi"), Some(4)));
    let second = h.create(with_requests(sunk_pod("gpu-b"), Some("1"), Some("1Gi"), Some(4)));
    let (a, b) = (h.job(&first), h.job(&second));
    assert_eq!((a.req_gpus, a.gres_type.as_deref()), (4, Some("h100")));
    assert_eq!(a.gpu_indices.len(), 4);
    assert_eq!(b.gpu_indices.len(), 4);
    assert!(
        a.gpu_indices.iter().all(|index| !b.gpu_indices.contains(index)),
        "{:?} vs {:?}",
        a.gpu_indices,
        b.gpu_indices
    );
}

#[test]
fn item_15_a_gpu_pod_sees_the_gpus_its_job_holds() {
    use cwsandbox_sim::world::{Effect, NVIDIA_VISIBLE_DEVICES};
    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.node_sets[0].gpus = 8;
        values.node_sets[0].gpu_class = "H100".to_owned();
        values.scheduler.gpu_types.insert("H100".to_owned(), "h100".to_owned());
    });
    h.world.take_effects();
    let gpu = h.create(with_requests(sunk_pod("gpu-a"), Some("1"), Some("1Gi"), Some(2)));
    let cpu_only = h.create(with_requests(sunk_pod("cpu-a"), Some("1"), Some("1Gi"), None));
    h.advance(2);
    let held = h.job(&gpu).gpu_indices.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    assert_eq!(held.split(',').count(), 2);
    let started: Vec<(String, Option<String>)> = h
        .world
        .take_effects()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::StartPod(PodLaunch { pod_uid, containers, .. }) => {
                Some((pod_uid.to_string(), containers[0].env.get(NVIDIA_VISIBLE_DEVICES).cloned()))
            }
            _ => None,
        })
        .collect();
    assert!(started.contains(&(gpu.clone(), Some(held))), "{started:?}");
    assert!(started.contains(&(cpu_only.clone(), None)), "a Pod without GPUs is told none: {started:?}");
}

fn outofcpu_values(values: &mut cwsandbox_sim::config::Values) {
    values.node_sets[0].replicas = 1;
    values.node_sets[0].slurmd.requests.cpu = "7".to_owned();
    values.node_sets[0].slurmd.requests.memory = "28Gi".to_owned();
}

#[test]
fn item_16_kubelet_rejects_with_outofcpu_and_outofmemory() {
    let mut h = harness(outofcpu_values);
    let uid = h.create(with_requests(sunk_pod("cpu2"), Some("2"), Some("1Gi"), None));
    assert!(h.job_id(&uid).is_some(), "Slurm allocates");
    h.advance(1);
    let pod = h.pod(&uid);
    assert_eq!(pod.node_name.as_deref(), Some("node-cpu-0"), "bound");
    assert_eq!(pod.phase, PodPhase::Failed);
    assert_eq!(pod.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(
        pod.message.as_deref(),
        Some("Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 7000, capacity: 8000")
    );
    let warnings = h.warnings_for(&uid);
    assert_eq!(warnings.iter().map(|event| event.reason.as_ref()).collect::<Vec<_>>(), ["OutOfcpu"]);

    let uid = h.create(with_requests(sunk_pod("mem8"), Some("1"), Some("8Gi"), None));
    h.advance(1);
    let pod = h.pod(&uid);
    assert_eq!(pod.reason.as_deref(), Some("OutOfmemory"));
    assert_eq!(
        pod.message.as_deref(),
        Some(
            "Pod was rejected: Node didn't have enough resource: memory, requested: 8589934592, used: 30064771072, capacity: 34359738368"
        )
    );
}

#[test]
fn item_17_lowering_slurmd_requests_lets_the_same_pod_run() {
    let mut h = harness(outofcpu_values);
    let mut values = h.world.values().clone();
    values.node_sets[0].slurmd.requests.cpu = "1".to_owned();
    values.node_sets[0].slurmd.requests.memory = "4Gi".to_owned();
    h.world.apply_values(values).unwrap();
    let uid = h.create(with_requests(sunk_pod("cpu2"), Some("2"), Some("1Gi"), None));
    h.advance(1);
    assert_eq!(h.pod(&uid).phase, PodPhase::Running);
}

#[test]
fn item_18_exclusive_none_holds_the_whole_node() {
    let mut h = harness(|values| values.node_sets[0].replicas = 1);
    let exclusive = h.create(annotated(sunk_pod("whole"), &[("exclusive", "none")]));
    h.advance(1);
    assert_eq!(h.pod(&exclusive).phase, PodPhase::Running);
    let other_pod = h.create(sunk_pod("other"));
    let other_job = h.world.submit_batch_job(&Scope::Cluster, batch(1, None)).unwrap();
    assert_eq!(h.job(&other_pod).state, JobBaseState::Pending);
    assert_eq!(h.queued(other_job).unwrap().state, JobBaseState::Pending);
    h.world.delete_pod(&Scope::Cluster, "sandboxes", "whole", Some(0)).unwrap();
    assert_eq!(h.job(&other_pod).state, JobBaseState::Running, "placed once the exclusive Pod ended");
}

#[test]
fn item_19_exclusive_user_shares_only_with_the_same_user() {
    let mut h = harness(|values| {
        values.node_sets[0].gpus = 8;
        values.node_sets[0].gpu_class = "H100".to_owned();
    });
    let pod = |name: &str, uid: &str| {
        annotated(
            with_requests(sunk_pod(name), Some("1"), Some("1Gi"), Some(4)),
            &[("exclusive", "user"), ("user-id", uid)],
        )
    };
    let a = h.create(pod("a", "1001"));
    let b = h.create(pod("b", "1001"));
    let c = h.create(pod("c", "1002"));
    let (a, b, c) = (h.job(&a), h.job(&b), h.job(&c));
    assert_eq!(a.node, b.node, "same user shares the node");
    assert!(c.node.is_some());
    assert_ne!(c.node, a.node, "another user is not placed there");
}

#[test]
fn item_20_exclusive_ok_with_gpus_is_rejected() {
    let mut h = harness(|values| values.node_sets[0].gpus = 8);
    let uid =
        h.create(annotated(with_requests(sunk_pod("gpu-ok"), Some("1"), Some("1Gi"), Some(1)), &[("exclusive", "ok")]));
    assert_eq!(h.job_id(&uid), None);
    assert_eq!(h.warnings_for(&uid).len(), 1);
}

/// A Pod for the default scheduler (no SUNK) with these requests and limits.
fn default_scheduler_pod(name: &str, requests: (&str, &str), limits: (&str, &str)) -> cwsandbox_sim::world::PodRequest {
    let mut pod = sunk_pod(name);
    pod.scheduler_name = String::new();
    pod.containers[0].2 = amounts(Some(requests.0), Some(requests.1), None);
    pod.containers[0].3 = amounts(Some(limits.0), Some(limits.1), None);
    pod
}

#[test]
fn default_scheduler_gpu_pod_without_a_gpu_node_waits_insufficient_gpu() {
    let mut h = harness(|_| {});
    let mut pod = default_scheduler_pod("gpu", ("1", "1Gi"), ("1", "1Gi"));
    pod.containers[0].2.gpu = Some(1);
    pod.containers[0].3.gpu = Some(1);
    let uid = h.create(pod);
    let pod = h.pod(&uid);
    assert_eq!((pod.phase, pod.node_name.as_deref()), (PodPhase::Pending, None), "not bound, then rejected");
    let warnings = h.warnings_for(&uid);
    let nodes = h.world.cluster.nodes.len();
    assert_eq!(warnings[0].message, format!("0/{nodes} nodes are available: {nodes} Insufficient nvidia.com/gpu."));
}

#[test]
fn default_scheduler_names_the_taint_that_turned_each_node_away() {
    let mut h = harness(|_| {});
    let names: Vec<_> = h.world.cluster.nodes.keys().cloned().collect();
    let (first, rest) = names.split_first().unwrap();
    for (index, name) in names.iter().enumerate() {
        let node = h.world.cluster.nodes.get_mut(name).unwrap();
        let key = if name == first { "node.kubernetes.io/unreachable" } else { "example.com/busy" };
        node.taints.push(cwsandbox_sim::k8s::Taint {
            key: key.to_owned(),
            value: if index == 0 { String::new() } else { "yes".to_owned() },
            effect: "NoSchedule".to_owned(),
        });
    }
    let uid = h.create(default_scheduler_pod("tainted", ("1", "1Gi"), ("1", "1Gi")));
    let message = h.warnings_for(&uid)[0].message.clone();
    let nodes = names.len();
    assert_eq!(
        message,
        format!(
            "0/{nodes} nodes are available: {} node(s) had untolerated taint {{example.com/busy: yes}}, 1 node(s) had untolerated taint {{node.kubernetes.io/unreachable: }}.",
            rest.len()
        )
    );
}

#[test]
fn default_scheduler_pod_that_fits_no_node_waits_with_one_failed_scheduling_warning() {
    let mut h = harness(|_| {});
    let huge = h.create(default_scheduler_pod("huge", ("100", "1Gi"), ("100", "1Gi")));
    let pod = h.pod(&huge);
    assert_eq!((pod.phase, pod.node_name.as_deref()), (PodPhase::Pending, None));
    let warnings = h.warnings_for(&huge);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].reason, "FailedScheduling");
    let nodes = h.world.cluster.nodes.len();
    assert!(
        warnings[0].message.starts_with(&format!("0/{nodes} nodes are available: {nodes} Insufficient cpu")),
        "{}",
        warnings[0].message
    );
    // Retried when room frees, silently: the warning is not repeated.
    let small = h.create(default_scheduler_pod("small", ("1", "1Gi"), ("1", "1Gi")));
    h.world.delete_pod(&Scope::Cluster, "sandboxes", "small", Some(0)).unwrap();
    assert!(!h.pod_exists(&small));
    assert_eq!(h.warnings_for(&huge).len(), 1);
    assert_eq!(h.world.transitions.get(Transition::DefaultSchedulingFailed), 1);
}

#[test]
fn item_21_guaranteed_integer_cpu_pod_pins_cpus_and_the_next_job_drains_the_node() {
    // One 8-CPU Slurm node; a 4-CPU Guaranteed Pod does not fit the 4-CPU system Node, so the
    // default scheduler puts it on the Slurm node, where Slurm cannot see it.
    let mut h = harness(|values| values.node_sets[0].replicas = 1);
    let pinned = h.create(default_scheduler_pod("pinned", ("4", "4Gi"), ("4", "4Gi")));
    let pod = h.pod(&pinned);
    assert_eq!((pod.phase, pod.node_name.as_deref()), (PodPhase::Running, Some("node-cpu-0")));
    assert_eq!(h.world.cluster.nodes["node-cpu-0"].pinned_cpus, 4, "the static CPU Manager pinned 4 CPUs");

    // Slurm still sees 8 free CPUs and starts a 6-CPU job there: it lands on pinned CPUs.
    let job = h.world.submit_batch_job(&Scope::Cluster, batch(6, Some(600))).unwrap();
    let record = h.record(job);
    assert_eq!((record.state, record.exit_code), (JobBaseState::Failed, (1, 0)), "the job failed");
    let node = h.world.slurm.node("slurm-cpu-0").unwrap();
    assert_eq!(
        node.drain.as_ref().map(|drain| drain.reason.as_str()),
        Some("batch job complete failure"),
        "the node drained"
    );
    assert_eq!(h.world.transitions.get(Transition::JobFailedOnPinnedCpus), 1);

    // Resuming the node while the Pod still pins its CPUs fails the next job the same way; once
    // the Pod is gone the CPUs are free again.
    h.advance(1);
    assert!(h.pod_exists(&pinned), "evicted by the lock taint, still Terminating and still pinning");
    h.world.resume_node("slurm-cpu-0").unwrap();
    let job = h.world.submit_batch_job(&Scope::Cluster, batch(6, Some(600))).unwrap();
    assert_eq!(h.record(job).state, JobBaseState::Failed);
    assert_eq!(h.world.transitions.get(Transition::JobFailedOnPinnedCpus), 2);
    h.world.delete_pod(&Scope::Cluster, "sandboxes", "pinned", Some(0)).unwrap();
    assert_eq!(h.world.cluster.nodes["node-cpu-0"].pinned_cpus, 0);
    h.advance(1);
    h.world.resume_node("slurm-cpu-0").unwrap();
    let job = h.world.submit_batch_job(&Scope::Cluster, batch(6, Some(600))).unwrap();
    assert_eq!(h.queued(job).unwrap().state, JobBaseState::Running);
}

#[test]
fn item_21_fractional_or_burstable_cpu_and_a_disabled_cpu_manager_pin_nothing() {
    for (name, requests, limits) in
        [("fractional", ("3500m", "4Gi"), ("3500m", "4Gi")), ("burstable", ("4", "4Gi"), ("6", "4Gi"))]
    {
        let mut h = harness(|values| values.node_sets[0].replicas = 1);
        let uid = h.create(default_scheduler_pod(name, requests, limits));
        assert_eq!(h.pod(&uid).node_name.as_deref(), Some("node-cpu-0"), "{name}");
        assert_eq!(h.world.cluster.nodes["node-cpu-0"].pinned_cpus, 0, "{name}");
        let job = h.world.submit_batch_job(&Scope::Cluster, batch(6, Some(600))).unwrap();
        assert_eq!(h.queued(job).unwrap().state, JobBaseState::Running, "{name}");
    }
    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.kubelet.cpu_manager_policy = cwsandbox_sim::config::CpuManagerPolicy::None;
    });
    h.create(default_scheduler_pod("pinned", ("4", "4Gi"), ("4", "4Gi")));
    assert_eq!(h.world.cluster.nodes["node-cpu-0"].pinned_cpus, 0);
    let job = h.world.submit_batch_job(&Scope::Cluster, batch(6, Some(600))).unwrap();
    assert_eq!(h.queued(job).unwrap().state, JobBaseState::Running);
}

#[test]
fn item_22_slurm_job_on_all_gpus_and_a_cpu_only_pod_share_a_node() {
    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.node_sets[0].gpus = 8;
    });
    let mut gpu_job = batch(4, None);
    gpu_job.gpus = 8;
    let gpu_job = h.world.submit_batch_job(&Scope::Cluster, gpu_job).unwrap();
    let uid = h.create(sunk_pod("cpu-only"));
    h.advance(1);
    assert_eq!(h.queued(gpu_job).unwrap().state, JobBaseState::Running);
    assert_eq!(h.pod(&uid).phase, PodPhase::Running);
    assert_eq!(h.job(&uid).node, h.queued(gpu_job).unwrap().node);
}

#[test]
fn item_23_kubectl_delete_pod_cancels_the_placeholder_and_unlocks() {
    let mut h = harness(|values| values.node_sets[0].replicas = 1);
    let uid = h.create(sunk_pod("del"));
    h.advance(1);
    let job_id = h.job_id(&uid).unwrap();
    h.world.delete_pod(&Scope::Cluster, "sandboxes", "del", Some(10)).unwrap();
    let pod = h.pod(&uid);
    assert!(pod.deletion_timestamp.is_some(), "Terminating");
    let queued = h.queued(job_id).unwrap();
    assert!(queued.completing, "CG while it waits for the Pod");
    h.advance(10);
    assert!(!h.pod_exists(&uid), "gone within the grace period");
    assert!(h.queued(job_id).is_none(), "left the queue");
    let record = h.record(job_id);
    assert_eq!((record.state, record.cancelled_by), (JobBaseState::Cancelled, Some(0)));
    assert!(record.end.is_some());
    assert!(h.world.slurm.node("slurm-cpu-0").unwrap().drain.is_none(), "not drained");
    assert!(!h.node_locked("node-cpu-0"), "lock taint removed");
}

#[test]
fn item_24_scancel_running_placeholder_terminates_the_pod() {
    let mut h = harness(|_| {});
    let uid = h.create(sunk_pod("cancelled"));
    h.advance(1);
    let job_id = h.job_id(&uid).unwrap();
    h.world.scancel(&Scope::Cluster, job_id, 0).unwrap();
    assert!(h.queued(job_id).unwrap().completing, "CG");
    assert!(h.pod(&uid).deletion_timestamp.is_some(), "Terminating at once");
    h.advance(20);
    assert!(!h.pod_exists(&uid));
    let record = h.record(job_id);
    assert_eq!((record.state, record.cancelled_by, record.exit_code), (JobBaseState::Cancelled, Some(0), (0, 0)));
    assert!(h.queued(job_id).is_none());
}

#[test]
fn item_24_pod_that_honours_sigterm_goes_at_once() {
    let mut h = harness(|_| {});
    let uid = h.create(sunk_pod("quick"));
    h.advance(1);
    let job_id = h.job_id(&uid).unwrap();
    h.world.scancel(&Scope::Cluster, job_id, 1001).unwrap();
    h.world.pod_exited(&uid, 0);
    assert!(!h.pod_exists(&uid));
    assert!(h.queued(job_id).is_none());
    assert_eq!(h.record(job_id).cancelled_by, Some(1001));
}

#[test]
fn item_25_pod_outliving_killwait_drains_the_node() {
    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.slurm_config.kill_wait = 60;
    });
    let mut pod = sunk_pod("stubborn");
    pod.termination_grace_period_seconds = Some(50);
    let uid = h.create(pod);
    h.advance(1);
    assert_eq!(h.pod(&uid).phase, PodPhase::Running);
    // helm upgrade lowers KillWait under the Pod's grace: validation no longer protects it.
    let mut values = h.world.values().clone();
    values.slurm_config.kill_wait = 30;
    h.world.apply_values(values).unwrap();
    let job_id = h.job_id(&uid).unwrap();
    h.world.scancel(&Scope::Cluster, job_id, 0).unwrap();
    h.advance(27);
    assert!(h.world.slurm.node("slurm-cpu-0").unwrap().drain.is_none());
    h.advance(1);
    let node = h.world.slurm.node("slurm-cpu-0").unwrap();
    let drain = node.drain.as_ref().expect("drained ~2 s before KillWait");
    // SUNK's script drains it from the job's epilog, as root, now (`sinfo -R`'s USER, TIMESTAMP).
    assert_eq!((drain.uid, drain.at), (0, h.world.now()));
    assert_eq!(node.state().compact(), "drng");
    assert!(h.queued(job_id).is_some(), "still completing");
    h.advance(2);
    assert!(h.queued(job_id).is_none(), "SIGKILL at KillWait ends the job");
    assert!(h.pod_exists(&uid), "the Pod lingers until its grace ends");
    assert_eq!(h.world.slurm.node("slurm-cpu-0").unwrap().state().compact(), "drain");
    let waiting = h.create(sunk_pod("after"));
    assert_eq!(h.job(&waiting).state, JobBaseState::Pending, "nothing new on a drained node");
    h.advance(20);
    assert!(!h.pod_exists(&uid));
    h.world.resume_node("slurm-cpu-0").unwrap();
    assert_eq!(h.job(&waiting).state, JobBaseState::Running);
}

#[test]
fn item_26_scancel_pending_placeholder_never_binds() {
    let mut h = harness(|values| values.node_sets[0].replicas = 1);
    h.world.submit_batch_job(&Scope::Cluster, batch(8, None)).unwrap();
    let uid = h.create(sunk_pod("pending"));
    let job_id = h.job_id(&uid).unwrap();
    h.world.scancel(&Scope::Cluster, job_id, 0).unwrap();
    assert!(!h.pod_exists(&uid), "deleted (default setting)");
    let record = h.record(job_id);
    assert_eq!((record.state, record.cancelled_by), (JobBaseState::Cancelled, Some(0)));
    assert_eq!(record.start, record.end, "Start = End");
    assert_eq!(record.elapsed_seconds(h.world.now()), 0);
    assert_eq!(record.node, None, "None assigned");

    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.scheduler.delete_pod_when_pending_job_cancelled = false;
    });
    h.world.submit_batch_job(&Scope::Cluster, batch(8, Some(5))).unwrap();
    let uid = h.create(sunk_pod("kept"));
    h.world.scancel(&Scope::Cluster, h.job_id(&uid).unwrap(), 0).unwrap();
    h.advance(30);
    let pod = h.pod(&uid);
    assert_eq!((pod.phase, pod.node_name.clone()), (PodPhase::Pending, None), "kept Pending, never bound");
}

#[test]
fn item_27_pod_finishing_by_itself_releases_the_placeholder() {
    let mut h = harness(|_| {});
    let uid = h.create(sunk_pod("done"));
    h.advance(1);
    let job_id = h.job_id(&uid).unwrap();
    h.world.pod_exited(&uid, 0);
    assert!(h.queued(job_id).is_none());
    let record = h.record(job_id);
    assert_eq!((record.state, record.exit_code), (JobBaseState::Completed, (0, 0)));

    let mut h =
        harness(|values| values.scheduler.finished_pod_job_state = cwsandbox_sim::config::FinalJobState::Cancelled);
    let uid = h.create(sunk_pod("done"));
    h.advance(1);
    let job_id = h.job_id(&uid).unwrap();
    h.world.pod_exited(&uid, 0);
    assert_eq!(h.record(job_id).state, JobBaseState::Cancelled);
}

fn preemption_values(values: &mut cwsandbox_sim::config::Values) {
    values.node_sets[0].replicas = 1;
    values.slurm.partitions[0].preempt_mode = "CANCEL".to_owned();
    let mut high = values.slurm.partitions[0].clone();
    high.name = "high".to_owned();
    high.default = false;
    high.priority_tier = 10;
    values.slurm.partitions.push(high);
}

#[test]
fn item_28_higher_tier_job_preempts_a_placeholder_after_its_pod_is_gone() {
    let mut h = harness(preemption_values);
    let uid = h.create(with_requests(sunk_pod("low"), Some("6"), Some("1Gi"), None));
    h.advance(1);
    let placeholder = h.job_id(&uid).unwrap();
    let mut urgent = batch(4, None);
    urgent.partition = Some("high".to_owned());
    let urgent = h.world.submit_batch_job(&Scope::Cluster, urgent).unwrap();
    assert_eq!(h.record(placeholder).state, JobBaseState::Preempted);
    assert!(h.pod(&uid).deletion_timestamp.is_some(), "its Pod is being deleted");
    assert_eq!(h.queued(urgent).unwrap().state, JobBaseState::Pending, "waits for the Pod");
    h.advance(20);
    assert!(!h.pod_exists(&uid));
    assert_eq!(h.queued(urgent).unwrap().state, JobBaseState::Running);
}

#[test]
fn item_28_higher_tier_placeholder_preempts_a_batch_job() {
    let mut h = harness(preemption_values);
    let low = h.world.submit_batch_job(&Scope::Cluster, batch(8, None)).unwrap();
    let uid = h.create(annotated(sunk_pod("urgent"), &[("partition", "high")]));
    assert_eq!(h.record(low).state, JobBaseState::Preempted);
    h.advance(1);
    assert_eq!(h.pod(&uid).phase, PodPhase::Running);
}

#[test]
fn preempt_mode_requeue_puts_the_lower_tier_batch_job_back_in_the_queue() {
    let mut h = harness(|values| {
        preemption_values(values);
        values.slurm.partitions[0].preempt_mode = "REQUEUE".to_owned();
    });
    let low = h.world.submit_batch_job(&Scope::Cluster, batch(8, None)).unwrap();
    let mut urgent = batch(8, Some(60));
    urgent.partition = Some("high".to_owned());
    let urgent = h.world.submit_batch_job(&Scope::Cluster, urgent).unwrap();
    h.advance(1);
    let requeued = h.queued(low).expect("a requeued job stays queued");
    assert_eq!((requeued.state, requeued.start), (JobBaseState::Pending, None), "waiting again, as a fresh request");
    assert_eq!(h.world.slurm.transitions.get(JobTransition::Requeue), 1);
    assert_eq!(h.queued(urgent).unwrap().state, JobBaseState::Running);
    h.advance(61);
    assert_eq!(h.queued(low).unwrap().state, JobBaseState::Running, "placed again once the urgent job ended");
}

#[test]
fn a_batch_job_over_its_time_limit_ends_timeout() {
    let mut h = harness(|_| {});
    let mut request = batch(2, Some(600));
    request.time_limit_seconds = Some(10);
    let job = h.world.submit_batch_job(&Scope::Cluster, request).unwrap();
    h.advance(9);
    assert_eq!(h.queued(job).unwrap().state, JobBaseState::Running);
    h.advance(1);
    let record = h.record(job);
    // Slurm's job line for a job that hit its limit: 0:0 (its batch step was cancelled).
    assert_eq!((record.state, record.exit_code), (JobBaseState::Timeout, (0, 0)));
    assert!(h.queued(job).is_none(), "released after the epilog");
}

#[test]
fn job_transitions_refuse_phases_that_do_not_allow_them() {
    let mut h = harness(|values| values.node_sets[0].replicas = 1);
    let now = h.world.now();
    let running = h.world.submit_batch_job(&Scope::Cluster, batch(8, None)).unwrap();
    let pending = h.world.submit_batch_job(&Scope::Cluster, batch(8, None)).unwrap();
    let slurm = &mut h.world.slurm;
    assert_eq!(
        (slurm.job(running).unwrap().phase(), slurm.job(pending).unwrap().phase()),
        (JobPhase::Running, JobPhase::Pending)
    );
    fn refused<T>(transition: JobTransition, state: &'static str) -> Result<T, IllegalJobTransition> {
        Err(IllegalJobTransition { transition, state })
    }
    assert_eq!(slurm.start_script(running), refused(JobTransition::StartScript, "RUNNING"), "no prolog to end");
    assert_eq!(slurm.start_script(pending), refused(JobTransition::StartScript, "PENDING"));
    assert_eq!(slurm.finish(pending, JobBaseState::Completed, (0, 0), now), refused(JobTransition::Finish, "PENDING"));
    assert_eq!(slurm.release(running, now), refused(JobTransition::Release, "RUNNING"));
    assert_eq!(slurm.cancel(running, 0, now), Ok(true));
    assert_eq!(slurm.job(running).unwrap().phase(), JobPhase::Completing);
    assert_eq!(slurm.cancel(running, 0, now), refused(JobTransition::Cancel, "COMPLETING"), "no second cancel");
    assert_eq!(slurm.cancel(pending, 0, now), Ok(false));
    assert_eq!(slurm.cancel(pending, 0, now), refused(JobTransition::Cancel, "ENDED"));
    assert_eq!(
        refused::<()>(JobTransition::Release, "ENDED").unwrap_err().to_string(),
        "transition release is not allowed while the job is ENDED"
    );
}

#[test]
fn item_29_completing_is_never_in_accounting() {
    let mut h = harness(|_| {});
    let uid = h.create(sunk_pod("cg"));
    h.advance(1);
    let job_id = h.job_id(&uid).unwrap();
    h.world.delete_pod(&Scope::Cluster, "sandboxes", "cg", Some(10)).unwrap();
    assert!(h.queued(job_id).unwrap().completing);
    assert!(!h.record(job_id).completing);
    assert_eq!(h.record(job_id).state, JobBaseState::Cancelled);
    assert!(h.world.slurm.accounting_records().iter().all(|job| !job.completing));
}

#[test]
fn item_43_scheduler_pod_and_configmap_carry_name_and_killwait() {
    for version in [7, 8] {
        let h = harness(|values| values.sunk.version = version);
        let scheduler = h
            .world
            .cluster
            .pods_iter()
            .find(|pod| pod.labels.get("app.kubernetes.io/name").map(String::as_str) == Some("sunk-scheduler"))
            .expect("scheduler pod");
        assert_eq!(scheduler.namespace, "tenant-slurm");
        let container = scheduler.containers.iter().find(|container| container.name == "scheduler").unwrap();
        assert!(container.args.contains(&"--slurm-kill-wait=30s".to_owned()), "{:?}", container.args);
        let config = h
            .world
            .cluster
            .config_maps
            .values()
            .find(|map| map.labels.get("app.kubernetes.io/component").map(String::as_str) == Some("scheduler"));
        if version == 7 {
            assert!(container.args.contains(&format!("--scheduler-name={SCHEDULER}")));
            assert!(config.is_none());
        } else {
            let conf = &config.expect("8.x ConfigMap").data["scheduler.conf"];
            assert!(conf.contains(&format!("name: {SCHEDULER}")), "{conf}");
        }
    }
}

#[test]
fn item_44_unsatisfied_node_affinity_leaves_the_pod_stuck_after_binding() {
    let mut h = harness(|_| {});
    let mut pod = sunk_pod("affinity");
    pod.required_node_affinity = vec![
        labels(&[])
            .into_iter()
            .map(|(k, v): (String, String)| (k, vec![v]))
            .chain([("zone".to_owned(), vec!["nowhere".to_owned()])])
            .collect(),
    ];
    let uid = h.create(pod);
    assert!(h.job_id(&uid).is_some(), "Slurm allocates");
    h.advance(1);
    let pod = h.pod(&uid);
    assert!(pod.node_name.is_some(), "SUNK binds");
    assert_eq!((pod.phase, pod.reason.as_deref()), (PodPhase::Failed, Some("NodeAffinity")));
    h.advance(60);
    assert_eq!(h.pod(&uid).node_name, pod.node_name, "no retry elsewhere");
}

/// Every named transition of the world (nodes, SUNK), of Pods and of Slurm jobs runs in some checklist item.
#[test]
fn every_world_pod_and_job_transition_is_exercised() {
    let coverage = coverage_of(&[
        preempt_mode_requeue_puts_the_lower_tier_batch_job_back_in_the_queue,
        a_batch_job_over_its_time_limit_ends_timeout,
        default_scheduler_pod_that_fits_no_node_waits_with_one_failed_scheduling_warning,
        item_01_other_scheduler_name_is_ignored,
        item_02_namespace_scope_ignores_other_namespaces_cluster_scope_handles_them,
        item_03_default_grace_with_killwait_30_is_rejected_once_without_retry,
        item_04_grace_25_rejected_grace_24_accepted,
        item_05_killwait_60_accepts_50_rejects_55,
        item_06_missing_or_zero_cpu_or_memory_requests_are_rejected,
        item_07_invalid_exclusive_value_is_rejected,
        item_08_unknown_partition_is_refused_by_slurm,
        item_09_valid_pod_goes_pending_then_running_and_binds_to_the_slurmd_node,
        item_10_prolog_shows_running_with_reason_prolog_then_extra_started_and_binding,
        item_11_node_lock_taint_annotation_and_eviction,
        item_11_lock_moves_from_false_through_pending,
        item_12_annotations_set_account_partition_qos_comment_reservation,
        item_13_user_id_annotation_sets_the_owner_default_is_root,
        item_14_cpus_and_memory_map_to_alloc_cpus_and_req_mem,
        item_15_gpu_requests_become_gres_of_the_node_type_without_shared_indices,
        item_16_kubelet_rejects_with_outofcpu_and_outofmemory,
        item_17_lowering_slurmd_requests_lets_the_same_pod_run,
        item_18_exclusive_none_holds_the_whole_node,
        item_19_exclusive_user_shares_only_with_the_same_user,
        item_20_exclusive_ok_with_gpus_is_rejected,
        item_21_guaranteed_integer_cpu_pod_pins_cpus_and_the_next_job_drains_the_node,
        item_21_fractional_or_burstable_cpu_and_a_disabled_cpu_manager_pin_nothing,
        item_22_slurm_job_on_all_gpus_and_a_cpu_only_pod_share_a_node,
        item_23_kubectl_delete_pod_cancels_the_placeholder_and_unlocks,
        item_24_scancel_running_placeholder_terminates_the_pod,
        item_24_pod_that_honours_sigterm_goes_at_once,
        item_25_pod_outliving_killwait_drains_the_node,
        item_26_scancel_pending_placeholder_never_binds,
        item_27_pod_finishing_by_itself_releases_the_placeholder,
        item_28_higher_tier_job_preempts_a_placeholder_after_its_pod_is_gone,
        item_28_higher_tier_placeholder_preempts_a_batch_job,
        item_29_completing_is_never_in_accounting,
        item_43_scheduler_pod_and_configmap_carry_name_and_killwait,
        item_44_unsatisfied_node_affinity_leaves_the_pod_stuck_after_binding,
    ]);
    assert_eq!(coverage.world.never_run(), [], "world transitions no scenario here exercises");
    assert_eq!(coverage.jobs.never_run(), [], "jobs transitions no scenario here exercises");
    assert_eq!(coverage.pods.never_run(), [], "pods transitions no scenario here exercises");
}

#[test]
fn item_15_a_default_scheduler_gpu_pod_gets_gpus_no_other_pod_holds() {
    use cwsandbox_sim::query::Scope;
    use cwsandbox_sim::world::{Effect, NVIDIA_VISIBLE_DEVICES};
    let mut h = harness(|values| {
        values.node_sets[0].replicas = 1;
        values.node_sets[0].gpus = 8;
        values.node_sets[0].gpu_class = "H100".to_owned();
        values.scheduler.gpu_types.insert("H100".to_owned(), "h100".to_owned());
    });
    let gpu_pod = |name: &str| {
        let mut pod = default_scheduler_pod(name, ("1", "1Gi"), ("1", "1Gi"));
        pod.containers[0].2.gpu = Some(2);
        pod.containers[0].3.gpu = Some(2);
        pod
    };
    // No Slurm job runs on the Node (one would lock it against these Pods).
    h.world.take_effects();
    let first = h.create(gpu_pod("first"));
    let second = h.create(gpu_pod("second"));
    h.advance(1);
    let devices = |effects: Vec<Effect>| -> Vec<(String, Option<String>)> {
        effects
            .into_iter()
            .filter_map(|effect| match effect {
                Effect::StartPod(PodLaunch { pod_uid, containers, .. }) => {
                    Some((pod_uid.to_string(), containers[0].env.get(NVIDIA_VISIBLE_DEVICES).cloned()))
                }
                _ => None,
            })
            .collect()
    };
    let started = devices(h.world.take_effects());
    let given = |uid: &str| -> Vec<u32> {
        let (_, indices) = started.iter().find(|(pod, _)| pod == uid).expect("started");
        indices.as_deref().unwrap_or_default().split(',').map(|index| index.parse().unwrap()).collect()
    };
    let (first_gpus, second_gpus) = (given(&first), given(&second));
    assert_eq!((first_gpus.len(), second_gpus.len()), (2, 2), "{started:?}");
    assert!(first_gpus.iter().all(|index| !second_gpus.contains(index)), "{started:?}");

    // Freed when the Pod goes: the next Pod gets them again.
    h.world.delete_pod(&Scope::Cluster, "sandboxes", "first", Some(0)).unwrap();
    h.advance(1);
    h.world.take_effects();
    let third = h.create(gpu_pod("third"));
    h.advance(1);
    let started = devices(h.world.take_effects());
    let (_, third_gpus) = started.iter().find(|(pod, _)| *pod == third).expect("started").clone();
    let mut reused: Vec<u32> = third_gpus.unwrap_or_default().split(',').map(|index| index.parse().unwrap()).collect();
    reused.sort();
    let mut freed = first_gpus.clone();
    freed.sort();
    assert_eq!(reused, freed, "the lowest free GPUs are the first Pod's");
}
