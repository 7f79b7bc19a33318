//! The process executor (`cwsandbox-executor`) as the emulator's [`SandboxRuntime`]: each
//! sandbox's main container runs as a local process in its own Linux namespaces (a root of its own
//! with the host's system directories read-only, hostname = the Pod's name, own user, IPC and PID
//! namespaces), or as a plain, unisolated process where namespaces are unavailable.
//!
//! - Sandboxes are keyed by their Pod's uid. The main container's `command` + `args`, `env` and
//!   `working_dir` start the main process; the image is recorded by the simulation, never pulled.
//!   Each other container of the Pod runs its own command next to it, in the sandbox's
//!   namespaces, with its own environment, working directory, user and log (the executor's
//!   sidecars); exec and logs that name a container reach it. Having no images, the containers
//!   share the sandbox's root: every container's mounted files are written into it.
//! - `stop` (SIGTERM, SIGKILL after the grace) and `kill` run in the background so the effects
//!   pump never waits for a grace period. Once a stopped sandbox's processes are all gone its exit
//!   goes back to the world, so a sandbox whose process honours SIGTERM ends at once rather than
//!   at the end of its grace period.
//! - A main process that ends by itself is reported with its code (128 + N after signal N); one
//!   that cannot start exits 127 with the reason in its log. A sandbox that cannot even be set up
//!   is reported as exit 127 too, so it turns FAILED rather than staying RUNNING with nothing
//!   behind it.
//! - The logs of a stopped sandbox stay readable for the retention period, then its directory
//!   and logs are removed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use chrono::{DateTime, SecondsFormat, Utc};
use cwsandbox_executor::{
    ExecExit, ExecOutput, ExecRequest, Executor, ExecutorConfig, ExecutorError, FileError, ImageRoot, Isolation,
    LaunchSpec, LogChunk, LogError, LogReader, MountedFile, Network, OciRuntimeInfo, OciSupport, Output,
    RuntimeHandler, SandboxUser, Sidecar, StartAfter, StartCondition, StartupProbe, Stream, VolumeMount, WritableLayer,
};
use cwsandbox_images::Image;
use cwsandbox_sim::world::{ImagePullFailure, ImagePulled, ImageToPull, PodNetwork, PodNetworkOffer};
use cwsandbox_sync::MutexUnpoisoned;
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;

use crate::image_puller::ImagePuller;
use crate::runtime::{
    ContainerLaunch as ContainerStart, ExecEvent, ExecInput, ExecSession, ExecSpec, LogEvent, LogRequest, MainExit,
    PodLaunch, PruneReport, RuntimeError, SandboxRuntime, Target,
};
use crate::runtime_config::RuntimeKind;
use crate::sandbox_network::HostNetworks;

/// After a command has exited, how long its output may stay silent before the stream ends: a
/// background process it left running can hold stdout open for ever.
const OUTPUT_IDLE_AFTER_EXIT: Duration = Duration::from_millis(500);
/// Kubernetes truncates a Pod's hostname to 63 characters.
const MAX_HOSTNAME: usize = 63;

/// The executor behind the [`SandboxRuntime`] seam.
pub struct ExecutorRuntime {
    executor: Executor,
    /// How long a gone Pod's logs stay readable.
    retention: Duration,
    /// Exits this adapter reports itself: stops it asked for, sandboxes that could not start.
    own_exits: mpsc::UnboundedSender<MainExit>,
    exits: Mutex<Option<ExitReceivers>>,
    /// Removed at shutdown: the emulator made it.
    owned_root: Option<PathBuf>,
    /// Pulls images, where containers run in them (the OCI runtime works and the kind asks for
    /// it); `None`: the host's programs, images recorded only.
    images: Option<ImagePuller>,
    /// Pulls the images of gVisor sandboxes (RuntimeClass `gvisor`), unpacked with their own
    /// ids, where gVisor works and images are pulled.
    gvisor_images: Option<ImagePuller>,
    /// The container runtime asked for.
    kind: RuntimeKind,
    /// Sandbox networks (`None`: not offered, as for a runtime made without them).
    networks: Option<Arc<HostNetworks>>,
}

/// The RuntimeClass whose handler is gVisor's runsc, named as GKE Sandbox and gVisor's own
/// Kubernetes guide name it.
pub const GVISOR_RUNTIME_CLASS: &str = "gvisor";

type ExitReceivers = (mpsc::UnboundedReceiver<MainExit>, mpsc::UnboundedReceiver<cwsandbox_executor::MainExit>);

impl std::fmt::Debug for ExecutorRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorRuntime")
            .field("isolation", &self.executor.isolation())
            .field("root_dir", &self.executor.config().root_dir)
            .finish_non_exhaustive()
    }
}

impl ExecutorRuntime {
    /// Starts an executor (probing namespaces when `config.isolation` is `Auto`). Logs of gone
    /// Pods are kept for `retention`.
    pub fn new(config: ExecutorConfig, retention: Duration) -> Result<ExecutorRuntime, ExecutorError> {
        let executor = Executor::new(config)?;
        let from_executor = executor.exits();
        let (own_exits, own) = mpsc::unbounded_channel();
        Ok(ExecutorRuntime {
            executor,
            retention,
            own_exits,
            exits: Mutex::new(Some((own, from_executor))),
            owned_root: None,
            images: None,
            gvisor_images: None,
            kind: RuntimeKind::Process,
            networks: None,
        })
    }

    /// Gives sandboxes that ask for network rules (or every sandbox) a network of their own
    /// through `networks`.
    pub fn with_networks(mut self, networks: HostNetworks) -> ExecutorRuntime {
        self.networks = Some(Arc::new(networks));
        self
    }

