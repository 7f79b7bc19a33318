//! The world: Kubernetes, the SUNK scheduler, Slurm, runners and sandboxes, moved by commands
//! and by time. Every command settles the world before it returns: due timers fire in time
//! order, schedulers run until nothing changes, and each decision leaves an Event.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{CpuManagerPolicy, FinalJobState, SandboxValues, Values};
use crate::error::{Reason, SimError, SimResult};
use crate::ids::{IdHash, IdSource, SeededIds, SharedStr};
use crate::k8s::{
    Cluster, ConfigMap, ContainerState, Event, EventType, LOCK_KEY, Namespace, Node, ObjectRef, Pod, PodContainer,
    PodOwner, PodPhase, ResourceTotals, Taint,
};
use crate::quantity::Quantity;
use crate::query::Scope;
use crate::resolved::{ResourceAmounts, Toleration};
use crate::runners::RunnerRegistry;
use crate::slurm::{
    JobBaseState, JobId, JobKind, JobRequest, Partition, PreemptMode, Slurm, SlurmNode, SlurmOutcome, SubmitError, User,
};
use crate::sunk;
use crate::time::{Clock, ManualClock, SimTime};

/// Label every sandbox Pod carries.
pub const SANDBOX_ID_LABEL: &str = "sandbox.coreweave.com/sandbox-id";

/// Something the world asks its host to do outside the simulation (run or stop processes).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// A Pod's containers start: run its main command.
    StartPod {
        /// Pod uid.
        pod_uid: SharedStr,
        /// Namespace.
        namespace: SharedStr,
        /// Pod name (the hostname inside).
        pod_name: SharedStr,
        /// The sandbox, if it is a sandbox Pod.
        sandbox_id: Option<SharedStr>,
    },
    /// SIGTERM the Pod's processes; they have `grace` before SIGKILL.
    StopPod {
        /// Pod uid.
        pod_uid: SharedStr,
        /// Grace period.
        grace: Duration,
    },
    /// The Pod is gone: SIGKILL whatever is left.
    KillPod {
        /// Pod uid.
        pod_uid: SharedStr,
    },
}

/// What a timer does when it fires.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    PrologDone(JobId),
    EpilogDone(JobId),
    BatchJobEnds(JobId),
    TimeLimit(JobId),
    DrainBeforeKillWait(JobId),
    KillWait(JobId),
    PodGraceOver(SharedStr),
    SandboxLifetime(SharedStr),
    SandboxForget(SharedStr),
}

/// Named world transitions, counted so tests can check coverage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// A Pod was created.
    PodCreated,
    /// SUNK ignored a Pod (name or scope).
    PodIgnored,
    /// SUNK refused a Pod (validation).
    PodRejectedBySunk,
    /// Slurm refused the placeholder job.
    PlaceholderRefused,
    /// A placeholder job was submitted.
    PlaceholderSubmitted,
    /// A node was locked for a job.
    NodeLocked,
    /// A node was unlocked.
    NodeUnlocked,
    /// A Pod was bound to a Node.
    PodBound,
    /// Kubelet admitted a Pod; it runs.
    PodStarted,
    /// Kubelet refused a Pod (`OutOfcpu`, `NodeAffinity`…).
    PodRejectedByKubelet,
    /// A Pod got a deletion timestamp.
    PodTerminating,
    /// A Pod object was removed.
    PodRemoved,
    /// A Pod's containers exited by themselves.
    PodFinished,
    /// A Pod was evicted by the lock taint.
    PodEvicted,
    /// The default scheduler could not place a Pod.
    DefaultSchedulingFailed,
    /// A node was drained because a Pod outlived KillWait.
    NodeDrained,
    /// KillWait ran out and Slurm killed the script.
    JobKilled,
    /// The kubelet's static CPU Manager gave a Pod exclusive CPUs Slurm does not know about.
    CpusPinned,
    /// A Slurm job started on CPUs the kubelet had pinned: it failed and the node drained.
    JobFailedOnPinnedCpus,
}

impl Transition {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Transition::PodCreated => "pod_created",
            Transition::PodIgnored => "pod_ignored",
            Transition::PodRejectedBySunk => "pod_rejected_by_sunk",
            Transition::PlaceholderRefused => "placeholder_refused",
            Transition::PlaceholderSubmitted => "placeholder_submitted",
            Transition::NodeLocked => "node_locked",
            Transition::NodeUnlocked => "node_unlocked",
            Transition::PodBound => "pod_bound",
            Transition::PodStarted => "pod_started",
            Transition::PodRejectedByKubelet => "pod_rejected_by_kubelet",
            Transition::PodTerminating => "pod_terminating",
            Transition::PodRemoved => "pod_removed",
            Transition::PodFinished => "pod_finished",
            Transition::PodEvicted => "pod_evicted",
            Transition::DefaultSchedulingFailed => "default_scheduling_failed",
            Transition::NodeDrained => "node_drained",
            Transition::JobKilled => "job_killed",
            Transition::CpusPinned => "cpus_pinned",
            Transition::JobFailedOnPinnedCpus => "job_failed_on_pinned_cpus",
        }
    }
}

/// A Pod to create through the world (sandbox Pods are built from resolved specs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodRequest {
    /// Namespace (created if missing).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// `spec.schedulerName`; empty means `default-scheduler`.
    pub scheduler_name: String,
    /// `spec.terminationGracePeriodSeconds`; `None` is the Kubernetes default, 30.
    pub termination_grace_period_seconds: Option<i64>,
    /// Containers: (name, image, requests, limits).
    pub containers: Vec<(String, String, ResourceAmounts, ResourceAmounts)>,
    /// Node selector.
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Required node affinity terms.
    pub required_node_affinity: Vec<BTreeMap<String, Vec<String>>>,
}

/// The world.
pub struct World {
    pub(crate) clock: Box<dyn Clock>,
    pub(crate) ids: Box<dyn IdSource>,
    pub(crate) values: Values,
    /// Kubernetes objects.
    pub cluster: Cluster,
    /// Slurm.
    pub slurm: Slurm,
    /// Managed runners.
    pub runners: RunnerRegistry,
    pub(crate) sandboxes: crate::sandbox::Sandboxes,
    /// The time the world has reached.
    now: SimTime,
    /// Pending timers by firing time, each time's in scheduling order (sequence number; `None`
    /// once cancelled). Timers bunch at a few instants (every command at one instant schedules
    /// its lifetimes, prologs and grace periods from the same `now`), so scheduling is a lookup
    /// among few times and a push; cancelling a forgotten sandbox's lifetime timer is a binary
    /// search, and it no longer waits, in memory, for its distant time.
    timers: BTreeMap<SimTime, VecDeque<(u64, Option<Timer>)>>,
    /// Emptied timer buckets kept for the next instants: a bucket holds a whole batch of
    /// timers, and freeing buffers that size makes the allocator sweep all its small free lists.
    spare_buckets: Vec<VecDeque<(u64, Option<Timer>)>>,
    timer_sequence: u64,
    placeholder_of_pod: HashMap<SharedStr, JobId, IdHash>,
    /// Scratch space for Slurm's scheduling outcomes.
    slurm_outcomes: Vec<SlurmOutcome>,
    /// Slurm node name → uid of its slurmd Pod, as last found (see `slurmd_pod_uid`).
    slurmd_pods: HashMap<String, SharedStr, IdHash>,
    pod_of_placeholder: HashMap<JobId, SharedStr, IdHash>,
    /// The organization of each job whose organization its sandbox no longer tells: batch jobs an
    /// organization submitted, and the placeholders of forgotten sandboxes (see `query::Scope`).
    pub(crate) job_orgs: HashMap<JobId, SharedStr, IdHash>,
    /// Organization names, one copy each, shared by the `job_orgs` entries that name them.
    pub(crate) org_names: HashMap<String, SharedStr>,
    /// Pods the scheduler refused: never retried.
    sunk_rejected: BTreeSet<SharedStr>,
    /// Pods needing a scheduling decision.
    unscheduled: BTreeSet<SharedStr>,
    /// Default-scheduler Pods waiting for room.
    waiting_for_room: BTreeSet<SharedStr>,
    /// Pods holding CPUs pinned by the kubelet: uid → (Node, whole CPUs).
    pinned_cpus: HashMap<SharedStr, (SharedStr, i64), IdHash>,
    /// Something released Node resources: retry `waiting_for_room`.
    room_freed: bool,
    slurm_dirty: bool,
    effects: Vec<Effect>,
    /// How often each named transition ran.
    pub transitions: crate::counts::TransitionCounts,
}

/// Most Nodes the NodeSets of a values document may describe: ten times the largest world the
/// benchmarks build, far beyond any cluster a guide walks through.
pub const MAX_NODES: u64 = 100_000;

/// slurm.conf's default `MaxJobId`, the largest `FirstJobId` a values document may name.
pub const MAX_JOB_ID: u32 = 67_043_328;

