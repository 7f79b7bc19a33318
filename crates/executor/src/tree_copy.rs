//! Copies (and measures) a directory tree that a sandbox may be changing while it is read (a
//! scratch volume, for its snapshot or the kubelet's look at its use), without ever following a
//! link in it.
//!
//! `cp -a` run by the emulator (the host's root) walks the tree by path: a sandbox that swaps a
//! directory of its volume with a link to a host directory (`renameat2(RENAME_EXCHANGE)` in a
//! loop) between cp's look at the entry and its descent made cp copy host files into the
//! snapshot. Here every step is relative to a descriptor of the directory already opened, one
//! name at a time, with `O_NOFOLLOW`: a swapped name gives at worst another entry of the same
//! volume (or nothing), never a path outside it. What is copied is what was opened (its type
//! and attributes are read from the descriptor, not from an earlier look at the name).
//!
//! Kept: regular files (their content), directories, symbolic links (as links, never followed), FIFOs and
//! sockets; owners, modes (set-id bits included) and access and modification times; hard links
//! inside the tree. Not kept: extended attributes (file capabilities among them) and ACLs. A
//! device node is refused: no sandbox process may make one (its user namespace forbids it), so
//! one in a volume is not the sandbox's to snapshot. An entry that vanishes while the tree is
//! copied is left out, as any copy of a live file system may miss what changes under it.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use crate::sys::errno;

/// Deeper trees are refused (one descriptor is held per level).
const MAX_DEPTH: usize = 1024;

/// Copies the contents of directory `source` (and its own owner, mode and times) into the
/// existing empty directory `target`; returns the apparent size of what it copied (the sum of
/// each inode's size, once, as `du -s -b` counts it).
pub(crate) fn copy_tree(source: &Path, target: &Path) -> Result<u64, String> {
    let source_dir = open_dir_path(source)?;
    let target_dir = open_dir_path(target)?;
    let target_root = target_dir.try_clone().map_err(|error| error.to_string())?;
    let mut copier = Copier { target_root: Some(target_root), ..Copier::default() };
    let root = stat_fd(source_dir.as_raw_fd()).map_err(|error| format!("cannot read {}: {error}", source.display()))?;
    copier.count(&root);
    copier.copy_dir(&source_dir, &target_dir, &mut Vec::new(), 0)?;
    apply_attributes(target_dir.as_raw_fd(), &root).map_err(|error| format!("{}: {error}", target.display()))?;
    Ok(copier.bytes)
}

/// What directory `dir` and everything in it take on disk, in bytes: each inode's allocated
/// blocks once (`du -s -B1`, as the kubelet measures an `emptyDir`), links not followed. An entry
/// that vanishes, or a directory that cannot be read, while the tree is walked is left out.
pub(crate) fn disk_usage(dir: &Path) -> Result<u64, String> {
    let root = open_dir_path(dir)?;
    let stat = stat_fd(root.as_raw_fd()).map_err(|error| format!("cannot read {}: {error}", dir.display()))?;
    let mut usage = Usage::default();
    usage.count(&stat);
    usage.walk(&root, 0);
    Ok(usage.bytes)
}

#[derive(Default)]
struct Usage {
    /// Inodes counted in `bytes`.
    counted: std::collections::HashSet<(u64, u64)>,
    bytes: u64,
}

impl Usage {
    fn count(&mut self, stat: &libc::stat) {
        if self.counted.insert((stat.st_dev, stat.st_ino)) {
            let blocks = u64::try_from(stat.st_blocks).unwrap_or(0);
            self.bytes = self.bytes.saturating_add(blocks.saturating_mul(512));
        }
    }

    /// Counts what is in `dir`, one descriptor open per level (as the copy does).
    fn walk(&mut self, dir: &OwnedFd, depth: usize) {
        let Ok(names) = read_names(dir) else { return };
        for name in names {
            let Ok(stat) = stat_at(dir.as_raw_fd(), &name) else { continue };
            self.count(&stat);
            if stat.st_mode & libc::S_IFMT == libc::S_IFDIR && depth + 1 < MAX_DEPTH {
                let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
                if let Ok(child) = open_at(dir.as_raw_fd(), &name, flags, 0) {
                    self.walk(&child, depth + 1);
                }
            }
        }
    }
}

#[derive(Default)]
struct Copier {
    target_root: Option<OwnedFd>,
    /// The target path (relative to its root) of each multiply linked source inode copied.
    links: HashMap<(u64, u64), CString>,
    /// Inodes counted in `bytes`.
    counted: std::collections::HashSet<(u64, u64)>,
    bytes: u64,
}

