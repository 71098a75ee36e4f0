"""The base's aiter probe reads the checkout's commit and its fused_moe.py, the way the release
images hold aiter: a git checkout at ``WORKSPACE/aiter`` importable as ``aiter``.

The probe script runs in a plain ``python3`` here (a real git repository made in a temporary
folder, ``PYTHONPATH`` naming it as the images' editable install does), then its output goes
through ``bases.aiter_rule`` as an image's would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import aiter_data
from sglforge.bases import _AITER_PROBE, aiter_rule, aiter_tables_from

A_7D6 = "7d604afe5fa7efba63c0dce323b95d9daf2db112"


def git(repo: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().strip()


def test_the_probe_reads_the_checkout_s_commit_and_its_rule(tmp_path: Path) -> None:
    root = tmp_path / "aiter"
    (root / "aiter" / "configs" / "model_configs").mkdir(parents=True)
    (root / "aiter" / "__init__.py").write_text("")
    (root / "aiter" / "fused_moe.py").write_bytes(aiter_data.blob(A_7D6, "aiter/fused_moe.py"))
    (root / "aiter" / "configs" / "tuned_fmoe.csv").write_text("cu_num,token\n256,1\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "aiter")
    head = git(root, "rev-parse", "HEAD")
    proc = subprocess.run(
        [sys.executable, "-c", _AITER_PROBE],
        capture_output=True,
        text=True,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(root)),
        check=True,
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SGLFORGE-AITER "))
    tables = aiter_tables_from("base:1", json.loads(line.removeprefix("SGLFORGE-AITER ")))
    assert tables is not None and tables.fused_moe is not None
    rule = aiter_rule("base:1", tables)
    assert rule.commit == head
    assert rule.source.startswith(f"git metadata of the checkout {root}")
    assert "gfx" not in rule.key  # 7d604afe5fa7's code, read from the checkout
    # Packed refs (a fresh clone's branch) resolve the same way.
    git(root, "pack-refs", "--all")
    proc = subprocess.run(
        [sys.executable, "-c", _AITER_PROBE],
        capture_output=True,
        text=True,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(root)),
        check=True,
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SGLFORGE-AITER "))
    tables = aiter_tables_from("base:1", json.loads(line.removeprefix("SGLFORGE-AITER ")))
    assert tables is not None and aiter_rule("base:1", tables).commit == head
