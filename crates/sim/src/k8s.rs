//! The Kubernetes side of the world: Nodes, Namespaces, Pods, Events and ConfigMaps, in the
//! shapes `kubectl` shows. Plain data plus the bookkeeping kubelet admission needs; the rules that
//! move Pods live in `world`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::resolved::{ResourceAmounts, Toleration};
use crate::time::SimTime;

/// Resource totals in the units kubelet compares: millicores, bytes, whole GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceTotals {
    /// CPU in millicores.
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory_bytes: i64,
    /// GPUs (`nvidia.com/gpu`).
    pub gpus: i64,
}

impl ResourceTotals {
    /// Adds another total.
    pub fn add(&mut self, other: ResourceTotals) {
        self.cpu_millis += other.cpu_millis;
        self.memory_bytes += other.memory_bytes;
        self.gpus += other.gpus;
    }

    /// Subtracts another total.
    pub fn subtract(&mut self, other: ResourceTotals) {
        self.cpu_millis -= other.cpu_millis;
        self.memory_bytes -= other.memory_bytes;
        self.gpus -= other.gpus;
    }
}

/// A Node taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// The taint SUNK puts on a Node while a Slurm job holds it.
pub const LOCK_KEY: &str = "sunk.coreweave.com/lock";

/// A Kubernetes Node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable capacity.
    pub allocatable: ResourceTotals,
    /// Sum of requests of the non-terminal Pods bound here (kubelet's "used").
    pub requested: ResourceTotals,
    /// When it joined.
    pub created: SimTime,
}

/// Pod phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    /// Accepted, not running yet.
    Pending,
    /// Bound and started.
    Running,
    /// Every container exited 0.
    Succeeded,
    /// A container failed or the Pod was rejected.
    Failed,
}

impl PodPhase {
    /// The name Kubernetes uses.
    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
        }
    }

    /// Whether the Pod will not run again.
    pub fn is_terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// What a Pod belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodOwner {
    /// A sandbox's Pod.
    Sandbox(String),
    /// The slurmd Pod of a Slurm node.
    Slurmd {
        /// The Slurm node name.
        slurm_node: String,
    },
    /// The SUNK scheduler itself.
    Scheduler,
    /// Something else (created through the emulator API).
    Other,
}

/// The state of a Pod's (main) container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    /// Not started, with the reason (`ContainerCreating`).
    Waiting(String),
    /// Running since.
    Running(SimTime),
    /// Exited.
    Terminated {
        /// Exit code.
        exit_code: i32,
        /// `Completed` or `Error`.
        reason: String,
        /// When.
        finished: SimTime,
    },
}

/// One container of a Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodContainer {
    /// Name.
    pub name: String,
    /// Image.
    pub image: String,
    /// Command (entrypoint).
    pub command: Vec<String>,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Working directory, if the spec sets one.
    pub working_dir: Option<String>,
    /// Requests.
    pub requests: ResourceAmounts,
    /// Limits.
    pub limits: ResourceAmounts,
    /// Current state.
    pub state: ContainerState,
}

/// A Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    /// Uid.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// `spec.schedulerName` (`default-scheduler` when unset).
    pub scheduler_name: String,
    /// `spec.nodeName` once bound.
    pub node_name: Option<String>,
    /// `spec.terminationGracePeriodSeconds`.
    pub termination_grace_period_seconds: i64,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// Required node-affinity terms (see `ResolvedSpec`).
    pub required_node_affinity: Vec<BTreeMap<String, Vec<String>>>,
    /// `spec.priorityClassName`.
    pub priority_class_name: Option<String>,
    /// Other `spec` keys, kept for display.
    pub extra_spec: BTreeMap<String, serde_json::Value>,
    /// Containers.
    pub containers: Vec<PodContainer>,
    /// Phase.
    pub phase: PodPhase,
    /// `status.reason` (`OutOfcpu`, `Evicted`, …).
    pub reason: Option<String>,
    /// `status.message`.
    pub message: Option<String>,
    /// `PodScheduled` condition: `None` until a scheduler decides, then (status, reason, message).
    pub scheduled_condition: Option<(bool, String, String)>,
    /// `status.startTime`.
    pub start_time: Option<SimTime>,
    /// `metadata.creationTimestamp`.
    pub created: SimTime,
    /// `metadata.deletionTimestamp` while terminating.
    pub deletion_timestamp: Option<SimTime>,
    /// `metadata.deletionGracePeriodSeconds` while terminating.
    pub deletion_grace_period_seconds: Option<i64>,
    /// What it belongs to.
    pub owner: PodOwner,
    /// Bumped on every change (`metadata.resourceVersion`).
    pub resource_version: u64,
    /// The reference its Events carry, made once and shared by all of them.
    pub object_ref: Arc<ObjectRef>,
}

