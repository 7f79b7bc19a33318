//! The entry point of the processes the emulator's binary is executed as: the zygote
//! (`crate::zygote_process`) and the probe's re-executed init (`crate::init`). It dispatches to
//! both, so it sits above them.
//!
//! The markers are recognised before `main` runs, by a function in `.init_array`: every
//! program that links this crate (the emulator, its tests) becomes a zygote or a sandbox init
//! when started that way, without a separate binary to install. glibc passes `argc`, `argv`
//! and `envp` to these functions, as the Rust standard library itself relies on.

use std::ffi::{CStr, c_char, c_int};

use crate::init::{self, INIT_MAGIC};
use crate::process_title::remember_command_line;
use crate::sys::{exit, parse_decimal};
use crate::zygote::ZYGOTE_MAGIC;
use crate::zygote_process;

#[used]
#[unsafe(link_section = ".init_array")]
static SANDBOX_INIT_ENTRY: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = sandbox_init_entry;

/// Keeps [`SANDBOX_INIT_ENTRY`] in every program that uses the executor: the linker
/// only takes an object file from a library for a symbol someone refers to.
pub(crate) fn keep_linked() {
    std::hint::black_box(&SANDBOX_INIT_ENTRY);
}

extern "C" fn sandbox_init_entry(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    if !(argc == 3 || argc == 4) || argv.is_null() {
        return;
    }
    // SAFETY: the kernel hands a program `argc` valid C strings in `argv`.
    let argument = |index: usize| unsafe { CStr::from_ptr(*argv.add(index)) };
    if argc == 3 {
        if argument(1) == ZYGOTE_MAGIC {
            // SAFETY: the kernel lays out the `argc` strings of `argv` one after the other.
            unsafe { remember_command_line(argc as usize, argv) };
            match parse_decimal(argument(2)) {
                Some(socket) => zygote_process::run(socket as c_int),
                None => exit(1),
            }
        }
        return;
    }
    if argument(1) != INIT_MAGIC {
        return;
    }
    // The probe's re-executed init: its report descriptor and its main pid (0: none).
    let (Some(report_fd), Some(main)) = (parse_decimal(argument(2)), parse_decimal(argument(3))) else {
        exit(1);
    };
    init::run(Some(report_fd as c_int), main as libc::pid_t, None)
}
