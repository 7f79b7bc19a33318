//! The binary as users run it: `serve` on port 0 through the testkit harness, the guide's Connect
//! flow with real `curl` and `jq`, `exec`, clean exits and readable configuration errors.

use std::path::Path;
use std::process::Command;

use cwsandbox_testkit::emulator::EmulatorProcess;

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");

fn output_text(output: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[test]
fn seed_step_two_with_curl_and_jq() -> anyhow::Result<()> {
    // The guide's starting point: an empty policy, so the update changes it and moves the etag.
    let emulator = EmulatorProcess::start(Path::new(BINARY), &["--scenario", "fresh"])?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/seed/step2.sh");
    let output = Command::new("bash").arg(&script).current_dir(emulator.dir()).envs(emulator.env()).output()?;
    assert!(output.status.success(), "{}\nemulator log:\n{}", output_text(&output), emulator.log());
    let status = emulator.stop()?;
    assert!(status.success(), "SIGTERM must end the emulator cleanly: {status:?}");
    Ok(())
}

#[test]
fn serve_writes_a_private_kubeconfig_that_kubectl_uses() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let emulator = EmulatorProcess::start(Path::new(BINARY), &[])?;
    let kubeconfig = emulator.dir().join("kubeconfig");
    assert_eq!(emulator.ready.kubeconfig, kubeconfig.display().to_string());
    let mode = std::fs::metadata(&kubeconfig)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the kubeconfig holds the admin token");
    let text = std::fs::read_to_string(&kubeconfig)?;
    assert!(text.contains(&emulator.ready.admin_token), "token auth with the admin token");
    let port = emulator.ready.base_url.rsplit(':').next().unwrap_or_default().to_owned();
    assert!(text.contains(&format!("https://127.0.0.1:{port}")), "TLS on the same port: {text}");
    let nodes = Command::new("kubectl").args(["get", "nodes", "-o", "name"]).envs(emulator.env()).output()?;
    assert!(nodes.status.success(), "{}\n{}", output_text(&nodes), emulator.log());
    assert_eq!(
        String::from_utf8_lossy(&nodes.stdout),
        "node/node-cpu-0\nnode/node-cpu-1\nnode/node-cpu-2\nnode/node-cpu-3\nnode/node-system-0\n"
    );
    // gRPC and Connect clients keep the plain port: the same port answers both.
    let health =
        Command::new("curl").args(["--silent", "--fail", &format!("{}/healthz", emulator.ready.base_url)]).output()?;
    assert_eq!(String::from_utf8_lossy(&health.stdout), "ok\n");
    let status = emulator.stop()?;
    assert!(status.success(), "{status:?}");
    Ok(())
}

#[test]
fn serve_reports_ready_quickly_and_exits_cleanly_on_sigterm() -> anyhow::Result<()> {
    let emulator = EmulatorProcess::start(Path::new(BINARY), &[])?;
    eprintln!("emulator ready after {:?}", emulator.startup);
    assert!(emulator.ready.base_url.starts_with("http://127.0.0.1:"), "{:?}", emulator.ready);
    assert!(!emulator.ready.admin_token.is_empty() && !emulator.ready.user_token.is_empty());
    assert_ne!(emulator.ready.admin_token, emulator.ready.user_token);
    assert_eq!(emulator.ready.runner_id, "cks-runner");
    let ready_file = emulator.dir().join("ready.json");
    let health =
        Command::new("curl").args(["--silent", "--fail", &format!("{}/healthz", emulator.ready.base_url)]).output()?;
    assert_eq!(String::from_utf8_lossy(&health.stdout), "ok\n");
    let status = emulator.stop()?;
    assert!(status.success(), "{status:?}");
    assert!(!ready_file.exists(), "the ready file is removed on exit");
    Ok(())
}

#[test]
fn exec_runs_the_command_against_a_fresh_emulator_and_returns_its_code() -> anyhow::Result<()> {
    let output = Command::new(BINARY)
        .args(["exec", "--", "sh", "-c"])
        .arg(concat!(
            r#"case "$CWSANDBOX_BASE_URL" in http://127.0.0.1:*) ;; *) exit 1;; esac; "#,
            r#"test -n "$CWSANDBOX_API_KEY" || exit 2; "#,
            r#"curl -s -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/json' "#,
            r#"-H "authorization: Bearer $CWSANDBOX_API_KEY" -d '{}' "#,
            r#""$CWSANDBOX_BASE_URL/coreweave.sandbox.v1.SandboxService/ListSandboxes" | grep -qx 200 || exit 3; "#,
            r#"kubectl get pods -n tenant-slurm -l app.kubernetes.io/name=sunk-scheduler -o name | grep -q '^pod/slurm-scheduler-' || exit 4; "#,
            "exit 7"
        ))
        .env("RUST_LOG", "warn")
        .output()?;
    assert_eq!(output.status.code(), Some(7), "{}", output_text(&output));
    Ok(())
}

#[test]
fn configuration_errors_name_the_file_and_key() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("values.yaml");
    std::fs::write(&values, "slurmConfig:\n  KillWiat: 60\n")?;
    let output = Command::new(BINARY).args(["serve", "--listen", "127.0.0.1:0", "-f"]).arg(&values).output()?;
    assert_eq!(output.status.code(), Some(2));
    let text = output_text(&output);
    assert!(text.contains("KillWiat"), "{text}");

    std::fs::write(&values, "slurmConfig: [unclosed\n")?;
    let output = Command::new(BINARY).args(["serve", "--listen", "127.0.0.1:0", "-f"]).arg(&values).output()?;
    assert_eq!(output.status.code(), Some(2));
    assert!(output_text(&output).contains("values.yaml"), "{}", output_text(&output));
    Ok(())
}

#[test]
fn configured_tokens_replace_the_generated_ones() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("auth.yaml");
    std::fs::write(
        &values,
        "auth:\n  tokens:\n    - {token: root-secret, org: default-org, user: root, roles: [sandbox_admin]}\n    - {token: bob-secret, org: default-org, user: bob, uid: 1002, roles: [sandbox_user]}\n",
    )?;
    let emulator = EmulatorProcess::start(Path::new(BINARY), &["-f", values.to_str().expect("utf-8 path")])?;
    assert_eq!(emulator.ready.admin_token, "root-secret");
    assert_eq!(emulator.ready.user_token, "bob-secret");
    Ok(())
}
