//! Registered volumes (VolumeService): an organization names an existing PersistentVolumeClaim of
//! a runner's cluster, the volume is validated against the cluster (VALIDATING, then READY or
//! ERROR), and sandboxes mount it by id (`SandboxVolume.volume_id`), pinned to its runner. The
//! claims the clusters have are the values' `persistentVolumeClaims`; their data is kept by the
//! host (the executor's root), one directory per organization, cluster, namespace and name,
//! shared by the sandboxes that mount that claim.

use std::collections::HashMap;

use crate::config::ClaimValues;
use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::machine::{IllegalTransition, Phase, legal, phases, transitions};
use crate::pager::Pager;
use crate::time::SimTime;
use crate::world::World;

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

phases! {
    /// The life of a registered volume.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum VolumeState {
        /// Being checked against its runner's cluster (until the next command of the world).
        Validating => "VALIDATING",
        /// The claim exists: sandboxes may mount it.
        Ready => "READY",
        /// The check failed; `state_reason` says why.
        Error => "ERROR",
        /// Deleted: what DeleteVolume answers before the record goes.
        Deleting => "DELETING",
    }
}

transitions! {
    machine "volume";
    /// Named volume transitions, counted for coverage.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum VolumeTransition {
        /// Registered.
        Create => "volume_create" from [],
        /// Create asked again with the same request id.
        Replay => "volume_replay" from [],
        /// The claim was found.
        Validate => "volume_validate" from [Validating],
        /// The claim (or the runner) was not found.
        Fail => "volume_fail" from [Validating],
        /// ValidateVolume asked for a new check.
        Recheck => "volume_recheck" from [Ready, Error],
        /// Deleted.
        Delete => "volume_delete" from [Ready, Error],
    }
    /// The states each transition may start from (registering starts from no volume).
    fn allowed_from(self) -> &'static [VolumeState];
}

impl VolumeTransition {
    fn apply(self, volume: &mut RegisteredVolume, to: VolumeState) -> Result<(), IllegalTransition<Self>> {
        self.check_from(volume.state)?;
        volume.state = to;
        Ok(())
    }
}

/// The PersistentVolumeClaim a volume names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSource {
    /// The runner whose cluster holds the claim; sandboxes that mount the volume run there.
    pub runner_id: String,
    pub namespace: String,
    pub claim_name: String,
    /// A directory of the claim that is the volume's root (relative; empty: the claim's root).
    pub sub_path: String,
}

/// What may change about a volume (UpdateVolume's mask paths `spec.read_only`, `spec.description`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeUpdate {
    pub read_only: Option<bool>,
    pub description: Option<String>,
    /// The claim the request names, if it names one: it must be the volume's.
    pub source: Option<ClaimSource>,
}

/// A registered volume as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredVolume {
    /// Chosen by the caller, unique in the organization.
    pub id: String,
    pub org: String,
    pub source: ClaimSource,
    /// Every mount of it is read-only.
    pub read_only: bool,
    pub description: String,
    pub state: VolumeState,
    pub state_reason: String,
    /// The cluster of its runner (`identity.cluster_id`), as its check found it: the claim is
    /// this cluster's (empty until checked).
    pub cluster_id: String,
    /// The claim's capacity and access modes, as its check found them.
    pub capacity: String,
    pub access_modes: Vec<String>,
    pub created: SimTime,
    pub updated: SimTime,
    pub last_validated: Option<SimTime>,
    /// Sandboxes of the organization that mount it and have not ended (filled when read).
    pub attached_sandbox_count: usize,
    request_id: String,
}

/// Every registered volume, by organization and id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Volumes {
    by_org: HashMap<String, HashMap<String, RegisteredVolume>>,
}

/// Why a volume id, namespace or claim name is not a DNS label, as a field violation.
fn label_problem(field: &str, value: &str) -> Option<FieldViolation> {
    let problem = if value.is_empty() { Some("required") } else { crate::runners::check_dns_label(value).err() };
    problem.map(|problem| {
        FieldViolation::new(field, format!("{problem}: a DNS label (lowercase letters, digits and '-')"))
    })
}

/// Why a sub-path is not a relative path inside the claim.
fn sub_path_problem(sub_path: &str) -> Option<&'static str> {
    let relative = sub_path.trim_matches('/');
    if sub_path.starts_with('/') || sub_path.contains('\0') || relative.split('/').any(|part| part == "..") {
        return Some("must be a relative path inside the claim, without '..' components");
    }
    None
}