    /// The network a Pod's processes get; for one of their own, its rules are in force when
    /// this returns.
    async fn network_for(&self, launch: &PodLaunch) -> Result<Network, RuntimeError> {
        let own = match &launch.network {
            PodNetwork::Host => return Ok(Network::Host),
            PodNetwork::LoopbackOnly => return Ok(Network::LoopbackOnly),
            PodNetwork::Own(own) => (**own).clone(),
        };
        let Some(networks) = self.networks.clone() else {
            return Err(RuntimeError::StartFailed("this runtime makes no sandbox networks".to_owned()));
        };
        let pod_uid = launch.pod_uid.to_string();
        let hook = tokio::task::spawn_blocking(move || networks.attach(&pod_uid, &own))
            .await
            .map_err(|error| RuntimeError::StartFailed(error.to_string()))?
            .map_err(|error| RuntimeError::StartFailed(format!("cannot make the sandbox's network: {error}")))?;
        Ok(Network::Attached(hook))
    }

    /// Starts the Pod's containers on `network` (each container of a network of its own with
    /// the emulator's resolver as its nameserver).
    async fn start_on(&self, launch: &PodLaunch, network: Network) -> Result<(), RuntimeError> {
        let (mut spec, images) = self.launch_spec(launch, network)?;
        if matches!(spec.network, Network::Attached(_))
            && let Some(nameserver) = self.networks.as_ref().and_then(|networks| networks.nameserver())
        {
            let resolv_conf = MountedFile {
                path: "/etc/resolv.conf".to_owned(),
                content: format!("nameserver {nameserver}\n").into_bytes(),
            };
            let lists =
                std::iter::once(&mut spec.files).chain(spec.sidecars.iter_mut().map(|sidecar| &mut sidecar.files));
            for files in lists {
                // A file the spec mounts there itself wins.
                if !files.iter().any(|file| file.path == resolv_conf.path) {
                    files.push(resolv_conf.clone());
                }
            }
        }
        let main = launch
            .containers
            .first()
            .ok_or_else(|| RuntimeError::StartFailed("the Pod has no container".to_owned()))?;
        let started = self.start_spec(launch, main, spec).await;
        if started.is_ok()
            && !images.is_empty()
            && let Some(puller) = self.puller_for(launch.runtime_class.as_deref())
        {
            // The sandbox runs on the images' trees until it is removed: not to be evicted.
            puller.in_use().hold(&launch.pod_uid, images);
        }
        started
    }

    /// The executor's launch of the Pod on `network`: in images where every container's was
    /// pulled (with those images), else the host's programs.
    fn launch_spec(&self, launch: &PodLaunch, network: Network) -> Result<(LaunchSpec, Vec<Image>), RuntimeError> {
        let Some((main, others)) = launch.containers.split_first() else {
            return Err(RuntimeError::StartFailed("the Pod has no container".to_owned()));
        };
        let puller = self.puller_for(launch.runtime_class.as_deref());
        let mut pulled = puller.map(|images| images.take(&launch.pod_uid)).unwrap_or_default();
        // In images only when every container has its own (under `auto` an image whose
        // registry cannot be reached runs the whole Pod on the host's programs, as its
        // Event says).
        let all_pulled = launch.containers.iter().all(|container| pulled.contains_key(&container.name));
        if let Some(image) = pulled.remove(&main.name).filter(|_| all_pulled) {
            // Each container in its own image, with its own root: its own mounts only.
            let mut spec = image_launch(launch, main, &image, own_volume_mounts(main))?;
            spec.network = network;
            let mut images = vec![image];
            for container in in_start_order(others) {
                let Some(image) = pulled.remove(&container.name) else {
                    return Err(RuntimeError::StartFailed(format!(
                        "container {:?}: its image was not pulled (every container of a Pod run in images needs one)",
                        container.name
                    )));
                };
                let own = image_launch(launch, container, &image, own_volume_mounts(container))?;
                spec.sidecars.push(Sidecar {
                    name: container.name.clone(),
                    command: own.command,
                    env: own.env,
                    working_dir: own.working_dir,
                    user: own.user,
                    image: own.image,
                    volume_mounts: own.volume_mounts,
                    files: own.files,
                    memory_limit_bytes: own.memory_limit_bytes,
                    cpu_limit_millis: own.cpu_limit_millis,
                    after: own.after,
                    startup_probe: startup_probe(container),
                });
                images.push(image);
            }
            return Ok((spec, images));
        }
        let spec = LaunchSpec {
            hostname: hostname_of(&launch.pod_name),
            command: command_line(main),
            env: main.env.clone(),
            working_dir: main.working_dir.clone(),
            // Each container has a root of its own, with its own mounts and files.
            files: mounted_files([main]),
            network,
            user: user_of(main),
            volume_mounts: own_volume_mounts(main),
            name: main.name.clone(),
            sidecars: in_start_order(others)
                .into_iter()
                .map(|container| Sidecar {
                    name: container.name.clone(),
                    command: command_line(container),
                    env: container.env.clone(),
                    working_dir: container.working_dir.clone(),
                    user: user_of(container),
                    volume_mounts: own_volume_mounts(container),
                    files: mounted_files([container]),
                    after: start_after(container),
                    startup_probe: startup_probe(container),
                    ..Sidecar::default()
                })
                .collect(),
            image: None,
            memory_limit_bytes: None,
            cpu_limit_millis: None,
            // Each container starts once what it waits for holds, the main one last; the
            // Pod's names go in a hosts file laid over the host's read-only `/etc`.
            after: start_after(main),
            host_aliases: launch.host_aliases.clone(),
            memory_volumes: memory_volumes_of(launch),
            handler: handler_of(launch.runtime_class.as_deref()),
        };
        Ok((spec, Vec::new()))
    }

    /// Removes a Pod's network, if it has one (blocking work on a thread of its own).
    async fn detach_network(networks: Option<Arc<HostNetworks>>, pod_uid: String) {
        if let Some(networks) = networks {
            let _ = tokio::task::spawn_blocking(move || networks.detach(&pod_uid)).await;
        }
    }

