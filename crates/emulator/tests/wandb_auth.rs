//! The published client's W&B auth (`auth=AuthStrategy.WANDB`, `WandbAuth(entity=…)`): its headers
//! (`x-wandb-api-key`, `x-entity-id`, `x-wandb-host`, `x-project-name`) mapped to a principal by
//! the values' `auth.wandbKeys`, over gRPC against an in-process emulator.

mod common;

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::sandbox_service_client::SandboxServiceClient;
use cwsandbox_emulator::Emulator;
use tonic::Code;
use tonic::metadata::MetadataValue;

const OVERLAY: &str = r#"
runners:
  - {org: org-a, runnerId: runner-a, zone: us-east-04a, clusterId: cks-cluster, policy: {}}
  - {org: org-b, runnerId: runner-b, zone: us-east-04a, clusterId: cks-cluster, policy: {}}
auth:
  tokens:
    - {token: a-user, org: org-a, user: alice, uid: 1001, roles: [sandbox_user]}
  wandbKeys:
    - {apiKey: alice-key, entity: team-a, org: org-a, user: alice, uid: 1001, roles: [sandbox_user]}
    - {apiKey: alice-key, entity: team-b, org: org-b, user: alice, uid: 1001, roles: [sandbox_admin]}
    - {apiKey: onprem-key, entity: lab, host: "wandb.lab.test:8443", org: org-b, user: bob, roles: [sandbox_user]}
"#;

/// One header a request sends.
type Header = (&'static str, &'static str);

/// A client that sends the given headers instead of a bearer token.
async fn with_headers(
    emulator: &Emulator,
    headers: &[Header],
) -> SandboxServiceClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + use<>,
    >,
> {
    let headers = headers.to_vec();
    SandboxServiceClient::with_interceptor(channel(emulator).await, move |mut request: tonic::Request<()>| {
        for (name, value) in &headers {
            request.metadata_mut().insert(*name, MetadataValue::from_static(value));
        }
        Ok(request)
    })
}

fn sandbox_of(runner: &str) -> pb::CreateSandboxRequest {
    pb::CreateSandboxRequest {
        sandbox: Some(pb::Sandbox {
            spec: Some(pb::SandboxSpec {
                containers: vec![pb::Container {
                    name: "main".to_owned(),
                    image: "python:3.11".to_owned(),
                    command: "sleep".to_owned(),
                    args: vec!["infinity".to_owned()],
                    ..Default::default()
                }],
                runner_ids: vec![runner.to_owned()],
                mode: pb::SandboxMode::Cks as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn ids(mut client: SandboxServiceClient<Authed>) -> Vec<String> {
    let listed = client.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap().into_inner();
    listed.sandboxes.into_iter().map(|sandbox| sandbox.sandbox_id).collect()
}

#[tokio::test]
async fn a_wandb_key_acts_as_its_entitys_principal() {
    let emulator = start_with(OVERLAY, Some(FakeRuntime::new() as _)).await;
    // No entity: the key's first (default) entity, team-a of org-a.
    let mut default_entity =
        with_headers(&emulator, &[("x-wandb-api-key", "alice-key"), ("x-wandb-sdk-version", "0.22.0")]).await;
    let in_a = default_entity.create_sandbox(sandbox_of("runner-a")).await.unwrap().into_inner();
    assert_eq!(
        ids(sandboxes(&emulator, "a-user").await).await,
        [in_a.sandbox_id.as_str()],
        "org-a's, as alice's token sees it"
    );

    // An entity picks the organization: team-b is org-b, where org-a's sandbox is invisible.
    let mut team_b = with_headers(
        &emulator,
        &[("x-wandb-api-key", "alice-key"), ("x-entity-id", "team-b"), ("x-project-name", "rl")],
    )
    .await;
    let listed = team_b.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap().into_inner();
    assert!(listed.sandboxes.is_empty(), "{listed:?}");
    let in_b = team_b.create_sandbox(sandbox_of("runner-b")).await.unwrap().into_inner();
    let listed = team_b.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap().into_inner();
    assert_eq!(
        listed.sandboxes.iter().map(|sandbox| sandbox.sandbox_id.as_str()).collect::<Vec<_>>(),
        [in_b.sandbox_id.as_str()]
    );
    // org-b has no runner-a: the key's team-b entity cannot place sandboxes on org-a's runner.
    assert!(team_b.create_sandbox(sandbox_of("runner-a")).await.is_err());
    assert_eq!(ids(sandboxes(&emulator, "a-user").await).await, [in_a.sandbox_id.as_str()]);

    // A key of a W&B server of its own is accepted from that server only.
    let mut lab =
        with_headers(&emulator, &[("x-wandb-api-key", "onprem-key"), ("x-wandb-host", "wandb.lab.test:8443")]).await;
    lab.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap();
}

#[tokio::test]
async fn unknown_keys_other_servers_and_entities_are_refused() {
    let emulator = start_with(OVERLAY, Some(FakeRuntime::new() as _)).await;
    let cases: [(&[Header], Code, &str); 4] = [
        (&[("x-wandb-api-key", "nope")], Code::Unauthenticated, "unknown W&B API key"),
        (&[("x-wandb-api-key", "alice-key"), ("x-wandb-host", "wandb.lab.test")], Code::Unauthenticated, "W&B's cloud"),
        (&[("x-wandb-api-key", "onprem-key")], Code::Unauthenticated, "\"wandb.lab.test:8443\""),
        (
            &[("x-wandb-api-key", "alice-key"), ("x-entity-id", "team-c")],
            Code::PermissionDenied,
            "\"team-a\", \"team-b\"",
        ),
    ];
    for (headers, code, words) in cases {
        let mut client = with_headers(&emulator, headers).await;
        let error = client.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap_err();
        assert_eq!(error.code(), code, "{headers:?}: {error:?}");
        assert!(error.message().contains(words), "{headers:?}: {}", error.message());
    }
    // A bearer token wins over W&B headers sent beside it.
    let mut both = with_headers(&emulator, &[("authorization", "Bearer a-user"), ("x-wandb-api-key", "nope")]).await;
    both.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap();
}
