"""Flows (a), (b) and (c) of the published client (docs/facts/client-contract.md#flow-a and the two
after it), against sandboxes whose processes really run. Gotchas G1–G18 are those of
docs/facts/client-contract.md#g1 and after."""

from __future__ import annotations

import time
import uuid

import pytest
from conftest import NAMESPACES, RUNNER, WAIT, processes_at_least, processes_with, run, sandbox_env

from cwsandbox import ResourceOptions, Sandbox, SandboxDefaults, SandboxStatus


def test_a_run_on_the_cks_runner_and_exec_hostname(mark):
    started = time.monotonic()
    with Sandbox.run(placement_mode="cks", runner_ids=[RUNNER], environment_variables=sandbox_env(mark)) as sb:
        # G1: the state is always set, from the create response on.
        assert sb.status is not None and sb.status != SandboxStatus.UNSPECIFIED
        result = sb.exec(["hostname"]).result()
        pod_name = result.stdout.strip()
        print(f"hostname in sandbox {sb.sandbox_id}: {pod_name} ({time.monotonic() - started:.2f}s after run)")
        assert result.returncode == 0, result
        # The hostname is the Pod's name (plain processes only see it in $HOSTNAME).
        if NAMESPACES:
            assert pod_name == f"sandbox-{sb.sandbox_id}"
        env_name = sb.exec(["sh", "-c", 'echo "$HOSTNAME"']).result().stdout.strip()
        assert env_name == f"sandbox-{sb.sandbox_id}"
        assert sb.status == SandboxStatus.RUNNING
        assert sb.runner_id == RUNNER
        assert sb.started_at is not None
        assert processes_with(mark), "the main process runs while the sandbox is RUNNING"
        stop_started = time.monotonic()
    # The main command honours SIGTERM: the stop does not wait for the 10 s grace (G3).
    assert time.monotonic() - stop_started < 5
    assert sb.status == SandboxStatus.COMPLETED
    # The main command honoured SIGTERM by exiting 0: that is its code (the docstring's promise;
    # `sandboxes.exitCodeAfterStop: false` leaves it unset, as gateway-initiated stops may).
    assert sb.returncode == 0
    assert processes_with(mark) == []
    # G2: the deleted sandbox stays readable in its terminal state.
    assert Sandbox.from_id(sb.sandbox_id).result().status == SandboxStatus.COMPLETED


def test_b_annotations_and_requests_limits_are_echoed(mark):
    resources = ResourceOptions(requests={"cpu": "500m", "memory": "512Mi"}, limits={"cpu": "1", "memory": "1Gi"})
    with run(mark=mark, annotations={"sunk.coreweave.com/partition": "hpc-prod"}, resources=resources) as sb:
        assert sb.resource_requests == {"cpu": "500m", "memory": "512Mi"}
        assert sb.resource_limits == {"cpu": "1", "memory": "1Gi"}
        assert sb.exec(["echo", "placed"]).result().stdout == "placed\n"
        again = Sandbox.from_id(sb.sandbox_id).result()
        assert again.status == SandboxStatus.RUNNING
        assert again.resource_requests == {"cpu": "500m", "memory": "512Mi"}
        assert again.resource_limits == {"cpu": "1", "memory": "1Gi"}
    assert processes_with(mark) == []


def test_b_a_flat_resource_dict_is_requests_and_limits(mark):
    with run(mark=mark, resources={"cpu": "250m", "memory": "256Mi"}) as sb:
        assert sb.resource_requests == {"cpu": "250m", "memory": "256Mi"}
        assert sb.resource_limits == {"cpu": "250m", "memory": "256Mi"}
        assert sb.exec(["true"]).result().returncode == 0


