//! The code that runs in the processes the executor forks, between `fork` and
//! `exec` (or `_exit`).
//!
//! The emulator is multi-threaded, so a forked child may only make
//! async-signal-safe calls: everything a child needs (paths, argv, environment,
//! messages) is prepared as C strings in a plan *before* the fork, and the code
//! here only reads it and makes system calls. No allocation, no locks, no logging.
//!
//! The process tree of one sandbox:
//!
//! ```text
//! namespaces mode                              plain mode
//! emulator                                     emulator
//!  └─ zygote (the emulator's binary, exec'd)    └─ sandbox keeper (own process group,
//!     └─ sandbox keeper (new user?/uts/mnt ns,     │               child subreaper)
//!        │               parent of the pid ns)     └─ main command (own process group)
//!        └─ init, PID 1 of the new pid ns       └─ exec'd command (joins main's group)
//!           ├─ main command, PID 2
//!           └─ exec'd commands (forked by init on the emulator's order,
//!              see `crate::init_channel`)
//! ```
//!
//! The emulator signals a keeper through a pidfd and learns of its end from its parent (the
//! emulator itself in plain mode, the zygote otherwise). Death propagates downward with
//! `PR_SET_PDEATHSIG`. A keeper forked from the zygote runs this same code: the zygote is
//! single-threaded, so its children could do more, but the keeper's code is shared.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;

use libc::{c_char, c_int, pid_t};

#[cfg(test)]
use crate::sys::parse_decimal;
use crate::sys::{
    block_all_signals, close_fds_except, control_signalfd, drop_privileges, errno, exec_self, exit, exit_code_of,
    format_decimal, mount, next_signal, next_signal_timeout, peer_gone, pipe_cloexec, pivot_root_here, raw_fork,
    rearm_parent_death_signal, remount_read_only, reset_signal_dispositions, set_idle_scheduling, set_name,
    set_not_dumpable, set_parent_death_signal, switch_ids, unblock_all_signals, unsafe_kill, write_all,
};

/// One step of sandbox setup, reported back to the emulator when it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    Unshare = 1,
    SetGroups,
    GidMap,
    UidMap,
    Hostname,
    MountPrivate,
    MountRoot,
    MountHost,
    MountDevpts,
    Pipe,
    Fork,
    MountProc,
    PivotRoot,
    Credentials,
    ExecInit,
    Signalfd,
    Loopback,
}

impl Stage {
    const ALL: [Stage; 17] = [
        Stage::Unshare,
        Stage::SetGroups,
        Stage::GidMap,
        Stage::UidMap,
        Stage::Hostname,
        Stage::MountPrivate,
        Stage::MountRoot,
        Stage::MountHost,
        Stage::MountDevpts,
        Stage::Pipe,
        Stage::Fork,
        Stage::MountProc,
        Stage::PivotRoot,
        Stage::Credentials,
        Stage::ExecInit,
        Stage::Signalfd,
        Stage::Loopback,
    ];

    fn from_u8(value: u8) -> Option<Stage> {
        Stage::ALL.into_iter().find(|stage| *stage as u8 == value)
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Stage::Unshare => "unshare(user/uts/ipc/mount/pid namespaces)",
            Stage::SetGroups => "write /proc/self/setgroups",
            Stage::GidMap => "write the gid map",
            Stage::UidMap => "write the uid map",
            Stage::Hostname => "sethostname",
            Stage::MountPrivate => "make mounts private",
            Stage::MountRoot => "bind the sandbox's root directory",
            Stage::MountHost => "bind a host directory or device read-only",
            Stage::MountDevpts => "mount the sandbox's devpts",
            Stage::Pipe => "pipe",
            Stage::Fork => "fork",
            Stage::MountProc => "mount /proc for the pid namespace",
            Stage::PivotRoot => "pivot_root into the sandbox's root",
            Stage::Credentials => "drop capabilities and switch to the sandbox's root user",
            Stage::ExecInit => "execute the sandbox's init",
            Stage::Signalfd => "signalfd",
            Stage::Loopback => "bring up the loopback interface of the sandbox's network namespace",
        }
    }
}

/// What a child tells the emulator on the report pipe: fixed 6-byte records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReportMessage {
    /// Setup is complete; the value is the main process's pid in plain mode.
    Ready(pid_t),
    Failed(Stage, c_int),
}

const REPORT_LEN: usize = 6;

pub(crate) fn report(fd: RawFd, message: ReportMessage) {
    let (tag, stage, value) = match message {
        ReportMessage::Ready(pid) => (b'R', 0, pid),
        ReportMessage::Failed(stage, errno) => (b'E', stage as u8, errno),
    };
    let value = value.to_le_bytes();
    // Records are shorter than PIPE_BUF, so each write is atomic even when two
    // processes of the same sandbox report on the pipe.
    write_all(fd, &[tag, stage, value[0], value[1], value[2], value[3]]);
}

fn fail(fd: RawFd, stage: Stage, errno: c_int) -> ! {
    report(fd, ReportMessage::Failed(stage, errno));
    exit(1)
}

