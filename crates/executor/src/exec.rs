//! A command run inside a running sandbox: its stdin, output and exit code.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::error::ExecutorError;

use crate::init_channel::InitChannel;
use crate::sys;

/// How long a command whose end was asked of the sandbox's init may take to be reported
/// (init gives its group 1 s after SIGTERM, then SIGKILLs it).
const INIT_EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// A command to run in a sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecRequest {
    /// Program and arguments; the program is looked up in `PATH` (of the sandbox's
    /// environment, overridden by `env`).
    pub argv: Vec<String>,
    /// Added to (and overriding) the sandbox's environment.
    pub env: BTreeMap<String, String>,
    /// Relative paths resolve against the sandbox's working directory, which is
    /// also the default.
    pub working_dir: Option<String>,
    /// Run on a pseudo-terminal: one output stream, and `resize` works.
    pub tty: bool,
    /// Initial terminal size as (columns, rows); 80x24 when unset.
    pub tty_size: Option<(u16, u16)>,
    /// Which of the sandbox's containers the command runs in (its environment, working
    /// directory and user): a sidecar's name, or the main container's (`None` too).
    pub container: Option<String>,
}

/// Which stream an output chunk came from. A terminal has only `Stdout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub stream: Stream,
    pub data: Bytes,
}

/// A running (or finished) command. Its parts may be moved apart, for instance
/// into separate tasks; dropping [`ExecExit`] before the command ended kills it.
#[derive(Debug)]
pub struct ExecSession {
    pub stdin: ExecStdin,
    pub output: ExecOutput,
    pub exit: ExecExit,
    /// Present for terminal sessions.
    pub tty: Option<TtyControl>,
}

impl ExecSession {
    /// Changes the terminal size (columns, rows). Fails for a session without a terminal.
    pub fn resize(&self, cols: u16, rows: u16) -> Result<(), ExecutorError> {
        match &self.tty {
            Some(tty) => tty.resize(cols, rows),
            None => Err(ExecutorError::InvalidRequest("resize needs a session started with tty".into())),
        }
    }

    /// Waits for the exit code (128+N for a command killed by signal N).
    pub async fn wait(&mut self) -> i32 {
        self.exit.wait().await
    }

    /// Reads all output until both streams close, then waits for the exit code.
    /// Convenient for tests and one-shot calls.
    pub async fn collect(mut self) -> (Vec<u8>, Vec<u8>, i32) {
        self.stdin.close().await;
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        while let Some(output) = self.output.recv().await {
            match output.stream {
                Stream::Stdout => stdout.extend_from_slice(&output.data),
                Stream::Stderr => stderr.extend_from_slice(&output.data),
            }
        }
        let code = self.exit.wait().await;
        (stdout, stderr, code)
    }

    /// A session for a command that could not start: its message on stderr and
    /// exit code 127, as a shell reports it.
    pub(crate) fn failed(message: String) -> ExecSession {
        let (sender, receiver) = mpsc::channel(1);
        // The channel has room for this one message.
        let _ = sender.try_send(Output { stream: Stream::Stderr, data: Bytes::from(message.into_bytes()) });
        let (_, exit) = watch::channel(Some(127));
        ExecSession {
            stdin: ExecStdin { inner: StdinInner::Closed },
            output: ExecOutput { receiver },
            exit: ExecExit { exit, kill: None },
            tty: None,
        }
    }
}

/// The command's standard input. Closing it (or dropping it) is end-of-file.
#[derive(Debug)]
pub struct ExecStdin {
    inner: StdinInner,
}

#[derive(Debug)]
enum StdinInner {
    Pipe(ChildStdin),
    /// The pipe of a command init started.
    Fifo(pipe::Sender),
    Pty(Arc<File>),
    Closed,
}

