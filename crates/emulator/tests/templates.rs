//! Sandbox templates (SandboxTemplateService), CreateSandboxFromTemplate and CreateSandboxFromFile
//! over gRPC against an in-process emulator with the fake runtime: what each stores and returns,
//! who may see it, what the sandboxes made from them run, and what is refused by name.

mod common;

use std::time::Duration;

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::sandbox_template_service_client::SandboxTemplateServiceClient;
use cwsandbox_emulator::Emulator;
use cwsandbox_emulator::runtime::SandboxRuntime;
use std::sync::Arc;
use tonic::Code;

const OVERLAY: &str = r#"
runners:
  - {org: org-a, runnerId: runner-a, zone: us-east-04a, clusterId: cks-cluster, policy: {}}
  - {org: org-b, runnerId: runner-b, zone: us-east-04a, clusterId: cks-cluster, policy: {}}
auth:
  tokens:
    - {token: a-admin, org: org-a, user: ann, uid: 0, roles: [sandbox_admin]}
    - {token: a-user, org: org-a, user: alice, uid: 1001, roles: [sandbox_user]}
    - {token: b-admin, org: org-b, user: ben, uid: 0, roles: [sandbox_admin]}
"#;

async fn start() -> (Emulator, Arc<FakeRuntime>) {
    let runtime = FakeRuntime::new();
    let emulator = start_with(OVERLAY, Some(runtime.clone() as Arc<dyn SandboxRuntime>)).await;
    emulator.app().driver().clock().freeze();
    (emulator, runtime)
}

async fn templates(emulator: &Emulator, token: &str) -> SandboxTemplateServiceClient<Authed> {
    SandboxTemplateServiceClient::with_interceptor(channel(emulator).await, Bearer(token.to_owned()))
}

fn worker_spec() -> pb::PartialSandboxSpec {
    pb::PartialSandboxSpec {
        containers: vec![pb::PartialContainer {
            name: "main".to_owned(),
            image: "python:3.11".to_owned(),
            command: "/bin/sh".to_owned(),
            args: vec!["-c".to_owned(), "sleep infinity".to_owned()],
            environment_variables: [("ROLE".to_owned(), "worker".to_owned())].into(),
            ..Default::default()
        }],
        tags: vec!["from-template".to_owned()],
        runner_ids: vec!["runner-a".to_owned()],
        mode: pb::SandboxMode::Cks as i32,
        ..Default::default()
    }
}

fn create_template(display_name: &str, spec: pb::PartialSandboxSpec) -> pb::CreateSandboxTemplateRequest {
    pb::CreateSandboxTemplateRequest {
        sandbox_template: Some(pb::SandboxTemplate {
            display_name: display_name.to_owned(),
            spec: Some(spec),
            ..Default::default()
        }),
        request_id: String::new(),
    }
}

fn violations(status: &tonic::Status) -> Vec<String> {
    details(status)
        .bad_request()
        .map(|bad| bad.field_violations.iter().map(|v| v.field.clone()).collect())
        .unwrap_or_default()
}

fn seconds(timestamp: &Option<cwsandbox_api::wkt::Timestamp>) -> i64 {
    timestamp.as_ref().expect("timestamp").seconds
}

