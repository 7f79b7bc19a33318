//! The sandbox's init once its setup is done.
//!
//! A process forked from the emulator holds a copy of its memory and environment (its tokens
//! among them), readable by any process of the sandbox through `/proc/1/mem` and
//! `/proc/1/environ`. So namespaced sandboxes descend from the zygote, the emulator's binary
//! executed with an empty environment, and their init runs this loop in place. The probe at
//! start is forked from the emulator: its init executes the program it came from again
//! (through a descriptor opened at start, with an empty environment and a marker argument that
//! `crate::process_entry` recognises) before it runs the loop.

use std::ffi::{CStr, c_int};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::activation::Activation;
use crate::init_channel::{ExecOrder, MAX_ORDER_BYTES, Order, Report};
use crate::main_command::{self, Credentials, MainExec, Program};
use crate::setup_report::{ReportMessage, Stage, report};
use crate::sys::ENVELOPE_BUFFER_BYTES;
use crate::sys::{
    self, control_signalfd, drop_bounding_set, errno, exit, exit_code_of, limit_capabilities, next_signal, set_name,
    set_not_dumpable, unsafe_kill,
};

/// The argument that makes a program a sandbox's init.
pub(crate) const INIT_MAGIC: &CStr = c"--cwsandbox-init-v1";

/// How long an exec'd command's process group has between SIGTERM and SIGKILL once the
/// emulator ended it (its caller went away).
const EXEC_KILL_GRACE_MS: i64 = 1_000;

/// Reports ready on the descriptor the setup handed over (a re-executed init's), unless init
/// reported before (one running in place), then runs the init loop (a probe, whose `main` is
/// 0, exits at once). Never returns.
pub(crate) fn run(report_fd: Option<c_int>, main: libc::pid_t, control_fd: Option<c_int>) -> ! {
    // An exec named the process after the binary.
    set_name(c"cwsandbox-init");
    set_not_dumpable();
    let control = control_fd.map(take_descriptor);
    // The signals stayed blocked (across exec, for a re-executed init); SIGCHLD of a main
    // command that already ended is pending and reaches the signalfd.
    let signals = match control_signalfd() {
        Ok(fd) => fd,
        Err(error) => {
            if let Some(report_fd) = report_fd {
                report(report_fd, ReportMessage::Failed(Stage::Signalfd, error));
            }
            exit(1)
        }
    };
    if let Some(report_fd) = report_fd {
        report(report_fd, ReportMessage::Ready(0));
        // SAFETY: closing the descriptor handed to us.
        unsafe { libc::close(report_fd) };
    }
    if main == 0 {
        exit(0);
    }
    init_loop(main, signals, control)
}

/// The init of a warm sandbox: reports ready, waits for its activation (the emulator
/// closes the pipe after it, or without one when it gives the sandbox up), sets the
/// hostname, starts the main command, leaves itself only the sandbox's capabilities and
/// runs the init loop. Never returns.
pub(crate) fn run_warm(report_fd: c_int, activation_fd: c_int, started_fd: c_int, control_fd: Option<c_int>) -> ! {
    set_name(c"cwsandbox-init");
    set_not_dumpable();
    // The descriptors arrive close-on-exec (the keeper received them so), as the started pipe
    // must be: it closes when the main command execs.
    let control = control_fd.map(take_descriptor);
    let signals = match control_signalfd() {
        Ok(fd) => fd,
        Err(error) => {
            report(report_fd, ReportMessage::Failed(Stage::Signalfd, error));
            exit(1)
        }
    };
    report(report_fd, ReportMessage::Ready(0));
    // SAFETY: closing the descriptor handed to us.
    unsafe { libc::close(report_fd) };
    let Some(activation) = read_activation(activation_fd) else {
        // Given up (an emulator shutting down, or a malformed activation): nothing ran.
        end_namespace(0);
    };
    let hostname = activation.hostname.as_bytes();
    // SAFETY: pointer and length describe the hostname bytes.
    if unsafe { libc::sethostname(hostname.as_ptr().cast(), hostname.len()) } != 0 {
        main_command::not_started(started_fd, b"cwsandbox: cannot set the sandbox's hostname\n");
    }
    // The sandbox's capabilities from now on, before any process of it exists: what the cold
    // start's init has after its re-execution with the reduced bounding set.
    if drop_bounding_set().and_then(|()| limit_capabilities()).is_err() {
        main_command::not_started(started_fd, b"cwsandbox: cannot drop the sandbox's privileges\n");
    }
    let cwd_message = main_command::cwd_message(&activation.cwd.to_string_lossy());
    let program = activation.main.map(|main| Program::new(main.candidates, main.argv, main.envp, &main.display));
    // SAFETY: this process has one thread; the child only execs or exits.
    let main = unsafe { libc::fork() };
    if main < 0 {
        main_command::not_started(started_fd, b"cwsandbox: cannot fork the main command\n");
    }
    if main == 0 {
        main_command::exec_main(&MainExec {
            started_fd,
            credentials: Credentials::Drop(activation.main_ids),
            cwd: &activation.cwd,
            cwd_message: &cwd_message,
            program: program.as_ref(),
        });
    }
    // SAFETY: closing our copy: the pipe must close when the main command execs.
    unsafe { libc::close(started_fd) };
    init_loop(main, signals, control)
}

