//! The root directory of a namespaced sandbox, prepared on the host before its keeper
//! is forked.
//!
//! A sandbox's `/` is a directory of its own, `<root_dir>/<id>/rootfs`: writable by the
//! sandbox's root user (its `/tmp`, `/root` and any directory it creates live there),
//! with the host's system directories (`/usr`, `/etc`, …: the host paths of the
//! configuration) bound read-only into it, a handful of device nodes, a devpts of its
//! own and its own `/proc`. After `pivot_root` nothing else of the host is in its mount
//! table: not the directory holding other sandboxes, not the host's `/tmp`, not `$HOME`.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

/// Devices bound from the host's `/dev`: those every container runtime provides.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The host paths bound read-only into every sandbox by default: what the host's
/// programs need to run (binaries, libraries, configuration).
pub const DEFAULT_HOST_PATHS: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"];

/// Where sandbox roots are cheapest to make: `/dev/shm`, where it is a memory file system
/// (tmpfs) we may write to and execute from. Making and removing a root is some twenty-five
/// inodes; on a disk file system such as ext4, allocating inodes among many recently
/// deleted ones costs milliseconds per root, on tmpfs microseconds. The price: what sandboxes
/// write is held in memory (within the file system's size limit).
pub fn memory_backed_dir() -> Option<PathBuf> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let dir = Path::new("/dev/shm");
    let path = c"/dev/shm";
    // SAFETY: zeroed statfs/statvfs are valid out-parameters, filled for a valid C string.
    let (fs, vfs) = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        let mut vfs: libc::statvfs = std::mem::zeroed();
        if libc::statfs(path.as_ptr(), &mut fs) != 0 || libc::statvfs(path.as_ptr(), &mut vfs) != 0 {
            return None;
        }
        (fs, vfs)
    };
    // SAFETY: access with a valid C string.
    let writable = unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } == 0;
    let executable = vfs.f_flag & libc::ST_NOEXEC == 0;
    // `f_type`'s type differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    let tmpfs = fs.f_type as i64 == TMPFS_MAGIC;
    (tmpfs && writable && executable && dir.is_dir()).then(|| dir.to_owned())
}

/// What the keeper needs to build the sandbox's root.
#[derive(Debug)]
pub(crate) struct Rootfs {
    pub(crate) path: PathBuf,
    /// (host source, target under `path`, read-only).
    pub(crate) binds: Vec<(PathBuf, PathBuf, bool)>,
    /// Host directories seen through a layer of the sandbox's own mounted files (host source,
    /// the layer's directory): their bind is a read-only overlay of the layer over the host's
    /// directory instead ([`place_files_over_host`]).
    pub(crate) layers: Vec<(PathBuf, PathBuf)>,
    /// The working directory as the sandbox sees it.
    pub(crate) working_dir: String,
}

/// A sandbox's directory with everything of its root but the working directory, which
/// depends on the sandbox: it can be made before the sandbox is asked for, and moved into
/// place when it is.
#[derive(Debug)]
pub(crate) struct Skeleton {
    dir: PathBuf,
    /// (host source, target relative to the root, read-only).
    binds: Vec<(PathBuf, PathBuf, bool)>,
}

fn describe(what: &str, path: &Path, error: std::io::Error) -> String {
    format!("cannot {what} {}: {error}", path.display())
}

/// Gives `path` to the sandbox's root user, where that is not us.
fn give(path: &Path, owner: Option<(u32, u32)>) -> Result<(), String> {
    match owner {
        Some((uid, gid)) => std::os::unix::fs::lchown(path, Some(uid), Some(gid))
            .map_err(|error| describe("give the sandbox", path, error)),
        None => Ok(()),
    }
}

fn make_dir(path: &Path, mode: u32, owner: Option<(u32, u32)>) -> Result<(), String> {
    std::fs::create_dir(path).map_err(|error| describe("create", path, error))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|error| describe("set the mode of", path, error))?;
    give(path, owner)
}

