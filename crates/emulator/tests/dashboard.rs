//! The web dashboard (`cwsandbox-dashboard`, under `/ui/`) in a real browser: Debian's Chromium
//! driven by playwright-core from npm (`tests/browser/dashboard.test.mjs`), against the emulator
//! binary on the `fresh` scenario with its process runtime, with sandboxes made by the published
//! Python client. The test command installs Chromium and Node.js; the npm package is installed
//! here from the committed lock file. Screenshots are kept in
//! `$CARGO_TARGET_TMPDIR/dashboard-screenshots`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cwsandbox_testkit::emulator::EmulatorProcess;
use cwsandbox_testkit::text;

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");
/// The browser test's own bound; its steps take a few seconds each.
const BROWSER_TIMEOUT_SECONDS: &str = "300";
const CHROMIUM: &str = "/usr/bin/chromium";

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// `npm ci` from the committed lock file, unless the pinned playwright-core is installed already.
fn install_playwright() -> Result<()> {
    let dir = browser_dir();
    let pinned: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("package.json"))?)?;
    let wanted = pinned["dependencies"]["playwright-core"].as_str().context("package.json pins playwright-core")?;
    let installed = std::fs::read_to_string(dir.join("node_modules/playwright-core/package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|package| package["version"].as_str().map(str::to_owned));
    if installed.as_deref() == Some(wanted) {
        return Ok(());
    }
    let output = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .output()
        .context("npm (Node.js) is needed for the dashboard's browser test; the test command installs it")?;
    if !output.status.success() {
        bail!("npm ci failed:\n{}{}", text(&output.stdout), text(&output.stderr));
    }
    Ok(())
}

#[test]
fn the_dashboard_shows_the_cluster_live_in_chromium() -> Result<()> {
    if !Path::new(CHROMIUM).exists() {
        bail!("{CHROMIUM} is missing: the dashboard's browser test needs Debian's chromium (scripts/test installs it)");
    }
    install_playwright()?;
    let python = cwsandbox_testkit::python_env().context("python venv")?;
    let emulator = EmulatorProcess::start(Path::new(BINARY), &["--scenario", "fresh", "--runtime", "process"])?;
    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    let started = Instant::now();
    let output = Command::new("timeout")
        .args(["--signal=KILL", BROWSER_TIMEOUT_SECONDS, "node", "dashboard.test.mjs"])
        .current_dir(browser_dir())
        .env("BASE_URL", &emulator.ready.base_url)
        .env("ADMIN_TOKEN", &emulator.ready.admin_token)
        .env("USER_TOKEN", &emulator.ready.user_token)
        .env("RUNNER_ID", &emulator.ready.runner_id)
        .env("PYTHON", python.python())
        .env("SCREENSHOT_DIR", &screenshots)
        .env("CHROMIUM", CHROMIUM)
        .output()?;
    let report = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "the browser test failed after {:?}:\n{report}\nemulator log:\n{}",
        started.elapsed(),
        emulator.log()
    );
    eprintln!("{report}browser test took {:?}; screenshots in {}", started.elapsed(), screenshots.display());
    for name in ["cluster-fresh.png", "readiness-fresh.png", "cluster-outofcpu.png", "sandbox-page.png"] {
        let size = std::fs::metadata(screenshots.join(name)).map(|meta| meta.len()).unwrap_or(0);
        assert!(size > 10_000, "screenshot {name} was not saved ({size} bytes)");
    }

    let problems = emulator.problems();
    let status = emulator.stop()?;
    assert!(status.success(), "SIGTERM must end the emulator cleanly: {status:?}");
    assert!(problems.is_empty(), "the emulator logged problems:\n{}", problems.join("\n"));
    Ok(())
}
