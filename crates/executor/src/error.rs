//! The executor's errors, one enum per kind of operation.

/// Errors of sandbox life-cycle, exec and log operations.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("invalid sandbox id {0:?}: use 1 to 128 letters, digits, '.', '_' or '-'")]
    InvalidId(String),
    #[error("invalid hostname {0:?}: it must be 1 to 64 bytes without NUL")]
    InvalidHostname(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("sandbox {0} is already running")]
    AlreadyRunning(String),
    #[error("sandbox {0} is not running")]
    NotRunning(String),
    #[error("sandbox {0} is unknown to the executor")]
    UnknownSandbox(String),
    #[error("sandbox {sandbox} has no container named {container:?}")]
    UnknownContainer { sandbox: String, container: String },
    /// An image sidecar whose command ended is gone, as an exited Kubernetes container is.
    #[error("container {container:?} of sandbox {sandbox} is not running: its command ended")]
    ContainerEnded { sandbox: String, container: String },
    #[error("Linux namespaces are unavailable: {0}")]
    NamespacesUnavailable(String),
    #[error("cannot start sandbox {id}: {message}")]
    Setup { id: String, message: String },
    #[error("the executor is shut down")]
    ShutDown,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a file operation failed. The variants match the API's `CWSANDBOX_FILE_*`
/// reasons.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("no such file or directory")]
    NotFound,
    #[error("is a directory")]
    IsDirectory,
    #[error("permission denied")]
    PermissionDenied,
    #[error("file is {size} bytes, more than the limit of {max} bytes")]
    TooLarge { size: u64, max: u64 },
    #[error("I/O error: {0}")]
    Io(String),
    #[error("the sandbox is not running")]
    SandboxNotRunning,
    /// The sandbox has no container of that name (whose working directory a relative path
    /// would resolve against).
    #[error("no container named {0:?}")]
    UnknownContainer(String),
    /// The container's command ended (an image sidecar's): its files are gone with it.
    #[error("{0}")]
    ContainerEnded(String),
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// A FIFO, device or socket: only regular files are read or written (anything else
    /// could block the call, and a thread, for ever).
    #[error("not a regular file ({kind}): only regular files can be read or written")]
    NotRegular { kind: &'static str },
    /// The operation (or its wait for one of `limit` turns) took longer than `after`.
    #[error("the file operation did not finish within {after:?} (at most {limit} run at once)")]
    TimedOut { after: std::time::Duration, limit: usize },
}

impl FileError {
    pub(crate) fn from_io(error: &std::io::Error) -> FileError {
        match error.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => FileError::NotFound,
            Some(libc::EISDIR) => FileError::IsDirectory,
            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => FileError::PermissionDenied,
            // RESOLVE_IN_ROOT refuses magic links (/proc/self/...) and escapes.
            Some(libc::EXDEV) | Some(libc::ELOOP) => FileError::Io(format!("cannot resolve the path: {error}")),
            _ => FileError::Io(error.to_string()),
        }
    }
}

/// Why a log read failed. The variants match the API's in-band log stream codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// `REPLAY_GAP`: the bytes from `requested` were dropped; `oldest` is the
    /// oldest offset still held.
    #[error("log bytes from offset {requested} were dropped; the oldest held is {oldest}")]
    ReplayGap { requested: u64, oldest: u64 },
    /// `INVALID_RESUME_OFFSET`: past the end of the log.
    #[error("log offset {requested} is past the end ({end})")]
    InvalidOffset { requested: u64, end: u64 },
}
