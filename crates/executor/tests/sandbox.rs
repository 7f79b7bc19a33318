//! Exec, files, logs and life cycle, in both isolation modes.

mod common;

use std::time::{Duration, Instant};

use common::*;
use cwsandbox_executor::{ExecRequest, ExecutorError, FileError, Isolation, LaunchSpec, LogError, MainExit};

in_both_modes!(
    env_and_working_dir_are_honoured,
    exec_reports_stdout_stderr_and_exit_code,
    closing_stdin_is_end_of_file,
    a_missing_command_exits_127_with_a_message,
    written_files_are_seen_by_exec_and_read_back,
    read_file_reports_reasons,
    logs_have_offsets_tail_and_follow_until_stop,
    a_small_log_buffer_reports_replay_gaps,
    stop_waits_for_term_then_kills_at_the_grace,
    main_exit_is_reported_with_its_code,
    shutdown_leaves_no_process,
    exec_on_a_terminal_honours_size_and_resize,
    operations_on_stopped_or_unknown_sandboxes_fail_cleanly,
    a_killed_exec_leaves_no_zombie_and_the_sandbox_stops_at_once,
    file_operations_never_block_on_fifos_and_are_bounded,
);

async fn env_and_working_dir_are_honoured(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let id = unique("env");
    let launch = LaunchSpec {
        env: env(&[("GREETING", "hello world"), ("PATH", "/usr/bin:/bin")]),
        working_dir: Some("project/src".into()),
        ..spec("env-host", &[])
    };
    executor.start(&id, launch).await.unwrap();

    let out = sh(executor, &id, "echo \"$GREETING|$PATH|$HOSTNAME\"; pwd").await;
    let (vars, cwd) = out.split_once('\n').unwrap();
    assert_eq!(vars, "hello world|/usr/bin:/bin|env-host");
    assert!(cwd.ends_with("/project/src"), "working directory {cwd:?}");
    // Nothing of the emulator's own environment leaks in.
    assert_eq!(sh(executor, &id, "echo \"${CARGO:-unset}\"").await, "unset");

    // A request's env overrides the sandbox's, and its working directory wins.
    let request = ExecRequest {
        env: env(&[("GREETING", "bye")]),
        working_dir: Some("/".into()),
        ..argv(&["sh", "-c", "echo $GREETING; pwd"])
    };
    let (stdout, _, code) = run_request(executor, &id, request).await;
    assert_eq!((stdout.as_str(), code), ("bye\n/\n", 0));
    // Relative exec working directories resolve against the sandbox's.
    let request = ExecRequest { working_dir: Some("..".into()), ..argv(&["pwd"]) };
    assert!(matches!(executor.exec(&id, request).await, Err(ExecutorError::InvalidRequest(_))));
    let request = ExecRequest { working_dir: Some("missing".into()), ..argv(&["pwd"]) };
    let (_, stderr, code) = run_request(executor, &id, request).await;
    assert_eq!(code, 127, "{stderr}");
    assert!(stderr.contains("working directory"), "{stderr}");

    // An absolute working directory is the sandbox's path. With namespaces it is made in
    // the sandbox's own root and never on the host; plain processes see the host's
    // filesystem, so there it must exist.
    let absolute = harness.root.path().join(unique("abs-workdir"));
    let absolute_text = absolute.to_string_lossy().into_owned();
    let launch = || LaunchSpec { working_dir: Some(absolute_text.clone()), ..spec("env-host-2", &[]) };
    let id2 = unique("env-abs");
    if isolation == Isolation::Plain {
        let error = executor.start(&id2, launch()).await.unwrap_err();
        assert!(error.to_string().contains("does not exist"), "{error}");
        std::fs::create_dir(&absolute).unwrap();
    }
    executor.start(&id2, launch()).await.unwrap();
    assert_eq!(sh(executor, &id2, "pwd").await, absolute_text);
    if isolation == Isolation::Namespaces {
        assert!(!absolute.exists(), "the working directory was created on the host");
        // Without one, a sandbox starts in / as a container without WORKDIR does.
        let id3 = unique("env-default");
        executor.start(&id3, spec("env-host-3", &[])).await.unwrap();
        assert_eq!(sh(executor, &id3, "pwd").await, "/");
    }
    executor.shutdown().await;
}

