//! The binary as users run it: `serve` on port 0 through the testkit harness, the guide's Connect
//! flow with real `curl` and `jq` (docs/facts/sunk-guide.md#step-2), `exec`, clean exits and
//! readable configuration errors.

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
        // The serverless pool's Nodes are in the simulated cluster too (the emulator README says so).
        "node/node-cpu-0\nnode/node-cpu-1\nnode/node-cpu-2\nnode/node-cpu-3\nnode/node-serverless-0\n\
         node/node-serverless-1\nnode/node-system-0\n"
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

// ------------------------------------------------------------------------------------------------
// Restart hygiene: what a killed emulator leaves behind
// ------------------------------------------------------------------------------------------------

/// How long a start may take before a test gives up (a debug build on a busy machine), as in
/// the testkit harness.
const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A line the emulator printed.
#[derive(Debug)]
enum Line {
    Out(String),
    Err(String),
    /// Both streams are closed: the process has exited.
    Closed,
}

/// `serve --listen 127.0.0.1:0 <args>` with both output streams read line by line into a channel
/// (the testkit's way of waiting: no sleeps, one bound for the whole start).
struct Serve {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<Line>,
    seen: Vec<String>,
}

impl Serve {
    fn spawn(args: &[&std::ffi::OsStr], env: &[(&str, &Path)]) -> anyhow::Result<Serve> {
        use std::io::BufRead;
        let mut command = Command::new(BINARY);
        // The process runtime, whatever this machine has: `auto` with runc and a network would
        // pull the python:3.11 these tests name.
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .env("CWSANDBOX_EMULATOR_RUNTIME", "process");
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let (sender, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let out = sender.clone();
        let readers = [
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = out.send(Line::Out(line));
                }
            }),
            std::thread::spawn({
                let err = sender.clone();
                move || {
                    for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                        let _ = err.send(Line::Err(line));
                    }
                }
            }),
        ];
        std::thread::spawn(move || {
            for reader in readers {
                let _ = reader.join();
            }
            let _ = sender.send(Line::Closed);
        });
        Ok(Serve { child, lines, seen: Vec::new() })
    }

    /// Waits for a line `wanted` accepts; `None` if the process exited first.
    fn wait_for(&mut self, wanted: impl Fn(&Line) -> bool) -> Option<String> {
        let started = std::time::Instant::now();
        loop {
            let line = self.lines.recv_timeout(START_TIMEOUT.saturating_sub(started.elapsed())).ok()?;
            match &line {
                Line::Closed => return None,
                Line::Out(text) | Line::Err(text) => {
                    self.seen.push(text.clone());
                    if wanted(&line) {
                        return Some(text.clone());
                    }
                }
            }
        }
    }

    fn wait_ready(&mut self) -> bool {
        self.wait_for(|line| matches!(line, Line::Out(text) if text == cwsandbox_testkit::emulator::READY_LINE))
            .is_some()
    }

    fn output(&self) -> String {
        self.seen.join("\n")
    }

    /// SIGKILL, reaped; its sandbox processes are killed too so that nothing outlives the test.
    fn kill_9(mut self) {
        let descendants = cwsandbox_testkit::procs::descendants(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        for process in descendants.iter().filter(|process| process.is_alive()) {
            let _ = Command::new("kill")
                .args(["-KILL", &process.pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ready_pid(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str::<serde_json::Value>(&text).ok()?["pid"].as_u64()
}

/// The sandbox directories under `root`, without the roots the executor made ahead of need
/// (`spare@<pid>.<n>`) and its runtimes' own hidden directories (`.runc`, `.gvisor`: a sandbox's
/// directory is named by its Pod's uid).
fn sandbox_dirs(root: &Path) -> Vec<std::path::PathBuf> {
    let hidden =
        |path: &std::path::PathBuf| path.file_name().is_some_and(|name| name.as_encoded_bytes().starts_with(b"."));
    let mut dirs: Vec<_> = entries(root).into_iter().filter(|path| !is_spare(path) && !hidden(path)).collect();
    dirs.sort();
    dirs
}

fn entries(root: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(root)
        .map(|entries| entries.flatten().filter(|entry| entry.path().is_dir()).map(|entry| entry.path()).collect())
        .unwrap_or_default()
}

/// A root made ahead of need, or a sandbox started ahead of need: the executor's, not a sandbox's.
fn is_spare(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("spare@") || name.starts_with("warm@"))
}

/// A running sandbox on an emulator started from the ready file at `ready`.
fn running_sandbox(ready: &Path) -> anyhow::Result<String> {
    let info: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(ready)?)?;
    let text = |key: &str| info[key].as_str().unwrap_or_default().to_owned();
    let post = |token: &str, method: &str, body: serde_json::Value| -> anyhow::Result<serde_json::Value> {
        let output = Command::new("curl")
            .args(["--silent", "--show-error", "--fail-with-body", "--max-time", "60", "-X", "POST"])
            .args(["-H", &format!("Authorization: Bearer {token}"), "-H", "Content-Type: application/json"])
            .args(["--data", &body.to_string(), &format!("{}/{method}", text("base_url"))])
            .output()?;
        anyhow::ensure!(output.status.success(), "{method}: {}", output_text(&output));
        Ok(serde_json::from_slice(&output.stdout)?)
    };
    let spec = serde_json::json!({"sandbox": {"spec": {
        "containers": [{"name": "main", "image": "python:3.11", "command": "/bin/sh", "args": ["-c", "sleep infinity"]}],
        "runnerIds": [text("runner_id")], "mode": "SANDBOX_MODE_CKS"}}});
    let created = post(&text("user_token"), "coreweave.sandbox.v1.SandboxService/CreateSandbox", spec)?;
    let id = created["sandboxId"].as_str().unwrap_or_default().to_owned();
    // Past the prolog at once; GetSandbox answers once the runtime has started the Pod.
    let emulator = "coreweave.sandbox.emulator.v1.EmulatorService";
    post(&text("admin_token"), &format!("{emulator}/FreezeClock"), serde_json::json!({}))?;
    post(&text("admin_token"), &format!("{emulator}/AdvanceClock"), serde_json::json!({"duration": "2s"}))?;
    let sandbox = post(
        &text("user_token"),
        "coreweave.sandbox.v1.SandboxService/GetSandbox",
        serde_json::json!({"sandboxId": id}),
    )?;
    anyhow::ensure!(sandbox["status"]["state"] == "STATE_RUNNING", "{sandbox}");
    Ok(id)
}

#[test]
fn a_restart_after_kill_9_removes_the_dead_emulators_ready_file_and_sandbox_directories() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (ready, root) = (dir.path().join("ready.json"), dir.path().join("sandboxes"));
    let args = [std::ffi::OsStr::new("--ready-file"), ready.as_os_str(), "--sandbox-root".as_ref(), root.as_os_str()];
    let mut first = Serve::spawn(&args, &[])?;
    assert!(first.wait_ready(), "{}", first.output());
    let first_pid = first.child.id();
    running_sandbox(&ready)?;
    let left = sandbox_dirs(&root);
    assert_eq!(left.len(), 1, "one sandbox directory: {left:?}");
    first.kill_9();
    assert_eq!(ready_pid(&ready), Some(u64::from(first_pid)), "kill -9 leaves the ready file");

    let mut second = Serve::spawn(&args, &[])?;
    let second_pid = u64::from(second.child.id());
    // The removal is the start's first step and says so; from then on, whenever the file is
    // there, it is the new emulator's.
    let removed = second.wait_for(|line| match line {
        Line::Err(text) => text.contains("removed the ready file"),
        Line::Out(text) => text == cwsandbox_testkit::emulator::READY_LINE,
        Line::Closed => false,
    });
    assert!(removed.is_some_and(|line| line.contains(&format!("pid {first_pid}"))), "{}", second.output());
    assert!(ready_pid(&ready).is_none_or(|pid| pid == second_pid), "the dead emulator's ready file is gone");
    loop {
        let line = second.wait_for(|_| true);
        assert!(ready_pid(&ready).is_none_or(|pid| pid == second_pid), "{}", second.output());
        match line {
            Some(line) if line == cwsandbox_testkit::emulator::READY_LINE => break,
            Some(_) => {}
            None => panic!("the emulator did not become ready:\n{}", second.output()),
        }
    }
    assert_eq!(ready_pid(&ready), Some(second_pid));
    assert!(!left[0].exists(), "the killed emulator's sandbox directory is removed: {}", second.output());
    let dead_spares: Vec<_> = entries(&root)
        .into_iter()
        .filter(|path| {
            let path = path.to_string_lossy();
            path.contains(&format!("spare@{first_pid}.")) || path.contains(&format!("warm@{first_pid}."))
        })
        .collect();
    assert!(
        dead_spares.is_empty(),
        "the killed emulator's made-ahead roots and sandboxes are removed: {dead_spares:?}"
    );
    assert!(second.output().contains(&format!("removed {}", left[0].display())), "{}", second.output());
    Ok(())
}

#[test]
fn a_second_emulator_on_a_live_ones_sandbox_root_or_ready_file_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (ready, root) = (dir.path().join("ready.json"), dir.path().join("sandboxes"));
    let mut first = Serve::spawn(&[ready_flag(), ready.as_os_str(), root_flag(), root.as_os_str()], &[])?;
    assert!(first.wait_ready(), "{}", first.output());
    let pid = first.child.id();

    let other_ready = dir.path().join("other.json");
    let mut second = Serve::spawn(&[ready_flag(), other_ready.as_os_str(), root_flag(), root.as_os_str()], &[])?;
    assert!(!second.wait_ready(), "it must not start: {}", second.output());
    let expected = format!("sandbox root {} is in use by emulator pid {pid}", root.display());
    assert!(second.output().contains(&expected), "{}", second.output());
    assert_eq!(second.child.wait()?.code(), Some(2));
    assert!(!other_ready.exists());

    let other_root = dir.path().join("other-sandboxes");
    let mut third = Serve::spawn(&[ready_flag(), ready.as_os_str(), root_flag(), other_root.as_os_str()], &[])?;
    assert!(!third.wait_ready(), "it must not start: {}", third.output());
    let expected = format!("the ready file {} belongs to the running emulator pid {pid}", ready.display());
    assert!(third.output().contains(&expected), "{}", third.output());
    assert_eq!(third.child.wait()?.code(), Some(2));
    assert_eq!(ready_pid(&ready), Some(u64::from(pid)), "the live emulator's ready file is kept");
    Ok(())
}

#[test]
fn the_default_sandbox_root_of_a_dead_emulator_is_removed_at_the_next_start() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dead = Command::new("true").spawn()?;
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait()?;
    let stale = temp.path().join(format!("cwsandbox-emulator-{dead_pid}"));
    std::fs::create_dir_all(stale.join("582d6717-a91d-279d-6c7c-5b1c60b890ff/tmp"))?;
    std::fs::write(stale.join(".cwsandbox-emulator.lock"), format!("{dead_pid}\n"))?;
    // Not a default root's name (the testkit's run directories look like this): kept.
    let other = temp.path().join(format!("cwsandbox-emulator-{dead_pid}-0"));
    std::fs::create_dir_all(&other)?;

    let mut serve = Serve::spawn(&[], &[("TMPDIR", temp.path())])?;
    assert!(serve.wait_ready(), "{}", serve.output());
    // Swept from the temporary directory also where the default root is in memory (/dev/shm).
    assert!(!stale.exists(), "{}", serve.output());
    assert!(other.exists());
    let parent = cwsandbox_executor::memory_backed_dir().unwrap_or_else(|| temp.path().to_owned());
    let live = parent.join(format!("cwsandbox-emulator-{}", serve.child.id()));
    assert!(live.join(".cwsandbox-emulator.lock").exists(), "no default root at {}", live.display());
    // A clean exit takes its default root with it.
    // Right after the ready file: the signal is caught from before the file is written.
    Command::new("kill").args(["-TERM", &serve.child.id().to_string()]).status()?;
    let status = serve.child.wait()?;
    assert!(status.success(), "SIGTERM stops the emulator cleanly: {status:?}\n{}", serve.output());
    assert!(!live.exists(), "{} is left after the emulator's exit", live.display());
    Ok(())
}