/// Prepares `<dir>/rootfs`. `owner` is the host (uid, gid) of the sandbox's root user
/// when it differs from ours (a root emulator's sandboxes): what the sandbox must be able
/// to write is given to it.
pub(crate) fn prepare(
    dir: &Path,
    host_paths: &[PathBuf],
    working_dir: Option<&str>,
    owner: Option<(u32, u32)>,
) -> Result<Rootfs, String> {
    skeleton(dir, host_paths, owner)?.finish(host_paths, working_dir, owner)
}

/// Makes `<dir>/rootfs` without its working directory, clearing what an earlier start left.
pub(crate) fn skeleton(dir: &Path, host_paths: &[PathBuf], owner: Option<(u32, u32)>) -> Result<Skeleton, String> {
    clear(dir)?;
    // Only we may enter the sandbox's host directory: its processes reach it only as `/`.
    make_dir(dir, 0o700, None)?;
    let rootfs = dir.join("rootfs");
    make_dir(&rootfs, 0o755, owner)?;
    let mut binds = Vec::new();
    let dev = rootfs.join("dev");
    make_dir(&dev, 0o755, None)?;
    for device in DEVICES {
        let host = Path::new("/dev").join(device);
        if !host.exists() {
            continue;
        }
        let target = dev.join(device);
        std::fs::write(&target, b"").map_err(|error| describe("create", &target, error))?;
        // Device nodes stay writable: a read-only /dev/null could not be written to.
        binds.push((host, Path::new("dev").join(device), false));
    }
    make_dir(&dev.join("pts"), 0o755, None)?;
    make_dir(&dev.join("shm"), 0o1777, owner)?;
    for (name, link) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let target = dev.join(name);
        symlink(link, &target).map_err(|error| describe("create the link", &target, error))?;
    }
    make_dir(&rootfs.join("proc"), 0o555, None)?;
    // Like the real /tmp: writable by all, sticky.
    make_dir(&rootfs.join("tmp"), 0o1777, owner)?;
    make_dir(&rootfs.join("root"), 0o700, owner)?;

    for host in host_paths {
        let Ok(relative) = host.strip_prefix("/") else {
            return Err(format!("host path {} is not absolute", host.display()));
        };
        if relative.as_os_str().is_empty() || relative.components().any(|part| !matches!(part, Component::Normal(_))) {
            return Err(format!("host path {} must name a directory below /, without '..'", host.display()));
        }
        if relative.starts_with("proc") || relative.starts_with("dev") {
            return Err(format!("host path {}: /proc and /dev are the sandbox's own", host.display()));
        }
        let Ok(metadata) = std::fs::symlink_metadata(host) else { continue };
        let target = rootfs.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|error| describe("create", parent, error))?;
        }
        if metadata.file_type().is_symlink() {
            // Merged-/usr hosts have /bin -> usr/bin: the same link, resolved inside.
            let link = std::fs::read_link(host).map_err(|error| describe("read the link", host, error))?;
            symlink(&link, &target).map_err(|error| describe("create the link", &target, error))?;
        } else if metadata.is_dir() {
            // Under /tmp or /root the directory may already be there.
            if !target.is_dir() {
                std::fs::create_dir(&target).map_err(|error| describe("create", &target, error))?;
            }
            binds.push((host.clone(), relative.to_owned(), true));
        } else {
            std::fs::write(&target, b"").map_err(|error| describe("create", &target, error))?;
            binds.push((host.clone(), relative.to_owned(), true));
        }
    }
    Ok(Skeleton { dir: dir.to_owned(), binds })
}

/// Removes a directory an earlier start (or a made-ahead skeleton) left: a restarted
/// container starts from scratch.
pub(crate) fn clear(dir: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(describe("clear", dir, error)),
        _ => Ok(()),
    }
}

impl Skeleton {
    /// The directory it was made in.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Moves it to `dir` (in the same file system), replacing what an earlier start left there.
    pub(crate) fn move_to(self, dir: &Path) -> Result<Skeleton, String> {
        clear(dir)?;
        std::fs::rename(&self.dir, dir).map_err(|error| describe("move a prepared root to", dir, error))?;
        Ok(Skeleton { dir: dir.to_owned(), binds: self.binds })
    }

