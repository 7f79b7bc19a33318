"""Serverless placement (issue 14, item 10) as the published client uses it: `placement_mode=
"serverless"` runs on the values' serverless pool with no runner and no SUNK, is listed and read
back with its mode, stays inside its organization, and a full pool refuses with the reason on
which `placement_spillover="serverless_then_cks"` spills over to the CKS runner. The client's
default placement (no mode) still lands on the runner.

The pool's quota is lowered for this module (ApplyValues, merged) and the values are put back
after it, so the rest of the suite runs on the values it started with.
"""

from __future__ import annotations

import os

import grpc
import pytest

from conftest import NAMESPACES, RUNNER, WAIT, emulator, processes_with, sandbox_env
from cwsandbox import Sandbox, SandboxStatus
from cwsandbox._proto import sandbox_pb2, sandbox_pb2_grpc
from cwsandbox.exceptions import SandboxNotFoundError, SandboxResourceExhaustedError

POOL = "serverless"


@pytest.fixture(scope="module", autouse=True)
def small_pool():
    before = emulator("GetValues", {})["values"]
    emulator("ApplyValues", {"values": {"serverless": {"maxSandboxesPerOrganization": 1}}, "mode": "APPLY_MODE_MERGE"})
    yield
    emulator("ApplyValues", {"values": before, "mode": "APPLY_MODE_REPLACE"})


def serverless(mark: str, **kwargs) -> Sandbox:
    return Sandbox.run(placement_mode="serverless", environment_variables=sandbox_env(mark), **kwargs)


def pod_of(sandbox_id: str) -> dict:
    [pod] = emulator("ListPods", {"labelSelector": f"sandbox.coreweave.com/sandbox-id={sandbox_id}"})["pods"]
    return pod


def spec_mode(sandbox_id: str) -> int:
    """The mode GetSandbox echoes (the client keeps no property for it)."""
    target = os.environ["CWSANDBOX_BASE_URL"].removeprefix("http://")
    with grpc.insecure_channel(target) as channel:
        stub = sandbox_pb2_grpc.SandboxServiceStub(channel)
        metadata = [("authorization", f"Bearer {os.environ['CWSANDBOX_API_KEY']}")]
        reply = stub.GetSandbox(sandbox_pb2.GetSandboxRequest(sandbox_id=sandbox_id), metadata=metadata, timeout=WAIT)
    return reply.spec.mode


def test_serverless_placement_runs_on_the_pool_without_a_runner(mark):
    with serverless(mark) as sb:
        result = sb.exec(["sh", "-c", "echo $CWSANDBOX_TEST_SANDBOX"]).result()
        assert result.stdout == f"{mark}\n", result
        if NAMESPACES:
            # Plain processes share the host's hostname.
            assert sb.exec(["hostname"]).result().stdout == f"sandbox-{sb.sandbox_id}\n"
        assert sb.runner_id == POOL
        pod = pod_of(sb.sandbox_id)
        assert pod["spec"]["nodeName"].startswith("node-serverless-"), pod["spec"]
        assert pod["spec"]["schedulerName"] == "default-scheduler", "no runner policy, no SUNK"
        assert "placeholderJobId" not in pod["origin"], pod["origin"]
        assert spec_mode(sb.sandbox_id) == sandbox_pb2.SANDBOX_MODE_SERVERLESS
        listed = [listed.sandbox_id for listed in Sandbox.list(runner_ids=[POOL]).result()]
        assert listed == [sb.sandbox_id]
    assert sb.status == SandboxStatus.COMPLETED
    assert processes_with(mark) == []


def test_serverless_sandboxes_are_invisible_to_another_organization(mark, monkeypatch):
    tenant = emulator("CreateTenant", {})["tenant"]
    try:
        with serverless(mark) as sb:
            sb.wait(timeout=WAIT)
            monkeypatch.setenv("CWSANDBOX_API_KEY", tenant["userToken"])
            with pytest.raises(SandboxNotFoundError):
                Sandbox.from_id(sb.sandbox_id).result()
            assert Sandbox.list(runner_ids=[POOL]).result() == []
            monkeypatch.undo()
    finally:
        emulator("DeleteTenant", {"organization": tenant["organization"]})


def test_serverless_pool_when_full_refuses_and_serverless_then_cks_spills_over_to_the_runner(mark):
    with serverless(mark) as first:
        first.wait(timeout=WAIT)
        # Strict placement: the refusal reaches the caller with the spill-over reason.
        with pytest.raises(SandboxResourceExhaustedError) as refused:
            serverless(mark).wait(timeout=WAIT)
        assert refused.value.reason == "CWSANDBOX_RUNNER_CAPACITY_EXHAUSTED", refused.value
        assert refused.value.retry_delay is not None
        # Spill-over: the client retries once on CKS, where the runner takes it.
        with serverless(mark, placement_spillover="serverless_then_cks") as spilled:
            assert spilled.exec(["echo", "on cks"]).result().stdout == "on cks\n"
            assert spilled.runner_id == RUNNER
            assert pod_of(spilled.sandbox_id)["spec"]["nodeName"].startswith("node-cpu-")
            assert spec_mode(spilled.sandbox_id) == sandbox_pb2.SANDBOX_MODE_CKS
    assert processes_with(mark) == []


def test_serverless_is_not_the_clients_default_placement(mark):
    with Sandbox.run(environment_variables=sandbox_env(mark)) as sb:
        assert sb.exec(["true"]).result().returncode == 0
        assert sb.runner_id == RUNNER
        assert spec_mode(sb.sandbox_id) == sandbox_pb2.SANDBOX_MODE_UNSPECIFIED
