"""A small library whose work runs in CoreWeave Sandboxes: the code under test of the example.

It knows nothing of the emulator: it reads CWSANDBOX_BASE_URL and CWSANDBOX_API_KEY through the
`cwsandbox` client like any user code, and is handed the runner to place its sandboxes on.
"""

from __future__ import annotations

from cwsandbox import Sandbox

# How long a create may keep retrying a runner that answers "overloaded" or "out of capacity".
CREATE_RETRY_BUDGET_SECONDS = 30.0


class JobFailed(Exception):
    """A command of a job ended with a non-zero exit code."""

    def __init__(self, command: list[str], returncode: int, stderr: str):
        super().__init__(f"{command!r} exited with {returncode}: {stderr.strip()}")
        self.returncode = returncode


def sandbox(runner_id: str, **options) -> Sandbox:
    """A sandbox on `runner_id` (CKS placement through SUNK), retrying a busy runner."""
    options.setdefault("create_retry_budget_seconds", CREATE_RETRY_BUDGET_SECONDS)
    return Sandbox.run(placement_mode="cks", runner_ids=[runner_id], **options)


def run(command: list[str], runner_id: str) -> str:
    """Runs `command` in a fresh sandbox; returns its standard output."""
    with sandbox(runner_id) as sb:
        result = sb.exec(command).result()
    if result.returncode != 0:
        raise JobFailed(command, result.returncode, result.stderr)
    return result.stdout


def word_count(text: str, runner_id: str) -> int:
    """The number of words in `text`, counted by `wc` in a sandbox."""
    with sandbox(runner_id) as sb:
        sb.write_file("/tmp/input.txt", text.encode()).result()
        result = sb.exec(["wc", "-w", "/tmp/input.txt"]).result()
    if result.returncode != 0:
        raise JobFailed(["wc"], result.returncode, result.stderr)
    return int(result.stdout.split()[0])


def upper_case(data: bytes, runner_id: str) -> bytes:
    """`data` upper-cased by `tr` in a sandbox, file in, file out."""
    with sandbox(runner_id) as sb:
        sb.write_file("/tmp/in.txt", data).result()
        result = sb.exec(["sh", "-c", "tr a-z A-Z < /tmp/in.txt > /tmp/out.txt"]).result()
        if result.returncode != 0:
            raise JobFailed(["tr"], result.returncode, result.stderr)
        return sb.read_file("/tmp/out.txt").result()
