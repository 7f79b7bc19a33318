//! Thin wrappers around the system calls the executor needs.
//!
//! Everything here that is marked "fork-safe" may run in a child forked from the
//! (multi-threaded) emulator before it execs or exits: such code may only make
//! async-signal-safe calls. These helpers therefore never allocate, never lock,
//! never log and never panic; they return raw errno values instead of `io::Error`
//! where a caller in a child needs them.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use libc::{c_char, c_int, c_long, pid_t};

/// The calling thread's `errno`. Fork-safe.
pub(crate) fn errno() -> c_int {
    // SAFETY: `__errno_location` always returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Forks without going through glibc's `fork()`. Fork-safe.
///
/// Our helpers fork a second time from a child that was itself forked from the
/// multi-threaded emulator. glibc's `fork()` takes the malloc arena locks before
/// forking; in such a child one of them may be held forever by a thread that no
/// longer exists, and `fork()` would deadlock. The raw `clone` system call with
/// only `SIGCHLD` behaves like `fork(2)` and touches no library state.
///
/// # Safety
/// The child shares nothing with the parent but runs on a copy of its memory: it
/// must only make async-signal-safe calls and must end in `execve` or `_exit`.
pub(crate) unsafe fn raw_fork() -> pid_t {
    // With a null stack pointer the child continues on a copy of the current stack,
    // exactly like fork(2). The argument order of the remaining (null) arguments
    // differs between architectures, which does not matter when all are zero.
    unsafe {
        libc::syscall(libc::SYS_clone, libc::SIGCHLD as c_long, 0 as c_long, 0 as c_long, 0 as c_long, 0 as c_long)
            as pid_t
    }
}

/// Blocks every signal for the calling thread. Fork-safe.
pub(crate) fn block_all_signals() {
    // SAFETY: a zeroed sigset_t is a valid argument to sigfillset, and the calls
    // only touch the local set and the thread's signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Unblocks every signal for the calling thread. Fork-safe.
pub(crate) fn unblock_all_signals() {
    // SAFETY: as in `block_all_signals`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Resets every signal disposition to the default. Fork-safe.
///
/// A child forked from the emulator inherits its handlers (tokio's SIGCHLD handler
/// writes to a descriptor that may have been closed and reused) and ignored signals,
/// which `execve` would carry over into the sandbox.
pub(crate) fn reset_signal_dispositions() {
    // Linux has 64 signals (NSIG is 65).
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: a zeroed sigaction with SIG_DFL is a valid disposition; invalid
        // signal numbers (those reserved by the C library) fail harmlessly.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Closes every descriptor except those in `keep` (sorted ascending). Fork-safe.
pub(crate) fn close_fds_except(keep: &[RawFd]) {
    let mut first: u32 = 0;
    for &fd in keep {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd > first {
            close_range(first, fd - 1);
        }
        first = fd.saturating_add(1);
    }
    close_range(first, u32::MAX);
}

fn close_range(first: u32, last: u32) {
    // SAFETY: close_range only closes descriptors of the calling process.
    let result = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0 as c_int) };
    if result == 0 {
        return;
    }
    // Kernels before 5.9 lack close_range: close one by one up to a sane bound.
    let last = last.min(65_535);
    for fd in first..=last {
        // SAFETY: closing a descriptor number we may not own is harmless in a child
        // that is about to exec or exit.
        unsafe { libc::close(fd as c_int) };
    }
}

/// Writes all of `data` to `fd`, retrying on EINTR. Fork-safe.
pub(crate) fn write_all(fd: RawFd, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        // SAFETY: the pointer and length describe a valid slice.
        let written = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if written < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return false;
        }
        if written == 0 {
            return false;
        }
        data = &data[written as usize..];
    }
    true
}

/// Ends the calling process at once, without running destructors. Fork-safe.
pub(crate) fn exit(code: c_int) -> ! {
    // SAFETY: _exit never returns and is async-signal-safe.
    unsafe { libc::_exit(code) }
}

pub(crate) fn unsafe_kill(pid: pid_t, signal: c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, signal) };
}

