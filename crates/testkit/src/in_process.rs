//! In-process emulators (the library's `Emulator::start` on 127.0.0.1:0, no child process),
//! authenticated gRPC clients, and [`FakeRuntime`], an in-memory fake of the process runtime (test
//! code only: the emulator ships none). Beside [`crate::emulator`], which runs the binary.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::sandbox_service_client::SandboxServiceClient;
use cwsandbox_emulator::config::EmulatorConfig;
use cwsandbox_emulator::runtime::{
    ExecEvent, ExecInput, ExecSession, ExecSpec, LogEvent, LogRequest, MainExit, PodLaunch, RuntimeError,
    SandboxRuntime, Target,
};
use cwsandbox_emulator::{Emulator, Options};
use cwsandbox_sim::config::Scenario;
use cwsandbox_sync::MutexUnpoisoned;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::transport::Channel;

/// A client interceptor that sends `authorization: Bearer <token>` (none for an empty token).
#[derive(Clone)]
pub struct Bearer(pub String);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if !self.0.is_empty() {
            let value = MetadataValue::try_from(format!("Bearer {}", self.0)).expect("ascii token");
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }
}

pub type Authed = tonic::service::interceptor::InterceptedService<Channel, Bearer>;

/// An emulator on 127.0.0.1:0 with the given overlay, a fixed seed and, optionally, a runtime.
pub async fn start_with(overlay: &str, runtime: Option<Arc<dyn SandboxRuntime>>) -> Emulator {
    let config = EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("test.yaml"), overlay)]).expect("config");
    let mut options = Options::new(config);
    options.seed = Some(7);
    options.runtime = runtime;
    Emulator::start(options).await.expect("emulator starts")
}

/// An emulator on `scenario` with an overlay and a fake runtime that also writes a kubeconfig
/// for its Kubernetes API to `kubeconfig`; its clock starts frozen.
pub async fn start_for_kubectl(
    scenario: Scenario,
    overlay: &str,
    kubeconfig: &Path,
    runtime: Arc<FakeRuntime>,
) -> Emulator {
    let config = EmulatorConfig::from_overlays(scenario, [(Path::new("test.yaml"), overlay)]).expect("config");
    let mut options = Options::new(config);
    options.seed = Some(7);
    options.runtime = Some(runtime as Arc<dyn SandboxRuntime>);
    options.kubeconfig = Some(kubeconfig.to_path_buf());
    // Frozen from the first instant, so every age kubectl prints is exact.
    options.clock.freeze();
    Emulator::start(options).await.expect("emulator starts")
}

/// An emulator on the default scenario with generated tokens.
pub async fn start() -> Emulator {
    start_with("", None).await
}

pub async fn channel(emulator: &Emulator) -> Channel {
    Channel::from_shared(emulator.info().base_url.clone()).expect("url").connect().await.expect("connects")
}

pub async fn sandboxes(emulator: &Emulator, token: &str) -> SandboxServiceClient<Authed> {
    SandboxServiceClient::with_interceptor(channel(emulator).await, Bearer(token.to_owned()))
}

/// An EmulatorService client authenticated as `token`.
pub async fn emulator_service(
    emulator: &Emulator,
    token: &str,
) -> cwsandbox_api::emulator_v1::emulator_service_client::EmulatorServiceClient<Authed> {
    cwsandbox_api::emulator_v1::emulator_service_client::EmulatorServiceClient::with_interceptor(
        channel(emulator).await,
        Bearer(token.to_owned()),
    )
}

/// The sandbox `id` as GetSandbox answers `token`'s caller (panics on an error).
pub async fn sandbox_of(emulator: &Emulator, token: &str, id: &str) -> pb::Sandbox {
    sandboxes(emulator, token)
        .await
        .get_sandbox(pb::GetSandboxRequest { sandbox_id: id.to_owned() })
        .await
        .expect("GetSandbox")
        .into_inner()
}

/// Moves the emulator's clock forward and lets the world catch up.
pub fn advance(emulator: &Emulator, by: Duration) {
    emulator.app().driver().clock().advance(by);
    emulator.app().driver().with_world(|_| ());
}

