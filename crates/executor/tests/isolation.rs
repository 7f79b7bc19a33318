//! What isolates a sandbox: namespaces (hostname, /tmp, working directory, pids,
//! user), the plain fallback's documented differences, and that no process
//! outlives the emulator.

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use cwsandbox_executor::{
    ExecRequest, Executor, ExecutorConfig, ExecutorError, Isolation, LaunchSpec, MainExit, MountedFile, Network,
    SandboxUser, Sidecar, StartAfter, StartCondition, StartupProbe, VolumeMount,
};

fn host_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname").trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_uses_namespaces_on_this_machine() {
    let root = tempfile::tempdir().unwrap();
    let executor = Executor::new(ExecutorConfig::new(root.path())).unwrap();
    // The machines this project runs on support namespaces; if this fails, the
    // executor's probe (or the machine) changed.
    assert_eq!(executor.isolation(), Isolation::Namespaces);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostname_is_the_given_name() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let before = host_hostname();
    let id = unique("host");
    executor.start(&id, spec("sbx-pod-7f3a", &[])).await.unwrap();
    assert_eq!(sh(executor, &id, "hostname").await, "sbx-pod-7f3a");
    assert_eq!(sh(executor, &id, "cat /proc/sys/kernel/hostname; echo $HOSTNAME").await, "sbx-pod-7f3a\nsbx-pod-7f3a");
    // Each sandbox has its own, and the host keeps its name.
    let other = unique("host");
    executor.start(&other, spec("another-pod", &[])).await.unwrap();
    assert_eq!(sh(executor, &other, "hostname").await, "another-pod");
    assert_eq!(sh(executor, &id, "hostname").await, "sbx-pod-7f3a");
    assert_eq!(host_hostname(), before);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tmp_is_private() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let (first, second) = (unique("tmp"), unique("tmp"));
    executor.start(&first, spec("tmp-1", &[])).await.unwrap();
    executor.start(&second, spec("tmp-2", &[])).await.unwrap();
    let name = unique("only-here");
    let path = format!("/tmp/{name}");

    sh(executor, &first, &format!("echo secret > {path}")).await;
    assert_eq!(sh(executor, &first, &format!("cat {path}")).await, "secret");
    let (_, _, code) = run(executor, &second, &["test", "-e", &path]).await;
    assert_eq!(code, 1, "another sandbox sees {path}");
    assert!(!Path::new(&path).exists(), "the host sees {path}");

    // Files written through the API land in the same private /tmp.
    let api_path = format!("/tmp/{}", unique("api"));
    executor.write_file(&second, &api_path, b"via api").await.unwrap();
    assert_eq!(sh(executor, &second, &format!("cat {api_path}")).await, "via api");
    assert_eq!(executor.read_file(&first, &api_path).await, Err(cwsandbox_executor::FileError::NotFound));
    assert!(!Path::new(&api_path).exists());
    // And /tmp behaves like /tmp: sticky and writable by all.
    assert_eq!(sh(executor, &first, "stat -c %a /tmp").await, "1777");
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_working_directory_is_private() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    // A host directory with content, used as both sandboxes' working directory.
    let shared = harness.root.path().join("workspace");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("host-file"), b"host").unwrap();
    let workdir = shared.to_string_lossy().into_owned();
    let (first, second) = (unique("wd"), unique("wd"));
    for id in [&first, &second] {
        executor.start(id, LaunchSpec { working_dir: Some(workdir.clone()), ..spec("wd", &[]) }).await.unwrap();
    }
    assert_eq!(sh(executor, &first, "pwd").await, workdir);
    // The sandbox starts with an empty directory, not the host's content.
    assert_eq!(sh(executor, &first, "ls -A").await, "");
    executor.write_file(&first, "mine.txt", b"first").await.unwrap();
    assert_eq!(sh(executor, &first, "cat mine.txt").await, "first");
    assert_eq!(sh(executor, &second, "ls -A").await, "");
    assert!(!shared.join("mine.txt").exists());
    assert_eq!(std::fs::read(shared.join("host-file")).unwrap(), b"host");
    executor.shutdown().await;
}

/// A sandbox asked to run as a user runs its main command and every exec as that user and
/// group of its user namespace, without capabilities; files written through the executor are
/// that user's; ids its namespace does not map, and plain processes, refuse the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_runs_as_the_user_it_asks_for() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let id = unique("user");
    let launch = LaunchSpec {
        user: Some(SandboxUser { uid: 1000, gid: 2000 }),
        ..spec("user", &["sh", "-c", "echo $(id -u):$(id -g) > /tmp/main-ids; exec sleep 1000"])
    };
    executor.start(&id, launch).await.unwrap();
    // The main command runs on its own: wait for what it writes.
    assert_eq!(
        sh(executor, &id, "until [ -s /tmp/main-ids ]; do sleep 0.01; done; cat /tmp/main-ids").await,
        "1000:2000"
    );
    assert_eq!(sh(executor, &id, "echo $(id -u):$(id -g):$HOME").await, "1000:2000:/");
    // No capabilities: root's directory and other users' files are out of reach.
    assert_eq!(sh(executor, &id, "grep CapEff /proc/self/status | tr -d '\t'").await, "CapEff:0000000000000000");
    assert_eq!(sh(executor, &id, "ls /root >/dev/null 2>&1 && echo readable || echo denied").await, "denied");
    executor.write_file(&id, "/tmp/given.txt", b"mine").await.unwrap();
    assert_eq!(
        sh(executor, &id, "stat -c %u:%g /tmp/given.txt; echo more >> /tmp/given.txt && echo written").await,
        "1000:2000\nwritten"
    );
    executor.stop(&id, std::time::Duration::from_secs(5)).await;

    if unsafe { libc::geteuid() } == 0 {
        let far = LaunchSpec { user: Some(SandboxUser { uid: 70_000, gid: 0 }), ..spec("user", &[]) };
        let error = executor.start(&unique("far"), far).await.unwrap_err().to_string();
        assert!(error.contains("outside the sandbox's user namespace"), "{error}");
    }
    executor.shutdown().await;

    let launch = LaunchSpec { user: Some(SandboxUser { uid: 1000, gid: 1000 }), ..spec("user", &[]) };
    let error = refused_by_plain_processes(launch).await;
    assert!(error.contains("needs a user namespace"), "{error}");
}

/// A sandbox with a network of its own sees only its loopback interface, up: it cannot reach a
/// port the host listens on, while a host-network sandbox can; 127.0.0.1 inside answers only the
/// sandbox's own servers. Exec'd commands are in the same network. Plain mode refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_only_network_reaches_nothing_outside_the_sandbox() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!(
        "python3 -c 'import socket,sys\ntry:\n socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"reached\")\nexcept OSError as e: print(\"refused\", e.errno)'"
    );
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let (isolated, shared) = (unique("net"), unique("net"));
    executor.start(&isolated, LaunchSpec { network: Network::LoopbackOnly, ..spec("net", &[]) }).await.unwrap();
    executor.start(&shared, spec("net", &[])).await.unwrap();
    assert_eq!(sh(executor, &shared, &connect).await, "reached", "the host's network is shared by default");
    assert!(sh(executor, &isolated, &connect).await.starts_with("refused"), "nothing of the host is reachable");
    let interfaces = sh(executor, &isolated, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert_eq!(interfaces, "lo");
    let loopback = "python3 -c 'import socket\ns=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(1)\nc=socket.create_connection(s.getsockname(), 5); print(\"loopback works\")'";
    assert_eq!(sh(executor, &isolated, loopback).await, "loopback works");
    executor.shutdown().await;
    drop(listener);

    let error = refused_by_plain_processes(LaunchSpec { network: Network::LoopbackOnly, ..spec("net", &[]) }).await;
    assert!(error.contains("namespaces"), "{error}");
}

/// A sandbox joins a network namespace made for it beforehand (`Network::Attached`): it has
/// that namespace's interfaces and address, its service port is reached through `connect`,
/// and its root cannot change the namespace's addresses (the host's user namespace owns it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_joins_the_network_made_for_it_and_cannot_change_it() {
    let Some(made) = MadeNetwork::new("a_sandbox_joins_the_network_made_for_it_and_cannot_change_it") else { return };
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let id = unique("attached");
    let server = "import socket\n\
                  s = socket.socket(); s.bind(('0.0.0.0', 8080)); s.listen()\n\
                  print('listening', flush=True)\n\
                  while True:\n    c, _ = s.accept(); c.sendall(b'hello'); c.close()\n";
    let launch = LaunchSpec { network: made.network(), ..spec("attached", &["/usr/bin/python3", "-c", server]) };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "listening").await;
    let interfaces =
        sh(executor, &id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '").await;
    assert_eq!(interfaces.trim(), "eth0 lo peer0");
    assert!(sh(executor, &id, "cat /proc/net/fib_trie").await.contains(&made.address));
    let change = sh(executor, &id, "ip addr add 10.98.0.1/32 dev eth0 2>&1; echo status $?").await;
    assert!(change.contains("Operation not permitted") && !change.ends_with("status 0"), "{change}");
    let reply = reply_on(executor, &id, 8080).await;
    assert_eq!(reply, "hello");
    assert_eq!(*made.made.lock().unwrap(), ["namespace"]);
    executor.shutdown().await;
    let error = refused_by_plain_processes(LaunchSpec { network: made.network(), ..spec("attached", &[]) }).await;
    assert!(error.contains("namespaces"), "{error}");
}