impl Copier {
    fn count(&mut self, stat: &libc::stat) {
        if self.counted.insert((stat.st_dev, stat.st_ino)) {
            self.bytes = self.bytes.saturating_add(u64::try_from(stat.st_size).unwrap_or(0));
        }
    }

    /// Copies the entries of `source` into `target`; `relative` is their directory's path in
    /// the target tree (for hard links).
    fn copy_dir(
        &mut self,
        source: &OwnedFd,
        target: &OwnedFd,
        relative: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), String> {
        if depth >= MAX_DEPTH {
            return Err(format!("the tree is more than {MAX_DEPTH} directories deep"));
        }
        let names = read_names(source).map_err(|error| format!("cannot list {}: {error}", shown(relative)))?;
        for name in names {
            let length = relative.len();
            if !relative.is_empty() {
                relative.push(b'/');
            }
            relative.extend_from_slice(name.to_bytes());
            let copied = self.copy_entry(source, target, &name, relative, depth);
            relative.truncate(length);
            copied?;
        }
        Ok(())
    }

    fn copy_entry(
        &mut self,
        source: &OwnedFd,
        target: &OwnedFd,
        name: &CStr,
        relative: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), String> {
        let at = shown(relative);
        let error_at = |error: io::Error| format!("{at}: {error}");
        let Some(stat) = vanished_is_none(stat_at(source.as_raw_fd(), name)).map_err(error_at)? else { return Ok(()) };
        match stat.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
                // Swapped for a link or a file since the look: left out.
                let Some(child) = vanished_is_none(open_at(source.as_raw_fd(), name, flags, 0)).map_err(error_at)?
                else {
                    return Ok(());
                };
                let opened = stat_fd(child.as_raw_fd()).map_err(error_at)?;
                self.count(&opened);
                // SAFETY: mkdirat relative to a directory descriptor we own, with a valid name.
                if unsafe { libc::mkdirat(target.as_raw_fd(), name.as_ptr(), 0o700) } != 0 {
                    return Err(error_at(io::Error::last_os_error()));
                }
                let copy = open_at(target.as_raw_fd(), name, flags, 0).map_err(error_at)?;
                self.copy_dir(&child, &copy, relative, depth + 1)?;
                apply_attributes(copy.as_raw_fd(), &opened).map_err(error_at)
            }
            libc::S_IFREG => {
                let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
                let Some(file) = vanished_is_none(open_at(source.as_raw_fd(), name, flags, 0)).map_err(error_at)?
                else {
                    return Ok(());
                };
                let opened = stat_fd(file.as_raw_fd()).map_err(error_at)?;
                if opened.st_mode & libc::S_IFMT != libc::S_IFREG {
                    // Swapped for something else (a FIFO, say) since the look: left out.
                    return Ok(());
                }
                let key = (opened.st_dev, opened.st_ino);
                if opened.st_nlink > 1
                    && let Some(first) = self.links.get(&key)
                    && let Some(root) = &self.target_root
                {
                    // SAFETY: linkat within the target tree, which only the emulator writes.
                    if unsafe { libc::linkat(root.as_raw_fd(), first.as_ptr(), target.as_raw_fd(), name.as_ptr(), 0) }
                        != 0
                    {
                        return Err(error_at(io::Error::last_os_error()));
                    }
                    return Ok(());
                }
                self.count(&opened);
                let out_flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
                let copy = open_at(target.as_raw_fd(), name, out_flags, 0o600).map_err(error_at)?;
                let (mut from, mut to) = (File::from(file), File::from(copy));
                io::copy(&mut from, &mut to).map_err(error_at)?;
                apply_attributes(to.as_raw_fd(), &opened).map_err(error_at)?;
                if opened.st_nlink > 1 {
                    self.links.insert(key, CString::new(relative.clone()).map_err(|error| error.to_string())?);
                }
                Ok(())
            }
            libc::S_IFLNK => {
                let Some(content) = vanished_is_none(read_link_at(source.as_raw_fd(), name)).map_err(error_at)? else {
                    return Ok(());
                };
                self.count(&stat);
                // SAFETY: symlinkat relative to a directory descriptor we own, with valid strings.
                if unsafe { libc::symlinkat(content.as_ptr(), target.as_raw_fd(), name.as_ptr()) } != 0 {
                    return Err(error_at(io::Error::last_os_error()));
                }
                apply_attributes_at(target.as_raw_fd(), name, &stat, false).map_err(error_at)
            }
            kind @ (libc::S_IFIFO | libc::S_IFSOCK) => {
                self.count(&stat);
                // SAFETY: mknodat relative to a directory descriptor we own, with a valid name.
                if unsafe { libc::mknodat(target.as_raw_fd(), name.as_ptr(), kind | 0o600, 0) } != 0 {
                    return Err(error_at(io::Error::last_os_error()));
                }
                apply_attributes_at(target.as_raw_fd(), name, &stat, true).map_err(error_at)
            }
            _ => Err(format!("{at} is a device node: a snapshot keeps files, directories, links, FIFOs and sockets")),
        }
    }
}

