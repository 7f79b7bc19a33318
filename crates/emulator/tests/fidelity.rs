//! The fidelity rule through the real server: every refused request field of
//! `cwsandbox_emulator::fidelity::FIELDS`, set in an otherwise valid request, answers
//! UNIMPLEMENTED with reason `CWSANDBOX_NOT_IMPLEMENTED` and a BadRequest violation naming it;
//! every refused RPC answers UNIMPLEMENTED whatever it is sent; and `strictness: loose` accepts the
//! same fields and creates the sandbox.

mod common;

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_emulator::fidelity::{FIELDS, Handling, REFUSED_METHODS};
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use serde_json::{Value, json};
use tonic::Code;

/// The message types of the embedded descriptor set, by full name (`.coreweave.sandbox.v1.Container`).
fn message_types() -> HashMap<String, prost_types::DescriptorProto> {
    let set = prost_types::FileDescriptorSet::decode(cwsandbox_api::FILE_DESCRIPTOR_SET).unwrap();
    let mut types = HashMap::new();
    fn collect(
        prefix: &str,
        message: &prost_types::DescriptorProto,
        types: &mut HashMap<String, prost_types::DescriptorProto>,
    ) {
        let name = format!("{prefix}.{}", message.name());
        for nested in &message.nested_type {
            collect(&name, nested, types);
        }
        types.insert(name, message.clone());
    }
    for file in &set.file {
        for message in &file.message_type {
            collect(&format!(".{}", file.package()), message, &mut types);
        }
    }
    types
}

/// A value other than the default for one field, as proto3 JSON.
fn sample(types: &HashMap<String, prost_types::DescriptorProto>, field: &prost_types::FieldDescriptorProto) -> Value {
    let is_map = field.r#type() == Type::Message
        && types[field.type_name()].options.as_ref().is_some_and(|options| options.map_entry());
    if is_map {
        // A map entry's second field is the value (bytes values need base64).
        return json!({"k": sample(types, &types[field.type_name()].field[1])});
    }
    let one = match field.r#type() {
        Type::String => json!("x"),
        Type::Bytes => json!("eA=="),
        Type::Bool => json!(true),
        Type::Int64 | Type::Uint64 | Type::Sint64 | Type::Fixed64 | Type::Sfixed64 => json!("1"),
        Type::Double | Type::Float => json!(1.0),
        Type::Message => {
            let message = &types[field.type_name()];
            let first = &message.field[0];
            json!({ first.json_name(): sample(types, first) })
        }
        _ => json!(1),
    };
    if field.label() == Label::Repeated { json!([one]) } else { one }
}

/// `base` (a request as proto3 JSON) with the field at `path` (the table's form, request name
/// first) set, and the field's path in the request as a violation names it.
fn with_field(types: &HashMap<String, prost_types::DescriptorProto>, base: &Value, path: &str) -> (Value, String) {
    let mut segments = path.split('.');
    let request = segments.next().unwrap();
    let mut message = &types[&format!(".coreweave.sandbox.v1.{request}")];
    let mut value = base.clone();
    let mut cursor = &mut value;
    let mut shown = Vec::new();
    let segments: Vec<&str> = segments.collect();
    for (index, name) in segments.iter().enumerate() {
        let field = message.field.iter().find(|field| field.name() == *name).unwrap_or_else(|| panic!("{path}"));
        let key = field.json_name().to_owned();
        if index + 1 == segments.len() {
            cursor[key.as_str()] = sample(types, field);
            shown.push(name.to_string());
            break;
        }
        message = &types[field.type_name()];
        let object = cursor.as_object_mut().unwrap();
        if field.label() == Label::Repeated {
            let list = object.entry(key).or_insert_with(|| json!([{}]));
            shown.push(format!("{name}[0]"));
            cursor = &mut list[0];
        } else {
            shown.push(name.to_string());
            cursor = object.entry(key).or_insert_with(|| json!({}));
        }
    }
    (value, shown.join("."))
}

fn from_json<T: serde::de::DeserializeOwned>(body: Value) -> T {
    serde_json::from_value(body).expect("a request in proto3 JSON")
}

fn violations(status: &tonic::Status) -> Vec<String> {
    details(status)
        .bad_request()
        .map(|bad| bad.field_violations.iter().map(|violation| violation.field.clone()).collect())
        .unwrap_or_default()
}

fn assert_refused(status: &tonic::Status, field: &str) {
    assert_eq!(
        (status.code(), reason(status).as_str()),
        (Code::Unimplemented, "CWSANDBOX_NOT_IMPLEMENTED"),
        "{field}: {status:?}"
    );
    assert_eq!(violations(status), [field], "{status:?}");
    assert!(status.message().contains(field), "the message names {field}: {status:?}");
}

