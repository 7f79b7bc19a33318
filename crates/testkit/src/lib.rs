//! Provisioning of the external tools the test suites judge compatibility with, and the emulator
//! harnesses: the binary as a child process ([`emulator::EmulatorProcess`]) and the library in
//! this process ([`in_process`], with a fake runtime), and a local OCI registry
//! ([`registry::LocalRegistry`]) with test images pushed to it ([`images::push_test_images`]).

pub mod emulator;
pub mod images;
pub mod in_process;
pub mod procs;
pub mod registry;
pub mod test_host;

/// A test (or part of one) that cannot run on this machine says so and checks nothing; under CI
/// (`CI=true`) that fails the run with the reason, unless `tests/tolerated_skips.txt` lists `test`
/// with why: the test command never passes by skipping. (The executor's tests, which cannot
/// depend on this crate, have the same rule in their `common`.)
pub fn skip(test: &str, reason: &str) {
    let tolerated = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/tolerated_skips.txt"))
        .unwrap_or_default()
        .lines()
        .any(|line| line.split_once(':').is_some_and(|(name, why)| name.trim() == test && !why.trim().is_empty()));
    if std::env::var("CI").as_deref() == Ok("true") && !tolerated {
        panic!(
            "{test} cannot run here: {reason}. Under CI a missing prerequisite fails the run: install it, or list \
             the test in tests/tolerated_skips.txt with why"
        );
    }
    eprintln!("SKIPPED {test}: {reason}");
}

/// How long [`eventually`] keeps trying: a safety net for a broken build, not a timing claim.
pub const EVENTUALLY: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits for something that happens by itself, outside the test's control (a process ending, an
/// exit reaching the world): polls `probe` until it gives `Ok`, 5 ms apart at first and up to
/// 100 ms, and panics after [`EVENTUALLY`] naming `what` and the last `Err` (what was seen instead).
/// Where an event can be awaited (a stream, a channel, a log line), await it instead.
pub async fn eventually<T, E, F, Fut>(what: &str, mut probe: F) -> T
where
    E: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, E>>,
{
    let deadline = std::time::Instant::now() + EVENTUALLY;
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(seen) if std::time::Instant::now() >= deadline => {
                panic!("gave up after {EVENTUALLY:?} waiting for {what}; last seen: {seen:?}")
            }
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
}

/// A command's output bytes as text. Invalid UTF-8 becomes U+FFFD rather than a panic, so a
/// failing check still shows what was said.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A command's stdout followed by its stderr, as one text: for checking that a message was said,
/// whichever stream said it, and for showing all of it when a check fails.
pub fn stdout_then_stderr(output: &Output) -> String {
    format!("{}{}", text(&output.stdout), text(&output.stderr))
}

/// A command's stdout and stderr as two texts, `(stdout, stderr)`: for checking which stream a
/// message went to.
pub fn stdout_and_stderr(output: &Output) -> (String, String) {
    (text(&output.stdout), text(&output.stderr))
}

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail};

/// The workspace root (this crate lives in `crates/testkit`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/testkit has two ancestors").to_path_buf()
}

/// Where installed tools live: under `target/`, so `cargo clean` removes them.
pub fn tools_dir() -> PathBuf {
    workspace_root().join("target").join("test-tools")
}

/// A Python virtual environment holding the pinned published client.
pub struct PythonEnv {
    root: PathBuf,
}

impl PythonEnv {
    /// The environment's interpreter.
    pub fn python(&self) -> PathBuf {
        self.root.join("bin").join("python")
    }

    /// The environment's `bin` directory (the `cwsandbox` command line lives there).
    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("bin")
    }

    /// Runs a script of `tests/python/` with arguments and returns its output.
    pub fn run_script(&self, script: &str, args: &[&Path]) -> Result<Output> {
        let path = workspace_root().join("tests").join("python").join(script);
        Command::new(self.python())
            .arg(&path)
            .args(args)
            .output()
            .with_context(|| format!("running {}", path.display()))
    }
}

/// The venv of `tests/python/requirements.txt`, created on first use.
pub fn python_env() -> Result<PythonEnv> {
    let requirements = workspace_root().join("tests/python/requirements.txt");
    let root = tools_dir().join("venv");
    provision(&root, &[&requirements], |root| {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
        run(Command::new(&python).args(["-m", "venv", "--clear"]).arg(root))?;
        run(Command::new(root.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements))
    })?;
    Ok(PythonEnv { root })
}

