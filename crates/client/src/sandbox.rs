//! One sandbox: the builder, waiting for RUNNING, exec, files, logs, stop and delete.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::{Client, Error, Result, pb};

/// The name of a state (`STATE_RUNNING`), or the number when unknown.
pub fn state_name(state: i32) -> String {
    pb::State::try_from(state).map(|s| s.as_str_name().to_owned()).unwrap_or_else(|_| state.to_string())
}

fn is_terminal(state: i32) -> bool {
    matches!(
        pb::State::try_from(state),
        Ok(pb::State::Completed | pb::State::Failed | pb::State::Terminated | pb::State::Terminating)
    )
}

/// Settings shared by the sandboxes of a [`crate::Session`] (and the starting point of every
/// [`SandboxBuilder`]), like the Python client's `SandboxDefaults`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxDefaults {
    /// Container image (default `python:3.11`).
    pub image: Option<String>,
    /// Placement mode (`SANDBOX_MODE_CKS` for a managed runner).
    pub mode: Option<pb::SandboxMode>,
    /// Runners to place on.
    pub runner_ids: Vec<String>,
    /// Pod annotations (e.g. `sunk.coreweave.com/partition`).
    pub annotations: BTreeMap<String, String>,
    /// Tags; `Session::list` filters by them.
    pub tags: Vec<String>,
    /// Environment of the main container.
    pub env: BTreeMap<String, String>,
    /// Resource requests (cpu, memory).
    pub requests: Option<(String, String)>,
    /// Resource limits (cpu, memory).
    pub limits: Option<(String, String)>,
    /// Lifetime in seconds (0: the policy's default).
    pub max_lifetime_seconds: i32,
    /// A Kubernetes RuntimeClass to pin (`gvisor`), where the runner policy allows it; `None`:
    /// the policy's default, else the node's.
    pub runtime_class: Option<String>,
}

/// Builds and starts a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxBuilder {
    client: Client,
    defaults: SandboxDefaults,
    command: Option<String>,
    args: Vec<String>,
    working_dir: String,
    display_name: String,
    request_id: String,
    wait_timeout: Duration,
}

impl SandboxBuilder {
    pub(crate) fn new(client: Client) -> SandboxBuilder {
        SandboxBuilder {
            client,
            defaults: SandboxDefaults::default(),
            command: None,
            args: Vec::new(),
            working_dir: String::new(),
            display_name: String::new(),
            request_id: String::new(),
            wait_timeout: Duration::from_secs(300),
        }
    }

