//! The volume commands (VolumeService) on the world: the volume lifecycle
//! ([`crate::volumes`]) keeps the records and their machine, and a volume is checked against the
//! runners and the values' claims, which are the world's, so the commands live here, above it.

use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::machine::{Phase, legal};
use crate::pager::Pager;
use crate::volumes::{
    ClaimSource, RegisteredVolume, VolumeState, VolumeTransition, VolumeUpdate, claim_is_in, label_problem,
    sub_path_problem,
};
use crate::world::World;

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

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
        if let Some(existing) = self.volumes.registered_by_request(org, id, request_id) {
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
        if self.volumes.get(org, id).is_some() {
            return Err(SimError::AlreadyExists {
                reason: Reason::AlreadyExists,
                message: format!("volume {id:?} exists already"),
            });
        }
        let volume = RegisteredVolume::validating(org, id, source, read_only, description, request_id, self.now);
        self.volume_transitions.add(VolumeTransition::Create);
        self.volumes.insert(volume.clone());
        Ok(volume)
    }

    /// Checks every VALIDATING volume against its runner and the claims of the runner's cluster
    /// that are its organization's: another cluster's claim, or another organization's, is not
    /// found (ERROR), as Kubernetes finds no claim of that name in the runner's cluster.
    pub(crate) fn check_volumes(&mut self) {
        let now = self.now;
        let claims = &self.values.persistent_volume_claims;
        let runners = &self.runners;
        for volume in self.volumes.validating_mut() {
            let source = &volume.source;
            let cluster_id = runners
                .find(&volume.org, &source.runner_id)
                .map(|runner| runner.identity.as_ref().map(|identity| identity.cluster_id.clone()).unwrap_or_default());
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

    /// A volume as the API shows it, with its attached sandboxes counted.
    fn volume_view(&self, volume: &RegisteredVolume) -> RegisteredVolume {
        let mut view = volume.clone();
        view.attached_sandbox_count = self.sandboxes.mounting(&volume.org, &volume.id);
        view
    }

    /// One registered volume of the organization.
    pub fn get_volume(&mut self, org: &str, id: &str) -> SimResult<RegisteredVolume> {
        self.settle();
        self.check_volumes();
        let volume = self.volumes.get(org, id).ok_or_else(|| volume_not_found(id))?;
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
            .of_organization(org)
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
        self.volumes.get_mut(org, id).ok_or_else(|| volume_not_found(id))
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
        self.volumes.remove(org, id);
        Ok(volume)
    }

    /// The claim a new sandbox's volume mounts, checked: the volume exists and is READY. `field`
    /// names the spec's volume in errors.
    pub(crate) fn claim_for_mount(&mut self, org: &str, id: &str, field: &str) -> SimResult<RegisteredVolume> {
        self.check_volumes();
        self.volumes.ready_for_mount(org, id, field)
    }
}