/// Reads the activation until the emulator closes the pipe, and closes it.
fn read_activation(fd: c_int) -> Option<Activation> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    // SAFETY: the descriptor was handed to us and is used nowhere else.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::new();
    pipe.read_to_end(&mut bytes).ok()?;
    Activation::decode(&bytes)
}

/// Owns the channel's descriptor, which arrives close-on-exec (the keeper received it so), so
/// no command of the sandbox inherits it.
fn take_descriptor(fd: c_int) -> OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: the descriptor was handed to us and is owned nowhere else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A command init started for the emulator.
struct Exec {
    id: u64,
    /// Its pid, which is also its process group's (it leads a session of its own).
    pid: libc::pid_t,
    reaped: bool,
    /// When the group gets SIGKILL, once the emulator ended it.
    kill_at: Option<i64>,
}

/// The loop of a sandbox's init: reaps orphans, relays a stop's SIGTERM to
/// every process of the namespace, starts the commands the emulator orders and reports their
/// ends, and ends the sandbox when the main command ends (as a container runtime does).
/// Never returns.
fn init_loop(main: libc::pid_t, signals: c_int, mut control: Option<OwnedFd>) -> ! {
    let mut execs: Vec<Exec> = Vec::new();
    let mut buffer = if control.is_some() { vec![0u8; ENVELOPE_BUFFER_BYTES] } else { Vec::new() };
    loop {
        let now = monotonic_ms();
        let timeout = execs.iter().filter_map(|exec| exec.kill_at).min().map_or(-1, |at| (at - now).clamp(0, 1_000));
        let mut polls = [
            libc::pollfd { fd: signals, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: control.as_ref().map_or(-1, AsRawFd::as_raw_fd), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: valid pollfds; a negative descriptor is skipped.
        let ready = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, timeout as c_int) };
        if ready < 0 && errno() != libc::EINTR {
            end_namespace(libc::SIGKILL);
        }
        if polls[0].revents != 0 {
            match next_signal(signals) {
                // From PID 1, kill(-1) reaches every process of the namespace but itself.
                Some(libc::SIGTERM) => unsafe_kill(-1, libc::SIGTERM),
                Some(libc::SIGCHLD) => reap(main, &mut execs, control.as_ref()),
                Some(_) => {}
                None => end_namespace(libc::SIGKILL),
            }
        }
        if polls[1].revents != 0
            && let Some(socket) = &control
        {
            match sys::receive_message(socket.as_raw_fd(), &mut buffer, 0) {
                Ok((0, _)) => control = None,
                Ok((length, mut fds)) => {
                    let payload = sys::open_envelope(&buffer[..length], &mut fds, MAX_ORDER_BYTES);
                    match payload.as_deref().and_then(Order::decode) {
                        Some(Order::Exec(order)) => start(order, fds, &mut execs, socket),
                        Some(Order::End { id }) => end(id, &mut execs),
                        Some(Order::Connect { port }) => connect_for(port, fds),
                        None => {}
                    }
                }
                Err(libc::EMSGSIZE | libc::EAGAIN) => {}
                // The emulator is gone; the keeper's death signal ends the sandbox.
                Err(_) => control = None,
            }
        }
        let now = monotonic_ms();
        for exec in &mut execs {
            if exec.kill_at.is_some_and(|at| at <= now) {
                unsafe_kill(-exec.pid, libc::SIGKILL);
                exec.kill_at = None;
            }
        }
        execs.retain(|exec| !exec.reaped || exec.kill_at.is_some());
    }
}