/// Whether a claim of the values is in `cluster_id` for organization `org`.
fn claim_is_in(claim: &ClaimValues, org: &str, cluster_id: &str) -> bool {
    claim.cluster_id.as_deref().is_none_or(|cluster| cluster == cluster_id)
        && claim.org.as_deref().is_none_or(|owner| owner == org)
}

/// Whether two claims of the values could be the same claim: one namespace and name, in a
/// cluster and an organization both can be in.
fn claims_overlap(a: &ClaimValues, b: &ClaimValues) -> bool {
    fn meet(a: &Option<String>, b: &Option<String>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }
    a.namespace == b.namespace && a.name == b.name && meet(&a.cluster_id, &b.cluster_id) && meet(&a.org, &b.org)
}

/// Checks the values' claims: names are DNS labels, one claim per namespace and name in a cluster
/// and organization, capacities are quantities, a `clusterId` or `org` given is not empty.
pub(crate) fn check_claims(claims: &[ClaimValues]) -> SimResult<()> {
    let mut violations = Vec::new();
    for (index, claim) in claims.iter().enumerate() {
        let at = format!("persistentVolumeClaims[{index}]");
        violations.extend(label_problem(&format!("{at}.namespace"), &claim.namespace));
        violations.extend(label_problem(&format!("{at}.name"), &claim.name));
        if crate::quantity::Quantity::parse(&claim.capacity).is_err() {
            violations.push(FieldViolation::new(format!("{at}.capacity"), "a quantity such as 10Gi"));
        }
        if claim.cluster_id.as_deref().is_some_and(str::is_empty) {
            violations.push(FieldViolation::new(
                format!("{at}.clusterId"),
                "a runner's cluster id, or unset for every cluster",
            ));
        }
        if claim.org.as_deref().is_some_and(str::is_empty) {
            violations
                .push(FieldViolation::new(format!("{at}.org"), "an organization, or unset for every organization"));
        }
        if claims[..index].iter().any(|earlier| claims_overlap(earlier, claim)) {
            violations.push(FieldViolation::new(
                format!("{at}.name"),
                format!(
                    "claim {:?} is listed twice in namespace {:?} of one cluster and organization",
                    claim.name, claim.namespace
                ),
            ));
        }
    }
    if violations.is_empty() { Ok(()) } else { Err(SimError::invalid(Reason::InvalidRequest, violations)) }
}

fn volume_not_found(id: &str) -> SimError {
    SimError::NotFound { reason: Reason::VolumeNotFound, message: format!("volume {id:?} not found") }
}

impl World {
    /// Registers a volume: VALIDATING until the next command of the world checks its claim. A
    /// request id seen before answers the first request's volume.
    pub fn create_volume(
        &mut self,
        org: &str,
        id: &str,
        source: ClaimSource,
        read_only: bool,
        description: &str,
        request_id: &str,
    ) -> SimResult<RegisteredVolume> {
        self.settle();
        self.check_volumes();
        if let Some(existing) = self.volumes.by_org.get(org).and_then(|volumes| volumes.get(id))
            && !request_id.is_empty()
            && existing.request_id == request_id
        {
            self.volume_transitions.add(VolumeTransition::Replay);
            return Ok(self.volume_view(existing));
        }
        let mut violations = Vec::new();
        violations.extend(label_problem("volume.volume_id", id));
        violations.extend(label_problem("volume.spec.pvc.namespace", &source.namespace));
        violations.extend(label_problem("volume.spec.pvc.claim_name", &source.claim_name));
        if source.runner_id.is_empty() {
            violations.push(FieldViolation::new("volume.spec.pvc.runner_id", "required"));
        }
        if let Some(problem) = sub_path_problem(&source.sub_path) {
            violations.push(FieldViolation::new("volume.spec.pvc.sub_path", problem));
        }
        if !violations.is_empty() {
            return Err(SimError::invalid(Reason::InvalidRequest, violations));
        }
        if self.volumes.by_org.get(org).is_some_and(|volumes| volumes.contains_key(id)) {
            return Err(SimError::AlreadyExists {
                reason: Reason::AlreadyExists,
                message: format!("volume {id:?} exists already"),
            });
        }
        let volume = RegisteredVolume {
            id: id.to_owned(),
            org: org.to_owned(),
            source: ClaimSource { sub_path: source.sub_path.trim_matches('/').to_owned(), ..source },
            read_only,
            description: description.to_owned(),
            state: VolumeState::Validating,
            state_reason: String::new(),
            cluster_id: String::new(),
            capacity: String::new(),
            access_modes: Vec::new(),
            created: self.now,
            updated: self.now,
            last_validated: None,
            attached_sandbox_count: 0,
            request_id: request_id.to_owned(),
        };
        self.volume_transitions.add(VolumeTransition::Create);
        self.volumes.by_org.entry(org.to_owned()).or_default().insert(id.to_owned(), volume.clone());
        Ok(volume)
    }

