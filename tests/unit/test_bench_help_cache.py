"""bench_serving's ``--help`` of a Docker image is kept under the image's ID, sealed with this
machine's key: the same content-addressed image runs the same client, so a bench against a
baseline (and the suite's benches of one image) start its container once, not each time. The
entry is a hint: a planted or damaged one is a miss and the client runs (held with the other
sealed caches in test_sealed_cache.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sglforge.bench import runner

ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
HELP = "usage: bench_serving.py [--dataset-name {sharegpt,random,generated-shared-prefix}]"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SGLFORGE_KEYS", str(tmp_path / "keys"))
    ran: list[str] = []
    ids = {"img-a": ID_A, "img-a-again": ID_A, "img-b": ID_B}

    def client(ctx: object, image: str, args: list[str], name: str, **_: object) -> str:
        ran.append(image)
        return f"{HELP} ({image})"

    monkeypatch.setattr(runner, "_client", client)
    monkeypatch.setattr(
        runner, "_image_id", lambda ctx, image: ids.get(image) if ctx.rt.kind == "docker" else None
    )
    return ran


def _ctx(tmp_path: Path, kind: str = "docker") -> Any:  # the fields _help reads
    folder = tmp_path / f"report-{kind}"
    folder.mkdir(exist_ok=True)
    return SimpleNamespace(rt=SimpleNamespace(kind=kind), server_url=None, report_dir=folder)


def test_one_client_run_per_image_id(calls: list[str], tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    first = runner._help(ctx, "img-a", "help")
    # another tag of the same image, and the baseline check: the cached text, no container
    assert runner._help(ctx, "img-a-again", "baseline-help") == first
    assert calls == ["img-a"]
    assert (ctx.report_dir / "baseline-help.log").read_text() == first
    # another image ID is another entry
    runner._help(ctx, "img-b", "help")
    assert calls == ["img-a", "img-b"]


def test_the_process_runtime_always_runs_the_client(calls: list[str], tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, kind="process")
    runner._help(ctx, "img-a", "help")
    runner._help(ctx, "img-a", "help")
    assert calls == ["img-a", "img-a"]
    assert not (tmp_path / "cache" / runner.HELP_CACHE).exists()
