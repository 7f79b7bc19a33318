//! Sandboxes: creation (idempotent by request id), runner choice, policy resolution, one
//! namespace per user, the Pod built from the resolved spec, and a state mirrored from the Pod
//! and its placeholder job. Terminal sandboxes stay readable for a retention period.

use std::collections::HashMap;
use std::sync::Arc;

use cwsandbox_api::sandbox_v1::{Container, ManagedRunner, SandboxMode, SandboxSpec};
use prost::Message;

use crate::config::SandboxValues;
use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::ids::{IdHash, SharedStr};
use crate::k8s::ContainerInputs;
use crate::machine::{IllegalTransition, Phase, phases, transitions};
use crate::policy::MAX_LIFETIME_SECONDS;
use crate::policy::{PreparedPolicy, RuntimeDefaults};
use crate::quantity::Quantity;
use crate::resolved::ResolvedSpec;
use crate::slurm::JobId;
use crate::time::{SimTime, TimerKey};
use crate::touched::Touched;
use crate::volumes::RegisteredVolume;

/// What a sandbox's Pod waits on its host for ([`World::awaits_host`](crate::world::World::awaits_host)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostWait {
    /// The pull of its images.
    Pull,
    /// The start of its containers.
    Start,
    /// The end of its processes, which it was asked to stop (SIGTERM, then SIGKILL after the
    /// grace) or kill.
    Stop,
}

/// The reason of a sandbox whose Pod is placed while the host starts its containers.
pub const CONTAINER_CREATING: &str = "ContainerCreating: the runtime is starting the sandbox's containers";

/// Label every sandbox Pod carries.
pub const SANDBOX_ID_LABEL: &str = "sandbox.coreweave.com/sandbox-id";

/// The label a serverless sandbox's Pod carries (value `serverless`), for `kubectl -l`.
pub const SANDBOX_MODE_LABEL: &str = "sandbox.coreweave.com/mode";

/// Who asks: an organization and a user in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// Organization.
    pub org: String,
    /// User name.
    pub user: String,
}

/// Sandbox states, as the API names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxState {
    /// Accepted; no scheduler has looked at it yet.
    Creating,
    /// Waiting for placement; `state_reason` says what blocks it.
    Pending,
    /// Its Pod runs.
    Running,
    /// Being deleted.
    Terminating,
    /// Ended: deleted by its owner, or its main process exited 0.
    Completed,
    /// Ended in failure: rejected by the kubelet, or its main process exited non-zero.
    Failed,
    /// Ended by the platform: lifetime, Slurm cancel, preemption, time limit.
    Terminated,
}

impl SandboxState {
    /// Whether the sandbox has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, SandboxState::Completed | SandboxState::Failed | SandboxState::Terminated)
    }
}

/// Why a live sandbox is going away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TeardownCause {
    /// DeleteSandbox with the Pod's own grace period (the client's delete).
    OwnerDeleted,
    /// DeleteSandbox with a grace period of its own (the client's `stop(grace)`), in seconds.
    OwnerStopped(u64),
    /// `kubectl delete pod`.
    PodDeleted,
    /// The lifetime ran out.
    LifetimeExpired(i32),
}

/// Where a sandbox is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Life {
    Live,
    TearingDown(TeardownCause),
    Ended { state: SandboxState, reason: String, exit_code: Option<i32>, at: SimTime },
}

phases! {
    /// The phase of a sandbox's life, without what each phase carries.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum LifePhase {
        Live => "LIVE",
        TearingDown => "TEARING_DOWN",
        Ended => "ENDED",
    }
}

impl Life {
    pub(crate) fn phase(&self) -> LifePhase {
        match self {
            Life::Live => LifePhase::Live,
            Life::TearingDown(_) => LifePhase::TearingDown,
            Life::Ended { .. } => LifePhase::Ended,
        }
    }

    /// Moves to `to` by `transition` if the current phase allows it; otherwise changes nothing.
    pub(crate) fn transition(
        &mut self,
        transition: SandboxTransition,
        to: Life,
    ) -> Result<(), IllegalTransition<SandboxTransition>> {
        let phase = self.phase();
        transition.check_from(phase)?;
        if !transition.leads_to().contains(&to.phase()) {
            return Err(IllegalTransition { transition, state: phase.name() });
        }
        *self = to;
        Ok(())
    }
}

transitions! {
    machine "sandbox";
    /// Named sandbox transitions, counted for coverage.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SandboxTransition {
        /// Created.
        Create => "sandbox_create" from [] to [Live],
        /// Create replayed with the same request id.
        Replay => "sandbox_replay" from [] to [Live],
        /// Deletion requested.
        Delete => "sandbox_delete" from [Live] to [TearingDown],
        /// Its Pod was deleted directly (`kubectl delete pod`).
        PodDeleted => "sandbox_pod_deleted" from [Live] to [TearingDown],
        /// Lifetime expired.
        Expire => "sandbox_expire" from [Live] to [TearingDown],
        /// Pod gone: ended.
        End => "sandbox_end" from [Live, TearingDown] to [Ended],
        /// Main process exited or kubelet refused the Pod.
        Finish => "sandbox_finish" from [Live] to [Ended],
        /// Dropped after retention.
        Forget => "sandbox_forget" from [Ended] to [],
    }
    /// The phases this transition may start from (creation starts from no sandbox).
    pub(crate) fn allowed_from(self) -> &'static [LifePhase];
    /// The phase it leads to (none: it leaves the world).
    fn leads_to(self) -> &'static [LifePhase];
}

/// What never changes about a sandbox once created; shared by every view of it.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxInfo {
    /// Id (shared with its Pod, timers and indexes).
    pub id: SharedStr,
    /// Owner.
    pub owner: Owner,
    /// Display name.
    pub display_name: String,
    /// The spec as created, protobuf-encoded: compact while stored, decoded by [`Self::spec`].
    pub(crate) spec_bytes: Vec<u8>,
    /// The spec's tags, kept decoded for listing filters.
    pub tags: Vec<String>,
    /// The resolved spec (effective values).
    pub resolved: ResolvedSpec,
    /// `spec.network.deny_egress`: only what its egress rules allow leaves (nothing without
    /// rules: a network of its own with only loopback, where it has no other).
    pub deny_egress: bool,
    /// `spec.network.deny_ingress`: only what its ingress rules allow arrives.
    pub deny_ingress: bool,
    /// It has a network of its own on the host's bridge, its effective rules enforced.
    pub own_network: bool,
    /// Placed in the serverless pool (no runner) rather than on a runner.
    pub serverless: bool,
    /// Runner.
    pub runner_id: String,
    /// Runner group.
    pub runner_group_id: String,
    /// Namespace of its Pod.
    pub namespace: SharedStr,
    /// Its Pod's name.
    pub pod_name: SharedStr,
    /// Its Pod's uid.
    pub pod_uid: SharedStr,
    /// Creation time.
    pub created: SimTime,
    /// The request id it was created with (empty: none).
    pub request_id: String,
    /// The registered volumes (VolumeService) it mounts, by id.
    pub attached_volume_ids: Vec<String>,
    /// The template it was made from, and that template's revision then.
    pub source_template: Option<(String, i64)>,
    /// Its sized scratch volumes on disk (an `emptyDir` with `sizeLimit`), which the kubelet
    /// measures.
    pub scratch_limits: Vec<ScratchLimit>,
    /// Its memory-backed scratch volumes, each with its `sizeLimit` in bytes where it has one.
    pub memory_volumes: Vec<(String, Option<u64>)>,
    /// How its containers start in order, and the names they resolve (a Compose file's).
    pub start_plan: crate::k8s::StartPlan,
    /// What a replay of `request_id` is compared with, for a sandbox not made from a spec alone
    /// (a template's or a file's request, encoded without its request id); `None`: the spec and
    /// the display name.
    pub(crate) request_body: Option<Vec<u8>>,
}