    /// Removes it from the disk.
    pub(crate) fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Makes the working directory and says where everything is.
    pub(crate) fn finish(
        self,
        host_paths: &[PathBuf],
        working_dir: Option<&str>,
        owner: Option<(u32, u32)>,
    ) -> Result<Rootfs, String> {
        let rootfs = self.dir.join("rootfs");
        let working_dir = make_working_dir(&rootfs, host_paths, working_dir, owner)?;
        let binds = self
            .binds
            .into_iter()
            .map(|(source, target, read_only)| (source, rootfs.join(target), read_only))
            .collect();
        Ok(Rootfs { path: rootfs, binds, layers: Vec::new(), working_dir })
    }
}

/// Makes the working directory a sandbox asks for inside its root `rootfs` and returns it as
/// the sandbox sees it.
pub(crate) fn make_working_dir(
    rootfs: &Path,
    host_paths: &[PathBuf],
    working_dir: Option<&str>,
    owner: Option<(u32, u32)>,
) -> Result<String, String> {
    let working_dir = sandbox_working_dir(working_dir);
    let relative = working_dir.trim_start_matches('/');
    let wanted = Path::new(&working_dir);
    let under_host_path = host_paths.iter().any(|host| wanted.starts_with(host));
    let top = relative.split('/').next().unwrap_or_default();
    if relative.is_empty() {
        // `/`: the sandbox's own root.
    } else if under_host_path {
        // The host's read-only directory is what the sandbox sees there: nothing can be created.
        if !wanted.is_dir() {
            return Err(format!(
                "the working directory {working_dir} does not exist and cannot be created: it is under a read-only host directory"
            ));
        }
    } else if top == "dev" || top == "proc" {
        if !matches!(relative, "dev" | "dev/pts" | "dev/shm" | "proc") {
            return Err(format!("the working directory {working_dir} cannot be created under /{top}"));
        }
    } else {
        // Created inside the sandbox's own root, owned by its root user; never on the host.
        make_dirs_inside(rootfs, relative.split('/'), owner, |_| {
            format!("the working directory {working_dir} is not a directory")
        })?;
    }
    Ok(working_dir)
}

/// Why `path` cannot name a mounted file, if it cannot: it must be absolute, with no `.`,
/// `..` or empty components and no NUL byte, and not a directory of its own (`/`).
pub fn check_file_path(path: &str) -> Result<(), &'static str> {
    let Some(relative) = path.strip_prefix('/') else { return Err("the path must be absolute") };
    if path.contains('\0') {
        return Err("the path contains a NUL byte");
    }
    if relative.is_empty() || relative.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
        return Err("the path must name a file, without empty, '.' or '..' components");
    }
    Ok(())
}

/// Makes the missing directories of the path `parts` spell out under `root` (mode 0755, given
/// to `owner`), keeping those already there; `in_the_way` says what is wrong where something
/// other than a directory is.
fn make_dirs_inside<'a>(
    root: &Path,
    parts: impl IntoIterator<Item = &'a str>,
    owner: Option<(u32, u32)>,
    in_the_way: impl Fn(&Path) -> String,
) -> Result<(), String> {
    let mut path = root.to_owned();
    for part in parts {
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => return Err(in_the_way(&path)),
            Err(_) => make_dir(&path, 0o755, owner)?,
        }
    }
    Ok(())
}

