//! Everything a sandbox's keeper needs, prepared before the fork: the namespaces and root to
//! build and the command to start. The emulator makes a plan, and a keeper the zygote forks
//! decodes one; both sides name these types, so they depend on no process's code.

use std::ffi::CString;
use std::os::fd::RawFd;

use libc::{c_int, pid_t};

use crate::main_command::Program;

/// How the ids of a sandbox's user namespace map to the host's.
pub(crate) enum IdMap {
    /// The emulator is unprivileged: its own uid and gid map to themselves (the only
    /// mapping it may write), written by the keeper from inside.
    Own { uid_map: CString, gid_map: CString },
    /// The emulator is root: the sandbox's ids 0..N map to an unused range of host ids,
    /// so the sandbox's root owns nothing of the host. Only a process outside the new
    /// namespace may write such a map: a helper forked before `unshare` does.
    Range { uid_map: CString, gid_map: CString },
}

/// A host path bound into the sandbox's root.
pub(crate) struct Bind {
    pub(crate) source: CString,
    pub(crate) target: CString,
    pub(crate) read_only: bool,
    /// Instead of a bind, a read-only overlay mount with these options (`lowerdir=LAYER:SOURCE`):
    /// the sandbox's own files laid over a host directory.
    pub(crate) overlay: Option<CString>,
}

/// How to build a sandbox's namespaces and its root.
pub(crate) struct NsPlan {
    pub(crate) flags: c_int,
    /// `None`: no user namespace (root where none can be made).
    pub(crate) id_map: Option<IdMap>,
    pub(crate) hostname: CString,
    /// Host directory that becomes the sandbox's `/` (prepared by `rootfs`).
    pub(crate) rootfs: CString,
    /// Host directories and devices bound into it, in order.
    pub(crate) binds: Vec<Bind>,
    /// `<rootfs>/dev/pts`, `<rootfs>/proc` and `<rootfs>/proc/sys`.
    pub(crate) devpts: CString,
    pub(crate) proc_dir: CString,
    pub(crate) proc_sys: CString,
    /// The (uid, gid) of the user namespace the main command switches to, where it switches
    /// (a root emulator's sandboxes: their root, or the ids the spec asks for).
    pub(crate) main_ids: Option<(u32, u32)>,
    /// Another container of a Pod (a sidecar with a root of its own): the Pod's main init, whose
    /// user, network, IPC and UTS namespaces the keeper joins before it makes only a mount and
    /// a pid namespace of its own (`flags`); with `init_as_root`, init becomes that user
    /// namespace's root (a root emulator's range mapping) as the main init does.
    pub(crate) join: Option<(pid_t, bool)>,
    /// A network namespace made for the sandbox beforehand, which the keeper joins before it
    /// makes the others (`Network::Attached`).
    pub(crate) network_namespace: Option<CString>,
}

impl NsPlan {
    /// What init switches to: uid and gid 0 of the user namespace for a root emulator's
    /// sandboxes, nothing otherwise. Init stays the sandbox's root whatever user the commands
    /// run as, so it can reap and signal them all.
    pub(crate) fn init_ids(&self) -> Option<(u32, u32)> {
        let joined_as_root = matches!(self.join, Some((_, true)));
        (matches!(self.id_map, Some(IdMap::Range { .. })) || joined_as_root).then_some((0, 0))
    }
}

/// Everything a sandbox keeper needs, prepared before the fork.
pub(crate) struct InitPlan {
    /// The emulator's pid, to detect that it died before the death signal was armed.
    pub(crate) parent: pid_t,
    pub(crate) report_fd: RawFd,
    /// The main command waits for one byte here before it runs: the emulator
    /// sends it once it holds its handles on the sandbox, so even a command that
    /// ends at once cannot take the namespaces away before they are opened.
    pub(crate) go_fd: RawFd,
    /// Close-on-exec: the emulator sees this pipe's end once the main command has
    /// exec'd (or given up), so `start` returns with the command running.
    pub(crate) started_fd: RawFd,
    /// Init's end of its channel with the emulator (`crate::init_channel`), over which
    /// commands are exec'd; -1 for none (plain mode, the probe).
    pub(crate) control_fd: RawFd,
    /// `None` runs the plain fallback.
    pub(crate) ns: Option<NsPlan>,
    /// The emulator's own executable, re-executed as the sandbox's init so that init holds
    /// none of the emulator's memory or environment.
    pub(crate) self_exe: RawFd,
    /// A throw-away sandbox that only checks the setup works: init starts no command.
    pub(crate) probe: bool,
    /// A sandbox made ahead of need: init re-executes at once and waits on `go_fd` for its
    /// [`crate::activation::Activation`], then starts the main command itself
    /// (`crate::init`); `cwd` and `program` are unused.
    pub(crate) warm: bool,
    /// The keeper and everything it forks run at idle priority (`SCHED_IDLE`) until the
    /// emulator raises them: for sandboxes made ahead of need, which must not take a CPU from
    /// work that is waited for.
    pub(crate) idle: bool,
    pub(crate) cwd: CString,
    pub(crate) cwd_message: Vec<u8>,
    /// `None` keeps the sandbox alive with an idle process.
    pub(crate) program: Option<Program>,
}
