//! The managed-runner registry of one emulated control plane (`RunnerManagementService`).
//!
//! Runners live per organization; a runner id is unique only inside its organization. Commands
//! validate first and change nothing when they fail. Installation, rollout and deletion are
//! asynchronous on the real service, so here they are explicit state machines that only
//! [`RunnerRegistry::advance`] moves, at the simulated time it is given.
//!
//! Rules follow docs/facts/runner-api.md (the resource, etags, masks, life cycle) and, where the
//! API is not public, the choices listed for its gaps 2–6, 8 and 11–13
//! (docs/facts/runner-api.md#not-public).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use cwsandbox_api::sandbox_v1::{
    CidrBlock, EgressRule, ManagedRunner, ManagedRunnerSpec, NetworkConstraints, Policy, PolicyConstraints,
    ReleaseChannel, RunnerConnectionStatus, RunnerIdentity, RunnerInstallError, RunnerInstallErrorReason,
    RunnerInstallStatus, egress_rule,
};
use cwsandbox_api::wkt::{FieldMask, Timestamp};

use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::machine::{Counts, IllegalTransition, Transition};
use crate::pager::{Pager, base64url_encode};
use crate::time::SimTime;

mod machine;
mod mask;

pub use machine::RunnerTransition;
use machine::{InstallFault, InstallPhase, Rollout, RunnerRecord};
use mask::{UpdatePath, copy_spec_field, parse_update_mask};

/// Page size when the request names none (docs/facts/runner-api.md#gap-2).
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// Largest page; bigger requests are capped, not refused (AIP-158).
pub const MAX_PAGE_SIZE: usize = 1000;
/// Longest `request_id`, in UTF-8 bytes (cwic's documented limit).
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// The group a runner joins when its identity names none.
pub const DEFAULT_RUNNER_GROUP_ID: &str = "default";
/// Message of a stale etag, exactly as CoreWeave's own Terraform test double words it, so the
/// provider's `etag is stale` matcher works against the emulator too.
pub const STALE_ETAG_MESSAGE: &str = "managed_runner.etag is stale; reload the runner and retry";
/// Message of an empty or `*` update mask (the same test double's wording).
pub const EXPLICIT_MASK_REQUIRED: &str = "an explicit update mask is required";

/// How long the asynchronous parts take. All default to zero so tests see a runner READY (or
/// gone) after one [`RunnerRegistry::advance`] without sleeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunnerTimings {
    /// From creation until PROVISIONING becomes READY.
    pub install_delay: Duration,
    /// From DeleteManagedRunner until the runner disappears.
    pub delete_delay: Duration,
    /// From ApplyAvailableUpdate until `active_revision` reaches `target_revision`.
    pub rollout_delay: Duration,
}

/// What a `request_id` was used for, kept while the runner it created exists.
#[derive(Debug, Clone)]
struct RequestRecord {
    runner_id: String,
    /// The normalized input of the original create; a replay must match it exactly.
    input: ManagedRunner,
}

/// The runners and request ids of one organization.
#[derive(Debug, Clone, Default)]
struct OrgRunners {
    /// Ordered by runner id: that order is the list order.
    runners: BTreeMap<String, RunnerRecord>,
    request_ids: BTreeMap<String, RequestRecord>,
}

/// The ManagedRunner registry of one emulated control plane.
#[derive(Debug, Clone)]
pub struct RunnerRegistry {
    orgs: BTreeMap<String, OrgRunners>,
    timings: RunnerTimings,
    cluster_names: BTreeMap<String, String>,
    allow_blind_policy_writes: bool,
    default_policy: Policy,
    policy_validator: fn(&Policy) -> Vec<FieldViolation>,
    transition_counts: Counts<RunnerTransition>,
    next_incarnation: u64,
}

impl Default for RunnerRegistry {
    fn default() -> Self {
        RunnerRegistry::new(RunnerTimings::default())
    }
}

