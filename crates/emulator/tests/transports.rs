//! Every protocol on the one port: Connect (JSON and binary, unary and streaming, HTTP/1.1 and
//! h2c) with the generated Connect client, gRPC-Web with curl, and bad input on both transports
//! (malformed messages, oversized messages) answered with errors while the server keeps serving.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::sandbox_service_connect_client::SandboxServiceClient as ConnectClient;
use cwsandbox_emulator::config::EmulatorConfig;
use cwsandbox_emulator::runtime::SandboxRuntime;
use cwsandbox_emulator::{Emulator, Options};
use cwsandbox_sim::config::Scenario;
use futures::StreamExt;
use prost::Message;
use tonic::Code;

fn connect_client(emulator: &Emulator, proto: bool, h2c: bool) -> ConnectClient {
    let mut builder = ConnectClient::builder(emulator.info().base_url.clone())
        .default_header("authorization", format!("Bearer {}", emulator.info().user_token));
    if proto {
        builder = builder.use_proto();
    }
    if h2c {
        builder = builder.http2_prior_knowledge();
    }
    builder.build().expect("client builds")
}

#[tokio::test]
async fn connect_unary_json_and_binary_over_http1_and_h2c() {
    let emulator = start().await;
    let info = emulator.info().clone();
    for (proto, h2c) in [(false, false), (true, false), (false, true), (true, true)] {
        let client = connect_client(&emulator, proto, h2c);
        let created = client
            .create_sandbox(&create_request(client_spec(&info.runner_id), &format!("connect-{proto}-{h2c}")))
            .await
            .unwrap_or_else(|error| panic!("proto={proto} h2c={h2c}: {error}"))
            .into_inner();
        let fetched = client
            .get_sandbox(&pb::GetSandboxRequest { sandbox_id: created.sandbox_id.clone() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(fetched.sandbox_id, created.sandbox_id);
        let error = client.get_sandbox(&pb::GetSandboxRequest { sandbox_id: "nope".to_owned() }).await.unwrap_err();
        let connectrpc_axum_client::ClientError::Rpc(status) = error else { panic!("{error:?}") };
        assert_eq!(status.code(), connectrpc_axum_client::Code::NotFound);
        let info_detail = status.details().iter().find(|detail| detail.type_url().ends_with("google.rpc.ErrorInfo"));
        let info_detail =
            tonic_types::pb::ErrorInfo::decode(info_detail.expect("ErrorInfo over Connect").value()).unwrap();
        assert_eq!(info_detail.reason, "CWSANDBOX_SANDBOX_NOT_FOUND");
    }
}

#[tokio::test]
async fn connect_streaming_logs_and_exec() {
    let runtime = FakeRuntime::new();
    let emulator = start_with("", Some(runtime as Arc<dyn SandboxRuntime>)).await;
    let info = emulator.info().clone();
    let mut grpc = sandboxes(&emulator, &info.user_token).await;
    let created = grpc.create_sandbox(create_request(client_spec(&info.runner_id), "")).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));

    for (proto, h2c) in [(false, false), (true, true)] {
        let client = connect_client(&emulator, proto, h2c);
        let logs = client
            .stream_logs(&pb::StreamLogsRequest { sandbox_id: created.sandbox_id.clone(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let entries: Vec<pb::LogEntry> = logs.map(|entry| entry.unwrap()).collect().await;
        let text: String = entries.iter().map(|entry| String::from_utf8_lossy(&entry.data).into_owned()).collect();
        assert_eq!(text, "started\nworking\n", "proto={proto} h2c={h2c}");
    }

    // Bidirectional streaming needs HTTP/2.
    let client = connect_client(&emulator, true, true);
    let init = pb::ExecStreamRequest {
        message: Some(pb::exec_stream_request::Message::Init(pb::ExecStreamInit {
            sandbox_id: created.sandbox_id.clone(),
            command: vec!["echo".to_owned(), "over".to_owned(), "connect".to_owned()],
            ..Default::default()
        })),
    };
    let frames: Vec<pb::ExecStreamResponse> = client
        .stream_exec(futures::stream::iter(vec![init]))
        .await
        .unwrap()
        .into_inner()
        .map(|frame| frame.unwrap())
        .collect()
        .await;
    use pb::exec_stream_response::Message as Reply;
    assert!(matches!(frames[0].message, Some(Reply::Ready(_))));
    assert!(
        frames
            .iter()
            .any(|frame| matches!(&frame.message, Some(Reply::Output(output)) if output.data == b"over connect\n"))
    );
    assert!(matches!(frames.last().unwrap().message, Some(Reply::Exit(pb::ExecStreamExit { exit_code: 0, .. }))));
}

/// One gRPC-Web frame around a message.
fn grpc_web_frame(message: &impl Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

#[tokio::test]
async fn grpc_web_over_http1_with_curl() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let dir = tempfile::tempdir().unwrap();
    let request = pb::GetAvailableRunnerRequest {
        runner_id: info.runner_id.clone(),
        organization_id: info.org.clone(),
        ..Default::default()
    };
    std::fs::File::create(dir.path().join("request.bin")).unwrap().write_all(&grpc_web_frame(&request)).unwrap();
    let url = format!("{}/coreweave.sandbox.v1.DiscoveryService/GetAvailableRunner", info.base_url);
    let base_url = info.base_url.clone();
    let token = info.user_token.clone();
    let dir_path = dir.path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args(["--silent", "--show-error", "--http1.1", "-o", "response.bin", "-w", "%{http_code}"])
            .args(["-H", "content-type: application/grpc-web+proto", "-H", "x-grpc-web: 1"])
            .args(["-H", &format!("authorization: Bearer {token}")])
            .args(["--data-binary", "@request.bin", &url])
            .current_dir(&dir_path)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let _ = base_url;
    assert_eq!(String::from_utf8_lossy(&output.stdout), "200", "{}", String::from_utf8_lossy(&output.stderr));
    let body = std::fs::read(dir.path().join("response.bin")).unwrap();
    assert_eq!(body[0], 0, "a data frame first");
    let length = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    let runner = pb::AvailableRunner::decode(&body[5..5 + length]).unwrap();
    assert_eq!(runner.runner_id, info.runner_id);
    let trailers = &body[5 + length..];
    assert_eq!(trailers[0], 0x80, "then the trailers frame");
    assert!(
        String::from_utf8_lossy(&trailers[5..]).contains("grpc-status:0"),
        "{:?}",
        String::from_utf8_lossy(trailers)
    );
}

/// A GetSandboxRequest whose field 1 has the wrong wire type.
#[derive(Clone, PartialEq, Message)]
struct Malformed {
    #[prost(fixed64, tag = "1")]
    sandbox_id: u64,
}

fn curl_connect(base_url: &str, token: &str, method: &str, content_type: &str, body: &Path) -> (String, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "-w", "\n%{http_code}", "-X", "POST"])
        .args(["-H", &format!("content-type: {content_type}"), "-H", &format!("authorization: Bearer {token}")])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(format!("{base_url}/coreweave.sandbox.v1.SandboxService/{method}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.to_owned(), body.to_owned())
}

#[tokio::test]
async fn malformed_and_oversized_messages_are_refused_and_the_server_keeps_serving() {
    let config = EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("none.yaml"), "")]).unwrap();
    let mut options = Options::new(config);
    options.limits.max_message_bytes = 4096;
    let emulator = Emulator::start(options).await.unwrap();
    let info = emulator.info().clone();
    let dir = tempfile::tempdir().unwrap();

    // Connect, binary: garbage bytes and a wrong wire type.
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, [0xff, 0xff, 0xff, 0xff, 0x0f]).unwrap();
    let (base, token) = (info.base_url.clone(), info.user_token.clone());
    let (status, body) = tokio::task::spawn_blocking({
        let garbage = garbage.clone();
        move || curl_connect(&base, &token, "GetSandbox", "application/proto", &garbage)
    })
    .await
    .unwrap();
    assert_eq!(status, "400", "{body}");
    assert!(body.contains("invalid_argument"), "{body}");

    // Connect, JSON: oversized.
    let huge = dir.path().join("huge.json");
    std::fs::write(&huge, format!(r#"{{"sandboxId": "{}"}}"#, "x".repeat(10_000))).unwrap();
    let (base, token) = (info.base_url.clone(), info.user_token.clone());
    let (status, body) =
        tokio::task::spawn_blocking(move || curl_connect(&base, &token, "GetSandbox", "application/json", &huge))
            .await
            .unwrap();
    assert_eq!(status, "429", "{body}");
    assert!(body.contains("resource_exhausted") && body.contains("4096"), "{body}");

    // gRPC: a wrong wire type, then an oversized message.
    let channel = channel(&emulator).await;
    let mut raw = tonic::client::Grpc::new(channel.clone());
    raw.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/coreweave.sandbox.v1.SandboxService/GetSandbox");
    let mut request = tonic::Request::new(Malformed { sandbox_id: 42 });
    request.metadata_mut().insert("authorization", format!("Bearer {}", info.user_token).parse().unwrap());
    let error =
        raw.unary::<Malformed, pb::Sandbox, _>(request, path, tonic_prost::ProstCodec::default()).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let error = client.get_sandbox(pb::GetSandboxRequest { sandbox_id: "y".repeat(10_000) }).await.unwrap_err();
    assert_eq!(error.code(), Code::ResourceExhausted, "{error:?}");
    assert!(error.message().contains("4096"), "{}", error.message());

    // Still serving, state intact.
    client.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap();
}