#[tokio::test]
async fn templates_are_stored_revisioned_soft_deleted_and_kept_to_their_organization() {
    let (emulator, _) = start().await;
    let mut admin = templates(&emulator, "a-admin").await;
    let created = admin.create_sandbox_template(create_template("worker", worker_spec())).await.unwrap().into_inner();
    assert_eq!(created.sandbox_template_id.len(), 36, "a UUID: {}", created.sandbox_template_id);
    assert_eq!((created.revision, created.create_user_id.as_str(), created.deleted), (1, "ann", false));
    assert!(created.requires_cks, "it names a runner, which only CKS placement allows");
    assert_eq!(created.create_time, created.update_time);
    let id = created.sandbox_template_id.clone();

    advance(&emulator, Duration::from_secs(30));
    let mask = cwsandbox_api::wkt::FieldMask { paths: vec!["display_name".to_owned(), "spec.tags".to_owned()] };
    let patch = pb::SandboxTemplate {
        display_name: "worker v2".to_owned(),
        spec: Some(pb::PartialSandboxSpec { tags: vec!["v2".to_owned()], ..Default::default() }),
        ..Default::default()
    };
    let updated = admin
        .update_sandbox_template(pb::UpdateSandboxTemplateRequest {
            sandbox_template_id: id.clone(),
            sandbox_template: Some(patch),
            update_mask: Some(mask),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((updated.revision, updated.display_name.as_str()), (2, "worker v2"));
    let spec = updated.spec.clone().unwrap();
    assert_eq!((spec.tags, spec.containers.len()), (vec!["v2".to_owned()], 1), "only the masked fields change");
    assert_eq!(seconds(&updated.update_time) - seconds(&updated.create_time), 30, "the injectable clock's time");

    // Readable by the organization's users, not by another organization's admin.
    let user_view = templates(&emulator, "a-user")
        .await
        .get_sandbox_template(pb::GetSandboxTemplateRequest { sandbox_template_id: id.clone(), show_deleted: false })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(user_view, updated);
    let mut other = templates(&emulator, "b-admin").await;
    let hidden = other
        .get_sandbox_template(pb::GetSandboxTemplateRequest { sandbox_template_id: id.clone(), show_deleted: true })
        .await
        .unwrap_err();
    assert_eq!((hidden.code(), reason(&hidden).as_str()), (Code::NotFound, "CWSANDBOX_TEMPLATE_NOT_FOUND"));
    let listed = other.list_sandbox_templates(pb::ListSandboxTemplatesRequest::default()).await.unwrap().into_inner();
    assert!(listed.sandbox_templates.is_empty());

    // Writes are the admins'.
    let denied = templates(&emulator, "a-user")
        .await
        .create_sandbox_template(create_template("mine", worker_spec()))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    // Paging: one at a time, oldest first.
    admin.create_sandbox_template(create_template("second", pb::PartialSandboxSpec::default())).await.unwrap();
    let first_page = admin
        .list_sandbox_templates(pb::ListSandboxTemplatesRequest { page_size: 1, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first_page.sandbox_templates[0].sandbox_template_id, id);
    let second_page = admin
        .list_sandbox_templates(pb::ListSandboxTemplatesRequest {
            page_size: 1,
            page_token: first_page.next_page_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second_page.sandbox_templates[0].display_name, "second");
    assert!(second_page.next_page_token.is_empty());

    // Soft delete: gone from ordinary reads, still there for admins who ask.
    admin.delete_sandbox_template(pb::DeleteSandboxTemplateRequest { sandbox_template_id: id.clone() }).await.unwrap();
    let gone = admin
        .get_sandbox_template(pb::GetSandboxTemplateRequest { sandbox_template_id: id.clone(), show_deleted: false })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let deleted = admin
        .get_sandbox_template(pb::GetSandboxTemplateRequest { sandbox_template_id: id.clone(), show_deleted: true })
        .await
        .unwrap()
        .into_inner();
    assert!(deleted.deleted && deleted.delete_time.is_some());
    let live = admin.list_sandbox_templates(pb::ListSandboxTemplatesRequest::default()).await.unwrap().into_inner();
    assert_eq!(live.sandbox_templates.len(), 1);
    let all = admin
        .list_sandbox_templates(pb::ListSandboxTemplatesRequest { show_deleted: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.sandbox_templates.len(), 2);
    let users_may_not = templates(&emulator, "a-user")
        .await
        .list_sandbox_templates(pb::ListSandboxTemplatesRequest { show_deleted: true, ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(users_may_not.code(), Code::PermissionDenied);
}

#[tokio::test]
async fn bad_templates_are_refused_with_the_field_named() {
    let (emulator, _) = start().await;
    let mut admin = templates(&emulator, "a-admin").await;
    let unnamed = admin.create_sandbox_template(create_template("", worker_spec())).await.unwrap_err();
    assert_eq!(unnamed.code(), Code::InvalidArgument);
    assert_eq!(violations(&unnamed), ["sandbox_template.display_name"]);

    let mut imageless = worker_spec();
    imageless.containers[0].image.clear();
    let error = admin.create_sandbox_template(create_template("t", imageless)).await.unwrap_err();
    assert_eq!(violations(&error), ["sandbox_template.spec.containers[0].image"]);

    let mut with_attachments = create_template("t", worker_spec());
    if let Some(template) = with_attachments.sandbox_template.as_mut() {
        template.attachments =
            Some(pbjson_types::Struct { fields: [("nodeSelector".to_owned(), Default::default())].into() });
    }
    let refused = admin.create_sandbox_template(with_attachments).await.unwrap_err();
    assert_eq!((refused.code(), reason(&refused).as_str()), (Code::Unimplemented, "CWSANDBOX_NOT_IMPLEMENTED"));
    assert_eq!(violations(&refused), ["sandbox_template.attachments"]);

    let mut with_networks = worker_spec();
    with_networks.network_ids = vec!["net".to_owned()];
    let refused = admin.create_sandbox_template(create_template("t", with_networks)).await.unwrap_err();
    assert_eq!(violations(&refused), ["sandbox_template.spec.network_ids"]);

    let missing = admin
        .update_sandbox_template(pb::UpdateSandboxTemplateRequest {
            sandbox_template_id: "no-such-template".to_owned(),
            sandbox_template: Some(pb::SandboxTemplate { display_name: "x".to_owned(), ..Default::default() }),
            update_mask: None,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

#[tokio::test]
async fn a_sandbox_from_a_template_runs_its_spec_with_the_overrides_layered_on() {
    let (emulator, runtime) = start().await;
    let mut admin = templates(&emulator, "a-admin").await;
    let template = admin.create_sandbox_template(create_template("worker", worker_spec())).await.unwrap().into_inner();
    let request = pb::CreateSandboxFromTemplateRequest {
        template_id: template.sandbox_template_id.clone(),
        overrides: Some(pb::PartialSandboxSpec { tags: vec!["mine".to_owned()], ..Default::default() }),
        request_id: "req-1".to_owned(),
        display_name: "from template".to_owned(),
    };
    let mut client = sandboxes(&emulator, "a-user").await;
    let sandbox = client.create_sandbox_from_template(request.clone()).await.unwrap().into_inner();
    assert_eq!(
        (sandbox.source_template_id.as_str(), sandbox.source_template_revision),
        (template.sandbox_template_id.as_str(), 1)
    );
    assert_eq!(sandbox.display_name, "from template");
    let spec = sandbox.spec.clone().unwrap();
    assert_eq!(spec.tags, ["mine"], "an override replaces the template's tags");
    advance(&emulator, Duration::from_secs(2));
    let launched = runtime.started();
    let launch = launched.iter().find(|launch| launch.sandbox_id.as_deref() == Some(&sandbox.sandbox_id)).unwrap();
    assert_eq!(launch.containers[0].command, ["/bin/sh"]);
    assert_eq!(launch.containers[0].env.get("ROLE").map(String::as_str), Some("worker"));

    // The same request again answers the same sandbox; another body under its id is a conflict.
    let replay = client.create_sandbox_from_template(request.clone()).await.unwrap().into_inner();
    assert_eq!(replay.sandbox_id, sandbox.sandbox_id);
    let conflict = client
        .create_sandbox_from_template(pb::CreateSandboxFromTemplateRequest {
            display_name: "other".to_owned(),
            ..request.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&conflict), "CWSANDBOX_REQUEST_ID_CONFLICT");

    // A sparse container override is refused; a deleted or unknown template is NOT_FOUND.
    let sparse = client
        .create_sandbox_from_template(pb::CreateSandboxFromTemplateRequest {
            overrides: Some(pb::PartialSandboxSpec {
                containers: vec![pb::PartialContainer {
                    name: "main".to_owned(),
                    command: "env".to_owned(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            request_id: String::new(),
            ..request.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(violations(&sparse), ["overrides.containers[0].image"]);
    admin
        .delete_sandbox_template(pb::DeleteSandboxTemplateRequest { sandbox_template_id: template.sandbox_template_id })
        .await
        .unwrap();
    let deleted = client
        .create_sandbox_from_template(pb::CreateSandboxFromTemplateRequest {
            request_id: "req-2".to_owned(),
            ..request.clone()
        })
        .await
        .unwrap_err();
    assert_eq!((deleted.code(), reason(&deleted).as_str()), (Code::NotFound, "CWSANDBOX_TEMPLATE_NOT_FOUND"));
    let unknown = client
        .create_sandbox_from_template(pb::CreateSandboxFromTemplateRequest {
            template_id: "00000000-0000-0000-0000-000000000000".to_owned(),
            request_id: String::new(),
            ..request
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}

const COMPOSE: &str = r#"
services:
  app:
    image: python:3.11
    command: ["sh", "-c", "echo $$ROLE; exec sleep 1000"]
    environment:
      ROLE: app
    volumes: ["shared:/shared"]
  cache:
    image: busybox:1.36
    entrypoint: sh -c
    command: "'exec sleep 1000'"
    working_dir: /srv/cache
    volumes:
      - {type: volume, source: shared, target: /data, read_only: true}
volumes:
  shared: {}
"#;

fn from_file(contents: &[u8]) -> pb::CreateSandboxFromFileRequest {
    pb::CreateSandboxFromFileRequest {
        r#type: pb::SandboxFileType::Compose as i32,
        contents: contents.to_vec(),
        primary_service: "app".to_owned(),
        runner_ids: vec!["runner-a".to_owned()],
        mode: pb::SandboxMode::Cks as i32,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_compose_files_services_run_as_the_sandboxs_containers() {
    let (emulator, runtime) = start().await;
    let mut client = sandboxes(&emulator, "a-user").await;
    let sandbox = client.create_sandbox_from_file(from_file(COMPOSE.as_bytes())).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));
    let launched = runtime.started();
    let launch = launched.iter().find(|launch| launch.sandbox_id.as_deref() == Some(&sandbox.sandbox_id)).unwrap();
    let names: Vec<&str> = launch.containers.iter().map(|container| container.name.as_str()).collect();
    assert_eq!(names, ["app", "cache"], "the primary service first");
    let app = &launch.containers[0];
    assert_eq!(
        (app.command.clone(), app.args.clone()),
        (vec!["sh".to_owned()], vec!["-c".to_owned(), "echo $ROLE; exec sleep 1000".to_owned()])
    );
    assert_eq!(app.env.get("ROLE").map(String::as_str), Some("app"));
    let cache = &launch.containers[1];
    assert_eq!(cache.args, ["-c", "exec sleep 1000"]);
    assert_eq!(cache.working_dir.as_deref(), Some("/srv/cache"));
    assert!(cache.volume_mounts[0].read_only);
    assert_eq!(sandbox.spec.unwrap().volumes[0].name, "shared");
}

#[tokio::test]
async fn compose_keys_that_would_need_a_build_or_have_no_equivalent_are_refused_by_name() {
    let (emulator, _) = start().await;
    let mut client = sandboxes(&emulator, "a-user").await;
    let building = "services:\n  app:\n    build: .\n    ports: ['8080:80']\n";
    let refused = client.create_sandbox_from_file(from_file(building.as_bytes())).await.unwrap_err();
    assert_eq!((refused.code(), reason(&refused).as_str()), (Code::Unimplemented, "CWSANDBOX_NOT_IMPLEMENTED"));
    let mut named = violations(&refused);
    named.sort();
    assert_eq!(named, ["contents.services.app.build", "contents.services.app.ports"]);

    // The build is skipped when an image is given instead.
    let mut overridden = from_file(b"services:\n  app:\n    build: .\n    command: sleep 1000\n");
    overridden.image_overrides.insert("app".to_owned(), "python:3.11".to_owned());
    let made = client.create_sandbox_from_file(overridden).await.unwrap().into_inner();
    assert_eq!(made.spec.unwrap().containers[0].image, "python:3.11");

    let mut with_context = from_file(COMPOSE.as_bytes());
    with_context.build_contexts.insert("app".to_owned(), b"tar".to_vec());
    assert_eq!(violations(&client.create_sandbox_from_file(with_context).await.unwrap_err()), ["build_contexts"]);

    let oversized = client.create_sandbox_from_file(from_file(&vec![b'#'; 256 * 1024 + 1])).await.unwrap_err();
    assert_eq!((oversized.code(), violations(&oversized)), (Code::InvalidArgument, vec!["contents".to_owned()]));
    let not_yaml = client.create_sandbox_from_file(from_file(b"services: [unclosed")).await.unwrap_err();
    assert_eq!(violations(&not_yaml), ["contents"]);
    let mut engine = from_file(COMPOSE.as_bytes());
    engine.control = pb::Control::ContainerEngine as i32;
    let refused = client.create_sandbox_from_file(engine).await.unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::FailedPrecondition, "CWSANDBOX_NO_SUITABLE_RUNNER"),
        "as the fleet answers when no runner can host the sandbox: {}",
        refused.message()
    );
    assert!(refused.message().contains("container engine"), "{}", refused.message());
}

#[tokio::test]
async fn compose_start_conditions_reach_the_host_in_the_files_order() {
    let (emulator, runtime) = start().await;
    let mut client = sandboxes(&emulator, "a-user").await;
    let ordered = r#"
name: project
services:
  cache:
    image: redis:7
    expose: ["6379"]
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 2s
      retries: 4
      start_period: 4s
  app:
    image: python:3.11
    depends_on:
      cache:
        condition: service_healthy
"#;
    // The conditions reach the host with the launch, whatever its runtime (images or not).
    let ordered_made = client.create_sandbox_from_file(from_file(ordered.as_bytes())).await.unwrap().into_inner();
    advance(&emulator, Duration::from_secs(2));
    let launched = runtime.started();
    let launch = launched.iter().find(|launch| launch.sandbox_id.as_deref() == Some(&ordered_made.sandbox_id)).unwrap();
    let app = launch.containers.iter().find(|container| container.name == "app").unwrap();
    let waits: Vec<(&str, cwsandbox_sim::k8s::StartCondition)> =
        app.start_after.iter().map(|dependency| (dependency.container.as_str(), dependency.condition)).collect();
    assert_eq!(waits, [("cache", cwsandbox_sim::k8s::StartCondition::Healthy)]);

    // Without conditions the file's order is the spec's, and the healthcheck its probe.
    let unordered = ordered.replace("    depends_on:\n      cache:\n        condition: service_healthy\n", "");
    let made = client.create_sandbox_from_file(from_file(unordered.as_bytes())).await.unwrap().into_inner();
    let spec = made.spec.unwrap();
    let names: Vec<&str> = spec.containers.iter().map(|container| container.name.as_str()).collect();
    assert_eq!(names, ["cache", "app"], "the file's order");
    let probe = spec.containers[0].startup_probe.clone().unwrap();
    assert_eq!(
        (probe.exec, probe.period_seconds, probe.failure_threshold),
        (vec!["redis-cli".to_owned(), "ping".to_owned()], 2, 6)
    );
    advance(&emulator, Duration::from_secs(2));
    let launched = runtime.started();
    let launch = launched.iter().find(|launch| launch.sandbox_id.as_deref() == Some(&made.sandbox_id)).unwrap();
    assert_eq!(launch.host_aliases, ["cache", "app"], "the services' names resolve in the Pod");
    let cache = launch.containers.iter().find(|container| container.name == "cache").unwrap();
    assert_eq!(cache.startup_probe.as_ref().map(|probe| probe.period_seconds), Some(2));
}