/// The spec the Python client sends for `Sandbox.run(placement_mode="cks", runner_ids=[…])`.
pub fn client_spec(runner_id: &str) -> pb::SandboxSpec {
    pb::SandboxSpec {
        containers: vec![pb::Container {
            name: "main".to_owned(),
            image: "python:3.11".to_owned(),
            command: "/bin/sh".to_owned(),
            args: vec!["-c".to_owned(), r#"trap "exit 0" TERM INT; sleep infinity & wait"#.to_owned()],
            ..Default::default()
        }],
        runner_ids: vec![runner_id.to_owned()],
        mode: pb::SandboxMode::Cks as i32,
        ..Default::default()
    }
}

/// StreamExec's first frame: run `command` in `sandbox_id`'s primary container.
pub fn exec_init(sandbox_id: &str, command: &[&str]) -> pb::ExecStreamRequest {
    pb::ExecStreamRequest {
        message: Some(pb::exec_stream_request::Message::Init(pb::ExecStreamInit {
            sandbox_id: sandbox_id.to_owned(),
            command: command.iter().map(|word| (*word).to_owned()).collect(),
            ..Default::default()
        })),
    }
}

pub fn create_request(spec: pb::SandboxSpec, request_id: &str) -> pb::CreateSandboxRequest {
    pb::CreateSandboxRequest {
        sandbox: Some(pb::Sandbox { spec: Some(spec), ..Default::default() }),
        request_id: request_id.to_owned(),
    }
}

/// The rich details of a status.
pub fn details(status: &tonic::Status) -> tonic_types::ErrorDetails {
    use tonic_types::StatusExt;
    status.get_error_details()
}

pub fn reason(status: &tonic::Status) -> String {
    details(status).error_info().map(|info| info.reason.clone()).unwrap_or_default()
}

pub fn state_of(sandbox: &pb::Sandbox) -> pb::State {
    pb::State::try_from(sandbox.status.as_ref().expect("status").state).expect("known state")
}

// ------------------------------------------------------------------------------------------------
// The fake runtime
// ------------------------------------------------------------------------------------------------

#[derive(Default)]
struct FakeState {
    started: Vec<PodLaunch>,
    stopped: Vec<String>,
    killed: Vec<String>,
    files: HashMap<(String, String), Bytes>,
    shut_down: bool,
    /// Pods whose main command could not start (their exit code, known when `start` returns).
    failed_at_start: HashMap<String, i32>,
}

/// Runs nothing: records launches, keeps files in memory, answers a few commands (`echo`, `cat`,
/// `hostname`, `sh -c 'exit N'`), and reports main exits when told to or when stopped.
pub struct FakeRuntime {
    state: Mutex<FakeState>,
    exits: mpsc::UnboundedSender<MainExit>,
    exit_stream: Mutex<Option<mpsc::UnboundedReceiver<MainExit>>>,
}

impl FakeRuntime {
    pub fn new() -> Arc<FakeRuntime> {
        let (exits, receiver) = mpsc::unbounded_channel();
        Arc::new(FakeRuntime { state: Mutex::default(), exits, exit_stream: Mutex::new(Some(receiver)) })
    }

    pub fn started(&self) -> Vec<PodLaunch> {
        self.state.lock_unpoisoned().started.clone()
    }

    pub fn stopped(&self) -> Vec<String> {
        self.state.lock_unpoisoned().stopped.clone()
    }

    pub fn killed(&self) -> Vec<String> {
        self.state.lock_unpoisoned().killed.clone()
    }

    pub fn was_shut_down(&self) -> bool {
        self.state.lock_unpoisoned().shut_down
    }

    /// The main process of a Pod exits by itself.
    pub fn exit_main(&self, pod_uid: &str, exit_code: i32) {
        let _ =
            self.exits.send(MainExit { pod_uid: pod_uid.to_owned(), container: None, exit_code, oom_killed: false });
    }

    fn pod_name(&self, pod_uid: &str) -> Option<String> {
        let state = self.state.lock_unpoisoned();
        state.started.iter().find(|launch| launch.pod_uid == pod_uid).map(|launch| launch.pod_name.to_string())
    }
}

fn events(items: Vec<ExecEvent>) -> BoxStream<'static, ExecEvent> {
    futures::stream::iter(items).boxed()
}

impl SandboxRuntime for FakeRuntime {
    /// The fake runs any Pod, so it says it runs gVisor's: the facade and the world then show
    /// RuntimeClass `gvisor` as a host where runsc works does.
    fn runtime_classes(&self) -> Vec<(String, Result<(), String>)> {
        vec![("gvisor".to_owned(), Ok(()))]
    }

