"""A sandbox of several containers, as the published client creates it (`containers=[...]`):
each container runs its own command in the sandbox, with its own root, processes, environment
and working directory, sharing the Pod's network and hostname; exec and stream_logs reach a container by its name, the primary one by default; a
name the sandbox does not have is refused with a message that names it.
"""

from __future__ import annotations

import time

import pytest

from conftest import NAMESPACES, RUNNER, WAIT, processes_with, sandbox_env
from cwsandbox import Container, Sandbox
from cwsandbox.exceptions import SandboxFailedError, SandboxValidationError

# The client asks every container of a multi-container sandbox for its resources.
RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}}


def containers(mark: str) -> list[Container]:
    return [
        Container(
            image="python:3.11",
            name="app",
            primary=True,
            command="sh",
            args=["-c", "echo app says $ROLE; exec sleep 1000"],
            environment_variables=sandbox_env(mark, ROLE="app"),
            resources=RESOURCES,
        ),
        Container(
            image="busybox:1.36",
            name="sidecar",
            command="sh",
            args=["-c", "echo sidecar says $ROLE in $(pwd); exec sleep 1000"],
            environment_variables=sandbox_env(mark, ROLE="sidecar"),
            working_dir="/srv/sidecar",
            resources=RESOURCES,
        ),
    ]


def first_line(sandbox: Sandbox, **options) -> str:
    reader = sandbox.stream_logs(follow=True, **options)
    try:
        return next(iter(reader))
    finally:
        reader.close()


@pytest.mark.skipif(not NAMESPACES, reason="plain processes run one container only (see the next test)")
def test_every_container_runs_and_exec_and_logs_reach_it_by_name(mark):
    with Sandbox.run(containers=containers(mark), placement_mode="cks", runner_ids=[RUNNER]) as sb:
        sb.wait(timeout=WAIT)
        assert sb.exec(["sh", "-c", "echo $ROLE"]).result().stdout == "app\n"
        assert sb.exec(["sh", "-c", "echo $ROLE"], container="app").result().stdout == "app\n"
        in_sidecar = sb.exec(["sh", "-c", "echo $ROLE:$(pwd)"], container="sidecar").result()
        assert in_sidecar.stdout == "sidecar:/srv/sidecar\n"

        assert first_line(sb) == "app says app\n"
        assert first_line(sb, container="sidecar") == "sidecar says sidecar in /srv/sidecar\n"

        # Each container has its own processes and root, as in Kubernetes: the app sees only its
        # own command, and a file of the sidecar's is not the app's.
        listed = sb.exec(["sh", "-c", "ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]).result()
        assert listed.stdout.count("sleep 1000") == 1, listed.stdout
        in_sidecar = sb.exec(["sh", "-c", "ps -eo args"], container="sidecar").result()
        assert in_sidecar.stdout.count("sleep 1000") == 1, in_sidecar.stdout

        # A relative file path is the named container's: its working directory, in its root.
        sb.write_file("note.txt", b"for the sidecar", container="sidecar").result()
        assert sb.exec(["cat", "/srv/sidecar/note.txt"], container="sidecar").result().stdout == "for the sidecar"
        assert sb.read_file("note.txt", container="sidecar").result() == b"for the sidecar"
        assert sb.exec(["test", "-e", "/srv/sidecar/note.txt"]).result().returncode == 1
        # Localhost and the hostname are the Pod's.
        hostnames = {sb.exec(["hostname"], container=name).result().stdout for name in ("app", "sidecar")}
        assert len(hostnames) == 1, hostnames

        with pytest.raises(SandboxValidationError) as refused:
            sb.exec(["true"], container="ghost").result()
        assert 'no container named "ghost"' in str(refused.value)
        with pytest.raises(SandboxValidationError):
            list(sb.stream_logs(container="ghost"))
    assert processes_with(mark) == []


@pytest.mark.skipif(not NAMESPACES, reason="plain processes run one container only")
def test_a_sidecar_that_ends_shows_its_own_end_while_the_sandbox_runs(mark):
    one_shot = Container(
        image="busybox:1.36",
        name="migrate",
        command="sh",
        args=["-c", "exit 3"],
        environment_variables=sandbox_env(mark, ROLE="migrate"),
        resources=RESOURCES,
    )
    with Sandbox.run(
        containers=[containers(mark)[0], one_shot], placement_mode="cks", runner_ids=[RUNNER]
    ) as sb:
        sb.wait(timeout=WAIT)
        # Its log ends once its exit is known; the world hears of it right after.
        list(sb.stream_logs(container="migrate", follow=True))
        deadline = time.monotonic() + WAIT
        while True:
            assert sb.get_status().value == "running"
            statuses = {status.name: status for status in sb.container_statuses}
            if statuses["migrate"].state.value != "running" or time.monotonic() > deadline:
                break
        assert (statuses["migrate"].state.value, statuses["migrate"].exit_code) == ("failed", 3), statuses
        assert statuses["app"].state.value == "running", statuses
    assert processes_with(mark) == []


@pytest.mark.skipif(NAMESPACES, reason="namespaces run every container (the test above)")
def test_plain_processes_fail_a_sandbox_of_several_containers_with_the_reason(mark):
    sb = Sandbox.run(containers=containers(mark), placement_mode="cks", runner_ids=[RUNNER])
    with pytest.raises(SandboxFailedError) as failed:
        sb.wait(timeout=WAIT)
    assert "namespaces isolation" in str(failed.value)
    sb.stop(missing_ok=True).result()
