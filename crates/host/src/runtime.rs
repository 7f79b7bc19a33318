//! The seam between the emulator and whatever runs a sandbox's processes.
//!
//! The simulation decides *when* a sandbox's Pod starts, is asked to stop and is gone (it emits
//! [`Effect`](cwsandbox_sim::world::Effect)s); a [`SandboxRuntime`] decides *how*: it starts the
//! main process, runs `exec` commands next to it, reads and writes its files, keeps its logs and
//! reports when the main process exits by itself. The binary attaches the process executor
//! (crate `cwsandbox-executor`, through [`crate::executor_runtime`]); the tests also use an
//! in-memory fake. Without a runtime, Pods still move through their life in the simulation, and
//! every data operation answers UNAVAILABLE with reason `CWSANDBOX_BACKEND_UNAVAILABLE`.
//!
//! All methods take owned arguments and return `'static`-friendly boxed futures and streams so the
//! trait is object safe (`Arc<dyn SandboxRuntime>`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
pub use cwsandbox_images::PruneReport;
use cwsandbox_sim::world::{ImagePullFailure, ImagePulled, ImageToPull};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

/// Everything needed to start a Pod's processes: the world's own description of the launch
/// (the payload of its `Effect::StartPod`), handed over as it is.
pub use cwsandbox_sim::world::PodLaunch;

/// One container to start: the simulation's own description of it.
pub use cwsandbox_sim::world::ContainerStart as ContainerLaunch;

/// Which running container an operation acts in: what the data-target query finds
/// ([`SandboxView::data_target`](cwsandbox_sim::sandbox::SandboxView::data_target) for the sandbox
/// API, [`World::pod_data_target`](cwsandbox_sim::world::World::pod_data_target) for kubectl).
pub use cwsandbox_sim::data_target::DataTarget as Target;

/// A terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtySize {
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

/// A command to run inside a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// argv; never empty.
    pub command: Vec<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Run under a pseudo-terminal of this size.
    pub tty: Option<TtySize>,
}

/// What the caller sends to a running command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecInput {
    /// Bytes for stdin.
    Stdin(Bytes),
    /// The terminal was resized.
    Resize(TtySize),
    /// End of stdin. Sent once; nothing follows it.
    Close,
}

/// What a running command produces. The stream ends after `Exited` or `Failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// A chunk of stdout.
    Stdout(Bytes),
    /// A chunk of stderr.
    Stderr(Bytes),
    /// The command ended with this status (a command that could not start ends with 127, and
    /// its reason on stderr, rather than with an error).
    Exited(i32),
    /// The stream failed in-band, e.g. code `STREAM_BACKPRESSURE` or `STREAM_TRUNCATED`.
    Failed {
        /// Machine-readable code.
        code: String,
        /// Human-readable text.
        message: String,
    },
}

/// A started command. Dropping both halves means the caller went away: the runtime kills the
/// command.
pub struct ExecSession {
    /// Where stdin, resizes and the end of stdin go.
    pub input: mpsc::Sender<ExecInput>,
    /// Output and the final status, in order.
    pub output: BoxStream<'static, ExecEvent>,
}

impl std::fmt::Debug for ExecSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSession").finish_non_exhaustive()
    }
}

/// Which part of a container's log to read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogRequest {
    /// Keep the stream open and send new output until the container stops or the caller leaves.
    pub follow: bool,
    /// Start with only this many of the latest lines.
    pub tail_lines: Option<u32>,
    /// Only output written at or after this time.
    pub since: Option<SystemTime>,
    /// Prefix every line with its RFC 3339 time (the server does it; clients print data as is).
    pub timestamps: bool,
    /// Resume an interrupted stream: its session id and the last `next_offset` received.
    pub resume: Option<(String, u64)>,
}

/// What a log stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    /// Some output.
    Chunk {
        /// Raw bytes: several lines or part of one.
        data: Bytes,
        /// When it was written.
        time: SystemTime,
        /// Identifies the stream for resuming.
        session_id: String,
        /// Offset to resume from after this chunk.
        next_offset: u64,
    },
    /// The stream failed in-band (`SESSION_NOT_FOUND`, `REPLAY_GAP`, `STREAM_INTERRUPTED`,
    /// `STREAM_TRUNCATED`, `INVALID_RESUME_OFFSET`, …); nothing follows.
    Failed {
        /// Machine-readable code.
        code: String,
        /// Human-readable text.
        message: String,
    },
}

/// A command ended, by itself or once the runtime stopped it: the world's own description of an
/// exit, which it takes as it is (`World::host_reported_exit`).
pub use cwsandbox_sim::world::MainExit;

