//! The emulator with the process executor as its runtime, in process, through tonic clients: what
//! the Python suite cannot reach (resuming logs, in-band log errors, unary Exec's truncation,
//! terminals and resize, the data-plane service) and the life cycle seen from the world (main
//! exits flow back with their code, delete and lifetime end the processes, a sandbox that cannot
//! start fails).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::exec_stream_request::Message as Frame;
use cwsandbox_api::sandbox_v1::exec_stream_response::Message as Reply;
use cwsandbox_api::sandbox_v1::sandbox_data_plane_service_client::SandboxDataPlaneServiceClient;
use cwsandbox_api::sandbox_v1::sandbox_service_client::SandboxServiceClient;
use cwsandbox_emulator::Emulator;
use cwsandbox_emulator::executor_runtime::ExecutorRuntime;
use cwsandbox_emulator::runtime::SandboxRuntime;
use cwsandbox_executor::ExecutorConfig;
use tokio::sync::mpsc;
use tonic::Code;

struct Setup {
    emulator: Emulator,
    runtime: Arc<ExecutorRuntime>,
    client: SandboxServiceClient<Authed>,
    data_plane: SandboxDataPlaneServiceClient<Authed>,
    _root: tempfile::TempDir,
}

/// An emulator whose runtime is the executor; each sandbox keeps at most `log_buffer` bytes of log.
async fn setup(log_buffer: usize) -> Setup {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    let root = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(root.path());
    config.log_buffer_bytes = log_buffer;
    let runtime = Arc::new(ExecutorRuntime::new(config, Duration::from_secs(3600)).expect("executor"));
    let emulator = start_with("", Some(runtime.clone() as Arc<dyn SandboxRuntime>)).await;
    let token = emulator.info().user_token.clone();
    let client = sandboxes(&emulator, &token).await;
    let data_plane = SandboxDataPlaneServiceClient::with_interceptor(channel(&emulator).await, Bearer(token));
    Setup { emulator, runtime, client, data_plane, _root: root }
}

fn spec_running(setup: &Setup, script: &str) -> pb::SandboxSpec {
    let mut spec = client_spec(&setup.emulator.info().runner_id);
    spec.containers[0].args = vec!["-c".to_owned(), script.to_owned()];
    spec
}

impl Setup {
    /// Creates a sandbox and moves the clock past the prolog: the world calls it RUNNING, and the
    /// runtime has started it.
    async fn create(&mut self, spec: pb::SandboxSpec) -> pb::Sandbox {
        let created = self.client.create_sandbox(create_request(spec, "")).await.unwrap().into_inner();
        advance(&self.emulator, Duration::from_secs(2));
        assert!(self.emulator.app().driver().effects_applied(Duration::from_secs(30)).await);
        self.get(&created.sandbox_id).await
    }

    async fn get(&mut self, id: &str) -> pb::Sandbox {
        self.client.get_sandbox(pb::GetSandboxRequest { sandbox_id: id.to_owned() }).await.unwrap().into_inner()
    }

    /// Polls GetSandbox until `done` holds (exits reach the world asynchronously).
    async fn wait_for(&mut self, id: &str, done: impl Fn(&pb::Sandbox) -> bool) -> pb::Sandbox {
        let client = self.client.clone();
        cwsandbox_testkit::eventually("the sandbox's state", || {
            let mut client = client.clone();
            let done = &done;
            async move {
                let sandbox =
                    client.get_sandbox(pb::GetSandboxRequest { sandbox_id: id.to_owned() }).await.unwrap().into_inner();
                if done(&sandbox) { Ok(sandbox) } else { Err(sandbox.status) }
            }
        })
        .await
    }

    async fn logs(&mut self, request: pb::StreamLogsRequest) -> Result<Vec<pb::LogEntry>, tonic::Status> {
        let mut stream = self.client.stream_logs(request).await?.into_inner();
        let mut entries = Vec::new();
        while let Some(entry) = stream.message().await? {
            entries.push(entry);
        }
        Ok(entries)
    }

