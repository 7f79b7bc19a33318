//! The guide's own command lines (docs/facts/sunk-guide.md#step-2) through `cwsbx` (the `cwic`
//! link, the curl configuration of `guide-env`), and what a new user finds: `sandbox describe`,
//! `logs -o json`, completion scripts, the PATH warning of `install-links`, connection errors that
//! name the URL.

use std::path::Path;
use std::process::{Command, Output};

use cwsandbox_testkit::emulator::{EmulatorProcess, built_emulator_binary, emulator};
use cwsandbox_testkit::stdout_then_stderr;

const CWSBX: &str = env!("CARGO_BIN_EXE_cwsbx");

fn command(emu: &EmulatorProcess, program: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command.args(args).envs(emu.env()).env("CWSANDBOX_RUNNER_ID", &emu.ready.runner_id);
    command
}

fn ok(output: Output) -> String {
    assert!(output.status.success(), "{}", stdout_then_stderr(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_guides_cwic_lines_run_through_the_cwic_link() -> anyhow::Result<()> {
    let emu = emulator();
    let bin = tempfile::tempdir()?;
    let dir = bin.path().to_str().unwrap_or_default();
    // Not on PATH: the links are made and the user is told how to reach them.
    let installed = Command::new(CWSBX).args(["slurm", "install-links", dir]).env("PATH", "/usr/bin:/bin").output()?;
    assert!(installed.status.success(), "{}", stdout_then_stderr(&installed));
    let stderr = String::from_utf8_lossy(&installed.stderr);
    assert!(stderr.contains("is not on PATH") && stderr.contains("export PATH="), "{stderr}");
    let on_path = format!("{dir}:/usr/bin:/bin");
    let quiet = Command::new(CWSBX).args(["slurm", "install-links", dir]).env("PATH", &on_path).output()?;
    assert!(quiet.status.success() && quiet.stderr.is_empty(), "{}", stdout_then_stderr(&quiet));

    let cwic = bin.path().join("cwic");
    // The guide's step 2, as written: `cwic sandbox runner policy get [RUNNER-ID]`.
    let policy = ok(command(&emu, &cwic, &["sandbox", "runner", "policy", "get", &emu.ready.runner_id]).output()?);
    assert!(policy.contains("schedulerName: slurm-scheduler"), "{policy}");
    let policy_file = bin.path().join("slurm-policy.yaml");
    std::fs::write(&policy_file, &policy)?;
    let file = policy_file.to_str().unwrap_or_default();
    let valid = ok(command(&emu, &cwic, &["sandbox", "runner", "policy", "validate", "-f", file]).output()?);
    assert!(valid.ends_with(": valid\n"), "{valid}");
    let edited = ok(command(&emu, &cwic, &["sandbox", "runner", "policy", "edit", "-f", file]).output()?);
    assert!(edited.starts_with(&format!("runner {}: policy updated", emu.ready.runner_id)), "{edited}");
    // Its help speaks of itself as cwic.
    let help = ok(Command::new(&cwic).args(["--help"]).output()?);
    assert!(help.contains("Usage: cwic "), "{help}");
    Ok(())
}

#[test]
fn guide_env_makes_the_guides_curl_line_reach_the_emulator_unchanged() -> anyhow::Result<()> {
    let emu = emulator();
    let dir = tempfile::tempdir()?;
    // The guide's GetManagedRunner line, verbatim but for [RUNNER-ID].
    let script = format!(
        r#"set -euo pipefail
eval "$("{CWSBX}" guide-env --dir "{dir}")"
curl --fail-with-body --silent --show-error -X POST \
  'https://api.coreweave.com/coreweave.sandbox.v1.RunnerManagementService/GetManagedRunner' \
  -H "Authorization: Bearer $TOKEN" \
  -H "Content-Type: application/json" \
  -H "Connect-Protocol-Version: 1" \
  --data '{{"runnerId": "{runner}"}}' \
  -o runner.json
jq -r '.identity.runnerId + " " + .etag' runner.json
"#,
        dir = dir.path().display(),
        runner = emu.ready.runner_id,
    );
    let output =
        command(&emu, Path::new("bash"), &["-c", &script]).current_dir(dir.path()).env_remove("CURL_HOME").output()?;
    let said = ok(output);
    assert!(said.starts_with(&format!("{} ", emu.ready.runner_id)), "{said}");
    // The help promises what is written, and only that: `.curlrc` (curl wrote runner.json).
    let mut written: Vec<String> = std::fs::read_dir(dir.path())?
        .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    written.sort();
    assert_eq!(written, [".curlrc", "runner.json"]);
    let help = ok(command(&emu, Path::new(CWSBX), &["guide-env", "--help"]).output()?);
    assert!(help.contains(".curlrc") && help.contains("insecure"), "{help}");
    assert!(!help.contains("CA certificate") && !help.contains("emulator's CA"), "{help}");
    Ok(())
}

#[test]
fn describe_shows_state_pod_job_and_events_in_one_screen() -> anyhow::Result<()> {
    let emu = emulator();
    let created = ok(command(
        &emu,
        Path::new(CWSBX),
        &[
            "sandbox",
            "run",
            "-o",
            "json",
            "-a",
            "sunk.coreweave.com/partition=sandboxes",
            "--",
            "sh",
            "-c",
            "echo hi; sleep 300",
        ],
    )
    .output()?);
    let created: serde_json::Value = serde_json::from_str(&created)?;
    let id = created["sandboxId"].as_str().unwrap_or_default().to_owned();
    // The emulator's log tells the sandbox's story by its id.
    let log = emu.log();
    for line in ["sandbox PENDING: Slurm job 1000 allocated", "sandbox RUNNING"] {
        let found = log.lines().any(|logged| logged.contains(line) && logged.contains(&format!("sandbox_id={id}")));
        assert!(found, "no {line:?} for {id} in the log:\n{log}");
    }
    let screen = ok(command(&emu, Path::new(CWSBX), &["sandbox", "describe", &id]).output()?);
    for expected in [
        format!("Sandbox:      {id}"),
        "State:        RUNNING".to_owned(),
        "  Scheduler:  slurm-scheduler".to_owned(),
        "  Grace:      30s".to_owned(),
        "sunk.coreweave.com/partition=sandboxes".to_owned(),
        "Slurm job:    1000".to_owned(),
        "  Partition:  sandboxes".to_owned(),
        "  State:      RUNNING".to_owned(),
        "Events:".to_owned(),
        "Scheduled".to_owned(),
    ] {
        assert!(screen.contains(&expected), "no {expected:?} in:\n{screen}");
    }
    let as_json: serde_json::Value =
        serde_json::from_str(&ok(
            command(&emu, Path::new(CWSBX), &["sandbox", "describe", &id, "-o", "json"]).output()?
        ))?;
    assert_eq!(as_json["slurmJob"]["jobId"], 1000, "{as_json}");
    assert_eq!(as_json["pod"]["spec"]["schedulerName"], "slurm-scheduler", "{as_json}");

    // The log as JSON lines, one object per entry with its timestamp.
    let lines = ok(command(&emu, Path::new(CWSBX), &["sandbox", "logs", "-o", "json", &id]).output()?);
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap_or_default())?;
    assert_eq!(first["text"], "hi\n", "{lines}");
    assert!(first["timestamp"].is_string(), "{lines}");

    // A user token sees its sandbox, and is told that the cluster's side needs an admin.
    let user = ok(command(&emu, Path::new(CWSBX), &["sandbox", "describe", &id])
        .env("CWSANDBOX_API_KEY", &emu.ready.user_token)
        .output()?);
    assert!(user.contains("State:        RUNNING") && user.contains("Cluster:      <not available: "), "{user}");
    Ok(())
}

#[test]
fn completion_scripts_for_each_shell() -> anyhow::Result<()> {
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef cwsbx"), ("fish", "complete -c cwsbx")] {
        let script = ok(Command::new(CWSBX).args(["completion", shell]).output()?);
        assert!(script.contains(marker) && script.contains("sandbox"), "{shell}: {script}");
    }
    let emulator = built_emulator_binary()?;
    let script = ok(Command::new(emulator).args(["completion", "bash"]).output()?);
    assert!(script.contains("cwsandbox-emulator") && script.contains("--background"), "{script}");
    Ok(())
}

/// Runs `program args` with stdout a pipe whose reader is already gone (`… | head` once head has
/// exited; closed before the start, so every write meets it) and returns how it ended.
fn with_a_closed_stdout(mut command: Command) -> anyhow::Result<Output> {
    let (reader, writer) = std::io::pipe()?;
    drop(reader);
    Ok(command.stdout(writer).stderr(std::process::Stdio::piped()).output()?)
}

/// Ended by SIGPIPE as `ls | head` is (141 under `pipefail`), with nothing on stderr: no panic.
fn ended_quietly_by_sigpipe(what: &str, output: &Output) {
    use std::os::unix::process::ExitStatusExt;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{what} panicked on a closed pipe: {stderr}");
    assert_eq!(output.status.signal(), Some(SIGPIPE), "{what}: {:?}, stderr: {stderr}", output.status);
    assert!(stderr.is_empty(), "{what} said something on a closed pipe: {stderr}");
}

/// SIGPIPE's number on Linux.
const SIGPIPE: i32 = 13;

#[test]
fn a_closed_pipe_ends_the_commands_quietly() -> anyhow::Result<()> {
    for shell in ["bash", "zsh"] {
        let output = with_a_closed_stdout({
            let mut command = Command::new(CWSBX);
            command.args(["completion", shell]);
            command
        })?;
        ended_quietly_by_sigpipe(&format!("cwsbx completion {shell}"), &output);
    }
    let emulator = built_emulator_binary()?;
    let mut completion = Command::new(&emulator);
    completion.args(["completion", "bash"]);
    ended_quietly_by_sigpipe("cwsandbox-emulator completion bash", &with_a_closed_stdout(completion)?);
    // Commands that print what the server answered: a list, the Slurm view.
    let emu = self::emulator();
    for args in
        [&["sandbox", "ls"][..], &["sandbox", "runner", "list"], &["slurm", "sinfo"], &["sandbox", "ls", "-o", "json"]]
    {
        let output = with_a_closed_stdout(command(&emu, Path::new(CWSBX), args))?;
        ended_quietly_by_sigpipe(&format!("cwsbx {args:?}"), &output);
    }
    Ok(())
}

#[test]
fn a_connection_error_names_the_url_it_tried_and_why() -> anyhow::Result<()> {
    // A port nothing listens on: bind one, note it, free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let url = format!("http://127.0.0.1:{port}");
    let output = Command::new(CWSBX)
        .args(["sandbox", "ls"])
        .env("CWSANDBOX_BASE_URL", &url)
        .env("CWSANDBOX_API_KEY", "x")
        .output()?;
    assert_eq!(output.status.code(), Some(1));
    let said = stdout_then_stderr(&output);
    assert!(said.contains(&format!("could not reach {url}")), "{said}");
    Ok(())
}

/// `line` run by a shell on a pseudo-terminal of 200 columns (util-linux's `script`), as a user's
/// terminal runs it: everything the terminal received, stdout and stderr together.
fn on_a_terminal(emu: &EmulatorProcess, line: &str) -> anyhow::Result<(String, std::process::ExitStatus)> {
    let shell_line = format!("stty cols 200 rows 40; {line}");
    let output = command(emu, Path::new("script"), &["-qec", &shell_line, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()?;
    Ok((String::from_utf8_lossy(&output.stdout).into_owned(), output.status))
}

/// The frames a spinner draws: braille characters (indicatif's default ticks).
fn spinner_frames(screen: &str) -> std::collections::BTreeSet<char> {
    screen.chars().filter(|c| ('\u{2800}'..='\u{28ff}').contains(c)).collect()
}

#[test]
fn waits_show_a_spinner_on_a_terminal_and_plain_lines_elsewhere() -> anyhow::Result<()> {
    // The guide's realistic timing: the prolog takes simulated time, so there is a wait to show.
    let emu = emulator();
    let cwsbx = CWSBX.to_owned();
    let (screen, status) = on_a_terminal(&emu, &format!("{cwsbx} sandbox run"))?;
    assert!(status.success(), "{screen}");
    let table = screen.rsplit("\x1b[2K").next().unwrap_or_default();
    assert!(table.starts_with("SANDBOX ID"), "the spinner is cleared before the result:\n{screen:?}");
    let id = table.lines().nth(1).and_then(|row| row.split_whitespace().next()).unwrap_or_default().to_owned();
    assert_eq!(id.len(), 16, "{table}");
    // One line redrawn in place with the state and its reason as they change: no plain lines.
    assert!(screen.contains(&format!(" {id}: starting")), "{screen:?}");
    assert!(screen.contains(&format!(" {id}: PENDING (Slurm job ")), "{screen:?}");
    assert!(screen.contains(&format!(" {id}: RUNNING")), "{screen:?}");
    assert!(!screen.contains(&format!("\n{id}: PENDING")), "{screen:?}");
    assert!(spinner_frames(&screen).len() >= 2, "the spinner turns: {screen:?}");

    let (screen, status) = on_a_terminal(&emu, &format!("{cwsbx} sandbox delete {id}"))?;
    assert!(status.success(), "{screen}");
    assert!(screen.contains(&format!(" {id}: ending")), "{screen:?}");
    let result = screen.rsplit("\x1b[2K").next().unwrap_or_default();
    assert!(result.starts_with(&format!("sandbox {id}")), "the spinner is cleared before the result:\n{screen:?}");

    // Not a terminal (a script's log): one plain line per change on stderr, no escape codes.
    let output = command(&emu, Path::new(CWSBX), &["sandbox", "run", "-o", "json"]).output()?;
    let progress = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{progress}");
    assert!(!progress.contains('\x1b') && spinner_frames(&progress).is_empty(), "{progress:?}");
    let lines: Vec<&str> = progress.lines().collect();
    assert!(lines.iter().any(|line| line.contains(": PENDING (Slurm job ")), "{progress}");
    assert_eq!(lines.last().map(|line| line.ends_with(": RUNNING")), Some(true), "{progress}");
    Ok(())
}
