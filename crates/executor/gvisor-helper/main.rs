//! The emulator's helper inside a gVisor sandbox (`runtime_class="gvisor"`).
//!
//! gVisor's kernel (the Sentry) keeps the sandbox's filesystem view itself: its `/tmp`, the
//! volumes it mounted and what its processes wrote are not where the host could open them, as
//! the executor's file helper does for runc sandboxes. So file operations, and execs, run in
//! the sandbox through `runsc exec` of this program, bound read-only at
//! `/.cwsandbox/gvisor-helper`: it acts as the user the exec runs as, in the sandbox's own view.
//! Built by the executor's build script as a static binary (std only): it must run in any
//! image, whatever its C library.
//!
//! `exec CWD PROGRAM [ARG...]`: changes to CWD and executes PROGRAM (looked up in `PATH`);
//! what cannot start exits 127 with the process runtime's message. `start` is `exec` for a
//! container's main command: a missing CWD is made first, as runc makes it.
//! `read PATH MAX`: the regular file's bytes on stdout (at most MAX).
//! `write PATH`: stdin into the regular file (made, with missing parent directories, if it is
//! not there).
//! A failed `read` or `write` exits 3 with `errno N`, 4 with `mode M` (not a regular file) or 5
//! with `size N` (over MAX) on stderr: the executor turns each into its file error.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1).map(String::as_str) {
        Some("exec") if args.len() >= 4 => exec(&args[2], &args[3], &args[4..]),
        Some("start") if args.len() >= 4 => {
            // As runc: a working directory the image lacks is made (what cannot be made, the
            // change to it reports).
            let _ = std::fs::DirBuilder::new().recursive(true).mode(0o755).create(&args[2]);
            exec(&args[2], &args[3], &args[4..])
        }
        Some("read") if args.len() == 4 => match args[3].parse::<u64>() {
            Ok(max) => read(&args[2], max),
            Err(_) => usage(),
        },
        Some("write") if args.len() == 3 => write(&args[2]),
        _ => usage(),
    };
    std::process::exit(code);
}

fn usage() -> i32 {
    eprintln!("usage: gvisor-helper exec|start CWD PROGRAM [ARG...] | read PATH MAX | write PATH");
    2
}

fn exec(cwd: &str, program: &str, args: &[String]) -> i32 {
    if let Err(error) = std::env::set_current_dir(cwd) {
        eprintln!("cwsandbox: cannot change to the working directory {cwd}: {}", describe(&error));
        return 127;
    }
    let error = std::process::Command::new(program).args(args).exec();
    match error.kind() {
        std::io::ErrorKind::NotFound => eprintln!("cwsandbox: {program}: command not found"),
        std::io::ErrorKind::PermissionDenied => eprintln!("cwsandbox: {program}: permission denied"),
        _ => eprintln!("cwsandbox: cannot execute {program}: {error}"),
    }
    127
}

/// The executor's own words for the errors its checks of a working directory give.
fn describe(error: &std::io::Error) -> String {
    match error.raw_os_error() {
        Some(2) | Some(20) => "no such file or directory".to_owned(),
        Some(13) | Some(1) => "permission denied".to_owned(),
        _ => error.to_string(),
    }
}

fn failed(error: &std::io::Error) -> i32 {
    eprintln!("errno {}", error.raw_os_error().unwrap_or(5));
    3
}

fn not_regular(mode: u32) -> i32 {
    eprintln!("mode {mode}");
    4
}

fn read(path: &str, max: u64) -> i32 {
    // O_NONBLOCK: opening a FIFO does not wait for a writer.
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(0o4000).open(path) {
        Ok(file) => file,
        Err(error) => return failed(&error),
    };
    let metadata = match file.metadata() {
        Ok(metadata) => metadata,
        Err(error) => return failed(&error),
    };
    if metadata.is_dir() {
        eprintln!("errno 21");
        return 3;
    }
    if !metadata.is_file() {
        return not_regular(metadata.mode());
    }
    if metadata.len() > max {
        eprintln!("size {}", metadata.len());
        return 5;
    }
    // The file may grow while it is read (and /proc files say 0): one byte past the limit shows it.
    let mut content = Vec::with_capacity(metadata.len() as usize);
    if let Err(error) = file.take(max.saturating_add(1)).read_to_end(&mut content) {
        return failed(&error);
    }
    if content.len() as u64 > max {
        eprintln!("size {}", content.len());
        return 5;
    }
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&content).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(error) => failed(&error),
    }
}

fn write(path: &str) -> i32 {
    let mut content = Vec::new();
    if let Err(error) = std::io::stdin().lock().read_to_end(&mut content) {
        return failed(&error);
    }
    if let Some(parent) = std::path::Path::new(path).parent() {
        if let Err(error) = std::fs::DirBuilder::new().recursive(true).mode(0o755).create(parent) {
            return failed(&error);
        }
    }
    // Not truncated at open: a file that is not regular (a FIFO) must not be waited on or cut.
    let file = std::fs::OpenOptions::new().write(true).create(true).mode(0o644).custom_flags(0o4000).open(path);
    let mut file = match file {
        Ok(file) => file,
        Err(error) => return failed(&error),
    };
    match file.metadata() {
        Ok(metadata) if !metadata.is_file() => return not_regular(metadata.mode()),
        Ok(_) => {}
        Err(error) => return failed(&error),
    }
    match file.set_len(0).and_then(|()| file.write_all(&content)).and_then(|()| file.flush()) {
        Ok(()) => 0,
        Err(error) => failed(&error),
    }
}