fn shown(relative: &[u8]) -> String {
    if relative.is_empty() { "/".to_owned() } else { format!("/{}", String::from_utf8_lossy(relative)) }
}

/// `Ok(None)` for an entry that went away (or changed kind) between two steps.
fn vanished_is_none<T>(result: io::Result<T>) -> io::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if matches!(error.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)) => Ok(None),
        Err(error) => Err(error),
    }
}

fn open_dir_path(path: &Path) -> Result<OwnedFd, String> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|error| error.to_string())?;
    open_at(libc::AT_FDCWD, &c_path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC, 0)
        .map_err(|error| format!("cannot open {}: {error}", path.display()))
}

fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: openat with a valid name; the result is checked.
        let fd = unsafe { libc::openat(dir, name.as_ptr(), flags, libc::c_uint::from(mode)) };
        if fd >= 0 {
            // SAFETY: a non-negative result is a new descriptor we own.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if errno() != libc::EINTR {
            return Err(io::Error::last_os_error());
        }
    }
}

fn stat_at(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid buffer for fstatat to fill.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat with a valid name and buffer, not following a link.
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat)
}

fn stat_fd(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid buffer for fstat to fill.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of a descriptor we hold.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat)
}

fn read_link_at(dir: RawFd, name: &CStr) -> io::Result<CString> {
    let mut buffer = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: readlinkat into a buffer of the length given.
    let length = unsafe { libc::readlinkat(dir, name.as_ptr(), buffer.as_mut_ptr().cast(), buffer.len()) };
    if length < 0 {
        return Err(match errno() {
            // No longer a link (swapped since the look): as if it had vanished.
            libc::EINVAL => io::Error::from_raw_os_error(libc::ENOENT),
            _ => io::Error::last_os_error(),
        });
    }
    buffer.truncate(length as usize);
    CString::new(buffer).map_err(io::Error::other)
}

