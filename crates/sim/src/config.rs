//! The world's configuration: one document shaped like the SUNK Slurm Helm values (scheduler,
//! `slurmConfig.KillWait`, NodeSets with slurmd requests, partitions), plus the cluster's other
//! nodes, Slurm users, runners with their policies and sandbox settings. Two built-in scenarios
//! give the guide's starting point (`fresh`) and the state it recommends (`ready`).
//!
//! Details docs/facts marks unverified (e.g. docs/facts/sunk.md#validation-failure) are settings
//! here, with the documented default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Which built-in starting point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Set up as the guide recommends: KillWait 60 s, scope cluster, slurmd requests lowered,
    /// the runner policy routing sandboxes to the SUNK scheduler.
    Ready,
    /// The guide's starting point: KillWait 30 s, namespace scope, slurmd taking most of each
    /// node, an empty runner policy.
    Fresh,
}

/// The whole configuration document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Values {
    /// The SUNK release.
    pub sunk: SunkValues,
    /// The SUNK Pod Scheduler (`scheduler:` of the Slurm chart).
    pub scheduler: SchedulerValues,
    /// slurm.conf parameters (`slurmConfig:` of the Slurm chart).
    pub slurm_config: SlurmConfigValues,
    /// Slurm users, accounts and partitions.
    pub slurm: SlurmValues,
    /// NodeSets: groups of Nodes, each hosting one slurmd Pod.
    pub node_sets: Vec<NodeSetValues>,
    /// Nodes outside Slurm.
    #[serde(default)]
    pub extra_nodes: Vec<NodeValues>,
    /// The managed runners and their policies.
    pub runners: Vec<RunnerValues>,
    /// How the runner builds sandbox Pods.
    pub sandboxes: SandboxValues,
    /// The serverless pool that takes `SANDBOX_MODE_SERVERLESS` sandboxes, with no runner.
    #[serde(default)]
    pub serverless: ServerlessValues,
    /// The kubelets' configuration.
    #[serde(default)]
    pub kubelet: KubeletValues,
    /// The timing profile the values were made with (see [`Timing`]).
    #[serde(default)]
    pub timing: Timing,
    /// The secret stores containers read secrets from (`Container.secret_stores`), by store
    /// name. Every organization sees the same stores.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_stores: BTreeMap<String, SecretStoreValues>,
    /// File-system snapshots of scratch volumes (the snapshot RPCs, `stop(snapshot_on_stop=True)`,
    /// `ScratchVolume.restore_from_snapshot_id`).
    #[serde(default)]
    pub file_system_snapshots: SnapshotValues,
    /// The PersistentVolumeClaims the runners' clusters have, which registered volumes
    /// (VolumeService) name. A claim is one organization's, in one cluster: its data lives under
    /// the sandbox root (`.volumes/<organization>/<cluster>/<namespace>/<name>`), shared by the
    /// sandboxes of that organization that mount it from a runner of that cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub persistent_volume_claims: Vec<ClaimValues>,
}

/// A PersistentVolumeClaim of the runners' clusters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimValues {
    pub namespace: String,
    pub name: String,
    /// The cluster (a runner's `identity.cluster_id`) that has the claim; unset: every cluster
    /// has a claim of this namespace and name, each its own (its own data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// The organization whose runners see the claim; unset: every organization's, each its own
    /// claim with its own data. A CoreWeave cluster is one organization's, so organizations whose
    /// runners name one cluster id (tenants get copies of the values' runners) never share a
    /// claim's data: a volume of another organization's claim is ERROR (not found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// What a registered volume's `capacity` reports (not enforced).
    #[serde(default = "default_claim_capacity")]
    pub capacity: String,
    /// What a registered volume's `access_modes` reports.
    #[serde(default = "default_claim_access_modes")]
    pub access_modes: Vec<String>,
}

fn default_claim_capacity() -> String {
    "10Gi".to_owned()
}

fn default_claim_access_modes() -> Vec<String> {
    vec!["ReadWriteMany".to_owned()]
}

/// File-system snapshots: copies of a sandbox's scratch volume kept by the emulator (under its
/// sandbox root) for as long as it runs. The real service stores them in object storage per
/// organization; its limits are not public, so both settings are the emulator's choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotValues {
    /// Whether snapshots are offered; when not, every capture is refused with
    /// `CWSANDBOX_FSS_NOT_SUPPORTED` (the client's `SnapshotNotSupportedError`), as for an
    /// organization the real service has not enabled.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How many snapshots one organization may keep; a capture beyond it is refused with
    /// `CWSANDBOX_FSS_QUOTA_EXCEEDED`. 0: no limit.
    #[serde(default = "default_snapshots_per_organization")]
    pub max_per_organization: u32,
}

