//! A world on a manual clock, with shorthands for the checklist tests.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use cwsandbox_sim::config::{PartitionValues, Scenario, Values};
use cwsandbox_sim::ids::SeededIds;
use cwsandbox_sim::k8s::{Event, Pod, PodOwner};
use cwsandbox_sim::machine::Counts;
use cwsandbox_sim::quantity::Quantity;
use cwsandbox_sim::resolved::ResourceAmounts;
use cwsandbox_sim::sandbox::SandboxTransition;
use cwsandbox_sim::slurm::{Job, JobKind, JobRequest, JobTransition, Sharing};
use cwsandbox_sim::time::{ManualClock, SimTime};
use cwsandbox_sim::world::{PodRequest, PodTransition, Transition, World};

pub const SCHEDULER: &str = "tenant-slurm-slurm-scheduler";

/// The one container `Sandbox.run(...)` of the published client sends by default: its
/// keep-alive command, which honours SIGTERM.
pub fn client_container() -> cwsandbox_api::sandbox_v1::Container {
    cwsandbox_api::sandbox_v1::Container {
        name: "main".to_owned(),
        image: "python:3.11".to_owned(),
        command: "/bin/sh".to_owned(),
        args: vec!["-c".to_owned(), "trap \"exit 0\" TERM INT; sleep infinity & wait".to_owned()],
        ..Default::default()
    }
}
pub const START: SimTime = SimTime::from_secs(1_764_480_000);

pub struct Harness {
    pub world: World,
    pub clock: ManualClock,
}

/// Transitions run by every harness this thread dropped, per machine: a coverage test runs the
/// scenarios of its file on one thread and reads what they exercised.
#[derive(Default)]
pub struct Coverage {
    pub world: Counts<Transition>,
    pub pods: Counts<PodTransition>,
    pub jobs: Counts<JobTransition>,
    pub sandboxes: Counts<SandboxTransition>,
}

thread_local! {
    pub static COVERAGE: RefCell<Coverage> = RefCell::new(Coverage::default());
}

impl Drop for Harness {
    fn drop(&mut self) {
        COVERAGE.with(|coverage| {
            let mut coverage = coverage.borrow_mut();
            coverage.world.merge(&self.world.transitions);
            coverage.pods.merge(&self.world.pod_transitions);
            coverage.jobs.merge(&self.world.slurm.transitions);
            coverage.sandboxes.merge(&self.world.sandbox_transitions);
        });
    }
}

/// Runs `scenarios` on this thread and returns the transitions they exercised.
pub fn coverage_of(scenarios: &[fn()]) -> Coverage {
    COVERAGE.with(|coverage| *coverage.borrow_mut() = Coverage::default());
    for scenario in scenarios {
        scenario();
    }
    COVERAGE.with(|coverage| std::mem::take(&mut *coverage.borrow_mut()))
}

/// The checklist's defaults (docs/facts/sunk-checklist.md#defaults): scheduler
/// `tenant-slurm-slurm-scheduler`, KillWait 30 s, one default partition `cpu`, two 8-CPU/32Gi
/// nodes whose slurmd requests 1 CPU/4Gi, and no serverless pool (the checklist is about a
/// customer's cluster, which holds none).
pub fn checklist_values() -> Values {
    let mut values = Values::scenario(Scenario::Ready);
    values.serverless.enabled = false;
    values.scheduler.name = SCHEDULER.to_owned();
    values.slurm_config.kill_wait = 30;
    values.node_sets[0].replicas = 2;
    values.node_sets[0].cpu = "8".to_owned();
    values.node_sets[0].memory = "32Gi".to_owned();
    values.node_sets[0].slurmd.requests.cpu = "1".to_owned();
    values.node_sets[0].slurmd.requests.memory = "4Gi".to_owned();
    values.slurm.partitions = vec![PartitionValues {
        name: "cpu".to_owned(),
        default: true,
        node_sets: vec!["cpu".to_owned()],
        over_subscribe: "NO".to_owned(),
        priority_tier: 1,
        preempt_mode: "OFF".to_owned(),
    }];
    values
}

pub fn harness_with(values: Values) -> Harness {
    let clock = ManualClock::new(START);
    let world = World::new(values, Box::new(clock.clone()), Box::new(SeededIds::new(42))).expect("valid values");
    Harness { world, clock }
}

/// The ready scenario whose runner policy has `constraints.security` = `security` (its
/// RuntimeClass allowlist or mappings), and whose Nodes have the named RuntimeClasses `classes`.
pub fn ready_with_runtime_classes(security: serde_json::Value, classes: &[&str]) -> Harness {
    let mut values = Values::scenario(cwsandbox_sim::config::Scenario::Ready);
    let policy = values.runners[0].policy.get_or_insert_with(|| serde_json::json!({}));
    policy["constraints"]["security"] = security;
    let mut h = harness_with(values);
    h.world.set_runtime_classes(Some(classes.iter().map(|class| (*class).to_owned()).collect()));
    h
}

