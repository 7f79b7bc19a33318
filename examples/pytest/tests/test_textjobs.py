"""The library's tests, against the emulator (`pytest`) or a real service
(`pytest --cwsandbox-target=URL`, with your own CWSANDBOX_API_KEY and CWSANDBOX_RUNNER_ID: the
tests that use the emulator's faults or Slurm views are skipped there)."""

import pytest
import textjobs
from cwsandbox import Sandbox
from cwsandbox.exceptions import CWSandboxError


def test_exec(cwsandbox_tenant):
    assert textjobs.run(["echo", "hello"], cwsandbox_tenant.runner_id) == "hello\n"


def test_a_failing_command_raises(cwsandbox_tenant):
    with pytest.raises(textjobs.JobFailed) as failed:
        textjobs.run(["sh", "-c", "echo nope >&2; exit 3"], cwsandbox_tenant.runner_id)
    assert failed.value.returncode == 3
    assert "nope" in str(failed.value)


def test_files(cwsandbox_tenant):
    assert textjobs.word_count("the quick brown fox", cwsandbox_tenant.runner_id) == 4
    assert textjobs.upper_case(b"shout\n", cwsandbox_tenant.runner_id) == b"SHOUT\n"


# The example. The published client retries a create only when the runner says it is
# overloaded or out of capacity (ErrorInfo reason) and the caller gave it a retry budget: hence
# `reason`, `retry_delay` and `create_retry_budget_seconds`.
def test_retry(cwsandbox_tenant):
    cwsandbox_tenant.faults.add(
        method="CreateSandbox", code="UNAVAILABLE", times=2, reason="CWSANDBOX_RUNNER_OVERLOADED", retry_delay=0.01
    )
    with Sandbox.run(
        placement_mode="cks", runner_ids=[cwsandbox_tenant.runner_id], create_retry_budget_seconds=30
    ) as sb:
        assert sb.exec(["true"]).result().returncode == 0
    assert cwsandbox_tenant.faults.hits("CreateSandbox") == 2
    assert any(sb.sandbox_id in job["name"] for job in cwsandbox_tenant.slurm.jobs())


def test_the_library_rides_out_a_busy_runner(cwsandbox_tenant):
    cwsandbox_tenant.faults.add(
        method="CreateSandbox", code="UNAVAILABLE", times=1, reason="CWSANDBOX_RUNNER_OVERLOADED", retry_delay=0.01
    )
    assert textjobs.word_count("one two", cwsandbox_tenant.runner_id) == 2
    assert cwsandbox_tenant.faults.hits("CreateSandbox") == 1


def test_a_refused_create_surfaces_as_the_clients_error(cwsandbox_tenant):
    cwsandbox_tenant.faults.add(method="CreateSandbox", code="PERMISSION_DENIED", message="not in this project")
    with pytest.raises(CWSandboxError):
        textjobs.run(["true"], cwsandbox_tenant.runner_id)
    assert cwsandbox_tenant.faults.hits("CreateSandbox") == 1


def test_an_output_stream_cut_midway_surfaces_as_the_clients_error(cwsandbox_tenant):
    with textjobs.sandbox(cwsandbox_tenant.runner_id) as sb:
        # StreamExec lets one message through, then ends UNAVAILABLE.
        cwsandbox_tenant.faults.add(method="StreamExec", stream_messages=1, code="UNAVAILABLE", message="cut")
        with pytest.raises(CWSandboxError, match="cut"):
            sb.exec(["sh", "-c", "echo one; sleep 0.1; echo two"]).result()
        assert cwsandbox_tenant.faults.hits("StreamExec") == 1


def test_sunk_placement(cwsandbox_tenant):
    with textjobs.sandbox(cwsandbox_tenant.runner_id) as sb:
        assert sb.exec(["true"]).result().returncode == 0
        [job] = [job for job in cwsandbox_tenant.slurm.jobs() if sb.sandbox_id in job["name"]]
        # SUNK holds a Slurm node for the sandbox's Pod with a placeholder job while it runs.
        assert job["state"] == "RUNNING"
        assert job["partition"]
        assert job["node_list"]
        [pod] = [pod for pod in cwsandbox_tenant.pods() if pod.get("origin", {}).get("sandboxId") == sb.sandbox_id]
        assert pod["status"]["phase"] == "Running"
