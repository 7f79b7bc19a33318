//! Sandboxes started ahead of need (namespaces mode). Most of a start is process work that
//! does not depend on the sandbox asked for: forking the keeper and its id-map helper,
//! unsharing, mapping ids, the mounts, forking init. A warm sandbox has all of it done, under
//! a name no sandbox can have (`warm@<pid>.<n>`), and its init waits for an activation: the
//! hostname, the working
//! directory, the main command. A start that can use one (the host's network, no user of
//! its own: what a warm sandbox was made with) moves its directory into place, sends the
//! activation and waits only for the command's exec. After each take, another is made in
//! the background.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cwsandbox_sync::MutexUnpoisoned;
use libc::pid_t;
use tokio::sync::watch;
use tracing::{debug, warn};

use super::keeper::{Keeper, StartedKeeper, abandon, start_keeper};
use super::layout::remove_dir;
use super::mode::{Mode, ns_plan};
use super::spares::remove_orphans;
use super::{Inner, Running};
use crate::rootfs;
use crate::sandbox_plan::InitPlan;
use crate::sys::set_idle_scheduling;
use crate::{LaunchSpec, Network};

/// `@` is not allowed in sandbox ids, so a warm sandbox's directory cannot be a sandbox's.
const WARM_PREFIX: &str = "warm@";

/// Numbers the warm sandboxes of every executor of this process (two may share a root).
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A sandbox whose namespaces, root and init are made, and whose init waits for its activation.
#[derive(Debug)]
pub(super) struct WarmSandbox {
    pub(super) dir: PathBuf,
    pub(super) keeper: Keeper,
    pub(super) running: Running,
    /// The activation is written here, then the pipe is closed; closed without one, init
    /// ends the sandbox.
    pub(super) activation: std::io::PipeWriter,
    /// Closes when the main command has exec'd (a byte first if it could not).
    pub(super) started: std::io::PipeReader,
    /// Made at idle priority: [`WarmSandbox::raise_priority`] before its activation.
    pub(super) idle: bool,
}

impl WarmSandbox {
    /// Gives the keeper and init (and so the main command init forks) the normal priority.
    pub(super) fn raise_priority(&self) -> Result<(), String> {
        if !self.idle {
            return Ok(());
        }
        let keeper = self.keeper.id().ok_or("the keeper ended")?;
        let children = std::fs::read_to_string(format!("/proc/{keeper}/task/{keeper}/children"))
            .map_err(|error| format!("cannot find the sandbox's init: {error}"))?;
        let init: pid_t = match children.split_whitespace().collect::<Vec<_>>()[..] {
            [init] => init.parse().map_err(|_| format!("the keeper's children read {children:?}"))?,
            _ => return Err(format!("the keeper's children read {children:?}, not one init")),
        };
        for pid in [keeper, init] {
            set_idle_scheduling(pid, false).map_err(|error| {
                format!("cannot raise the priority of {pid}: {}", std::io::Error::from_raw_os_error(error))
            })?;
        }
        Ok(())
    }

    /// Ends a warm sandbox nobody will use, and removes its directory.
    pub(super) async fn discard(mut self) {
        // Closed without an activation, the pipe ends init, and the keeper ends once it has
        // reaped init: when the keeper is gone, nothing of the sandbox is left. Killing the
        // keeper would leave init to its death signal, a moment later.
        drop(self.activation);
        if tokio::time::timeout(DISCARD_TIMEOUT, self.keeper.wait()).await.is_err() {
            warn!(dir = %self.dir.display(), "a sandbox started ahead of need did not end when given up; killing it");
        }
        end_keeper(self.keeper, self.dir).await;
    }
}

/// How long a warm sandbox given up may take to end by itself before it is killed.
const DISCARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Kills and reaps a warm sandbox's keeper, if it still runs (its init dies with it), and
/// removes `dir`.
pub(super) async fn end_keeper(mut keeper: Keeper, dir: PathBuf) {
    abandon(&mut keeper).await;
    let _ = tokio::task::spawn_blocking(move || remove_dir(&dir)).await;
}

/// Whether a start can take a warm sandbox: one with what every warm sandbox was made with.
pub(super) fn can_use_warm(spec: &LaunchSpec, host_paths: &[PathBuf]) -> bool {
    // A warm sandbox's mounts are made: a volume, or a layer over a host directory (a file
    // mounted under it), could not be added to them.
    spec.network == Network::Host
        && spec.user.is_none()
        && spec.volume_mounts.is_empty()
        && spec.files.iter().all(|file| rootfs::host_dir_of(&file.path, host_paths).is_none())
        // Its command runs at its activation: it could not wait for other containers.
        && !super::has_start_conditions(spec)
}

#[derive(Debug)]
pub(super) struct WarmPool {
    wanted: usize,
    /// Whether sandboxes are made at idle priority: only where the emulator may raise them
    /// again at a start (`CAP_SYS_NICE`), or their commands would run at idle priority.
    idle: bool,
    state: Mutex<State>,
    /// Told whenever a maker finishes.
    changes: watch::Sender<()>,
}

#[derive(Debug, Default)]
struct State {
    ready: Vec<WarmSandbox>,
    /// Makers running, so a burst of starts does not start a burst of makers.
    making: usize,
    /// Set at shutdown: nothing more is made, and what makers finish is discarded.
    closed: bool,
}

impl WarmPool {
    pub(super) fn new(root_dir: &Path, wanted: usize) -> WarmPool {
        remove_orphans(root_dir, WARM_PREFIX);
        let idle = can_leave_idle_scheduling();
        WarmPool { wanted, idle, state: Mutex::default(), changes: watch::Sender::new(()) }
    }

    pub(super) fn take(&self) -> Option<WarmSandbox> {
        self.state.lock_unpoisoned().ready.pop()
    }