/// Decodes the records read from a report pipe, first message first.
pub(crate) fn parse_report(bytes: &[u8]) -> Vec<ReportMessage> {
    bytes
        .chunks_exact(REPORT_LEN)
        .filter_map(|record| {
            let value = i32::from_le_bytes([record[2], record[3], record[4], record[5]]);
            match record[0] {
                b'R' => Some(ReportMessage::Ready(value)),
                b'E' => Some(ReportMessage::Failed(Stage::from_u8(record[1])?, value)),
                _ => None,
            }
        })
        .collect()
}

/// How the ids of a sandbox's user namespace map to the host's.
pub(crate) enum IdMap {
    /// The emulator is unprivileged: its own uid and gid map to themselves (the only
    /// mapping it may write), written by the keeper from inside.
    Own { uid_map: CString, gid_map: CString },
    /// The emulator is root: the sandbox's ids 0..N map to an unused range of host ids,
    /// so the sandbox's root owns nothing of the host. Only a process outside the new
    /// namespace may write such a map: a helper forked before `unshare` does.
    Range { uid_map: CString, gid_map: CString },
}

/// A host path bound into the sandbox's root.
pub(crate) struct Bind {
    pub(crate) source: CString,
    pub(crate) target: CString,
    pub(crate) read_only: bool,
}

/// How to build a sandbox's namespaces and its root.
pub(crate) struct NsPlan {
    pub(crate) flags: c_int,
    /// `None`: no user namespace (root where none can be made).
    pub(crate) id_map: Option<IdMap>,
    pub(crate) hostname: CString,
    /// Host directory that becomes the sandbox's `/` (prepared by `rootfs`).
    pub(crate) rootfs: CString,
    /// Host directories and devices bound into it, in order.
    pub(crate) binds: Vec<Bind>,
    /// `<rootfs>/dev/pts`, `<rootfs>/proc` and `<rootfs>/proc/sys`.
    pub(crate) devpts: CString,
    pub(crate) proc_dir: CString,
    pub(crate) proc_sys: CString,
    /// The (uid, gid) of the user namespace the main command switches to, where it switches
    /// (a root emulator's sandboxes: their root, or the ids the spec asks for).
    pub(crate) main_ids: Option<(u32, u32)>,
}

impl NsPlan {
    /// What init switches to: uid and gid 0 of the user namespace for a root emulator's
    /// sandboxes, nothing otherwise. Init stays the sandbox's root whatever user the commands
    /// run as, so it can reap and signal them all.
    pub(crate) fn init_ids(&self) -> Option<(u32, u32)> {
        matches!(self.id_map, Some(IdMap::Range { .. })).then_some((0, 0))
    }
}

/// The main command, ready for `execve`.
pub(crate) struct Program {
    /// Paths to try in order (the `PATH` search is done before forking).
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    argv: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const c_char>,
    not_found: Vec<u8>,
    denied: Vec<u8>,
    failed: Vec<u8>,
    /// The program as the user wrote it, for those messages.
    display: String,
}

// SAFETY: the raw pointers point into the CStrings owned by the same value, which
// are never mutated or moved out while it lives; the value is only read.
unsafe impl Send for Program {}
// SAFETY: see above; shared reads of immutable data.
unsafe impl Sync for Program {}

