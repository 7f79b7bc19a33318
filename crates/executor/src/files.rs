//! Reading and writing files as a sandbox's processes see them.
//!
//! A namespaced or image sandbox's file is opened by a file helper (`crate::file_helper`) with
//! the sandbox's own credentials in its own mount namespace; what is here reads or writes the
//! descriptor it sends back, checking first that it is a regular file. In plain mode (which
//! isolates nothing) paths are resolved here with `openat2(RESOLVE_IN_ROOT)` from the host's
//! `/`, with the emulator's rights.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use crate::error::FileError;
use crate::sys::open_in_root;

/// Turns a sandbox path into one relative to the sandbox's root.
pub(crate) fn resolve(path: &str, working_dir: &str) -> Result<String, FileError> {
    if path.is_empty() {
        return Err(FileError::InvalidPath("the path is empty".into()));
    }
    if path.contains('\0') {
        return Err(FileError::InvalidPath("the path contains a NUL byte".into()));
    }
    let absolute =
        if path.starts_with('/') { path.to_owned() } else { format!("{}/{}", working_dir.trim_end_matches('/'), path) };
    Ok(absolute)
}

fn c_path(path: &str) -> Result<CString, FileError> {
    CString::new(path).map_err(|_| FileError::InvalidPath("the path contains a NUL byte".into()))
}

/// Creates the missing parent directories of `path` (an absolute path).
fn create_parents(root: &OwnedFd, path: &str) -> Result<(), FileError> {
    let Some((parent, _)) = path.rsplit_once('/') else {
        return Ok(());
    };
    let mut prefix = String::new();
    for component in parent.split('/').filter(|component| !component.is_empty()) {
        let base = open_in_root(
            root.as_raw_fd(),
            &c_path(if prefix.is_empty() { "/" } else { &prefix })?,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|error| FileError::from_io(&error))?;
        prefix.push('/');
        prefix.push_str(component);
        let name = c_path(component)?;
        // SAFETY: mkdirat relative to a directory descriptor we own, with a valid name.
        let made = unsafe { libc::mkdirat(base.as_raw_fd(), name.as_ptr(), 0o755) };
        if made != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EEXIST) {
                return Err(FileError::from_io(&error));
            }
        }
    }
    Ok(())
}

/// Plain mode: writes a whole regular file at `path` of the host. Anything else at the path (a
/// FIFO, a device, a socket) is refused without blocking: opening is non-blocking, and nothing
/// is written before the file is known to be a regular one.
pub(crate) fn write(root: &OwnedFd, path: &str, content: &[u8]) -> Result<(), FileError> {
    create_parents(root, path)?;
    let fd = open_in_root(root.as_raw_fd(), &c_path(path)?, libc::O_WRONLY | libc::O_CREAT | libc::O_NONBLOCK, 0o644)
        .map_err(|error| match error.raw_os_error() {
        // A FIFO nobody reads.
        Some(libc::ENXIO) => not_regular(None),
        _ => FileError::from_io(&error),
    })?;
    write_opened(fd, content)
}

/// Replaces the content of the file open for writing at `fd`, if it is a regular file.
pub(crate) fn write_opened(fd: OwnedFd, content: &[u8]) -> Result<(), FileError> {
    let mut file = File::from(fd);
    let metadata = file.metadata().map_err(|error| FileError::from_io(&error))?;
    if !metadata.is_file() {
        return Err(not_regular(Some(metadata.mode())));
    }
    file.set_len(0).map_err(|error| FileError::from_io(&error))?;
    file.write_all(content).map_err(|error| FileError::from_io(&error))?;
    file.flush().map_err(|error| FileError::from_io(&error))
}

pub(crate) fn not_regular(mode: Option<u32>) -> FileError {
    let kind = match mode.map(|mode| mode & libc::S_IFMT) {
        None | Some(libc::S_IFIFO) => "a FIFO",
        Some(libc::S_IFCHR) => "a character device",
        Some(libc::S_IFBLK) => "a block device",
        Some(libc::S_IFSOCK) => "a socket",
        Some(libc::S_IFDIR) => "a directory",
        Some(_) => "not a file",
    };
    FileError::NotRegular { kind }
}

/// Plain mode: reads a whole regular file at `path` of the host.
pub(crate) fn read(root: &OwnedFd, path: &str, max: u64) -> Result<Vec<u8>, FileError> {
    // O_NONBLOCK so that opening a FIFO does not wait for a writer.
    let fd = open_in_root(root.as_raw_fd(), &c_path(path)?, libc::O_RDONLY | libc::O_NONBLOCK, 0)
        .map_err(|error| FileError::from_io(&error))?;
    read_opened(fd, max)
}

/// Reads the whole file open at `fd`, if it is a regular file of at most `max` bytes.
pub(crate) fn read_opened(fd: OwnedFd, max: u64) -> Result<Vec<u8>, FileError> {
    let file = File::from(fd);
    let metadata = file.metadata().map_err(|error| FileError::from_io(&error))?;
    if metadata.is_dir() {
        return Err(FileError::IsDirectory);
    }
    if !metadata.is_file() {
        return Err(not_regular(Some(metadata.mode())));
    }
    if metadata.len() > max {
        return Err(FileError::TooLarge { size: metadata.len(), max });
    }
    // The file may grow while we read (and /proc files report size 0): read at
    // most one byte past the limit to notice.
    let mut content = Vec::with_capacity(metadata.len() as usize);
    file.take(max.saturating_add(1)).read_to_end(&mut content).map_err(|error| FileError::from_io(&error))?;
    if content.len() as u64 > max {
        return Err(FileError::TooLarge { size: content.len() as u64, max });
    }
    Ok(content)
}

/// Whether `path` is a directory inside the sandbox (for an exec's working directory).
pub(crate) fn is_directory(root: &OwnedFd, path: &str) -> Result<(), FileError> {
    open_in_root(root.as_raw_fd(), &c_path(path)?, libc::O_PATH | libc::O_DIRECTORY, 0)
        .map(drop)
        .map_err(|error| FileError::from_io(&error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_the_working_directory() {
        assert_eq!(resolve("a/b", "/work/").unwrap(), "/work/a/b");
        assert_eq!(resolve("/tmp/x", "/work").unwrap(), "/tmp/x");
        assert!(matches!(resolve("", "/work"), Err(FileError::InvalidPath(_))));
        assert!(matches!(resolve("a\0b", "/work"), Err(FileError::InvalidPath(_))));
    }
}
