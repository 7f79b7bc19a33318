//! The machine's real `kubectl` against the binary with its process runtime: `kubectl exec` (plain,
//! `-i`, and `-it` under a pseudo-terminal from util-linux's `script`) runs in the sandbox's Pod
//! over the WebSocket stream protocol, with kubectl's exit codes, and `kubectl cp` through it; `kubectl describe node` shows the
//! requests of slurmd and the sandbox Pods on the Node (issue 16 item 20).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::sandbox_service_client::SandboxServiceClient;
use cwsandbox_testkit::emulator::EmulatorProcess;
use cwsandbox_testkit::in_process::{Bearer, client_spec, create_request};
use cwsandbox_testkit::{stdout_and_stderr, text};
use tonic::transport::Channel;

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");

/// Longest an interactive session may stay silent before the test gives up (a guard against a
/// hang, not a timing assertion).
const SILENCE_GUARD: Duration = Duration::from_secs(60);

struct Cluster {
    emulator: EmulatorProcess,
}

impl Cluster {
    fn start() -> Result<Cluster> {
        Ok(Cluster { emulator: EmulatorProcess::start(Path::new(BINARY), &["--timing", "instant"])? })
    }

    fn kubectl(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command.args(args).envs(self.emulator.env());
        command
    }

    fn kubectl_ok(&self, args: &[&str]) -> Result<String> {
        let output = self.kubectl(args).output()?;
        let (stdout, stderr) = stdout_and_stderr(&output);
        if !output.status.success() {
            bail!("kubectl {args:?}: {stderr}\nemulator log:\n{}", self.emulator.log());
        }
        Ok(stdout)
    }