/// The zygote (the process that forks namespaced keepers) killed from outside takes its
/// sandboxes with it, as the emulator's death would, and the next start brings up a new one;
/// shutdown ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_zygote_ends_its_sandboxes_and_is_started_again() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let mut exits = executor.exits();
    let marker = unique("zygote-marker");
    let id = unique("zygote");
    let launch = LaunchSpec { env: env(&[("CWSBX_TEST_MARKER", &marker)]), ..spec("zygote", &["sleep", "1000"]) };
    executor.start(&id, launch).await.unwrap();
    let parent = |pid: u32| -> u32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // The fields after the command name, which is in parentheses.
        stat.rsplit_once(") ").unwrap().1.split(' ').nth(1).unwrap().parse().unwrap()
    };
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let [main] = processes_with_marker(&marker)[..] else { panic!("one main process") };
    let zygote = parent(parent(parent(main)));
    assert_eq!(comm(zygote), "cwsandbox-zygot\n", "main → init → keeper → zygote");
    assert_eq!(parent(zygote), std::process::id(), "the zygote is the executor's child");
    // SAFETY: kill has no preconditions.
    unsafe { libc::kill(zygote as libc::pid_t, libc::SIGKILL) };
    let exit = within("the sandbox's end", exits.recv()).await.unwrap();
    assert_eq!((exit.id.as_str(), exit.exit_code), (id.as_str(), 137));
    assert!(processes_with_marker(&marker).is_empty());
    let next = unique("after-zygote");
    let launch = LaunchSpec { env: env(&[("CWSBX_TEST_MARKER", &marker)]), ..spec("after-zygote", &["sleep", "1000"]) };
    executor.start(&next, launch).await.unwrap();
    assert_eq!(sh(executor, &next, "hostname").await, "after-zygote");
    let [main] = processes_with_marker(&marker)[..] else { panic!("one main process") };
    let second = parent(parent(parent(main)));
    assert_ne!(second, zygote);
    assert_eq!(comm(second), "cwsandbox-zygot\n");
    executor.shutdown().await;
    assert!(!Path::new(&format!("/proc/{second}")).exists(), "the zygote outlived the shutdown");
}

/// Exec'd commands are started by the sandbox's own init: their parent is PID 1 of the
/// sandbox, they inherit none of init's descriptors, a megabyte of environment reaches them (and
/// a main command) whole, and an order too large for the channel to init is refused by name,
/// losing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_d_commands_are_children_of_the_sandbox_s_init() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let id = unique("init-exec");
    executor.start(&id, spec("init-exec", &[])).await.unwrap();
    assert_eq!(sh(executor, &id, "echo $PPID; cat /proc/$PPID/comm").await, "1\ncwsandbox-init");
    // stdin, stdout, stderr and the directory `ls` reads: nothing else.
    assert_eq!(sh(executor, &id, "ls /proc/self/fd | wc -l").await, "4");
    let mut request = argv(&["sh", "-c", "echo ${#BIG0} ${#BIG9}"]);
    for index in 0..10 {
        request.env.insert(format!("BIG{index}"), "x".repeat(100_000));
    }
    let (stdout, stderr, code) = common::run_request(executor, &id, request).await;
    assert_eq!((stdout.as_str(), code), ("100000 100000\n", 0), "{stderr}");
    // The same for a main command's environment, which travels in the sandbox's plan.
    let big = unique("init-exec-big");
    // (Ten variables: one string may not exceed 128 KiB in `execve`.)
    let mut launch = spec("big", &["sh", "-c", "echo ${#BIG0} ${#BIG9}; exec sleep 1000"]);
    for index in 0..10 {
        launch.env.insert(format!("BIG{index}"), "y".repeat(100_000));
    }
    executor.start(&big, launch).await.unwrap();
    assert_eq!(wait_for_log(&executor.logs(&big).unwrap(), "\n").await, "100000 100000\n");
    let mut huge = argv(&["true"]);
    huge.env.insert("HUGE".into(), "x".repeat(5 << 20));
    let error = executor.exec(&id, huge).await.unwrap_err().to_string();
    assert!(error.contains("arguments and environment"), "{error}");
    assert_eq!(sh(executor, &id, "echo still here").await, "still here");
    executor.shutdown().await;
}

/// Mounted files are in place, with their content, mode 0644 and the sandbox's root as owner,
/// before the command starts; a path the host's read-only directories cover is refused, and
/// plain processes, with no root of their own, refuse them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_files_are_in_place_before_the_command_starts() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let id = unique("files");
    let files = vec![
        MountedFile { path: "/etc-not/app/config.toml".into(), content: b"answer = 42\n".to_vec() },
        MountedFile { path: "/root/.netrc".into(), content: vec![0, 1, 2, 255] },
    ];
    let launch = LaunchSpec {
        files,
        ..spec("files", &["sh", "-c", "cat /etc-not/app/config.toml > /tmp/seen; exec sleep 1000"])
    };
    executor.start(&id, launch).await.unwrap();
    // The main command runs on its own: wait for what it writes.
    assert_eq!(sh(executor, &id, "until [ -s /tmp/seen ]; do sleep 0.01; done; cat /tmp/seen").await, "answer = 42");
    assert_eq!(sh(executor, &id, "stat -c '%u:%g %a' /etc-not/app/config.toml /etc-not/app").await, "0:0 644\n0:0 755");
    assert_eq!(sh(executor, &id, "od -An -tu1 /root/.netrc | tr -s ' '").await, " 0 1 2 255");
    executor.stop(&id, std::time::Duration::from_secs(5)).await;

    // Under the host's read-only directories: laid over them, the host's files still in view,
    // read-only as they are.
    let id = unique("files-over-host");
    let files = vec![
        MountedFile { path: "/etc/app/app.conf".into(), content: b"over etc\n".to_vec() },
        MountedFile { path: "/etc/app/second.conf".into(), content: b"second\n".to_vec() },
        MountedFile { path: "/usr/local/etc/tool.conf".into(), content: b"over usr\n".to_vec() },
    ];
    let launch =
        LaunchSpec { files, ..spec("files", &["sh", "-c", "cat /etc/app/app.conf > /tmp/seen; exec sleep 1000"]) };
    executor.start(&id, launch).await.unwrap();
    assert_eq!(sh(executor, &id, "until [ -s /tmp/seen ]; do sleep 0.01; done; cat /tmp/seen").await, "over etc");
    assert_eq!(sh(executor, &id, "cat /etc/app/second.conf /usr/local/etc/tool.conf").await, "second\nover usr");
    assert_eq!(sh(executor, &id, "stat -c '%u:%g %a' /etc/app/app.conf").await, "0:0 644");
    let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    assert_eq!(sh(executor, &id, "cat /etc/passwd").await, host_passwd.trim_end(), "the host's files are still seen");
    assert!(sh(executor, &id, "ls /usr/bin | wc -l").await.parse::<u32>().unwrap() > 10);
    for script in ["echo x > /etc/app/app.conf", "echo x > /etc/new-file", "rm /etc/app/second.conf"] {
        let (_, _, code) = run(executor, &id, &["sh", "-c", script]).await;
        assert_ne!(code, 0, "`{script}` changed the read-only view");
    }
    assert_eq!(executor.read_file(&id, "/etc/app/app.conf").await.unwrap(), b"over etc\n");
    assert!(!Path::new("/etc/app/app.conf").exists() || std::fs::read("/etc/app/app.conf").unwrap() != b"over etc\n");
    executor.stop(&id, std::time::Duration::from_secs(5)).await;

    for path in ["/proc/x", "relative/file", "/a/../b", "/", "/usr/local", "/etc/hostname/inside"] {
        let launch =
            LaunchSpec { files: vec![MountedFile { path: path.into(), content: b"x".to_vec() }], ..spec("files", &[]) };
        let error = executor.start(&unique("bad-file"), launch).await.unwrap_err().to_string();
        assert!(error.contains("mounted file"), "{path}: {error}");
    }
    executor.shutdown().await;

    let launch =
        LaunchSpec { files: vec![MountedFile { path: "/opt/x".into(), content: b"x".to_vec() }], ..spec("files", &[]) };
    let error = refused_by_plain_processes(launch).await;
    assert!(error.contains("namespaces"), "{error}");
}

/// Sandbox roots are made ahead of need and moved into place: a sandbox started from one
/// starts from scratch all the same, and none is left behind by a shutdown or by an emulator
/// that died (its pid is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_made_ahead_start_from_scratch_and_leave_nothing_behind() {
    let root = tempfile::Builder::new().prefix("cwsbx-exec-test").tempdir().unwrap();
    // pid_max is at most 2^22: no process has this pid.
    let orphan = root.path().join("spare@999999999.0");
    std::fs::create_dir_all(orphan.join("rootfs/tmp")).unwrap();
    let mut config = ExecutorConfig::new(root.path());
    config.isolation = Isolation::Namespaces;
    let executor = Executor::new(config).unwrap();
    assert!(!orphan.exists(), "a dead emulator's spare root is removed");
    let id = unique("ahead");
    for round in 0..4 {
        executor.start(&id, LaunchSpec { working_dir: Some("/work/here".into()), ..spec("ahead", &[]) }).await.unwrap();
        // Each start sees an empty /tmp and its own working directory, whatever root it got.
        assert_eq!(sh(&executor, &id, "ls -A /tmp; pwd").await, "/work/here", "round {round}");
        assert_eq!(sh(&executor, &id, "touch /tmp/left-behind /work/here/too; echo ok").await, "ok");
        executor.stop(&id, std::time::Duration::from_secs(5)).await;
    }
    executor.shutdown().await;
    let left: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.iter().all(|name| !name.starts_with("spare@")), "left after shutdown: {left:?}");
}

