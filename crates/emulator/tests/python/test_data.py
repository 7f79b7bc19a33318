"""Flow (d) of docs/facts/client-contract.md#flow-d: exec (with and without stdin), files, and the
StreamExec protocol (docs/facts/client-contract.md#stream-exec) as the client sees it. Gotchas
G1–G18 are those of docs/facts/client-contract.md#g1 and after."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from cwsandbox import SandboxExecutionError, SandboxFileError, SandboxTimeoutError

# Above the client's 32 MiB unary cap: it streams through exec instead.
BIG = (32 << 20) + 1000


def test_exec_reports_stdout_stderr_and_the_exit_code(sandbox):
    result = sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]).result()
    assert (result.stdout, result.stderr, result.returncode) == ("out\n", "err\n", 3)
    # A non-zero code is only an error with check=True, which carries the result.
    with pytest.raises(SandboxExecutionError) as raised:
        sandbox.exec(["sh", "-c", "exit 4"], check=True).result()
    assert raised.value.exec_result.returncode == 4


def test_a_command_that_cannot_start_exits_127_with_a_message(sandbox):
    result = sandbox.exec(["no-such-command-anywhere"]).result()
    assert result.returncode == 127
    assert "not found" in result.stderr


def test_output_streams_while_the_command_runs(sandbox):
    process = sandbox.exec(["sh", "-c", "for i in 1 2 3; do echo line$i; done; exit 0"])
    assert "".join(process.stdout) == "line1\nline2\nline3\n"
    assert process.result().returncode == 0


def test_stdin_reaches_the_command_and_close_is_end_of_file(sandbox):
    # G6: the client needs the `ready` frame within 5 s to send stdin at all.
    process = sandbox.exec(["cat"], stdin=True)
    process.stdin.write(b"hello ").result()
    process.stdin.write(b"stdin\n").result()
    process.stdin.close().result()
    result = process.result()
    assert (result.stdout, result.returncode) == ("hello stdin\n", 0)

    # Larger input in several frames.
    payload = bytes(range(256)) * 4096  # 1 MiB
    process = sandbox.exec(["sha256sum"], stdin=True)
    process.stdin.write(payload).result()
    process.stdin.close().result()
    assert process.result().stdout.split()[0] == hashlib.sha256(payload).hexdigest()


def test_without_stdin_the_half_close_is_end_of_file(sandbox):
    # G7: the client half-closes right after init; `cat` must see end-of-file and end.
    result = sandbox.exec(["cat"], timeout_seconds=20).result()
    assert (result.stdout, result.returncode) == ("", 0)


def test_a_timed_out_exec_is_killed(sandbox):
    # A duration no other process uses: with plain processes `ps` sees the whole host, including
    # the same test of the other suite running in parallel.
    seconds = str(1000 + uuid.uuid4().int % 9_000_000)
    with pytest.raises(SandboxTimeoutError):
        sandbox.exec(["sleep", seconds], timeout_seconds=1).result()
    # The client cancels the stream; the emulator kills the command. Ask the sandbox until it is
    # gone (a bounded wait inside the sandbox, since the kill follows the cancel asynchronously).
    gone = sandbox.exec(
        ["sh", "-c", f"for i in $(seq 100); do ps -eo args= | grep -qx 'sleep {seconds}' || exit 0; sleep 0.05; done; exit 1"]
    ).result()
    assert gone.returncode == 0, "the timed-out command still runs"


def test_files_written_and_read(sandbox):
    content = bytes(range(256)) * 64
    sandbox.write_file("/tmp/data/nested/blob.bin", content).result()
    assert sandbox.read_file("/tmp/data/nested/blob.bin").result() == content
    # The same file, seen by a command in the sandbox.
    listing = sandbox.exec(["sh", "-c", "wc -c < /tmp/data/nested/blob.bin"]).result()
    assert listing.stdout.strip() == str(len(content))
    # And a file a command wrote, read back.
    sandbox.exec(["sh", "-c", "printf 'from exec' > /tmp/made-by-exec.txt"]).result()
    assert sandbox.read_file("/tmp/made-by-exec.txt").result() == b"from exec"
    # Overwrite, empty file.
    sandbox.write_file("/tmp/made-by-exec.txt", b"").result()
    assert sandbox.read_file("/tmp/made-by-exec.txt").result() == b""


def test_file_errors_carry_their_reasons(sandbox):
    with pytest.raises(SandboxFileError) as missing:
        sandbox.read_file("/tmp/does-not-exist").result()
    assert missing.value.reason == "CWSANDBOX_FILE_NOT_FOUND"
    with pytest.raises(SandboxFileError) as directory:
        sandbox.read_file("/tmp").result()
    assert directory.value.reason == "CWSANDBOX_FILE_IS_DIRECTORY"
    with pytest.raises(SandboxFileError) as write_directory:
        sandbox.write_file("/tmp", b"x").result()
    assert write_directory.value.reason == "CWSANDBOX_FILE_IS_DIRECTORY"


def test_files_above_the_unary_limit_stream_through_exec(sandbox):
    # Read: the server answers CWSANDBOX_FILE_TOO_LARGE (with size_bytes and max_size_bytes), and
    # the client falls back to `cat` through StreamExec.
    made = sandbox.exec(["sh", "-c", f"head -c {BIG} /dev/urandom > /tmp/big.bin && sha256sum /tmp/big.bin"]).result()
    expected = made.stdout.split()[0]
    data = sandbox.read_file("/tmp/big.bin").result()
    assert len(data) == BIG
    assert hashlib.sha256(data).hexdigest() == expected
    # Write: the client streams it through exec's stdin.
    payload = (b"0123456789abcdef" * (BIG // 16 + 1))[:BIG]
    sandbox.write_file("/tmp/upload.bin", payload).result()
    written = sandbox.exec(["sha256sum", "/tmp/upload.bin"]).result()
    assert written.stdout.split()[0] == hashlib.sha256(payload).hexdigest()
