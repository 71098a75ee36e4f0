"""Helpers for the reliability suite: the CLI in-process, a digest of the project's files."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from sglforge.cli import main

REPO = Path(__file__).resolve().parents[2]


def empty_project(where: Path) -> Path:
    """``where`` made into a project with an empty queue pinned to sglang v0.5.14 and this
    repository's images/ (enough for publish, smoke and inspect to get past the queue)."""
    (where / "patches").mkdir(parents=True)
    (where / "patches" / "series").write_text("")
    (where / "patches" / "upstream.toml").write_text(
        'url = "https://github.com/sgl-project/sglang.git"\nref = "v0.5.14"\n'
    )
    shutil.copytree(REPO / "images", where / "images")
    return where


def cli(root: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``sglforge --root ROOT ARGS`` through click's runner: (exit code, stdout, stderr)."""
    res = CliRunner().invoke(main, ["--root", str(root), *args], env=env)
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def spawn(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m sglforge --root ROOT ARGS`` as a real process (for signals and races)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sglforge", "--root", str(root), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file of the project outside build/ (the tool's work area)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == "build" or not path.is_file():
            continue
        out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out
