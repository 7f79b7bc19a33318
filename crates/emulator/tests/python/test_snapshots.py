"""File-system snapshots as the published client takes them: `sb.snapshot()`, `stop(snapshot_on_stop=True)`,
`Sandbox.get_snapshot/list_snapshots/delete_snapshot`, and a new sandbox's volume restored with
`FileSystemSnapshotOptions(file_system_snapshot_id=...)`; the typed errors for a snapshot that is not
there and a stop that cannot capture one.
"""

from __future__ import annotations

import pytest

from conftest import NAMESPACES, processes_with, run
from cwsandbox import FileSystemSnapshotOptions, Sandbox, ScratchVolumeOptions
from cwsandbox.exceptions import SandboxError, SnapshotNotFoundError

pytestmark = pytest.mark.skipif(not NAMESPACES, reason="plain processes have no root of their own to mount in")


def workspace(snapshot_id: str | None = None) -> FileSystemSnapshotOptions:
    return FileSystemSnapshotOptions(mount_path="/workspace", file_system_snapshot_id=snapshot_id)


def test_a_snapshot_taken_while_running_restores_into_a_new_sandbox(mark):
    with run(mark=mark, file_system_snapshot=workspace()) as sb:
        sb.exec(["sh", "-c", "mkdir -p /workspace/src && echo 'print(42)' > /workspace/src/main.py"]).result()
        snapshot_id = sb.snapshot().result()
        # Written after the capture: not in it.
        sb.exec(["sh", "-c", "echo later > /workspace/later.txt"]).result()
        source_id = sb.sandbox_id
    record = Sandbox.get_snapshot(snapshot_id).result()
    assert record.status.value == "ready", record
    assert record.source_sandbox_id == source_id
    assert record.source_volume_name == "workspace"
    assert record.trigger.value == "manual"
    assert record.size_bytes > 0
    assert record.completed_at is not None

    with run(mark=mark, file_system_snapshot=workspace(snapshot_id)) as restored:
        assert restored.exec(["cat", "/workspace/src/main.py"]).result().stdout == "print(42)\n"
        assert restored.exec(["sh", "-c", "ls /workspace"]).result().stdout.split() == ["src"]
    assert processes_with(mark) == []


def test_stop_with_snapshot_on_stop_captures_the_volume_then_stops(mark):
    sb = run(mark=mark, volumes=[ScratchVolumeOptions(name="results", mount_path="/results")])
    sb.exec(["sh", "-c", "echo 0.93 > /results/accuracy"]).result()
    sb.stop(snapshot_on_stop=True).result()
    assert sb.status.value in ("completed", "terminated", "failed"), sb.status
    snapshot_id = sb.file_system_snapshot_id
    assert snapshot_id
    record = Sandbox.get_snapshot(snapshot_id).result()
    assert (record.status.value, record.trigger.value, record.source_volume_name) == ("ready", "on_delete", "results")
    assert snapshot_id in [snapshot.file_system_snapshot_id for snapshot in Sandbox.list_snapshots().result()]
    assert processes_with(mark) == []

    restored_volume = ScratchVolumeOptions(name="results", mount_path="/seen", restore_from_snapshot_id=snapshot_id)
    with run(mark=mark, volumes=[restored_volume]) as again:
        assert again.exec(["cat", "/seen/accuracy"]).result().stdout == "0.93\n"

    Sandbox.delete_snapshot(snapshot_id).result()
    with pytest.raises(SnapshotNotFoundError):
        Sandbox.get_snapshot(snapshot_id).result()
    Sandbox.delete_snapshot(snapshot_id, missing_ok=True).result()
    with pytest.raises(SandboxError) as refused:
        with run(mark=mark, file_system_snapshot=workspace(snapshot_id)):
            pass
    assert "CWSANDBOX_FSS_NOT_FOUND" in str(refused.value) or "not found" in str(refused.value)
    assert processes_with(mark) == []


def test_a_snapshot_of_a_sandbox_without_a_scratch_volume_is_refused_by_the_field(mark):
    with run(mark=mark) as sb:
        with pytest.raises(SandboxError) as refused:
            sb.snapshot().result()
    assert "scratch" in str(refused.value)
    with pytest.raises(SnapshotNotFoundError):
        Sandbox.get_snapshot("00000000-0000-0000-0000-000000000000").result()
