//! Random sequences of creates, deletes, exits, cancels, batch jobs and clock advances never
//! over-allocate a node, never leave a running job without its Pod (or the reverse) beyond the
//! teardown window, and never lose an accounting record. Seeded: a failure replays exactly.

mod common;

use std::collections::{BTreeSet, HashMap};

use common::*;
use cwsandbox_api::sandbox_v1::{Container, ResourceRequirements, Resources, SandboxMode, SandboxSpec};
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::ids::{IdSource, SeededIds};
use cwsandbox_sim::k8s::{PodOwner, PodPhase, ResourceTotals};
use cwsandbox_sim::query::Scope;
use cwsandbox_sim::sandbox::{Owner, SandboxFilter, SandboxView};
use cwsandbox_sim::slurm::{JobBaseState, JobKind, Sharing};

fn spec(rng: &mut SeededIds) -> SandboxSpec {
    let cpu = ["500m", "1", "2", "3"][(rng.next_u64() % 4) as usize];
    let memory = ["256Mi", "1Gi", "4Gi"][(rng.next_u64() % 3) as usize];
    let mut annotations = std::collections::HashMap::new();
    match rng.next_u64() % 5 {
        0 => {
            annotations.insert("sunk.coreweave.com/exclusive".to_owned(), "none".to_owned());
        }
        1 => {
            annotations.insert("sunk.coreweave.com/exclusive".to_owned(), "user".to_owned());
            annotations.insert(
                "sunk.coreweave.com/user-id".to_owned(),
                ["1001", "1002"][(rng.next_u64() % 2) as usize].to_owned(),
            );
        }
        2 => {
            annotations.insert("sunk.coreweave.com/partition".to_owned(), "hpc-prod".to_owned());
        }
        _ => {}
    }
    SandboxSpec {
        containers: vec![Container {
            name: "main".to_owned(),
            image: "python:3.11".to_owned(),
            resource_requirements: Some(ResourceRequirements {
                requests: Some(Resources { cpu: cpu.to_owned(), memory: memory.to_owned(), gpu: None }),
                limits: None,
            }),
            ..Container::default()
        }],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        annotations,
        ..SandboxSpec::default()
    }
}

fn check_invariants(h: &Harness, known_records: &mut BTreeSet<u32>, step: usize) {
    let world = &h.world;
    // Slurm never over-allocates, and node bookkeeping matches the jobs on it.
    for node in &world.slurm.nodes {
        assert!(node.alloc_cpus <= node.cpus, "step {step}: {} over-allocated CPUs", node.name);
        assert!(node.alloc_mem_mb <= node.real_memory_mb, "step {step}: {} over-allocated memory", node.name);
        let jobs: Vec<_> = node.jobs.iter().map(|id| world.slurm.job(*id).expect("node holds a queued job")).collect();
        assert_eq!(node.alloc_cpus, jobs.iter().map(|job| job.alloc_cpus).sum::<u32>(), "step {step}: {}", node.name);
        let exclusive = jobs.iter().filter(|job| job.sharing == Sharing::Exclusive).count();
        assert!(exclusive == 0 || jobs.len() == 1, "step {step}: exclusive job shares {}", node.name);
        let user_jobs: BTreeSet<u32> =
            jobs.iter().filter(|job| job.sharing == Sharing::User).map(|job| job.uid).collect();
        if !user_jobs.is_empty() {
            let owners: BTreeSet<u32> = jobs.iter().map(|job| job.uid).collect();
            assert_eq!(owners.len(), 1, "step {step}: user-exclusive node {} shared across users", node.name);
        }
    }
    // Kubelet bookkeeping: a node's requests are exactly its live Pods' requests, within capacity
    // for everything kubelet admitted.
    for node in world.cluster.nodes.values() {
        let mut sum = ResourceTotals::default();
        for pod in world.cluster.pods_on(&node.name).filter(|pod| pod.holds_resources()) {
            sum.add(pod.requested());
        }
        assert_eq!(node.requested, sum, "step {step}: {} bookkeeping", node.name);
        assert!(
            node.requested.cpu_millis <= node.allocatable.cpu_millis,
            "step {step}: {} CPU over capacity",
            node.name
        );
        assert!(
            node.requested.memory_bytes <= node.allocatable.memory_bytes,
            "step {step}: {} memory over capacity",
            node.name
        );
    }
    // A running placeholder has a live Pod; a running SUNK Pod has a running placeholder.
    for job in world.slurm.queue.values() {
        if let JobKind::Placeholder { pod_uid } = &job.kind
            && job.state == JobBaseState::Running
            && !job.completing
            && !job.in_prolog
        {
            let pod = world.cluster.pod(pod_uid);
            assert!(
                pod.is_some_and(|pod| !pod.phase.is_terminal()),
                "step {step}: job {} runs without its Pod",
                job.id
            );
        }
    }
    for pod in world.cluster.pods_iter() {
        if matches!(pod.owner, PodOwner::Sandbox(_))
            && pod.phase == PodPhase::Running
            && pod.deletion_timestamp.is_none()
        {
            let job = world.placeholder_job(&pod.uid).and_then(|id| world.slurm.job(id));
            assert!(
                job.is_some_and(|job| job.state == JobBaseState::Running && !job.completing),
                "step {step}: Pod {} runs without its job",
                pod.name
            );
        }
    }
    // Accounting only grows, and covers every submission.
    let now: BTreeSet<u32> = world.slurm.accounting_records().iter().map(|job| job.id).collect();
    assert!(known_records.is_subset(&now), "step {step}: accounting lost records");
    assert_eq!(
        now.len() as u64,
        world.transitions.get(cwsandbox_sim::world::Transition::PlaceholderSubmitted) + batch_count(world),
        "step {step}"
    );
    *known_records = now;
}

