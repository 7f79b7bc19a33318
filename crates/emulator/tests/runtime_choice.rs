//! The container runtime is chosen the same way by each of its three spellings: `serve --runtime
//! oci`, `CWSANDBOX_EMULATOR_RUNTIME=oci` and the values' `containerRuntime.kind: oci` all make an
//! image whose registry cannot be reached (a closed port on loopback) the sandbox's
//! `ErrImagePull`, as the ready file's `oci` promises; the default `auto` runs the same sandbox
//! with the host's programs and says so in the Pod's Events; `process` never pulls. The binary
//! runs in the foreground with a ready file, and the published Python client judges.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use cwsandbox_testkit::text;

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");
const READY_LINE: &str = "# cwsandbox-emulator ready";
/// A registry nothing listens on: its pull fails with "cannot be reached", never leaving loopback.
const UNREACHABLE_IMAGE: &str = "127.0.0.1:1/nowhere/image:1";

/// Creates a sandbox of the unreachable image and prints how it went: `FAILED <reason>` or
/// `RAN <output of a command telling the host's programs>`.
const RUN: &str = r#"
import os
from cwsandbox import Sandbox, SandboxFailedError
try:
    with Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]],
                     container_image=os.environ["IMAGE"]) as sb:
        out = sb.exec(["sh", "-c", "test -e /usr/bin/python3 && echo host-programs"]).result().stdout.strip()
        print("RAN " + out)
except SandboxFailedError as failed:
    print("FAILED " + (failed.status_reason or ""))
"#;

fn runc_missing() -> bool {
    let on_path =
        std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("runc").exists()));
    !on_path && !Path::new("/usr/sbin/runc").exists()
}

/// One emulator in the foreground: ready once it printed its ready line, stopped with SIGTERM.
struct Serve {
    child: Child,
    dir: tempfile::TempDir,
    ready: serde_json::Value,
    /// What `serve` printed on stdout, up to its ready line.
    printed: Vec<String>,
}

impl Serve {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Result<Serve> {
        let dir = tempfile::tempdir()?;
        // The image cache is the test's own, so nothing here reads or writes the user's.
        let values = dir.path().join("cache.yaml");
        std::fs::write(&values, format!("containerRuntime:\n  imageCache: {}\n", dir.path().join("images").display()))?;
        let ready_file = dir.path().join("ready.json");
        let mut command = Command::new(BINARY);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--timing", "instant", "--ready-file"])
            .arg(&ready_file)
            .arg("--kubeconfig")
            .arg(dir.path().join("kubeconfig"))
            .arg("-f")
            .arg(&values)
            .args(args)
            .env_remove("CWSANDBOX_EMULATOR_RUNTIME")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("emulator.log"))?);
        let mut child = command.spawn().context("starting the emulator")?;
        let stdout = child.stdout.take().context("stdout")?;
        // Blocks until the line, or until the emulator exits (its stdout then closes).
        let mut printed = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let ready = line == READY_LINE;
            printed.push(line);
            if ready {
                break;
            }
        }
        let mut serve = Serve { child, dir, ready: serde_json::Value::Null, printed };
        if serve.printed.last().map(String::as_str) != Some(READY_LINE) {
            bail!("the emulator did not become ready:\n{}", serve.log());
        }
        serve.ready = serde_json::from_str(&std::fs::read_to_string(&ready_file)?)?;
        Ok(serve)
    }

    /// The ready file's `container_runtime`, checked against the `# container runtime:` line
    /// `serve` printed: both say the same.
    fn container_runtime(&self) -> String {
        let runtime = self.field("container_runtime");
        let line = format!("# container runtime: {runtime}");
        assert!(self.printed.contains(&line), "serve printed {:?}, the ready file says {runtime}", self.printed);
        runtime
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("emulator.log")).unwrap_or_default()
    }

    fn field(&self, key: &str) -> String {
        self.ready[key].as_str().unwrap_or_default().to_owned()
    }

    /// What the published client saw of a sandbox of the unreachable image.
    fn run_unreachable(&self, python: &cwsandbox_testkit::PythonEnv) -> Result<String> {
        let output = Command::new(python.python())
            .args(["-W", "ignore", "-c", RUN])
            .env("CWSANDBOX_BASE_URL", self.field("base_url"))
            .env("CWSANDBOX_API_KEY", self.field("admin_token"))
            .env("RUNNER_ID", self.field("runner_id"))
            .env("IMAGE", UNREACHABLE_IMAGE)
            .env("no_proxy", "127.0.0.1,localhost")
            .output()?;
        let stdout = text(&output.stdout);
        if !output.status.success() {
            bail!("{stdout}{}\nemulator log:\n{}", text(&output.stderr), self.log());
        }
        Ok(stdout)
    }

    /// The Events of every namespace, as `kubectl get events -A` prints them.
    fn events(&self) -> Result<String> {
        let output = Command::new("kubectl")
            .args(["get", "events", "-A"])
            .env("KUBECONFIG", self.field("kubeconfig"))
            .env("KUBECACHEDIR", self.dir.path().join("kube-cache"))
            .output()?;
        Ok(text(&output.stdout))
    }

    fn stop(mut self) -> Result<()> {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?;
        anyhow::ensure!(status.success(), "kill failed");
        let exit = self.child.wait()?;
        anyhow::ensure!(exit.success(), "SIGTERM must end the emulator cleanly: {exit:?}\n{}", self.log());
        Ok(())
    }
}

