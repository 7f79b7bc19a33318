//! The command line a process forked from the zygote shows (`ps`, `/proc/<pid>/cmdline`).
//!
//! A process shows the memory its `argv` strings were laid out in, so one forked from the zygote
//! shows the zygote's command line until it writes its own there. The zygote remembers where
//! that memory is when it starts (before `main`), and an init running in place retitles itself
//! as a re-executed init would be titled. Nothing here allocates: it runs after fork.

use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Where the zygote's command line is (contiguous, as the kernel lays out `argv`), so the
/// inits it leads to can show their own: `ps` and `/proc/1/cmdline` read this memory.
static COMMAND_LINE: (AtomicPtr<u8>, AtomicUsize) = (AtomicPtr::new(std::ptr::null_mut()), AtomicUsize::new(0));

/// Remembers the zygote's command line (`argc` strings at `argv`).
///
/// # Safety
/// `argv` must hold `argc` valid C strings, laid out one after the other.
pub(crate) unsafe fn remember_command_line(argc: usize, argv: *const *const libc::c_char) {
    // SAFETY: per the caller, argv[0..argc] are valid C strings.
    let (start, length) = unsafe {
        let start = *argv;
        let last = *argv.add(argc - 1);
        (start, last.offset_from(start) as usize + CStr::from_ptr(last).to_bytes_with_nul().len())
    };
    COMMAND_LINE.0.store(start as *mut u8, Ordering::Relaxed);
    COMMAND_LINE.1.store(length, Ordering::Relaxed);
}

/// Replaces this process's command line (one of the zygote's descendants) with `title`
/// (NUL-separated arguments), cut to the room there is, the rest zeroed.
pub(crate) fn retitle(title: &[u8]) {
    let start = COMMAND_LINE.0.load(Ordering::Relaxed);
    let length = COMMAND_LINE.1.load(Ordering::Relaxed);
    if start.is_null() {
        return;
    }
    // SAFETY: the area was the zygote's argv strings, which this process (a fork of it) owns a
    // copy of and which nothing else reads as Rust data.
    let area = unsafe { std::slice::from_raw_parts_mut(start, length) };
    let kept = title.len().min(length.saturating_sub(1));
    area[..kept].copy_from_slice(&title[..kept]);
    area[kept..].fill(0);
}
