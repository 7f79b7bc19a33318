//! What a sandbox's processes find: their directories and working directory (a root of their
//! own in namespaces mode, a directory on the host's filesystem in plain mode), their
//! environment, and where `PATH` leads for a program name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tracing::{debug, warn};

use super::mode::{IdMode, Mode};
use crate::LaunchSpec;
use crate::rootfs;
use crate::sys;

pub(super) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where a sandbox's directories are and how its working directory is made.
pub(super) struct Layout {
    /// The working directory as the sandbox sees it.
    pub(super) working_dir: String,
    /// The sidecars' working directories as the sandbox sees them, in the order asked.
    pub(super) sidecar_dirs: Vec<String>,
    /// Namespaces mode: the sandbox's root.
    pub(super) rootfs: Option<rootfs::Rootfs>,
}

/// What a start asks of the sandbox's root besides its files: working directories and volumes.
pub(super) struct RootPlan {
    pub(super) main: Option<String>,
    /// The sidecars' working directories, in the spec's order.
    pub(super) sidecars: Vec<Option<String>>,
    pub(super) volume_mounts: Vec<crate::VolumeMount>,
    /// Volumes that start as a copy of a snapshot: (volume, the snapshot's directory).
    pub(super) restores: Vec<(String, PathBuf)>,
    /// Where the claims' directories are (`<namespace>/<name>`).
    pub(super) claims_dir: PathBuf,
    /// The memory-backed volumes, each a tmpfs of its own mounted before anything is put in it.
    pub(super) memory_volumes: Vec<crate::MemoryVolume>,
}

impl RootPlan {
    pub(super) fn of(spec: &LaunchSpec) -> RootPlan {
        RootPlan {
            main: spec.working_dir.clone(),
            sidecars: spec.sidecars.iter().map(|sidecar| sidecar.working_dir.clone()).collect(),
            volume_mounts: spec.volume_mounts.clone(),
            restores: Vec::new(),
            claims_dir: PathBuf::new(),
            memory_volumes: spec.memory_volumes.clone(),
        }
    }
}

