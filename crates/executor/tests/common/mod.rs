//! Helpers shared by the executor's integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cwsandbox_executor::{ExecRequest, Executor, ExecutorConfig, Isolation, LaunchSpec, LogReader};
use tempfile::TempDir;

/// A safety net only: every wait in the tests is on an event (an exit, a stream
/// end, a log line); this bounds how long a broken executor can hang a test.
pub const SAFETY: Duration = Duration::from_secs(30);

pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(SAFETY, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

pub struct Harness {
    pub executor: Executor,
    pub root: TempDir,
}

tokio::task_local! {
    /// Set by `in_both_modes!`'s `namespaces_cold` tests: their executors start nothing ahead.
    pub static COLD_STARTS: bool;
}

pub fn harness(isolation: Isolation) -> Harness {
    harness_with(isolation, |_| {})
}

pub fn harness_with(isolation: Isolation, tweak: impl FnOnce(&mut ExecutorConfig)) -> Harness {
    let root = tempfile::Builder::new().prefix("cwsbx-exec-test").tempdir().expect("temp dir");
    let mut config = ExecutorConfig::new(root.path());
    config.isolation = isolation;
    if COLD_STARTS.try_with(|cold| *cold).unwrap_or(false) {
        config.warm_sandboxes = 0;
    }
    tweak(&mut config);
    let executor = Executor::new(config).expect("executor");
    assert_eq!(executor.isolation(), isolation, "the requested isolation must be in force");
    // The first start takes a sandbox started ahead of need, not whichever is quicker to come.
    if let Ok(runtime) = tokio::runtime::Handle::try_current()
        && runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(|| runtime.block_on(executor.ready_ahead()));
    }
    Harness { executor, root }
}

/// Why plain processes refuse to start `launch`, which they must.
pub async fn refused_by_plain_processes(launch: LaunchSpec) -> String {
    let plain = harness(Isolation::Plain);
    let error =
        plain.executor.start(&unique("plain"), launch).await.expect_err("plain processes refuse it").to_string();
    plain.executor.shutdown().await;
    error
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos());
    format!("{prefix}-{}-{nanos:x}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

pub fn spec(hostname: &str, command: &[&str]) -> LaunchSpec {
    LaunchSpec {
        hostname: hostname.into(),
        command: command.iter().map(|arg| arg.to_string()).collect(),
        ..LaunchSpec::default()
    }
}

pub fn argv(args: &[&str]) -> ExecRequest {
    ExecRequest { argv: args.iter().map(|arg| arg.to_string()).collect(), ..ExecRequest::default() }
}

pub fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
}

/// Runs a command to completion: (stdout, stderr, exit code).
pub async fn run_request(executor: &Executor, id: &str, request: ExecRequest) -> (String, String, i32) {
    let session = executor.exec(id, request).await.expect("exec");
    let (stdout, stderr, code) = within("an exec to finish", session.collect()).await;
    (String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr).into_owned(), code)
}

pub async fn run(executor: &Executor, id: &str, args: &[&str]) -> (String, String, i32) {
    run_request(executor, id, argv(args)).await
}

/// Runs a shell command that must succeed and returns its trimmed stdout.
pub async fn sh(executor: &Executor, id: &str, script: &str) -> String {
    let (stdout, stderr, code) = run(executor, id, &["sh", "-c", script]).await;
    assert_eq!(code, 0, "`{script}` failed: stdout {stdout:?} stderr {stderr:?}");
    stdout.trim_end().to_owned()
}

/// Waits until the log holds `needle` (following it, not polling).
pub async fn wait_for_log(logs: &LogReader, needle: &str) -> String {
    let read = logs.read_from(logs.start_offset()).expect("read");
    let mut text = String::from_utf8_lossy(&read.bytes()).into_owned();
    // From where the read ended: output written between the two calls is not skipped.
    let mut follower = logs.follow_from(read.next_offset).expect("follow");
    within(&format!("{needle:?} in the logs"), async {
        while !text.contains(needle) {
            match follower.next().await {
                Some(Ok(chunk)) => text.push_str(&String::from_utf8_lossy(&chunk.data)),
                Some(Err(error)) => panic!("log error: {error}"),
                None => panic!("logs ended without {needle:?}; got {text:?}"),
            }
        }
    })
    .await;
    text
}

