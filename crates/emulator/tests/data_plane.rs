//! The data operations against a runtime: an in-memory fake here (the process executor is a
//! separate crate). Checks the StreamExec protocol of docs/facts/client-contract.md#stream-exec
//! (ready first, output, exactly one exit; half-close is end of stdin), files, logs, main-process
//! exits and the effects pump (StartPod reaches the runtime with the Pod's command; Delete stops
//! it). G6 and G8 are the gotchas docs/facts/client-contract.md#g6 and
//! docs/facts/client-contract.md#g8.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::exec_init as init;
use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::exec_stream_request::Message as Frame;
use cwsandbox_api::sandbox_v1::exec_stream_response::Message as Reply;
use cwsandbox_api::sandbox_v1::sandbox_data_plane_service_client::SandboxDataPlaneServiceClient;
use cwsandbox_emulator::Emulator;
use cwsandbox_emulator::runtime::SandboxRuntime;
use tonic::Code;

struct Setup {
    emulator: Emulator,
    runtime: Arc<FakeRuntime>,
    client: cwsandbox_api::sandbox_v1::sandbox_service_client::SandboxServiceClient<Authed>,
    sandbox: pb::Sandbox,
}

/// An emulator with the fake runtime and one RUNNING sandbox.
async fn running_sandbox() -> Setup {
    let runtime = FakeRuntime::new();
    let emulator = start_with("", Some(runtime.clone() as Arc<dyn SandboxRuntime>)).await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let created = client.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));
    let sandbox = client
        .get_sandbox(pb::GetSandboxRequest { sandbox_id: created.sandbox_id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(&sandbox), pb::State::Running);
    Setup { emulator, runtime, client, sandbox }
}

#[tokio::test]
async fn a_main_command_that_cannot_start_is_never_read_as_running() {
    let runtime = FakeRuntime::new();
    let emulator = start_with("", Some(runtime.clone() as Arc<dyn SandboxRuntime>)).await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let mut spec = client_spec(&info.runner_id);
    spec.containers[0].command = "/no/such/program".to_owned();
    spec.containers[0].args.clear();
    let created = client.create_sandbox(create_request(spec, "")).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));
    // The first read after the Pod started already knows: no RUNNING in between.
    let sandbox = client
        .get_sandbox(pb::GetSandboxRequest { sandbox_id: created.sandbox_id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(&sandbox), pb::State::Failed, "{sandbox:?}");
}

/// Reads every frame of a StreamExec answer.
async fn collect_frames(mut stream: tonic::Streaming<pb::ExecStreamResponse>) -> Vec<Reply> {
    let mut frames = Vec::new();
    while let Some(frame) = stream.message().await.unwrap() {
        frames.push(frame.message.expect("every frame has a kind"));
    }
    frames
}

fn stdout_of(frames: &[Reply]) -> String {
    frames
        .iter()
        .filter_map(|frame| match frame {
            Reply::Output(output) if output.stream == pb::exec_stream_output::Stream::Stdout as i32 => {
                Some(String::from_utf8_lossy(&output.data).into_owned())
            }
            _ => None,
        })
        .collect()
}

/// Polls GetSandbox until `done` holds (the runtime reports exits asynchronously).
async fn wait_for(setup: &mut Setup, done: impl Fn(&pb::Sandbox) -> bool) -> pb::Sandbox {
    let client = setup.client.clone();
    let id = setup.sandbox.sandbox_id.clone();
    cwsandbox_testkit::eventually("the sandbox's state", || {
        let mut client = client.clone();
        let (id, done) = (id.clone(), &done);
        async move {
            let sandbox = client.get_sandbox(pb::GetSandboxRequest { sandbox_id: id }).await.unwrap().into_inner();
            if done(&sandbox) { Ok(sandbox) } else { Err(sandbox.status) }
        }
    })
    .await
}

#[tokio::test]
async fn start_pod_reaches_the_runtime_with_the_pods_command() {
    let setup = running_sandbox().await;
    let started = setup.runtime.started();
    assert_eq!(started.len(), 1, "one StartPod effect");
    let launch = &started[0];
    assert_eq!(launch.sandbox_id.as_deref(), Some(setup.sandbox.sandbox_id.as_str()));
    assert_eq!(launch.pod_name, format!("sandbox-{}", setup.sandbox.sandbox_id));
    assert_eq!(launch.namespace, "sandbox-alice");
    assert_eq!(launch.containers[0].command, ["/bin/sh"]);
    assert_eq!(launch.containers[0].args[0], "-c");
    assert_eq!(launch.containers[0].image, "python:3.11");
    setup.emulator.stop().await;
    assert!(setup.runtime.was_shut_down(), "stopping the emulator ends every sandbox process");
}

