//! The clients generated from `proto/` with `buf generate` (`buf.gen.yaml`), driven against a real
//! emulator process by their own test programs with the machine's Node.js and Python:
//! `clients/ts/test/emulator.test.ts` (Connect JSON over HTTP/1.1 and Connect binary over HTTP/2)
//! and `clients/python/tests/test_emulator.py` (gRPC). Each program checks the runner policy flow
//! (GetManagedRunner, UpdateManagedRunner with the etag, a stale etag refused with
//! FAILED_PRECONDITION), ListAvailableRunners and a sandbox's life (CreateSandbox, RUNNING, Exec
//! `hostname` = the Pod's name, DeleteSandbox).
//!
//! The Exec step needs the process executor in the emulator binary: without it, Exec answers
//! UNAVAILABLE (`CWSANDBOX_BACKEND_UNAVAILABLE`) and these tests fail on that step.

use std::process::{Command, Output};

use cwsandbox_testkit::emulator::{EmulatorProcess, emulator_from};

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");

/// Runs a client program with the emulator's variables, as `cwsandbox-emulator serve` prints them.
fn run(mut command: Command, emulator: &EmulatorProcess) -> (Output, String) {
    command
        .env("CWSANDBOX_BASE_URL", &emulator.ready.base_url)
        .env("CWSANDBOX_API_KEY", &emulator.ready.admin_token)
        .env("CWSANDBOX_RUNNER_ID", &emulator.ready.runner_id)
        .env("no_proxy", "127.0.0.1,localhost")
        .env("NO_PROXY", "127.0.0.1,localhost");
    let output = command.output().unwrap_or_else(|error| panic!("starting {command:?}: {error}"));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output, text)
}

#[test]
fn typescript_connect_client_over_json_and_binary() {
    let clients = cwsandbox_testkit::generated_clients().expect("generated clients");
    let emulator = emulator_from(BINARY);
    let mut node = Command::new("node");
    node.args(["--test", "--test-concurrency=1", "--test-reporter=tap", "dist/test/emulator.test.js"])
        .current_dir(&clients.ts_project);
    let (output, text) = run(node, &emulator);
    assert!(output.status.success(), "the TypeScript client failed:\n{text}\nemulator log:\n{}", emulator.log());
    // Two transports, seven steps each: none may be skipped or go missing.
    for line in ["# tests 14", "# pass 14", "# fail 0", "# skipped 0"] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
}

#[test]
fn python_grpc_client() {
    let clients = cwsandbox_testkit::generated_clients().expect("generated clients");
    let emulator = emulator_from(BINARY);
    let program = cwsandbox_testkit::workspace_root().join("clients/python/tests/test_emulator.py");
    let mut python = Command::new(&clients.python);
    python.arg(&program).env("PYTHONPATH", &clients.python_gen);
    let (output, text) = run(python, &emulator);
    assert!(output.status.success(), "the Python client failed:\n{text}\nemulator log:\n{}", emulator.log());
    assert!(text.lines().any(|l| l == "Ran 7 tests" || l.starts_with("Ran 7 tests in")), "not 7 steps:\n{text}");
    assert!(text.lines().any(|l| l == "OK"), "{text}");
}