/// Makes a sandbox's directories at `dir` (its volumes' under `volumes`: the sandbox's own
/// directory, which a sidecar with a root of its own shares); in namespaces mode from `spare`,
/// a root made ahead, where there is one.
#[allow(clippy::too_many_arguments)]
pub(super) fn prepare_layout(
    dir: &Path,
    volumes: &Path,
    mode: Mode,
    host_paths: &[PathBuf],
    plan: &RootPlan,
    files: &[crate::MountedFile],
    network: crate::Network,
    spare: Option<rootfs::Skeleton>,
) -> Result<Layout, String> {
    let (working_dir, sidecar_dirs) = (plan.main.as_deref(), plan.sidecars.as_slice());
    if let Mode::Namespaces { .. } = mode {
        let owner = mode.sandbox_owner();
        let moved = spare.and_then(|spare| {
            let from = spare.dir().to_owned();
            spare
                .move_to(dir)
                .inspect_err(|error| {
                    debug!(%error, "a root made ahead cannot be used; making one");
                    let _ = std::fs::remove_dir_all(&from);
                })
                .ok()
        });
        let skeleton = match moved {
            Some(skeleton) => skeleton,
            None => rootfs::skeleton(dir, host_paths, owner)?,
        };
        let mut rootfs = skeleton.finish(host_paths, working_dir, owner)?;
        let sidecar_dirs = sidecar_working_dirs(sidecar_dirs)?;
        for memory in &plan.memory_volumes {
            rootfs::memory_volume_dir(volumes, &memory.volume, memory.size_bytes, owner)?;
        }
        // Before the binds: a sub-path is made inside the restored files, never through them.
        for (volume, snapshot) in &plan.restores {
            let target = rootfs::volume_dir(volumes, volume, owner)?;
            super::snapshots::restore_volume(snapshot, &target)
                .map_err(|error| format!("volume {volume:?} cannot be restored from its snapshot: {error}"))?;
        }
        for mount in &plan.volume_mounts {
            let source = match &mount.claim {
                Some(claim) => rootfs::claim_dir(&plan.claims_dir, claim, owner)?,
                None => rootfs::volume_dir(volumes, &mount.volume, owner)?,
            };
            let bind = rootfs::volume_bind(source, &rootfs.path, host_paths, mount, owner)?;
            rootfs.binds.push(bind);
        }
        // A file under a volume's mount path goes on the volume, bound after it (as Kubernetes
        // places a subPath file over an emptyDir); the others are written into the root.
        // One under the host's read-only directories goes on a layer laid over it.
        let mut in_root = Vec::new();
        let mut on_volumes = Vec::new();
        let mut over_host = Vec::new();
        for file in files {
            match crate::file_mounts::volume_over(&plan.volume_mounts, &file.path)? {
                Some(_) => on_volumes.push(file),
                None if rootfs::host_dir_of(&file.path, host_paths).is_some() => over_host.push(file),
                None => in_root.push(file.clone()),
            }
        }
        rootfs::place_files(&rootfs.path, &in_root, host_paths, owner)?;
        let privileged = !matches!(mode, Mode::Namespaces { ids: IdMode::Own });
        rootfs::place_files_over_host(dir, &mut rootfs, &over_host, host_paths, owner, privileged)?;
        let file_binds = crate::file_mounts::bind_on_volumes(
            dir,
            &rootfs.path,
            &plan.volume_mounts,
            &on_volumes,
            owner,
            |volume| rootfs::volume_dir(volumes, volume, owner),
        )?;
        rootfs.binds.extend(file_binds);
        return Ok(Layout { working_dir: rootfs.working_dir.clone(), sidecar_dirs, rootfs: Some(rootfs) });
    }
    if let Some(mount) = plan.volume_mounts.first() {
        return Err(format!(
            "volume {:?} at {}: volumes need the namespaces isolation (plain processes have no root of their own to mount it in)",
            mount.volume, mount.path
        ));
    }
    if !sidecar_dirs.is_empty() {
        return Err(
            "a Pod's other containers need the namespaces isolation: plain processes have nothing to run them in apart from the host"
                .to_owned(),
        );
    }
    if network.is_own() {
        return Err(
            "a network of its own needs the namespaces isolation: plain processes share the host's network".to_owned()
        );
    }
    if let Some(file) = files.first() {
        return Err(format!(
            "mounted file {}: plain processes have no root directory of their own to hold it (mounted files need the namespaces isolation)",
            file.path
        ));
    }
    // Plain processes see the host's filesystem: their default working directory is a
    // directory of their own, and an absolute one must already exist (nothing is created
    // on the host on a sandbox's behalf).
    let describe =
        |what: &str, path: &Path, error: std::io::Error| format!("cannot {what} {}: {error}", path.display());
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|error| describe("clear", dir, error))?;
    }
    let work = dir.join("work");
    std::fs::create_dir_all(&work).map_err(|error| describe("create", &work, error))?;
    let work_path = work.to_string_lossy().into_owned();
    let working_dir = match working_dir.map(|dir| dir.trim_end_matches('/')) {
        None => work_path,
        Some("") => "/".to_owned(),
        Some(relative) if !relative.starts_with('/') => {
            std::fs::create_dir_all(work.join(relative))
                .map_err(|error| describe("create", &work.join(relative), error))?;
            format!("{work_path}/{relative}")
        }
        Some(absolute) => {
            if !Path::new(absolute).is_dir() {
                return Err(format!(
                    "the working directory {absolute} does not exist (plain processes use the host's filesystem, where nothing is created for them)"
                ));
            }
            absolute.to_owned()
        }
    };
    Ok(Layout { working_dir, sidecar_dirs: Vec::new(), rootfs: None })
}

/// The sidecars' working directories as they see them. Each sidecar has a root of its own
/// (`own_roots.rs`), where its directory is made: nothing of it goes into the main one.
fn sidecar_working_dirs(sidecar_dirs: &[Option<String>]) -> Result<Vec<String>, String> {
    sidecar_dirs
        .iter()
        .map(|dir| crate::files::resolve(dir.as_deref().unwrap_or("/"), "/").map_err(|error| error.to_string()))
        .collect()
}

