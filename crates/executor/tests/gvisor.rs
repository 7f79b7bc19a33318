//! gVisor sandboxes (`RuntimeHandler::Runsc`, a Pod of RuntimeClass `gvisor`): the sandbox's
//! processes run on gVisor's own kernel through Debian's `runsc`, in an image or on the host's
//! directories. Where runsc or busybox is missing, or the tests do not run as root, they say so
//! and pass without checking anything (under CI, scripts/test installs runsc and runs as root).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    KillOnDrop, MadeNetwork, argv, busybox_image, pidfds, processes_naming, reply_on, run, run_request, sh, skip,
    terminal_exec_through_a_resize, unique, wait_all_gone, wait_for_log, within,
};
use cwsandbox_executor::{
    ExecRequest, Executor, ExecutorConfig, ExecutorError, FileError, ImageRoot, LaunchSpec, MountedFile, Network,
    OciSupport, RuntimeHandler, SandboxUser, Sidecar, VolumeMount,
};
use tempfile::TempDir;

const RUNSC: &str = "/usr/bin/runsc";
const BUSYBOX: &str = "/bin/busybox";
const APPLETS: &[&str] =
    &["sh", "cat", "ls", "id", "sleep", "echo", "stat", "mkdir", "nc", "pwd", "hostname", "tr", "stty"];

fn tools_present(test: &str) -> bool {
    let missing: Vec<&str> = [RUNSC, BUSYBOX].into_iter().filter(|tool| !Path::new(tool).exists()).collect();
    if !missing.is_empty() {
        skip(test, &format!("{} not installed, so gVisor sandboxes cannot be tested here", missing.join(" and ")));
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(test, "gVisor sandboxes need a root emulator");
        return false;
    }
    true
}

/// A busybox image whose files keep their own ids (gVisor's trees are not shifted).
fn build_image(dir: &Path) -> PathBuf {
    busybox_image(dir, APPLETS, &[])
}

struct GvisorHarness {
    executor: Executor,
    _root: TempDir,
    image: PathBuf,
}

fn harness(test: &str) -> Option<GvisorHarness> {
    if !tools_present(test) {
        return None;
    }
    let root = tempfile::Builder::new().prefix("cwsbx-gvisor-test").tempdir().unwrap();
    let image = build_image(root.path());
    let mut config = ExecutorConfig::new(root.path());
    config.warm_sandboxes = 0;
    config.gvisor_runtime = Some(RUNSC.into());
    let executor = Executor::new(config).unwrap();
    match executor.gvisor() {
        OciSupport::Ready(info) => eprintln!("gVisor in force: {info:?}"),
        other => panic!("runsc is installed but gVisor sandboxes do not work: {other:?}"),
    }
    Some(GvisorHarness { executor, _root: root, image })
}

impl GvisorHarness {
    fn launch(&self, command: &[&str]) -> LaunchSpec {
        LaunchSpec {
            hostname: "pod-gvisor".into(),
            command: command.iter().map(|arg| arg.to_string()).collect(),
            image: Some(ImageRoot { rootfs: self.image.clone() }),
            handler: RuntimeHandler::Runsc,
            ..LaunchSpec::default()
        }
    }
}

