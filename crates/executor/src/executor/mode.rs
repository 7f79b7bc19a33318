//! How sandboxes are isolated, chosen once when the executor starts: Linux namespaces (with the
//! user ids they map to) where a probe sandbox can be built, else plain processes; and the
//! keeper's plan for a namespaced sandbox (flags, id maps, root, binds).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use libc::pid_t;
use tracing::warn;

use super::layout::remove_dir;
use super::validate::{c_string, path_c_string};
use crate::child;
use crate::rootfs;
use crate::sandbox_plan::{Bind, IdMap, InitPlan, NsPlan};
use crate::sys;
use crate::{ExecutorConfig, ExecutorError, Isolation, Network, SandboxUser};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Namespaces { ids: IdMode },
    Plain,
}

/// How a namespaced sandbox's user ids relate to the host's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IdMode {
    /// An unprivileged emulator: its uid and gid map to themselves.
    Own,
    /// A root emulator: the sandbox's ids 0..count are host ids base..base+count, and its
    /// processes run as that root (which owns nothing of the host).
    Range { base: u32, count: u32 },
    /// Root where no user namespace can be made: the sandbox's root is the host's root,
    /// without the capabilities that could undo its isolation.
    HostRoot,
}

impl Mode {
    /// The (uid, gid) of the user namespace a sandbox's commands switch to, where they switch.
    pub(super) fn command_ids(self, user: Option<SandboxUser>) -> Option<(u32, u32)> {
        match self {
            Mode::Namespaces { ids } => command_ids(ids, user),
            Mode::Plain => None,
        }
    }

    /// The host (uid, gid) of the sandbox's root user, where it is not ours.
    pub(super) fn sandbox_owner(self) -> Option<(u32, u32)> {
        match self {
            Mode::Namespaces { ids: IdMode::Range { base, .. } } => Some((base, base)),
            _ => None,
        }
    }
}

/// The keeper's plan for a namespaced sandbox.
pub(super) fn ns_plan(
    ids: IdMode,
    hostname: &str,
    rootfs: &rootfs::Rootfs,
    network: Network,
    user: Option<SandboxUser>,
) -> Result<NsPlan, ExecutorError> {
    let root = &rootfs.path;
    Ok(NsPlan {
        flags: namespace_flags(ids != IdMode::HostRoot, &network),
        // Set by the caller where it joins a namespace made for the sandbox (`Network::Attached`).
        network_namespace: None,
        id_map: id_map(ids, user)?,
        main_ids: command_ids(ids, user),
        hostname: c_string(hostname.to_owned())?,
        rootfs: path_c_string(root)?,
        binds: rootfs
            .binds
            .iter()
            .map(|(source, target, read_only)| {
                let overlay = match rootfs.layers.iter().find(|(host, _)| host == source) {
                    Some((host, layer)) => Some(
                        sys::overlay_read_only_options(layer, host)
                            .map_err(|error| ExecutorError::InvalidRequest(error.to_string()))?,
                    ),
                    None => None,
                };
                Ok(Bind {
                    source: path_c_string(source)?,
                    target: path_c_string(target)?,
                    read_only: *read_only,
                    overlay,
                })
            })
            .collect::<Result<_, ExecutorError>>()?,
        devpts: path_c_string(&root.join("dev/pts"))?,
        proc_dir: path_c_string(&root.join("proc"))?,
        proc_sys: path_c_string(&root.join("proc/sys"))?,
        join: None,
    })
}

pub(super) fn choose_mode(config: &ExecutorConfig, self_exe: &OwnedFd) -> Result<Mode, ExecutorError> {
    if config.isolation == Isolation::Plain {
        return Ok(Mode::Plain);
    }
    // A user namespace always where one can be made; root gets a range of unused host
    // ids for it. Inside some containers root can make every namespace but that one.
    let attempts: Vec<IdMode> = if sys::current_uid() == 0 {
        let (base, count) = config.sandbox_id_range;
        vec![IdMode::Range { base, count }, IdMode::HostRoot]
    } else {
        vec![IdMode::Own]
    };
    let mut failures = Vec::new();
    for ids in attempts {
        match probe(config, ids, self_exe) {
            Ok(()) => return Ok(Mode::Namespaces { ids }),
            Err(failure) => failures.push(format!("{ids:?}: {failure}")),
        }
    }
    let reason = failures.join("; ");
    if config.isolation == Isolation::Namespaces {
        return Err(ExecutorError::NamespacesUnavailable(reason));
    }
    warn!(
        %reason,
        "Linux namespaces are unavailable: sandboxes run as plain processes with the emulator's rights, sharing the host's filesystem, hostname and pid space; they are NOT isolated from the host or from each other"
    );
    Ok(Mode::Plain)
}

