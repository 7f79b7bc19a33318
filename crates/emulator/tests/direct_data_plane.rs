//! ConnectSandbox and the direct data plane against a real server on port 0 (the fake runtime):
//! the certificate ConnectSandbox signs reaches SandboxDataPlaneService on the endpoint it names,
//! over mutual TLS, for its own sandbox and granted operations only, until it expires by the
//! emulator's clock; the gateway path keeps working beside it.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::exec_stream_response::Message as Reply;
use cwsandbox_api::sandbox_v1::sandbox_data_plane_service_client::SandboxDataPlaneServiceClient;
use cwsandbox_api::sandbox_v1::sandbox_service_client::SandboxServiceClient;
use cwsandbox_emulator::Emulator;
use cwsandbox_emulator::direct::CERTIFICATE_LIFETIME;
use cwsandbox_emulator::runtime::SandboxRuntime;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tonic::Code;
use tonic::transport::{Channel, Endpoint, Uri};

use pb::SandboxDataPermission as Permission;

const EVERY_PERMISSION: [Permission; 5] =
    [Permission::Exec, Permission::StreamExec, Permission::StreamLogs, Permission::WriteFile, Permission::ReadFile];

/// An emulator with the fake runtime and `count` RUNNING sandboxes of the user, which live an
/// hour (the default lifetime is a certificate's).
async fn running(count: usize) -> (Emulator, SandboxServiceClient<Authed>, Vec<String>) {
    let runtime = FakeRuntime::new();
    let emulator = start_with("", Some(runtime as Arc<dyn SandboxRuntime>)).await;
    let info = emulator.info().clone();
    let mut client = sandboxes(&emulator, &info.user_token).await;
    let mut ids = Vec::new();
    for _ in 0..count {
        let mut spec = client_spec(&info.runner_id);
        spec.max_lifetime_seconds = 3600;
        let created = client.create_sandbox(create_request(spec, "")).await.unwrap().into_inner();
        ids.push(created.sandbox_id);
    }
    advance(&emulator, Duration::from_secs(2));
    for id in &ids {
        assert_eq!(state_of(&sandbox_of(&emulator, &info.user_token, id).await), pb::State::Running);
    }
    (emulator, client, ids)
}

/// A client key as the published client makes one (P-256) and a CSR for it with an empty subject.
fn key_and_csr() -> (rcgen::KeyPair, Vec<u8>) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).unwrap().der().to_vec();
    (key, csr)
}

/// A certificate for `sandbox_id` with `permissions`, and its key.
async fn connect(
    client: &mut SandboxServiceClient<Authed>,
    sandbox_id: &str,
    permissions: &[Permission],
) -> (pb::SandboxConnection, rcgen::KeyPair) {
    let (key, csr_der) = key_and_csr();
    let connection = client
        .connect_sandbox(pb::ConnectSandboxRequest {
            sandbox_id: sandbox_id.to_owned(),
            csr_der,
            requested_permissions: permissions.iter().map(|permission| *permission as i32).collect(),
        })
        .await
        .expect("ConnectSandbox")
        .into_inner();
    (connection, key)
}

/// A TLS client configuration trusting `ca_pem`, presenting `identity` (chain PEM, key) if any.
fn client_tls(ca_pem: &[u8], identity: Option<(&[u8], &rcgen::KeyPair)>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain_pem, key)) => {
            let chain = CertificateDer::pem_slice_iter(chain_pem).map(Result::unwrap).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::Pkcs8(key.serialize_der().into())).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// A gRPC channel to the direct endpoint over mutual TLS, verifying the server as the published