impl World {
    /// A world built from `values`, at the clock's current time.
    pub fn new(values: Values, clock: Box<dyn Clock>, ids: Box<dyn IdSource>) -> SimResult<World> {
        let now = clock.now();
        let mut world = World {
            clock,
            ids,
            values: values.clone(),
            cluster: Cluster::new(values.sandboxes.event_capacity),
            slurm: Slurm::new(values.slurm.first_job_id),
            runners: RunnerRegistry::default(),
            sandboxes: crate::sandbox::Sandboxes::default(),
            now,
            timers: BTreeMap::new(),
            spare_buckets: Vec::new(),
            timer_sequence: 0,
            placeholder_of_pod: HashMap::default(),
            slurmd_pods: HashMap::default(),
            slurm_outcomes: Vec::new(),
            pod_of_placeholder: HashMap::default(),
            job_orgs: HashMap::default(),
            org_names: HashMap::new(),
            sunk_rejected: BTreeSet::new(),
            unscheduled: BTreeSet::new(),
            waiting_for_room: BTreeSet::new(),
            pinned_cpus: HashMap::default(),
            room_freed: false,
            slurm_dirty: false,
            effects: Vec::new(),
            transitions: Default::default(),
        };
        world.build_topology()?;
        world.build_runners()?;
        world.settle();
        Ok(world)
    }

    /// The configuration in force.
    pub fn values(&self) -> &Values {
        &self.values
    }

