//! Volumes through the API and the process executor. A registered volume's claim is one
//! organization's, in one cluster: two organizations whose runners see a claim of one namespace
//! and name (in two clusters, or in one) each get their own data; a claim the values give to one
//! organization is not found for another. A mounted file under a scratch volume's mount path is
//! placed on the volume (as Kubernetes places a subPath file over an emptyDir); under a
//! registered volume's it is refused by name.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::sandbox_service_client::SandboxServiceClient;
use cwsandbox_api::sandbox_v1::volume_service_client::VolumeServiceClient;
use cwsandbox_emulator::Emulator;
use cwsandbox_emulator::executor_runtime::ExecutorRuntime;
use cwsandbox_emulator::runtime::SandboxRuntime;
use cwsandbox_executor::{ExecutorConfig, Isolation};
use tonic::Code;

/// Org A's runner in cluster 1; org B's in cluster 2 and in cluster 1. Every organization's
/// `datasets/p6claim` (no scope); `datasets/owned` only org A's, in cluster 1.
const OVERLAY: &str = r#"
runners:
  - {org: org-a, runnerId: runner-a, zone: us-east-04a, clusterId: cluster-1, policy: {}}
  - {org: org-b, runnerId: runner-b, zone: us-east-04a, clusterId: cluster-2, policy: {}}
  - {org: org-b, runnerId: runner-b1, zone: us-east-04a, clusterId: cluster-1, policy: {}}
persistentVolumeClaims:
  - {namespace: datasets, name: p6claim}
  - {namespace: datasets, name: owned, clusterId: cluster-1, org: org-a}
auth:
  tokens:
    - {token: operator, org: operations, user: operator, uid: 0, roles: [cluster_admin]}
    - {token: a-user, org: org-a, user: alice, uid: 1001, roles: [sandbox_user]}
    - {token: b-user, org: org-b, user: bob, uid: 1002, roles: [sandbox_user]}
"#;

struct Setup {
    emulator: Emulator,
    _root: tempfile::TempDir,
}

/// The emulator with the executor as its runtime, or `None` where sandboxes get no root of their
/// own to mount a volume in (no namespaces here).
async fn setup() -> Option<Setup> {
    let root = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(root.path());
    config.warm_sandboxes = 0;
    let runtime = Arc::new(ExecutorRuntime::new(config, Duration::from_secs(3600)).expect("executor"));
    if runtime.executor().isolation() != Isolation::Namespaces {
        eprintln!("skipped: plain processes have no root of their own to mount a volume in");
        return None;
    }
    let emulator = start_with(OVERLAY, Some(runtime as Arc<dyn SandboxRuntime>)).await;
    Some(Setup { emulator, _root: root })
}

impl Setup {
    async fn volumes(&self, token: &str) -> VolumeServiceClient<Authed> {
        VolumeServiceClient::with_interceptor(channel(&self.emulator).await, Bearer(token.to_owned()))
    }

    /// Registers `id` on `runner`'s claim `datasets/claim` and returns it once checked.
    async fn register(&self, token: &str, id: &str, runner: &str, claim: &str) -> pb::Volume {
        let mut volumes = self.volumes(token).await;
        let spec = pb::VolumeSpec {
            source: Some(pb::volume_spec::Source::Pvc(pb::PvcVolumeSource {
                runner_id: runner.to_owned(),
                namespace: "datasets".to_owned(),
                claim_name: claim.to_owned(),
                sub_path: String::new(),
            })),
            ..Default::default()
        };
        let volume = pb::Volume { volume_id: id.to_owned(), spec: Some(spec), ..Default::default() };
        volumes
            .create_volume(pb::CreateVolumeRequest { volume: Some(volume), request_id: String::new() })
            .await
            .unwrap();
        // The check runs at the emulator's next call.
        volumes.get_volume(pb::GetVolumeRequest { volume_id: id.to_owned() }).await.unwrap().into_inner()
    }

    /// A RUNNING sandbox of `token`'s organization with volume `id` at `/data`.
    async fn mounting(&self, token: &str, id: &str) -> Result<String, tonic::Status> {
        self.start(token, mounting(pb::sandbox_volume::Source::VolumeId(id.to_owned()), &[])).await
    }

    /// A sandbox of `token`'s organization made from `spec`, RUNNING.
    async fn start(&self, token: &str, spec: pb::SandboxSpec) -> Result<String, tonic::Status> {
        let created =
            sandboxes(&self.emulator, token).await.create_sandbox(create_request(spec, "")).await?.into_inner();
        advance(&self.emulator, Duration::from_secs(2));
        assert!(self.emulator.app().driver().effects_applied(Duration::from_secs(30)).await);
        let sandbox = sandbox_of(&self.emulator, token, &created.sandbox_id).await;
        assert_eq!(state_of(&sandbox), pb::State::Running, "{:?}", sandbox.status);
        Ok(created.sandbox_id)
    }

    /// Runs `script` in the sandbox and returns its stdout.
    async fn sh(&self, token: &str, sandbox_id: &str, script: &str) -> String {
        let mut client: SandboxServiceClient<Authed> = sandboxes(&self.emulator, token).await;
        let request = pb::ExecRequest {
            sandbox_id: sandbox_id.to_owned(),
            command: ["sh", "-c", script].map(str::to_owned).to_vec(),
            ..Default::default()
        };
        let response = client.exec(request).await.unwrap().into_inner();
        assert_eq!(response.exit_code, 0, "{script}: {}", String::from_utf8_lossy(&response.stderr));
        String::from_utf8_lossy(&response.stdout).into_owned()
    }
}