    /// A RUNNING sandbox with the Python client's spec; its Pod's namespace and name.
    async fn sandbox(&self) -> Result<(String, String)> {
        let channel = Channel::from_shared(self.emulator.ready.base_url.clone())?.connect().await?;
        let mut client =
            SandboxServiceClient::with_interceptor(channel, Bearer(self.emulator.ready.admin_token.clone()));
        let spec = client_spec(&self.emulator.ready.runner_id);
        let created = client.create_sandbox(create_request(spec, "kubectl-exec")).await?.into_inner();
        // In `instant` timing GetSandbox answers once the runtime started the main process.
        let sandbox =
            client.get_sandbox(pb::GetSandboxRequest { sandbox_id: created.sandbox_id.clone() }).await?.into_inner();
        let state = sandbox.status.as_ref().map(|status| status.state).unwrap_or_default();
        if state != pb::State::Running as i32 {
            bail!("sandbox {} is {state:?}, not RUNNING", created.sandbox_id);
        }
        let selector = format!("sandbox.coreweave.com/sandbox-id={}", created.sandbox_id);
        let found = self.kubectl_ok(&[
            "get",
            "pods",
            "-A",
            "-l",
            &selector,
            "-o",
            "jsonpath={.items[0].metadata.namespace} {.items[0].metadata.name}",
        ])?;
        let (namespace, name) = found.split_once(' ').context("the sandbox's Pod")?;
        Ok((namespace.to_owned(), name.to_owned()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_runs_in_the_sandbox_pod() -> Result<()> {
    let cluster = Cluster::start()?;
    let (namespace, pod) = cluster.sandbox().await?;

    // Output on both streams, the Pod's hostname, and the command's exit code as kubectl's own.
    let output = cluster
        .kubectl(&["exec", "-n", &namespace, &pod, "--", "sh", "-c", "echo out; echo err >&2; hostname; exit 3"])
        .output()?;
    let (stdout, stderr) = stdout_and_stderr(&output);
    assert_eq!(stdout, format!("out\n{pod}\n"), "stderr: {stderr}");
    assert_eq!(stderr, "err\ncommand terminated with exit code 3\n");
    assert_eq!(output.status.code(), Some(3));

    // -i: stdin reaches the command and its end (v5's close signal) ends `cat`.
    let mut cat = cluster
        .kubectl(&["exec", "-i", "-n", &namespace, &pod, "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    cat.stdin.take().context("stdin")?.write_all(b"first line\nsecond line\n")?;
    let output = cat.wait_with_output()?;
    assert_eq!(stdout_and_stderr(&output), ("first line\nsecond line\n".to_owned(), String::new()));
    assert!(output.status.success());

    // `kubectl cp` is tar through exec, both ways.
    let scratch = tempfile::tempdir()?;
    let source = scratch.path().join("notes.txt");
    std::fs::write(&source, "copied in and out\n")?;
    let inside = format!("{namespace}/{pod}:/tmp/notes.txt");
    cluster.kubectl_ok(&["cp", &source.display().to_string(), &inside])?;
    let back = scratch.path().join("back.txt");
    cluster.kubectl_ok(&["cp", &inside, &back.display().to_string()])?;
    assert_eq!(std::fs::read_to_string(&back)?, "copied in and out\n");

    // kubectl going away (Ctrl-C) ends the command, as the kubelet ends an exec whose stream broke.
    let marker = format!("kubectl-exec-{}", std::process::id());
    // The marker is in the shell's own environment before it prints, so `started` means it is there.
    let mark = format!("CWSANDBOX_TEST_MARK={marker}");
    let mut left_running = cluster
        .kubectl(&["exec", "-n", &namespace, &pod, "--", "env", &mark, "sh", "-c", "echo started; exec sleep 4321"])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut started = [0u8; 8];
    left_running.stdout.take().context("stdout")?.read_exact(&mut started)?;
    assert_eq!(&started, b"started\n");
    let running = cwsandbox_testkit::procs::wait_until_found("CWSANDBOX_TEST_MARK", &marker, SILENCE_GUARD);
    assert!(!running.is_empty(), "the command runs");
    left_running.kill()?;
    left_running.wait()?;
    let survivors = cwsandbox_testkit::procs::wait_until_gone("CWSANDBOX_TEST_MARK", &marker, SILENCE_GUARD);
    assert!(survivors.is_empty(), "the command outlived its kubectl: {survivors:?}");

    // A command that cannot start: the shell's 127, as a container runtime's `sh -c` would give.
    let output = cluster.kubectl(&["exec", "-n", &namespace, &pod, "--", "no-such-command"]).output()?;
    assert_eq!(output.status.code(), Some(127), "{:?}", stdout_and_stderr(&output));
    assert!(
        text(&output.stderr).ends_with("command terminated with exit code 127\n"),
        "{:?}",
        stdout_and_stderr(&output)
    );

    cluster.emulator.stop()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_it_gets_a_terminal_of_the_users_size() -> Result<()> {
    let cluster = Cluster::start()?;
    let (namespace, pod) = cluster.sandbox().await?;
    // `script` gives kubectl a terminal (101 columns, 31 rows), so `-t` holds; the shell's prompt
    // is awaited before typing, as a user would, so the first resize has arrived.
    let line = format!("stty cols 101 rows 31; exec kubectl exec -it -n {namespace} {pod} -- sh");
    let mut session = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .envs(cluster.emulator.env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut keyboard = session.stdin.take().context("stdin")?;
    let mut screen = session.stdout.take().context("stdout")?;
    let (chunks, received) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(read) = screen.read(&mut buffer) {
            if read == 0 || chunks.send(buffer[..read].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let wait_for = |needle: &str, seen: &mut String| -> Result<()> {
        while !seen.contains(needle) {
            let chunk = received
                .recv_timeout(SILENCE_GUARD)
                .map_err(|_| anyhow::anyhow!("no {needle:?} on the terminal; it shows:\n{seen}"))?;
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        Ok(())
    };
    wait_for("# ", &mut seen)?;
    keyboard.write_all(b"tty; stty size; echo sum=$((6*7))\n")?;
    wait_for("sum=42", &mut seen)?;
    keyboard.write_all(b"exit 5\n")?;
    drop(keyboard);
    let status = session.wait()?;
    reader.join().map_err(|_| anyhow::anyhow!("reader thread"))?;
    while let Ok(chunk) = received.try_recv() {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let mut stderr = String::new();
    session.stderr.take().context("stderr")?.read_to_string(&mut stderr)?;
    assert!(seen.contains("/dev/pts/"), "the command's stdin is a terminal:\n{seen}");
    assert!(seen.contains("31 101"), "the terminal has the user's size:\n{seen}");
    assert!(seen.contains("command terminated with exit code 5"), "{seen}\n{stderr}");
    assert_eq!(status.code(), Some(5), "{seen}\n{stderr}");
    cluster.emulator.stop()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_refusals_read_as_the_api_servers() -> Result<()> {
    let cluster = Cluster::start()?;
    let (namespace, pod) = cluster.sandbox().await?;

    let output = cluster.kubectl(&["exec", "-n", &namespace, "no-such-pod", "--", "true"]).output()?;
    assert_eq!(text(&output.stderr), "Error from server (NotFound): pods \"no-such-pod\" not found\n");
    assert_eq!(output.status.code(), Some(1));

    let output = cluster.kubectl(&["exec", "-n", &namespace, &pod, "-c", "sidecar", "--", "true"]).output()?;
    assert_eq!(
        text(&output.stderr),
        format!("Error from server (BadRequest): container sidecar is not valid for pod {pod}\n")
    );

    // slurmd's Pod runs no process here: refused by name rather than pretending.
    let output = cluster.kubectl(&["exec", "-n", "tenant-slurm", "slurm-cpu-0", "--", "true"]).output()?;
    assert!(
        text(&output.stderr).starts_with(
            "Error from server (BadRequest): pod slurm-cpu-0 runs no process in the emulator: kubectl exec reaches sandbox Pods only"
        ),
        "{:?}",
        stdout_and_stderr(&output)
    );

    // The kube facade is for admins: a sandbox user's token may not exec (kubectl's first step, the
    // Pod's get, is refused; so is the exec itself).
    let user_token = format!("--token={}", cluster.emulator.ready.user_token);
    let output = cluster.kubectl(&[&user_token, "exec", "-n", &namespace, &pod, "--", "true"]).output()?;
    assert!(
        text(&output.stderr).starts_with("Error from server (Forbidden): pods is forbidden: "),
        "{:?}",
        stdout_and_stderr(&output)
    );
    let exec_url = format!(
        "{}/api/v1/namespaces/{namespace}/pods/{pod}/exec?command=true&stdout=true",
        cluster.emulator.ready.base_url
    );
    let status = |token: &str, headers: &[&str]| -> Result<serde_json::Value> {
        let mut curl = Command::new("curl");
        curl.args(["-sS", "-X", "POST", "-H", &format!("Authorization: Bearer {token}")]);
        for header in headers {
            curl.args(["-H", header]);
        }
        let output = curl.arg(&exec_url).output()?;
        serde_json::from_slice(&output.stdout)
            .with_context(|| format!("a Status body: {:?}", stdout_and_stderr(&output)))
    };
    let forbidden = status(&cluster.emulator.ready.user_token, &[])?;
    assert_eq!(forbidden["code"], 403, "{forbidden}");
    assert!(forbidden["message"].as_str().unwrap_or_default().starts_with("pods/exec is forbidden: "), "{forbidden}");

    // An old client's SPDY upgrade (and a request with no upgrade at all) is told what is served.
    for headers in [&["Upgrade: SPDY/3.1", "Connection: Upgrade"][..], &[]] {
        let refused = status(&cluster.emulator.ready.admin_token, headers)?;
        assert_eq!(refused["code"], 400, "{refused}");
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(message.contains("v5.channel.k8s.io") && message.contains("SPDY/3.1 is not emulated"), "{message}");
    }
    cluster.emulator.stop()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_node_shows_what_is_allocated() -> Result<()> {
    let cluster = Cluster::start()?;
    let (namespace, pod) = cluster.sandbox().await?;
    let node = cluster.kubectl_ok(&["get", "pod", "-n", &namespace, &pod, "-o", "jsonpath={.spec.nodeName}"])?;
    let describe = cluster.kubectl_ok(&["describe", "node", &node])?;
    let section = |title: &str| -> Vec<String> {
        describe
            .lines()
            .skip_while(|line| !line.starts_with(title))
            .skip(1)
            .take_while(|line| line.starts_with(' '))
            .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    // slurmd (1 CPU, 4Gi, the values' NodeSet requests) and the sandbox (the Python client's
    // defaults after policy: 1 CPU, 1Gi, limits equal) on a 16-CPU, 64Gi Node.
    let pods = section("Non-terminated Pods:");
    let sandbox_row = format!("{namespace} {pod} 1 (6%) 1 (6%) 1Gi (1%) 1Gi (1%) ");
    assert!(pods.iter().any(|row| row.starts_with(&sandbox_row)), "{describe}");
    assert!(
        pods.iter().any(|row| row.starts_with("tenant-slurm slurm-cpu-0 1 (6%) 0 (0%) 4Gi (6%) 0 (0%)")),
        "{describe}"
    );
    let allocated = section("Allocated resources:");
    assert!(allocated.contains(&"cpu 2 (12%) 1 (6%)".to_owned()), "{describe}");
    assert!(allocated.contains(&"memory 5Gi (7%) 1Gi (1%)".to_owned()), "{describe}");
    cluster.emulator.stop()?;
    Ok(())
}