impl RunnerRegistry {
    /// An empty registry with the given timings.
    pub fn new(timings: RunnerTimings) -> RunnerRegistry {
        RunnerRegistry {
            orgs: BTreeMap::new(),
            timings,
            cluster_names: BTreeMap::new(),
            allow_blind_policy_writes: false,
            default_policy: default_policy(),
            policy_validator: crate::policy::validate_policy,
            transition_counts: Counts::default(),
            next_incarnation: 1,
        }
    }

    /// Resolves `identity.cluster_name` through this cluster-id → name map; ids not in it keep
    /// their id as name (older runners carry a name in `cluster_id` anyway).
    pub fn with_cluster_names(mut self, names: impl IntoIterator<Item = (String, String)>) -> Self {
        self.cluster_names = names.into_iter().collect();
        self
    }

    /// Lets a policy update without an etag overwrite blindly (cwic fills the etag itself, so a
    /// deployment may choose to accept its absence). Off by default.
    pub fn with_blind_policy_writes(mut self, allow: bool) -> Self {
        self.allow_blind_policy_writes = allow;
        self
    }

    /// The policy [`RunnerRegistry::create_with_default_policy`] stores for runners without one.
    pub fn with_default_policy(mut self, policy: Policy) -> Self {
        self.default_policy = policy;
        self
    }

    /// Replaces the policy validator (default: [`crate::policy::validate_policy`]). A seam for
    /// tests of how violations surface, independent of the real rules.
    pub fn with_policy_validator(mut self, validator: fn(&Policy) -> Vec<FieldViolation>) -> Self {
        self.policy_validator = validator;
        self
    }

    /// The configured timings.
    pub fn timings(&self) -> RunnerTimings {
        self.timings
    }

    /// CreateManagedRunner: validates, normalizes and stores `runner`, which starts PENDING.
    /// Idempotent by `request_id` (empty means no idempotency).
    pub fn create(
        &mut self,
        org: &str,
        runner: ManagedRunner,
        request_id: &str,
        now: SimTime,
    ) -> SimResult<ManagedRunner> {
        let mut violations = Vec::new();
        if request_id.len() > MAX_REQUEST_ID_BYTES {
            violations.push(FieldViolation::new(
                "request_id",
                format!("must be at most {MAX_REQUEST_ID_BYTES} bytes of UTF-8, got {}", request_id.len()),
            ));
        }
        let input = self.normalize_create_input(runner, &mut violations);
        if !violations.is_empty() {
            return Err(SimError::invalid(Reason::InvalidRequest, violations));
        }
        let runner_id = input.identity.as_ref().map(|identity| identity.runner_id.clone()).unwrap_or_default();
        let runners = self.orgs.entry(org.to_owned()).or_default();

        if !request_id.is_empty()
            && let Some(previous) = runners.request_ids.get(request_id)
        {
            if previous.input != input {
                return Err(SimError::InvalidArgument {
                    reason: Reason::RequestIdConflict,
                    message: format!("request_id {request_id:?} was already used with a different request"),
                    violations: vec![FieldViolation::new("request_id", "was already used with a different request")],
                });
            }
            // A replay: answer with the runner as it is now, which may have moved on.
            if let Some(record) = runners.runners.get(&previous.runner_id) {
                return Ok(record.runner.clone());
            }
        }
        if runners.runners.contains_key(&runner_id) {
            return Err(SimError::AlreadyExists {
                reason: Reason::AlreadyExists,
                message: format!("runner {runner_id:?} already exists"),
            });
        }

        let incarnation = self.next_incarnation;
        self.next_incarnation += 1;
        let mut stored = input.clone();
        stored.install_status = RunnerInstallStatus::Pending as i32;
        stored.connection_status = RunnerConnectionStatus::Disconnected as i32;
        // The first deployment is revision 1 (as the Terraform test double reports it).
        stored.active_revision = 1;
        stored.target_revision = 1;
        stored.active_config_version = config_version(1);
        stored.create_time = Some(timestamp(now));
        stored.update_time = Some(timestamp(now));
        let mut record = RunnerRecord {
            runner: stored,
            phase: InstallPhase::Pending { since: now },
            rollout: Rollout::Idle,
            incarnation,
            policy_revision: 1,
            volume_refs: 0,
            fault: None,
        };
        record.runner.etag = record.etag();
        let created = record.runner.clone();
        runners.runners.insert(runner_id.clone(), record);
        if !request_id.is_empty() {
            runners.request_ids.insert(request_id.to_owned(), RequestRecord { runner_id, input });
        }
        Ok(created)
    }