fn batch_count(world: &cwsandbox_sim::world::World) -> u64 {
    world.slurm.accounting_records().iter().filter(|job| matches!(job.kind, JobKind::Batch { .. })).count() as u64
}

/// A reader that copies only the sandboxes the world says were touched holds exactly what
/// reading every sandbox afresh gives: no change to a view goes unreported.
fn check_copies_of_the_touched(h: &mut Harness, copies: &mut HashMap<String, SandboxView>, step: usize) {
    for id in h.world.take_touched_sandboxes() {
        match h.world.sandbox(&id) {
            Some(view) => copies.insert(id.to_string(), view),
            None => copies.remove(id.as_str()),
        };
    }
    let every = SandboxFilter { show_terminated: true, ..Default::default() };
    let fresh: HashMap<String, SandboxView> = h
        .world
        .list_sandboxes("default-org", &every, 1000, "")
        .unwrap()
        .0
        .into_iter()
        .map(|view| (view.id.to_string(), view))
        .collect();
    assert_eq!(copies.len(), fresh.len(), "step {step}: the copies hold every sandbox on record and no other");
    for (id, view) in &fresh {
        assert_eq!(copies.get(id), Some(view), "step {step}: sandbox {id}'s copy is stale");
    }
}

#[test]
fn random_operations_keep_the_invariants() {
    for seed in 0..12u64 {
        let mut values = Values::scenario(Scenario::Ready);
        values.node_sets[0].replicas = 3;
        values.sandboxes.retention_seconds = 120;
        let mut h = harness_with(values);
        let mut rng = SeededIds::new(1000 + seed);
        let owner = Owner { org: "default-org".to_owned(), user: "alice".to_owned() };
        let mut known = BTreeSet::new();
        h.world.keep_touched_sandboxes();
        let mut copies = HashMap::new();
        for step in 0..250 {
            let live: Vec<String> = h
                .world
                .list_sandboxes(
                    "default-org",
                    &SandboxFilter { show_terminated: false, ..Default::default() },
                    1000,
                    "",
                )
                .unwrap()
                .0
                .into_iter()
                .map(|view| view.id.to_string())
                .collect();
            let pick = |rng: &mut SeededIds, items: &[String]| {
                items.get((rng.next_u64() as usize) % items.len().max(1)).cloned()
            };
            match rng.next_u64() % 8 {
                0 | 1 => {
                    let spec = spec(&mut rng);
                    h.world.create_sandbox(&owner, spec, "", "").expect("create");
                }
                2 => {
                    if let Some(id) = pick(&mut rng, &live) {
                        let grace = (rng.next_u64() % 15) as i32;
                        h.world.delete_sandbox("default-org", &id, grace).expect("delete");
                    }
                }
                3 => {
                    if let Some(id) = pick(&mut rng, &live) {
                        h.world.sandbox_exited(&id, (rng.next_u64() % 3) as i32);
                    }
                }
                4 => {
                    let queued: Vec<u32> = h.world.slurm.queue.keys().copied().collect();
                    if !queued.is_empty() {
                        let job = queued[(rng.next_u64() as usize) % queued.len()];
                        // Slurm refuses to cancel a job that is already completing.
                        let completing = h.world.slurm.job(job).is_some_and(|job| job.completing);
                        match h.world.scancel(&Scope::Cluster, job, 0) {
                            Ok(()) => assert!(!completing, "a completing job cannot be cancelled again"),
                            Err(error) => assert!(completing, "scancel of a queued job: {error}"),
                        }
                    }
                }
                5 => {
                    let request = batch(1 + (rng.next_u64() % 8) as u32, Some(1 + (rng.next_u64() % 60) as u32));
                    h.world.submit_batch_job(&Scope::Cluster, request).expect("batch");
                }
                _ => h.advance_millis(rng.next_u64() % 30_000),
            }
            check_invariants(&h, &mut known, step);
            check_copies_of_the_touched(&mut h, &mut copies, step);
        }
        // Let everything drain: every job ends, nothing is left running without its pair.
        h.advance(600);
        check_invariants(&h, &mut known, usize::MAX);
        check_copies_of_the_touched(&mut h, &mut copies, usize::MAX);
    }
}
