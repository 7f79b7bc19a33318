//! Runs and controls the processes of emulated sandboxes.
//!
//! Each sandbox's main command really runs on this machine, by default in its
//! own Linux namespaces (user, mount with a root directory of its own, UTS, IPC,
//! pid) without `CAP_SYS_ADMIN`; commands run with [`Executor::exec`], file
//! operations and logs all act inside the same sandbox. Where namespaces are
//! unavailable the executor falls back to plain, unisolated processes (see the
//! crate's README for the differences).
//!
//! By default a sandbox's commands are the host's programs, bound read-only into its root; a
//! sandbox started with an image root ([`LaunchSpec::image`]) runs in that root filesystem
//! instead, through an OCI runtime (`runc`; see the README's OCI section).
//!
//! This crate knows nothing of protobuf or the simulation: plain Rust types.

mod activation;
mod child;
mod error;
mod exec;
mod executor;
mod file_helper;
mod file_mounts;
mod files;
mod init;
mod init_channel;
mod logs;
mod main_command;
mod message_socket;
mod process_entry;
mod process_title;
pub(crate) mod rootfs;
mod sandbox_plan;
mod setup_report;
mod spawner;
mod sys;
mod tree_copy;
mod zygote;
mod zygote_process;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use error::{ExecutorError, FileError, LogError};
pub use exec::{ExecExit, ExecOutput, ExecRequest, ExecSession, ExecStdin, Output, Stream, TtyControl};
pub use executor::{CLAIMS_DIR, Executor, GVISOR_ATTACHED_NETWORK, SNAPSHOTS_DIR};
pub use logs::{LogChunk, LogFollower, LogReader, LogSlice};
pub use rootfs::{DEFAULT_HOST_PATHS, check_file_path, memory_backed_dir, unmount_all_under};

/// How sandboxes are isolated from the host and from each other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// Namespaces if they work here (probed at start), otherwise plain processes
    /// with a warning.
    #[default]
    Auto,
    /// Namespaces, or fail to start.
    Namespaces,
    /// Plain processes: no namespaces at all.
    Plain,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Each sandbox gets a directory here (in namespaces mode its root directory,
    /// invisible to it as a host path). Created if missing.
    pub root_dir: PathBuf,
    pub isolation: Isolation,
    /// Largest file `read_file`/`write_file` handle; larger ones are `TooLarge`.
    pub max_file_bytes: u64,
    /// How much of each sandbox's output is kept for `logs`; older bytes are dropped.
    pub log_buffer_bytes: usize,
    /// Host paths bound read-only into every namespaced sandbox (its programs and
    /// libraries); nothing else of the host's filesystem is in its view.
    pub host_paths: Vec<PathBuf>,
    /// For an emulator running as root: the host ids (first, count) that a sandbox's ids
    /// 0.. map to, so that its root user owns nothing of the host. Shared by all sandboxes.
    pub sandbox_id_range: (u32, u32),
    /// How long a file operation may take, waiting for a turn included.
    pub file_timeout: Duration,
    /// File operations in flight at once (each holds a thread).
    pub max_file_operations: usize,
    /// Namespaces mode: how many sandboxes are kept started ahead of need (namespaces, root
    /// and init made; a start that can use one only sends it its command). 0 makes every
    /// start from scratch.
    pub warm_sandboxes: usize,
    /// The OCI runtime (`runc`) that runs sandboxes started with a [`LaunchSpec::image`]; `None`
    /// (the default) runs none. Probed when the executor starts ([`Executor::oci`] says whether
    /// it works here and how); needs a root emulator with user namespaces.
    pub oci_runtime: Option<PathBuf>,
    /// How image sandboxes get their writable root: `None` (the default) overlayfs where it can
    /// be mounted, else a copy; `Some` that one only (a probe failure otherwise).
    pub oci_writable_layer: Option<WritableLayer>,
    /// gVisor's OCI runtime (`runsc`) that runs sandboxes started with
    /// [`RuntimeHandler::Runsc`] (a Pod of RuntimeClass `gvisor`); `None` (the default) runs
    /// none. Probed when the executor starts ([`Executor::gvisor`]); needs a root emulator.
    pub gvisor_runtime: Option<PathBuf>,
}

