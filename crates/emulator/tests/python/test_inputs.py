"""What a sandbox is handed at creation, as the published client sends it: secrets from the
values' secret stores (in the main process and every exec), mounted files (at their paths,
with their content) and the user its security context names.

The secret store is added to the values in force for this module (ApplyValues, merged) and the
values are put back after it, so the rest of the suite runs on the values it started with.
"""

from __future__ import annotations

import pytest

from conftest import NAMESPACES, WAIT, emulator, run
from cwsandbox import Secret, SecurityContext
from cwsandbox.exceptions import SandboxFailedError

STORE = {
    "secrets": {
        "hf-token": "hf_abc123",
        "database": {"user": "app", "password": "s3cret with spaces"},
    }
}


def main_saw(sandbox) -> str:
    """What the main command wrote to /tmp/main-saw, once it has (it runs on its own)."""
    waited = sandbox.exec(
        ["sh", "-c", "until [ -s /tmp/main-saw ]; do sleep 0.01; done; cat /tmp/main-saw"], timeout_seconds=WAIT
    )
    return waited.result().stdout


@pytest.fixture(scope="module", autouse=True)
def secret_store():
    before = emulator("GetValues", {})["values"]
    emulator("ApplyValues", {"values": {"secretStores": {"test-store": STORE}}, "mode": "APPLY_MODE_MERGE"})
    yield
    emulator("ApplyValues", {"values": before, "mode": "APPLY_MODE_REPLACE"})


def test_secrets_are_in_the_main_process_and_every_exec(mark):
    secrets = [
        Secret(store="test-store", name="hf-token", env_var="HF_TOKEN"),
        Secret(store="test-store", name="database", field="password", env_var="DB_PASSWORD"),
    ]
    with run(
        "sh", "-c", 'printf "%s|%s" "$HF_TOKEN" "$DB_PASSWORD" > /tmp/main-saw; exec sleep 1000',
        mark=mark, secrets=secrets,
    ) as sandbox:
        sandbox.wait()
        seen = sandbox.exec(["sh", "-c", 'printf "%s|%s" "$HF_TOKEN" "$DB_PASSWORD"']).result()
        assert seen.stdout == "hf_abc123|s3cret with spaces"
        if NAMESPACES:
            # Plain processes share the host's /tmp; the exec above already proves the variables.
            assert main_saw(sandbox) == "hf_abc123|s3cret with spaces"


@pytest.mark.parametrize(
    ("secret", "field"),
    [
        (Secret(store="no-such-store", name="hf-token", env_var="X"), "secretStores[0].storeName"),
        (Secret(store="test-store", name="no-such-secret", env_var="X"), "secretStores[0].secrets[0].path"),
        (Secret(store="test-store", name="database", field="no-such-field", env_var="X"), "secrets[0].field"),
    ],
)
def test_a_secret_that_is_not_there_refuses_the_sandbox_naming_the_field(mark, secret, field):
    with pytest.raises(Exception) as refused:
        with run(mark=mark, secrets=[secret]) as sandbox:
            sandbox.wait()
    assert field in str(refused.value), refused.value


@pytest.mark.skipif(not NAMESPACES, reason="plain processes have no root of their own for mounted files")
def test_mounted_files_are_at_their_paths_before_the_command_starts(mark):
    files = {"/app/config.json": b'{"answer": 42}', "/root/.cache/blob.bin": bytes(range(256))}
    with run("sh", "-c", "cat /app/config.json > /tmp/main-saw; exec sleep 1000", mark=mark,
             mounted_files=files) as sandbox:
        sandbox.wait()
        assert main_saw(sandbox) == '{"answer": 42}'
        for path, content in files.items():
            assert sandbox.read_file(path).result() == content
        listing = sandbox.exec(["stat", "-c", "%a %u", "/app/config.json"]).result()
        assert listing.stdout.strip() == "644 0"


def test_a_mounted_file_with_a_relative_path_is_refused_naming_it(mark):
    with pytest.raises(Exception) as refused:
        with run(mark=mark, mounted_files={"relative/config.json": b"x"}) as sandbox:
            sandbox.wait()
    assert "files[0].path" in str(refused.value), refused.value


@pytest.mark.skipif(not NAMESPACES, reason="plain processes cannot switch users")
def test_the_main_process_and_execs_run_as_the_security_contexts_user(mark):
    context = SecurityContext(run_as_user=1000, run_as_group=3000)
    with run("sh", "-c", 'echo "$(id -u):$(id -g)" > /tmp/main-saw; exec sleep 1000', mark=mark,
             security_context=context) as sandbox:
        sandbox.wait(timeout=WAIT)
        assert main_saw(sandbox).strip() == "1000:3000"
        assert sandbox.exec(["sh", "-c", 'echo "$(id -u):$(id -g)"']).result().stdout.strip() == "1000:3000"


@pytest.mark.skipif(not NAMESPACES, reason="plain processes have no root of their own for mounted files")
def test_mounted_files_under_the_hosts_read_only_directories_are_laid_over_them(mark):
    files = {"/etc/app/app.conf": b"[app]\nanswer = 42\n", "/usr/local/etc/tool.conf": b"tool"}
    with run("sh", "-c", "cat /etc/app/app.conf > /tmp/main-saw; exec sleep 1000", mark=mark,
             mounted_files=files) as sandbox:
        sandbox.wait()
        assert main_saw(sandbox) == "[app]\nanswer = 42\n"
        assert sandbox.read_file("/usr/local/etc/tool.conf").result() == b"tool"
        # The host's files are still there, and the view stays read-only.
        assert sandbox.exec(["test", "-s", "/etc/passwd"]).result().returncode == 0
        written = sandbox.exec(["sh", "-c", "echo x > /etc/app/app.conf"]).result()
        assert written.returncode != 0 and "Read-only file system" in written.stderr, written


@pytest.mark.skipif(not NAMESPACES, reason="plain processes have no root of their own for mounted files")
def test_a_mounted_file_the_sandbox_cannot_hold_fails_it_with_the_reason(mark):
    # /usr/local is a directory of the host's: a file cannot be mounted there, and the client
    # says why.
    sandbox = run(mark=mark, mounted_files={"/usr/local": b"x"})
    with pytest.raises(SandboxFailedError, match="StartError.*the host's directory /usr/local is there"):
        sandbox.wait(timeout=WAIT)