/// client does (the endpoint's IP address against the CA the connection names).
async fn direct_channel(
    endpoint_uri: &str,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Channel, tonic::transport::Error> {
    let address: std::net::SocketAddr =
        endpoint_uri.strip_prefix("https://").expect("an https endpoint").parse().unwrap();
    let connector = tokio_rustls::TlsConnector::from(tls);
    Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(address).await?;
                let tls = connector.connect(ServerName::IpAddress(address.ip().into()), tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
}

async fn data_plane(
    connection: &pb::SandboxConnection,
    key: &rcgen::KeyPair,
) -> SandboxDataPlaneServiceClient<Channel> {
    let tls = client_tls(&connection.server_ca_bundle_pem, Some((&connection.client_certificate_chain_pem, key)));
    SandboxDataPlaneServiceClient::new(direct_channel(&connection.endpoint_uri, tls).await.expect("mutual TLS"))
}

fn exec(sandbox_id: &str, command: &[&str]) -> pb::ExecRequest {
    pb::ExecRequest {
        sandbox_id: sandbox_id.to_owned(),
        command: command.iter().map(|word| (*word).to_owned()).collect(),
        ..Default::default()
    }
}

fn read(sandbox_id: &str, path: &str) -> pb::ReadFileRequest {
    pb::ReadFileRequest { sandbox_id: sandbox_id.to_owned(), path: path.to_owned(), ..Default::default() }
}

#[tokio::test]
async fn a_certificate_acts_on_its_own_sandbox_with_every_operation_granted() {
    let (emulator, mut client, ids) = running(2).await;
    let (a, b) = (&ids[0], &ids[1]);
    let now = cwsandbox_sim::time::Clock::now(emulator.app().driver().clock());
    let (connection, key) = connect(&mut client, a, &EVERY_PERMISSION).await;
    assert_eq!(connection.transport, pb::SandboxDataTransport::DirectMtls as i32);
    assert_eq!(connection.protocol, pb::SandboxDataProtocol::ConnectH2V1 as i32);
    assert!(connection.endpoint_uri.starts_with("https://127.0.0.1:"), "{}", connection.endpoint_uri);
    assert_ne!(connection.endpoint_uri, emulator.info().base_url.replace("http://", "https://"), "a port of its own");
    assert!(!connection.endpoint_id.is_empty());
    let granted: BTreeSet<i32> = connection.granted_permissions.iter().copied().collect();
    assert_eq!(granted, EVERY_PERMISSION.iter().map(|permission| *permission as i32).collect());
    let expires = connection.expires_at.expect("expires_at").seconds;
    let lifetime = expires - now.millis() / 1000;
    assert!((CERTIFICATE_LIFETIME.as_secs() as i64 - 1..=CERTIFICATE_LIFETIME.as_secs() as i64).contains(&lifetime));

    let mut direct = data_plane(&connection, &key).await;
    let answer = direct.exec(exec(a, &["echo", "direct"])).await.expect("Exec on its sandbox").into_inner();
    assert_eq!((answer.exit_code, answer.stdout.as_slice()), (0, b"direct\n".as_slice()));
    direct
        .write_file(pb::WriteFileRequest {
            sandbox_id: a.clone(),
            path: "/tmp/direct.txt".to_owned(),
            content: b"over mTLS".to_vec(),
            ..Default::default()
        })
        .await
        .expect("WriteFile");
    let file = direct.read_file(read(a, "/tmp/direct.txt")).await.expect("ReadFile").into_inner();
    assert_eq!(file.content, b"over mTLS");
    let init = exec_init(a, &["echo", "streamed"]);
    let mut frames = direct.stream_exec(tokio_stream::iter(vec![init])).await.expect("StreamExec").into_inner();
    let mut replies = Vec::new();
    while let Some(frame) = frames.message().await.unwrap() {
        replies.push(frame.message.unwrap());
    }
    assert!(matches!(replies.first(), Some(Reply::Ready(_))), "{replies:?}");
    assert!(matches!(replies.last(), Some(Reply::Exit(pb::ExecStreamExit { exit_code: 0, .. }))), "{replies:?}");
    direct
        .stream_logs(pb::StreamLogsRequest { sandbox_id: a.clone(), ..Default::default() })
        .await
        .expect("StreamLogs on its sandbox");

    // Sandbox B, of the same user: not with A's certificate, whatever the operation.
    let error = direct.exec(exec(b, &["echo", "no"])).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::PermissionDenied, "CWSANDBOX_PERMISSION_DENIED"));
    assert!(error.message().contains(&format!("acts on sandbox {a} only")), "{}", error.message());
    let error = direct.read_file(read(b, "/tmp/direct.txt")).await.unwrap_err();
    assert_eq!(error.code(), Code::PermissionDenied);
    let init_b = exec_init(b, &["true"]);
    let error = direct.stream_exec(tokio_stream::iter(vec![init_b])).await.unwrap_err();
    assert_eq!(error.code(), Code::PermissionDenied);

    // The gateway path keeps working beside it, for both sandboxes.
    let gateway = client.exec(exec(b, &["echo", "gateway"])).await.expect("gateway Exec").into_inner();
    assert_eq!(gateway.stdout, b"gateway\n");
    let mut gateway_data_plane = SandboxDataPlaneServiceClient::with_interceptor(
        channel(&emulator).await,
        Bearer(emulator.info().user_token.clone()),
    );
    gateway_data_plane.exec(exec(a, &["true"])).await.expect("SandboxDataPlaneService on the API's port");
}

