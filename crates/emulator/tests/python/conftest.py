"""Shared helpers of the suite that drives the emulator with the published `cwsandbox` client.

The Rust test `tests/python_client.rs` starts the emulator binary through the testkit harness
(port 0, ready file) and runs this suite with:

- `CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY` (admin), `USER_TOKEN`, `RUNNER_ID`: from the ready file;
- `CWSANDBOX_ISOLATION`: `namespaces` or `plain`, as the emulator reports it;
- `CWSANDBOX_TEST_RUN_ID`: a per-run marker. Every sandbox of the suite gets it in its environment
  as `CWSANDBOX_TEST_RUN`, so the Rust test can prove after the emulator's exit that none of their
  processes survived. Each test also marks its own sandboxes (`CWSANDBOX_TEST_SANDBOX`) to check
  that deleting them ended every process they had.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from cwsandbox import Sandbox

RUNNER = os.environ["RUNNER_ID"]
ISOLATION = os.environ.get("CWSANDBOX_ISOLATION", "namespaces")
NAMESPACES = ISOLATION == "namespaces"
# What the emulator's ready file says this machine cannot give (`unavailable`), one per line.
UNAVAILABLE = [line for line in os.environ.get("CWSANDBOX_UNAVAILABLE", "").splitlines() if line]
RUN_MARK = {"CWSANDBOX_TEST_RUN": os.environ["CWSANDBOX_TEST_RUN_ID"]}
# Generous bounds for waits that end by themselves in well under a second.
WAIT = 60

# The command the client sends by default: it honours SIGTERM at once.
KEEP_ALIVE = 'trap "exit 0" TERM INT; sleep infinity & wait'


def new_mark() -> str:
    """A marker for one test's sandboxes."""
    return uuid.uuid4().hex


def sandbox_env(mark: str | None = None, **extra: str) -> dict[str, str]:
    """The environment every sandbox of the suite gets, plus the test's marker."""
    env = dict(RUN_MARK)
    if mark is not None:
        env["CWSANDBOX_TEST_SANDBOX"] = mark
    env.update(extra)
    return env


def run(*args: str, mark: str | None = None, env: dict[str, str] | None = None, **kwargs) -> Sandbox:
    """`Sandbox.run` placed through the emulator's CKS runner, with the suite's markers."""
    kwargs.setdefault("placement_mode", "cks")
    kwargs.setdefault("runner_ids", [RUNNER])
    return Sandbox.run(*args, environment_variables=sandbox_env(mark, **(env or {})), **kwargs)


def processes_with(mark: str) -> list[int]:
    """Living processes (any pid namespace) of the sandboxes marked `mark`."""
    wanted = f"CWSANDBOX_TEST_SANDBOX={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if wanted in environ and state != "Z":
            found.append(int(name))
    return found


def processes_at_least(mark: str, count: int, timeout: float = WAIT) -> list[int]:
    """`processes_with(mark)` once it lists `count` or more, or `timeout` has passed: a process in
    the middle of `execve` (a background `setsid sleep` just forked) shows an empty environment
    for a moment, so one look can miss a process that runs."""
    deadline = time.monotonic() + timeout
    while True:
        found = processes_with(mark)
        if len(found) >= count or time.monotonic() >= deadline:
            return found
        time.sleep(0.02)


def connect(service: str, method: str, body: dict) -> dict:
    """One unary call over Connect JSON (`service` fully qualified) with the suite's admin token
    (CWSANDBOX_API_KEY): for the APIs the published client has no methods for."""
    request = urllib.request.Request(
        f"{os.environ['CWSANDBOX_BASE_URL']}/{service}/{method}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {os.environ['CWSANDBOX_API_KEY']}"},
    )
    with urllib.request.urlopen(request, timeout=WAIT) as reply:
        return json.load(reply)


def emulator(method: str, body: dict) -> dict:
    """One EmulatorService call, as the operator."""
    return connect("coreweave.sandbox.emulator.v1.EmulatorService", method, body)


def add_fault(**fault) -> str:
    """Installs a fault (EmulatorService.AddFault) and answers its id."""
    return emulator("AddFault", {"fault": fault})["fault"]["id"]


def hits(fault_id: str) -> int:
    """How many calls a fault acted on."""
    [fault] = [fault for fault in emulator("ListFaults", {})["faults"] if fault["id"] == fault_id]
    return int(fault.get("hits", 0))


@pytest.fixture
def no_faults_left():
    """Clears every fault after the test, so the rest of the suite runs unharmed."""
    yield
    emulator("ClearFaults", {})


CLI = os.path.join(os.path.dirname(sys.executable), "cwsandbox")


def cli(*args: str, timeout: float = WAIT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs the `cwsandbox` command line (a new process per command, as users run it)."""
    return subprocess.run(
        [CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def mark() -> str:
    return new_mark()


@pytest.fixture
def sandbox(mark):
    """A running sandbox with the client's default command, stopped at the end of the test."""
    sb = run(mark=mark)
    sb.wait(timeout=WAIT)
    yield sb
    sb.stop(missing_ok=True).result()
    assert processes_with(mark) == []