/// A claim's directory (its key, `organization/cluster/namespace/name` for the emulator, checked
/// by the caller) under `claims_dir`, made if missing: writable by any user of the sandboxes that
/// mount it, as a volume is; the directories above it are the host's.
pub(crate) fn claim_dir(claims_dir: &Path, claim: &str, owner: Option<(u32, u32)>) -> Result<PathBuf, String> {
    let (parent, name) = claim.rsplit_once('/').ok_or_else(|| format!("invalid claim {claim:?}"))?;
    let parent_dir = claims_dir.join(parent);
    if !parent_dir.is_dir() {
        std::fs::create_dir_all(&parent_dir)
            .map_err(|error| format!("cannot create {}: {error}", parent_dir.display()))?;
    }
    let dir = parent_dir.join(name);
    if !dir.is_dir() {
        make_dir(&dir, 0o777, owner)?;
    }
    Ok(dir)
}

/// Where scratch volume `name` lives under the sandbox's host directory `dir` (made or not).
pub(crate) fn volume_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("volumes").join(name)
}

/// A scratch volume's directory under the sandbox's host directory `dir`, made if missing.
pub(crate) fn volume_dir(dir: &Path, name: &str, owner: Option<(u32, u32)>) -> Result<PathBuf, String> {
    let volume = volume_path(dir, name);
    if let Some(volumes) = volume.parent()
        && !volumes.is_dir()
    {
        make_dir(volumes, 0o755, None)?;
    }
    if !volume.is_dir() {
        // As Kubernetes makes an emptyDir: writable by any user of the Pod.
        make_dir(&volume, 0o777, owner)?;
    }
    Ok(volume)
}

/// A memory-backed scratch volume's directory under the sandbox's host directory `dir`: a tmpfs
/// of `size_bytes` mounted there (in the emulator's mount namespace, before any container's is
/// made, so each container that mounts the volume binds the same tmpfs, and snapshots read it as
/// any volume), writable by every user of the Pod as an `emptyDir` is. Already mounted: kept.
/// Writes past the size fail with ENOSPC; [`unmount_all_under`] takes it away with the sandbox.
pub(crate) fn memory_volume_dir(
    dir: &Path,
    name: &str,
    size_bytes: u64,
    owner: Option<(u32, u32)>,
) -> Result<PathBuf, String> {
    let volume = volume_dir(dir, name, owner)?;
    if is_mount_point(&volume) {
        return Ok(volume);
    }
    crate::sys::mount_tmpfs(&volume, size_bytes, owner)
        .map_err(|error| format!("volume {name:?}: cannot mount a tmpfs of {size_bytes} bytes: {error}"))?;
    Ok(volume)
}

/// Whether `path` is a mount point: a directory on another file system than its parent's.
fn is_mount_point(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(own), Some(Ok(parent))) = (std::fs::symlink_metadata(path), path.parent().map(std::fs::symlink_metadata))
    else {
        return false;
    };
    own.is_dir() && own.dev() != parent.dev()
}

/// Unmounts whatever is mounted at or under `dir` in this mount namespace (a sandbox's
/// memory-backed volumes, each a tmpfs), deepest first and detached (`MNT_DETACH`: gone from
/// the tree at once, freed once no process holds it), so the directory can be removed, also
/// one a killed emulator left. Mount points are read from `/proc/self/mountinfo`.
pub fn unmount_all_under(dir: &Path) {
    let mut points: Vec<PathBuf> = mount_points().into_iter().filter(|point| point.starts_with(dir)).collect();
    // Deepest first, each once.
    points.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    points.dedup();
    for point in points {
        if let Err(error) = crate::sys::unmount_detached(&point) {
            tracing::warn!(path = %point.display(), %error, "cannot unmount under a sandbox directory");
        }
    }
}

/// Every mount point of this process's mount namespace (`/proc/self/mountinfo`'s fifth field).
fn mount_points() -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| PathBuf::from(unescape_mount_point(point)))
        .collect()
}