    /// The time the world has reached.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Takes the effects produced since the last call.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        // The next batch starts at this one's size instead of growing from nothing again.
        let capacity = self.effects.len();
        std::mem::replace(&mut self.effects, Vec::with_capacity(capacity))
    }

    pub(crate) fn count(&mut self, transition: Transition) {
        self.transitions.add(transition.name());
    }

    fn quantity(text: &str, what: &str) -> SimResult<Quantity> {
        Quantity::parse(text).map_err(|error| SimError::invalid_field(what, error.to_string()))
    }

    fn build_topology(&mut self) -> SimResult<()> {
        let values = self.values.clone();
        self.ensure_namespace(&values.sunk.namespace);
        self.ensure_namespace("default");
        for user in &values.slurm.users {
            self.slurm.add_user(User {
                name: user.name.as_str().into(),
                uid: user.uid,
                group: user.group.as_str().into(),
                gid: user.gid,
                default_account: user.default_account.as_str().into(),
            });
        }
        if values.slurm.first_job_id > MAX_JOB_ID {
            // Ids count up from here; 4294967295 would overflow at the first job.
            return Err(SimError::invalid_field(
                "slurm.firstJobId",
                format!("{} is above Slurm's MaxJobId {MAX_JOB_ID}", values.slurm.first_job_id),
            ));
        }
        let mut nodes_of_set: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut node_count: u64 = 0;
        for (set_index, set) in values.node_sets.iter().enumerate() {
            node_count += u64::from(set.replicas);
            if node_count > MAX_NODES {
                // Checked before anything is built: `replicas: 4000000000` would otherwise hold the
                // world for hours and exhaust memory.
                return Err(SimError::invalid_field(
                    format!("nodeSets[{set_index}].replicas"),
                    format!("the NodeSets hold more than {MAX_NODES} nodes in all"),
                ));
            }
        }
        for (set_index, set) in values.node_sets.iter().enumerate() {
            let cpu = Self::quantity(&set.cpu, &format!("nodeSets[{set_index}].cpu"))?;
            let memory = Self::quantity(&set.memory, &format!("nodeSets[{set_index}].memory"))?;
            for replica in 0..set.replicas {
                let node_name = format!("node-{}-{replica}", set.name);
                let slurm_name = format!("slurm-{}-{replica}", set.name);
                let mut labels = set.labels.clone();
                labels.insert("kubernetes.io/hostname".to_owned(), node_name.clone());
                labels.insert("sunk.coreweave.com/nodeset".to_owned(), set.name.clone());
                if !set.gpu_class.is_empty() {
                    labels.insert("gpu.nvidia.com/class".to_owned(), set.gpu_class.clone());
                }
                let uid = self.ids.uid();
                self.cluster.nodes.insert(
                    node_name.clone(),
                    Node {
                        name: node_name.as_str().into(),
                        uid: uid.into(),
                        labels,
                        taints: Vec::new(),
                        allocatable: ResourceTotals {
                            cpu_millis: cpu.millis(),
                            memory_bytes: memory.units_ceil(),
                            gpus: i64::from(set.gpus),
                        },
                        requested: ResourceTotals::default(),
                        pinned_cpus: 0,
                        created: self.now,
                    },
                );
                self.slurm.add_node(SlurmNode {
                    name: slurm_name.clone(),
                    k8s_node: node_name.clone(),
                    cpus: u32::try_from(cpu.units_ceil()).unwrap_or(u32::MAX),
                    real_memory_mb: u64::try_from(memory.units_ceil() >> 20).unwrap_or(0),
                    gpus: set.gpus,
                    gres_type: values.scheduler.gpu_types.get(&set.gpu_class).cloned(),
                    partitions: Vec::new(),
                    alloc_cpus: 0,
                    alloc_mem_mb: 0,
                    gpus_in_use: 0,
                    jobs: Vec::new(),
                    drain_reason: None,
                });
                nodes_of_set.entry(set.name.clone()).or_default().push(slurm_name.clone());
                self.create_slurmd_pod(set_index, &slurm_name, &node_name)?;
            }
        }
        for (node_index, node) in values.extra_nodes.iter().enumerate() {
            let cpu = Self::quantity(&node.cpu, &format!("extraNodes[{node_index}].cpu"))?;
            let memory = Self::quantity(&node.memory, &format!("extraNodes[{node_index}].memory"))?;
            let mut labels = node.labels.clone();
            labels.insert("kubernetes.io/hostname".to_owned(), node.name.clone());
            let uid = self.ids.uid();
            self.cluster.nodes.insert(
                node.name.clone(),
                Node {
                    name: node.name.as_str().into(),
                    uid: uid.into(),
                    labels,
                    taints: Vec::new(),
                    allocatable: ResourceTotals {
                        cpu_millis: cpu.millis(),
                        memory_bytes: memory.units_ceil(),
                        gpus: 0,
                    },
                    requested: ResourceTotals::default(),
                    pinned_cpus: 0,
                    created: self.now,
                },
            );
        }
        if !values.slurm.partitions.iter().any(|partition| partition.default) {
            return Err(SimError::invalid_field("slurm.partitions", "one partition must be the default"));
        }
        for (index, partition) in values.slurm.partitions.iter().enumerate() {
            let mut nodes = Vec::new();
            for set in &partition.node_sets {
                let members = nodes_of_set.get(set).ok_or_else(|| {
                    SimError::invalid_field(
                        format!("slurm.partitions[{index}].nodeSets"),
                        format!("no NodeSet named {set:?}"),
                    )
                })?;
                nodes.extend(members.iter().cloned());
            }
            let preempt_mode = match partition.preempt_mode.to_ascii_uppercase().as_str() {
                "OFF" => PreemptMode::Off,
                "CANCEL" => PreemptMode::Cancel,
                "REQUEUE" => PreemptMode::Requeue,
                other => {
                    return Err(SimError::invalid_field(
                        format!("slurm.partitions[{index}].preemptMode"),
                        format!("{other:?} is not OFF, CANCEL or REQUEUE"),
                    ));
                }
            };
            self.slurm.add_partition(Partition {
                name: partition.name.as_str().into(),
                default: partition.default,
                nodes,
                over_subscribe: partition.over_subscribe.to_ascii_uppercase(),
                priority_tier: partition.priority_tier,
                preempt_mode,
            });
        }
        self.create_scheduler_objects();
        Ok(())
    }

    fn create_slurmd_pod(&mut self, set_index: usize, slurm_name: &str, node_name: &str) -> SimResult<()> {
        let set = &self.values.node_sets[set_index];
        let requests = ResourceAmounts {
            cpu: Some(Self::quantity(&set.slurmd.requests.cpu, &format!("nodeSets[{set_index}].slurmd.requests.cpu"))?),
            memory: Some(Self::quantity(
                &set.slurmd.requests.memory,
                &format!("nodeSets[{set_index}].slurmd.requests.memory"),
            )?),
            gpu: None,
        };
        let namespace = self.values.sunk.namespace.clone();
        let mut labels = BTreeMap::new();
        labels.insert("app.kubernetes.io/name".to_owned(), "slurmd".to_owned());
        labels.insert("sunk.coreweave.com/nodeset".to_owned(), set.name.clone());
        let mut annotations = BTreeMap::new();
        annotations.insert(LOCK_KEY.to_owned(), "false".to_owned());
        let container = PodContainer {
            name: "slurmd".to_owned(),
            image: "registry.gitlab.com/coreweave/sunk/slurmd:emulated".to_owned(),
            command: Vec::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            working_dir: None,
            requests,
            limits: ResourceAmounts::default(),
            state: ContainerState::Running(self.now),
        };
        let owner = PodOwner::Slurmd { slurm_node: slurm_name.to_owned() };
        let pod = self.system_pod(
            namespace,
            slurm_name.to_owned(),
            labels,
            annotations,
            Some(node_name.to_owned()),
            container,
            owner,
        );
        self.cluster.insert_pod(pod);
        Ok(())
    }

    /// A Pod of the platform itself (slurmd, the scheduler): already bound and running, and
    /// tolerating the node lock.
    #[allow(clippy::too_many_arguments)]
    fn system_pod(
        &mut self,
        namespace: String,
        name: String,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
        node_name: Option<String>,
        container: PodContainer,
        owner: PodOwner,
    ) -> Pod {
        Pod {
            uid: self.ids.uid(),
            namespace: namespace.into(),
            name: name.into(),
            labels: labels.into(),
            annotations: annotations.into(),
            scheduler_name: "default-scheduler".to_owned(),
            node_name: node_name.map(SharedStr::from),
            termination_grace_period_seconds: 30,
            node_selector: BTreeMap::new(),
            tolerations: vec![lock_toleration()],
            required_node_affinity: Vec::new(),
            priority_class_name: None,
            extra_spec: BTreeMap::new(),
            containers: vec![container],
            phase: PodPhase::Running,
            reason: None,
            message: None,
            scheduled_condition: Some((true, String::new(), String::new())),
            start_time: Some(self.now),
            created: self.now,
            deletion_timestamp: None,
            deletion_grace_period_seconds: None,
            owner,
            resource_version: 0,
            object_ref: Default::default(),
        }
    }

    /// The scheduler Pod (7.x: name in args) and, for 8.x, its `scheduler.conf` ConfigMap.
    fn create_scheduler_objects(&mut self) {
        let values = self.values.clone();
        let namespace = values.sunk.namespace.clone();
        let pod_name = format!("{}-scheduler-{}", values.sunk.release, self.ids.name_suffix());
        let existing: Vec<SharedStr> = self
            .cluster
            .pods_iter()
            .filter(|pod| pod.owner == PodOwner::Scheduler)
            .map(|pod| pod.uid.clone())
            .collect();
        for uid in existing {
            self.cluster.remove_pod(&uid);
        }
        self.cluster.config_maps.remove(&(namespace.clone(), format!("{}-scheduler-config", values.sunk.release)));
        if !values.scheduler.enabled {
            return;
        }
        let mut args = Vec::new();
        if values.sunk.version < 8 {
            args.push(format!("--scheduler-name={}", values.scheduler.name));
        } else {
            args.push("--config=/etc/sunk-scheduler/scheduler.conf".to_owned());
        }
        args.push(format!("--slurm-kill-wait={}s", values.slurm_config.kill_wait));
        let mut labels = BTreeMap::new();
        labels.insert("app.kubernetes.io/name".to_owned(), "sunk-scheduler".to_owned());
        labels.insert("app.kubernetes.io/component".to_owned(), "scheduler".to_owned());
        labels.insert("app.kubernetes.io/instance".to_owned(), values.sunk.release.clone());
        // The scheduler runs on a system Node when there is one, as in a real cluster.
        let node_name = values
            .extra_nodes
            .first()
            .map(|node| node.name.clone())
            .or_else(|| self.cluster.nodes.keys().next().cloned());
        let cpu = Quantity::parse("100m").ok();
        let memory = Quantity::parse("256Mi").ok();
        let container = PodContainer {
            name: "scheduler".to_owned(),
            image: "registry.gitlab.com/coreweave/sunk/sunk-scheduler:emulated".to_owned(),
            command: vec!["/usr/local/bin/sunk-scheduler".to_owned()],
            args,
            env: BTreeMap::new(),
            working_dir: None,
            requests: ResourceAmounts { cpu, memory, gpu: None },
            limits: ResourceAmounts::default(),
            state: ContainerState::Running(self.now),
        };
        let pod = self.system_pod(
            namespace.clone(),
            pod_name,
            labels.clone(),
            BTreeMap::new(),
            node_name,
            container,
            PodOwner::Scheduler,
        );
        self.cluster.insert_pod(pod);
        if values.sunk.version >= 8 {
            let config = format!(
                "scheduler:\n  name: {}\n  terminationOffset: {}s\nslurm:\n  killWait: {}s\n",
                values.scheduler.name, values.scheduler.termination_offset_seconds, values.slurm_config.kill_wait
            );
            let mut data = BTreeMap::new();
            data.insert("scheduler.conf".to_owned(), config);
            self.cluster.config_maps.insert(
                (namespace.clone(), format!("{}-scheduler-config", values.sunk.release)),
                ConfigMap {
                    namespace,
                    name: format!("{}-scheduler-config", values.sunk.release),
                    labels,
                    data,
                    created: self.now,
                },
            );
        }
    }

    fn build_runners(&mut self) -> SimResult<()> {
        for (index, runner) in self.values.runners.clone().into_iter().enumerate() {
            let policy: cwsandbox_api::sandbox_v1::Policy = serde_json::from_value(runner.policy.clone())
                .map_err(|error| SimError::invalid_field(format!("runners[{index}].policy"), error.to_string()))?;
            let managed = cwsandbox_api::sandbox_v1::ManagedRunner {
                identity: Some(cwsandbox_api::sandbox_v1::RunnerIdentity {
                    runner_id: runner.runner_id.clone(),
                    runner_group_id: runner.runner_group_id.clone(),
                    zone: runner.zone.clone(),
                    cluster_id: runner.cluster_id.clone(),
                    cluster_name: String::new(),
                }),
                display_name: runner.display_name.clone(),
                policy: Some(policy),
                ..Default::default()
            };
            self.runners.create(&runner.org, managed, &format!("config-{index}"), self.now)?;
        }
        self.runners.advance(self.now);
        Ok(())
    }

    /// Whether `values` could be applied now, changing nothing: they must build a world of their
    /// own (so a failed upgrade leaves this one as it was), and the node and partition layout
    /// cannot change while Slurm jobs exist.
    pub fn check_values(&self, values: &Values) -> SimResult<()> {
        World::new(values.clone(), Box::new(ManualClock::new(self.now)), Box::new(SeededIds::new(0)))?;
        if self.layout_changes(values) && !self.slurm.queue.is_empty() {
            return Err(SimError::FailedPrecondition {
                reason: Reason::PreconditionFailed,
                message: "nodes or partitions cannot change while Slurm jobs exist".to_owned(),
            });
        }
        Ok(())
    }

    fn layout_changes(&self, values: &Values) -> bool {
        let shape = |values: &Values| {
            values
                .node_sets
                .iter()
                .map(|set| (set.name.clone(), set.replicas, set.cpu.clone(), set.memory.clone(), set.gpus))
                .collect::<Vec<_>>()
        };
        shape(values) != shape(&self.values)
            || values.slurm.partitions != self.values.slurm.partitions
            || values.extra_nodes != self.values.extra_nodes
    }

    /// Applies new values like `helm upgrade`: the scheduler Pod's args and ConfigMap change,
    /// slurmd requests change, and Pods created from now on see the new rules. The node and
    /// partition layout cannot change while jobs exist.
    pub fn apply_values(&mut self, values: Values) -> SimResult<()> {
        self.check_values(&values)?;
        let layout_changed = self.layout_changes(&values);
        let old = std::mem::replace(&mut self.values, values.clone());
        // The namespace prefix and the runtime defaults may have changed.
        self.sandboxes.namespaces.clear();
        self.sandboxes.defaults = None;
        if layout_changed {
            let kept_pods: Vec<Pod> = self
                .cluster
                .pods_iter()
                .filter(|pod| !matches!(pod.owner, PodOwner::Slurmd { .. } | PodOwner::Scheduler))
                .cloned()
                .collect();
            let events = std::mem::take(&mut self.cluster.events);
            let namespaces = std::mem::take(&mut self.cluster.namespaces);
            let sequence = self.cluster.event_sequence;
            self.cluster = Cluster::new(values.sandboxes.event_capacity);
            self.cluster.events = events;
            self.cluster.namespaces = namespaces;
            self.cluster.event_sequence = sequence;
            self.slurm = Slurm::new(self.slurm.next_job_id.max(values.slurm.first_job_id));
            if let Err(error) = self.build_topology() {
                self.values = old;
                return Err(error);
            }
            for mut pod in kept_pods {
                if pod.node_name.as_ref().is_some_and(|node| !self.cluster.nodes.contains_key(node.as_str())) {
                    pod.node_name = None;
                }
                self.cluster.insert_pod(pod);
            }
        } else {
            for (set_index, set) in values.node_sets.iter().enumerate() {
                for replica in 0..set.replicas {
                    let slurm_name = format!("slurm-{}-{replica}", set.name);
                    let node_name = format!("node-{}-{replica}", set.name);
                    let old_uid =
                        self.cluster.pod_by_name(&values.sunk.namespace, &slurm_name).map(|pod| pod.uid.clone());
                    let old_annotations =
                        old_uid.as_ref().and_then(|uid| self.cluster.pod(uid)).map(|pod| pod.annotations.clone());
                    if let Some(uid) = old_uid {
                        self.cluster.remove_pod(&uid);
                    }
                    if let Err(error) = self.create_slurmd_pod(set_index, &slurm_name, &node_name) {
                        self.values = old;
                        return Err(error);
                    }
                    if let Some(annotations) = old_annotations
                        && let Some(uid) = self.slurmd_pod_uid(&slurm_name)
                        && let Some(pod) = self.cluster.pod_mut(&uid)
                    {
                        pod.annotations = annotations;
                    }
                }
            }
            self.create_scheduler_objects();
        }
        self.room_freed = true;
        // A scheduler with a new name or scope picks up the Pending Pods it now watches.
        let newly_watched: Vec<SharedStr> = self
            .cluster
            .pods_iter()
            .filter(|pod| pod.node_name.is_none() && pod.phase == PodPhase::Pending && pod.deletion_timestamp.is_none())
            .filter(|pod| !self.sunk_rejected.contains(&pod.uid) && !self.placeholder_of_pod.contains_key(&pod.uid))
            .map(|pod| pod.uid.clone())
            .collect();
        self.unscheduled.extend(newly_watched);
        self.slurm_dirty = true;
        self.settle();
        Ok(())
    }

    pub(crate) fn ensure_namespace(&mut self, name: &str) {
        if !self.cluster.namespaces.contains_key(name) {
            let mut labels = BTreeMap::new();
            labels.insert("kubernetes.io/metadata.name".to_owned(), name.to_owned());
            self.cluster
                .namespaces
                .insert(name.to_owned(), Namespace { name: name.to_owned(), labels, created: self.now });
        }
    }

    /// Schedules a timer; the key returned can cancel it.
    pub(crate) fn schedule_timer(&mut self, at: SimTime, timer: Timer) -> (SimTime, u64) {
        self.timer_sequence += 1;
        let entry = (self.timer_sequence, Some(timer));
        match self.timers.get_mut(&at) {
            Some(bucket) => bucket.push_back(entry),
            None => {
                let mut bucket = self.spare_buckets.pop().unwrap_or_default();
                bucket.push_back(entry);
                self.timers.insert(at, bucket);
            }
        }
        (at, self.timer_sequence)
    }

    /// Drops a timer that can no longer do anything.
    pub(crate) fn cancel_timer(&mut self, (at, sequence): (SimTime, u64)) {
        let Some(bucket) = self.timers.get_mut(&at) else { return };
        if let Ok(index) = bucket.binary_search_by_key(&sequence, |(queued, _)| *queued) {
            bucket[index].1 = None;
        }
        Self::drop_cancelled_front(bucket);
        if bucket.is_empty()
            && let Some(bucket) = self.timers.remove(&at)
        {
            self.keep_spare(bucket);
        }
    }

    /// Keeps an emptied bucket for reuse: a few, of an ordinary batch's size (an exceptional
    /// burst's buffer is let go rather than held).
    fn keep_spare(&mut self, bucket: VecDeque<(u64, Option<Timer>)>) {
        if self.spare_buckets.len() < 4 && bucket.capacity() <= 8192 {
            self.spare_buckets.push(bucket);
        }
    }

    /// Drops cancelled timers from the front of a bucket, so the first bucket's time is always
    /// that of a live timer.
    fn drop_cancelled_front(bucket: &mut VecDeque<(u64, Option<Timer>)>) {
        while bucket.front().is_some_and(|(_, timer)| timer.is_none()) {
            bucket.pop_front();
        }
    }

    /// Takes the next live timer due by `target`, in time and then scheduling order.
    fn pop_due_timer(&mut self, target: SimTime) -> Option<(SimTime, Timer)> {
        let mut first = self.timers.first_entry()?;
        let at = *first.key();
        if at > target {
            return None;
        }
        let bucket = first.get_mut();
        let popped = bucket.pop_front().and_then(|(_, timer)| timer);
        Self::drop_cancelled_front(bucket);
        if bucket.is_empty() {
            let bucket = first.remove();
            self.keep_spare(bucket);
        }
        popped.map(|timer| (at, timer))
    }

    /// Moves the world to the clock's time, firing every due timer in order.
    pub fn tick(&mut self) {
        self.settle();
    }

    /// When the next timer fires, if any (the host may sleep until then).
    pub fn next_wakeup(&self) -> Option<SimTime> {
        self.timers.first_key_value().map(|(at, _)| *at)
    }

    pub(crate) fn settle(&mut self) {
        let target = self.clock.now().max(self.now);
        loop {
            self.reconcile();
            let Some((at, timer)) = self.pop_due_timer(target) else { break };
            self.now = self.now.max(at);
            self.fire(timer);
        }
        self.now = target;
        self.runners.advance(self.now);
    }

    fn reconcile(&mut self) {
        for _ in 0..10_000 {
            let mut changed = false;
            while let Some(uid) = self.unscheduled.pop_first() {
                changed = true;
                self.schedule_pod(&uid);
            }
            if self.slurm_dirty {
                self.slurm_dirty = false;
                changed = true;
                // The buffer is reused: placement runs after every command.
                let mut outcomes = std::mem::take(&mut self.slurm_outcomes);
                self.slurm.schedule_into(self.now, &mut outcomes);
                for outcome in outcomes.drain(..) {
                    match outcome {
                        SlurmOutcome::Allocated(job) => self.on_allocated(job),
                        SlurmOutcome::Preempted(job) => self.on_job_ended(job),
                    }
                }
                self.slurm_outcomes = outcomes;
            }
            if self.room_freed {
                self.room_freed = false;
                let waiting = std::mem::take(&mut self.waiting_for_room);
                for uid in waiting {
                    if self.try_default_schedule(&uid, false) {
                        changed = true;
                    }
                }
            }
            if !changed {
                return;
            }
        }
    }

    /// Creates a Pod (the emulator API's raw Pods, and sandbox Pods).
    pub fn create_pod(&mut self, request: PodRequest, owner: PodOwner) -> SimResult<String> {
        if request.name.is_empty() {
            return Err(SimError::invalid_field("pod.metadata.name", "required"));
        }
        if request.containers.is_empty() {
            return Err(SimError::invalid_field("pod.spec.containers", "at least one container is required"));
        }
        if self.cluster.pod_by_name(&request.namespace, &request.name).is_some() {
            return Err(SimError::AlreadyExists {
                reason: Reason::AlreadyExists,
                message: format!("pods \"{}\" already exists", request.name),
            });
        }
        self.ensure_namespace(&request.namespace);
        let uid = self.ids.uid();
        let scheduler_name =
            if request.scheduler_name.is_empty() { "default-scheduler".to_owned() } else { request.scheduler_name };
        let containers = request
            .containers
            .into_iter()
            .map(|(name, image, requests, limits)| PodContainer {
                name,
                image,
                command: Vec::new(),
                args: Vec::new(),
                env: BTreeMap::new(),
                working_dir: None,
                requests,
                limits,
                state: ContainerState::Waiting("ContainerCreating".to_owned()),
            })
            .collect();
        let pod = Pod {
            uid: uid.clone(),
            namespace: request.namespace.into(),
            name: request.name.into(),
            labels: request.labels.into(),
            annotations: request.annotations.into(),
            scheduler_name,
            node_name: None,
            termination_grace_period_seconds: request.termination_grace_period_seconds.unwrap_or(30),
            node_selector: request.node_selector,
            tolerations: request.tolerations,
            required_node_affinity: request.required_node_affinity,
            priority_class_name: None,
            extra_spec: BTreeMap::new(),
            containers,
            phase: PodPhase::Pending,
            reason: None,
            message: None,
            scheduled_condition: None,
            start_time: None,
            created: self.now,
            deletion_timestamp: None,
            deletion_grace_period_seconds: None,
            owner,
            resource_version: 0,
            object_ref: Default::default(),
        };
        self.insert_new_pod(pod);
        self.settle();
        Ok(uid.into())
    }

    pub(crate) fn insert_new_pod(&mut self, pod: Pod) {
        self.unscheduled.insert(pod.uid.clone());
        self.cluster.insert_pod(pod);
        self.count(Transition::PodCreated);
    }

    fn event(
        &mut self,
        pod_uid: &str,
        event_type: EventType,
        reason: impl Into<Cow<'static, str>>,
        message: impl Into<Cow<'static, str>>,
        source: &'static str,
    ) {
        let Some(pod) = self.cluster.pod(pod_uid) else { return };
        let involved = Arc::clone(&pod.object_ref);
        self.cluster.record_event(Event {
            sequence: 0,
            involved,
            event_type,
            reason: reason.into(),
            message: message.into(),
            source,
            time: self.now,
        });
    }

    fn node_event(&mut self, node_name: &str, event_type: EventType, reason: &'static str, message: String) {
        let Some(node) = self.cluster.nodes.get(node_name) else { return };
        let involved = Arc::new(ObjectRef {
            kind: "Node",
            namespace: SharedStr::default(),
            name: node.name.clone(),
            uid: node.uid.as_str().into(),
        });
        self.cluster.record_event(Event {
            sequence: 0,
            involved,
            event_type,
            reason: reason.into(),
            message: message.into(),
            source: "sunk-syncer",
            time: self.now,
        });
    }

    /// Routes an unscheduled Pod to the scheduler its `schedulerName` names.
    fn schedule_pod(&mut self, uid: &SharedStr) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.node_name.is_some() || pod.deletion_timestamp.is_some() || pod.phase != PodPhase::Pending {
            return;
        }
        if pod.scheduler_name == "default-scheduler" {
            self.try_default_schedule(uid, true);
            return;
        }
        if self.placeholder_of_pod.contains_key(uid) || self.sunk_rejected.contains(uid) {
            return;
        }
        if sunk::handles(&self.values, pod).is_err() {
            // Nobody places this Pod: it stays Pending without a word, as in Kubernetes.
            self.count(Transition::PodIgnored);
            return;
        }
        let wants_gpus = pod.containers.iter().any(|container| container.requests.gpu.unwrap_or(0) > 0);
        let gpu_type = wants_gpus.then(|| self.slurm.nodes.iter().find_map(|node| node.gres_type.as_deref())).flatten();
        let sandbox = match &pod.owner {
            PodOwner::Sandbox(id) => Some(id.clone()),
            _ => None,
        };
        let request = match sunk::validate(&self.values, pod, gpu_type) {
            Ok(request) => request,
            Err(message) => {
                let reason = self.values.scheduler.validation_event_reason.clone();
                self.sunk_rejected.insert(uid.clone());
                self.set_unschedulable(uid, &reason, &message);
                self.event(uid, EventType::Warning, reason, message, "sunk-scheduler");
                self.count(Transition::PodRejectedBySunk);
                return;
            }
        };
        match self.slurm.submit(request, self.now) {
            Ok(job) => {
                self.placeholder_of_pod.insert(uid.clone(), job);
                self.pod_of_placeholder.insert(job, uid.clone());
                if let Some(id) = &sandbox {
                    self.sandbox_job_submitted(id, job);
                }
                self.slurm_dirty = true;
                self.event(
                    uid,
                    EventType::Normal,
                    "Submitted",
                    format!("Submitted placeholder Slurm job {job}"),
                    "sunk-scheduler",
                );
                self.count(Transition::PlaceholderSubmitted);
            }
            Err(error) => {
                let reason = self.values.scheduler.validation_event_reason.clone();
                self.sunk_rejected.insert(uid.clone());
                let message = format!("Slurm rejected the placeholder job: {error}");
                self.set_unschedulable(uid, &reason, &message);
                self.event(uid, EventType::Warning, reason, message, "sunk-scheduler");
                self.count(Transition::PlaceholderRefused);
            }
        }
    }

    fn set_unschedulable(&mut self, uid: &str, reason: &str, message: &str) {
        if let Some(pod) = self.cluster.pod_mut(uid) {
            pod.scheduled_condition = Some((false, reason.to_owned(), message.to_owned()));
        }
    }

    /// kube-scheduler's essentials for Pods that are not SUNK's: fit by allocatable minus
    /// requests, node selector, required affinity and taints; least-allocated node first.
    fn try_default_schedule(&mut self, uid: &SharedStr, report: bool) -> bool {
        let Some(pod) = self.cluster.pod(uid).cloned() else { return false };
        if pod.node_name.is_some() || pod.deletion_timestamp.is_some() || pod.phase != PodPhase::Pending {
            return false;
        }
        let need = pod.requested();
        let mut insufficient_cpu = 0;
        let mut insufficient_memory = 0;
        let mut tainted = 0;
        let mut mismatched = 0;
        let mut best: Option<(i64, SharedStr)> = None;
        for node in self.cluster.nodes.values() {
            if node.taints.iter().any(|taint| taint.effect != "PreferNoSchedule" && !pod.tolerates(taint)) {
                tainted += 1;
                continue;
            }
            if !node_matches(&pod, node) {
                mismatched += 1;
                continue;
            }
            let free_cpu = node.allocatable.cpu_millis - node.requested.cpu_millis;
            let free_memory = node.allocatable.memory_bytes - node.requested.memory_bytes;
            let mut fits = true;
            if free_cpu < need.cpu_millis {
                insufficient_cpu += 1;
                fits = false;
            }
            if free_memory < need.memory_bytes {
                insufficient_memory += 1;
                fits = false;
            }
            if fits && best.as_ref().is_none_or(|(score, _)| free_cpu > *score) {
                best = Some((free_cpu, node.name.clone()));
            }
        }
        if let Some((_, node_name)) = best {
            self.bind_and_admit(uid, &node_name);
            return true;
        }
        let total = self.cluster.nodes.len();
        let mut parts = Vec::new();
        if insufficient_cpu > 0 {
            parts.push(format!("{insufficient_cpu} Insufficient cpu"));
        }
        if insufficient_memory > 0 {
            parts.push(format!("{insufficient_memory} Insufficient memory"));
        }
        if mismatched > 0 {
            parts.push(format!("{mismatched} node(s) didn't match Pod's node affinity/selector"));
        }
        if tainted > 0 {
            parts.push(format!("{tainted} node(s) had untolerated taint {{{LOCK_KEY}: true}}"));
        }
        let message = format!("0/{total} nodes are available: {}.", parts.join(", "));
        self.waiting_for_room.insert(uid.clone());
        if report {
            self.set_unschedulable(uid, "Unschedulable", &message);
            self.event(uid, EventType::Warning, "FailedScheduling", message, "default-scheduler");
            self.count(Transition::DefaultSchedulingFailed);
        }
        false
    }

    /// Binds a Pod and runs kubelet admission: it either starts or is rejected for good.
    fn bind_and_admit(&mut self, uid: &str, node_name: &str) {
        let (Some(pod), Some(node)) = (self.cluster.pod(uid), self.cluster.nodes.get(node_name)) else { return };
        let need = pod.requested();
        let checks = [
            ("cpu", need.cpu_millis, node.requested.cpu_millis, node.allocatable.cpu_millis),
            ("memory", need.memory_bytes, node.requested.memory_bytes, node.allocatable.memory_bytes),
            ("nvidia.com/gpu", need.gpus, node.requested.gpus, node.allocatable.gpus),
        ];
        let affinity_ok = node_matches(pod, node);
        let source = if pod.scheduler_name == "default-scheduler" { "default-scheduler" } else { "sunk-scheduler" };
        let assigned =
            crate::ids::joined(&["Successfully assigned ", &pod.namespace, "/", &pod.name, " to ", node_name]);
        let sandbox_id = match &pod.owner {
            PodOwner::Sandbox(id) => Some(id.clone()),
            _ => None,
        };
        let (pod_uid, namespace, pod_name) = (pod.uid.clone(), pod.namespace.clone(), pod.name.clone());
        if let Some(pod) = self.cluster.pod_mut(uid) {
            pod.scheduled_condition = Some((true, String::new(), String::new()));
        }
        self.event(uid, EventType::Normal, "Scheduled", assigned, source);
        self.count(Transition::PodBound);
        let rejection = if !affinity_ok {
            Some(("NodeAffinity".to_owned(), "Pod was rejected: Predicate NodeAffinity failed".to_owned()))
        } else {
            checks.iter().find(|(_, requested, used, capacity)| *requested > 0 && used + requested > *capacity).map(
                |(resource, requested, used, capacity)| {
                    (
                        format!("OutOf{resource}"),
                        format!(
                            "Pod was rejected: Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
                        ),
                    )
                },
            )
        };
        match rejection {
            Some((reason, message)) => {
                // A rejected Pod still shows its node, but never counted against it.
                if let Some(pod) = self.cluster.pod_mut(uid) {
                    pod.phase = PodPhase::Failed;
                    pod.reason = Some(reason.clone());
                    pod.message = Some(message.clone());
                }
                self.cluster.bind(uid, node_name);
                self.event(uid, EventType::Warning, reason, message, "kubelet");
                self.count(Transition::PodRejectedByKubelet);
                self.on_pod_terminal(uid);
            }
            None => {
                self.cluster.bind(uid, node_name);
                let now = self.now;
                if let Some(pod) = self.cluster.pod_mut(uid) {
                    pod.phase = PodPhase::Running;
                    pod.start_time = Some(now);
                    for container in &mut pod.containers {
                        container.state = ContainerState::Running(now);
                    }
                }
                self.event(uid, EventType::Normal, "Started", "Started container main", "kubelet");
                self.count(Transition::PodStarted);
                self.pin_cpus(uid, node_name);
                self.effects.push(Effect::StartPod { pod_uid, namespace, pod_name, sandbox_id });
            }
        }
    }

    /// The slurmd Pod of a Slurm node. Remembered per node (the lock annotation changes several
    /// times per job, and the name lookup walks thousands of slurmd Pods), and checked on use:
    /// an upgrade replaces slurmd Pods.
    fn slurmd_pod_uid(&mut self, slurm_node: &str) -> Option<SharedStr> {
        let namespace = &self.values.sunk.namespace;
        if let Some(uid) = self.slurmd_pods.get(slurm_node)
            && self.cluster.pod(uid).is_some_and(|pod| pod.name == *slurm_node && pod.namespace == *namespace)
        {
            return Some(uid.clone());
        }
        let uid = self.cluster.pod_by_name(namespace, slurm_node).map(|pod| pod.uid.clone())?;
        self.slurmd_pods.insert(slurm_node.to_owned(), uid.clone());
        Some(uid)
    }

    fn set_lock_annotation(&mut self, slurm_node: &str, value: &str) {
        if let Some(uid) = self.slurmd_pod_uid(slurm_node)
            && let Some(pod) = self.cluster.pod_mut(&uid)
        {
            // Rewritten in place: the lock state changes twice per job.
            match pod.annotations.get_mut(LOCK_KEY) {
                Some(current) => {
                    current.clear();
                    current.push_str(value);
                }
                None => {
                    pod.annotations.insert(LOCK_KEY.to_owned(), value.to_owned());
                }
            }
        }
    }

    /// Slurm allocated a node: the prolog locks it, then the script starts.
    /// The static CPU Manager: a Guaranteed-QoS Pod's integer CPUs become its alone. Only Pods
    /// placed by the default scheduler count: a SUNK Pod's CPUs are its placeholder job's, which
    /// Slurm already holds for it.
    fn pin_cpus(&mut self, uid: &str, node_name: &str) {
        if self.values.kubelet.cpu_manager_policy != CpuManagerPolicy::Static {
            return;
        }
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.scheduler_name != "default-scheduler" {
            return;
        }
        let cpus = exclusive_cpus(pod);
        if cpus == 0 {
            return;
        }
        let pod_uid = pod.uid.clone();
        let Some(node) = self.cluster.nodes.get_mut(node_name) else { return };
        node.pinned_cpus += cpus;
        let node_name = node.name.clone();
        self.pinned_cpus.insert(pod_uid, (node_name, cpus));
        self.count(Transition::CpusPinned);
    }

    /// Gives a Pod's pinned CPUs back (it finished or left).
    fn unpin_cpus(&mut self, uid: &str) {
        if let Some((node_name, cpus)) = self.pinned_cpus.remove(uid)
            && let Some(node) = self.cluster.nodes.get_mut(node_name.as_str())
        {
            node.pinned_cpus -= cpus;
        }
    }

    /// A job's processes start on `slurm_node`. Slurm hands out CPUs from the lowest index and the
    /// kubelet pins from the highest, so the job runs on pinned CPUs exactly when its node's
    /// allocation (this job included) and the pinned CPUs add up to more than the node has. The
    /// job's processes then cannot run there: it fails, and Slurm drains the node with the
    /// misleading reason the support notes quote. Returns whether the job may run.
    fn job_fits_beside_pinned_cpus(&mut self, job: JobId, slurm_node: &str) -> bool {
        if self.pinned_cpus.is_empty() {
            return true;
        }
        let Some(node) = self.slurm.node(slurm_node) else { return true };
        let pinned = self.cluster.nodes.get(node.k8s_node.as_str()).map_or(0, |k8s| k8s.pinned_cpus);
        if pinned == 0 || i64::from(node.alloc_cpus) + pinned <= i64::from(node.cpus) {
            return true;
        }
        self.slurm.finish(job, JobBaseState::Failed, (1, 0), self.now);
        self.drain_node(slurm_node, "batch job complete failure");
        self.count(Transition::JobFailedOnPinnedCpus);
        self.on_job_ended(job);
        false
    }

    /// Drains a Slurm node, with a Warning Event on its Kubernetes Node.
    fn drain_node(&mut self, slurm_node: &str, reason: &str) {
        self.slurm.drain(slurm_node, reason);
        let k8s_node = self.slurm.node(slurm_node).map(|node| node.k8s_node.clone()).unwrap_or_default();
        self.node_event(
            &k8s_node,
            EventType::Warning,
            "SlurmNodeDrained",
            format!("Slurm node {slurm_node} drained: {reason}"),
        );
        self.count(Transition::NodeDrained);
    }

    fn on_allocated(&mut self, job: JobId) {
        let Some(allocated) = self.slurm.job(job) else { return };
        let (kind, time_limit) = (allocated.kind.clone(), allocated.time_limit_seconds);
        let Some(slurm_node) = allocated.node.clone() else { return };
        let k8s_node = self.slurm.node(&slurm_node).map(|node| node.k8s_node.clone()).unwrap_or_default();
        self.lock_node(&slurm_node, &k8s_node);
        match &kind {
            JobKind::Placeholder { .. } => {
                let prolog = Duration::from_secs(u64::from(self.values.scheduler.prolog_seconds));
                self.schedule_timer(self.now + prolog, Timer::PrologDone(job));
            }
            JobKind::Batch { run_seconds } => {
                if !self.job_fits_beside_pinned_cpus(job, &slurm_node) {
                    return;
                }
                self.slurm.start_script(job);
                self.set_lock_annotation(&slurm_node, "locked");
                if let Some(seconds) = run_seconds {
                    self.schedule_timer(self.now + Duration::from_secs(u64::from(*seconds)), Timer::BatchJobEnds(job));
                }
            }
        }
        if let Some(limit) = time_limit {
            self.schedule_timer(self.now + Duration::from_secs(u64::from(limit)), Timer::TimeLimit(job));
        }
    }

    fn lock_node(&mut self, slurm_node: &str, k8s_node: &str) {
        let Some(node) = self.cluster.nodes.get_mut(k8s_node) else { return };
        if node.taints.iter().any(|taint| taint.key == LOCK_KEY) {
            return;
        }
        node.taints.push(Taint { key: LOCK_KEY.to_owned(), value: "true".to_owned(), effect: "NoExecute".to_owned() });
        self.set_lock_annotation(slurm_node, "pending");
        self.count(Transition::NodeLocked);
        // NoExecute: Pods that neither tolerate the lock nor belong to SUNK leave the Node.
        let sunk_name = self.values.scheduler.name.clone();
        let lock = Taint { key: LOCK_KEY.to_owned(), value: "true".to_owned(), effect: "NoExecute".to_owned() };
        let evicted: Vec<SharedStr> = self
            .cluster
            .pods_on(k8s_node)
            .filter(|pod| pod.deletion_timestamp.is_none())
            .filter(|pod| pod.scheduler_name != sunk_name && !pod.tolerates(&lock))
            .map(|pod| pod.uid.clone())
            .collect();
        for uid in evicted {
            self.event(
                &uid,
                EventType::Normal,
                "TaintManagerEviction",
                format!("Marking for deletion Pod (taint {LOCK_KEY})"),
                "taint-eviction-controller",
            );
            self.count(Transition::PodEvicted);
            self.begin_pod_deletion(&uid, None);
        }
    }

    fn unlock_node_if_idle(&mut self, slurm_node: &str) {
        let Some(node) = self.slurm.node(slurm_node) else { return };
        if !node.jobs.is_empty() {
            return;
        }
        let k8s_node = node.k8s_node.clone();
        if let Some(node) = self.cluster.nodes.get_mut(&k8s_node) {
            let before = node.taints.len();
            node.taints.retain(|taint| taint.key != LOCK_KEY);
            if node.taints.len() != before {
                self.set_lock_annotation(slurm_node, "false");
                self.count(Transition::NodeUnlocked);
                self.room_freed = true;
            }
        }
    }

    fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::PrologDone(job) => self.on_prolog_done(job),
            Timer::EpilogDone(job) => {
                let node = self.slurm.job(job).and_then(|job| job.node.clone());
                self.slurm.release(job, self.now);
                if let Some(pod_uid) = self.pod_of_placeholder.remove(&job) {
                    self.placeholder_of_pod.remove(&pod_uid);
                }
                if let Some(node) = node {
                    self.unlock_node_if_idle(&node);
                }
                self.slurm_dirty = true;
            }
            Timer::BatchJobEnds(job) => {
                self.slurm.finish(job, JobBaseState::Completed, (0, 0), self.now);
                self.on_job_ended(job);
            }
            Timer::TimeLimit(job) => {
                if self.slurm.job(job).is_some_and(|job| job.state == JobBaseState::Running && !job.completing) {
                    self.slurm.finish(job, JobBaseState::Timeout, (0, 1), self.now);
                    self.on_job_ended(job);
                }
            }
            Timer::DrainBeforeKillWait(job) => {
                let pod_alive = self.pod_of_placeholder.get(&job).is_some_and(|uid| self.cluster.pod(uid).is_some());
                if pod_alive
                    && let Some(node) =
                        self.slurm.job(job).filter(|job| job.completing).and_then(|job| job.node.clone())
                {
                    let reason = self.values.scheduler.drain_reason.clone();
                    self.drain_node(&node, &reason);
                }
            }
            Timer::KillWait(job) => {
                let pod_alive = self.pod_of_placeholder.get(&job).is_some_and(|uid| self.cluster.pod(uid).is_some());
                if pod_alive && self.slurm.job(job).is_some_and(|job| job.completing) {
                    // SIGKILL: the script is gone; the job completes though the Pod lingers.
                    self.count(Transition::JobKilled);
                    self.schedule_epilog(job);
                }
            }
            Timer::PodGraceOver(uid) => {
                if self.cluster.pod(&uid).is_some_and(|pod| pod.deletion_timestamp.is_some()) {
                    self.remove_pod(&uid);
                }
            }
            Timer::SandboxLifetime(id) => self.sandbox_lifetime_over(&id),
            Timer::SandboxForget(id) => self.sandbox_forget(&id),
        }
    }

    fn on_prolog_done(&mut self, job: JobId) {
        let Some(running) = self.slurm.job(job) else { return };
        if running.state != JobBaseState::Running || running.completing {
            return;
        }
        let Some(slurm_node) = running.node.clone() else { return };
        if !self.job_fits_beside_pinned_cpus(job, &slurm_node) {
            return;
        }
        self.slurm.start_script(job);
        self.set_lock_annotation(&slurm_node, "locked_strict");
        let Some(pod_uid) = self.pod_of_placeholder.get(&job).cloned() else { return };
        let k8s_node = self.slurm.node(&slurm_node).map(|node| node.k8s_node.clone()).unwrap_or_default();
        let pod_pending = self
            .cluster
            .pod(&pod_uid)
            .is_some_and(|pod| pod.deletion_timestamp.is_none() && pod.phase == PodPhase::Pending);
        if pod_pending {
            self.bind_and_admit(&pod_uid, &k8s_node);
        }
    }

    fn schedule_epilog(&mut self, job: JobId) {
        let epilog = Duration::from_secs(u64::from(self.values.scheduler.epilog_seconds));
        self.schedule_timer(self.now + epilog, Timer::EpilogDone(job));
    }

    /// A job ended on the Slurm side (cancel, preemption, time limit, batch end): a placeholder's
    /// script asks for its Pod to be deleted and waits; KillWait bounds that wait.
    pub(crate) fn on_job_ended(&mut self, job: JobId) {
        let Some(ended) = self.slurm.job(job) else { return };
        match ended.kind.clone() {
            JobKind::Batch { .. } => self.schedule_epilog(job),
            JobKind::Placeholder { pod_uid } => {
                let pod_alive = self.cluster.pod(&pod_uid).is_some();
                if !pod_alive {
                    self.schedule_epilog(job);
                    return;
                }
                let kill_wait = u64::from(self.values.slurm_config.kill_wait);
                let margin = u64::from(self.values.scheduler.drain_margin_seconds).min(kill_wait);
                self.schedule_timer(
                    self.now + Duration::from_secs(kill_wait - margin),
                    Timer::DrainBeforeKillWait(job),
                );
                self.schedule_timer(self.now + Duration::from_secs(kill_wait), Timer::KillWait(job));
                self.begin_pod_deletion(&pod_uid, None);
            }
        }
    }

    /// Starts deleting a Pod: Terminating with its grace period, then removal. An unbound or
    /// finished Pod goes at once.
    pub fn begin_pod_deletion(&mut self, uid: &str, grace_seconds: Option<i64>) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        let (already_deleting, own_grace, running) =
            (pod.deletion_timestamp.is_some(), pod.termination_grace_period_seconds, pod.phase == PodPhase::Running);
        let shared_uid = pod.uid.clone();
        if already_deleting {
            // A shorter grace on a second delete shortens the wait, as in Kubernetes, and the
            // Pod's deletion timestamp and grace say so.
            if let Some(grace) = grace_seconds {
                let deadline = self.now + Duration::from_secs(grace.max(0) as u64);
                if let Some(pod) = self.cluster.pod(uid)
                    && pod.deletion_timestamp.is_some_and(|current| deadline < current)
                    && let Some(pod) = self.cluster.pod_mut(uid)
                {
                    pod.deletion_timestamp = Some(deadline);
                    pod.deletion_grace_period_seconds = Some(grace.max(0));
                }
                self.schedule_timer(deadline, Timer::PodGraceOver(shared_uid));
            }
            return;
        }
        let grace = grace_seconds.unwrap_or(own_grace).max(0);
        if !running || grace == 0 {
            if let Some(pod) = self.cluster.pod_mut(uid) {
                pod.deletion_timestamp = Some(self.now);
                pod.deletion_grace_period_seconds = Some(0);
            }
            self.count(Transition::PodTerminating);
            self.remove_pod(uid);
            return;
        }
        let now = self.now;
        if let Some(pod) = self.cluster.pod_mut(uid) {
            pod.deletion_timestamp = Some(now + Duration::from_secs(grace as u64));
            pod.deletion_grace_period_seconds = Some(grace);
        }
        self.count(Transition::PodTerminating);
        self.event(uid, EventType::Normal, "Killing", "Stopping container main", "kubelet");
        self.effects.push(Effect::StopPod { pod_uid: shared_uid.clone(), grace: Duration::from_secs(grace as u64) });
        self.schedule_timer(now + Duration::from_secs(grace as u64), Timer::PodGraceOver(shared_uid));
        self.on_pod_deleting(uid);
    }

    /// The Pod got a deletion timestamp: SUNK cancels its placeholder (two-way sync).
    fn on_pod_deleting(&mut self, uid: &str) {
        let Some(&job) = self.placeholder_of_pod.get(uid) else { return };
        let Some(queued) = self.slurm.job(job) else { return };
        if queued.completing {
            return;
        }
        let final_state = self.values.scheduler.deleted_pod_job_state;
        match queued.state {
            JobBaseState::Pending => {
                self.slurm.cancel(job, 0, self.now);
                self.pod_of_placeholder.remove(&job);
                self.placeholder_of_pod.remove(uid);
            }
            JobBaseState::Running => {
                if final_state == FinalJobState::Completed {
                    self.slurm.finish(job, JobBaseState::Completed, (0, 0), self.now);
                } else {
                    self.slurm.cancel(job, 0, self.now);
                }
                let kill_wait = u64::from(self.values.slurm_config.kill_wait);
                let margin = u64::from(self.values.scheduler.drain_margin_seconds).min(kill_wait);
                self.schedule_timer(
                    self.now + Duration::from_secs(kill_wait - margin),
                    Timer::DrainBeforeKillWait(job),
                );
                self.schedule_timer(self.now + Duration::from_secs(kill_wait), Timer::KillWait(job));
            }
            _ => {}
        }
        self.slurm_dirty = true;
    }

    /// The Pod object disappears; a placeholder waiting for it finishes.
    pub(crate) fn remove_pod(&mut self, uid: &str) {
        let Some(pod) = self.cluster.remove_pod(uid) else { return };
        self.unpin_cpus(uid);
        self.count(Transition::PodRemoved);
        self.effects.push(Effect::KillPod { pod_uid: pod.uid.clone() });
        self.unscheduled.remove(uid);
        self.waiting_for_room.remove(uid);
        self.sunk_rejected.remove(uid);
        if let Some(job) = self.placeholder_of_pod.get(uid).copied() {
            match self.slurm.job(job).map(|job| (job.state, job.completing)) {
                Some((JobBaseState::Pending, _)) => {
                    self.slurm.cancel(job, 0, self.now);
                    self.placeholder_of_pod.remove(uid);
                    self.pod_of_placeholder.remove(&job);
                }
                Some((_, true)) => self.schedule_epilog(job),
                Some((JobBaseState::Running, false)) => {
                    // Removed without passing through Terminating (grace 0): cancel, then release.
                    self.slurm.cancel(job, 0, self.now);
                    self.schedule_epilog(job);
                }
                _ => {
                    self.placeholder_of_pod.remove(uid);
                    self.pod_of_placeholder.remove(&job);
                }
            }
        }
        if pod.node_name.is_some() {
            self.room_freed = true;
            self.slurm_dirty = true;
        }
        if let PodOwner::Sandbox(id) = &pod.owner {
            let id = id.clone();
            self.sandbox_pod_gone(&id);
        }
    }

    /// A Pod's containers exited by themselves (the host reports it).
    pub fn pod_exited(&mut self, uid: &str, exit_code: i32) {
        self.settle();
        self.on_pod_exited(uid, exit_code);
        self.settle();
    }

    fn on_pod_exited(&mut self, uid: &str, exit_code: i32) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.phase != PodPhase::Running {
            return;
        }
        let deleting = pod.deletion_timestamp.is_some();
        let phase = if exit_code == 0 { PodPhase::Succeeded } else { PodPhase::Failed };
        let reason = if exit_code == 0 { "Completed" } else { "Error" };
        let now = self.now;
        if let Some(pod) = self.cluster.pod_mut(uid) {
            for container in &mut pod.containers {
                container.state = ContainerState::Terminated { exit_code, reason: reason.to_owned(), finished: now };
            }
        }
        self.cluster.finish_pod(uid, phase, None, None);
        self.count(Transition::PodFinished);
        if deleting {
            // The process honoured SIGTERM: the Pod object goes now.
            self.remove_pod(uid);
        } else {
            self.on_pod_terminal(uid);
        }
    }

    /// A Pod ended (rejected or finished): its placeholder is released; the sandbox mirrors it.
    fn on_pod_terminal(&mut self, uid: &str) {
        self.unpin_cpus(uid);
        if let Some(&job) = self.placeholder_of_pod.get(uid)
            && self.slurm.job(job).is_some_and(|job| job.state == JobBaseState::Running && !job.completing)
        {
            match self.values.scheduler.finished_pod_job_state {
                FinalJobState::Completed => self.slurm.finish(job, JobBaseState::Completed, (0, 0), self.now),
                FinalJobState::Cancelled => {
                    self.slurm.cancel(job, 0, self.now);
                }
            }
            self.schedule_epilog(job);
        }
        self.room_freed = true;
        self.slurm_dirty = true;
        if let Some(PodOwner::Sandbox(id)) = self.cluster.pod(uid).map(|pod| pod.owner.clone()) {
            self.sandbox_pod_changed(&id);
        }
    }

    /// `scancel` by `by_uid`, of a job inside `scope` (others are NOT_FOUND like unknown ids).
    pub fn scancel(&mut self, scope: &Scope, job: JobId, by_uid: u32) -> SimResult<()> {
        self.settle();
        let not_found = || SimError::NotFound {
            reason: Reason::JobNotFound,
            message: format!("scancel: error: Kill job error on job id {job}: Invalid job id specified"),
        };
        if !self.job_in_scope(scope, job) {
            return Err(not_found());
        }
        let Some(queued) = self.slurm.job(job).cloned() else {
            if self.slurm.job_or_record(job).is_some() {
                return Err(SimError::FailedPrecondition {
                    reason: Reason::PreconditionFailed,
                    message: format!(
                        "scancel: error: Kill job error on job id {job}: Job/step already completing or completed"
                    ),
                });
            }
            return Err(not_found());
        };
        if queued.completing || queued.state.is_finished() {
            // Slurm refuses a second cancel; the placeholder keeps waiting for its Pod.
            return Err(SimError::FailedPrecondition {
                reason: Reason::PreconditionFailed,
                message: format!(
                    "scancel: error: Kill job error on job id {job}: Job/step already completing or completed"
                ),
            });
        }
        let was_running = self.slurm.cancel(job, by_uid, self.now).unwrap_or(false);
        if was_running {
            self.on_job_ended(job);
        } else if let JobKind::Placeholder { pod_uid } = &queued.kind {
            self.pod_of_placeholder.remove(&job);
            self.placeholder_of_pod.remove(pod_uid);
            if queued.state == JobBaseState::Pending && self.values.scheduler.delete_pod_when_pending_job_cancelled {
                self.begin_pod_deletion(pod_uid, None);
            } else {
                // Never placed and never retried.
                self.sunk_rejected.insert(pod_uid.clone());
            }
        }
        self.slurm_dirty = true;
        self.settle();
        Ok(())
    }

    /// Submits an ordinary Slurm batch job (not a Pod) for `scope`: an organization's job is its
    /// own, the cluster scope's the cluster's.
    pub fn submit_batch_job(&mut self, scope: &Scope, request: JobRequest) -> SimResult<JobId> {
        self.settle();
        let job = self.slurm.submit(request, self.now).map_err(|error| {
            let field = match error {
                SubmitError::InvalidPartition => "partition",
                SubmitError::InvalidUser => "user",
                SubmitError::NodeConfigUnavailable => "cpus",
            };
            SimError::invalid_field(field, format!("Batch job submission failed: {error}"))
        })?;
        if let Scope::Organization(org) = scope {
            let org = shared_org_name(&mut self.org_names, org);
            self.job_orgs.insert(job, org);
        }
        self.slurm_dirty = true;
        self.settle();
        Ok(job)
    }

    /// Deletes a Pod inside `scope` by namespace and name (`kubectl delete pod`).
    pub fn delete_pod(
        &mut self,
        scope: &Scope,
        namespace: &str,
        name: &str,
        grace_seconds: Option<i64>,
    ) -> SimResult<()> {
        self.settle();
        let uid = self.scoped_pod_by_name(scope, namespace, name).map(|pod| pod.uid.clone()).ok_or_else(|| {
            SimError::NotFound { reason: Reason::PodNotFound, message: format!("pods \"{name}\" not found") }
        })?;
        if let Some(PodOwner::Sandbox(id)) = self.cluster.pod(&uid).map(|pod| pod.owner.clone()) {
            self.sandbox_delete_requested(&id);
        }
        self.begin_pod_deletion(&uid, grace_seconds);
        self.settle();
        Ok(())
    }

    /// Resets one organization's part of the cluster, leaving every other organization's and the
    /// cluster's own as they are: each of its sandboxes ends at once (its Pod removed without a
    /// grace period, its processes killed) and is forgotten; its batch jobs still queued are
    /// cancelled; and none of its jobs is its own any more (they stay in the cluster's accounting,
    /// as cancelled jobs stay in `sacct`; nodes held by them free after the epilog, as in Slurm).
    /// Runners and policies are kept. Returns how many running Pods were stopped.
    pub fn reset_organization(&mut self, org: &str) -> usize {
        self.settle();
        let sandboxes: Vec<SharedStr> = self.organization_sandboxes(org).map(|sandbox| sandbox.id.clone()).collect();
        let mut stopped = 0;
        for id in &sandboxes {
            stopped += usize::from(self.sandbox_reset(id));
        }
        let batch_jobs: Vec<JobId> = self
            .job_orgs
            .iter()
            .filter(|(job, owner)| owner.as_str() == org && self.slurm.job(**job).is_some())
            .map(|(job, _)| *job)
            .collect();
        for job in batch_jobs {
            // A job already completing cannot be cancelled again; it ends by itself.
            let _ = self.scancel(&Scope::Cluster, job, 0);
        }
        self.job_orgs.retain(|_, owner| owner.as_str() != org);
        self.settle();
        stopped
    }

    /// Resumes a drained Slurm node (`scontrol update nodename=… state=resume`).
    pub fn resume_node(&mut self, name: &str) -> SimResult<()> {
        if self.slurm.node(name).is_none() {
            return Err(SimError::NotFound {
                reason: Reason::NodeNotFound,
                message: format!("scontrol: error: Invalid node name specified: {name}"),
            });
        }
        self.slurm.resume(name);
        self.slurm_dirty = true;
        self.settle();
        Ok(())
    }

    /// The placeholder job of a Pod, if it has one.
    pub fn placeholder_job(&self, pod_uid: &str) -> Option<JobId> {
        // Once released, the placeholder is only on record: search the jobs without copying them.
        self.placeholder_of_pod.get(pod_uid).copied().or_else(|| {
            self.slurm
                .jobs()
                .filter(|job| matches!(&job.kind, JobKind::Placeholder { pod_uid: owner } if owner == pod_uid))
                .map(|job| job.id)
                .max()
        })
    }

    pub(crate) fn sandbox_values(&self) -> &SandboxValues {
        &self.values.sandboxes
    }
}