fn default_snapshots_per_organization() -> u32 {
    100
}

impl Default for SnapshotValues {
    fn default() -> Self {
        SnapshotValues { enabled: true, max_per_organization: default_snapshots_per_organization() }
    }
}

/// One secret store: its secrets by path, and the organizations it is seeded into. The store is
/// an organization's SettingsService store (a W&B store, as the API has no other provider) from
/// the organization's first use of secret stores; its secrets are read from here, since the
/// emulator never reaches W&B.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretStoreValues {
    /// Secret path → value.
    pub secrets: BTreeMap<String, SecretValue>,
    /// The organizations that have the store and may read its secrets; empty: every organization.
    #[serde(default)]
    pub organizations: Vec<String>,
    /// The W&B settings the seeded store shows (`SecretStore.wandb`).
    #[serde(default)]
    pub wandb: WandbStoreValues,
}

impl SecretStoreValues {
    /// Whether `org` has this store and may read its secrets.
    pub fn serves(&self, org: &str) -> bool {
        self.organizations.is_empty() || self.organizations.iter().any(|allowed| allowed == org)
    }
}

/// A W&B secret store's settings, as `SecretStore.wandb` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WandbStoreValues {
    /// Base URL of the W&B API (shown, never reached).
    #[serde(default)]
    pub api_url: String,
    /// The W&B team.
    #[serde(default)]
    pub team: String,
}

/// A secret: one value, or named fields (a mapping's `field` picks one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum SecretValue {
    /// The secret as a whole.
    Whole(String),
    /// Fields of the secret.
    Fields(BTreeMap<String, String>),
}

/// How much artificial delay the simulation adds. The profile sets the defaults of the delay
/// settings; values that set one explicitly win over the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// The guide's behaviour: the placeholder job's prolog takes `scheduler.prologSeconds` (1 s)
    /// before the Pod binds, and its epilog `scheduler.epilogSeconds`.
    #[default]
    Realistic,
    /// No artificial delay: prolog, epilog and the image pull back-off take no time, so a
    /// sandbox runs as soon as its process started and ends as soon as its processes ended. Freeze the clock and set the
    /// delays explicitly to watch the phases in between.
    Instant,
}

impl Timing {
    /// The profile's name, as values spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Timing::Realistic => "realistic",
            Timing::Instant => "instant",
        }
    }
}

/// The kubelets' configuration (the same on every Node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletValues {
    /// The CPU Manager policy. `static` (on by default on CKS) gives a Guaranteed-QoS Pod's
    /// integer CPUs to it alone; Slurm does not see that, so a Pod placed by the default
    /// scheduler on a Slurm node takes CPUs Slurm still hands out (docs/facts/sunk.md#cpu-pinning).
    #[serde(default)]
    pub cpu_manager_policy: CpuManagerPolicy,
    /// Seconds from `ErrImagePull` to `ImagePullBackOff` (Kubernetes' first back-off, 10 s), when
    /// the runner gives up and the sandbox fails. Only an injected image-pull fault gets here.
    /// Unverified against the real service: whether it fails the sandbox or leaves it PENDING.
    #[serde(default = "default_image_pull_back_off")]
    pub image_pull_back_off_seconds: u32,
    /// Seconds between the kubelet's checks of a sized scratch volume's use (an `emptyDir` with
    /// `sizeLimit`): the eviction manager's monitoring period, 10 s. A Pod whose volume holds
    /// more than its size is evicted at the first check after. Unverified against the real
    /// service: a real kubelet's use figures can be up to its `volumeStatsAggPeriod` (1 min)
    /// old, so the eviction may come later there.
    #[serde(default = "default_eviction_monitoring_period")]
    pub eviction_monitoring_period_seconds: std::num::NonZeroU32,
}

fn default_eviction_monitoring_period() -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(10).unwrap_or(std::num::NonZeroU32::MIN)
}

fn default_image_pull_back_off() -> u32 {
    10
}

impl Default for KubeletValues {
    fn default() -> Self {
        KubeletValues {
            cpu_manager_policy: CpuManagerPolicy::default(),
            image_pull_back_off_seconds: default_image_pull_back_off(),
            eviction_monitoring_period_seconds: default_eviction_monitoring_period(),
        }
    }
}