/// Sandboxes started ahead of need: a start that takes one gets its own hostname, working
/// directory, files and command as a cold start does; one whose init died meanwhile is passed
/// over; none is left behind by a shutdown or by an emulator that died (its pid is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_started_ahead_are_used_passed_over_when_dead_and_leave_nothing_behind() {
    let root = tempfile::Builder::new().prefix("cwsbx-exec-test").tempdir().unwrap();
    let orphan = root.path().join("warm@999999999.0");
    std::fs::create_dir_all(orphan.join("rootfs/tmp")).unwrap();
    let mut config = ExecutorConfig::new(root.path());
    config.isolation = Isolation::Namespaces;
    let executor = Executor::new(config).unwrap();
    assert!(!orphan.exists(), "a dead emulator's warm sandbox directory is removed");
    executor.ready_ahead().await;
    let warm_inits = || warm_inits_under(root.path());
    assert_eq!(warm_inits().len(), 2, "two sandboxes wait for a start");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        for pid in warm_inits() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            assert_eq!(stat.split(' ').nth(40), Some("5"), "a waiting init is at idle priority (SCHED_IDLE): {stat}");
        }
    }
    let id = unique("warm");
    for round in 0..3 {
        let launch = LaunchSpec {
            working_dir: Some("/work/here".into()),
            files: vec![MountedFile {
                path: "/etc-of-mine/conf".into(),
                content: format!("round {round}").into_bytes(),
            }],
            ..spec(
                &format!("warm-{round}"),
                &["sh", "-c", "echo \"$(hostname) $(pwd) $(cat /etc-of-mine/conf)\"; exec sleep 1000"],
            )
        };
        executor.start(&id, launch).await.unwrap();
        let logs = executor.logs(&id).unwrap();
        wait_for_log(&logs, "\n").await;
        assert_eq!(logs.read_from(0).unwrap().bytes(), format!("warm-{round} /work/here round {round}\n").as_bytes());
        assert_eq!(sh(&executor, &id, "ls -A /tmp; cat /proc/1/comm /proc/2/comm").await, "cwsandbox-init\nsleep");
        // Made at idle priority where the emulator may raise it again, run at the normal one
        // (policy 0, SCHED_OTHER, in the 41st field).
        assert_eq!(sh(&executor, &id, "cut -d' ' -f41 /proc/1/stat /proc/2/stat").await, "0\n0", "round {round}");
        sh(&executor, &id, "touch /tmp/left-behind").await;
        executor.stop(&id, std::time::Duration::from_secs(5)).await;
        executor.ready_ahead().await;
    }
    // Both waiting inits die (as if killed from outside): the next start passes over them.
    let dead: Vec<(u32, OwnedFd)> = warm_inits()
        .into_iter()
        .filter_map(|pid| {
            // SAFETY: pidfd_open returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
            // SAFETY: a non-negative result is a descriptor we own; kill has no preconditions.
            (fd >= 0).then(|| unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
                (pid, OwnedFd::from_raw_fd(fd as i32))
            })
        })
        .collect();
    assert_eq!(dead.len(), 2);
    assert!(wait_all_gone(dead).is_empty());
    executor.start(&id, spec("after-the-dead", &[])).await.unwrap();
    assert_eq!(sh(&executor, &id, "hostname; ls -A /tmp").await, "after-the-dead");
    executor.ready_ahead().await;
    executor.shutdown().await;
    assert!(warm_inits().is_empty(), "warm sandboxes outlived the shutdown");
    let left: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("warm@"))
        .collect();
    assert!(left.is_empty(), "left after shutdown: {left:?}");
}

/// The inits of warm sandboxes whose roots are under `root` (their mount table names it).
fn warm_inits_under(root: &Path) -> Vec<u32> {
    let root = root.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // An init without children has not started a main command: it waits.
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
            comm == "cwsandbox-init\n"
                && children.trim().is_empty()
                && std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).is_ok_and(|mounts| mounts.contains(&root))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sandbox_has_its_own_pid_namespace() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let id = unique("pid");
    executor.start(&id, spec("pid-host", &["sleep", "1000"])).await.unwrap();
    // PID 1 is the sandbox's init, PID 2 its main command.
    assert_eq!(sh(executor, &id, "cat /proc/1/comm").await, "cwsandbox-init");
    assert_eq!(sh(executor, &id, "cat /proc/2/comm").await, "sleep");
    let own_pid: u32 = sh(executor, &id, "echo $$").await.parse().unwrap();
    assert!(own_pid < 20, "pid {own_pid} inside the sandbox");
    // Only the sandbox's own processes are visible.
    let listing = sh(executor, &id, "ls /proc").await;
    let pids: Vec<u32> = listing.lines().filter_map(|line| line.parse().ok()).collect();
    assert!(!pids.is_empty() && pids.len() < 10, "visible pids: {pids:?}");
    assert!(!pids.contains(&std::process::id()), "the emulator is visible");
    // read_file sees the sandbox's /proc too.
    assert_eq!(executor.read_file(&id, "/proc/1/comm").await.unwrap(), b"cwsandbox-init\n");
    // Another sandbox counts from 1 again.
    let other = unique("pid");
    executor.start(&other, spec("pid-host-2", &[])).await.unwrap();
    assert_eq!(sh(executor, &other, "cat /proc/2/comm").await, "cwsandbox-idle");
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_mode_differences() {
    let harness = harness(Isolation::Plain);
    let executor = &harness.executor;
    let id = unique("plain");
    executor.start(&id, spec("plain-pod", &[])).await.unwrap();
    // No UTS namespace: only HOSTNAME carries the sandbox's name.
    assert_eq!(sh(executor, &id, "hostname").await, host_hostname());
    assert_eq!(sh(executor, &id, "echo $HOSTNAME").await, "plain-pod");
    // /tmp is the host's.
    let path = format!("/tmp/{}", unique("shared"));
    executor.write_file(&id, &path, b"shared").await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"shared");
    std::fs::remove_file(&path).unwrap();
    // The working directory is still the sandbox's own.
    let cwd = sh(executor, &id, "pwd").await;
    assert!(cwd.starts_with(&harness.root.path().to_string_lossy().into_owned()), "{cwd}");
    executor.shutdown().await;
}

/// Pids of the marked processes, and a pidfd on each to wait for its end.
fn pidfds(marker: &str) -> Vec<(u32, OwnedFd)> {
    processes_with_marker(marker)
        .into_iter()
        .filter_map(|pid| {
            // SAFETY: pidfd_open returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
            // SAFETY: a non-negative result is a descriptor we own.
            (fd >= 0).then(|| (pid, unsafe { OwnedFd::from_raw_fd(fd as i32) }))
        })
        .collect()
}

/// Waits (on the pidfds, not by polling /proc) until every process has ended.
fn wait_all_gone(processes: Vec<(u32, OwnedFd)>) -> Vec<u32> {
    use std::os::fd::AsRawFd;
    let deadline = std::time::Instant::now() + SAFETY;
    let mut left = Vec::new();
    for (pid, fd) in processes {
        let remaining = deadline.saturating_duration_since(std::time::Instant::now());
        let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, remaining.as_millis() as i32) };
        if ready != 1 {
            left.push(pid);
        }
    }
    left
}

/// Runs this test binary's `helper_process` as a separate emulator process.
fn helper(role: &str, isolation: &str, root: &Path, marker: &str) -> Command {
    helper_at(&std::env::current_exe().unwrap(), role, isolation, root, marker)
}