async fn exec_reports_stdout_stderr_and_exit_code(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let id = unique("exec");
    executor.start(&id, spec("exec-host", &[])).await.unwrap();
    let (stdout, stderr, code) = run(executor, &id, &["sh", "-c", "echo out; echo err >&2; exit 3"]).await;
    assert_eq!((stdout.as_str(), stderr.as_str(), code), ("out\n", "err\n", 3));
    let (stdout, _, code) = run(executor, &id, &["echo", "plain", "args"]).await;
    assert_eq!((stdout.as_str(), code), ("plain args\n", 0));
    // Killed by a signal: 128 + N.
    let (_, _, code) = run(executor, &id, &["sh", "-c", "kill -TERM $$"]).await;
    assert_eq!(code, 128 + 15);
    // Large output arrives whole and in order.
    let (stdout, _, code) = run(executor, &id, &["sh", "-c", "seq 1 20000"]).await;
    assert_eq!(code, 0);
    let expected: String = (1..=20000).map(|n| format!("{n}\n")).collect();
    assert_eq!(stdout, expected);
    executor.shutdown().await;
}

async fn closing_stdin_is_end_of_file(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let id = unique("stdin");
    executor.start(&id, spec("stdin-host", &[])).await.unwrap();
    let mut session = executor.exec(&id, argv(&["cat"])).await.unwrap();
    session.stdin.write(b"hello ").await.unwrap();
    session.stdin.write(b"stdin\n").await.unwrap();
    session.stdin.close().await;
    let (stdout, stderr, code) = within("cat to end", session.collect()).await;
    assert_eq!((stdout.as_slice(), stderr.as_slice(), code), (&b"hello stdin\n"[..], &b""[..], 0));

    // Without any input, closing at once still ends `cat`.
    let (stdout, _, code) = run(executor, &id, &["cat"]).await;
    assert_eq!((stdout.as_str(), code), ("", 0));
    executor.shutdown().await;
}

async fn a_missing_command_exits_127_with_a_message(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let id = unique("missing");
    executor.start(&id, spec("missing-host", &[])).await.unwrap();
    let (stdout, stderr, code) = run(executor, &id, &["no-such-command-cwsbx"]).await;
    assert_eq!((stdout.as_str(), code), ("", 127));
    assert!(stderr.contains("no-such-command-cwsbx") && stderr.contains("not found"), "{stderr:?}");
    // The sandbox is unharmed.
    assert_eq!(sh(executor, &id, "echo still here").await, "still here");
    executor.shutdown().await;
}

async fn written_files_are_seen_by_exec_and_read_back(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let id = unique("files");
    executor.start(&id, spec("files-host", &[])).await.unwrap();

    // Relative: against the working directory, creating parents.
    executor.write_file(&id, "notes/a.txt", b"relative data\n").await.unwrap();
    assert_eq!(sh(executor, &id, "cat notes/a.txt").await, "relative data");
    // Absolute, in the sandbox's /tmp (private in namespaces mode).
    let tmp_path = format!("/tmp/{}", unique("file"));
    executor.write_file(&id, &tmp_path, b"tmp data").await.unwrap();
    assert_eq!(sh(executor, &id, &format!("cat {tmp_path}")).await, "tmp data");
    // What exec writes, read_file reads; writing replaces the whole content.
    sh(executor, &id, "printf 'from exec' > made.txt").await;
    assert_eq!(executor.read_file(&id, "made.txt").await.unwrap(), b"from exec");
    let absolute = format!("{}/made.txt", sh(executor, &id, "pwd").await);
    assert_eq!(executor.read_file(&id, &absolute).await.unwrap(), b"from exec");
    executor.write_file(&id, "made.txt", b"x").await.unwrap();
    assert_eq!(sh(executor, &id, "cat made.txt").await, "x");
    // Empty files are fine.
    executor.write_file(&id, "empty", b"").await.unwrap();
    assert_eq!(executor.read_file(&id, "empty").await.unwrap(), b"");
    if isolation == Isolation::Plain {
        let _ = std::fs::remove_file(&tmp_path);
    }
    executor.shutdown().await;
}

