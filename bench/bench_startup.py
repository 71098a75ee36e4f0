"""Benchmark: how fast the command line starts (goal: under 0.25 s median on this machine).

Times, over N runs each, ``sglforge --help`` and ``sglforge patches list`` (on a copy of this
project's real queue), against two baselines measured in the same run: a bare interpreter
(``python3 -c pass``) and one that only imports click. Also shows which heavy modules each
command imports (the Docker SDK and requests should load only for commands that talk to the
engine or a registry).

    python bench/bench_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.25
HEAVY = ("docker", "requests", "urllib3", "sglforge.build", "sglforge.smoke", "sglforge.publish")


def timed(cmd: list[str], runs: int, cwd: Path) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def heavy_imports(args: list[str], cwd: Path) -> list[str]:
    code = (
        "import sys; from click.testing import CliRunner; from sglforge.cli import main;"
        f"CliRunner().invoke(main, {args!r});"
        "import json;"
        f"print(json.dumps(sorted({{m.split('.')[0] if not m.startswith('sglforge') else m"
        f" for m in sys.modules if m.startswith({HEAVY!r})}})))"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
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
        rows = {
            "python3 -c pass (baseline)": timed([py, "-c", "pass"], args.runs, project),
            "python3 -c 'import click' (baseline)": timed(
                [py, "-c", "import click"], args.runs, project
            ),
            "sglforge --help": timed([py, "-m", "sglforge", "--help"], args.runs, project),
            "sglforge patches list": timed(
                [py, "-m", "sglforge", "patches", "list"], args.runs, project
            ),
        }
        base = statistics.median(rows["python3 -c pass (baseline)"])
        ok = True
        for name, times in rows.items():
            med = statistics.median(times)
            verdict = ""
            if name.startswith("sglforge"):
                passed = med < GOAL
                ok &= passed
                verdict = f"  {'PASS' if passed else 'FAIL'} (goal < {GOAL} s)"
            print(
                f"{name:40s} median {med:.3f}s  max {max(times):.3f}s  "
                f"{med / base:.1f}x the bare interpreter{verdict}"
            )
        for cmd in (["--help"], ["patches", "list"], ["build", "--help"]):
            print(
                f"heavy modules imported by sglforge {' '.join(cmd)}: "
                f"{heavy_imports(cmd, project) or 'none'}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