    /// A runner the console enabled before anyone set its policy (values `neverConfigured`): it
    /// is created as [`RunnerRegistry::create`] creates one, then holds no policy at all, which
    /// GetManagedRunner shows and UpdateManagedRunner (mask `policy`) can fill.
    pub fn create_never_configured(
        &mut self,
        org: &str,
        runner: ManagedRunner,
        request_id: &str,
        now: SimTime,
    ) -> SimResult<ManagedRunner> {
        let placeholder = ManagedRunner { policy: Some(Policy::default()), ..runner };
        let created = self.create(org, placeholder, request_id, now)?;
        let runner_id = created.identity.as_ref().map(|identity| identity.runner_id.clone()).unwrap_or_default();
        let record = self.record_mut(org, &runner_id)?;
        record.runner.policy = None;
        record.runner.etag = record.etag();
        Ok(record.runner.clone())
    }

    /// The console's "Enable sandbox runner" path: like [`RunnerRegistry::create`], but a runner
    /// without a policy gets the deployment's default policy. A policy that is present, even
    /// `{}`, is kept as given.
    pub fn create_with_default_policy(
        &mut self,
        org: &str,
        mut runner: ManagedRunner,
        request_id: &str,
        now: SimTime,
    ) -> SimResult<ManagedRunner> {
        if runner.policy.is_none() {
            runner.policy = Some(self.default_policy.clone());
        }
        self.create(org, runner, request_id, now)
    }

    /// GetManagedRunner.
    pub fn get(&self, org: &str, runner_id: &str) -> SimResult<ManagedRunner> {
        self.record(org, runner_id).map(|record| record.runner.clone())
    }

    /// ListManagedRunners: runners in runner-id order, filtered by cluster (id or name) and zone,
    /// both case-insensitive; returns one page and the token of the next ("" on the last page).
    pub fn list(
        &self,
        org: &str,
        page_size: i32,
        page_token: &str,
        cluster_filter: &str,
        zone_filter: &str,
    ) -> SimResult<(Vec<ManagedRunner>, String)> {
        let filter = ListFilter { cluster: cluster_filter.to_lowercase(), zone: zone_filter.to_lowercase() };
        let pager = Pager::new(
            "managed-runners",
            [filter.cluster.clone(), filter.zone.clone()],
            page_size,
            DEFAULT_PAGE_SIZE,
            MAX_PAGE_SIZE,
        )?;
        let after = pager.after(page_token)?.and_then(|key| key.into_iter().next());

        let Some(runners) = self.orgs.get(org) else {
            return Ok((Vec::new(), String::new()));
        };
        let start = match &after {
            Some(last) => std::ops::Bound::Excluded(last.as_str()),
            None => std::ops::Bound::Unbounded,
        };
        let matching = runners
            .runners
            .range::<str, _>((start, std::ops::Bound::Unbounded))
            .map(|(_, record)| &record.runner)
            .filter(|runner| filter.matches(runner));
        let (page, next) = pager.page(matching, |runner| vec![runner_id_of(runner).to_owned()]);
        Ok((page.into_iter().cloned().collect(), next))
    }