async fn read_file_reports_reasons(isolation: Isolation) {
    let harness = harness_with(isolation, |config| config.max_file_bytes = 16);
    let executor = &harness.executor;
    let id = unique("reasons");
    executor.start(&id, spec("reasons-host", &[])).await.unwrap();

    assert_eq!(executor.read_file(&id, "nope.txt").await, Err(FileError::NotFound));
    assert_eq!(executor.read_file(&id, "nope/deeper.txt").await, Err(FileError::NotFound));
    sh(executor, &id, "mkdir adir").await;
    assert_eq!(executor.read_file(&id, "adir").await, Err(FileError::IsDirectory));
    assert_eq!(executor.read_file(&id, "/tmp").await, Err(FileError::IsDirectory));
    assert_eq!(executor.write_file(&id, "adir", b"x").await, Err(FileError::IsDirectory));

    sh(executor, &id, "head -c 32 /dev/zero > big").await;
    assert_eq!(executor.read_file(&id, "big").await, Err(FileError::TooLarge { size: 32, max: 16 }));
    assert_eq!(executor.write_file(&id, "big2", &[0u8; 17]).await, Err(FileError::TooLarge { size: 17, max: 16 }));
    executor.write_file(&id, "fits", &[7u8; 16]).await.unwrap();
    assert_eq!(executor.read_file(&id, "fits").await.unwrap(), vec![7u8; 16]);
    assert!(matches!(executor.read_file(&id, "").await, Err(FileError::InvalidPath(_))));

    if sys_uid() != 0 {
        sh(executor, &id, "touch secret && chmod 000 secret").await;
        assert_eq!(executor.read_file(&id, "secret").await, Err(FileError::PermissionDenied));
    }

    executor.stop(&id, Duration::ZERO).await;
    assert_eq!(executor.read_file(&id, "fits").await, Err(FileError::SandboxNotRunning));
    assert_eq!(executor.write_file(&id, "fits", b"x").await, Err(FileError::SandboxNotRunning));
    assert_eq!(executor.read_file("never-started", "x").await, Err(FileError::SandboxNotRunning));
}

fn sys_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|meta| std::os::unix::fs::MetadataExt::uid(&meta)).unwrap_or(0)
}

