"""Issue 19: every wait has an overall deadline, not only a per-read timeout.

- smoke's HTTP requests: a server that keeps the answer open with keep-alive bytes, trickles
  its body, sends a huge body or says nothing gets a verdict within the request timeout, and
  the bytes read are capped (real sockets on 127.0.0.1, a hostile server in a thread);
- the base probe: a base whose ``python3`` hangs is a build error (exit 6) naming the base
  within ``$SGLFORGE_PROBE_TIMEOUT``, its container removed (real engine);
- a deadline from the environment is a finite number: ``inf``, ``nan`` or text is exit 2.
"""

from __future__ import annotations

import io
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from reliability_helpers import cli

from helpers_build import make_build_project
from sglforge.errors import ConfigError
from sglforge.smoke import checks
from sglforge.util import env_seconds

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%s\r\n"


class Hostile:
    """An HTTP server on 127.0.0.1 answering every request the way ``mode`` says."""

    def __init__(self, mode: str) -> None:
        self.mode, self.sent, self.stop = mode, 0, threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            if self.mode == "keepalive":  # SSE comments forever: the answer never ends
                self._send(conn, HEAD % (b"text/event-stream", b""))
                while not self.stop.is_set():
                    self._send(conn, b": keepalive\n\n")
                    time.sleep(0.2)
            elif self.mode == "trickle":  # a JSON body, one byte at a time, forever
                self._send(conn, HEAD % (b"application/json", b"Content-Length: 100000\r\n"))
                self._send(conn, b'{"text": "')
                while not self.stop.is_set():
                    self._send(conn, b"x")
                    time.sleep(0.05)
            elif self.mode == "huge":  # 1 GiB announced, sent as fast as it is read
                self._send(conn, HEAD % (b"application/json", b"Content-Length: 1073741824\r\n"))
                block = b"0" * (1 << 20)
                for _ in range(1024):
                    if self.stop.is_set():
                        break
                    self._send(conn, block)
            elif self.mode == "silent":
                self.stop.wait(30)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def hostile() -> Iterator[type[Hostile]]:
    made: list[Hostile] = []

    class Made(Hostile):
        def __init__(self, mode: str) -> None:
            super().__init__(mode)
            made.append(self)

    yield Made
    for h in made:
        h.close()


@pytest.mark.parametrize("mode", ["keepalive", "trickle", "huge", "silent"])
@pytest.mark.parametrize("call", ["json", "stream"])
def test_a_request_ends_within_its_timeout_with_capped_reads(
    hostile: type[Hostile], mode: str, call: str
) -> None:
    server = hostile(mode)
    started = time.monotonic()
    with pytest.raises(checks.HttpError) as err:
        if call == "json":
            checks._json(f"{server.url}/generate", {"text": "x"}, timeout=2.0)
        else:
            checks._stream(f"{server.url}/generate", {"text": "x"}, timeout=2.0)
    took = time.monotonic() - started
    assert took < 5.0, (mode, call, took, err.value)
    assert server.url in str(err.value)
    if mode == "huge":
        assert "larger than" in str(err.value) or "longer than" in str(err.value)
        # The client stopped reading: far less than the 1 GiB announced went out.
        time.sleep(0.2)
        assert server.sent < 256 << 20, server.sent


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "abc", "1e400"])
def test_a_deadline_from_the_environment_is_finite(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SGLFORGE_PROBE_TIMEOUT", value)
    with pytest.raises(ConfigError) as err:
        env_seconds("SGLFORGE_PROBE_TIMEOUT", 120.0)
    assert "SGLFORGE_PROBE_TIMEOUT" in str(err.value)


@pytest.mark.parametrize(("value", "seconds"), [("", 120.0), ("0", 1.0), ("-5", 1.0), ("7", 7.0)])
def test_plain_deadlines_are_taken(
    monkeypatch: pytest.MonkeyPatch, value: str, seconds: float
) -> None:
    monkeypatch.setenv("SGLFORGE_PROBE_TIMEOUT", value)
    assert env_seconds("SGLFORGE_PROBE_TIMEOUT", 120.0) == seconds


HANGING = {
    "sleeps": "exec sleep 100000",
    "trickles": "while :; do echo .; sleep 0.5; done",  # output keeps coming, no end
}


@pytest.mark.docker
@pytest.mark.parametrize("how", sorted(HANGING))
def test_a_base_whose_python3_hangs_is_a_build_error_in_time(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
    standin_base: str,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    project = make_build_project(tmp_path, repository=f"sglforge-test/hang-{uuid.uuid4().hex[:6]}")
    base = f"sglforge-test/hang-base-{uuid.uuid4().hex[:6]}:v0.5.14-rocm700-mi35x"
    dockerfile = (
        f"FROM {standin_base}\n"
        'RUN p=$(command -v python3) && rm -f "$p" && '
        f"printf '#!/bin/sh\\n%s\\n' '{HANGING[how]}' > \"$p\" && chmod +x \"$p\"\n"
    )
    docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=base, labels=docker_labels, rm=True
    )
    monkeypatch.setenv("SGLFORGE_PROBE_TIMEOUT", "3")
    try:
        started = time.monotonic()
        code, out, err = cli(
            project.root,
            "build",
            "--offline",
            "--base-image",
            base,
            "--upstream",
            str(project.upstream),
        )
        took = time.monotonic() - started
        assert code == 6, (code, out, err)
        assert base in err and "did not finish within 3 s" in err, err
        assert took < 60, took
        left = docker_client.containers.list(all=True, filters={"ancestor": base})
        assert left == []  # the probe container was removed
    finally:
        docker_client.images.remove(base, force=True)