#[tokio::test]
async fn stream_exec_sends_ready_output_and_one_exit() {
    let mut setup = running_sandbox().await;
    let id = setup.sandbox.sandbox_id.clone();
    // Like the Python client without stdin: init, then half-close.
    let answer = setup.client.stream_exec(futures::stream::iter(vec![init(&id, &["hostname"])])).await.unwrap();
    let frames = collect_frames(answer.into_inner()).await;
    assert!(matches!(frames.first(), Some(Reply::Ready(ready)) if ready.ready_time.is_some()), "{frames:?}");
    assert_eq!(stdout_of(&frames), format!("sandbox-{id}\n"));
    assert!(matches!(frames.last(), Some(Reply::Exit(exit)) if exit.exit_code == 0 && exit.completed_time.is_some()));
    assert_eq!(frames.iter().filter(|frame| matches!(frame, Reply::Exit(_) | Reply::Error(_))).count(), 1);

    let answer =
        setup.client.stream_exec(futures::stream::iter(vec![init(&id, &["sh", "-c", "exit 7"])])).await.unwrap();
    let frames = collect_frames(answer.into_inner()).await;
    assert!(matches!(frames.last(), Some(Reply::Exit(exit)) if exit.exit_code == 7), "non-zero is not a stream error");
}

#[tokio::test]
async fn stream_exec_forwards_stdin_until_close() {
    let mut setup = running_sandbox().await;
    let id = setup.sandbox.sandbox_id.clone();
    let (sender, receiver) = tokio::sync::mpsc::channel(8);
    sender.send(init(&id, &["cat"])).await.unwrap();
    let answer = setup.client.stream_exec(tokio_stream::wrappers::ReceiverStream::new(receiver)).await.unwrap();
    let mut stream = answer.into_inner();
    let first = stream.message().await.unwrap().unwrap().message.unwrap();
    assert!(matches!(first, Reply::Ready(_)), "G6: ready comes before stdin is sent");
    for chunk in ["hello ", "world\n"] {
        sender.send(pb::ExecStreamRequest { message: Some(Frame::Stdin(chunk.as_bytes().to_vec())) }).await.unwrap();
    }
    sender.send(pb::ExecStreamRequest { message: Some(Frame::Close(pb::ExecStreamClose {})) }).await.unwrap();
    drop(sender);
    let rest = collect_frames(stream).await;
    assert_eq!(stdout_of(&rest), "hello world\n");
    assert!(matches!(rest.last(), Some(Reply::Exit(exit)) if exit.exit_code == 0));
}

#[tokio::test]
async fn stream_exec_rejects_a_bad_first_frame_and_sandboxes_that_do_not_run() {
    let mut setup = running_sandbox().await;
    let id = setup.sandbox.sandbox_id.clone();
    let stdin_first = pb::ExecStreamRequest { message: Some(Frame::Stdin(b"x".to_vec())) };
    let error = setup.client.stream_exec(futures::stream::iter(vec![stdin_first])).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(details(&error).bad_request().unwrap().field_violations[0].field, "init");
    let error = setup.client.stream_exec(futures::stream::iter(vec![init(&id, &[])])).await.unwrap_err();
    assert_eq!(details(&error).bad_request().unwrap().field_violations[0].field, "init.command");
    let mut wrong_container = init(&id, &["true"]);
    if let Some(Frame::Init(init)) = &mut wrong_container.message {
        init.container = "sidecar".to_owned();
    }
    let error = setup.client.stream_exec(futures::stream::iter(vec![wrong_container])).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::InvalidArgument, "CWSANDBOX_CONTAINER_NOT_FOUND"));
    assert_eq!(details(&error).bad_request().unwrap().field_violations[0].field, "init.container");
    assert!(error.message().contains("no container named \"sidecar\""), "{error:?}");

    // A sandbox that is still pending is FAILED_PRECONDITION.
    let info = setup.emulator.info().clone();
    let pending =
        setup.client.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    let error =
        setup.client.stream_exec(futures::stream::iter(vec![init(&pending.sandbox_id, &["true"])])).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::FailedPrecondition, "CWSANDBOX_SANDBOX_NOT_RUNNING"));
}

