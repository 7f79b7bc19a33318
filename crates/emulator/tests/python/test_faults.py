"""Faults injected through EmulatorService, as the published client meets them: its retries are
observable in the fault's hit count, and each injected status becomes the client's own exception.

The faults are installed over Connect JSON with the operator's token (conftest's `emulator`)
and removed after each test, so the rest of the suite runs unharmed.
"""

from __future__ import annotations

import os

import pytest

from conftest import WAIT, add_fault, hits, processes_with, run
from cwsandbox import Sandbox, SandboxStatus
from cwsandbox.exceptions import (
    CWSandboxAuthenticationError,
    SandboxFailedError,
    SandboxResourceExhaustedError,
    SandboxUnavailableError,
)


pytestmark = pytest.mark.usefixtures("no_faults_left")


def test_transient_get_failures_are_retried_by_the_client_and_counted(mark):
    fault = add_fault(
        match={"method": "GetSandbox"},
        action={"code": "UNAVAILABLE", "retryDelay": "0.05s"},
        schedule={"times": 2},
    )
    sb = run(mark=mark)
    sb.wait(timeout=WAIT)
    assert sb.exec(["true"]).result().returncode == 0
    sb.stop().result()
    assert hits(fault) == 2


def test_an_overloaded_runner_is_retried_within_the_create_budget(mark):
    fault = add_fault(
        match={"method": "CreateSandbox"},
        action={"code": "UNAVAILABLE", "reason": "CWSANDBOX_RUNNER_OVERLOADED", "retryDelay": "0.05s"},
        schedule={"times": 2},
    )
    sb = run(mark=mark, create_retry_budget_seconds=WAIT)
    sb.wait(timeout=WAIT)
    sb.stop().result()
    assert hits(fault) == 2


@pytest.mark.parametrize("mode", ["gateway", "direct"])
def test_injected_statuses_become_the_clients_exceptions(mark, mode):
    sandbox = run(mark=mark, data_plane_mode=mode)
    sandbox.wait(timeout=WAIT)
    # The direct path replays a transient status met before the first frame once; the gateway
    # never retries (docs/facts/client-contract.md#retries).
    transient_attempts = 2 if mode == "direct" else 1
    for code, error, attempts in [
        ("PERMISSION_DENIED", CWSandboxAuthenticationError, 1),
        ("RESOURCE_EXHAUSTED", SandboxResourceExhaustedError, transient_attempts),
    ]:
        fault = add_fault(match={"method": "StreamExec"}, action={"code": code}, schedule={"times": attempts})
        with pytest.raises(error, match=f"injected by fault {fault}"):
            sandbox.exec(["true"]).result()
        assert hits(fault) == attempts
    assert sandbox.exec(["true"]).result().returncode == 0, "each fault is spent"
    sandbox.stop().result()
    assert processes_with(mark) == []

    add_fault(match={"method": "CreateSandbox"}, action={"code": "PERMISSION_DENIED"}, schedule={"times": 1})
    with pytest.raises(CWSandboxAuthenticationError):
        Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]]).wait(timeout=WAIT)


def test_a_stream_exec_cut_mid_output_is_the_clients_stream_error(sandbox):
    fault = add_fault(
        match={"method": "StreamExec"},
        action={"code": "UNAVAILABLE", "message": "cut by the test", "streamMessages": 2},
        schedule={"times": 1},
    )
    with pytest.raises(SandboxUnavailableError, match="cut by the test"):
        sandbox.exec(["sh", "-c", "echo one; sleep 0.2; echo two"]).result()
    assert hits(fault) == 1


def test_an_oom_killed_main_process_fails_the_sandbox_with_137(mark):
    add_fault(match={"method": "CreateSandbox"}, domain={"oomKillAfter": "3s"}, schedule={"times": 1})
    sb = run(mark=mark)
    sb.wait(timeout=WAIT)
    # The main process is killed 3 s (virtual, here real) after its start.
    with pytest.raises(SandboxFailedError) as raised:
        sb.wait_until_complete(timeout=WAIT).result()
    assert "OOMKilled" in str(raised.value) and "exit code 137" in str(raised.value)
    ended = Sandbox.from_id(sb.sandbox_id).result()
    assert ended.status == SandboxStatus.FAILED
    assert processes_with(mark) == []