impl ExecStdin {
    /// Writes bytes. After the command has exited (or closed its stdin) this fails
    /// with `BrokenPipe`, which callers relaying a client's stream may ignore.
    pub async fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match &mut self.inner {
            StdinInner::Pipe(pipe) => {
                pipe.write_all(data).await?;
                pipe.flush().await
            }
            StdinInner::Fifo(pipe) => {
                pipe.write_all(data).await?;
                pipe.flush().await
            }
            StdinInner::Pty(master) => {
                let master = master.clone();
                let data = data.to_vec();
                // The master side is a blocking descriptor; a pty accepts input
                // until its buffer is full, so this rarely blocks for long.
                tokio::task::spawn_blocking(move || (&*master).write_all(&data))
                    .await
                    .map_err(|error| std::io::Error::other(error.to_string()))?
            }
            StdinInner::Closed => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Sends end-of-file: closes the pipe, or types the terminal's EOF character
    /// (Ctrl-D) on a pty.
    pub async fn close(&mut self) {
        if let StdinInner::Pty(_) = &self.inner {
            // Best effort: the command may already be gone.
            let _ = self.write(&[0x04]).await;
        }
        self.inner = StdinInner::Closed;
    }
}

/// The command's output, in the order it was read.
#[derive(Debug)]
pub struct ExecOutput {
    receiver: mpsc::Receiver<Output>,
}

impl ExecOutput {
    /// The next chunk; `None` once stdout and stderr are both closed (by the command
    /// and by any process it left running in the background).
    pub async fn recv(&mut self) -> Option<Output> {
        self.receiver.recv().await
    }
}

/// The command's exit code.
#[derive(Debug)]
pub struct ExecExit {
    exit: watch::Receiver<Option<i32>>,
    /// Dropping this (without a send) also asks the waiter to kill the command.
    kill: Option<oneshot::Sender<()>>,
}

impl ExecExit {
    /// Waits for the exit code (128+N for a command killed by signal N).
    pub async fn wait(&mut self) -> i32 {
        let code = match self.exit.wait_for(Option::is_some).await {
            Ok(code) => *code,
            Err(_) => None,
        };
        // No code and no waiter: it was dropped with its runtime, killing the command.
        code.or(*self.exit.borrow()).unwrap_or(137)
    }

    /// The exit code, if the command has ended.
    pub fn code(&self) -> Option<i32> {
        *self.exit.borrow()
    }

    /// Ends the command: in namespaces mode its whole process group gets SIGTERM, then
    /// SIGKILL after 1 s; a plain-mode command gets SIGKILL.
    pub fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }
}

/// Controls a session's terminal.
#[derive(Clone, Debug)]
pub struct TtyControl {
    master: Arc<File>,
}

impl TtyControl {
    /// Sets the terminal size (columns, rows); the command gets SIGWINCH.
    pub fn resize(&self, cols: u16, rows: u16) -> Result<(), ExecutorError> {
        Ok(sys::set_window_size(self.master.as_raw_fd(), cols, rows)?)
    }
}

/// What the sandbox keeps of a running exec, to end it when the sandbox stops.
#[derive(Clone, Debug)]
pub(crate) struct ExecTracker {
    pub(crate) exit: watch::Receiver<Option<i32>>,
    pub(crate) kill: Arc<Notify>,
}

impl ExecTracker {
    pub(crate) fn finished(&self) -> bool {
        self.exit.borrow().is_some()
    }

    pub(crate) async fn kill_and_wait(mut self) {
        self.kill.notify_one();
        let _ = self.exit.wait_for(Option::is_some).await;
    }
}

/// The standard descriptors of a command the sandbox's init starts: the emulator's ends and
/// the command's, which travel to init with the order and close here once sent.
pub(crate) struct CommandIo {
    ours: OurEnds,
    /// A terminal's slave (all three descriptors), or stdin's read end, stdout's and stderr's
    /// write ends.
    command: Vec<OwnedFd>,
}

enum OurEnds {
    Pty(OwnedFd),
    Pipes { stdin: OwnedFd, stdout: OwnedFd, stderr: OwnedFd },
}

impl CommandIo {
    pub(crate) fn pty(master: OwnedFd, slave: OwnedFd) -> CommandIo {
        CommandIo { ours: OurEnds::Pty(master), command: vec![slave] }
    }

    /// Blocking pipes: the command's ends must stay blocking for it (the emulator's ends are
    /// made non-blocking on their own open file descriptions).
    pub(crate) fn pipes() -> std::io::Result<CommandIo> {
        let (stdin_read, stdin_write) = std::io::pipe()?;
        let (stdout_read, stdout_write) = std::io::pipe()?;
        let (stderr_read, stderr_write) = std::io::pipe()?;
        Ok(CommandIo {
            ours: OurEnds::Pipes { stdin: stdin_write.into(), stdout: stdout_read.into(), stderr: stderr_read.into() },
            command: vec![stdin_read.into(), stdout_write.into(), stderr_write.into()],
        })
    }

