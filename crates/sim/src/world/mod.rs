//! The world: Kubernetes, the SUNK scheduler, Slurm, runners and sandboxes, moved by commands
//! and by time. Every command settles the world before it returns: due timers fire in time
//! order, schedulers run until nothing changes, and each decision leaves an Event.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{SandboxValues, Values};
use crate::error::SimResult;
use crate::ids::{IdHash, IdSource, SharedStr};
use crate::k8s::{Cluster, Event, EventType, Namespace, ObjectRef};
use crate::machine::{Counts, transitions};
use crate::resolved::{ResourceAmounts, Toleration};
use crate::runners::RunnerRegistry;
use crate::slurm::{JobId, Slurm, SlurmOutcome};
use crate::time::{Clock, SimTime};

mod commands;
mod eviction;
mod faults;
mod images;
mod kubelet;
mod pod_network;
mod pods;
mod sandboxes;
mod scheduling;
mod secret_stores;
mod serverless;
mod snapshots;
mod teardown;
mod templates;
mod tenants;
mod timers;
mod topology;
mod volumes;

pub use commands::{DeletedPod, PodDeletion, requested_sharing};
pub use faults::OOM_EXIT_CODE;
pub use images::{ImagePullPolicy, ImagePulled, ImageToPull};
pub use kubelet::NVIDIA_VISIBLE_DEVICES;
pub use pod_network::{
    HttpsGrant, Ipv4Range, NetworkPeer, NetworkPorts, NetworkRule, OwnNetwork, PodNetwork, PodNetworkOffer,
    TransportProtocol,
};
// The Pod machine, a Pod's injected faults and failed pulls are the Pod lifecycle's; their old
// paths stay for callers outside the crate.
pub use crate::pods::{ImagePullFailure, InjectedFault, InjectedKind, PodLifecycle, PodTransition};
// The label is the sandbox lifecycle's; its old path stays for callers outside the crate.
pub use crate::sandbox::SANDBOX_ID_LABEL;
pub(crate) use scheduling::is_serverless_node;
pub use tenants::TenantSpec;
pub(crate) use timers::{Timer, Timers};

/// What happened to a sandbox's Pod or placeholder job, for the sandbox lifecycle to take in.
/// The Kubernetes and SUNK parts of the world queue these instead of calling the sandbox commands
/// (`sandboxes.rs`, which call them), and `settle` hands them over in order, as it does Slurm's
/// outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SandboxOutcome {
    /// SUNK submitted the sandbox Pod's placeholder job.
    JobSubmitted(SharedStr, JobId),
    /// Someone deleted the sandbox's Pod directly (`kubectl delete pod`).
    PodDeleteRequested(SharedStr),
    /// The Pod turned terminal by itself (exit, or kubelet rejection).
    PodTerminal(SharedStr),
    /// The Pod object is gone; with its main process's exit code, where it had started (the
    /// code it ended with during the deletion, 137 if it was still running and is killed).
    PodGone(SharedStr, Option<i32>),
}

/// One container of a starting Pod, as its host runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStart {
    /// Container name.
    pub name: String,
    /// Image reference.
    pub image: String,
    /// Entrypoint; empty means the image default.
    pub command: Vec<String>,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Working directory, if the spec sets one.
    pub working_dir: Option<String>,
    /// Files to place before the container starts: (absolute path, content).
    pub files: Vec<(String, std::sync::Arc<[u8]>)>,
    /// The user and group ids it runs as (`security_context.run_as_user`, `run_as_group`).
    pub run_as: (Option<u32>, Option<u32>),
    /// Where the sandbox's scratch volumes appear in it.
    pub volume_mounts: Vec<crate::k8s::VolumeMountStart>,
    /// `limits.memory` in bytes, for a runtime that enforces it.
    pub memory_limit_bytes: Option<u64>,
    /// `limits.cpu` in thousandths of a CPU, for a runtime that enforces it.
    pub cpu_limit_millis: Option<u64>,
    /// Its startup probe.
    pub startup_probe: Option<crate::k8s::ProbeStart>,
    /// What it waits for of the Pod's other containers before it starts.
    pub start_after: Vec<crate::k8s::StartDependency>,
}