impl SandboxInfo {
    /// The spec as created.
    pub fn spec(&self) -> SandboxSpec {
        // The bytes are our own encoding of a valid message, so decoding cannot fail.
        SandboxSpec::decode(self.spec_bytes.as_slice()).unwrap_or_default()
    }
}

/// A stored sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Sandbox {
    pub(crate) info: Arc<SandboxInfo>,
    /// Its lifetime timer, cancelled when the sandbox is forgotten.
    pub(crate) lifetime_timer: Option<TimerKey>,
    pub(crate) job_id: Option<JobId>,
    pub(crate) started: Option<SimTime>,
    pub(crate) life: Life,
    /// Where the host forwards each of its services' ports: (port in the sandbox, host address).
    pub(crate) published: Vec<(i32, String)>,
    /// The credential its share-token HTTPS endpoints ask callers for, made by the host with the
    /// endpoints' listeners.
    pub(crate) endpoint_share_token: Option<Arc<str>>,
    /// Containers whose command ended while the sandbox ran on: (name, exit code).
    pub(crate) ended_containers: Vec<(String, i32)>,
}

impl std::ops::Deref for Sandbox {
    type Target = SandboxInfo;
    fn deref(&self) -> &SandboxInfo {
        &self.info
    }
}

/// All sandboxes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sandboxes {
    /// By id; unordered (listings sort by creation time and id).
    by_id: HashMap<SharedStr, Sandbox, IdHash>,
    /// Organization → request id → sandbox: two levels, so a lookup needs no owned key.
    by_request: HashMap<String, HashMap<String, SharedStr>>,
    /// Prepared policies by organization and runner, with the etag they were prepared at.
    policies: HashMap<String, HashMap<String, (String, Arc<PreparedPolicy>)>>,
    /// Organization → user → the user's namespace name, made once and shared by the user's
    /// sandboxes and Pods. Cleared when values change (the prefix may have).
    namespaces: HashMap<String, HashMap<String, SharedStr>>,
    /// The runtime defaults parsed from the values in force; cleared when values change.
    defaults: Option<RuntimeDefaults>,
    /// Sandboxes changed, added or dropped since the world last took the list.
    touched: Touched<SharedStr>,
}

impl Sandboxes {
    /// Drops an organization's prepared policies (its runners are gone).
    pub(crate) fn forget_policies(&mut self, org: &str) {
        self.policies.remove(org);
    }

    /// Drops what was made from the values in force: the namespace prefix and the runtime
    /// defaults may have changed.
    pub(crate) fn forget_values(&mut self) {
        self.namespaces.clear();
        self.defaults = None;
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Sandbox> {
        self.by_id.get(id)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Sandbox> {
        let sandbox = self.by_id.get_mut(id)?;
        self.touched.note(sandbox.id.clone());
        Some(sandbox)
    }

    /// The sandboxes changed, added or dropped since the last call.
    pub(crate) fn take_touched(&mut self, into: &mut Vec<SharedStr>) {
        self.touched.take_into(into);
    }

    /// Forgets which were touched (nobody keeps copies).
    pub(crate) fn forget_touched(&mut self) {
        self.touched.forget();
    }

    /// Every sandbox on record, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Sandbox> {
        self.by_id.values()
    }

    /// Stores a new sandbox, and the request id it was created with (if any) for replays.
    pub(crate) fn insert(&mut self, sandbox: Sandbox) {
        if !sandbox.request_id.is_empty() {
            let org = &sandbox.owner.org;
            let requests = match self.by_request.get_mut(org) {
                Some(requests) => requests,
                None => self.by_request.entry(org.clone()).or_default(),
            };
            requests.insert(sandbox.request_id.clone(), sandbox.id.clone());
        }
        self.touched.note(sandbox.id.clone());
        self.by_id.insert(sandbox.id.clone(), sandbox);
    }

    /// Drops a sandbox and its request id.
    pub(crate) fn remove(&mut self, id: &str) {
        let Some(sandbox) = self.by_id.remove(id) else { return };
        self.touched.note(sandbox.id.clone());
        if let Some(requests) = self.by_request.get_mut(&sandbox.owner.org) {
            requests.remove(&sandbox.request_id);
        }
    }

    /// The sandbox an organization's request id created, while it is on record.
    pub(crate) fn created_by_request(&self, org: &str, request_id: &str) -> Option<&SharedStr> {
        self.by_request.get(org).and_then(|requests| requests.get(request_id))
    }

    /// The namespace of a user's sandboxes (made if missing): `<prefix><user>`, or
    /// `<prefix><user>-<org>` when another organization's user of the same name has the first
    /// (organizations never share a namespace).
    pub(crate) fn user_namespace(&mut self, prefix: &str, org: &str, user: &str) -> SharedStr {
        if let Some(namespace) = self.namespaces.get(org).and_then(|users| users.get(user)) {
            return namespace.clone();
        }
        let taken =
            |name: &str| self.namespaces.values().flat_map(|users| users.values()).any(|taken| &**taken == name);
        let plain = format!("{prefix}{}", dns_label(user));
        let name = if taken(&plain) {
            let mut qualified = format!("{prefix}{}-{}", dns_label(user), dns_label(org));
            qualified.truncate(63);
            qualified.trim_end_matches('-').to_owned()
        } else {
            plain
        };
        let namespace = SharedStr::from(name);
        self.namespaces.entry(org.to_owned()).or_default().insert(user.to_owned(), namespace.clone());
        namespace
    }

    /// The runner's policy, validated and parsed once per policy revision (its etag); no runner,
    /// no policy.
    pub(crate) fn prepared_policy(
        &mut self,
        org: &str,
        runner_id: &str,
        runner: Option<&ManagedRunner>,
    ) -> Arc<PreparedPolicy> {
        let Some(runner) = runner else {
            return Arc::new(PreparedPolicy::new(None));
        };
        if let Some((etag, prepared)) = self.policies.get(org).and_then(|runners| runners.get(runner_id))
            && *etag == runner.etag
        {
            return Arc::clone(prepared);
        }
        let prepared = Arc::new(PreparedPolicy::new(runner.policy.as_ref()));
        let etag = runner.etag.clone();
        self.policies.entry(org.to_owned()).or_default().insert(runner_id.to_owned(), (etag, Arc::clone(&prepared)));
        prepared
    }

    /// The runtime defaults, parsed once per values revision.
    pub(crate) fn runtime_defaults(&mut self, values: &SandboxValues) -> SimResult<RuntimeDefaults> {
        if let Some(defaults) = &self.defaults {
            return Ok(defaults.clone());
        }
        let defaults = RuntimeDefaults {
            cpu_request: Quantity::parse(&values.default_cpu)
                .map_err(|error| SimError::invalid_field("sandboxes.defaultCpu", error.to_string()))?,
            memory_request: Quantity::parse(&values.default_memory)
                .map_err(|error| SimError::invalid_field("sandboxes.defaultMemory", error.to_string()))?,
            lifetime_seconds: values.default_lifetime_seconds,
        };
        self.defaults = Some(defaults.clone());
        Ok(defaults)
    }

    /// How many of the organization's sandboxes that have not ended mount registered volume
    /// `volume_id`.
    pub(crate) fn mounting(&self, org: &str, volume_id: &str) -> usize {
        self.by_id
            .values()
            .filter(|sandbox| sandbox.owner.org == org && !matches!(sandbox.life, Life::Ended { .. }))
            .filter(|sandbox| sandbox.info.attached_volume_ids.iter().any(|attached| attached == volume_id))
            .count()
    }

    /// Every sandbox on record, by its Pod's uid.
    pub(crate) fn by_pod_uid(&self) -> HashMap<&str, &SandboxInfo> {
        self.by_id.values().map(|sandbox| (sandbox.info.pod_uid.as_str(), &*sandbox.info)).collect()
    }

    /// The organization owning sandbox `id`, while it is on record.
    pub(crate) fn organization_of(&self, id: &str) -> Option<&str> {
        self.by_id.get(id).map(|sandbox| sandbox.owner.org.as_str())
    }

    /// An organization's sandboxes on record, in no particular order.
    pub(crate) fn of_organization<'s, 'o>(
        &'s self,
        org: &'o str,
    ) -> impl Iterator<Item = &'s SandboxInfo> + use<'s, 'o> {
        self.by_id.values().filter(move |sandbox| sandbox.owner.org == org).map(|sandbox| &*sandbox.info)
    }

