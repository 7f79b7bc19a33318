//! What the emulator leaves on disk while it runs, and the clean-up of what a killed one left.
//!
//! - **The ready file** (`serve --ready-file`) carries the emulator's pid. A new start first removes
//!   one whose emulator is gone (the pid is not a live `cwsandbox-emulator`: exited, a zombie, or
//!   another program), so that a reader polling for the file never finds the dead emulator's
//!   address once the new one has started; a file whose emulator still runs makes the start fail.
//!   The file itself is written atomically once the emulator listens (`cwsandbox_emulator::ReadyInfo::write`).
//! - **The sandbox root** holds one directory per sandbox (named by its Pod's uid) and a lock file,
//!   [`LOCK_FILE`], holding the pid of the emulator that uses it, `flock`ed for as long as that
//!   emulator lives (the kernel releases it when the process dies, `kill -9` included). A root
//!   whose lock another emulator holds is refused; in a root whose lock is free, the sandbox
//!   directories a killed emulator left are removed. Without `--sandbox-root`, the root is
//!   `cwsandbox-emulator-<pid>` under the temporary directory, and the roots of that name whose
//!   emulator is gone are removed.
//!
//! Nothing is removed that is not the emulator's: only directories named as sandbox directories
//! are, inside a root that has the lock file, or default roots named `cwsandbox-emulator-<pid>`.
//! Removal never follows a symbolic link out of the tree (`std::fs::remove_dir_all` unlinks a link
//! rather than descending into it).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The lock file in a sandbox root.
pub const LOCK_FILE: &str = ".cwsandbox-emulator.lock";

/// The name of a default sandbox root, before the pid.
const DEFAULT_ROOT_PREFIX: &str = "cwsandbox-emulator-";

/// The executable's name (what `/proc/<pid>/stat` shows, cut to 15 bytes).
const BINARY_NAME: &str = "cwsandbox-emulator";

/// Why the emulator's state on disk could not be taken over.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The ready file belongs to an emulator that still runs.
    #[error(
        "the ready file {} belongs to the running emulator pid {pid}: stop it or choose another --ready-file",
        path.display()
    )]
    ReadyFileInUse {
        /// The file.
        path: PathBuf,
        /// Its emulator.
        pid: u32,
    },
    /// Another emulator holds the sandbox root's lock.
    #[error("sandbox root {} is in use by emulator pid {pid}", path.display())]
    RootInUse {
        /// The root.
        path: PathBuf,
        /// The pid in the lock file (`?` when it could not be read).
        pid: String,
    },
    /// A file system call failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

fn io_error<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> StateError + 'p {
    move |source| StateError::Io { what, path: path.to_owned(), source }
}

/// Whether `pid` is a running `cwsandbox-emulator` (not exited, not a zombie waiting for its
/// parent, not another program that got the pid since).
pub fn is_live_emulator(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // `pid (comm) state …`: comm may hold spaces and parentheses, the state follows the last ')'.
    let Some((head, rest)) = stat.rsplit_once(')') else { return false };
    if matches!(rest.trim_start().chars().next(), Some('Z' | 'X' | 'x') | None) {
        return false;
    }
    let comm = head.split_once('(').map_or("", |(_, comm)| comm);
    comm == &BINARY_NAME[..BINARY_NAME.len().min(15)]
}

/// Removes the ready file at `path` if the emulator it names is gone (or it names none), and the
/// temporary files of interrupted writes next to it. Returns the dead emulator's pid, if the file
/// named one. A file whose emulator still runs is [`StateError::ReadyFileInUse`].
pub fn clear_stale_ready_file(path: &Path) -> Result<Option<u32>, StateError> {
    remove_stale_temporaries(path);
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("reading the ready file", path)(error)),
    };
    let pid = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|ready| ready.get("pid").and_then(serde_json::Value::as_u64))
        .and_then(|pid| u32::try_from(pid).ok());
    if let Some(pid) = pid
        && pid != std::process::id()
        && is_live_emulator(pid)
    {
        return Err(StateError::ReadyFileInUse { path: path.to_owned(), pid });
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(pid),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(pid),
        Err(error) => Err(io_error("removing the stale ready file", path)(error)),
    }
}

