"""The published client's life cycle, timed: `with Sandbox.run(...) as sb: sb.exec(["hostname"])`
(CreateSandbox, GetSandbox until RUNNING, StreamExec, DeleteSandbox, GetSandbox until terminal).
MODE is the client's `data_plane_mode`: `gateway` sends StreamExec over the API's own channel;
`auto`, the client's default, first asks ConnectSandbox for a certificate (a fresh key and CSR per
sandbox) and, where the server grants one, execs over a new mutual-TLS channel to the direct data
plane; where it does not (the fake: UNIMPLEMENTED), over the gateway.

Usage: python python_lifecycle.py URL RUNNER ROUNDS [MODE]  → prints the median, min and max in ms
as JSON. CWSANDBOX_API_KEY must be set (any value for the fake). MODE defaults to `gateway`.
"""

import json
import os
import statistics
import sys
import time

url, runner, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else "gateway"
# Read by the client when it is imported.
os.environ["CWSANDBOX_BASE_URL"] = url

from cwsandbox import Sandbox  # noqa: E402


def once():
    started = time.perf_counter()
    with Sandbox.run(placement_mode="cks", runner_ids=[runner], data_plane_mode=mode) as sb:
        result = sb.exec(["hostname"]).result()
        # Plain isolation shares the host's hostname: any name will do.
        assert result.returncode == 0 and result.stdout.strip(), result
    return (time.perf_counter() - started) * 1000


once()  # warm-up: connections, imports
samples = [once() for _ in range(rounds)]
print(json.dumps({"median_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples), "rounds": rounds, "mode": mode}))
