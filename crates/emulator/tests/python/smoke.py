"""The published cwsandbox client against the emulator: the transport contract of
client-contract.md §1 (h2c, bearer metadata, the env vars) and flow (a) end to end. The Rust test
attaches an in-memory fake runtime, so `exec` answers without running processes."""

import os
import sys

from cwsandbox import Sandbox

runner = os.environ["RUNNER_ID"]

with Sandbox.run(placement_mode="cks", runner_ids=[runner]) as sb:
    result = sb.exec(["hostname"]).result()
    assert result.returncode == 0, result
    assert result.stdout.strip() == f"sandbox-{sb.sandbox_id}", result.stdout
    sb.write_file("/tmp/hello.txt", b"hello").result()
    assert sb.read_file("/tmp/hello.txt").result() == b"hello"
    listed = [s.sandbox_id for s in Sandbox.list(runner_ids=[runner]).result()]
    assert sb.sandbox_id in listed, listed
    sandbox_id = sb.sandbox_id

again = Sandbox.from_id(sandbox_id).result()
print("status", again.status, file=sys.stderr)
assert str(again.status).lower().endswith("completed"), again.status
print("python smoke: ok")
