//! The README's shell recipes, run as a new user pastes them. Blocks marked
//! `<!-- recipe: NAME N -->` are taken in order of N for each NAME and run in one bash session
//! per NAME, with two substitutions only: a path the recipe names under `/tmp/` moves to a
//! directory of the test's own (so runs beside each other and beside a user's emulator do not
//! share files), and `cargo run -q -p PACKAGE --` becomes the built binary (what `cargo run`
//! runs). Only the recipe's own text is rewritten, before the binaries' paths go in: a checkout
//! (and so its target directory) under `/tmp` keeps its paths. HOME is a fresh directory with
//! `~/.local/bin` on PATH, as a user's shell has it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use cwsandbox_testkit::emulator::built_emulator_binary;

const CWSBX: &str = env!("CARGO_BIN_EXE_cwsbx");

/// The marked blocks of the README, by recipe name, in their order.
fn recipes(readme: &str) -> BTreeMap<String, BTreeMap<u32, String>> {
    let mut recipes: BTreeMap<String, BTreeMap<u32, String>> = BTreeMap::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(marker) = line.trim().strip_prefix("<!-- recipe: ") else { continue };
        let mut words = marker.split_whitespace();
        let (Some(name), Some(order)) = (words.next(), words.next().and_then(|n| n.parse::<u32>().ok())) else {
            panic!("a recipe marker names the recipe and its step: {line}");
        };
        assert_eq!(lines.next().map(str::trim), Some("```sh"), "the marker {line:?} precedes a ```sh block");
        let body: Vec<&str> = lines.by_ref().take_while(|line| line.trim() != "```").collect();
        recipes.entry(name.to_owned()).or_default().insert(order, body.join("\n"));
    }
    recipes
}

/// One step of a recipe as the test runs it. `/tmp/` is replaced where it begins a path in the
/// recipe's text (at the start of a word, after a redirection, `=`, `:` or a quote), never inside
/// another path (`/var/tmp/`, `./tmp/`) and never in the binaries' paths, which go in afterwards.
fn substitute(step: &str, emulator: &str, cwsbx: &str, scratch: &str) -> String {
    let mut out = String::with_capacity(step.len());
    let mut rest = step;
    while let Some(at) = rest.find("/tmp/") {
        let starts_a_path = out
            .chars()
            .chain(rest[..at].chars())
            .last()
            .is_none_or(|before| before.is_whitespace() || "<>=:'\"(|;&".contains(before));
        out.push_str(&rest[..at]);
        if starts_a_path {
            out.push_str(scratch.trim_end_matches('/'));
            out.push('/');
        } else {
            out.push_str("/tmp/");
        }
        rest = &rest[at + "/tmp/".len()..];
    }
    out.push_str(rest);
    out.replace("cargo run -q -p cwsandbox-emulator --", emulator).replace("cargo run -q -p cwsbx --", cwsbx)
}

#[test]
fn only_the_recipes_own_tmp_paths_move() {
    let step = "cargo run -q -p cwsandbox-emulator -- serve > /tmp/cwsandbox.env && . /tmp/cwsandbox.env\n\
                cargo run -q -p cwsbx -- x --kubeconfig=/tmp/k --file \"/tmp/a\" /var/tmp/keep ./tmp/keep";
    let emulator = "/tmp/cwsandbox-emulator/target/debug/cwsandbox-emulator";
    let cwsbx = "/tmp/cwsandbox-emulator/target/debug/cwsbx";
    assert_eq!(
        substitute(step, emulator, cwsbx, "/tmp/t1/tmp"),
        "/tmp/cwsandbox-emulator/target/debug/cwsandbox-emulator serve > /tmp/t1/tmp/cwsandbox.env \
         && . /tmp/t1/tmp/cwsandbox.env\n\
         /tmp/cwsandbox-emulator/target/debug/cwsbx x --kubeconfig=/tmp/t1/tmp/k --file \"/tmp/t1/tmp/a\" \
         /var/tmp/keep ./tmp/keep",
    );
}

#[test]
fn the_readme_recipes_run_as_written() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let recipes = recipes(&readme);
    assert_eq!(recipes.keys().collect::<Vec<_>>(), ["guide", "quickstart"], "the README's recipes");
    let emulator = built_emulator_binary()?;
    for (name, steps) in &recipes {
        let temp = tempfile::tempdir()?;
        let home = temp.path().join("home");
        let scratch = temp.path().join("tmp");
        std::fs::create_dir_all(home.join(".local/bin"))?;
        std::fs::create_dir_all(&scratch)?;
        let mut script = String::from("set -euo pipefail\n");
        for step in steps.values() {
            script.push_str(&substitute(step, &emulator.display().to_string(), CWSBX, &scratch.display().to_string()));
            script.push('\n');
        }
        script.push_str(match name.as_str() {
            // Its last step stops the emulator: it is gone soon after (tail waits for the pid).
            "quickstart" => "timeout 30 tail --pid=\"$CWSANDBOX_EMULATOR_PID\" -f /dev/null && echo emulator-gone\n",
            // It leaves its emulator running, as a user's session would.
            _ => "kill \"$CWSANDBOX_EMULATOR_PID\"\n",
        });
        let path = format!("{}/.local/bin:{}", home.display(), std::env::var("PATH").unwrap_or_default());
        let output = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(temp.path())
            .env("HOME", &home)
            .env("PATH", path)
            .env("TMPDIR", &scratch)
            .env("RUST_LOG", "warn")
            .env_remove("CWSANDBOX_BASE_URL")
            .env_remove("CWSANDBOX_API_KEY")
            .env_remove("CWSANDBOX_RUNNER_ID")
            .env_remove("KUBECONFIG")
            .output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "recipe {name} failed:\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
        match name.as_str() {
            // The curl line answers the runner; the last step stopped the emulator itself.
            "quickstart" => {
                assert!(stdout.contains(r#""runnerId":"cks-runner""#), "{stdout}");
                assert!(stdout.trim_end().ends_with("emulator-gone"), "the recipe's own kill stops it: {stdout}");
            }
            // kubectl, yq, cwic, sacct and the API each answered.
            "guide" => {
                for expected in ["slurm-scheduler-", "--slurm-kill-wait", "schedulerName: slurm-scheduler", " RUNNING "]
                {
                    assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
                }
                assert!(stdout.contains(r#""JOB_STATE_RUNNING""#), "{stdout}");
            }
            other => panic!("an unexpected recipe {other}"),
        }
    }
    Ok(())
}