/// The default first host id of a root emulator's sandboxes: far above the ranges
/// `useradd` hands out for subordinate ids (100000 upwards, 65536 per user).
pub const DEFAULT_SANDBOX_ID_BASE: u32 = 1_000_000_000;

impl ExecutorConfig {
    /// 32 MiB files (the real client's unary limit), 4 MiB of logs per sandbox, the
    /// host's system directories in view, 30 s and 16 at once for file operations.
    pub fn new(root_dir: impl Into<PathBuf>) -> ExecutorConfig {
        ExecutorConfig {
            root_dir: root_dir.into(),
            isolation: Isolation::Auto,
            max_file_bytes: 32 << 20,
            log_buffer_bytes: 4 << 20,
            host_paths: rootfs::DEFAULT_HOST_PATHS.iter().map(PathBuf::from).collect(),
            sandbox_id_range: (DEFAULT_SANDBOX_ID_BASE, 65_536),
            file_timeout: Duration::from_secs(30),
            max_file_operations: 16,
            warm_sandboxes: 2,
            oci_runtime: None,
            oci_writable_layer: None,
            gvisor_runtime: None,
        }
    }
}

/// How to start a sandbox's main command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchSpec {
    /// The sandbox's hostname (its Pod name). In plain mode only `HOSTNAME` carries it.
    pub hostname: String,
    /// Program and arguments, looked up in `PATH`. Empty keeps the sandbox alive
    /// with an idle process, like `sleep infinity`.
    pub command: Vec<String>,
    /// Environment of the main command and of every exec'd command, on top of
    /// `PATH`, `HOSTNAME` and `HOME` defaults. Nothing of the emulator's own
    /// environment leaks in.
    pub env: BTreeMap<String, String>,
    /// As the sandbox sees it: absolute, or relative to `/` (the default). In
    /// namespaces mode a missing one is created inside the sandbox's root (never on
    /// the host); under a read-only host directory it must exist. Plain mode: relative to
    /// a directory of the sandbox's own (the default), an absolute one must exist.
    pub working_dir: Option<String>,
    /// Files placed in the sandbox before its command starts (the API's mounted files): at
    /// absolute paths of the sandbox's own root, mode 0644, owned by the sandbox's root user,
    /// missing directories made. Namespaces mode only: plain processes have no root of their
    /// own to put them in, so a start with files fails there. One under a read-only host
    /// directory (`/usr`, `/etc`, …) is laid over it: a read-only overlay of a layer of the
    /// sandbox's own over the host's directory (a root emulator mounts it in its own mount
    /// namespace; an unprivileged one's keeper mounts it, refused where the host's directory has
    /// mounts under it); `/proc` and `/dev` cannot hold one, nor can a path where the host has a
    /// directory, or a link or a file on the way. An image sandbox gets each bound at its path
    /// (anywhere in the image but `/proc` and `/dev`).
    pub files: Vec<MountedFile>,
    /// What the sandbox's processes reach on the network.
    pub network: Network,
    /// The user and group ids, as the sandbox sees them, its main command and exec'd commands
    /// run as (a container's `runAsUser`/`runAsGroup`); `None`: the sandbox's root (a root
    /// emulator's sandboxes) or the emulator's own user (an unprivileged one). Needs a user
    /// namespace: a root emulator maps ids below its `sandbox_id_range` count (65,536), an
    /// unprivileged one maps the asked ids to its own; without one (plain processes, root
    /// where no user namespace can be made) a start that asks for ids fails.
    pub user: Option<SandboxUser>,
    /// The main container's name, which [`ExecRequest::container`] and [`Executor::logs`] may
    /// use for it (any name: none is checked against it when it is empty).
    pub name: String,
    /// Scratch volumes (a Pod's `emptyDir`s) mounted in the sandbox's root: each volume is a
    /// directory of the sandbox's, made empty at its start and removed with it, bound at every
    /// path that mounts it (all containers share the root, so every mount is seen by all).
    /// Namespaces mode and image sandboxes only.
    pub volume_mounts: Vec<VolumeMount>,
    /// The Pod's other containers: each runs its own command in the sandbox's namespaces, next
    /// to the main command, with its own environment, working directory and log. Namespaces
    /// mode only (plain processes have nothing to put them in apart from the host).
    pub sidecars: Vec<Sidecar>,
    /// Run the sandbox in this image's root filesystem through the OCI runtime
    /// ([`ExecutorConfig::oci_runtime`]) instead of on the host's system directories. The
    /// command, environment, working directory and user are final (the caller has merged the
    /// image's config with the Pod's); the command is looked up in the image. Each sidecar then
    /// runs in an image of its own ([`Sidecar::image`]); an empty command is refused for such a
    /// sandbox, and no warm sandbox serves it.
    pub image: Option<ImageRoot>,
    /// The memory limit (a container's `limits.memory`), enforced through cgroups for an image
    /// sandbox where the host allows ([`OciRuntimeInfo::cgroup_limits`]); a main command killed
    /// for going over it is reported with [`MainExit::oom_killed`].
    pub memory_limit_bytes: Option<u64>,
    /// The CPU limit in thousandths of a CPU (`limits.cpu`), a CFS quota for an image sandbox
    /// where the host allows.
    pub cpu_limit_millis: Option<u64>,
    /// What must hold of sidecars before the main command starts. The sidecars then start
    /// first, in order, each after what it waits for: an image sandbox's before its main
    /// container is made; in namespaces mode the main command's process is made and waits for
    /// its go meanwhile. Names every container resolves (`host_aliases`) come with it.
    pub after: Vec<StartAfter>,
    /// Names every container resolves to its loopback (`/etc/hosts`), as Compose's service
    /// names resolve inside the Pod; empty: the image's (or the host's) `/etc/hosts`. In
    /// namespaces mode the Pod's hosts file is a mounted file of every container, laid over the
    /// host's read-only `/etc`.
    pub host_aliases: Vec<String>,
    /// The scratch volumes that are memory-backed (`emptyDir` with medium Memory): each a tmpfs
    /// of its size instead of a directory on disk, shared by every container that mounts it.
    /// Needs a root emulator ([`Executor::memory_volumes`]).
    pub memory_volumes: Vec<MemoryVolume>,
    /// What runs the sandbox (a Pod's RuntimeClass handler): the executor's own isolation, or
    /// gVisor's `runsc` ([`ExecutorConfig::gvisor_runtime`]), in its image or, without one, on
    /// the host's system directories read-only. A gVisor sandbox has one container.
    pub handler: RuntimeHandler,
}