/// The refused rows, each as a path in a request: the table's own, and those a message that
/// follows another's rows (`Handling::SameAs`) reaches, spelled under its own path.
fn refused_paths() -> Vec<String> {
    let mut paths: Vec<String> =
        FIELDS.iter().filter(|rule| rule.handling == Handling::Refused).map(|rule| rule.path.to_owned()).collect();
    for rule in FIELDS {
        if let Handling::SameAs(target) = rule.handling {
            let under = format!("{target}.");
            paths.extend(
                FIELDS
                    .iter()
                    .filter(|refused| refused.handling == Handling::Refused)
                    .filter_map(|refused| refused.path.strip_prefix(&under))
                    .map(|rest| format!("{}.{rest}", rule.path)),
            );
        }
    }
    paths
}

#[tokio::test]
async fn every_refused_field_set_in_a_valid_request_is_refused_by_name() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.admin_token).await;
    let mut templates =
        cwsandbox_api::sandbox_v1::sandbox_template_service_client::SandboxTemplateServiceClient::with_interceptor(
            channel(&emulator).await,
            Bearer(info.admin_token.clone()),
        );
    let types = message_types();
    let create_base = serde_json::to_value(create_request(client_spec(&info.runner_id), "")).unwrap();
    let delete_base =
        serde_json::to_value(pb::DeleteSandboxRequest { sandbox_id: "sb-1".to_owned(), ..Default::default() }).unwrap();
    let file_base = json!({
        "type": "SANDBOX_FILE_TYPE_COMPOSE",
        "contents": "c2VydmljZXM6IHthcHA6IHtpbWFnZTogcHl0aG9uOjMuMTF9fQ==",
        "primaryService": "app",
        "runnerIds": [info.runner_id],
    });
    let template = json!({"displayName": "t", "spec": {"containers": [{"name": "main", "image": "python:3.11"}]}});
    let template_base = json!({"sandboxTemplate": template});
    let update_base = json!({"sandboxTemplateId": "t-1", "sandboxTemplate": template});
    let from_template_base = json!({"templateId": "t-1"});
    let mut volumes = cwsandbox_api::sandbox_v1::volume_service_client::VolumeServiceClient::with_interceptor(
        channel(&emulator).await,
        Bearer(info.admin_token.clone()),
    );
    let volume_base = json!({"volume": {"volumeId": "data", "spec": {"pvc": {
        "runnerId": info.runner_id, "namespace": "datasets", "claimName": "data"
    }}}});
    let mut checked = HashSet::new();
    for path in refused_paths() {
        let request_type = path.split('.').next().unwrap();
        let base = match request_type {
            "CreateSandboxRequest" => &create_base,
            "DeleteSandboxRequest" => &delete_base,
            "CreateSandboxFromFileRequest" => &file_base,
            "CreateSandboxTemplateRequest" => &template_base,
            "UpdateSandboxTemplateRequest" => &update_base,
            "CreateSandboxFromTemplateRequest" => &from_template_base,
            "CreateVolumeRequest" => &volume_base,
            other => panic!("{path}: no case here calls {other}'s RPC: add one"),
        };
        let (body, field) = with_field(&types, base, &path);
        let error = match request_type {
            "CreateSandboxRequest" => client.create_sandbox(from_json::<pb::CreateSandboxRequest>(body)).await.err(),
            "DeleteSandboxRequest" => client.delete_sandbox(from_json::<pb::DeleteSandboxRequest>(body)).await.err(),
            "CreateSandboxFromFileRequest" => {
                client.create_sandbox_from_file(from_json::<pb::CreateSandboxFromFileRequest>(body)).await.err()
            }
            "CreateSandboxFromTemplateRequest" => {
                client.create_sandbox_from_template(from_json::<pb::CreateSandboxFromTemplateRequest>(body)).await.err()
            }
            "CreateSandboxTemplateRequest" => {
                templates.create_sandbox_template(from_json::<pb::CreateSandboxTemplateRequest>(body)).await.err()
            }
            "CreateVolumeRequest" => volumes.create_volume(from_json::<pb::CreateVolumeRequest>(body)).await.err(),
            _ => templates.update_sandbox_template(from_json::<pb::UpdateSandboxTemplateRequest>(body)).await.err(),
        };
        assert_refused(&error.unwrap_or_else(|| panic!("{path} was accepted")), &field);
        checked.insert(path);
    }
    // (CreateSandboxFromFileRequest follows the spec's network options, none of which is
    // refused since the sandbox networks.)
    for (request, alias) in [
        ("CreateSandboxFromTemplateRequest", "overrides.network_ids"),
        ("CreateSandboxTemplateRequest", "sandbox_template.spec.containers.startup_probe"),
    ] {
        assert!(checked.contains(&format!("{request}.{alias}")), "the rows another message follows were walked");
    }
    assert!(checked.len() > 20, "the refused rows were walked: {checked:?}");

    // A second container's refused fields are named by its own index.
    let mut two = client_spec(&info.runner_id);
    let mut sidecar = pb::Container { name: "sidecar".to_owned(), ..two.containers[0].clone() };
    sidecar.security_context =
        Some(pb::SecurityContext { read_only_root_filesystem: Some(true), ..Default::default() });
    two.containers.push(sidecar);
    let error = client.create_sandbox(create_request(two, "")).await.unwrap_err();
    assert_refused(&error, "sandbox.spec.containers[1].security_context.read_only_root_filesystem");

    // Several at once: every one named, and nothing was created.
    let mut many = client_spec(&info.runner_id);
    many.containers[0].security_context =
        Some(pb::SecurityContext { read_only_root_filesystem: Some(true), ..Default::default() });
    many.network_ids = vec!["net".to_owned()];
    let error = client.create_sandbox(create_request(many, "")).await.unwrap_err();
    assert_eq!(
        violations(&error),
        ["sandbox.spec.containers[0].security_context.read_only_root_filesystem", "sandbox.spec.network_ids"]
    );
    let listed = client.list_sandboxes(pb::ListSandboxesRequest::default()).await.unwrap().into_inner();
    assert!(listed.sandboxes.is_empty(), "a refused request creates nothing: {listed:?}");
}

