//! The keeper, the process that holds a sandbox (its namespaces' init, or the leader of its
//! plain process group): the setup handshake with it, the handles to reach the running sandbox,
//! and its watcher, which collects the logs and tears the sandbox down when it ends.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use cwsandbox_sync::MutexUnpoisoned;
use libc::pid_t;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, warn};

use super::mode::Mode;
use super::{Inner, Running, Sandbox, Target};
use crate::child;
use crate::exec::{self, ExecTracker};
use crate::file_helper::SandboxNamespaces;
use crate::init_channel::InitChannel;
use crate::logs::LogBuffer;
use crate::sandbox_plan::InitPlan;
use crate::setup_report::{ReportMessage, parse_report};
use crate::sys::{self, ProcessHandle};
use crate::zygote::{Zygote, encode_plan};
use crate::{ExecutorError, MainExit};

/// How long a sandbox may take to set itself up before start gives up.
pub(super) const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// After the keeper ends, how long to wait for the log pipe to close. In
/// namespaces mode it closes at once (every process is gone); in plain mode a
/// process that left the sandbox's group may hold it.
const LOG_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The descriptors a keeper's plan names, for the keeper's side of its pipes.
pub(super) struct PlanPipes {
    pub(super) report_fd: RawFd,
    pub(super) go_fd: RawFd,
    pub(super) started_fd: RawFd,
    /// Init's end of its channel (`crate::init_channel`); -1 in plain mode.
    pub(super) control_fd: RawFd,
}

/// A keeper whose sandbox is set up: the handles to reach it, and the emulator's ends of the
/// pipe the main command (or a warm sandbox's init) waits on and of the one that closes when the
/// main command has exec'd (a byte first if it could not).
pub(super) struct StartedKeeper {
    pub(super) keeper: Keeper,
    pub(super) running: Running,
    pub(super) go: std::io::PipeWriter,
    pub(super) started: std::io::PipeReader,
}

/// Forks a keeper for sandbox `id` running the plan `plan` makes for its pipes, waits for its
/// setup report and opens the handles to the sandbox (its root, and in namespaces mode the
/// channel to its init). A keeper that fails its setup is killed and reaped.
pub(super) async fn start_keeper(
    inner: &Inner,
    id: &str,
    plan: impl FnOnce(PlanPipes) -> InitPlan,
) -> Result<StartedKeeper, ExecutorError> {
    let setup_error = |message: String| ExecutorError::Setup { id: id.to_owned(), message };
    let (report_read, report_write) = std::io::pipe()?;
    let (go_read, go) = std::io::pipe()?;
    let (started, started_write) = std::io::pipe()?;
    let control = match inner.mode {
        Mode::Namespaces { .. } => Some(sys::seqpacket_pair()?),
        Mode::Plain => None,
    };
    let plan = plan(PlanPipes {
        report_fd: report_write.as_raw_fd(),
        go_fd: go_read.as_raw_fd(),
        started_fd: started_write.as_raw_fd(),
        control_fd: control.as_ref().map_or(-1, |(_, init_end)| init_end.as_raw_fd()),
    });
    let spawned = match inner.mode {
        Mode::Namespaces { .. } => fork_from_zygote(inner, &plan).await,
        Mode::Plain => inner.spawner.spawn(keeper_command(Arc::new(plan))).await.map(Keeper::Child),
    };
    // Only the keeper and its children may hold these ends now, so the report ends (EOF) if
    // they die, and so does the channel when init is gone.
    drop((report_write, go_read, started_write));
    let channel = match control {
        Some((ours, init_end)) => {
            drop(init_end);
            Some(InitChannel::open(ours)?)
        }
        None => None,
    };
    let mut keeper = spawned.map_err(|error| setup_error(format!("cannot fork the sandbox keeper: {error}")))?;
    let handle = match keeper.handle() {
        Some(handle) => handle?,
        None => return Err(setup_error("the sandbox keeper ended at once".into())),
    };
    let pid = handle.pid();
    let opened = match read_report(report_read).await {
        Ok(main_pid) => open_running(pid, main_pid, inner.mode, handle, channel)
            .map_err(|error| format!("cannot open the sandbox's namespaces: {error}")),
        Err(message) => Err(message),
    };
    match opened {
        Ok(running) => Ok(StartedKeeper { keeper, running, go, started }),
        Err(message) => {
            abandon(&mut keeper).await;
            Err(setup_error(message))
        }
    }
}