static PROBE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Builds a throw-away sandbox with every step a real one takes (root, pivot, privilege
/// drop, re-executed init).
fn probe(config: &ExecutorConfig, ids: IdMode, self_exe: &OwnedFd) -> Result<(), String> {
    let dir = config.root_dir.join(format!(
        ".probe-{}-{}",
        std::process::id(),
        PROBE_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mode = Mode::Namespaces { ids };
    let result = (|| {
        let rootfs = rootfs::prepare(&dir, &config.host_paths, None, mode.sandbox_owner())?;
        let ns = ns_plan(ids, "cwsandbox-probe", &rootfs, Network::Host, None).map_err(|error| error.to_string())?;
        let (report_read, report_write) = std::io::pipe().map_err(|error| error.to_string())?;
        let plan = InitPlan {
            parent: std::process::id() as pid_t,
            report_fd: std::os::fd::IntoRawFd::into_raw_fd(report_write),
            go_fd: -1,
            started_fd: -1,
            control_fd: -1,
            ns: Some(ns),
            self_exe: self_exe.as_raw_fd(),
            probe: true,
            warm: false,
            idle: false,
            cwd: c"/".to_owned(),
            cwd_message: Vec::new(),
            program: None,
        };
        child::probe_namespaces(&plan, report_read.as_raw_fd()).map_err(|(stage, errno)| {
            format!("{} failed: {}", stage.describe(), std::io::Error::from_raw_os_error(errno))
        })
    })();
    remove_dir(&dir);
    result
}

fn namespace_flags(user_namespace: bool, network: &Network) -> libc::c_int {
    let mut flags = libc::CLONE_NEWUTS | libc::CLONE_NEWIPC | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
    if user_namespace {
        flags |= libc::CLONE_NEWUSER;
    }
    if *network == Network::LoopbackOnly {
        flags |= libc::CLONE_NEWNET;
    }
    flags
}

/// The (uid, gid) a sandbox's commands switch to in its user namespace: a root emulator's
/// switch to the sandbox's root or the ids asked for; an unprivileged emulator's are already
/// the ids asked for (its map makes them so), and without a user namespace nothing switches.
fn command_ids(ids: IdMode, user: Option<SandboxUser>) -> Option<(u32, u32)> {
    match ids {
        IdMode::Range { .. } => Some(user.map_or((0, 0), |user| (user.uid, user.gid))),
        IdMode::Own | IdMode::HostRoot => None,
    }
}

/// Why the sandbox's processes cannot run as `user` in this mode, if they cannot.
pub(super) fn user_problem(mode: Mode, user: Option<SandboxUser>) -> Option<String> {
    let user = user?;
    match mode {
        Mode::Namespaces { ids: IdMode::Range { count, .. } } if user.uid >= count || user.gid >= count => {
            Some(format!(
                "user {}:{} is outside the sandbox's user namespace, which maps ids 0 to {}",
                user.uid,
                user.gid,
                count.saturating_sub(1)
            ))
        }
        Mode::Namespaces { ids: IdMode::Range { .. } | IdMode::Own } => None,
        Mode::Namespaces { ids: IdMode::HostRoot } | Mode::Plain => Some(format!(
            "running as user {}:{} needs a user namespace, which this emulator cannot make (isolation {})",
            user.uid,
            user.gid,
            if mode == Mode::Plain { "plain" } else { "namespaces without a user namespace" }
        )),
    }
}

/// Why a sidecar cannot run as `user` next to a main command running as `main`, if it cannot:
/// as for the main command, and an unprivileged emulator's user namespace maps one user only.
pub(super) fn sidecar_user_problem(
    mode: Mode,
    main: Option<SandboxUser>,
    name: &str,
    user: Option<SandboxUser>,
) -> Option<String> {
    if let Some(problem) = user_problem(mode, user) {
        return Some(format!("container {name:?}: {problem}"));
    }
    let as_text =
        |user: Option<SandboxUser>| user.map_or("its default".to_owned(), |user| format!("{}:{}", user.uid, user.gid));
    match mode {
        Mode::Namespaces { ids: IdMode::Own } if user != main => Some(format!(
            "container {name:?} asks for user {} and the main container for {}: an unprivileged emulator's sandbox maps one user only (run the emulator as root for a user per container)",
            as_text(user),
            as_text(main)
        )),
        _ => None,
    }
}

/// The id maps of a sandbox's user namespace.
fn id_map(ids: IdMode, user: Option<SandboxUser>) -> Result<Option<IdMap>, ExecutorError> {
    Ok(match ids {
        // Files keep their owner and commands run with the emulator user's rights (no more),
        // under the ids the sandbox asks for, if it asks.
        IdMode::Own => {
            let (uid, gid) = (sys::current_uid(), sys::current_gid());
            let (inside_uid, inside_gid) = user.map_or((uid, gid), |user| (user.uid, user.gid));
            Some(IdMap::Own {
                uid_map: c_string(format!("{inside_uid} {uid} 1\n"))?,
                gid_map: c_string(format!("{inside_gid} {gid} 1\n"))?,
            })
        }
        IdMode::Range { base, count } => Some(IdMap::Range {
            uid_map: c_string(format!("0 {base} {count}\n"))?,
            gid_map: c_string(format!("0 {base} {count}\n"))?,
        }),
        IdMode::HostRoot => None,
    })
}