    /// Starts makers until `wanted` sandboxes are ready or being made. Without a runtime (an
    /// executor used from plain threads) nothing is made ahead.
    pub(super) fn refill(inner: &Arc<Inner>) {
        let Some(pool) = &inner.warm else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let missing = {
            let mut state = pool.state.lock_unpoisoned();
            if state.closed {
                return;
            }
            let missing = pool.wanted.saturating_sub(state.ready.len() + state.making);
            state.making += missing;
            missing
        };
        for _ in 0..missing {
            // Counted until what it made is in the pool or gone, so a shutdown waiting for the
            // makers cannot return while a sandbox it made is still ending.
            let making = Making(inner.clone());
            runtime.spawn(async move {
                let inner = &making.0;
                let made = make(inner).await;
                let Some(pool) = &inner.warm else { return };
                let leftover = {
                    let mut state = pool.state.lock_unpoisoned();
                    match made {
                        Ok(warm) if !state.closed => {
                            state.ready.push(warm);
                            None
                        }
                        Ok(warm) => Some(warm),
                        // A start makes its own sandbox and reports what fails there.
                        Err(error) => {
                            debug!(%error, "cannot start a sandbox ahead of need");
                            None
                        }
                    }
                };
                if let Some(warm) = leftover {
                    warm.discard().await;
                }
            });
        }
    }

    /// Returns once no maker runs (every wanted sandbox is ready, or could not be made).
    pub(super) async fn settled(&self) {
        let mut changes = self.changes.subscribe();
        while self.state.lock_unpoisoned().making > 0 {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Makes no more, waits for the makers still running and ends every warm sandbox: for
    /// the executor's shutdown, so no process is left.
    pub(super) async fn close(&self) {
        self.state.lock_unpoisoned().closed = true;
        self.settled().await;
        let ready = std::mem::take(&mut self.state.lock_unpoisoned().ready);
        for warm in ready {
            warm.discard().await;
        }
    }
}

/// One maker, counted in `making` from its spawn until it finished or was dropped unfinished
/// (a runtime shutting down drops its tasks): either way the count goes down and waiters are
/// told, so [`WarmPool::settled`] cannot wait for a maker that will never finish.
struct Making(Arc<Inner>);

impl Drop for Making {
    fn drop(&mut self) {
        if let Some(pool) = &self.0.warm {
            pool.state.lock_unpoisoned().making -= 1;
            pool.changes.send_replace(());
        }
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        // An executor dropped without a shutdown: the keepers are killed as their handles
        // drop (and their inits with them); their directories go here.
        let state = self.state.get_mut_unpoisoned();
        for warm in state.ready.drain(..) {
            remove_dir(&warm.dir);
        }
    }
}

/// Whether a thread that went to idle priority may come back (on a throw-away thread).
fn can_leave_idle_scheduling() -> bool {
    std::thread::spawn(|| set_idle_scheduling(0, true).and_then(|()| set_idle_scheduling(0, false)).is_ok())
        .join()
        .unwrap_or(false)
}

/// Starts one warm sandbox, as a cold start would but with no command and a placeholder
/// hostname, and waits until its init is ready for the activation.
async fn make(inner: &Arc<Inner>) -> Result<WarmSandbox, String> {
    let Mode::Namespaces { ids } = inner.mode else {
        return Err("warm sandboxes need the namespaces isolation".into());
    };
    let dir = inner.config.root_dir.join(format!(
        "{WARM_PREFIX}{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let made = {
        let dir = dir.clone();
        let host_paths = inner.config.host_paths.clone();
        let owner = inner.mode.sandbox_owner();
        let idle = pool_is_idle(inner);
        tokio::task::spawn_blocking(move || {
            // The blocking thread goes back to the normal priority after: it is shared.
            if idle {
                let _ = set_idle_scheduling(0, true);
            }
            let made = rootfs::prepare(&dir, &host_paths, None, owner);
            if idle {
                let _ = set_idle_scheduling(0, false);
            }
            made
        })
        .await
        .map_err(|error| error.to_string())
        .and_then(|made| made)
    };
    let started = match made {
        Ok(rootfs) => start_warm_keeper(inner, ids, &rootfs, dir.clone()).await,
        Err(error) => Err(error),
    };
    if started.is_err() {
        let dir = dir.clone();
        let _ = tokio::task::spawn_blocking(move || remove_dir(&dir)).await;
    }
    started
}

fn pool_is_idle(inner: &Inner) -> bool {
    inner.warm.as_ref().is_some_and(|pool| pool.idle)
}

/// Forks the keeper of the warm sandbox at `dir`, whose root `rootfs` is made.
async fn start_warm_keeper(
    inner: &Arc<Inner>,
    ids: super::mode::IdMode,
    rootfs: &rootfs::Rootfs,
    dir: PathBuf,
) -> Result<WarmSandbox, String> {
    use std::os::fd::AsRawFd;
    let ns = ns_plan(ids, "localhost", rootfs, Network::Host, None).map_err(|error| error.to_string())?;
    let idle = pool_is_idle(inner);
    let name = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let StartedKeeper { keeper: child, running, go, started } = start_keeper(inner, &name, |pipes| InitPlan {
        parent: inner.pid,
        report_fd: pipes.report_fd,
        go_fd: pipes.go_fd,
        started_fd: pipes.started_fd,
        control_fd: pipes.control_fd,
        ns: Some(ns),
        self_exe: inner.self_exe.as_raw_fd(),
        probe: false,
        warm: true,
        idle,
        cwd: c"/".to_owned(),
        cwd_message: Vec::new(),
        program: None,
    })
    .await
    .map_err(|error| error.to_string())?;
    Ok(WarmSandbox { dir, keeper: child, running, activation: go, started, idle })
}
