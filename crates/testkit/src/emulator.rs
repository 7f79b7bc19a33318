//! The emulator harness: starts the `cwsandbox-emulator` binary on port 0, waits for its ready
//! line (no fixed ports, no sleeps), reads the ready file and stops the process at the end,
//! checking that none of the processes it started outlives it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The last line `serve` prints once it accepts connections.
pub const READY_LINE: &str = "# cwsandbox-emulator ready";
/// How long a start may take before the harness gives up (a debug build on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The ready file of `serve --ready-file`: the emulator's own type, so the harness reads every
/// field the emulator writes.
pub use cwsandbox_emulator::ReadyInfo as ReadyFile;

/// The emulator binary: `$CWSANDBOX_EMULATOR_BIN`, else `target/debug/cwsandbox-emulator` of this
/// workspace (honouring `CARGO_TARGET_DIR`). Integration tests of the emulator crate pass
/// `env!("CARGO_BIN_EXE_cwsandbox-emulator")` instead.
pub fn emulator_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CWSANDBOX_EMULATOR_BIN") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"));
    target.join("debug").join("cwsandbox-emulator")
}

/// The emulator binary, built first when it is missing (tests of other crates cannot name it with
/// `CARGO_BIN_EXE_…`, and `cargo test` does not build other packages' binaries).
pub fn built_emulator_binary() -> Result<PathBuf> {
    let binary = emulator_binary();
    if !binary.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        crate::run(
            std::process::Command::new(cargo)
                .args(["build", "-q", "-p", "cwsandbox-emulator"])
                .current_dir(crate::workspace_root()),
        )?;
    }
    Ok(binary)
}

/// An emulator with default settings, started from `binary`; panics if it does not start (a
/// test's setup, not what it checks). The emulator crate's own tests pass
/// `env!("CARGO_BIN_EXE_cwsandbox-emulator")`; other crates use [`emulator`].
pub fn emulator_from(binary: impl AsRef<Path>) -> EmulatorProcess {
    EmulatorProcess::start(binary.as_ref(), &[]).expect("emulator starts")
}

/// An emulator with default settings, started from [`built_emulator_binary`] (built first when
/// missing): for tests outside the emulator crate. Panics if it cannot be built or started.
pub fn emulator() -> EmulatorProcess {
    emulator_from(built_emulator_binary().expect("the emulator binary builds"))
}

/// A running emulator process.
#[derive(Debug)]
pub struct EmulatorProcess {
    child: Option<Child>,
    dir: PathBuf,
    /// Connection details from the ready file.
    pub ready: ReadyFile,
    /// How long the emulator took to print its ready line.
    pub startup: Duration,
}

fn run_dir() -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "cwsandbox-emulator-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

