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

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;

use libc::{c_char, c_int, pid_t};

use crate::main_command::{Credentials, MainExec, exec_main};
use crate::sandbox_plan::{IdMap, InitPlan, NsPlan};
use crate::setup_report::{ReportMessage, Stage, parse_report, report};
#[cfg(test)]
use crate::sys::parse_decimal;
use crate::sys::{
    block_all_signals, close_fds_except, control_signalfd, drop_privileges, errno, exec_self, exit, exit_code_of,
    format_decimal, mount, next_signal, next_signal_timeout, peer_gone, pipe_cloexec, pivot_root_here, raw_fork,
    rearm_parent_death_signal, remount_read_only, reset_signal_dispositions, set_idle_scheduling, set_name,
    set_not_dumpable, set_parent_death_signal, switch_ids, unblock_all_signals, unsafe_kill, write_all,
};

fn fail(fd: RawFd, stage: Stage, errno: c_int) -> ! {
    report(fd, ReportMessage::Failed(stage, errno));
    exit(1)
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
    if let Some(path) = &plan.network_namespace {
        // While still the host's root: a namespace of the host's user namespace cannot be
        // joined from a user namespace of the sandbox's.
        join_network_namespace(path).map_err(|error| (Stage::JoinNetwork, error))?;
    }
    if let Some((main, _)) = plan.join {
        join_pod(main)?;
    }
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
    // SAFETY: pointer and length describe the hostname bytes. (A joined UTS namespace has the
    // Pod's hostname already.)
    if plan.join.is_none() && unsafe { libc::sethostname(hostname.as_ptr().cast(), hostname.len()) } != 0 {
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
        if let Some(options) = &bind.overlay {
            let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
            mount(Some(c"overlay"), &bind.target, Some(c"overlay"), flags, Some(options))
                .map_err(|error| (Stage::MountHostLayer, error))?;
            continue;
        }
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

/// Joins the network namespace bound at `path`.
fn join_network_namespace(path: &std::ffi::CStr) -> Result<(), c_int> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: setns on a namespace descriptor we opened; it moves this process only.
    let joined = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    let error = errno();
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(fd) };
    if joined != 0 { Err(error) } else { Ok(()) }
}

/// Joins the user, network, IPC and UTS namespaces of a Pod's main init `main` (the user
/// namespace first: it owns the others). Uses a fixed buffer: this runs between fork and exec.
fn join_pod(main: pid_t) -> Result<(), (Stage, c_int)> {
    for (name, own, kind) in [
        (&b"ns/user"[..], c"/proc/self/ns/user", libc::CLONE_NEWUSER),
        (&b"ns/net"[..], c"/proc/self/ns/net", libc::CLONE_NEWNET),
        (&b"ns/ipc"[..], c"/proc/self/ns/ipc", libc::CLONE_NEWIPC),
        (&b"ns/uts"[..], c"/proc/self/ns/uts", libc::CLONE_NEWUTS),
    ] {
        let mut buffer = [0u8; 64];
        let path = proc_pid_path(main, name, &mut buffer);
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err((Stage::JoinPod, errno()));
        }
        // One the keeper is in already (the host's network of a Pod without a network of its
        // own; the host's user namespace where none can be made) is not joined: setns would
        // refuse it once in the Pod's user namespace, which owns none of the host's.
        // SAFETY: zeroed stat buffers are valid out-parameters; the path is NUL-terminated.
        let same = unsafe {
            let (mut theirs, mut ours): (libc::stat, libc::stat) = (std::mem::zeroed(), std::mem::zeroed());
            libc::fstat(fd, &mut theirs) == 0
                && libc::stat(own.as_ptr(), &mut ours) == 0
                && (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)
        };
        // SAFETY: setns on a namespace descriptor we opened; it moves this process only.
        let joined = if same { 0 } else { unsafe { libc::setns(fd, kind) } };
        let error = errno();
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        if joined != 0 {
            return Err((Stage::JoinPod, error));
        }
    }
    Ok(())
}

/// Sets `lo` of the caller's network namespace up (SIOCSIFFLAGS on a throw-away socket).
pub(crate) fn loopback_up() -> Result<(), c_int> {
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
