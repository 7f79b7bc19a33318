//! The snapshot commands on the world: the snapshot lifecycle ([`crate::snapshots`]) keeps the
//! records and their machine, and what may be captured depends on the sandbox and its Pod, so the
//! commands that read both live here, above the two.

use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::machine::legal;
use crate::sandbox::SandboxState;
use crate::snapshots::{
    FileSystemSnapshot, SnapshotBucket, SnapshotBucketUpdate, SnapshotCapture, SnapshotState, SnapshotTransition,
    SnapshotTrigger,
};
use crate::world::World;

impl World {
    /// Begins capturing scratch volumes of a running sandbox, one snapshot each (all or none:
    /// every name is checked before any snapshot is made). An empty `volumes` list asks for
    /// the sandbox's only scratch volume. A request id seen before, for the same volume,
    /// answers the first request's snapshot without copying again.
    pub fn begin_snapshots(
        &mut self,
        org: &str,
        sandbox_id: &str,
        volumes: &[String],
        request_id: &str,
        trigger: SnapshotTrigger,
    ) -> SimResult<Vec<SnapshotCapture>> {
        self.settle();
        let settings = self.values.file_system_snapshots.clone();
        if !settings.enabled {
            return Err(SimError::FailedPrecondition {
                reason: Reason::FssNotSupported,
                message: "file-system snapshots are turned off in this emulator's values (fileSystemSnapshots.enabled)"
                    .to_owned(),
            });
        }
        let sandbox = self.get_sandbox(org, sandbox_id)?;
        let field = match trigger {
            SnapshotTrigger::Manual => "scratch_volume_name",
            SnapshotTrigger::OnDelete => "snapshot_volumes",
        };
        let scratch: Vec<String> = sandbox
            .spec()
            .volumes
            .iter()
            .filter(|volume| {
                matches!(volume.source, Some(cwsandbox_api::sandbox_v1::sandbox_volume::Source::Scratch(_)))
            })
            .map(|volume| volume.name.clone())
            .collect();
        let listed = || if scratch.is_empty() { "none".to_owned() } else { scratch.join(", ") };
        let names: Vec<String> = match volumes {
            [] if scratch.len() == 1 => scratch.clone(),
            [] => {
                return Err(SimError::invalid_field(
                    field,
                    format!("name the scratch volume to capture: the sandbox's scratch volumes are {}", listed()),
                ));
            }
            names => names.to_vec(),
        };
        let mut violations = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let at = if trigger == SnapshotTrigger::OnDelete { format!("{field}[{index}]") } else { field.to_owned() };
            if !scratch.contains(name) {
                violations.push(FieldViolation::new(
                    at,
                    format!("the sandbox has no scratch volume named {name:?} (its scratch volumes: {})", listed()),
                ));
            } else if names[..index].contains(name) {
                violations.push(FieldViolation::new(at, format!("{name:?} is named twice")));
            }
        }
        if !violations.is_empty() {
            return Err(SimError::invalid(Reason::InvalidRequest, violations));
        }
        let replays: Vec<Option<FileSystemSnapshot>> =
            names.iter().map(|name| self.snapshots.begun_by_request(org, request_id, name).cloned()).collect();
        if let Some(other) = replays.iter().flatten().find(|snapshot| snapshot.source_sandbox_id != sandbox_id) {
            return Err(SimError::invalid(
                Reason::RequestIdConflict,
                vec![FieldViolation::new(
                    "request_id",
                    format!("was used for a snapshot of sandbox {:?}", other.source_sandbox_id),
                )],
            ));
        }
        let fresh = replays.iter().filter(|replay| replay.is_none()).count();
        if fresh > 0 && sandbox.state != SandboxState::Running {
            return Err(SimError::FailedPrecondition {
                reason: Reason::SandboxNotRunning,
                message: format!(
                    "sandbox {sandbox_id:?} is {}: only a RUNNING sandbox's volumes can be captured",
                    format!("{:?}", sandbox.state).to_uppercase()
                ),
            });
        }
        let owned = self.snapshots.count_of(org);
        let limit = settings.max_per_organization as usize;
        if limit > 0 && owned + fresh > limit {
            return Err(SimError::ResourceExhausted {
                reason: Reason::FssQuotaExceeded,
                message: format!(
                    "the organization has {owned} file-system snapshots and may keep {limit} (fileSystemSnapshots.maxPerOrganization): delete some first"
                ),
                retry_after: None,
            });
        }
        let now = self.now;
        let mut captures = Vec::with_capacity(names.len());
        for (name, replay) in names.into_iter().zip(replays) {
            if let Some(snapshot) = replay {
                self.snapshot_transitions.add(SnapshotTransition::Replay);
                captures.push(SnapshotCapture { snapshot, pod_uid: sandbox.pod_uid.clone(), copy: false });
                continue;
            }
            let snapshot = FileSystemSnapshot {
                id: self.ids.uid(),
                org: org.to_owned(),
                state: SnapshotState::Creating,
                state_reason: String::new(),
                size_bytes: 0,
                source_sandbox_id: sandbox_id.to_owned(),
                source_volume_name: name.clone(),
                trigger,
                created: now,
                completed: None,
                updated: now,
                request_id: request_id.to_owned(),
            };
            self.snapshot_transitions.add(SnapshotTransition::Begin);
            self.snapshots.insert(snapshot.clone());
            captures.push(SnapshotCapture { snapshot, pod_uid: sandbox.pod_uid.clone(), copy: true });
        }
        Ok(captures)
    }

    /// The host finished copying a snapshot's files: `Ok(bytes)` makes it READY, `Err(why)`
    /// FAILED. A snapshot deleted meanwhile, or not CREATING, is left as it is.
    pub fn finish_snapshot(&mut self, id: &str, outcome: Result<u64, String>) -> Option<FileSystemSnapshot> {
        self.settle();
        let now = self.now;
        let record = self.snapshots.get_mut(id)?;
        if record.state != SnapshotState::Creating {
            return Some(record.clone());
        }
        let (transition, to) = match &outcome {
            Ok(_) => (SnapshotTransition::Complete, SnapshotState::Ready),
            Err(_) => (SnapshotTransition::Fail, SnapshotState::Failed),
        };
        legal(transition.apply(record, to))?;
        match outcome {
            Ok(size) => record.size_bytes = size,
            Err(why) => record.state_reason = why,
        }
        record.completed = Some(now);
        record.updated = now;
        let record = record.clone();
        self.snapshot_transitions.add(transition);
        Some(record)
    }

    /// Where the organization's snapshots would be stored (SettingsService).
    pub fn snapshot_bucket(&self, org: &str) -> SnapshotBucket {
        self.snapshots.bucket(org)
    }

    /// Changes where the organization's snapshots would be stored; an invalid setting changes
    /// nothing.
    pub fn update_snapshot_bucket(&mut self, org: &str, update: SnapshotBucketUpdate) -> SimResult<SnapshotBucket> {
        self.settle();
        self.snapshots.update_bucket(org, update)
    }

    /// One snapshot of the organization.
    pub fn get_snapshot(&self, org: &str, id: &str) -> SimResult<FileSystemSnapshot> {
        self.snapshots.get(org, id)
    }

    /// The organization's snapshots, oldest first, optionally only those of one sandbox.
    pub fn list_snapshots(
        &self,
        org: &str,
        source_sandbox_id: &str,
        page_size: i32,
        page_token: &str,
    ) -> SimResult<(Vec<FileSystemSnapshot>, String)> {
        self.snapshots.list(org, source_sandbox_id, page_size, page_token)
    }

    /// Deletes a snapshot: the answer is its record as DELETING, after which it is gone (the host
    /// removes its files). One still being copied cannot be deleted yet.
    pub fn delete_snapshot(&mut self, org: &str, id: &str) -> SimResult<FileSystemSnapshot> {
        self.settle();
        let mut record = self.get_snapshot(org, id)?;
        if record.state == SnapshotState::Creating {
            return Err(SimError::FailedPrecondition {
                reason: Reason::FssNotReady,
                message: format!("snapshot {id:?} is still being created: delete it once it is READY or FAILED"),
            });
        }
        legal(SnapshotTransition::Delete.apply(&mut record, SnapshotState::Deleting));
        record.updated = self.now;
        self.snapshot_transitions.add(SnapshotTransition::Delete);
        self.snapshots.remove(org, id);
        Ok(record)
    }
}