/// gVisor's kernel says it is Linux 4.4.0; the host's is not.
fn host_kernel() -> String {
    std::fs::read_to_string("/proc/version").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_sandbox_runs_its_image_on_gvisors_kernel() {
    let Some(harness) = harness("a_gvisor_sandbox_runs_its_image_on_gvisors_kernel") else { return };
    let executor = &harness.executor;
    let id = unique("gvisor");
    let launch = LaunchSpec {
        working_dir: Some("/work/dir".into()),
        files: vec![MountedFile { path: "/etc/app.conf".into(), content: b"mounted\n".to_vec() }],
        volume_mounts: vec![VolumeMount { volume: "scratch".into(), path: "/data".into(), ..VolumeMount::default() }],
        ..harness.launch(&["sh", "-c", "echo started in $(pwd); trap 'echo bye; exit 0' TERM; sleep 1000 & wait"])
    };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "started in /work/dir\n").await;

    let version = sh(executor, &id, "cat /proc/version").await;
    assert!(version.contains("Linux version 4.4.0"), "not gVisor's kernel: {version}");
    assert_ne!(version.trim(), host_kernel().trim(), "the host's kernel answered");
    assert_eq!(sh(executor, &id, "hostname").await, "pod-gvisor");
    assert_eq!(sh(executor, &id, "cat /etc/app.conf").await, "mounted");
    assert_eq!(sh(executor, &id, "echo x > /data/y && cat /data/y").await, "x");
    assert_eq!(sh(executor, &id, "id -u").await, "0");

    // Execs: codes, a missing command, a working directory, stdin, another user.
    assert_eq!(run(executor, &id, &["sh", "-c", "exit 7"]).await.2, 7);
    let (_, stderr, code) = run(executor, &id, &["no-such-command"]).await;
    assert_eq!(code, 127);
    assert!(stderr.contains("no-such-command: command not found"), "{stderr}");
    let request = ExecRequest { working_dir: Some("/etc".into()), ..argv(&["pwd"]) };
    assert_eq!(run_request(executor, &id, request).await.0, "/etc\n");
    let request = ExecRequest { working_dir: Some("/missing".into()), ..argv(&["pwd"]) };
    let (_, stderr, code) = run_request(executor, &id, request).await;
    assert_eq!(code, 127, "{stderr}");
    let mut session = executor.exec(&id, argv(&["cat"])).await.unwrap();
    session.stdin.write(b"through stdin\n").await.unwrap();
    session.stdin.close().await;
    let (stdout, _, code) = within("cat", session.collect()).await;
    assert_eq!((String::from_utf8_lossy(&stdout).as_ref(), code), ("through stdin\n", 0));

    // Files through the API, in gVisor's own view: its /tmp is its kernel's, not the host's.
    executor.write_file(&id, "/tmp/api/written", b"by the API").await.unwrap();
    assert_eq!(
        sh(executor, &id, "cat /tmp/api/written; echo; stat -c %u:%g:%a /tmp/api/written").await,
        "by the API\n0:0:644"
    );
    sh(executor, &id, "echo by the sandbox > notes").await;
    assert_eq!(executor.read_file(&id, "notes").await.unwrap(), b"by the sandbox\n");
    assert!(matches!(executor.read_file(&id, "/etc/missing").await, Err(FileError::NotFound)));
    assert!(matches!(executor.read_file(&id, "/etc").await, Err(FileError::IsDirectory)));
    assert!(matches!(executor.read_file(&id, "/dev/null").await, Err(FileError::NotRegular { .. })));

    // Stop: SIGTERM reaches the command through runsc, which ends as it chooses.
    executor.stop(&id, Duration::from_secs(10)).await;
    assert_eq!(executor.exit_code(&id), Some(0));
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_sandbox_acts_as_the_user_it_asks_for_and_is_killed_at_once() {
    let Some(harness) = harness("a_gvisor_sandbox_acts_as_the_user_it_asks_for_and_is_killed_at_once") else { return };
    let executor = &harness.executor;
    let id = unique("gvisor-user");
    let launch = LaunchSpec {
        user: Some(SandboxUser { uid: 1000, gid: 1000 }),
        ..harness.launch(&["sh", "-c", "echo up; exec sleep 1000"])
    };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "up\n").await;
    assert_eq!(sh(executor, &id, "id -u; id -g").await, "1000\n1000");
    // The API's files are the user's, and what the user may not open, the API may not either.
    executor.write_file(&id, "/tmp/mine", b"x").await.unwrap();
    assert_eq!(sh(executor, &id, "stat -c %u /tmp/mine").await, "1000");
    assert!(matches!(executor.write_file(&id, "/etc/passwd", b"x").await, Err(FileError::PermissionDenied)));
    // Kill ends it at once.
    executor.kill(&id).await;
    assert_eq!(executor.exit_code(&id), Some(137));
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_only_gvisor_sandbox_is_reached_through_connect() {
    let Some(harness) = harness("a_loopback_only_gvisor_sandbox_is_reached_through_connect") else { return };
    let executor = &harness.executor;
    let id = unique("gvisor-net");
    let launch = LaunchSpec {
        network: Network::LoopbackOnly,
        ..harness.launch(&["sh", "-c", "echo listening; echo hello from gvisor | nc -l -p 8080"])
    };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "listening\n").await;
    let reply = reply_on(executor, &id, 8080).await;
    assert_eq!(reply, "hello from gvisor\n");
    executor.shutdown().await;
}