fn helper_at(program: &Path, role: &str, isolation: &str, root: &Path, marker: &str) -> Command {
    let mut command = Command::new(program);
    command
        .args(["--exact", "helper_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env("CWSBX_HELPER_ROLE", role)
        .env("CWSBX_HELPER_ISOLATION", isolation)
        .env("CWSBX_HELPER_ROOT", root)
        .env("CWSBX_HELPER_MARKER", marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

fn read_until(stdout: &mut impl BufRead, prefix: &str) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line).ok()? == 0 {
            return None;
        }
        // libtest prints "test helper_process ... " before the helper's own output.
        if line.contains(prefix) {
            return Some(line.trim_end().to_owned());
        }
    }
}

fn sandboxes_die_with_the_emulator(isolation: &str) {
    let root = tempfile::tempdir().unwrap();
    let marker = unique("orphan");
    let mut child = helper("hold", isolation, root.path(), &marker).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let ready = read_until(&mut stdout, "HELPER-READY");
    assert!(ready.is_some(), "the helper emulator did not get ready");
    let processes = pidfds(&marker);
    // Per sandbox: main shell + sleep, an exec'd sleep and an orphaned sleep.
    assert!(
        processes.len() >= 2 * 4,
        "only {} marked processes: {:?}",
        processes.len(),
        processes_with_marker(&marker)
    );
    // The emulator dies without any chance to clean up.
    child.kill().unwrap();
    child.wait().unwrap();
    let left = wait_all_gone(processes);
    assert!(left.is_empty(), "processes outlived the emulator: {left:?}");
}

#[test]
fn namespaced_sandboxes_die_with_the_emulator() {
    sandboxes_die_with_the_emulator("namespaces");
}

#[test]
fn plain_sandboxes_die_with_the_emulator() {
    sandboxes_die_with_the_emulator("plain");
}

/// As a non-root user the executor uses an unprivileged user namespace. When the
/// tests run as root, the check runs in a helper process as `nobody`.
#[test]
fn unprivileged_users_get_a_user_namespace() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let root = tempfile::tempdir().unwrap();
    let mut command = helper("unprivileged", "auto", root.path(), "unused");
    if uid == 0 {
        const NOBODY: u32 = 65534;
        std::os::unix::fs::chown(root.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        // The test binary may sit in a checkout `nobody` cannot enter (CI clones into a private
        // directory), so `nobody` runs a copy placed in its own directory.
        let program = root.path().join("isolation-helper");
        std::fs::copy(std::env::current_exe().unwrap(), &program).unwrap();
        std::os::unix::fs::chown(&program, Some(NOBODY), Some(NOBODY)).unwrap();
        command = helper_at(&program, "unprivileged", "auto", root.path(), "unused");
        command.uid(NOBODY).gid(NOBODY).env("HOME", "/").current_dir(root.path());
    }
    // Another test's fork can hold the copy's write descriptor for a moment (until its child
    // execs), and exec refuses a file open for writing: that is "text file busy", not a failure.
    let mut attempts = 0;
    let output = loop {
        match command.output() {
            Err(error) if error.kind() == std::io::ErrorKind::ExecutableFileBusy && attempts < 50 => {
                attempts += 1;
                // A back-off for the kernel's race, not a wait for our own code.
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => break result.unwrap(),
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && stdout.contains("HELPER-OK"), "helper failed: {stdout}\n{stderr}");
}

/// Not a test: the other end of the tests above, run in its own process.
#[test]
#[ignore = "a helper process for other tests"]
fn helper_process() {
    let Ok(role) = std::env::var("CWSBX_HELPER_ROLE") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let root = std::env::var("CWSBX_HELPER_ROOT").unwrap();
        let mut config = ExecutorConfig::new(&root);
        config.isolation = match std::env::var("CWSBX_HELPER_ISOLATION").as_deref() {
            Ok("plain") => Isolation::Plain,
            Ok("namespaces") => Isolation::Namespaces,
            _ => Isolation::Auto,
        };
        let executor = Executor::new(config).unwrap();
        match role.as_str() {
            "hold" => hold_sandboxes(&executor).await,
            "unprivileged" => check_unprivileged(&executor).await,
            other => panic!("unknown helper role {other}"),
        }
    });
}

async fn hold_sandboxes(executor: &Executor) {
    let marker = std::env::var("CWSBX_HELPER_MARKER").unwrap();
    let mut sessions = Vec::new();
    for index in 0..2 {
        let id = format!("held-{index}");
        let launch = LaunchSpec {
            env: env(&[("CWSBX_TEST_MARKER", &marker)]),
            ..spec("held", &["sh", "-c", "sleep 1000 & echo ready; wait"])
        };
        executor.start(&id, launch).await.unwrap();
        wait_for_log(&executor.logs(&id).unwrap(), "ready\n").await;
        sessions.push(executor.exec(&id, argv(&["sleep", "1000"])).await.unwrap());
        sh(executor, &id, "sleep 1000 >/dev/null 2>&1 &").await;
    }
    println!("HELPER-READY");
    // Wait to be killed.
    std::future::pending::<()>().await;
}

async fn check_unprivileged(executor: &Executor) {
    assert_eq!(executor.isolation(), Isolation::Namespaces);
    assert!(executor.uses_user_namespace());
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let id = "unprivileged";
    executor.start(id, spec("rootless-pod", &[])).await.unwrap();
    assert_eq!(sh(executor, id, "hostname").await, "rootless-pod");
    // The user's uid maps to itself: commands have the user's rights, no more.
    assert_eq!(sh(executor, id, "id -u").await, uid.to_string());
    assert_eq!(sh(executor, id, "cat /proc/1/comm").await, "cwsandbox-init");
    let path = format!("/tmp/{}", unique("rootless"));
    executor.write_file(id, &path, b"rootless").await.unwrap();
    assert_eq!(sh(executor, id, &format!("cat {path}; echo; stat -c %u {path}")).await, format!("rootless\n{uid}"));
    assert!(!Path::new(&path).exists(), "the host's /tmp got the file");
    let (_, _, code) = run(executor, id, &["sh", "-c", "echo x > /etc/cwsbx-should-fail"]).await;
    assert_ne!(code, 0, "a rootless sandbox could write to /etc");
    // A file under a host directory is laid over it by the keeper's own overlay (where nothing
    // is mounted under that directory: the probe checks what this machine has).
    let over = "unprivileged-files";
    let files =
        vec![MountedFile { path: "/usr/share/cwsbx-test/app.conf".into(), content: b"rootless layer".to_vec() }];
    let layered = executor.start(over, LaunchSpec { files, ..spec("rootless-pod", &[]) }).await;
    let usr_has_mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| point.starts_with("/usr/"));
    if usr_has_mounts {
        assert!(layered.unwrap_err().to_string().contains("has mounts under it"));
    } else {
        layered.unwrap();
        assert_eq!(sh(executor, over, "cat /usr/share/cwsbx-test/app.conf").await, "rootless layer");
        let (_, _, code) = run(executor, over, &["sh", "-c", "echo x > /usr/share/cwsbx-test/app.conf"]).await;
        assert_ne!(code, 0, "the layer is read-only");
    }
    // Asked for other ids, the namespace maps them onto the user: the same rights, other names.
    let named = "unprivileged-as-user";
    let launch = LaunchSpec { user: Some(SandboxUser { uid: 1234, gid: 5678 }), ..spec("rootless-pod", &[]) };
    executor.start(named, launch).await.unwrap();
    assert_eq!(sh(executor, named, "echo $(id -u):$(id -g)").await, "1234:5678");
    executor.shutdown().await;
    println!("HELPER-OK");
}