async fn logs_have_offsets_tail_and_follow_until_stop(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let mut exits = executor.exits();
    let id = unique("logs");
    executor
        .start(&id, spec("logs-host", &["sh", "-c", "echo one; echo two >&2; echo three; exec sleep 1000"]))
        .await
        .unwrap();
    let logs = executor.logs(&id).unwrap();
    let first_session = logs.session_id().to_owned();
    assert!(!first_session.is_empty());
    wait_for_log(&logs, "three\n").await;

    // stdout and stderr share one stream, in the order written.
    let all = logs.read_from(0).unwrap();
    assert_eq!(all.bytes(), b"one\ntwo\nthree\n");
    assert_eq!(all.next_offset, 14);
    assert!(all.chunks.iter().all(|chunk| chunk.time <= std::time::SystemTime::now()));
    assert_eq!(logs.read_from(4).unwrap().bytes(), b"two\nthree\n");
    assert_eq!(logs.read_from(14).unwrap().bytes(), b"");
    assert_eq!(logs.read_from(15), Err(LogError::InvalidOffset { requested: 15, end: 14 }));
    assert_eq!(logs.tail(1).bytes(), b"three\n");
    assert_eq!(logs.tail(2).bytes(), b"two\nthree\n");

    // Output of exec'd commands is not part of the sandbox's logs.
    sh(executor, &id, "echo not-in-logs").await;
    assert_eq!(logs.end_offset(), 14);

    // Following ends when the sandbox stops.
    let mut follower = logs.subscribe();
    let stopper = {
        let executor = executor.clone();
        let id = id.clone();
        tokio::spawn(async move { executor.stop(&id, Duration::from_secs(5)).await })
    };
    assert_eq!(within("the follow to end", follower.next()).await, None);
    within("stop", stopper).await.unwrap();
    assert!(logs.is_closed());
    // Logs stay readable after the stop.
    assert_eq!(executor.logs(&id).unwrap().read_from(0).unwrap().bytes(), b"one\ntwo\nthree\n");

    // A restart is a new log session.
    executor.start(&id, spec("logs-host", &["sh", "-c", "echo again"])).await.unwrap();
    let logs = executor.logs(&id).unwrap();
    assert_ne!(logs.session_id(), first_session);
    // The main command ended by itself: reported, and the logs are complete.
    let exit = within("the main exit", exits.recv()).await.unwrap();
    assert_eq!(exit, MainExit { id: id.clone(), container: None, exit_code: 0, oom_killed: false });
    assert_eq!(logs.read_from(0).unwrap().bytes(), b"again\n");
    assert!(logs.is_closed());
    // The stop before was requested, so it was not reported as a main exit.
    assert!(exits.try_recv().is_err());
}

async fn a_small_log_buffer_reports_replay_gaps(isolation: Isolation) {
    let harness = harness_with(isolation, |config| config.log_buffer_bytes = 8);
    let executor = &harness.executor;
    let mut exits = executor.exits();
    let id = unique("gap");
    executor.start(&id, spec("gap-host", &["sh", "-c", "echo 0123456789abcdef"])).await.unwrap();
    within("the main exit", exits.recv()).await.unwrap();
    let logs = executor.logs(&id).unwrap();
    assert_eq!(logs.end_offset(), 17);
    assert_eq!(logs.start_offset(), 9);
    assert_eq!(logs.read_from(0), Err(LogError::ReplayGap { requested: 0, oldest: 9 }));
    assert_eq!(logs.read_from(9).unwrap().bytes(), b"9abcdef\n");
    assert_eq!(logs.tail(5).bytes(), b"9abcdef\n");
}

async fn stop_waits_for_term_then_kills_at_the_grace(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let mut exits = executor.exits();

    // A main command that handles TERM ends at once, well before a long grace.
    let polite = unique("polite");
    executor
        .start(&polite, spec("polite", &["sh", "-c", "trap 'echo bye; exit 0' TERM; echo ready; sleep 1000 & wait"]))
        .await
        .unwrap();
    let polite_logs = executor.logs(&polite).unwrap();
    wait_for_log(&polite_logs, "ready\n").await;
    let started = Instant::now();
    within("a polite stop", executor.stop(&polite, Duration::from_secs(20))).await;
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(!executor.is_running(&polite));
    // The trap's own code, kept for whoever asked for the stop.
    assert_eq!(executor.exit_code(&polite), Some(0));
    assert_eq!(polite_logs.read_from(0).unwrap().bytes(), b"ready\nbye\n");

    // One that ignores TERM (and so do its children) dies at the grace.
    let stubborn = unique("stubborn");
    executor
        .start(&stubborn, spec("stubborn", &["sh", "-c", "trap '' TERM; echo ready; sleep 1000 & wait"]))
        .await
        .unwrap();
    wait_for_log(&executor.logs(&stubborn).unwrap(), "ready\n").await;
    let mut exec = executor.exec(&stubborn, argv(&["sh", "-c", "trap '' TERM; echo ready; sleep 1000"])).await.unwrap();
    // Stop only once the exec'd shell ignores TERM too.
    within("the exec to be ready", async {
        let output = exec.output.recv().await.expect("output");
        assert_eq!(&output.data[..], b"ready\n");
    })
    .await;
    let grace = Duration::from_millis(1500);
    let started = Instant::now();
    within("a stubborn stop", executor.stop(&stubborn, grace)).await;
    let elapsed = started.elapsed();
    assert!(elapsed >= grace, "stopped after {elapsed:?}, before the grace");
    assert!(elapsed < grace + Duration::from_secs(8), "took {elapsed:?}");
    assert!(!executor.is_running(&stubborn));
    assert!(executor.exit_code(&stubborn).is_some());
    // The exec'd command went with the sandbox.
    assert_eq!(within("the exec's end", exec.wait()).await, 137);
    // Requested stops are not main exits.
    assert!(exits.try_recv().is_err());
}