impl Program {
    pub(crate) fn new(candidates: Vec<CString>, argv: Vec<CString>, envp: Vec<CString>, display: &str) -> Program {
        let argv_ptrs = argv.iter().map(|arg| arg.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        let envp_ptrs = envp.iter().map(|var| var.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        Program {
            candidates,
            _argv: argv,
            argv: argv_ptrs,
            _envp: envp,
            envp: envp_ptrs,
            not_found: format!("cwsandbox: {display}: command not found\n").into_bytes(),
            denied: format!("cwsandbox: {display}: permission denied\n").into_bytes(),
            failed: format!("cwsandbox: {display}: cannot execute\n").into_bytes(),
            display: display.to_owned(),
        }
    }

    /// What [`Program::new`] was made from, to send it to another process.
    pub(crate) fn command(&self) -> crate::activation::MainCommand {
        crate::activation::MainCommand {
            candidates: self.candidates.clone(),
            argv: self._argv.clone(),
            envp: self._envp.clone(),
            display: self.display.clone(),
        }
    }
}

/// Everything a sandbox keeper needs, prepared before the fork.
pub(crate) struct InitPlan {
    /// The emulator's pid, to detect that it died before the death signal was armed.
    pub(crate) parent: pid_t,
    pub(crate) report_fd: RawFd,
    /// The main command waits for one byte here before it runs: the emulator
    /// sends it once it holds its handles on the sandbox, so even a command that
    /// ends at once cannot take the namespaces away before they are opened.
    pub(crate) go_fd: RawFd,
    /// Close-on-exec: the emulator sees this pipe's end once the main command has
    /// exec'd (or given up), so `start` returns with the command running.
    pub(crate) started_fd: RawFd,
    /// Init's end of its channel with the emulator (`crate::init_channel`), over which
    /// commands are exec'd; -1 for none (plain mode, the probe).
    pub(crate) control_fd: RawFd,
    /// `None` runs the plain fallback.
    pub(crate) ns: Option<NsPlan>,
    /// The emulator's own executable, re-executed as the sandbox's init so that init holds
    /// none of the emulator's memory or environment.
    pub(crate) self_exe: RawFd,
    /// A throw-away sandbox that only checks the setup works: init starts no command.
    pub(crate) probe: bool,
    /// A sandbox made ahead of need: init re-executes at once and waits on `go_fd` for its
    /// [`crate::activation::Activation`], then starts the main command itself
    /// (`crate::init`); `cwd` and `program` are unused.
    pub(crate) warm: bool,
    /// The keeper and everything it forks run at idle priority (`SCHED_IDLE`) until the
    /// emulator raises them: for sandboxes made ahead of need, which must not take a CPU from
    /// work that is waited for.
    pub(crate) idle: bool,
    pub(crate) cwd: CString,
    pub(crate) cwd_message: Vec<u8>,
    /// `None` keeps the sandbox alive with an idle process.
    pub(crate) program: Option<Program>,
}

fn write_proc_file(path: &CStr, data: &[u8]) -> Result<(), c_int> {
    // SAFETY: valid C string; the descriptor is closed before returning.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let ok = write_all(fd, data);
        let error = errno();
        libc::close(fd);
        if ok { Ok(()) } else { Err(error) }
    }
}

/// Formats `/proc/<pid>/<name>` into `buffer` without allocating.
fn proc_pid_path<'a>(pid: pid_t, name: &[u8], buffer: &'a mut [u8; 64]) -> &'a CStr {
    let mut digits = [0u8; 16];
    let number = format_decimal(pid.unsigned_abs(), &mut digits).to_bytes();
    let mut length = 0;
    for part in [&b"/proc/"[..], number, b"/", name] {
        buffer[length..length + part.len()].copy_from_slice(part);
        length += part.len();
    }
    buffer[length] = 0;
    CStr::from_bytes_until_nul(&buffer[..]).unwrap_or(c"/proc/self")
}

/// Added to the id mapper's exit code when the uid map (not the gid map) failed.
const MAPPER_UID_FAILED: c_int = 128;

/// The helper that writes a root emulator's id maps for the keeper from outside the new
/// user namespace: it waits for one byte (the keeper has unshared), writes the maps and
/// exits with 0, or with the errno that failed ([`MAPPER_UID_FAILED`] added for the uid map).
/// An exit status has 8 bits: errnos (all below 128 that these writes give) fit beside the flag.
/// Never returns.
fn run_id_mapper(sync: RawFd, keeper: pid_t, uid_map: &CStr, gid_map: &CStr) -> ! {
    if !set_parent_death_signal(libc::SIGKILL, keeper) {
        exit(libc::ECANCELED);
    }
    let mut byte = [0u8; 1];
    loop {
        // SAFETY: reading one byte into a local buffer.
        let read = unsafe { libc::read(sync, byte.as_mut_ptr().cast(), 1) };
        if read == 1 {
            break;
        }
        if read < 0 && errno() == libc::EINTR {
            continue;
        }
        exit(libc::ECANCELED);
    }
    let mut buffer = [0u8; 64];
    if let Err(error) = write_proc_file(proc_pid_path(keeper, b"gid_map", &mut buffer), gid_map.to_bytes()) {
        exit(error.clamp(1, MAPPER_UID_FAILED - 1));
    }
    if let Err(error) = write_proc_file(proc_pid_path(keeper, b"uid_map", &mut buffer), uid_map.to_bytes()) {
        exit(MAPPER_UID_FAILED + error.clamp(1, MAPPER_UID_FAILED - 1));
    }
    exit(0)
}

