//! Image sandboxes: a sandbox run in an image's root filesystem by an OCI runtime (`runc`).
//!
//! A sandbox's directory `<root_dir>/<id>` holds `bundle/config.json` (built with `oci-spec`),
//! `rootfs` (the overlay's mount point, or the image's copy), `upper` and `work` (the overlay's
//! layers), `volumes`, `files` and `exec` (the process files of execs). The runtime's state is
//! `<root_dir>/.runc`, one per executor. `runc run` is the sandbox's keeper: the emulator's child,
//! with the container's stdout and stderr passed through to the log pipe and the container's exit
//! as its own; it runs in a mount namespace of its own that holds the overlay mount, so the mount
//! goes with the container whatever happens to the emulator. A watchdog shell, waiting on a pipe
//! only the executor holds, deletes every container left when the executor goes (even by
//! SIGKILL).
//!
//! The same code runs gVisor's `runsc` for sandboxes of RuntimeClass `gvisor` ([`Flavor::Gvisor`]):
//! its bundles have no user namespace (runsc refuses our id mappings here, and gVisor's own
//! kernel is the boundary: the sandbox's root is root only of gVisor's kernel), their ids are the
//! image's own (trees unpacked unshifted), and their processes use the host network stack of the
//! network namespace runsc starts in (`--network=host`): the host's, or one made with only its
//! loopback. Execs and file operations run through the gVisor helper (`gvisor-helper/main.rs`),
//! bound read-only into every such sandbox, since only a process inside sees gVisor's view.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cwsandbox_sync::MutexUnpoisoned;
use libc::pid_t;
use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder, LinuxDeviceCgroupBuilder,
    LinuxIdMappingBuilder, LinuxMemoryBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, LinuxResourcesBuilder, Mount,
    MountBuilder, Process, ProcessBuilder, RootBuilder, Spec, SpecBuilder, UserBuilder, get_default_maskedpaths,
    get_default_readonly_paths,
};
use tracing::{debug, warn};

use super::layout::{DEFAULT_PATH, program_candidates};
use crate::sys;
use crate::{ExecutorConfig, Network, OciRuntimeInfo, OciSupport, WritableLayer};

/// The capabilities of a container's root: the default set of Docker and containerd.
const DEFAULT_CAPABILITIES: [Capability; 14] = [
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fowner,
    Capability::Fsetid,
    Capability::Kill,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::NetRaw,
    Capability::SysChroot,
    Capability::Mknod,
    Capability::AuditWrite,
    Capability::Setfcap,
];

/// How long `runc run` may take to create the container.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits for EOF on its stdin (the executor's pipe closing: the executor dropped, or the emulator
/// dead), then kills every process in the executor's containers' cgroups (`$3-*`: found even if
/// the runtime's state directory was removed meanwhile) and force-deletes every container of the
/// runtime state directory `$2`, and any cgroup left.
const WATCHDOG_SCRIPT: &str = r#"read -r _ignored
exec </dev/null
for procs in /sys/fs/cgroup/memory/"$3"-*/cgroup.procs /sys/fs/cgroup/"$3"-*/cgroup.procs; do
  tries=0
  while [ -f "$procs" ] && [ -n "$(cat "$procs")" ] && [ "$tries" -lt 200 ]; do
    while read -r pid; do kill -9 "$pid" 2>/dev/null; done < "$procs"
    tries=$((tries + 1))
    sleep 0.01
  done