impl Pod {
    /// Sum of its containers' requests in kubelet units.
    pub fn requested(&self) -> ResourceTotals {
        let mut total = ResourceTotals::default();
        for container in &self.containers {
            total.cpu_millis += container.requests.cpu.map_or(0, |cpu| cpu.millis());
            total.memory_bytes += container.requests.memory.map_or(0, |memory| memory.units_ceil());
            total.gpus += container.requests.gpu.unwrap_or(0);
        }
        total
    }

    /// Whether the Pod tolerates a taint.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        self.tolerations.iter().any(|toleration| {
            let key_matches = (toleration.key.is_empty() && toleration.operator == "Exists") || toleration.key == taint.key;
            let value_matches = toleration.operator == "Exists" || toleration.value == taint.value;
            let effect_matches = toleration.effect.is_empty() || toleration.effect == taint.effect;
            key_matches && value_matches && effect_matches
        })
    }

    /// Whether it still counts against its Node.
    pub fn holds_resources(&self) -> bool {
        self.node_name.is_some() && !self.phase.is_terminal()
    }
}

/// Event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Something went wrong.
    Warning,
}

impl EventType {
    /// The name Kubernetes uses.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A reference to the object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectRef {
    /// `Pod`, `Node`, …
    pub kind: &'static str,
    /// Namespace (empty for cluster objects).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
}

impl ObjectRef {
    /// A shared reference to a Pod.
    pub fn pod(namespace: &str, name: &str, uid: &str) -> Arc<ObjectRef> {
        Arc::new(ObjectRef { kind: "Pod", namespace: namespace.to_owned(), name: name.to_owned(), uid: uid.to_owned() })
    }
}

/// A Kubernetes Event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Monotonic sequence number.
    pub sequence: u64,
    /// What it is about (shared with the object and its other Events).
    pub involved: Arc<ObjectRef>,
    /// Normal or Warning.
    pub event_type: EventType,
    /// Short machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Reporting component (`sunk-scheduler`, `kubelet`, `default-scheduler`).
    pub source: &'static str,
    /// When.
    pub time: SimTime,
}

impl Event {
    /// Namespace of the Event: its object's, or `default` for cluster objects.
    pub fn namespace(&self) -> &str {
        if self.involved.namespace.is_empty() { "default" } else { &self.involved.namespace }
    }

    /// The generated object name (`<object>.<hex sequence>`), made on demand: Events are many
    /// and their names are read rarely.
    pub fn name(&self) -> String {
        format!("{}.{:x}", self.involved.name, self.sequence)
    }
}

/// A ConfigMap.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigMap {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Data.
    pub data: BTreeMap<String, String>,
    /// When created.
    pub created: SimTime,
}

/// A Namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Namespace {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// When created.
    pub created: SimTime,
}

/// Everything Kubernetes holds.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Nodes by name.
    pub nodes: BTreeMap<String, Node>,
    /// Namespaces by name.
    pub namespaces: BTreeMap<String, Namespace>,
    /// Pods by uid, boxed: the table then wastes little on free slots as it grows.
    pods: HashMap<String, Box<Pod>>,
    /// (namespace, name) → uid, in kubectl's listing order.
    pod_names: BTreeMap<(String, String), String>,
    /// Node name → uids of the Pods bound there, so per-Node work never scans every Pod.
    pods_on_node: HashMap<String, BTreeSet<String>>,
    /// ConfigMaps by (namespace, name).
    pub config_maps: BTreeMap<(String, String), ConfigMap>,
    /// Events, oldest first, at most `event_capacity`.
    pub events: VecDeque<Event>,
    /// Most Events kept.
    pub event_capacity: usize,
    /// Last Event sequence number.
    pub event_sequence: u64,
    /// Last resource version handed out.
    pub resource_version: u64,
}

impl Cluster {
    /// An empty cluster keeping at most `event_capacity` Events.
    pub fn new(event_capacity: usize) -> Cluster {
        Cluster { event_capacity, ..Cluster::default() }
    }

    /// Every Pod, ordered by namespace and name.
    pub fn pods_iter(&self) -> impl Iterator<Item = &Pod> {
        self.pod_names.values().filter_map(|uid| self.pods.get(uid).map(|pod| &**pod))
    }

