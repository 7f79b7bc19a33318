//! End-to-end tests of `cwsbx` against the emulator binary (testkit harness: port 0, ready
//! file, no sleeps). The policy editor is a scripted `$EDITOR`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cwsandbox_testkit::emulator::{EmulatorProcess, emulator};
use cwsandbox_testkit::text;

fn cwsbx_path() -> &'static str {
    env!("CARGO_BIN_EXE_cwsbx")
}

fn command(emu: &EmulatorProcess, args: &[&str]) -> Command {
    let mut command = Command::new(cwsbx_path());
    command.args(args).envs(emu.env()).env("CWSANDBOX_RUNNER_ID", &emu.ready.runner_id);
    command.env_remove("VISUAL").env_remove("CWSBX_EDITOR");
    // Edit files that `policy edit` keeps (stale etag, still invalid) go away with the emulator.
    command.env("TMPDIR", emu.dir());
    command
}

fn cwsbx(emu: &EmulatorProcess, args: &[&str]) -> Output {
    command(emu, args).output().expect("cwsbx runs")
}

/// Runs and asserts success; returns stdout.
fn ok(emu: &EmulatorProcess, args: &[&str]) -> String {
    let output = cwsbx(emu, args);
    assert!(output.status.success(), "cwsbx {args:?} failed: {}{}", text(&output.stdout), text(&output.stderr));
    text(&output.stdout)
}

