"""A Connect JSON client of the emulator's own API (`coreweave.sandbox.emulator.v1.EmulatorService`),
standard library only: one POST per call, proto3 JSON in and out, Connect errors as exceptions."""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional

EMULATOR_SERVICE = "coreweave.sandbox.emulator.v1.EmulatorService"
SANDBOX_SERVICE = "coreweave.sandbox.v1.SandboxService"
# Generous: every call of the emulator's API answers at once, but a debug build on a busy
# machine is slow.
DEFAULT_TIMEOUT = 60.0


class EmulatorApiError(Exception):
    """A call answered with a Connect error: `code` is its Connect name (`unavailable`,
    `permission_denied`, …), `message` the server's message, `details` the raw details."""

    def __init__(self, method: str, code: str, message: str, details: Optional[list] = None, http_status: int = 0):
        super().__init__(f"{method}: {code}: {message}")
        self.method = method
        self.code = code
        self.message = message
        self.details = details or []
        self.http_status = http_status


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ConnectClient:
    """Calls unary RPCs of one server with one bearer token."""

    def __init__(self, base_url: str, token: str, timeout: float = DEFAULT_TIMEOUT):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        # A proxy from the environment must not intercept calls to an emulator on this machine.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(self.base_url) else []
        self._opener = urllib.request.build_opener(*handlers)

    def call(self, method: str, body: Optional[Dict[str, Any]] = None, service: str = EMULATOR_SERVICE) -> Dict[str, Any]:
        """`service/method` with `body` (proto3 JSON of the request); returns the response's
        proto3 JSON. Raises `EmulatorApiError` for a Connect error."""
        request = urllib.request.Request(
            f"{self.base_url}/{service}/{method}",
            data=json.dumps(body or {}).encode(),
            headers={
                "Content-Type": "application/json",
                "Connect-Protocol-Version": "1",
                "Authorization": f"Bearer {self.token}",
            },
            method="POST",
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raise _connect_error(method, error) from None
        return json.loads(text) if text.strip() else {}


_HTTP_TO_CODE = {
    400: "internal",
    401: "unauthenticated",
    403: "permission_denied",
    404: "unimplemented",
    429: "unavailable",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}


def _connect_error(method: str, error: urllib.error.HTTPError) -> EmulatorApiError:
    raw = error.read()
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or "code" not in payload:
        # No Connect error body (a proxy, or a route the server does not have): the code follows
        # from the HTTP status as the Connect protocol maps it.
        text = raw.decode(errors="replace").strip() or error.reason
        code = _HTTP_TO_CODE.get(error.code, "unknown")
        return EmulatorApiError(method, code, str(text), http_status=error.code)
    return EmulatorApiError(
        method, str(payload["code"]), str(payload.get("message", "")), payload.get("details"), error.code
    )
