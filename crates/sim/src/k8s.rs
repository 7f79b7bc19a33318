//! The Kubernetes side of the world: Nodes, Namespaces, Pods, Events and ConfigMaps, in the
//! shapes `kubectl` shows. Plain data plus the bookkeeping kubelet admission needs; the rules that
//! move Pods live in `world`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::ids::{IdHash, SharedStr};
use crate::resolved::{ResourceAmounts, Toleration};
use crate::time::SimTime;
use crate::touched::Touched;

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

    /// Whether this much room holds `need`, kind by kind.
    pub fn holds(&self, need: ResourceTotals) -> bool {
        self.cpu_millis >= need.cpu_millis && self.memory_bytes >= need.memory_bytes && self.gpus >= need.gpus
    }
}

impl Node {
    /// Allocatable minus what the Pods bound here request: the room the scheduler sees.
    pub fn free(&self) -> ResourceTotals {
        let mut free = self.allocatable;
        free.subtract(self.requested);
        free
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

/// The Node label that names its GPU model on CKS; a sandbox's `gpu.type` is matched against it.
pub const GPU_CLASS_LABEL: &str = "gpu.nvidia.com/class";

/// A Kubernetes Node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Name (shared with the Pods bound to it).
    pub name: SharedStr,
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
    /// Whole CPUs the kubelet's static CPU Manager gave to Pods Slurm knows nothing about.
    pub pinned_cpus: i64,
    /// When it joined.
    pub created: SimTime,
    /// Whether its kubelet reports Ready (an injected fault can make it NotReady).
    pub ready: bool,
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
    Sandbox(SharedStr),
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
    /// What the runtime hands the container beside its spec: secrets, mounted files, the user
    /// it runs as. Kept
    /// apart from `env`, so the Pod's views (kubectl) never show a secret's value; boxed, as
    /// few containers have any.
    pub inputs: Option<Box<ContainerInputs>>,
    /// Working directory, if the spec sets one.
    pub working_dir: Option<String>,
    /// Requests.
    pub requests: ResourceAmounts,
    /// Limits.
    pub limits: ResourceAmounts,
    /// Current state.
    pub state: ContainerState,
}

/// Secrets and mounted files of a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerInputs {
    /// Environment variables read from secret stores; they win over the spec's own.
    pub secret_env: BTreeMap<String, String>,
    /// Files placed before the container starts: (absolute path, content).
    pub files: Vec<(String, std::sync::Arc<[u8]>)>,
    /// `security_context.run_as_user` and `run_as_group`.
    pub run_as: (Option<u32>, Option<u32>),
    /// Where the sandbox's scratch volumes appear in this container.
    pub volume_mounts: Vec<VolumeMountStart>,
    /// Its startup probe (a Compose service's `healthcheck`).
    pub startup_probe: Option<ProbeStart>,
    /// The registry credentials its image is pulled with (`image_pull_credentials`).
    pub pull_secret: Option<ImagePullSecret>,
}

/// Registry credentials for a container's image, read from its organization's secret store
/// (`Container.image_pull_credentials`). Its Debug form hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ImagePullSecret {
    /// The registry host they are for, as the request names it.
    pub registry: String,
    /// The secret.
    pub secret: PullSecret,
}

/// The two forms a registry secret takes in a store.
#[derive(Clone, PartialEq, Eq)]
pub enum PullSecret {
    /// A secret with the fields `username` and `password`.
    Basic {
        /// The user.
        username: String,
        /// The password or access token.
        password: String,
    },
    /// A Docker `config.json` (a whole secret, or one field of it).
    DockerConfigJson(String),
}

impl std::fmt::Debug for PullSecret {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PullSecret::Basic { username, .. } => {
                formatter.debug_struct("Basic").field("username", username).field("password", &"<hidden>").finish()
            }
            PullSecret::DockerConfigJson(json) => write!(formatter, "DockerConfigJson(<{} bytes>)", json.len()),
        }
    }
}

impl std::fmt::Debug for ImagePullSecret {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let form = match self.secret {
            PullSecret::Basic { .. } => "user and password",
            PullSecret::DockerConfigJson(_) => "docker config.json",
        };
        formatter.debug_struct("ImagePullSecret").field("registry", &self.registry).field("secret", &form).finish()
    }
}