    /// The Kubernetes RuntimeClass a sandbox's Pod runs with (`None`: the node's default).
    pub(crate) fn runtime_class(&self, id: &str) -> Option<&str> {
        self.by_id.get(id).and_then(|sandbox| sandbox.info.resolved.runtime_class.as_deref())
    }

    /// A sandbox's memory-backed scratch volumes, each with its `sizeLimit` where it has one.
    pub(crate) fn memory_volumes(&self, id: &str) -> &[(String, Option<u64>)] {
        self.by_id.get(id).map_or(&[], |sandbox| sandbox.info.memory_volumes.as_slice())
    }

    /// How a sandbox's containers start in order, and the names they resolve.
    pub(crate) fn start_plan(&self, id: &str) -> Option<&crate::k8s::StartPlan> {
        self.by_id.get(id).map(|sandbox| &sandbox.info.start_plan)
    }

    /// Which of a sandbox's containers is its primary one (index in spec order).
    pub(crate) fn primary_container(&self, id: &str) -> Option<usize> {
        let sandbox = self.by_id.get(id)?;
        sandbox.info.resolved.containers.iter().position(|container| container.primary)
    }

    /// The organization and runner of a sandbox, without building its view.
    pub(crate) fn placement(&self, id: &str) -> Option<(&str, &str)> {
        self.by_id.get(id).map(|sandbox| (sandbox.owner.org.as_str(), sandbox.info.runner_id.as_str()))
    }
}

/// What a reader sees of a sandbox: the shared, unchanging [`SandboxInfo`] (reachable
/// directly, `view.id`, through `Deref`) and the state at the time of reading.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxView {
    /// The unchanging part, shared (reading a sandbox copies none of it).
    pub info: Arc<SandboxInfo>,
    /// State.
    pub state: SandboxState,
    /// Why (for PENDING and terminal states).
    pub state_reason: String,
    /// Exit code of the main process, when it exited by itself.
    pub exit_code: Option<i32>,
    /// When it started running.
    pub started: Option<SimTime>,
    /// When it ended.
    pub ended: Option<SimTime>,
    /// Its placeholder job, if SUNK placed it.
    pub job_id: Option<JobId>,
    /// The Node it runs on.
    pub node_name: Option<SharedStr>,
    /// Where the host serves its services' ports: (port in the sandbox, host `address:port`).
    pub published: Vec<(i32, String)>,
    /// The share token of its share-token HTTPS endpoints: a secret, which only the create's
    /// answer (and a replay of that create) carries, never a Get or a List.
    pub endpoint_share_token: Option<Arc<str>>,
    /// Containers whose command ended while the sandbox went on (sidecars): (name, exit code).
    pub ended_containers: Vec<(String, i32)>,
}

/// What reading a sandbox that is not on record, or not the caller's organization's, answers.
pub fn sandbox_not_found(id: &str) -> SimError {
    SimError::NotFound { reason: Reason::SandboxNotFound, message: format!("sandbox {id:?} not found") }
}

impl SandboxView {
    /// Which of its containers is the main one (index in spec order): the one marked primary,
    /// else the first; none when it has no containers.
    pub fn main_container_index(&self) -> Option<usize> {
        let containers = &self.resolved.containers;
        containers.iter().position(|container| container.primary).or_else(|| (!containers.is_empty()).then_some(0))
    }

    /// The sandbox as CreateSandbox answers it: one still waiting for its place, its prolog or
    /// its images reads CREATING, the API's first state, with the reason kept; the Gets that
    /// follow show PENDING. The cloud answers a create so (docs/facts/client-contract.md#states), and
    /// the published client relies on it: it keeps a TLS_PASSTHROUGH service's address only from
    /// a CREATING or RUNNING answer and clears it on any other.
    pub fn as_create_answer(mut self) -> SandboxView {
        if self.state == SandboxState::Pending {
            self.state = SandboxState::Creating;
        }
        self
    }

