"""``util.run_probe``: the one way sglforge runs a read-only probe, on real programs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sglforge import util
from sglforge.util import CANNOT_RUN, NOT_FOUND, find_program, run_probe


def test_stdout_on_success_and_its_own_words_on_failure() -> None:
    code, out = run_probe(
        [sys.executable, "-c", "print('hi'); import sys; sys.stderr.write('w')"], 30
    )
    assert (code, out) == (0, "hi\n")
    code, out = run_probe(
        [sys.executable, "-c", "import sys; sys.stderr.write('bad\\n'); sys.exit(3)"], 30
    )
    assert (code, out) == (3, "bad")
    code, out = run_probe([sys.executable, "-c", "print('only out'); raise SystemExit(2)"], 30)
    assert (code, out) == (2, "only out\n")


def test_missing_program_and_timeout() -> None:
    assert run_probe(["sglforge-no-such-program-here"], 30) == (NOT_FOUND, "")
    code, out = run_probe([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    assert code == CANNOT_RUN and "timed out" in out


def test_the_environment_is_passed_and_stdin_is_closed() -> None:
    env = dict(os.environ, SGLFORGE_PROBE_TEST="seen")
    script = "import os, sys; print(os.environ['SGLFORGE_PROBE_TEST'], repr(sys.stdin.read()))"
    assert run_probe([sys.executable, "-c", script], 30, env) == (0, "seen ''\n")


def test_rocm_bin_is_searched_after_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rocm = tmp_path / "rocm-bin"
    rocm.mkdir()
    tool = rocm / "sglforge-fake-rocminfo"
    tool.write_text("#!/bin/sh\necho from-rocm-bin\n")
    tool.chmod(0o755)
    monkeypatch.setattr(util, "ROCM_BIN", str(rocm))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert find_program(tool.name) == str(tool)
    assert run_probe([tool.name], 30) == (0, "from-rocm-bin\n")
    (rocm / "not-executable").write_text("")
    assert find_program("not-executable") is None
