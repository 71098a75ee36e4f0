"""SIGINT during `tryout`'s registry start leaves no registry behind (issue 42, F13): the
registry is recorded before its wait (so `--stop` finds it) and ended on any early exit.
Debian's docker-registry binary, no Docker engine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sglforge import tryout


@pytest.mark.parametrize("how", ["interrupt", "no-answer"])
def test_a_registry_start_that_ends_early_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    from sglforge import progress
    from sglforge.standin import registry

    if registry.registry_binary() is None:
        pytest.fail("Debian's docker-registry is missing: run .ci/setup")
    started: list[int] = []
    real_popen = tryout.subprocess.Popen

    def popen(*args: object, **kwargs: object) -> object:
        proc = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(proc.pid)
        return proc

    def answers(_address: str) -> bool:
        assert tryout._pid_file(tmp_path).exists()  # --stop can find it while it starts
        if how == "interrupt":
            raise KeyboardInterrupt
        return False

    monkeypatch.setattr(tryout.subprocess, "Popen", popen)
    monkeypatch.setattr(registry, "answers", answers)
    monkeypatch.setattr(tryout, "REGISTRY_WAIT", 0.5)
    with pytest.raises(KeyboardInterrupt if how == "interrupt" else tryout.TryoutError):
        tryout.start_registry(tmp_path, progress.current())
    assert started and not tryout._pid_file(tmp_path).exists()
    with pytest.raises(ProcessLookupError):
        os.kill(started[0], 0)
