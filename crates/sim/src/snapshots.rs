//! File-system snapshots: saved copies of a sandbox's scratch volume, restorable into a new
//! sandbox's volume (`ScratchVolume.restore_from_snapshot_id`). The world keeps the records and
//! decides what may be captured; its host copies the files ([`SnapshotCapture`] says what to
//! copy) and reports the outcome with
//! [`World::finish_snapshot`](crate::world::World::finish_snapshot). Snapshots belong to an
//! organization, outlive the sandbox they were taken from, and live as long as the world does.

use std::collections::HashMap;

use crate::ids::SharedStr;
use crate::machine::{IllegalTransition, phases, transitions};
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
    pub(crate) by_id: HashMap<SharedStr, FileSystemSnapshot>,
    /// Organization → (request id, volume) → snapshot.
    pub(crate) by_request: HashMap<String, HashMap<(String, String), SharedStr>>,
}