/// A mount point as mountinfo writes it: space, tab, newline and backslash as `\ooo`.
fn unescape_mount_point(escaped: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let octal =
            bytes.get(index + 1..index + 4).filter(|digits| digits.iter().all(|digit| (b'0'..=b'7').contains(digit)));
        match (bytes[index], octal) {
            (b'\\', Some(digits)) => {
                out.push(digits.iter().fold(0u8, |value, digit| value.wrapping_mul(8).wrapping_add(digit - b'0')));
                index += 4;
            }
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

/// A volume's bind: its directory `volume` (a scratch volume's under the sandbox's host directory,
/// made empty with the sandbox and removed with it; a claim's under the root; never inside the
/// sandbox's root, where the sandbox could replace it), the sub-path made if missing, and its
/// mount point inside `rootfs`, made as a working directory is (not under a read-only host
/// directory, `/proc` or `/dev`).
pub(crate) fn volume_bind(
    volume: PathBuf,
    rootfs: &Path,
    host_paths: &[PathBuf],
    mount: &crate::VolumeMount,
    owner: Option<(u32, u32)>,
) -> Result<(PathBuf, PathBuf, bool), String> {
    let sub_path = mount.sub_path.trim_matches('/');
    let source = if sub_path.is_empty() {
        volume
    } else {
        make_dirs_inside(&volume, sub_path.split('/'), owner, |path| {
            format!("volume {:?}: {} is not a directory", mount.volume, path.display())
        })?;
        volume.join(sub_path)
    };
    let wanted = Path::new(&mount.path);
    let relative = mount.path.trim_matches('/');
    let top = relative.split('/').next().unwrap_or_default();
    if relative.is_empty() || host_paths.iter().any(|host| wanted.starts_with(host)) || top == "proc" || top == "dev" {
        return Err(format!(
            "volume {:?} cannot be mounted at {}: the sandbox's root, /proc, /dev and the host's read-only directories cannot hold a mount",
            mount.volume, mount.path
        ));
    }
    make_dirs_inside(rootfs, relative.split('/'), owner, |path| {
        format!("volume {:?} cannot be mounted at {}: {} is not a directory", mount.volume, mount.path, path.display())
    })?;
    Ok((source, rootfs.join(relative), mount.read_only))
}

/// Writes the mounted files into the root (before the sandbox's processes exist, so nothing
/// of the sandbox can have put a link in the way), with the directories they need.
pub(crate) fn place_files(
    rootfs: &Path,
    files: &[crate::MountedFile],
    host_paths: &[PathBuf],
    owner: Option<(u32, u32)>,
) -> Result<(), String> {
    // The paths' shape was checked with the launch spec (`check_file_path`).
    for file in files {
        let wanted = Path::new(&file.path);
        let hidden = host_paths.iter().any(|host| wanted.starts_with(host));
        if hidden || wanted.starts_with("/proc") || wanted.starts_with("/dev") {
            return Err(format!(
                "mounted file {}: the sandbox sees the host's read-only directory (or its own /proc, /dev) there",
                file.path
            ));
        }
        write_file_inside(rootfs, file.path.trim_start_matches('/'), file, owner)?;
    }
    Ok(())
}

/// Writes mounted file `file` at `relative` under `dir` (mode 0644, given to `owner`), making the
/// directories on the way (never through a link or a file).
fn write_file_inside(
    dir: &Path,
    relative: &str,
    file: &crate::MountedFile,
    owner: Option<(u32, u32)>,
) -> Result<(), String> {
    let target = dir.join(relative);
    let parents = relative.rsplit_once('/').map_or("", |(parents, _)| parents);
    make_dirs_inside(dir, parents.split('/').filter(|part| !part.is_empty()), owner, |in_the_way| {
        format!("mounted file {}: {} is not a directory", file.path, in_the_way.display())
    })?;
    if std::fs::symlink_metadata(&target).is_ok_and(|metadata| metadata.is_dir()) {
        return Err(format!("mounted file {}: a directory is there", file.path));
    }
    std::fs::write(&target, &file.content).map_err(|error| describe("write", &target, error))?;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644))
        .map_err(|error| describe("set the mode of", &target, error))?;
    give(&target, owner)
}

/// The host's read-only directory (one of `host_paths`, bound into the root) that `path` is
/// under, if any.
pub(crate) fn host_dir_of<'a>(path: &str, host_paths: &'a [PathBuf]) -> Option<&'a PathBuf> {
    let wanted = Path::new(path);
    host_paths.iter().filter(|host| wanted.starts_with(host)).max_by_key(|host| host.components().count())
}