/// Enters new namespaces and builds the sandbox's root: the id maps, the hostname,
/// private mount propagation, the root directory bound on itself, the host's
/// directories and devices bound read-only into it, and a devpts of its own. The pivot
/// into it is init's (it must mount `/proc` first, while a full procfs is still in view).
pub(crate) fn setup_namespaces(plan: &NsPlan) -> Result<(), (Stage, c_int)> {
    // A root emulator's maps are written by a helper that stays outside the namespace.
    let mapper = match &plan.id_map {
        Some(IdMap::Range { uid_map, gid_map }) => {
            let (sync_read, sync_write) = pipe_cloexec().map_err(|error| (Stage::Pipe, error))?;
            // SAFETY: getpid has no preconditions.
            let keeper = unsafe { libc::getpid() };
            // SAFETY: the child only makes fork-safe calls and exits.
            let pid = unsafe { raw_fork() };
            if pid < 0 {
                return Err((Stage::Fork, errno()));
            }
            if pid == 0 {
                run_id_mapper(sync_read, keeper, uid_map, gid_map);
            }
            // SAFETY: closing our copy of the helper's end.
            unsafe { libc::close(sync_read) };
            Some((pid, sync_write))
        }
        _ => None,
    };
    // SAFETY: unshare only changes the calling (single-threaded) process.
    if unsafe { libc::unshare(plan.flags) } != 0 {
        let error = errno();
        if let Some((pid, sync)) = mapper {
            // SAFETY: closing the pipe makes the helper give up; then reap it.
            unsafe {
                libc::close(sync);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        return Err((Stage::Unshare, error));
    }
    match (&plan.id_map, mapper) {
        (Some(IdMap::Own { uid_map, gid_map }), _) => {
            // An unprivileged process must give up setgroups before it may write gid_map.
            match write_proc_file(c"/proc/self/setgroups", b"deny") {
                Ok(()) | Err(libc::ENOENT) => {}
                Err(error) => return Err((Stage::SetGroups, error)),
            }
            write_proc_file(c"/proc/self/gid_map", gid_map.to_bytes()).map_err(|error| (Stage::GidMap, error))?;
            write_proc_file(c"/proc/self/uid_map", uid_map.to_bytes()).map_err(|error| (Stage::UidMap, error))?;
        }
        (Some(IdMap::Range { .. }), Some((pid, sync))) => {
            write_all(sync, b"m");
            let mut status = 0;
            // SAFETY: closing our end and reaping our own child.
            unsafe {
                libc::close(sync);
                libc::waitpid(pid, &mut status, 0);
            }
            let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { libc::ECHILD };
            if code != 0 {
                return Err(if code >= MAPPER_UID_FAILED {
                    (Stage::UidMap, code - MAPPER_UID_FAILED)
                } else {
                    (Stage::GidMap, code)
                });
            }
        }
        _ => {}
    }
    let hostname = plan.hostname.as_bytes();
    // SAFETY: pointer and length describe the hostname bytes.
    if unsafe { libc::sethostname(hostname.as_ptr().cast(), hostname.len()) } != 0 {
        return Err((Stage::Hostname, errno()));
    }
    if plan.flags & libc::CLONE_NEWNET != 0 {
        // A new network namespace has its loopback interface down: nothing, not even
        // 127.0.0.1, would answer inside.
        loopback_up().map_err(|error| (Stage::Loopback, error))?;
    }
    // Without this, our mounts could propagate back to the host's mount table.
    mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None).map_err(|error| (Stage::MountPrivate, error))?;
    // pivot_root needs the new root to be a mount point.
    mount(Some(&plan.rootfs), &plan.rootfs, None, libc::MS_BIND, None).map_err(|error| (Stage::MountRoot, error))?;
    for bind in &plan.binds {
        mount(Some(&bind.source), &bind.target, None, libc::MS_BIND | libc::MS_REC, None)
            .map_err(|error| (Stage::MountHost, error))?;
        if bind.read_only {
            remount_read_only(&bind.target).map_err(|error| (Stage::MountHost, error))?;
        }
    }
    // Terminals of the sandbox's own: the emulator opens exec ptys here, and the sandbox
    // cannot reach the host's (or another sandbox's) terminals.
    mount(
        Some(c"devpts"),
        &plan.devpts,
        Some(c"devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some(c"newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(|error| (Stage::MountDevpts, error))?;
    Ok(())
}

/// Sets `lo` of the caller's network namespace up (SIOCSIFFLAGS on a throw-away socket).
fn loopback_up() -> Result<(), c_int> {
    // SAFETY: socket has no memory preconditions.
    let socket = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if socket < 0 {
        return Err(errno());
    }
    // SAFETY: a zeroed ifreq is a valid request; the name is "lo" and a NUL.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    request.ifr_name[0] = b'l' as c_char;
    request.ifr_name[1] = b'o' as c_char;
    // SAFETY: the ioctls read and write the ifreq we own; the socket is ours to close.
    let result = unsafe {
        if libc::ioctl(socket, libc::SIOCGIFFLAGS as _, &mut request) != 0 {
            Err(errno())
        } else {
            request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(socket, libc::SIOCSIFFLAGS as _, &request) != 0 { Err(errno()) } else { Ok(()) }
        }
    };
    // SAFETY: closing our own socket.
    unsafe { libc::close(socket) };
    result
}

/// Mounts a procfs that shows the caller's pid namespace at `<rootfs>/proc` (the caller
/// must be inside it), with `/proc/sys` read-only, then pivots into the root.
fn enter_root(ns: &NsPlan) -> Result<(), (Stage, c_int)> {
    mount(Some(c"proc"), &ns.proc_dir, Some(c"proc"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)
        .map_err(|error| (Stage::MountProc, error))?;
    mount(Some(&ns.proc_sys), &ns.proc_sys, None, libc::MS_BIND, None)
        .and_then(|()| remount_read_only(&ns.proc_sys))
        .map_err(|error| (Stage::MountProc, error))?;
    // SAFETY: valid C string.
    if unsafe { libc::chdir(ns.rootfs.as_ptr()) } != 0 {
        return Err((Stage::PivotRoot, errno()));
    }
    pivot_root_here().map_err(|error| (Stage::PivotRoot, error))
}

/// The start of every keeper: a clean signal state, stderr joined to stdout (the
/// log pipe), its own process group (so a terminal's Ctrl-C to the emulator's group
/// does not reach sandboxes), and death with the emulator.
fn keeper_prologue(plan: &InitPlan, death_signal: c_int) {
    block_all_signals();
    reset_signal_dispositions();
    // SAFETY: plain descriptor and process-group calls.
    unsafe {
        libc::dup2(1, 2);
        libc::setpgid(0, 0);
    }
    if !set_parent_death_signal(death_signal, plan.parent) {
        exit(1);
    }
}

/// The sandbox keeper in namespaces mode. Never returns.
pub(crate) fn run_ns_keeper(plan: &InitPlan) -> ! {
    keeper_prologue(plan, libc::SIGKILL);
    if plan.idle {
        // Inherited by the id-map helper and init. If it cannot be had, the work runs at the
        // normal priority, which is only slower for others.
        let _ = set_idle_scheduling(0, true);
    }
    set_name(c"cwsandbox-ns");
    close_fds_except(&sorted_keep(plan));
    let Some(ns) = &plan.ns else { exit(1) };
    if let Err((stage, error)) = setup_namespaces(ns) {
        fail(plan.report_fd, stage, error);
    }
    let (life_read, life_write) = match pipe_cloexec() {
        Ok(pair) => pair,
        Err(error) => fail(plan.report_fd, Stage::Pipe, error),
    };
    // SAFETY: the child only runs fork-safe code (run_ns_init) and execs or exits.
    let init = unsafe { raw_fork() };
    if init < 0 {
        fail(plan.report_fd, Stage::Fork, errno());
    }
    if init == 0 {
        // SAFETY: closing our copy of the keeper's end of the lifeline.
        unsafe { libc::close(life_write) };
        run_ns_init(plan, ns, life_read);
    }
    // The keeper keeps only the lifeline: the report pipe and the log pipe must
    // close when the sandbox's own processes are done with them.
    close_fds_except(&[life_write]);
    let signals = match control_signalfd() {
        Ok(fd) => fd,
        Err(_) => {
            // SAFETY: kill/waitpid on our own child.
            unsafe {
                libc::kill(init, libc::SIGKILL);
                libc::waitpid(init, std::ptr::null_mut(), 0);
            }
            exit(1)
        }
    };
    loop {
        match next_signal(signals) {
            // The emulator asks for a graceful stop: init forwards it to everyone.
            Some(libc::SIGTERM) => unsafe_kill(init, libc::SIGTERM),
            // The emulator asks for an immediate kill: killing a pid namespace's
            // init kills every process in it, and init exits only once they are gone.
            Some(libc::SIGUSR1) => unsafe_kill(init, libc::SIGKILL),
            Some(libc::SIGCHLD) => {
                let mut status = 0;
                // SAFETY: waitpid on our own child with a valid status pointer.
                if unsafe { libc::waitpid(init, &mut status, libc::WNOHANG) } == init {
                    exit(exit_code_of(status));
                }
            }
            Some(_) => {}
            None => {
                unsafe_kill(init, libc::SIGKILL);
                exit(1);
            }
        }
    }
}

fn sorted_keep(plan: &InitPlan) -> [RawFd; 8] {
    // The pipes were created after stdio, so they are above 2 (or -1: none, which
    // `close_fds_except` passes over).
    let mut keep = [0, 1, 2, plan.report_fd, plan.go_fd, plan.started_fd, plan.control_fd, plan.self_exe];
    keep.sort_unstable();
    keep
}

/// PID 1 of the sandbox's pid namespace, before it becomes the sandbox's init: mounts
/// its /proc, pivots into the sandbox's root, starts the main command, drops its
/// privileges and re-executes the emulator's binary as a minimal init with an empty
/// environment (`crate::init`), so nothing of the emulator's memory stays in the
/// sandbox. Never returns.
fn run_ns_init(plan: &InitPlan, ns: &NsPlan, life_read: RawFd) -> ! {
    // SAFETY: prctl only changes the calling process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    // Our parent is outside the pid namespace (getppid() says 0), so the lifeline
    // tells whether the keeper died before the death signal was armed.
    if peer_gone(life_read) {
        exit(1);
    }
    set_name(c"cwsandbox-init");
    set_not_dumpable();
    if let Err((stage, error)) = enter_root(ns) {
        fail(plan.report_fd, stage, error);
    }
    if plan.warm {
        exec_warm_init(plan, ns, life_read);
    }
    let main = if plan.probe {
        0
    } else {
        // SAFETY: the child only runs fork-safe code (run_main) and execs or exits.
        let main = unsafe { raw_fork() };
        if main < 0 {
            fail(plan.report_fd, Stage::Fork, errno());
        }
        if main == 0 {
            run_main(plan);
        }
        main
    };
    let give_up = |stage: Stage, error: c_int| -> ! {
        if main > 0 {
            unsafe_kill(main, libc::SIGKILL);
        }
        fail(plan.report_fd, stage, error)
    };
    if let Err(error) = drop_privileges(ns.init_ids()) {
        give_up(Stage::Credentials, error);
    }
    // Changing credentials cleared the death signal: arm it again, then make sure the
    // keeper did not die in between.
    rearm_parent_death_signal(libc::SIGKILL);
    if peer_gone(life_read) {
        give_up(Stage::Fork, libc::ECHILD);
    }
    if plan.self_exe < 0 {
        // Forked from the zygote: nothing of the emulator's to shed, so init runs here. All that
        // can fail for this sandbox's reasons is done: the emulator may let the main command go.
        report(plan.report_fd, ReportMessage::Ready(0));
        close_fds_except(&[0, 1, 2, plan.control_fd]);
        let control = (plan.control_fd >= 0).then_some(plan.control_fd);
        crate::process_title::retitle(INIT_TITLE);
        crate::init::run(None, main, control);
    }
    // Forked from the emulator: only the probe, which proves this path and has no channel. Init
    // executes the binary again to shed the emulator's memory; that init reports, on a copy of
    // the pipe that stays open across exec.
    if !plan.probe {
        give_up(Stage::ExecInit, libc::EINVAL);
    }
    // SAFETY: dup of a descriptor we hold; the copy is not close-on-exec.
    let report = unsafe { libc::dup(plan.report_fd) };
    if report < 0 {
        give_up(Stage::ExecInit, errno());
    }
    let mut report_digits = [0u8; 16];
    let mut main_digits = [0u8; 16];
    let argv = [
        c"cwsandbox-init".as_ptr(),
        crate::init::INIT_MAGIC.as_ptr(),
        format_decimal(report as u32, &mut report_digits).as_ptr(),
        format_decimal(main as u32, &mut main_digits).as_ptr(),
        std::ptr::null(),
    ];
    exec_self(plan.self_exe, &argv);
    give_up(Stage::ExecInit, errno())
}

/// Init of a warm sandbox: becomes the namespace's root and waits at once, before any process
/// of the sandbox exists, for its activation on the go pipe. The bounding set stays whole, so
/// init can set the hostname the activation brings; it drops what a sandbox must not have
/// before the main command runs. Never returns.
fn exec_warm_init(plan: &InitPlan, ns: &NsPlan, life_read: RawFd) -> ! {
    // Only a process forked from the zygote may run init in place: one forked from the
    // emulator holds its memory. Warm sandboxes are the zygote's.
    if plan.self_exe >= 0 {
        fail(plan.report_fd, Stage::ExecInit, libc::EINVAL);
    }
    if let Err(error) = switch_ids(ns.init_ids()) {
        fail(plan.report_fd, Stage::Credentials, error);
    }
    rearm_parent_death_signal(libc::SIGKILL);
    if peer_gone(life_read) {
        exit(1);
    }
    let mut keep = [0, 1, 2, plan.report_fd, plan.go_fd, plan.started_fd, plan.control_fd];
    keep.sort_unstable();
    close_fds_except(&keep);
    let control = (plan.control_fd >= 0).then_some(plan.control_fd);
    crate::process_title::retitle(INIT_TITLE);
    crate::init::run_warm(plan.report_fd, plan.go_fd, plan.started_fd, control)
}

/// The command line of an init that runs in place, as a re-executed one's begins.
const INIT_TITLE: &[u8] = b"cwsandbox-init\0--cwsandbox-init-v1\0";

/// Kills what is left of the namespace, reaps it, and exits with the main command's code.
pub(crate) fn end_namespace(main_status: c_int) -> ! {
    unsafe_kill(-1, libc::SIGKILL);
    loop {
        // SAFETY: waitpid with a null status pointer.
        let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) };
        if pid < 0 && errno() != libc::EINTR {
            break;
        }
    }
    exit(exit_code_of(main_status))
}

/// The sandbox keeper in plain mode. Never returns.
pub(crate) fn run_plain_keeper(plan: &InitPlan) -> ! {
    // SIGUSR2 rather than SIGKILL: the keeper must outlive the emulator long enough
    // to kill the sandbox's process group.
    keeper_prologue(plan, libc::SIGUSR2);
    // SAFETY: prctl only changes the calling process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    set_name(c"cwsandbox-init");
    close_fds_except(&sorted_keep(plan));
    let signals = match control_signalfd() {
        Ok(fd) => fd,
        Err(error) => fail(plan.report_fd, Stage::Signalfd, error),
    };
    // SAFETY: getpid has no preconditions.
    let keeper = unsafe { libc::getpid() };
    // SAFETY: the child only runs fork-safe code (run_main) and execs or exits.
    let main = unsafe { raw_fork() };
    if main < 0 {
        fail(plan.report_fd, Stage::Fork, errno());
    }
    if main == 0 {
        // SAFETY: setpgid on ourselves.
        unsafe { libc::setpgid(0, 0) };
        if !set_parent_death_signal(libc::SIGKILL, keeper) {
            exit(1);
        }
        run_main(plan);
    }
    // Both sides set the group, so it exists before anyone is told the pid.
    // SAFETY: setpgid on our child.
    unsafe { libc::setpgid(main, main) };
    report(plan.report_fd, ReportMessage::Ready(main));
    close_fds_except(&[signals]);
    loop {
        match next_signal(signals) {
            Some(libc::SIGTERM) => unsafe_kill(-main, libc::SIGTERM),
            Some(libc::SIGUSR1) => unsafe_kill(-main, libc::SIGKILL),
            Some(libc::SIGUSR2) | None => {
                // The emulator is gone: take the sandbox with us.
                unsafe_kill(-main, libc::SIGKILL);
                exit(128 + libc::SIGKILL);
            }
            Some(libc::SIGCHLD) => {
                // Look at the main command without reaping it: while it is a zombie
                // its pid, which is also the group id, cannot be reused.
                // SAFETY: a zeroed siginfo_t is a valid out-parameter.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: waitid with a valid siginfo pointer.
                let peeked = unsafe {
                    libc::waitid(
                        libc::P_PID,
                        main as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                    )
                };
                // SAFETY: si_pid is valid for SIGCHLD-style siginfo filled by waitid.
                if peeked == 0 && unsafe { info.si_pid() } == main {
                    unsafe_kill(-main, libc::SIGKILL);
                    let mut status = 0;
                    // SAFETY: waitpid on our own child.
                    unsafe { libc::waitpid(main, &mut status, 0) };
                    end_group(main, status, signals);
                }
                // Reap orphans that were re-parented to us (we are a subreaper).
                loop {
                    let mut status = 0;
                    // SAFETY: waitpid with a valid status pointer.
                    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                    if pid <= 0 {
                        break;
                    }
                    if pid == main {
                        end_group(main, status, signals);
                    }
                }
            }
            Some(_) => {}
        }
    }
}

/// Kills the rest of the main command's group and waits (at most about five
/// seconds) until it is empty, then exits with the main command's code.
fn end_group(main: pid_t, main_status: c_int, signals: RawFd) -> ! {
    unsafe_kill(-main, libc::SIGKILL);
    for _ in 0..250 {
        loop {
            // SAFETY: waitpid with a null status pointer.
            if unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } <= 0 {
                break;
            }
        }
        // SAFETY: signal 0 only checks whether the group still has members.
        if unsafe { libc::kill(-main, 0) } != 0 {
            break;
        }
        next_signal_timeout(signals, 20);
    }
    exit(exit_code_of(main_status))
}

/// The main command's process: waits for the emulator's go, then [`exec_main`]. Never returns.
fn run_main(plan: &InitPlan) -> ! {
    // Until it execs, this process holds a copy of the emulator's memory.
    set_not_dumpable();
    let mut go = [0u8; 1];
    loop {
        // SAFETY: reading one byte into a local buffer.
        let read = unsafe { libc::read(plan.go_fd, go.as_mut_ptr().cast(), 1) };
        if read == 1 {
            break;
        }
        if read < 0 && errno() == libc::EINTR {
            continue;
        }
        // The emulator gave up on this sandbox.
        exit(127);
    }
    exec_main(&MainExec {
        started_fd: plan.started_fd,
        credentials: match &plan.ns {
            Some(ns) => Credentials::Drop(ns.main_ids),
            None => Credentials::Keep,
        },
        cwd: &plan.cwd,
        cwd_message: &plan.cwd_message,
        program: plan.program.as_ref(),
    })
}

/// What the main command's process needs once it may run.
pub(crate) struct MainExec<'a> {
    /// Close-on-exec; a byte written to it says the command could not start. -1 for an
    /// exec'd command, whose failure to start is its message on stderr and exit code 127.
    pub(crate) started_fd: RawFd,
    pub(crate) credentials: Credentials,
    pub(crate) cwd: &'a CStr,
    pub(crate) cwd_message: &'a [u8],
    /// `None` keeps the sandbox alive with an idle process.
    pub(crate) program: Option<&'a Program>,
}

