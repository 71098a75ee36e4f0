"""Benchmark: how fast the command line starts (goal: under 0.25 s median on this machine).

Times, over N interleaved runs each, ``sglforge --help``, ``sglforge --version`` and
``sglforge patches list`` (on a copy of this project's real queue), against two baselines
measured in the same run: a bare interpreter (``python3 -c pass``) and one that only imports
click; wall and CPU (user + system), medians. ``--version`` is also given as a ratio to
``--help`` (issue 33: it must not ask the Docker engine). Also shows which heavy modules each
command imports (the Docker SDK and requests should load only for commands that talk to the
engine or a registry; GitPython only for commands that run git).

    python bench/bench_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import run_timed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.25
# this checkout's sglforge, whatever is installed (and whatever the temporary folder holds)
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
HEAVY = (
    "docker",
    "requests",
    "urllib3",
    "git",
    "sglforge.build",
    "sglforge.smoke",
    "sglforge.publish",
)


def once(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``cmd``."""
    return run_timed(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL)


def interleaved(
    cmds: dict[str, list[str]], runs: int, cwd: Path
) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            out[name].append(once(cmd, cwd))
    return out


def heavy_imports(args: list[str], cwd: Path) -> list[str]:
    code = (
        "import sys; from click.testing import CliRunner; from sglforge.cli import main;"
        f"CliRunner().invoke(main, {args!r});"
        "import json;"
        f"print(json.dumps(sorted({{m.split('.')[0] if not m.startswith('sglforge') else m"
        f" for m in sys.modules if m.startswith({HEAVY!r})}})))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=ENV, capture_output=True, text=True
    )
    return json.loads(res.stdout.strip() or "[]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        for name in ("patches", "images", "smoke"):
            shutil.copytree(ROOT / name, project / name)
        py = sys.executable
        rows = interleaved(
            {
                "python3 -c pass (baseline)": [py, "-c", "pass"],
                "python3 -c 'import click' (baseline)": [py, "-c", "import click"],
                "sglforge --help": [py, "-m", "sglforge", "--help"],
                "sglforge --version": [py, "-m", "sglforge", "--version"],
                "sglforge patches list": [py, "-m", "sglforge", "patches", "list"],
            },
            args.runs,
            project,
        )

        def med(name: str, i: int) -> float:
            return statistics.median(r[i] for r in rows[name])

        base_w, base_c = med("python3 -c pass (baseline)", 0), med("python3 -c pass (baseline)", 1)
        ok = True
        for name, times in rows.items():
            w, c = med(name, 0), med(name, 1)
            verdict = ""
            if name.startswith("sglforge"):
                passed = w < GOAL
                ok &= passed
                verdict = f"  {'PASS' if passed else 'FAIL'} (goal < {GOAL} s)"
            print(
                f"{name:40s} median {w:.3f}s wall (max {max(t[0] for t in times):.3f}s) "
                f"{c:.3f}s CPU  {w / base_w:4.1f}x / {c / base_c:4.1f}x the bare interpreter"
                f"{verdict}"
            )
        hw, hc = med("sglforge --help", 0), med("sglforge --help", 1)
        vw, vc = med("sglforge --version", 0), med("sglforge --version", 1)
        print(f"sglforge --version / --help: {vw / hw:.2f}x wall, {vc / hc:.2f}x CPU")
        for cmd in (["--help"], ["--version"], ["patches", "list"], ["build", "--help"]):
            print(
                f"heavy modules imported by sglforge {' '.join(cmd)}: "
                f"{heavy_imports(cmd, project) or 'none'}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