/// Everything the host needs to start a Pod's processes: the payload of [`Effect::StartPod`],
/// handed to the runtime as it is (the one description of a launch between the world and the
/// host).
#[derive(Debug, Clone, PartialEq)]
pub struct PodLaunch {
    /// The Pod's uid: the key of every later call about it.
    pub pod_uid: SharedStr,
    /// The sandbox the Pod belongs to, if it is a sandbox Pod.
    pub sandbox_id: Option<SharedStr>,
    /// The Pod's namespace.
    pub namespace: SharedStr,
    /// The Pod's name: the hostname its processes should see.
    pub pod_name: SharedStr,
    /// Containers in start order; the first is the main one (the sandbox's primary container,
    /// wherever the spec put it): its exit ends the Pod.
    pub containers: Vec<ContainerStart>,
    /// The network its processes get: the host's, loopback only (`network.deny_egress`), or
    /// one of their own with its rules.
    pub network: PodNetwork,
    /// Names every container resolves to its loopback (a Compose file's services).
    pub host_aliases: Vec<String>,
    /// The Pod's memory-backed scratch volumes (`emptyDir` with medium Memory): each a tmpfs of
    /// its own, sized as the kubelet sizes it.
    pub memory_volumes: Vec<crate::k8s::MemoryVolume>,
    /// The Pod's RuntimeClass (`runtimeClassName`): which runtime handler runs it; `None`, the
    /// node's default.
    pub runtime_class: Option<String>,
}

/// What the host reports when a command of a Pod ended, by itself or once the host stopped it
/// (`Effect::StopPod`): the one description of an exit between the host and the world
/// ([`World::host_reported_exit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MainExit {
    /// The Pod.
    pub pod_uid: String,
    /// `None` for the main container, whose end ends the Pod; another container's name for
    /// the end of that container's command (the Pod goes on).
    pub container: Option<String>,
    /// Its exit status (128 + signal for a signal).
    pub exit_code: i32,
    /// The kernel's OOM killer ended it (its memory limit, enforced through cgroups).
    pub oom_killed: bool,
}

/// Something the world asks its host to do outside the simulation (run or stop processes).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// A Pod's containers start: run its main command.
    StartPod(PodLaunch),
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
    /// An admitted Pod needs its images on its Node before it starts (only where the host
    /// really runs images: [`World::set_pulls_images`]). The host answers with
    /// [`World::images_pulled`] or [`World::image_pull_failed`].
    PullImages {
        /// Pod uid.
        pod_uid: SharedStr,
        /// One per container, in spec order.
        images: Vec<ImageToPull>,
    },
    /// The kubelet's look at what a running Pod's sized scratch volumes hold. The host answers
    /// with [`World::volumes_measured`].
    MeasureVolumes {
        /// Pod uid.
        pod_uid: SharedStr,
        /// The volumes' names.
        volumes: Vec<String>,
    },
}

