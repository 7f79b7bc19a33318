"""What a sandbox can reach (the hardening issue): code that nobody here wrote runs in it, so
nothing inside may read the emulator's tokens, another sandbox's files or the host's."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from conftest import NAMESPACES, WAIT, processes_with, run

pytestmark = pytest.mark.skipif(not NAMESPACES, reason="plain processes are not isolated (documented)")

# Every process a sandbox can see: its environment, command line and memory (shared with the
# executor's isolation tests).
SCAN = (Path(__file__).resolve().parents[3] / "executor" / "tests" / "scan_processes.py").read_text()


def test_a_users_sandbox_cannot_read_the_emulators_tokens(monkeypatch, mark):
    admin, user = os.environ["CWSANDBOX_API_KEY"], os.environ["USER_TOKEN"]
    monkeypatch.setenv("CWSANDBOX_API_KEY", user)
    sb = run(mark=mark)
    try:
        sb.wait(timeout=WAIT)
        # Nothing in the sandbox holds either token: not init (PID 1), not the main command, not
        # an exec while it runs. The user token is one the scanner itself does not hold either:
        # the client sends it in a header, not into the sandbox.
        result = sb.exec(["python3", "-c", SCAN, admin, user]).result()
        assert (result.stdout, result.returncode) == ("scanned\n", 0), result.stderr
        assert sb.exec(["cat", "/proc/1/cmdline"]).result().stdout.startswith("cwsandbox-init\0")
        environ = sb.exec(["cat", "/proc/1/environ"]).result()
        assert environ.stdout == ""
        try:
            content = sb.read_file("/proc/1/environ").result()
        except Exception as error:  # refused is as good as empty
            content = str(error).encode()
        assert admin.encode() not in content and user.encode() not in content
    finally:
        sb.stop(missing_ok=True).result()
    assert processes_with(mark) == []


def test_one_sandbox_cannot_reach_anothers_files_by_their_host_path(mark):
    first, second = run(mark=mark), run(mark=mark)
    try:
        first.wait(timeout=WAIT)
        second.wait(timeout=WAIT)
        name = f"secret-{uuid.uuid4().hex}.txt"
        first.write_file(f"/tmp/{name}", b"first's").result()
        # The sandbox sees its root as `/`; the host directory behind it (and so the first
        # sandbox's) is nowhere in its view. /usr and /proc are the host's programs and the
        # sandbox's own processes.
        found = second.exec(
            ["sh", "-c", f"find / -path /proc -prune -o -path /usr -prune -o -name {name} -print 2>/dev/null; echo done"]
        ).result()
        assert found.stdout == "done\n", found.stdout
        assert first.read_file(f"/tmp/{name}").result() == b"first's"
    finally:
        first.stop(missing_ok=True).result()
        second.stop(missing_ok=True).result()


def test_files_that_are_not_regular_are_refused_at_once(sandbox):
    # A FIFO nobody reads once held a call and a thread for ever; 520 of them starved the
    # emulator. Now each is refused at once, and the emulator still answers.
    sandbox.exec(["mkfifo", "/tmp/unread"], check=True).result()
    for _ in range(40):
        with pytest.raises(Exception) as raised:
            sandbox.write_file("/tmp/unread", b"data").result()
        assert "not a regular file" in str(raised.value)
    with pytest.raises(Exception) as raised:
        sandbox.read_file("/dev/zero").result()
    assert "not a regular file" in str(raised.value)
    sandbox.write_file("/tmp/fine.txt", b"fine").result()
    assert sandbox.read_file("/tmp/fine.txt").result() == b"fine"
