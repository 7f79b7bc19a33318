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

use crate::child::{ReportMessage, init_loop, report};
use crate::sys::{control_signalfd, exit, parse_decimal, set_name, set_not_dumpable};

/// The argument that makes a program a sandbox's init.
pub(crate) const INIT_MAGIC: &CStr = c"--cwsandbox-init-v1";

/// The report argument of an init that told the emulator it was ready before re-executing.
pub(crate) const ALREADY_REPORTED: &CStr = c"reported";

#[used]
#[unsafe(link_section = ".init_array")]
static SANDBOX_INIT_ENTRY: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = sandbox_init_entry;

/// Keeps [`SANDBOX_INIT_ENTRY`] in every program that uses the executor: the linker
/// only takes an object file from a library for a symbol someone refers to.
pub(crate) fn keep_linked() {
    std::hint::black_box(&SANDBOX_INIT_ENTRY);
}

extern "C" fn sandbox_init_entry(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    if argc != 4 || argv.is_null() {
        return;
    }
    // SAFETY: the kernel hands a program `argc` valid C strings in `argv`.
    let argument = |index: usize| unsafe { CStr::from_ptr(*argv.add(index)) };
    if argument(1) != INIT_MAGIC {
        return;
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
                report(report_fd, ReportMessage::Failed(crate::child::Stage::Signalfd, error));
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