    /// UpdateManagedRunner: changes exactly the fields named by `mask`, taking their values
    /// from `patch`; a masked field absent from `patch` is cleared
    /// (docs/facts/runner-api.md#update-mask, docs/facts/runner-api.md#gap-6).
    ///
    /// Checks, in order: the mask (explicit, legal paths only); the request (the policy and the
    /// release channel cannot be cleared, a policy change needs `managed_runner.etag` and must
    /// pass the policy validator); the runner (exists, not DELETING); the etag (not stale).
    /// A policy that differs from the stored one gets a new revision and etag; every successful
    /// update, even one that changes nothing, moves `update_time`.
    pub fn update(
        &mut self,
        org: &str,
        runner_id: &str,
        patch: ManagedRunner,
        mask: &FieldMask,
        now: SimTime,
    ) -> SimResult<ManagedRunner> {
        let paths = parse_update_mask(mask)?;
        let touches_policy = paths.contains(&UpdatePath::Policy);

        // Everything checkable from the request alone, all reported together.
        let mut violations = Vec::new();
        if let Some(identity) = &patch.identity
            && !identity.runner_id.is_empty()
            && identity.runner_id != runner_id
        {
            violations.push(FieldViolation::new(
                "managed_runner.identity.runnerId",
                format!("{:?} does not match runner_id {runner_id:?}", identity.runner_id),
            ));
        }
        if touches_policy {
            match &patch.policy {
                None => violations.push(FieldViolation::new(
                    "managed_runner.policy",
                    "the policy cannot be removed; send the whole document (`{}` is the permissive policy)",
                )),
                Some(policy) => violations.extend(self.policy_violations(policy)),
            }
            if patch.etag.is_empty() && !self.allow_blind_policy_writes {
                violations.push(FieldViolation::new(
                    "managed_runner.etag",
                    "required when the update mask contains `policy`: send the etag read with the policy",
                ));
            }
        }
        if paths.contains(&UpdatePath::SpecReleaseChannel) {
            let channel = patch.spec.as_ref().map_or(0, |spec| spec.release_channel);
            match ReleaseChannel::try_from(channel) {
                Ok(ReleaseChannel::Unspecified) => violations.push(FieldViolation::new(
                    "managed_runner.spec.releaseChannel",
                    "the release channel cannot be removed",
                )),
                Ok(_) => {}
                Err(_) => violations.push(FieldViolation::new(
                    "managed_runner.spec.releaseChannel",
                    format!("unknown release channel {channel}"),
                )),
            }
        }
        if !violations.is_empty() {
            return Err(SimError::invalid(Reason::InvalidRequest, violations));
        }

        let record = self.record_mut(org, runner_id)?;
        if record.is_deleting() {
            return Err(being_deleted(runner_id));
        }
        if touches_policy && !patch.etag.is_empty() && patch.etag != record.etag() {
            return Err(SimError::FailedPrecondition {
                reason: Reason::PreconditionFailed,
                message: STALE_ETAG_MESSAGE.to_owned(),
            });
        }

        // Validation passed: from here on nothing can fail, so the record is edited in place.
        let before = record.runner.clone();
        let runner = &mut record.runner;
        let spec_patch = patch.spec.unwrap_or_default();
        for path in &paths {
            match path {
                UpdatePath::DisplayName => runner.display_name = patch.display_name.clone(),
                UpdatePath::RunnerGroupId => {
                    let group = patch.identity.as_ref().map(|identity| identity.runner_group_id.as_str()).unwrap_or("");
                    let identity = runner.identity.get_or_insert_with(RunnerIdentity::default);
                    identity.runner_group_id = runner_group_or_default(group);
                }
                UpdatePath::Policy => {
                    // Both presence and validity were checked above.
                    if patch.policy.is_some() && runner.policy != patch.policy {
                        runner.policy = patch.policy.clone();
                        record.policy_revision += 1;
                    }
                }
                UpdatePath::SpecReleaseChannel
                | UpdatePath::SpecMaintenancePolicy
                | UpdatePath::SpecOverrides
                | UpdatePath::SpecEnforceResourceLimits
                | UpdatePath::SpecVolumes
                | UpdatePath::SpecTenantMetrics
                | UpdatePath::SpecImagePull
                | UpdatePath::SpecDataPlane => {
                    let spec = runner.spec.get_or_insert_with(default_spec);
                    copy_spec_field(*path, &spec_patch, spec);
                }
            }
        }
        // As Kubernetes keeps resourceVersion: an update that changes nothing leaves the record,
        // its update time included, as it was.
        if record.runner != before {
            record.runner.update_time = Some(timestamp(now));
        }
        let etag = record.etag();
        record.runner.etag = etag;
        Ok(record.runner.clone())
    }