/// The buf CLI of `tests/tools/package.json`, installed from the npm registry on first use.
pub fn buf() -> Result<PathBuf> {
    let pins = workspace_root().join("tests/tools");
    let manifest = pins.join("package.json");
    let lock = pins.join("package-lock.json");
    let root = tools_dir().join("npm");
    provision(&root, &[&manifest, &lock], |root| {
        fs::create_dir_all(root)?;
        fs::copy(&manifest, root.join("package.json"))?;
        fs::copy(&lock, root.join("package-lock.json"))?;
        run(Command::new("npm").args(["ci", "--silent", "--no-audit", "--no-fund", "--prefix"]).arg(root))
    })?;
    Ok(root.join("node_modules/.bin/buf"))
}

/// The clients generated from `proto/` by `buf generate` (`buf.gen.yaml`), ready to run: the
/// TypeScript one compiled to `clients/ts/dist/`, the Python one importable from
/// `clients/python/gen/`.
#[derive(Debug, Clone)]
pub struct GeneratedClients {
    /// `clients/ts`: the npm project (run `node` there on `dist/…`).
    pub ts_project: PathBuf,
    /// The interpreter of `clients/python/.venv` (grpcio, protobuf).
    pub python: PathBuf,
    /// `clients/python/gen`, for `PYTHONPATH`.
    pub python_gen: PathBuf,
}

/// Installs the pinned generators and runtimes where `buf.gen.yaml` expects them
/// (`npm ci --prefix clients/ts` from its lock file; a venv `clients/python/.venv` from
/// `clients/python/requirements.txt`), runs `buf generate` and compiles the TypeScript project
/// (`tsc -p clients/ts`): the README's commands. Once per process, under a file lock.
pub fn generated_clients() -> Result<GeneratedClients> {
    static GENERATED: std::sync::OnceLock<std::result::Result<GeneratedClients, String>> = std::sync::OnceLock::new();
    GENERATED
        .get_or_init(|| generate_clients().map_err(|error| format!("{error:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn generate_clients() -> Result<GeneratedClients> {
    let root = workspace_root();
    let ts = root.join("clients/ts");
    let python_dir = root.join("clients/python");
    let (manifest, lock) = (ts.join("package.json"), ts.join("package-lock.json"));
    provision_named("clients-ts", &ts.join("node_modules"), &[&manifest, &lock], |_| {
        run(Command::new("npm").args(["ci", "--silent", "--no-audit", "--no-fund", "--prefix"]).arg(&ts))
    })?;
    let requirements = python_dir.join("requirements.txt");
    let venv = python_dir.join(".venv");
    provision_named("clients-python", &venv, &[&requirements], |venv| {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
        run(Command::new(&python).args(["-m", "venv", "--clear"]).arg(venv))?;
        run(Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements))
    })?;
    let lock = File::create(tools_dir().join("clients-generate.lock"))?;
    lock.lock().context("locking the client generation")?;
    run(Command::new(ts.join("node_modules/.bin/buf")).arg("generate").current_dir(&root)).context("buf generate")?;
    run(Command::new(ts.join("node_modules/.bin/tsc")).args(["-p", "."]).current_dir(&ts)).context("tsc")?;
    Ok(GeneratedClients { ts_project: ts, python: venv.join("bin/python"), python_gen: python_dir.join("gen") })
}

/// Installs into `root` unless a stamp shows the same pins were installed there already. The lock
/// file makes parallel test binaries wait for one install instead of racing.
fn provision(root: &Path, pins: &[&Path], install: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let name = root.file_name().and_then(|n| n.to_str()).unwrap_or("tool");
    provision_named(name, root, pins, install)
}

/// [`provision`] with the name of its stamp and lock files in `target/test-tools/`.
fn provision_named(name: &str, root: &Path, pins: &[&Path], install: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    fs::create_dir_all(tools_dir())?;
    let lock = File::create(tools_dir().join(format!("{name}.lock")))?;
    lock.lock().context("locking the tool install")?;

    let mut wanted = String::new();
    for pin in pins {
        wanted.push_str(&fs::read_to_string(pin).with_context(|| format!("reading {}", pin.display()))?);
    }
    let stamp = tools_dir().join(format!("{name}.stamp"));
    if fs::read_to_string(&stamp).is_ok_and(|installed| installed == wanted) && root.exists() {
        return Ok(());
    }
    let _ = fs::remove_file(&stamp);
    install(root).with_context(|| format!("installing {}", root.display()))?;
    fs::write(&stamp, wanted)?;
    Ok(())
}

/// Runs a command, failing with its output when it exits non-zero.
pub fn run(command: &mut Command) -> Result<()> {
    let output = command.output().with_context(|| format!("starting {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
