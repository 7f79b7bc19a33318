//! File-system snapshots: saved copies of a sandbox's scratch volume, restorable into a new
//! sandbox's volume (`ScratchVolume.restore_from_snapshot_id`). `Snapshots` keeps the records
//! and answers the queries on them; the world decides what may be captured, and its host copies
//! the files ([`SnapshotCapture`] says what to copy) and reports the outcome with
//! [`World::finish_snapshot`](crate::world::World::finish_snapshot). Snapshots belong to an
//! organization, outlive the sandbox they were taken from, and live as long as the world does.

use std::collections::HashMap;

use crate::error::{Reason, SimError, SimResult};
use crate::ids::SharedStr;
use crate::machine::{IllegalTransition, Phase, phases, transitions};
use crate::pager::Pager;
use crate::time::SimTime;

phases! {
    /// The life of a snapshot.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SnapshotState {
        /// Its files are being copied.
        Creating => "CREATING",
        /// Complete: it can be restored from.
        Ready => "READY",
        /// The copy failed; `state_reason` says why.
        Failed => "FAILED",
        /// Deleted: what DeleteFileSystemSnapshot answers before the record goes.
        Deleting => "DELETING",
    }
}

/// What caused a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotTrigger {
    /// CreateFileSystemSnapshot.
    Manual,
    /// DeleteSandbox's `snapshot_volumes` (the client's `stop(snapshot_on_stop=True)`).
    OnDelete,
}

transitions! {
    machine "snapshot";
    /// Named snapshot transitions, counted for coverage.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SnapshotTransition {
        /// A capture began.
        Begin => "snapshot_begin" from [],
        /// A capture asked again with the same request id: the first one's record.
        Replay => "snapshot_replay" from [],
        /// The files were copied.
        Complete => "snapshot_complete" from [Creating],
        /// The copy failed.
        Fail => "snapshot_fail" from [Creating],
        /// Deleted.
        Delete => "snapshot_delete" from [Ready, Failed],
    }
    /// The states each transition may start from (a capture starts from no snapshot).
    fn allowed_from(self) -> &'static [SnapshotState];
}

impl SnapshotTransition {
    pub(crate) fn apply(
        self,
        record: &mut FileSystemSnapshot,
        to: SnapshotState,
    ) -> Result<(), IllegalTransition<Self>> {
        self.check_from(record.state)?;
        record.state = to;
        Ok(())
    }
}

/// A snapshot as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSystemSnapshot {
    /// Assigned at capture (a uid).
    pub id: SharedStr,
    /// The organization that owns it.
    pub org: String,
    pub state: SnapshotState,
    /// Why it failed.
    pub state_reason: String,
    /// Bytes of the copied files (0 until it is READY).
    pub size_bytes: u64,
    pub source_sandbox_id: String,
    pub source_volume_name: String,
    pub trigger: SnapshotTrigger,
    pub created: SimTime,
    /// When the copy ended (READY or FAILED).
    pub completed: Option<SimTime>,
    pub updated: SimTime,
    /// The idempotency key it was asked with (empty: none).
    pub request_id: String,
}

/// What the host must copy for a snapshot that began: the volume of the sandbox's Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotCapture {
    /// The snapshot, CREATING (or, for a replayed request, as it is now).
    pub snapshot: FileSystemSnapshot,
    /// The Pod whose volume holds the files.
    pub pod_uid: SharedStr,
    /// False for a replayed request: its files are being or were copied already.
    pub copy: bool,
}

/// Every snapshot of every organization.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshots {
    by_id: HashMap<SharedStr, FileSystemSnapshot>,
    /// Organization → (request id, volume) → snapshot.
    by_request: HashMap<String, HashMap<(String, String), SharedStr>>,
    /// Organization → the bucket it named for its snapshots (none: the managed one).
    buckets: HashMap<String, SnapshotBucket>,
}

/// Where an organization's snapshots would be stored (SettingsService's
/// FileSystemSnapshotBucketConfig): a bucket of its own, or, with none named, the one the
/// platform manages. Stored and returned; the emulator keeps every snapshot on its own disk
/// whichever it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotBucket {
    /// The organization's own bucket; empty: the managed one.
    pub bucket_name: String,
    /// That bucket's region.
    pub region: String,
}

/// What an update of the bucket settings changes: each field given replaces the stored one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotBucketUpdate {
    pub bucket_name: Option<String>,
    pub region: Option<String>,
}

/// Why `name` cannot name a bucket: S3's rules, which CoreWeave AI Object Storage follows (3 to
/// 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit,
/// no two dots in a row, not an IPv4 address).
pub fn bucket_name_problem(name: &str) -> Option<&'static str> {
    let bytes = name.as_bytes();
    if !(3..=63).contains(&bytes.len()) {
        return Some("must be 3 to 63 characters long");
    }
    if !bytes.iter().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || *byte == b'.' || *byte == b'-') {
        return Some("may hold only lowercase letters, digits, '.' and '-'");
    }
    let alphanumeric = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    if !bytes.first().is_some_and(alphanumeric) || !bytes.last().is_some_and(alphanumeric) {
        return Some("must start and end with a letter or digit");
    }
    if name.contains("..") {
        return Some("must not hold two dots in a row");
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return Some("must not be an IP address");
    }
    None
}

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

fn snapshot_not_found(id: &str) -> SimError {
    SimError::NotFound { reason: Reason::FssNotFound, message: format!("file-system snapshot {id:?} not found") }
}

