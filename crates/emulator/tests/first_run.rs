//! What a new user meets first: `serve --background` (returns once ready, or with the error),
//! `--listen` with a host name, a port in use (one message, with what to do, nothing left
//! behind), and help texts that say what the command really does.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cwsandbox_testkit::stdout_then_stderr;

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");

/// `export NAME=VALUE` lines as a map.
fn exports(stdout: &[u8]) -> HashMap<String, String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| line.strip_prefix("export "))
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn is_running(pid: u32) -> bool {
    // A zombie is not running: its emulator has exited, only nobody reaped it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

fn wait_gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if !is_running(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A background emulator, stopped (SIGTERM) when dropped.
struct Background {
    pid: u32,
    exports: HashMap<String, String>,
    stdout: String,
}

impl Background {
    fn start(temp: &Path, args: &[&str]) -> anyhow::Result<Background> {
        let output = Command::new(BINARY)
            .args(["serve", "--background", "--runtime", "process"])
            .args(args)
            .env("TMPDIR", temp)
            .output()?;
        anyhow::ensure!(output.status.success(), "serve --background failed: {}", stdout_then_stderr(&output));
        let exports = exports(&output.stdout);
        let pid = exports.get("CWSANDBOX_EMULATOR_PID").and_then(|pid| pid.parse().ok());
        let pid = pid.ok_or_else(|| anyhow::anyhow!("no CWSANDBOX_EMULATOR_PID in {}", stdout_then_stderr(&output)))?;
        Ok(Background { pid, exports, stdout: String::from_utf8_lossy(&output.stdout).into_owned() })
    }

    fn base_url(&self) -> &str {
        self.exports.get("CWSANDBOX_BASE_URL").map(String::as_str).unwrap_or_default()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid.to_string()]).status();
        wait_gone(self.pid);
    }
}

#[test]
fn serve_background_returns_once_ready_with_the_exports_and_the_pid_to_stop_it() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let log = temp.path().join("emulator.log");
    let emulator =
        Background::start(temp.path(), &["--listen", "localhost:0", "--log-file", log.to_str().unwrap_or("")])?;
    // A host name is resolved; the URL names the address bound.
    assert!(emulator.base_url().starts_with("http://127.0.0.1:"), "{}", emulator.stdout);
    for name in ["CWSANDBOX_API_KEY", "CWSANDBOX_USER_TOKEN", "CWSANDBOX_RUNNER_ID"] {
        assert!(emulator.exports.get(name).is_some_and(|value| !value.is_empty()), "{name}: {}", emulator.stdout);
    }
    assert!(emulator.stdout.contains("# cwsandbox-emulator ready"), "{}", emulator.stdout);
    assert!(emulator.stdout.contains(&format!("# log: {}", log.display())), "{}", emulator.stdout);
    let health =
        Command::new("curl").args(["--silent", "--fail", &format!("{}/healthz", emulator.base_url())]).output()?;
    assert_eq!(String::from_utf8_lossy(&health.stdout), "ok\n", "it serves after the command returned");
    // It logs to its file, not to the terminal the command returned to.
    let logged = std::fs::read_to_string(&log)?;
    assert!(logged.contains("sandbox"), "the log file has the start-up lines: {logged:?}");
    let pid = emulator.pid;
    // The pid printed is the emulator's: a SIGTERM to it stops it cleanly, ready file and all.
    drop(emulator);
    assert!(!is_running(pid), "kill $CWSANDBOX_EMULATOR_PID stops the emulator");
    let leftovers: Vec<_> = std::fs::read_dir(temp.path())?
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".ready.json"))
        .collect();
    assert!(leftovers.is_empty(), "the ready file goes with the emulator: {leftovers:?}");
    Ok(())
}

#[test]
fn a_port_in_use_is_one_message_with_what_to_do_and_leaves_nothing_behind() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let first = Background::start(temp.path(), &["--listen", "127.0.0.1:0"])?;
    let taken = first.base_url().trim_start_matches("http://").to_owned();

    let sandboxes = temp.path().join("sandboxes");
    std::fs::create_dir(&sandboxes)?;
    let child = Command::new(BINARY)
        .args(["serve", "--runtime", "process", "--listen", &taken])
        .env("TMPDIR", &sandboxes)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let output = child.wait_with_output()?;
    let said = stdout_then_stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert_eq!(said.matches("Address already in use").count(), 1, "said once: {said}");
    assert!(said.contains("--listen 127.0.0.1:0"), "the hint names the way out: {said}");
    // The failed start took its sandbox directory with it.
    let parent = cwsandbox_executor::memory_backed_dir().unwrap_or_else(|| sandboxes.clone());
    let root = parent.join(format!("cwsandbox-emulator-{pid}"));
    assert!(!root.exists(), "{} is left behind", root.display());

    // In the background the same failure returns at once, with the emulator's own words.
    let output = Command::new(BINARY)
        .args(["serve", "--background", "--runtime", "process", "--listen", &taken])
        .env("TMPDIR", temp.path())
        .output()?;
    let said = stdout_then_stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("Address already in use") && said.contains("--listen 127.0.0.1:0"), "{said}");
    assert!(said.contains("exited before it was ready"), "{said}");
    assert!(output.stdout.is_empty(), "nothing for a shell to source: {said}");
    Ok(())
}

#[test]
fn listen_refuses_what_is_not_host_and_port_by_name() -> anyhow::Result<()> {
    for (listen, expected) in [("8080", "expected HOST:PORT"), ("no-such-host.invalid:0", "cannot resolve")] {
        let output = Command::new(BINARY).args(["serve", "--runtime", "process", "--listen", listen]).output()?;
        assert_eq!(output.status.code(), Some(2), "{}", stdout_then_stderr(&output));
        assert!(
            stdout_then_stderr(&output).contains(expected) && stdout_then_stderr(&output).contains(listen),
            "{listen}: {}",
            stdout_then_stderr(&output)
        );
    }
    Ok(())
}

#[test]
fn help_says_what_the_ready_file_and_exec_really_provide() -> anyhow::Result<()> {
    let serve = stdout_then_stderr(&Command::new(BINARY).args(["serve", "--help"]).output()?);
    // Every key of the ready file, as written.
    let ready = cwsandbox_emulator::ReadyInfo::default();
    let keys = serde_json::to_value(&ready)?;
    for key in keys.as_object().map(|object| object.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
        assert!(serve.contains(&key), "serve --help does not name the ready file's {key}:\n{serve}");
    }
    assert!(serve.contains("--background") && serve.contains("Examples:"), "{serve}");
    let exec = stdout_then_stderr(&Command::new(BINARY).args(["exec", "--help"]).output()?);
    for variable in
        ["CWSANDBOX_BASE_URL", "CWSANDBOX_API_KEY", "CWSANDBOX_USER_TOKEN", "CWSANDBOX_RUNNER_ID", "KUBECONFIG"]
    {
        assert!(exec.contains(variable), "exec --help does not name {variable}:\n{exec}");
    }
    Ok(())
}