/// A network made for the sandbox is refused by name under gVisor (see
/// `GVISOR_ATTACHED_NETWORK`), and nothing of it is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_sandbox_refuses_a_network_made_for_it() {
    let test = "a_gvisor_sandbox_refuses_a_network_made_for_it";
    let Some(harness) = harness(test) else { return };
    let Some(made) = MadeNetwork::new(test) else { return };
    let executor = &harness.executor;
    let id = unique("gvisor-attached");
    let launch = LaunchSpec { network: made.network(), ..harness.launch(&["sh", "-c", "echo ran"]) };
    let error = executor.start(&id, launch).await.unwrap_err().to_string();
    assert!(error.contains(cwsandbox_executor::GVISOR_ATTACHED_NETWORK), "{error}");
    assert!(made.made.lock().unwrap().is_empty());
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_sandbox_without_an_image_runs_the_hosts_programs_and_reads_only_what_anyone_may() {
    let test = "a_gvisor_sandbox_without_an_image_runs_the_hosts_programs_and_reads_only_what_anyone_may";
    let Some(harness) = harness(test) else { return };
    let executor = &harness.executor;
    let id = unique("gvisor-host");
    let launch = LaunchSpec { image: None, ..harness.launch(&["sh", "-c", "echo up; exec sleep 1000"]) };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "up\n").await;
    assert!(sh(executor, &id, "cat /proc/version").await.contains("Linux version 4.4.0"));
    // The host's programs, read-only.
    assert_eq!(sh(executor, &id, "/usr/bin/env true && echo ran").await, "ran");
    let (_, _, code) = run(executor, &id, &["sh", "-c", "touch /usr/bin/planted"]).await;
    assert_ne!(code, 0, "the host's directories are writable");
    // Root-only host files are empty here, as they are unreadable to a namespaced sandbox.
    if std::fs::metadata("/etc/shadow").is_ok() {
        assert_eq!(sh(executor, &id, "cat /etc/shadow | wc -c").await, "0");
        assert_eq!(executor.read_file(&id, "/etc/shadow").await.unwrap(), b"");
    }
    // Its own root and /tmp are writable.
    executor.write_file(&id, "/tmp/x", b"y").await.unwrap();
    assert_eq!(sh(executor, &id, "cat /tmp/x").await, "y");
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_sandbox_of_several_containers_is_refused_by_name() {
    let Some(harness) = harness("a_gvisor_sandbox_of_several_containers_is_refused_by_name") else { return };
    let launch = LaunchSpec {
        sidecars: vec![Sidecar {
            name: "helper".into(),
            command: vec!["sleep".into(), "1000".into()],
            image: Some(ImageRoot { rootfs: harness.image.clone() }),
            ..Sidecar::default()
        }],
        ..harness.launch(&["sleep", "1000"])
    };
    match harness.executor.start(&unique("gvisor-pod"), launch).await {
        Err(ExecutorError::InvalidRequest(message)) => assert!(message.contains("under gVisor"), "{message}"),
        other => panic!("a gVisor Pod of two containers started: {other:?}"),
    }
    harness.executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_sandbox_over_its_memory_limit_is_killed() {
    let Some(harness) = harness("a_gvisor_sandbox_over_its_memory_limit_is_killed") else { return };
    let executor = &harness.executor;
    let id = unique("gvisor-oom");
    let mut exits = executor.exits();
    // 64 MiB: gVisor's kernel is told it has that much, and its cgroup holds it there.
    let launch = LaunchSpec {
        memory_limit_bytes: Some(64 << 20),
        ..harness.launch(&["sh", "-c", "echo hogging; x=a; while true; do x=$x$x; done"])
    };
    executor.start(&id, launch).await.unwrap();
    let exit = within("the hog's end", exits.recv()).await.unwrap();
    assert_eq!(exit.id, id);
    // Killed, as an OOM kill ends it; whether the OOM killer did it is not known here (runsc
    // removes the container's cgroup, whose count would say, as it ends).
    assert_eq!(exit.exit_code, 137, "{exit:?}");
    executor.shutdown().await;
}

/// The emulator killed without a chance to clean up (SIGKILL): its gVisor sandboxes go with it
/// (the watchdog's work, as for runc's containers), runsc's processes and state included.
#[test]
fn gvisor_sandboxes_die_with_the_emulator() {
    if !tools_present("gvisor_sandboxes_die_with_the_emulator") {
        return;
    }
    let root = tempfile::Builder::new().prefix("cwsbx-gvisor-kill").tempdir().unwrap();
    let image = build_image(root.path());
    let sandboxes = root.path().join("sandboxes");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "gvisor_helper_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env("CWSBX_GVISOR_HELPER_ROOT", &sandboxes)
        .env("CWSBX_GVISOR_HELPER_IMAGE", &image)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("HELPER-READY") {
        line.clear();
        assert_ne!(
            std::io::BufRead::read_line(&mut stdout, &mut line).unwrap(),
            0,
            "the helper ended before it was ready"
        );
    }
    // runsc's processes (its `run`, sandbox kernel and file server) name the state directory.
    let runsc = processes_naming(&sandboxes);
    assert!(runsc.len() >= 3, "runsc does not run the sandboxes: {runsc:?}");
    let watched = pidfds(runsc);
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let left = wait_all_gone(watched);
    assert!(left.is_empty(), "gVisor's processes outlived the emulator: {left:?}");
    let listed = std::process::Command::new(RUNSC)
        .arg("--root")
        .arg(sandboxes.join(".gvisor/state"))
        .args(["list", "-q"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "", "containers outlived the emulator");
}

#[test]
#[ignore = "a helper process for gvisor_sandboxes_die_with_the_emulator"]
fn gvisor_helper_process() {
    let (Ok(root), Ok(image)) = (std::env::var("CWSBX_GVISOR_HELPER_ROOT"), std::env::var("CWSBX_GVISOR_HELPER_IMAGE"))
    else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mut config = ExecutorConfig::new(&root);
        config.warm_sandboxes = 0;
        config.gvisor_runtime = Some(RUNSC.into());
        let executor = Executor::new(config).unwrap();
        let launch = LaunchSpec {
            hostname: "held".into(),
            command: ["sh", "-c", "sleep 1000 & echo ready; wait"].map(str::to_owned).to_vec(),
            image: Some(ImageRoot { rootfs: image.into() }),
            handler: RuntimeHandler::Runsc,
            ..LaunchSpec::default()
        };
        executor.start("held", launch).await.unwrap();
        wait_for_log(&executor.logs("held").unwrap(), "ready\n").await;
        println!("HELPER-READY");
        std::future::pending::<()>().await;
    });
}