/// Places mounted files at paths under the host's read-only directories (`/etc/app/app.conf`),
/// as a container's image would hold them: each such directory gets a layer of the sandbox's
/// own (`<dir>/layers/<n>`, outside its root) holding the files at their place in it, and is
/// then seen through a read-only overlay of that layer over the host's directory. What is
/// mounted under the host's directory (its `/etc/resolv.conf`, say) is bound again on top, as
/// the recursive bind would have shown it. A host path that is a link (merged `/usr`'s `/bin`)
/// holds no layer: the file must be named where the link leads.
///
/// `privileged` (a root emulator's): the overlay is mounted here, in the emulator's mount
/// namespace (`<dir>/layers/<n>.view`), and bound into the root in its host directory's place:
/// an overlay made inside the sandbox's user namespace cannot take a lower directory with
/// mounts under it (they are locked there). Otherwise the keeper mounts it ([`Rootfs::layers`]),
/// which works where the host's directory has no mounts under it, and is refused by name where
/// it has.
pub(crate) fn place_files_over_host(
    dir: &Path,
    rootfs: &mut Rootfs,
    files: &[&crate::MountedFile],
    host_paths: &[PathBuf],
    owner: Option<(u32, u32)>,
    privileged: bool,
) -> Result<(), String> {
    let mut layers: Vec<(PathBuf, PathBuf)> = Vec::new();
    for file in files {
        let Some(host) = host_dir_of(&file.path, host_paths) else { continue };
        let layer = match layers.iter().find(|(source, _)| source == host) {
            Some((_, layer)) => layer.clone(),
            None => {
                if !rootfs.binds.iter().any(|(source, _, _)| source == host) {
                    return Err(format!(
                        "mounted file {}: {} is not a directory of the host's here (a link, or missing): name the file where it leads",
                        file.path,
                        host.display()
                    ));
                }
                let all_layers = dir.join("layers");
                if !all_layers.is_dir() {
                    make_dir(&all_layers, 0o755, None)?;
                }
                let layer = all_layers.join(layers.len().to_string());
                make_dir(&layer, 0o755, owner)?;
                layers.push((host.clone(), layer.clone()));
                layer
            }
        };
        let inside = Path::new(&file.path).strip_prefix(host).unwrap_or(Path::new(""));
        let Some(inside) = inside.to_str().filter(|inside| !inside.is_empty()) else {
            return Err(format!("mounted file {}: the host's directory {} itself is there", file.path, host.display()));
        };
        check_over_host(&file.path, host, inside)?;
        write_file_inside(&layer, inside, file, owner)?;
    }
    for (host, layer) in layers {
        let relative_host = host.strip_prefix("/").unwrap_or(&host).to_owned();
        let submounts = mounts_under(&host);
        if privileged {
            let view = layer.with_extension("view");
            make_dir(&view, 0o755, None)?;
            crate::sys::mount_overlay_read_only(&view, &layer, &host)
                .map_err(|error| format!("cannot lay mounted files over {}: {error}", host.display()))?;
            for bind in rootfs.binds.iter_mut().filter(|(source, _, _)| *source == host) {
                bind.0 = view.clone();
            }
        } else if let Some(submount) = submounts.first() {
            return Err(format!(
                "mounted files under {}: it has mounts under it ({}), which an unprivileged emulator's overlay cannot show; run the emulator as root, or place the file elsewhere",
                host.display(),
                submount.display()
            ));
        } else {
            rootfs.layers.push((host.clone(), layer));
        }
        for submount in submounts {
            if let Ok(inside) = submount.strip_prefix(&host) {
                let target = rootfs.path.join(&relative_host).join(inside);
                rootfs.binds.push((submount.clone(), target, true));
            }
        }
    }
    Ok(())
}