/// Scans every process a sandbox can see (its environ, cmdline and memory) for its arguments,
/// skipping the scanner itself. Prints one `pid:where` line per hit, then `scanned`.
const SCAN_PROCESSES: &str = include_str!("scan_processes.py");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sandbox_process_holds_the_emulators_memory_or_environment() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    // A secret in the emulator's memory before the sandbox starts, as its tokens are.
    let secret = std::hint::black_box(format!("cwsbx-secret-{}", unique("token")));
    // Another sandbox's environment, which the keepers' common ancestor (the zygote) must
    // never have seen.
    let other_secret = std::hint::black_box(format!("cwsbx-other-{}", unique("env")));
    let other = unique("other");
    let launch = LaunchSpec { env: env(&[("OTHER_SECRET", &other_secret)]), ..spec("other", &["sleep", "1000"]) };
    executor.start(&other, launch).await.unwrap();
    let id = unique("secrets");
    executor.start(&id, spec("secrets", &["sh", "-c", "sleep 1000 & wait"])).await.unwrap();
    // Init's command line and environment are its own, not the emulator's.
    let cmdline = sh(executor, &id, "tr '\\0' ' ' < /proc/1/cmdline").await;
    assert_eq!(cmdline.trim_end(), "cwsandbox-init --cwsandbox-init-v1");
    // Empty, and not even readable from inside (init is not dumpable).
    let (stdout, _, _) = run(executor, &id, &["cat", "/proc/1/environ"]).await;
    assert_eq!(stdout, "");
    match executor.read_file(&id, "/proc/1/environ").await {
        Ok(environ) => assert_eq!(environ, b""),
        Err(error) => assert_eq!(error, cwsandbox_executor::FileError::PermissionDenied),
    }
    // Nothing any process of the sandbox can read holds the secret, or the emulator's
    // environment (cargo's CARGO_* variables stand for its tokens here).
    for needle in [secret.as_str(), "CARGO_PKG_NAME=", other_secret.as_str()] {
        let (stdout, stderr, code) = run(executor, &id, &["python3", "-c", SCAN_PROCESSES, needle]).await;
        assert_eq!((stdout.as_str(), code), ("scanned\n", 0), "{needle} found: {stderr}");
    }
    // Exec'd commands too, while they run.
    let mut background = executor.exec(&id, argv(&["sleep", "1000"])).await.unwrap();
    let (stdout, _, _) = run(executor, &id, &["python3", "-c", SCAN_PROCESSES, &secret]).await;
    assert_eq!(stdout, "scanned\n");
    background.exit.kill();
    executor.shutdown().await;
    drop(secret);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_and_other_sandboxes_are_out_of_view_wherever_the_sandbox_root_is() {
    // Outside /tmp, where a private /tmp alone hid nothing.
    let base = tempfile::Builder::new().prefix("cwsbx-isolation").tempdir_in("/var/tmp").unwrap();
    let root = base.path().join("sandboxes");
    let harness = harness_with(Isolation::Namespaces, |config| config.root_dir = root.clone());
    let executor = &harness.executor;
    let (first, second) = (unique("view"), unique("view"));
    executor.start(&first, spec("view-1", &[])).await.unwrap();
    executor.start(&second, spec("view-2", &[])).await.unwrap();
    sh(executor, &first, "echo private > /tmp/mine; mkdir -p /work && echo private > /work/mine").await;
    let host_copy = root.join(&first).join("rootfs/tmp/mine");
    assert!(host_copy.exists(), "the layout changed: {}", host_copy.display());
    // The second sandbox cannot reach the first's files by their host paths.
    let host_file = std::fs::canonicalize(&host_copy).unwrap();
    let host_path = host_file.to_string_lossy().into_owned();
    let (_, _, code) = run(executor, &second, &["cat", &host_path]).await;
    assert_ne!(code, 0, "sandbox 2 read {host_path}");
    assert_eq!(executor.read_file(&second, &host_path).await, Err(cwsandbox_executor::FileError::NotFound));
    let (_, _, code) = run(executor, &second, &["ls", &root.to_string_lossy()]).await;
    assert_ne!(code, 0, "sandbox 2 lists the sandbox root");
    // Nor the host's own /tmp, home or checkout: only the configured host paths are there.
    let marker = std::env::temp_dir().join(unique("host-tmp"));
    std::fs::write(&marker, b"host").unwrap();
    let (_, _, code) = run(executor, &second, &["cat", &marker.to_string_lossy()]).await;
    assert_ne!(code, 0, "the sandbox reads the host's {}", marker.display());
    std::fs::remove_file(&marker).unwrap();
    let manifest = env!("CARGO_MANIFEST_DIR");
    let (_, _, code) = run(executor, &second, &["ls", manifest]).await;
    assert_ne!(code, 0, "the sandbox sees the checkout {manifest}");
    // The host's system directories are there, read-only.
    let (_, stderr, code) = run(executor, &second, &["sh", "-c", "touch /usr/cwsbx-should-fail"]).await;
    assert_ne!(code, 0, "wrote into the host's /usr");
    assert!(stderr.contains("Read-only") || stderr.contains("Permission denied"), "{stderr}");
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_working_directory_is_made_inside_the_sandbox_only() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let wanted = format!("/var/tmp/{}", unique("wd-test"));
    let id = unique("wd-abs");
    executor.start(&id, LaunchSpec { working_dir: Some(wanted.clone()), ..spec("wd-abs", &[]) }).await.unwrap();
    assert_eq!(sh(executor, &id, "pwd").await, wanted);
    executor.write_file(&id, "here.txt", b"x").await.unwrap();
    assert_eq!(sh(executor, &id, "cat here.txt").await, "x");
    assert!(!Path::new(&wanted).exists(), "{wanted} was created on the host");
    // Under a read-only host directory a missing one cannot be made: refused by name.
    let error = executor
        .start(&unique("wd-ro"), LaunchSpec { working_dir: Some("/usr/cwsbx-missing".into()), ..spec("wd-ro", &[]) })
        .await
        .unwrap_err();
    assert!(error.to_string().contains("/usr/cwsbx-missing"), "{error}");
    executor.shutdown().await;
    assert!(!Path::new(&wanted).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_cannot_undo_its_isolation() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let id = unique("caps");
    executor.start(&id, spec("caps", &[])).await.unwrap();
    // No CAP_SYS_ADMIN (bit 21), whoever runs the emulator: mounts stay as they are.
    let effective =
        u64::from_str_radix(&sh(executor, &id, "awk '/^CapEff/ {print $2}' /proc/self/status").await, 16).unwrap();
    assert_eq!(effective & (1 << 21), 0, "CapEff {effective:x}");
    let bounding =
        u64::from_str_radix(&sh(executor, &id, "awk '/^CapBnd/ {print $2}' /proc/self/status").await, 16).unwrap();
    assert_eq!(bounding & (1 << 21 | 1 << 2 | 1 << 19), 0, "CapBnd {bounding:x}");
    // Nor has the sandbox's init, whether it was started ahead of need or with the sandbox.
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        let script = format!("awk '/^{set}/ {{print $2}}' /proc/1/status");
        let init = u64::from_str_radix(&sh(executor, &id, &script).await, 16).unwrap();
        assert_eq!(init & (1 << 21 | 1 << 2 | 1 << 19), 0, "init's {set} {init:x}");
    }
    sh(executor, &id, "echo mine > /tmp/mine").await;
    for attempt in ["umount -l /tmp", "umount /proc", "umount -l /", "mount -t tmpfs none /mnt"] {
        let (_, _, code) = run(executor, &id, &["sh", "-c", attempt]).await;
        assert_ne!(code, 0, "`{attempt}` succeeded");
    }
    assert_eq!(sh(executor, &id, "cat /tmp/mine").await, "mine");
    let listing = sh(executor, &id, "ls /proc").await;
    let pids: Vec<u32> = listing.lines().filter_map(|line| line.parse().ok()).collect();
    assert!(pids.len() < 10, "host processes visible: {pids:?}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // A root emulator's sandboxes are root in a user namespace: an unused host id.
        assert_eq!(sh(executor, &id, "id -u").await, "0");
        let host_uid = sh(executor, &id, "cat /proc/self/uid_map").await;
        assert!(host_uid.split_whitespace().nth(1) != Some("0"), "uid_map {host_uid}");
        let (_, _, code) = run(executor, &id, &["cat", "/etc/shadow"]).await;
        assert_ne!(code, 0, "the sandbox's root reads the host's /etc/shadow");
        // Files it makes belong to that id on the host, as do files written for it.
        executor.write_file(&id, "/tmp/api", b"x").await.unwrap();
        assert_eq!(sh(executor, &id, "stat -c %u /tmp/mine /tmp/api").await, "0\n0");
        use std::os::unix::fs::MetadataExt;
        let on_host = std::fs::metadata(harness.root.path().join(&id).join("rootfs/tmp/mine")).unwrap();
        assert_eq!(on_host.uid(), cwsandbox_executor::DEFAULT_SANDBOX_ID_BASE);
    }
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_exec_ends_its_whole_process_tree() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let id = unique("tree");
    executor.start(&id, spec("tree", &[])).await.unwrap();
    let marker = unique("tree-marker");
    for script in ["sleep 1000; true", "trap '' TERM; sleep 1000 & sleep 1000; true"] {
        let session = start_marked_exec(executor, &id, script, &marker).await;
        within("its processes", async {
            while processes_with_marker(&marker).len() < 2 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        // The caller goes away: the session is dropped without waiting for an exit.
        drop(session);
        within(&format!("the end of every process of `{script}`"), async {
            while !processes_with_marker(&marker).is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
    }
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_host_paths_are_in_view_read_only() {
    let extra = tempfile::Builder::new().prefix("cwsbx-host-path").tempdir_in("/var/tmp").unwrap();
    std::fs::write(extra.path().join("tool.sh"), b"echo from the host").unwrap();
    let shared = extra.path().to_path_buf();
    let harness = harness_with(Isolation::Namespaces, |config| config.host_paths.push(shared.clone()));
    let executor = &harness.executor;
    let id = unique("host-path");
    executor.start(&id, spec("host-path", &[])).await.unwrap();
    let inside = shared.to_string_lossy().into_owned();
    assert_eq!(sh(executor, &id, &format!("sh {inside}/tool.sh")).await, "from the host");
    let (_, _, code) = run(executor, &id, &["sh", "-c", &format!("echo x > {inside}/written")]).await;
    assert_ne!(code, 0, "a configured host path is writable from the sandbox");
    assert!(!shared.join("written").exists());
    executor.shutdown().await;
}

/// A file laid over a host directory with a mount under it (as `/etc/resolv.conf` often is in
/// a container): the mount is still seen on top of the layer. Mounting needs root (CI has it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_laid_over_a_host_directory_keeps_what_is_mounted_under_it() {
    if current_uid() != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs the tests as root");
        return;
    }
    let extra = tempfile::Builder::new().prefix("cwsbx-host-path").tempdir_in("/var/tmp").unwrap();
    std::fs::create_dir(extra.path().join("mounted")).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(extra.path().join("mounted"))
        .status()
        .unwrap();
    assert!(mounted.success());
    std::fs::write(extra.path().join("mounted/inner"), b"on the submount").unwrap();
    let shared = extra.path().to_path_buf();
    let harness = harness_with(Isolation::Namespaces, |config| config.host_paths.push(shared.clone()));
    let executor = &harness.executor;
    let id = unique("layered");
    let inside = shared.to_string_lossy().into_owned();
    let files = vec![MountedFile { path: format!("{inside}/app/app.conf"), content: b"laid over".to_vec() }];
    executor.start(&id, LaunchSpec { files, ..spec("layered", &[]) }).await.unwrap();
    assert_eq!(
        sh(executor, &id, &format!("cat {inside}/app/app.conf; echo; cat {inside}/mounted/inner")).await,
        "laid over\non the submount"
    );
    executor.shutdown().await;
    cwsandbox_executor::unmount_all_under(extra.path());
}

fn words(line: &str) -> Vec<String> {
    line.split(' ').map(str::to_owned).collect()
}

/// Reads a log to its end (it closes once its command is gone) and returns it.
async fn read_to_end(logs: &cwsandbox_executor::LogReader) -> String {
    let mut text = String::new();
    let mut follower = logs.follow_from(logs.start_offset()).expect("follow");
    within("a container's log to end", async {
        while let Some(chunk) = follower.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.expect("log chunk").data));
        }
    })
    .await;
    text
}