/// Runs and asserts failure with one `error:` line on stderr; returns stderr.
fn fails(emu: &EmulatorProcess, args: &[&str]) -> String {
    let output = cwsbx(emu, args);
    assert!(!output.status.success(), "cwsbx {args:?} should fail: {}", text(&output.stdout));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line on stderr: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn policy_json(emu: &EmulatorProcess) -> serde_json::Value {
    json(&ok(emu, &["sandbox", "runner", "policy", "get", &emu.ready.runner_id, "-o", "json"]))
}

fn etag(emu: &EmulatorProcess) -> String {
    let runner = json(&ok(emu, &["sandbox", "runner", "get", &emu.ready.runner_id, "-o", "json"]));
    runner["etag"].as_str().unwrap().to_owned()
}

#[test]
fn runner_list_get_create_delete() {
    let emu = emulator();
    let runner = emu.ready.runner_id.clone();
    let table = ok(&emu, &["sandbox", "runner", "list"]);
    assert!(table.starts_with("RUNNER ID"), "{table}");
    assert!(table.lines().any(|l| l.starts_with(&runner)), "{table}");
    // One runner is an object, several a list.
    let got = json(&ok(&emu, &["sandbox", "runner", "get", &runner, "-o", "json"]));
    assert_eq!(got["identity"]["runnerId"], runner.as_str());
    let both = json(&ok(&emu, &["sandbox", "runner", "get", &runner, &runner, "-o", "json"]));
    assert_eq!(both.as_array().map(Vec::len), Some(2), "{both}");
    let yaml = ok(&emu, &["sandbox", "runner", "list", "-o", "yaml"]);
    assert!(yaml.contains("runnerId:"), "{yaml}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runner.yaml");
    // snake_case on input, like cwic's create file.
    std::fs::write(
        &file,
        "identity:\n  runner_id: second-runner\n  zone: us-east-04a\n  cluster_id: cks-cluster\ndisplay_name: Second\npolicy: {}\n",
    )
    .unwrap();
    let created = ok(&emu, &["sandbox", "runner", "create", "-f", file.to_str().unwrap()]);
    assert!(created.contains("second-runner"), "{created}");
    assert!(ok(&emu, &["sandbox", "runner", "list"]).contains("second-runner"));
    let refused = fails(&emu, &["sandbox", "runner", "delete", "second-runner"]);
    assert!(refused.contains("--yes"), "{refused}");
    assert_eq!(ok(&emu, &["sandbox", "runner", "delete", "second-runner", "--yes"]), "runner second-runner deleted\n");
    // A runner that was not there is said so, also with --allow-missing (which only keeps it from failing).
    let again = ok(&emu, &["sandbox", "runner", "delete", "second-runner", "--yes", "--allow-missing", "-o", "json"]);
    assert_eq!(json(&again), serde_json::json!({"runnerId": "second-runner", "result": "not found"}));
    let said = ok(&emu, &["sandbox", "runner", "delete", "second-runner", "--yes", "--allow-missing"]);
    assert!(said.contains("not found: nothing deleted"), "{said}");
    assert!(fails(&emu, &["sandbox", "runner", "delete", "second-runner", "--yes"]).contains("NOT_FOUND"));
    let template = ok(&emu, &["sandbox", "runner", "create", "--print-template"]);
    assert!(template.contains("runnerId"), "{template}");
    let missing = fails(&emu, &["sandbox", "runner", "get", "no-such-runner"]);
    assert!(missing.contains("NOT_FOUND"), "{missing}");
}

#[test]
fn policy_get_and_describe() {
    let emu = emulator();
    let runner = emu.ready.runner_id.clone();
    let policy = policy_json(&emu);
    assert!(policy.is_object(), "{policy}");
    let yaml = ok(&emu, &["sandbox", "runner", "policy", "get", &runner]);
    assert!(yaml.contains("schedulerName"), "{yaml}");
    // The runner defaults to $CWSANDBOX_RUNNER_ID, as the guide's `policy get [RUNNER-ID]` allows
    // (docs/facts/sunk-guide.md#step-2).
    assert_eq!(ok(&emu, &["sandbox", "runner", "policy", "get"]), yaml);
    // A document has no table form: asked for one, the command says so instead of printing YAML.
    let refused = fails(&emu, &["sandbox", "runner", "policy", "get", "-o", "table"]);
    assert!(refused.contains("no table form"), "{refused}");
    let described = ok(&emu, &["sandbox", "runner", "policy", "describe", &runner]);
    assert!(described.contains(&format!("Etag:         {}", etag(&emu))), "{described}");
    assert!(described.contains("Constraints:"), "{described}");
    let template = ok(&emu, &["sandbox", "runner", "policy", "edit", &runner, "--print-template"]);
    assert!(template.contains("schedulerName"), "{template}");
}

#[test]
fn policy_validate_is_offline_and_lists_every_violation() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "display_name: ok\nbase:\n  spec:\n    schedulerName: slurm-scheduler\n").unwrap();
    let output =
        Command::new(cwsbx_path()).args(["sandbox", "runner", "policy", "validate", "-f"]).arg(&good).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("valid"));

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "base:\n  spec:\n    terminationGracePeriodSeconds: 30\nconstraints:\n  lifecycle:\n    defaultLifetimeSeconds: 99999999\n",
    )
    .unwrap();
    // No emulator and no URL: validation never leaves the machine.
    let output = Command::new(cwsbx_path())
        .args(["sandbox", "runner", "policy", "validate", "-f"])
        .arg(&bad)
        .env("CWSANDBOX_BASE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("base.spec.terminationGracePeriodSeconds: "), "{stdout}");
    assert!(stdout.contains("defaultLifetimeSeconds: "), "{stdout}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");

    let unknown = dir.path().join("unknown.yaml");
    std::fs::write(&unknown, "constraints:\n  nope: 1\n").unwrap();
    let output = Command::new(cwsbx_path())
        .args(["sandbox", "runner", "policy", "validate", "-f"])
        .arg(&unknown)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stdout).contains("nope"), "{}", text(&output.stdout));
}

#[test]
fn policy_edit_in_editor_sends_the_change_with_the_etag() {
    let emu = emulator();
    let runner = emu.ready.runner_id.clone();
    let dir = tempfile::tempdir().unwrap();
    let before = etag(&emu);
    // Unchanged: nothing is sent.
    let output =
        command(&emu, &["sandbox", "runner", "policy", "edit", &runner]).env("EDITOR", "true").output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("no changes"), "{}", text(&output.stderr));
    assert_eq!(etag(&emu), before);

    let editor =
        write_script(dir.path(), "editor.sh", r#"sed -i 's/^displayName: .*/displayName: Edited in the editor/' "$1""#);
    let output =
        command(&emu, &["sandbox", "runner", "policy", "edit", &runner]).env("EDITOR", &editor).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(policy_json(&emu)["displayName"], "Edited in the editor");
    assert_ne!(etag(&emu), before);
}