#[tokio::test]
async fn an_operation_not_granted_is_refused() {
    let (_emulator, mut client, ids) = running(1).await;
    let id = &ids[0];
    let (connection, key) = connect(&mut client, id, &[Permission::ReadFile, Permission::ReadFile]).await;
    assert_eq!(connection.granted_permissions, vec![Permission::ReadFile as i32], "duplicates collapse");
    let mut direct = data_plane(&connection, &key).await;
    let error = direct.exec(exec(id, &["echo", "no"])).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::PermissionDenied, "CWSANDBOX_PERMISSION_DENIED"));
    assert!(error.message().contains("does not grant Exec"), "{}", error.message());
    let error = direct
        .write_file(pb::WriteFileRequest {
            sandbox_id: id.clone(),
            path: "/tmp/x".to_owned(),
            content: b"x".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::PermissionDenied);
    let init = exec_init(id, &["true"]);
    assert_eq!(direct.stream_exec(tokio_stream::iter(vec![init])).await.unwrap_err().code(), Code::PermissionDenied);
    let error = direct.read_file(read(id, "/missing")).await.unwrap_err();
    assert_eq!(error.code(), Code::NotFound, "the granted operation runs (and the file is missing)");

    // A certificate is no API credential: the endpoint serves the data plane only.
    let tls = client_tls(&connection.server_ca_bundle_pem, Some((&connection.client_certificate_chain_pem, &key)));
    let mut control = SandboxServiceClient::new(direct_channel(&connection.endpoint_uri, tls).await.unwrap());
    let error = control.get_sandbox(pb::GetSandboxRequest { sandbox_id: id.clone() }).await.unwrap_err();
    assert_eq!(error.code(), Code::PermissionDenied, "{error:?}");
}

#[tokio::test]
async fn an_expired_or_revoked_certificate_is_refused() {
    let (emulator, mut client, ids) = running(1).await;
    let id = &ids[0];
    let (connection, key) = connect(&mut client, id, &[Permission::Exec]).await;
    let mut direct = data_plane(&connection, &key).await;
    direct.exec(exec(id, &["true"])).await.expect("valid now");

    // Expiry is by the emulator's clock: the open connection's next call, and any new handshake.
    advance(&emulator, CERTIFICATE_LIFETIME);
    let error = direct.exec(exec(id, &["true"])).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::Unauthenticated, "CWSANDBOX_UNAUTHENTICATED"));
    assert!(error.message().contains("expired"), "{}", error.message());
    let tls = client_tls(&connection.server_ca_bundle_pem, Some((&connection.client_certificate_chain_pem, &key)));
    let refused = match direct_channel(&connection.endpoint_uri, tls).await {
        Err(_) => true,
        // The handshake may end only when the first request meets the server's alert.
        Ok(channel) => SandboxDataPlaneServiceClient::new(channel).exec(exec(id, &["true"])).await.is_err(),
    };
    assert!(refused, "an expired certificate does not complete a handshake");

    // A fresh certificate works again; a full Reset revokes it.
    let (connection, key) = connect(&mut client, id, &[Permission::Exec]).await;
    let mut direct = data_plane(&connection, &key).await;
    direct.exec(exec(id, &["true"])).await.expect("a fresh certificate");
    emulator_service(&emulator, &emulator.info().admin_token.clone())
        .await
        .reset(cwsandbox_api::emulator_v1::ResetRequest::default())
        .await
        .expect("Reset");
    let error = direct.exec(exec(id, &["true"])).await.unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated);
    assert!(error.message().contains("revoked"), "{}", error.message());
}

