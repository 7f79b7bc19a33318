//! File operations made as the sandbox's own processes would make them.
//!
//! The emulator runs as the host's root (or its own user): a file it opened by path on a
//! sandbox's behalf would be opened with the emulator's rights, so a root-only file in the
//! sandbox's view (a host file bound read-only, say `/etc/shadow`, or one reached through a link
//! the sandbox planted) would be read for any API caller although no process of the sandbox
//! may read it. Instead, kubelet-style (`kubectl cp` runs `tar` in the container), each
//! operation opens its file in a *file helper*: a process the zygote forks, which joins the
//! sandbox's user and mount namespaces, takes the sandbox's root as its own, becomes the user a
//! command exec'd in that container runs as, with that command's capabilities, and opens the
//! path as such a command would, the kernel resolving every link in the sandbox's view and
//! deciding access. It sends the open descriptor back and exits; the emulator reads or writes
//! through the descriptor, which carries no more than that open gave.
//!
//! The helper never runs a program: it holds the zygote's few pages and its one request, is
//! not dumpable, and is in no namespace's process list but the host's, so nothing in the
//! sandbox can reach it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use libc::c_int;

use crate::activation::{Reader, put_bytes, put_ids};
use crate::error::FileError;
use crate::message_socket::MessageSocket;
use crate::sys::{
    self, clear_capabilities, close_fds_except, drop_bounding_set, errno, exit, limit_capabilities, switch_ids,
};
use crate::zygote::Zygote;

/// What the descriptor is opened for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileAccess {
    /// `O_RDONLY`.
    Read,
    /// `O_WRONLY | O_CREAT` (mode 0644 less the umask 022), missing parent directories made
    /// first (0755), all owned by the user the helper runs as.
    Write,
}

/// The namespaces of a running sandbox, opened when it started (while its process was known to
/// be the sandbox's, as its root was), for its file helpers to enter.
#[derive(Debug)]
pub(crate) struct SandboxNamespaces {
    pub(crate) mount: OwnedFd,
    /// `None` where the sandbox has no user namespace of its own (root where none can be made).
    pub(crate) user: Option<OwnedFd>,
}