pub(crate) enum Credentials {
    /// Plain mode: the emulator's own.
    Keep,
    /// Namespaces mode: the sandbox's capabilities, and these ids where it switches.
    Drop(Option<(u32, u32)>),
}

/// The message of a main command whose working directory cannot be entered.
pub(crate) fn cwd_message(cwd: &str) -> Vec<u8> {
    format!("cwsandbox: cannot enter the working directory {cwd}\n").into_bytes()
}

/// Enters the working directory and execs the main command. Fork-safe. Never returns.
pub(crate) fn exec_main(main: &MainExec) -> ! {
    // The ids were checked against the user namespace's map before the start, and init made
    // the same capability drop, so this cannot fail in practice; if it does, nothing runs.
    if let Credentials::Drop(ids) = main.credentials
        && drop_privileges(ids).is_err()
    {
        not_started(main.started_fd, b"cwsandbox: cannot drop the sandbox's privileges\n");
    }
    unblock_all_signals();
    // Keep only stdio: the sandbox's main command inherits nothing else of ours
    // (the started pipe closes on exec).
    let keep = [0, 1, 2, main.started_fd];
    close_fds_except(if main.started_fd > 2 { &keep } else { &keep[..3] });
    // SAFETY: valid C string.
    if unsafe { libc::chdir(main.cwd.as_ptr()) } != 0 {
        not_started(main.started_fd, main.cwd_message);
    }
    let Some(program) = main.program else {
        // The default keep-alive process, like `sleep infinity`, without depending
        // on the host having one. SIGTERM's default action ends it.
        set_name(c"cwsandbox-idle");
        // SAFETY: closing our end of the started pipe: we are "started".
        unsafe { libc::close(main.started_fd) };
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    };
    let mut worst = libc::ENOENT;
    for candidate in &program.candidates {
        // SAFETY: argv and envp are NULL-terminated arrays of valid C strings.
        unsafe { libc::execve(candidate.as_ptr(), program.argv.as_ptr(), program.envp.as_ptr()) };
        let error = errno();
        // As a shell does: a later "not found" does not hide an earlier "denied".
        if error != libc::ENOENT && error != libc::ENOTDIR {
            worst = error;
        }
    }
    let message = match worst {
        libc::ENOENT | libc::ENOTDIR => &program.not_found,
        libc::EACCES | libc::EPERM => &program.denied,
        _ => &program.failed,
    };
    not_started(main.started_fd, message)
}

