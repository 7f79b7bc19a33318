//! Starting a sandbox's command in the process forked for it: the main command (forked by the
//! keeper, or by a warm sandbox's init) and every exec'd one (forked by init). The keeper and
//! init both start commands, so this sits below them both. What `execve` needs is prepared as C
//! strings before the fork ([`Program`]); after it, only system calls are made.

use std::ffi::{CStr, CString};
use std::os::fd::RawFd;

use libc::c_char;

use crate::sys::{close_fds_except, drop_privileges, errno, exit, set_name, unblock_all_signals, write_all};

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
