//! File system calls that stay inside a tree: every path is resolved with
//! `openat2(RESOLVE_IN_ROOT)` against the tree's root descriptor, so a symbolic link (absolute or
//! full of `..`) planted by an image resolves inside the tree as it would in the container, and
//! every change is made relative to a directory descriptor, never through a path the kernel
//! re-walks.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};

const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);
// openat2 with RESOLVE_IN_ROOT answers EAGAIN when a rename elsewhere raced the walk; the tree
// is ours alone while it is built, so a few retries are plenty.
const EAGAIN_RETRIES: usize = 8;

/// Opens the directory `path` itself (no link followed at its last component either).
pub(crate) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens `rel` (a clean relative path, see [`clean`]) inside `root`, symbolic links resolved as
/// if `root` were `/`.
pub(crate) fn open_in_root(root: impl AsFd, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(root.as_fd(), rel, flags | OFlags::CLOEXEC, Mode::empty(), RESOLVE) {
            Err(rustix::io::Errno::AGAIN) if tries < EAGAIN_RETRIES => tries += 1,
            other => return Ok(other?),
        }
    }
}

/// Opens the directory `rel` inside `root`.
pub(crate) fn open_dir_in_root(root: impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    open_in_root(root, rel, OFlags::RDONLY | OFlags::DIRECTORY)
}

/// Opens the directory `rel` inside `root`, making the missing ones (mode 0755, owned by the
/// caller: a layer's own entry for a directory sets its metadata). A component that exists but
/// is not a directory (nor a link to one) is an error, as a tar extraction would make it.
pub(crate) fn ensure_dir_in_root(root: impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    let root = root.as_fd();
    match open_dir_in_root(root, rel) {
        Err(e) if e.raw_os_error() == Some(libc_enoent()) => {}
        other => return other,
    }
    let (parent, name) = split(rel).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    let parent_fd = ensure_dir_in_root(root, parent)?;
    match rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    match open_dir_in_root(root, rel) {
        // It exists (mkdirat said so) yet cannot be opened: a link that leads nowhere.
        Err(e) if e.raw_os_error() == Some(libc_enoent()) => {
            Err(io::Error::other(format!("{} is a symbolic link to a missing directory", rel.display())))
        }
        other => other,
    }
}

fn libc_enoent() -> i32 {
    rustix::io::Errno::NOENT.raw_os_error()
}

/// Splits a clean relative path into its parent and last component; `None` for the root itself.
pub(crate) fn split(rel: &Path) -> Option<(&Path, &OsStr)> {
    let name = rel.file_name()?;
    Some((rel.parent().unwrap_or(Path::new("")), name))
}

/// A path from a layer made relative to the tree's root: `/` and `.` components dropped, `..`
/// applied lexically but never above the root (as containerd reads `../../etc/x`: `etc/x`). The
/// second value says whether a `..` was met, for the log.
pub(crate) fn clean(path: &Path) -> (PathBuf, bool) {
    let mut out = PathBuf::new();
    let mut dotdot = false;
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                dotdot = true;
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    (out, dotdot)
}

/// Whether `name` names an entry of a directory: not empty, not `.` or `..`, no `/` or NUL.
pub(crate) fn is_plain_name(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty() && bytes != b"." && bytes != b".." && !bytes.contains(&b'/') && !bytes.contains(&0)
}

/// Removes `name` in `dir` whatever it is, a directory with all it holds; links are removed,
/// never followed. Missing is fine. Only a plain name is accepted: `..` would open the parent of
/// `dir` (and empty it), `.` `dir` itself.
pub(crate) fn remove_all_at(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    if !is_plain_name(name) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to remove {:?}: not the name of an entry in its directory", name.to_string_lossy()),
        ));
    }
    let dir = dir.as_fd();
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(rustix::io::Errno::ISDIR) | Err(rustix::io::Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let child = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    empty_dir(&child)?;
    drop(child);
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes everything in the directory `dir`.
pub(crate) fn empty_dir(dir: impl AsFd) -> io::Result<()> {
    for name in list_dir(dir.as_fd())? {
        remove_all_at(dir.as_fd(), &name)?;
    }
    Ok(())
}

/// The names in the directory `dir` (without `.` and `..`), with their types.
pub(crate) fn list_dir_typed(dir: impl AsFd) -> io::Result<Vec<(std::ffi::OsString, FileType)>> {
    let mut names = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names.push((OsStr::from_bytes(name).to_os_string(), entry.file_type()));
    }
    Ok(names)
}

fn list_dir(dir: impl AsFd) -> io::Result<Vec<std::ffi::OsString>> {
    Ok(list_dir_typed(dir)?.into_iter().map(|(name, _)| name).collect())
}

/// Removes a whole tree by path, making its directories writable first where a read-only one
/// (`0555`, as images have) stops a caller that is not root.
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() != io::ErrorKind::PermissionDenied => return Err(e),
        Err(_) => {}
    }
    if let Ok(fd) = open_root(path) {
        make_dirs_writable(&fd)?;
    }
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Walks by descriptor, never following a link: a tree's link to a host directory is not chmodded.
fn make_dirs_writable(dir: &OwnedFd) -> io::Result<()> {
    rustix::fs::fchmod(dir, Mode::from_raw_mode(0o700))?;
    for (name, kind) in list_dir_typed(dir)? {
        if kind == FileType::Directory {
            let child = rustix::fs::openat(
                dir,
                &name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            make_dirs_writable(&child)?;
        }
    }
    Ok(())
}

/// Reads a small file of the tree (`etc/passwd`), links resolved inside it; at most `max` bytes.
pub(crate) fn read_in_root(root: &Path, rel: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let root_fd = open_root(root)?;
    let fd = open_in_root(&root_fd, rel, OFlags::RDONLY | OFlags::NONBLOCK)?;
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(io::Error::other(format!("{} is not a regular file", rel.display())));
    }
    let mut data = Vec::new();
    std::fs::File::from(fd).take(max).read_to_end(&mut data)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_paths_are_cleaned_into_the_root() {
        for (input, want, dotdot) in [
            ("./etc/passwd", "etc/passwd", false),
            ("/etc/passwd", "etc/passwd", false),
            ("etc/./x/", "etc/x", false),
            ("../x", "x", true),
            ("a/../../../../etc/x", "etc/x", true),
            ("./", "", false),
        ] {
            assert_eq!(clean(Path::new(input)), (PathBuf::from(want), dotdot), "{input}");
        }
    }

    #[test]
    fn links_resolve_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink("/", root.join("up")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("away")).unwrap();
        let root_fd = open_root(&root).unwrap();
        // `up/etc` is the tree's own etc, made there.
        ensure_dir_in_root(&root_fd, Path::new("up/etc")).unwrap();
        assert!(root.join("etc").is_dir());
        // `away` names a host directory: inside the tree it leads nowhere, and nothing is made.
        let err = ensure_dir_in_root(&root_fd, Path::new("away/x")).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