    /// Starts from these defaults.
    pub fn defaults(mut self, defaults: SandboxDefaults) -> Self {
        self.defaults = defaults;
        self
    }
    /// The image.
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.defaults.image = Some(image.into());
        self
    }
    /// The placement mode.
    pub fn mode(mut self, mode: pb::SandboxMode) -> Self {
        self.defaults.mode = Some(mode);
        self
    }
    /// Placement on managed runners (`SANDBOX_MODE_CKS`), like `placement_mode="cks"`.
    pub fn cks(self) -> Self {
        self.mode(pb::SandboxMode::Cks)
    }
    /// The runners to place on.
    pub fn runner_ids<I: IntoIterator<Item = S>, S: Into<String>>(mut self, ids: I) -> Self {
        self.defaults.runner_ids = ids.into_iter().map(Into::into).collect();
        self
    }
    /// One annotation.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.defaults.annotations.insert(key.into(), value.into());
        self
    }
    /// One tag.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.defaults.tags.push(tag.into());
        self
    }
    /// One environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.defaults.env.insert(key.into(), value.into());
        self
    }
    /// Resource requests.
    pub fn requests(mut self, cpu: impl Into<String>, memory: impl Into<String>) -> Self {
        self.defaults.requests = Some((cpu.into(), memory.into()));
        self
    }
    /// Resource limits.
    pub fn limits(mut self, cpu: impl Into<String>, memory: impl Into<String>) -> Self {
        self.defaults.limits = Some((cpu.into(), memory.into()));
        self
    }
    /// Lifetime in seconds.
    pub fn max_lifetime_seconds(mut self, seconds: i32) -> Self {
        self.defaults.max_lifetime_seconds = seconds;
        self
    }
    /// The RuntimeClass to run with, like the Python client's `runtime_class="gvisor"`.
    pub fn runtime_class(mut self, class: impl Into<String>) -> Self {
        self.defaults.runtime_class = Some(class.into());
        self
    }
    /// The main command (default: a shell that sleeps until terminated).
    pub fn command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }
    /// Its arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }
    /// The working directory.
    pub fn working_dir(mut self, dir: impl Into<String>) -> Self {
        self.working_dir = dir.into();
        self
    }
    /// A display name.
    pub fn display_name(mut self, name: impl Into<String>) -> Self {
        self.display_name = name.into();
        self
    }
    /// An idempotency token for the create.
    pub fn request_id(mut self, id: impl Into<String>) -> Self {
        self.request_id = id.into();
        self
    }
    /// How long `run` waits for RUNNING (default 300 s).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// The `Sandbox` message this builder sends.
    pub fn to_proto(&self) -> pb::Sandbox {
        let d = &self.defaults;
        let resources = |pair: &Option<(String, String)>| {
            pair.as_ref().map(|(cpu, memory)| pb::Resources { cpu: cpu.clone(), memory: memory.clone(), gpu: None })
        };
        let requirements = (d.requests.is_some() || d.limits.is_some())
            .then(|| pb::ResourceRequirements { requests: resources(&d.requests), limits: resources(&d.limits) });
        let (command, args) = match &self.command {
            Some(command) => (command.clone(), self.args.clone()),
            None => (
                "/bin/sh".to_owned(),
                vec!["-c".to_owned(), r#"trap "exit 0" TERM INT; sleep infinity & wait"#.to_owned()],
            ),
        };
        pb::Sandbox {
            display_name: self.display_name.clone(),
            spec: Some(pb::SandboxSpec {
                containers: vec![pb::Container {
                    name: "main".to_owned(),
                    image: d.image.clone().unwrap_or_else(|| "python:3.11".to_owned()),
                    command,
                    args,
                    environment_variables: d.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    working_dir: self.working_dir.clone(),
                    resource_requirements: requirements,
                    ..Default::default()
                }],
                max_lifetime_seconds: d.max_lifetime_seconds,
                tags: d.tags.clone(),
                runner_ids: d.runner_ids.clone(),
                annotations: d.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                mode: d.mode.map(|m| m as i32).unwrap_or_default(),
                runtime_class: d.runtime_class.clone().unwrap_or_default(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Creates the sandbox without waiting.
    pub async fn create(self) -> Result<Sandbox> {
        let request = pb::CreateSandboxRequest { sandbox: Some(self.to_proto()), request_id: self.request_id.clone() };
        let created = self.client.sandbox_service().create_sandbox(request).await?.into_inner();
        Ok(Sandbox { client: self.client, proto: created })
    }

    /// Creates the sandbox and waits until it runs.
    pub async fn run(self) -> Result<Sandbox> {
        self.run_with_progress(|_| {}).await
    }

    /// Like [`SandboxBuilder::run`], calling `progress` with every polled state.
    pub async fn run_with_progress(self, progress: impl FnMut(&pb::Sandbox)) -> Result<Sandbox> {
        let timeout = self.wait_timeout;
        let mut sandbox = self.create().await?;
        sandbox.wait_running(timeout, progress).await?;
        Ok(sandbox)
    }
}

/// Collected output of one command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
    /// Exit code.
    pub exit_code: i32,
}

impl ExecOutput {
    /// Standard output as text.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    /// Standard error as text.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    /// The output if the command exited 0, else [`Error::CommandFailed`].
    pub fn check(self) -> Result<ExecOutput> {
        if self.exit_code == 0 {
            Ok(self)
        } else {
            Err(Error::CommandFailed { exit_code: self.exit_code, stderr: self.stderr_text() })
        }
    }
}

/// Options of one command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOptions {
    /// Extra environment.
    pub env: HashMap<String, String>,
    /// A TTY.
    pub tty: bool,
}

/// What a running command reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// A chunk of standard output.
    Stdout(Vec<u8>),
    /// A chunk of standard error.
    Stderr(Vec<u8>),
    /// The exit code (the last event).
    Exit(i32),
}

/// A running command: write its stdin, read its output as it comes.
pub struct ExecStream {
    stdin: Option<mpsc::Sender<pb::ExecStreamRequest>>,
    responses: tonic::Streaming<pb::ExecStreamResponse>,
    done: bool,
}

impl ExecStream {
    /// Sends bytes to the command's stdin.
    pub async fn write_stdin(&mut self, data: impl Into<Vec<u8>>) -> Result<()> {
        let sender = self.stdin.as_ref().ok_or_else(|| Error::Protocol("stdin is closed".to_owned()))?;
        let message = pb::ExecStreamRequest { message: Some(pb::exec_stream_request::Message::Stdin(data.into())) };
        sender.send(message).await.map_err(|_| Error::Protocol("the exec stream is closed".to_owned()))
    }

    /// Ends stdin (the command sees EOF).
    pub async fn close_stdin(&mut self) {
        if let Some(sender) = self.stdin.take() {
            let close = pb::ExecStreamRequest {
                message: Some(pb::exec_stream_request::Message::Close(pb::ExecStreamClose {})),
            };
            let _ = sender.send(close).await;
        }
    }

    /// The next event, `None` after the exit.
    pub async fn next_event(&mut self) -> Result<Option<ExecEvent>> {
        use pb::exec_stream_response::Message;
        while !self.done {
            let Some(response) = self.responses.message().await? else {
                return Err(Error::Protocol("the exec stream ended without an exit".to_owned()));
            };
            match response.message {
                Some(Message::Ready(_)) | None => continue,
                Some(Message::Output(output)) => {
                    let data = output.data.to_vec();
                    return Ok(Some(if output.stream == pb::exec_stream_output::Stream::Stderr as i32 {
                        ExecEvent::Stderr(data)
                    } else {
                        ExecEvent::Stdout(data)
                    }));
                }
                Some(Message::Exit(exit)) => {
                    self.done = true;
                    self.stdin = None;
                    return Ok(Some(ExecEvent::Exit(exit.exit_code)));
                }
                Some(Message::Error(error)) => {
                    self.done = true;
                    return Err(Error::Protocol(format!("exec failed: {} ({})", error.message, error.code)));
                }
            }
        }
        Ok(None)
    }

    /// Reads everything until the exit.
    pub async fn collect(mut self) -> Result<ExecOutput> {
        self.close_stdin().await;
        let mut output = ExecOutput::default();
        while let Some(event) = self.next_event().await? {
            match event {
                ExecEvent::Stdout(data) => output.stdout.extend(data),
                ExecEvent::Stderr(data) => output.stderr.extend(data),
                ExecEvent::Exit(code) => output.exit_code = code,
            }
        }
        Ok(output)
    }
}

/// A sandbox: its id and the last state read.
#[derive(Debug, Clone)]
pub struct Sandbox {
    client: Client,
    proto: pb::Sandbox,
}

impl Sandbox {
    /// An existing sandbox.
    pub async fn get(client: &Client, sandbox_id: &str) -> Result<Sandbox> {
        let proto = client
            .sandbox_service()
            .get_sandbox(pb::GetSandboxRequest { sandbox_id: sandbox_id.to_owned() })
            .await?
            .into_inner();
        Ok(Sandbox { client: client.clone(), proto })
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.proto.sandbox_id
    }

    /// The last read message.
    pub fn proto(&self) -> &pb::Sandbox {
        &self.proto
    }

    /// The last read state.
    pub fn state(&self) -> pb::State {
        pb::State::try_from(self.proto.status.as_ref().map(|s| s.state).unwrap_or_default()).unwrap_or_default()
    }

    /// The last read state reason.
    pub fn state_reason(&self) -> &str {
        self.proto.status.as_ref().map(|s| s.state_reason.as_str()).unwrap_or("")
    }

    /// Reads the sandbox again.
    pub async fn refresh(&mut self) -> Result<&pb::Sandbox> {
        self.proto = Sandbox::get(&self.client, self.id()).await?.proto;
        Ok(&self.proto)
    }

    /// Polls until RUNNING; a terminal state is [`Error::SandboxEnded`] with its reason.
    pub async fn wait_running(&mut self, timeout: Duration, mut progress: impl FnMut(&pb::Sandbox)) -> Result<()> {
        let started = Instant::now();
        let mut polls = PollDelays::default();
        loop {
            progress(&self.proto);
            let state = self.proto.status.as_ref().map(|s| s.state).unwrap_or_default();
            if state == pb::State::Running as i32 {
                return Ok(());
            }
            if is_terminal(state) {
                return Err(Error::SandboxEnded {
                    sandbox_id: self.id().to_owned(),
                    state: state_name(state),
                    reason: self.state_reason().to_owned(),
                });
            }
            if started.elapsed() > timeout {
                return Err(Error::Timeout(
                    timeout,
                    format!("sandbox {} is {} ({})", self.id(), state_name(state), self.state_reason()),
                ));
            }
            polls.wait().await;
            self.refresh().await?;
        }
    }

    /// Polls until the sandbox is terminal (COMPLETED, FAILED, TERMINATED).
    pub async fn wait_terminal(&mut self, timeout: Duration) -> Result<pb::State> {
        let started = Instant::now();
        let mut polls = PollDelays::default();
        loop {
            let state = self.state();
            if matches!(state, pb::State::Completed | pb::State::Failed | pb::State::Terminated) {
                return Ok(state);
            }
            if started.elapsed() > timeout {
                return Err(Error::Timeout(timeout, format!("sandbox {} is {}", self.id(), state.as_str_name())));
            }
            polls.wait().await;
            self.refresh().await?;
        }
    }

    /// Starts a command with stdin open.
    pub async fn exec_stream(&self, command: &[&str], options: ExecOptions) -> Result<ExecStream> {
        let (sender, receiver) = mpsc::channel(16);
        let init = pb::ExecStreamRequest {
            message: Some(pb::exec_stream_request::Message::Init(pb::ExecStreamInit {
                sandbox_id: self.id().to_owned(),
                command: command.iter().map(|s| (*s).to_owned()).collect(),
                tty: options.tty,
                env: options.env,
                ..Default::default()
            })),
        };
        sender.send(init).await.map_err(|_| Error::Protocol("exec stream closed".to_owned()))?;
        let responses = self.client.sandbox_service().stream_exec(ReceiverStream::new(receiver)).await?.into_inner();
        Ok(ExecStream { stdin: Some(sender), responses, done: false })
    }

    /// Runs a command to completion and collects its output (stdin is empty).
    pub async fn exec(&self, command: &[&str]) -> Result<ExecOutput> {
        self.exec_stream(command, ExecOptions::default()).await?.collect().await
    }

    /// Runs a command and fails unless it exits 0.
    pub async fn exec_check(&self, command: &[&str]) -> Result<ExecOutput> {
        self.exec(command).await?.check()
    }

    /// Writes a file.
    pub async fn write_file(&self, path: &str, content: impl Into<Vec<u8>>) -> Result<()> {
        let request = pb::WriteFileRequest {
            sandbox_id: self.id().to_owned(),
            path: path.to_owned(),
            content: content.into(),
            container: String::new(),
        };
        self.client.sandbox_service().write_file(request).await?;
        Ok(())
    }

    /// Reads a file.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let request =
            pb::ReadFileRequest { sandbox_id: self.id().to_owned(), path: path.to_owned(), container: String::new() };
        Ok(self.client.sandbox_service().read_file(request).await?.into_inner().content.to_vec())
    }

    /// The main process's output; with `follow` the stream stays open while the sandbox runs.
    pub async fn logs(&self, follow: bool, tail_lines: i32) -> Result<BoxStream<'static, Result<Vec<u8>>>> {
        logs(&self.client, self.id(), follow, tail_lines).await
    }

    /// Stops the sandbox (DeleteSandbox with a grace period) without waiting for the end.
    pub async fn stop(&self, grace_period_seconds: i32) -> Result<()> {
        stop(&self.client, self.id(), grace_period_seconds, false).await
    }

    /// Deletes the sandbox at once; a sandbox already gone is not an error.
    pub async fn delete(&self) -> Result<()> {
        stop(&self.client, self.id(), 0, true).await
    }
}

