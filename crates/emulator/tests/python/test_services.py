"""Services (exposed ports) as the published client asks for them: `services=[Service(port=8000)]` gives
a URL on the host's loopback that reaches a server started in the sandbox (`service_urls`,
`exposed_ports`); sandboxes with networks of their own can serve the same port each; a
TLS_PASSTHROUGH endpoint's address is `service_addresses`; an HTTPS endpoint has TLS terminated
with the emulator's endpoint CA and, with share-token auth, answers 401 without the create-only
token; what is not emulated (UDP) is refused by name.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
import urllib.error
import urllib.request

import pytest

from conftest import NAMESPACES, WAIT, processes_with, run
from cwsandbox import Endpoint, NetworkOptions, Sandbox, SandboxError, Service

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


# Answers each GET with what reached it: the path, the share-token header, the forwarded scheme;
# /slow answers after 40 s (past the endpoint's 15 s request timeout).
ECHO_SERVER = """
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/slow":
            time.sleep(40)
        body = " ".join([self.path, str(self.headers.get("X-Sandbox-Share-Token")),
                         str(self.headers.get("X-Forwarded-Proto"))]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""


def https_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=os.environ["CWSANDBOX_ENDPOINT_CA_FILE"])
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=WAIT + 30, context=context) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_an_https_endpoint_terminates_tls_and_asks_for_the_share_token(mark):
    endpoint = Endpoint(kind="https", auth="share_token")
    service = Service(port=8000, name="web", visibility="public", endpoint=endpoint)
    with run(mark=mark, services=[service], network=NetworkOptions(deny_egress=True)) as sb:
        token = sb.endpoint_share_token
        assert token is not None, "the create answers the share token"
        sb.wait(timeout=WAIT)
        [(port, name, url)] = sb.service_urls
        assert (port, name) == (8000, "web") and url.startswith("https://127.0.0.1:"), url
        [status] = sb.service_endpoints
        assert (status.url, status.request_timeout_seconds, status.auth.value) == (url, 15, "share_token"), status
        # Assigned, but nothing listens in the sandbox yet.
        assert https_get(url, token.as_headers())[0] == 502
        sb.exec(["sh", "-c", f"(python3 -c '{ECHO_SERVER}' >/dev/null 2>&1 &)"], timeout_seconds=WAIT).result()
        deadline = time.monotonic() + WAIT
        while https_get(url, token.as_headers())[0] == 502 and time.monotonic() < deadline:
            time.sleep(0.05)
        # The token in the header or the query; the workload never sees it.
        assert https_get(url, token.as_headers()) == (200, "/ None https")
        assert https_get(f"{url}/p?a=1&share_token={token.get_secret_value()}&b=2") == (200, "/p?a=1&b=2 None https")
        # Without it, or with another: 401, and nothing reaches the sandbox.
        assert https_get(url)[0] == 401
        assert https_get(url, {"X-Sandbox-Share-Token": "not-the-token"})[0] == 401
        assert https_get(f"{url}/?share_token=")[0] == 401
        # Create-only: a Get does not carry it.
        assert Sandbox.from_id(sb.sandbox_id).result().endpoint_share_token is None
        # The request timeout (15 s by default) ends a request the sandbox does not answer.
        started = time.monotonic()
        assert https_get(f"{url}/slow", token.as_headers())[0] == 504
        assert 14 <= time.monotonic() - started < 40


def test_an_open_https_endpoint_needs_no_token_and_keeps_its_timeout(mark):
    endpoint = Endpoint(kind="https", auth="open", request_timeout_seconds=120)
    service = Service(port=8000, visibility="public", endpoint=endpoint)
    with run(mark=mark, services=[service], network=NetworkOptions(deny_egress=True)) as sb:
        assert sb.endpoint_share_token is None
        sb.wait(timeout=WAIT)
        [(_, _, url)] = sb.service_urls
        [status] = sb.service_endpoints
        assert status.request_timeout_seconds == 120
        sb.exec(["sh", "-c", f"(python3 -c '{ECHO_SERVER}' >/dev/null 2>&1 &)"], timeout_seconds=WAIT).result()
        deadline = time.monotonic() + WAIT
        while https_get(url)[0] == 502 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert https_get(url) == (200, "/ None https")


def test_endpoints_are_checked_as_the_cloud_checks_them(mark):
    cases = [
        # A timeout outside 0 or 15-900 seconds.
        (
            Service(port=8443, visibility="public", endpoint=Endpoint(kind="https", auth="open", request_timeout_seconds=5)),
            "sandbox.spec.services[0].endpoint.request_timeout_seconds",
        ),
    ]
    for service, field in cases:
        with pytest.raises(SandboxError) as refused:
            run(mark=mark, services=[service]).wait(timeout=WAIT)
        assert field in str(refused.value), refused.value


def test_what_is_not_emulated_about_services_is_refused_by_name(mark):
    with pytest.raises(SandboxError) as refused:
        run(mark=mark, services=[Service(port=5353, protocol="udp")]).wait(timeout=WAIT)
    assert "sandbox.spec.services[0].protocol" in str(refused.value), refused.value
    # As the v1 service: one sandbox's services share PUBLIC or PRIVATE.
    mixed = [Service(port=8080, visibility="public"), Service(port=9090, visibility="private")]
    with pytest.raises(SandboxError) as refused:
        run(mark=mark, services=mixed).wait(timeout=WAIT)
    assert refused.value.reason == "CWSANDBOX_NOT_IMPLEMENTED", refused.value
    assert "sandbox.spec.services[1].visibility" in str(refused.value), refused.value