    /// DeleteManagedRunner: the runner turns DELETING and disappears in a later `advance`.
    /// Deleting a runner that is already DELETING is a no-op.
    pub fn delete(&mut self, org: &str, runner_id: &str, allow_missing: bool, now: SimTime) -> SimResult<()> {
        let record = match self.record_mut(org, runner_id) {
            Ok(record) => record,
            Err(SimError::NotFound { .. }) if allow_missing => return Ok(()),
            Err(error) => return Err(error),
        };
        if record.is_deleting() {
            return Ok(());
        }
        if record.volume_refs > 0 {
            return Err(SimError::FailedPrecondition {
                reason: Reason::VolumeInUse,
                message: format!(
                    "runner {runner_id:?} is referenced by {} registered volume(s); remove them first",
                    record.volume_refs
                ),
            });
        }
        record.transition(RunnerTransition::BeginDelete, now).map_err(illegal_to_error)?;
        record.runner.update_time = Some(timestamp(now));
        self.transition_counts.add(RunnerTransition::BeginDelete);
        Ok(())
    }

    /// ApplyAvailableUpdate: starts rolling the runner to the channel's newer version.
    pub fn apply_available_update(&mut self, org: &str, runner_id: &str, now: SimTime) -> SimResult<ManagedRunner> {
        let record = self.record_mut(org, runner_id)?;
        if record.is_deleting() {
            return Err(being_deleted(runner_id));
        }
        if !record.runner.update_available {
            return Err(SimError::FailedPrecondition {
                reason: Reason::PreconditionFailed,
                message: format!("no update is available for runner {runner_id:?}"),
            });
        }
        record.transition(RunnerTransition::StartRollout, now).map_err(illegal_to_error)?;
        record.runner.update_time = Some(timestamp(now));
        let runner = record.runner.clone();
        self.transition_counts.add(RunnerTransition::StartRollout);
        Ok(runner)
    }

    /// Moves every runner's state machines forward to `now`: installs progress or fail,
    /// rollouts complete, READY runners heartbeat, deleted runners disappear.
    pub fn advance(&mut self, now: SimTime) {
        // Each runner can take at most a handful of steps at one instant (install, rollout,
        // heartbeat); the bound only guards against a state machine bug looping forever.
        const MAX_STEPS_PER_RUNNER: usize = RunnerTransition::ALL.len() * 2;
        let timings = self.timings;
        for runners in self.orgs.values_mut() {
            for record in runners.runners.values_mut() {
                for _ in 0..MAX_STEPS_PER_RUNNER {
                    let Some(transition) = record.due(now, &timings) else { break };
                    // `due` yields only transitions legal in the current state.
                    if record.transition(transition, now).is_err() {
                        break;
                    }
                    self.transition_counts.add(transition);
                }
            }
            // Checked before pruning: this runs on every command, and there is rarely anything
            // to prune.
            if runners.runners.values().any(|record| record.phase == InstallPhase::Gone) {
                runners.runners.retain(|_, record| record.phase != InstallPhase::Gone);
            }
            // A request id lives as long as its runner: after deletion it may create anew.
            let OrgRunners { runners: live, request_ids } = runners;
            if request_ids.values().any(|request| !live.contains_key(&request.runner_id)) {
                request_ids.retain(|_, request| live.contains_key(&request.runner_id));
            }
        }
        if self.orgs.values().any(|runners| runners.runners.is_empty() && runners.request_ids.is_empty()) {
            self.orgs.retain(|_, runners| !runners.runners.is_empty() || !runners.request_ids.is_empty());
        }
    }

    /// Test and admin hook: whether the runner's release channel offers a newer version.
    pub fn set_update_available(&mut self, org: &str, runner_id: &str, available: bool) -> SimResult<()> {
        let record = self.record_mut(org, runner_id)?;
        record.runner.update_available = available;
        Ok(())
    }