    /// Checks every VALIDATING volume against its runner and the claims of the runner's cluster
    /// that are its organization's: another cluster's claim, or another organization's, is not
    /// found (ERROR), as Kubernetes finds no claim of that name in the runner's cluster.
    pub(crate) fn check_volumes(&mut self) {
        let now = self.now;
        let claims = &self.values.persistent_volume_claims;
        let runners = &self.runners;
        for volumes in self.volumes.by_org.values_mut() {
            for volume in volumes.values_mut().filter(|volume| volume.state == VolumeState::Validating) {
                let source = &volume.source;
                let cluster_id = runners.find(&volume.org, &source.runner_id).map(|runner| {
                    runner.identity.as_ref().map(|identity| identity.cluster_id.clone()).unwrap_or_default()
                });
                let outcome = match cluster_id {
                    None => Err(format!("runner {:?} not found in the organization", source.runner_id)),
                    Some(cluster_id) => claims
                        .iter()
                        .find(|claim| {
                            claim.namespace == source.namespace
                                && claim.name == source.claim_name
                                && claim_is_in(claim, &volume.org, &cluster_id)
                        })
                        .map(|claim| (claim.clone(), cluster_id.clone()))
                        .ok_or_else(|| {
                            format!(
                                "persistentvolumeclaims {:?} not found in namespace {:?} of runner {:?}'s cluster {cluster_id:?} (for this organization)",
                                source.claim_name, source.namespace, source.runner_id
                            )
                        }),
                };
                let transition = match outcome {
                    Ok((claim, cluster_id)) => {
                        volume.cluster_id = cluster_id;
                        volume.capacity = claim.capacity;
                        volume.access_modes = claim.access_modes;
                        volume.state_reason.clear();
                        legal(VolumeTransition::Validate.apply(volume, VolumeState::Ready));
                        VolumeTransition::Validate
                    }
                    Err(why) => {
                        volume.cluster_id.clear();
                        volume.state_reason = why;
                        legal(VolumeTransition::Fail.apply(volume, VolumeState::Error));
                        VolumeTransition::Fail
                    }
                };
                volume.last_validated = Some(now);
                volume.updated = now;
                self.volume_transitions.add(transition);
            }
        }
    }

    /// A volume as the API shows it, with its attached sandboxes counted.
    fn volume_view(&self, volume: &RegisteredVolume) -> RegisteredVolume {
        let mut view = volume.clone();
        view.attached_sandbox_count = self.sandboxes_mounting(&volume.org, &volume.id);
        view
    }

    /// One registered volume of the organization.
    pub fn get_volume(&mut self, org: &str, id: &str) -> SimResult<RegisteredVolume> {
        self.settle();
        self.check_volumes();
        let volume =
            self.volumes.by_org.get(org).and_then(|volumes| volumes.get(id)).ok_or_else(|| volume_not_found(id))?;
        Ok(self.volume_view(volume))
    }