async fn main_exit_is_reported_with_its_code(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let mut exits = executor.exits();
    let seven = unique("seven");
    executor.start(&seven, spec("seven", &["sh", "-c", "exit 7"])).await.unwrap();
    assert_eq!(
        within("exit 7", exits.recv()).await.unwrap(),
        MainExit { id: seven.clone(), container: None, exit_code: 7, oom_killed: false }
    );
    assert!(!executor.is_running(&seven));

    let killed = unique("killed");
    executor.start(&killed, spec("killed", &["sh", "-c", "kill -KILL $$"])).await.unwrap();
    assert_eq!(
        within("a killed main", exits.recv()).await.unwrap(),
        MainExit { id: killed, container: None, exit_code: 137, oom_killed: false }
    );

    // A main command that cannot run: 127, with the reason in the logs.
    let missing = unique("missing-main");
    executor.start(&missing, spec("missing", &["no-such-main-cwsbx", "arg"])).await.unwrap();
    // Known when `start` returns: the caller can fail the sandbox before anyone sees it running.
    assert_eq!(executor.exit_code(&missing), Some(127));
    assert_eq!(
        within("a missing main", exits.recv()).await.unwrap(),
        MainExit { id: missing.clone(), container: None, exit_code: 127, oom_killed: false }
    );
    let text = String::from_utf8(executor.logs(&missing).unwrap().read_from(0).unwrap().bytes()).unwrap();
    assert!(text.contains("no-such-main-cwsbx: command not found"), "{text:?}");

    // When the main command ends, the rest of the sandbox goes with it.
    let marker = unique("marker");
    let leader = unique("leader");
    let script = "mkfifo go; echo ready; read line < go; exit 3";
    let launch = LaunchSpec { env: env(&[("CWSBX_TEST_MARKER", &marker)]), ..spec("leader", &["sh", "-c", script]) };
    executor.start(&leader, launch).await.unwrap();
    wait_for_log(&executor.logs(&leader).unwrap(), "ready\n").await;
    let mut background = executor.exec(&leader, argv(&["sleep", "1000"])).await.unwrap();
    assert_eq!(processes_with_marker(&marker).len(), 2, "the main shell and the exec'd sleep");
    // The writer's own end is of no interest (it may be killed with the sandbox before it
    // reports it); its session is kept so that dropping it does not kill it first.
    let _writer = executor.exec(&leader, argv(&["sh", "-c", "echo go > go"])).await.unwrap();
    assert_eq!(
        within("the leader's exit", exits.recv()).await.unwrap(),
        MainExit { id: leader, container: None, exit_code: 3, oom_killed: false }
    );
    assert_eq!(within("the background exec", background.wait()).await, 137);
    assert!(processes_with_marker(&marker).is_empty(), "left: {:?}", processes_with_marker(&marker));
}

