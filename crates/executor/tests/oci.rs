//! Image sandboxes: sandboxes run by the OCI runtime (runc) in an image's root filesystem.
//!
//! The image is built by each test from the host's static busybox, its files owned by the
//! sandboxes' id range as the image unpacker leaves them. Where runc is missing the tests say so
//! and pass without checking anything.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    KillOnDrop, MadeNetwork, argv, busybox_image, env, pidfds, processes_naming, processes_with_marker, reply_on, run,
    run_request, sh, skip, terminal_exec_through_a_resize, unique, wait_all_gone, wait_for_log, within,
};
use cwsandbox_executor::{
    DEFAULT_SANDBOX_ID_BASE, ExecRequest, Executor, ExecutorConfig, ExecutorError, FileError, ImageRoot, LaunchSpec,
    MainExit, MountedFile, Network, OciSupport, SandboxUser, Sidecar, StartAfter, StartCondition, StartupProbe,
    VolumeMount, WritableLayer,
};
use tempfile::TempDir;

const RUNC: &str = "/usr/sbin/runc";
const BUSYBOX: &str = "/bin/busybox";
const OS_RELEASE: &str = "NAME=\"cwsandbox test image\"\nID=cwsbx-test\n";
const APPLETS: &[&str] = &[
    "sh", "cat", "ls", "id", "ps", "hostname", "sleep", "env", "pwd", "tty", "stty", "echo", "stat", "touch", "mkdir",
    "readlink", "tr", "true", "head", "grep", "nc",
];

/// Whether runc and busybox are here; if not, says why the test checks nothing.
fn tools_present(test: &str) -> bool {
    let missing: Vec<&str> = [RUNC, BUSYBOX].into_iter().filter(|tool| !Path::new(tool).exists()).collect();
    if missing.is_empty() {
        return true;
    }
    skip(test, &format!("{} not installed, so image sandboxes cannot be tested here", missing.join(" and ")));
    false
}

/// Builds a busybox image root under `dir`, shifted to the sandboxes' ids.
fn build_image(dir: &Path) -> PathBuf {
    let image = busybox_image(dir, APPLETS, &[("etc/os-release", OS_RELEASE)]);
    let owner = format!("{DEFAULT_SANDBOX_ID_BASE}:{DEFAULT_SANDBOX_ID_BASE}");
    let status = Command::new("chown").args(["-R", "-h", &owner]).arg(&image).status().unwrap();
    assert!(status.success(), "chown of the image failed");
    image
}

/// An executor with runc, and an image; `None` where runc is missing.
struct OciHarness {
    executor: Executor,
    root: TempDir,
    image: PathBuf,
}

fn harness(test: &str) -> Option<OciHarness> {
    harness_with(test, None)
}

fn harness_with(test: &str, layer: Option<WritableLayer>) -> Option<OciHarness> {
    if !tools_present(test) {
        return None;
    }
    let root = tempfile::Builder::new().prefix("cwsbx-oci-test").tempdir().unwrap();
    let image = build_image(root.path());
    let mut config = ExecutorConfig::new(root.path());
    config.warm_sandboxes = 0;
    config.oci_runtime = Some(RUNC.into());
    config.oci_writable_layer = layer;
    let executor = Executor::new(config).unwrap();
    match executor.oci() {
        OciSupport::Ready(info) => eprintln!("OCI runtime in force: {info:?}"),
        other => panic!("runc is installed but image sandboxes do not work: {other:?}"),
    }
    Some(OciHarness { executor, root, image })
}

impl OciHarness {
    fn launch(&self, hostname: &str, command: &[&str]) -> LaunchSpec {
        LaunchSpec {
            hostname: hostname.into(),
            command: command.iter().map(|arg| arg.to_string()).collect(),
            image: Some(ImageRoot { rootfs: self.image.clone() }),
            ..LaunchSpec::default()
        }
    }

    fn runc_state(&self) -> PathBuf {
        self.root.path().join(".runc")
    }
}

/// The containers runc knows in a state directory.
fn runc_containers(state: &Path) -> Vec<String> {
    let output = Command::new(RUNC).arg("--root").arg(state).args(["list", "-q"]).output().unwrap();
    String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned).collect()
}