/// The kubelet's `cpuManagerPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CpuManagerPolicy {
    /// Exclusive CPUs for Guaranteed Pods with integer CPU requests.
    #[default]
    Static,
    /// No pinning.
    None,
}

/// The SUNK release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SunkValues {
    /// Major version: 7 gives the name as `--scheduler-name`, 8 and later also in the
    /// `scheduler.conf` ConfigMap.
    pub version: u32,
    /// Namespace of the Slurm release (and of the scheduler Pod).
    pub namespace: String,
    /// Helm release name.
    pub release: String,
}

/// The SUNK Pod Scheduler's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SchedulerValues {
    /// Whether the scheduler runs at all.
    pub enabled: bool,
    /// The name Pods put in `spec.schedulerName`.
    pub name: String,
    /// Which namespaces it watches.
    pub scope: ScopeValues,
    /// The grace rule's margin: grace must be < KillWait − this (`config.scheduler.terminationOffset`).
    pub termination_offset_seconds: u32,
    /// Reason of the Warning Event on a Pod that fails validation (unverified; kube default).
    pub validation_event_reason: String,
    /// Node GPU class label value → Slurm GRES type (`config.scheduler.gpuTypes`).
    #[serde(default)]
    pub gpu_types: BTreeMap<String, String>,
    /// How long the prolog (node lock) runs before the placeholder script starts.
    pub prolog_seconds: u32,
    /// How long the epilog (unlock) runs after the placeholder script ends.
    pub epilog_seconds: u32,
    /// The placeholder script drains the node this long before KillWait runs out while the Pod
    /// still exists (measured: ~2 s for 30 s).
    pub drain_margin_seconds: u32,
    /// Reason the script sets when it drains a node.
    pub drain_reason: String,
    /// Accounting state of a placeholder whose Pod was deleted in Kubernetes (unverified).
    pub deleted_pod_job_state: FinalJobState,
    /// Accounting state of a placeholder whose Pod finished by itself (unverified).
    pub finished_pod_job_state: FinalJobState,
    /// Whether cancelling a pending placeholder deletes its Pod (unverified; else it stays Pending).
    pub delete_pod_when_pending_job_cancelled: bool,
    /// Accepted values of `sunk.coreweave.com/exclusive` (unverified beyond these three).
    pub exclusive_values: Vec<String>,
}

/// How a released placeholder job is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum FinalJobState {
    /// `CANCELLED by <uid>`.
    Cancelled,
    /// `COMPLETED`, exit 0:0.
    Completed,
}

/// The scheduler's watch scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScopeValues {
    /// `cluster` (every namespace) or `namespace` (the listed ones).
    #[serde(rename = "type")]
    pub scope_type: ScopeType,
    /// Watched namespaces for `namespace`; empty means the release namespace only.
    #[serde(default)]
    pub namespaces: Vec<String>,
}

/// Scope kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScopeType {
    /// Every namespace.
    Cluster,
    /// The listed namespaces.
    Namespace,
}

/// slurm.conf parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfigValues {
    /// Seconds between SIGTERM and SIGKILL of a job's processes; also the scheduler's
    /// `--slurm-kill-wait`.
    #[serde(rename = "KillWait")]
    pub kill_wait: u32,
    /// slurm.conf `PrologFlags`, a comma list. With `Contain` every started job gets an `extern`
    /// step (`<id>.extern` in `sacct`). SUNK's own setting is unverified; the default
    /// `Alloc,Contain` matches the prolog-at-allocation behaviour of docs/facts/sunk.md#prolog
    /// (the job is RUNNING with reason `Prolog` while the lock runs) plus the job container.
    #[serde(rename = "PrologFlags", default = "default_prolog_flags")]
    pub prolog_flags: String,
    /// slurm.conf `PrivateData`, a comma list (empty by default, as in Slurm: every user reads
    /// the queue and the accounting). With `jobs`, a user who is no administrator sees only
    /// their own jobs in squeue, sacct and scontrol.
    #[serde(rename = "PrivateData", default, skip_serializing_if = "String::is_empty")]
    pub private_data: String,
    /// slurm.conf `MinJobAge`: seconds a finished job stays in the controller (`squeue -t all`,
    /// `scontrol show job`) after it ended, before only the accounting has it. Slurm's default.
    #[serde(rename = "MinJobAge", default = "default_min_job_age")]
    pub min_job_age: u32,
}

