"""The sandbox's network as the published client asks for it: `deny_egress=True` alone gives the
sandbox a network of its own with only loopback, so it reaches neither the host nor the emulator;
egress and ingress rules give it a network of its own on the emulator's bridge with the rules
enforced (a test host of the suite's own in a network namespace stands for the world); without
any, the sandbox shares the host's network (as the emulator's README says)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlparse

import pytest

from conftest import NAMESPACES, UNAVAILABLE, WAIT, run
from cwsandbox import CidrBlock, EgressRule, IngressRule, NetworkOptions, PortRange, Service

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


# --- Network policy: a network of its own with its rules enforced (README, "Sandbox networks") ---

NETWORKS = NAMESPACES and not any(line.startswith("sandbox networks:") for line in UNAVAILABLE)
needs_networks = pytest.mark.skipif(
    not NETWORKS, reason="sandbox networks need a root emulator with nftables (the ready file says why not)"
)
TEST_HOST = "203.0.113.10"

# A TCP server answering each connection with its reply; prints "listening" once it does.
SERVER = (
    "import socket, sys\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()\n"
    "print('listening', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.sendall(sys.argv[3].encode()); c.close()\n"
)
# The names the suite's values resolve to the test host (containerRuntime.network.staticHosts).
HTTPS_NAMES = ("granted.test", "api.wild.test", "other.test")
TEST_CA: list[bytes] = []
# TLS on argv[1]:443 with argv[2]/argv[3]; answers each handshake with "hello <server name>".
HTTPS_SERVER = (
    "import socket, ssl, sys, threading\n"
    "context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); context.load_cert_chain(sys.argv[2], sys.argv[3])\n"
    "names = {}\n"
    "context.sni_callback = lambda sock, name, ctx: names.__setitem__(id(sock), name)\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((sys.argv[1], 443)); s.listen()\n"
    "print('listening', flush=True)\n"
    "def serve(c):\n"
    "    try:\n"
    "        tls = context.wrap_socket(c, server_side=True)\n"
    "        tls.sendall(('hello ' + str(names.get(id(tls)) or tls.server_hostname)).encode()); tls.close()\n"
    "    except (OSError, ssl.SSLError):\n"
    "        c.close()\n"
    "while True:\n"
    "    c, _ = s.accept(); threading.Thread(target=serve, args=(c,)).start()\n"
)
# An HTTPS request to argv[1] trusting the CA at argv[2]: the reply, or how it failed.
FETCH = (
    "import socket, ssl, sys\n"
    "context = ssl.create_default_context(cafile=sys.argv[2])\n"
    "try:\n"
    "    with socket.create_connection((sys.argv[1], 443), 10) as raw:\n"
    "        with context.wrap_socket(raw, server_hostname=sys.argv[1]) as tls:\n"
    "            print(tls.recv(100).decode())\n"
    "except (OSError, ssl.SSLError) as error:\n"
    "    print('refused', type(error).__name__, error)\n"
)
# Connects to argv[1]:argv[2] and prints the reply, or how it failed.
REACH = (
    "import socket, sys\n"
    "try:\n"
    "    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), 10)\n"
    "    print(c.recv(100).decode())\n"
    "except OSError as error:\n"
    "    print('refused', error.errno)\n"
)
# The sandbox's own address: the source its route to the test host picks.
OWN_ADDRESS = (
    "import socket\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('203.0.113.10', 9))\n"
    "print(s.getsockname()[0])\n"
)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def test_host():
    """A host of the test's own, in a network namespace it makes: 203.0.113.10, routed from this
    machine through a veth pair, with TCP servers on 8080 and 9090. Nothing leaves the machine."""
    name = f"cwpyth{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", name], capture_output=True)
    ip("netns", "add", name)
    servers = []
    pki = tempfile.mkdtemp(prefix="cwpyca-")
    try:
        ip("link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", name)
        ip("addr", "add", "203.0.113.1/24", "dev", name)
        ip("link", "set", name, "up")
        ip("-n", name, "link", "set", "lo", "up")
        ip("-n", name, "link", "set", "eth0", "up")
        ip("-n", name, "addr", "add", f"{TEST_HOST}/24", "dev", "eth0")
        ip("-n", name, "route", "add", "default", "via", "203.0.113.1")
        # Replies to sandboxes come in here and are forwarded to the emulator's bridge.
        with open(f"/proc/sys/net/ipv4/conf/{name}/forwarding", "w") as forwarding:
            forwarding.write("1")
        # An HTTPS server for the names the suite's values resolve here, with a CA of its own.
        openssl = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=pki)  # noqa: E731
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                "-days", "1", "-subj", "/CN=cwsandbox test CA")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                "-subj", "/CN=granted.test")
        with open(os.path.join(pki, "names.ext"), "w") as ext:
            ext.write("subjectAltName=" + ",".join(f"DNS:{name}" for name in HTTPS_NAMES) + "\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.pem", "-days", "1", "-extfile", "names.ext")
        https = subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, "-c", HTTPS_SERVER, TEST_HOST,
             os.path.join(pki, "server.pem"), os.path.join(pki, "server.key")],
            stdout=subprocess.PIPE,
            text=True,
        )
        servers.append(https)
        assert https.stdout.readline().strip() == "listening"
        with open(os.path.join(pki, "ca.pem"), "rb") as ca:
            TEST_CA.append(ca.read())
        for port, reply in ((8080, "eighty"), (9090, "ninety")):
            server = subprocess.Popen(
                ["ip", "netns", "exec", name, sys.executable, "-c", SERVER, TEST_HOST, str(port), reply],
                stdout=subprocess.PIPE,
                text=True,
            )
            servers.append(server)
            assert server.stdout.readline().strip() == "listening"
        yield TEST_HOST
    finally:
        for server in servers:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", name], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        shutil.rmtree(pki, ignore_errors=True)


def from_the_organization(port: int | None = None) -> NetworkOptions:
    ports = [PortRange(port=port)] if port else None
    return NetworkOptions(ingress=[IngressRule(tenant="same_org", ports=ports)])


def reach(sb, address: str, port: int) -> str:
    return sb.exec(["python3", "-c", REACH, address, str(port)]).result().stdout.strip()


@needs_networks
def test_egress_rules_decide_what_a_sandbox_reaches(mark, test_host):
    one_port = NetworkOptions(egress=[EgressRule(cidr=f"{test_host}/32", ports=[PortRange(port=8080)])])
    excepted = NetworkOptions(
        egress=[EgressRule(cidr=CidrBlock(cidr="203.0.113.0/24", except_cidrs=["203.0.113.8/29"]))]
    )
    a_range = NetworkOptions(egress=[EgressRule(cidr="0.0.0.0/0", ports=[PortRange(port=9000, end_port=9999)])])
    with run(mark=mark, network=one_port) as granted, run(mark=mark, network=excepted) as carved, run(
        mark=mark, network=a_range
    ) as ranged, run(mark=mark, network=NetworkOptions(deny_egress=True)) as denied:
        for sb in (granted, carved, ranged, denied):
            sb.wait(timeout=WAIT)
        assert reach(granted, test_host, 8080) == "eighty"
        assert reach(granted, test_host, 9090).startswith("refused")
        assert reach(carved, test_host, 8080).startswith("refused")
        assert reach(ranged, test_host, 9090) == "ninety"
        assert reach(ranged, test_host, 8080).startswith("refused")
        assert reach(denied, test_host, 8080).startswith("refused")
        # Each has an address of the emulator's pod range (the suite's values: 10.246.0.0/24).
        addresses = {sb.exec(["python3", "-c", OWN_ADDRESS]).result().stdout.strip() for sb in (granted, carved)}
        assert len(addresses) == 2 and all(address.startswith("10.246.0.") for address in addresses), addresses
        # The emulator (on the host's loopback) is out of reach.
        assert reach(granted, EMULATOR.hostname, EMULATOR.port).startswith("refused")


@needs_networks
def test_ingress_rules_decide_who_reaches_a_sandbox(mark):
    with run(mark=mark, network=from_the_organization(port=7000)) as server, run(
        mark=mark, network=NetworkOptions(deny_ingress=True)
    ) as closed, run(mark=mark, network=NetworkOptions(egress=[EgressRule(tenant="same_org")])) as colleague, run(
        mark=mark, network=NetworkOptions(egress=[EgressRule(cidr="203.0.113.0/24")])
    ) as outsider:
        for sb in (server, closed, colleague, outsider):
            sb.wait(timeout=WAIT)
        for sb in (server, closed):
            for port in (7000, 7001):
                sb.exec(
                    ["sh", "-c", f"(python3 -c \"$0\" 0.0.0.0 {port} hello >/dev/null &)", SERVER]
                ).result()
        server_address = server.exec(["python3", "-c", OWN_ADDRESS]).result().stdout.strip()
        closed_address = closed.exec(["python3", "-c", OWN_ADDRESS]).result().stdout.strip()
        # The server is up: its own loopback reaches it.
        deadline = time.monotonic() + WAIT
        while reach(server, "127.0.0.1", 7000) != "hello" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reach(colleague, server_address, 7000) == "hello", "same organization, granted port"
        assert reach(colleague, server_address, 7001).startswith("refused"), "a port the rule does not grant"
        assert reach(outsider, server_address, 7000).startswith("refused"), "its egress does not allow it"
        assert reach(colleague, closed_address, 7000).startswith("refused"), "deny_ingress"
        # A sandbox sharing the host's network comes from the host, not from the organization.
        with run(mark=mark) as shared:
            shared.wait(timeout=WAIT)
            assert reach(shared, server_address, 7000).startswith("refused")
            # Its service port is still reached through the emulator's relay (exec here).
        assert reach(closed, "127.0.0.1", 7000) == "hello"


@needs_networks
def test_https_names_are_granted_through_the_emulators_sni_proxy(mark, test_host):
    grants = NetworkOptions(egress=[EgressRule(dns_name="granted.test"), EgressRule(dns_name="*.wild.test")])
    with run(mark=mark, network=grants) as sb:
        sb.wait(timeout=WAIT)
        sb.write_file("/tmp/ca.pem", TEST_CA[0]).result()
        fetch = lambda name: sb.exec(["python3", "-c", FETCH, name, "/tmp/ca.pem"]).result().stdout.strip()  # noqa: E731
        # The sandbox's client verifies the test host's own certificate: TLS is not terminated.
        assert fetch("granted.test") == "hello granted.test"
        assert fetch("api.wild.test") == "hello api.wild.test"
        assert fetch("other.test").startswith("refused"), "a name not granted is closed"
        # Its names resolve through the emulator's resolver, its nameserver.
        resolv = sb.exec(["cat", "/etc/resolv.conf"]).result().stdout
        assert resolv.strip() == "nameserver 10.246.0.1", resolv
        # Only port 443, and only through the proxy: the host's plain port stays closed.
        assert reach(sb, test_host, 8080).startswith("refused")
        assert sb.dns_egress_names == ("granted.test", "*.wild.test"), sb.dns_egress_names


@needs_networks
def test_services_reach_sandboxes_with_networks_of_their_own(mark):
    # Ingress rules govern what comes over the network; a service's connection is relayed inside
    # the sandbox's namespace, so it reaches the server whatever they say, and two sandboxes
    # each serve the same port.
    closed = NetworkOptions(deny_ingress=True)
    with run(mark=mark, services=[Service(port=8000, name="web")], network=closed) as first, run(
        mark=mark, services=[Service(port=8000, name="web")], network=from_the_organization()
    ) as second:
        for sb, text in ((first, "first"), (second, "second")):
            sb.wait(timeout=WAIT)
            sb.exec(
                ["sh", "-c", f"(python3 -c \"$0\" 0.0.0.0 8000 {text} >/dev/null &)", SERVER]
            ).result()
        for sb, text in ((first, "first"), (second, "second")):
            [(_, _, url)] = sb.service_urls
            port = int(url.rsplit(":", 1)[1].rstrip("/"))
            deadline = time.monotonic() + WAIT
            reply = ""
            while reply != text and time.monotonic() < deadline:
                try:
                    with socket.create_connection(("127.0.0.1", port), 5) as connection:
                        reply = connection.recv(100).decode()
                except OSError:
                    time.sleep(0.05)
            assert reply == text