    /// Whether its Pod may be waiting on its host
    /// ([`World::awaits_host`](crate::world::World::awaits_host)): only a sandbox not yet RUNNING
    /// whose Pod exists can be, so readers of a running or ended one skip the query.
    pub fn may_await_host(&self) -> bool {
        !self.pod_uid.is_empty() && matches!(self.state, SandboxState::Creating | SandboxState::Pending)
    }

    /// Whether its Pod may be waiting on its host to end its processes
    /// ([`World::awaits_host`](crate::world::World::awaits_host) says `Stop`): only a
    /// TERMINATING sandbox's can be.
    pub fn may_await_stop(&self) -> bool {
        !self.pod_uid.is_empty() && self.state == SandboxState::Terminating
    }
}

impl std::ops::Deref for SandboxView {
    type Target = SandboxInfo;
    fn deref(&self) -> &SandboxInfo {
        &self.info
    }
}

/// Filters of a sandbox listing.
#[derive(Debug, Clone, Default)]
pub struct SandboxFilter {
    /// Sandboxes carrying every one of these tags.
    pub tags: Vec<String>,
    /// Only this state.
    pub state: Option<SandboxState>,
    /// Only these runners (any).
    pub runner_ids: Vec<String>,
    /// Include ended sandboxes.
    pub show_terminated: bool,
    /// Newest first.
    pub descending: bool,
    /// Only sandboxes mounting one of these registered volumes (any).
    pub volume_ids: Vec<String>,
}

impl SandboxFilter {
    /// What a page token must have been issued for: the same filters, in the same order.
    pub(crate) fn fingerprint(&self) -> Vec<String> {
        let mut parts = vec![
            self.tags.join("\u{0}"),
            self.state.map(|state| format!("{state:?}")).unwrap_or_default(),
            self.runner_ids.join("\u{0}"),
        ];
        parts.push(if self.show_terminated { "all" } else { "live" }.to_owned());
        parts.push(if self.descending { "desc" } else { "asc" }.to_owned());
        parts.push(self.volume_ids.join("\u{0}"));
        parts
    }
}

/// Why a container's mounted file cannot be where it is among the container's volume mounts: a
/// volume is mounted at its path, or it is under a registered volume's mount path. Under a scratch
/// volume's it is placed on the volume (as Kubernetes places a subPath file over an emptyDir);
/// under a claim's it is refused: other sandboxes write to a claim while this one starts, so its
/// mount point could be swapped for a link between its check and the bind.
fn file_over_volume_problem(spec: &SandboxSpec, container: &Container, path: &str) -> Option<String> {
    use cwsandbox_api::sandbox_v1::sandbox_volume::Source;
    let parts = |path: &str| path.split('/').filter(|part| !part.is_empty()).map(str::to_owned).collect::<Vec<_>>();
    let file = parts(path);
    container.volume_mounts.iter().enumerate().find_map(|(mount_index, mount)| {
        let at = parts(&mount.mount_path);
        if at == file {
            return Some(format!("volumeMounts[{mount_index}] mounts volume {:?} at this path", mount.volume));
        }
        let registered = spec
            .volumes
            .iter()
            .any(|volume| volume.name == mount.volume && matches!(volume.source, Some(Source::VolumeId(_))));
        (registered && file.starts_with(&at)).then(|| {
            format!(
                "under volumeMounts[{mount_index}].mountPath {}, a registered volume's (its claim's data): other sandboxes write to the claim, so a file is not placed on it; mount the file elsewhere",
                mount.mount_path
            )
        })
    })
}

/// Checks the fields a sandbox must have before anything else.
/// The spec as the sandbox keeps it (and a replayed request is compared with): a lone unnamed
/// container is called `main`; `runner_ids` go with CKS placement only.
pub(crate) fn normalize_spec(spec: SandboxSpec) -> SimResult<SandboxSpec> {
    let spec = normalize_lone_container(spec);
    if !spec.runner_ids.is_empty() && spec.mode == SandboxMode::Serverless as i32 {
        return Err(SimError::invalid_field("sandbox.spec.mode", "runner_ids need placement mode CKS, not SERVERLESS"));
    }
    Ok(spec)
}

/// A lone unnamed container is called `main`.
pub(crate) fn normalize_lone_container(mut spec: SandboxSpec) -> SandboxSpec {
    if spec.containers.len() == 1 && spec.containers[0].name.trim().is_empty() {
        spec.containers[0].name = "main".to_owned();
    }
    spec
}

pub(crate) fn validate_spec(spec: &SandboxSpec) -> SimResult<()> {
    let violations = spec_violations(spec, true);
    if violations.is_empty() { Ok(()) } else { Err(SimError::invalid(Reason::InvalidRequest, violations)) }
}

/// What is wrong with a spec on its own, its fields named as CreateSandbox's (`sandbox.spec.…`);
/// a template's spec may leave out the containers (`require_containers` false).
pub(crate) fn spec_violations(spec: &SandboxSpec, require_containers: bool) -> Vec<FieldViolation> {
    let mut violations = Vec::new();
    if require_containers && spec.containers.is_empty() {
        violations.push(FieldViolation::new("sandbox.spec.containers", "at least one container is required"));
    }
    for (index, container) in spec.containers.iter().enumerate() {
        if container.image.trim().is_empty() {
            violations.push(FieldViolation::new(format!("sandbox.spec.containers[{index}].image"), "required"));
        }
        if container.name.trim().is_empty() {
            violations.push(FieldViolation::new(format!("sandbox.spec.containers[{index}].name"), "required"));
        }
        for (file_index, file) in container.files.iter().enumerate() {
            let at = format!("sandbox.spec.containers[{index}].files[{file_index}].path");
            if let Some(problem) = mounted_file_problem(&file.path) {
                violations.push(FieldViolation::new(at, problem));
            } else if let Some(problem) = file_over_volume_problem(spec, container, &file.path) {
                violations.push(FieldViolation::new(at, problem));
            }
        }
        for (mount_index, mount) in container.volume_mounts.iter().enumerate() {
            let at = format!("sandbox.spec.containers[{index}].volumeMounts[{mount_index}]");
            if !spec.volumes.iter().any(|volume| volume.name == mount.volume) {
                violations.push(FieldViolation::new(
                    format!("{at}.volume"),
                    format!("no volume named {:?} in sandbox.spec.volumes", mount.volume),
                ));
            }
            if let Some(problem) = mounted_file_problem(&mount.mount_path) {
                violations.push(FieldViolation::new(format!("{at}.mountPath"), problem));
            }
            if mount.sub_path.starts_with('/')
                || mount.sub_path.contains('\0')
                || mount.sub_path.split('/').any(|part| part == "..")
            {
                violations.push(FieldViolation::new(
                    format!("{at}.subPath"),
                    "must be a relative path inside the volume, without '..' components",
                ));
            }
        }
    }
    for (index, volume) in spec.volumes.iter().enumerate() {
        let name_problem =
            if volume.name.is_empty() { Some("required") } else { crate::runners::check_dns_label(&volume.name).err() };
        if let Some(problem) = name_problem {
            violations.push(FieldViolation::new(
                format!("sandbox.spec.volumes[{index}].name"),
                format!("{problem}: a volume's name is a DNS label (lowercase letters, digits and '-')"),
            ));
        } else if spec.volumes[..index].iter().any(|earlier| earlier.name == volume.name) {
            violations.push(FieldViolation::new(
                format!("sandbox.spec.volumes[{index}].name"),
                format!("two volumes are named {:?}", volume.name),
            ));
        }
        let mounted = || {
            spec.containers
                .iter()
                .any(|container| container.volume_mounts.iter().any(|mount| mount.volume == volume.name))
        };
        if restore_source(volume).is_some() && !mounted() {
            violations.push(FieldViolation::new(
                format!("sandbox.spec.volumes[{index}].scratch.restoreFromSnapshotId"),
                "no container mounts this volume, so nothing would see the restored files: mount it (volumeMounts) or leave it out",
            ));
        }
    }
    if spec.max_lifetime_seconds < 0 || spec.max_lifetime_seconds > MAX_LIFETIME_SECONDS {
        violations.push(FieldViolation::new(
            "sandbox.spec.maxLifetimeSeconds",
            format!("must be between 0 (default) and {MAX_LIFETIME_SECONDS} seconds"),
        ));
    }
    violations
}