fn default_min_job_age() -> u32 {
    300
}

impl SlurmConfigValues {
    /// Whether `PrivateData` holds `item` (case-insensitive).
    pub fn has_private_data(&self, item: &str) -> bool {
        self.private_data.split(',').any(|each| each.trim().eq_ignore_ascii_case(item))
    }

    /// Whether `PrologFlags` holds `flag` (case-insensitive, as slurm.conf reads it).
    pub fn has_prolog_flag(&self, flag: &str) -> bool {
        self.prolog_flags.split(',').any(|item| item.trim().eq_ignore_ascii_case(flag))
    }
}

fn default_prolog_flags() -> String {
    "Alloc,Contain".to_owned()
}

/// Slurm's users and partitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlurmValues {
    /// Users Slurm knows; placeholder jobs without `user-id` run as the first with uid 0.
    pub users: Vec<SlurmUser>,
    /// Partitions; exactly one is the default.
    pub partitions: Vec<PartitionValues>,
    /// First job id, at most Slurm's default `MaxJobId` (67043328).
    pub first_job_id: u32,
}

/// A Slurm user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlurmUser {
    /// Login name.
    pub name: String,
    /// Numeric uid.
    pub uid: u32,
    /// Primary group name.
    pub group: String,
    /// Primary gid.
    pub gid: u32,
    /// Account used when a job names none.
    pub default_account: String,
}

/// A Slurm partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PartitionValues {
    /// Partition name.
    pub name: String,
    /// Whether jobs without a partition go here.
    #[serde(default)]
    pub default: bool,
    /// NodeSets whose nodes belong to it.
    pub node_sets: Vec<String>,
    /// `OverSubscribe` (`NO`, `YES`, `FORCE`, `EXCLUSIVE`).
    #[serde(default = "default_oversubscribe")]
    pub over_subscribe: String,
    /// Higher tiers schedule (and may preempt) first.
    #[serde(default = "default_priority_tier")]
    pub priority_tier: u32,
    /// `OFF`, `CANCEL` or `REQUEUE`: what happens to jobs of lower tiers in the way.
    #[serde(default = "default_preempt_mode")]
    pub preempt_mode: String,
}

fn default_oversubscribe() -> String {
    "NO".to_owned()
}

fn default_priority_tier() -> u32 {
    1
}

fn default_preempt_mode() -> String {
    "OFF".to_owned()
}

/// A NodeSet: `replicas` Nodes of one shape, each with one slurmd Pod `slurm-<name>-<i>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSetValues {
    /// NodeSet name.
    pub name: String,
    /// How many Nodes.
    pub replicas: u32,
    /// Allocatable CPU of each Node (and Slurm CPUs).
    pub cpu: String,
    /// Allocatable memory of each Node (and Slurm RealMemory).
    pub memory: String,
    /// GPUs of each Node.
    #[serde(default)]
    pub gpus: u32,
    /// `gpu.nvidia.com/class` label value, if GPUs.
    #[serde(default)]
    pub gpu_class: String,
    /// Extra Node labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The slurmd Pod's requests.
    pub slurmd: SlurmdValues,
}

/// The slurmd container's resource requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlurmdValues {
    /// Requests, e.g. `{cpu: "1", memory: "4Gi"}`.
    pub requests: ResourceValues,
}

/// A CPU/memory pair of quantities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceValues {
    /// CPU quantity.
    pub cpu: String,
    /// Memory quantity.
    pub memory: String,
}

/// A Node outside Slurm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeValues {
    /// Node name.
    pub name: String,
    /// Allocatable CPU.
    pub cpu: String,
    /// Allocatable memory.
    pub memory: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A managed runner as configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunnerValues {
    /// Organization that owns it.
    pub org: String,
    /// `identity.runner_id`.
    pub runner_id: String,
    /// `identity.runner_group_id`.
    #[serde(default = "default_group")]
    pub runner_group_id: String,
    /// `identity.zone`.
    pub zone: String,
    /// `identity.cluster_id`.
    pub cluster_id: String,
    /// Display name.
    #[serde(default)]
    pub display_name: String,
    /// The policy as proto3 JSON (`{}` is the permissive policy); required unless
    /// `never_configured`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<serde_json::Value>,
    /// The runner as the console leaves it before anyone set a policy: it has none at all
    /// (GetManagedRunner shows no `policy`, `policy get -o json` prints `null`), so the guide's
    /// `.policy == null` guard can be rehearsed. Sandboxes on it get the platform's checks only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never_configured: bool,
    /// Whether tenants created at run time (EmulatorService CreateTenant) get a runner of this
    /// id and policy in their own organization.
    #[serde(default = "shared_with_tenants")]
    pub tenants: bool,
}