    /// How many registered volumes reference the runner; a runner with any cannot be deleted.
    pub fn set_volume_refs(&mut self, org: &str, runner_id: &str, volume_refs: u32) -> SimResult<()> {
        self.record_mut(org, runner_id)?.volume_refs = volume_refs;
        Ok(())
    }

    /// Fault hook: the installation of a runner not yet READY fails at the next `advance`,
    /// leaving it FAILED with this `install_error`. Installed or deleting runners refuse.
    pub fn fail_install(
        &mut self,
        org: &str,
        runner_id: &str,
        reason: RunnerInstallErrorReason,
        message: impl Into<String>,
    ) -> SimResult<()> {
        let record = self.record_mut(org, runner_id)?;
        match record.phase {
            InstallPhase::Pending { .. } | InstallPhase::Provisioning { .. } => {
                record.fault = Some(InstallFault { reason, message: message.into() });
                Ok(())
            }
            phase => Err(SimError::FailedPrecondition {
                reason: Reason::PreconditionFailed,
                message: format!("runner {runner_id:?} is {}; only an installation in progress can fail", phase.name()),
            }),
        }
    }

    /// The policy of a runner, for placement.
    pub fn policy_of(&self, org: &str, runner_id: &str) -> Option<&Policy> {
        self.orgs.get(org)?.runners.get(runner_id)?.runner.policy.as_ref()
    }

    /// The organization's runners in runner-id order, DELETING ones included.
    /// Forgets every runner and request id of an organization at once (a tenant that leaves;
    /// no DELETING phase: nothing outside the emulator watches a tenant's runners).
    pub fn forget_organization(&mut self, org: &str) {
        self.orgs.remove(org);
    }

    /// A runner by id, borrowed (no copy of its policy), if it exists in the organization.
    pub fn find(&self, org: &str, runner_id: &str) -> Option<&ManagedRunner> {
        self.orgs.get(org).and_then(|runners| runners.runners.get(runner_id)).map(|record| &record.runner)
    }

    /// The organizations that have runners.
    pub fn organizations(&self) -> impl Iterator<Item = &str> {
        self.orgs.keys().map(String::as_str)
    }