def test_c_a_session_with_two_sandboxes(mark):
    tag = f"session-{uuid.uuid4().hex[:12]}"
    defaults = SandboxDefaults(
        placement_mode="cks",
        runner_ids=(RUNNER,),
        tags=(tag,),
        environment_variables=sandbox_env(mark),
    )
    with Sandbox.session(defaults) as session:
        first, second = session.sandbox(), session.sandbox()
        # Created lazily by their first operation, concurrently.
        processes = [first.exec(["hostname"]), second.exec(["hostname"])]
        results = [process.result() for process in processes]
        ids = [first.sandbox_id, second.sandbox_id]
        assert ids[0] != ids[1]
        for sandbox_id, result in zip(ids, results, strict=True):
            assert result.returncode == 0
            if NAMESPACES:
                assert result.stdout.strip() == f"sandbox-{sandbox_id}"
        listed = {sb.sandbox_id for sb in session.list().result()}
        assert set(ids) <= listed
        tagged = {sb.sandbox_id for sb in Sandbox.list(tags=[tag]).result()}
        assert tagged == set(ids)
        assert len(processes_at_least(mark, 2)) >= 2
    for sandbox_id in ids:
        assert Sandbox.from_id(sandbox_id).result().status == SandboxStatus.COMPLETED
    assert processes_with(mark) == []


def test_environment_and_working_directory_are_honoured(mark):
    with run(mark=mark, env={"GREETING": "hello from the spec"}, working_dir="/tmp/app") as sb:
        result = sb.exec(["sh", "-c", 'echo "$GREETING"; pwd']).result()
        assert result.stdout == "hello from the spec\n/tmp/app\n"
        # `cwd=` is the client's own `cd` wrapper.
        assert sb.exec(["pwd"], cwd="/tmp").result().stdout == "/tmp\n"
        # Nothing of the emulator's environment (its tokens) leaks in.
        assert sb.exec(["sh", "-c", 'echo "${CWSANDBOX_API_KEY:-unset}"']).result().stdout == "unset\n"


@pytest.mark.skipif(not NAMESPACES, reason="plain processes share the host's /tmp and process list")
def test_sandboxes_are_isolated_from_each_other(mark):
    with run(mark=mark) as one, run(mark=mark) as two:
        # A private /tmp and pid namespace each.
        one.write_file("/tmp/private.txt", b"only in one").result()
        seen = two.exec(["sh", "-c", "cat /tmp/private.txt 2>/dev/null || echo absent"]).result()
        assert seen.stdout == "absent\n"
        ps = one.exec(["ps", "-o", "pid=", "-o", "args="]).result().stdout
        assert "sleep infinity" in ps and len(ps.splitlines()) <= 4, ps


def test_deleting_a_sandbox_ends_every_process_it_started(mark):
    sb = run(mark=mark)
    sb.wait(timeout=WAIT)
    # A process that leaves its session and the exec that started it.
    started = sb.exec(["sh", "-c", "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!"]).result()
    escaped = started.stdout.strip()
    assert len(processes_at_least(mark, 3)) >= 3  # the main shell, its sleep, the setsid sleep
    if not NAMESPACES:
        # Plain processes: one that leaves the sandbox's process group escapes a stop (documented);
        # end it here so the suite leaves nothing behind.
        assert sb.exec(["kill", escaped]).result().returncode == 0
        # kill returns once the signal is sent: the process ends a moment later (under load,
        # after the next look).
        deadline = time.monotonic() + WAIT
        while int(escaped) in processes_with(mark) and time.monotonic() < deadline:
            time.sleep(0.02)
    sb.stop().result()
    assert processes_with(mark) == []


def test_a_main_process_that_exits_completes_the_sandbox_with_its_code(mark):
    sb = run("sh", "-c", "echo done; exit 0", mark=mark)
    started = time.monotonic()
    sb.wait_until_complete(timeout=WAIT).result()
    # G8: COMPLETED carries exit_code, so the client does not re-poll for it.
    assert time.monotonic() - started < 4
    assert sb.status == SandboxStatus.COMPLETED
    assert sb.returncode == 0
    # The logs of an ended sandbox stay readable.
    assert list(sb.stream_logs()) == ["done\n"]