fn shared_with_tenants() -> bool {
    true
}

fn default_group() -> String {
    "default".to_owned()
}

/// How the runner turns sandboxes into Pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxValues {
    /// `terminationGracePeriodSeconds` of sandbox Pods (the Kubernetes default, which the
    /// policy cannot change).
    pub pod_termination_grace_period_seconds: u32,
    /// Sandbox namespaces are `<prefix><user>`.
    pub namespace_prefix: String,
    /// CPU request of a container that states none and whose policy has no default.
    pub default_cpu: String,
    /// Memory request of a container that states none and whose policy has no default.
    pub default_memory: String,
    /// Lifetime of a sandbox that states none and whose policy has no default.
    pub default_lifetime_seconds: i32,
    /// How long terminal sandboxes stay readable.
    pub retention_seconds: u32,
    /// How many Events the cluster keeps (oldest dropped first).
    pub event_capacity: usize,
    /// Whether a sandbox stopped while its main process ran reports that process's exit code
    /// (0 when it honours SIGTERM by exiting 0, 143 when SIGTERM ends it, 137 when the grace
    /// runs out and SIGKILL does), as the published client's `returncode` docstring promises.
    /// The same client's code also says "gateway-initiated stops never stamp an exit code":
    /// `false` gives that behaviour.
    #[serde(default = "default_true")]
    pub exit_code_after_stop: bool,
}

fn default_true() -> bool {
    true
}

/// The serverless pool: capacity of the platform's own, on which `SANDBOX_MODE_SERVERLESS`
/// sandboxes run with no runner, no runner policy and no SUNK. Its Nodes
/// (`node-serverless-<i>`) carry the label [`SERVERLESS_POOL_LABEL`] and the taint
/// [`SERVERLESS_TAINT_KEY`]`=true:NoSchedule`, so the default scheduler places serverless Pods
/// there and nothing else. How the real service sizes, names and reports its serverless capacity
/// is not public: every setting here is the emulator's choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerlessValues {
    /// Whether serverless placement is offered; when not, a serverless sandbox is refused with
    /// `CWSANDBOX_SERVERLESS_DISABLED`, on which the published client never spills over to CKS.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How many Nodes the pool has.
    #[serde(default = "default_serverless_nodes")]
    pub nodes: u32,
    /// Allocatable CPU of each Node: also the most one serverless sandbox may request.
    #[serde(default = "default_serverless_cpu")]
    pub cpu: String,
    /// Allocatable memory of each Node: also the most one serverless sandbox may request.
    #[serde(default = "default_serverless_memory")]
    pub memory: String,
    /// At most this many serverless sandboxes of one organization hold capacity at once (from
    /// creation until their Pod is gone); 0: only the Nodes' room limits them.
    #[serde(default = "default_serverless_max_sandboxes")]
    pub max_sandboxes_per_organization: u32,
    /// What `status.runner_id` and `status.runner_group_id` say for a serverless sandbox (and
    /// what ListSandboxes' `runner_ids` filter matches); the real value is unverified.
    #[serde(default = "default_serverless_runner_id")]
    pub runner_id: String,
}

/// The label every Node of the serverless pool carries, with the value [`SERVERLESS_POOL`].
pub const SERVERLESS_POOL_LABEL: &str = "sandbox.coreweave.com/pool";
/// The value of [`SERVERLESS_POOL_LABEL`] on the serverless pool's Nodes.
pub const SERVERLESS_POOL: &str = "serverless";
/// The `NoSchedule` taint on the serverless pool's Nodes, which only serverless Pods tolerate.
pub const SERVERLESS_TAINT_KEY: &str = "sandbox.coreweave.com/serverless";

fn default_serverless_nodes() -> u32 {
    2
}

fn default_serverless_cpu() -> String {
    "8".to_owned()
}

fn default_serverless_memory() -> String {
    "32Gi".to_owned()
}

fn default_serverless_max_sandboxes() -> u32 {
    16
}

fn default_serverless_runner_id() -> String {
    "serverless".to_owned()
}