done
# (runc makes its state directory when it is missing: not for a directory removed meanwhile.)
[ -d "$2" ] && "$1" --root "$2" list -q 2>/dev/null | while read -r id; do "$1" --root "$2" delete -f "$id" >/dev/null 2>&1; done
for left in /sys/fs/cgroup/*/"$3"-* /sys/fs/cgroup/"$3"-*; do [ -d "$left" ] && rmdir "$left" 2>/dev/null; done
exit 0"#;

static NEXT_TAG: AtomicU64 = AtomicU64::new(0);

/// Under the executor's root: gVisor's state, helper, image-less root and masks.
const GVISOR_DIR: &str = ".gvisor";

/// Where the gVisor helper is bound in a gVisor sandbox (read-only).
pub(super) const GVISOR_HELPER: &str = "/.cwsandbox/gvisor-helper";

/// The gVisor helper, built static by the build script.
const GVISOR_HELPER_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/gvisor-helper"));

/// Which OCI runtime an [`OciRuntime`] is: what its bundles and commands differ in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Flavor {
    /// runc: the sandbox's ids mapped to the host's range in a user namespace of its own.
    Runc,
    /// gVisor's runsc: no user namespace, host networking in the namespace it starts in, execs
    /// and file operations through the helper at `helper` (bound at [`GVISOR_HELPER`]).
    Gvisor { helper: PathBuf },
}

/// The OCI runtime of an executor, once probed.
#[derive(Debug)]
pub(super) struct OciRuntime {
    pub(super) info: OciRuntimeInfo,
    pub(super) flavor: Flavor,
    /// The runtime's state directory (`runc --root`).
    state: PathBuf,
    /// The host id the sandbox's id 0 maps to, and how many are mapped.
    base: u32,
    count: u32,
    /// Prefix of the containers' cgroup names, unique to this executor.
    cgroup_prefix: String,
    /// Dropped with the executor (or closed by the emulator's death): the watchdog then deletes
    /// every container left. Shutdown closes it and waits for the watchdog's end.
    watchdog: std::sync::Mutex<Option<Watchdog>>,
    /// gVisor: the binds of a sandbox without an image, found once ([`OciRuntime::hostless_binds`]).
    hostless: std::sync::OnceLock<Vec<(PathBuf, String, bool)>>,
}

/// The watchdog's pipe, and word of its end.
#[derive(Debug)]
struct Watchdog {
    _pipe: std::io::PipeWriter,
    ended: tokio::sync::oneshot::Receiver<()>,
}

/// What a start asks of its container.
pub(super) struct ContainerPlan {
    pub(super) id: String,
    /// The sandbox's directory.
    pub(super) dir: PathBuf,
    /// The image's shared, read-only root.
    pub(super) image: PathBuf,
    pub(super) hostname: String,
    pub(super) argv: Vec<String>,
    pub(super) env: BTreeMap<String, String>,
    pub(super) cwd: String,
    /// (uid, gid) inside the user namespace.
    pub(super) user: (u32, u32),
    pub(super) network: Network,
    /// (host source, path in the container, read-only).
    pub(super) binds: Vec<(PathBuf, String, bool)>,
    pub(super) memory: Option<u64>,
    pub(super) cpu_millis: Option<u64>,
    /// The init of the Pod's main container, whose network (where it has one of its own), IPC
    /// and UTS namespaces this one joins, as a Pod's containers share them; `None`: the main
    /// container, which makes them.
    pub(super) join: Option<pid_t>,
    /// A directory where the container's creation waits, once its namespaces exist and before
    /// its command starts, for the executor's word ([`GATE_SCRIPT`]): so a Pod's sidecars can
    /// join them and start first.
    pub(super) gate: Option<PathBuf>,
    /// Whether the command is looked up in the image before the container is made (false for
    /// a gVisor sandbox on the host's directories: the helper reports a missing command).
    pub(super) command_from_image: bool,
}

/// A `createRuntime` hook (run by runc on the host once the container's namespaces exist, its
/// command not started): writes the container's state (with its init's pid) to `$1/state.json`,
/// then waits until the executor writes `$1/go`: `start` lets the creation go on; anything else,
/// or the executor (pid `$2`) gone, fails it.
const GATE_SCRIPT: &str = r#"cat > "$1/state.json.tmp" && mv "$1/state.json.tmp" "$1/state.json" || exit 1
while [ ! -e "$1/go" ]; do
  kill -0 "$2" 2>/dev/null || exit 1
  sleep 0.02
done
[ "$(cat "$1/go")" = start ]"#;

/// A container made ready to run: its bundle written and its root's layers in place.
pub(super) struct PreparedContainer {
    bundle: PathBuf,
    /// Where `runc run` mounts the overlay (target, options) in its own mount namespace.
    overlay: Option<(CString, CString)>,
    pid_file: PathBuf,
    cgroup: String,
    /// gVisor's network: the namespace `runsc run` starts in (its host networking uses it).
    own_network: GvisorNetwork,
}

/// A running (or ended) container of a sandbox: what ends it and reads its end.
#[derive(Debug)]
pub(super) struct OciContainer {
    pub(super) id: String,
    runc: PathBuf,
    state: PathBuf,
    cgroup: String,
    exec_dir: PathBuf,
    next_exec: AtomicU64,
    /// The (uid, gid) the main command runs as, inside.
    pub(super) user: (u32, u32),
    /// Which runtime runs it.
    pub(super) handler: crate::RuntimeHandler,
}

/// One exec's files: its process description and the pid file runc writes.
pub(super) struct ExecFiles {
    pub(super) process: PathBuf,
    pub(super) pid_file: PathBuf,
}

impl OciRuntime {
    /// Probes `config.oci_runtime`: runs a throw-away container (an empty image with the host's
    /// programs bound in) with an overlay root and cgroup limits, falling back to a copied root
    /// and to no limits where those fail.
    pub(super) fn probe(config: &ExecutorConfig, id_range: Option<(u32, u32)>) -> (OciSupport, Option<OciRuntime>) {
        let Some(runc) = config.oci_runtime.clone() else { return (OciSupport::NotConfigured, None) };
        let Some((base, count)) = id_range else {
            return (
                OciSupport::Unavailable(
                    "image sandboxes need a root emulator with user namespaces (rootless runc is not set up)".into(),
                ),
                None,
            );
        };
        match Self::probe_runtime(config, runc, base, count, Flavor::Runc) {
            Ok(runtime) => (OciSupport::Ready(runtime.info.clone()), Some(runtime)),
            Err(message) => {
                warn!(%message, "the OCI runtime does not work here: image sandboxes cannot start");
                (OciSupport::Unavailable(message), None)
            }
        }
    }

    /// Probes `config.gvisor_runtime` (runsc) as [`OciRuntime::probe`] probes runc: a root
    /// emulator only (runsc makes its sandboxes' mounts and cgroups as root here).
    pub(super) fn probe_gvisor(config: &ExecutorConfig) -> (OciSupport, Option<OciRuntime>) {
        let Some(runsc) = config.gvisor_runtime.clone() else { return (OciSupport::NotConfigured, None) };
        if sys::current_uid() != 0 {
            return (OciSupport::Unavailable("gVisor's runsc runs sandboxes for a root emulator only".into()), None);
        }
        // Everything of gVisor's under one directory: runsc's state, the helper, the root of
        // sandboxes without an image and the masks.
        let helper = config.root_dir.join(GVISOR_DIR).join("helper");
        if let Err(error) =
            std::fs::create_dir_all(config.root_dir.join(GVISOR_DIR)).and_then(|()| write_helper(&helper))
        {
            return (OciSupport::Unavailable(format!("cannot write the gVisor helper: {error}")), None);
        }
        match Self::probe_runtime(config, runsc, 0, 0, Flavor::Gvisor { helper }) {
            Ok(runtime) => (OciSupport::Ready(runtime.info.clone()), Some(runtime)),
            Err(message) => {
                // Not installed is a machine's choice; installed and broken is worth a warning.
                if message.starts_with("cannot run ") {
                    tracing::info!(%message, "gVisor's runsc is not here: RuntimeClass gvisor is refused");
                } else {
                    warn!(%message, "gVisor's runsc does not work here: RuntimeClass gvisor is refused");
                }
                (OciSupport::Unavailable(message), None)
            }
        }
    }

    fn probe_runtime(
        config: &ExecutorConfig,
        runc: PathBuf,
        base: u32,
        count: u32,
        flavor: Flavor,
    ) -> Result<OciRuntime, String> {
        let version = std::process::Command::new(&runc)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("cannot run {}: {error}", runc.display()))?;
        if !version.status.success() {
            return Err(format!("{} --version failed: {}", runc.display(), String::from_utf8_lossy(&version.stderr)));
        }
        let version = String::from_utf8_lossy(&version.stdout).lines().next().unwrap_or_default().to_owned();
        let state = match flavor {
            Flavor::Runc => config.root_dir.join(".runc"),
            Flavor::Gvisor { .. } => config.root_dir.join(GVISOR_DIR).join("state"),
        };
        // A killed emulator's watchdog deletes its containers; in case it could not, do it here.
        delete_all(&runc, &state);
        std::fs::create_dir_all(&state).map_err(|error| format!("cannot create {}: {error}", state.display()))?;
        let tag = NEXT_TAG.fetch_add(1, Ordering::Relaxed);
        let cgroup_prefix = format!("cwsandbox-{}.{tag}", std::process::id());
        let watchdog = start_watchdog(&runc, &state, &cgroup_prefix)
            .map_err(|error| format!("cannot start the watchdog: {error}"))?;
        let mut runtime = OciRuntime {
            info: OciRuntimeInfo {
                runtime: runc,
                version,
                writable_layer: WritableLayer::Overlay,
                cgroup_limits: true,
            },
            flavor,
            state,
            base,
            count,
            cgroup_prefix,
            watchdog: std::sync::Mutex::new(Some(watchdog)),
            hostless: std::sync::OnceLock::new(),
        };
        let probe_dir = config.root_dir.join(format!(".oci-probe@{}.{tag}", std::process::id()));
        if let Flavor::Gvisor { .. } = runtime.flavor {
            // The root of gVisor sandboxes that have no image (the process runtime's).
            runtime
                .hostless_root(&config.host_paths)
                .map_err(|error| format!("cannot make the root of image-less sandboxes: {error}"))?;
        }
        let result = runtime.probe_runs(&probe_dir, &config.host_paths, config.oci_writable_layer);
        let _ = std::fs::remove_dir_all(&probe_dir);
        result.map(|()| runtime)
    }

    /// Runs the probe container in each configuration, best first, until one works.
    fn probe_runs(
        &mut self,
        probe_dir: &Path,
        host_paths: &[PathBuf],
        only: Option<WritableLayer>,
    ) -> Result<(), String> {
        let image = probe_dir.join("image");
        let _ = std::fs::remove_dir_all(probe_dir);
        std::fs::create_dir_all(&image).map_err(|error| error.to_string())?;
        chown(&image, (self.base, self.base))?;
        let binds = host_paths
            .iter()
            .filter(|path| path.exists())
            .map(|path| (path.clone(), path.to_string_lossy().into_owned(), true))
            .collect();
        let plan = ContainerPlan {
            id: format!("probe-{}", self.cgroup_prefix),
            dir: probe_dir.join("sandbox"),
            image,
            hostname: "probe".into(),
            argv: vec!["true".into()],
            env: BTreeMap::from([("PATH".to_owned(), DEFAULT_PATH.to_owned())]),
            cwd: "/".into(),
            user: (0, 0),
            network: Network::Host,
            binds,
            memory: Some(64 << 20),
            cpu_millis: Some(1000),
            join: None,
            gate: None,
            command_from_image: false,
        };
        let mut failures = Vec::new();
        for (layer, limits) in [
            (WritableLayer::Overlay, true),
            (WritableLayer::Copy, true),
            (WritableLayer::Overlay, false),
            (WritableLayer::Copy, false),
        ] {
            if only.is_some_and(|only| only != layer) {
                continue;
            }
            self.info.writable_layer = layer;
            self.info.cgroup_limits = limits;
            match self.probe_run(&plan) {
                Ok(()) => {
                    if !limits {
                        warn!(
                            "cgroups refuse the probe's limits: memory and CPU limits of image sandboxes are not enforced"
                        );
                    }
                    if layer == WritableLayer::Copy {
                        warn!("overlayfs cannot be mounted here: each image sandbox starts from a copy of its image");
                    }
                    return Ok(());
                }
                Err(message) => {
                    debug!(?layer, limits, %message, "an OCI probe failed");
                    failures.push(format!("{layer:?}{}: {message}", if limits { " with limits" } else { "" }));
                }
            }
        }
        Err(format!("a probe container does not run: {}", failures.join("; ")))
    }

    fn probe_run(&self, plan: &ContainerPlan) -> Result<(), String> {
        let _ = std::fs::remove_dir_all(&plan.dir);
        let prepared = self.prepare(plan)?;
        let mut command = std::process::Command::new(&self.info.runtime);
        command.args(self.run_args(&plan.id, &prepared)).stdin(Stdio::null());
        let overlay = prepared.overlay.clone();
        // SAFETY: the closure only makes system calls (fork-safe).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || enter_own_mounts(overlay.as_ref()));
        }
        let output = command.output().map_err(|error| format!("cannot start {}: {error}", plan.id));
        delete(&self.info.runtime, &self.state, &plan.id);
        let output = output?;
        if output.status.success() {
            Ok(())
        } else {
            let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stdout));
            Err(text.trim().to_owned())
        }
    }

    /// Lets the watchdog go (after a shutdown, nothing is left for it to delete) and waits for
    /// its end.
    pub(super) async fn close_watchdog(&self) {
        let watchdog = self.watchdog.lock_unpoisoned().take();
        if let Some(Watchdog { _pipe, ended }) = watchdog {
            drop(_pipe);
            let _ = tokio::time::timeout(Duration::from_secs(10), ended).await;
        }
    }

    /// The host (uid, gid) of the sandbox user (uid, gid).
    pub(super) fn host_ids(&self, (uid, gid): (u32, u32)) -> (u32, u32) {
        (self.base + uid, self.base + gid)
    }

    /// Makes a container's directories and bundle. Blocking.
    pub(super) fn prepare(&self, plan: &ContainerPlan) -> Result<PreparedContainer, String> {
        let owner = (self.base, self.base);
        let describe =
            |what: &str, path: &Path, error: std::io::Error| format!("cannot {what} {}: {error}", path.display());
        let rootfs = plan.dir.join("rootfs");
        let bundle = plan.dir.join("bundle");
        // The bundle and the execs' process files hold environments: the host's root only.
        for made in [&bundle, &plan.dir.join("exec")] {
            std::fs::create_dir_all(made).map_err(|error| describe("create", made, error))?;
            std::fs::set_permissions(made, std::fs::Permissions::from_mode(0o700))
                .map_err(|error| describe("protect", made, error))?;
        }
        // The container's init, the sandbox's root (a stranger to the host's directories), binds
        // its root onto itself from here: it must get through (not list) this directory. (The
        // directories above need not let it: runc starts it there.)
        std::fs::set_permissions(&plan.dir, std::fs::Permissions::from_mode(0o711))
            .map_err(|error| describe("open", &plan.dir, error))?;
        let overlay = match self.info.writable_layer {
            WritableLayer::Overlay => {
                let (upper, work) = (plan.dir.join("upper"), plan.dir.join("work"));
                for made in [&rootfs, &upper, &work] {
                    std::fs::create_dir(made).map_err(|error| describe("create", made, error))?;
                }
                // The merged root takes the upper directory's owner: the sandbox's root.
                chown(&upper, owner)?;
                let options = format!(
                    "lowerdir={},upperdir={},workdir={}",
                    sys::overlay_layer(&plan.image)?,
                    sys::overlay_layer(&upper)?,
                    sys::overlay_layer(&work)?
                );
                Some((path_c_string(&rootfs)?, CString::new(options).map_err(|error| error.to_string())?))
            }
            WritableLayer::Copy => {
                let copied = std::process::Command::new("cp")
                    .arg("-a")
                    .arg("--no-target-directory")
                    .arg(&plan.image)
                    .arg(&rootfs)
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|error| format!("cannot run cp: {error}"))?;
                if !copied.status.success() {
                    return Err(format!(
                        "cannot copy the image's root {}: {}",
                        plan.image.display(),
                        String::from_utf8_lossy(&copied.stderr).trim()
                    ));
                }
                None
            }
        };
        if let Some(gate) = &plan.gate {
            std::fs::create_dir_all(gate).map_err(|error| describe("create", gate, error))?;
            std::fs::set_permissions(gate, std::fs::Permissions::from_mode(0o700))
                .map_err(|error| describe("protect", gate, error))?;
        }
        let cgroup = format!("/{}-{}", self.cgroup_prefix, plan.id);
        let spec =
            self.spec(plan, &rootfs, &cgroup).map_err(|error| format!("cannot build the OCI config: {error}"))?;
        let config = bundle.join("config.json");
        spec.save(&config).map_err(|error| format!("cannot write {}: {error}", config.display()))?;
        let own_network = match &plan.network {
            _ if !self.is_gvisor() => GvisorNetwork::Host,
            Network::Host => GvisorNetwork::Host,
            Network::LoopbackOnly => GvisorNetwork::LoopbackOnly,
            // Measured here (runsc 0.0~20221219): started in a namespace made beforehand, its
            // container reads as stopped to `runsc exec` while its command runs.
            Network::Attached(_) => return Err(GVISOR_ATTACHED_NETWORK.to_owned()),
        };
        Ok(PreparedContainer { bundle, overlay, pid_file: plan.dir.join("init.pid"), cgroup, own_network })
    }

    /// Whether this is gVisor's runsc.
    pub(super) fn is_gvisor(&self) -> bool {
        matches!(self.flavor, Flavor::Gvisor { .. })
    }

    /// The bundle's config.
    fn spec(&self, plan: &ContainerPlan, rootfs: &Path, cgroup: &str) -> Result<Spec, oci_spec::OciSpecError> {
        let gvisor = self.is_gvisor();
        let process = if gvisor {
            // Through the helper, so a command the sandbox lacks ends as anywhere else (127).
            container_process(&gvisor_exec_argv("start", &plan.cwd, &plan.argv), &plan.env, "/", plan.user, None)?
        } else {
            container_process(&plan.argv, &plan.env, &plan.cwd, plan.user, None)?
        };
        let mut namespaces =
            vec![LinuxNamespaceType::Pid, LinuxNamespaceType::Mount, LinuxNamespaceType::Uts, LinuxNamespaceType::Ipc];
        if !gvisor {
            namespaces.push(LinuxNamespaceType::User);
        }
        // gVisor's network namespace is the one `runsc run` starts in (made for it when the
        // sandbox has a network of its own: `PreparedContainer::own_network`).
        if plan.network.is_own() && !gvisor {
            // runc brings a new one's loopback up.
            namespaces.push(LinuxNamespaceType::Network);
        }
        let namespaces = namespaces
            .into_iter()
            .map(|typ| {
                let mut namespace = LinuxNamespaceBuilder::default().typ(typ);
                // A sidecar joins the main container's, as a Pod's containers share them: its
                // user namespace too (as a Pod's with user namespaces), which owns the others,
                // so the sidecar may mount its own /dev/mqueue and /sys for them.
                let shared = match typ {
                    LinuxNamespaceType::Network => Some("net"),
                    LinuxNamespaceType::Ipc => Some("ipc"),
                    LinuxNamespaceType::Uts => Some("uts"),
                    LinuxNamespaceType::User => Some("user"),
                    _ => None,
                };
                if let (Some(main), Some(name)) = (plan.join, shared) {
                    namespace = namespace.path(PathBuf::from(format!("/proc/{main}/ns/{name}")));
                }
                namespace.build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mapping =
            LinuxIdMappingBuilder::default().container_id(0u32).host_id(self.base).size(self.count).build()?;
        let mut resources = LinuxResourcesBuilder::default()
            .devices(vec![LinuxDeviceCgroupBuilder::default().allow(false).access("rwm").build()?]);
        if self.info.cgroup_limits {
            if let Some(limit) = plan.memory {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                resources = resources.memory(LinuxMemoryBuilder::default().limit(limit).build()?);
            }
            if let Some(millis) = plan.cpu_millis {
                // A quota per 100 ms period: a thousandth of a CPU is 100 µs of it.
                let quota = i64::try_from(millis.max(1).saturating_mul(100)).unwrap_or(i64::MAX);
                resources =
                    resources.cpu(LinuxCpuBuilder::default().quota(quota.max(1000)).period(100_000u64).build()?);
            }
        }
        let mut linux = LinuxBuilder::default().namespaces(namespaces);
        if !gvisor {
            linux = linux.uid_mappings(vec![mapping]).gid_mappings(vec![mapping]);
        }
        let linux = linux
            .resources(resources.build()?)
            .cgroups_path(PathBuf::from(cgroup))
            .masked_paths(get_default_maskedpaths())
            .readonly_paths(get_default_readonly_paths())
            .build()?;
        let mut spec = SpecBuilder::default()
            .version("1.0.2")
            .process(process)
            .root(RootBuilder::default().path(rootfs).readonly(false).build()?)
            .mounts(self.mounts(plan)?)
            .linux(linux)
            .build()?;
        // A joined UTS namespace has its hostname already: none is set there (the builder's
        // default would be).
        spec.set_hostname(plan.join.is_none().then(|| plan.hostname.clone()));
        if let Some(gate) = &plan.gate {
            let hook = oci_spec::runtime::HookBuilder::default()
                .path("/bin/sh")
                .args(vec![
                    "sh".to_owned(),
                    "-c".to_owned(),
                    GATE_SCRIPT.to_owned(),
                    "gate".to_owned(),
                    gate.to_string_lossy().into_owned(),
                    std::process::id().to_string(),
                ])
                .env(vec!["PATH=/usr/sbin:/usr/bin:/sbin:/bin".to_owned()])
                .build()?;
            spec.set_hooks(Some(oci_spec::runtime::HooksBuilder::default().create_runtime(vec![hook]).build()?));
        }
        Ok(spec)
    }

    /// `/proc`, `/dev` and its parts, `/sys` read-only, then the volumes and files.
    fn mounts(&self, plan: &ContainerPlan) -> Result<Vec<Mount>, oci_spec::OciSpecError> {
        let mount = |destination: &str, typ: &str, source: &str, options: &[&str]| {
            MountBuilder::default()
                .destination(destination)
                .typ(typ)
                .source(source)
                .options(options.iter().map(|option| (*option).to_owned()).collect::<Vec<_>>())
                .build()
        };
        let mut mounts = vec![
            mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"])?,
            mount("/dev", "tmpfs", "tmpfs", &["nosuid", "strictatime", "mode=755", "size=65536k"])?,
            mount(
                "/dev/pts",
                "devpts",
                "devpts",
                &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
            )?,
            mount("/dev/shm", "tmpfs", "shm", &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"])?,
        ];
        if !self.is_gvisor() {
            mounts.push(mount("/dev/mqueue", "mqueue", "mqueue", &["nosuid", "noexec", "nodev"])?);
        }
        mounts.push(
            // gVisor's sysfs is its own kernel's.
            if plan.network.is_own() || self.is_gvisor() {
                mount("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", "ro"])?
            } else {
                // A user namespace may not mount sysfs for the host's network namespace: the
                // host's, bound read-only (as rootless runc does).
                mount("/sys", "none", "/sys", &["rbind", "nosuid", "noexec", "nodev", "ro"])?
            },
        );
        if let Flavor::Gvisor { helper } = &self.flavor {
            mounts.push(mount(GVISOR_HELPER, "bind", &helper.to_string_lossy(), &["rbind", "ro", "nosuid", "nodev"])?);
        }
        for (source, destination, read_only) in &plan.binds {
            let options: &[&str] =
                if *read_only { &["rbind", "ro", "nosuid", "nodev"] } else { &["rbind", "nosuid", "nodev"] };
            mounts.push(mount(destination, "none", &source.to_string_lossy(), options)?);
        }
        Ok(mounts)
    }
}

/// The helper's command line that changes to `cwd` and executes `argv` in a gVisor sandbox
/// (`how`: `start` for the main command, `exec` for an exec).
fn gvisor_exec_argv(how: &str, cwd: &str, argv: &[String]) -> Vec<String> {
    let mut wrapped = vec![GVISOR_HELPER.to_owned(), how.to_owned(), cwd.to_owned()];
    wrapped.extend(argv.iter().cloned());
    wrapped
}

/// A process of a container: the main command's (in the bundle) or an exec's.
fn container_process(
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: &str,
    (uid, gid): (u32, u32),
    terminal: Option<(u16, u16)>,
) -> Result<Process, oci_spec::OciSpecError> {
    let all: oci_spec::runtime::Capabilities = DEFAULT_CAPABILITIES.into_iter().collect();
    // As Docker gives them: a non-root user keeps the bounding set only.
    let held = if uid == 0 { all.clone() } else { Default::default() };
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(all)
        .effective(held.clone())
        .permitted(held)
        .inheritable(oci_spec::runtime::Capabilities::default())
        .ambient(oci_spec::runtime::Capabilities::default())
        .build()?;
    let mut process = ProcessBuilder::default()
        .terminal(terminal.is_some())
        .user(UserBuilder::default().uid(uid).gid(gid).build()?)
        .args(argv.to_vec())
        .env(env.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>())
        .cwd(cwd)
        .capabilities(capabilities)
        .no_new_privileges(true)
        .build()?;
    // No rlimits: setting RLIMIT_NOFILE is refused in some hosts (containers), and the
    // sandbox keeps the emulator's.
    process.set_rlimits(None);
    if let Some((cols, rows)) = terminal {
        // Sized as it is made: runc forwards later changes, the first only once it runs.
        let size = oci_spec::runtime::BoxBuilder::default().width(u64::from(cols)).height(u64::from(rows)).build()?;
        process.set_console_size(Some(size));
    }
    Ok(process)
}

impl OciRuntime {
    /// `runc run`'s arguments for a prepared container.
    fn run_args(&self, id: &str, prepared: &PreparedContainer) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["--root".into(), self.state.clone().into()];
        if self.is_gvisor() {
            // The host's network stack, of the namespace runsc starts in: a service's port is
            // then reachable where the relay connects (gVisor's own stack would hide it).
            args.push("--network=host".into());
        }
        args.push("run".into());
        if !self.is_gvisor() {
            // Kept once ended, so its cgroup still says whether the OOM killer ran. (runsc
            // removes its own container when `run` ends.)
            args.push("--keep".into());
        }
        args.extend(["--pid-file".into(), prepared.pid_file.clone().into(), "--bundle".into()]);
        args.extend([prepared.bundle.clone().into(), id.into()]);
        args
    }

    /// The `runc run` command of a prepared container, its stdout and stderr going to `output`.
    pub(super) fn run_command(
        &self,
        id: &str,
        prepared: &PreparedContainer,
        output: std::io::PipeWriter,
    ) -> std::io::Result<tokio::process::Command> {
        let mut command = tokio::process::Command::new(&self.info.runtime);
        command.args(self.run_args(id, prepared)).stdin(Stdio::null()).stdout(output.try_clone()?).stderr(output);
        let overlay = prepared.overlay.clone();
        let own_network = matches!(prepared.own_network, GvisorNetwork::LoopbackOnly);
        // SAFETY: the closure only makes system calls (fork-safe).
        unsafe {
            command.pre_exec(move || {
                enter_own_mounts(overlay.as_ref())?;
                if own_network {
                    enter_own_network()?;
                }
                Ok(())
            });
        }
        Ok(command)
    }

    /// Waits until `runc run` has created the container (its pid file) and returns the init's
    /// pid, or `None` if runc ended first.
    pub(super) async fn wait_created(
        prepared: &PreparedContainer,
        run: &mut tokio::process::Child,
    ) -> Result<Option<pid_t>, String> {
        let started = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&prepared.pid_file)
                && let Ok(pid) = text.trim().parse::<pid_t>()
            {
                return Ok(Some(pid));
            }
            if !matches!(run.try_wait(), Ok(None)) {
                return Ok(None);
            }
            if started.elapsed() > CREATE_TIMEOUT {
                return Err(format!("the OCI runtime did not create the container within {CREATE_TIMEOUT:?}"));
            }
            // runc writes the pid file (a rename) as it creates the container: a few ms.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until a gated container's creation reached its gate (its namespaces exist) and
    /// returns its init's pid, or `None` if runc ended first.
    pub(super) async fn wait_gated(gate: &Path, run: &mut tokio::process::Child) -> Result<Option<pid_t>, String> {
        let started = Instant::now();
        let state = gate.join("state.json");
        loop {
            if let Ok(text) = std::fs::read(&state) {
                let pid = serde_json::from_slice::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|state| state.get("pid")?.as_i64())
                    .and_then(|pid| pid_t::try_from(pid).ok())
                    .filter(|pid| *pid > 0);
                return pid.map(Some).ok_or_else(|| "the OCI runtime's state has no pid".to_owned());
            }
            if !matches!(run.try_wait(), Ok(None)) {
                return Ok(None);
            }
            if started.elapsed() > CREATE_TIMEOUT {
                return Err(format!("the OCI runtime did not create the container within {CREATE_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Opens a gated container's gate: `start` lets its creation go on, else it fails.
    pub(super) fn open_gate(gate: &Path, start: bool) -> std::io::Result<()> {
        let temporary = gate.join("go.tmp");
        std::fs::write(&temporary, if start { "start" } else { "abort" })?;
        std::fs::rename(&temporary, gate.join("go"))
    }

    pub(super) fn container(&self, plan: &ContainerPlan, prepared: &PreparedContainer) -> OciContainer {
        OciContainer {
            id: plan.id.clone(),
            runc: self.info.runtime.clone(),
            state: self.state.clone(),
            cgroup: prepared.cgroup.clone(),
            exec_dir: plan.dir.join("exec"),
            next_exec: AtomicU64::new(0),
            user: plan.user,
            handler: if self.is_gvisor() { crate::RuntimeHandler::Runsc } else { crate::RuntimeHandler::Default },
        }
    }

    /// Writes an exec's process file.
    pub(super) fn exec_files(
        &self,
        container: &OciContainer,
        argv: &[String],
        env: &BTreeMap<String, String>,
        cwd: &str,
        user: (u32, u32),
        tty: Option<(u16, u16)>,
    ) -> std::io::Result<ExecFiles> {
        let process = if self.is_gvisor() {
            container_process(&gvisor_exec_argv("exec", cwd, argv), env, "/", user, tty)
        } else {
            container_process(argv, env, cwd, user, tty)
        };
        self.write_exec_files(container, process.map_err(std::io::Error::other)?)
    }

    /// The process files of a run of the gVisor helper (`args` after its path) as `user`.
    pub(super) fn helper_files(
        &self,
        container: &OciContainer,
        args: &[String],
        user: (u32, u32),
    ) -> std::io::Result<ExecFiles> {
        let mut argv = vec![GVISOR_HELPER.to_owned()];
        argv.extend(args.iter().cloned());
        let env = BTreeMap::from([("PATH".to_owned(), DEFAULT_PATH.to_owned())]);
        let process = container_process(&argv, &env, "/", user, None).map_err(std::io::Error::other)?;
        self.write_exec_files(container, process)
    }

    fn write_exec_files(&self, container: &OciContainer, process: Process) -> std::io::Result<ExecFiles> {
        let n = container.next_exec.fetch_add(1, Ordering::Relaxed);
        let files = ExecFiles {
            process: container.exec_dir.join(format!("{n}.json")),
            pid_file: container.exec_dir.join(format!("{n}.pid")),
        };
        std::fs::write(&files.process, serde_json::to_vec(&process).map_err(std::io::Error::other)?)?;
        Ok(files)
    }
}

impl Drop for OciRuntime {
    /// The executor is gone without a shutdown (a panic, say): its containers go with it, before
    /// whoever dropped it removes its directory (and the runtime's state with it).
    fn drop(&mut self) {
        let open = self.watchdog.get_mut().map(|watchdog| watchdog.is_some()).unwrap_or(true);
        if open {
            delete_all(&self.info.runtime, &self.state);
        }
    }
}

impl OciRuntime {
    /// The root of gVisor sandboxes without an image (the process runtime's): empty but for a
    /// `/tmp` and the host's links among `host_paths` (Debian's `/bin` → `usr/bin`); each
    /// sandbox writes to a layer of its own over it. Made at the probe.
    pub(super) fn hostless_root(&self, host_paths: &[PathBuf]) -> std::io::Result<PathBuf> {
        let root = self.hostless_root_dir();
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("tmp"))?;
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
        for path in host_paths {
            let (Ok(target), Ok(relative)) = (std::fs::read_link(path), path.strip_prefix("/")) else { continue };
            if relative.components().count() == 1 {
                std::os::unix::fs::symlink(target, root.join(relative))?;
            }
        }
        Ok(root)
    }

    /// The hostless root made at the probe.
    pub(super) fn hostless_root_dir(&self) -> PathBuf {
        self.state.with_file_name("hostless-root")
    }
}

impl OciRuntime {
    /// The binds of a gVisor sandbox without an image: the host's directories `host_paths`
    /// read-only, and over each of their entries that others may not read (a file) or search (a
    /// directory), an empty one of its kind. A namespaced sandbox's processes are strangers to
    /// the host's files (their ids are unmapped), so they read only what any user may; gVisor's
    /// have no user namespace, and its root would read the host's root-only files (`/etc/shadow`,
    /// keys) through runsc's file server, which runs as the host's root: the masks keep its view
    /// the namespaced one's. Found by a walk of the directories at the first such sandbox's start
    /// (a second or so, cold) and kept; an entry the host restricts later is not masked until the
    /// emulator restarts. Blocking.
    pub(super) fn hostless_binds(&self, host_paths: &[PathBuf]) -> std::io::Result<Vec<(PathBuf, String, bool)>> {
        if let Some(binds) = self.hostless.get() {
            return Ok(binds.clone());
        }
        let masks_dir = self.state.with_file_name("masks");
        let (empty_file, empty_dir) = (masks_dir.join("file"), masks_dir.join("dir"));
        if !empty_dir.is_dir() {
            std::fs::create_dir_all(&empty_dir)?;
            std::fs::write(&empty_file, b"")?;
            std::fs::set_permissions(&empty_file, std::fs::Permissions::from_mode(0o444))?;
            std::fs::set_permissions(&empty_dir, std::fs::Permissions::from_mode(0o555))?;
        }
        let mut binds = Vec::new();
        let mut masks = Vec::new();
        for path in host_paths {
            // A link (Debian's /bin → usr/bin) is the directory it names, which is bound already.
            let Ok(metadata) = std::fs::symlink_metadata(path) else { continue };
            if !metadata.is_dir() {
                continue;
            }
            binds.push((path.clone(), path.to_string_lossy().into_owned(), true));
            restricted_entries(path, &mut masks);
        }
        for (path, is_dir) in masks {
            let source = if is_dir { empty_dir.clone() } else { empty_file.clone() };
            binds.push((source, path.to_string_lossy().into_owned(), true));
        }
        Ok(self.hostless.get_or_init(|| binds).clone())
    }
}

/// The entries under `dir` (not following links) that others may not read (a regular file) or
/// search (a directory), each with whether it is a directory; a restricted directory's own
/// entries are not walked (its mask hides them).
fn restricted_entries(dir: &Path, found: &mut Vec<(PathBuf, bool)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let Ok(metadata) = entry.metadata() else { continue };
        let mode = metadata.permissions().mode();
        if metadata.is_dir() {
            if mode & 0o005 != 0o005 {
                found.push((entry.path(), true));
            } else {
                restricted_entries(&entry.path(), found);
            }
        } else if metadata.is_file() && mode & 0o004 == 0 {
            found.push((entry.path(), false));
        }
    }
}

/// Writes the gVisor helper where sandboxes bind it from: the host's root's, executable by all.
fn write_helper(path: &Path) -> std::io::Result<()> {
    let temporary = path.with_extension("tmp");
    let _ = std::fs::remove_file(&temporary);
    std::fs::write(&temporary, GVISOR_HELPER_BINARY)?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o555))?;
    std::fs::rename(&temporary, path)
}

/// Why a gVisor sandbox cannot have a network made for it (`Network::Attached`).
pub const GVISOR_ATTACHED_NETWORK: &str =
    "gVisor's runsc cannot run in a network made for the sandbox here (its container reads as stopped to `runsc exec`)";

/// Where `runsc run` starts: gVisor's host networking uses that namespace's interfaces.
#[derive(Debug)]
enum GvisorNetwork {
    /// The emulator's (the host's).
    Host,
    /// A new one with its loopback up.
    LoopbackOnly,
}

/// In the child, before `runsc run` executes: a network namespace of its own with its loopback
/// up, which gVisor's host networking then uses.
fn enter_own_network() -> std::io::Result<()> {
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    crate::child::loopback_up().map_err(std::io::Error::from_raw_os_error)
}

impl OciContainer {
    /// Sends `signal` to the container's init through the runtime (`runsc kill`: gVisor's
    /// processes are not the host's to signal), on a thread of its own.
    pub(super) fn signal_through_runtime(&self, signal: libc::c_int) {
        let (runtime, state, id) = (self.runc.clone(), self.state.clone(), self.id.clone());
        let spawned = std::thread::Builder::new().name("cwsandbox-runtime-kill".into()).spawn(move || {
            let killed = std::process::Command::new(&runtime)
                .arg("--root")
                .arg(&state)
                .args(["kill", &id, &signal.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output();
            match killed {
                Ok(output) if !output.status.success() => {
                    debug!(container = %id, signal, stderr = %String::from_utf8_lossy(&output.stderr), "kill failed");
                }
                Err(error) => warn!(container = %id, %error, "cannot run the runtime's kill"),
                Ok(_) => {}
            }
        });
        if let Err(error) = spawned {
            warn!(container = %self.id, %error, "cannot start a thread to signal the container");
        }
    }

    /// `runc exec` of a process file. With a terminal, `tty` is the terminal's slave, made the
    /// controlling terminal of runc (which gives the command a terminal of the container's and
    /// forwards size changes of this one to it).
    pub(super) fn exec_command(
        &self,
        files: &ExecFiles,
        tty: Option<OwnedFd>,
    ) -> std::io::Result<tokio::process::Command> {
        let mut command = tokio::process::Command::new(&self.runc);
        command
            .arg("--root")
            .arg(&self.state)
            .arg("exec")
            .arg("--process")
            .arg(&files.process)
            .arg("--pid-file")
            .arg(&files.pid_file)
            .arg(&self.id)
            .kill_on_drop(true);
        let controlling = tty.is_some();
        match tty {
            Some(slave) => {
                command.stdin(slave.try_clone()?).stdout(slave.try_clone()?).stderr(slave);
            }
            None => {
                command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        // SAFETY: the closure only makes system calls (fork-safe).
        unsafe {
            command.pre_exec(move || {
                // A session of its own: the emulator's terminal signals do not reach it, and
                // cancelling the exec can signal its whole group.
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if controlling && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(command)
    }

    /// After `runc run` ended: whether the OOM killer ran in the container's cgroup; then the
    /// container is deleted (its state and cgroup).
    pub(super) async fn finish(&self) -> bool {
        let cgroup = self.cgroup.trim_start_matches('/');
        let oom = oom_kills(&format!("/sys/fs/cgroup/memory/{cgroup}/memory.oom_control"))
            .or_else(|| oom_kills(&format!("/sys/fs/cgroup/{cgroup}/memory.events")))
            .is_some_and(|kills| kills > 0);
        let (runc, state, id) = (self.runc.clone(), self.state.clone(), self.id.clone());
        let _ = tokio::task::spawn_blocking(move || delete(&runc, &state, &id)).await;
        oom
    }
}

/// Whether `program` (a name looked up in `PATH`, or a path) is a regular file in the root
/// `root` (resolved inside it).
pub(super) fn program_exists(root: &OwnedFd, program: &str, path: Option<&str>) -> bool {
    program_candidates(program, path).iter().any(|candidate| {
        let Ok(candidate) = CString::new(candidate.as_str()) else { return false };
        let Ok(fd) = sys::open_in_root(root.as_raw_fd(), &candidate, libc::O_PATH, 0) else { return false };
        // SAFETY: fstat fills the zeroed stat for a descriptor we own.
        unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            libc::fstat(fd.as_raw_fd(), &mut stat) == 0 && (stat.st_mode & libc::S_IFMT) == libc::S_IFREG
        }
    })
}

/// Opens a directory for `openat2` resolution.
pub(super) fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    let path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)?;
    sys::open_path(&path)
}

/// In the child, before `runc run` executes: a session of its own and, for an overlay root, a
/// private mount namespace holding the overlay mount (gone with the last process in it).
fn enter_own_mounts(overlay: Option<&(CString, CString)>) -> std::io::Result<()> {
    // SAFETY: plain system calls with valid C strings or nulls.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let Some((target, options)) = overlay else { return Ok(()) };
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if libc::mount(c"overlay".as_ptr(), target.as_ptr(), c"overlay".as_ptr(), 0, options.as_ptr().cast()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The watchdog: a shell in a session of its own, reading a pipe whose only writer the
/// executor holds.
fn start_watchdog(runc: &Path, state: &Path, cgroup_prefix: &str) -> std::io::Result<Watchdog> {
    let (reader, writer) = std::io::pipe()?;
    let mut command = std::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("cwsandbox-oci-watchdog")
        .arg(runc)
        .arg(state)
        .arg(cgroup_prefix)
        .stdin(reader)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is fork-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    let (ended_sender, ended) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("cwsandbox-oci-watchdog".into()).spawn(move || {
        let _ = child.wait();
        let _ = ended_sender.send(());
    })?;
    Ok(Watchdog { _pipe: writer, ended })
}

/// `runc delete -f`: kills the container if it runs, removes its state and cgroup.
fn delete(runc: &Path, state: &Path, id: &str) {
    let deleted = std::process::Command::new(runc)
        .arg("--root")
        .arg(state)
        .args(["delete", "-f", id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match deleted {
        Ok(output) if !output.status.success() => {
            debug!(container = id, stderr = %String::from_utf8_lossy(&output.stderr), "runc delete failed");
        }
        Err(error) => warn!(container = id, %error, "cannot run runc delete"),
        Ok(_) => {}
    }
}

/// Deletes every container of a state directory (an earlier executor's).
fn delete_all(runc: &Path, state: &Path) {
    // runc makes its state directory when it is missing: not for a directory removed meanwhile.
    if !state.is_dir() {
        return;
    }
    let listed =
        std::process::Command::new(runc).arg("--root").arg(state).args(["list", "-q"]).stdin(Stdio::null()).output();
    if let Ok(output) = listed {
        for id in String::from_utf8_lossy(&output.stdout).lines().filter(|id| !id.is_empty()) {
            warn!(container = id, "deleting a container left running");
            delete(runc, state, id);
        }
    }
}

/// The `oom_kill` count of a cgroup's `memory.oom_control` (v1) or `memory.events` (v2).
fn oom_kills(file: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| line.strip_prefix("oom_kill ")).and_then(|count| count.trim().parse().ok())
}

fn chown(path: &Path, (uid, gid): (u32, u32)) -> Result<(), String> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .map_err(|error| format!("cannot chown {}: {error}", path.display()))
}

fn path_c_string(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|error| error.to_string())
}

/// A TCP connection to `port` on the loopback of the network namespace of `pid` (a container
/// with a network of its own), made from a thread of its own that enters that namespace and ends.
pub(super) fn connect_in_network_of(pid: pid_t, port: u16) -> std::io::Result<OwnedFd> {
    std::thread::spawn(move || {
        let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
        // SAFETY: setns takes a namespace descriptor we hold; it moves this thread only.
        if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        sys::connect_loopback(port, crate::init_channel::CONNECT_TIMEOUT_MS).map_err(std::io::Error::from_raw_os_error)
    })
    .join()
    .map_err(|_| std::io::Error::other("the connecting thread panicked"))?
}

/// Makes an image sandbox's directory: volumes, mounted files, and the container's layers and
/// bundle, unless its command is not in the image (then `None`: it cannot start). Blocking.
pub(super) fn prepare_sandbox(
    oci: &OciRuntime,
    plan: ContainerPlan,
    mounts: &[crate::VolumeMount],
    files: &[crate::MountedFile],
    restores: &[(String, PathBuf)],
    memory_volumes: &[crate::MemoryVolume],
    claims_dir: &Path,
) -> Result<(ContainerPlan, Option<PreparedContainer>), String> {
    // The files are bound after the volumes, so one under a volume's mount path is placed on it
    // (the runtime makes its mount point inside the volume); none goes under a claim's.
    crate::file_mounts::check(mounts, files)?;
    if plan.command_from_image && !command_in_image(&plan)? {
        return Ok((plan, None));
    }
    super::layout::remove_dir(&plan.dir);
    std::fs::create_dir_all(&plan.dir).map_err(|error| format!("cannot create {}: {error}", plan.dir.display()))?;
    let owner = Some(oci.host_ids((0, 0)));
    for memory in memory_volumes {
        crate::rootfs::memory_volume_dir(&plan.dir, &memory.volume, memory.size_bytes, owner)?;
    }
    // Before the binds: a sub-path is made inside the restored files, never through them.
    for (volume, snapshot) in restores {
        let target = crate::rootfs::volume_dir(&plan.dir, volume, owner)?;
        super::snapshots::restore_volume(snapshot, &target)
            .map_err(|error| format!("volume {volume:?} cannot be restored from its snapshot: {error}"))?;
    }
    let sandbox_dir = plan.dir.clone();
    prepare_container(oci, plan, &sandbox_dir, mounts, files, claims_dir).map(|(plan, prepared)| (plan, Some(prepared)))
}

/// Makes an image sidecar's directory (`plan.dir`, inside the sandbox's `sandbox_dir`, made
/// already with the main container's): its binds of the sandbox's volumes, its mounted files,
/// its layers and bundle; `None` when its command is not in its image. Blocking.
pub(super) fn prepare_sidecar(
    oci: &OciRuntime,
    plan: ContainerPlan,
    sandbox_dir: &Path,
    mounts: &[crate::VolumeMount],
    files: &[crate::MountedFile],
    claims_dir: &Path,
) -> Result<(ContainerPlan, Option<PreparedContainer>), String> {
    crate::file_mounts::check(mounts, files)?;
    if !command_in_image(&plan)? {
        return Ok((plan, None));
    }
    std::fs::create_dir_all(&plan.dir).map_err(|error| format!("cannot create {}: {error}", plan.dir.display()))?;
    prepare_container(oci, plan, sandbox_dir, mounts, files, claims_dir).map(|(plan, prepared)| (plan, Some(prepared)))
}

/// Whether the plan's command is a program of its image.
fn command_in_image(plan: &ContainerPlan) -> Result<bool, String> {
    let image = open_dir(&plan.image)
        .map_err(|error| format!("cannot open the image's root {}: {error}", plan.image.display()))?;
    let program = plan.argv.first().cloned().unwrap_or_default();
    Ok(program_exists(&image, &program, plan.env.get("PATH").map(String::as_str)))
}

/// A container's binds of the sandbox's volumes (under `sandbox_dir`, shared by its containers)
/// and of its mounted files (under its own directory), then its layers and bundle. Blocking.
fn prepare_container(
    oci: &OciRuntime,
    mut plan: ContainerPlan,
    sandbox_dir: &Path,
    mounts: &[crate::VolumeMount],
    files: &[crate::MountedFile],
    claims_dir: &Path,
) -> Result<(ContainerPlan, PreparedContainer), String> {
    use std::io::Write;
    let owner = Some(oci.host_ids((0, 0)));
    // Mount points are made by the runtime inside the container's root; `volume_bind` checks the
    // path and makes the sub-path, its mount points going to a directory of no use.
    let mount_points = plan.dir.join("mount-points");
    if !mounts.is_empty() {
        std::fs::create_dir(&mount_points)
            .map_err(|error| format!("cannot create {}: {error}", mount_points.display()))?;
    }
    for mount in mounts {
        let source = match &mount.claim {
            Some(claim) => crate::rootfs::claim_dir(claims_dir, claim, owner)?,
            None => crate::rootfs::volume_dir(sandbox_dir, &mount.volume, owner)?,
        };
        let (source, _, read_only) = crate::rootfs::volume_bind(source, &mount_points, &[], mount, owner)?;
        plan.binds.push((source, mount.path.clone(), read_only));
    }
    if !files.is_empty() {
        // The sandbox's root only (it binds them from here; they may be secrets).
        let dir = plan.dir.join("files");
        std::fs::create_dir(&dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|error| format!("cannot protect {}: {error}", dir.display()))?;
        chown(&dir, oci.host_ids((0, 0)))?;
        for (n, file) in files.iter().enumerate() {
            let path = dir.join(n.to_string());
            let mut written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&path)
                .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
            written.write_all(&file.content).map_err(|error| format!("cannot write {}: {error}", path.display()))?;
            chown(&path, oci.host_ids((0, 0)))?;
            plan.binds.push((path, file.path.clone(), false));
        }
    }
    let prepared = oci.prepare(&plan)?;
    Ok((plan, prepared))
}