impl SandboxNamespaces {
    /// Opens the namespaces of process `pid`: `own_user_namespace` says whether it has a user
    /// namespace of its own (else its user namespace is the emulator's, which cannot be joined
    /// again).
    pub(crate) fn open(pid: libc::pid_t, own_user_namespace: bool) -> io::Result<SandboxNamespaces> {
        let open = |name: &str| -> io::Result<OwnedFd> {
            let path = CString::new(format!("/proc/{pid}/ns/{name}")).map_err(io::Error::other)?;
            // SAFETY: a valid C string; the result is checked.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a non-negative result is a new descriptor we own.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        Ok(SandboxNamespaces { mount: open("mnt")?, user: if own_user_namespace { Some(open("user")?) } else { None } })
    }
}

/// One file helper's order: what to open, and as whom.
pub(crate) struct FileRequest {
    pub(crate) access: FileAccess,
    /// Absolute, as the sandbox sees it.
    pub(crate) path: String,
    /// The (uid, gid) of the sandbox's user namespace to become, as an exec'd command of the
    /// container would (`None`: keep the emulator's, which the namespace maps as they are).
    pub(crate) ids: Option<(u32, u32)>,
}

const READ_TAG: u8 = b'r';
const WRITE_TAG: u8 = b'w';
const OPENED: u8 = 0;
const FAILED: u8 = 1;

/// Longer paths are refused before a helper is forked (the kernel's `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

/// The largest order a helper reads.
const MAX_ORDER_BYTES: usize = MAX_PATH_BYTES + 64;

fn encode(request: &FileRequest, has_user_namespace: bool) -> Vec<u8> {
    let mut out = vec![match request.access {
        FileAccess::Read => READ_TAG,
        FileAccess::Write => WRITE_TAG,
    }];
    out.push(u8::from(has_user_namespace));
    put_ids(&mut out, request.ids);
    put_bytes(&mut out, request.path.as_bytes());
    out
}

struct Order {
    access: FileAccess,
    has_user_namespace: bool,
    ids: Option<(u32, u32)>,
    path: CString,
}

fn decode(bytes: &[u8]) -> Option<Order> {
    let mut reader = Reader(bytes);
    let access = match reader.byte()? {
        READ_TAG => FileAccess::Read,
        WRITE_TAG => FileAccess::Write,
        _ => return None,
    };
    let has_user_namespace = match reader.byte()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let ids = reader.ids()?;
    let path = reader.c_string()?;
    reader.0.is_empty().then_some(Order { access, has_user_namespace, ids, path })
}

/// Opens `request.path` in the sandbox whose root and namespaces these are, as its processes
/// would, through a helper the zygote forks. A helper still running when the returned future is
/// dropped is killed.
pub(crate) async fn open(
    zygote: &Zygote,
    root: &OwnedFd,
    namespaces: &SandboxNamespaces,
    request: &FileRequest,
) -> Result<OwnedFd, FileError> {
    if request.path.len() > MAX_PATH_BYTES {
        return Err(FileError::InvalidPath(format!("the path is longer than {MAX_PATH_BYTES} bytes")));
    }
    if request.path.contains('\0') {
        return Err(FileError::InvalidPath("the path contains a NUL byte".into()));
    }
    let order = encode(request, namespaces.user.is_some());
    let mut fds = vec![root.as_raw_fd(), namespaces.mount.as_raw_fd()];
    fds.extend(namespaces.user.as_ref().map(AsRawFd::as_raw_fd));
    let (helper, answers) = zygote.fork_file_helper(&order, &fds).await.map_err(|error| helper_failed(&error))?;
    // Killed if this future is dropped (the operation timed out) before the helper answered.
    let kill_on_drop = KillOnDrop(Some(sys::ProcessHandle::from_pidfd(helper.pid, helper.pidfd)));
    let answers = MessageSocket::new(answers).map_err(|error| helper_failed(&error))?;
    let mut buffer = [0u8; 16];
    let (length, mut received) = answers.receive(&mut buffer).await.map_err(|error| helper_failed(&error))?;
    drop(kill_on_drop.disarm());
    match (&buffer[..length], received.pop()) {
        ([OPENED], Some(fd)) if received.is_empty() => Ok(fd),
        ([FAILED, a, b, c, d], None) => Err(open_error(i32::from_le_bytes([*a, *b, *c, *d]))),
        // Gone without an answer (killed, or it could not enter the sandbox).
        ([], _) => Err(FileError::Io("the sandbox's file helper ended without an answer".into())),
        _ => Err(FileError::Io("the sandbox's file helper answered something else".into())),
    }
}

fn helper_failed(error: &io::Error) -> FileError {
    FileError::Io(format!("cannot run the sandbox's file helper: {error}"))
}

/// The error of a helper's open, as the API reports it: the caller's path, not the emulator.
fn open_error(errno: c_int) -> FileError {
    match errno {
        // A FIFO opened for writing that nobody reads.
        libc::ENXIO => FileError::NotRegular { kind: "a FIFO" },
        libc::ELOOP => FileError::InvalidPath("too many levels of symbolic links".into()),
        libc::ENAMETOOLONG => FileError::InvalidPath("a name in the path is too long".into()),
        libc::EXDEV => FileError::InvalidPath("the path leads out of the sandbox's view".into()),
        errno => FileError::from_io(&io::Error::from_raw_os_error(errno)),
    }
}

struct KillOnDrop(Option<sys::ProcessHandle>);

impl KillOnDrop {
    fn disarm(mut self) -> Option<sys::ProcessHandle> {
        self.0.take()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(helper) = &self.0 {
            helper.signal(libc::SIGKILL);
        }
    }
}

/// The forked helper: reads its order and descriptors (root, mount namespace, user namespace)
/// from `socket`, enters the sandbox, opens the file and answers. Never returns.
pub(crate) fn run(socket: OwnedFd) -> ! {
    sys::set_not_dumpable();
    let socket = socket.as_raw_fd();
    let mut buffer = vec![0u8; MAX_ORDER_BYTES];
    let Ok((length, fds)) = sys::receive_message(socket, &mut buffer, 0) else { exit(1) };
    let Some(order) = decode(&buffer[..length]) else { exit(1) };
    let expected = if order.has_user_namespace { 3 } else { 2 };
    if fds.len() != expected {
        exit(1);
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut keep = raw.clone();
    keep.push(socket);
    keep.sort_unstable();
    // Nothing of the zygote's (its socket to the emulator, its signal descriptor) comes along.
    close_fds_except(&keep);
    let answer = match enter(&order, &raw).and_then(|()| open_as_sandbox(&order)) {
        Ok(fd) => sys::send_message(socket, &[OPENED], &[fd], 0),
        Err(error) => {
            let mut message = vec![FAILED];
            message.extend_from_slice(&error.to_le_bytes());
            sys::send_message(socket, &message, &[], 0)
        }
    };
    exit(if answer.is_ok() { 0 } else { 1 })
}

/// Joins the sandbox's namespaces and root and becomes the container's user, with the
/// capabilities its exec'd commands have.
fn enter(order: &Order, fds: &[RawFd]) -> Result<(), c_int> {
    let (root, mount) = (fds[0], fds[1]);
    // SAFETY: setns, fchdir, chroot and chdir only change this (single-threaded) process.
    unsafe {
        if let Some(&user) = fds.get(2)
            && libc::setns(user, libc::CLONE_NEWUSER) != 0
        {
            return Err(errno());
        }
        if libc::setns(mount, libc::CLONE_NEWNS) != 0 {
            return Err(errno());
        }
        // The process's own root, not the namespace's: they are the same for a sandbox, and
        // the process's is the one its files are opened under.
        if libc::fchdir(root) != 0 || libc::chroot(c".".as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
            return Err(errno());
        }
    }
    drop_bounding_set()?;
    limit_capabilities()?;
    switch_ids(order.ids)?;
    // Switching from an id the namespace does not map (the host's root) to one it maps keeps
    // the capabilities, where `execve` as a user other than root would clear them: do so.
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        clear_capabilities()?;
    }
    // SAFETY: umask only changes this process.
    unsafe { libc::umask(0o022) };
    Ok(())
}

fn open_as_sandbox(order: &Order) -> Result<RawFd, c_int> {
    let flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let fd = match order.access {
        // SAFETY: a valid C string.
        FileAccess::Read => unsafe { libc::open(order.path.as_ptr(), libc::O_RDONLY | flags) },
        FileAccess::Write => {
            make_parents(&order.path)?;
            // SAFETY: a valid C string.
            unsafe { libc::open(order.path.as_ptr(), libc::O_WRONLY | libc::O_CREAT | flags, 0o644 as libc::c_uint) }
        }
    };
    if fd < 0 { Err(errno()) } else { Ok(fd) }
}

/// `mkdir -p` of the path's parent, as the sandbox's user.
fn make_parents(path: &std::ffi::CStr) -> Result<(), c_int> {
    let bytes = path.to_bytes();
    let Some(end) = bytes.iter().rposition(|&byte| byte == b'/') else { return Ok(()) };
    for (index, &byte) in bytes[..end].iter().enumerate() {
        if byte != b'/' || index == 0 {
            continue;
        }
        make_dir(&bytes[..index])?;
    }
    if end > 0 { make_dir(&bytes[..end]) } else { Ok(()) }
}

fn make_dir(prefix: &[u8]) -> Result<(), c_int> {
    if prefix.ends_with(b"/") {
        return Ok(());
    }
    let Ok(prefix) = CString::new(prefix) else { return Err(libc::EINVAL) };
    // SAFETY: a valid C string.
    if unsafe { libc::mkdir(prefix.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
        return Err(errno());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_round_trip_and_malformed_ones_are_refused() {
        let request = FileRequest { access: FileAccess::Write, path: "/tmp/a b".into(), ids: Some((1000, 100)) };
        let bytes = encode(&request, true);
        let order = decode(&bytes).unwrap();
        assert_eq!(
            (order.access, order.has_user_namespace, order.ids, order.path.as_bytes()),
            (FileAccess::Write, true, Some((1000, 100)), &b"/tmp/a b"[..])
        );
        for length in 0..bytes.len() {
            assert!(decode(&bytes[..length]).is_none(), "truncated to {length}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_none());
        let mut other = bytes;
        other[0] = b'x';
        assert!(decode(&other).is_none());
    }
}