/// Pids of live processes whose environment holds `marker` (as a variable value).
pub fn processes_with_marker(marker: &str) -> Vec<u32> {
    let needle = format!("CWSBX_TEST_MARKER={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // A zombie has no environment left; a process that vanished reads as an error.
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|environ| environ.split(|byte| *byte == 0).any(|var| var == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// Generates one `#[tokio::test]` per isolation mode for each listed function
/// `async fn name(isolation: Isolation)`.
#[macro_export]
macro_rules! in_both_modes {
    ($($name:ident),* $(,)?) => {
        mod namespaces {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(cwsandbox_executor::Isolation::Namespaces).await;
                }
            )*
        }
        /// Every start from scratch, with no sandbox started ahead of need.
        mod namespaces_cold {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::common::COLD_STARTS.scope(true, super::$name(cwsandbox_executor::Isolation::Namespaces)).await;
                }
            )*
        }
        mod plain {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(cwsandbox_executor::Isolation::Plain).await;
                }
            )*
        }
    };
}

/// Starts `sh -c "echo started; SCRIPT"` with `CWSBX_TEST_MARKER=marker` in its environment and
/// returns once it has printed `started`.
pub async fn start_marked_exec(
    executor: &Executor,
    id: &str,
    script: &str,
    marker: &str,
) -> cwsandbox_executor::ExecSession {
    let mut request = argv(&["sh", "-c", &format!("echo started; {script}")]);
    request.env = env(&[("CWSBX_TEST_MARKER", marker)]);
    let mut session = executor.exec(id, request).await.expect("exec");
    within("the exec to start", async {
        let output = session.output.recv().await.expect("output");
        assert_eq!(&output.data[..], b"started\n");
    })
    .await;
    session
}

/// A test that cannot run on this machine (a missing program, a host that refuses cgroup limits)
/// says so and checks nothing; under CI (`CI=true`) that fails the run with the reason, unless
/// `tests/tolerated_skips.txt` lists the test with why: the test command never passes by skipping.
pub fn skip(test: &str, reason: &str) {
    let listed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/tolerated_skips.txt"))
        .unwrap_or_default()
        .lines()
        .any(|line| line.split_once(':').is_some_and(|(name, why)| name.trim() == test && !why.trim().is_empty()));
    if std::env::var("CI").as_deref() == Ok("true") && !listed {
        panic!(
            "{test} cannot run here: {reason}. Under CI a missing prerequisite fails the run: install it, or list \
             the test in tests/tolerated_skips.txt with why"
        );
    }
    eprintln!("SKIPPED {test}: {reason}");
}

/// Pids of processes whose command line names `path`.
pub fn processes_naming(path: &std::path::Path) -> Vec<u32> {
    let needle = path.to_string_lossy().into_owned();
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|line| String::from_utf8_lossy(&line).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

/// Opens pidfds on processes (those that are already gone are left out).
pub fn pidfds(pids: Vec<u32>) -> Vec<(u32, std::os::fd::OwnedFd)> {
    pids.into_iter()
        .filter_map(|pid| {
            // SAFETY: pidfd_open returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
            // SAFETY: a non-negative result is a descriptor we own.
            (fd >= 0).then(|| (pid, unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) }))
        })
        .collect()
}

/// Waits on the pidfds until every process ended; returns those that did not.
pub fn wait_all_gone(processes: Vec<(u32, std::os::fd::OwnedFd)>) -> Vec<u32> {
    use std::os::fd::AsRawFd;
    let deadline = std::time::Instant::now() + SAFETY;
    let mut left = Vec::new();
    for (pid, fd) in processes {
        let remaining = deadline.saturating_duration_since(std::time::Instant::now());
        let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut poll, 1, remaining.as_millis() as i32) } != 1 {
            left.push(pid);
        }
    }
    left
}

/// A child process killed (and reaped) when dropped: a failing test leaves none running.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a server in the sandbox sends on `port` (reached through `Executor::connect`) until it
/// closes; a refused connection (the server not listening yet) is retried.
pub async fn reply_on(executor: &Executor, id: &str, port: u16) -> String {
    within("a connection to the sandbox", async {
        loop {
            match executor.connect(id, port).await {
                Ok(stream) => {
                    stream.set_nonblocking(true).unwrap();
                    let mut stream = tokio::net::TcpStream::from_std(stream).unwrap();
                    let mut reply = String::new();
                    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut reply).await.unwrap();
                    break reply;
                }
                Err(_) => tokio::task::yield_now().await,
            }
        }
    })
    .await
}