#[tokio::test]
async fn unary_exec_collects_output_and_caps_it() {
    let mut setup = running_sandbox().await;
    let id = setup.sandbox.sandbox_id.clone();
    let answer = setup
        .client
        .exec(pb::ExecRequest {
            sandbox_id: id.clone(),
            command: vec!["echo".into(), "hi".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((answer.stdout.as_slice(), answer.exit_code), (&b"hi\n"[..], 0));
    let capped = setup
        .client
        .exec(pb::ExecRequest {
            sandbox_id: id,
            command: vec!["echo".into(), "hello".into()],
            max_output_bytes: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(capped.stdout, b"he");
    assert!(capped.stdout_truncated);
    assert_eq!(capped.stdout_bytes_produced, 6);
}

#[tokio::test]
async fn files_round_trip_and_failures_carry_the_client_reasons() {
    let mut setup = running_sandbox().await;
    let id = setup.sandbox.sandbox_id.clone();
    let write = pb::WriteFileRequest {
        sandbox_id: id.clone(),
        path: "/tmp/data.txt".to_owned(),
        content: b"payload".to_vec(),
        ..Default::default()
    };
    setup.client.write_file(write).await.unwrap();
    let read = pb::ReadFileRequest { sandbox_id: id.clone(), path: "/tmp/data.txt".to_owned(), ..Default::default() };
    assert_eq!(setup.client.read_file(read.clone()).await.unwrap().into_inner().content, b"payload");

    let missing = pb::ReadFileRequest { path: "/tmp/missing".to_owned(), ..read.clone() };
    let error = setup.client.read_file(missing).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::NotFound, "CWSANDBOX_FILE_NOT_FOUND"));
    assert_eq!(details(&error).error_info().unwrap().metadata["filepath"], "/tmp/missing");
    let directory = pb::ReadFileRequest { path: "/tmp/".to_owned(), ..read.clone() };
    assert_eq!(reason(&setup.client.read_file(directory).await.unwrap_err()), "CWSANDBOX_FILE_IS_DIRECTORY");
    let no_path = pb::ReadFileRequest { path: String::new(), ..read };
    let error = setup.client.read_file(no_path).await.unwrap_err();
    assert_eq!(details(&error).bad_request().unwrap().field_violations[0].field, "path");

    // The data-plane service serves the same operations.
    let info = setup.emulator.info().clone();
    let mut data_plane =
        SandboxDataPlaneServiceClient::with_interceptor(channel(&setup.emulator).await, Bearer(info.user_token));
    let read = pb::ReadFileRequest { sandbox_id: id, path: "/tmp/data.txt".to_owned(), ..Default::default() };
    assert_eq!(data_plane.read_file(read).await.unwrap().into_inner().content, b"payload");
}

#[tokio::test]
async fn logs_stream_with_session_and_offsets() {
    let mut setup = running_sandbox().await;
    let request =
        pb::StreamLogsRequest { sandbox_id: setup.sandbox.sandbox_id.clone(), timestamps: true, ..Default::default() };
    let mut stream = setup.client.stream_logs(request).await.unwrap().into_inner();
    let mut entries = Vec::new();
    while let Some(entry) = stream.message().await.unwrap() {
        entries.push(entry);
    }
    let text: String = entries.iter().map(|entry| String::from_utf8_lossy(&entry.data).into_owned()).collect();
    assert_eq!(text, "2026-01-01T00:00:00Z started\n2026-01-01T00:00:00Z working\n");
    assert_eq!(entries.last().unwrap().log_session_id, "fake-session");
    assert_eq!(entries.last().unwrap().next_log_offset, 2);
}

#[tokio::test]
async fn main_process_exits_end_the_sandbox_with_its_code() {
    let mut setup = running_sandbox().await;
    let pod_uid = setup.runtime.started()[0].pod_uid.clone();
    setup.runtime.exit_main(&pod_uid, 3);
    let ended = wait_for(&mut setup, |sandbox| state_of(sandbox) != pb::State::Running).await;
    assert_eq!(state_of(&ended), pb::State::Failed);
    let status = ended.status.unwrap();
    assert_eq!(status.exit_code, Some(3), "G8: exit_code is present");
    assert!(status.state_reason.contains('3'), "{}", status.state_reason);
}

#[tokio::test]
async fn a_main_process_exiting_zero_completes_with_exit_code_zero() {
    let mut setup = running_sandbox().await;
    let pod_uid = setup.runtime.started()[0].pod_uid.clone();
    setup.runtime.exit_main(&pod_uid, 0);
    let ended = wait_for(&mut setup, |sandbox| state_of(sandbox) != pb::State::Running).await;
    assert_eq!(state_of(&ended), pb::State::Completed);
    assert_eq!(ended.status.unwrap().exit_code, Some(0), "present even when 0");
}

#[tokio::test]
async fn delete_stops_the_pod_and_the_sandbox_ends_when_the_process_does() {
    let mut setup = running_sandbox().await;
    let delete = pb::DeleteSandboxRequest {
        sandbox_id: setup.sandbox.sandbox_id.clone(),
        grace_period_seconds: 10,
        ..Default::default()
    };
    setup.client.delete_sandbox(delete).await.unwrap();
    // The fake's main process honours SIGTERM at once: no need to wait out the grace period.
    let ended = wait_for(&mut setup, |sandbox| state_of(sandbox) != pb::State::Terminating).await;
    assert_eq!(state_of(&ended), pb::State::Completed);
    assert_eq!(setup.runtime.stopped(), [setup.runtime.started()[0].pod_uid.clone()]);
}
