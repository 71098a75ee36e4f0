"""Fixtures of the unit tests: the stand-in sglang server (TEST DOUBLE) served in-process."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[1] / "standin" / "model"

Start = Callable[..., str]


@pytest.fixture
def start() -> Iterator[Start]:
    """Factory: ``start(*flags, fault="", ready=True, **env)`` serves a stand-in on a free
    port of 127.0.0.1 (warmed up unless ``ready=False``); its base URL. Every server started
    is shut down at teardown."""
    from standin import server

    running = []

    def _start(*flags: str, fault: str = "", ready: bool = True, **env: str) -> str:
        args = server.build_parser().parse_args(
            ["--model-path", str(MODEL), "--host", "127.0.0.1", "--port", "0", *flags]
        )
        httpd = server.make_server(args, server.parse_faults(fault), env)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        running.append((httpd, thread))
        if ready:
            server.warm_up(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield _start
    for httpd, thread in running:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