/// The temporary file a write of `path` goes through: unique to this process, in the same
/// directory (so the rename is atomic), hidden.
pub fn temporary_for(path: &Path) -> PathBuf {
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Removes `.<name>.<pid>.tmp` files next to `path` whose writer is gone.
fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|candidate| candidate.strip_prefix(&prefix))
            .and_then(|rest| rest.strip_suffix(".tmp"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !is_live_emulator(pid) && entry.file_type().is_ok_and(|kind| kind.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A sandbox root this emulator holds: its lock is held until this value is dropped (or the
/// process ends).
#[derive(Debug)]
pub struct SandboxRoot {
    path: PathBuf,
    _lock: File,
    removed: Vec<PathBuf>,
}

impl SandboxRoot {
    /// Takes `path` (created if missing) as the sandbox root: refused while another emulator
    /// holds it; if an emulator used it before, the sandbox directories it left are removed.
    pub fn claim(path: &Path) -> Result<SandboxRoot, StateError> {
        std::fs::create_dir_all(path).map_err(io_error("creating the sandbox root", path))?;
        let lock_path = path.join(LOCK_FILE);
        let used_before = lock_path.exists();
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_error("opening the lock file", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = lock.read_to_string(&mut pid);
                let pid = if pid.trim().is_empty() { "?".to_owned() } else { pid.trim().to_owned() };
                return Err(StateError::RootInUse { path: path.to_owned(), pid });
            }
            Err(std::fs::TryLockError::Error(error)) => return Err(io_error("locking", &lock_path)(error)),
        }
        lock.set_len(0)
            .and_then(|()| lock.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(io_error("writing the lock file", &lock_path))?;
        let removed = if used_before { remove_sandbox_dirs(path) } else { Vec::new() };
        Ok(SandboxRoot { path: path.to_owned(), _lock: lock, removed })
    }

    /// Takes `<parent>/cwsandbox-emulator-<pid>` as the sandbox root, after removing the
    /// default roots under `parent` and `other_parent` (where an emulator may have put its
    /// default root when `parent` was not to be had) whose emulator is gone.
    pub fn claim_default(parent: &Path, other_parent: &Path) -> Result<SandboxRoot, StateError> {
        let mut removed = remove_dead_default_roots(parent);
        if other_parent != parent {
            removed.extend(remove_dead_default_roots(other_parent));
        }
        let mut root = SandboxRoot::claim(&parent.join(format!("{DEFAULT_ROOT_PREFIX}{}", std::process::id())))?;
        removed.append(&mut root.removed);
        root.removed = removed;
        Ok(root)
    }

    /// The root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What stale state the claim removed.
    pub fn removed(&self) -> &[PathBuf] {
        &self.removed
    }
}

/// Whether a directory name is one the executor gives a sandbox: a Pod uid
/// (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`), a sandbox id (16 hex digits), or one of its
/// `.probe-<pid>-<n>` directories.
fn is_sandbox_dir_name(name: &str) -> bool {
    let hex = |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_hexdigit());
    let uid = name.len() == 36 && name.split('-').map(str::len).eq([8, 4, 4, 4, 12]) && name.split('-').all(hex);
    let sandbox_id = name.len() == 16 && hex(name);
    let probe = name.strip_prefix(".probe-").and_then(|rest| rest.split_once('-')).is_some_and(|(pid, counter)| {
        pid.bytes().all(|byte| byte.is_ascii_digit()) && counter.bytes().all(|byte| byte.is_ascii_digit())
    });
    uid || sandbox_id || probe
}

/// Removes the sandbox directories in `root` (real directories with a sandbox's name) and the
/// snapshots directory; links and anything else stay.
fn remove_sandbox_dirs(root: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else { return removed };
    for entry in entries.flatten() {
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        // The snapshots a killed emulator kept went with its records.
        let ours = |name: &str| is_sandbox_dir_name(name) || name == cwsandbox_executor::SNAPSHOTS_DIR;
        if is_dir && entry.file_name().to_str().is_some_and(ours) && remove_tree(&entry.path()) {
            removed.push(entry.path());
        }
    }
    removed
}

/// Removes `cwsandbox-emulator-<pid>` directories under `temp_dir` whose emulator is gone. A
/// root whose emulator runs is kept even before it has taken its lock; one whose lock another
/// starter holds is being removed by that starter.
fn remove_dead_default_roots(temp_dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(temp_dir) else { return removed };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.strip_prefix(DEFAULT_ROOT_PREFIX))
            .filter(|pid| !pid.is_empty() && pid.bytes().all(|byte| byte.is_ascii_digit()))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || !entry.file_type().is_ok_and(|kind| kind.is_dir()) || is_live_emulator(pid) {
            continue;
        }
        let path = entry.path();
        let lock = match File::open(path.join(LOCK_FILE)) {
            Ok(lock) => match lock.try_lock() {
                Ok(()) => Some(lock),
                Err(_) => continue,
            },
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(_) => continue,
        };
        if remove_tree(&path) {
            removed.push(path);
        }
        drop(lock);
    }
    removed
}

/// Removes a directory tree; says whether it is gone. A tree with read-only directories (a
/// sandbox may make them) is made writable for its owner first; what still cannot be removed
/// (another user's directories) is left, with a warning.
fn remove_tree(path: &Path) -> bool {
    // A memory-backed volume of a killed emulator's sandbox is still mounted.
    cwsandbox_executor::unmount_all_under(path);
    let result = match std::fs::remove_dir_all(path) {
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
            grant_owner_access(path);
            std::fs::remove_dir_all(path)
        }
        result => result,
    };
    match result {
        Ok(()) => true,
        Err(error) if error.kind() == io::ErrorKind::NotFound => true,
        Err(error) => {
            tracing::warn!("cannot remove the stale sandbox directory {}: {error}", path.display());
            false
        }
    }
}