/// The one shared copy of an organization's name (a job record of a forgotten sandbox names its
/// organization without a new allocation).
pub(crate) fn shared_org_name(names: &mut HashMap<String, SharedStr>, org: &str) -> SharedStr {
    if let Some(name) = names.get(org) {
        return name.clone();
    }
    let name = SharedStr::from(org);
    names.insert(org.to_owned(), name.clone());
    name
}

/// The CPUs the static CPU Manager gives a Pod: with Guaranteed QoS (every container's CPU and
/// memory limits set, requests equal to them), each container asking for whole CPUs gets them.
fn exclusive_cpus(pod: &Pod) -> i64 {
    let guaranteed = !pod.containers.is_empty()
        && pod.containers.iter().all(|container| {
            let (requests, limits) = (&container.requests, &container.limits);
            limits.cpu.is_some()
                && limits.memory.is_some()
                && requests.cpu.is_none_or(|cpu| Some(cpu) == limits.cpu)
                && requests.memory.is_none_or(|memory| Some(memory) == limits.memory)
        });
    if !guaranteed {
        return 0;
    }
    pod.containers
        .iter()
        .filter_map(|container| container.limits.cpu.map(|cpu| cpu.millis()))
        .filter(|millis| millis % 1000 == 0)
        .map(|millis| millis / 1000)
        .sum()
}

fn lock_toleration() -> Toleration {
    Toleration { key: LOCK_KEY.to_owned(), operator: "Exists".to_owned(), value: String::new(), effect: String::new() }
}

/// Whether a Node satisfies a Pod's node selector and required affinity.
fn node_matches(pod: &Pod, node: &Node) -> bool {
    let selector_ok = pod.node_selector.iter().all(|(key, value)| node.labels.get(key) == Some(value));
    let affinity_ok = pod.required_node_affinity.is_empty()
        || pod.required_node_affinity.iter().any(|term| {
            term.iter().all(|(key, allowed)| node.labels.get(key).is_some_and(|value| allowed.contains(value)))
        });
    selector_ok && affinity_ok
}
