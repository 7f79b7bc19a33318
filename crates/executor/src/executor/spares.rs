//! Sandbox roots made ahead of need. Making a root is some twenty directories, files and
//! links (about 2 ms, the largest part of a start after the processes themselves); a start
//! that finds one made moves it into place with one rename and adds only its working
//! directory. After each take, one more is made in the background.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use cwsandbox_sync::{CondvarUnpoisoned, MutexUnpoisoned};
use tracing::debug;

use crate::rootfs::{self, Skeleton};

/// How many roots are kept ready: enough for a test suite's sandboxes started back to back,
/// or two at once.
const WANTED: usize = 2;

#[derive(Debug)]
pub(super) struct SpareRoots {
    root_dir: PathBuf,
    host_paths: Vec<PathBuf>,
    owner: Option<(u32, u32)>,
    state: Mutex<State>,
    /// Told when a background maker finishes.
    made: Condvar,
}

/// Numbers the spares of every executor of this process (two may share a root directory).
static COUNTER: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default)]
struct State {
    ready: Vec<Skeleton>,
    /// Background makers running, so a burst of starts does not start a burst of makers.
    making: usize,
    /// Set by [`SpareRoots::clear`]: nothing more is made.
    closed: bool,
}

impl SpareRoots {
    pub(super) fn new(root_dir: PathBuf, host_paths: Vec<PathBuf>, owner: Option<(u32, u32)>) -> Arc<SpareRoots> {
        remove_orphans(&root_dir, SPARE_PREFIX);
        Arc::new(SpareRoots { root_dir, host_paths, owner, state: Mutex::default(), made: Condvar::new() })
    }

    /// A made root, if one is ready. The caller calls [`SpareRoots::refill`] once its start is
    /// done: a maker running during the start would take a core (of two, here) from it.
    pub(super) fn take(&self) -> Option<Skeleton> {
        self.state.lock_unpoisoned().ready.pop()
    }

    /// Starts makers until [`WANTED`] roots are ready or being made.
    pub(super) fn refill(self: &Arc<Self>) {
        let missing = {
            let mut state = self.state.lock_unpoisoned();
            if state.closed {
                return;
            }
            let missing = WANTED.saturating_sub(state.ready.len() + state.making);
            state.making += missing;
            missing
        };
        for _ in 0..missing {
            let spares = self.clone();
            // Without a runtime (an executor used from plain threads) nothing is made ahead.
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                self.state.lock_unpoisoned().making -= 1;
                continue;
            };
            let ticket = Maker(spares);
            runtime.spawn_blocking(move || ticket.0.make_one());
        }
    }

    /// Makes one root (counted in `making` by the [`Maker`] that runs it).
    fn make_one(&self) {
        let dir = self.root_dir.join(format!(
            "{SPARE_PREFIX}{}.{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let made = rootfs::skeleton(&dir, &self.host_paths, self.owner);
        let mut state = self.state.lock_unpoisoned();
        match made {
            Ok(skeleton) if !state.closed => state.ready.push(skeleton),
            Ok(skeleton) => skeleton.remove(),
            // A start makes its own root and reports what fails there.
            Err(error) => {
                debug!(%error, "cannot make a sandbox root ahead of need");
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }

    /// Removes the ready roots and makes no more: for the executor's shutdown. Returns once
    /// the makers still running have removed theirs (they take milliseconds), so nothing is
    /// left on the disk.
    pub(super) fn clear(&self) {
        self.close();
        let mut state = self.state.lock_unpoisoned();
        while state.making > 0 {
            state = self.made.wait_unpoisoned(state);
        }
    }

    fn close(&self) {
        let ready = {
            let mut state = self.state.lock_unpoisoned();
            state.closed = true;
            std::mem::take(&mut state.ready)
        };
        ready.into_iter().for_each(Skeleton::remove);
    }
}

impl Drop for SpareRoots {
    fn drop(&mut self) {
        // No maker is left (each holds a reference).
        self.close();
    }
}

/// One background maker, counted in `making` from its spawn until it ran or was dropped
/// unrun (a runtime shutting down drops queued blocking tasks): either way the count goes
/// down, so [`SpareRoots::clear`] cannot wait for a maker that will never run.
struct Maker(Arc<SpareRoots>);

impl Drop for Maker {
    fn drop(&mut self) {
        self.0.state.lock_unpoisoned().making -= 1;
        self.0.made.notify_all();
    }
}

/// `@` is not allowed in sandbox ids, so a spare's name cannot be a sandbox's.
const SPARE_PREFIX: &str = "spare@";

/// Removes what executors that died without clearing it left under `<prefix><pid>.<n>`
/// names (their pid is gone).
pub(super) fn remove_orphans(root_dir: &std::path::Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(root_dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|name| name.strip_prefix(prefix)) else { continue };
        let Some(pid) = rest.split('.').next().and_then(|pid| pid.parse::<libc::pid_t>().ok()) else { continue };
        // SAFETY: signal 0 only asks whether the process exists.
        let alive =
            unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