/// What runs a sandbox, as a RuntimeClass's `handler` names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RuntimeHandler {
    /// The node's default: namespaces (or plain processes), or runc for an image.
    #[default]
    Default,
    /// gVisor's `runsc`: the sandbox's processes run on gVisor's own kernel.
    Runsc,
}

/// A memory-backed scratch volume: a tmpfs of `size_bytes`, whose pages count against the
/// memory of whoever writes them; a write past its size fails with ENOSPC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryVolume {
    /// The volume's name (a [`VolumeMount::volume`]).
    pub volume: String,
    pub size_bytes: u64,
}

/// An image's unpacked root filesystem, which a sandbox runs in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageRoot {
    /// The unpacked root directory, owned by the sandboxes' host id range (the image's root
    /// files owned by `sandbox_id_range.0`). Shared by every sandbox of the image and never
    /// written to: each sandbox writes to a layer of its own.
    pub rootfs: PathBuf,
}

/// Whether sandboxes can run in images here ([`Executor::oci`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OciSupport {
    /// No OCI runtime was configured.
    NotConfigured,
    /// The runtime was configured but does not work here: why.
    Unavailable(String),
    /// It works, as described.
    Ready(OciRuntimeInfo),
}

/// The OCI runtime in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciRuntimeInfo {
    /// The runtime's program.
    pub runtime: PathBuf,
    /// Its `--version` first line.
    pub version: String,
    /// How each sandbox gets a writable root over the shared image.
    pub writable_layer: WritableLayer,
    /// Whether memory and CPU limits are enforced (cgroups accepted them in the probe).
    pub cgroup_limits: bool,
}