/// Refuses a file the host's directory `host` cannot show at `path` (`inside` it) as a mount
/// would place it: where the host has a directory (a file bound there fails the same way), or
/// where a directory on the way is a file or a link of the host's (the layer would hide it, or
/// everything the link leads to).
fn check_over_host(path: &str, host: &Path, inside: &str) -> Result<(), String> {
    let mut on_host = host.to_owned();
    let parts: Vec<&str> = inside.split('/').collect();
    for (index, part) in parts.iter().enumerate() {
        on_host.push(part);
        let Ok(metadata) = std::fs::symlink_metadata(&on_host) else { return Ok(()) };
        let last = index + 1 == parts.len();
        if last && metadata.is_dir() {
            return Err(format!("mounted file {path}: the host's directory {} is there", on_host.display()));
        }
        if !last && metadata.file_type().is_symlink() {
            return Err(format!(
                "mounted file {path}: {} is a link on the host: name the file where it leads",
                on_host.display()
            ));
        }
        if !last && !metadata.is_dir() {
            return Err(format!("mounted file {path}: {} is not a directory", on_host.display()));
        }
    }
    Ok(())
}

/// What is mounted strictly under `dir` in this mount namespace, outermost first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mut points: Vec<PathBuf> =
        mount_points().into_iter().filter(|point| point.starts_with(dir) && point != dir).collect();
    points.sort_by_key(|point| point.components().count());
    points.dedup();
    points
}

/// The working directory as the sandbox sees it: `/` by default (as a container without
/// a `WORKDIR`), a relative one under `/`, repeated and trailing slashes folded.
pub(crate) fn sandbox_working_dir(working_dir: Option<&str>) -> String {
    let parts: Vec<&str> =
        working_dir.unwrap_or("/").split('/').filter(|part| !part.is_empty() && *part != ".").collect();
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_read_as_mountinfo_escapes_them() {
        assert_eq!(unescape_mount_point("/a\\040b/c\\011d\\134e"), std::ffi::OsString::from("/a b/c\td\\e"));
        assert_eq!(unescape_mount_point("/plain\\9x"), std::ffi::OsString::from("/plain\\9x"), "not an escape");
        assert!(mount_points().iter().any(|point| point == Path::new("/")));
    }

    #[test]
    fn working_directories_are_sandbox_paths() {
        assert_eq!(sandbox_working_dir(None), "/");
        assert_eq!(sandbox_working_dir(Some("project/src/")), "/project/src");
        assert_eq!(sandbox_working_dir(Some("//var//tmp/./x")), "/var/tmp/x");
    }

    #[test]
    fn a_working_directory_is_made_inside_the_root_never_on_the_host() {
        let base = tempfile::tempdir().unwrap();
        let outside = base.path().join("host-side");
        let dir = base.path().join("sbx");
        let wanted = format!("{}/wd", outside.display());
        let rootfs = prepare(&dir, &[PathBuf::from("/usr")], Some(&wanted), None).unwrap();
        assert_eq!(rootfs.working_dir, wanted);
        assert!(!outside.exists(), "nothing is created at the host path");
        assert!(rootfs.path.join(wanted.trim_start_matches('/')).is_dir());
        let error = prepare(&dir, &[PathBuf::from("/usr")], Some("/usr/no-such-dir"), None).unwrap_err();
        assert!(error.contains("read-only"), "{error}");
        // Only what is under a host path is the host's: a sibling of a nested one is the sandbox's.
        let nested = base.path().join("shared");
        std::fs::create_dir(&nested).unwrap();
        let sibling = format!("{}/sibling", base.path().display());
        let rootfs = prepare(&dir, std::slice::from_ref(&nested), Some(&sibling), None).unwrap();
        assert!(rootfs.path.join(sibling.trim_start_matches('/')).is_dir());
        assert!(!Path::new(&sibling).exists());
        let error = prepare(&dir, std::slice::from_ref(&nested), Some(&format!("{}/missing", nested.display())), None)
            .unwrap_err();
        assert!(error.contains("read-only"), "{error}");
    }
}