/// An image root under `dir` made of the host's static busybox (`/bin/busybox` and a link per
/// applet), with `/etc/passwd` naming root and `app` (1000), `/etc/group`, and `extra` files.
pub fn busybox_image(dir: &std::path::Path, applets: &[&str], extra: &[(&str, &str)]) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let image = dir.join("image");
    for sub in ["bin", "etc", "root", "tmp", "work"] {
        std::fs::create_dir_all(image.join(sub)).unwrap();
    }
    std::fs::copy("/bin/busybox", image.join("bin/busybox")).unwrap();
    for applet in applets {
        std::os::unix::fs::symlink("busybox", image.join("bin").join(applet)).unwrap();
    }
    std::fs::write(image.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/work:/bin/sh\n")
        .unwrap();
    std::fs::write(image.join("etc/group"), "root:x:0:\napp:x:1000:\n").unwrap();
    for (path, content) in extra {
        std::fs::write(image.join(path), content).unwrap();
    }
    std::fs::set_permissions(image.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    image
}

/// A terminal exec (80x24) of `sh -c "<before>; stty size; …"` that waits for its first size,
/// is resized to 100x30 and told to go on, and waits until the command sees the new size (the
/// resize reaches the container's terminal through the runtime, as SIGWINCH does), then exits 3:
/// everything it printed, and its exit code.
pub async fn terminal_exec_through_a_resize(executor: &Executor, id: &str, before: &str) -> (String, i32) {
    let script = format!(
        "{before}; stty size; read line; while [ \"$(stty size)\" = '24 80' ]; do sleep 0.01; done; stty size; exit 3"
    );
    let request = ExecRequest { tty: true, tty_size: Some((80, 24)), ..argv(&["sh", "-c", &script]) };
    let mut session = executor.exec(id, request).await.unwrap();
    let mut text = String::new();
    within("the first size", async {
        while !text.contains("24 80") {
            let output = session.output.recv().await.expect("output");
            text.push_str(&String::from_utf8_lossy(&output.data));
        }
    })
    .await;
    session.tty.as_ref().unwrap().resize(100, 30).unwrap();
    session.stdin.write(b"go\n").await.unwrap();
    within("the new size", async {
        while !text.contains("30 100") {
            let output = session.output.recv().await.expect("output");
            text.push_str(&String::from_utf8_lossy(&output.data));
        }
    })
    .await;
    let code = within("the exit", session.exit.wait()).await;
    (text, code)
}

/// A sandbox network as the emulator's network crate makes one for `Network::Attached`: `eth0`
/// at `10.99.<n>.5/32` (a veth pair whose other end, `peer0`, is in the namespace too), in a
/// namespace made for the sandbox or in the one runc made. Its name is removed on drop. `None`
/// (after `skip`) where this machine cannot make one (not root).
#[derive(Debug)]
pub struct MadeNetwork {
    pub name: String,
    pub address: String,
    pub made: std::sync::Mutex<Vec<&'static str>>,
}

impl MadeNetwork {
    pub fn new(test: &str) -> Option<std::sync::Arc<MadeNetwork>> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip(test, "a sandbox network needs root");
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("cwxt{}-{n}", std::process::id());
        let address = format!("10.99.{n}.5");
        Some(std::sync::Arc::new(MadeNetwork { name, address, made: Default::default() }))
    }

    pub fn network(self: &std::sync::Arc<Self>) -> cwsandbox_executor::Network {
        cwsandbox_executor::Network::Attached(self.clone())
    }

    fn ip(args: &[&str]) -> Result<(), String> {
        let output = std::process::Command::new("ip").args(args).output().map_err(|error| error.to_string())?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr)))
        }
    }

    fn plumb(&self) -> Result<(), String> {
        let name = self.name.as_str();
        MadeNetwork::ip(&["-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0"])?;
        MadeNetwork::ip(&["-n", name, "addr", "add", &format!("{}/32", self.address), "dev", "eth0"])?;
        MadeNetwork::ip(&["-n", name, "link", "set", "eth0", "up"])?;
        MadeNetwork::ip(&["-n", name, "link", "set", "lo", "up"])
    }
}

impl cwsandbox_executor::AttachNetwork for MadeNetwork {
    fn make_namespace(&self) -> Result<std::path::PathBuf, String> {
        self.made.lock().unwrap().push("namespace");
        MadeNetwork::ip(&["netns", "add", &self.name])?;
        self.plumb()?;
        Ok(std::path::Path::new("/run/netns").join(&self.name))
    }

    fn plumb_into(&self, pid: u32) -> Result<(), String> {
        self.made.lock().unwrap().push("plumbed");
        MadeNetwork::ip(&["netns", "attach", &self.name, &pid.to_string()])?;
        self.plumb()
    }
}

impl Drop for MadeNetwork {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}