    /// Runs containers in their images through the executor's OCI runtime (`kind` `oci` or
    /// `auto`), pulling with `puller`. The executor must have been made with an OCI runtime that
    /// works: [`ExecutorRuntime::oci_state`] says whether it does.
    pub fn with_images(mut self, kind: RuntimeKind, puller: ImagePuller) -> ExecutorRuntime {
        self.kind = kind;
        self.images = Some(puller);
        self
    }

    /// Pulls the images of gVisor sandboxes with `puller` (its trees unshifted). The executor
    /// must have been made with a gVisor runtime that works: [`ExecutorRuntime::gvisor_state`].
    pub fn with_gvisor_images(mut self, puller: ImagePuller) -> ExecutorRuntime {
        self.gvisor_images = Some(puller);
        self
    }

    /// Whether gVisor's runsc works here, and why not.
    pub fn gvisor_state(&self) -> &OciSupport {
        self.executor.gvisor()
    }

    /// The puller of a Pod of RuntimeClass `runtime_class`.
    fn puller_for(&self, runtime_class: Option<&str>) -> Option<&ImagePuller> {
        match handler_of(runtime_class) {
            RuntimeHandler::Runsc => self.gvisor_images.as_ref(),
            RuntimeHandler::Default => self.images.as_ref(),
        }
    }

    /// Whether the executor's OCI runtime works here, and why not.
    pub fn oci_state(&self) -> &OciSupport {
        self.executor.oci()
    }

    /// Removes the root directory at shutdown (the emulator created it for this run).
    pub fn remove_root_on_shutdown(mut self) -> ExecutorRuntime {
        self.owned_root = Some(self.executor.config().root_dir.clone());
        self
    }

    /// The executor.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// The image puller and the OCI runtime, where containers run in their images.
    fn images_in_force(&self) -> Option<(&ImagePuller, &OciRuntimeInfo)> {
        match (&self.images, self.executor.oci()) {
            (Some(puller), OciSupport::Ready(info)) => Some((puller, info)),
            _ => None,
        }
    }

    /// A sentence for the start-up log: what runs containers.
    pub fn describe_containers(&self) -> String {
        match self.images_in_force() {
            Some((puller, info)) => format!(
                "containers run in their images ({}): pulled into {}, run by {} with {} over the shared image; CPU and \
                 memory limits {}",
                self.kind.as_str(),
                puller.cache_dir().display(),
                info.version,
                match info.writable_layer {
                    WritableLayer::Overlay => "an overlay writable layer",
                    WritableLayer::Copy => "a copy of the image per sandbox (overlayfs does not mount here)",
                },
                if info.cgroup_limits { "enforced through cgroups" } else { "NOT enforced (cgroups refused here)" }
            ),
            None => {
                "sandbox commands are this machine's programs (container images are recorded, not pulled), run in a \
             root of their own with the host's system directories read-only; see crates/executor/README.md"
                    .to_owned()
            }
        }
    }

    /// A sentence for the start-up log: the isolation in force and what it means.
    pub fn describe(&self) -> String {
        let root = self.executor.config().root_dir.display();
        match self.executor.isolation() {
            Isolation::Plain => format!(
                "plain processes, NOT isolated (no namespaces: sandboxes share the host's filesystem, hostname and \
                 process list, with the emulator's rights); sandbox directories under {root}"
            ),
            _ if self.executor.uses_user_namespace() => format!(
                "Linux namespaces (user, mount with a root of their own, UTS, IPC, PID); sandbox roots under {root}"
            ),
            _ => format!(
                "Linux namespaces (mount with a root of their own, UTS, IPC, PID; no user namespace can be made \
                 here, so a sandbox's root is the host's root without CAP_SYS_ADMIN); sandbox roots under {root}"
            ),
        }
    }

    /// Starts a Pod's prepared launch and logs how it went.
    async fn start_spec(
        &self,
        launch: &PodLaunch,
        main: &ContainerStart,
        spec: LaunchSpec,
    ) -> Result<(), RuntimeError> {
        match self.executor.start(&launch.pod_uid, spec).await {
            Ok(()) => {
                tracing::debug!(
                    pod_uid = %launch.pod_uid,
                    sandbox_id = launch.sandbox_id.as_deref().unwrap_or("-"),
                    image = %main.image,
                    "main process started"
                );
                Ok(())
            }
            Err(ExecutorError::ShutDown) => Err(RuntimeError::Unavailable("the emulator is stopping".to_owned())),
            // The world calls the Pod Running, but nothing runs: the driver fails it with the
            // reason (a command that cannot be found is not this: it runs and exits 127).
            Err(error) => Err(RuntimeError::StartFailed(error.to_string())),
        }
    }
}

/// What runs a Pod of RuntimeClass `runtime_class` (the world admits only classes this host
/// has: `gvisor` where runsc works).
fn handler_of(runtime_class: Option<&str>) -> RuntimeHandler {
    if runtime_class == Some(GVISOR_RUNTIME_CLASS) { RuntimeHandler::Runsc } else { RuntimeHandler::Default }
}

/// No image is pulled: with no command the arguments are the command (an image whose entrypoint
/// is empty), and with neither the container runs nothing (the main one idles like
/// `sleep infinity`).
fn command_line(container: &ContainerStart) -> Vec<String> {
    let mut command = container.command.clone();
    command.extend(container.args.iter().cloned());
    command
}