/// Why a runtime operation failed. The emulator maps each variant to a status code and an
/// `ErrorInfo` reason in `errors.rs`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// The Pod's processes are not running (never started, or gone).
    #[error("{0}")]
    NotRunning(String),
    /// The Pod's main container cannot be started here, for a reason of its own spec (a mounted
    /// file under a read-only host directory, a user or network plain processes cannot have):
    /// the Pod fails with reason `StartError` and this message.
    #[error("{0}")]
    StartFailed(String),
    /// No container of that name in the Pod.
    #[error("container {0:?} not found")]
    ContainerNotFound(String),
    /// `CWSANDBOX_FILE_NOT_FOUND`.
    #[error("{path}: no such file or directory")]
    FileNotFound {
        /// The path asked for.
        path: String,
    },
    /// `CWSANDBOX_FILE_IS_DIRECTORY`.
    #[error("{path}: is a directory")]
    IsDirectory {
        /// The path asked for.
        path: String,
    },
    /// `CWSANDBOX_FILE_PERMISSION_DENIED`.
    #[error("{path}: permission denied")]
    PermissionDenied {
        /// The path asked for.
        path: String,
    },
    /// `CWSANDBOX_FILE_TOO_LARGE`: the client falls back to streaming through exec.
    #[error("{path}: {size_bytes} bytes is more than the {max_size_bytes} bytes a unary file call carries")]
    FileTooLarge {
        /// The path asked for.
        path: String,
        /// The file's size.
        size_bytes: u64,
        /// The largest size allowed.
        max_size_bytes: u64,
    },
    /// `CWSANDBOX_FILE_IO_FAILED`.
    #[error("{path}: {message}")]
    Io {
        /// The path asked for.
        path: String,
        /// What failed.
        message: String,
    },
    /// A FIFO, device or socket where a file was asked for (FAILED_PRECONDITION).
    #[error("{path}: {message}")]
    NotRegularFile {
        /// The path asked for.
        path: String,
        /// What it is.
        message: String,
    },
    /// A file operation that did not finish in time (DEADLINE_EXCEEDED).
    #[error("{path}: {message}")]
    FileTimeout {
        /// The path asked for.
        path: String,
        /// Why.
        message: String,
    },
    /// `CWSANDBOX_COMMAND_TIMEOUT`.
    #[error("command timed out after {0:?}")]
    CommandTimeout(Duration),
    /// The runtime cannot serve now (`CWSANDBOX_BACKEND_UNAVAILABLE`).
    #[error("{0}")]
    Unavailable(String),
    /// A request field the runtime cannot use (a NUL byte in a path, …): INVALID_ARGUMENT with a
    /// field violation.
    #[error("{field}: {description}")]
    InvalidArgument {
        /// The request field.
        field: String,
        /// What is wrong with it.
        description: String,
    },
}

