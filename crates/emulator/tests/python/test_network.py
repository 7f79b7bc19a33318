"""The sandbox's network as the published client asks for it: `deny_egress=True` gives the
sandbox a network of its own with only loopback, so it reaches neither the host nor the emulator;
without it the sandbox shares the host's network (as the emulator's README says)."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pytest

from conftest import NAMESPACES, WAIT, run
from cwsandbox import NetworkOptions

EMULATOR = urlparse(os.environ["CWSANDBOX_BASE_URL"])
PROBE = (
    "import socket\n"
    "try:\n"
    f"    socket.create_connection(({EMULATOR.hostname!r}, {EMULATOR.port}), 5)\n"
    "    print('reached')\n"
    "except OSError as error:\n"
    "    print('cut off', error.errno)\n"
)


@pytest.mark.skipif(not NAMESPACES, reason="plain processes share the host's network")
def test_deny_egress_cuts_the_sandbox_off_from_the_host_and_the_emulator(mark):
    with run(mark=mark) as shared:
        shared.wait(timeout=WAIT)
        assert shared.exec(["python3", "-c", PROBE]).result().stdout.strip() == "reached"
    with run(mark=mark, network=NetworkOptions(deny_egress=True)) as isolated:
        isolated.wait(timeout=WAIT)
        assert isolated.exec(["python3", "-c", PROBE]).result().stdout.startswith("cut off")
        interfaces = isolated.exec(["sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"]).result()
        assert interfaces.stdout.strip() == "lo"