#[tokio::test]
async fn the_endpoint_requires_a_certificate_of_the_emulators_ca() {
    let (_emulator, mut client, ids) = running(1).await;
    let (connection, _) = connect(&mut client, &ids[0], &[Permission::Exec]).await;
    let refused = |result: Result<Channel, tonic::transport::Error>| {
        let id = ids[0].clone();
        async move {
            match result {
                Err(_) => true,
                Ok(channel) => SandboxDataPlaneServiceClient::new(channel).exec(exec(&id, &["true"])).await.is_err(),
            }
        }
    };
    // No client certificate.
    let tls = client_tls(&connection.server_ca_bundle_pem, None);
    assert!(refused(direct_channel(&connection.endpoint_uri, tls).await).await, "no certificate, no call");
    // A certificate the caller made itself, for the same key.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let forged = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().self_signed(&key).unwrap();
    let tls = client_tls(&connection.server_ca_bundle_pem, Some((forged.pem().as_bytes(), &key)));
    assert!(refused(direct_channel(&connection.endpoint_uri, tls).await).await, "a self-signed certificate");
    // (The issued certificate with another key cannot even be tried: rustls refuses to present a
    // certificate with a key that does not match it, and TLS's CertificateVerify proves the key.)
}

#[tokio::test]
async fn connect_sandbox_refuses_bad_requests_by_field_and_the_states_the_client_expects() {
    let overlay = r#"
auth:
  tokens:
    - {token: alice-a, org: default-org, user: alice, uid: 1001, roles: [sandbox_user]}
    - {token: bob-b, org: other-org, user: bob, uid: 1002, roles: [sandbox_user]}
"#;
    let runtime = FakeRuntime::new();
    let emulator = start_with(overlay, Some(runtime as Arc<dyn SandboxRuntime>)).await;
    let runner = emulator.info().runner_id.clone();
    let mut alice = sandboxes(&emulator, "alice-a").await;
    let id = alice.create_sandbox(create_request(client_spec(&runner), "")).await.unwrap().into_inner().sandbox_id;
    let (_, csr_der) = key_and_csr();
    let request = |csr_der: Vec<u8>, permissions: Vec<i32>| pb::ConnectSandboxRequest {
        sandbox_id: id.clone(),
        csr_der,
        requested_permissions: permissions,
    };
    let stream_exec = vec![Permission::StreamExec as i32];

    // Not RUNNING yet: FAILED_PRECONDITION, which the client falls back to the gateway from.
    let error = alice.connect_sandbox(request(csr_der.clone(), stream_exec.clone())).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::FailedPrecondition, "CWSANDBOX_SANDBOX_NOT_RUNNING"));
    advance(&emulator, Duration::from_secs(2));

    let violation = |error: &tonic::Status| {
        assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
        details(error).bad_request().expect("a BadRequest").field_violations[0].field.clone()
    };
    let error = alice.connect_sandbox(request(b"not a CSR".to_vec(), stream_exec.clone())).await.unwrap_err();
    assert_eq!(violation(&error), "csr_der");
    let error = alice.connect_sandbox(request(Vec::new(), stream_exec.clone())).await.unwrap_err();
    assert_eq!(violation(&error), "csr_der");
    let error = alice.connect_sandbox(request(csr_der.clone(), Vec::new())).await.unwrap_err();
    assert_eq!(violation(&error), "requested_permissions");
    let error = alice
        .connect_sandbox(request(csr_der.clone(), vec![Permission::Exec as i32, Permission::Unspecified as i32]))
        .await
        .unwrap_err();
    assert_eq!(violation(&error), "requested_permissions[1]");
    let error = alice.connect_sandbox(request(csr_der.clone(), vec![42])).await.unwrap_err();
    assert_eq!(violation(&error), "requested_permissions[0]");
    let error = alice
        .connect_sandbox(pb::ConnectSandboxRequest {
            sandbox_id: String::new(),
            ..request(csr_der.clone(), stream_exec.clone())
        })
        .await
        .unwrap_err();
    assert_eq!(violation(&error), "sandbox_id");

    // Another organization's sandbox does not exist for bob; nor does an unknown one.
    let mut bob = sandboxes(&emulator, "bob-b").await;
    let error = bob.connect_sandbox(request(csr_der.clone(), stream_exec.clone())).await.unwrap_err();
    assert_eq!((error.code(), reason(&error).as_str()), (Code::NotFound, "CWSANDBOX_SANDBOX_NOT_FOUND"));
    let error = alice
        .connect_sandbox(pb::ConnectSandboxRequest {
            sandbox_id: "sb-missing".to_owned(),
            ..request(csr_der.clone(), stream_exec.clone())
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::NotFound);
    // No token: UNAUTHENTICATED before anything is read.
    let error = sandboxes(&emulator, "")
        .await
        .connect_sandbox(request(csr_der.clone(), stream_exec.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated);

    alice.connect_sandbox(request(csr_der, stream_exec)).await.expect("RUNNING and alice's");
}
