"""Issue 31 messages: a refused imported patch names the user's file (E12); `cache prune`
waits as long as $SGLFORGE_LOCK_WAIT says (E13); a malformed index page is one line (E14)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from reliability_helpers import cli

from sglforge import cache
from sglforge.errors import BusyError
from sglforge.index import Index, _malformed
from synthetic import make_project, make_upstream

TRAVERSALS = [
    "../../../../tmp/VICTIM",
    "python/../../../evil.py",
    "/etc/passwd-ish",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_a_refused_import_names_the_users_file(tmp_path: Path, path: str) -> None:
    project = make_project(tmp_path, make_upstream(tmp_path), [])
    mine = tmp_path / "imp" / "trav.patch"
    mine.parent.mkdir()
    mine.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: A <a@example.com>\nSubject: [PATCH] trav\n\n---\n"
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        "@@ -0,0 +1 @@\n+x\n"
    )
    code, out, err = cli(project, "patches", "import", str(mine))
    assert code == 2, out + err
    assert str(mine) in err and "import.patch" not in err
    assert "sglforge-upstream-tree" not in err
    assert "the upstream tree" in err or "an absolute path" in err
    assert sorted(p.name for p in (project / "patches").iterdir()) == ["series", "upstream.toml"]


class _Pydantic(ValueError):
    def __str__(self) -> str:
        return "3 validation errors for Project\nfiles.0\n  Input should be a dict\nfiles.1\n  ..."


@pytest.mark.parametrize(
    "exc",
    [_Pydantic(), ValueError("line one\n\nline two"), TypeError("x" * 500), KeyError("\x1b[2J")],
)
def test_a_malformed_index_page_is_one_line(exc: BaseException) -> None:
    err = _malformed(Index("http://127.0.0.1:1/simple", "test"), "sglang", "http://x/y", exc)
    assert "\n" not in err.message and "\x1b" not in err.message and len(err.message) < 320
    if isinstance(exc, _Pydantic):
        assert "3 validation errors for Project; files.0; Input should be a dict" in err.message


def test_cache_prune_waits_as_long_as_sglforge_lock_wait_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    wheels = tmp_path / "cache" / "pypi" / "pypi-sglang" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "sglang-1.0-py3-none-any.whl").write_bytes(b"x")
    lock = wheels.parent / ".lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
            "fcntl.flock(f, fcntl.LOCK_EX); f.write('pid 1 (sglforge patches check)\\n'); "
            "f.flush(); print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for wait in ("1", "2"):
            monkeypatch.setenv("SGLFORGE_LOCK_WAIT", wait)
            started = time.monotonic()
            with pytest.raises(BusyError, match=rf"waited {wait} s"):
                cache.prune(0, wheels=True)
            assert time.monotonic() - started < float(wait) + 5
        assert (wheels / "sglang-1.0-py3-none-any.whl").exists()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