/// How an image sandbox's writes are kept from the shared image root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritableLayer {
    /// An overlay mount (the image below, a directory of the sandbox's above), made in a mount
    /// namespace of the runtime's own so that it goes with the container.
    Overlay,
    /// A copy of the image root per sandbox (`cp -a`), where overlayfs cannot be mounted.
    Copy,
}

/// Where a scratch volume appears in a sandbox's root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeMount {
    /// The volume's name: a DNS label, unique in the sandbox.
    pub volume: String,
    /// Absolute path in the sandbox (not under `/proc`, `/dev` or a read-only host directory).
    pub path: String,
    pub read_only: bool,
    /// A directory of the volume (relative, made if missing) mounted instead of its root.
    pub sub_path: String,
    /// The snapshot ([`Executor::snapshot_volume`]) whose copy the volume starts with instead of
    /// empty; every mount of one volume names the same one (or none).
    pub restore_from: Option<String>,
    /// A claim, by the key of its directory under the root's `.volumes` (2 to 8 segments of
    /// `a-z0-9-_` separated by `/`; the emulator's is `organization/cluster/namespace/name`), the
    /// volume's data instead of a directory of the sandbox's own: made on first use, shared by
    /// every sandbox that mounts it, kept when they end (and when the executor shuts down).
    /// Mounted at its root only: other sandboxes write to it, so a sub-path could be swapped for
    /// a link.
    pub claim: Option<String>,
}

/// A container of a sandbox other than its main one. Without images, all of a sandbox's
/// containers share its namespaces and root (no image is pulled, so there is no file system of
/// their own to give them): what sets one apart is its command, environment, working directory,
/// user and log. In an image sandbox each has its image, root and processes of its own
/// ([`Sidecar::image`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sidecar {
    /// Unique among the sandbox's containers, the main one's included.
    pub name: String,
    /// Program and arguments, looked up in this container's `PATH`. Empty runs nothing: the
    /// container is there (exec reaches it) with no process of its own, as an idle one.
    pub command: Vec<String>,
    /// On top of the same defaults as the main command's (`PATH`, `HOSTNAME`, `HOME`); the
    /// main container's environment is not inherited.
    pub env: BTreeMap<String, String>,
    /// As [`LaunchSpec::working_dir`]; a missing one is created inside the sandbox's root.
    pub working_dir: Option<String>,
    /// As [`LaunchSpec::user`]. An unprivileged emulator maps one user per sandbox, so there a
    /// sidecar must run as the main command's user.
    pub user: Option<SandboxUser>,
    /// Its own image, for a sandbox that runs in images ([`LaunchSpec::image`], required there):
    /// the container is then a container of the OCI runtime of its own, with its own root,
    /// mount and PID namespaces, joined to the main container's network, IPC and UTS namespaces
    /// (a Pod's containers share those). Its command, environment, working directory and user
    /// are final, as the main container's are.
    pub image: Option<ImageRoot>,
    /// An image sidecar's own mounts of the sandbox's volumes (the main container's are
    /// [`LaunchSpec::volume_mounts`]; a sandbox without images shares one root, where every
    /// container's mounts are the spec's).
    pub volume_mounts: Vec<VolumeMount>,
    /// An image sidecar's own mounted files.
    pub files: Vec<MountedFile>,
    /// An image sidecar's memory limit, as [`LaunchSpec::memory_limit_bytes`].
    pub memory_limit_bytes: Option<u64>,
    /// An image sidecar's CPU limit, as [`LaunchSpec::cpu_limit_millis`].
    pub cpu_limit_millis: Option<u64>,
    /// What must hold of other containers before this one starts (those starting before it).
    pub after: Vec<StartAfter>,
    /// The check that says an image sidecar has started well ("healthy"), which a container
    /// that starts after it on [`StartCondition::Healthy`] waits for.
    pub startup_probe: Option<StartupProbe>,
}

/// A container starts once another one is in a state: Compose's `depends_on` conditions, kept
/// as a Pod keeps the order of its (sidecar) init containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartAfter {
    /// The other container (a sidecar of the same sandbox).
    pub container: String,
    /// What of it.
    pub condition: StartCondition,
}