    pub fn iter<'a>(&'a self, org: &str) -> impl Iterator<Item = &'a ManagedRunner> + 'a {
        self.orgs.get(org).into_iter().flat_map(|runners| runners.runners.values().map(|record| &record.runner))
    }

    /// How often each transition has run since the registry was made.
    pub fn transition_count(&self, transition: RunnerTransition) -> u64 {
        self.transition_counts.get(transition)
    }

    /// All transition counters, by transition.
    pub fn transition_counts(&self) -> &Counts<RunnerTransition> {
        &self.transition_counts
    }

    fn record(&self, org: &str, runner_id: &str) -> SimResult<&RunnerRecord> {
        self.orgs.get(org).and_then(|runners| runners.runners.get(runner_id)).ok_or_else(|| not_found(runner_id))
    }

    fn record_mut(&mut self, org: &str, runner_id: &str) -> SimResult<&mut RunnerRecord> {
        self.orgs
            .get_mut(org)
            .and_then(|runners| runners.runners.get_mut(runner_id))
            .ok_or_else(|| not_found(runner_id))
    }

    /// Validator violations, re-rooted under the request (`managed_runner.policy…`). The
    /// validator may name fields from the policy (`policy.base…`) or relative to it (`base…`).
    fn policy_violations(&self, policy: &Policy) -> Vec<FieldViolation> {
        (self.policy_validator)(policy)
            .into_iter()
            .map(|violation| {
                let field = if violation.field == "policy" || violation.field.starts_with("policy.") {
                    format!("managed_runner.{}", violation.field)
                } else if violation.field.is_empty() {
                    "managed_runner.policy".to_owned()
                } else {
                    format!("managed_runner.policy.{}", violation.field)
                };
                FieldViolation { field, description: violation.description }
            })
            .collect()
    }

    /// The create input with output-only fields dropped and defaults applied; problems are
    /// pushed onto `violations`.
    fn normalize_create_input(&self, runner: ManagedRunner, violations: &mut Vec<FieldViolation>) -> ManagedRunner {
        let identity = runner.identity.unwrap_or_default();
        if identity.runner_id.is_empty() {
            violations.push(FieldViolation::new("managed_runner.identity.runnerId", "required"));
        } else if let Err(why) = check_dns_label(&identity.runner_id) {
            violations.push(FieldViolation::new(
                "managed_runner.identity.runnerId",
                format!("{:?} is not a DNS-1123 label: {why}", identity.runner_id),
            ));
        }
        if identity.zone.is_empty() {
            violations.push(FieldViolation::new("managed_runner.identity.zone", "required"));
        }
        if identity.cluster_id.is_empty() {
            violations.push(FieldViolation::new("managed_runner.identity.clusterId", "required"));
        }
        match &runner.policy {
            None => violations.push(FieldViolation::new(
                "managed_runner.policy",
                "required (`{}` is the valid, fully permissive policy)",
            )),
            Some(policy) => violations.extend(self.policy_violations(policy)),
        }
        let mut spec = runner.spec.unwrap_or_default();
        if spec.allow_privileged_profile_annotations {
            violations.push(FieldViolation::new(
                "managed_runner.spec.allowPrivilegedProfileAnnotations",
                "a legacy v1beta2 setting; it must be false on v1",
            ));
        }
        match ReleaseChannel::try_from(spec.release_channel) {
            Ok(ReleaseChannel::Unspecified) => spec.release_channel = ReleaseChannel::Stable as i32,
            Ok(_) => {}
            Err(_) => violations.push(FieldViolation::new(
                "managed_runner.spec.releaseChannel",
                format!("unknown release channel {}", spec.release_channel),
            )),
        }
        let cluster_name =
            self.cluster_names.get(&identity.cluster_id).cloned().unwrap_or_else(|| identity.cluster_id.clone());
        // Only the inputs survive: every output-only field of the request is dropped here.
        ManagedRunner {
            identity: Some(RunnerIdentity {
                runner_group_id: runner_group_or_default(&identity.runner_group_id),
                zone: identity.zone.to_lowercase(),
                cluster_name,
                runner_id: identity.runner_id,
                cluster_id: identity.cluster_id,
            }),
            display_name: runner.display_name,
            spec: Some(spec),
            policy: runner.policy,
            ..ManagedRunner::default()
        }
    }
}

/// The default policy a deployment stores for runners created without one
/// (docs/facts/runner-api.md#gap-11, after the shipped default marimo describes,
/// docs/facts/policy.md#default-policy): public egress allowed, the cluster/pod network
/// (10.0.0.0/8) and link-local metadata (169.254.0.0/16) blocked. The rule is both the envelope
/// (so a sandbox cannot ask for more) and the default (so a sandbox that asks nothing gets it).
pub fn default_policy() -> Policy {
    let egress = EgressRule {
        ports: Vec::new(),
        https_hostname_except: Vec::new(),
        destination: Some(egress_rule::Destination::Cidr(CidrBlock {
            cidr: "0.0.0.0/0".to_owned(),
            except: vec!["10.0.0.0/8".to_owned(), "169.254.0.0/16".to_owned()],
        })),
    };
    Policy {
        display_name: "default".to_owned(),
        base: None,
        constraints: Some(PolicyConstraints {
            network: Some(NetworkConstraints {
                allowed_egress: vec![egress.clone()],
                default_egress: vec![egress],
                ..NetworkConstraints::default()
            }),
            ..PolicyConstraints::default()
        }),
        control_plane_access: None,
    }
}

fn default_spec() -> ManagedRunnerSpec {
    ManagedRunnerSpec { release_channel: ReleaseChannel::Stable as i32, ..ManagedRunnerSpec::default() }
}

/// Proto3 cannot tell an explicit "" from an absent group, so both mean the default.
fn runner_group_or_default(group: &str) -> String {
    if group.is_empty() { DEFAULT_RUNNER_GROUP_ID.to_owned() } else { group.to_owned() }
}