impl Default for ServerlessValues {
    fn default() -> Self {
        ServerlessValues {
            enabled: true,
            nodes: default_serverless_nodes(),
            cpu: default_serverless_cpu(),
            memory: default_serverless_memory(),
            max_sandboxes_per_organization: default_serverless_max_sandboxes(),
            runner_id: default_serverless_runner_id(),
        }
    }
}

impl Values {
    /// The built-in document of a scenario.
    pub fn scenario(scenario: Scenario) -> Values {
        let ready = scenario == Scenario::Ready;
        let partition = |name: &str, default: bool| PartitionValues {
            name: name.to_owned(),
            default,
            node_sets: vec!["cpu".to_owned()],
            over_subscribe: default_oversubscribe(),
            priority_tier: 1,
            preempt_mode: default_preempt_mode(),
        };
        let user = |name: &str, uid: u32| SlurmUser {
            name: name.to_owned(),
            uid,
            group: name.to_owned(),
            gid: uid,
            default_account: if uid == 0 { "root".to_owned() } else { "research".to_owned() },
        };
        let policy = if ready {
            serde_json::json!({"displayName": "Route sandboxes through SUNK",
                               "base": {"spec": {"schedulerName": "slurm-scheduler"}}})
        } else {
            serde_json::json!({})
        };
        Values {
            sunk: SunkValues { version: 8, namespace: "tenant-slurm".to_owned(), release: "slurm".to_owned() },
            scheduler: SchedulerValues {
                enabled: true,
                name: "slurm-scheduler".to_owned(),
                scope: ScopeValues {
                    scope_type: if ready { ScopeType::Cluster } else { ScopeType::Namespace },
                    namespaces: Vec::new(),
                },
                termination_offset_seconds: 5,
                validation_event_reason: "FailedScheduling".to_owned(),
                gpu_types: BTreeMap::new(),
                prolog_seconds: 1,
                epilog_seconds: 0,
                drain_margin_seconds: 2,
                drain_reason: "SUNK: pod was not deleted before KillWait".to_owned(),
                deleted_pod_job_state: FinalJobState::Cancelled,
                finished_pod_job_state: FinalJobState::Completed,
                delete_pod_when_pending_job_cancelled: true,
                exclusive_values: vec!["none".to_owned(), "user".to_owned(), "ok".to_owned()],
            },
            slurm_config: SlurmConfigValues {
                kill_wait: if ready { 60 } else { 30 },
                prolog_flags: default_prolog_flags(),
                private_data: String::new(),
                min_job_age: default_min_job_age(),
            },
            slurm: SlurmValues {
                users: vec![user("root", 0), user("alice", 1001), user("bob", 1002)],
                partitions: vec![partition("cpu", true), partition("hpc-prod", false), partition("sandboxes", false)],
                first_job_id: 1000,
            },
            node_sets: vec![NodeSetValues {
                name: "cpu".to_owned(),
                replicas: 4,
                cpu: "16".to_owned(),
                memory: "64Gi".to_owned(),
                gpus: 0,
                gpu_class: String::new(),
                labels: BTreeMap::new(),
                slurmd: SlurmdValues {
                    requests: if ready {
                        ResourceValues { cpu: "1".to_owned(), memory: "4Gi".to_owned() }
                    } else {
                        ResourceValues { cpu: "15500m".to_owned(), memory: "60Gi".to_owned() }
                    },
                },
            }],
            extra_nodes: vec![NodeValues {
                name: "node-system-0".to_owned(),
                cpu: "4".to_owned(),
                memory: "16Gi".to_owned(),
                labels: BTreeMap::from([("node-role.kubernetes.io/control-plane".to_owned(), String::new())]),
            }],
            runners: vec![RunnerValues {
                org: "default-org".to_owned(),
                runner_id: "cks-runner".to_owned(),
                runner_group_id: default_group(),
                zone: "us-east-04a".to_owned(),
                cluster_id: "cks-cluster".to_owned(),
                display_name: "Emulated CKS runner".to_owned(),
                policy: Some(policy),
                never_configured: false,
                tenants: true,
            }],
            sandboxes: SandboxValues {
                pod_termination_grace_period_seconds: 30,
                namespace_prefix: "sandbox-".to_owned(),
                default_cpu: "1".to_owned(),
                default_memory: "1Gi".to_owned(),
                default_lifetime_seconds: 600,
                retention_seconds: 3600,
                event_capacity: 10_000,
                exit_code_after_stop: true,
            },
            serverless: ServerlessValues::default(),
            kubelet: KubeletValues::default(),
            timing: Timing::Realistic,
            secret_stores: BTreeMap::new(),
            file_system_snapshots: SnapshotValues::default(),
            persistent_volume_claims: Vec::new(),
        }
    }