/// A Pod's other containers run next to the main command, in the sandbox's namespaces, each
/// with its own command, environment, working directory and log; exec names them; a sidecar
/// that ends leaves its exit code and its container (exec still reaches it); a stop ends them
/// all; unknown names, duplicate names and plain processes are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_run_next_to_the_main_command_with_their_own_environment_and_log() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let mut exits = executor.exits();
    let id = unique("pod");
    let sidecars = vec![
        Sidecar {
            name: "helper".into(),
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo helper says $ROLE in $(pwd); echo $$ > /tmp/helper.pid; exec sleep 1000".into(),
            ],
            env: env(&[("ROLE", "helper")]),
            working_dir: Some("/srv/helper".into()),
            ..Sidecar::default()
        },
        Sidecar { name: "idle".into(), ..Sidecar::default() },
        Sidecar { name: "quits".into(), command: words("sh -c echo_bye"), ..Sidecar::default() },
    ];
    // `sh -c echo_bye` is not found: a command a container cannot run exits 127, its reason in
    // the container's own log.
    let launch = LaunchSpec {
        name: "main".into(),
        env: env(&[("ROLE", "main")]),
        sidecars,
        ..spec("pod", &["sh", "-c", "echo main says $ROLE; exec sleep 1000"])
    };
    executor.start(&id, launch).await.unwrap();

    let helper_logs = executor.container_logs(&id, Some("helper")).unwrap();
    wait_for_log(&helper_logs, "helper says helper in /srv/helper").await;
    let main_logs = executor.logs(&id).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&executor.container_logs(&id, Some("main")).unwrap().read_from(0).unwrap().bytes()),
        String::from_utf8_lossy(&main_logs.read_from(0).unwrap().bytes()),
        "the main container's name reads the main log"
    );
    assert!(wait_for_log(&main_logs, "main says main").await.lines().all(|line| !line.contains("helper")));

    let in_container = |container: &str, script: &str| ExecRequest {
        container: Some(container.to_owned()),
        ..argv(&["sh", "-c", script])
    };
    let (out, _, code) = run_request(executor, &id, in_container("helper", "echo $ROLE:$(pwd)")).await;
    assert_eq!((out.trim(), code), ("helper:/srv/helper", 0));
    let (out, _, _) = run_request(executor, &id, in_container("main", "echo $ROLE")).await;
    assert_eq!(out.trim(), "main");
    let (out, _, _) = run_request(executor, &id, in_container("idle", "echo ${ROLE:-none} $HOSTNAME")).await;
    assert_eq!(out.trim(), "none pod", "a container's environment is its own, over the same defaults");

    // A root and processes of its own: the helper's /tmp is not main's, and its PID 1 is its own
    // init, its command PID 2, as in the main container; the Pod's hostname is shared.
    let (out, _, code) = run_request(
        executor,
        &id,
        in_container("helper", "until [ -s /tmp/helper.pid ]; do sleep 0.01; done; cat /tmp/helper.pid; hostname"),
    )
    .await;
    assert_eq!((out.trim(), code), ("2\npod", 0));
    let (_, _, code) = run(executor, &id, &["test", "-e", "/tmp/helper.pid"]).await;
    assert_eq!(code, 1, "the helper's file is in main's root");
    let (out, _, _) = run_request(executor, &id, in_container("helper", "ls /proc | grep -c '^[0-9]'")).await;
    assert!(out.trim().parse::<u32>().unwrap() < 6, "the helper sees main's processes: {out}");

    let quits = read_to_end(&executor.container_logs(&id, Some("quits")).unwrap()).await;
    assert!(quits.contains("echo_bye"), "the reason is in the container's log: {quits:?}");
    assert_eq!(executor.sidecar_exit_code(&id, "quits"), Some(127));
    // Reported as that container's end, not the sandbox's.
    let reported = within("the sidecar's end", exits.recv()).await.unwrap();
    assert_eq!(
        reported,
        MainExit { id: id.clone(), container: Some("quits".into()), exit_code: 127, oom_killed: false }
    );
    assert_eq!(executor.sidecar_exit_code(&id, "helper"), None, "still running");
    // An ended container is gone, as in Kubernetes.
    assert!(matches!(
        executor.exec(&id, in_container("quits", "true")).await,
        Err(ExecutorError::ContainerEnded { container, .. }) if container == "quits"
    ));
    assert!(executor.is_running(&id), "a sidecar's end is not the sandbox's");

    assert!(matches!(
        executor.exec(&id, in_container("ghost", "true")).await,
        Err(ExecutorError::UnknownContainer { container, .. }) if container == "ghost"
    ));
    assert!(matches!(executor.container_logs(&id, Some("ghost")), Err(ExecutorError::UnknownContainer { .. })));

    executor.stop(&id, std::time::Duration::from_secs(5)).await;
    // Its log ends: the stop reached the sidecar's processes too.
    read_to_end(&helper_logs).await;

    let twice = LaunchSpec {
        name: "main".into(),
        sidecars: vec![Sidecar { name: "main".into(), ..Sidecar::default() }],
        ..spec("pod", &[])
    };
    let error = executor.start(&unique("twice"), twice).await.unwrap_err().to_string();
    assert!(error.contains("two containers are named \"main\""), "{error}");
    executor.shutdown().await;

    let launch =
        LaunchSpec { sidecars: vec![Sidecar { name: "helper".into(), ..Sidecar::default() }], ..spec("pod", &[]) };
    let error = refused_by_plain_processes(launch).await;
    assert!(error.contains("need the namespaces isolation"), "{error}");
}

/// A scratch volume is a directory of the sandbox's, empty when it starts, bound at every path
/// that mounts it (read-only, or a sub-path, where asked) and removed with the sandbox; a mount
/// point the root cannot hold, and plain processes, refuse the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scratch_volumes_are_one_directory_at_each_of_their_mounts_and_go_with_the_sandbox() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let id = unique("vol");
    let mount = |path: &str| VolumeMount { volume: "work".into(), path: path.into(), ..VolumeMount::default() };
    let launch = LaunchSpec {
        volume_mounts: vec![
            mount("/data"),
            VolumeMount { read_only: true, ..mount("/seen/ro") },
            VolumeMount { sub_path: "inner/dir".into(), ..mount("/part") },
        ],
        ..spec("vol", &[])
    };
    executor.start(&id, launch).await.unwrap();
    assert_eq!(
        sh(executor, &id, "ls -A /data | wc -l").await,
        "1",
        "only the sub-path's directory, made for its mount"
    );
    assert_eq!(sh(executor, &id, "echo hi > /data/file; cat /seen/ro/file").await, "hi");
    assert_eq!(
        sh(executor, &id, "echo x > /seen/ro/other 2>/dev/null && echo written || echo refused").await,
        "refused"
    );
    assert_eq!(sh(executor, &id, "echo deep > /part/f; cat /data/inner/dir/f").await, "deep");
    let on_host = executor.config().root_dir.join(&id).join("volumes/work/file");
    assert_eq!(std::fs::read_to_string(&on_host).unwrap(), "hi\n", "the volume lives outside the sandbox's root");
    executor.remove(&id).await;
    assert!(!on_host.exists(), "a scratch volume goes with its sandbox");

    let under_host = LaunchSpec { volume_mounts: vec![mount("/usr/cwsbx-volume")], ..spec("vol", &[]) };
    let error = executor.start(&unique("vol-usr"), under_host).await.unwrap_err().to_string();
    assert!(error.contains("cannot be mounted at /usr/cwsbx-volume"), "{error}");
    executor.shutdown().await;

    let launch = LaunchSpec { volume_mounts: vec![mount("/data")], ..spec("vol", &[]) };
    let error = refused_by_plain_processes(launch).await;
    assert!(error.contains("volumes need the namespaces isolation"), "{error}");
}

/// A memory-backed scratch volume is a tmpfs of its size, mounted before the sandbox starts:
/// every container that mounts it sees the same files, a write past its size fails with ENOSPC
/// inside the sandbox, a snapshot copies it and a new memory-backed volume starts from that
/// copy, and it is unmounted with its sandbox. An emulator that may not mount one says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_backed_volume_is_a_tmpfs_of_its_size_shared_by_the_pods_containers() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    if let Err(why) = executor.memory_volumes() {
        assert_ne!(current_uid(), 0, "a root executor mounts a tmpfs: {why}");
        assert!(why.contains("need an emulator run as root"), "{why}");
        return;
    }
    let mount = |path: &str| VolumeMount { volume: "cache".into(), path: path.into(), ..VolumeMount::default() };
    let memory = vec![cwsandbox_executor::MemoryVolume { volume: "cache".into(), size_bytes: 1 << 20 }];
    let id = unique("tmpfs");
    let launch = LaunchSpec {
        name: "main".into(),
        volume_mounts: vec![mount("/cache")],
        memory_volumes: memory.clone(),
        sidecars: vec![Sidecar {
            name: "side".into(),
            command: vec!["sh".into(), "-c".into(), "echo from-side > /shared/side; exec sleep 1000".into()],
            volume_mounts: vec![mount("/shared")],
            ..Sidecar::default()
        }],
        ..spec("tmpfs", &["sleep", "1000"])
    };
    executor.start(&id, launch).await.unwrap();
    assert_eq!(sh(executor, &id, "stat -f -c %T /cache").await, "tmpfs");
    assert_eq!(
        sh(executor, &id, "until [ -s /cache/side ]; do sleep 0.01; done; cat /cache/side").await,
        "from-side",
        "the side container's mount is the same tmpfs"
    );
    let (out, err, code) =
        run(executor, &id, &["sh", "-c", "head -c 2097152 /dev/zero > /cache/big; echo status=$?; wc -c < /cache/big"])
            .await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let written: u64 = out.lines().nth(1).unwrap_or_default().trim().parse().unwrap();
    assert!(out.starts_with("status=1") && written <= 1 << 20, "stopped at the volume's size: {out}");
    assert_eq!(sh(executor, &id, "rm /cache/big; echo kept > /cache/note; echo ok").await, "ok");

    let snapshot = "0b1e5c3a-0000-4000-8000-0000000000aa";
    executor.snapshot_volume(&id, "cache", snapshot).await.unwrap();
    let on_host = executor.config().root_dir.join(&id).join("volumes/cache");
    assert!(mounted_under(&on_host), "mounted on the host side, where snapshots read it");
    executor.remove(&id).await;
    assert!(!mounted_under(&executor.config().root_dir.join(&id)), "unmounted with its sandbox");
    assert!(!on_host.exists());

    let restored = unique("tmpfs-again");
    let launch = LaunchSpec {
        volume_mounts: vec![VolumeMount { restore_from: Some(snapshot.into()), ..mount("/cache") }],
        memory_volumes: memory,
        ..spec("again", &[])
    };
    executor.start(&restored, launch).await.unwrap();
    assert_eq!(
        sh(executor, &restored, "cat /cache/note; cat /cache/side; stat -f -c %T /cache").await,
        "kept\nfrom-side\ntmpfs"
    );
    executor.shutdown().await;
    assert!(!mounted_under(&executor.config().root_dir), "nothing is left mounted by the executor");
}

/// Whether anything is mounted at or under `path` in this process's mount namespace.
fn mounted_under(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| Path::new(point).starts_with(path))
}

fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// Compose's start order on the host's programs: each container with a root of its own starts
/// once what it waits for holds of the earlier ones (started, healthy by its probe run in it,
/// completed with 0), the main command last; the Pod's names resolve to its loopback in every
/// container (a hosts file laid over the host's `/etc`); a dependency that never becomes
/// healthy fails the start and leaves nothing running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_start_in_order_once_what_they_wait_for_holds() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let shared = VolumeMount { volume: "shared".into(), path: "/shared".into(), ..VolumeMount::default() };
    let sidecar = |name: &str, script: &str, after: Vec<StartAfter>| Sidecar {
        name: name.into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
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
        ..spec("pod-ordered", &["sh", "-c", "echo main >> /shared/order; exec sleep 1000"])
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
    let hosts = sh(executor, &id, "cat /etc/hosts").await;
    assert!(hosts.lines().any(|line| line == "127.0.0.1\tpod-ordered db api"), "{hosts}");
    let in_api = ExecRequest { container: Some("api".into()), ..argv(&["getent", "hosts", "db"]) };
    let (out, _, code) = run_request(executor, &id, in_api).await;
    assert_eq!((out.split_whitespace().next(), code), (Some("127.0.0.1"), 0), "{out}");
    executor.stop(&id, Duration::from_secs(1)).await;

    // A dependency that never becomes healthy fails the start; the main command never ran.
    let failing = unique("unhealthy");
    let never = Sidecar {
        startup_probe: Some(StartupProbe { failure_threshold: 3, ..probe }),
        ..sidecar("never", "exec sleep 1000", vec![])
    };
    let launch = LaunchSpec {
        volume_mounts: vec![shared.clone()],
        sidecars: vec![never],
        after: vec![after("never", StartCondition::Healthy)],
        ..spec("pod-unhealthy", &["sh", "-c", "echo ran > /shared/main; exec sleep 1000"])
    };
    let error = executor.start(&failing, launch).await.unwrap_err().to_string();
    assert!(error.contains("dependency failed to start: container \"never\" is unhealthy"), "{error}");
    assert!(!executor.is_running(&failing), "the sandbox was ended");
    assert!(!executor.config().root_dir.join(&failing).join("volumes/shared/main").exists(), "the main command ran");
    executor.shutdown().await;
}

/// A snapshot copies a running sandbox's volume (modes, links and all, never following a link
/// out of it) into the executor's root; a new sandbox's volume starts as that copy, with its
/// sub-path made inside the copy; the copy outlives its sandbox and goes when deleted, or with
/// the executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_snapshot_is_a_copy_that_a_new_sandboxs_volume_starts_from() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let mount = |path: &str| VolumeMount { volume: "work".into(), path: path.into(), ..VolumeMount::default() };
    let source = unique("snap-src");
    executor.start(&source, LaunchSpec { volume_mounts: vec![mount("/data")], ..spec("src", &[]) }).await.unwrap();
    let written = "mkdir -p /data/sub && echo kept > /data/sub/note && chmod 600 /data/sub/note \
                   && ln -s /etc/hostname /data/link && echo secret > /outside";
    assert_eq!(sh(executor, &source, &format!("{written} && echo done")).await, "done");
    let size = executor.snapshot_volume(&source, "work", "0b1e5c3a-0000-4000-8000-000000000001").await.unwrap();
    assert!(size >= 5, "the note's bytes at least: {size}");
    let stored =
        executor.config().root_dir.join(cwsandbox_executor::SNAPSHOTS_DIR).join("0b1e5c3a-0000-4000-8000-000000000001");
    assert_eq!(std::fs::read_to_string(stored.join("sub/note")).unwrap(), "kept\n");
    assert!(stored.join("link").symlink_metadata().unwrap().file_type().is_symlink(), "a link stays a link");
    assert!(!stored.join("outside").exists(), "only the volume is captured");
    executor.remove(&source).await;
    assert!(stored.join("sub/note").exists(), "a snapshot outlives its sandbox");

    let restored = unique("snap-new");
    let launch = LaunchSpec {
        volume_mounts: vec![
            VolumeMount { restore_from: Some("0b1e5c3a-0000-4000-8000-000000000001".into()), ..mount("/again") },
            VolumeMount {
                sub_path: "sub".into(),
                restore_from: Some("0b1e5c3a-0000-4000-8000-000000000001".into()),
                ..mount("/only-sub")
            },
        ],
        ..spec("new", &[])
    };
    executor.start(&restored, launch).await.unwrap();
    assert_eq!(sh(executor, &restored, "cat /again/sub/note; stat -c %a /again/sub/note").await, "kept\n600");
    assert_eq!(sh(executor, &restored, "cat /only-sub/note").await, "kept", "the sub-path of the copy");
    assert_eq!(sh(executor, &restored, "readlink /again/link").await, "/etc/hostname");

    // A link where a sub-path should be is not followed out of the volume.
    let linked = unique("snap-link");
    executor.start(&linked, LaunchSpec { volume_mounts: vec![mount("/data")], ..spec("lnk", &[]) }).await.unwrap();
    assert_eq!(sh(executor, &linked, "ln -s /etc /data/escape && echo ok").await, "ok");
    executor.snapshot_volume(&linked, "work", "0b1e5c3a-0000-4000-8000-000000000002").await.unwrap();
    let through_link = LaunchSpec {
        volume_mounts: vec![VolumeMount {
            sub_path: "escape".into(),
            restore_from: Some("0b1e5c3a-0000-4000-8000-000000000002".into()),
            ..mount("/e")
        }],
        ..spec("esc", &[])
    };
    let error = executor.start(&unique("snap-esc"), through_link).await.unwrap_err().to_string();
    assert!(error.contains("is not a directory"), "{error}");

    let gone = LaunchSpec {
        volume_mounts: vec![VolumeMount {
            restore_from: Some("0b1e5c3a-0000-4000-8000-00000000dead".into()),
            ..mount("/x")
        }],
        ..spec("gone", &[])
    };
    let error = executor.start(&unique("snap-gone"), gone).await.unwrap_err().to_string();
    assert!(error.contains("cannot be restored from its snapshot"), "{error}");
    let bad_id = executor.snapshot_volume(&linked, "work", "../escape").await.unwrap_err().to_string();
    assert!(bad_id.contains("invalid snapshot id"), "{bad_id}");

    executor.delete_snapshot("0b1e5c3a-0000-4000-8000-000000000002").await.unwrap();
    assert!(!stored.with_file_name("0b1e5c3a-0000-4000-8000-000000000002").exists(), "deleted");
    executor.shutdown().await;
    assert!(!stored.exists(), "snapshots go with the executor");
}

/// A claim's volume is one directory under the executor's root, shared by every sandbox that
/// mounts it and kept when they end; it is mounted at its root only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_volume_is_shared_between_sandboxes_and_outlives_them() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let mount = |path: &str, read_only: bool| VolumeMount {
        volume: "data".into(),
        path: path.into(),
        read_only,
        claim: Some("org-a/cks-cluster/datasets/imagenet".into()),
        ..VolumeMount::default()
    };
    let writer = unique("claim-w");
    executor.start(&writer, LaunchSpec { volume_mounts: vec![mount("/data", false)], ..spec("w", &[]) }).await.unwrap();
    assert_eq!(sh(executor, &writer, "echo shared > /data/labels.txt && echo ok").await, "ok");
    executor.remove(&writer).await;
    let on_host = executor
        .config()
        .root_dir
        .join(cwsandbox_executor::CLAIMS_DIR)
        .join("org-a/cks-cluster/datasets/imagenet/labels.txt");
    assert_eq!(std::fs::read_to_string(&on_host).unwrap(), "shared\n", "kept when its sandbox goes");

    let reader = unique("claim-r");
    executor.start(&reader, LaunchSpec { volume_mounts: vec![mount("/in", true)], ..spec("r", &[]) }).await.unwrap();
    assert_eq!(sh(executor, &reader, "cat /in/labels.txt").await, "shared");
    assert_eq!(sh(executor, &reader, "touch /in/x 2>/dev/null && echo written || echo refused").await, "refused");

    let sub_path = LaunchSpec {
        volume_mounts: vec![VolumeMount { sub_path: "train".into(), ..mount("/t", false) }],
        ..spec("s", &[])
    };
    let error = executor.start(&unique("claim-s"), sub_path).await.unwrap_err().to_string();
    assert!(error.contains("mounted at its root"), "{error}");
    for key in ["../etc", "imagenet", "a//b", "a/./b", "/a/b", "a/b/", "Org/b", "a/b/c/d/e/f/g/h/i"] {
        let bad = LaunchSpec {
            volume_mounts: vec![VolumeMount { claim: Some(key.into()), ..mount("/b", false) }],
            ..spec("b", &[])
        };
        let error = executor.start(&unique("claim-b"), bad).await.unwrap_err().to_string();
        assert!(error.contains("invalid claim"), "{key}: {error}");
    }
    executor.shutdown().await;
    assert!(on_host.exists(), "a claim's data outlives the executor, as a claim outlives its Pods");
}

/// A connection to a sandbox's port is made inside its network, so a sandbox with a network of
/// its own (loopback only) is reached at a port the host does not see; a port nothing listens
/// on is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_to_a_sandboxs_port_is_made_in_its_own_network() {
    use std::io::Read;
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let server = "import socket\n\
                  s = socket.socket(); s.bind(('127.0.0.1', 8080)); s.listen()\n\
                  print('listening', flush=True)\n\
                  while True:\n    c, _ = s.accept(); c.sendall(b'hello from the sandbox'); c.close()\n";
    let id = unique("port");
    let launch = LaunchSpec { network: Network::LoopbackOnly, ..spec("port", &["/usr/bin/python3", "-c", server]) };
    executor.start(&id, launch).await.unwrap();
    wait_for_log(&executor.logs(&id).unwrap(), "listening").await;
    for _ in 0..2 {
        let mut stream = executor.connect(&id, 8080).await.expect("connected inside the sandbox");
        let mut answer = String::new();
        tokio::task::spawn_blocking(move || stream.read_to_string(&mut answer).map(|_| answer))
            .await
            .unwrap()
            .map(|answer| assert_eq!(answer, "hello from the sandbox"))
            .unwrap();
    }
    let refused = executor.connect(&id, 8081).await.unwrap_err().to_string();
    assert!(refused.contains("refused"), "{refused}");
    executor.remove(&id).await;
    let gone = executor.connect(&id, 8080).await.unwrap_err().to_string();
    assert!(gone.contains("unknown"), "{gone}");
    executor.shutdown().await;
}