fn ready_flag() -> &'static std::ffi::OsStr {
    "--ready-file".as_ref()
}

fn root_flag() -> &'static std::ffi::OsStr {
    "--sandbox-root".as_ref()
}

/// `serve --strictness loose`: a CreateSandbox that sets fields the emulator does not emulate is
/// accepted, and the log names them in a warning; by default the same request is refused by name.
#[test]
fn strictness_loose_accepts_unemulated_fields_and_logs_them_by_name() -> anyhow::Result<()> {
    let create = |emulator: &EmulatorProcess| -> anyhow::Result<String> {
        let body = serde_json::json!({
            "sandbox": {"spec": {
                "containers": [{"name": "main", "image": "python:3.11", "command": "sleep", "args": ["60"],
                                "securityContext": {"readOnlyRootFilesystem": true}}],
                "networkIds": ["net"],
                "runnerIds": [emulator.ready.runner_id],
                "mode": "SANDBOX_MODE_CKS"
            }}
        });
        let output = Command::new("curl")
            .args(["--silent", "--show-error", "-X", "POST", "-H", "Content-Type: application/json", "-H"])
            .arg(format!("Authorization: Bearer {}", emulator.ready.user_token))
            .arg("--data")
            .arg(body.to_string())
            .arg(format!("{}/coreweave.sandbox.v1.SandboxService/CreateSandbox", emulator.ready.base_url))
            .output()?;
        Ok(output_text(&output))
    };
    let fields = ["sandbox.spec.containers[0].security_context.read_only_root_filesystem", "sandbox.spec.network_ids"];

    let strict = EmulatorProcess::start(Path::new(BINARY), &[])?;
    let refused = create(&strict)?;
    let refused: serde_json::Value = serde_json::from_str(&refused)?;
    assert_eq!(refused["code"], "unimplemented", "{refused}");
    for field in fields {
        assert!(refused["message"].as_str().is_some_and(|message| message.contains(field)), "names {field}: {refused}");
    }
    assert!(strict.stop()?.success());

    let loose = EmulatorProcess::start(Path::new(BINARY), &["--strictness", "loose"])?;
    let created: serde_json::Value = serde_json::from_str(&create(&loose)?)?;
    assert!(created["sandboxId"].as_str().is_some_and(|id| !id.is_empty()), "{created}");
    let log = loose.log();
    let warning = log.lines().find(|line| line.contains(" WARN ") && line.contains("strictness: loose"));
    let warning = warning.unwrap_or_else(|| panic!("no warning about the accepted fields in:\n{log}"));
    for field in fields {
        assert!(warning.contains(field), "the warning names {field}: {warning}");
    }
    assert!(loose.stop()?.success());
    Ok(())
}