    /// The command's stdin, stdout and stderr.
    pub(crate) fn command_ends(&self) -> [RawFd; 3] {
        let fd = |index: usize| self.command[index.min(self.command.len() - 1)].as_raw_fd();
        [fd(0), fd(1), fd(2)]
    }
}

/// Wires a command init started to a session: output pumps, and a waiter that reports the
/// status init sends and asks init to end the command on request.
pub(crate) fn attach_to_init(
    io: CommandIo,
    channel: Arc<InitChannel>,
    id: u64,
    exit: oneshot::Receiver<libc::c_int>,
) -> std::io::Result<(ExecSession, ExecTracker)> {
    drop(io.command);
    let (output_sender, receiver) = mpsc::channel(64);
    let (stdin, tty) = match io.ours {
        OurEnds::Pty(master) => {
            let master = Arc::new(File::from(master));
            spawn_pty_reader(master.clone(), output_sender);
            (StdinInner::Pty(master.clone()), Some(TtyControl { master }))
        }
        OurEnds::Pipes { stdin, stdout, stderr } => {
            tokio::spawn(pump(pipe::Receiver::from_owned_fd(stdout)?, Stream::Stdout, output_sender.clone()));
            tokio::spawn(pump(pipe::Receiver::from_owned_fd(stderr)?, Stream::Stderr, output_sender));
            (StdinInner::Fifo(pipe::Sender::from_owned_fd(stdin)?), None)
        }
    };
    Ok(wire(stdin, tty, receiver, Process::Init { channel, id, exit }))
}

/// Wires a spawned child (a plain-mode command) to a session: output pumps, and a waiter that
/// owns the child, reports its exit code and kills it on request.
pub(crate) fn attach(mut child: Child, pty_master: Option<OwnedFd>) -> (ExecSession, ExecTracker) {
    let (stdin, tty, receiver) = child_io(&mut child, pty_master);
    wire(stdin, tty, receiver, Process::Child(child))
}

/// A spawned child's stdin, terminal and output pumps.
fn child_io(
    child: &mut Child,
    pty_master: Option<OwnedFd>,
) -> (StdinInner, Option<TtyControl>, mpsc::Receiver<Output>) {
    let (output_sender, receiver) = mpsc::channel(64);
    let (stdin, tty) = match pty_master {
        Some(master) => {
            let master = Arc::new(File::from(master));
            spawn_pty_reader(master.clone(), output_sender);
            (StdinInner::Pty(master.clone()), Some(TtyControl { master }))
        }
        None => {
            if let Some(stdout) = child.stdout.take() {
                tokio::spawn(pump(stdout, Stream::Stdout, output_sender.clone()));
            }
            if let Some(stderr) = child.stderr.take() {
                tokio::spawn(pump(stderr, Stream::Stderr, output_sender));
            }
            let stdin = child.stdin.take().map_or(StdinInner::Closed, StdinInner::Pipe);
            (stdin, None)
        }
    };
    (stdin, tty, receiver)
}

/// Wires a `runc exec` (an image sandbox's command) to a session, as [`attach`] does; ending it
/// kills the command in the container (whose pid runc wrote to `pid_file`), not only runc.
pub(crate) fn attach_runc(
    mut child: Child,
    pty_master: Option<OwnedFd>,
    pid_file: std::path::PathBuf,
    process_file: std::path::PathBuf,
) -> (ExecSession, ExecTracker) {
    let (stdin, tty, receiver) = child_io(&mut child, pty_master);
    wire(stdin, tty, receiver, Process::Runc { child, pid_file, process_file })
}

/// How long a cancelled `runc exec` is given to say which process it started.
const RUNC_PID_TIMEOUT: Duration = Duration::from_secs(2);

/// What an exec's waiter waits for.
enum Process {
    Child(Child),
    /// `runc exec`, and the files to remove when it ends.
    Runc {
        child: Child,
        pid_file: std::path::PathBuf,
        process_file: std::path::PathBuf,
    },
    Init {
        channel: Arc<InitChannel>,
        id: u64,
        exit: oneshot::Receiver<libc::c_int>,
    },
}