/// The zygote, started on first use (and again if it died, killed from outside: its keepers
/// died with it).
pub(super) async fn zygote(inner: &Inner) -> std::io::Result<Arc<Zygote>> {
    let mut current = inner.zygote.lock().await;
    match &*current {
        Some(zygote) if !zygote.is_gone() => Ok(zygote.clone()),
        _ => {
            let zygote = Zygote::start(&inner.spawner, inner.self_exe.as_raw_fd(), inner.pid).await?;
            *current = Some(zygote.clone());
            Ok(zygote)
        }
    }
}

/// Has the zygote fork the keeper of a namespaced sandbox.
async fn fork_from_zygote(inner: &Inner, plan: &InitPlan) -> std::io::Result<Keeper> {
    let zygote = zygote(inner).await?;
    let bytes =
        encode_plan(plan).ok_or_else(|| std::io::Error::other("a namespaced keeper's plan has no namespaces"))?;
    let (log_read, log_write) = std::io::pipe()?;
    let forked = zygote
        .fork_keeper(&bytes, [plan.report_fd, plan.go_fd, plan.started_fd, plan.control_fd, log_write.as_raw_fd()])
        .await?;
    drop(log_write);
    Ok(Keeper::Forked {
        handle: ProcessHandle::from_pidfd(forked.pid, forked.pidfd),
        exit: forked.exit,
        code: None,
        stdout: Some(pipe::Receiver::from_owned_fd(log_read.into())?),
    })
}

/// A sandbox's keeper process: the emulator's child (plain mode) or the zygote's.
#[derive(Debug)]
pub(super) enum Keeper {
    Child(Child),
    Forked {
        handle: ProcessHandle,
        exit: oneshot::Receiver<libc::c_int>,
        code: Option<i32>,
        stdout: Option<pipe::Receiver>,
    },
    /// An image sandbox's `runc run`, with the container's output on `output`.
    Runc {
        child: Child,
        output: Option<pipe::Receiver>,
    },
    /// An image sandbox whose command could not start: no process, only its exit code and
    /// the message on `output`.
    Ended {
        code: i32,
        output: Option<pipe::Receiver>,
    },
}

impl Keeper {
    pub(super) fn id(&self) -> Option<pid_t> {
        match self {
            Keeper::Child(child) => child.id().map(|pid| pid as pid_t),
            Keeper::Forked { handle, code: None, .. } => Some(handle.pid()),
            Keeper::Forked { .. } => None,
            Keeper::Runc { child, .. } => child.id().map(|pid| pid as pid_t),
            Keeper::Ended { .. } => None,
        }
    }

    /// A handle to signal the keeper with (`None`: it is gone already).
    fn handle(&mut self) -> Option<std::io::Result<ProcessHandle>> {
        match self {
            Keeper::Child(child) => child.id().map(|pid| Ok(ProcessHandle::open(pid as pid_t))),
            Keeper::Forked { handle, code: None, .. } => Some(handle.try_clone()),
            Keeper::Forked { .. } | Keeper::Runc { .. } | Keeper::Ended { .. } => None,
        }
    }

    /// The keeper's stdout: the sandbox's log pipe.
    pub(super) fn take_stdout(&mut self) -> Option<LogPipe> {
        match self {
            Keeper::Child(child) => child.stdout.take().map(LogPipe::Child),
            Keeper::Forked { stdout, .. } => stdout.take().map(LogPipe::Pipe),
            Keeper::Runc { output, .. } | Keeper::Ended { output, .. } => output.take().map(LogPipe::Pipe),
        }
    }

    /// Waits for the keeper's end; its exit code (128+N after signal N).
    pub(super) async fn wait(&mut self) -> std::io::Result<i32> {
        match self {
            Keeper::Child(child) | Keeper::Runc { child, .. } => {
                child.wait().await.map(|status| exec::exit_code(&status))
            }
            Keeper::Ended { code, .. } => Ok(*code),
            Keeper::Forked { code: Some(code), .. } => Ok(*code),
            // The receiver is awaited to its end once only: the code is kept.
            Keeper::Forked { exit, code, .. } => match exit.await {
                Ok(status) => Ok(*code.insert(sys::exit_code_of(status))),
                Err(_) => {
                    // Gone with the zygote, as by SIGKILL.
                    *code = Some(137);
                    Err(std::io::Error::other("the zygote that forked the sandbox keeper is gone"))
                }
            },
        }
    }

