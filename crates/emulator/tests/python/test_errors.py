"""The error mapping of docs/facts/client-contract.md#error-mapping and the gotchas that depend on
the server (G1–G18 are those of docs/facts/client-contract.md#g1 and after)."""

from __future__ import annotations

import os

import pytest
from conftest import RUNNER, WAIT, processes_with, run

from cwsandbox import (
    AuthHeaders,
    CWSandboxAuthenticationError,
    NetworkOptions,
    Sandbox,
    SandboxError,
    SandboxFailedError,
    SandboxNotFoundError,
    SandboxNotRunningError,
    SandboxStatus,
    SandboxTerminatedError,
    SandboxValidationError,
    SecurityContext,
)

MISSING = "0000000000000000"


def test_not_found_is_sandbox_not_found_error():
    with pytest.raises(SandboxNotFoundError) as raised:
        Sandbox.from_id(MISSING).result()
    assert raised.value.reason == "CWSANDBOX_SANDBOX_NOT_FOUND"
    with pytest.raises(SandboxNotFoundError):
        Sandbox.delete(MISSING).result()
    # G14: missing_ok swallows NOT_FOUND on the client side.
    Sandbox.delete(MISSING, missing_ok=True).result()
    with pytest.raises(SandboxNotFoundError) as runner:
        run(runner_ids=["no-such-runner"]).wait(timeout=WAIT)
    assert runner.value.reason == "CWSANDBOX_RUNNER_NOT_FOUND"


def test_invalid_input_is_a_validation_error_naming_the_field():
    with pytest.raises(SandboxValidationError) as raised:
        run(max_lifetime_seconds=10**9).wait(timeout=WAIT)
    fields = [violation.field for violation in raised.value.field_violations]
    assert fields == ["sandbox.spec.maxLifetimeSeconds"], raised.value.field_violations


def test_an_option_the_emulator_does_not_emulate_is_refused_by_name():
    # The fidelity rule: never accepted and silently ignored (README, "Request fields").
    with pytest.raises(SandboxError) as raised:
        run(
            security_context=SecurityContext(read_only_root_filesystem=True),
            network=NetworkOptions(deny_ingress=True),
        ).wait(timeout=WAIT)
    assert raised.value.reason == "CWSANDBOX_NOT_IMPLEMENTED", raised.value
    for field in (
        "sandbox.spec.containers[0].security_context.read_only_root_filesystem",
        "sandbox.spec.network.deny_ingress",
    ):
        assert field in str(raised.value), raised.value
    # At their defaults the same options ask for what the emulator does: accepted.
    with run(security_context=SecurityContext(privileged=False), network=NetworkOptions(deny_egress=False)) as sb:
        assert sb.exec(["true"]).result().returncode == 0


def test_tokens(monkeypatch):
    # G12: without CWSANDBOX_API_KEY the client sends no header; the emulator requires one.
    monkeypatch.delenv("CWSANDBOX_API_KEY")
    with pytest.raises(CWSandboxAuthenticationError):
        Sandbox.list().result()
    monkeypatch.setenv("CWSANDBOX_API_KEY", "not-a-token")
    with pytest.raises(CWSandboxAuthenticationError):
        Sandbox.list().result()
    # A user of the same organization works as well as the admin.
    monkeypatch.setenv("CWSANDBOX_API_KEY", os.environ["USER_TOKEN"])
    Sandbox.list(runner_ids=[RUNNER]).result()


class WandbHeaders:
    """What the client's W&B auth mode sends (without needing the wandb package here)."""

    def resolve_auth(self, *, base_url: str) -> AuthHeaders:
        return AuthHeaders(headers={"x-wandb-api-key": "wandb-key", "x-wandb-sdk-version": "0.0.0"}, strategy="wandb")


def test_wandb_credentials_are_refused_with_the_clients_auth_error():
    # Issue 14 item 14: W&B auth is not emulated; the refusal says so and is the client's auth error.
    with pytest.raises(CWSandboxAuthenticationError, match="W&B credentials"):
        Sandbox.list(auth=WandbHeaders()).result()


def test_a_failing_main_process_fails_the_sandbox_with_its_reason(mark):
    # G9: FAILED raises with state_reason.
    sb = run("sh", "-c", "exit 3", mark=mark)
    with pytest.raises(SandboxFailedError) as raised:
        sb.wait_until_complete(timeout=WAIT).result()
    assert "exited with code 3" in str(raised.value)
    assert Sandbox.from_id(sb.sandbox_id).result().status == SandboxStatus.FAILED


def test_a_sandbox_that_completes_while_starting_is_not_an_error(mark):
    # G9: COMPLETED during the wait for RUNNING returns quietly.
    sb = run("true", mark=mark)
    sb.wait(timeout=WAIT)
    sb.wait_until_complete(timeout=WAIT).result()
    assert sb.status == SandboxStatus.COMPLETED and sb.returncode == 0


def test_the_lifetime_ends_the_sandbox_and_its_processes(mark):
    sb = run(mark=mark, max_lifetime_seconds=1)
    with pytest.raises(SandboxTerminatedError):
        sb.wait_until_complete(timeout=WAIT).result()
    assert "lifetime" in (Sandbox.from_id(sb.sandbox_id).result().status_reason or "")
    assert processes_with(mark) == []


def test_operations_on_a_stopped_sandbox(mark):
    sb = run(mark=mark)
    sb.wait(timeout=WAIT)
    sb.stop().result()
    # A second stop, and one of a sandbox already gone, succeed (G2: it stays readable).
    sb.stop().result()
    sb.stop(missing_ok=True).result()
    ended = Sandbox.from_id(sb.sandbox_id).result()
    with pytest.raises(SandboxNotRunningError):
        ended.exec(["true"]).result()
    with pytest.raises(SandboxNotRunningError):
        ended.read_file("/tmp/x").result()


def test_listing_hides_ended_sandboxes_unless_asked(mark):
    # G15: the server filters; G16: it picks the page size.
    sb = run(mark=mark, tags=[mark])
    sb.wait(timeout=WAIT)
    assert [s.sandbox_id for s in Sandbox.list(tags=[mark]).result()] == [sb.sandbox_id]
    assert [s.sandbox_id for s in Sandbox.list(tags=[mark], status="running").result()] == [sb.sandbox_id]
    sb.stop().result()
    assert Sandbox.list(tags=[mark]).result() == []
    assert [s.sandbox_id for s in Sandbox.list(tags=[mark], show_terminated=True).result()] == [sb.sandbox_id]
    assert [s.sandbox_id for s in Sandbox.list(tags=[mark], status="completed").result()] == [sb.sandbox_id]
