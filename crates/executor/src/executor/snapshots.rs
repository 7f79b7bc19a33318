//! File-system snapshots of scratch volumes, and what the volumes take on disk: a snapshot is a copy of a volume's directory kept
//! under the executor's root (`.snapshots/<id>`), made while the sandbox runs and copied into a
//! new sandbox's volume before that sandbox's processes exist. The copy (`crate::tree_copy`)
//! walks the volume one name at a time from descriptors of the directories it opened, never
//! following a link: the sandbox may change its volume while it is copied (swap a directory
//! for a link to a host directory, say), and a path-walking copy run by the emulator would then
//! copy the host's files.
//!
//! A root emulator's sandboxes all map their ids to one host range, so the owners the copy keeps
//! read the same in the sandbox a snapshot is restored into; an unprivileged emulator's files are
//! all its own.

use std::path::{Path, PathBuf};

use super::Executor;
use crate::ExecutorError;

/// The directory of the root that holds the snapshots.
pub const SNAPSHOTS_DIR: &str = ".snapshots";

/// A snapshot id as the executor accepts one: a file name of letters, digits and '-' (the
/// emulator's ids are uids).
fn check_snapshot_id(id: &str) -> Result<(), ExecutorError> {
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-') {
        return Err(ExecutorError::InvalidRequest(format!(
            "invalid snapshot id {id:?}: use 1 to 64 letters, digits or '-'"
        )));
    }
    Ok(())
}

/// Where snapshot `id`'s files are under the root `root_dir`.
pub(super) fn snapshot_dir(root_dir: &Path, id: &str) -> Result<PathBuf, ExecutorError> {
    check_snapshot_id(id)?;
    Ok(root_dir.join(SNAPSHOTS_DIR).join(id))
}

/// Where scratch volume `volume` of the sandbox whose host directory is `dir` lives, its name
/// checked first (a label: it cannot climb out of the sandbox's volumes).
fn scratch_volume(dir: &Path, volume: &str) -> Result<PathBuf, ExecutorError> {
    if !super::validate::is_label(volume) {
        return Err(ExecutorError::InvalidRequest(format!("invalid volume name {volume:?}")));
    }
    Ok(crate::rootfs::volume_path(dir, volume))
}

/// Fills a new sandbox's volume directory `volume` (made, empty) from the snapshot at `snapshot`.
pub(super) fn restore_volume(snapshot: &Path, volume: &Path) -> Result<(), String> {
    if !snapshot.is_dir() {
        return Err(format!("snapshot {} is gone", snapshot.display()));
    }
    crate::tree_copy::copy_tree(snapshot, volume).map(drop)
}

impl Executor {
    /// Copies scratch volume `volume` of sandbox `id` into snapshot `snapshot_id` and returns its
    /// size in bytes. The sandbox keeps running; what its processes write during the copy may or
    /// may not be in it, as with any copy of a live file system. A volume no container mounts
    /// has never held anything: its snapshot is empty.
    pub async fn snapshot_volume(&self, id: &str, volume: &str, snapshot_id: &str) -> Result<u64, ExecutorError> {
        let sandbox = self.sandbox(id).ok_or_else(|| ExecutorError::UnknownSandbox(id.to_owned()))?;
        if sandbox.running().is_none() {
            return Err(ExecutorError::NotRunning(id.to_owned()));
        }
        let source = scratch_volume(&sandbox.dir, volume)?;
        let target = snapshot_dir(&self.inner.config.root_dir, snapshot_id)?;
        let partial = target.with_file_name(format!(".partial-{snapshot_id}"));
        let copy = move || -> Result<u64, String> {
            let parent = partial.parent().unwrap_or(Path::new("/"));
            std::fs::create_dir_all(parent).map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
            if target.exists() {
                return Err(format!("snapshot {} exists already", target.display()));
            }
            let _ = std::fs::remove_dir_all(&partial);
            std::fs::create_dir(&partial).map_err(|error| format!("cannot create {}: {error}", partial.display()))?;
            // The volume's own directory is the executor's (outside the sandbox's root): only
            // what is inside it is the sandbox's to change.
            let copied = if source.is_dir() { crate::tree_copy::copy_tree(&source, &partial) } else { Ok(0) };
            let result = copied.and_then(|size| {
                std::fs::rename(&partial, &target)
                    .map(|()| size)
                    .map_err(|error| format!("cannot move the copy into place: {error}"))
            });
            if result.is_err() {
                let _ = std::fs::remove_dir_all(&partial);
            }
            result
        };
        tokio::task::spawn_blocking(copy)
            .await
            .map_err(|error| ExecutorError::Setup { id: id.to_owned(), message: error.to_string() })?
            .map_err(|message| ExecutorError::Setup { id: id.to_owned(), message })
    }

    /// What each of sandbox `id`'s scratch volumes `volumes` takes on the host's disk, in bytes
    /// (allocated blocks, as `du` and the kubelet count them), in the order given: a volume no
    /// container mounts has no directory and holds nothing.
    pub async fn volume_usage(&self, id: &str, volumes: Vec<String>) -> Result<Vec<u64>, ExecutorError> {
        let sandbox = self.sandbox(id).ok_or_else(|| ExecutorError::UnknownSandbox(id.to_owned()))?;
        let dirs = volumes.iter().map(|volume| scratch_volume(&sandbox.dir, volume)).collect::<Result<Vec<_>, _>>()?;
        let measure = move || -> Result<Vec<u64>, String> {
            dirs.iter().map(|dir| if dir.is_dir() { crate::tree_copy::disk_usage(dir) } else { Ok(0) }).collect()
        };
        tokio::task::spawn_blocking(measure)
            .await
            .map_err(|error| ExecutorError::Setup { id: id.to_owned(), message: error.to_string() })?
            .map_err(|message| ExecutorError::Setup { id: id.to_owned(), message })
    }

    /// Removes snapshot `snapshot_id`'s files. Removing one that is not there is not an error.
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<(), ExecutorError> {
        let dir = snapshot_dir(&self.inner.config.root_dir, snapshot_id)?;
        tokio::task::spawn_blocking(move || super::layout::remove_dir(&dir))
            .await
            .map_err(|error| ExecutorError::Io(std::io::Error::other(error.to_string())))?;
        Ok(())
    }
}