    fn start(&self, launch: PodLaunch) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let mut state = self.state.lock_unpoisoned();
        // As the executor does for a command that cannot be exec'd: over (127) before `start`
        // returns. Only `exited` says so here (the executor also reports it through `exits`,
        // later), so a test sees whether the emulator asks at the right moment.
        if launch
            .containers
            .first()
            .is_some_and(|main| main.command.first().is_some_and(|program| program.starts_with("/no/such/")))
        {
            state.failed_at_start.insert(launch.pod_uid.to_string(), 127);
        }
        state.started.push(launch);
        futures::future::ready(Ok(())).boxed()
    }

    fn exited(&self, pod_uid: &str) -> Option<i32> {
        self.state.lock_unpoisoned().failed_at_start.get(pod_uid).copied()
    }

    fn stop(&self, pod_uid: String, _grace: Duration) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.state.lock_unpoisoned().stopped.push(pod_uid.clone());
        // The main process honours SIGTERM at once (the client's command traps TERM and exits 0).
        self.exit_main(&pod_uid, 0);
        futures::future::ready(Ok(())).boxed()
    }

    fn kill(&self, pod_uid: String) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.state.lock_unpoisoned().killed.push(pod_uid);
        futures::future::ready(Ok(())).boxed()
    }

    fn exec(&self, target: Target, spec: ExecSpec) -> BoxFuture<'_, Result<ExecSession, RuntimeError>> {
        let (input, inputs) = mpsc::channel(16);
        let argv: Vec<&str> = spec.command.iter().map(String::as_str).collect();
        let output = match argv.as_slice() {
            ["echo", words @ ..] => {
                events(vec![ExecEvent::Stdout(Bytes::from(format!("{}\n", words.join(" ")))), ExecEvent::Exited(0)])
            }
            ["hostname"] => events(vec![
                ExecEvent::Stdout(Bytes::from(format!("{}\n", self.pod_name(&target.pod_uid).unwrap_or_default()))),
                ExecEvent::Exited(0),
            ]),
            ["sh", "-c", script] if script.starts_with("exit ") => {
                let code = script.trim_start_matches("exit ").trim().parse().unwrap_or(1);
                events(vec![ExecEvent::Stderr(Bytes::from_static(b"bye\n")), ExecEvent::Exited(code)])
            }
            ["cat"] => futures::stream::unfold(Some(inputs), |state| async move {
                let mut inputs = state?;
                match inputs.recv().await {
                    Some(ExecInput::Stdin(data)) => Some((ExecEvent::Stdout(data), Some(inputs))),
                    Some(ExecInput::Resize(_)) => Some((ExecEvent::Stdout(Bytes::new()), Some(inputs))),
                    Some(ExecInput::Close) | None => Some((ExecEvent::Exited(0), None)),
                }
            })
            .boxed(),
            _ => events(vec![
                ExecEvent::Stderr(Bytes::from(format!("fake: {}: command not found\n", spec.command[0]))),
                ExecEvent::Exited(127),
            ]),
        };
        futures::future::ready(Ok(ExecSession { input, output })).boxed()
    }

    fn write_file(&self, target: Target, path: String, content: Bytes) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let result = if path.ends_with('/') {
            Err(RuntimeError::IsDirectory { path })
        } else {
            self.state.lock_unpoisoned().files.insert((target.pod_uid, path), content);
            Ok(())
        };
        futures::future::ready(result).boxed()
    }

    fn read_file(&self, target: Target, path: String, max_bytes: u64) -> BoxFuture<'_, Result<Bytes, RuntimeError>> {
        let found = self.state.lock_unpoisoned().files.get(&(target.pod_uid, path.clone())).cloned();
        let result = match found {
            None if path.ends_with('/') => Err(RuntimeError::IsDirectory { path }),
            None => Err(RuntimeError::FileNotFound { path }),
            Some(content) if content.len() as u64 > max_bytes => {
                Err(RuntimeError::FileTooLarge { path, size_bytes: content.len() as u64, max_size_bytes: max_bytes })
            }
            Some(content) => Ok(content),
        };
        futures::future::ready(result).boxed()
    }

    fn logs(
        &self,
        _target: Target,
        request: LogRequest,
    ) -> BoxFuture<'_, Result<BoxStream<'static, LogEvent>, RuntimeError>> {
        let prefix = if request.timestamps { "2026-01-01T00:00:00Z " } else { "" };
        let chunk = |text: String, offset: u64| LogEvent::Chunk {
            data: Bytes::from(text),
            time: SystemTime::UNIX_EPOCH,
            session_id: "fake-session".to_owned(),
            next_offset: offset,
        };
        let stream =
            futures::stream::iter(vec![chunk(format!("{prefix}started\n"), 1), chunk(format!("{prefix}working\n"), 2)])
                .boxed();
        futures::future::ready(Ok(stream)).boxed()
    }

    fn exits(&self) -> BoxStream<'static, MainExit> {
        match self.exit_stream.lock_unpoisoned().take() {
            Some(mut receiver) => futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).boxed(),
            None => futures::stream::empty().boxed(),
        }
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        self.state.lock_unpoisoned().shut_down = true;
        futures::future::ready(()).boxed()
    }
}