/// Each container's secrets, read from the organization's secret stores (`stores`: each store it
/// has, with the secrets the values give it), and mounted files, in spec order; `None` for a
/// container with neither. A reference to a store, secret or field the stores do not have
/// refuses the sandbox.
pub(crate) fn container_inputs(
    spec: &SandboxSpec,
    stores: &std::collections::BTreeMap<String, crate::config::SecretStoreValues>,
    claims: &HashMap<String, RegisteredVolume>,
) -> SimResult<Vec<Option<Box<ContainerInputs>>>> {
    let mut all = Vec::with_capacity(spec.containers.len());
    for (index, container) in spec.containers.iter().enumerate() {
        let run_as = container
            .security_context
            .as_ref()
            .map_or((None, None), |context| (context.run_as_user, context.run_as_group));
        let startup_probe = container.startup_probe.as_ref().and_then(crate::k8s::ProbeStart::from_api);
        if container.secret_stores.is_empty()
            && container.image_pull_credentials.is_none()
            && container.files.is_empty()
            && container.volume_mounts.is_empty()
            && run_as == (None, None)
            && startup_probe.is_none()
        {
            all.push(None);
            continue;
        }
        let mut inputs = ContainerInputs { run_as, startup_probe, ..ContainerInputs::default() };
        for (store_index, reference) in container.secret_stores.iter().enumerate() {
            let at = format!("sandbox.spec.containers[{index}].secretStores[{store_index}]");
            let store = stored_secrets(stores, &reference.store_name, &at)?;
            for (mapping_index, mapping) in reference.secrets.iter().enumerate() {
                let at = format!("{at}.secrets[{mapping_index}]");
                if mapping.env_var.is_empty() || mapping.env_var.contains('=') || mapping.env_var.contains('\0') {
                    return Err(SimError::invalid_field(
                        format!("{at}.envVar"),
                        "required: the name of an environment variable",
                    ));
                }
                let value = match secret_of(store, &reference.store_name, &mapping.path, &mapping.field, &at)? {
                    Picked::Value(value) => value.to_owned(),
                    Picked::Fields(fields) => {
                        return Err(SimError::invalid_field(
                            format!("{at}.field"),
                            format!(
                                "secret {:?} has fields ({}): name one",
                                mapping.path,
                                fields.keys().cloned().collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    }
                };
                inputs.secret_env.insert(mapping.env_var.clone(), value);
            }
        }
        if let Some(pull) = &container.image_pull_credentials {
            inputs.pull_secret = Some(pull_secret(index, &container.image, pull, stores)?);
        }
        inputs.files = container
            .files
            .iter()
            .map(|file| (file.path.clone(), std::sync::Arc::from(file.content.as_slice())))
            .collect();
        inputs.volume_mounts = container
            .volume_mounts
            .iter()
            .map(|mount| crate::k8s::VolumeMountStart {
                volume: mount.volume.clone(),
                path: mount.mount_path.clone(),
                read_only: mount.read_only || claims.get(&mount.volume).is_some_and(|volume| volume.read_only),
                sub_path: mount.sub_path.trim_matches('/').to_owned(),
                claim: claims.get(&mount.volume).map(|volume| crate::k8s::ClaimMount {
                    org: volume.org.clone(),
                    cluster_id: volume.cluster_id.clone(),
                    namespace: volume.source.namespace.clone(),
                    name: volume.source.claim_name.clone(),
                }),
                restore_from_snapshot: spec
                    .volumes
                    .iter()
                    .find(|volume| volume.name == mount.volume)
                    .and_then(restore_source)
                    .map(str::to_owned),
            })
            .collect();
        all.push(Some(Box::new(inputs)));
    }
    Ok(all)
}

/// What a secret reference picks from a secret: one value (the secret as a whole, or the field
/// named), or the fields of a secret that has them when none is named (the caller decides).
enum Picked<'a> {
    Value(&'a str),
    Fields(&'a std::collections::BTreeMap<String, String>),
}

fn secret_not_found(field: String, what: String) -> SimError {
    SimError::NotFound { reason: Reason::SecretNotFound, message: format!("{field}: {what}") }
}

/// The store a reference at `at` names (`{at}.storeName` in the error when the organization has
/// no such store).
fn stored_secrets<'a>(
    stores: &'a std::collections::BTreeMap<String, crate::config::SecretStoreValues>,
    store_name: &str,
    at: &str,
) -> SimResult<&'a crate::config::SecretStoreValues> {
    stores.get(store_name).ok_or_else(|| {
        secret_not_found(
            format!("{at}.storeName"),
            format!(
                "no secret store {store_name:?} in this organization (SettingsService ListSecretStores names them)"
            ),
        )
    })
}

/// The secret `path` of a store, and its `field` if one is named (`{at}.path`, `{at}.field` in the
/// errors).
fn secret_of<'a>(
    store: &'a crate::config::SecretStoreValues,
    store_name: &str,
    path: &str,
    field: &str,
    at: &str,
) -> SimResult<Picked<'a>> {
    use crate::config::SecretValue;
    let secret = store.secrets.get(path).ok_or_else(|| {
        secret_not_found(
            format!("{at}.path"),
            format!("store {store_name:?} has no secret {path:?} (a store's secrets are the values' secretStores.{store_name}.secrets)"),
        )
    })?;
    match (secret, field) {
        (SecretValue::Whole(value), "") => Ok(Picked::Value(value)),
        (SecretValue::Whole(_), field) => Err(secret_not_found(
            format!("{at}.field"),
            format!("secret {path:?} is one value, without a field {field:?}"),
        )),
        (SecretValue::Fields(fields), "") => Ok(Picked::Fields(fields)),
        (SecretValue::Fields(fields), field) => fields
            .get(field)
            .map(|value| Picked::Value(value))
            .ok_or_else(|| secret_not_found(format!("{at}.field"), format!("secret {path:?} has no field {field:?}"))),
    }
}

