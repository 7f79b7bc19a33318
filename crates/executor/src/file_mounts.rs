//! Mounted files under a volume's mount path, placed on top of the volume as Kubernetes places a
//! `subPath` file mounted under an `emptyDir`: the volumes are bound first, then the files, each
//! on a mount point made inside the volume. The mount point and the directories above it are made
//! from a descriptor on the volume's directory with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, so a link the volume holds (one restored from a snapshot) is refused,
//! never followed; no process of the sandbox exists yet, so nothing changes the path between
//! that check and the bind. A file under a claim's mount path is refused: other sandboxes write
//! to a claim while this one starts, so its path could be swapped for a link after the check.

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{MountedFile, VolumeMount};

/// A path's components (empty ones and a trailing `/` dropped).
fn components(path: &str) -> Vec<&str> {
    path.split('/').filter(|part| !part.is_empty()).collect()
}

/// The volume mount a file at `path` falls under: the deepest one whose mount path is an
/// ancestor of it, with the file's path relative to that mount path. `Err` when a volume is
/// mounted at `path` itself.
pub(crate) fn volume_over<'m, 'p>(
    mounts: &'m [VolumeMount],
    path: &'p str,
) -> Result<Option<(&'m VolumeMount, Vec<&'p str>)>, String> {
    let file = components(path);
    let mut deepest: Option<(&VolumeMount, usize)> = None;
    for mount in mounts {
        let at = components(&mount.path);
        if at == file {
            return Err(format!("mounted file {path}: volume {:?} is mounted there", mount.volume));
        }
        if file.starts_with(&at) && deepest.is_none_or(|(_, depth)| at.len() > depth) {
            deepest = Some((mount, at.len()));
        }
    }
    Ok(deepest.map(|(mount, depth)| (mount, file[depth..].to_vec())))
}

/// Why these files cannot be placed with these volumes: one at a volume's mount path, or one
/// under a claim's.
pub(crate) fn check<'a>(
    mounts: &[VolumeMount],
    files: impl IntoIterator<Item = &'a MountedFile>,
) -> Result<(), String> {
    for file in files {
        if let Some((mount, _)) = volume_over(mounts, &file.path)?
            && mount.claim.is_some()
        {
            return Err(format!(
                "mounted file {}: under the mount path {} of volume {:?}, a claim's: other sandboxes write to a claim while this one starts, so no file is placed on it (mount the file elsewhere)",
                file.path, mount.path, mount.volume
            ));
        }
    }
    Ok(())
}

/// The binds that place `files` (each under a scratch volume's mount path: [`volume_over`]) on
/// their volumes, to follow the volumes' binds, shallowest first. Each file's bytes are written
/// to `<dir>/files/<n>` (readable by the sandbox's root only), its mount point made inside the
/// volume's directory (`volume_dir(volume)`, the sub-path of its mount included) without
/// following a link. `rootfs` is the sandbox's root on the host, the binds' targets are in it.
pub(crate) fn bind_on_volumes(
    dir: &Path,
    rootfs: &Path,
    mounts: &[VolumeMount],
    files: &[&MountedFile],
    owner: Option<(u32, u32)>,
    volume_dir: impl Fn(&str) -> Result<PathBuf, String>,
) -> Result<Vec<(PathBuf, PathBuf, bool)>, String> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    check(mounts, files.iter().copied())?;
    let store = dir.join("files");
    std::fs::create_dir(&store).map_err(|error| format!("cannot create {}: {error}", store.display()))?;
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700))
        .map_err(|error| format!("cannot protect {}: {error}", store.display()))?;
    give(&store, owner)?;
    let mut ordered: Vec<&MountedFile> = files.to_vec();
    ordered.sort_by_key(|file| components(&file.path).len());
    let mut binds = Vec::with_capacity(ordered.len());
    for (n, file) in ordered.into_iter().enumerate() {
        let Some((mount, relative)) = volume_over(mounts, &file.path)? else {
            return Err(format!("mounted file {}: under no volume's mount path", file.path));
        };
        let volume = volume_dir(&mount.volume)?;
        let mut inside: Vec<&str> = components(&mount.sub_path);
        inside.extend(relative);
        make_mount_point(&volume, &inside, owner)
            .map_err(|problem| format!("mounted file {} on volume {:?}: {problem}", file.path, mount.volume))?;
        let source = store.join(n.to_string());
        let mut written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&source)
            .map_err(|error| format!("cannot create {}: {error}", source.display()))?;
        written.write_all(&file.content).map_err(|error| format!("cannot write {}: {error}", source.display()))?;
        give(&source, owner)?;
        binds.push((source, rootfs.join(file.path.trim_start_matches('/')), false));
    }
    Ok(binds)
}