pub(crate) async fn stop(client: &Client, sandbox_id: &str, grace: i32, allow_missing: bool) -> Result<()> {
    let request = pb::DeleteSandboxRequest {
        sandbox_id: sandbox_id.to_owned(),
        grace_period_seconds: grace,
        allow_missing,
        ..Default::default()
    };
    client.sandbox_service().delete_sandbox(request).await?;
    Ok(())
}

/// The log stream of a sandbox by id.
pub(crate) async fn logs(
    client: &Client,
    sandbox_id: &str,
    follow: bool,
    tail_lines: i32,
) -> Result<BoxStream<'static, Result<Vec<u8>>>> {
    let request = pb::StreamLogsRequest { sandbox_id: sandbox_id.to_owned(), follow, tail_lines, ..Default::default() };
    let stream = client.sandbox_service().stream_logs(request).await?.into_inner();
    Ok(map_logs(stream).boxed())
}

fn map_logs(stream: tonic::Streaming<pb::LogEntry>) -> impl Stream<Item = Result<Vec<u8>>> {
    stream.map(|entry| {
        let entry = entry?;
        if let Some(error) = entry.error {
            return Err(Error::Protocol(format!("log stream: {} ({})", error.message, error.code)));
        }
        Ok(entry.data.to_vec())
    })
}