/// Files read and written through the executor are opened as the sandbox's own commands would
/// open them: with its user's rights, in its mount namespace. A root-only file of the host in
/// the sandbox's view (a configured host path, as `/etc/shadow` is), directly or through links
/// the sandbox plants, is as unreadable through the API as with `cat`; a user other than root
/// cannot write where its commands cannot; `/proc/1/root/...` resolves as inside the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_operations_have_the_sandboxs_rights_not_the_emulators() {
    use cwsandbox_executor::FileError;
    use std::os::unix::fs::PermissionsExt;
    let host = tempfile::Builder::new().prefix("cwsbx-host-secret").tempdir_in("/var/tmp").unwrap();
    let secret = host.path().join("shadow");
    std::fs::write(&secret, b"host-only marker\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let shared = host.path().to_path_buf();
    let harness = harness_with(Isolation::Namespaces, |config| config.host_paths.push(shared.clone()));
    let executor = &harness.executor;
    let secret = secret.to_string_lossy().into_owned();
    let root_owned_by_us = unsafe { libc::geteuid() } == 0;

    let id = unique("rights");
    executor.start(&id, spec("rights", &[])).await.unwrap();
    if root_owned_by_us {
        // The sandbox's root is not the host's: the file's owner is not in its namespace.
        let (_, stderr, code) = run(executor, &id, &["cat", &secret]).await;
        assert_ne!(code, 0, "cat reads the host's root-only file: {stderr}");
        assert_eq!(executor.read_file(&id, &secret).await, Err(FileError::PermissionDenied));
        let planted = format!(
            "ln -s {secret} /tmp/l && ln -s / /tmp/r && mkdir -p /tmp/a/b && ln -s ../../r /tmp/a/b/up && echo ok"
        );
        assert_eq!(sh(executor, &id, &planted).await, "ok");
        for path in ["/tmp/l".to_owned(), format!("/tmp/r{secret}"), format!("/tmp/a/b/up{secret}")] {
            assert_eq!(executor.read_file(&id, &path).await, Err(FileError::PermissionDenied), "{path}");
        }
        assert_eq!(executor.write_file(&id, "/tmp/l", b"x").await, Err(FileError::PermissionDenied));
        assert_eq!(std::fs::read(host.path().join("shadow")).unwrap(), b"host-only marker\n");
    }
    // What the sandbox may read, it reads. /proc/1/root is init's root, which its commands may
    // not look through (init is not dumpable, and they lack CAP_SYS_PTRACE): nor may the API.
    executor.write_file(&id, "/tmp/mine", b"sandbox data").await.unwrap();
    assert_eq!(executor.read_file(&id, "/tmp/mine").await.unwrap(), b"sandbox data");
    let (_, _, code) = run(executor, &id, &["cat", "/proc/1/root/tmp/mine"]).await;
    assert_ne!(code, 0, "a command reads through init's root");
    assert_eq!(executor.read_file(&id, "/proc/1/root/tmp/mine").await, Err(FileError::PermissionDenied));
    assert_eq!(executor.write_file(&id, "/proc/1/root/tmp/x", b"p").await, Err(FileError::PermissionDenied));
    executor.stop(&id, std::time::Duration::from_secs(5)).await;

    if root_owned_by_us {
        // A user other than root: its commands' rights, no more.
        let id = unique("rights-user");
        let launch = LaunchSpec { user: Some(SandboxUser { uid: 1000, gid: 1000 }), ..spec("rights-user", &[]) };
        executor.start(&id, launch).await.unwrap();
        assert_eq!(executor.write_file(&id, "/not-mine/file", b"x").await, Err(FileError::PermissionDenied));
        assert_eq!(executor.read_file(&id, "/proc/1/environ").await, Err(FileError::PermissionDenied));
        executor.write_file(&id, "/tmp/deep/er/file", b"x").await.unwrap();
        assert_eq!(
            sh(executor, &id, "stat -c %u:%g:%a /tmp/deep /tmp/deep/er/file").await,
            "1000:1000:755\n1000:1000:644"
        );
        assert_eq!(sh(executor, &id, "echo private > /tmp/private && chmod 600 /tmp/private && echo ok").await, "ok");
        executor.stop(&id, std::time::Duration::from_secs(5)).await;
    }
    executor.shutdown().await;
}

/// A sandbox that swaps a directory of its volume with a link to a host directory, in a loop,
/// while its snapshots are taken, never gets a host file into one: the copy never follows a
/// link, whatever the volume holds at any instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_never_copies_through_a_link_the_sandbox_swaps_in() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let host = tempfile::Builder::new().prefix("cwsbx-host-dir").tempdir_in("/var/tmp").unwrap();
    std::fs::write(host.path().join("host-marker"), b"host-only\n").unwrap();
    let id = unique("swap");
    let mount = VolumeMount { volume: "work".into(), path: "/data".into(), ..VolumeMount::default() };
    executor.start(&id, LaunchSpec { volume_mounts: vec![mount], ..spec("swap", &[]) }).await.unwrap();
    // renameat2(RENAME_EXCHANGE) as fast as it goes, for at most a minute.
    let swapper = format!(
        "import ctypes, os, time\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         os.makedirs('/data/d'); open('/data/d/inside', 'w').write('sandbox')\n\
         os.symlink({host:?}, '/data/l')\n\
         open('/tmp/swapping', 'w').write('yes')\n\
         end = time.time() + 60\n\
         while time.time() < end:\n\
         \x20   libc.renameat2(-100, b'/data/d', -100, b'/data/l', 2)\n",
        host = host.path().to_string_lossy()
    );
    executor.write_file(&id, "/tmp/swap.py", swapper.as_bytes()).await.unwrap();
    let session = executor.exec(&id, argv(&["python3", "/tmp/swap.py"])).await.unwrap();
    sh(executor, &id, "until [ -s /tmp/swapping ]; do sleep 0.01; done").await;
    let snapshots_dir = executor.config().root_dir.join(cwsandbox_executor::SNAPSHOTS_DIR);
    for index in 0..40 {
        let snapshot = format!("5a5a5a5a-0000-4000-8000-{index:012}");
        executor.snapshot_volume(&id, "work", &snapshot).await.unwrap();
        let copy = snapshots_dir.join(&snapshot);
        for name in ["d", "l"] {
            let entry = copy.join(name);
            // Either name may be missing: caught between the two halves of a swap.
            if entry.symlink_metadata().is_ok_and(|metadata| metadata.is_dir()) {
                assert!(!entry.join("host-marker").exists(), "snapshot {index} holds a host file through {name}");
            }
        }
        executor.delete_snapshot(&snapshot).await.unwrap();
    }
    drop(session);
    executor.shutdown().await;
}

/// A mounted file under a volume's mount path is on top of the volume (as a Kubernetes subPath
/// file over an emptyDir), owned by the sandbox's root; its mount point is made inside the
/// volume and never through a link the volume holds (one restored from a snapshot); a file at a
/// volume's mount path, or under a claim's, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_file_under_a_volume_is_placed_on_it_never_through_a_link() {
    let harness = harness(Isolation::Namespaces);
    let executor = &harness.executor;
    let mount = |path: &str| VolumeMount { volume: "work".into(), path: path.into(), ..VolumeMount::default() };
    let file = |path: &str, content: &str| MountedFile { path: path.into(), content: content.as_bytes().to_vec() };
    let id = unique("vfiles");
    let launch = LaunchSpec {
        volume_mounts: vec![mount("/data"), VolumeMount { sub_path: "sub".into(), ..mount("/sub") }],
        files: vec![file("/data/conf/app.yaml", "a: 1\n"), file("/sub/deep/x", "x\n"), file("/data/top", "t\n")],
        ..spec("vf", &[])
    };
    executor.start(&id, launch).await.unwrap();
    let seen =
        sh(executor, &id, "cat /data/conf/app.yaml /sub/deep/x /data/top; stat -c '%u %a' /data/conf/app.yaml").await;
    assert_eq!(seen, "a: 1\nx\nt\n0 644");
    // The mount points are the volume's: its other mount shows them, without the file's bytes.
    assert_eq!(sh(executor, &id, "ls /data/sub/deep; wc -c < /data/sub/deep/x").await, "x\n0");

    // A volume restored with a link where a file's directory should be: the start is refused
    // and nothing is made where the link points.
    let outside = executor.config().root_dir.join("outside-of-every-sandbox");
    std::fs::create_dir_all(&outside).unwrap();
    let script =
        format!("ln -s {} /data/escape && ln -s {}/f /data/file && echo ok", outside.display(), outside.display());
    assert_eq!(sh(executor, &id, &script).await, "ok");
    executor.snapshot_volume(&id, "work", "0b1e5c3a-0000-4000-8000-0000000f11e5").await.unwrap();
    for path in ["/data/escape/x", "/data/file"] {
        let launch = LaunchSpec {
            volume_mounts: vec![VolumeMount {
                restore_from: Some("0b1e5c3a-0000-4000-8000-0000000f11e5".into()),
                ..mount("/data")
            }],
            files: vec![file(path, "never\n")],
            ..spec("esc", &[])
        };
        let error = executor.start(&unique("vfiles-esc"), launch).await.unwrap_err().to_string();
        assert!(error.contains("is a link, which is not followed"), "{path}: {error}");
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing made through a link");

    let at_mount =
        LaunchSpec { volume_mounts: vec![mount("/data")], files: vec![file("/data", "x")], ..spec("m", &[]) };
    let error = executor.start(&unique("vfiles-at"), at_mount).await.unwrap_err().to_string();
    assert!(error.contains("is mounted there"), "{error}");
    let claimed = LaunchSpec {
        volume_mounts: vec![VolumeMount { claim: Some("o/c/datasets/x".into()), ..mount("/data") }],
        files: vec![file("/data/conf", "x")],
        ..spec("c", &[])
    };
    let error = executor.start(&unique("vfiles-claim"), claimed).await.unwrap_err().to_string();
    assert!(error.contains("a claim's"), "{error}");
    executor.shutdown().await;
}