    /// Whether the keeper is known to have ended, without waiting.
    pub(super) fn has_ended(&mut self) -> bool {
        match self {
            Keeper::Child(child) | Keeper::Runc { child, .. } => !matches!(child.try_wait(), Ok(None)),
            Keeper::Forked { code: Some(_), .. } | Keeper::Ended { .. } => true,
            Keeper::Forked { exit, code, .. } => match exit.try_recv() {
                Ok(status) => {
                    *code = Some(sys::exit_code_of(status));
                    true
                }
                Err(oneshot::error::TryRecvError::Empty) => false,
                // Gone with the zygote.
                Err(oneshot::error::TryRecvError::Closed) => {
                    *code = Some(137);
                    true
                }
            },
        }
    }

    /// Sends SIGKILL (its sandbox's processes die with it).
    pub(super) fn start_kill(&mut self) {
        match self {
            Keeper::Child(child) => {
                let _ = child.start_kill();
            }
            // The pidfd reaches that process only, reaped or not.
            Keeper::Forked { handle, .. } => handle.signal(libc::SIGKILL),
            // Ends runc run; its container is killed by the executor (or the watchdog).
            Keeper::Runc { child, .. } => {
                let _ = child.start_kill();
            }
            Keeper::Ended { .. } => {}
        }
    }
}

/// Where a sandbox's output comes from.
pub(super) enum LogPipe {
    Child(tokio::process::ChildStdout),
    Pipe(pipe::Receiver),
}

impl LogPipe {
    async fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        match self {
            LogPipe::Child(stdout) => stdout.read(buffer).await,
            LogPipe::Pipe(pipe) => pipe.read(buffer).await,
        }
    }
}

/// The keeper of a sandbox, forked to run `plan`.
fn keeper_command(plan: Arc<InitPlan>) -> Command {
    let mut command = Command::new("cwsandbox-keeper");
    command.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
    command.kill_on_drop(true);
    // SAFETY: the closure runs between fork and exec and only calls the
    // fork-safe code of `child`, reading the plan prepared before.
    unsafe {
        command.pre_exec(move || -> std::io::Result<()> {
            if plan.ns.is_some() { child::run_ns_keeper(&plan) } else { child::run_plain_keeper(&plan) }
        });
    }
    command
}

/// Owns the keeper: reports the main command's end and tears the sandbox down.
pub(super) async fn watch_keeper(
    sandbox: Arc<Sandbox>,
    mut child: Keeper,
    eof: oneshot::Receiver<()>,
    pump: Option<tokio::task::JoinHandle<()>>,
    done: watch::Sender<bool>,
    exits: mpsc::UnboundedSender<MainExit>,
) {
    let exit_code = match child.wait().await {
        Ok(code) => code,
        Err(error) => {
            warn!(sandbox = %sandbox.id, %error, "lost track of the sandbox keeper");
            child.start_kill();
            137
        }
    };
    // The log pipe closes when the last process holding it is gone.
    if tokio::time::timeout(LOG_DRAIN_TIMEOUT, eof).await.is_err() {
        warn!(sandbox = %sandbox.id, "a process that left the sandbox still holds its log pipe; closing the logs");
    }
    if let Some(pump) = pump {
        pump.abort();
    }
    sandbox.logs.close();
    sandbox.running.lock_unpoisoned().take();
    // An image sandbox's sidecars (containers of their own) end with its main command, as a
    // Pod's containers do; what they report then is not an exit of theirs.
    for sidecar in &sandbox.sidecars {
        sidecar.end().await;
    }
    // Exec'd commands are gone with the namespace (or the process group); this
    // also ends any plain-mode command that left the group.
    let execs: Vec<ExecTracker> = std::mem::take(&mut *sandbox.execs.lock_unpoisoned());
    for tracker in execs {
        tracker.kill_and_wait().await;
    }
    let oom_killed = match &sandbox.oci {
        Some(container) => container.finish().await,
        None => false,
    };
    let _ = sandbox.oom_killed.set(oom_killed);
    let _ = sandbox.exit_code.set(exit_code);
    // Report before marking done, so whoever waits for the stop sees the report.
    if sandbox.stop_requested.load(Ordering::SeqCst) {
        debug!(sandbox = %sandbox.id, exit_code, "sandbox stopped");
    } else {
        debug!(sandbox = %sandbox.id, exit_code, "sandbox main command exited");
        let _ = exits.send(MainExit { id: sandbox.id.clone(), container: None, exit_code, oom_killed });
    }
    let _ = done.send(true);
}