#[test]
fn policy_edit_reopens_the_editor_after_a_failed_validation() {
    let emu = emulator();
    let runner = emu.ready.runner_id.clone();
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("count");
    let seen = dir.path().join("seen.yaml");
    // First save: an invalid lifetime. Second: the file shows the error as a comment; fix it.
    let editor = write_script(
        dir.path(),
        "editor.sh",
        &format!(
            r#"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}
if [ $n -eq 1 ]; then
  printf 'constraints:\n  lifecycle:\n    defaultLifetimeSeconds: 99999999\n' >> "$1"
else
  cp "$1" {seen}
  sed -i 's/99999999/3600/' "$1"
fi"#,
            counter = counter.display(),
            seen = seen.display()
        ),
    );
    let output =
        command(&emu, &["sandbox", "runner", "policy", "edit", &runner]).env("EDITOR", &editor).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "2");
    let shown = std::fs::read_to_string(&seen).unwrap();
    assert!(shown.contains("# The edited policy is invalid"), "{shown}");
    assert!(shown.contains("#   policy.constraints.lifecycle.defaultLifetimeSeconds"), "{shown}");
    assert_eq!(policy_json(&emu)["constraints"]["lifecycle"]["defaultLifetimeSeconds"], 3600);

    // Saving the same invalid text again gives up instead of looping.
    let stubborn = write_script(
        dir.path(),
        "stubborn.sh",
        r#"grep -q 'is invalid' "$1" || sed -i 's/defaultLifetimeSeconds: 3600/defaultLifetimeSeconds: -5/' "$1""#,
    );
    let output =
        command(&emu, &["sandbox", "runner", "policy", "edit", &runner]).env("EDITOR", &stubborn).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("still invalid"), "{}", text(&output.stderr));
}

#[test]
fn concurrent_policy_edits_the_second_fails() {
    let emu = emulator();
    let runner = emu.ready.runner_id.clone();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, "displayName: Changed meanwhile\n").unwrap();
    // While this edit is open, someone else applies another policy.
    let editor = write_script(
        dir.path(),
        "editor.sh",
        &format!(
            r#""{cwsbx}" sandbox runner policy edit {runner} -f {other} >/dev/null
sed -i 's/^displayName: .*/displayName: Mine/' "$1""#,
            cwsbx = cwsbx_path(),
            other = other.display()
        ),
    );
    let output =
        command(&emu, &["sandbox", "runner", "policy", "edit", &runner]).env("EDITOR", &editor).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("changed by someone else"), "{stderr}");
    assert_eq!(policy_json(&emu)["displayName"], "Changed meanwhile");

    // `-f` with a pinned stale etag fails the same way.
    let stale = fails(
        &emu,
        &["sandbox", "runner", "policy", "edit", &runner, "-f", other.to_str().unwrap(), "--etag", "c3RhbGU"],
    );
    assert!(stale.contains("changed by someone else"), "{stale}");
}