/// Ends a main command that cannot start: `message` on stderr (its logs), exit code 127. A
/// byte on the started pipe tells the emulator, waiting on it, that no command runs: the pipe
/// would close on exec, and closes at exit too, so the byte is what tells the two apart.
/// Fork-safe.
pub(crate) fn not_started(started_fd: RawFd, message: &[u8]) -> ! {
    write_all(2, message);
    if started_fd >= 0 {
        write_all(started_fd, b"!");
    }
    exit(127)
}

/// `pre_exec` for a command run in a plain sandbox: it joins the main command's
/// process group, so stopping the sandbox reaches it.
pub(crate) fn exec_plain(parent: pid_t, group: pid_t, cwd: &CStr) -> io::Result<()> {
    reset_signal_dispositions();
    // SAFETY: setpgid on ourselves.
    if unsafe { libc::setpgid(0, group) } != 0 {
        return Err(io::Error::from_raw_os_error(errno()));
    }
    if !set_parent_death_signal(libc::SIGKILL, parent) {
        exit(1);
    }
    // SAFETY: valid C string.
    if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
        return Err(io::Error::from_raw_os_error(errno()));
    }
    unblock_all_signals();
    Ok(())
}

/// Checks that namespaces work here by building a throw-away sandbox with the same
/// steps as a real one: its root, the pivot, the privilege drop and the re-executed init,
/// which reports ready and exits. `plan.probe` must be set.
pub(crate) fn probe_namespaces(plan: &InitPlan, report_read: RawFd) -> Result<(), (Stage, c_int)> {
    // SAFETY: the child only runs fork-safe code and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err((Stage::Fork, errno()));
    }
    if pid == 0 {
        run_ns_keeper(plan);
    }
    // SAFETY: the write end belongs to the probe (the caller gave it up); closing our copy
    // lets EOF arrive when the child is done.
    unsafe { libc::close(plan.report_fd) };
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 64];
    loop {
        // SAFETY: reading into a local buffer.
        let read_len = unsafe { libc::read(report_read, buffer.as_mut_ptr().cast(), buffer.len()) };
        if read_len > 0 {
            bytes.extend_from_slice(&buffer[..read_len as usize]);
        } else if read_len == 0 || errno() != libc::EINTR {
            break;
        }
    }
    // SAFETY: reaping our child.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    match parse_report(&bytes).first() {
        Some(ReportMessage::Ready(_)) => Ok(()),
        Some(ReportMessage::Failed(stage, error)) => Err((*stage, *error)),
        None => Err((Stage::ExecInit, libc::ECHILD)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_records_round_trip() {
        let mut bytes = Vec::new();
        for message in [ReportMessage::Ready(42), ReportMessage::Failed(Stage::MountProc, libc::EPERM)] {
            let (tag, stage, value) = match message {
                ReportMessage::Ready(pid) => (b'R', 0, pid),
                ReportMessage::Failed(stage, errno) => (b'E', stage as u8, errno),
            };
            bytes.push(tag);
            bytes.push(stage);
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        assert_eq!(
            parse_report(&bytes),
            vec![ReportMessage::Ready(42), ReportMessage::Failed(Stage::MountProc, libc::EPERM)]
        );
    }

    #[test]
    fn proc_paths_are_formatted_without_allocation() {
        let mut buffer = [0u8; 64];
        assert_eq!(proc_pid_path(7, b"uid_map", &mut buffer), c"/proc/7/uid_map");
        assert_eq!(proc_pid_path(1234, b"gid_map", &mut buffer), c"/proc/1234/gid_map");
        let mut digits = [0u8; 16];
        assert_eq!(format_decimal(0, &mut digits), c"0");
        assert_eq!(parse_decimal(format_decimal(4_294_967_295, &mut digits)), Some(u32::MAX));
        assert_eq!(parse_decimal(c"12a"), None);
    }
}