/// A volume a gVisor sandbox wrote (through gVisor's kernel, to a directory the host binds in) is
/// snapshotted from the host as written, and a gVisor sandbox restored from the snapshot reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_sandboxs_volume_is_snapshotted_and_restored_as_written() {
    let Some(harness) = harness("a_gvisor_sandboxs_volume_is_snapshotted_and_restored_as_written") else { return };
    let executor = &harness.executor;
    let (source, snapshot) = (unique("gvisor-snap"), "0b1e5c3a-0000-4000-8000-00000000a001");
    let volume = |restore_from: Option<&str>| VolumeMount {
        volume: "work".into(),
        path: "/work/data".into(),
        restore_from: restore_from.map(str::to_owned),
        ..VolumeMount::default()
    };
    let launch = LaunchSpec { volume_mounts: vec![volume(None)], ..harness.launch(&["sleep", "1000"]) };
    executor.start(&source, launch).await.unwrap();
    sh(executor, &source, "echo kept > /work/data/notes && mkdir /work/data/sub && echo deep > /work/data/sub/x").await;
    let size = executor.snapshot_volume(&source, "work", snapshot).await.unwrap();
    assert!(size >= 10, "the snapshot holds {size} bytes");
    let restored = unique("gvisor-restored");
    let launch = LaunchSpec { volume_mounts: vec![volume(Some(snapshot))], ..harness.launch(&["sleep", "1000"]) };
    executor.start(&restored, launch).await.unwrap();
    assert_eq!(sh(executor, &restored, "cat /work/data/notes /work/data/sub/x").await, "kept\ndeep");
    executor.shutdown().await;
}

