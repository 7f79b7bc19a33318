//! The sandbox's init after it re-executed the emulator's binary.
//!
//! PID 1 of a sandbox is forked from the emulator, so until it execs it holds a copy of
//! the emulator's memory and environment (its tokens among them), readable by any
//! process of the sandbox through `/proc/1/mem` and `/proc/1/environ`. So init, once it
//! has set the sandbox up and started the main command, executes the program it came
//! from again (through a descriptor opened at start, with an empty environment and a
//! marker argument) and only then waits for the sandbox's processes.
//!
//! The marker is recognised before `main` runs, by a function in `.init_array`: every
//! program that links this crate (the emulator, its tests) becomes a sandbox init when
//! started that way, without a separate binary to install. glibc passes `argc`, `argv`
//! and `envp` to these functions, as the Rust standard library itself relies on.

use std::ffi::{CStr, c_char, c_int};

use crate::activation::Activation;
use crate::child::{self, Credentials, MainExec, Program, ReportMessage, Stage, init_loop, report};
use crate::sys::{
    control_signalfd, drop_bounding_set, exit, limit_capabilities, parse_decimal, set_name, set_not_dumpable,
};

/// The argument that makes a program a sandbox's init.
pub(crate) const INIT_MAGIC: &CStr = c"--cwsandbox-init-v1";

/// The report argument of an init that told the emulator it was ready before re-executing.
pub(crate) const ALREADY_REPORTED: &CStr = c"reported";

/// The argument of a warm sandbox's init (followed by its report, activation and started
/// descriptors).
pub(crate) const WARM: &CStr = c"warm";

#[used]
#[unsafe(link_section = ".init_array")]
static SANDBOX_INIT_ENTRY: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = sandbox_init_entry;

/// Keeps [`SANDBOX_INIT_ENTRY`] in every program that uses the executor: the linker
/// only takes an object file from a library for a symbol someone refers to.
pub(crate) fn keep_linked() {
    std::hint::black_box(&SANDBOX_INIT_ENTRY);
}

extern "C" fn sandbox_init_entry(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    if !(argc == 4 || argc == 6) || argv.is_null() {
        return;
    }
    // SAFETY: the kernel hands a program `argc` valid C strings in `argv`.
    let argument = |index: usize| unsafe { CStr::from_ptr(*argv.add(index)) };
    if argument(1) != INIT_MAGIC {
        return;
    }
    if argc == 6 {
        let descriptor = |index: usize| match argument(2) == WARM {
            true => parse_decimal(argument(index)).map(|fd| fd as c_int),
            false => None,
        };
        let (Some(report_fd), Some(activation_fd), Some(started_fd)) = (descriptor(3), descriptor(4), descriptor(5))
        else {
            exit(1);
        };
        run_warm(report_fd, activation_fd, started_fd);
    }
    let report_fd = match argument(2) {
        reported if reported == ALREADY_REPORTED => None,
        digits => match parse_decimal(digits) {
            Some(fd) => Some(fd as c_int),
            None => exit(1),
        },
    };
    let Some(main) = parse_decimal(argument(3)) else {
        exit(1);
    };
    run(report_fd, main as libc::pid_t)
}

/// Reports ready on the descriptor the setup handed over, unless init reported before it
/// re-executed, then runs the init loop (a probe, whose `main` is 0, exits at once). Never
/// returns.
fn run(report_fd: Option<c_int>, main: libc::pid_t) -> ! {
    // exec named the process after the binary.
    set_name(c"cwsandbox-init");
    set_not_dumpable();
    // The signals stayed blocked across exec; SIGCHLD of a main command that already
    // ended is pending and reaches the signalfd.
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
    init_loop(main, signals)
}

/// The init of a warm sandbox: reports ready, waits for its activation (the emulator
/// closes the pipe after it, or without one when it gives the sandbox up), sets the
/// hostname, starts the main command, leaves itself only the sandbox's capabilities and
/// runs the init loop. Never returns.
fn run_warm(report_fd: c_int, activation_fd: c_int, started_fd: c_int) -> ! {
    set_name(c"cwsandbox-init");
    set_not_dumpable();
    // They came across exec without close-on-exec; the started pipe must close when the main
    // command execs.
    for fd in [report_fd, activation_fd, started_fd] {
        // SAFETY: fcntl on descriptors handed to us.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
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
        child::end_namespace(0);
    };
    let hostname = activation.hostname.as_bytes();
    // SAFETY: pointer and length describe the hostname bytes.
    if unsafe { libc::sethostname(hostname.as_ptr().cast(), hostname.len()) } != 0 {
        child::not_started(started_fd, b"cwsandbox: cannot set the sandbox's hostname\n");
    }
    // The sandbox's capabilities from now on, before any process of it exists: what the cold
    // start's init has after its re-execution with the reduced bounding set.
    if drop_bounding_set().and_then(|()| limit_capabilities()).is_err() {
        child::not_started(started_fd, b"cwsandbox: cannot drop the sandbox's privileges\n");
    }
    let cwd_message = child::cwd_message(&activation.cwd.to_string_lossy());
    let program = activation.main.map(|main| Program::new(main.candidates, main.argv, main.envp, &main.display));
    // SAFETY: this process has one thread; the child only execs or exits.
    let main = unsafe { libc::fork() };
    if main < 0 {
        child::not_started(started_fd, b"cwsandbox: cannot fork the main command\n");
    }
    if main == 0 {
        child::exec_main(&MainExec {
            started_fd,
            credentials: Credentials::Drop(activation.main_ids),
            cwd: &activation.cwd,
            cwd_message: &cwd_message,
            program: program.as_ref(),
        });
    }
    // SAFETY: closing our copy: the pipe must close when the main command execs.
    unsafe { libc::close(started_fd) };
    init_loop(main, signals)
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