/// Moves a warm sandbox's directory `from` to `dir`, replacing what an earlier start left
/// there, and adds the working directory and mounted files; returns the working directory as
/// the sandbox sees it, with the sidecars'. No process of the sandbox exists yet, so nothing of
/// it can have put a link in the way.
pub(super) fn move_warm_root(
    from: &Path,
    dir: &Path,
    host_paths: &[PathBuf],
    plan: &RootPlan,
    files: &[crate::MountedFile],
    owner: Option<(u32, u32)>,
) -> Result<(String, Vec<String>), String> {
    let (working_dir, sidecar_dirs) = (plan.main.as_deref(), plan.sidecars.as_slice());
    rootfs::clear(dir)?;
    std::fs::rename(from, dir)
        .map_err(|error| format!("cannot move a sandbox started ahead to {}: {error}", dir.display()))?;
    let root = dir.join("rootfs");
    let working_dir = rootfs::make_working_dir(&root, host_paths, working_dir, owner)?;
    let sidecar_dirs = sidecar_working_dirs(sidecar_dirs)?;
    rootfs::place_files(&root, files, host_paths, owner)?;
    Ok((working_dir, sidecar_dirs))
}

pub(super) fn remove_dir(dir: &Path) {
    rootfs::unmount_all_under(dir);
    if let Err(error) = std::fs::remove_dir_all(dir)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        warn!(dir = %dir.display(), %error, "cannot remove a sandbox directory");
    }
}

/// The environment of the main command and the base of every exec's.
pub(super) fn sandbox_env(spec: &LaunchSpec, mode: Mode) -> BTreeMap<String, String> {
    container_env(&spec.hostname, &spec.env, spec.user, mode)
}

/// The environment of one container's command and the base of every exec's in it: the
/// defaults, then the container's own.
pub(super) fn container_env(
    hostname: &str,
    own: &BTreeMap<String, String>,
    user: Option<crate::SandboxUser>,
    mode: Mode,
) -> BTreeMap<String, String> {
    let home = match mode {
        // A user the sandbox's image knows nothing of: `/`, as container runtimes do.
        Mode::Namespaces { ids: IdMode::Range { .. } } if user.is_some_and(|user| user.uid != 0) => "/".to_owned(),
        // The sandbox's root user, whose home is in its own root directory.
        Mode::Namespaces { ids: IdMode::Range { .. } | IdMode::HostRoot } => "/root".to_owned(),
        // The emulator's user, whose home is not in the sandbox's view.
        Mode::Namespaces { ids: IdMode::Own } => "/".to_owned(),
        Mode::Plain if sys::current_uid() == 0 => "/root".to_owned(),
        Mode::Plain => std::env::var("HOME").unwrap_or_else(|_| "/".into()),
    };
    let mut env = BTreeMap::from([
        ("PATH".to_owned(), DEFAULT_PATH.to_owned()),
        // The only way plain mode can tell a command its hostname.
        ("HOSTNAME".to_owned(), hostname.to_owned()),
        ("HOME".to_owned(), home),
    ]);
    env.extend(own.clone());
    env
}

/// Where `execve` should look for `program`, as `execvp` would search `PATH`.
pub(super) fn program_candidates(program: &str, path: Option<&str>) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_owned()];
    }
    path.unwrap_or(DEFAULT_PATH)
        .split(':')
        .map(|dir| if dir.is_empty() { "." } else { dir })
        .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_searched_in_path_like_execvp() {
        assert_eq!(program_candidates("ls", Some("/a:/b/:")), vec!["/a/ls", "/b/ls", "./ls"]);
        assert_eq!(program_candidates("./run.sh", Some("/a")), vec!["./run.sh"]);
        assert_eq!(program_candidates("sh", None).len(), DEFAULT_PATH.split(':').count());
    }

    #[test]
    fn sandbox_env_layers_the_spec_over_defaults() {
        let spec = LaunchSpec {
            hostname: "pod-1".into(),
            env: BTreeMap::from([("PATH".into(), "/x".into()), ("A".into(), "b".into())]),
            ..LaunchSpec::default()
        };
        let env = sandbox_env(&spec, Mode::Plain);
        assert_eq!(env["PATH"], "/x");
        assert_eq!(env["HOSTNAME"], "pod-1");
        assert_eq!(env["A"], "b");
    }
}