async fn shutdown_leaves_no_process(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let marker = unique("marker");
    let ids: Vec<String> = (0..2).map(|_| unique("down")).collect();
    let mut sessions = Vec::new();
    for id in &ids {
        let script = "sleep 1000 & sleep 1000 & echo ready; wait";
        let launch = LaunchSpec { env: env(&[("CWSBX_TEST_MARKER", &marker)]), ..spec("down", &["sh", "-c", script]) };
        executor.start(id, launch).await.unwrap();
        wait_for_log(&executor.logs(id).unwrap(), "ready\n").await;
        // A busy exec, one that leaves an orphan behind, and an idle shell.
        sessions.push(executor.exec(id, argv(&["sh", "-c", "sleep 1000"])).await.unwrap());
        sh(executor, id, "sleep 1000 >/dev/null 2>&1 &").await;
        sessions.push(executor.exec(id, argv(&["cat"])).await.unwrap());
    }
    // Each sandbox has its main shell and 2 sleeps, an exec'd shell (and maybe
    // its sleep), an orphaned sleep and cat.
    let seen = processes_with_marker(&marker).len();
    assert!(seen >= 2 * 6, "only {seen} marked processes before shutdown");
    let root = harness.root.path().to_path_buf();
    within("shutdown", executor.shutdown()).await;
    let left = processes_with_marker(&marker);
    assert!(left.is_empty(), "processes left after shutdown: {left:?}");
    for mut session in sessions {
        assert!(within("an exec's end", session.wait()).await >= 128);
    }
    // Sandbox directories are removed; later starts are refused.
    for id in &ids {
        assert!(!root.join(id).exists());
    }
    assert!(matches!(executor.start(&unique("late"), spec("late", &[])).await, Err(ExecutorError::ShutDown)));
}

async fn exec_on_a_terminal_honours_size_and_resize(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let id = unique("tty");
    executor.start(&id, spec("tty-host", &[])).await.unwrap();
    let request = ExecRequest {
        tty: true,
        tty_size: Some((100, 30)),
        ..argv(&["sh", "-c", "stty size; test -t 0 && echo is-a-tty; echo $TERM"])
    };
    let (stdout, stderr, code) = run_request(executor, &id, request).await;
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(stdout.replace('\r', ""), "30 100\nis-a-tty\nxterm-256color\n");

    let request = ExecRequest {
        tty: true,
        ..argv(&["sh", "-c", "stty -echo; echo waiting; read line; stty size; echo got $line"])
    };
    let mut session = executor.exec(&id, request).await.unwrap();
    let mut seen = String::new();
    within("the prompt", async {
        while !seen.contains("waiting") {
            let output = session.output.recv().await.expect("output");
            seen.push_str(&String::from_utf8_lossy(&output.data));
        }
    })
    .await;
    session.resize(120, 40).unwrap();
    session.stdin.write(b"go\n").await.unwrap();
    let (stdout, _, code) = within("the tty session", session.collect()).await;
    seen.push_str(&String::from_utf8_lossy(&stdout));
    assert_eq!(code, 0);
    assert!(seen.replace('\r', "").ends_with("40 120\ngot go\n"), "{seen:?}");

    let plain = executor.exec(&id, argv(&["true"])).await.unwrap();
    assert!(matches!(plain.resize(1, 1), Err(ExecutorError::InvalidRequest(_))));
    executor.shutdown().await;
}

async fn operations_on_stopped_or_unknown_sandboxes_fail_cleanly(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    assert!(matches!(executor.exec("ghost", argv(&["true"])).await, Err(ExecutorError::UnknownSandbox(_))));
    assert!(matches!(executor.logs("ghost"), Err(ExecutorError::UnknownSandbox(_))));
    assert!(matches!(executor.start("../escape", spec("x", &[])).await, Err(ExecutorError::InvalidId(_))));
    assert!(matches!(executor.start("ok-id", spec("", &[])).await, Err(ExecutorError::InvalidHostname(_))));
    // Stopping or killing what is not running is a no-op.
    executor.stop("ghost", Duration::ZERO).await;
    executor.kill("ghost").await;

    let id = unique("stopped");
    executor.start(&id, spec("stopped", &[])).await.unwrap();
    assert!(matches!(executor.start(&id, spec("stopped", &[])).await, Err(ExecutorError::AlreadyRunning(_))));
    assert!(matches!(executor.exec(&id, argv(&[])).await, Err(ExecutorError::InvalidRequest(_))));
    assert_eq!(executor.exit_code(&id), None, "still running");
    executor.kill(&id).await;
    assert!(!executor.is_running(&id));
    assert!(executor.exit_code(&id).is_some());
    assert_eq!(executor.exit_code("ghost"), None);
    assert!(matches!(executor.exec(&id, argv(&["true"])).await, Err(ExecutorError::NotRunning(_))));
    // A stopped sandbox can start again.
    executor.start(&id, spec("stopped", &[])).await.unwrap();
    assert_eq!(sh(executor, &id, "echo back").await, "back");
    executor.remove(&id).await;
    assert!(matches!(executor.logs(&id), Err(ExecutorError::UnknownSandbox(_))));
    assert!(!harness.root.path().join(&id).exists());
}

