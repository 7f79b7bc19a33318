"""Services (exposed ports) as the published client asks for them: `services=[Service(port=8000)]` gives
a URL on the host's loopback that reaches a server started in the sandbox (`service_urls`,
`exposed_ports`); sandboxes with networks of their own can serve the same port each; a
TLS_PASSTHROUGH endpoint's address is `service_addresses`; what is not emulated (HTTPS endpoints,
UDP) is refused by name.
"""

from __future__ import annotations

import socket
import urllib.request

import pytest

from conftest import NAMESPACES, WAIT, processes_with, run
from cwsandbox import Endpoint, NetworkOptions, SandboxError, Service

pytestmark = pytest.mark.skipif(not NAMESPACES, reason="a network of its own needs the namespaces isolation")

# Serves `text` at / on 127.0.0.1:port in the background, and returns once it listens.
SERVE = (
    "mkdir -p /tmp/www && printf %s {text} > /tmp/www/index.html && cd /tmp/www && "
    "(python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &) && "
    "until python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))' 2>/dev/null; "
    "do sleep 0.02; done"
)


def serve(sb, port: int, text: str) -> None:
    sb.exec(["sh", "-c", SERVE.format(port=port, text=text)], timeout_seconds=WAIT).result()


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=WAIT) as reply:
        return reply.read().decode()


def test_a_server_in_the_sandbox_answers_at_the_url_the_client_returns(mark):
    isolated = NetworkOptions(deny_egress=True)
    with run(mark=mark, services=[Service(port=8000, name="web")], network=isolated) as first:
        with run(mark=mark, services=[Service(port=8000, name="web")], network=isolated) as second:
            first.wait(timeout=WAIT)
            second.wait(timeout=WAIT)
            [(port, name, url)] = first.service_urls
            assert (port, name) == (8000, "web")
            assert url.startswith("http://127.0.0.1:"), url
            assert first.exposed_ports == ((8000, "web"),)
            [(_, _, other_url)] = second.service_urls
            assert other_url != url
            # Assigned is not the same as listening: nothing answers yet.
            with pytest.raises(OSError):
                fetch(url)
            # The same port in two sandboxes, each in a network of its own.
            serve(first, 8000, "first")
            serve(second, 8000, "second")
            assert fetch(url) == "first"
            assert fetch(other_url) == "second"
        # Gone with its sandbox.
        with pytest.raises(OSError):
            fetch(other_url)
    assert processes_with(mark) == []


def test_a_tls_passthrough_endpoint_is_forwarded_as_it_is(mark):
    service = Service(port=9443, name="tls", visibility="public", endpoint=Endpoint(kind="tls_passthrough"))
    with run(mark=mark, services=[service], network=NetworkOptions(deny_egress=True)) as sb:
        # Create's answer carries the address already (it reads CREATING, and the client keeps a
        # TLS_PASSTHROUGH address only from a CREATING or RUNNING answer), and it stays the same.
        created = sb.service_addresses
        assert [entry.port for entry in created] == [9443], created
        sb.wait(timeout=WAIT)
        [status] = sb.service_addresses
        assert (status,) == created
        host, port = status.address.rsplit(":", 1)
        assert (status.port, host) == (9443, "127.0.0.1")
        sb.exec(
            [
                "sh",
                "-c",
                "(python3 -c 'import socket; s=socket.socket(); "
                "s.bind((\"127.0.0.1\", 9443)); s.listen(); print(\"up\", flush=True); "
                "c, _ = s.accept(); c.sendall(c.recv(5)[::-1]); c.close()' > /tmp/up &) && "
                "until [ -s /tmp/up ]; do sleep 0.02; done",
            ],
            timeout_seconds=WAIT,
        ).result()
        with socket.create_connection((host, int(port)), timeout=WAIT) as connection:
            connection.sendall(b"hello")
            assert connection.recv(5) == b"olleh"


def test_what_is_not_emulated_about_services_is_refused_by_name(mark):
    https = Service(port=8443, visibility="public", endpoint=Endpoint(kind="https", auth="open"))
    with pytest.raises(SandboxError) as refused:
        run(mark=mark, services=[https]).wait(timeout=WAIT)
    assert "sandbox.spec.services[0].endpoint" in str(refused.value), refused.value
    with pytest.raises(SandboxError) as refused:
        run(mark=mark, services=[Service(port=5353, protocol="udp")]).wait(timeout=WAIT)
    assert "sandbox.spec.services[0].protocol" in str(refused.value), refused.value
    # As the v1 service: one sandbox's services share PUBLIC or PRIVATE.
    mixed = [Service(port=8080, visibility="public"), Service(port=9090, visibility="private")]
    with pytest.raises(SandboxError) as refused:
        run(mark=mark, services=mixed).wait(timeout=WAIT)
    assert refused.value.reason == "CWSANDBOX_NOT_IMPLEMENTED", refused.value
    assert "sandbox.spec.services[1].visibility" in str(refused.value), refused.value