/// The published client's defaults (fields it sends at their default values) are not refusals.
#[tokio::test]
async fn fields_at_their_defaults_are_accepted() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let mut spec = client_spec(&info.runner_id);
    spec.network =
        Some(pb::NetworkOptions { deny_egress: Some(false), deny_ingress: Some(false), ..Default::default() });
    spec.containers[0].security_context = Some(pb::SecurityContext { privileged: Some(false), ..Default::default() });
    client.create_sandbox(create_request(spec, "")).await.expect("accepted");
}

#[tokio::test]
async fn every_refused_rpc_answers_unimplemented_whatever_it_is_sent() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let channel = channel(&emulator).await;
    for (method, _) in REFUSED_METHODS {
        let (service, name) = method.split_once('.').unwrap();
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let path = http::uri::PathAndQuery::from_str(&format!("/coreweave.sandbox.v1.{service}/{name}")).unwrap();
        // An empty message is the empty request of every type.
        let mut request = tonic::Request::new(pbjson_types::Empty {});
        request.metadata_mut().insert("authorization", format!("Bearer {}", info.admin_token).parse().unwrap());
        let codec = tonic_prost::ProstCodec::<pbjson_types::Empty, pbjson_types::Empty>::default();
        let error = grpc.unary(request, path, codec).await.expect_err(method);
        assert_eq!(
            (error.code(), reason(&error).as_str()),
            (Code::Unimplemented, "CWSANDBOX_NOT_IMPLEMENTED"),
            "{method}: {error:?}"
        );
    }
}

#[tokio::test]
async fn loose_strictness_accepts_refused_fields_and_creates_the_sandbox() {
    let emulator = start_with("strictness: loose\n", None).await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let mut spec = client_spec(&info.runner_id);
    spec.containers[0].security_context =
        Some(pb::SecurityContext { read_only_root_filesystem: Some(true), ..Default::default() });
    let sized = pb::ScratchVolume { size: "1Gi".to_owned(), ..Default::default() };
    spec.volumes = vec![pb::SandboxVolume {
        name: "scratch".to_owned(),
        source: Some(pb::sandbox_volume::Source::Scratch(sized)),
    }];
    spec.services = vec![pb::Service { port: 8080, ..Default::default() }];
    spec.network = Some(pb::NetworkOptions { deny_egress: Some(true), ..Default::default() });
    let created = client.create_sandbox(create_request(spec, "")).await.expect("loose accepts").into_inner();
    assert!(!created.sandbox_id.is_empty());
    let deleted = client
        .delete_sandbox(pb::DeleteSandboxRequest { sandbox_id: created.sandbox_id.clone(), ..Default::default() })
        .await
        .expect("loose accepts")
        .into_inner();
    assert_eq!(deleted.sandbox.map(|sandbox| sandbox.sandbox_id), Some(created.sandbox_id));
}