fn give(path: &Path, owner: Option<(u32, u32)>) -> Result<(), String> {
    match owner {
        Some((uid, gid)) => std::os::unix::fs::lchown(path, Some(uid), Some(gid))
            .map_err(|error| format!("cannot give the sandbox {}: {error}", path.display())),
        None => Ok(()),
    }
}

const BENEATH: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dir, name, flags, mode)` resolved beneath `dir` through no link at all.
fn open_beneath(dir: RawFd, name: &str, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<OwnedFd> {
    let name = CString::new(name).map_err(std::io::Error::other)?;
    let how =
        OpenHow { flags: (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64, mode: u64::from(mode), resolve: BENEATH };
    loop {
        // SAFETY: the name is a valid C string and `how` a correctly sized open_how.
        let fd = unsafe {
            libc::syscall(libc::SYS_openat2, dir, name.as_ptr(), &how as *const OpenHow, std::mem::size_of::<OpenHow>())
        };
        if fd >= 0 {
            // SAFETY: a non-negative result is a new descriptor we own.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    }
}

/// The type bits of what `fd` is.
fn file_type(fd: &OwnedFd) -> std::io::Result<libc::mode_t> {
    // SAFETY: fstat fills the zeroed stat for a descriptor we own.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut stat) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stat.st_mode & libc::S_IFMT)
    }
}

/// Gives what `fd` is to the sandbox's root user, where that is not us.
fn give_fd(fd: &OwnedFd, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    let Some((uid, gid)) = owner else { return Ok(()) };
    // SAFETY: an empty path with AT_EMPTY_PATH acts on the descriptor itself.
    if unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `parts` (directories, then a file) inside `volume` as mount point for a file: each
/// directory made if missing (0755), the file made empty if missing (0644), both given to the
/// sandbox's root; a link anywhere on the way, or something else than a directory (a file at the
/// end) where one is wanted, is refused.
fn make_mount_point(volume: &Path, parts: &[&str], owner: Option<(u32, u32)>) -> Result<(), String> {
    let Some((name, parents)) = parts.split_last() else {
        return Err("no path inside the volume".to_owned());
    };
    let root = CString::new(volume.as_os_str().as_encoded_bytes()).map_err(|error| error.to_string())?;
    // SAFETY: a valid C string; the volume's directory is the host's (made by the executor).
    let fd =
        unsafe { libc::open(root.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!("cannot open {}: {}", volume.display(), std::io::Error::last_os_error()));
    }
    // SAFETY: a non-negative result is a new descriptor we own.
    let mut current = unsafe { OwnedFd::from_raw_fd(fd) };
    let open_existing = |dir: &OwnedFd, name: &str, what: &str| -> Result<Option<(OwnedFd, libc::mode_t)>, String> {
        match open_beneath(dir.as_raw_fd(), name, libc::O_PATH, 0) {
            Ok(fd) => {
                let kind = file_type(&fd).map_err(|error| format!("cannot inspect {what}: {error}"))?;
                if kind == libc::S_IFLNK {
                    return Err(format!("{what} is a link, which is not followed"));
                }
                Ok(Some((fd, kind)))
            }
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(error) => Err(format!("cannot open {what}: {error}")),
        }
    };
    for (depth, part) in parents.iter().enumerate() {
        let what = parts[..=depth].join("/");
        let name = CString::new(*part).map_err(|error| error.to_string())?;
        // SAFETY: a valid C string relative to a directory descriptor we own.
        let made = unsafe { libc::mkdirat(current.as_raw_fd(), name.as_ptr(), 0o755) } == 0;
        if !made {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EEXIST) {
                return Err(format!("cannot create {what}: {error}"));
            }
        }
        match open_existing(&current, part, &what)? {
            Some((next, libc::S_IFDIR)) => {
                if made {
                    give_fd(&next, owner).map_err(|error| format!("cannot give the sandbox {what}: {error}"))?;
                }
                current = next;
            }
            Some(_) => return Err(format!("{what} is not a directory")),
            None => return Err(format!("{what} went away while it was made")),
        }
    }
    let what = parts.join("/");
    match open_existing(&current, name, &what)? {
        Some((_, libc::S_IFREG)) => Ok(()),
        Some(_) => Err(format!("{what} is there and is not a regular file")),
        None => {
            let flags = libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NONBLOCK;
            let made = open_beneath(current.as_raw_fd(), name, flags, 0o644)
                .map_err(|error| format!("cannot create {what}: {error}"))?;
            give_fd(&made, owner).map_err(|error| format!("cannot give the sandbox {what}: {error}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(volume: &str, path: &str, claim: Option<&str>) -> VolumeMount {
        VolumeMount {
            volume: volume.to_owned(),
            path: path.to_owned(),
            claim: claim.map(str::to_owned),
            ..VolumeMount::default()
        }
    }

    #[test]
    fn a_file_falls_under_the_deepest_mount_above_it() {
        let mounts = [mount("a", "/data", None), mount("b", "/data/deep/", None), mount("c", "/database", None)];
        let under = |path: &'static str| {
            volume_over(&mounts, path).unwrap().map(|(mount, relative)| (mount.volume.clone(), relative.join("/")))
        };
        assert_eq!(under("/data/x"), Some(("a".to_owned(), "x".to_owned())));
        assert_eq!(under("/data/deep/y/z"), Some(("b".to_owned(), "y/z".to_owned())));
        assert_eq!(under("/datab/x"), None, "a mount path is an ancestor by components, not by text");
        assert_eq!(under("/etc/x"), None);
        assert!(volume_over(&mounts, "/data/deep").unwrap_err().contains("volume \"b\" is mounted there"));
        let claimed = [mount("c", "/shared", Some("o/c/n/x"))];
        let file = MountedFile { path: "/shared/conf/a.yaml".to_owned(), content: Vec::new() };
        assert!(check(&claimed, [&file]).unwrap_err().contains("a claim's"));
    }

    #[test]
    fn a_mount_point_is_made_inside_the_volume_and_never_through_a_link() {
        let base = tempfile::tempdir().unwrap();
        let volume = base.path().join("volume");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(&volume).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        make_mount_point(&volume, &["conf", "app", "settings.yaml"], None).unwrap();
        assert!(volume.join("conf/app/settings.yaml").is_file());
        // Again: what is there is used.
        make_mount_point(&volume, &["conf", "app", "settings.yaml"], None).unwrap();
        // Links the volume holds (as a restored snapshot may): refused, nothing made outside.
        std::os::unix::fs::symlink(&outside, volume.join("away")).unwrap();
        let error = make_mount_point(&volume, &["away", "x"], None).unwrap_err();
        assert!(error.contains("away is a link"), "{error}");
        std::os::unix::fs::symlink("../outside/f", volume.join("file-link")).unwrap();
        let error = make_mount_point(&volume, &["file-link"], None).unwrap_err();
        assert!(error.contains("file-link is a link"), "{error}");
        assert!(!outside.join("f").exists() && !outside.join("x").exists(), "nothing is made through a link");
        std::fs::create_dir(volume.join("dir")).unwrap();
        assert!(make_mount_point(&volume, &["dir"], None).unwrap_err().contains("not a regular file"));
        std::fs::write(volume.join("plain"), b"x").unwrap();
        assert!(make_mount_point(&volume, &["plain", "y"], None).unwrap_err().contains("not a directory"));
    }
}
