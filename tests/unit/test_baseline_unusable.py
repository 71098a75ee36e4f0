"""A last release whose bench client cannot start is named as such (issue 45, U4): exit 10,
the missing module in the message, the way out in the hint; checked with the baseline's own
``bench_serving --help`` before any boot. ``_client`` is replaced by one that fails as the
real one does (the container's log written, BenchError raised with its tail)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sglforge.bench import runner
from sglforge.errors import EXIT_BASELINE, EXIT_SMOKE, BaselineUnusable, BenchError

TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/bench_serving.py", line 36, in <module>\n'
    "    import {first}\n"
    "ModuleNotFoundError: No module named '{module}'\n"
)


def failing_client(text: str) -> Any:
    def client(ctx: Any, image: str, args: list[str], name: str, **_kw: Any) -> str:
        log = ctx.report_dir / f"{name}.log"
        log.write_text(text)
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise BenchError(f"{image}: python3 -m sglang.bench_serving {name} exited 1: {tail}")

    return client


@pytest.mark.parametrize(
    ("log", "named"),
    [
        (TRACE.format(first="aiohttp", module="aiohttp"), "lacks the module 'aiohttp'"),
        (TRACE.format(first="msgspec", module="msgspec"), "lacks the module 'msgspec'"),
        (TRACE.format(first="zmq", module="zmq.asyncio"), "lacks the module 'zmq.asyncio'"),
        ("Segmentation fault\n", "its bench client does not start"),
    ],
)
def test_a_baseline_that_cannot_bench_is_named_with_its_own_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: str, named: str
) -> None:
    monkeypatch.setattr(runner, "_client", failing_client(log))
    ctx = SimpleNamespace(report_dir=tmp_path, rt=SimpleNamespace(kind="process"), server_url=None)
    with pytest.raises(BaselineUnusable) as err:
        runner._baseline_usable(ctx, "127.0.0.1:5000/ns/sglang@sha256:ab")  # type: ignore[arg-type]
    exc = err.value
    assert exc.exit_code == EXIT_BASELINE != EXIT_SMOKE
    assert named in exc.message and "127.0.0.1:5000/ns/sglang@sha256:ab" in exc.message
    assert exc.hint and "--no-baseline REASON" in exc.hint
    assert str(tmp_path / "baseline-help.log") in exc.hint


def test_a_baseline_whose_client_starts_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "_client", lambda *a, **k: "usage: bench_serving ...")
    runner._baseline_usable(
        SimpleNamespace(report_dir=tmp_path, rt=SimpleNamespace(kind="process"), server_url=None),
        "img",
    )  # type: ignore[arg-type]