    /// The scenario as a JSON tree, the base a values overlay merges into.
    pub fn scenario_tree(scenario: Scenario) -> serde_json::Value {
        Values::scenario_tree_timed(scenario, Timing::Realistic)
    }

    /// The scenario with the delay defaults of a timing profile, as a JSON tree.
    pub fn scenario_tree_timed(scenario: Scenario, timing: Timing) -> serde_json::Value {
        let mut values = Values::scenario(scenario);
        values.timing = timing;
        if timing == Timing::Instant {
            values.scheduler.prolog_seconds = 0;
            values.scheduler.epilog_seconds = 0;
            values.kubelet.image_pull_back_off_seconds = 0;
        }
        serde_json::to_value(values).unwrap_or(serde_json::Value::Null)
    }

    /// Reads a merged tree, naming the offending key on error (`slurmConfig.KillWait: invalid
    /// type: …`; serde alone names the key only for unknown and missing fields).
    pub fn from_tree(tree: serde_json::Value) -> Result<Values, KeyError> {
        serde_path_to_error::deserialize(tree)
            .map_err(|error| KeyError { path: key_path(error.path()), message: error.into_inner().to_string() })
    }
}

/// Why a values tree does not describe a world: the key (as a path, `scheduler.nmae`,
/// `nodeSets[0].cpu`, `extraNodes[0].labels["a.b/c"]`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct KeyError {
    /// Path of the offending key; empty for the top level.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// A key's path as the API names fields: `nodeSets[0].cpu`, and a key that is not a plain name
/// quoted as map keys are (`extraNodes[0].labels["node-role.kubernetes.io/control-plane"]`), so
/// that a key holding a dot or a bracket cannot pass for a nested field. Empty for the top level.
pub fn key_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut text = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => text.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                let mut chars = key.chars();
                let is_name = chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
                    && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
                match (is_name, text.is_empty()) {
                    (true, true) => text.push_str(key),
                    (true, false) => text.push_str(&format!(".{key}")),
                    (false, _) => text.push_str(&format!("[{key:?}]")),
                }
            }
            Segment::Unknown => text.push_str(if text.is_empty() { "?" } else { ".?" }),
        }
    }
    text
}

/// One step of a path [`key_path`] writes: a plain field, a list index, or a quoted key
/// (`"a.b/c"`, quotes and escapes kept as `{:?}` prints them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPathStep {
    /// `name` or `.name`.
    Field(String),
    /// `[3]`.
    Index(usize),
    /// `["a.b/c"]`, with its quotes.
    Key(String),
}

/// Reads back what [`key_path`] writes (`nodeSets[0].labels["a.b/c"]` → its steps); `None` for
/// text that is not such a path. Tests use it to check that an error names a real place.
pub fn key_path_steps(path: &str) -> Option<Vec<KeyPathStep>> {
    let chars: Vec<char> = path.chars().collect();
    let mut steps = Vec::new();
    let mut position = 0;
    while position < chars.len() {
        match chars[position] {
            // A joint, also the leading one of a path cut off a longer one.
            '.' => position += 1,
            '[' if chars.get(position + 1) == Some(&'"') => {
                // A quoted key: scan to the closing quote, skipping escapes.
                let start = position + 1;
                let mut end = start + 1;
                while end < chars.len() && chars[end] != '"' {
                    end += if chars[end] == '\\' { 2 } else { 1 };
                }
                if chars.get(end + 1) != Some(&']') {
                    return None;
                }
                steps.push(KeyPathStep::Key(chars[start..=end].iter().collect()));
                position = end + 2;
            }
            '[' => {
                let end = position + chars[position..].iter().position(|c| *c == ']')?;
                steps.push(KeyPathStep::Index(chars[position + 1..end].iter().collect::<String>().parse().ok()?));
                position = end + 1;
            }
            _ => {
                let end = chars[position..]
                    .iter()
                    .position(|c| *c == '.' || *c == '[')
                    .map_or(chars.len(), |end| position + end);
                steps.push(KeyPathStep::Field(chars[position..end].iter().collect()));
                position = end;
            }
        }
    }
    Some(steps)
}

