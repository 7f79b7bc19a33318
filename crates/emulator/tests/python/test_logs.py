"""StreamLogs (docs/facts/client-contract.md#stream-logs): the main process's output, tail, since,
server-side timestamps (G13, docs/facts/client-contract.md#g13), and follow until the sandbox
stops."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from conftest import WAIT, processes_with, run

from cwsandbox import Sandbox, SandboxFailedError, SandboxNotRunningError

LINES = [f"line{i}\n" for i in range(1, 6)]
STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) (.*\n)$")


@pytest.fixture
def logging_sandbox(mark):
    """A sandbox whose main process prints five lines, then echoes whatever is written to a FIFO (in
    its private working directory, where exec'd commands start too)."""
    fifo = "log-in"
    script = (
        f'trap "exit 0" TERM INT; mkfifo {fifo}; for i in 1 2 3 4 5; do echo line$i; done; '
        f"while :; do cat {fifo}; done"
    )
    sb = run("/bin/sh", "-c", script, mark=mark)
    sb.wait(timeout=WAIT)
    # Follow until the five lines are there (the FIFO exists by then).
    reader = sb.stream_logs(follow=True)
    for line in reader:
        if line == "line5\n":
            break
    reader.close()
    yield sb, fifo
    sb.stop(missing_ok=True).result()
    assert processes_with(mark) == []


def stamped(line: str) -> tuple[datetime, str]:
    match = STAMPED.match(line)
    assert match, f"no RFC 3339 timestamp prefix: {line!r}"
    return datetime.fromisoformat(match.group(1)[:26].rstrip("Z") + "+00:00"), match.group(2)


def test_logs_all_tail_and_since(logging_sandbox):
    sb, _ = logging_sandbox
    assert list(sb.stream_logs()) == LINES
    assert list(sb.stream_logs(tail_lines=2)) == LINES[-2:]
    assert list(sb.stream_logs(since_time=datetime.now(UTC) - timedelta(hours=1))) == LINES
    assert list(sb.stream_logs(since_time=datetime.now(UTC) + timedelta(hours=1))) == []


def test_timestamps_are_added_by_the_server(logging_sandbox):
    sb, _ = logging_sandbox
    lines = list(sb.stream_logs(timestamps=True))
    assert [stamped(line)[1] for line in lines] == LINES
    when = stamped(lines[0])[0]
    assert abs(datetime.now(UTC) - when) < timedelta(minutes=5), when


def test_follow_streams_new_output_until_the_sandbox_stops(logging_sandbox):
    sb, fifo = logging_sandbox
    reader = sb.stream_logs(follow=True)
    lines = iter(reader)
    assert [next(lines) for _ in LINES] == LINES
    sb.exec(["sh", "-c", f"echo fresh > {fifo}"]).result()
    assert next(lines) == "fresh\n"
    # Stopping the sandbox ends the follow cleanly (after what the shell says about its `cat`
    # being terminated).
    stopping = sb.stop()
    assert set(lines) <= {"Terminated\n"}
    stopping.result()


def test_follow_with_tail_and_timestamps(logging_sandbox):
    sb, fifo = logging_sandbox
    reader = sb.stream_logs(follow=True, tail_lines=1, timestamps=True)
    lines = iter(reader)
    assert stamped(next(lines))[1] == "line5\n"
    sb.exec(["sh", "-c", f"echo later > {fifo}"]).result()
    assert stamped(next(lines))[1] == "later\n"
    reader.close()


def test_following_a_stopped_sandbox_is_refused(logging_sandbox):
    sb, _ = logging_sandbox
    sb.stop().result()
    ended = Sandbox.from_id(sb.sandbox_id).result()
    # Without follow, the logs of a stopped sandbox stay readable (the shell noted its `cat`'s end).
    assert list(ended.stream_logs()) == [*LINES, "Terminated\n"]
    with pytest.raises(SandboxNotRunningError):
        list(ended.stream_logs(follow=True))


def test_a_main_command_that_cannot_start_fails_the_sandbox_with_its_reason_in_the_log(mark):
    sb = run("/no/such/program", mark=mark)
    with pytest.raises(SandboxFailedError) as failed:
        sb.wait(timeout=WAIT)
    assert "127" in str(failed.value)
    assert any("not found" in line for line in sb.stream_logs())