/// Asks the kernel to send `signal` when the parent thread dies, and reports whether
/// the parent is still `expected_parent`. Fork-safe.
///
/// The check closes the race where the parent died before the request was made.
pub(crate) fn set_parent_death_signal(signal: c_int, expected_parent: pid_t) -> bool {
    // SAFETY: prctl with PR_SET_PDEATHSIG only changes the calling process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0);
        libc::getppid() == expected_parent
    }
}

/// Names the calling thread (the `comm` shown by `ps` and `/proc/PID/comm`). Fork-safe.
pub(crate) fn set_name(name: &CStr) {
    // SAFETY: PR_SET_NAME reads at most 16 bytes from a valid C string.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// The exit code a shell would report for a wait status: the code itself, or 128+N
/// for a process killed by signal N. Fork-safe.
pub(crate) fn exit_code_of(status: c_int) -> c_int {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        255
    }
}

/// A signalfd that receives the usual termination and child signals. Fork-safe.
///
/// The caller must already have blocked these signals.
pub(crate) fn control_signalfd() -> Result<RawFd, c_int> {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in
            [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2]
        {
            libc::sigaddset(&mut set, signal);
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        if fd < 0 { Err(errno()) } else { Ok(fd) }
    }
}

/// Waits for the next signal on a signalfd and returns its number. Fork-safe.
pub(crate) fn next_signal(signalfd: RawFd) -> Option<c_int> {
    loop {
        // SAFETY: signalfd_siginfo is plain data and the buffer is large enough.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading into a local buffer of the right size.
        let read = unsafe { libc::read(signalfd, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
        if read == size as isize {
            return Some(info.ssi_signo as c_int);
        }
        if read < 0 && errno() == libc::EINTR {
            continue;
        }
        return None;
    }
}

/// Like `next_signal`, but gives up after `timeout_ms`. Fork-safe.
pub(crate) fn next_signal_timeout(signalfd: RawFd, timeout_ms: c_int) -> Option<c_int> {
    let mut poll = libc::pollfd { fd: signalfd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
    if ready == 1 { next_signal(signalfd) } else { None }
}

/// Whether the write end of the pipe whose read end is `fd` has been closed, i.e.
/// whether the process holding it is gone. Fork-safe.
pub(crate) fn peer_gone(fd: RawFd) -> bool {
    let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no waiting.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready == 1 && poll.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// A pipe whose both ends close on exec. Fork-safe.
pub(crate) fn pipe_cloexec() -> Result<(RawFd, RawFd), c_int> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0 { Ok((fds[0], fds[1])) } else { Err(errno()) }
}

/// A descriptor that refers to one process for as long as it is held, so signals
/// never reach a process that reused its pid.
#[derive(Debug)]
pub(crate) struct ProcessHandle {
    pid: pid_t,
    pidfd: Option<OwnedFd>,
}

impl ProcessHandle {
    /// A handle from a pidfd someone else opened for `pid` (the zygote, which forked it).
    pub(crate) fn from_pidfd(pid: pid_t, pidfd: OwnedFd) -> ProcessHandle {
        ProcessHandle { pid, pidfd: Some(pidfd) }
    }

    /// Opens a handle on `pid`, which must be an unreaped child of ours (so the pid
    /// cannot have been reused yet).
    pub(crate) fn open(pid: pid_t) -> ProcessHandle {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as c_int) };
        // Kernels before 5.3 lack pidfds: fall back to the pid, which stays valid
        // for as long as our waiter has not reaped the child.
        // SAFETY: a non-negative result is a descriptor we now own.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        ProcessHandle { pid, pidfd }
    }

    pub(crate) fn pid(&self) -> pid_t {
        self.pid
    }

    pub(crate) fn try_clone(&self) -> io::Result<ProcessHandle> {
        let pidfd = self.pidfd.as_ref().map(OwnedFd::try_clone).transpose()?;
        Ok(ProcessHandle { pid: self.pid, pidfd })
    }

    pub(crate) fn signal(&self, signal: c_int) {
        match &self.pidfd {
            // SAFETY: the descriptor is a pidfd we own; a null siginfo is allowed.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0 as c_int,
                );
            },
            // SAFETY: kill has no memory-safety preconditions.
            None => unsafe {
                libc::kill(self.pid, signal);
            },
        }
    }
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2` with `RESOLVE_IN_ROOT`: `path` is resolved as if `root` were `/`, so
/// absolute symbolic links inside a sandbox stay inside it.
pub(crate) fn open_in_root(root: RawFd, path: &CStr, flags: c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let how =
        OpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: u64::from(mode), resolve: libc::RESOLVE_IN_ROOT };
    loop {
        // SAFETY: the path is a valid C string and `how` is a correctly sized open_how.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root,
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a non-negative result is a new descriptor we own.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    }
}

/// Opens a directory (or anything) as an `O_PATH` descriptor, for use as a root.
pub(crate) fn open_path(path: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: the path is a valid C string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative result is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new pseudo-terminal: (master, slave), both close-on-exec. `master` is one opened on
/// a sandbox's own devpts (so the terminal exists inside it); `None` opens the host's.
pub(crate) fn open_pty(master: Option<OwnedFd>, cols: u16, rows: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    let master = match master {
        Some(master) => master,
        None => {
            // SAFETY: posix_openpt returns a new descriptor or -1.
            let master = unsafe { libc::posix_openpt(flags) };
            if master < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a non-negative result is a new descriptor we own.
            unsafe { OwnedFd::from_raw_fd(master) }
        }
    };
    // SAFETY: the master is a valid pty master.
    if unsafe { libc::unlockpt(master.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // TIOCGPTPEER opens the slave through the master, not by a path that would have to be
    // looked up in the right mount namespace.
    // SAFETY: the ioctl takes open flags and returns a new descriptor or -1.
    let slave = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if slave < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative result is a new descriptor we own.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    set_window_size(master.as_raw_fd(), cols, rows)?;
    Ok((master, slave))
}

/// Sets a terminal's size; the kernel then sends SIGWINCH to its foreground group.
pub(crate) fn set_window_size(fd: RawFd, cols: u16, rows: u16) -> io::Result<()> {
    let size = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one winsize.
    if unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

pub(crate) fn current_gid() -> u32 {
    // SAFETY: getegid has no preconditions.
    unsafe { libc::getegid() }
}

/// `mount(2)` with optional source, type and data. Fork-safe.
pub(crate) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), c_int> {
    let pointer = |value: Option<&CStr>| value.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is a valid C string or null, as mount(2) allows.
    let result = unsafe { libc::mount(pointer(source), target.as_ptr(), pointer(fstype), flags, pointer(data).cast()) };
    if result == 0 { Ok(()) } else { Err(errno()) }
}

/// Mounts a tmpfs of `size_bytes` at `path` (nosuid, nodev; mode 0777 and owned by `owner`,
/// the sandbox's root on the host, as an `emptyDir` is made). Needs CAP_SYS_ADMIN over the
/// mount namespace: a root emulator's.
pub(crate) fn mount_tmpfs(path: &std::path::Path, size_bytes: u64, owner: Option<(u32, u32)>) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let mut options = format!("size={size_bytes},mode=0777");
    if let Some((uid, gid)) = owner {
        options.push_str(&format!(",uid={uid},gid={gid}"));
    }
    let options = std::ffi::CString::new(options)?;
    mount(Some(c"tmpfs"), &target, Some(c"tmpfs"), libc::MS_NOSUID | libc::MS_NODEV, Some(&options))
        .map_err(io::Error::from_raw_os_error)
}

/// A path as an overlay option takes it: no `,` or `:` (they separate options and layers).
pub(crate) fn overlay_layer(path: &std::path::Path) -> Result<String, String> {
    let text = path.to_str().ok_or_else(|| format!("{} is not UTF-8", path.display()))?;
    if text.contains([',', ':']) {
        return Err(format!("{text} cannot be an overlay layer (it has a ',' or ':')"));
    }
    Ok(text.to_owned())
}

/// A read-only overlay's options: `upper` over `lower` (`lowerdir=UPPER:LOWER`).
pub(crate) fn overlay_read_only_options(
    upper: &std::path::Path,
    lower: &std::path::Path,
) -> io::Result<std::ffi::CString> {
    let options = format!(
        "lowerdir={}:{}",
        overlay_layer(upper).map_err(io::Error::other)?,
        overlay_layer(lower).map_err(io::Error::other)?
    );
    Ok(std::ffi::CString::new(options)?)
}

/// Mounts a read-only overlay of `upper` over `lower` at `path` (nosuid, nodev). Needs
/// CAP_SYS_ADMIN over the mount namespace.
pub(crate) fn mount_overlay_read_only(
    path: &std::path::Path,
    upper: &std::path::Path,
    lower: &std::path::Path,
) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let options = overlay_read_only_options(upper, lower)?;
    let target = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    mount(Some(c"overlay"), &target, Some(c"overlay"), flags, Some(&options)).map_err(io::Error::from_raw_os_error)
}

/// Detaches the mount at `path` (`umount2(MNT_DETACH | UMOUNT_NOFOLLOW)`): gone from the tree at
/// once, freed once nothing uses it.
pub(crate) fn unmount_detached(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Remounts the bind mount at `target` read-only, nosuid and nodev, keeping the flags a
/// less privileged mount namespace may not clear (noexec and the atime flags). Fork-safe.
pub(crate) fn remount_read_only(target: &CStr) -> Result<(), c_int> {
    // glibc's statvfs is statfs(2) plus a copy of its flags: no allocation, fork-safe.
    // SAFETY: a zeroed statvfs is a valid out-parameter.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-parameter.
    if unsafe { libc::statvfs(target.as_ptr(), &mut stat) } != 0 {
        return Err(errno());
    }
    let current = stat.f_flag as libc::c_ulong;
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    for (statfs_flag, mount_flag) in [
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if current & statfs_flag != 0 {
            flags |= mount_flag;
        }
    }
    mount(None, target, None, flags, None)
}

/// Makes the current directory the root of the mount namespace and detaches the old
/// root, so nothing of the host's mount tree is left to reach. Fork-safe.
pub(crate) fn pivot_root_here() -> Result<(), c_int> {
    // pivot_root(".", ".") stacks the old root on top of the new one at "/"; detaching
    // the top of that stack leaves only the new root (the trick runc uses, which needs no
    // directory for the old root inside the new one).
    // SAFETY: valid C strings.
    unsafe {
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0 {
            return Err(errno());
        }
        if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(errno());
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Marks the calling process as not dumpable: its memory, environment and descriptors in
/// `/proc` can then be read only by a process privileged over it. Fork-safe.
pub(crate) fn set_not_dumpable() {
    // SAFETY: prctl only changes the calling process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) };
}

/// Sets the scheduling policy of `pid` (0: the calling thread): `SCHED_IDLE`, which runs
/// only on a CPU nothing else wants, or back to the normal `SCHED_OTHER`. Leaving
/// `SCHED_IDLE` needs `CAP_SYS_NICE`. Fork-safe.
pub(crate) fn set_idle_scheduling(pid: pid_t, idle: bool) -> Result<(), c_int> {
    let param = libc::sched_param { sched_priority: 0 };
    let policy = if idle { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
    // SAFETY: a valid sched_param for a non-realtime policy.
    if unsafe { libc::sched_setscheduler(pid, policy, &param) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Re-arms the parent death signal, which the kernel clears whenever the credentials
/// change. Fork-safe.
pub(crate) fn rearm_parent_death_signal(signal: c_int) {
    // SAFETY: prctl only changes the calling process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) };
}

/// Capabilities a sandbox keeps: the default set of Docker and containerd (no
/// CAP_SYS_ADMIN, so nothing can be mounted or unmounted; no CAP_DAC_READ_SEARCH,
/// CAP_SYS_PTRACE or CAP_SYS_MODULE).
const KEPT_CAPABILITIES: &[c_int] = &[
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    5,  // CAP_KILL
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    8,  // CAP_SETPCAP
    10, // CAP_NET_BIND_SERVICE
    13, // CAP_NET_RAW
    18, // CAP_SYS_CHROOT
    27, // CAP_MKNOD
    29, // CAP_AUDIT_WRITE
    31, // CAP_SETFCAP
];

/// Drops every capability outside [`KEPT_CAPABILITIES`] from the bounding set, so no
/// later `execve` can grant it, and, with `switch_to`, switches to that (uid, gid) of the
/// user namespace (0: the sandbox's root, an unprivileged id on the host) without
/// supplementary groups. Fork-safe.
pub(crate) fn drop_privileges(switch_to: Option<(u32, u32)>) -> Result<(), c_int> {
    drop_bounding_set()?;
    switch_ids(switch_to)
}

/// Drops every capability outside [`KEPT_CAPABILITIES`] from the bounding set. Fork-safe.
pub(crate) fn drop_bounding_set() -> Result<(), c_int> {
    for capability in 0..64 {
        if KEPT_CAPABILITIES.contains(&capability) {
            continue;
        }
        // Dropping needs CAP_SETPCAP even for a capability already gone, which a process of a
        // sandbox whose init dropped the set may lack: only what is still there is dropped.
        // SAFETY: prctl only reads the calling process's bounding set.
        match unsafe { libc::prctl(libc::PR_CAPBSET_READ, capability as libc::c_ulong, 0, 0, 0) } {
            0 => continue,
            // Past the kernel's last capability (which PR_CAPBSET_DROP, without CAP_SETPCAP,
            // would not say).
            result if result < 0 => break,
            _ => {}
        }
        // SAFETY: prctl only changes the calling process.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability as libc::c_ulong, 0, 0, 0) } != 0 {
            match errno() {
                // Past the kernel's last capability.
                libc::EINVAL => break,
                error => return Err(error),
            }
        }
    }
    Ok(())
}

/// Switches to that (uid, gid) of the user namespace without supplementary groups; `None`
/// keeps the ids. Fork-safe.
pub(crate) fn switch_ids(switch_to: Option<(u32, u32)>) -> Result<(), c_int> {
    if let Some((uid, gid)) = switch_to {
        // SAFETY: plain credential system calls on the calling process. Switching to a uid other
        // than 0 clears the capabilities, as for a container's non-root user.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0 {
                return Err(errno());
            }
            if libc::setresgid(gid, gid, gid) != 0 {
                return Err(errno());
            }
            if libc::setresuid(uid, uid, uid) != 0 {
                return Err(errno());
            }
        }
    }
    Ok(())
}

/// Leaves the calling process only the capabilities of [`KEPT_CAPABILITIES`] it has, in its
/// effective and permitted sets (none inheritable): what it would have after an `execve`
/// with the bounding set [`drop_bounding_set`] leaves, without the `execve`. Lowering the
/// sets keeps the parent death signal (the kernel clears it only when they grow).
pub(crate) fn limit_capabilities() -> Result<(), c_int> {
    let mut kept = [0u32; 2];
    for &capability in KEPT_CAPABILITIES {
        kept[capability as usize / 32] |= 1 << (capability % 32);
    }
    keep_capabilities(kept)
}

/// Empties the effective, permitted and inheritable sets: what `execve` as a user other than
/// root leaves. Fork-safe.
pub(crate) fn clear_capabilities() -> Result<(), c_int> {
    keep_capabilities([0, 0])
}

/// Keeps only the capabilities of the `kept` mask (two 32-bit halves) in the effective and
/// permitted sets; the inheritable set is emptied.
fn keep_capabilities(kept: [u32; 2]) -> Result<(), c_int> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header { version: VERSION_3, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: capget fills two Data records for a version 3 header.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(errno());
    }
    for (half, kept) in data.iter_mut().zip(kept) {
        half.permitted &= kept;
        half.effective &= kept;
        half.inheritable = 0;
    }
    // SAFETY: capset reads two Data records for a version 3 header.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Formats a non-negative number as decimal digits into `buffer`, NUL-terminated, without
/// allocating. Fork-safe.
pub(crate) fn format_decimal(value: u32, buffer: &mut [u8; 16]) -> &CStr {
    let mut digits = [0u8; 10];
    let mut count = 0;
    let mut rest = value;
    loop {
        digits[count] = b'0' + (rest % 10) as u8;
        count += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for index in 0..count {
        buffer[index] = digits[count - 1 - index];
    }
    buffer[count] = 0;
    CStr::from_bytes_until_nul(&buffer[..]).unwrap_or(c"0")
}

/// Parses what [`format_decimal`] wrote. Fork-safe.
pub(crate) fn parse_decimal(text: &CStr) -> Option<u32> {
    let bytes = text.to_bytes();
    if bytes.is_empty() || bytes.len() > 10 {
        return None;
    }
    let mut value: u64 = 0;
    for &byte in bytes {
        if !byte.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u64::from(byte - b'0');
    }
    u32::try_from(value).ok()
}

/// Opens the running program's executable, to execute it as the zygote (and the probe's init).
pub(crate) fn open_own_executable() -> io::Result<OwnedFd> {
    // SAFETY: a valid C string; the result is checked.
    let fd = unsafe { libc::open(c"/proc/self/exe".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative result is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Executes the emulator's own binary (open at `self_exe`) with `argv` (NULL-terminated) and an
/// empty environment; returns only if that failed (`errno` says why). Fork-safe.
pub(crate) fn exec_self(self_exe: RawFd, argv: &[*const c_char]) {
    let envp = [std::ptr::null::<c_char>()];
    // SAFETY: argv and envp are NULL-terminated arrays of valid C strings.
    unsafe {
        libc::syscall(libc::SYS_execveat, self_exe, c"".as_ptr(), argv.as_ptr(), envp.as_ptr(), libc::AT_EMPTY_PATH)
    };
}

/// A TCP socket connected to `port` on this network namespace's loopback: `127.0.0.1`, then
/// `::1` where nothing listens there, each attempt bounded by `timeout_ms`. The errno of the last
/// failure otherwise.
pub(crate) fn connect_loopback(port: u16, timeout_ms: i64) -> Result<OwnedFd, c_int> {
    let v4 = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let v6 = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let timeout = std::time::Duration::from_millis(timeout_ms.max(1) as u64);
    let mut last = libc::ECONNREFUSED;
    for address in [v4, v6] {
        match std::net::TcpStream::connect_timeout(&address, timeout) {
            Ok(stream) => return Ok(OwnedFd::from(stream)),
            Err(error) => last = error.raw_os_error().unwrap_or(libc::ECONNREFUSED),
        }
    }
    Err(last)
}

/// Checks that `fd` is a stream socket of the internet families (what a TCP connection is).
pub(crate) fn check_tcp_socket(fd: RawFd) -> io::Result<()> {
    let option = |name: c_int| -> io::Result<c_int> {
        let mut value: c_int = 0;
        let mut length = std::mem::size_of::<c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `length` bytes into `value`.
        let result =
            unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, name, (&mut value as *mut c_int).cast(), &mut length) };
        if result != 0 { Err(io::Error::last_os_error()) } else { Ok(value) }
    };
    let kind = option(libc::SO_TYPE)?;
    let domain = option(libc::SO_DOMAIN)?;
    if kind != libc::SOCK_STREAM || !(domain == libc::AF_INET || domain == libc::AF_INET6) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a TCP socket"));
    }
    Ok(())
}

/// The most descriptors one message of [`send_message`] carries.
pub(crate) const MAX_MESSAGE_FDS: usize = 6;

/// A connected pair of `SOCK_SEQPACKET` sockets (message boundaries kept, descriptors
/// passed with `SCM_RIGHTS`), both close-on-exec.
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: socketpair writes two descriptors into the array.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends `data` as one message with up to [`MAX_MESSAGE_FDS`] descriptors attached.
/// `MSG_NOSIGNAL`: a closed peer is `EPIPE`, not a signal.
pub(crate) fn send_message(socket: RawFd, data: &[u8], fds: &[RawFd], flags: c_int) -> Result<(), c_int> {
    if fds.len() > MAX_MESSAGE_FDS {
        return Err(libc::EINVAL);
    }
    // u64s keep the control buffer aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    if !fds.is_empty() {
        let fd_bytes = std::mem::size_of_val(fds) as u32;
        header.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size; 6 descriptors fit in 64 bytes.
        header.msg_controllen = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
        // SAFETY: the control buffer is large enough for one header with `fds`, and
        // CMSG_FIRSTHDR/CMSG_DATA point into it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&header);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast::<RawFd>(), fds.len());
        }
    }
    loop {
        // SAFETY: the header describes valid buffers.
        let sent = unsafe { libc::sendmsg(socket, &header, flags | libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(());
        }
        if errno() != libc::EINTR {
            return Err(errno());
        }
    }
}

/// Receives one message into `buffer` and the descriptors that came with it (close-on-exec).
/// `Ok((0, []))` means the peer closed. A message or descriptor list larger than what was
/// room for is refused with `EMSGSIZE`, its descriptors closed.
pub(crate) fn receive_message(socket: RawFd, buffer: &mut [u8], flags: c_int) -> Result<(usize, Vec<OwnedFd>), c_int> {
    let mut control = [0u64; 8];
    let mut iov = libc::iovec { iov_base: buffer.as_mut_ptr().cast(), iov_len: buffer.len() };
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = std::mem::size_of_val(&control);
    let received = loop {
        // SAFETY: the header describes valid buffers.
        let received = unsafe { libc::recvmsg(socket, &mut header, flags | libc::MSG_CMSG_CLOEXEC) };
        if received >= 0 {
            break received as usize;
        }
        if errno() != libc::EINTR {
            return Err(errno());
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled the control buffer; the CMSG_* macros walk it within
    // msg_controllen, and each SCM_RIGHTS payload holds whole descriptors we now own.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for index in 0..payload / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(index).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    if header.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || fds.len() > MAX_MESSAGE_FDS {
        return Err(libc::EMSGSIZE);
    }
    Ok((received, fds))
}

/// Payloads up to this size travel in the message itself; larger ones in a sealed memfd attached
/// to it, since a socket message must fit its sender's buffer whole (`net.core.wmem_max` for a
/// process without `CAP_NET_ADMIN`, often 208 KiB).
pub(crate) const INLINE_PAYLOAD_BYTES: usize = 32 * 1024;

/// Room for an inline payload and its envelope.
pub(crate) const ENVELOPE_BUFFER_BYTES: usize = INLINE_PAYLOAD_BYTES + 16;

const INLINE_ENVELOPE: u8 = 0;
const MEMFD_ENVELOPE: u8 = 1;
const MEMFD_SEALS: c_int = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;

/// Wraps `payload` for sending: the message, and a memfd to attach last where the payload is
/// larger than [`INLINE_PAYLOAD_BYTES`].
pub(crate) fn envelope(payload: &[u8]) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    if payload.len() <= INLINE_PAYLOAD_BYTES {
        let mut message = Vec::with_capacity(payload.len() + 1);
        message.push(INLINE_ENVELOPE);
        message.extend_from_slice(payload);
        return Ok((message, None));
    }
    // SAFETY: a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"cwsandbox-message".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor we own.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    {
        use std::io::Write;
        let mut file = std::fs::File::from(memfd.try_clone()?);
        file.write_all(payload)?;
    }
    // Sealed, so the receiver reads exactly what was written, whatever the sender does later.
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, MEMFD_SEALS) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut message = vec![MEMFD_ENVELOPE];
    message.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    Ok((message, Some(memfd)))
}

/// The payload of a message [`envelope`] made; a memfd it came with is taken off the end of
/// `fds`. `None` for a malformed envelope, an unsealed memfd, or a payload over `max` bytes.
pub(crate) fn open_envelope(message: &[u8], fds: &mut Vec<OwnedFd>, max: usize) -> Option<Vec<u8>> {
    let (&kind, rest) = message.split_first()?;
    match kind {
        INLINE_ENVELOPE if rest.len() <= max => Some(rest.to_vec()),
        MEMFD_ENVELOPE => {
            let length = usize::try_from(u64::from_le_bytes(rest.try_into().ok()?)).ok()?;
            if length > max {
                return None;
            }
            let memfd = fds.pop()?;
            // SAFETY: fcntl on a descriptor we own.
            let seals = unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_GET_SEALS) };
            if seals < 0 || seals & MEMFD_SEALS != MEMFD_SEALS {
                return None;
            }
            let mut payload = vec![0u8; length];
            use std::os::unix::fs::FileExt;
            std::fs::File::from(memfd).read_exact_at(&mut payload, 0).ok()?;
            Some(payload)
        }
        _ => None,
    }
}

/// Makes `fd` non-blocking.
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller holds.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
