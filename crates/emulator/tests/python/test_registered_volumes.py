"""Registered volumes as the published client manages them: `Volume.create(...)` of a claim the
values list, `wait_until_ready()`, `RegisteredVolumeOptions` mounts shared between sandboxes (and
kept after them), `attached_volume_ids`, the in-use delete and the typed errors.
"""

from __future__ import annotations

import pytest

from conftest import NAMESPACES, RUNNER, emulator, processes_with, run
from cwsandbox import PvcVolumeSource, RegisteredVolumeOptions, Sandbox, Volume, VolumeState
from cwsandbox.exceptions import SandboxError, VolumeError, VolumeInUseError, VolumeNotFoundError

pytestmark = pytest.mark.skipif(not NAMESPACES, reason="plain processes have no root of their own to mount in")

CLAIMS = [{"namespace": "datasets", "name": "shared", "capacity": "20Gi", "accessModes": ["ReadWriteMany"]}]


@pytest.fixture(scope="module", autouse=True)
def claims():
    before = emulator("GetValues", {})["values"]
    emulator("ApplyValues", {"values": {"persistentVolumeClaims": CLAIMS}, "mode": "APPLY_MODE_MERGE"})
    yield
    emulator("ApplyValues", {"values": before, "mode": "APPLY_MODE_REPLACE"})


def register(volume_id: str, claim: str = "shared", **kwargs) -> Volume:
    pvc = PvcVolumeSource(runner_id=RUNNER, namespace="datasets", claim_name=claim)
    return Volume.create(volume_id, pvc=pvc, **kwargs).result()


def test_a_registered_volume_is_shared_by_the_sandboxes_that_mount_it(mark):
    volume_id = f"shared-{mark[:8]}"
    created = register(volume_id, description="training data")
    assert created.state == VolumeState.VALIDATING
    ready = created.wait_until_ready(timeout=30).result()
    assert (ready.state, ready.capacity, ready.access_modes) == (VolumeState.READY, "20Gi", ("ReadWriteMany",))

    mount = RegisteredVolumeOptions(name="data", volume_id=volume_id, mount_path="/data")
    with run(mark=mark, volumes=[mount], runner_ids=None) as writer:
        writer.exec(["sh", "-c", f"echo {mark} > /data/marker"]).result()
        assert writer.attached_volume_ids == (volume_id,)
        assert Volume.get(volume_id).result().attached_sandbox_count == 1
        with pytest.raises(VolumeInUseError):
            Volume.get(volume_id).result().delete().result()
    read_only = RegisteredVolumeOptions(name="data", volume_id=volume_id, mount_path="/in", read_only=True)
    with run(mark=mark, volumes=[read_only]) as reader:
        assert reader.exec(["cat", "/in/marker"]).result().stdout == f"{mark}\n"
        denied = reader.exec(["sh", "-c", "touch /in/x 2>/dev/null && echo written || echo refused"]).result()
        assert denied.stdout == "refused\n"
    assert processes_with(mark) == []

    Volume.get(volume_id).result().delete().result()
    with pytest.raises(VolumeNotFoundError):
        Volume.get(volume_id).result()


def test_a_volume_whose_claim_is_missing_errors_and_cannot_be_mounted(mark):
    volume_id = f"missing-{mark[:8]}"
    created = register(volume_id, claim="no-such-claim")
    with pytest.raises(VolumeError) as failed:
        created.wait_until_ready(timeout=30).result()
    assert "no-such-claim" in str(failed.value)
    with pytest.raises(SandboxError) as refused:
        with run(mark=mark, volumes=[RegisteredVolumeOptions(name="d", volume_id=volume_id, mount_path="/d")]):
            pass
    assert "CWSANDBOX_VOLUME_NOT_READY" in str(refused.value) or "ERROR" in str(refused.value)
    with pytest.raises(SandboxError):
        with run(mark=mark, volumes=[RegisteredVolumeOptions(name="d", volume_id="never-registered", mount_path="/d")]):
            pass
    Volume.get(volume_id).result().delete().result()
    assert volume_id not in [volume.volume_id for volume in Volume.list().result()]
