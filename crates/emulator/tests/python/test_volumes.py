"""Scratch volumes as the published client asks for them (`volumes=[ScratchVolumeOptions(...)]`,
`Container(volume_mounts=[VolumeMount(...)])`): an empty directory of the sandbox's at each of its
mounts, read-only or a sub-path where asked, gone with the sandbox; a sized one on disk evicts its
sandbox once it holds more than its size, as the kubelet evicts a Pod whose `emptyDir` passed its
`sizeLimit`; a memory-backed one is a tmpfs of its size (a write past it fails with ENOSPC inside
the sandbox), refused by name where the emulator cannot mount one (its ready file says so).
"""

from __future__ import annotations

import pytest

from conftest import NAMESPACES, RUNNER, UNAVAILABLE, WAIT, processes_with, run, sandbox_env
from cwsandbox import Container, Sandbox, SandboxStatus, ScratchVolumeOptions, VolumeMount
from cwsandbox.exceptions import SandboxError

pytestmark = pytest.mark.skipif(not NAMESPACES, reason="plain processes have no root of their own to mount in")

RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}}


def test_a_scratch_volume_starts_empty_and_holds_what_is_written(mark):
    volume = ScratchVolumeOptions(name="work", mount_path="/data")
    with run(mark=mark, volumes=[volume]) as sb:
        assert sb.exec(["sh", "-c", "ls -A /data | wc -l"]).result().stdout.strip() == "0"
        sb.write_file("/data/notes.txt", b"kept").result()
        assert sb.exec(["cat", "/data/notes.txt"]).result().stdout == "kept"
    # Another sandbox's volume of the same name is its own, empty.
    with run(mark=mark, volumes=[volume]) as other:
        assert other.exec(["sh", "-c", "ls -A /data | wc -l"]).result().stdout.strip() == "0"
    assert processes_with(mark) == []


def test_containers_share_a_volume_through_their_own_mounts(mark):
    writer = Container(
        image="python:3.11",
        name="writer",
        primary=True,
        command="sh",
        args=["-c", "echo from-writer > /out/shared.txt; exec sleep 1000"],
        environment_variables=sandbox_env(mark),
        volume_mounts=[VolumeMount(volume="exchange", mount_path="/out")],
        resources=RESOURCES,
    )
    reader = Container(
        image="busybox:1.36",
        name="reader",
        command="sh",
        args=["-c", "exec sleep 1000"],
        environment_variables=sandbox_env(mark),
        volume_mounts=[VolumeMount(volume="exchange", mount_path="/in", read_only=True)],
        resources=RESOURCES,
    )
    volumes = [ScratchVolumeOptions(name="exchange")]
    with Sandbox.run(
        containers=[writer, reader], volumes=volumes, placement_mode="cks", runner_ids=[RUNNER]
    ) as sb:
        sb.wait(timeout=WAIT)
        seen = sb.exec(
            ["sh", "-c", "until [ -s /in/shared.txt ]; do sleep 0.01; done; cat /in/shared.txt"],
            container="reader",
            timeout_seconds=WAIT,
        ).result()
        assert seen.stdout == "from-writer\n"
        refused = sb.exec(["sh", "-c", "echo x > /in/other 2>/dev/null || echo read-only"], container="reader")
        assert refused.result().stdout == "read-only\n"
    assert processes_with(mark) == []


def test_a_sized_volume_past_its_size_gets_the_sandbox_evicted(mark):
    sb = run(mark=mark, volumes=[ScratchVolumeOptions(name="work", mount_path="/data", size="1Mi")])
    sb.wait(timeout=WAIT)
    # Up to its size and past it, writes succeed: a volume on disk is a directory, not a file
    # system of its size. The kubelet's next look (every 10 s) evicts the sandbox.
    filled = sb.exec(["sh", "-c", "head -c 2097152 /dev/zero > /data/fill && echo written"]).result()
    assert filled.stdout == "written\n", filled
    with pytest.raises(SandboxError) as raised:
        sb.wait_until_complete(timeout=WAIT).result()
    assert 'Evicted: Usage of EmptyDir volume "work" exceeds the limit "1Mi".' in str(raised.value), raised.value
    assert Sandbox.from_id(sb.sandbox_id).result().status == SandboxStatus.FAILED
    assert processes_with(mark) == []


def test_a_sized_volume_within_its_size_keeps_its_sandbox_running(mark):
    with run(mark=mark, volumes=[ScratchVolumeOptions(name="work", mount_path="/data", size="1Gi")]) as sb:
        sb.write_file("/data/probe", b"scratch-ok").result()
        assert sb.exec(["cat", "/data/probe"]).result().stdout == "scratch-ok"
        assert sb.read_file("/data/probe").result() == b"scratch-ok"


MEMORY_REFUSED = [line for line in UNAVAILABLE if line.startswith("memory-backed scratch volumes")]


@pytest.mark.skipif(bool(MEMORY_REFUSED), reason="the emulator cannot mount a tmpfs here")
def test_a_memory_backed_volume_is_a_tmpfs_of_its_size(mark):
    volume = ScratchVolumeOptions(name="work", mount_path="/data", size="1Mi", medium="memory")
    with run(mark=mark, volumes=[volume]) as sb:
        assert sb.exec(["stat", "-f", "-c", "%T", "/data"]).result().stdout == "tmpfs\n"
        filled = sb.exec(["sh", "-c", "head -c 2097152 /dev/zero > /data/fill; echo $?; wc -c < /data/fill"])
        result = filled.result()
        status, size = result.stdout.split()
        assert status == "1" and int(size) <= 1 << 20, result
        assert "No space left on device" in result.stderr, result
        # The write failed inside; the sandbox goes on, with nothing for the kubelet to evict.
        sb.exec(["rm", "/data/fill"]).result()
        sb.write_file("/data/note", b"kept").result()
        assert sb.read_file("/data/note").result() == b"kept"
        assert Sandbox.from_id(sb.sandbox_id).result().status == SandboxStatus.RUNNING
    assert processes_with(mark) == []


@pytest.mark.skipif(not MEMORY_REFUSED, reason="the emulator mounts a tmpfs here")
def test_a_memory_backed_volume_is_refused_by_name_where_no_tmpfs_can_be_mounted(mark):
    with pytest.raises(SandboxError) as refused:
        with run(mark=mark, volumes=[ScratchVolumeOptions(name="work", mount_path="/data", medium="memory")]):
            pass
    assert refused.value.reason == "CWSANDBOX_NOT_IMPLEMENTED", refused.value
    assert "sandbox.spec.volumes[0].scratch.medium" in str(refused.value)
