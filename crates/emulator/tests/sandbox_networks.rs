//! Sandbox networks across the emulator's life: made for a sandbox with network rules, shown as
//! its Pod's IP, removed with it, with the emulator (SIGTERM), and — after a SIGKILL, whose
//! shutdown never runs — by the next emulator on the same bridge as it starts.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use cwsandbox_testkit::emulator::EmulatorProcess;
use cwsandbox_testkit::{procs, text};

const BINARY: &str = env!("CARGO_BIN_EXE_cwsandbox-emulator");
const BRIDGE: &str = "cwsbxk9";
const TABLE: &str = "cwsandbox_cwsbxk9";

/// Creates a sandbox whose ingress rules give it a network of its own and leaves it running;
/// prints its address as its own route to the world picks it.
const LEAVE_RUNNING: &str = r#"
import os
from cwsandbox import IngressRule, NetworkOptions, Sandbox
env = {"CWSANDBOX_TEST_RUN": os.environ["CWSANDBOX_TEST_RUN_ID"]}
sb = Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]], environment_variables=env,
                 network=NetworkOptions(ingress=[IngressRule(tenant="same_org")]))
sb.wait(timeout=60)
probe = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('203.0.113.1', 9)); print(s.getsockname()[0])"
print("ADDRESS=" + sb.exec(["python3", "-c", probe]).result().stdout.strip())
"#;

fn runnable(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let nft = Command::new("nft").arg("--version").output().is_ok_and(|output| output.status.success());
    if !(root && nft) {
        cwsandbox_testkit::skip(test, "sandbox networks need a root emulator and Debian's nftables");
        return false;
    }
    true
}

/// What of the bridge is on this machine: the bridge, the namespaces named after it, its table.
#[derive(Debug, PartialEq, Eq)]
struct Traces {
    bridge: bool,
    namespaces: usize,
    table: bool,
}

fn traces() -> Traces {
    let prefix = format!("{BRIDGE}-");
    let namespaces = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .count();
    let tables = Command::new("nft").args(["list", "tables"]).output().map(|output| text(&output.stdout));
    Traces {
        bridge: Path::new("/sys/class/net").join(BRIDGE).exists(),
        namespaces,
        table: tables.is_ok_and(|tables| tables.contains(TABLE)),
    }
}

fn start(values: &Path) -> Result<EmulatorProcess> {
    EmulatorProcess::start(Path::new(BINARY), &["-f", values.to_str().context("values path")?])
}

fn leave_sandbox(emulator: &EmulatorProcess, marker: &str) -> Result<String> {
    let python = cwsandbox_testkit::python_env().context("python venv")?;
    let output = Command::new(python.python())
        .args(["-W", "ignore", "-c", LEAVE_RUNNING])
        .envs(emulator.env())
        .env("CWSANDBOX_TEST_RUN_ID", marker)
        .output()?;
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}\n{}", text(&output.stderr), emulator.log());
    let address = stdout.lines().find_map(|line| line.strip_prefix("ADDRESS=")).context("the address")?;
    Ok(address.to_owned())
}

#[test]
fn sandbox_networks_go_with_the_emulator_and_a_killed_ones_with_the_next_start() -> Result<()> {
    if !runnable("sandbox_networks_go_with_the_emulator_and_a_killed_ones_with_the_next_start") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("values.yaml");
    std::fs::write(&values, format!("containerRuntime:\n  network: {{bridge: {BRIDGE}, podCidr: 10.247.0.0/24}}\n"))?;
    let none = Traces { bridge: false, namespaces: 0, table: false };

    // Nothing is made until a sandbox needs it; SIGTERM removes everything.
    let emulator = start(&values)?;
    assert_eq!(traces(), none, "made before any sandbox needs it");
    let marker = format!("networks-{}-{}", std::process::id(), emulator.ready.pid);
    let address = leave_sandbox(&emulator, &marker)?;
    assert_eq!(address, "10.247.0.2", "the range's first Pod address");
    assert_eq!(traces(), Traces { bridge: true, namespaces: 1, table: true });
    let pods = Command::new("kubectl").args(["get", "pods", "-A", "-o", "wide"]).envs(emulator.env()).output()?;
    assert!(text(&pods.stdout).contains("10.247.0.2"), "kubectl shows the Pod's IP:\n{}", text(&pods.stdout));
    let status = emulator.stop()?;
    assert!(status.success(), "{status:?}");
    assert_eq!(traces(), none, "left after SIGTERM");

    // After SIGKILL the sandbox's processes end (the watchdog) but its network stays, until the
    // next emulator on the bridge starts.
    let emulator = start(&values)?;
    let marker = format!("networks-{}-{}", std::process::id(), emulator.ready.pid);
    leave_sandbox(&emulator, &marker)?;
    emulator.kill_hard()?;
    let survivors = procs::wait_until_gone("CWSANDBOX_TEST_RUN", &marker, std::time::Duration::from_secs(30));
    assert!(survivors.is_empty(), "sandbox processes outlived a SIGKILLed emulator: {survivors:?}");
    assert_eq!(traces(), Traces { bridge: true, namespaces: 1, table: true }, "a SIGKILL runs no shutdown");
    let emulator = start(&values)?;
    assert_eq!(traces(), none, "the next start removed them");
    let marker = format!("networks-{}-{}", std::process::id(), emulator.ready.pid);
    assert_eq!(leave_sandbox(&emulator, &marker)?, "10.247.0.2");
    let status = emulator.stop()?;
    assert!(status.success(), "{status:?}");
    assert_eq!(traces(), none, "left after SIGTERM");
    Ok(())
}
