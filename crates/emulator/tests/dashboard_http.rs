//! The dashboard's endpoints over plain HTTP (the browser's part is `dashboard.rs`): who is
//! refused and how, bad input named, and the request log's codes on every protocol.

use std::sync::Arc;

use bytes::Bytes;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_emulator::Emulator;
use cwsandbox_emulator::runtime::SandboxRuntime;
use cwsandbox_testkit::in_process::{
    FakeRuntime, client_spec, create_request, emulator_service, sandboxes, start_with,
};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// One request on a new connection: (status, body).
async fn call(emulator: &Emulator, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let address = emulator.info().base_url.trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&address).await.expect("connects");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(connection);
    let mut request = http::Request::builder().method(method).uri(path).header(http::header::HOST, &address);
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if !body.is_empty() {
        request = request.header(http::header::CONTENT_TYPE, "application/json");
    }
    let request = request.body(Full::new(Bytes::from(body.to_owned()))).expect("request");
    let response = sender.send_request(request).await.expect("answered");
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn emulator() -> Emulator {
    start_with("", Some(FakeRuntime::new() as Arc<dyn SandboxRuntime>)).await
}

#[tokio::test]
async fn the_shell_needs_no_token_and_every_view_needs_a_valid_one() {
    let emulator = emulator().await;
    let (status, page) = call(&emulator, "GET", "/ui/sandboxes", None, "").await;
    assert_eq!(status, 200);
    assert!(page.contains(r#"<input name="token""#) || page.contains("name=\"token\""), "{page}");
    assert!(!page.contains(&emulator.info().admin_token), "the shell carries no secret");
    for path in ["/ui/api/view/cluster", "/ui/api/view/sandboxes", "/ui/api/changes", "/ui/api/whoami"] {
        let (status, body) = call(&emulator, "GET", path, None, "").await;
        assert_eq!(status, 401, "{path}: {body}");
        let (status, _) = call(&emulator, "GET", path, Some("cwsbx-not-a-token"), "").await;
        assert_eq!(status, 401, "{path}");
    }
    let (status, body) =
        call(&emulator, "GET", "/ui/api/view/nothing-here", Some(&emulator.info().admin_token), "").await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = call(&emulator, "GET", "/ui/assets/evil.js", None, "").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_user_token_is_refused_what_the_api_refuses_it() {
    let emulator = emulator().await;
    let user = emulator.info().user_token.clone();
    let (status, body) = call(&emulator, "GET", "/ui/api/view/cluster", Some(&user), "").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("sandbox_admin or cluster_admin"), "names the roles: {body}");
    let (status, body) = call(&emulator, "POST", "/ui/api/clock/freeze", Some(&user), "{}").await;
    assert_eq!(status, 403, "{body}");
    // What the API lets a user read, the dashboard shows it.
    for path in ["/ui/api/view/sandboxes", "/ui/api/view/slurm", "/ui/api/view/requests"] {
        let (status, body) = call(&emulator, "GET", path, Some(&user), "").await;
        assert_eq!(status, 200, "{path}: {body}");
    }
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_field() {
    let emulator = emulator().await;
    let admin = emulator.info().admin_token.clone();
    let (status, body) = call(&emulator, "GET", "/ui/api/view/slurm?state=SLEEPING", Some(&admin), "").await;
    assert_eq!(status, 400);
    assert!(body.contains("state") && body.contains("SLEEPING"), "{body}");
    let (status, body) = call(&emulator, "GET", "/ui/api/view/sandboxes?state=ASLEEP", Some(&admin), "").await;
    assert_eq!(status, 400);
    assert!(body.contains("state") && body.contains("ASLEEP"), "{body}");
    let (status, body) = call(&emulator, "POST", "/ui/api/clock/advance", Some(&admin), r#"{"seconds":"soon"}"#).await;
    assert_eq!(status, 400);
    assert!(body.contains("seconds"), "{body}");
    let (status, body) = call(&emulator, "POST", "/ui/api/clock/advance", Some(&admin), "not json").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(&emulator, "POST", "/ui/api/clock/rewind", Some(&admin), "{}").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) =
        call(&emulator, "POST", "/ui/api/sandboxes/nope/exec", Some(&admin), r#"{"command":" "}"#).await;
    assert_eq!(status, 400);
    assert!(body.contains("command"), "{body}");
    let (status, body) = call(&emulator, "POST", "/ui/api/sandboxes/nope/delete", Some(&admin), "").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = call(&emulator, "GET", "/ui/api/logs/nope", Some(&admin), "").await;
    assert_eq!(status, 404, "a missing sandbox's logs are not found, as its page: {body}");
    // The clock did not move for any of them.
    let (_, clock) = call(&emulator, "GET", "/ui/api/view/clock", Some(&admin), "").await;
    assert!(clock.contains(r#"data-frozen="false""#), "{clock}");
}

#[tokio::test]
async fn the_request_log_has_each_protocols_code_and_the_callers_organization() {
    let emulator = emulator().await;
    let admin = emulator.info().admin_token.clone();
    let user = emulator.info().user_token.clone();
    // gRPC: a NOT_FOUND (trailers-only) and an OK (status in the trailers).
    let mut grpc = sandboxes(&emulator, &user).await;
    let missing = grpc.get_sandbox(pb::GetSandboxRequest { sandbox_id: "0000000000000000".to_owned() }).await;
    assert_eq!(missing.expect_err("not found").code(), tonic::Code::NotFound);
    grpc.create_sandbox(create_request(client_spec(&emulator.info().runner_id), "log-1")).await.expect("created");
    // Connect unary JSON: an error body and a success.
    let (status, _) = call(
        &emulator,
        "POST",
        "/coreweave.sandbox.v1.SandboxService/GetSandbox",
        Some(&user),
        r#"{"sandboxId":"0000000000000001"}"#,
    )
    .await;
    assert_eq!(status, 404);
    // An EmulatorService call a user may not make.
    let mut service = emulator_service(&emulator, &user).await;
    let refused = service.list_nodes(cwsandbox_api::emulator_v1::ListNodesRequest::default()).await;
    assert_eq!(refused.expect_err("refused").code(), tonic::Code::PermissionDenied);

    let (status, log) = call(&emulator, "GET", "/ui/api/view/requests", Some(&admin), "").await;
    assert_eq!(status, 200);
    let row = |method: &str, code: &str| format!(r#"data-method="{method}" data-code="{code}""#);
    for (method, code) in [
        ("SandboxService/GetSandbox", "NOT_FOUND"),
        ("SandboxService/CreateSandbox", "OK"),
        ("EmulatorService/ListNodes", "PERMISSION_DENIED"),
    ] {
        assert!(log.contains(&row(method, code)), "{method} {code} in the log:\n{log}");
    }
    assert_eq!(log.matches(&row("SandboxService/GetSandbox", "NOT_FOUND")).count(), 2, "gRPC and Connect");
    // Another organization sees none of these calls.
    let tenant = emulator_service(&emulator, &admin)
        .await
        .create_tenant(cwsandbox_api::emulator_v1::CreateTenantRequest {
            organization: "acme".to_owned(),
            ..Default::default()
        })
        .await
        .expect("tenant")
        .into_inner()
        .tenant
        .expect("tenant");
    let (status, theirs) = call(&emulator, "GET", "/ui/api/view/requests", Some(&tenant.user_token), "").await;
    assert_eq!(status, 200);
    assert!(!theirs.contains("data-method=\"SandboxService/CreateSandbox\""), "{theirs}");
}

#[tokio::test]
async fn the_sandbox_list_filters_by_state() {
    let emulator = emulator().await;
    let admin = emulator.info().admin_token.clone();
    let mut grpc = sandboxes(&emulator, &admin).await;
    let id = grpc
        .create_sandbox(create_request(client_spec(&emulator.info().runner_id), "filter-1"))
        .await
        .expect("created")
        .into_inner()
        .sandbox_id;
    let row = format!("data-sandbox=\"{id}\"");
    let (_, all) = call(&emulator, "GET", "/ui/api/view/sandboxes", Some(&admin), "").await;
    let state = all
        .split(&row)
        .nth(1)
        .and_then(|rest| rest.split("data-state=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .expect("the row has a state")
        .to_owned();
    let (_, same) = call(&emulator, "GET", &format!("/ui/api/view/sandboxes?state={state}"), Some(&admin), "").await;
    assert!(same.contains(&row), "{state}: {same}");
    let other = if state == "FAILED" { "COMPLETED" } else { "FAILED" };
    let (_, none) = call(&emulator, "GET", &format!("/ui/api/view/sandboxes?state={other}"), Some(&admin), "").await;
    assert!(!none.contains(&row), "{other}: {none}");
    grpc.delete_sandbox(pb::DeleteSandboxRequest { sandbox_id: id.clone(), ..Default::default() })
        .await
        .expect("deleted");
}
