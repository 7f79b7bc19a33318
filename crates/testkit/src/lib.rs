//! Provisioning of the external tools the test suites judge compatibility with, and the emulator
//! harness ([`emulator::EmulatorProcess`]).

pub mod emulator;
pub mod procs;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail};

/// The workspace root (this crate lives in `crates/testkit`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/testkit has two ancestors")
        .to_path_buf()
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
        run(Command::new("npm")
            .args(["ci", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(root))
    })?;
    Ok(root.join("node_modules/.bin/buf"))
}

/// Installs into `root` unless a stamp shows the same pins were installed there already. The lock
/// file makes parallel test binaries wait for one install instead of racing.
fn provision(root: &Path, pins: &[&Path], install: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    fs::create_dir_all(tools_dir())?;
    let name = root.file_name().and_then(|n| n.to_str()).unwrap_or("tool");
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
