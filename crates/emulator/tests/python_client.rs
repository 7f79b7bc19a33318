//! The real published Python client (`cwsandbox[cli]==1.22.0`, from the testkit's pinned venv)
//! against the emulator binary with its process executor: every flow of client-contract.md §4
//! ((a)–(e), the `cwsandbox` command line included), the error mapping of §8 and the gotchas of §9,
//! as the pytest suite in `tests/python/`. Afterwards: no sandbox process survives the emulator,
//! and the emulator logged no error.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use cwsandbox_testkit::emulator::EmulatorProcess;
use cwsandbox_testkit::procs;

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");
/// The suite's own bound: every wait in it ends in seconds unless something hangs.
const SUITE_TIMEOUT_SECONDS: &str = "900";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_python_client_drives_every_flow_against_real_sandboxes() -> Result<()> {
    let python = cwsandbox_testkit::python_env().context("python venv")?;
    let emulator = EmulatorProcess::start(Path::new(BINARY), &[])?;
    eprintln!("emulator ready after {:?}, sandbox isolation: {}", emulator.startup, emulator.ready.isolation);
    let marker = format!("run-{}-{}", std::process::id(), emulator.ready.pid);
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let path = format!("{}:{}", python.bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let started = Instant::now();
    let output = Command::new("timeout")
        .args(["--signal=KILL", SUITE_TIMEOUT_SECONDS])
        .arg(python.python())
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-v", "--durations=5", "--rootdir"])
        .arg(&suite)
        .arg(&suite)
        .current_dir(emulator.dir())
        .envs(emulator.env())
        .env("PATH", path)
        .env("CWSANDBOX_ISOLATION", &emulator.ready.isolation)
        .env("CWSANDBOX_TEST_RUN_ID", &marker)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()?;
    let elapsed = started.elapsed();
    let report = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "pytest failed after {elapsed:?}:\n{report}\nemulator log:\n{}", emulator.log());
    eprintln!("{report}\npython suite took {elapsed:?}");

    let log = emulator.log();
    // Stopping checks that every process the emulator started is gone once it has exited.
    let status = emulator.stop()?;
    assert!(status.success(), "SIGTERM must end the emulator cleanly: {status:?}");
    let survivors = procs::with_env("CWSANDBOX_TEST_RUN", &marker);
    assert!(survivors.is_empty(), "sandbox processes outlived the emulator: {survivors:?}");
    // Clients cancel streams after their last frame and leave; none of that is a failure.
    let errors: Vec<&str> = log.lines().filter(|line| line.contains(" ERROR ") || line.contains(" WARN ")).collect();
    assert!(errors.is_empty(), "the emulator logged problems:\n{}", errors.join("\n"));
    Ok(())
}