    /// Follows the log until `text` has appeared in it. Like the Python client, a follow that fell
    /// behind a small log buffer (in-band `REPLAY_GAP`) starts again with what is held.
    async fn wait_for_log(&mut self, id: &str, text: &str) {
        let request = pb::StreamLogsRequest { sandbox_id: id.to_owned(), follow: true, ..Default::default() };
        let mut stream = self.client.stream_logs(request.clone()).await.unwrap().into_inner();
        let mut seen = String::new();
        while !seen.contains(text) {
            let entry = tokio::time::timeout(Duration::from_secs(20), stream.message()).await.unwrap().unwrap();
            let entry = entry.unwrap_or_else(|| panic!("the follow ended early after {seen:?}"));
            match entry.error {
                Some(error) if error.code == "REPLAY_GAP" => {
                    seen.clear();
                    stream = self.client.stream_logs(request.clone()).await.unwrap().into_inner();
                }
                Some(error) => panic!("log stream error {error:?}"),
                None => seen.push_str(&String::from_utf8_lossy(&entry.data)),
            }
        }
    }
}

fn data(entries: &[pb::LogEntry]) -> String {
    entries.iter().map(|entry| String::from_utf8_lossy(&entry.data).into_owned()).collect()
}

fn in_band_error(entries: &[pb::LogEntry]) -> Option<String> {
    entries.last().and_then(|entry| entry.error.as_ref()).map(|error| error.code.clone())
}