impl Process {
    async fn wait(&mut self) -> i32 {
        match self {
            Process::Child(child) => child.wait().await.map_or(137, |status| exit_code(&status)),
            Process::Runc { child, pid_file, process_file } => {
                let code = child.wait().await.map_or(137, |status| exit_code(&status));
                let _ = std::fs::remove_file(pid_file);
                let _ = std::fs::remove_file(process_file);
                code
            }
            // No status: init ended first, and the command with the sandbox.
            Process::Init { exit, .. } => exit.await.map_or(137, sys::exit_code_of),
        }
    }

    /// Ends the command (a plain-mode command gets SIGKILL; init ends a namespaced one's
    /// whole group: SIGTERM, then SIGKILL after 1 s) and returns its exit code.
    async fn end(&mut self) -> i32 {
        match self {
            Process::Child(child) => {
                let _ = child.start_kill();
                child.wait().await.map_or(137, |status| exit_code(&status))
            }
            Process::Runc { child, pid_file, .. } => {
                // SIGKILL to the command's process group (runc makes it a session leader in the
                // container), then to runc's own session; runc then ends with 137. runc writes
                // the pid file as the command starts, which can be after it printed: while runc
                // lives and no pid is written, it is waited for (a short while).
                let deadline = std::time::Instant::now() + RUNC_PID_TIMEOUT;
                let pid = loop {
                    if let Ok(text) = std::fs::read_to_string(&*pid_file)
                        && let Ok(pid) = text.trim().parse::<libc::pid_t>()
                    {
                        break Some(pid);
                    }
                    if !matches!(child.try_wait(), Ok(None)) || std::time::Instant::now() > deadline {
                        break None;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                };
                if let Some(pid) = pid.filter(|pid| *pid > 1) {
                    // SAFETY: kill has no memory-safety preconditions.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
                if let Some(runc) = child.id() {
                    // SAFETY: as above; runc leads a session (and group) of its own.
                    unsafe {
                        libc::kill(-(runc as libc::pid_t), libc::SIGKILL);
                    }
                }
                self.wait().await
            }
            Process::Init { channel, id, exit } => {
                channel.end(*id).await;
                match tokio::time::timeout(INIT_EXIT_TIMEOUT, exit).await {
                    Ok(Ok(status)) => sys::exit_code_of(status),
                    _ => 137,
                }
            }
        }
    }
}

fn wire(
    stdin: StdinInner,
    tty: Option<TtyControl>,
    receiver: mpsc::Receiver<Output>,
    mut process: Process,
) -> (ExecSession, ExecTracker) {
    let (exit_sender, exit) = watch::channel(None);
    let (kill, kill_requested) = oneshot::channel::<()>();
    let stop = Arc::new(Notify::new());
    let stopped = stop.clone();
    tokio::spawn(async move {
        let code = tokio::select! {
            code = process.wait() => code,
            // An explicit kill, a dropped ExecExit, or the sandbox stopping.
            _ = kill_requested => process.end().await,
            _ = stopped.notified() => process.end().await,
        };
        let _ = exit_sender.send(Some(code));
    });
    let tracker = ExecTracker { exit: exit.clone(), kill: stop };
    let session = ExecSession {
        stdin: ExecStdin { inner: stdin },
        output: ExecOutput { receiver },
        exit: ExecExit { exit, kill: Some(kill) },
        tty,
    };
    (session, tracker)
}

/// The shell convention: the exit code, or 128+N after signal N.
pub(crate) fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|signal| 128 + signal)).unwrap_or(255)
}

async fn pump(mut source: impl AsyncRead + Unpin, stream: Stream, sink: mpsc::Sender<Output>) {
    let mut buffer = vec![0u8; 32 * 1024];
    let mut listening = true;
    loop {
        match source.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                // Keep draining after the reader went away, so the command does not
                // die of SIGPIPE because nobody listens.
                if listening {
                    let data = Bytes::copy_from_slice(&buffer[..read]);
                    listening = sink.send(Output { stream, data }).await.is_ok();
                }
            }
        }
    }
}

fn spawn_pty_reader(master: Arc<File>, sink: mpsc::Sender<Output>) {
    // A pty master is not a pipe tokio can poll without its `net` feature, so a
    // blocking thread reads it. Reads end with EIO once every slave is closed.
    tokio::task::spawn_blocking(move || {
        let mut buffer = vec![0u8; 32 * 1024];
        let mut listening = true;
        loop {
            match (&*master).read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => {
                    if listening {
                        let data = Bytes::copy_from_slice(&buffer[..read]);
                        listening = sink.blocking_send(Output { stream: Stream::Stdout, data }).is_ok();
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
}
