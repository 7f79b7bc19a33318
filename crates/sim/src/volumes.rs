//! Registered volumes (VolumeService): an organization names an existing PersistentVolumeClaim of
//! a runner's cluster, the volume is validated against the cluster (VALIDATING, then READY or
//! ERROR), and sandboxes mount it by id (`SandboxVolume.volume_id`), pinned to its runner. The
//! claims the clusters have are the values' `persistentVolumeClaims`; their data is kept by the
//! host (the executor's root), one directory per organization, cluster, namespace and name,
//! shared by the sandboxes that mount that claim.

use std::collections::HashMap;

use crate::config::ClaimValues;
use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::machine::{IllegalTransition, Phase, phases, transitions};
use crate::time::SimTime;

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
    pub(crate) fn apply(self, volume: &mut RegisteredVolume, to: VolumeState) -> Result<(), IllegalTransition<Self>> {
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

impl RegisteredVolume {
    /// A volume just registered, VALIDATING until its claim is checked.
    pub(crate) fn validating(
        org: &str,
        id: &str,
        source: ClaimSource,
        read_only: bool,
        description: &str,
        request_id: &str,
        now: SimTime,
    ) -> RegisteredVolume {
        RegisteredVolume {
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
            created: now,
            updated: now,
            last_validated: None,
            attached_sandbox_count: 0,
            request_id: request_id.to_owned(),
        }
    }
}

/// Every registered volume, by organization and id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Volumes {
    by_org: HashMap<String, HashMap<String, RegisteredVolume>>,
}

impl Volumes {
    pub(crate) fn get(&self, org: &str, id: &str) -> Option<&RegisteredVolume> {
        self.by_org.get(org).and_then(|volumes| volumes.get(id))
    }

    pub(crate) fn get_mut(&mut self, org: &str, id: &str) -> Option<&mut RegisteredVolume> {
        self.by_org.get_mut(org).and_then(|volumes| volumes.get_mut(id))
    }

    /// The organization's volumes, in no particular order.
    pub(crate) fn of_organization(&self, org: &str) -> impl Iterator<Item = &RegisteredVolume> {
        self.by_org.get(org).into_iter().flat_map(|volumes| volumes.values())
    }

    /// Every volume waiting for its claim's check.
    pub(crate) fn validating_mut(&mut self) -> impl Iterator<Item = &mut RegisteredVolume> {
        self.by_org
            .values_mut()
            .flat_map(|volumes| volumes.values_mut())
            .filter(|volume| volume.state == VolumeState::Validating)
    }

    /// The volume an organization registered as `id` with the same (non-empty) request id.
    pub(crate) fn registered_by_request(&self, org: &str, id: &str, request_id: &str) -> Option<&RegisteredVolume> {
        self.get(org, id).filter(|existing| !request_id.is_empty() && existing.request_id == request_id)
    }

    pub(crate) fn insert(&mut self, volume: RegisteredVolume) {
        self.by_org.entry(volume.org.clone()).or_default().insert(volume.id.clone(), volume);
    }

    pub(crate) fn remove(&mut self, org: &str, id: &str) {
        if let Some(volumes) = self.by_org.get_mut(org) {
            volumes.remove(id);
        }
    }

    /// The claim a new sandbox's volume mounts, checked: the volume exists and is READY. `field`
    /// names the spec's volume in errors.
    pub(crate) fn ready_for_mount(&self, org: &str, id: &str, field: &str) -> SimResult<RegisteredVolume> {
        let volume = self.get(org, id).ok_or_else(|| SimError::NotFound {
            reason: Reason::VolumeNotFound,
            message: format!("{field}: volume {id:?} not found"),
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

/// Why a volume id, namespace or claim name is not a DNS label, as a field violation.
pub(crate) fn label_problem(field: &str, value: &str) -> Option<FieldViolation> {
    let problem = if value.is_empty() { Some("required") } else { crate::runners::check_dns_label(value).err() };
    problem.map(|problem| {
        FieldViolation::new(field, format!("{problem}: a DNS label (lowercase letters, digits and '-')"))
    })
}

/// Why a sub-path is not a relative path inside the claim.
pub(crate) fn sub_path_problem(sub_path: &str) -> Option<&'static str> {
    let relative = sub_path.trim_matches('/');
    if sub_path.starts_with('/') || sub_path.contains('\0') || relative.split('/').any(|part| part == "..") {
        return Some("must be a relative path inside the claim, without '..' components");
    }
    None
}

/// Whether a claim of the values is in `cluster_id` for organization `org`.
pub(crate) fn claim_is_in(claim: &ClaimValues, org: &str, cluster_id: &str) -> bool {
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