fn pod_uid(setup: &Setup, sandbox_id: &str) -> String {
    setup.emulator.app().driver().with_world(|world| world.sandbox(sandbox_id).expect("sandbox").pod_uid.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_resume_by_session_and_offset_and_report_errors_in_band() {
    let mut setup = setup(64).await;
    let quiet =
        setup.create(spec_running(&setup, r#"echo one; echo two; trap "exit 0" TERM; sleep infinity & wait"#)).await;
    let id = quiet.sandbox_id.clone();
    setup.wait_for_log(&id, "two\n").await;
    let request = |resume: Option<(&str, u64)>| pb::StreamLogsRequest {
        sandbox_id: id.clone(),
        resume_log_session_id: resume.map(|(session, _)| session.to_owned()).unwrap_or_default(),
        resume_log_offset: resume.map_or(0, |(_, offset)| offset),
        ..Default::default()
    };

    let all = setup.logs(request(None)).await.unwrap();
    assert_eq!(data(&all), "one\ntwo\n");
    let last = all.last().unwrap();
    assert!(!last.log_session_id.is_empty());
    assert_eq!(last.next_log_offset, 8);
    let session = last.log_session_id.clone();
    // The data-plane service serves the same log.
    let mut data_plane = setup.data_plane.clone();
    let mut stream = data_plane.stream_logs(request(Some((&session, 4)))).await.unwrap().into_inner();
    let mut resumed = Vec::new();
    while let Some(entry) = stream.message().await.unwrap() {
        resumed.push(entry);
    }
    assert_eq!(data(&resumed), "two\n");
    assert_eq!(
        in_band_error(&setup.logs(request(Some(("stale-session", 0)))).await.unwrap()).as_deref(),
        Some("SESSION_NOT_FOUND")
    );
    assert_eq!(
        in_band_error(&setup.logs(request(Some((&session, 100)))).await.unwrap()).as_deref(),
        Some("INVALID_RESUME_OFFSET")
    );

    // A log larger than the buffer: its start is gone.
    let noisy = setup.create(spec_running(&setup, r#"seq 1 100; trap "exit 0" TERM; sleep infinity & wait"#)).await;
    setup.wait_for_log(&noisy.sandbox_id, "100\n").await;
    let whole =
        setup.logs(pb::StreamLogsRequest { sandbox_id: noisy.sandbox_id.clone(), ..Default::default() }).await.unwrap();
    assert!(data(&whole).ends_with("99\n100\n") && !data(&whole).starts_with("1\n"), "{}", data(&whole));
    let noisy_session = whole.last().unwrap().log_session_id.clone();
    let gap = setup
        .logs(pb::StreamLogsRequest {
            sandbox_id: noisy.sandbox_id.clone(),
            resume_log_session_id: noisy_session,
            resume_log_offset: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(in_band_error(&gap).as_deref(), Some("REPLAY_GAP"));

    // A follow ends when the sandbox stops; following an ended sandbox is refused.
    let follow = pb::StreamLogsRequest { sandbox_id: id.clone(), follow: true, timestamps: true, ..Default::default() };
    let mut stream = setup.client.stream_logs(follow.clone()).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&first.data).into_owned();
    assert!(text.contains("Z one\n"), "{text:?}");
    setup
        .client
        .delete_sandbox(pb::DeleteSandboxRequest { sandbox_id: id.clone(), ..Default::default() })
        .await
        .unwrap();
    let rest = tokio::time::timeout(Duration::from_secs(20), async {
        let mut rest = Vec::new();
        while let Some(entry) = stream.message().await.unwrap() {
            rest.push(entry);
        }
        rest
    })
    .await
    .expect("the follow ends with the sandbox");
    assert!(rest.iter().all(|entry| entry.error.is_none()), "{rest:?}");
    setup.wait_for(&id, |sandbox| state_of(sandbox) == pb::State::Completed).await;
    let refused = setup.client.stream_logs(follow).await.map(|_| ()).unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    // Without follow the ended sandbox's log stays readable.
    assert_eq!(data(&setup.logs(request(None)).await.unwrap()), "one\ntwo\n");
    setup.emulator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_exec_truncates_each_stream_and_counts_what_was_produced() {
    let mut setup = setup(4 << 20).await;
    let sandbox = setup.create(client_spec(&setup.emulator.info().runner_id)).await;
    let request = pb::ExecRequest {
        sandbox_id: sandbox.sandbox_id.clone(),
        command: ["sh", "-c", "printf 0123456789; printf abc >&2; exit 5"].map(str::to_owned).to_vec(),
        max_output_bytes: 4,
        env: [("EXTRA".to_owned(), "x".to_owned())].into(),
        ..Default::default()
    };
    for response in [
        setup.client.exec(request.clone()).await.unwrap().into_inner(),
        setup.data_plane.exec(request.clone()).await.unwrap().into_inner(),
    ] {
        assert_eq!((response.stdout.as_slice(), response.stderr.as_slice()), (&b"0123"[..], &b"abc"[..]));
        assert!(response.stdout_truncated && !response.stderr_truncated);
        assert_eq!((response.stdout_bytes_produced, response.stderr_bytes_produced), (10, 3));
        assert_eq!(response.exit_code, 5);
    }
    let env = pb::ExecRequest {
        command: ["sh", "-c", "echo $EXTRA"].map(str::to_owned).to_vec(),
        max_output_bytes: 0,
        ..request
    };
    assert_eq!(setup.client.exec(env).await.unwrap().into_inner().stdout, b"x\n");
    setup.emulator.stop().await;
}

fn frame(message: Frame) -> pb::ExecStreamRequest {
    pb::ExecStreamRequest { message: Some(message) }
}

fn stdout_text(frames: &[Reply]) -> String {
    frames
        .iter()
        .filter_map(|frame| match frame {
            Reply::Output(output) if output.stream != pb::exec_stream_output::Stream::Stderr as i32 => {
                Some(String::from_utf8_lossy(&output.data).into_owned())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_exec_with_stdin_a_terminal_and_resize() {
    let mut setup = setup(4 << 20).await;
    let sandbox = setup.create(client_spec(&setup.emulator.info().runner_id)).await;
    let id = sandbox.sandbox_id.clone();
    let init = |command: &[&str], tty: bool| {
        frame(Frame::Init(pb::ExecStreamInit {
            sandbox_id: id.clone(),
            command: command.iter().map(|word| (*word).to_owned()).collect(),
            tty,
            tty_width: if tty { 100 } else { 0 },
            tty_height: if tty { 30 } else { 0 },
            ..Default::default()
        }))
    };

    // A terminal: its size, a resize, then input; `stty size` says rows and columns.
    let (requests, receiver) = mpsc::channel(8);
    requests.send(init(&["sh", "-c", "stty size; read line; stty size; echo got $line"], true)).await.unwrap();
    let mut responses =
        setup.data_plane.stream_exec(tokio_stream::wrappers::ReceiverStream::new(receiver)).await.unwrap().into_inner();
    let ready = responses.message().await.unwrap().unwrap().message.unwrap();
    assert!(matches!(ready, Reply::Ready(_)), "{ready:?}");
    let mut frames = Vec::new();
    while !stdout_text(&frames).contains("30 100") {
        frames.push(responses.message().await.unwrap().unwrap().message.unwrap());
    }
    requests.send(frame(Frame::Resize(pb::ExecStreamResize { width: 120, height: 40 }))).await.unwrap();
    requests.send(frame(Frame::Stdin(b"hi\n".to_vec()))).await.unwrap();
    requests.send(frame(Frame::Close(pb::ExecStreamClose::default()))).await.unwrap();
    while let Some(response) = responses.message().await.unwrap() {
        frames.push(response.message.unwrap());
    }
    let text = stdout_text(&frames);
    assert!(text.contains("40 120") && text.contains("got hi"), "{text:?}");
    assert!(matches!(frames.last(), Some(Reply::Exit(exit)) if exit.exit_code == 0), "{frames:?}");
    drop(requests);

    // A command that cannot start: stderr and 127, not a gRPC error.
    let answer =
        setup.client.stream_exec(futures::stream::iter(vec![init(&["no-such-command"], false)])).await.unwrap();
    let mut stream = answer.into_inner();
    let mut frames = Vec::new();
    while let Some(response) = stream.message().await.unwrap() {
        frames.push(response.message.unwrap());
    }
    assert!(matches!(frames.first(), Some(Reply::Ready(_))));
    assert!(frames.iter().any(|frame| matches!(frame, Reply::Output(output)
        if output.stream == pb::exec_stream_output::Stream::Stderr as i32
            && String::from_utf8_lossy(&output.data).contains("not found"))));
    assert!(matches!(frames.last(), Some(Reply::Exit(exit)) if exit.exit_code == 127));
    setup.emulator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_exec_whose_caller_goes_away_ends_its_whole_process_tree() {
    let mut setup = setup(4 << 20).await;
    let sandbox = setup.create(client_spec(&setup.emulator.info().runner_id)).await;
    let marker = format!("{}-{}", std::process::id(), sandbox.sandbox_id);
    let (requests, receiver) = mpsc::channel(8);
    requests
        .send(frame(Frame::Init(pb::ExecStreamInit {
            sandbox_id: sandbox.sandbox_id.clone(),
            command: ["sh", "-c", "echo started; sleep 1000; true"].iter().map(|word| (*word).to_owned()).collect(),
            env: [("CWSBX_EXEC_MARKER".to_owned(), marker.clone())].into(),
            ..Default::default()
        })))
        .await
        .unwrap();
    let mut responses =
        setup.data_plane.stream_exec(tokio_stream::wrappers::ReceiverStream::new(receiver)).await.unwrap().into_inner();
    let mut frames = Vec::new();
    while !stdout_text(&frames).contains("started") {
        frames.push(responses.message().await.unwrap().unwrap().message.unwrap());
    }
    cwsandbox_testkit::eventually("the shell and its sleep", || async {
        let running = cwsandbox_testkit::procs::with_env("CWSBX_EXEC_MARKER", &marker);
        if running.len() >= 2 { Ok(()) } else { Err(running) }
    })
    .await;
    // The caller goes away without an exit: the stream is cancelled from its side.
    drop(responses);
    drop(requests);
    cwsandbox_testkit::eventually("the end of every process of the cancelled exec", || async {
        let left = cwsandbox_testkit::procs::with_env("CWSBX_EXEC_MARKER", &marker);
        if left.is_empty() { Ok(()) } else { Err(left) }
    })
    .await;
    setup.emulator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_exits_flow_back_to_the_world_with_their_code() {
    let mut setup = setup(4 << 20).await;
    let failing = setup.create(spec_running(&setup, "echo bye; exit 3")).await;
    let ended = setup.wait_for(&failing.sandbox_id, |sandbox| state_of(sandbox) != pb::State::Running).await;
    let status = ended.status.unwrap();
    assert_eq!(pb::State::try_from(status.state).unwrap(), pb::State::Failed);
    assert_eq!(status.exit_code, Some(3));
    assert!(status.state_reason.contains("exited with code 3"), "{}", status.state_reason);
    // Its log stays readable.
    let entries =
        setup.logs(pb::StreamLogsRequest { sandbox_id: failing.sandbox_id.clone(), ..Default::default() }).await;
    assert_eq!(data(&entries.unwrap()), "bye\n");

    let done = setup.create(spec_running(&setup, "exit 0")).await;
    let ended = setup.wait_for(&done.sandbox_id, |sandbox| state_of(sandbox) != pb::State::Running).await;
    assert_eq!(state_of(&ended), pb::State::Completed);
    // docs/facts/client-contract.md#g8
    assert_eq!(ended.status.unwrap().exit_code, Some(0), "exit_code is present even when 0 (G8)");
    setup.emulator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_lifetime_end_the_processes() {
    let mut setup = setup(4 << 20).await;
    let runner = setup.emulator.info().runner_id.clone();
    let sandbox = setup.create(client_spec(&runner)).await;
    let uid = pod_uid(&setup, &sandbox.sandbox_id);
    assert!(setup.runtime.executor().is_running(&uid));
    let asked = Instant::now();
    setup
        .client
        .delete_sandbox(pb::DeleteSandboxRequest {
            sandbox_id: sandbox.sandbox_id.clone(),
            grace_period_seconds: 30,
            ..Default::default()
        })
        .await
        .unwrap();
    // The main process honours SIGTERM: the sandbox ends well before its grace period.
    setup.wait_for(&sandbox.sandbox_id, |sandbox| state_of(sandbox) == pb::State::Completed).await;
    assert!(asked.elapsed() < Duration::from_secs(10), "{:?}", asked.elapsed());
    assert!(!setup.runtime.executor().is_running(&uid));

    let mut spec = client_spec(&runner);
    spec.max_lifetime_seconds = 5;
    let short = setup.create(spec).await;
    let uid = pod_uid(&setup, &short.sandbox_id);
    assert!(setup.runtime.executor().is_running(&uid));
    advance(&setup.emulator, Duration::from_secs(6));
    let ended = setup.wait_for(&short.sandbox_id, |sandbox| state_of(sandbox) == pb::State::Terminated).await;
    assert!(ended.status.unwrap().state_reason.contains("lifetime"));
    assert!(!setup.runtime.executor().is_running(&uid));
    setup.emulator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_operations_check_the_state_and_their_input() {
    let mut setup = setup(4 << 20).await;
    let runner = setup.emulator.info().runner_id.clone();
    // Not placed yet (the clock has not passed the prolog): FAILED_PRECONDITION.
    let pending = setup.client.create_sandbox(create_request(client_spec(&runner), "")).await.unwrap().into_inner();
    let refused = setup
        .client
        .read_file(pb::ReadFileRequest {
            sandbox_id: pending.sandbox_id.clone(),
            path: "/tmp/x".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::FailedPrecondition, "CWSANDBOX_SANDBOX_NOT_RUNNING")
    );

    advance(&setup.emulator, Duration::from_secs(2));
    let id = pending.sandbox_id;
    let bad_path = setup
        .client
        .write_file(pb::WriteFileRequest {
            sandbox_id: id.clone(),
            path: "/tmp/a\0b".into(),
            content: b"x".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_path.code(), Code::InvalidArgument);
    assert_eq!(details(&bad_path).bad_request().unwrap().field_violations[0].field, "path");
    let missing = setup
        .data_plane
        .read_file(pb::ReadFileRequest { sandbox_id: id.clone(), path: "/tmp/none".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!((missing.code(), reason(&missing).as_str()), (Code::NotFound, "CWSANDBOX_FILE_NOT_FOUND"));
    let other_container = setup
        .client
        .exec(pb::ExecRequest {
            sandbox_id: id.clone(),
            command: vec!["true".into()],
            container: "sidecar".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (other_container.code(), reason(&other_container).as_str()),
        (Code::InvalidArgument, "CWSANDBOX_CONTAINER_NOT_FOUND")
    );
    setup
        .data_plane
        .write_file(pb::WriteFileRequest {
            sandbox_id: id.clone(),
            path: "notes/a.txt".into(),
            content: b"relative".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    let read = setup
        .client
        .exec(pb::ExecRequest {
            sandbox_id: id,
            command: ["cat", "notes/a.txt"].map(str::to_owned).to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.stdout, b"relative");
    setup.emulator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_cannot_be_set_up_fails_instead_of_running_empty() {
    let mut setup = setup(4 << 20).await;
    let mut spec = client_spec(&setup.emulator.info().runner_id);
    // The executor refuses a working directory with `..` in it.
    spec.containers[0].working_dir = "/tmp/../etc".to_owned();
    let created = setup.create(spec).await;
    let ended = setup.wait_for(&created.sandbox_id, |sandbox| state_of(sandbox) != pb::State::Running).await;
    assert_eq!(state_of(&ended), pb::State::Failed);
    let status = ended.status.unwrap();
    // As a kubelet reports a container the runtime cannot start: StartError, 128, the reason.
    assert_eq!(status.exit_code, Some(128));
    assert!(status.state_reason.starts_with("StartError: "), "{}", status.state_reason);
    assert!(status.state_reason.contains("working directory"), "{}", status.state_reason);
    setup.emulator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_answers_at_once_and_the_next_get_finds_the_end() {
    let mut setup = setup(1 << 20).await;
    // Each script says when its trap is set: a SIGTERM before that would end the shell at once,
    // as it would a container's.
    let sandbox =
        setup.create(spec_running(&setup, r#"trap "exit 0" TERM; echo trapped; sleep infinity & wait"#)).await;
    assert_eq!(state_of(&sandbox), pb::State::Running);
    setup.wait_for_log(&sandbox.sandbox_id, "trapped\n").await;
    let deleted = setup
        .client
        .delete_sandbox(pb::DeleteSandboxRequest { sandbox_id: sandbox.sandbox_id.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap();
    // DeleteSandbox answers before the processes got SIGTERM, as the cloud's does; the client's
    // first GetSandbox after it waits for them and finds the end: no polling round.
    assert_eq!(state_of(&deleted), pb::State::Terminating, "{:?}", deleted.status);
    assert_eq!(state_of(&setup.get(&sandbox.sandbox_id).await), pb::State::Completed);

    // A process that ignores SIGTERM keeps it TERMINATING for its grace period.
    let stubborn = setup.create(spec_running(&setup, r#"trap "" TERM; echo trapped; sleep infinity & wait"#)).await;
    setup.wait_for_log(&stubborn.sandbox_id, "trapped\n").await;
    let deleted = setup
        .client
        .delete_sandbox(pb::DeleteSandboxRequest { sandbox_id: stubborn.sandbox_id.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap();
    assert_eq!(state_of(&deleted), pb::State::Terminating);
    // The GetSandbox right after it waits its second for the end, then answers as it is.
    assert_eq!(state_of(&setup.get(&stubborn.sandbox_id).await), pb::State::Terminating);
    advance(&setup.emulator, Duration::from_secs(31));
    setup.wait_for(&stubborn.sandbox_id, |sandbox| state_of(sandbox) != pb::State::Terminating).await;
}
