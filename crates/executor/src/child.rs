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
//!  └─ sandbox keeper  (new user?/uts/mnt ns,    └─ sandbox keeper (own process group,
//!     │                parent of the pid ns)       │               child subreaper)
//!     └─ init, PID 1 of the new pid ns             └─ main command (own process group)
//!        └─ main command, PID 2
//!  └─ exec shim (joins the namespaces)          └─ exec'd command (joins main's group)
//!     └─ exec'd command (in the pid ns)
//! ```
//!
//! The keeper is the emulator's child, so the emulator waits for and signals only
//! its own unreaped children. Death propagates downward with `PR_SET_PDEATHSIG`.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};

use libc::{c_char, c_int, pid_t};

use crate::sys::{
    block_all_signals, close_fds_except, control_signalfd, errno, exit, exit_code_of, next_signal,
    next_signal_timeout, peer_gone, pipe_cloexec, raw_fork, reset_signal_dispositions, set_name,
    set_parent_death_signal, unblock_all_signals, write_all,
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
    MountTmp,
    OpenWorkdir,
    MountWorkdir,
    Pipe,
    Fork,
    MountProc,
    Signalfd,
}

impl Stage {
    fn from_u8(value: u8) -> Option<Stage> {
        const ALL: [Stage; 13] = [
            Stage::Unshare,
            Stage::SetGroups,
            Stage::GidMap,
            Stage::UidMap,
            Stage::Hostname,
            Stage::MountPrivate,
            Stage::MountTmp,
            Stage::OpenWorkdir,
            Stage::MountWorkdir,
            Stage::Pipe,
            Stage::Fork,
            Stage::MountProc,
            Stage::Signalfd,
        ];
        ALL.into_iter().find(|stage| *stage as u8 == value)
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Stage::Unshare => "unshare(user/uts/mount/pid namespaces)",
            Stage::SetGroups => "write /proc/self/setgroups",
            Stage::GidMap => "write /proc/self/gid_map",
            Stage::UidMap => "write /proc/self/uid_map",
            Stage::Hostname => "sethostname",
            Stage::MountPrivate => "make mounts private",
            Stage::MountTmp => "bind the private /tmp",
            Stage::OpenWorkdir => "open the private working directory",
            Stage::MountWorkdir => "bind the private working directory",
            Stage::Pipe => "pipe",
            Stage::Fork => "fork",
            Stage::MountProc => "mount /proc for the pid namespace",
            Stage::Signalfd => "signalfd",
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

fn report(fd: RawFd, message: ReportMessage) {
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

/// uid/gid maps for an unprivileged user namespace: the current ids map to themselves.
pub(crate) struct UserMaps {
    pub(crate) uid_map: CString,
    pub(crate) gid_map: CString,
}

/// How to build a sandbox's namespaces.
pub(crate) struct NsPlan {
    pub(crate) flags: c_int,
    pub(crate) user_maps: Option<UserMaps>,
    pub(crate) hostname: CString,
    /// Host directory bound on the sandbox's `/tmp`.
    pub(crate) tmp_source: CString,
    /// Host directory bound on the working directory, and where (inside).
    pub(crate) workdir_bind: Option<(CString, CString)>,
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
}

// SAFETY: the raw pointers point into the CStrings owned by the same value, which
// are never mutated or moved out while it lives; the value is only read.
unsafe impl Send for Program {}
// SAFETY: see above; shared reads of immutable data.
unsafe impl Sync for Program {}

impl Program {
    pub(crate) fn new(
        candidates: Vec<CString>,
        argv: Vec<CString>,
        envp: Vec<CString>,
        display: &str,
    ) -> Program {
        let argv_ptrs = argv
            .iter()
            .map(|arg| arg.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp_ptrs = envp
            .iter()
            .map(|var| var.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        Program {
            candidates,
            _argv: argv,
            argv: argv_ptrs,
            _envp: envp,
            envp: envp_ptrs,
            not_found: format!("cwsandbox: {display}: command not found\n").into_bytes(),
            denied: format!("cwsandbox: {display}: permission denied\n").into_bytes(),
            failed: format!("cwsandbox: {display}: cannot execute\n").into_bytes(),
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
    /// `None` runs the plain fallback.
    pub(crate) ns: Option<NsPlan>,
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

fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
) -> Result<(), c_int> {
    let source = source.map_or(std::ptr::null(), CStr::as_ptr);
    let fstype = fstype.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: all pointers are valid C strings or null, as mount(2) allows.
    if unsafe { libc::mount(source, target.as_ptr(), fstype, flags, std::ptr::null()) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Formats `/proc/self/fd/N` into `buffer` without allocating.
fn proc_fd_path(fd: RawFd, buffer: &mut [u8; 32]) -> &CStr {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buffer[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let mut count = 0;
    let mut value = fd.unsigned_abs();
    loop {
        digits[count] = b'0' + (value % 10) as u8;
        count += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for index in 0..count {
        buffer[PREFIX.len() + index] = digits[count - 1 - index];
    }
    buffer[PREFIX.len() + count] = 0;
    // The buffer holds exactly one NUL, written just above.
    CStr::from_bytes_until_nul(&buffer[..]).unwrap_or(c"/proc/self/fd")
}

/// Enters new namespaces and prepares the sandbox's view of the filesystem:
/// hostname, private mount propagation, private `/tmp` and working directory.
pub(crate) fn setup_namespaces(plan: &NsPlan) -> Result<(), (Stage, c_int)> {
    // SAFETY: unshare only changes the calling (single-threaded) process.
    if unsafe { libc::unshare(plan.flags) } != 0 {
        return Err((Stage::Unshare, errno()));
    }
    if let Some(maps) = &plan.user_maps {
        // An unprivileged process must give up setgroups before it may write gid_map.
        match write_proc_file(c"/proc/self/setgroups", b"deny") {
            Ok(()) | Err(libc::ENOENT) => {}
            Err(error) => return Err((Stage::SetGroups, error)),
        }
        write_proc_file(c"/proc/self/gid_map", maps.gid_map.as_bytes())
            .map_err(|error| (Stage::GidMap, error))?;
        write_proc_file(c"/proc/self/uid_map", maps.uid_map.as_bytes())
            .map_err(|error| (Stage::UidMap, error))?;
    }
    let hostname = plan.hostname.as_bytes();
    // SAFETY: pointer and length describe the hostname bytes.
    if unsafe { libc::sethostname(hostname.as_ptr().cast(), hostname.len()) } != 0 {
        return Err((Stage::Hostname, errno()));
    }
    // Without this, our binds could propagate back to the host's mount table.
    mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE)
        .map_err(|error| (Stage::MountPrivate, error))?;
    // The working directory's source is opened before /tmp is covered: when the
    // executor's root lies under /tmp, the path is hidden afterwards.
    let workdir_source = match &plan.workdir_bind {
        Some((source, _)) => {
            // SAFETY: valid C string.
            let fd = unsafe {
                libc::open(
                    source.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err((Stage::OpenWorkdir, errno()));
            }
            Some(fd)
        }
        None => None,
    };
    mount(
        Some(&plan.tmp_source),
        c"/tmp",
        None,
        libc::MS_BIND | libc::MS_REC,
    )
    .map_err(|error| (Stage::MountTmp, error))?;
    if let (Some(fd), Some((_, target))) = (workdir_source, &plan.workdir_bind) {
        let mut buffer = [0u8; 32];
        let source = proc_fd_path(fd, &mut buffer);
        mount(Some(source), target, None, libc::MS_BIND | libc::MS_REC)
            .map_err(|error| (Stage::MountWorkdir, error))?;
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// Mounts a procfs that shows the caller's pid namespace. Must run inside it.
fn mount_proc() -> Result<(), c_int> {
    mount(
        Some(c"proc"),
        c"/proc",
        Some(c"proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
    )
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
    // SAFETY: the child only runs fork-safe code (run_ns_init) and exits.
    let init = unsafe { raw_fork() };
    if init < 0 {
        fail(plan.report_fd, Stage::Fork, errno());
    }
    if init == 0 {
        // SAFETY: closing our copy of the keeper's end of the lifeline.
        unsafe { libc::close(life_write) };
        run_ns_init(plan, life_read);
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

fn unsafe_kill(pid: pid_t, signal: c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, signal) };
}

fn sorted_keep(plan: &InitPlan) -> [RawFd; 6] {
    // The pipes were created after stdio, so they are above 2.
    let mut keep = [0, 1, 2, plan.report_fd, plan.go_fd, plan.started_fd];
    keep.sort_unstable();
    keep
}

/// PID 1 of the sandbox's pid namespace: mounts its /proc, starts the main command,
/// reaps orphans, relays a stop to every process, and ends the sandbox when the
/// main command ends (as a container runtime does). Never returns.
fn run_ns_init(plan: &InitPlan, life_read: RawFd) -> ! {
    // SAFETY: prctl only changes the calling process.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    // Our parent is outside the pid namespace (getppid() says 0), so the lifeline
    // tells whether the keeper died before the death signal was armed.
    if peer_gone(life_read) {
        exit(1);
    }
    // SAFETY: closing our lifeline end; it is no longer needed.
    unsafe { libc::close(life_read) };
    set_name(c"cwsandbox-init");
    if let Err(error) = mount_proc() {
        fail(plan.report_fd, Stage::MountProc, error);
    }
    let signals = match control_signalfd() {
        Ok(fd) => fd,
        Err(error) => fail(plan.report_fd, Stage::Signalfd, error),
    };
    // SAFETY: the child only runs fork-safe code (run_main) and execs or exits.
    let main = unsafe { raw_fork() };
    if main < 0 {
        fail(plan.report_fd, Stage::Fork, errno());
    }
    if main == 0 {
        run_main(plan);
    }
    report(plan.report_fd, ReportMessage::Ready(0));
    close_fds_except(&[signals]);
    loop {
        match next_signal(signals) {
            // From PID 1, kill(-1) reaches every process of the namespace but itself.
            Some(libc::SIGTERM) => unsafe_kill(-1, libc::SIGTERM),
            Some(libc::SIGCHLD) => loop {
                let mut status = 0;
                // SAFETY: waitpid with a valid status pointer.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid <= 0 {
                    break;
                }
                if pid == main {
                    end_namespace(status);
                }
            },
            Some(_) => {}
            None => end_namespace(libc::SIGKILL),
        }
    }
}

/// Kills what is left of the namespace, reaps it, and exits with the main command's code.
fn end_namespace(main_status: c_int) -> ! {
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

/// The main command's process: enters the working directory and execs. Never returns.
fn run_main(plan: &InitPlan) -> ! {
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
    unblock_all_signals();
    // Keep only stdio: the sandbox's main command inherits nothing else of ours
    // (the started pipe closes on exec).
    close_fds_except(&[0, 1, 2, plan.started_fd.max(3)]);
    // SAFETY: valid C string.
    if unsafe { libc::chdir(plan.cwd.as_ptr()) } != 0 {
        write_all(2, &plan.cwd_message);
        write_all(plan.started_fd, b"!");
        exit(127);
    }
    let Some(program) = &plan.program else {
        // The default keep-alive process, like `sleep infinity`, without depending
        // on the host having one. SIGTERM's default action ends it.
        set_name(c"cwsandbox-idle");
        // SAFETY: closing our end of the started pipe: we are "started".
        unsafe { libc::close(plan.started_fd) };
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    };
    let mut worst = libc::ENOENT;
    for candidate in &program.candidates {
        // SAFETY: argv and envp are NULL-terminated arrays of valid C strings.
        unsafe {
            libc::execve(
                candidate.as_ptr(),
                program.argv.as_ptr(),
                program.envp.as_ptr(),
            )
        };
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
    write_all(2, message);
    // Tells the emulator, waiting on the started pipe, that no command runs: the pipe would
    // close on exec, and closes at exit too, so a byte is what tells the two apart.
    write_all(plan.started_fd, b"!");
    exit(127)
}

/// The namespaces an exec'd command joins, as open descriptors.
#[derive(Clone, Copy)]
pub(crate) struct NsFds {
    pub(crate) user: Option<RawFd>,
    pub(crate) mnt: RawFd,
    pub(crate) uts: RawFd,
    pub(crate) pid: RawFd,
}

/// `pre_exec` for a command run in a namespaced sandbox.
///
/// The forked process (the shim) joins the sandbox's namespaces; joining a pid
/// namespace only applies to children, so it forks once more. The grandchild
/// returns to std, which execs the command; the shim waits for it and exits with
/// its code, so the emulator's child handle reports the command's status.
pub(crate) fn exec_in_namespaces(
    parent: pid_t,
    ns: NsFds,
    cwd: &CStr,
    tty: bool,
) -> io::Result<()> {
    block_all_signals();
    reset_signal_dispositions();
    // SAFETY: setpgid on ourselves.
    unsafe { libc::setpgid(0, 0) };
    if !set_parent_death_signal(libc::SIGKILL, parent) {
        exit(1);
    }
    // The user namespace first: it grants the rights to join the others.
    let joins = [
        (ns.user, libc::CLONE_NEWUSER),
        (Some(ns.mnt), libc::CLONE_NEWNS),
        (Some(ns.uts), libc::CLONE_NEWUTS),
        (Some(ns.pid), libc::CLONE_NEWPID),
    ];
    for (fd, kind) in joins {
        if let Some(fd) = fd {
            // SAFETY: setns on a namespace descriptor we hold open.
            if unsafe { libc::setns(fd, kind) } != 0 {
                return Err(io::Error::from_raw_os_error(errno()));
            }
        }
    }
    let (life_read, life_write) = pipe_cloexec().map_err(io::Error::from_raw_os_error)?;
    // SAFETY: the child returns to std's pre-exec path, which only execs or exits.
    let command = unsafe { raw_fork() };
    if command < 0 {
        return Err(io::Error::from_raw_os_error(errno()));
    }
    if command == 0 {
        // SAFETY: plain descriptor and prctl calls on ourselves.
        unsafe {
            libc::close(life_write);
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
        }
        // The lifeline's read end closes on exec; until then it tells whether the
        // shim died before the death signal was armed.
        if peer_gone(life_read) {
            exit(1);
        }
        if tty {
            // A new session whose controlling terminal is the pty on stdin, so
            // job control and SIGWINCH work.
            // SAFETY: setsid and TIOCSCTTY on our own stdin.
            unsafe {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY, 0);
            }
        }
        // SAFETY: valid C string.
        if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
            return Err(io::Error::from_raw_os_error(errno()));
        }
        unblock_all_signals();
        return Ok(());
    }
    set_name(c"cwsandbox-exec");
    // The shim must not hold the command's pipes or std's exec-status socket:
    // they have to close when the command is done with them.
    close_fds_except(&[life_write]);
    // SIGTERM asks the shim to end the command and reap it before exiting. A shim
    // killed outright would orphan the command to a reaper outside the sandbox's
    // pid namespace (the host's init), and the namespace cannot be torn down until
    // that reaper gets round to its zombie (never, where PID 1 does not reap).
    SHIM_COMMAND.store(command, Ordering::Relaxed);
    // SAFETY: installing a handler that only makes an async-signal-safe call, then
    // unblocking that one signal (pending since the start, it is delivered now).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = kill_shim_command as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        let pid = unsafe { libc::waitpid(command, &mut status, 0) };
        if pid == command {
            exit(exit_code_of(status));
        }
        if pid < 0 && errno() != libc::EINTR {
            exit(1);
        }
    }
}

/// The command of this exec shim (only set in a shim process).
static SHIM_COMMAND: AtomicI32 = AtomicI32::new(0);

/// The exec shim's SIGTERM handler: kills the command, which the shim then reaps.
extern "C" fn kill_shim_command(_signal: c_int) {
    let command = SHIM_COMMAND.load(Ordering::Relaxed);
    if command > 0 {
        unsafe_kill(command, libc::SIGKILL);
    }
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
/// steps as a real one (including the pid namespace's /proc).
pub(crate) fn probe_namespaces(plan: &NsPlan) -> Result<(), (Stage, c_int)> {
    let (read, write) = pipe_cloexec().map_err(|error| (Stage::Pipe, error))?;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the child only makes fork-safe calls and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let error = errno();
        // SAFETY: closing the pipe we created.
        unsafe {
            libc::close(read);
            libc::close(write);
        }
        return Err((Stage::Fork, error));
    }
    if pid == 0 {
        block_all_signals();
        if !set_parent_death_signal(libc::SIGKILL, parent) {
            exit(1);
        }
        close_fds_except(&[write]);
        if let Err((stage, error)) = setup_namespaces(plan) {
            fail(write, stage, error);
        }
        // SAFETY: the child only makes fork-safe calls and exits.
        let init = unsafe { raw_fork() };
        if init < 0 {
            fail(write, Stage::Fork, errno());
        }
        if init == 0 {
            if let Err(error) = mount_proc() {
                fail(write, Stage::MountProc, error);
            }
            report(write, ReportMessage::Ready(0));
            exit(0);
        }
        // SAFETY: waitpid on our own child.
        unsafe { libc::waitpid(init, std::ptr::null_mut(), 0) };
        exit(0);
    }
    // SAFETY: closing our copy of the write end so EOF arrives when the child is done.
    unsafe { libc::close(write) };
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 64];
    loop {
        // SAFETY: reading into a local buffer.
        let read_len = unsafe { libc::read(read, buffer.as_mut_ptr().cast(), buffer.len()) };
        if read_len > 0 {
            bytes.extend_from_slice(&buffer[..read_len as usize]);
        } else if read_len == 0 || errno() != libc::EINTR {
            break;
        }
    }
    // SAFETY: closing our read end and reaping our child.
    unsafe {
        libc::close(read);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    match parse_report(&bytes).first() {
        Some(ReportMessage::Ready(_)) => Ok(()),
        Some(ReportMessage::Failed(stage, error)) => Err((*stage, *error)),
        None => Err((Stage::Fork, libc::ECHILD)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_records_round_trip() {
        let mut bytes = Vec::new();
        for message in [
            ReportMessage::Ready(42),
            ReportMessage::Failed(Stage::MountProc, libc::EPERM),
        ] {
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
            vec![
                ReportMessage::Ready(42),
                ReportMessage::Failed(Stage::MountProc, libc::EPERM)
            ]
        );
    }

    #[test]
    fn proc_fd_paths_are_formatted_without_allocation() {
        let mut buffer = [0u8; 32];
        assert_eq!(proc_fd_path(7, &mut buffer), c"/proc/self/fd/7");
        assert_eq!(proc_fd_path(1234, &mut buffer), c"/proc/self/fd/1234");
        assert_eq!(proc_fd_path(0, &mut buffer), c"/proc/self/fd/0");
    }
}
