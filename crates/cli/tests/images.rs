//! Images without the internet: archives made here (skopeo, from the testkit's images in a
//! loopback registry that is then stopped) loaded with the real `cwsbx image load` into an
//! emulator under `--runtime oci`; the published Python client's `Sandbox.run(container_image=…)`
//! then runs in the loaded image with no registry reachable. Also `image ls`, `image rm` (refused
//! for an image a running sandbox uses) and a hostile archive refused through the RPC. And a
//! mirror in the values serving `python:3.11` (Docker Hub never asked), and a pull that reaches
//! nothing failing the sandbox with every mirror and registry it tried.

use std::path::Path;
use std::process::{Command, Output};

use cwsandbox_testkit::emulator::{EmulatorProcess, built_emulator_binary};
use cwsandbox_testkit::images;
use cwsandbox_testkit::registry::{LocalRegistry, free_port};
use cwsandbox_testkit::text;

const CWSBX: &str = env!("CARGO_BIN_EXE_cwsbx");

/// The loaded images' names: a registry on loopback where nothing listens, so a pull that asked
/// it would fail at once (and never leave the machine).
const BUSYBOX: &str = "127.0.0.1:1/offline/busybox:1";
const LAYERED: &str = "127.0.0.1:1/offline/layered:2";

fn cwsbx(emu: &EmulatorProcess, args: &[&str]) -> Output {
    Command::new(CWSBX).args(args).envs(emu.env()).output().expect("cwsbx runs")
}

fn ok(emu: &EmulatorProcess, args: &[&str]) -> String {
    let output = cwsbx(emu, args);
    assert!(output.status.success(), "cwsbx {args:?}: {}{}\n{}", text(&output.stdout), text(&output.stderr), emu.log());
    text(&output.stdout)
}

fn fails(emu: &EmulatorProcess, args: &[&str]) -> String {
    let output = cwsbx(emu, args);
    assert!(!output.status.success(), "cwsbx {args:?} should fail: {}", text(&output.stdout));
    let stderr = text(&output.stderr);
    assert!(stderr.starts_with("error: ") && stderr.lines().count() == 1, "{stderr}");
    stderr
}

/// Runs in the loaded image with the published client; leaves the sandbox running.
const RUN_IN_LOADED_IMAGE: &str = r#"
import os
from cwsandbox import Sandbox
sb = Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]],
                 container_image=os.environ["IMAGE"])
print("MOTD=" + sb.exec(["cat", "/etc/motd"]).result().stdout, end="")
print("GREETING=" + sb.exec(["sh", "-c", "echo $GREETING"]).result().stdout, end="")
print("ID=" + sb.sandbox_id)
"#;

#[test]
fn a_loaded_archive_runs_in_its_image_with_no_registry() {
    if which("runc").is_none() || which("docker-registry").is_none() || which("skopeo").is_none() {
        panic!("runc, docker-registry and skopeo are needed (the test command installs them)");
    }
    let dir = tempfile::tempdir().unwrap();
    let (docker, oci) = (dir.path().join("busybox.tar"), dir.path().join("layered.tar"));
    {
        let registry = LocalRegistry::start().expect("registry");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let pushed = runtime.block_on(images::push_test_images(&registry)).expect("test images");
        images::save_archive(&pushed.base, "docker-archive", &docker, BUSYBOX).unwrap();
        images::save_archive(&pushed.layered, "oci-archive", &oci, LAYERED).unwrap();
    } // the registry is gone: nothing can be pulled from here on
    let values = dir.path().join("values.yaml");
    std::fs::write(&values, format!("containerRuntime:\n  imageCache: {}\n", dir.path().join("cache").display()))
        .unwrap();
    let binary = built_emulator_binary().expect("the emulator binary builds");
    let emu = EmulatorProcess::start(&binary, &["--runtime", "oci", "-f", values.to_str().unwrap()])
        .expect("emulator starts");

    let loaded = ok(&emu, &["image", "load", docker.to_str().unwrap()]);
    assert!(loaded.starts_with(&format!("loaded {BUSYBOX} (sha256:")), "{loaded}");
    let loaded: serde_json::Value =
        serde_json::from_str(&ok(&emu, &["image", "load", oci.to_str().unwrap(), "-o", "json"])).unwrap();
    assert_eq!(loaded["format"], "oci-layout", "{loaded}");
    assert_eq!(loaded["images"][0]["references"][0], LAYERED, "{loaded}");

    let listed = ok(&emu, &["image", "ls"]);
    assert!(listed.starts_with("NAME"), "{listed}");
    for name in [BUSYBOX, LAYERED] {
        let line = listed.lines().find(|line| line.starts_with(name)).unwrap_or_else(|| panic!("{listed}"));
        assert!(line.trim_end().ends_with("no"), "not in use yet: {line}");
    }

    // The published client, as the issue's "done when" says it.
    let python = cwsandbox_testkit::python_env().expect("python venv");
    let path = format!("{}:{}", python.bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new(python.python())
        .args(["-c", RUN_IN_LOADED_IMAGE])
        .current_dir(emu.dir())
        .envs(emu.env())
        .env("RUNNER_ID", &emu.ready.runner_id)
        .env("IMAGE", BUSYBOX)
        .env("PATH", path)
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}\n{}", text(&output.stderr), emu.log());
    assert!(stdout.contains(&format!("MOTD={}", images::BASE_MOTD)), "{stdout}");
    assert!(stdout.contains(&format!("GREETING={}\n", images::BASE_GREETING.1)), "{stdout}");

    // A running sandbox holds it: listed in use, and not removable by any of its names.
    let listed: serde_json::Value = serde_json::from_str(&ok(&emu, &["image", "ls", "-o", "json"])).unwrap();
    let busybox = listed["images"].as_array().unwrap().iter().find(|i| i["references"][0] == BUSYBOX).unwrap();
    assert_eq!(busybox["inUse"], true, "{listed}");
    let refused = fails(&emu, &["image", "rm", BUSYBOX]);
    assert!(refused.contains("in use by a running sandbox") && refused.contains("FAILED_PRECONDITION"), "{refused}");
    let removed = ok(&emu, &["image", "rm", LAYERED]);
    assert!(removed.starts_with(&format!("removed {LAYERED} (sha256:")), "{removed}");
    let missing = fails(&emu, &["image", "rm", LAYERED]);
    assert!(missing.contains("not in the cache") && missing.contains("CWSANDBOX_IMAGE_NOT_FOUND"), "{missing}");

    // A hostile archive: refused by name, nothing kept.
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.as_old_mut().name[..12].copy_from_slice(b"../../escape");
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(1);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append(&header, &b"x"[..]).unwrap();
    let hostile = dir.path().join("hostile.tar");
    std::fs::write(&hostile, builder.into_inner().unwrap()).unwrap();
    let refused = fails(&emu, &["image", "load", hostile.to_str().unwrap()]);
    assert!(refused.contains("INVALID_ARGUMENT") && refused.contains("leaves the archive"), "{refused}");
    assert_eq!(ok(&emu, &["image", "ls", "-o", "json"]).matches("sha256:").count(), 1, "only busybox is left");
    emu.stop().expect("no process outlives the emulator");

    // The upload is held to the cache's bound as it comes (here set by the serve flag).
    let small = EmulatorProcess::start(
        &binary,
        &["--runtime", "oci", "-f", values.to_str().unwrap(), "--image-cache-max-bytes", "100000"],
    )
    .expect("emulator starts");
    let refused = fails(&small, &["image", "load", docker.to_str().unwrap()]);
    assert!(refused.contains("RESOURCE_EXHAUSTED") && refused.contains("--image-cache-max-bytes"), "{refused}");
    small.stop().expect("no process outlives the emulator");
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(program)).find(|path| path.exists())
}