#[test]
fn sandbox_run_get_ls_stop_delete() {
    let emu = emulator();
    let output = cwsbx(
        &emu,
        &["sandbox", "run", "--tag", "cli-test", "-a", "sunk.coreweave.com/partition=sandboxes", "-o", "json"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    // Progress on stderr, one line per state, spelled as everywhere else (RUNNING, not STATE_RUNNING).
    let progress = text(&output.stderr);
    assert!(progress.contains(": PENDING (") && !progress.contains("STATE_"), "{progress}");
    let created = json(&text(&output.stdout));
    let id = created["sandboxId"].as_str().unwrap().to_owned();
    assert_eq!(created["status"]["state"], "STATE_RUNNING");

    let got = ok(&emu, &["sandbox", "get", &id, "-o", "yaml"]);
    assert!(got.contains(&format!("sandboxId: {id}")), "{got}");
    let table = ok(&emu, &["sandbox", "ls", "--tag", "cli-test"]);
    assert!(table.starts_with("SANDBOX ID"), "{table}");
    assert!(table.lines().any(|l| l.starts_with(&id) && l.contains("RUNNING")), "{table}");
    let stopped = json(&ok(&emu, &["sandbox", "stop", &id, "-o", "json"]));
    assert_eq!(stopped["sandboxId"], id.as_str());
    assert_eq!(stopped["result"], "stopping");

    let second = json(&ok(&emu, &["sandbox", "run", "--no-wait", "-o", "json"]));
    let second = second["sandboxId"].as_str().unwrap().to_owned();
    // Delete waits until the sandbox has ended and says how.
    let deleted = ok(&emu, &["sandbox", "delete", &second]);
    assert!(deleted.starts_with(&format!("sandbox {second} deleted: ")), "{deleted}");

    let missing = fails(&emu, &["sandbox", "get", "no-such-sandbox"]);
    assert!(missing.contains("NOT_FOUND"), "{missing}");
    assert!(missing.contains("CWSANDBOX_SANDBOX_NOT_FOUND"), "{missing}");
}

/// `--runtime-class`: a class the policy admits runs where the cluster has it (gVisor's kernel
/// answers), and one no Node has is refused as no runner can host it.
#[test]
fn sandbox_run_pins_a_runtime_class() {
    let emu = emulator();
    let runner = emu.ready.runner_id.clone();
    let mut policy = policy_json(&emu);
    policy["constraints"]["security"]["allowedRuntimeClasses"] = serde_json::json!(["gvisor", "kata"]);
    let file = emu.dir().join("policy.json");
    std::fs::write(&file, policy.to_string()).unwrap();
    ok(&emu, &["sandbox", "runner", "policy", "edit", &runner, "--file", file.to_str().unwrap()]);

    let refused = fails(&emu, &["sandbox", "run", "--runtime-class", "kata"]);
    assert!(refused.contains("CWSANDBOX_NO_SUITABLE_RUNNER") && refused.contains("kata"), "{refused}");
    if !emu.ready.runtime_classes.iter().any(|class| class == "gvisor") {
        cwsandbox_testkit::skip(
            "sandbox_run_pins_a_runtime_class",
            &format!("gVisor does not run here: {:?}", emu.ready.unavailable),
        );
        return;
    }
    let created = json(&ok(&emu, &["sandbox", "run", "--runtime-class", "gvisor", "-o", "json"]));
    let id = created["sandboxId"].as_str().unwrap().to_owned();
    assert_eq!(created["status"]["effectiveRuntimeClass"], "gvisor", "{created}");
    let version = ok(&emu, &["sandbox", "exec", &id, "--", "cat", "/proc/version"]);
    assert!(version.contains("Linux version 4.4.0"), "not gVisor's kernel: {version}");
    ok(&emu, &["sandbox", "delete", &id]);
}

#[test]
fn sandbox_run_reports_a_pending_reason() {
    let emu = emulator();
    // An unknown partition keeps the sandbox pending with Slurm's reason, shown while waiting.
    let output = cwsbx(&emu, &["sandbox", "run", "--timeout", "2", "-a", "sunk.coreweave.com/partition=nope"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(stderr.contains(": PENDING (") && stderr.contains("partition"), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(last.starts_with("error: sandbox ") && last.contains("not RUNNING after 2s"), "{stderr}");
    // Giving up deletes the sandbox it made, unless asked to keep it.
    assert!(last.ends_with("deleted it"), "{stderr}");
    let id = last.trim_start_matches("error: sandbox ").split(' ').next().unwrap().to_owned();
    let left = json(&ok(&emu, &["sandbox", "get", &id, "-o", "json"]));
    assert_ne!(left["status"]["state"], "STATE_PENDING", "{left}");
    let kept = cwsbx(
        &emu,
        &["sandbox", "run", "--timeout", "1", "--keep-on-timeout", "-a", "sunk.coreweave.com/partition=nope"],
    );
    let stderr = text(&kept.stderr);
    assert!(stderr.contains("it is kept (--keep-on-timeout): delete it with `cwsbx sandbox delete "), "{stderr}");
}

/// Needs the process executor in the emulator (wt-integrate); UNAVAILABLE until it lands.
#[test]
fn sandbox_exec_and_logs() {
    let emu = emulator();
    let created =
        json(&ok(&emu, &["sandbox", "run", "-o", "json", "--", "/bin/sh", "-c", "echo main-says-hi; sleep 300"]));
    let id = created["sandboxId"].as_str().unwrap().to_owned();
    let output = cwsbx(&emu, &["sandbox", "exec", &id, "--", "hostname"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).trim().contains(&id), "{}", text(&output.stdout));
    let output = cwsbx(&emu, &["sandbox", "exec", &id, "--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!(output.status.code(), Some(7));
    assert_eq!(text(&output.stdout), "out\n");
    assert_eq!(text(&output.stderr), "err\n");
    let output = command(&emu, &["sandbox", "exec", "-i", &id, "--", "cat"])
        .stdin(
            std::fs::File::open(write_script(Path::new(&std::env::temp_dir()), &format!("stdin-{id}"), "x")).unwrap(),
        )
        .output()
        .unwrap();
    assert!(text(&output.stdout).contains("set -e"), "{}", text(&output.stdout));
    let logs = ok(&emu, &["sandbox", "logs", &id]);
    assert!(logs.contains("main-says-hi"), "{logs}");
    ok(&emu, &["sandbox", "delete", &id]);
}

#[test]
fn cluster_values_get_and_apply() {
    let emu = emulator();
    let values = ok(&emu, &["cluster", "values", "get"]);
    assert!(values.contains("slurmConfig:"), "{values}");
    let as_json = json(&ok(&emu, &["cluster", "values", "get", "-o", "json"]));
    assert!(as_json["slurmConfig"].is_object(), "{as_json}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, "slurmConfig:\n  KillWait: 90\n").unwrap();
    let applied = ok(&emu, &["cluster", "values", "apply", "-f", file.to_str().unwrap(), "--dry-run", "-o", "json"]);
    let applied = json(&applied);
    assert_eq!(applied["dryRun"], true);
    assert!(applied["changes"].as_array().is_some_and(|changes| !changes.is_empty()), "{applied}");
    let applied = ok(&emu, &["cluster", "values", "apply", "-f", file.to_str().unwrap()]);
    assert!(applied.starts_with("values applied, "), "the verdict is on stdout: {applied}");
    let after = json(&ok(&emu, &["cluster", "values", "get", "-o", "json"]));
    assert_eq!(after["slurmConfig"]["KillWait"], 90, "{after}");

    // explain: the schema's description with the value in force, and the apply rule for lists.
    let explained = ok(&emu, &["cluster", "values", "explain", "slurmConfig.KillWait"]);
    assert!(explained.contains("TYPE:        integer") && explained.contains("IN FORCE:    90"), "{explained}");
    assert!(explained.contains("SIGKILL"), "the key's description: {explained}");
    let list = ok(&emu, &["cluster", "values", "explain", "nodeSets"]);
    assert!(list.contains("replaces it whole") && list.contains("FIELDS OF EACH ENTRY:"), "{list}");
    assert!(list.lines().any(|line| line.trim_start().starts_with("replicas ")), "{list}");
    let top = ok(&emu, &["cluster", "values", "explain"]);
    for section in ["slurmConfig", "containerRuntime", "auth", "faults", "strictness"] {
        assert!(top.lines().any(|line| line.trim_start().starts_with(section)), "{section} in {top}");
    }
    let unknown = fails(&emu, &["cluster", "values", "explain", "slurmConfig.KillWiat"]);
    assert!(unknown.contains("no key \"KillWiat\"") && unknown.contains("KillWait"), "{unknown}");
    let schema = json(&ok(&emu, &["cluster", "values", "schema"]));
    assert!(schema["$schema"].as_str().is_some_and(|s| s.contains("2020-12")), "{schema}");
    let as_yaml = ok(&emu, &["cluster", "values", "schema", "-o", "yaml"]);
    assert!(as_yaml.lines().any(|line| line.starts_with("$schema:")), "-o yaml is honoured: {as_yaml}");

    std::fs::write(&file, "slurmConfig:\n  KillWiat: 60\n").unwrap();
    let refused = fails(&emu, &["cluster", "values", "apply", "-f", file.to_str().unwrap()]);
    assert!(refused.contains("KillWiat"), "{refused}");
}

#[test]
fn errors_are_one_line_with_a_non_zero_exit() {
    let emu = emulator();
    let output = command(&emu, &["sandbox", "ls"]).env("CWSANDBOX_API_KEY", "wrong").output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("UNAUTHENTICATED"), "{stderr}");
    // A user token may not administer runners.
    let output =
        command(&emu, &["sandbox", "runner", "list"]).env("CWSANDBOX_API_KEY", &emu.ready.user_token).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("PERMISSION_DENIED"), "{}", text(&output.stderr));
}

#[test]
fn emulator_clock_tenants_faults_and_reset() {
    let emu = emulator();
    let frozen = ok(&emu, &["emulator", "clock", "freeze"]);
    assert!(frozen.trim_end().ends_with(" frozen"), "{frozen}");
    let before = json(&ok(&emu, &["emulator", "clock", "get", "-o", "json"]));
    let after = json(&ok(&emu, &["emulator", "clock", "advance", "1h30m", "-o", "json"]));
    let seconds = |clock: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().unwrap()).unwrap().timestamp()
    };
    assert_eq!(seconds(&after) - seconds(&before), 5400);
    assert!(ok(&emu, &["emulator", "clock", "resume"]).trim_end().ends_with(" running"));
    let bad_duration = cwsbx(&emu, &["emulator", "clock", "advance", "5x"]);
    assert!(!bad_duration.status.success() && text(&bad_duration.stderr).contains("unknown unit"));

    let tenant = json(&ok(&emu, &["emulator", "tenant", "create", "--org", "team-a", "-o", "json"]));
    assert_eq!(tenant["organization"], "team-a");
    let user_token = tenant["userToken"].as_str().unwrap().to_owned();
    let exports = ok(&emu, &["emulator", "tenant", "create", "--env"]);
    assert!(exports.contains("export CWSANDBOX_API_KEY=cwsbx-tenant-user-"), "{exports}");
    let listed = ok(&emu, &["emulator", "tenant", "list"]);
    assert!(listed.starts_with("ORG") && listed.contains("team-a") && listed.contains("tenant-1"), "{listed}");
    let taken = fails(&emu, &["emulator", "tenant", "create", "--org", "team-a"]);
    assert!(taken.contains("exists already"), "{taken}");

    // A fault fails the tenant's next sandbox listing once, and says so.
    let added = ok(
        &emu,
        &[
            "emulator",
            "faults",
            "add",
            "--method",
            "ListSandboxes",
            "--code",
            "UNAVAILABLE",
            "--times",
            "1",
            "--org",
            "team-a",
        ],
    );
    assert!(added.contains("fault-1") && added.contains("first 1"), "{added}");
    let as_tenant = |args: &[&str]| {
        let mut command = command(&emu, args);
        command.env("CWSANDBOX_API_KEY", &user_token);
        command.output().unwrap()
    };
    let failed = as_tenant(&["sandbox", "ls"]);
    assert!(
        !failed.status.success() && text(&failed.stderr).contains("injected by fault fault-1"),
        "{}",
        text(&failed.stderr)
    );
    assert!(as_tenant(&["sandbox", "ls"]).status.success(), "once only");
    let faults = json(&ok(&emu, &["emulator", "faults", "list", "-o", "json"]));
    assert_eq!((faults[0]["hits"].as_str(), faults[0]["matched"].as_str()), (Some("1"), Some("2")), "{faults}");
    let bad = fails(&emu, &["emulator", "faults", "add", "--method", "NoSuchMethod", "--code", "UNAVAILABLE"]);
    assert!(bad.contains("fault.match.method"), "{bad}");
    // Success lines go to stdout; -o json makes them objects.
    assert_eq!(ok(&emu, &["emulator", "faults", "clear"]), "1 faults removed\n");
    assert_eq!(json(&ok(&emu, &["emulator", "faults", "clear", "-o", "json"])), serde_json::json!({"removed": 0}));
    // The process runtime pulls no images: a prune has nothing to remove, and says why.
    let pruned = ok(&emu, &["image", "prune"]);
    assert!(pruned.contains("pulls no images") && pruned.contains("nothing to prune"), "{pruned}");
    assert_eq!(json(&ok(&emu, &["image", "prune", "-o", "json"])), serde_json::json!({}));

    let reset = ok(&emu, &["emulator", "reset", "--org", "team-a"]);
    assert!(reset.contains("organization team-a reset"), "{reset}");
    assert!(cwsbx(&emu, &["emulator", "tenant", "delete", "team-a"]).status.success());
    let gone = fails(&emu, &["emulator", "tenant", "delete", "team-a"]);
    assert!(gone.contains("no tenant"), "{gone}");
    assert!(cwsbx(&emu, &["emulator", "reset"]).status.success());
}