/// The names in directory `dir`, `.` and `..` left out.
fn read_names(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    // SAFETY: duplicating a descriptor we hold; fdopendir takes the copy over.
    let copy = unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` is an open directory descriptor we own and hand over.
    let stream = unsafe { libc::fdopendir(copy) };
    if stream.is_null() {
        let error = io::Error::last_os_error();
        // SAFETY: closing the copy fdopendir did not take.
        unsafe { libc::close(copy) };
        return Err(error);
    }
    let mut names = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; readdir reports errors only through it.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: a valid stream; the entry stays valid until the next call.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break if errno() == 0 { Ok(()) } else { Err(io::Error::last_os_error()) };
        }
        // SAFETY: d_name is a NUL-terminated name within the entry.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    };
    // SAFETY: closing the stream we opened (and the copy with it).
    unsafe { libc::closedir(stream) };
    result.map(|()| names)
}

fn times_of(stat: &libc::stat) -> [libc::timespec; 2] {
    [
        libc::timespec { tv_sec: stat.st_atime, tv_nsec: stat.st_atime_nsec },
        libc::timespec { tv_sec: stat.st_mtime, tv_nsec: stat.st_mtime_nsec },
    ]
}

/// Gives the open copy `fd` the owner, mode and times of `stat` (owner first: a change of owner
/// clears the set-id bits).
fn apply_attributes(fd: RawFd, stat: &libc::stat) -> io::Result<()> {
    // SAFETY: fchown, fchmod and futimens on a descriptor we hold.
    unsafe {
        if libc::fchown(fd, stat.st_uid, stat.st_gid) != 0 && !not_ours_to_give(errno()) {
            return Err(io::Error::last_os_error());
        }
        if libc::fchmod(fd, stat.st_mode & 0o7777) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::futimens(fd, times_of(stat).as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// [`apply_attributes`] for an entry that cannot be opened (a link, a FIFO, a socket), by name
/// in `dir`; a link has no mode of its own.
fn apply_attributes_at(dir: RawFd, name: &CStr, stat: &libc::stat, with_mode: bool) -> io::Result<()> {
    // SAFETY: *at calls relative to a directory descriptor we own, never following a link (the
    // entry was just made by us, in a tree only the emulator writes).
    unsafe {
        if libc::fchownat(dir, name.as_ptr(), stat.st_uid, stat.st_gid, libc::AT_SYMLINK_NOFOLLOW) != 0
            && !not_ours_to_give(errno())
        {
            return Err(io::Error::last_os_error());
        }
        if with_mode && libc::fchmodat(dir, name.as_ptr(), stat.st_mode & 0o7777, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::utimensat(dir, name.as_ptr(), times_of(stat).as_ptr(), libc::AT_SYMLINK_NOFOLLOW) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// An unprivileged emulator cannot give files away; its sandboxes' files are all its own.
fn not_ours_to_give(errno: libc::c_int) -> bool {
    errno == libc::EPERM && crate::sys::current_uid() != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn disk_usage_counts_blocks_once_per_inode_and_follows_no_link() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![7u8; 1 << 20]).unwrap();
        let volume = tempfile::tempdir().unwrap();
        let v = volume.path();
        let empty = disk_usage(v).unwrap();
        std::fs::create_dir_all(v.join("a/b")).unwrap();
        std::fs::write(v.join("a/b/data"), vec![1u8; 256 << 10]).unwrap();
        std::fs::hard_link(v.join("a/b/data"), v.join("twin")).unwrap();
        std::os::unix::fs::symlink(outside.path(), v.join("escape")).unwrap();
        // A sparse file takes next to nothing on disk, whatever its apparent size.
        std::fs::File::create(v.join("sparse")).unwrap().set_len(1 << 30).unwrap();
        let used = disk_usage(v).unwrap();
        let data_blocks = std::fs::metadata(v.join("a/b/data")).unwrap().blocks() * 512;
        assert!(data_blocks >= 256 << 10, "{data_blocks}");
        assert!(used >= empty + data_blocks, "{used} against {empty} + {data_blocks}");
        assert!(
            used < empty + data_blocks + (256 << 10),
            "the hard link, the link's target and the hole are not counted: {used}"
        );
        assert!(disk_usage(&v.join("escape")).is_err(), "a link as the volume itself is not followed");
    }

    #[test]
    fn a_tree_is_copied_with_its_links_modes_and_hard_links_and_no_link_is_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("host-only"), b"host").unwrap();
        let source = tempfile::tempdir().unwrap();
        let s = source.path();
        std::fs::create_dir_all(s.join("a/b")).unwrap();
        std::fs::write(s.join("a/b/file"), b"content").unwrap();
        std::fs::set_permissions(s.join("a/b/file"), std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::hard_link(s.join("a/b/file"), s.join("a/twin")).unwrap();
        std::os::unix::fs::symlink(outside.path(), s.join("escape")).unwrap();
        std::os::unix::fs::symlink("../escape/host-only", s.join("a/relative")).unwrap();
        let fifo = CString::new(s.join("pipe").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o620) }, 0);
        std::fs::set_permissions(s.join("pipe"), std::fs::Permissions::from_mode(0o620)).unwrap();
        let target = tempfile::tempdir().unwrap();
        let t = target.path();
        let size = copy_tree(s, t).unwrap();
        assert!(size >= 7, "{size}");
        assert_eq!(std::fs::read(t.join("a/b/file")).unwrap(), b"content");
        assert_eq!(std::fs::metadata(t.join("a/b/file")).unwrap().mode() & 0o7777, 0o640);
        assert_eq!(
            std::fs::metadata(t.join("a/twin")).unwrap().ino(),
            std::fs::metadata(t.join("a/b/file")).unwrap().ino()
        );
        assert_eq!(std::fs::read_link(t.join("escape")).unwrap(), outside.path());
        assert!(std::fs::symlink_metadata(t.join("escape")).unwrap().file_type().is_symlink());
        assert!(std::fs::symlink_metadata(t.join("a/relative")).unwrap().file_type().is_symlink());
        let pipe = std::fs::symlink_metadata(t.join("pipe")).unwrap();
        assert_eq!((pipe.mode() & libc::S_IFMT, pipe.mode() & 0o7777), (libc::S_IFIFO, 0o620));
        assert_eq!(
            std::fs::metadata(t.join("a/b")).unwrap().mtime(),
            std::fs::metadata(s.join("a/b")).unwrap().mtime(),
            "times are kept"
        );
        let mut found = Vec::new();
        let mut stack = vec![t.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    stack.push(entry.path());
                } else {
                    found.push(entry.file_name());
                }
            }
        }
        assert!(!found.iter().any(|name| name == "host-only"), "a link was followed: {found:?}");
    }
}