/// A container's launch in its image, as Kubernetes combines the two: `command` replaces the
/// image's ENTRYPOINT (and drops its CMD), `args` replace CMD; the Pod's environment over the
/// image's; the Pod's working directory, else the image's; `runAsUser`/`runAsGroup`, else the
/// image's USER (a name looked up in the image's `/etc/passwd`); the container's limits.
fn image_launch(
    launch: &PodLaunch,
    main: &ContainerStart,
    image: &Image,
    volume_mounts: Vec<VolumeMount>,
) -> Result<LaunchSpec, RuntimeError> {
    let command = image.config.argv(&main.command, &main.args);
    if command.is_empty() {
        // What containerd says of an image with neither ENTRYPOINT nor CMD and a Pod without
        // `command`.
        return Err(RuntimeError::StartFailed(format!(
            "failed to create containerd task: no command specified for image {}",
            image.reference
        )));
    }
    let pod_env: Vec<(String, String)> = main.env.iter().map(|(key, value)| (key.clone(), value.clone())).collect();
    let env = image.config.env_with(&pod_env).into_iter().collect();
    let user = match (user_of(main), &image.config.user) {
        (Some(user), _) => Some(user),
        (None, Some(name)) if !name.is_empty() => {
            let (uid, gid) = cwsandbox_images::resolve_user(&image.rootfs, name).map_err(|error| {
                RuntimeError::StartFailed(format!("image {}: USER {name}: {error}", image.reference))
            })?;
            Some(SandboxUser { uid, gid })
        }
        (None, _) => None,
    };
    Ok(LaunchSpec {
        hostname: hostname_of(&launch.pod_name),
        command,
        env,
        working_dir: main
            .working_dir
            .clone()
            .or_else(|| image.config.working_dir.clone())
            .filter(|dir| !dir.is_empty()),
        files: mounted_files([main]),
        // The Pod's, set by the caller (`ExecutorRuntime::start_on`).
        network: Network::Host,
        user,
        volume_mounts,
        name: main.name.clone(),
        sidecars: Vec::new(),
        image: Some(ImageRoot { rootfs: image.rootfs.clone() }),
        memory_limit_bytes: main.memory_limit_bytes,
        cpu_limit_millis: main.cpu_limit_millis,
        after: start_after(main),
        host_aliases: launch.host_aliases.clone(),
        memory_volumes: memory_volumes_of(launch),
        handler: handler_of(launch.runtime_class.as_deref()),
    })
}

/// What a container waits for of the Pod's others, as the executor keeps it.
fn start_after(container: &ContainerStart) -> Vec<StartAfter> {
    use cwsandbox_sim::k8s::StartCondition as Condition;
    container
        .start_after
        .iter()
        .map(|dependency| StartAfter {
            container: dependency.container.clone(),
            condition: match dependency.condition {
                Condition::Started => StartCondition::Started,
                Condition::Healthy => StartCondition::Healthy,
                Condition::CompletedSuccessfully => StartCondition::CompletedSuccessfully,
            },
        })
        .collect()
}

/// A container's startup probe, as the executor runs it.
fn startup_probe(container: &ContainerStart) -> Option<StartupProbe> {
    container.startup_probe.as_ref().map(|probe| StartupProbe {
        exec: probe.exec.clone(),
        initial_delay: Duration::from_secs(u64::from(probe.initial_delay_seconds)),
        period: Duration::from_secs(u64::from(probe.period_seconds.max(1))),
        timeout: Duration::from_secs(u64::from(probe.timeout_seconds.max(1))),
        failure_threshold: probe.failure_threshold.max(1),
    })
}

/// A Pod's other containers in an order where each comes after those it waits for (the spec's
/// order otherwise; the world refused cycles).
fn in_start_order(others: &[ContainerStart]) -> Vec<&ContainerStart> {
    let mut ordered: Vec<&ContainerStart> = Vec::with_capacity(others.len());
    while ordered.len() < others.len() {
        let next = others.iter().find(|container| {
            !ordered.iter().any(|done| done.name == container.name)
                && container.start_after.iter().all(|dependency| {
                    ordered.iter().any(|done| done.name == dependency.container)
                        || !others.iter().any(|other| other.name == dependency.container)
                })
        });
        match next {
            Some(container) => ordered.push(container),
            // A cycle (never made by the world): the rest in the spec's order.
            None => {
                let rest: Vec<&ContainerStart> =
                    others.iter().filter(|container| !ordered.iter().any(|done| done.name == container.name)).collect();
                ordered.extend(rest);
            }
        }
    }
    ordered
}

/// The files mounted into `containers`, written into the root they run in.
fn mounted_files<'a>(containers: impl IntoIterator<Item = &'a ContainerStart>) -> Vec<MountedFile> {
    containers
        .into_iter()
        .flat_map(|container| &container.files)
        .map(|(path, content)| MountedFile { path: path.clone(), content: content.to_vec() })
        .collect()
}

/// The Pod's memory-backed scratch volumes as the executor makes them (each a tmpfs).
fn memory_volumes_of(launch: &PodLaunch) -> Vec<cwsandbox_executor::MemoryVolume> {
    launch
        .memory_volumes
        .iter()
        .map(|volume| cwsandbox_executor::MemoryVolume { volume: volume.volume.clone(), size_bytes: volume.size_bytes })
        .collect()
}

/// One container's volume mounts, for a container with a root of its own (in its image).
fn own_volume_mounts(container: &ContainerStart) -> Vec<VolumeMount> {
    container.volume_mounts.iter().map(volume_mount).collect()
}

/// A mount of the Pod's as the executor makes it.
fn volume_mount(asked: &cwsandbox_sim::k8s::VolumeMountStart) -> VolumeMount {
    VolumeMount {
        volume: asked.volume.clone(),
        path: asked.path.clone(),
        read_only: asked.read_only,
        sub_path: asked.sub_path.clone(),
        restore_from: asked.restore_from_snapshot.clone(),
        claim: asked.claim.as_ref().map(claim_key),
    }
}

/// Where a claim's data lives under the executor's `.volumes`: `<organization>/<cluster>/
/// <namespace>/<name>`, so that two organizations, or two clusters, with a claim of one namespace
/// and name never share its data. The namespace and name are DNS labels (the sim checked them);
/// an organization or cluster id that is not one (any text may be) is named by `_` and its
/// SHA-256's first 32 hex digits, a segment no label can be (no `_` in a label), so no id can
/// reach another's directory, or out of `.volumes`, through the path.
fn claim_key(claim: &cwsandbox_sim::k8s::ClaimMount) -> String {
    fn segment(id: &str) -> String {
        let label = !id.is_empty()
            && id.len() <= 63
            && id.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-');
        if label {
            return id.to_owned();
        }
        use sha2::Digest;
        let digest = sha2::Sha256::digest(id.as_bytes());
        format!("_{}", &hex::encode(digest)[..32])
    }
    format!(
        "{}/{}/{}/{}",
        segment(&claim.org),
        segment(&claim.cluster_id),
        segment(&claim.namespace),
        segment(&claim.name)
    )
}