/// The registry host of an image reference as the container runtimes read it: the first path
/// part when it looks like a host (has a `.` or `:`, or is `localhost`), else Docker Hub.
pub fn registry_of_image(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// Whether two registry names are one registry (Docker Hub's aliases are one).
pub fn same_registry(a: &str, b: &str) -> bool {
    const HUB: [&str; 4] = ["docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/"];
    a.eq_ignore_ascii_case(b) || (HUB.contains(&a) && HUB.contains(&b))
}

/// An exec probe as the host runs it (the API's `Probe`; a Compose `healthcheck`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeStart {
    /// Program and arguments.
    pub exec: Vec<String>,
    /// Seconds before the first run.
    pub initial_delay_seconds: u32,
    /// Seconds between runs.
    pub period_seconds: u32,
    /// Seconds a run may take.
    pub timeout_seconds: u32,
    /// Failed runs in a row that make the container unhealthy.
    pub failure_threshold: u32,
}

impl ProbeStart {
    /// The API's probe, with Kubernetes' defaults for what it leaves at 0 (period 10 s,
    /// timeout 1 s, failure threshold 3); `None` without a command.
    pub fn from_api(probe: &cwsandbox_api::sandbox_v1::Probe) -> Option<ProbeStart> {
        if probe.exec.is_empty() {
            return None;
        }
        let positive =
            |value: i32, default: u32| u32::try_from(value).ok().filter(|value| *value > 0).unwrap_or(default);
        Some(ProbeStart {
            exec: probe.exec.clone(),
            initial_delay_seconds: u32::try_from(probe.initial_delay_seconds).unwrap_or(0),
            period_seconds: positive(probe.period_seconds, 10),
            timeout_seconds: positive(probe.timeout_seconds, 1),
            failure_threshold: positive(probe.failure_threshold, 3),
        })
    }
}

/// A container starts once another is in a state (a Compose service's `depends_on`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartDependency {
    /// The other container.
    pub container: String,
    /// What of it.
    pub condition: StartCondition,
}

/// What a container waits for of another before it starts (Compose's conditions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartCondition {
    /// `service_started`.
    Started,
    /// `service_healthy`: its startup probe passed.
    Healthy,
    /// `service_completed_successfully`: it exited 0.
    CompletedSuccessfully,
}

/// How a Pod's containers start in order, and the names they resolve to their loopback: what
/// a Compose file asks beyond the containers themselves.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartPlan {
    /// By container name, what it waits for.
    pub after: BTreeMap<String, Vec<StartDependency>>,
    /// Names every container resolves to its loopback (the Compose services').
    pub host_aliases: Vec<String>,
}

impl StartPlan {
    /// Whether it asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.after.values().all(Vec::is_empty) && self.host_aliases.is_empty()
    }
}

/// A scratch volume (an `emptyDir`: made empty with the Pod, gone with it) mounted in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMountStart {
    /// The volume's name in the sandbox.
    pub volume: String,
    /// Absolute path in the container.
    pub path: String,
    pub read_only: bool,
    /// A directory of the volume mounted instead of its root (relative; empty: the root).
    pub sub_path: String,
    /// The READY file-system snapshot the volume starts with (`scratch.restore_from_snapshot_id`)
    /// instead of empty; every mount of the volume names the same one.
    pub restore_from_snapshot: Option<String>,
    /// The PersistentVolumeClaim whose data the volume is (a registered volume), instead of a
    /// directory of the sandbox's own.
    pub claim: Option<ClaimMount>,
}

/// A memory-backed scratch volume (`emptyDir` with medium Memory) as the kubelet makes it: a
/// tmpfs whose size is the smallest of the Node's allocatable memory, the Pod's memory limit
/// (where every container has one) and the volume's `sizeLimit` (Kubernetes'
/// `calculateEmptyDirMemorySize`). Its pages count against the memory of whoever writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryVolume {
    /// The volume's name in the sandbox.
    pub volume: String,
    /// The tmpfs's size in bytes.
    pub size_bytes: u64,
}

/// A PersistentVolumeClaim, by the organization and cluster it is in, its namespace and name:
/// together they name its data (two organizations, or two clusters, never share a claim's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimMount {
    /// The organization whose runners see it.
    pub org: String,
    /// The cluster (`identity.cluster_id` of the volume's runner) that has it.
    pub cluster_id: String,
    pub namespace: String,
    pub name: String,
}