/// Reaps every child that ended: the main command's end ends the sandbox; an exec'd
/// command's is reported.
fn reap(main: libc::pid_t, execs: &mut [Exec], control: Option<&OwnedFd>) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if pid == main {
            end_namespace(status);
        }
        if let Some(exec) = execs.iter_mut().find(|exec| exec.pid == pid && !exec.reaped) {
            exec.reaped = true;
            if let Some(socket) = control {
                send_report(socket, Report::Exited { id: exec.id, status });
            }
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

/// Forks an ordered command with `stdio` as its standard descriptors and waits until it has
/// exec'd. A command that cannot start says why on its stderr and exits with 127; one that
/// cannot even be forked is reported as started and exited with 127.
fn start(order: ExecOrder, stdio: Vec<OwnedFd>, execs: &mut Vec<Exec>, socket: &OwnedFd) {
    let send = |report: Report| send_report(socket, report);
    let id = order.id;
    let give_up = |message: &[u8]| {
        if let Some(stderr) = stdio.get(2) {
            sys::write_all(stderr.as_raw_fd(), message);
        }
        send(Report::Started { id });
        send(Report::Exited { id, status: 127 << 8 });
    };
    if stdio.len() != 3 {
        give_up(b"cwsandbox: the command's standard descriptors did not arrive\n");
        return;
    }
    let Ok((started_read, started_write)) = sys::pipe_cloexec() else {
        give_up(b"cwsandbox: cannot make a pipe for the command\n");
        return;
    };
    let cwd_message = main_command::cwd_message(&order.cwd.to_string_lossy());
    let command = order.command;
    let program = Program::new(command.candidates, command.argv, command.envp, &command.display);
    // SAFETY: this process has one thread; the child only sets itself up and execs or exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // SAFETY: closing the pipe we made.
        unsafe {
            libc::close(started_read);
            libc::close(started_write);
        }
        give_up(b"cwsandbox: cannot fork the command\n");
        return;
    }
    if pid == 0 {
        // A session and process group of its own: what `end` ends.
        // SAFETY: plain process and descriptor calls on ourselves; the received descriptors
        // are above 2 (init's stdio is open), so dup2 never overwrites one still needed.
        unsafe {
            libc::setsid();
            for (target, fd) in stdio.iter().enumerate() {
                libc::dup2(fd.as_raw_fd(), target as c_int);
            }
            if order.tty {
                // The pty on stdin becomes the controlling terminal, so job control and
                // SIGWINCH work.
                libc::ioctl(0, libc::TIOCSCTTY, 0);
            }
        }
        main_command::exec_main(&MainExec {
            started_fd: started_write,
            credentials: Credentials::Drop(order.ids),
            cwd: &order.cwd,
            cwd_message: &cwd_message,
            program: Some(&program),
        });
    }
    // Our copies close here: the command's output ends when it (and what it left) is done.
    drop(stdio);
    // SAFETY: closing our copy of the write end, so the read below ends when the command
    // execs (close-on-exec) or exits.
    unsafe { libc::close(started_write) };
    let mut byte = [0u8; 1];
    // SAFETY: reading into a local buffer until EOF (or a byte: it could not start).
    while unsafe { libc::read(started_read, byte.as_mut_ptr().cast(), 1) } < 0 && errno() == libc::EINTR {}
    // SAFETY: closing the read end we made.
    unsafe { libc::close(started_read) };
    execs.push(Exec { id, pid, reaped: false, kill_at: None });
    send(Report::Started { id });
}

/// Tells the emulator about a command. Blocking: the emulator reads reports as they come.
fn send_report(socket: &OwnedFd, report: Report) {
    let _ = sys::send_message(socket.as_raw_fd(), &report.encode(), &[], 0);
}

/// Ends command `id`'s process group: SIGTERM now, SIGKILL after the grace period.
fn end(id: u64, execs: &mut [Exec]) {
    if let Some(exec) = execs.iter_mut().find(|exec| exec.id == id && exec.kill_at.is_none()) {
        unsafe_kill(-exec.pid, libc::SIGTERM);
        exec.kill_at = Some(monotonic_ms() + EXEC_KILL_GRACE_MS);
    }
}

/// Connects to `port` on the sandbox's loopback (IPv4, then IPv6) and sends the socket back over
/// the one attached socket; a failure sends its errno instead.
fn connect_for(port: u16, mut fds: Vec<OwnedFd>) {
    if fds.len() != 1 {
        return;
    }
    let reply = fds.remove(0);
    match sys::connect_loopback(port, crate::init_channel::CONNECT_TIMEOUT_MS) {
        Ok(socket) => {
            let _ = sys::send_message(reply.as_raw_fd(), &[0], &[socket.as_raw_fd()], 0);
        }
        Err(errno) => {
            let mut status = vec![1];
            status.extend_from_slice(&errno.to_le_bytes());
            let _ = sys::send_message(reply.as_raw_fd(), &status, &[], 0);
        }
    }
}

fn monotonic_ms() -> i64 {
    // SAFETY: a zeroed timespec is a valid out-parameter.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as i64 * 1000 + now.tv_nsec as i64 / 1_000_000
}