/// As a container's: an id not given is the image's default, root.
fn user_of(container: &ContainerStart) -> Option<SandboxUser> {
    match container.run_as {
        (None, None) => None,
        (uid, gid) => Some(SandboxUser { uid: uid.unwrap_or(0), gid: gid.unwrap_or(0) }),
    }
}

/// The Pod's name as a hostname.
fn hostname_of(pod_name: &str) -> String {
    let mut end = pod_name.len().min(MAX_HOSTNAME);
    while !pod_name.is_char_boundary(end) {
        end -= 1;
    }
    pod_name[..end].to_owned()
}

fn not_running(target: &Target) -> RuntimeError {
    RuntimeError::NotRunning(format!("sandbox {} has no running processes", target.sandbox_id))
}

fn exec_error(error: ExecutorError, target: &Target) -> RuntimeError {
    match error {
        ExecutorError::UnknownSandbox(_) | ExecutorError::NotRunning(_) => not_running(target),
        ExecutorError::InvalidRequest(description) => {
            RuntimeError::InvalidArgument { field: "command".to_owned(), description }
        }
        ExecutorError::UnknownContainer { container, .. } => RuntimeError::ContainerNotFound(container),
        ended @ ExecutorError::ContainerEnded { .. } => RuntimeError::NotRunning(ended.to_string()),
        other => RuntimeError::Unavailable(other.to_string()),
    }
}

fn file_error(error: FileError, path: String, target: &Target) -> RuntimeError {
    match error {
        FileError::NotFound => RuntimeError::FileNotFound { path },
        FileError::IsDirectory => RuntimeError::IsDirectory { path },
        FileError::PermissionDenied => RuntimeError::PermissionDenied { path },
        FileError::TooLarge { size, max } => RuntimeError::FileTooLarge { path, size_bytes: size, max_size_bytes: max },
        FileError::Io(message) => RuntimeError::Io { path, message },
        FileError::SandboxNotRunning => not_running(target),
        FileError::UnknownContainer(container) => RuntimeError::ContainerNotFound(container),
        FileError::ContainerEnded(message) => RuntimeError::NotRunning(message),
        FileError::InvalidPath(description) => RuntimeError::InvalidArgument { field: "path".to_owned(), description },
        error @ FileError::NotRegular { .. } => RuntimeError::NotRegularFile { path, message: error.to_string() },
        error @ FileError::TimedOut { .. } => RuntimeError::FileTimeout { path, message: error.to_string() },
    }
}

/// A Pod-level operation's failure (snapshot, connect): a sandbox whose processes are gone is
/// not running; anything else is the executor's trouble.
fn pod_error(error: ExecutorError) -> RuntimeError {
    match error {
        ExecutorError::UnknownSandbox(_) | ExecutorError::NotRunning(_) => {
            RuntimeError::NotRunning(format!("the sandbox's processes are not running: {error}"))
        }
        other => RuntimeError::Unavailable(other.to_string()),
    }
}

impl SandboxRuntime for ExecutorRuntime {
    fn exited(&self, pod_uid: &str) -> Option<i32> {
        self.executor.exit_code(pod_uid)
    }