/// Merges `overlay` into `base` the way `helm -f` does: maps merge key by key, anything else
/// (lists included) is replaced, and an explicit `null` removes the key. A `null` never survives
/// into the result, even inside a map the overlay adds, so applying the same overlay twice gives
/// what applying it once does.
pub fn merge_values(base: &mut serde_json::Value, overlay: &serde_json::Value) {
    match (base, overlay) {
        (serde_json::Value::Object(base_map), serde_json::Value::Object(overlay_map)) => {
            for (key, value) in overlay_map {
                if value.is_null() {
                    base_map.remove(key);
                } else if let Some(existing) = base_map.get_mut(key) {
                    merge_values(existing, value);
                } else {
                    base_map.insert(key.clone(), without_nulls(value));
                }
            }
        }
        (base, overlay) => *base = without_nulls(overlay),
    }
}

/// `value` with the null-valued keys of its maps removed, at every depth of nested maps. Lists
/// are values, not maps, and are kept as written.
fn without_nulls(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.iter()
                .filter(|(_, entry)| !entry.is_null())
                .map(|(key, entry)| (key.clone(), without_nulls(entry)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scenarios_round_trip_through_their_tree() {
        for scenario in [Scenario::Ready, Scenario::Fresh] {
            assert_eq!(Values::from_tree(Values::scenario_tree(scenario)).unwrap(), Values::scenario(scenario));
        }
    }

    #[test]
    fn overlay_merges_maps_and_replaces_lists() {
        let mut tree = Values::scenario_tree(Scenario::Fresh);
        merge_values(&mut tree, &json!({"slurmConfig": {"KillWait": 60}, "scheduler": {"scope": {"type": "cluster"}}}));
        let values = Values::from_tree(tree).unwrap();
        assert_eq!(values.slurm_config.kill_wait, 60);
        assert_eq!(values.scheduler.scope.scope_type, ScopeType::Cluster);
        assert_eq!(values.scheduler.name, "slurm-scheduler", "untouched keys stay");
    }

    #[test]
    fn prolog_flags_default_to_alloc_contain_and_read_case_insensitively() {
        let values = Values::scenario(Scenario::Ready);
        assert!(values.slurm_config.has_prolog_flag("contain"));
        let mut tree = Values::scenario_tree(Scenario::Ready);
        merge_values(&mut tree, &json!({"slurmConfig": {"PrologFlags": "Alloc"}}));
        let values = Values::from_tree(tree).unwrap();
        assert!(values.slurm_config.has_prolog_flag("ALLOC"));
        assert!(!values.slurm_config.has_prolog_flag("Contain"));
        let mut tree = Values::scenario_tree(Scenario::Ready);
        tree["slurmConfig"].as_object_mut().unwrap().remove("PrologFlags");
        assert!(Values::from_tree(tree).unwrap().slurm_config.has_prolog_flag("Contain"), "absent key → default");
    }

    #[test]
    fn a_null_inside_an_added_map_is_dropped_so_an_overlay_applies_idempotently() {
        let overlay =
            json!({"kubelet": {"cpuManagerPolicy": null}, "scheduler": {"gpuTypes": {"a100": null, "h100": "h100"}}});
        let mut base = json!({"scheduler": {"name": "s"}});
        merge_values(&mut base, &overlay);
        assert_eq!(base, json!({"scheduler": {"name": "s", "gpuTypes": {"h100": "h100"}}, "kubelet": {}}));
        let once = base.clone();
        merge_values(&mut base, &overlay);
        assert_eq!(base, once, "the second application changes nothing");
        let mut replaced = json!({"kubelet": 5});
        merge_values(&mut replaced, &overlay);
        assert_eq!(replaced["kubelet"], json!({}), "a map replacing a scalar loses its nulls too");
    }

    #[test]
    fn type_errors_name_the_key() {
        let mut tree = Values::scenario_tree(Scenario::Ready);
        merge_values(&mut tree, &json!({"slurmConfig": {"KillWait": "sixty"}}));
        let error = Values::from_tree(tree).unwrap_err();
        assert_eq!(error.path, "slurmConfig.KillWait");
        assert!(error.to_string().starts_with("slurmConfig.KillWait: invalid type"), "{error}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let mut tree = Values::scenario_tree(Scenario::Ready);
        merge_values(&mut tree, &json!({"scheduler": {"nmae": "x"}}));
        let error = Values::from_tree(tree).unwrap_err();
        assert!(error.to_string().contains("nmae"), "{error}");
    }
}