/// One way of choosing the runtime: its name, `serve`'s arguments and its environment.
type Spelling<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);

#[test]
fn oci_by_flag_environment_or_values_makes_an_unreachable_registry_err_image_pull() -> Result<()> {
    if runc_missing() {
        // The test command installs runc; a developer's partial machine says why.
        panic!("runc is not installed (the test command installs it)");
    }
    let python = cwsandbox_testkit::python_env().context("python venv")?;
    let values = tempfile::NamedTempFile::new()?;
    std::fs::write(values.path(), "containerRuntime:\n  kind: oci\n")?;
    let values_path = values.path().display().to_string();
    let spellings: [Spelling; 3] = [
        ("--runtime oci", &["--runtime", "oci"], &[]),
        ("CWSANDBOX_EMULATOR_RUNTIME=oci", &[], &[("CWSANDBOX_EMULATOR_RUNTIME", "oci")]),
        ("containerRuntime.kind: oci", &["-f", &values_path], &[]),
    ];
    for (spelling, args, env) in spellings {
        let serve = Serve::start(args, env)?;
        let runtime = serve.container_runtime();
        assert!(runtime.starts_with("oci ("), "{spelling}: the ready file says {runtime}");
        let seen = serve.run_unreachable(&python)?;
        assert!(
            seen.starts_with("FAILED ") && seen.contains("ErrImagePull") && seen.contains("127.0.0.1:1"),
            "{spelling}: {seen}\n{}",
            serve.log()
        );
        let events = serve.events()?;
        assert!(!events.contains("ImageNotUsed"), "{spelling}: no fallback under oci: {events}");
        serve.stop()?;
    }
    Ok(())
}

#[test]
fn auto_falls_back_to_the_hosts_programs_and_says_so_and_process_never_pulls() -> Result<()> {
    if runc_missing() {
        panic!("runc is not installed (the test command installs it)");
    }
    let python = cwsandbox_testkit::python_env().context("python venv")?;

    // The default: `auto`, which runs the image's sandbox with the host's programs, and says so.
    let serve = Serve::start(&[], &[])?;
    let runtime = serve.container_runtime();
    assert!(runtime.starts_with("auto ("), "the default's ready file says {runtime}");
    let seen = serve.run_unreachable(&python)?;
    assert_eq!(seen.trim(), "RAN host-programs", "{}", serve.log());
    let events = serve.events()?;
    assert!(events.contains("ImageNotUsed") && events.contains("registry 127.0.0.1:1 cannot be reached"), "{events}");
    serve.stop()?;

    // `process`, by flag or environment: no pull at all, the host's programs, nothing to say.
    for (args, env) in
        [(&["--runtime", "process"][..], &[][..]), (&[][..], &[("CWSANDBOX_EMULATOR_RUNTIME", "process")][..])]
    {
        let serve = Serve::start(args, env)?;
        assert_eq!(serve.container_runtime(), "process");
        let seen = serve.run_unreachable(&python)?;
        assert_eq!(seen.trim(), "RAN host-programs", "{}", serve.log());
        let events = serve.events()?;
        assert!(!events.contains("Pulling") && !events.contains("ImageNotUsed"), "{events}");
        serve.stop()?;
    }
    Ok(())
}
