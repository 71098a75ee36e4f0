"""Issue 19: a registry saying "slow down" (429 toomanyrequests, or a 502/503/504) is a
transient fault, retried with backoff: the engine's push errors are classified so, and the
registry API calls sglforge makes itself (login check, digests, labels) ask again after the
registry's Retry-After. A stand-in registry on 127.0.0.1 answers with real sockets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglforge.engine.credentials import RegistrySession
from sglforge.engine.registry import classify


@pytest.mark.parametrize(
    "message",
    [
        "toomanyrequests: slow down",
        "TOOMANYREQUESTS: You have reached your pull rate limit.",
        "received unexpected HTTP status: 429 Too Many Requests",
        "toomanyrequests: retry-after: 1.5s, allowed: 100/minute",
        "error parsing HTTP 429 response body: unexpected end of JSON input",
        "rate limit exceeded",
    ],
)
def test_a_slow_down_from_the_registry_is_transient(message: str) -> None:
    assert classify(message) == "transient"


class _Registry(BaseHTTPRequestHandler):
    plan: list[int] = []
    seen: list[float] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(time.monotonic())
        status = self.plan.pop(0) if self.plan else 200
        body = b'{"errors": [{"code": "TOOMANYREQUESTS"}]}' if status != 200 else b"{}"
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("plan", "final", "calls"),
    [
        ([429, 429], 200, 3),  # two "slow down", then an answer
        ([503], 200, 2),
        ([502, 504, 429], 200, 4),
        ([429, 429, 429, 429, 429], 429, 4),  # gives up after three retries, with the 429
        ([404], 404, 1),  # not a transient answer: no retry
    ],
)
def test_the_registry_api_is_asked_again_after_a_slow_down(
    registry: str, plan: list[int], final: int, calls: int
) -> None:
    _Registry.plan, _Registry.seen = list(plan), []
    with RegistrySession(registry, None, timeout=5) as session:
        resp = session.request("GET", f"http://{registry}/v2/")
    assert resp.status_code == final
    assert len(_Registry.seen) == calls
    gaps = [b - a for a, b in zip(_Registry.seen, _Registry.seen[1:], strict=False)]
    assert all(g >= 0.9 for g in gaps), gaps  # backed off (Retry-After: 1, or 1-2-4 s)