pub fn harness(modify: impl FnOnce(&mut Values)) -> Harness {
    let mut values = checklist_values();
    modify(&mut values);
    harness_with(values)
}

pub fn amounts(cpu: Option<&str>, memory: Option<&str>, gpu: Option<i64>) -> ResourceAmounts {
    ResourceAmounts {
        cpu: cpu.map(|text| Quantity::parse(text).unwrap()),
        memory: memory.map(|text| Quantity::parse(text).unwrap()),
        gpu,
    }
}

/// A SUNK Pod in namespace `sandboxes` with grace 20 s requesting 1 CPU and 1Gi.
pub fn sunk_pod(name: &str) -> PodRequest {
    PodRequest {
        namespace: "sandboxes".to_owned(),
        name: name.to_owned(),
        scheduler_name: SCHEDULER.to_owned(),
        termination_grace_period_seconds: Some(20),
        containers: vec![(
            "main".to_owned(),
            "python:3.11".to_owned(),
            amounts(Some("1"), Some("1Gi"), None),
            amounts(None, None, None),
        )],
        ..PodRequest::default()
    }
}

pub fn with_requests(mut pod: PodRequest, cpu: Option<&str>, memory: Option<&str>, gpu: Option<i64>) -> PodRequest {
    pod.containers[0].2 = amounts(cpu, memory, gpu);
    pod
}

pub fn annotated(mut pod: PodRequest, pairs: &[(&str, &str)]) -> PodRequest {
    for (key, value) in pairs {
        pod.annotations.insert(format!("sunk.coreweave.com/{key}"), (*value).to_owned());
    }
    pod
}

impl Harness {
    pub fn create(&mut self, pod: PodRequest) -> String {
        self.world.create_pod(pod, PodOwner::Other).expect("pod accepted")
    }

    pub fn advance(&mut self, seconds: u64) {
        self.clock.advance(Duration::from_secs(seconds));
        self.world.tick();
    }

    pub fn advance_millis(&mut self, millis: u64) {
        self.clock.advance(Duration::from_millis(millis));
        self.world.tick();
    }

    pub fn pod(&self, uid: &str) -> Pod {
        self.world.cluster.pod(uid).cloned().expect("pod exists")
    }

    pub fn pod_exists(&self, uid: &str) -> bool {
        self.world.cluster.pod(uid).is_some()
    }

    pub fn job_id(&self, uid: &str) -> Option<u32> {
        self.world.placeholder_job(uid)
    }

    /// The job as squeue sees it (queue), or as sacct does once it left.
    pub fn job(&self, uid: &str) -> Job {
        let id = self.job_id(uid).expect("pod has a placeholder job");
        self.world.slurm.job_or_record(id).cloned().expect("job known")
    }

    pub fn queued(&self, id: u32) -> Option<Job> {
        self.world.slurm.job(id).cloned()
    }

    pub fn record(&self, id: u32) -> Job {
        self.world.slurm.accounting_record(id).expect("accounting record")
    }

    pub fn events_for(&self, uid: &str) -> Vec<Event> {
        self.world.cluster.events.iter().filter(|event| event.involved.uid == uid).cloned().collect()
    }

    pub fn warnings_for(&self, uid: &str) -> Vec<Event> {
        self.events_for(uid).into_iter().filter(|event| event.event_type.as_str() == "Warning").collect()
    }

    pub fn slurmd_lock(&self, slurm_node: &str) -> String {
        let pod = self.world.cluster.pod_by_name("tenant-slurm", slurm_node).expect("slurmd pod");
        pod.annotations.get("sunk.coreweave.com/lock").cloned().unwrap_or_default()
    }

    pub fn node_locked(&self, node: &str) -> bool {
        self.world.cluster.nodes[node]
            .taints
            .iter()
            .any(|taint| taint.key == "sunk.coreweave.com/lock" && taint.effect == "NoExecute")
    }

    pub fn total_jobs(&self) -> usize {
        self.world.slurm.accounted_jobs()
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
}

/// An ordinary Slurm batch job of alice's (uid 1001) in the default partition.
pub fn batch(cpus: u32, run_seconds: Option<u32>) -> JobRequest {
    JobRequest {
        name: "train".to_owned(),
        uid: 1001,
        gid: None,
        account: None,
        partition: None,
        qos: None,
        comment: None,
        reservation: None,
        cpus,
        mem_mb: 1024,
        gpus: 0,
        gres_type: None,
        gres_type_required: false,
        sharing: Sharing::Default,
        time_limit_seconds: None,
        priority: 100,
        kind: JobKind::Batch { run_seconds, exit_code: 0, command: None },
        prolog: false,
    }
}