async fn a_killed_exec_leaves_no_zombie_and_the_sandbox_stops_at_once(isolation: Isolation) {
    let harness = harness(isolation);
    let executor = &harness.executor;
    let id = unique("killed-exec");
    executor.start(&id, spec("killed-exec", &["sh", "-c", "trap 'exit 0' TERM; sleep 1000 & wait"])).await.unwrap();
    let marker = unique("exec-marker");
    let mut session = start_marked_exec(executor, &id, "exec sleep 1000", &marker).await;
    // Its environment reads as empty while `exec` replaces the shell: look until it is there.
    let pids = within("the exec'd command", async {
        loop {
            let pids = processes_with_marker(&marker);
            if !pids.is_empty() {
                break pids;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(pids.len(), 1, "{pids:?}");
    // What a caller that went away does (a cancelled StreamExec): SIGTERM to the
    // command's process group (SIGKILL after a short grace).
    // Plain processes share the main command's group, so there only the command is
    // killed, at once.
    session.exit.kill();
    let expected = if isolation == Isolation::Plain { 137 } else { 143 };
    assert_eq!(within("the exec's end", session.exit.wait()).await, expected);
    // Reaped, not left as a zombie for a reaper outside the sandbox (which would also
    // hold up the pid namespace's teardown until it got round to it).
    assert!(!std::path::Path::new(&format!("/proc/{}", pids[0])).exists(), "the killed command is still in /proc");
    let started = Instant::now();
    within("the stop", executor.stop(&id, Duration::from_secs(20))).await;
    // Nothing is left to wait for, so the stop does not take its 20 s grace (a generous bound:
    // how fast it is, is measured by the start_exec_stop benchmark, not here).
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    executor.shutdown().await;
}

async fn file_operations_never_block_on_fifos_and_are_bounded(isolation: Isolation) {
    let harness = harness_with(isolation, |config| {
        config.max_file_operations = 2;
        config.file_timeout = Duration::from_secs(5);
    });
    let executor = &harness.executor;
    let id = unique("fifo");
    executor.start(&id, spec("fifo", &[])).await.unwrap();
    // A FIFO nobody reads, one somebody holds open for reading but never reads, and a
    // device: none is a file, and none may hold a call (or a thread) forever.
    sh(executor, &id, "mkfifo unread held").await;
    let _reader = executor.exec(&id, argv(&["sh", "-c", "exec 3<held; sleep 1000"])).await.unwrap();
    for path in ["unread", "held", "/dev/zero"] {
        // More calls than there are turns: every one answers.
        for _ in 0..8 {
            match within("write_file", executor.write_file(&id, path, b"data")).await {
                Err(FileError::NotRegular { .. }) => {}
                other => panic!("write_file({path}) gave {other:?}"),
            }
        }
        match executor.read_file(&id, path).await {
            Err(FileError::NotRegular { .. }) => {}
            other => panic!("read_file({path}) gave {other:?}"),
        }
    }
    // Ordinary files still work, and the executor still answers.
    executor.write_file(&id, "plain.txt", b"fine").await.unwrap();
    assert_eq!(executor.read_file(&id, "plain.txt").await.unwrap(), b"fine");
    executor.shutdown().await;
}
