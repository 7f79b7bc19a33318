"""Flow (e) of docs/facts/client-contract.md#flow-e: the `cwsandbox` command line (a new process
per command). The CLI has no create (G18, docs/facts/client-contract.md#g18): the sandboxes come
from the SDK. Gotchas G1–G18 are those of docs/facts/client-contract.md#g1 and after."""

from __future__ import annotations

import json
import subprocess

from conftest import CLI, NAMESPACES, RUNNER, WAIT, cli, processes_with, run
from test_logs import STAMPED

from cwsandbox import Sandbox, SandboxStatus


def sandbox_with_logs(mark):
    sb = run("/bin/sh", "-c", 'trap "exit 0" TERM INT; echo first; echo second; sleep infinity & wait', mark=mark)
    sb.wait(timeout=WAIT)
    return sb


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"{result.args}: {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def test_ls_and_get(mark):
    sb = sandbox_with_logs(mark)
    try:
        listing = ok(cli("ls")).stdout
        assert sb.sandbox_id in listing and "running" in listing.lower(), listing
        rows = json.loads(ok(cli("ls", "--status", "running", "--runner-id", RUNNER, "-o", "json")).stdout)
        assert sb.sandbox_id in json.dumps(rows), rows
        assert sb.sandbox_id not in ok(cli("ls", "--status", "completed")).stdout
        shown = ok(cli("get", sb.sandbox_id)).stdout
        assert sb.sandbox_id in shown and RUNNER in shown, shown
        detail = json.loads(ok(cli("get", sb.sandbox_id, "-o", "json")).stdout)
        assert sb.sandbox_id in json.dumps(detail), detail
    finally:
        sb.stop().result()


def test_exec_streams_output_and_propagates_the_exit_code(mark):
    sb = sandbox_with_logs(mark)
    try:
        result = cli("exec", sb.sandbox_id, "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7")
        assert result.returncode == 7, result
        assert result.stdout == "to-stdout\n"
        assert result.stderr == "to-stderr\n"
        hostname = ok(cli("exec", sb.sandbox_id, "hostname")).stdout.strip()
        if NAMESPACES:
            assert hostname == f"sandbox-{sb.sandbox_id}"
        assert ok(cli("exec", sb.sandbox_id, "--cwd", "/tmp", "pwd")).stdout == "/tmp\n"
    finally:
        sb.stop().result()


def test_logs(mark):
    sb = sandbox_with_logs(mark)
    try:
        assert ok(cli("logs", sb.sandbox_id)).stdout == "first\nsecond\n"
        assert ok(cli("logs", sb.sandbox_id, "--tail", "1")).stdout == "second\n"
        stamped = ok(cli("logs", sb.sandbox_id, "--timestamps")).stdout.splitlines(keepends=True)
        assert [STAMPED.match(line).group(2) for line in stamped] == ["first\n", "second\n"]
        assert ok(cli("logs", sb.sandbox_id, "--since", "2000-01-01")).stdout == "first\nsecond\n"
        # -f follows until the sandbox stops.
        follow = subprocess.Popen(
            [CLI, "logs", sb.sandbox_id, "-f"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert follow.stdout.readline() == "first\n"
        assert follow.stdout.readline() == "second\n"
        sb.stop().result()
        out, err = follow.communicate(timeout=WAIT)
        assert (follow.returncode, out) == (0, ""), err
    finally:
        sb.stop(missing_ok=True).result()


def test_files_write_and_read(mark, tmp_path):
    sb = sandbox_with_logs(mark)
    try:
        local = tmp_path / "upload.txt"
        local.write_bytes(b"written by the cli\n")
        wrote = ok(cli("files", "write", sb.sandbox_id, "/tmp/from-cli.txt", str(local))).stdout
        assert "Wrote 19 bytes" in wrote, wrote
        assert ok(cli("files", "read", sb.sandbox_id, "/tmp/from-cli.txt")).stdout == "written by the cli\n"
        missing = cli("files", "read", sb.sandbox_id, "/tmp/not-there")
        assert missing.returncode == 1 and missing.stderr.startswith("Error:"), missing
    finally:
        sb.stop().result()


def test_stop_and_delete(mark):
    sb = sandbox_with_logs(mark)
    ok(cli("stop", sb.sandbox_id))
    assert Sandbox.from_id(sb.sandbox_id).result().status == SandboxStatus.COMPLETED
    assert "completed" in ok(cli("get", sb.sandbox_id)).stdout.lower()
    # A stopped sandbox is listed only with its state or show-terminated semantics (G15).
    assert sb.sandbox_id not in ok(cli("ls")).stdout
    assert sb.sandbox_id in ok(cli("ls", "--status", "completed")).stdout

    other = sandbox_with_logs(mark)
    ok(cli("delete", other.sandbox_id))
    ended = Sandbox.from_id(other.sandbox_id).result()
    ended.wait_until_complete(timeout=WAIT).result()
    assert ended.status == SandboxStatus.COMPLETED
    assert processes_with(mark) == []

    missing = "0123456789abcdef"
    assert ok(cli("delete", missing, "--missing-ok")).returncode == 0
    refused = cli("delete", missing)
    assert refused.returncode == 1 and refused.stderr.startswith("Error:"), refused
    assert ok(cli("stop", missing, "--missing-ok")).returncode == 0