impl EmulatorProcess {
    /// Runs `binary serve --listen 127.0.0.1:0 --ready-file … <extra_args>` and waits until it is
    /// ready. Its log goes to a file shown when a start fails. The kubeconfig for kubectl (and
    /// the HTTPS endpoints' CA certificate) go to the run's scratch directory unless `extra_args`
    /// name a `--kubeconfig` (an `--endpoint-ca-file`). Sandbox
    /// directories go where the emulator puts them by default (in memory, `/dev/shm`, where it
    /// can, as users get them; it removes them when it stops) unless `extra_args` name a
    /// `--sandbox-root`.
    pub fn start(binary: &Path, extra_args: &[&str]) -> Result<EmulatorProcess> {
        let dir = run_dir()?;
        let ready_file = dir.join("ready.json");
        let log = std::fs::File::create(dir.join("emulator.log"))?;
        let mut command = Command::new(binary);
        command.args(["serve", "--listen", "127.0.0.1:0", "--ready-file"]).arg(&ready_file);
        if !extra_args.iter().any(|arg| arg.starts_with("--kubeconfig")) {
            command.arg("--kubeconfig").arg(dir.join("kubeconfig"));
        }
        if !extra_args.iter().any(|arg| arg.starts_with("--endpoint-ca-file")) {
            command.arg("--endpoint-ca-file").arg(dir.join("endpoint-ca.pem"));
        }
        // The suites are the process runtime's unless a test asks for another: with runc
        // installed and a network, `auto` would pull the images they name (python:3.11).
        if !extra_args.iter().any(|arg| arg.starts_with("--runtime")) {
            command.args(["--runtime", "process"]);
        }
        let started = Instant::now();
        let mut child = command
            .args(extra_args)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("emulator stdout")?;
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let ready = line == READY_LINE;
                if lines.send(line).is_err() || ready {
                    break;
                }
            }
        });
        let mut process =
            EmulatorProcess { child: Some(child), dir, ready: ReadyFile::default(), startup: Duration::ZERO };
        loop {
            match received.recv_timeout(START_TIMEOUT.saturating_sub(started.elapsed())) {
                Ok(line) if line == READY_LINE => break,
                Ok(_) => continue,
                Err(_) => bail!("the emulator did not become ready:\n{}", process.log()),
            }
        }
        process.startup = started.elapsed();
        let text = std::fs::read_to_string(&ready_file).context("reading the ready file")?;
        process.ready = serde_json::from_str(&text).with_context(|| format!("parsing the ready file {text}"))?;
        Ok(process)
    }

    /// The emulator's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("emulator.log")).unwrap_or_default()
    }

    /// The lines of its log that report a problem (ERROR or WARN), but for the warning a root
    /// emulator gives at start, as it should: what an end-to-end test expects to be empty.
    pub fn problems(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|line| line.contains(" ERROR ") || line.contains(" WARN "))
            .filter(|line| !line.contains("the emulator runs as root"))
            .map(str::to_owned)
            .collect()
    }

    /// The run's scratch directory (ready file and log live there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The variables a client needs: `CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY` (admin),
    /// `TOKEN` (the guide's name for it) and `KUBECONFIG` for kubectl.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("KUBECONFIG", self.ready.kubeconfig.clone()),
            ("KUBECACHEDIR", self.dir.join("kube-cache").display().to_string()),
            ("CWSANDBOX_BASE_URL", self.ready.base_url.clone()),
            ("CWSANDBOX_API_KEY", self.ready.admin_token.clone()),
            ("TOKEN", self.ready.admin_token.clone()),
            ("USER_TOKEN", self.ready.user_token.clone()),
            ("RUNNER_ID", self.ready.runner_id.clone()),
            ("CWSANDBOX_ENDPOINT_CA_FILE", self.ready.endpoint_ca_file.clone()),
            ("no_proxy", "127.0.0.1,localhost".to_owned()),
        ]
    }

    /// The emulator's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, then waits for the exit: nothing of the emulator runs its shutdown, so what ends
    /// its sandboxes then is the kernel and the executor's watchdog (check with
    /// [`crate::procs::wait_until_gone`]).
    pub fn kill_hard(mut self) -> Result<ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        child.kill()?;
        Ok(child.wait()?)
    }

    /// SIGTERM, then waits for the exit. Fails if any process the emulator started (a sandbox's
    /// main process, an exec'd command, anything they started) is still alive once it has exited.
    pub fn stop(mut self) -> Result<ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        let before = crate::procs::descendants(child.id());
        crate::run(Command::new("kill").args(["-TERM", &child.id().to_string()]))?;
        let status = child.wait()?;
        // Shutdown returns once every sandbox process is gone: survivors are orphans.
        let survivors: Vec<String> =
            before.iter().filter(|process| process.is_alive()).map(|process| process.to_string()).collect();
        if !survivors.is_empty() {
            bail!("processes outlived the emulator:\n{}\nemulator log:\n{}", survivors.join("\n"), self.log());
        }
        Ok(status)
    }
}

/// Set to keep every emulator's scratch directory (ready file, log, kubeconfig, sandbox roots)
/// after its test, for a look at what a failed test left.
pub const KEEP_DIR: &str = "CWSANDBOX_TEST_KEEP_DIR";
/// Set to print every emulator's log to stderr when it ends (cargo shows it for failed tests).
pub const LOG: &str = "CWSANDBOX_TEST_LOG";

fn switched_on(variable: &str) -> bool {
    is_on(std::env::var_os(variable).as_deref())
}

/// A switch is on when set to anything but nothing or `0`.
fn is_on(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|value| !value.is_empty() && value != "0")
}

impl Drop for EmulatorProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if switched_on(LOG) {
            eprintln!("--- emulator log ({}) ---\n{}--- end of emulator log ---", self.dir.display(), self.log());
        }
        if switched_on(KEEP_DIR) {
            eprintln!("{KEEP_DIR}: kept the emulator's directory {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn switches_are_on_unless_unset_empty_or_zero() {
        use std::ffi::OsStr;
        assert!(!super::is_on(None));
        assert!(!super::is_on(Some(OsStr::new(""))));
        assert!(!super::is_on(Some(OsStr::new("0"))));
        assert!(super::is_on(Some(OsStr::new("1"))));
        assert!(super::is_on(Some(OsStr::new("yes"))));
    }
}