/// Mounts, in any process's view, of a path under `path`.
fn mounts_under(path: &Path) -> Vec<String> {
    let needle = path.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        if entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()).is_none() {
            continue;
        }
        if let Ok(mountinfo) = std::fs::read_to_string(entry.path().join("mountinfo")) {
            found.extend(mountinfo.lines().filter(|line| line.contains(&needle)).map(str::to_owned));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_runs_in_its_image() {
    let Some(harness) = harness("a_sandbox_runs_in_its_image") else { return };
    let executor = &harness.executor;
    let id = unique("image");
    let launch = LaunchSpec {
        env: env(&[("GREETING", "hello from the spec")]),
        working_dir: Some("/work/dir".into()),
        files: vec![MountedFile { path: "/etc/app.conf".into(), content: b"mounted\n".to_vec() }],
        volume_mounts: vec![VolumeMount { volume: "scratch".into(), path: "/data".into(), ..VolumeMount::default() }],
        ..harness.launch("pod-image-a", &["sh", "-c", "echo started in $(pwd) as $(id -u); exec sleep 1000"])
    };
    let started = Instant::now();
    executor.start(&id, launch).await.unwrap();
    eprintln!("start took {:?}", started.elapsed());
    let logs = executor.logs(&id).unwrap();
    wait_for_log(&logs, "started in /work/dir as 0\n").await;

    // The image's files, not the host's.
    assert_eq!(sh(executor, &id, "cat /etc/os-release").await, OS_RELEASE.trim_end());
    let mut top = sh(executor, &id, "ls /").await.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    top.sort();
    assert_eq!(top, ["bin", "data", "dev", "etc", "proc", "root", "sys", "tmp", "work"], "only the image's paths");
    assert_eq!(sh(executor, &id, "ls /bin/busybox && ls /usr 2>&1 || true").await.lines().count(), 2);
    // Its hostname, PID 1 is the main command, its environment, working directory and user.
    assert_eq!(sh(executor, &id, "hostname").await, "pod-image-a");
    assert_eq!(sh(executor, &id, "tr '\\0' ' ' < /proc/1/cmdline").await, "sleep 1000");
    assert_eq!(
        sh(executor, &id, "echo $GREETING / $HOSTNAME / $HOME").await,
        "hello from the spec / pod-image-a / /root"
    );
    assert_eq!(sh(executor, &id, "pwd").await, "/work/dir");
    assert_eq!(sh(executor, &id, "id -u; id -g").await, "0\n0");
    // Mounted files and volumes.
    assert_eq!(sh(executor, &id, "cat /etc/app.conf").await, "mounted");
    sh(executor, &id, "touch /data/x && ls /data").await;

    // Exec: exit codes, a missing command, stdin, an asked working directory.
    let started = Instant::now();
    let (_, _, code) = run(executor, &id, &["sh", "-c", "exit 7"]).await;
    eprintln!("exec took {:?}", started.elapsed());
    assert_eq!(code, 7);
    let (_, _, code) = run(executor, &id, &["sh", "-c", "kill -9 $$"]).await;
    assert_eq!(code, 137);
    let (_, stderr, code) = run(executor, &id, &["no-such-command", "x"]).await;
    assert_eq!(code, 127);
    assert!(stderr.contains("no-such-command: command not found"), "{stderr}");
    let mut session = executor.exec(&id, argv(&["cat"])).await.unwrap();
    session.stdin.write(b"through stdin\n").await.unwrap();
    session.stdin.close().await;
    let (stdout, _, code) = within("cat", session.collect()).await;
    assert_eq!((String::from_utf8_lossy(&stdout).as_ref(), code), ("through stdin\n", 0));
    let request = ExecRequest { working_dir: Some("/etc".into()), ..argv(&["pwd"]) };
    assert_eq!(run_request(executor, &id, request).await.0, "/etc\n");

    // Files through the API, owned by the sandbox's root.
    executor.write_file(&id, "/tmp/api/written", b"by the API").await.unwrap();
    assert_eq!(
        sh(executor, &id, "cat /tmp/api/written; echo; stat -c %u:%g /tmp/api/written").await,
        "by the API\n0:0"
    );
    sh(executor, &id, "echo by the sandbox > notes").await;
    assert_eq!(executor.read_file(&id, "notes").await.unwrap(), b"by the sandbox\n");
    assert_eq!(executor.read_file(&id, "/etc/os-release").await.unwrap(), OS_RELEASE.as_bytes());
    assert!(matches!(executor.read_file(&id, "/etc/missing").await, Err(FileError::NotFound)));
    // PID 1 is the image's command, the sandbox's root user's: its root is the container's, for
    // the API as for `cat` (it was an INTERNAL "cross-device link" before).
    assert_eq!(sh(executor, &id, "cat /proc/1/root/tmp/api/written").await, "by the API");
    assert_eq!(executor.read_file(&id, "/proc/1/root/tmp/api/written").await.unwrap(), b"by the API");

    // A second sandbox of the same image sees none of the first's writes; the image is unchanged.
    let other = unique("image");
    let launch = harness.launch("pod-image-b", &["sh", "-c", "trap 'exit 0' TERM; sleep 1000 & wait"]);
    executor.start(&other, launch).await.unwrap();
    let (_, _, code) = run(executor, &other, &["cat", "/tmp/api/written"]).await;
    assert_eq!(code, 1, "the other sandbox's file is visible");
    assert_eq!(sh(executor, &other, "hostname").await, "pod-image-b");
    assert!(!harness.image.join("tmp/api").exists(), "the shared image was written to");
    assert!(!harness.image.join("work/dir").exists(), "the shared image was written to");

    // A main command that ends on SIGTERM; then one that has no handler for it (as PID 1 of
    // its namespace, SIGTERM does not kill it): killed at once here.
    let started = Instant::now();
    executor.stop(&other, Duration::from_secs(10)).await;
    eprintln!("stop took {:?}", started.elapsed());
    assert_eq!(executor.exit_code(&other), Some(0));
    executor.kill(&id).await;
    assert_eq!(executor.exit_code(&id), Some(137));
    assert!(runc_containers(&harness.runc_state()).is_empty());
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_runs_as_the_user_it_asks_for() {
    let Some(harness) = harness("a_sandbox_runs_as_the_user_it_asks_for") else { return };
    let executor = &harness.executor;
    let id = unique("user");
    let launch = LaunchSpec {
        user: Some(SandboxUser { uid: 1000, gid: 1000 }),
        working_dir: Some("/work".into()),
        ..harness.launch("pod-user", &["sleep", "1000"])
    };
    executor.start(&id, launch).await.unwrap();
    assert_eq!(sh(executor, &id, "id -u; id -g; echo $HOME").await, "1000\n1000\n/");
    // No capabilities for a non-root user: root's files stay root's.
    let (_, _, code) = run(executor, &id, &["touch", "/etc/passwd"]).await;
    assert_ne!(code, 0, "a non-root user wrote root's file");
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_exec_gets_a_terminal_that_follows_resizes() {
    let Some(harness) = harness("a_terminal_exec_gets_a_terminal_that_follows_resizes") else { return };
    let executor = &harness.executor;
    let id = unique("tty");
    executor.start(&id, harness.launch("pod-tty", &["sleep", "1000"])).await.unwrap();
    let (text, code) = terminal_exec_through_a_resize(executor, &id, "tty; echo $TERM").await;
    assert!(text.contains("/dev/pts/"), "no terminal: {text:?}");
    assert!(text.contains("xterm"), "{text:?}");
    assert_eq!(code, 3);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_main_command_exits_127_with_the_reason_in_the_logs() {
    let Some(harness) = harness("a_missing_main_command_exits_127_with_the_reason_in_the_logs") else { return };
    let executor = &harness.executor;
    let mut exits = executor.exits();
    let id = unique("missing");
    executor.start(&id, harness.launch("pod-missing", &["python3", "-c", "print(1)"])).await.unwrap();
    assert_eq!(executor.exit_code(&id), Some(127));
    let exit = within("the exit report", exits.recv()).await.unwrap();
    assert_eq!(exit, MainExit { id: id.clone(), container: None, exit_code: 127, oom_killed: false });
    let logs = executor.logs(&id).unwrap();
    wait_for_log(&logs, "python3: command not found").await;
    // One runc cannot start (not executable) ends the same way, with runc's reason.
    let refused = unique("refused");
    executor.start(&refused, harness.launch("pod-refused", &["/etc/os-release"])).await.unwrap();
    let exit = within("the exit report", exits.recv()).await.unwrap();
    assert_eq!(exit, MainExit { id: refused.clone(), container: None, exit_code: 127, oom_killed: false });
    wait_for_log(&executor.logs(&refused).unwrap(), "permission denied").await;
    // And one that runs and ends by itself reports its code.
    let quits = unique("quits");
    executor.start(&quits, harness.launch("pod-quits", &["sh", "-c", "echo bye; exit 5"])).await.unwrap();
    let exit = within("the exit report", exits.recv()).await.unwrap();
    assert_eq!(exit, MainExit { id: quits.clone(), container: None, exit_code: 5, oom_killed: false });
    wait_for_log(&executor.logs(&quits).unwrap(), "bye\n").await;
    assert!(runc_containers(&harness.runc_state()).is_empty());
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_oom_killed() {
    let Some(harness) = harness("a_memory_hog_is_oom_killed") else { return };
    let executor = &harness.executor;
    let OciSupport::Ready(info) = executor.oci() else { unreachable!() };
    if !info.cgroup_limits {
        skip("a_memory_hog_is_oom_killed", "cgroups refuse limits on this host");
        return;
    }
    let mut exits = executor.exits();
    let id = unique("hog");
    let launch = LaunchSpec {
        memory_limit_bytes: Some(32 << 20),
        cpu_limit_millis: Some(500),
        // Doubles a string until the memory limit stops it.
        ..harness.launch("pod-hog", &["sh", "-c", "echo eating; x=a; while :; do x=$x$x; done"])
    };
    executor.start(&id, launch).await.unwrap();
    let exit = within("the hog's end", exits.recv()).await.unwrap();
    assert_eq!(exit, MainExit { id: id.clone(), container: None, exit_code: 137, oom_killed: true });
    assert!(executor.oom_killed(&id));
    // A sandbox under its limit is not reported OOM-killed.
    let fine = unique("fine");
    let launch = LaunchSpec { memory_limit_bytes: Some(64 << 20), ..harness.launch("pod-fine", &["true"]) };
    executor.start(&fine, launch).await.unwrap();
    let exit = within("the exit", exits.recv()).await.unwrap();
    assert_eq!(exit, MainExit { id: fine.clone(), container: None, exit_code: 0, oom_killed: false });
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_gives_the_grace_then_kills_and_leaves_nothing() {
    let Some(harness) = harness("stop_gives_the_grace_then_kills_and_leaves_nothing") else { return };
    let executor = &harness.executor;
    let marker = unique("marker");
    let stubborn = unique("stubborn");
    let launch = LaunchSpec {
        env: env(&[("CWSBX_TEST_MARKER", &marker)]),
        ..harness.launch(
            "pod-stubborn",
            &["sh", "-c", "trap 'echo ignored TERM' TERM; echo ready; while :; do sleep 0.05; done"],
        )
    };
    executor.start(&stubborn, launch.clone()).await.unwrap();
    let logs = executor.logs(&stubborn).unwrap();
    wait_for_log(&logs, "ready\n").await;
    sh(executor, &stubborn, "sleep 1000 >/dev/null 2>&1 &").await;
    let _held = executor.exec(&stubborn, argv(&["sleep", "1000"])).await.unwrap();
    let grace = Duration::from_millis(500);
    let started = Instant::now();
    executor.stop(&stubborn, grace).await;
    let took = started.elapsed();
    assert!(took >= grace, "stop took {took:?}, less than the grace");
    assert!(took < grace + Duration::from_secs(5), "stop took {took:?}");
    assert!(logs.tail(1 << 20).bytes().windows(11).any(|window| window == b"ignored TER"), "no SIGTERM came");
    assert_eq!(executor.exit_code(&stubborn), Some(137));

    // A second sandbox, ended by the executor's shutdown.
    let other = unique("other");
    executor.start(&other, launch).await.unwrap();
    sh(executor, &other, "sleep 1000 >/dev/null 2>&1 &").await;
    executor.shutdown().await;
    assert!(processes_with_marker(&marker).is_empty(), "sandbox processes outlived stop and shutdown");
    assert!(runc_containers(&harness.runc_state()).is_empty(), "containers left");
    let sandboxes = harness.root.path();
    assert!(processes_naming(sandboxes).is_empty(), "runtime processes left: {:?}", processes_naming(sandboxes));
    assert!(mounts_under(sandboxes).is_empty(), "mounts left: {:?}", mounts_under(sandboxes));
}

#[test]
fn image_sandboxes_die_with_the_emulator() {
    if tools_present("image_sandboxes_die_with_the_emulator") {
        sandboxes_die_with_the_emulator(false);
    }
}

/// The watchdog finds the containers by their cgroups when the runtime's state is gone too.
#[test]
fn image_sandboxes_die_with_the_emulator_even_without_the_runtime_s_state() {
    if tools_present("image_sandboxes_die_with_the_emulator_even_without_the_runtime_s_state") {
        sandboxes_die_with_the_emulator(true);
    }
}

/// Cgroups (in any hierarchy) whose name starts with `prefix`.
fn cgroups_named(prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().filter_map(Result::ok) {
        if let Ok(entries) = std::fs::read_dir(hierarchy.path()) {
            found.extend(
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path().to_string_lossy().into_owned())
                    .filter(|path| path.rsplit('/').next().is_some_and(|name| name.starts_with(prefix))),
            );
        }
    }
    found
}

fn sandboxes_die_with_the_emulator(remove_state: bool) {
    let root = tempfile::Builder::new().prefix("cwsbx-oci-kill").tempdir().unwrap();
    let image = build_image(root.path());
    let sandboxes = root.path().join("sandboxes");
    let marker = unique("orphan");
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "oci_helper_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env("CWSBX_OCI_HELPER_ROOT", &sandboxes)
        .env("CWSBX_OCI_HELPER_IMAGE", &image)
        .env("CWSBX_OCI_HELPER_MARKER", &marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Killed whatever happens here: a failing test must not leave the helper running on.
    let mut child = KillOnDrop(child);
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("HELPER-READY") {
        line.clear();
        assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "the helper emulator ended before it was ready");
    }
    let state = sandboxes.join(".runc");
    assert_eq!(runc_containers(&state).len(), 2);
    let cgroups = format!("cwsandbox-{}.", child.0.id());
    assert!(!cgroups_named(&cgroups).is_empty(), "the containers have no cgroups named {cgroups}*");
    if remove_state {
        std::fs::remove_dir_all(&state).unwrap();
    }
    let sandbox_processes = processes_with_marker(&marker);
    // Per sandbox: the main shell and its sleep, an exec'd sleep and a background one.
    assert!(sandbox_processes.len() >= 2 * 4, "only {sandbox_processes:?}");
    let watched = pidfds(sandbox_processes.into_iter().chain(processes_naming(&sandboxes)).collect());
    // The emulator dies without any chance to clean up.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let left = wait_all_gone(watched);
    assert!(left.is_empty(), "processes outlived the emulator: {left:?}");
    assert!(runc_containers(&state).is_empty(), "containers outlived the emulator");
    assert!(mounts_under(&sandboxes).is_empty(), "mounts outlived the emulator: {:?}", mounts_under(&sandboxes));
    // The watchdog has ended (it names the state directory), so it removed the cgroups.
    assert!(cgroups_named(&cgroups).is_empty(), "cgroups outlived the emulator: {:?}", cgroups_named(&cgroups));
}

#[test]
#[ignore = "a helper process for image_sandboxes_die_with_the_emulator"]
fn oci_helper_process() {
    let (Ok(root), Ok(image), Ok(marker)) = (
        std::env::var("CWSBX_OCI_HELPER_ROOT"),
        std::env::var("CWSBX_OCI_HELPER_IMAGE"),
        std::env::var("CWSBX_OCI_HELPER_MARKER"),
    ) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mut config = ExecutorConfig::new(&root);
        config.warm_sandboxes = 0;
        config.oci_runtime = Some(RUNC.into());
        let executor = Executor::new(config).unwrap();
        let mut sessions = Vec::new();
        for index in 0..2 {
            let id = format!("held-{index}");
            let launch = LaunchSpec {
                hostname: "held".into(),
                command: ["sh", "-c", "sleep 1000 & echo ready; wait"].map(str::to_owned).to_vec(),
                env: env(&[("CWSBX_TEST_MARKER", &marker)]),
                image: Some(ImageRoot { rootfs: image.clone().into() }),
                ..LaunchSpec::default()
            };
            executor.start(&id, launch).await.unwrap();
            wait_for_log(&executor.logs(&id).unwrap(), "ready\n").await;
            // Returns once the command printed: it runs in the container.
            sessions.push(common::start_marked_exec(&executor, &id, "exec sleep 1000", &marker).await);
            sh(&executor, &id, "sleep 1000 >/dev/null 2>&1 &").await;
        }
        println!("HELPER-READY");
        std::future::pending::<()>().await;
    });
}

#[test]
fn a_layer_is_in_force_and_says_which() {
    if !tools_present("a_layer_is_in_force_and_says_which") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(root.path());
    config.warm_sandboxes = 0;
    config.oci_runtime = Some(RUNC.into());
    let executor = Executor::new(config).unwrap();
    let OciSupport::Ready(info) = executor.oci() else { panic!("runc does not work: {:?}", executor.oci()) };
    // This machine mounts overlayfs; the copy is the fallback elsewhere.
    assert_eq!(info.writable_layer, WritableLayer::Overlay);
    assert!(info.version.contains("runc"), "{info:?}");
    let mut config = ExecutorConfig::new(root.path().join("other"));
    config.warm_sandboxes = 0;
    config.oci_runtime = Some("/nonexistent/runc".into());
    let executor = Executor::new(config).unwrap();
    assert!(matches!(executor.oci(), OciSupport::Unavailable(why) if why.contains("/nonexistent/runc")));
    let none = Executor::new(ExecutorConfig { warm_sandboxes: 0, ..ExecutorConfig::new(root.path().join("none")) });
    assert_eq!(none.unwrap().oci(), &OciSupport::NotConfigured);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_only_sandbox_has_its_own_network_reached_through_connect() {
    let Some(harness) = harness("a_loopback_only_sandbox_has_its_own_network_reached_through_connect") else { return };
    let executor = &harness.executor;
    let id = unique("net");
    let launch = LaunchSpec {
        network: Network::LoopbackOnly,
        ..harness.launch("pod-net", &["sh", "-c", "echo listening; echo hello from the container | nc -l -p 8080"])
    };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "listening\n").await;
    assert_eq!(sh(executor, &id, "ls /sys/class/net").await, "lo");
    // The port is the container's own: the host's loopback does not have it, connect reaches it.
    let reply = reply_on(executor, &id, 8080).await;
    assert_eq!(reply, "hello from the container\n");
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_sandbox_gets_its_network_in_the_namespace_runc_made() {
    let test = "an_image_sandbox_gets_its_network_in_the_namespace_runc_made";
    let Some(harness) = harness(test) else { return };
    let Some(made) = MadeNetwork::new(test) else { return };
    let executor = &harness.executor;
    let id = unique("net");
    let launch = LaunchSpec {
        network: made.network(),
        ..harness.launch("pod-net", &["sh", "-c", "echo listening; echo hello from the container | nc -l -p 8080"])
    };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "listening\n").await;
    assert!(sh(executor, &id, "cat /proc/net/fib_trie").await.contains(&made.address));
    assert_eq!(sh(executor, &id, "cat /proc/net/dev | grep -c eth0").await, "1");
    let reply = reply_on(executor, &id, 8080).await;
    assert_eq!(reply, "hello from the container\n");
    // runc made the namespace (its user namespace must own it for `runc exec`); the network
    // was put into it at the container's gate.
    assert_eq!(*made.made.lock().unwrap(), ["plumbed"]);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_exec_is_killed_in_the_container() {
    let Some(harness) = harness("a_cancelled_exec_is_killed_in_the_container") else { return };
    let executor = &harness.executor;
    let id = unique("cancel");
    executor.start(&id, harness.launch("pod-cancel", &["sleep", "1000"])).await.unwrap();
    let marker = unique("cancelled");
    // The command and a child of it, in its process group.
    let mut request = argv(&["sh", "-c", "sleep 1000 & echo started; exec sleep 1001"]);
    request.env = env(&[("CWSBX_TEST_MARKER", &marker)]);
    let mut session = executor.exec(&id, request).await.unwrap();
    let output = within("the exec to start", session.output.recv()).await.unwrap();
    assert_eq!(&output.data[..], b"started\n");
    // A process in the middle of its execve shows no environment for a moment: scanned again.
    let found = within("both processes in view", async {
        loop {
            let found = processes_with_marker(&marker);
            if found.len() == 2 {
                break found;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    let processes = pidfds(found);
    session.exit.kill();
    assert_eq!(within("the cancelled exec's end", session.exit.wait()).await, 137);
    let left = tokio::task::spawn_blocking(move || wait_all_gone(processes)).await.unwrap();
    assert!(left.is_empty(), "a cancelled exec's processes live on: {left:?}");
    // The sandbox goes on.
    assert_eq!(sh(executor, &id, "echo still here").await, "still here");
    executor.shutdown().await;
}

/// Where overlayfs cannot be mounted, each sandbox starts from a copy of the image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_root_keeps_sandboxes_and_the_image_apart() {
    let test = "a_copied_root_keeps_sandboxes_and_the_image_apart";
    let Some(harness) = harness_with(test, Some(WritableLayer::Copy)) else { return };
    let executor = &harness.executor;
    let OciSupport::Ready(info) = executor.oci() else { unreachable!() };
    assert_eq!(info.writable_layer, WritableLayer::Copy);
    let (first, second) = (unique("copy"), unique("copy"));
    for id in [&first, &second] {
        executor
            .start(id, harness.launch("pod-copy", &["sh", "-c", "trap 'exit 0' TERM; sleep 1000 & wait"]))
            .await
            .unwrap();
    }
    assert_eq!(sh(executor, &first, "cat /etc/os-release").await, OS_RELEASE.trim_end());
    sh(executor, &first, "echo mine > /etc/os-release; rm /bin/stat").await;
    assert_eq!(
        sh(executor, &second, "cat /etc/os-release; ls /bin/stat").await,
        format!("{}\n/bin/stat", OS_RELEASE.trim_end())
    );
    assert_eq!(std::fs::read_to_string(harness.image.join("etc/os-release")).unwrap(), OS_RELEASE);
    assert!(harness.image.join("bin/stat").exists());
    executor.shutdown().await;
    assert!(runc_containers(&harness.runc_state()).is_empty());
}

/// The limits reach the container's cgroups (read from the host: the container has no cgroup
/// file system of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_set_on_the_container_s_cgroups() {
    let Some(harness) = harness("limits_are_set_on_the_container_s_cgroups") else { return };
    let executor = &harness.executor;
    let OciSupport::Ready(info) = executor.oci() else { unreachable!() };
    if !info.cgroup_limits {
        skip("limits_are_set_on_the_container_s_cgroups", "cgroups refuse limits on this host");
        return;
    }
    let id = unique("limits");
    let launch = LaunchSpec {
        memory_limit_bytes: Some(96 << 20),
        cpu_limit_millis: Some(250),
        ..harness.launch("pod-limits", &["sleep", "1000"])
    };
    executor.start(&id, launch).await.unwrap();
    let suffix = format!("-{id}");
    let cgroup = |hierarchy: &str, file: &str| {
        let dir = std::fs::read_dir(format!("/sys/fs/cgroup/{hierarchy}"))
            .unwrap()
            .filter_map(Result::ok)
            .find(|entry| entry.file_name().to_string_lossy().ends_with(&suffix))
            .unwrap_or_else(|| panic!("no {hierarchy} cgroup for {id}"));
        std::fs::read_to_string(dir.path().join(file)).unwrap().trim().to_owned()
    };
    if Path::new("/sys/fs/cgroup/memory").is_dir() {
        assert_eq!(cgroup("memory", "memory.limit_in_bytes"), (96u64 << 20).to_string());
        assert_eq!(cgroup("cpu", "cpu.cfs_quota_us"), "25000");
        assert_eq!(cgroup("cpu", "cpu.cfs_period_us"), "100000");
    } else {
        assert_eq!(cgroup("", "memory.max"), (96u64 << 20).to_string());
        assert_eq!(cgroup("", "cpu.max"), "25000 100000");
    }
    executor.kill(&id).await;
    executor.shutdown().await;
}

/// A memory-backed `shared` volume of 1 MiB where the executor can mount a tmpfs (a root
/// emulator), else none.
fn memory_volumes_here(executor: &Executor) -> Vec<cwsandbox_executor::MemoryVolume> {
    match executor.memory_volumes() {
        Ok(()) => vec![cwsandbox_executor::MemoryVolume { volume: "shared".into(), size_bytes: 1 << 20 }],
        Err(_) => Vec::new(),
    }
}

/// `script` run by `sh -c` in container `container` of sandbox `id`; its trimmed stdout and exit code.
async fn sh_in(executor: &Executor, id: &str, container: &str, script: &str) -> (String, i32) {
    let request = ExecRequest { container: Some(container.into()), ..argv(&["sh", "-c", script]) };
    let (stdout, _, code) = run_request(executor, id, request).await;
    (stdout.trim_end().to_owned(), code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_containers_have_their_own_images_and_roots_and_share_network_uts_and_volumes() {
    let Some(harness) = harness("a_pods_containers_have_their_own_images_and_roots_and_share_network_uts_and_volumes")
    else {
        return;
    };
    let executor = &harness.executor;
    let second = build_image(&harness.root.path().join("second"));
    std::fs::write(harness.image.join("etc/which"), "first\n").unwrap();
    std::fs::write(second.join("etc/which"), "second\n").unwrap();
    let marker = unique("marker");
    let id = unique("pod");
    let shared = VolumeMount { volume: "shared".into(), path: "/shared".into(), ..VolumeMount::default() };
    let helper = Sidecar {
        name: "helper".into(),
        command: [
            "sh",
            "-c",
            "echo helper up; echo from-helper > /mnt/shared/h; while :; do echo pong | nc -l -p 7000; done",
        ]
        .map(str::to_owned)
        .to_vec(),
        env: env(&[("ROLE", "helper"), ("CWSBX_TEST_MARKER", &marker)]),
        image: Some(ImageRoot { rootfs: second.clone() }),
        volume_mounts: vec![VolumeMount { path: "/mnt/shared".into(), ..shared.clone() }],
        files: vec![MountedFile { path: "/etc/helper.conf".into(), content: b"helper's\n".to_vec() }],
        ..Sidecar::default()
    };
    let launch = LaunchSpec {
        network: Network::LoopbackOnly,
        name: "main".into(),
        env: env(&[("ROLE", "main"), ("CWSBX_TEST_MARKER", &marker)]),
        volume_mounts: vec![shared],
        // Memory-backed: one tmpfs, of its size, for both containers' mounts.
        memory_volumes: memory_volumes_here(&harness.executor),
        sidecars: vec![helper],
        ..harness.launch("pod-pair", &["sh", "-c", "echo main up; exec sleep 1000"])
    };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "main up\n").await;
    wait_for_log(&executor.container_logs(&id, Some("helper")).unwrap(), "helper up\n").await;

    // Each its image, environment and root: a file written in one is not in the other.
    assert_eq!(sh(executor, &id, "cat /etc/which; echo $ROLE").await, "first\nmain");
    assert_eq!(sh_in(executor, &id, "helper", "cat /etc/which; echo $ROLE").await, ("second\nhelper".into(), 0));
    sh(executor, &id, "echo main > /tmp/only-main").await;
    assert_eq!(sh_in(executor, &id, "helper", "cat /tmp/only-main").await.1, 1, "main's /tmp is the helper's");
    assert_eq!(sh_in(executor, &id, "helper", "cat /etc/helper.conf").await.0, "helper's");
    assert_eq!(run(executor, &id, &["cat", "/etc/helper.conf"]).await.2, 1, "the helper's mounted file is main's");
    // Its own processes (PID namespace); the Pod's hostname (UTS).
    assert_eq!(sh_in(executor, &id, "helper", "tr '\\0' ' ' < /proc/1/cmdline").await.0.split(' ').next(), Some("sh"));
    assert_eq!(sh(executor, &id, "tr '\\0' ' ' < /proc/1/cmdline").await, "sleep 1000");
    assert_eq!(sh_in(executor, &id, "helper", "hostname").await.0, "pod-pair");
    // The volume, wherever each mounts it.
    assert_eq!(sh(executor, &id, "cat /shared/h").await, "from-helper");
    if executor.memory_volumes().is_ok() {
        assert_eq!(sh_in(executor, &id, "helper", "stat -f -c %T /mnt/shared").await.0, "tmpfs");
        // (busybox's head says "I/O error" of ENOSPC: the size written tells.)
        let script = "head -c 2097152 /dev/zero > /shared/big 2>/dev/null; echo $?; wc -c < /shared/big";
        let (out, code) = sh_in(executor, &id, "main", script).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!((lines[0], code), ("1", 0), "a write past the tmpfs's size fails: {out}");
        assert!(lines[1].trim().parse::<u64>().unwrap() <= 1 << 20, "{out}");
    }
    // The network: the helper's server answers on the loopback the sandbox's port relay reaches.
    let mut stream = within("the helper's port", async {
        loop {
            if let Ok(stream) = executor.connect(&id, 7000).await {
                break stream;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut pong = [0u8; 5];
    std::io::Read::read_exact(&mut stream, &mut pong).unwrap();
    assert_eq!(&pong, b"pong\n");
    // Files through the API, container by container.
    executor.write_file_in(&id, Some("helper"), "/tmp/api", b"to the helper").await.unwrap();
    assert_eq!(executor.read_file_in(&id, Some("helper"), "/tmp/api").await.unwrap(), b"to the helper");
    assert!(matches!(executor.read_file(&id, "/tmp/api").await, Err(FileError::NotFound)));
    assert!(matches!(
        executor.read_file_in(&id, Some("nobody"), "/tmp/api").await,
        Err(FileError::UnknownContainer(name)) if name == "nobody"
    ));

    // The stop ends both containers: nothing of them is left.
    executor.stop(&id, Duration::from_secs(2)).await;
    assert!(processes_with_marker(&marker).is_empty(), "processes outlived the stop");
    assert!(runc_containers(&harness.runc_state()).is_empty(), "containers left");
    executor.shutdown().await;
    let sandboxes = harness.root.path();
    assert!(mounts_under(sandboxes).is_empty(), "mounts left: {:?}", mounts_under(sandboxes));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_sidecar_ends_with_the_main_command_and_its_own_end_is_reported() {
    let Some(harness) = harness("an_image_sidecar_ends_with_the_main_command_and_its_own_end_is_reported") else {
        return;
    };
    let executor = &harness.executor;
    let mut exits = executor.exits();
    let id = unique("pod");
    let sidecar = |name: &str, command: &[&str]| Sidecar {
        name: name.into(),
        command: command.iter().map(|arg| arg.to_string()).collect(),
        image: Some(ImageRoot { rootfs: harness.image.clone() }),
        ..Sidecar::default()
    };
    let launch = LaunchSpec {
        name: "main".into(),
        sidecars: vec![
            sidecar("quits", &["sh", "-c", "exit 3"]),
            sidecar("missing", &["no-such-program"]),
            sidecar("stays", &["sleep", "1000"]),
        ],
        ..harness.launch("pod-ends", &["sh", "-c", "trap 'exit 5' HUP; while :; do sleep 0.05; done"])
    };
    executor.start(&id, launch).await.unwrap();
    let mut reported = Vec::new();
    while reported.len() < 2 {
        let exit: MainExit = within("the sidecars' exits", exits.recv()).await.unwrap();
        reported.push((exit.container.unwrap_or_default(), exit.exit_code));
    }
    reported.sort();
    assert_eq!(reported, [("missing".to_owned(), 127), ("quits".to_owned(), 3)]);
    assert_eq!(executor.sidecar_exit_code(&id, "quits"), Some(3));
    let missing = executor.container_logs(&id, Some("missing")).unwrap();
    let text = String::from_utf8_lossy(&missing.tail(1 << 16).bytes()).into_owned();
    assert!(text.contains("no-such-program: command not found"), "{text}");
    // An ended container is gone, as in Kubernetes: exec does not reach it.
    let ended = executor.exec(&id, ExecRequest { container: Some("quits".into()), ..argv(&["true"]) }).await;
    assert!(
        matches!(&ended, Err(ExecutorError::ContainerEnded { container, .. }) if container == "quits"),
        "{:?}",
        ended.err()
    );
    assert!(matches!(
        executor.read_file_in(&id, Some("quits"), "/etc/passwd").await,
        Err(FileError::ContainerEnded(_))
    ));
    // The main command's end ends the sidecar that stays.
    let mut session = executor.exec(&id, argv(&["sh", "-c", "kill -HUP 1"])).await.unwrap();
    session.stdin.close().await;
    let _ = within("the exec", session.collect()).await;
    let exit: MainExit = within("the main exit", exits.recv()).await.unwrap();
    assert_eq!((exit.container, exit.exit_code), (None, 5));
    assert!(runc_containers(&harness.runc_state()).is_empty(), "containers left");
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_start_in_order_once_what_they_wait_for_holds_and_names_resolve_to_the_loopback() {
    let Some(harness) =
        harness("sidecars_start_in_order_once_what_they_wait_for_holds_and_names_resolve_to_the_loopback")
    else {
        return;
    };
    let executor = &harness.executor;
    let shared = VolumeMount { volume: "shared".into(), path: "/shared".into(), ..VolumeMount::default() };
    let sidecar = |name: &str, script: &str, after: Vec<StartAfter>| Sidecar {
        name: name.into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        image: Some(ImageRoot { rootfs: harness.image.clone() }),
        volume_mounts: vec![shared.clone()],
        after,
        ..Sidecar::default()
    };
    let after = |container: &str, condition: StartCondition| StartAfter { container: container.into(), condition };
    let probe = StartupProbe {
        exec: vec!["sh".into(), "-c".into(), "test -e /tmp/ready".into()],
        initial_delay: Duration::ZERO,
        period: Duration::from_millis(100),
        timeout: Duration::from_secs(1),
        failure_threshold: 50,
    };
    let db = Sidecar {
        startup_probe: Some(probe.clone()),
        ..sidecar("db", "echo db >> /shared/order; sleep 0.3; touch /tmp/ready; exec sleep 1000", vec![])
    };
    let init = sidecar("init", "echo init >> /shared/order", vec![after("db", StartCondition::Healthy)]);
    // Healthy once its line is written: `service_started` alone would not order its line
    // before main's (a started container's command may not have run yet).
    let api = Sidecar {
        startup_probe: Some(probe.clone()),
        ..sidecar(
            "api",
            "echo api >> /shared/order; touch /tmp/ready; exec sleep 1000",
            vec![after("db", StartCondition::Healthy), after("init", StartCondition::CompletedSuccessfully)],
        )
    };
    let id = unique("ordered");
    let launch = LaunchSpec {
        name: "main".into(),
        volume_mounts: vec![shared.clone()],
        sidecars: vec![db, init, api],
        after: vec![after("db", StartCondition::Started), after("api", StartCondition::Healthy)],
        host_aliases: vec!["db".into(), "api".into()],
        ..harness.launch("pod-ordered", &["sh", "-c", "echo main >> /shared/order; exec sleep 1000"])
    };
    executor.start(&id, launch).await.unwrap();
    let order = within("the main command's line", async {
        loop {
            let order = executor
                .read_file(&id, "/shared/order")
                .await
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
            if let Ok(order) = order
                && order.lines().count() == 4
            {
                break order;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(order, "db\ninit\napi\nmain\n");
    assert_eq!(executor.sidecar_exit_code(&id, "init"), Some(0));
    // Every container resolves the Pod's names to its loopback.
    let hosts = sh(executor, &id, "cat /etc/hosts").await;
    assert!(hosts.lines().any(|line| line == "127.0.0.1\tpod-ordered db api"), "{hosts}");
    assert_eq!(sh_in(executor, &id, "api", "grep -c 'db api' /etc/hosts").await, ("1".into(), 0));
    executor.stop(&id, Duration::from_secs(1)).await;

    // A dependency that never becomes healthy fails the start, and leaves nothing.
    let failing = unique("unhealthy");
    let never = Sidecar {
        startup_probe: Some(StartupProbe { failure_threshold: 3, ..probe }),
        ..sidecar("never", "exec sleep 1000", vec![])
    };
    let launch = LaunchSpec {
        sidecars: vec![never],
        after: vec![after("never", StartCondition::Healthy)],
        ..harness.launch("pod-unhealthy", &["sleep", "1000"])
    };
    let error = executor.start(&failing, launch).await.unwrap_err().to_string();
    assert!(error.contains("dependency failed to start: container \"never\" is unhealthy"), "{error}");
    assert!(runc_containers(&harness.runc_state()).is_empty(), "containers left");
    executor.shutdown().await;
}