/// The log entries of a sandbox by id, with their timestamps and offsets; an entry carrying a
/// stream error ends the stream with that error.
pub(crate) async fn log_entries(
    client: &Client,
    sandbox_id: &str,
    follow: bool,
    tail_lines: i32,
) -> Result<BoxStream<'static, Result<pb::LogEntry>>> {
    let request = pb::StreamLogsRequest { sandbox_id: sandbox_id.to_owned(), follow, tail_lines, ..Default::default() };
    let stream = client.sandbox_service().stream_logs(request).await?.into_inner();
    Ok(stream
        .map(|entry| {
            let entry = entry?;
            match &entry.error {
                Some(error) => Err(Error::Protocol(format!("log stream: {} ({})", error.message, error.code))),
                None => Ok(entry),
            }
        })
        .boxed())
}

impl Client {
    /// Log entries of a sandbox by id (data, timestamp, offsets).
    pub async fn log_entries(
        &self,
        sandbox_id: &str,
        follow: bool,
        tail_lines: i32,
    ) -> Result<BoxStream<'static, Result<pb::LogEntry>>> {
        log_entries(self, sandbox_id, follow, tail_lines).await
    }

    /// Log stream of a sandbox by id.
    pub async fn logs(
        &self,
        sandbox_id: &str,
        follow: bool,
        tail_lines: i32,
    ) -> Result<BoxStream<'static, Result<Vec<u8>>>> {
        logs(self, sandbox_id, follow, tail_lines).await
    }

    /// Stops a sandbox by id.
    pub async fn stop(&self, sandbox_id: &str, grace_period_seconds: i32) -> Result<()> {
        stop(self, sandbox_id, grace_period_seconds, false).await
    }

    /// Deletes a sandbox by id: its processes get SIGTERM, then SIGKILL after its Pod's termination
    /// grace period (missing is fine when `allow_missing`). Returns once the delete is accepted.
    pub async fn delete(&self, sandbox_id: &str, allow_missing: bool) -> Result<()> {
        stop(self, sandbox_id, 0, allow_missing).await
    }
}

/// The pauses between a waiting loop's reads: none before the first (a server that answers once
/// the state moved, as the emulator's GetSandbox does while the host starts or stops the
/// sandbox, is asked again at once), then 50 ms doubling to at most 200 ms.
#[derive(Debug, Default)]
struct PollDelays {
    next: Option<Duration>,
}

impl PollDelays {
    const FIRST: Duration = Duration::from_millis(50);
    const MOST: Duration = Duration::from_millis(200);

    /// The pause before the next read.
    fn next_delay(&mut self) -> Duration {
        let delay = self.next.unwrap_or_default();
        self.next = Some(if delay.is_zero() { Self::FIRST } else { (delay * 2).min(Self::MOST) });
        delay
    }

    async fn wait(&mut self) {
        let delay = self.next_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_reads_at_once_then_backs_off_to_a_fifth_of_a_second() {
        let mut polls = PollDelays::default();
        let delays: Vec<u64> = (0..6).map(|_| polls.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [0, 50, 100, 200, 200, 200]);
    }
}
