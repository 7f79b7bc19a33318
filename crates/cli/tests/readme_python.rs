//! The docs' Python snippets, run as a user pastes them, as `readme_recipes.rs` runs the shell
//! ones. A ```python block preceded by `<!-- python recipe: NAME -->` in one of [`DOCS`] is run
//! unchanged by the published client (`cwsandbox[cli]==1.22.0`, the testkit's venv of
//! `tests/python/requirements.txt`) against a fresh emulator on port 0, with the variables
//! `serve` prints (`CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY`, …) in its environment; it must exit
//! 0, and what it prints is checked where the docs say what it prints.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::Context;
use cwsandbox_testkit::emulator::{EmulatorProcess, built_emulator_binary};

/// The documents whose marked Python blocks run, relative to the repository's root.
const DOCS: &[&str] = &["README.md", "crates/emulator/README.md", "docs/runtimes.md"];

const MARKER: &str = "<!-- python recipe: ";

/// The marked Python blocks of one document, by name.
fn python_recipes(doc: &str, text: &str) -> BTreeMap<String, String> {
    let mut recipes = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(marker) = line.trim().strip_prefix(MARKER) else { continue };
        // The first word names it; the rest of the marker is a comment.
        let name = marker.split_whitespace().next().filter(|name| *name != "-->");
        let name = name.unwrap_or_else(|| panic!("{doc}: a python recipe marker names it: {line}"));
        assert_eq!(
            lines.next().map(str::trim),
            Some("```python"),
            "{doc}: the marker {line:?} precedes a ```python block"
        );
        let body: Vec<&str> = lines.by_ref().take_while(|line| line.trim() != "```").collect();
        let previous = recipes.insert(name.to_owned(), body.join("\n") + "\n");
        assert!(previous.is_none(), "{doc}: two python recipes named {name}");
    }
    recipes
}

/// What a recipe must print, where the docs say it.
fn check(name: &str, stdout: &str) {
    match name {
        // "sandbox-<id>: the Pod's name", then the file read back.
        "README.md:quickstart" => {
            assert!(stdout.lines().next().is_some_and(|line| line.starts_with("sandbox-")), "{stdout}");
            assert!(stdout.contains("b'hello'"), "{stdout}");
        }
        "crates/emulator/README.md:services" => assert!(stdout.contains("hello from the sandbox"), "{stdout}"),
        other => panic!("a python recipe {other} this test does not know: say here what it prints"),
    }
}

#[test]
fn the_docs_python_snippets_run_as_written_with_the_published_client() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut recipes = BTreeMap::new();
    for doc in DOCS {
        let text = std::fs::read_to_string(root.join(doc)).with_context(|| format!("reading {doc}"))?;
        for (name, body) in python_recipes(doc, &text) {
            recipes.insert(format!("{doc}:{name}"), body);
        }
    }
    assert_eq!(
        recipes.keys().map(String::as_str).collect::<Vec<_>>(),
        ["README.md:quickstart", "crates/emulator/README.md:services"],
        "the docs' python recipes"
    );
    let python = cwsandbox_testkit::python_env().context("python venv")?;
    let emulator_binary = built_emulator_binary()?;
    for (name, body) in &recipes {
        // A fresh emulator each, as a user's session has (the process runtime: no network).
        let emulator = EmulatorProcess::start(&emulator_binary, &[])?;
        let temp = tempfile::tempdir()?;
        let script = temp.path().join("recipe.py");
        std::fs::write(&script, body)?;
        let output = Command::new(python.python())
            .arg(&script)
            .current_dir(temp.path())
            .envs(emulator.env())
            .env("CWSANDBOX_USER_TOKEN", &emulator.ready.user_token)
            .env("CWSANDBOX_RUNNER_ID", &emulator.ready.runner_id)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "python recipe {name} failed:\n{body}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- emulator log\n{}",
            emulator.log()
        );
        check(name, &stdout);
        let status = emulator.stop()?;
        assert!(status.success(), "{name}: the emulator did not stop cleanly: {status:?}");
    }
    Ok(())
}