    fn start(&self, launch: PodLaunch) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            let network = self.network_for(&launch).await?;
            let started = self.start_on(&launch, network).await;
            if started.is_err() {
                ExecutorRuntime::detach_network(self.networks.clone(), launch.pod_uid.to_string()).await;
            }
            started
        }
        .boxed()
    }

    fn pulls_images(&self) -> bool {
        self.images.is_some()
    }

    fn pull_images(
        &self,
        pod_uid: String,
        images: Vec<ImageToPull>,
    ) -> BoxFuture<'_, Result<Vec<ImagePulled>, ImagePullFailure>> {
        async move {
            let runtime_class = images.first().and_then(|image| image.runtime_class.clone());
            let Some(puller) = self.puller_for(runtime_class.as_deref()) else {
                return Ok(images.into_iter().map(|image| ImagePulled::Present { image: image.image }).collect());
            };
            puller.pull(&pod_uid, images).await
        }
        .boxed()
    }

    fn prune_images(&self) -> BoxFuture<'_, Result<Option<(PathBuf, PruneReport)>, RuntimeError>> {
        async move {
            let Some(puller) = &self.images else { return Ok(None) };
            let mut report = puller.prune().await.map_err(|error| RuntimeError::Unavailable(error.to_string()))?;
            if let Some(gvisor) = &self.gvisor_images {
                // gVisor's copies of the images go too, and are counted with the rest.
                let other = gvisor.prune().await.map_err(|error| RuntimeError::Unavailable(error.to_string()))?;
                report.removed.extend(other.removed);
                report.blobs_removed += other.blobs_removed;
                report.bytes_freed += other.bytes_freed;
                report.in_use.extend(other.in_use);
                report.bytes_after += other.bytes_after;
            }
            Ok(Some((puller.cache_dir().to_path_buf(), report)))
        }
        .boxed()
    }

    fn image_store(&self) -> Option<&cwsandbox_images::ImageStore> {
        self.images.as_ref().map(ImagePuller::store)
    }

    fn handler_image_stores(&self) -> Vec<&cwsandbox_images::ImageStore> {
        self.gvisor_images.iter().map(ImagePuller::store).collect()
    }

    fn container_runtime(&self) -> String {
        match self.images_in_force() {
            Some((_, info)) => format!(
                "{} ({}, {} writable layer, cgroup limits {})",
                self.kind.as_str(),
                info.version,
                match info.writable_layer {
                    WritableLayer::Overlay => "overlay",
                    WritableLayer::Copy => "copied",
                },
                if info.cgroup_limits { "enforced" } else { "not enforced" }
            ),
            None => "process".to_owned(),
        }
    }

    fn cgroup_limits(&self) -> bool {
        self.images_in_force().is_some_and(|(_, info)| info.cgroup_limits)
    }

    fn memory_volumes(&self) -> Result<(), String> {
        self.executor.memory_volumes()
    }

    fn runtime_classes(&self) -> Vec<(String, Result<(), String>)> {
        let gvisor = match self.executor.gvisor() {
            OciSupport::Ready(_) => Ok(()),
            OciSupport::Unavailable(why) => Err(why.clone()),
            OciSupport::NotConfigured => Err("gVisor's runsc is not configured (containerRuntime.runsc)".to_owned()),
        };
        vec![(GVISOR_RUNTIME_CLASS.to_owned(), gvisor)]
    }

    fn pod_network(&self) -> PodNetworkOffer {
        match &self.networks {
            Some(networks) => networks.offer(),
            None => PodNetworkOffer::Unavailable("sandbox networks are not set up for this runtime".to_owned()),
        }
    }

    fn one_container_runtime_classes(&self) -> Vec<String> {
        // runsc cannot join another container's namespaces by path (the executor's refusal).
        vec![GVISOR_RUNTIME_CLASS.to_owned()]
    }

    fn stop(&self, pod_uid: String, grace: Duration) -> BoxFuture<'_, Result<(), RuntimeError>> {
        if self.executor.is_running(&pod_uid) {
            let executor = self.executor.clone();
            let exits = self.own_exits.clone();
            tokio::spawn(async move {
                executor.stop(&pod_uid, grace).await;
                // Everything is gone: the Pod can go now rather than at the end of its grace.
                let exit_code = executor.exit_code(&pod_uid).unwrap_or(137);
                let oom_killed = executor.oom_killed(&pod_uid);
                tracing::debug!(%pod_uid, exit_code, "stopped");
                let _ = exits.send(MainExit { pod_uid, container: None, exit_code, oom_killed });
            });
        }
        futures::future::ready(Ok(())).boxed()
    }

    fn kill(&self, pod_uid: String) -> BoxFuture<'_, Result<(), RuntimeError>> {
        for images in self.images.iter().chain(&self.gvisor_images) {
            // Gone before it started: its pulled images are not needed.
            images.forget(&pod_uid);
        }
        let executor = self.executor.clone();
        let retention = self.retention;
        let in_use: Vec<_> =
            self.images.iter().chain(&self.gvisor_images).map(|images| images.in_use().clone()).collect();
        let networks = self.networks.clone();
        tokio::spawn(async move {
            executor.kill(&pod_uid).await;
            // Its processes are gone: its address and rules go now (the world hands the
            // address out again only after every other one).
            ExecutorRuntime::detach_network(networks, pod_uid.clone()).await;
            // The logs of a gone Pod stay readable as long as its sandbox does.
            tokio::time::sleep(retention).await;
            executor.remove(&pod_uid).await;
            // Its writable layer over the image's tree is gone with it.
            for in_use in in_use {
                in_use.release(&pod_uid);
            }
        });
        futures::future::ready(Ok(())).boxed()
    }

    fn snapshot_volume(
        &self,
        pod_uid: String,
        volume: String,
        snapshot_id: String,
    ) -> BoxFuture<'_, Result<u64, RuntimeError>> {
        async move { self.executor.snapshot_volume(&pod_uid, &volume, &snapshot_id).await.map_err(pod_error) }.boxed()
    }

    fn volume_usage(
        &self,
        pod_uid: String,
        volumes: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<(String, u64)>, RuntimeError>> {
        async move {
            let usage = self.executor.volume_usage(&pod_uid, volumes.clone()).await.map_err(pod_error)?;
            Ok(volumes.into_iter().zip(usage).collect())
        }
        .boxed()
    }

    fn connect(&self, pod_uid: String, port: u16) -> BoxFuture<'_, Result<std::net::TcpStream, RuntimeError>> {
        async move { self.executor.connect(&pod_uid, port).await.map_err(pod_error) }.boxed()
    }

    fn delete_snapshot(&self, snapshot_id: String) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            self.executor
                .delete_snapshot(&snapshot_id)
                .await
                .map_err(|error| RuntimeError::Unavailable(error.to_string()))
        }
        .boxed()
    }

    fn exec(&self, target: Target, spec: ExecSpec) -> BoxFuture<'_, Result<ExecSession, RuntimeError>> {
        async move {
            let size = |value: u32| u16::try_from(value).unwrap_or(u16::MAX);
            let request = ExecRequest {
                argv: spec.command,
                env: spec.env,
                working_dir: None,
                tty: spec.tty.is_some(),
                tty_size: spec
                    .tty
                    .filter(|tty| tty.width > 0 && tty.height > 0)
                    .map(|tty| (size(tty.width), size(tty.height))),
                container: Some(target.container.clone()),
            };
            let session =
                self.executor.exec(&target.pod_uid, request).await.map_err(|error| exec_error(error, &target))?;
            Ok(adapt_session(session))
        }
        .boxed()
    }

    fn write_file(&self, target: Target, path: String, content: Bytes) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            self.executor
                .write_file_in(&target.pod_uid, Some(&target.container), &path, &content)
                .await
                .map_err(|error| file_error(error, path, &target))
        }
        .boxed()
    }

    fn read_file(&self, target: Target, path: String, max_bytes: u64) -> BoxFuture<'_, Result<Bytes, RuntimeError>> {
        async move {
            let content = self
                .executor
                .read_file_in(&target.pod_uid, Some(&target.container), &path)
                .await
                .map_err(|error| file_error(error, path.clone(), &target))?;
            let size = content.len() as u64;
            if size > max_bytes {
                return Err(RuntimeError::FileTooLarge { path, size_bytes: size, max_size_bytes: max_bytes });
            }
            Ok(Bytes::from(content))
        }
        .boxed()
    }

    fn logs(
        &self,
        target: Target,
        request: LogRequest,
    ) -> BoxFuture<'_, Result<BoxStream<'static, LogEvent>, RuntimeError>> {
        let reader = self.executor.container_logs(&target.pod_uid, Some(&target.container));
        async move {
            let reader = match reader {
                Ok(reader) => reader,
                // The Pod never ran a process: its log is empty, and no session can be resumed.
                Err(_) if request.resume.is_some() => {
                    return Ok(stream::iter([session_not_found(&request)]).boxed());
                }
                Err(_) => return Ok(stream::empty().boxed()),
            };
            let (sender, mut receiver) = mpsc::channel(16);
            tokio::spawn(stream_log(reader, request, sender));
            Ok(stream::poll_fn(move |cx| receiver.poll_recv(cx)).boxed())
        }
        .boxed()
    }

    fn exits(&self) -> BoxStream<'static, MainExit> {
        let taken = self.exits.lock_unpoisoned().take();
        match taken {
            Some((mut own, mut from_executor)) => {
                let own = stream::poll_fn(move |cx| own.poll_recv(cx));
                let from_executor = stream::poll_fn(move |cx| from_executor.poll_recv(cx)).map(|exit| MainExit {
                    pod_uid: exit.id,
                    container: exit.container,
                    exit_code: exit.exit_code,
                    oom_killed: exit.oom_killed,
                });
                stream::select(own, from_executor).boxed()
            }
            None => stream::empty().boxed(),
        }
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        async move {
            self.executor.shutdown().await;
            if let Some(networks) = self.networks.clone() {
                let _ = tokio::task::spawn_blocking(move || networks.close()).await;
            }
            if let Some(root) = self.owned_root.clone() {
                let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&root).map(|()| root)).await;
                if let Ok(Err(error)) = removed {
                    tracing::warn!("cannot remove the sandbox directory: {error}");
                }
            }
        }
        .boxed()
    }

    fn isolation(&self) -> String {
        match self.executor.isolation() {
            Isolation::Plain => "plain".to_owned(),
            _ => "namespaces".to_owned(),
        }
    }
}