pub(super) async fn pump_logs(mut stdout: LogPipe, logs: &LogBuffer) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match stdout.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => logs.push(Bytes::copy_from_slice(&buffer[..read]), SystemTime::now()),
        }
    }
}

/// Kills a keeper whose sandbox failed to set up, and reaps it.
pub(super) async fn abandon(child: &mut Keeper) {
    child.start_kill();
    let _ = child.wait().await;
}

/// Waits for the keeper's setup report: the main pid (plain mode) or a failure.
async fn read_report(mut pipe: std::io::PipeReader) -> Result<pid_t, String> {
    let reading = tokio::task::spawn_blocking(move || {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 64];
        loop {
            match pipe.read(&mut buffer) {
                Ok(0) => return bytes,
                Ok(read) => {
                    bytes.extend_from_slice(&buffer[..read]);
                    // Stop at the first complete message: the main command may keep
                    // an inherited copy open for a moment.
                    if !parse_report(&bytes).is_empty() {
                        return bytes;
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return bytes,
            }
        }
    });
    let bytes = match tokio::time::timeout(SETUP_TIMEOUT, reading).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(error)) => return Err(format!("reading the setup report failed: {error}")),
        Err(_) => {
            return Err(format!("the sandbox did not finish its setup within {SETUP_TIMEOUT:?}"));
        }
    };
    match parse_report(&bytes).first() {
        Some(ReportMessage::Ready(main_pid)) => Ok(*main_pid),
        Some(ReportMessage::Failed(stage, errno)) => {
            Err(format!("{} failed: {}", stage.describe(), std::io::Error::from_raw_os_error(*errno)))
        }
        None => Err("the sandbox keeper ended before the sandbox was ready".into()),
    }
}

/// Waits until the main command was exec'd (the pipe closes on exec) or could not be (the child
/// writes a byte, then exits). Returns whether it runs.
pub(super) async fn wait_for_exec(mut pipe: std::io::PipeReader) -> bool {
    let reading = tokio::task::spawn_blocking(move || {
        let mut buffer = [0u8; 8];
        let mut failed = false;
        while let Ok(read) = pipe.read(&mut buffer) {
            if read == 0 {
                break;
            }
            failed = true;
        }
        !failed
    });
    match tokio::time::timeout(SETUP_TIMEOUT, reading).await {
        Ok(Ok(ran)) => ran,
        Ok(Err(_)) => true,
        Err(_) => {
            warn!("the main command took more than {SETUP_TIMEOUT:?} to start");
            true
        }
    }
}

fn open_running(
    keeper_pid: pid_t,
    main_pid: pid_t,
    mode: Mode,
    keeper: ProcessHandle,
    channel: Option<Arc<InitChannel>>,
) -> std::io::Result<Running> {
    match mode {
        Mode::Plain => Ok(Running {
            keeper,
            root: sys::open_path(c"/")?,
            namespaces: None,
            target: Target::Plain { group: main_pid },
        }),
        Mode::Namespaces { ids } => {
            let Some(channel) = channel else {
                return Err(std::io::Error::other("a namespaced sandbox has no channel to its init"));
            };
            // The keeper is our unreaped child, so its pid cannot have been reused; it shares
            // the mount namespace with init.
            let target = Target::Namespaces { channel };
            let root =
                sys::open_path(&CString::new(format!("/proc/{keeper_pid}/root")).map_err(std::io::Error::other)?)?;
            let namespaces = SandboxNamespaces::open(keeper_pid, ids != super::mode::IdMode::HostRoot)?;
            Ok(Running { keeper, root, namespaces: Some(namespaces), target })
        }
    }
}