/// Labels or annotations of a Pod: a map kept as one vector sorted by key. A Pod has a handful
/// of them, and a `BTreeMap`'s first node alone takes over 500 bytes. Reads like a `BTreeMap`
/// (`get`, `contains_key`, `iter` in key order, `labels["key"]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Labels {
    entries: Vec<(String, String)>,
}

impl Labels {
    /// An empty map.
    pub fn new() -> Labels {
        Labels::default()
    }

    /// An empty map with room for `capacity` entries.
    pub fn with_capacity(capacity: usize) -> Labels {
        Labels { entries: Vec::with_capacity(capacity) }
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(existing, _)| existing.as_str().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.position(key).ok().map(|index| &self.entries[index].1)
    }

    /// The value of `key`, mutable.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut String> {
        self.position(key).ok().map(|index| &mut self.entries[index].1)
    }

    /// Whether `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets `key`, returning the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.position(&key) {
            Ok(index) => Some(std::mem::replace(&mut self.entries[index].1, value)),
            Err(index) => {
                self.entries.insert(index, (key, value));
                None
            }
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.position(key).ok().map(|index| self.entries.remove(index).1)
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &String)> + ExactSizeIterator {
        self.entries.iter().map(|(key, value)| (key, value))
    }

    /// Entries in key order from the first key not below `from` (a prefix's entries start there).
    pub fn iter_from(&self, from: &str) -> impl Iterator<Item = (&String, &String)> {
        let start = self.position(from).unwrap_or_else(|index| index);
        self.entries[start..].iter().map(|(key, value)| (key, value))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(key, _)| key)
    }

    /// Values in key order.
    pub fn values(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(_, value)| value)
    }
}

impl<'a> IntoIterator for &'a Labels {
    type Item = (&'a String, &'a String);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, (String, String)>, fn(&'a (String, String)) -> (&'a String, &'a String)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(key, value)| (key, value))
    }
}

impl IntoIterator for Labels {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Labels {
        let mut labels = Labels::new();
        labels.extend(pairs);
        labels
    }
}

impl Extend<(String, String)> for Labels {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, pairs: I) {
        for (key, value) in pairs {
            self.insert(key, value);
        }
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Labels {
        // Already sorted and unique.
        Labels { entries: map.into_iter().collect() }
    }
}

impl From<Labels> for BTreeMap<String, String> {
    fn from(labels: Labels) -> BTreeMap<String, String> {
        labels.entries.into_iter().collect()
    }
}

impl std::ops::Index<&str> for Labels {
    type Output = String;
    fn index(&self, key: &str) -> &String {
        self.get(key).unwrap_or_else(|| panic!("no label {key:?}"))
    }
}

/// Something a label selector can read labels from.
pub trait LabelMap {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&String>;
}

impl LabelMap for Labels {
    fn label(&self, key: &str) -> Option<&String> {
        self.get(key)
    }
}

impl LabelMap for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&String> {
        self.get(key)
    }
}

/// A Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    /// Uid (shared with its sandbox, job, Events and the indexes over Pods).
    pub uid: SharedStr,
    /// Namespace.
    pub namespace: SharedStr,
    /// Name.
    pub name: SharedStr,
    /// Labels.
    pub labels: Labels,
    /// Annotations.
    pub annotations: Labels,
    /// `spec.schedulerName` (`default-scheduler` when unset).
    pub scheduler_name: String,
    /// `spec.nodeName` once bound (shared with the Node).
    pub node_name: Option<SharedStr>,
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
    /// Phase, as the world accounts the Pod (a Running Pod holds its Node's resources and its
    /// CPUs); what Kubernetes shows is [`Pod::shown_phase`].
    pub phase: PodPhase,
    /// Whether the host reported its containers started. Until it does, a Running Pod is shown
    /// Pending with its containers `ContainerCreating`, as a kubelet shows a Pod whose container
    /// runtime is still creating its containers; Pods the model runs without a host (slurmd,
    /// system Pods, every Pod when no runtime is attached) start with it set.
    pub host_started: bool,
    /// `status.podIP`: the address of a sandbox Pod with a network of its own.
    pub pod_ip: Option<std::net::Ipv4Addr>,
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
    /// The phase Kubernetes shows: Pending while the host has not reported a Running Pod's
    /// containers started.
    pub fn shown_phase(&self) -> PodPhase {
        if self.phase == PodPhase::Running && !self.host_started { PodPhase::Pending } else { self.phase }
    }
}

