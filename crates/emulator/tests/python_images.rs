//! Sandboxes in their container images with the real published Python client: a local registry
//! (Debian's `docker-registry`) on loopback holds the testkit's two images (busybox, and one
//! layered on it with whiteouts and an opaque directory), the emulator runs with `--runtime oci`
//! (runc), and `tests/python/test_images.py` checks what a user would. Afterwards no container
//! process survives the emulator's SIGTERM, and then none survives a SIGKILL either.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use cwsandbox_testkit::emulator::EmulatorProcess;
use cwsandbox_testkit::images::{self, BASE_GREETING, BASE_MOTD, BASE_WORKDIR, LAYERED_MOTD, OS_RELEASE, PRIVATE_MOTD};
use cwsandbox_testkit::procs;
use cwsandbox_testkit::registry::LocalRegistry;
use cwsandbox_testkit::text;

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");
/// The user and password of the private registry.
const PRIVATE_USER: (&str, &str) = ("puller", "pa:ss word");
const SUITE_TIMEOUT_SECONDS: &str = "600";

/// Starts a sandbox of the busybox image that stays up, as the client leaves one at exit.
const LEAVE_RUNNING: &str = r#"
import os
from cwsandbox import Sandbox
env = {"CWSANDBOX_TEST_RUN": os.environ["CWSANDBOX_TEST_RUN_ID"]}
sb = Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]], environment_variables=env,
                 container_image=os.environ["CWSANDBOX_TEST_REGISTRY"] + "/test/busybox:1")
assert sb.exec(["sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo started"]).result().stdout == "started\n"
"#;

fn preconditions() -> Option<String> {
    if !Path::new("/usr/sbin/runc").exists() && which("runc").is_none() {
        return Some("runc is not installed (the test command installs it)".to_owned());
    }
    if which("docker-registry").is_none() {
        return Some("docker-registry is not installed (the test command installs it)".to_owned());
    }
    None
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(program)).find(|path| path.exists())
}

/// A local registry holding the testkit's images, and a values file that gives each emulator
/// of the test an image cache of the test's own.
struct Setup {
    registry: LocalRegistry,
    /// A registry that answers only to [`PRIVATE_USER`]: the sandboxes' own credentials
    /// (`image_pull_credentials`, from the values' secret store `registry-credentials`).
    private: LocalRegistry,
    /// Holds the image cache and the values file.
    _dir: tempfile::TempDir,
    values: String,
}

impl Setup {
    fn new() -> Result<Setup> {
        if let Some(missing) = preconditions() {
            // The README's test command installs both; a developer's partial machine says why.
            panic!("{missing}");
        }
        let registry = LocalRegistry::start().context("local registry")?;
        let private = LocalRegistry::start_with_auth(PRIVATE_USER.0, PRIVATE_USER.1).context("private registry")?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let pushed = runtime.block_on(images::push_test_images(&registry)).context("pushing the test images")?;
        runtime.block_on(images::push_private_image(&private)).context("pushing the private image")?;
        eprintln!("registry {} holds {} and {}", registry.host(), pushed.base, pushed.layered);
        let dir = tempfile::tempdir()?;
        let values = dir.path().join("values.yaml");
        let docker_config =
            serde_json::json!({"auths": {private.host(): {"username": PRIVATE_USER.0, "password": PRIVATE_USER.1}}});
        let values_text = format!(
            "containerRuntime:\n  imageCache: {}\nsecretStores:\n  registry-credentials:\n    secrets:\n      \
             login: {{username: {user:?}, password: {password:?}}}\n      wrong: {{username: {user:?}, password: nope}}\n      \
             config-json: {config:?}\n",
            dir.path().join("images").display(),
            user = PRIVATE_USER.0,
            password = PRIVATE_USER.1,
            config = docker_config.to_string(),
        );
        std::fs::write(&values, values_text)?;
        Ok(Setup { registry, private, values: values.display().to_string(), _dir: dir })
    }

    /// An emulator whose containers `kind` (`oci`, `auto`) runs.
    fn emulator(&self, kind: &str) -> Result<EmulatorProcess> {
        EmulatorProcess::start(Path::new(BINARY), &["--runtime", kind, "-f", &self.values])
    }
}

