//! The real published Python client (`cwsandbox[cli]==1.22.0`, from the testkit's pinned venv)
//! against the emulator binary with its process executor: every flow of
//! docs/facts/client-contract.md ((a)–(e), docs/facts/client-contract.md#flow-a to #flow-e, the
//! `cwsandbox` command line included), its error mapping
//! (docs/facts/client-contract.md#error-mapping) and its gotchas (docs/facts/client-contract.md#g1
//! to #g18), as the pytest suite in `tests/python/`. Afterwards: no sandbox process survives the
//! emulator, and the emulator logged no error.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use cwsandbox_testkit::emulator::EmulatorProcess;
use cwsandbox_testkit::{procs, text};

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");
/// The suite's own bound: every wait in it ends in seconds unless something hangs.
const SUITE_TIMEOUT_SECONDS: &str = "900";

/// Leaves two sandboxes running when the client exits (a standalone `Sandbox.run` is not deleted
/// at exit), each with a background process; with namespaces, one that left its session.
const LEAVE_RUNNING: &str = r#"
import os
from cwsandbox import Sandbox
env = {"CWSANDBOX_TEST_RUN": os.environ["CWSANDBOX_TEST_RUN_ID"]}
detach = "setsid " if os.environ["CWSANDBOX_ISOLATION"] == "namespaces" else ""
for _ in range(2):
    sb = Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]], environment_variables=env)
    result = sb.exec(["sh", "-c", detach + "sleep 600 </dev/null >/dev/null 2>&1 & echo started"]).result()
    assert result.stdout == "started\n", result
"#;

/// The flows that do not depend on namespaces, for the plain-process fallback.
const PLAIN_SELECTION: &str = "test_a_ or test_c_ or test_stdin or test_without_stdin or test_exec_reports or \
                               test_a_main_process_that_exits or test_a_timed_out or test_deleting or test_logs_all \
                               or test_timestamps or test_follow_streams";

#[test]
fn the_python_client_drives_every_flow_against_real_sandboxes() -> Result<()> {
    run_suite(&[], None)
}

#[test]
fn the_core_flows_pass_with_plain_processes() -> Result<()> {
    run_suite(&["--isolation", "plain"], Some(PLAIN_SELECTION))
}

/// Runs the pytest suite (or the tests matching `selection`) against an emulator started with
/// `args`, then checks that nothing of it survives and that it logged no problem.
fn run_suite(args: &[&str], selection: Option<&str>) -> Result<()> {
    let python = cwsandbox_testkit::python_env().context("python venv")?;
    let values = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/values.yaml");
    let values = values.to_str().context("the values file's path is not UTF-8")?;
    let args: Vec<&str> = ["-f", values].into_iter().chain(args.iter().copied()).collect();
    let emulator = EmulatorProcess::start(Path::new(BINARY), &args)?;
    eprintln!("emulator ready after {:?}, sandbox isolation: {}", emulator.startup, emulator.ready.isolation);
    let marker = format!("run-{}-{}", std::process::id(), emulator.ready.pid);
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let path = format!("{}:{}", python.bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let mut pytest = Command::new("timeout");
    pytest
        .args(["--signal=KILL", SUITE_TIMEOUT_SECONDS])
        .arg(python.python())
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-v", "--durations=5", "--rootdir"])
        .arg(&suite)
        .arg(&suite);
    if let Some(selection) = selection {
        pytest.args(["-k", selection]);
    }
    let started = Instant::now();
    let output = pytest
        .current_dir(emulator.dir())
        .envs(emulator.env())
        .env("PATH", path)
        .env("CWSANDBOX_ISOLATION", &emulator.ready.isolation)
        .env("CWSANDBOX_UNAVAILABLE", emulator.ready.unavailable.join("\n"))
        .env("CWSANDBOX_RUNTIME_CLASSES", emulator.ready.runtime_classes.join(" "))
        .env("CWSANDBOX_TEST_RUN_ID", &marker)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()?;
    let elapsed = started.elapsed();
    let report = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "pytest failed after {elapsed:?}:\n{report}\nemulator log:\n{}", emulator.log());
    eprintln!("{report}\npython suite took {elapsed:?}");

    // The emulator's SIGTERM must end sandboxes that still run.
    let output = Command::new(python.python())
        .args(["-W", "ignore", "-c", LEAVE_RUNNING])
        .envs(emulator.env())
        .env("CWSANDBOX_ISOLATION", &emulator.ready.isolation)
        .env("CWSANDBOX_TEST_RUN_ID", &marker)
        .output()?;
    assert!(output.status.success(), "{}{}", text(&output.stdout), text(&output.stderr));
    let running = procs::with_env("CWSANDBOX_TEST_RUN", &marker);
    assert!(running.len() >= 6, "two sandboxes with three processes each: {running:?}");

    let problems = emulator.problems();
    // Stopping checks that every process the emulator started is gone once it has exited.
    let status = emulator.stop()?;
    assert!(status.success(), "SIGTERM must end the emulator cleanly: {status:?}");
    let survivors = procs::with_env("CWSANDBOX_TEST_RUN", &marker);
    assert!(survivors.is_empty(), "sandbox processes outlived the emulator: {survivors:?}");
    // Its sandbox networks (the suite's values: bridge cwsbxpy) went with it.
    let namespaces: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("cwsbxpy-"))
        .collect();
    assert!(
        namespaces.is_empty() && !Path::new("/sys/class/net/cwsbxpy").exists(),
        "sandbox networks outlived the emulator: {namespaces:?}"
    );
    // Clients cancel streams after their last frame and leave; none of that is a failure.
    assert!(problems.is_empty(), "the emulator logged problems:\n{}", problems.join("\n"));
    Ok(())
}