impl Snapshots {
    /// The organization's bucket settings (the managed bucket until it names one).
    pub(crate) fn bucket(&self, org: &str) -> SnapshotBucket {
        self.buckets.get(org).cloned().unwrap_or_default()
    }

    /// Applies an update to the organization's bucket settings, checked first: a bucket name
    /// must be valid, and a region goes with a bucket of the organization's own.
    pub(crate) fn update_bucket(&mut self, org: &str, update: SnapshotBucketUpdate) -> SimResult<SnapshotBucket> {
        let mut bucket = self.bucket(org);
        if let Some(name) = update.bucket_name {
            bucket.bucket_name = name;
        }
        if let Some(region) = update.region {
            bucket.region = region;
        }
        let mut violations = Vec::new();
        if let Some(problem) =
            (!bucket.bucket_name.is_empty()).then(|| bucket_name_problem(&bucket.bucket_name)).flatten()
        {
            violations
                .push(crate::error::FieldViolation::new("file_system_snapshot_bucket_config.bucket_name", problem));
        }
        if bucket.bucket_name.is_empty() && !bucket.region.is_empty() {
            violations.push(crate::error::FieldViolation::new(
                "file_system_snapshot_bucket_config.region",
                "a region goes with a bucket of the organization's own (bucket_name); the managed bucket has its own",
            ));
        }
        if !violations.is_empty() {
            return Err(SimError::invalid(Reason::InvalidRequest, violations));
        }
        if bucket == SnapshotBucket::default() {
            self.buckets.remove(org);
        } else {
            self.buckets.insert(org.to_owned(), bucket.clone());
        }
        Ok(bucket)
    }

    /// The snapshot of `volume` an organization's request id (not empty) began, while it is on
    /// record.
    pub(crate) fn begun_by_request(&self, org: &str, request_id: &str, volume: &str) -> Option<&FileSystemSnapshot> {
        let key = (request_id.to_owned(), volume.to_owned());
        self.by_request
            .get(org)
            .and_then(|requests| requests.get(&key))
            .and_then(|id| self.by_id.get(id))
            .filter(|_| !request_id.is_empty())
    }

    /// How many snapshots the organization keeps.
    pub(crate) fn count_of(&self, org: &str) -> usize {
        self.by_id.values().filter(|snapshot| snapshot.org == org).count()
    }

    /// Stores a snapshot that began, and the request id (when there is one) that asked for it.
    pub(crate) fn insert(&mut self, snapshot: FileSystemSnapshot) {
        if !snapshot.request_id.is_empty() {
            self.by_request
                .entry(snapshot.org.clone())
                .or_default()
                .insert((snapshot.request_id.clone(), snapshot.source_volume_name.clone()), snapshot.id.clone());
        }
        self.by_id.insert(snapshot.id.clone(), snapshot);
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut FileSystemSnapshot> {
        self.by_id.get_mut(id)
    }

    /// Drops an organization's snapshot and the request ids that asked for it.
    pub(crate) fn remove(&mut self, org: &str, id: &str) {
        self.by_id.remove(id);
        if let Some(requests) = self.by_request.get_mut(org) {
            requests.retain(|_, snapshot| snapshot.as_str() != id);
        }
    }

    /// One snapshot of the organization.
    pub(crate) fn get(&self, org: &str, id: &str) -> SimResult<FileSystemSnapshot> {
        self.by_id.get(id).filter(|snapshot| snapshot.org == org).cloned().ok_or_else(|| snapshot_not_found(id))
    }

    /// The organization's snapshots, oldest first, optionally only those of one sandbox.
    pub(crate) fn list(
        &self,
        org: &str,
        source_sandbox_id: &str,
        page_size: i32,
        page_token: &str,
    ) -> SimResult<(Vec<FileSystemSnapshot>, String)> {
        let pager =
            Pager::new("snapshots", [source_sandbox_id.to_owned()], page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
        let invalid = || SimError::invalid_field("page_token", "not a page token of this listing");
        let after = match pager.after(page_token)?.as_deref() {
            None => None,
            Some([created, id]) => Some((created.parse::<i64>().map_err(|_| invalid())?, id.clone())),
            Some(_) => return Err(invalid()),
        };
        let mut matching: Vec<&FileSystemSnapshot> = self
            .by_id
            .values()
            .filter(|snapshot| snapshot.org == org)
            .filter(|snapshot| source_sandbox_id.is_empty() || snapshot.source_sandbox_id == source_sandbox_id)
            .collect();
        matching.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        let start = match &after {
            None => 0,
            Some((created, id)) => matching
                .iter()
                .position(|snapshot| (snapshot.created.millis(), snapshot.id.as_str()) > (*created, id.as_str()))
                .unwrap_or(matching.len()),
        };
        Ok(pager.page(matching.into_iter().skip(start).cloned(), |last| {
            vec![last.created.millis().to_string(), last.id.to_string()]
        }))
    }

    /// Checks that a snapshot a new sandbox restores from exists in the organization and is READY.
    pub(crate) fn check_restorable(&self, org: &str, id: &str, field: String) -> SimResult<()> {
        match self.by_id.get(id).filter(|snapshot| snapshot.org == org) {
            None => Err(SimError::NotFound {
                reason: Reason::FssNotFound,
                message: format!("{field}: file-system snapshot {id:?} not found"),
            }),
            Some(snapshot) if snapshot.state != SnapshotState::Ready => Err(SimError::FailedPrecondition {
                reason: Reason::FssNotReady,
                message: format!("{field}: file-system snapshot {id:?} is {}, not READY", snapshot.state.name()),
            }),
            Some(_) => Ok(()),
        }
    }
}