/// A sandbox with `volume` mounted at `/data` and the mounted `files`.
fn mounting(volume: pb::sandbox_volume::Source, files: &[(&str, &str)]) -> pb::SandboxSpec {
    pb::SandboxSpec {
        containers: vec![pb::Container {
            volume_mounts: vec![pb::VolumeMount {
                volume: "data".to_owned(),
                mount_path: "/data".to_owned(),
                ..Default::default()
            }],
            files: files
                .iter()
                .map(|(path, content)| pb::FileMount { path: (*path).to_owned(), content: content.as_bytes().to_vec() })
                .collect(),
            ..client_spec("").containers.remove(0)
        }],
        volumes: vec![pb::SandboxVolume { name: "data".to_owned(), source: Some(volume) }],
        mode: pb::SandboxMode::Cks as i32,
        ..Default::default()
    }
}

fn state(volume: &pb::Volume) -> (pb::VolumeState, String) {
    let status = volume.status.clone().unwrap_or_default();
    (pb::VolumeState::try_from(status.state).unwrap_or_default(), status.state_reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_data_is_one_organizations_in_one_cluster() {
    let Some(setup) = setup().await else { return };
    // Org A writes a marker through its volume on p6claim.
    let a = setup.register("a-user", "data", "runner-a", "p6claim").await;
    assert_eq!(state(&a).0, pb::VolumeState::Ready, "{:?}", state(&a));
    let writer = setup.mounting("a-user", "data").await.unwrap();
    setup.sh("a-user", &writer, "echo org-a-secret > /data/marker").await;

    // Org B's volumes of a claim of the same name: in another cluster, and in org A's cluster.
    for (id, runner) in [("far", "runner-b"), ("near", "runner-b1")] {
        let b = setup.register("b-user", id, runner, "p6claim").await;
        assert_eq!(state(&b).0, pb::VolumeState::Ready, "{id}: {:?}", state(&b));
        let reader = setup.mounting("b-user", id).await.unwrap();
        let seen = setup.sh("b-user", &reader, "ls -A /data; cat /data/marker 2>/dev/null; true").await;
        assert_eq!(seen, "", "org B's volume {id} on {runner} shows org A's files");
        setup.sh("b-user", &reader, &format!("echo {id} > /data/b-{id}")).await;
    }

    // Org A's claim is still its own, and holds only its own files.
    let again = setup.mounting("a-user", "data").await.unwrap();
    assert_eq!(setup.sh("a-user", &again, "ls -A /data; cat /data/marker").await, "marker\norg-a-secret\n");

    // A claim the values give to org A: not found for org B, even in org A's cluster.
    let taken = setup.register("b-user", "taken", "runner-b1", "owned").await;
    let (taken_state, why) = state(&taken);
    assert_eq!(taken_state, pb::VolumeState::Error);
    assert!(
        why.contains(r#"persistentvolumeclaims "owned" not found in namespace "datasets" of runner "runner-b1"'s cluster "cluster-1""#),
        "{why}"
    );
    let refused = setup.mounting("b-user", "taken").await.unwrap_err();
    assert_eq!((refused.code(), reason(&refused).as_str()), (Code::FailedPrecondition, "CWSANDBOX_VOLUME_NOT_READY"));
    assert_eq!(state(&setup.register("a-user", "owned", "runner-a", "owned").await).0, pb::VolumeState::Ready);
    setup.emulator.stop().await;
}

/// A mounted file under a scratch volume's mount path is on top of the volume, as Kubernetes
/// places a subPath file mounted under an emptyDir (it was hidden by the volume); under a
/// registered volume's it is INVALID_ARGUMENT naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_file_under_a_volumes_mount_path() {
    let Some(setup) = setup().await else { return };
    let scratch = pb::sandbox_volume::Source::Scratch(pb::ScratchVolume::default());
    let files = [("/data/conf/app.yaml", "key: value\n"), ("/data/top.txt", "top\n"), ("/etc2/other", "o\n")];
    let sandbox = setup.start("a-user", mounting(scratch, &files)).await.unwrap();
    let seen = setup.sh("a-user", &sandbox, "cat /data/conf/app.yaml /data/top.txt /etc2/other").await;
    assert_eq!(seen, "key: value\ntop\no\n", "the files are on the volume, not hidden by it");
    // The volume is the sandbox's to write beside them, and the file is writable as other
    // mounted files are.
    let written = setup
        .sh(
            "a-user",
            &sandbox,
            "echo more > /data/conf/more && echo changed > /data/top.txt && ls /data/conf && cat /data/top.txt",
        )
        .await;
    assert_eq!(written, "app.yaml\nmore\nchanged\n");

    let _ = setup.register("a-user", "data", "runner-a", "p6claim").await;
    let spec = mounting(pb::sandbox_volume::Source::VolumeId("data".to_owned()), &[("/data/conf/app.yaml", "x")]);
    let refused = setup.start("a-user", spec).await.unwrap_err();
    assert_eq!((refused.code(), reason(&refused).as_str()), (Code::InvalidArgument, "CWSANDBOX_INVALID_REQUEST"));
    let fields: Vec<String> = details(&refused)
        .bad_request()
        .map(|bad| bad.field_violations.iter().map(|v| v.field.clone()).collect())
        .unwrap_or_default();
    assert_eq!(fields, ["sandbox.spec.containers[0].files[0].path"], "{refused:?}");
    setup.emulator.stop().await;
}