    /// How many Pods exist.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// A Pod by namespace and name.
    pub fn pod_by_name(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pod_names.get(&(namespace.to_owned(), name.to_owned())).and_then(|uid| self.pod(uid))
    }

    /// The Pods bound to a Node.
    pub fn pods_on(&self, node: &str) -> impl Iterator<Item = &Pod> {
        self.pods_on_node.get(node).into_iter().flatten().filter_map(|uid| self.pod(uid))
    }

    /// A Pod by uid.
    pub fn pod(&self, uid: &str) -> Option<&Pod> {
        self.pods.get(uid).map(|pod| &**pod)
    }

    /// A Pod by uid, mutable; bumps its resource version. Its node binding is changed only
    /// through [`Cluster::bind`].
    pub fn pod_mut(&mut self, uid: &str) -> Option<&mut Pod> {
        let pod = self.pods.get_mut(uid)?;
        self.resource_version += 1;
        pod.resource_version = self.resource_version;
        Some(pod)
    }

    /// Adds a Pod (its name must be free in its namespace).
    pub fn insert_pod(&mut self, mut pod: Pod) {
        if pod.object_ref.uid != pod.uid {
            pod.object_ref = ObjectRef::pod(&pod.namespace, &pod.name, &pod.uid);
        }
        self.resource_version += 1;
        pod.resource_version = self.resource_version;
        if let Some(node_name) = &pod.node_name {
            self.pods_on_node.entry(node_name.clone()).or_default().insert(pod.uid.clone());
            if pod.holds_resources() {
                let requested = pod.requested();
                if let Some(node) = self.nodes.get_mut(node_name) {
                    node.requested.add(requested);
                }
            }
        }
        self.pod_names.insert((pod.namespace.clone(), pod.name.clone()), pod.uid.clone());
        self.pods.insert(pod.uid.clone(), Box::new(pod));
    }

    /// Removes a Pod, releasing what it held on its Node.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Pod> {
        let pod = *self.pods.remove(uid)?;
        // A removal is a change too: watchers compare resource versions to notice it.
        self.resource_version += 1;
        self.pod_names.remove(&(pod.namespace.clone(), pod.name.clone()));
        if let Some(node_name) = &pod.node_name
            && let Some(uids) = self.pods_on_node.get_mut(node_name)
        {
            uids.remove(uid);
        }
        self.release(&pod);
        Some(pod)
    }

    /// Stops counting a Pod's requests against its Node (it turned terminal or left).
    fn release(&mut self, pod: &Pod) {
        if pod.holds_resources() {
            let requested = pod.requested();
            if let Some(node) = pod.node_name.as_ref().and_then(|name| self.nodes.get_mut(name)) {
                node.requested.subtract(requested);
            }
        }
    }

    /// Binds a Pod to a Node; a non-terminal Pod's requests count there from now on.
    pub fn bind(&mut self, uid: &str, node_name: &str) {
        let Some(pod) = self.pod_mut(uid) else { return };
        if pod.node_name.is_some() {
            return;
        }
        pod.node_name = Some(node_name.to_owned());
        let requested = pod.requested();
        let counts = !pod.phase.is_terminal();
        self.pods_on_node.entry(node_name.to_owned()).or_default().insert(uid.to_owned());
        if counts && let Some(node) = self.nodes.get_mut(node_name) {
            node.requested.add(requested);
        }
    }

    /// Moves a Pod to a terminal phase, releasing its Node resources.
    pub fn finish_pod(&mut self, uid: &str, phase: PodPhase, reason: Option<String>, message: Option<String>) {
        let Some(pod) = self.pods.get(uid) else { return };
        if pod.phase.is_terminal() {
            return;
        }
        let (holds, requested, node_name) = (pod.holds_resources(), pod.requested(), pod.node_name.clone());
        if holds && let Some(node) = node_name.as_ref().and_then(|name| self.nodes.get_mut(name)) {
            node.requested.subtract(requested);
        }
        if let Some(pod) = self.pod_mut(uid) {
            pod.phase = phase;
            pod.reason = reason;
            pod.message = message;
        }
    }

    /// Records an Event, dropping the oldest past capacity.
    pub fn record_event(&mut self, mut event: Event) {
        self.event_sequence += 1;
        event.sequence = self.event_sequence;
        self.events.push_back(event);
        while self.events.len() > self.event_capacity.max(1) {
            self.events.pop_front();
        }
    }
}