#[test]
fn the_python_client_runs_sandboxes_in_their_images() -> Result<()> {
    let setup = Setup::new()?;
    let registry = &setup.registry;
    let python = cwsandbox_testkit::python_env().context("python venv")?;
    let emulator = setup.emulator("oci")?;
    eprintln!(
        "emulator ready after {:?}: isolation {}, containers {} (cgroup limits {})",
        emulator.startup, emulator.ready.isolation, emulator.ready.container_runtime, emulator.ready.cgroup_limits
    );
    assert!(emulator.ready.container_runtime.starts_with("oci ("), "{}", emulator.ready.container_runtime);

    let marker = format!("run-{}-{}", std::process::id(), emulator.ready.pid);
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let path = format!("{}:{}", python.bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("timeout")
        .args(["--signal=KILL", SUITE_TIMEOUT_SECONDS])
        .arg(python.python())
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs", "--durations=5", "--rootdir"])
        .arg(&suite)
        .arg(suite.join("test_images.py"))
        .current_dir(emulator.dir())
        .envs(emulator.env())
        .env("PATH", &path)
        .env("CWSANDBOX_ISOLATION", &emulator.ready.isolation)
        .env("CWSANDBOX_TEST_RUN_ID", &marker)
        .env("CWSANDBOX_TEST_REGISTRY", registry.host())
        .env("CWSANDBOX_TEST_PRIVATE_REGISTRY", setup.private.host())
        .env("CWSANDBOX_TEST_IMAGE_OS_RELEASE", OS_RELEASE)
        .env("CWSANDBOX_TEST_IMAGE_GREETING", BASE_GREETING.1)
        .env("CWSANDBOX_TEST_IMAGE_WORKDIR", BASE_WORKDIR)
        .env("CWSANDBOX_TEST_IMAGE_BASE_MOTD", BASE_MOTD)
        .env("CWSANDBOX_TEST_IMAGE_LAYERED_MOTD", LAYERED_MOTD)
        .env("CWSANDBOX_TEST_IMAGE_PRIVATE_MOTD", PRIVATE_MOTD)
        .env("CWSANDBOX_TEST_CGROUP_LIMITS", if emulator.ready.cgroup_limits { "1" } else { "0" })
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()?;
    let report = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "pytest failed:\n{report}\nemulator log:\n{}", emulator.log());
    eprintln!("{report}");
    // Every test ran: none was skipped for want of the registry or the runtime. Only the limits'
    // tests skip, and only where the host's cgroups refuse limits (which fails under CI).
    if report.contains("SKIPPED") {
        assert!(!emulator.ready.cgroup_limits, "{report}");
        cwsandbox_testkit::skip("python_images (limits)", "cgroups refuse limits on this host");
    }

    // Where a platform engineer looks: kubectl shows the failed pull and the pulled images.
    let kubectl = |args: &[&str]| -> Result<String> {
        let output = Command::new("kubectl").args(args).envs(emulator.env()).output()?;
        assert!(output.status.success(), "kubectl {args:?}: {}", text(&output.stderr));
        Ok(text(&output.stdout))
    };
    let pods = kubectl(&["get", "pods", "-A"])?;
    // The unknown tag's Pod and the private image's Pods pulled without its credentials.
    let mut described = Vec::new();
    for failed in pods.lines().filter(|line| line.contains("ImagePullBackOff")) {
        let mut columns = failed.split_whitespace();
        let (namespace, pod) = (columns.next().unwrap_or_default(), columns.next().unwrap_or_default());
        described.push(kubectl(&["describe", "pod", "-n", namespace, pod])?);
    }
    assert!(
        described.iter().any(|pod| pod.contains("no-such-tag: not found")),
        "the registry's message: {described:?}\n{pods}"
    );
    assert!(
        described.iter().any(|pod| pod.contains("test/private:1") && pod.contains("pull access denied")),
        "the private registry's refusal: {described:?}"
    );
    let events = kubectl(&["get", "events", "-A"])?;
    assert!(events.contains("Failed to pull image") && events.contains("Successfully pulled image"), "{events}");

    // A container left running ends with the emulator (SIGTERM), as every sandbox does.
    let leave = |emulator: &EmulatorProcess| -> Result<()> {
        let output = Command::new(python.python())
            .args(["-W", "ignore", "-c", LEAVE_RUNNING])
            .envs(emulator.env())
            .env("CWSANDBOX_TEST_RUN_ID", &marker)
            .env("CWSANDBOX_TEST_REGISTRY", registry.host())
            .output()?;
        assert!(output.status.success(), "{}{}", text(&output.stdout), text(&output.stderr));
        Ok(())
    };
    leave(&emulator)?;
    assert!(
        !procs::wait_until_found("CWSANDBOX_TEST_RUN", &marker, std::time::Duration::from_secs(30)).is_empty(),
        "the container's processes run"
    );
    let status = emulator.stop()?;
    assert!(status.success(), "SIGTERM must end the emulator cleanly: {status:?}");
    let survivors = procs::with_env("CWSANDBOX_TEST_RUN", &marker);
    assert!(survivors.is_empty(), "container processes outlived the emulator: {survivors:?}");

    // And after a SIGKILL of the emulator: the executor's watchdog ends the containers.
    let emulator = setup.emulator("oci")?;
    leave(&emulator)?;
    assert!(
        !procs::wait_until_found("CWSANDBOX_TEST_RUN", &marker, std::time::Duration::from_secs(30)).is_empty(),
        "the container's processes run"
    );
    emulator.kill_hard()?;
    let survivors = procs::wait_until_gone("CWSANDBOX_TEST_RUN", &marker, std::time::Duration::from_secs(30));
    assert!(survivors.is_empty(), "container processes outlived a SIGKILLed emulator: {survivors:?}");
    Ok(())
}