/// Sum of containers' requests in kubelet units (a Pod's, or a Pod's before it exists).
pub fn requested_by(containers: &[PodContainer]) -> ResourceTotals {
    let mut total = ResourceTotals::default();
    for container in containers {
        total.cpu_millis += container.requests.cpu.map_or(0, |cpu| cpu.millis());
        total.memory_bytes += container.requests.memory.map_or(0, |memory| memory.units_ceil());
        total.gpus += container.requests.gpu.unwrap_or(0);
    }
    total
}

impl Pod {
    /// Sum of its containers' requests in kubelet units.
    pub fn requested(&self) -> ResourceTotals {
        requested_by(&self.containers)
    }

    /// Whether the Pod tolerates a taint.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        self.tolerations.iter().any(|toleration| {
            let key_matches =
                (toleration.key.is_empty() && toleration.operator == "Exists") || toleration.key == taint.key;
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
    pub namespace: SharedStr,
    /// Name.
    pub name: SharedStr,
    /// Uid.
    pub uid: SharedStr,
}

impl ObjectRef {
    /// A shared reference to a Pod.
    pub fn pod(namespace: &SharedStr, name: &SharedStr, uid: &SharedStr) -> Arc<ObjectRef> {
        Arc::new(ObjectRef { kind: "Pod", namespace: namespace.clone(), name: name.clone(), uid: uid.clone() })
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
    /// Short machine-readable reason (most are fixed words, borrowed rather than copied).
    pub reason: Cow<'static, str>,
    /// Human-readable message (borrowed when fixed, owned when it names things).
    pub message: Cow<'static, str>,
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
/// A RuntimeClass (`node.k8s.io/v1`): a named runtime handler the Nodes run Pods with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeClass {
    /// Name (what `runtimeClassName` says).
    pub name: String,
    /// The CRI handler it stands for.
    pub handler: String,
    /// When created.
    pub created: SimTime,
}

/// The handler a RuntimeClass of this name stands for on the emulator's Nodes: `gvisor` is
/// gVisor's `runsc`, as gVisor's own guide and GKE Sandbox name it; any other name is its own
/// handler (as kata's guide names `kata`).
pub fn runtime_class_handler(name: &str) -> &str {
    if name == "gvisor" { "runsc" } else { name }
}

#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Nodes by name.
    pub nodes: BTreeMap<String, Node>,
    /// Namespaces by name.
    pub namespaces: BTreeMap<String, Namespace>,
    /// Pods by uid, boxed: the table then wastes little on free slots as it grows.
    pods: HashMap<SharedStr, Box<Pod>, IdHash>,
    /// namespace → name → uid, in kubectl's listing order; two levels so a lookup by borrowed
    /// names needs no owned key.
    pod_names: BTreeMap<SharedStr, BTreeMap<SharedStr, SharedStr>>,
    /// Node name → uids of the Pods bound there, so per-Node work never scans every Pod.
    pods_on_node: HashMap<SharedStr, BTreeSet<SharedStr>, IdHash>,
    /// ConfigMaps by (namespace, name).
    pub config_maps: BTreeMap<(String, String), ConfigMap>,
    /// RuntimeClasses (node.k8s.io/v1) by name: the named runtimes the Nodes run Pods with.
    pub runtime_classes: BTreeMap<String, RuntimeClass>,
    /// Events, oldest first, at most `event_capacity`.
    pub events: VecDeque<Event>,
    /// Most Events kept.
    pub event_capacity: usize,
    /// Last Event sequence number.
    pub event_sequence: u64,
    /// Last resource version handed out.
    pub resource_version: u64,
    /// The sandboxes whose Pods changed, were added or removed since the world last took them.
    touched_sandboxes: Touched<SharedStr>,
}

impl Cluster {
    /// An empty cluster keeping at most `event_capacity` Events.
    pub fn new(event_capacity: usize) -> Cluster {
        Cluster { event_capacity, ..Cluster::default() }
    }

    /// Every Pod, ordered by namespace and name.
    pub fn pods_iter(&self) -> impl Iterator<Item = &Pod> {
        self.pod_names.values().flat_map(BTreeMap::values).filter_map(|uid| self.pods.get(uid).map(|pod| &**pod))
    }

    /// How many Pods exist.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// A Pod by namespace and name.
    pub fn pod_by_name(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pod_names.get(namespace).and_then(|names| names.get(name)).and_then(|uid| self.pod(uid))
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
        Cluster::touch_sandbox_of(&mut self.touched_sandboxes, pod);
        Some(pod)
    }

