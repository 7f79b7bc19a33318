//! The examples of `examples/` run against the emulator (testkit harness, port 0). Each runs
//! `exec`, so they pass once the emulator has its process executor.

use std::path::PathBuf;
use std::process::Command;

use cwsandbox_testkit::emulator::emulator;

/// `cargo test` builds the examples next to the test binary: `target/debug/examples/NAME`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("examples").join(name);
    assert!(path.exists(), "{} not built (cargo test builds examples)", path.display());
    path
}

fn run(name: &str, extra: &[(&str, &str)]) -> String {
    let emu = emulator();
    let output = Command::new(example(name))
        .envs(emu.env())
        .env("CWSANDBOX_RUNNER_ID", &emu.ready.runner_id)
        .envs(extra.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{name}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

#[test]
fn run_hostname() {
    let out = run("run_hostname", &[]);
    assert!(out.contains("hostname: sandbox-"), "{out}");
}

#[test]
fn session_with_two_sandboxes() {
    let out = run("session", &[]);
    assert!(out.contains("stopped 2"), "{out}");
}

#[test]
fn partition_annotation() {
    let out = run("partition", &[("PARTITION", "sandboxes")]);
    assert!(out.contains("partition sandboxes"), "{out}");
}

#[test]
fn user_id_from_slurm_job_uid() {
    let out = run("slurm_user", &[("SLURM_JOB_UID", "1001")]);
    assert!(out.contains("uid 1001"), "{out}");
}

#[test]
fn requests_and_limits() {
    let out = run("resources", &[]);
    assert!(out.contains("nproc: "), "{out}");
}