/// Runs `IMAGE` with the published client: `MOTD=…` when it runs, `FAILED=<state_reason>` when
/// the sandbox fails.
const RUN_OR_FAIL: &str = r#"
import os
from cwsandbox import Sandbox
from cwsandbox.exceptions import SandboxFailedError
try:
    sb = Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]],
                     container_image=os.environ["IMAGE"])
    sb.wait(timeout=120)
    print("MOTD=" + sb.exec(["cat", "/etc/motd"]).result().stdout, end="")
    sb.stop().result()
except SandboxFailedError as failed:
    print("FAILED=" + (failed.status_reason or ""))
"#;

#[test]
fn a_mirror_in_the_values_serves_docker_hub_names() {
    if which("runc").is_none() || which("docker-registry").is_none() || which("skopeo").is_none() {
        panic!("runc, docker-registry and skopeo are needed (the test command installs them)");
    }
    let origin = LocalRegistry::start().expect("registry");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let pushed = runtime.block_on(images::push_test_images(&origin)).expect("test images");
    let mirror = LocalRegistry::start().expect("mirror");
    let output = Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false"])
        .arg(format!("docker://{}", pushed.base))
        .arg(format!("docker://{}/library/python:3.11", mirror.host()))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    drop(origin);
    let (silent, upstream) = (free_port().unwrap(), free_port().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    // `kind: oci` (as `--runtime oci`): under `auto` an unreachable registry runs the host's
    // programs instead of failing the pull.
    std::fs::write(
        &values,
        format!(
            "containerRuntime:\n  kind: oci\n  imageCache: {cache}\n  registryMirrors:\n    docker.io: [http://127.0.0.1:{silent}, http://{mirror}]\n    127.0.0.1:{upstream}: [http://127.0.0.1:{silent}]\nkubelet:\n  imagePullBackOffSeconds: 1\n",
            cache = dir.path().join("cache").display(),
            mirror = mirror.host(),
        ),
    )
    .unwrap();
    let binary = built_emulator_binary().expect("the emulator binary builds");
    let emu = EmulatorProcess::start(&binary, &["--runtime", "oci", "-f", values.to_str().unwrap()])
        .expect("emulator starts");
    let python = cwsandbox_testkit::python_env().expect("python venv");
    let path = format!("{}:{}", python.bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let run = |image: &str| {
        let output = Command::new(python.python())
            .args(["-c", RUN_OR_FAIL])
            .current_dir(emu.dir())
            .envs(emu.env())
            .env("RUNNER_ID", &emu.ready.runner_id)
            .env("IMAGE", image)
            .env("PATH", &path)
            .output()
            .unwrap();
        let stdout = text(&output.stdout);
        assert!(output.status.success(), "{stdout}{}\n{}", text(&output.stderr), emu.log());
        stdout
    };

    let ran = run("python:3.11");
    assert!(ran.contains(&format!("MOTD={}", images::BASE_MOTD)), "{ran}\n{}", emu.log());
    let listed = ok(&emu, &["image", "ls"]);
    assert!(listed.lines().any(|line| line.starts_with("docker.io/library/python:3.11")), "{listed}");

    let failed = run(&format!("127.0.0.1:{upstream}/team/app:1"));
    eprintln!("{failed}");
    assert!(failed.starts_with("FAILED=") && failed.contains("ImagePullBackOff"), "{failed}");
    assert!(failed.contains(&format!("failed to do request to 127.0.0.1:{upstream}")), "{failed}");
    assert!(failed.contains(&format!("tried first: mirror http://127.0.0.1:{silent}: ")), "{failed}");
    emu.stop().expect("no process outlives the emulator");
}