    /// The organization's volumes by id, optionally only in some states or on some runners.
    pub fn list_volumes(
        &mut self,
        org: &str,
        states: &[VolumeState],
        runner_ids: &[String],
        page_size: i32,
        page_token: &str,
    ) -> SimResult<(Vec<RegisteredVolume>, String)> {
        self.settle();
        self.check_volumes();
        let mut filters: Vec<String> = states.iter().map(|state| state.name().to_owned()).collect();
        filters.push(String::new());
        filters.extend(runner_ids.iter().cloned());
        let pager = Pager::new("volumes", filters, page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
        let after = match pager.after(page_token)?.as_deref() {
            None => None,
            Some([id]) => Some(id.clone()),
            Some(_) => return Err(SimError::invalid_field("page_token", "not a page token of this listing")),
        };
        let mut matching: Vec<RegisteredVolume> = self
            .volumes
            .by_org
            .get(org)
            .into_iter()
            .flat_map(|volumes| volumes.values())
            .filter(|volume| states.is_empty() || states.contains(&volume.state))
            .filter(|volume| runner_ids.is_empty() || runner_ids.contains(&volume.source.runner_id))
            .filter(|volume| after.as_ref().is_none_or(|after| volume.id > *after))
            .map(|volume| self.volume_view(volume))
            .collect();
        matching.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(pager.page(matching, |last| vec![last.id.clone()]))
    }

    /// A volume of the organization to change, once the world has settled and every volume
    /// waiting for its check has had it.
    fn checked_volume_mut(&mut self, org: &str, id: &str) -> SimResult<&mut RegisteredVolume> {
        self.settle();
        self.check_volumes();
        self.volumes.by_org.get_mut(org).and_then(|volumes| volumes.get_mut(id)).ok_or_else(|| volume_not_found(id))
    }

    /// Changes what a volume's mask names; the claim it names cannot change.
    pub fn update_volume(&mut self, org: &str, id: &str, update: VolumeUpdate) -> SimResult<RegisteredVolume> {
        let now = self.now;
        let volume = self.checked_volume_mut(org, id)?;
        if let Some(source) = update.source {
            let asked = ClaimSource { sub_path: source.sub_path.trim_matches('/').to_owned(), ..source };
            if asked != volume.source {
                return Err(SimError::invalid_field(
                    "volume.spec.pvc",
                    "the claim a volume names cannot change: register another volume",
                ));
            }
        }
        if let Some(read_only) = update.read_only {
            volume.read_only = read_only;
        }
        if let Some(description) = update.description {
            volume.description = description;
        }
        volume.updated = now;
        let volume = volume.clone();
        Ok(self.volume_view(&volume))
    }

    /// Checks the volume's claim again: VALIDATING until the next command of the world.
    pub fn revalidate_volume(&mut self, org: &str, id: &str) -> SimResult<RegisteredVolume> {
        let now = self.now;
        let volume = self.checked_volume_mut(org, id)?;
        legal(VolumeTransition::Recheck.apply(volume, VolumeState::Validating));
        volume.updated = now;
        let volume = volume.clone();
        self.volume_transitions.add(VolumeTransition::Recheck);
        Ok(self.volume_view(&volume))
    }

    /// Deletes a volume's registration (the claim and its data stay, as in the cluster). One that
    /// running sandboxes mount is refused unless `force`. The answer is the volume as DELETING.
    pub fn delete_volume(&mut self, org: &str, id: &str, force: bool) -> SimResult<RegisteredVolume> {
        let mut volume = self.get_volume(org, id)?;
        if volume.attached_sandbox_count > 0 && !force {
            return Err(SimError::FailedPrecondition {
                reason: Reason::VolumeInUse,
                message: format!(
                    "volume {id:?} is mounted by {} sandbox(es) that have not ended: stop them first, or delete with force",
                    volume.attached_sandbox_count
                ),
            });
        }
        legal(VolumeTransition::Delete.apply(&mut volume, VolumeState::Deleting));
        volume.updated = self.now;
        self.volume_transitions.add(VolumeTransition::Delete);
        if let Some(volumes) = self.volumes.by_org.get_mut(org) {
            volumes.remove(id);
        }
        Ok(volume)
    }

    /// The claim a new sandbox's volume mounts, checked: the volume exists and is READY. `field`
    /// names the spec's volume in errors.
    pub(crate) fn claim_for_mount(&mut self, org: &str, id: &str, field: &str) -> SimResult<RegisteredVolume> {
        self.check_volumes();
        let volume = self.volumes.by_org.get(org).and_then(|volumes| volumes.get(id)).ok_or_else(|| {
            SimError::NotFound { reason: Reason::VolumeNotFound, message: format!("{field}: volume {id:?} not found") }
        })?;
        if volume.state != VolumeState::Ready {
            return Err(SimError::FailedPrecondition {
                reason: Reason::VolumeNotReady,
                message: format!(
                    "{field}: volume {id:?} is {}{}",
                    volume.state.name(),
                    if volume.state_reason.is_empty() { String::new() } else { format!(": {}", volume.state_reason) }
                ),
            });
        }
        Ok(volume.clone())
    }
}