/// The executor's session behind the runtime's: a task relays stdin, resizes and the end of
/// stdin; the output stream ends with the exit code.
fn adapt_session(session: cwsandbox_executor::ExecSession) -> ExecSession {
    let cwsandbox_executor::ExecSession { mut stdin, output, exit, tty } = session;
    let (input, mut inputs) = mpsc::channel::<ExecInput>(16);
    tokio::spawn(async move {
        while let Some(item) = inputs.recv().await {
            match item {
                // A command that closed its stdin or exited drops what comes after, as a pipe does.
                ExecInput::Stdin(data) => {
                    let _ = stdin.write(&data).await;
                }
                ExecInput::Resize(size) => {
                    if let Some(tty) = &tty {
                        let clamp = |value: u32| u16::try_from(value).unwrap_or(u16::MAX);
                        let _ = tty.resize(clamp(size.width), clamp(size.height));
                    }
                }
                ExecInput::Close => break,
            }
        }
        stdin.close().await;
    });
    ExecSession { input, output: exec_events(output, exit).boxed() }
}

struct ExecPump {
    output: ExecOutput,
    /// Dropping it before the command ended kills the command: a caller that went away.
    exit: ExecExit,
    code: Option<i32>,
    done: bool,
}

fn output_event(output: Output) -> ExecEvent {
    match output.stream {
        Stream::Stdout => ExecEvent::Stdout(output.data),
        Stream::Stderr => ExecEvent::Stderr(output.data),
    }
}

/// Output chunks, then exactly one `Exited`.
fn exec_events(output: ExecOutput, exit: ExecExit) -> impl futures::Stream<Item = ExecEvent> + Send + 'static {
    stream::unfold(ExecPump { output, exit, code: None, done: false }, |mut pump| async move {
        if pump.done {
            return None;
        }
        loop {
            match pump.code {
                None => {
                    tokio::select! {
                        chunk = pump.output.recv() => match chunk {
                            Some(chunk) => return Some((output_event(chunk), pump)),
                            None => {
                                let code = pump.exit.wait().await;
                                pump.done = true;
                                return Some((ExecEvent::Exited(code), pump));
                            }
                        },
                        code = pump.exit.wait() => pump.code = Some(code),
                    }
                }
                Some(code) => match tokio::time::timeout(OUTPUT_IDLE_AFTER_EXIT, pump.output.recv()).await {
                    Ok(Some(chunk)) => return Some((output_event(chunk), pump)),
                    Ok(None) | Err(_) => {
                        pump.done = true;
                        return Some((ExecEvent::Exited(code), pump));
                    }
                },
            }
        }
    })
}

fn session_not_found(request: &LogRequest) -> LogEvent {
    let session = request.resume.as_ref().map(|(session, _)| session.as_str()).unwrap_or_default();
    LogEvent::Failed {
        code: "SESSION_NOT_FOUND".to_owned(),
        message: format!("log session {session:?} is not this sandbox's current log session"),
    }
}

fn log_failure(error: LogError) -> LogEvent {
    let code = match error {
        LogError::ReplayGap { .. } => "REPLAY_GAP",
        LogError::InvalidOffset { .. } => "INVALID_RESUME_OFFSET",
    };
    LogEvent::Failed { code: code.to_owned(), message: error.to_string() }
}

/// Turns log chunks into events: the `since` filter and the server-side timestamps.
struct Shaper {
    session_id: String,
    timestamps: bool,
    since: Option<SystemTime>,
    /// Whether the next byte starts a line (a timestamp goes there).
    at_line_start: bool,
}