/// What a container waits for of another one before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartCondition {
    /// It has started (`service_started`).
    Started,
    /// Its startup probe passed (`service_healthy`); failing it fails the sandbox's start.
    Healthy,
    /// It ran to completion with exit code 0 (`service_completed_successfully`); another end
    /// fails the sandbox's start.
    CompletedSuccessfully,
}

/// An exec check run in a container until it succeeds (Kubernetes' startup probe, Compose's
/// `healthcheck`): after `initial_delay`, every `period`, each run given `timeout`; the
/// container is unhealthy once `failure_threshold` runs in a row failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupProbe {
    /// Program and arguments, looked up in the container's `PATH`.
    pub exec: Vec<String>,
    pub initial_delay: std::time::Duration,
    pub period: std::time::Duration,
    pub timeout: std::time::Duration,
    pub failure_threshold: u32,
}

/// A user and group id inside a sandbox.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SandboxUser {
    /// The user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
}

/// A sandbox's network.
#[derive(Clone, Debug, Default)]
pub enum Network {
    /// The host's network, as a container with host networking (the emulator's default).
    #[default]
    Host,
    /// A network namespace of its own with only its loopback interface, up: the sandbox reaches
    /// nothing outside itself (not the host, the emulator or the internet) and nothing outside
    /// reaches it. Namespaces mode and image sandboxes only: plain processes cannot have one, so
    /// a start that asks for it fails there.
    LoopbackOnly,
    /// A network of its own with an address, routes and filter rules, which the host makes
    /// (`cwsandbox-network`) where the executor asks: a namespace made beforehand that the
    /// sandbox joins (namespaces mode, gVisor: the host's user namespace owns it, so the
    /// sandbox's root cannot change it), or the namespace runc made for the container, which
    /// its user namespace must own for `runc exec` to join it. Namespaces mode and image
    /// sandboxes only.
    Attached(std::sync::Arc<dyn AttachNetwork>),
}

impl PartialEq for Network {
    fn eq(&self, other: &Network) -> bool {
        match (self, other) {
            (Network::Host, Network::Host) | (Network::LoopbackOnly, Network::LoopbackOnly) => true,
            (Network::Attached(one), Network::Attached(other)) => std::sync::Arc::ptr_eq(one, other),
            _ => false,
        }
    }
}

impl Eq for Network {}

/// The host's side of [`Network::Attached`]: it makes the sandbox's network where the executor
/// says. Each is called at most once per start, on a blocking thread.
pub trait AttachNetwork: Send + Sync + std::fmt::Debug {
    /// A namespace with the sandbox's network, made for its processes to join; its path.
    fn make_namespace(&self) -> Result<std::path::PathBuf, String>;
    /// The sandbox's network put into the network namespace of the process `pid` (a
    /// container's init, stopped at its gate before its command runs).
    fn plumb_into(&self, pid: u32) -> Result<(), String>;
}

impl Network {
    /// Whether the sandbox has a network namespace of its own (not the host's).
    pub fn is_own(&self) -> bool {
        !matches!(self, Network::Host)
    }
}

/// One file placed in a sandbox before it starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountedFile {
    /// Absolute path as the sandbox sees it.
    pub path: String,
    /// The file's bytes.
    pub content: Vec<u8>,
}

/// A sandbox's main command ended by itself (not through `stop`, `kill` or
/// `shutdown`). The sandbox is over: every process of it is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MainExit {
    pub id: String,
    /// `None` for the main command (its end ends the sandbox); a sidecar's name for the end of
    /// that container's command (the sandbox goes on).
    pub container: Option<String>,
    /// The exit code, or 128+N when killed by signal N.
    pub exit_code: i32,
    /// The main command of an image sandbox was killed for going over its memory limit (the
    /// cgroup's OOM killer ran): Kubernetes' `OOMKilled`.
    pub oom_killed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    /// The emulator moves these into tasks and shares the executor between them.
    #[test]
    fn handles_can_cross_tasks() {
        send_sync::<Executor>();
        send_sync::<LogReader>();
        send::<ExecSession>();
        send::<ExecStdin>();
        send::<ExecOutput>();
        send::<ExecExit>();
        send::<LogFollower>();
        send_sync::<TtyControl>();
    }
}
