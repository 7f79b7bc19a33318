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
        run(security_context=SecurityContext(read_only_root_filesystem=True)).wait(timeout=WAIT)
    assert raised.value.reason == "CWSANDBOX_NOT_IMPLEMENTED", raised.value
    assert "sandbox.spec.containers[0].security_context.read_only_root_filesystem" in str(raised.value), raised.value
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
    """What the client's W&B auth mode (`WandbAuth(entity=…, project=…)`) sends, without needing
    the wandb package here: the headers `_resolve_wandb_auth` builds."""

    def __init__(self, api_key: str, entity: str | None = None, project: str | None = None):
        self.headers = {"x-wandb-api-key": api_key, "x-wandb-sdk-version": "0.22.0"}
        if entity:
            self.headers["x-entity-id"] = entity
        if project:
            self.headers["x-project-name"] = project

    def resolve_auth(self, *, base_url: str) -> AuthHeaders:
        return AuthHeaders(headers=dict(self.headers), strategy="wandb_api_key")


def test_wandb_auth_acts_for_the_keys_entity(mark):
    # Issue 34 item 9: the values' auth.wandbKeys map a key and entity to a principal. The key's
    # default entity (ml-team) is the default organization: its sandbox is the token user's too.
    sb = Sandbox.run(
        placement_mode="cks",
        runner_ids=[RUNNER],
        environment_variables={"CWSANDBOX_TEST_RUN": mark},
        auth=WandbHeaders("wandb-key-alice", project="rl-evals"),
    )
    try:
        sb.wait(timeout=WAIT)
        assert sb.exec(["echo", "hi"]).result().stdout == "hi\n"
        assert sb.sandbox_id in [other.sandbox_id for other in Sandbox.list(runner_ids=[RUNNER]).result()]
        # Another entity of the same key is another organization, which does not see it.
        elsewhere = Sandbox.list(auth=WandbHeaders("wandb-key-alice", entity="other-team")).result()
        assert sb.sandbox_id not in [other.sandbox_id for other in elsewhere]
    finally:
        sb.stop().result()


def test_unknown_wandb_keys_and_entities_are_the_clients_auth_errors():
    with pytest.raises(CWSandboxAuthenticationError, match="unknown W&B API key"):
        Sandbox.list(auth=WandbHeaders("no-such-key")).result()
    with pytest.raises(Exception, match="no access to entity"):
        Sandbox.list(auth=WandbHeaders("wandb-key-alice", entity="nobodys-team")).result()


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