/// Gives the owner rwx on every real directory of the tree (links are not followed).
fn grant_owner_access(dir: &Path) {
    let Ok(metadata) = std::fs::symlink_metadata(dir) else { return };
    if !metadata.is_dir() {
        return;
    }
    let mode = metadata.permissions().mode();
    if mode & 0o700 != 0o700 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o700));
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            grant_owner_access(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_directory_names() {
        assert!(is_sandbox_dir_name("582d6717-a91d-279d-6c7c-5b1c60b890ff"));
        assert!(is_sandbox_dir_name("1b5051c62d0332cd"));
        assert!(is_sandbox_dir_name(".probe-123-0"));
        for other in
            ["data", "cafe", ".cwsandbox-emulator.lock", "582d6717-a91d-279d-6c7c-5b1c60b890fz", ".probe-x-1", ""]
        {
            assert!(!is_sandbox_dir_name(other), "{other:?}");
        }
    }

    #[test]
    fn a_live_emulator_is_this_binary_not_the_test() {
        assert!(!is_live_emulator(std::process::id()), "the test binary is not an emulator");
        assert!(!is_live_emulator(u32::MAX), "no such process");
    }

    #[test]
    fn leftovers_go_and_links_out_of_the_root_are_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "mine").unwrap();
        let root = tempfile::tempdir().unwrap();
        drop(SandboxRoot::claim(root.path()).unwrap());
        let sandbox = root.path().join("582d6717-a91d-279d-6c7c-5b1c60b890ff");
        std::fs::create_dir_all(sandbox.join("tmp/locked")).unwrap();
        std::fs::write(sandbox.join("tmp/locked/file"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), sandbox.join("tmp/escape")).unwrap();
        std::fs::set_permissions(sandbox.join("tmp/locked"), std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::create_dir(root.path().join("notes")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("1b5051c62d0332cd")).unwrap();
        let snapshots = root.path().join(cwsandbox_executor::SNAPSHOTS_DIR);
        std::fs::create_dir_all(snapshots.join("8f0c1a2b-0000-4000-8000-000000000001")).unwrap();

        let claimed = SandboxRoot::claim(root.path()).unwrap();
        let mut removed = claimed.removed().to_vec();
        removed.sort();
        let mut expected = vec![sandbox.clone(), snapshots.clone()];
        expected.sort();
        assert_eq!(removed, expected, "the sandbox and the dead emulator's snapshots");
        assert!(!sandbox.exists(), "the read-only directory did not keep it");
        assert!(root.path().join("notes").exists(), "not a sandbox's name");
        assert!(root.path().join("1b5051c62d0332cd").symlink_metadata().is_ok(), "a link is not a sandbox directory");
        assert_eq!(std::fs::read_to_string(outside.path().join("keep")).unwrap(), "mine", "nothing outside the root");
        let error = SandboxRoot::claim(root.path()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("sandbox root {} is in use by emulator pid {}", root.path().display(), std::process::id())
        );
    }

    /// A killed emulator's sandbox with a memory-backed volume still mounted: unmounted, then
    /// removed. Mounting needs root (CI has it).
    #[test]
    fn a_mounted_volume_of_a_killed_emulators_sandbox_is_unmounted_and_removed() {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs the tests as root");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        drop(SandboxRoot::claim(root.path()).unwrap());
        let volume = root.path().join("582d6717-a91d-279d-6c7c-5b1c60b890ff/volumes/cache");
        std::fs::create_dir_all(&volume).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&volume)
            .status()
            .unwrap();
        assert!(mounted.success());
        std::fs::write(volume.join("data"), "x").unwrap();
        let claimed = SandboxRoot::claim(root.path()).unwrap();
        assert_eq!(claimed.removed().len(), 1, "{:?}", claimed.removed());
        assert!(!volume.exists());
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!table.contains(root.path().to_str().unwrap()), "still mounted: {table}");
    }

    #[test]
    fn read_only_directories_are_opened_up_but_not_through_links() {
        let mode = |path: &Path| std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777;
        let outside = tempfile::tempdir().unwrap();
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
        let tree = tempfile::tempdir().unwrap();
        let locked = tree.path().join("a/locked");
        std::fs::create_dir_all(&locked).unwrap();
        std::os::unix::fs::symlink(outside.path(), tree.path().join("a/escape")).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(tree.path().join("a"), std::fs::Permissions::from_mode(0o555)).unwrap();
        grant_owner_access(tree.path());
        assert_eq!(mode(&tree.path().join("a")), 0o755);
        assert_eq!(mode(&locked), 0o700);
        assert_eq!(mode(outside.path()), 0o500, "the link's target is not touched");
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    #[test]
    fn a_dead_emulators_ready_file_and_temporaries_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ready.json");
        std::fs::write(&path, r#"{"pid": 4294967294, "base_url": "http://127.0.0.1:1"}"#).unwrap();
        let temporary = dir.path().join(".ready.json.4294967294.tmp");
        std::fs::write(&temporary, "{").unwrap();
        assert_eq!(clear_stale_ready_file(&path).unwrap(), Some(4_294_967_294));
        assert!(!path.exists() && !temporary.exists());
        assert_eq!(clear_stale_ready_file(&path).unwrap(), None, "nothing to remove");
        assert_eq!(temporary_for(&path), dir.path().join(format!(".ready.json.{}.tmp", std::process::id())));
    }
}
