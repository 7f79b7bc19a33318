"""The direct data plane (`data_plane_mode="direct"`): the client asks ConnectSandbox for a
certificate, then runs exec, files and logs over mutual TLS on the endpoint it names, never on the
gateway.

That the direct path is the one used is proven with faults: every gateway data RPC
(`SandboxService/...`) fails while they are installed and is never hit, and a fault on
`SandboxDataPlaneService/StreamExec` reaches the client.
"""

from __future__ import annotations

import pytest
from conftest import KEEP_ALIVE, WAIT, add_fault, cli, hits, processes_with, run

from cwsandbox.exceptions import CWSandboxAuthenticationError

pytestmark = pytest.mark.usefixtures("no_faults_left")

GATEWAY_DATA_RPCS = ["Exec", "StreamExec", "StreamLogs", "WriteFile", "ReadFile"]


def fail_the_gateway() -> list[str]:
    """Faults failing every gateway data RPC: a call that reached one would raise."""
    return [
        add_fault(
            match={"method": f"SandboxService/{method}"},
            action={"code": "INTERNAL", "message": f"the gateway's {method} was used"},
        )
        for method in GATEWAY_DATA_RPCS
    ]


def test_exec_files_and_logs_go_over_the_direct_endpoint(mark):
    gateway = fail_the_gateway()
    sb = run("/bin/sh", "-c", f"echo from-main; {KEEP_ALIVE}", mark=mark, data_plane_mode="direct")
    sb.wait(timeout=WAIT)

    result = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]).result()
    assert (result.stdout, result.stderr, result.returncode) == ("out\n", "err\n", 3)
    process = sb.exec(["cat"], stdin=True)
    process.stdin.write(b"stdin over mutual TLS\n").result()
    process.stdin.close().result()
    assert process.result().stdout == "stdin over mutual TLS\n"
    sb.write_file("/tmp/direct.txt", b"over mutual TLS").result()
    assert sb.read_file("/tmp/direct.txt").result() == b"over mutual TLS"
    reader = sb.stream_logs(follow=True)
    for line in reader:
        if line == "from-main\n":
            break
    reader.close()
    assert [hits(fault) for fault in gateway] == [0] * len(GATEWAY_DATA_RPCS)

    # And the direct endpoint is where the calls go: its own fault reaches the client.
    direct = add_fault(
        match={"method": "SandboxDataPlaneService/StreamExec"},
        action={"code": "PERMISSION_DENIED", "message": "refused on the direct endpoint"},
        schedule={"times": 1},
    )
    with pytest.raises(CWSandboxAuthenticationError, match="refused on the direct endpoint"):
        sb.exec(["true"]).result()
    assert hits(direct) == 1
    assert sb.exec(["echo", "again"]).result().stdout == "again\n"
    sb.stop().result()
    assert processes_with(mark) == []


def test_the_cli_execs_over_the_direct_endpoint(sandbox):
    """`cwsandbox exec --data-plane-mode direct` hung on the UNIMPLEMENTED path; now it runs."""
    gateway = fail_the_gateway()
    done = cli("exec", "--data-plane-mode", "direct", sandbox.sandbox_id, "sh", "-c", "echo via-direct; exit 4")
    assert (done.stdout, done.returncode) == ("via-direct\n", 4), done.stderr
    assert [hits(fault) for fault in gateway] == [0] * len(GATEWAY_DATA_RPCS)