/// `auto` (the default): an image from a registry that answers runs in its image; one whose
/// registry cannot be reached runs the host's programs, and the Pod's Events say why.
const AUTO: &str = r#"
import os
from cwsandbox import Sandbox
env = {"CWSANDBOX_TEST_RUN": os.environ["CWSANDBOX_TEST_RUN_ID"]}
def run(image):
    return Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]], environment_variables=env,
                       container_image=image)
with run("127.0.0.1:1/nowhere/image:1") as host:
    print("HOST=" + host.exec(["sh", "-c", "test -e /usr/bin/python3 && echo host-programs"]).result().stdout.strip())
with run(os.environ["CWSANDBOX_TEST_REGISTRY"] + "/test/busybox:1") as image:
    print("IMAGE=" + image.exec(["cat", "/etc/os-release"]).result().stdout.replace("\n", "|"))
"#;

#[test]
fn auto_runs_images_where_their_registry_answers_and_the_hosts_programs_elsewhere() -> Result<()> {
    let setup = Setup::new()?;
    let registry = &setup.registry;
    let python = cwsandbox_testkit::python_env().context("python venv")?;
    let emulator = setup.emulator("auto")?;
    assert!(emulator.ready.container_runtime.starts_with("auto ("), "{}", emulator.ready.container_runtime);
    let marker = format!("auto-{}-{}", std::process::id(), emulator.ready.pid);
    let output = Command::new(python.python())
        .args(["-W", "ignore", "-c", AUTO])
        .envs(emulator.env())
        .env("CWSANDBOX_TEST_RUN_ID", &marker)
        .env("CWSANDBOX_TEST_REGISTRY", registry.host())
        .output()?;
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}\n{}", text(&output.stderr), emulator.log());
    assert!(stdout.contains("HOST=host-programs"), "{stdout}");
    assert!(stdout.contains(&format!("IMAGE={}", OS_RELEASE.replace('\n', "|"))), "{stdout}");
    let events = Command::new("kubectl").args(["get", "events", "-A"]).envs(emulator.env()).output()?;
    let events = text(&events.stdout);
    assert!(events.contains("ImageNotUsed") && events.contains("registry 127.0.0.1:1 cannot be reached"), "{events}");
    let status = emulator.stop()?;
    assert!(status.success(), "{status:?}");
    assert!(procs::with_env("CWSANDBOX_TEST_RUN", &marker).is_empty());
    Ok(())
}
