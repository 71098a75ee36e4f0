"""Processes are started in few places: git in ``git/``, Docker's in ``engine/``, the sglang
construction child in ``construct/``, and every read-only probe (rocminfo, amd-smi, pip, docker
buildx) through ``util.run_probe``, which handles a missing program, a failure to start and a
timeout once. Two more places start what is no probe: ``standin/`` builds the test-double
base (debootstrap, tar, pip download: minutes-long builds whose logs it keeps), and
``tryout.py`` starts the local registry as a service that outlives the command, and
``smoke/runtime.py`` starts the server under test in its own process group (the process
runtime: a service for the run's length, stopped with its whole group)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sglforge"
# Where a process may be started directly (a folder ends in "/").
ALLOWED = (
    "git/",
    "engine/",
    "util.py",
    "construct/",
    "standin/",
    "tryout.py",
    "smoke/runtime.py",
)
STARTERS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def starts_a_process(source: str, name: str) -> list[str]:
    """Each call of ``subprocess.<starter>`` or ``os.system``/``os.popen`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        owner_name = owner.id if isinstance(owner, ast.Name) else ""
        if (owner_name == "subprocess" and node.func.attr in STARTERS) or (
            owner_name == "os" and node.func.attr in ("system", "popen")
        ):
            found.append(f"{name}:{node.lineno} {owner_name}.{node.func.attr}")
    return found


def test_the_rule_finds_what_it_looks_for() -> None:
    src = """
import os, subprocess
subprocess.run(["rocminfo"])
subprocess.Popen(["amd-smi"])
os.system("pip config list")
subprocess.DEVNULL
run(["x"])
"""
    assert [f.split()[1] for f in starts_a_process(src, "m.py")] == [
        "subprocess.run",
        "subprocess.Popen",
        "os.system",
    ]


def test_probes_go_through_run_probe() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ALLOWED):
            continue
        found += starts_a_process(path.read_text(encoding="utf-8"), rel)
    assert found == [], "start probes with util.run_probe:\n" + "\n".join(found)


def test_every_allowed_place_exists() -> None:
    """A place that moved or went is no longer allowed (a stale entry would let a new file of
    that name start processes unseen)."""
    assert [a for a in ALLOWED if not (SRC / a).exists()] == []
