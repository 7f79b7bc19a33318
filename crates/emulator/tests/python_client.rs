//! The real published Python client (`cwsandbox==1.22.0`, from the testkit's pinned venv) talks to
//! an in-process emulator with the fake runtime: transport, auth header, the readiness poll, the
//! ConnectSandbox fallback, StreamExec, files, list and stop.

mod common;

use std::sync::Arc;

use common::*;
use cwsandbox_emulator::runtime::SandboxRuntime;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_runs_flow_a() {
    let python = tokio::task::spawn_blocking(cwsandbox_testkit::python_env).await.unwrap().expect("python venv");
    let runtime = FakeRuntime::new();
    let emulator = start_with("", Some(runtime as Arc<dyn SandboxRuntime>)).await;
    let info = emulator.info().clone();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/smoke.py");
    let output = tokio::process::Command::new(python.python())
        .arg(&script)
        .env("CWSANDBOX_BASE_URL", &info.base_url)
        .env("CWSANDBOX_API_KEY", &info.user_token)
        .env("RUNNER_ID", &info.runner_id)
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    emulator.stop().await;
}