/// RFC 1123 label, as Kubernetes checks it: 1–63 of `[a-z0-9-]`, alphanumeric at both ends.
pub(crate) fn check_dns_label(text: &str) -> Result<(), &'static str> {
    if text.len() > 63 {
        return Err("at most 63 characters");
    }
    if !text.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-') {
        return Err("only lowercase letters, digits and '-'");
    }
    if text.starts_with('-') || text.ends_with('-') {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

fn remediation_hints(reason: RunnerInstallErrorReason) -> Vec<String> {
    let hint = match reason {
        RunnerInstallErrorReason::ClusterNotFound => "check identity.cluster_id names an existing CKS cluster",
        RunnerInstallErrorReason::ClusterUnreachable => {
            "check the cluster's API server is reachable, then recreate the runner"
        }
        RunnerInstallErrorReason::InsufficientPermissions => "grant the installer the required cluster permissions",
        RunnerInstallErrorReason::Internal | RunnerInstallErrorReason::Unspecified => return Vec::new(),
    };
    vec![hint.to_owned()]
}

fn config_version(revision: i64) -> String {
    format!("rev-{revision}")
}

fn not_found(runner_id: &str) -> SimError {
    SimError::NotFound { reason: Reason::RunnerNotFound, message: format!("runner {runner_id:?} not found") }
}

fn being_deleted(runner_id: &str) -> SimError {
    SimError::FailedPrecondition {
        reason: Reason::PreconditionFailed,
        message: format!("runner {runner_id:?} is being deleted"),
    }
}

fn illegal_to_error(illegal: IllegalTransition<RunnerTransition>) -> SimError {
    SimError::FailedPrecondition { reason: Reason::PreconditionFailed, message: illegal.to_string() }
}

fn runner_id_of(runner: &ManagedRunner) -> &str {
    runner.identity.as_ref().map_or("", |identity| identity.runner_id.as_str())
}

/// Simulated milliseconds as a protobuf Timestamp.
fn timestamp(time: SimTime) -> Timestamp {
    let millis = time.millis();
    Timestamp { seconds: millis.div_euclid(1000), nanos: (millis.rem_euclid(1000) * 1_000_000) as i32 }
}

/// Opaque etag of one policy revision of one runner incarnation.
fn etag(runner_id: &str, incarnation: u64, policy_revision: u64) -> String {
    base64url_encode(format!("{runner_id}:{incarnation}:{policy_revision}").as_bytes())
}

/// The normalized filters of a list request; a page token is valid only for the same ones.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListFilter {
    cluster: String,
    zone: String,
}

impl ListFilter {
    fn matches(&self, runner: &ManagedRunner) -> bool {
        let Some(identity) = runner.identity.as_ref() else { return false };
        // Older runners may carry a cluster name in `cluster_id`, so the filter accepts either.
        let cluster_ok = self.cluster.is_empty()
            || identity.cluster_id.to_lowercase() == self.cluster
            || identity.cluster_name.to_lowercase() == self.cluster;
        let zone_ok = self.zone.is_empty() || identity.zone.to_lowercase() == self.zone;
        cluster_ok && zone_ok
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_follow_rfc_1123() {
        assert_eq!(check_dns_label("runner-1"), Ok(()));
        assert_eq!(check_dns_label("1a"), Ok(()));
        assert_eq!(check_dns_label(&"a".repeat(63)), Ok(()));
        assert!(check_dns_label(&"a".repeat(64)).is_err());
        assert!(check_dns_label("Runner").is_err());
        assert!(check_dns_label("-runner").is_err());
        assert!(check_dns_label("runner-").is_err());
        assert!(check_dns_label("run_ner").is_err());
        assert!(check_dns_label("run.ner").is_err());
    }

    #[test]
    fn timestamps_split_millis_into_seconds_and_nanos() {
        assert_eq!(timestamp(SimTime::from_millis(1_500)), Timestamp { seconds: 1, nanos: 500_000_000 });
        assert_eq!(timestamp(SimTime::from_millis(-1)), Timestamp { seconds: -1, nanos: 999_000_000 });
    }
}