/// The registry secret a container's `image_pull_credentials` names: a secret of the
/// organization's store with the fields `username` and `password`, or a Docker `config.json`
/// (the whole secret, or the field named). The registry must be the image's: credentials for
/// another registry would never be used.
fn pull_secret(
    index: usize,
    image: &str,
    pull: &cwsandbox_api::sandbox_v1::ImagePullCredentials,
    stores: &std::collections::BTreeMap<String, crate::config::SecretStoreValues>,
) -> SimResult<crate::k8s::ImagePullSecret> {
    use crate::k8s::{ImagePullSecret, PullSecret, registry_of_image, same_registry};
    let at = format!("sandbox.spec.containers[{index}].imagePullCredentials");
    let registry = pull.registry.trim();
    if registry.is_empty() {
        return Err(SimError::invalid_field(format!("{at}.registry"), "required: the registry host of the image"));
    }
    let image_registry = registry_of_image(image);
    if !same_registry(registry, image_registry) {
        return Err(SimError::invalid_field(
            format!("{at}.registry"),
            format!(
                "{registry:?} is not the registry of image {image:?} ({image_registry}): the credentials would never be used"
            ),
        ));
    }
    let source =
        pull.credentials.as_ref().ok_or_else(|| SimError::invalid_field(format!("{at}.credentials"), "required"))?;
    let at = format!("{at}.credentials");
    let store = stored_secrets(stores, &source.store_name, &at)?;
    let secret = match secret_of(store, &source.store_name, &source.path, &source.field, &at)? {
        Picked::Value(json) => PullSecret::DockerConfigJson(json.to_owned()),
        Picked::Fields(fields) => match (fields.get("username"), fields.get("password")) {
            (Some(username), Some(password)) => {
                PullSecret::Basic { username: username.clone(), password: password.clone() }
            }
            _ => {
                return Err(SimError::invalid_field(
                    format!("{at}.field"),
                    format!(
                        "secret {:?} has fields ({}) but not username and password: name the field that holds a docker config.json",
                        source.path,
                        fields.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        },
    };
    if let PullSecret::DockerConfigJson(json) = &secret {
        let auths = serde_json::from_str::<serde_json::Value>(json).ok().and_then(|config| {
            config.get("auths").and_then(serde_json::Value::as_object).map(|auths| !auths.is_empty())
        });
        if auths != Some(true) {
            return Err(SimError::invalid_field(
                format!("{at}.path"),
                format!(
                    "secret {:?} is not a docker config.json with `auths` (nor a secret with username and password fields)",
                    source.path
                ),
            ));
        }
    }
    Ok(ImagePullSecret { registry: registry.to_owned(), secret })
}

/// The services whose ports the host can forward: TCP ports, each once, plain, with an HTTPS
/// endpoint (TLS terminated by the host, `auth` OPEN or SHARE_TOKEN, a request timeout of 0 or
/// 15 to 900 seconds) or a TLS_PASSTHROUGH one (neither auth nor timeout). An endpoint is a
/// PUBLIC service's (the published client's `Endpoint`: "Product endpoint on a PUBLIC service").
/// UDP and SCTP are refused by name.
pub(crate) fn check_services(spec: &SandboxSpec) -> SimResult<()> {
    use cwsandbox_api::sandbox_v1::{EndpointAuth, EndpointKind, ServiceProtocol, Visibility};
    let mut invalid = Vec::new();
    let mut unimplemented = Vec::new();
    for (index, service) in spec.services.iter().enumerate() {
        let at = format!("sandbox.spec.services[{index}]");
        if !(1..=65_535).contains(&service.port) {
            invalid.push(FieldViolation::new(format!("{at}.port"), "must be between 1 and 65535"));
        } else if spec.services[..index].iter().any(|earlier| earlier.port == service.port) {
            invalid.push(FieldViolation::new(format!("{at}.port"), format!("port {} is listed twice", service.port)));
        }
        match ServiceProtocol::try_from(service.protocol) {
            Ok(ServiceProtocol::Unspecified | ServiceProtocol::Tcp) => {}
            _ => unimplemented.push(FieldViolation::new(
                format!("{at}.protocol"),
                "not emulated: only TCP ports are forwarded to the host",
            )),
        }
        let Some(endpoint) = &service.endpoint else { continue };
        let auth = EndpointAuth::try_from(endpoint.auth).unwrap_or(EndpointAuth::Unspecified);
        let timeout = endpoint.request_timeout_seconds;
        match EndpointKind::try_from(endpoint.kind) {
            Ok(EndpointKind::Https) => {
                if auth == EndpointAuth::Unspecified {
                    invalid.push(FieldViolation::new(
                        format!("{at}.endpoint.auth"),
                        "required for an HTTPS endpoint: OPEN or SHARE_TOKEN",
                    ));
                }
                if timeout != 0 && !ENDPOINT_REQUEST_TIMEOUT_SECONDS.contains(&timeout) {
                    invalid.push(FieldViolation::new(
                        format!("{at}.endpoint.request_timeout_seconds"),
                        format!("{timeout} is out of range: 0 (the default, 15) or 15 to 900 seconds"),
                    ));
                }
            }
            Ok(EndpointKind::TlsPassthrough) => {
                if auth != EndpointAuth::Unspecified {
                    invalid.push(FieldViolation::new(
                        format!("{at}.endpoint.auth"),
                        "must be unset for a TLS_PASSTHROUGH endpoint (the workload owns its TLS)",
                    ));
                }
                if timeout != 0 {
                    invalid.push(FieldViolation::new(
                        format!("{at}.endpoint.request_timeout_seconds"),
                        "must be unset for a TLS_PASSTHROUGH endpoint (no request is seen to be timed)",
                    ));
                }
            }
            _ => invalid.push(FieldViolation::new(format!("{at}.endpoint.kind"), "required when an endpoint is set")),
        }
        if service.visibility != Visibility::Public as i32 {
            invalid.push(FieldViolation::new(
                format!("{at}.visibility"),
                "an endpoint is a PUBLIC service's: set visibility PUBLIC, or drop the endpoint",
            ));
        }
    }
    if let Some(violation) = mixed_visibilities(spec) {
        unimplemented.push(violation);
    }
    if !invalid.is_empty() {
        return Err(SimError::invalid(Reason::InvalidRequest, invalid));
    }
    if !unimplemented.is_empty() {
        let message = unimplemented
            .iter()
            .map(|violation| format!("{}: {}", violation.field, violation.description))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(SimError::Unimplemented { message, violations: unimplemented });
    }
    Ok(())
}

/// The request timeouts an HTTPS endpoint may ask for, in seconds (0: the default).
pub const ENDPOINT_REQUEST_TIMEOUT_SECONDS: std::ops::RangeInclusive<i32> = 15..=900;

/// An HTTPS endpoint's request timeout when it asks for none (the published client: "15 when
/// create omitted or sent 0").
pub const DEFAULT_ENDPOINT_REQUEST_TIMEOUT_SECONDS: i32 = 15;

/// The first service whose visibility mixes PUBLIC with PRIVATE on one sandbox (an unset one
/// reads PRIVATE), which the v1 service refuses as not implemented (the published client's suite:
/// `test_sandbox_rejects_mixed_public_private_services`, `CWSANDBOX_NOT_IMPLEMENTED`).
fn mixed_visibilities(spec: &SandboxSpec) -> Option<FieldViolation> {
    use cwsandbox_api::sandbox_v1::Visibility;
    let read = |visibility: i32| match Visibility::try_from(visibility) {
        Ok(Visibility::Unspecified) => Some(Visibility::Private),
        Ok(visibility @ (Visibility::Public | Visibility::Private)) => Some(visibility),
        _ => None,
    };
    let (first_index, first) =
        spec.services.iter().enumerate().find_map(|(index, service)| Some((index, read(service.visibility)?)))?;
    let (index, other) = spec.services.iter().enumerate().find_map(|(index, service)| {
        read(service.visibility).filter(|read| *read != first).map(|read| (index, read))
    })?;
    let name = |visibility: Visibility| visibility.as_str_name().trim_start_matches("VISIBILITY_").to_owned();
    Some(FieldViolation::new(
        format!("sandbox.spec.services[{index}].visibility"),
        format!(
            "one sandbox's services are all PUBLIC or all PRIVATE (an unset visibility reads PRIVATE): services[{first_index}] is {} and services[{index}] {}; mixing them is not implemented in v1",
            name(first),
            name(other)
        ),
    ))
}

/// A scratch volume with a size: the `sizeLimit` of its `emptyDir`. On disk (the medium unset or
/// DISK) the size is not a file system's: as on a Kubernetes node, the kubelet measures what the
/// volume holds and evicts the Pod once it holds more (`World::volumes_measured`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScratchLimit {
    /// The volume's name.
    pub volume: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its size as the spec gave it (`1Gi`), for the eviction's message.
    pub shown: String,
}

/// The sized scratch volumes of a spec whose sizes parse (a size that does not parse was refused
/// when the spec was resolved); a size of zero is no limit, as for Kubernetes.
pub(crate) fn scratch_limits(spec: &SandboxSpec) -> Vec<ScratchLimit> {
    use cwsandbox_api::sandbox_v1::sandbox_volume::Source;
    spec.volumes
        .iter()
        .filter_map(|volume| match &volume.source {
            // A memory-backed volume's size is its tmpfs's, which no write goes past.
            Some(Source::Scratch(scratch))
                if !scratch.size.trim().is_empty()
                    && scratch.medium != cwsandbox_api::sandbox_v1::StorageMedium::Memory as i32 =>
            {
                scratch_size_bytes(scratch).map(|bytes| ScratchLimit {
                    volume: volume.name.clone(),
                    bytes,
                    shown: scratch.size.trim().to_owned(),
                })
            }
            _ => None,
        })
        .collect()
}

/// A scratch volume's size in bytes, where it has one that parses (zero is no size, as for
/// Kubernetes).
fn scratch_size_bytes(scratch: &cwsandbox_api::sandbox_v1::ScratchVolume) -> Option<u64> {
    let bytes = u64::try_from(Quantity::parse(&scratch.size).ok()?.units_ceil()).ok()?;
    (bytes > 0).then_some(bytes)
}

/// Checks each scratch volume's medium: a memory-backed one (MEMORY: a tmpfs of the volume's
/// own) is refused by name where the host cannot make one (`refusal` says why); an unknown
/// medium is invalid.
pub(crate) fn check_scratch_media(spec: &SandboxSpec, refusal: Option<&str>) -> SimResult<()> {
    use cwsandbox_api::sandbox_v1::StorageMedium;
    use cwsandbox_api::sandbox_v1::sandbox_volume::Source;
    let mut refused = Vec::new();
    for (index, volume) in spec.volumes.iter().enumerate() {
        let Some(Source::Scratch(scratch)) = &volume.source else { continue };
        let field = format!("sandbox.spec.volumes[{index}].scratch.medium");
        match StorageMedium::try_from(scratch.medium) {
            Ok(StorageMedium::Unspecified | StorageMedium::Disk) => {}
            Ok(StorageMedium::Memory) => {
                if let Some(why) = refusal {
                    refused.push(FieldViolation::new(
                        field,
                        format!("not emulated here: a memory-backed scratch volume is a tmpfs of its own, which this host cannot make ({why}); DISK or unset is a directory on the host's disk"),
                    ));
                }
            }
            Err(_) => return Err(SimError::invalid_field(field, format!("unknown storage medium {}", scratch.medium))),
        }
    }
    if refused.is_empty() { Ok(()) } else { Err(SimError::not_emulated(refused)) }
}

/// The memory-backed scratch volumes of a spec (medium MEMORY), each with its `sizeLimit` in
/// bytes where it has one that parses (zero or unset: none).
pub(crate) fn memory_volumes(spec: &SandboxSpec) -> Vec<(String, Option<u64>)> {
    use cwsandbox_api::sandbox_v1::StorageMedium;
    use cwsandbox_api::sandbox_v1::sandbox_volume::Source;
    spec.volumes
        .iter()
        .filter_map(|volume| match &volume.source {
            Some(Source::Scratch(scratch)) if scratch.medium == StorageMedium::Memory as i32 => {
                Some((volume.name.clone(), scratch_size_bytes(scratch)))
            }
            _ => None,
        })
        .collect()
}

/// The snapshot a scratch volume starts with (`scratch.restore_from_snapshot_id`), if any.
pub(crate) fn restore_source(volume: &cwsandbox_api::sandbox_v1::SandboxVolume) -> Option<&str> {
    match &volume.source {
        Some(cwsandbox_api::sandbox_v1::sandbox_volume::Source::Scratch(scratch))
            if !scratch.restore_from_snapshot_id.is_empty() =>
        {
            Some(scratch.restore_from_snapshot_id.as_str())
        }
        _ => None,
    }
}

/// Why `path` cannot name a mounted file: it must be absolute, without empty, `.` or `..`
/// components, and not `/proc` or `/dev`, which are the container's own.
fn mounted_file_problem(path: &str) -> Option<&'static str> {
    let Some(relative) = path.strip_prefix('/') else { return Some("must be an absolute path") };
    if path.contains('\0') {
        return Some("must not contain a NUL byte");
    }
    if relative.is_empty() || relative.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
        return Some("must name a file, without empty, '.' or '..' components");
    }
    if relative == "proc" || relative.starts_with("proc/") || relative == "dev" || relative.starts_with("dev/") {
        return Some("/proc and /dev are the container's own");
    }
    None
}

/// A user name as a DNS label (lowercase alphanumerics and dashes, at most 50 characters).
fn dns_label(text: &str) -> String {
    let mut label: String = text
        .chars()
        .map(|character| if character.is_ascii_alphanumeric() { character.to_ascii_lowercase() } else { '-' })
        .collect();
    label.truncate(50);
    let trimmed = label.trim_matches('-');
    if trimmed.is_empty() { "user".to_owned() } else { trimmed.to_owned() }
}

#[cfg(test)]
mod machine_tests {
    use super::*;

    #[test]
    fn sandbox_transitions_refuse_phases_that_do_not_allow_them() {
        let ended = || Life::Ended {
            state: SandboxState::Completed,
            reason: String::new(),
            exit_code: Some(0),
            at: SimTime::from_secs(1),
        };
        let mut life = Life::Live;
        assert_eq!(
            life.transition(SandboxTransition::Delete, ended()),
            Err(IllegalTransition { transition: SandboxTransition::Delete, state: "LIVE" }),
            "a transition cannot lead anywhere but its own target"
        );
        assert_eq!(
            life.transition(SandboxTransition::Forget, ended()),
            Err(IllegalTransition { transition: SandboxTransition::Forget, state: "LIVE" })
        );
        assert_eq!(life.transition(SandboxTransition::Delete, Life::TearingDown(TeardownCause::OwnerDeleted)), Ok(()));
        assert_eq!(
            life.transition(SandboxTransition::Expire, Life::TearingDown(TeardownCause::LifetimeExpired(5))),
            Err(IllegalTransition { transition: SandboxTransition::Expire, state: "TEARING_DOWN" })
        );
        assert_eq!(life, Life::TearingDown(TeardownCause::OwnerDeleted), "a refused transition changes nothing");
        assert_eq!(life.transition(SandboxTransition::End, ended()), Ok(()));
        assert_eq!(
            life.transition(SandboxTransition::Finish, ended()).unwrap_err().to_string(),
            "transition sandbox_finish is not allowed while the sandbox is ENDED"
        );
    }
}

#[cfg(test)]
mod service_tests {
    use cwsandbox_api::sandbox_v1::{EndpointAuth, EndpointKind, EndpointSpec, Service, Visibility};

    use super::*;

    fn with_services(visibilities: &[Visibility]) -> SandboxSpec {
        let services = visibilities
            .iter()
            .enumerate()
            .map(|(index, visibility)| Service {
                port: 8000 + index as i32,
                visibility: *visibility as i32,
                ..Service::default()
            })
            .collect();
        SandboxSpec { services, ..SandboxSpec::default() }
    }

    #[test]
    fn public_and_private_services_on_one_sandbox_are_refused_as_not_implemented() {
        use Visibility::{Custom, Private, Public, Unspecified};
        for accepted in [&[Public, Public][..], &[Private, Unspecified, Private], &[Unspecified], &[Public, Custom]] {
            assert_eq!(check_services(&with_services(accepted)), Ok(()), "{accepted:?}");
        }
        for (mixed, field) in [
            (&[Public, Private][..], "sandbox.spec.services[1].visibility"),
            (&[Unspecified, Custom, Public], "sandbox.spec.services[2].visibility"),
        ] {
            let error = check_services(&with_services(mixed)).unwrap_err();
            assert_eq!(error.reason(), Some(Reason::NotImplemented), "{mixed:?}");
            assert_eq!(error.violations()[0].field, field, "{mixed:?}");
            assert!(error.to_string().contains("PUBLIC"), "{error}");
        }
    }

    fn endpoint(kind: EndpointKind, auth: EndpointAuth, timeout: i32, visibility: Visibility) -> SandboxSpec {
        let service = Service {
            port: 8443,
            visibility: visibility as i32,
            endpoint: Some(EndpointSpec { kind: kind as i32, auth: auth as i32, request_timeout_seconds: timeout }),
            ..Service::default()
        };
        SandboxSpec { services: vec![service], ..SandboxSpec::default() }
    }

    #[test]
    fn endpoints_are_checked_as_the_published_client_documents_them() {
        use EndpointAuth::{Open, ShareToken, Unspecified as NoAuth};
        use EndpointKind::{Https, TlsPassthrough, Unspecified as NoKind};
        use Visibility::{Private, Public, Unspecified};
        for accepted in [
            endpoint(Https, Open, 0, Public),
            endpoint(Https, ShareToken, 15, Public),
            endpoint(Https, Open, 900, Public),
            endpoint(TlsPassthrough, NoAuth, 0, Public),
        ] {
            assert_eq!(check_services(&accepted), Ok(()), "{accepted:?}");
        }
        let at = "sandbox.spec.services[0]";
        for (refused, field) in [
            (endpoint(Https, NoAuth, 0, Public), "endpoint.auth"),
            (endpoint(Https, Open, 14, Public), "endpoint.request_timeout_seconds"),
            (endpoint(Https, Open, 901, Public), "endpoint.request_timeout_seconds"),
            (endpoint(Https, Open, -1, Public), "endpoint.request_timeout_seconds"),
            (endpoint(TlsPassthrough, Open, 0, Public), "endpoint.auth"),
            (endpoint(TlsPassthrough, NoAuth, 30, Public), "endpoint.request_timeout_seconds"),
            (endpoint(NoKind, NoAuth, 0, Public), "endpoint.kind"),
            (endpoint(Https, Open, 0, Private), "visibility"),
            (endpoint(TlsPassthrough, NoAuth, 0, Unspecified), "visibility"),
        ] {
            let error = check_services(&refused).unwrap_err();
            assert_eq!(error.reason(), Some(Reason::InvalidRequest), "{refused:?}");
            assert_eq!(error.violations()[0].field, format!("{at}.{field}"), "{refused:?}");
        }
    }
}