/// A terminal exec in a gVisor sandbox (`kubectl exec -it`, the client's `tty=True`): a terminal
/// of gVisor's, sized as asked, following resizes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_exec_in_gvisor_gets_a_terminal_that_follows_resizes() {
    let Some(harness) = harness("a_terminal_exec_in_gvisor_gets_a_terminal_that_follows_resizes") else { return };
    let executor = &harness.executor;
    let id = unique("gvisor-tty");
    executor.start(&id, harness.launch(&["sleep", "1000"])).await.unwrap();
    let (text, code) = terminal_exec_through_a_resize(executor, &id, "[ -t 0 ] && [ -t 1 ] && echo terminal").await;
    // A terminal (runsc hands the command the host terminal runsc itself was given: `tty` finds
    // no /dev/pts name for it inside gVisor, but it is one).
    assert!(text.contains("terminal\r\n"), "no terminal: {text:?}");
    assert_eq!(code, 3);
    executor.shutdown().await;
}

/// A gVisor sandbox on the host's directories with a mounted file or volume whose place the host's
/// directory lacks is refused by name: runsc's file server would make the place in the host's
/// directory. Nothing is written there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_point_the_hosts_directory_lacks_is_refused_under_gvisor() {
    let Some(harness) = harness("a_mount_point_the_hosts_directory_lacks_is_refused_under_gvisor") else { return };
    let executor = &harness.executor;
    let planted = unique("cwsbx-gvisor-planted");
    for launch in [
        LaunchSpec {
            files: vec![MountedFile { path: format!("/etc/{planted}/app.conf"), content: b"x".to_vec() }],
            ..harness.launch(&["sleep", "1000"])
        },
        LaunchSpec {
            volume_mounts: vec![VolumeMount {
                volume: "work".into(),
                path: format!("/usr/{planted}"),
                ..VolumeMount::default()
            }],
            ..harness.launch(&["sleep", "1000"])
        },
    ] {
        let launch = LaunchSpec { image: None, ..launch };
        match executor.start(&unique("gvisor-planted"), launch).await {
            Err(ExecutorError::InvalidRequest(message)) => assert!(message.contains("under gVisor"), "{message}"),
            other => panic!("started: {other:?}"),
        }
    }
    assert!(!Path::new(&format!("/etc/{planted}")).exists() && !Path::new(&format!("/usr/{planted}")).exists());
    // A place the host has (its /etc/hosts) takes the file.
    let id = unique("gvisor-hosts");
    let launch = LaunchSpec {
        image: None,
        files: vec![MountedFile { path: "/etc/hosts".into(), content: b"127.0.0.1 laid\n".to_vec() }],
        ..harness.launch(&["sleep", "1000"])
    };
    executor.start(&id, launch).await.unwrap();
    assert_eq!(sh(executor, &id, "cat /etc/hosts").await, "127.0.0.1 laid");
    executor.shutdown().await;
}