/// Runs sandbox processes. Implemented by the process executor; the emulator holds one as
/// `Option<Arc<dyn SandboxRuntime>>` and calls it from its effects pump and its data-plane
/// handlers.
pub trait SandboxRuntime: Send + Sync + 'static {
    /// A Pod's containers start (effect `StartPod`): run the main container's command. A command
    /// that cannot start is reported through [`SandboxRuntime::exits`] (exit code 127, the reason
    /// in the log) rather than as an error, so the sandbox turns FAILED; an `Err` is only logged.
    fn start(&self, launch: PodLaunch) -> BoxFuture<'_, Result<(), RuntimeError>>;

    /// The main process's exit code if it has already ended (asked right after `start`: a command
    /// that could not start is over by then, and the world should hear it before anyone reads
    /// the sandbox as running). The same exit still comes through [`SandboxRuntime::exits`].
    fn exited(&self, _pod_uid: &str) -> Option<i32> {
        None
    }

    /// SIGTERM the Pod's processes; SIGKILL whatever is left after `grace` (effect `StopPod`).
    fn stop(&self, pod_uid: String, grace: Duration) -> BoxFuture<'_, Result<(), RuntimeError>>;

    /// The Pod is gone: SIGKILL every process it has left (effect `KillPod`). Idempotent.
    fn kill(&self, pod_uid: String) -> BoxFuture<'_, Result<(), RuntimeError>>;

    /// Starts a command in a running container, with streaming stdin and output.
    fn exec(&self, target: Target, spec: ExecSpec) -> BoxFuture<'_, Result<ExecSession, RuntimeError>>;

    /// Writes a whole file, creating parent directories as a container's `cat > path` would not
    /// (the API's WriteFile does).
    fn write_file(&self, target: Target, path: String, content: Bytes) -> BoxFuture<'_, Result<(), RuntimeError>>;

    /// Reads a whole file of at most `max_bytes` (larger: [`RuntimeError::FileTooLarge`]).
    fn read_file(&self, target: Target, path: String, max_bytes: u64) -> BoxFuture<'_, Result<Bytes, RuntimeError>>;

    /// Reads a container's output log (the main process's stdout and stderr).
    fn logs(
        &self,
        target: Target,
        request: LogRequest,
    ) -> BoxFuture<'_, Result<BoxStream<'static, LogEvent>, RuntimeError>>;

    /// Copies scratch volume `volume` of a running Pod into snapshot `snapshot_id` and returns
    /// the copy's size in bytes; a failure's message becomes the snapshot's FAILED reason. A
    /// runtime without volumes cannot take one.
    fn snapshot_volume(
        &self,
        pod_uid: String,
        volume: String,
        snapshot_id: String,
    ) -> BoxFuture<'_, Result<u64, RuntimeError>> {
        let _ = (pod_uid, volume, snapshot_id);
        Box::pin(futures::future::ready(Err(RuntimeError::Unavailable(
            "this sandbox runtime keeps no volumes to snapshot".to_owned(),
        ))))
    }

    /// What each of a running Pod's scratch volumes `volumes` takes on disk, in bytes, by name
    /// (effect `MeasureVolumes`, the kubelet's look behind an eviction). A runtime without
    /// volumes has nothing to measure.
    fn volume_usage(
        &self,
        pod_uid: String,
        volumes: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<(String, u64)>, RuntimeError>> {
        let _ = (pod_uid, volumes);
        Box::pin(futures::future::ready(Err(RuntimeError::Unavailable(
            "this sandbox runtime keeps no volumes to measure".to_owned(),
        ))))
    }

    /// A TCP connection to `port` on a running Pod's own loopback, made in its network: what a
    /// forwarded service port relays to. A runtime without networks cannot make one.
    fn connect(&self, pod_uid: String, port: u16) -> BoxFuture<'_, Result<std::net::TcpStream, RuntimeError>> {
        let _ = (pod_uid, port);
        Box::pin(futures::future::ready(Err(RuntimeError::Unavailable(
            "this sandbox runtime has no network to connect to".to_owned(),
        ))))
    }

    /// Whether this runtime runs images, so that Pods wait for [`SandboxRuntime::pull_images`]
    /// before they start.
    fn pulls_images(&self) -> bool {
        false
    }

    /// Makes a Pod's images available on this host (effect `PullImages`), as its runner's pull
    /// policy says; a failure names the image and carries the registry's message.
    fn pull_images(
        &self,
        pod_uid: String,
        images: Vec<ImageToPull>,
    ) -> BoxFuture<'_, Result<Vec<ImagePulled>, ImagePullFailure>> {
        let _ = pod_uid;
        let present = images.into_iter().map(|image| ImagePulled::Present { image: image.image }).collect();
        Box::pin(futures::future::ready(Ok(present)))
    }

    /// Removes the cached images no sandbox runs on (EmulatorService PruneImages): the cache's
    /// directory and what was removed, or `None` for a runtime that pulls no images.
    fn prune_images(&self) -> BoxFuture<'_, Result<Option<(std::path::PathBuf, PruneReport)>, RuntimeError>> {
        Box::pin(futures::future::ready(Ok(None)))
    }

    /// The image cache this runtime runs images from (EmulatorService LoadImages, ListImages,
    /// RemoveImage), or `None` for a runtime that runs no images.
    fn image_store(&self) -> Option<&cwsandbox_images::ImageStore> {
        None
    }

    /// The image caches of other runtime handlers (gVisor's, whose trees keep the image's own
    /// ids), which an archive loaded into [`SandboxRuntime::image_store`] goes to as well, and
    /// whose images are listed and removed with its.
    fn handler_image_stores(&self) -> Vec<&cwsandbox_images::ImageStore> {
        Vec::new()
    }

    /// Removes snapshot `snapshot_id`'s files (nothing, for a runtime that keeps none).
    fn delete_snapshot(&self, snapshot_id: String) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let _ = snapshot_id;
        Box::pin(futures::future::ready(Ok(())))
    }

    /// Commands that ended, by themselves or once [`SandboxRuntime::stop`] ended them (the world
    /// then removes the Pod before its grace runs out), as they happen. Called once, by the driver.
    fn exits(&self) -> BoxStream<'static, MainExit>;

    /// The emulator is exiting: end every process of every Pod, leaving no orphans.
    fn shutdown(&self) -> BoxFuture<'_, ()>;

    /// How sandboxes are isolated, for the start-up log and the ready file (`namespaces`,
    /// `plain`, …).
    fn isolation(&self) -> String {
        "unspecified".to_owned()
    }

    /// What runs containers, for the ready file: `process`, or the OCI runtime and how.
    fn container_runtime(&self) -> String {
        "process".to_owned()
    }

    /// Whether containers' CPU and memory limits are enforced.
    fn cgroup_limits(&self) -> bool {
        false
    }

    /// Whether a Pod's memory-backed scratch volumes can be made (each a tmpfs of its size):
    /// why not, where they cannot.
    fn memory_volumes(&self) -> Result<(), String> {
        Err("this sandbox runtime keeps no volumes".to_owned())
    }

    /// The named RuntimeClasses this runtime knows besides the node's default, each with
    /// whether it runs Pods here (why not, where it cannot).
    fn runtime_classes(&self) -> Vec<(String, Result<(), String>)> {
        Vec::new()
    }

    /// The RuntimeClasses whose Pods it runs with one container only.
    fn one_container_runtime_classes(&self) -> Vec<String> {
        Vec::new()
    }

    /// What it offers for sandbox networks (a sandbox whose spec asks for network rules is
    /// refused where it offers none).
    fn pod_network(&self) -> cwsandbox_sim::world::PodNetworkOffer {
        cwsandbox_sim::world::PodNetworkOffer::Unavailable("this runtime makes no sandbox networks".to_owned())
    }
}