    /// A sandbox's view shows its Pod, so a sandbox's Pod changed, added or removed touches the
    /// sandbox. Takes the field rather than `self`, so a Pod borrowed from `pods` can be passed.
    fn touch_sandbox_of(touched_sandboxes: &mut Touched<SharedStr>, pod: &Pod) {
        if let PodOwner::Sandbox(id) = &pod.owner {
            touched_sandboxes.note(id.clone());
        }
    }

    /// The sandboxes whose Pods changed, were added or removed since the last call.
    pub(crate) fn take_touched_sandboxes(&mut self, into: &mut Vec<SharedStr>) {
        self.touched_sandboxes.take_into(into);
    }

    /// Forgets which were touched (nobody keeps copies).
    pub(crate) fn forget_touched_sandboxes(&mut self) {
        self.touched_sandboxes.forget();
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
                if let Some(node) = self.nodes.get_mut(node_name.as_str()) {
                    node.requested.add(requested);
                }
            }
        }
        self.pod_names.entry(pod.namespace.clone()).or_default().insert(pod.name.clone(), pod.uid.clone());
        Cluster::touch_sandbox_of(&mut self.touched_sandboxes, &pod);
        self.pods.insert(pod.uid.clone(), Box::new(pod));
    }

    /// Removes a Pod, releasing what it held on its Node.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Pod> {
        let pod = *self.pods.remove(uid)?;
        // A removal is a change too: watchers compare resource versions to notice it.
        self.resource_version += 1;
        Cluster::touch_sandbox_of(&mut self.touched_sandboxes, &pod);
        if let Some(names) = self.pod_names.get_mut(&pod.namespace) {
            names.remove(&pod.name);
            if names.is_empty() {
                self.pod_names.remove(&pod.namespace);
            }
        }
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
            if let Some(node) = pod.node_name.as_ref().and_then(|name| self.nodes.get_mut(name.as_str())) {
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
        let (requested, counts, uid) = (pod.requested(), !pod.phase.is_terminal(), pod.uid.clone());
        // One lookup of the Node (a name-keyed tree) for both its shared name and its requests;
        // a Node that does not exist still gets its name.
        let shared_name = match self.nodes.get_mut(node_name) {
            Some(node) => {
                if counts {
                    node.requested.add(requested);
                }
                node.name.clone()
            }
            None => SharedStr::from(node_name),
        };
        if let Some(pod) = self.pods.get_mut(&uid) {
            pod.node_name = Some(shared_name.clone());
        }
        match self.pods_on_node.get_mut(node_name) {
            Some(uids) => {
                uids.insert(uid);
            }
            None => {
                self.pods_on_node.insert(shared_name, BTreeSet::from([uid]));
            }
        }
    }

    /// Moves a Pod to a terminal phase, releasing its Node resources.
    pub fn finish_pod(&mut self, uid: &str, phase: PodPhase, reason: Option<String>, message: Option<String>) {
        let Some(pod) = self.pods.get(uid) else { return };
        if pod.phase.is_terminal() {
            return;
        }
        let (holds, requested, node_name) = (pod.holds_resources(), pod.requested(), pod.node_name.clone());
        if holds && let Some(node) = node_name.as_ref().and_then(|name| self.nodes.get_mut(name.as_str())) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_like_a_sorted_map() {
        let mut labels = Labels::with_capacity(3);
        assert_eq!(labels.insert("b".to_owned(), "2".to_owned()), None);
        assert_eq!(labels.insert("a".to_owned(), "1".to_owned()), None);
        assert_eq!(labels.insert("sunk.coreweave.com/lock".to_owned(), "false".to_owned()), None);
        assert_eq!(labels.insert("b".to_owned(), "3".to_owned()), Some("2".to_owned()));
        assert_eq!(labels.keys().map(String::as_str).collect::<Vec<_>>(), ["a", "b", "sunk.coreweave.com/lock"]);
        assert_eq!(labels["b"], "3");
        assert!(labels.contains_key("a") && !labels.contains_key("c"));
        let sunk: Vec<_> = labels.iter_from("sunk.coreweave.com/").map(|(key, _)| key.as_str()).collect();
        assert_eq!(sunk, ["sunk.coreweave.com/lock"]);
        assert_eq!(labels.remove("a"), Some("1".to_owned()));
        let map: BTreeMap<String, String> = labels.clone().into();
        assert_eq!(Labels::from(map), labels);
    }
}
