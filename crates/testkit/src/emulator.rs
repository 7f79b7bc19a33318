//! The emulator harness: starts the `cwsandbox-emulator` binary on port 0, waits for its ready
//! line (no fixed ports, no sleeps), reads the ready file and stops the process at the end.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// The last line `serve` prints once it accepts connections.
pub const READY_LINE: &str = "# cwsandbox-emulator ready";
/// How long a start may take before the harness gives up (a debug build on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The ready file of `serve --ready-file`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReadyFile {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// A token with `sandbox_admin`.
    pub admin_token: String,
    /// A token with only `sandbox_user`.
    pub user_token: String,
    /// The default runner.
    pub runner_id: String,
    /// The organization of the tokens.
    pub org: String,
    /// The emulator's pid.
    pub pid: u32,
}

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
    /// ready. Its log goes to a file shown when a start fails.
    pub fn start(binary: &Path, extra_args: &[&str]) -> Result<EmulatorProcess> {
        let dir = run_dir()?;
        let ready_file = dir.join("ready.json");
        let log = std::fs::File::create(dir.join("emulator.log"))?;
        let started = Instant::now();
        let mut child = Command::new(binary)
            .args(["serve", "--listen", "127.0.0.1:0", "--ready-file"])
            .arg(&ready_file)
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
        let mut process = EmulatorProcess {
            child: Some(child),
            dir,
            ready: ReadyFile {
                base_url: String::new(),
                admin_token: String::new(),
                user_token: String::new(),
                runner_id: String::new(),
                org: String::new(),
                pid: 0,
            },
            startup: Duration::ZERO,
        };
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

    /// The run's scratch directory (ready file and log live there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The variables a client needs: `CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY` (admin) and
    /// `TOKEN` (the guide's name for it).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CWSANDBOX_BASE_URL", self.ready.base_url.clone()),
            ("CWSANDBOX_API_KEY", self.ready.admin_token.clone()),
            ("TOKEN", self.ready.admin_token.clone()),
            ("USER_TOKEN", self.ready.user_token.clone()),
            ("RUNNER_ID", self.ready.runner_id.clone()),
            ("no_proxy", "127.0.0.1,localhost".to_owned()),
        ]
    }

    /// SIGTERM, then waits for the exit.
    pub fn stop(mut self) -> Result<ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        crate::run(Command::new("kill").args(["-TERM", &child.id().to_string()]))?;
        Ok(child.wait()?)
    }
}

impl Drop for EmulatorProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