impl Shaper {
    fn event(&mut self, chunk: LogChunk) -> Option<LogEvent> {
        let next_offset = chunk.end();
        if self.since.is_some_and(|since| chunk.time < since) {
            self.at_line_start = chunk.data.ends_with(b"\n");
            return None;
        }
        let data = if self.timestamps { self.stamp(&chunk) } else { chunk.data };
        Some(LogEvent::Chunk { data, time: chunk.time, session_id: self.session_id.clone(), next_offset })
    }

    /// Prefixes every line with the RFC 3339 time its bytes were read, as `kubectl logs
    /// --timestamps` shows it.
    fn stamp(&mut self, chunk: &LogChunk) -> Bytes {
        let stamp = format!("{} ", DateTime::<Utc>::from(chunk.time).to_rfc3339_opts(SecondsFormat::Nanos, true));
        let mut out = BytesMut::with_capacity(chunk.data.len() + stamp.len());
        for line in chunk.data.split_inclusive(|byte| *byte == b'\n') {
            if self.at_line_start {
                out.extend_from_slice(stamp.as_bytes());
            }
            out.extend_from_slice(line);
            self.at_line_start = line.ends_with(b"\n");
        }
        out.freeze()
    }
}

/// What is held of the log (its tail, everything, or from a resume offset), then, with `follow`,
/// new output until the sandbox stops or the caller leaves.
async fn stream_log(reader: LogReader, request: LogRequest, sender: mpsc::Sender<LogEvent>) {
    let mut shaper = Shaper {
        session_id: reader.session_id().to_owned(),
        timestamps: request.timestamps,
        since: request.since,
        at_line_start: true,
    };
    let held = match &request.resume {
        Some((session, _)) if *session != shaper.session_id => {
            let _ = sender.send(session_not_found(&request)).await;
            return;
        }
        Some((_, offset)) => match reader.read_from(*offset) {
            Ok(held) => held,
            Err(error) => {
                let _ = sender.send(log_failure(error)).await;
                return;
            }
        },
        // `tail` reads atomically; with more lines than held it returns everything held.
        None => reader.tail(request.tail_lines.map_or(usize::MAX, |lines| lines as usize)),
    };
    for chunk in held.chunks {
        if let Some(event) = shaper.event(chunk)
            && sender.send(event).await.is_err()
        {
            return;
        }
    }
    if !request.follow {
        return;
    }
    let mut follower = match reader.follow_from(held.next_offset) {
        Ok(follower) => follower,
        Err(error) => {
            let _ = sender.send(log_failure(error)).await;
            return;
        }
    };
    loop {
        tokio::select! {
            next = follower.next() => match next {
                Some(Ok(chunk)) => {
                    if let Some(event) = shaper.event(chunk)
                        && sender.send(event).await.is_err()
                    {
                        return;
                    }
                }
                Some(Err(error)) => {
                    let _ = sender.send(log_failure(error)).await;
                    return;
                }
                // The sandbox stopped: the follow ends cleanly.
                None => return,
            },
            _ = sender.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_key_is_its_organization_cluster_namespace_and_name_each_a_plain_segment() {
        let claim = |org: &str, cluster_id: &str| cwsandbox_sim::k8s::ClaimMount {
            org: org.to_owned(),
            cluster_id: cluster_id.to_owned(),
            namespace: "datasets".to_owned(),
            name: "p6claim".to_owned(),
        };
        assert_eq!(claim_key(&claim("org-a", "cks-cluster")), "org-a/cks-cluster/datasets/p6claim");
        let odd = claim_key(&claim("../Org A", "cluster/../../x"));
        let segments: Vec<&str> = odd.split('/').collect();
        assert_eq!(segments.len(), 4, "{odd}");
        assert!(segments[..2].iter().all(|segment| segment.starts_with('_') && segment.len() == 33), "{odd}");
        assert_ne!(segments[0], segments[1]);
        assert_ne!(claim_key(&claim("org-a", "c1")), claim_key(&claim("org-b", "c1")));
        assert_ne!(claim_key(&claim("org-a", "c1")), claim_key(&claim("org-a", "c2")));
    }

    #[test]
    fn hostnames_are_truncated_like_kubernetes() {
        assert_eq!(hostname_of("sandbox-abc"), "sandbox-abc");
        assert_eq!(hostname_of(&"x".repeat(80)).len(), 63);
    }

    #[test]
    fn timestamps_go_at_every_line_start_across_chunks() {
        let mut shaper = Shaper { session_id: "s".into(), timestamps: true, since: None, at_line_start: true };
        let time = SystemTime::UNIX_EPOCH + Duration::from_millis(1500);
        let chunk =
            |offset: u64, data: &'static str| LogChunk { offset, time, data: Bytes::from_static(data.as_bytes()) };
        let text = |event: Option<LogEvent>| match event {
            Some(LogEvent::Chunk { data, next_offset, .. }) => (String::from_utf8(data.to_vec()).unwrap(), next_offset),
            other => panic!("{other:?}"),
        };
        let stamp = "1970-01-01T00:00:01.500000000Z";
        assert_eq!(text(shaper.event(chunk(0, "one\ntw"))), (format!("{stamp} one\n{stamp} tw"), 6));
        assert_eq!(text(shaper.event(chunk(6, "o\nthree\n"))), (format!("o\n{stamp} three\n"), 14));
    }

    #[test]
    fn since_skips_older_chunks_but_keeps_line_starts() {
        let since = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let mut shaper = Shaper { session_id: "s".into(), timestamps: false, since: Some(since), at_line_start: true };
        let old = LogChunk { offset: 0, time: SystemTime::UNIX_EPOCH, data: Bytes::from_static(b"old\n") };
        assert!(shaper.event(old).is_none());
        let new = LogChunk { offset: 4, time: since, data: Bytes::from_static(b"new\n") };
        assert!(matches!(shaper.event(new), Some(LogEvent::Chunk { next_offset: 8, .. })));
    }
}