transitions! {
    machine "world";
    /// Named steps of the cluster beside the Pod, job and sandbox machines (SUNK's decisions, node
    /// locks and drains, the CPU Manager), counted so tests can check coverage.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Transition {
        /// SUNK ignored a Pod (name or scope).
        PodIgnored => "pod_ignored",
        /// SUNK refused a Pod (validation).
        PodRejectedBySunk => "pod_rejected_by_sunk",
        /// Slurm refused the placeholder job.
        PlaceholderRefused => "placeholder_refused",
        /// A placeholder job was submitted.
        PlaceholderSubmitted => "placeholder_submitted",
        /// A node was locked for a job.
        NodeLocked => "node_locked",
        /// A node was unlocked.
        NodeUnlocked => "node_unlocked",
        /// A Pod was evicted by the lock taint.
        PodEvicted => "pod_evicted",
        /// The default scheduler could not place a Pod.
        DefaultSchedulingFailed => "default_scheduling_failed",
        /// A node was drained because a Pod outlived KillWait.
        NodeDrained => "node_drained",
        /// KillWait ran out and Slurm killed the script.
        JobKilled => "job_killed",
        /// The kubelet's static CPU Manager gave a Pod exclusive CPUs Slurm does not know about.
        CpusPinned => "cpus_pinned",
        /// A Slurm job started on CPUs the kubelet had pinned: it failed and the node drained.
        JobFailedOnPinnedCpus => "job_failed_on_pinned_cpus",
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
    pub(crate) templates: crate::templates::Templates,
    /// Each organization's secret stores (SettingsService).
    pub(crate) secret_stores: crate::secret_stores::SecretStores,
    /// The time the world has reached.
    pub(crate) now: SimTime,
    pub(crate) timers: Timers,
    pub(crate) placeholder_of_pod: HashMap<SharedStr, JobId, IdHash>,
    /// Scratch space for Slurm's scheduling outcomes.
    pub(crate) slurm_outcomes: Vec<SlurmOutcome>,
    /// Slurm node name → uid of its slurmd Pod, as last found (see `slurmd_pod_uid`).
    pub(crate) slurmd_pods: HashMap<String, SharedStr, IdHash>,
    pub(crate) pod_of_placeholder: HashMap<JobId, SharedStr, IdHash>,
    /// The organization of each job whose organization its sandbox no longer tells: batch jobs an
    /// organization submitted, and the placeholders of forgotten sandboxes (see `query::Scope`).
    pub(crate) job_orgs: HashMap<JobId, SharedStr, IdHash>,
    /// Organization names, one copy each, shared by the `job_orgs` entries that name them.
    pub(crate) org_names: HashMap<String, SharedStr>,
    /// Pods the scheduler refused: never retried.
    pub(crate) sunk_rejected: BTreeSet<SharedStr>,
    /// Sandboxes whose state or reason may have changed, and what was last reported of each
    /// (see [`World::take_sandbox_changes`]).
    pub(crate) sandbox_journal: SandboxJournal,
    /// What the world keeps about each Pod beside its object: scheduling queues, faults,
    /// devices, pulls, kills the host owes.
    pub(crate) pods: crate::pods::Pods,
    /// Whether admitted Pods wait for the host to pull their images.
    pub(crate) pulls_images: bool,
    /// Whether a started Pod waits for the host to report its containers started
    /// ([`World::pod_host_started`]) before it shows Running (a runtime is attached).
    pub(crate) host_confirms_starts: bool,
    /// Whether the host enforces containers' CPU and memory limits where it runs images (a
    /// Warning Event on each Pod with limits says when it cannot).
    pub(crate) limits_enforced: bool,
    /// Why the host cannot make a memory-backed scratch volume (a tmpfs), where it cannot: such
    /// volumes are then refused by name at create.
    pub(crate) memory_volumes_refused: Option<String>,
    /// The named RuntimeClasses the host's Nodes have (`None`: no host runs Pods, so any class
    /// is only recorded); a sandbox whose class is not among them is refused at create.
    pub(crate) runtime_classes: Option<Vec<String>>,
    /// The RuntimeClasses whose Pods the host runs with one container only.
    pub(crate) one_container_runtime_classes: Vec<String>,
    /// What the host offers for sandbox networks.
    pub(crate) pod_network: PodNetworkOffer,
    /// The pod range's addresses in use.
    pub(crate) pod_addresses: pod_network::PodAddresses,
    /// Whether someone takes the sandboxes touched ([`World::take_touched_sandboxes`]); while
    /// nobody does, each settle drops them.
    touches_taken: bool,
    /// Every sandbox's view may have changed (new values: scheduler scopes, rebuilt layout).
    all_sandboxes_touched: bool,
    pub(crate) slurm_dirty: bool,
    pub(crate) effects: Vec<Effect>,
    /// Sandbox outcomes not yet handed over (see `SandboxOutcome`).
    pub(crate) sandbox_outcomes: VecDeque<SandboxOutcome>,
    /// How often each named transition ran.
    pub transitions: Counts<Transition>,
    /// How often each Pod transition ran.
    pub pod_transitions: Counts<PodTransition>,
    /// How often each sandbox transition ran.
    pub sandbox_transitions: Counts<crate::sandbox::SandboxTransition>,
    /// File-system snapshots of every organization.
    pub(crate) snapshots: crate::snapshots::Snapshots,
    /// How often each snapshot transition ran.
    pub snapshot_transitions: Counts<crate::snapshots::SnapshotTransition>,
    /// Registered volumes of every organization.
    pub(crate) volumes: crate::volumes::Volumes,
    /// How often each volume transition ran.
    pub volume_transitions: Counts<crate::volumes::VolumeTransition>,
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
            templates: crate::templates::Templates::default(),
            secret_stores: crate::secret_stores::SecretStores::default(),
            now,
            timers: Timers::default(),
            placeholder_of_pod: HashMap::default(),
            slurmd_pods: HashMap::default(),
            slurm_outcomes: Vec::new(),
            pod_of_placeholder: HashMap::default(),
            job_orgs: HashMap::default(),
            org_names: HashMap::new(),
            sunk_rejected: BTreeSet::new(),
            sandbox_journal: SandboxJournal::default(),
            pods: crate::pods::Pods::default(),
            pulls_images: false,
            host_confirms_starts: false,
            limits_enforced: true,
            memory_volumes_refused: None,
            runtime_classes: None,
            one_container_runtime_classes: Vec::new(),
            pod_network: PodNetworkOffer::Unavailable("no host runs this world's sandboxes".to_owned()),
            pod_addresses: Default::default(),
            touches_taken: false,
            all_sandboxes_touched: false,
            slurm_dirty: false,
            effects: Vec::new(),
            sandbox_outcomes: VecDeque::new(),
            transitions: Counts::default(),
            pod_transitions: Counts::default(),
            sandbox_transitions: Counts::default(),
            snapshots: crate::snapshots::Snapshots::default(),
            snapshot_transitions: Counts::default(),
            volumes: crate::volumes::Volumes::default(),
            volume_transitions: Counts::default(),
        };
        crate::volumes::check_claims(&world.values.persistent_volume_claims)?;
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
        self.transitions.add(transition);
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

    /// Moves the world to the clock's time, firing every due timer in order.
    pub fn tick(&mut self) {
        self.settle();
    }

    /// When the next timer fires, if any (the host may sleep until then).
    pub fn next_wakeup(&self) -> Option<SimTime> {
        self.timers.next_at()
    }

    pub(crate) fn settle(&mut self) {
        let target = self.clock.now().max(self.now);
        loop {
            self.reconcile();
            let Some((at, timer)) = self.timers.pop_due(target) else { break };
            self.now = self.now.max(at);
            self.fire(timer);
            self.hand_over_sandbox_outcomes();
        }
        self.now = target;
        self.runners.advance(self.now);
        if !self.touches_taken {
            self.drop_touches();
        }
    }

    /// From now on the sandboxes each command touches are kept until
    /// [`World::take_touched_sandboxes`] takes them (a reader keeping copies of the views asks),
    /// starting with every sandbox on record: the reader's first take lists them all, so its
    /// copies start complete.
    pub fn keep_touched_sandboxes(&mut self) {
        self.touches_taken = true;
        self.touch_all_sandboxes();
    }

    /// Every sandbox whose view ([`World::sandbox`]) may differ from when this was last called:
    /// its record, its Pod or its placeholder job changed, or it was added or dropped (a dropped
    /// one is listed, and no longer found). Sorted, each once.
    pub fn take_touched_sandboxes(&mut self) -> Vec<SharedStr> {
        let mut touched = Vec::new();
        self.sandboxes.take_touched(&mut touched);
        self.cluster.take_touched_sandboxes(&mut touched);
        let mut placeholders = Vec::new();
        self.slurm.take_touched_placeholders(&mut placeholders);
        for pod_uid in placeholders {
            if let Some(crate::k8s::PodOwner::Sandbox(id)) = self.cluster.pod(&pod_uid).map(|pod| &pod.owner) {
                touched.push(id.clone());
            }
        }
        if std::mem::take(&mut self.all_sandboxes_touched) {
            touched.extend(self.sandboxes.iter().map(|sandbox| sandbox.id.clone()));
        }
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// Marks every sandbox's view as possibly changed.
    pub(crate) fn touch_all_sandboxes(&mut self) {
        self.all_sandboxes_touched = true;
    }

    fn drop_touches(&mut self) {
        self.sandboxes.forget_touched();
        self.cluster.forget_touched_sandboxes();
        self.slurm.forget_touched_placeholders();
        self.all_sandboxes_touched = false;
    }

    pub(crate) fn reconcile(&mut self) {
        for _ in 0..10_000 {
            // Outcomes a command queued directly (a never-bound Pod removed at once by a delete)
            // reach their sandboxes now, not with whatever happens next in the cluster.
            self.hand_over_sandbox_outcomes();
            let mut changed = false;
            while let Some(uid) = self.pods.next_to_schedule() {
                changed = true;
                self.schedule_pod(&uid);
                self.hand_over_sandbox_outcomes();
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
                self.hand_over_sandbox_outcomes();
            }
            if let Some(waiting) = self.pods.take_waiting_if_room_freed() {
                for uid in waiting {
                    if self.try_default_schedule(&uid, false) {
                        changed = true;
                    }
                }
                self.hand_over_sandbox_outcomes();
            }
            if !changed {
                return;
            }
        }
    }

    pub(crate) fn event(
        &mut self,
        pod_uid: &str,
        event_type: EventType,
        reason: impl Into<Cow<'static, str>>,
        message: impl Into<Cow<'static, str>>,
        source: &'static str,
    ) {
        let Some(pod) = self.cluster.pod(pod_uid) else { return };
        let involved = Arc::clone(&pod.object_ref);
        // An Event on a sandbox's Pod often comes with a new reason for the sandbox.
        self.touch_sandbox_of_pod(pod_uid);
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

    pub(crate) fn node_event(&mut self, node_name: &str, event_type: EventType, reason: &'static str, message: String) {
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

    /// Notes that a sandbox's state or reason may have changed (its life moved, its Pod changed
    /// phase or got an Event).
    pub(crate) fn touch_sandbox(&mut self, id: &str) {
        if !self.sandbox_journal.touched.contains(id) {
            self.sandbox_journal.touched.insert(id.to_owned());
        }
    }

    /// Notes that the sandbox of a Pod, if it has one, may have changed.
    pub(crate) fn touch_sandbox_of_pod(&mut self, pod_uid: &str) {
        if let Some(crate::k8s::PodOwner::Sandbox(id)) = self.cluster.pod(pod_uid).map(|pod| &pod.owner) {
            let id = id.to_string();
            self.touch_sandbox(&id);
        }
    }

    /// The sandboxes whose state or reason changed since the last call, each with its new
    /// state and reason (what a log of the emulator records); a sandbox forgotten meanwhile is
    /// dropped from the record.
    pub fn take_sandbox_changes(&mut self) -> Vec<SandboxChange> {
        let touched = std::mem::take(&mut self.sandbox_journal.touched);
        let mut changes = Vec::new();
        for id in touched {
            let Some(now) = self.sandbox_state_now(&id) else {
                self.sandbox_journal.reported.remove(&id);
                continue;
            };
            if self.sandbox_journal.reported.get(&id) != Some(&now) {
                changes.push(SandboxChange { sandbox_id: id.clone(), state: now.0, reason: now.1.clone() });
                self.sandbox_journal.reported.insert(id, now);
            }
        }
        changes
    }

    /// Hands the queued sandbox outcomes to the sandbox lifecycle, oldest first (handling one
    /// may queue more).
    pub(crate) fn hand_over_sandbox_outcomes(&mut self) {
        while let Some(outcome) = self.sandbox_outcomes.pop_front() {
            match outcome {
                SandboxOutcome::JobSubmitted(id, job) => self.sandbox_job_submitted(&id, job),
                SandboxOutcome::PodDeleteRequested(id) => self.sandbox_delete_requested(&id),
                SandboxOutcome::PodTerminal(id) => self.sandbox_pod_changed(&id),
                SandboxOutcome::PodGone(id, exit_code) => self.sandbox_pod_gone(&id, exit_code),
            }
        }
    }

    pub(crate) fn sandbox_values(&self) -> &SandboxValues {
        &self.values.sandboxes
    }
}

/// What the sandbox journal knows: the sandboxes touched since it was read, and the state and
/// reason last reported of each.
#[derive(Debug, Default)]
pub(crate) struct SandboxJournal {
    touched: BTreeSet<String>,
    reported: HashMap<String, (crate::sandbox::SandboxState, String)>,
}

/// A sandbox's new state and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxChange {
    /// The sandbox.
    pub sandbox_id: String,
    /// Its state now.
    pub state: crate::sandbox::SandboxState,
    /// Why, as the API's `state_reason` says it (empty when the state says it all).
    pub reason: String,
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
