"""Benchmark: how fast the command line starts (goal: under 0.25 s of CPU, median).

Times, over N interleaved runs each, ``sglforge --help``, ``sglforge --version`` and
``sglforge patches list`` (on a copy of this project's real queue), against two baselines
measured in the same run: a bare interpreter (``python3 -c pass``) and one that only imports
click; wall and CPU (user + system), medians. ``--version`` is also given as a ratio to
``--help`` (issue 33: it must not ask the Docker engine). Also shows which heavy modules each
command imports (the Docker SDK and requests should load only for commands that talk to the
engine or a registry; GitPython only for commands that open a repository with it).

sglforge is timed as a user runs it: installed by pip (from this checkout, into a virtual
environment that sees this interpreter's packages), its bytecode compiled at install, and
started by its ``sglforge`` script; not the sources of src/ compiled on each start (what
``PYTHONDONTWRITEBYTECODE=1`` makes of a checkout). ``--src`` times src/ as it is instead.

    python bench/bench_startup.py [--runs 15] [--src]
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


def install(tmp: Path) -> Path:
    """A virtual environment in ``tmp`` holding this checkout installed by pip (bytecode
    compiled, as a user's install has it); its ``bin`` folder."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", str(ROOT)],
        check=True,
        env=env,
    )
    return venv / "bin"


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


def heavy_imports(py: str, args: list[str], cwd: Path) -> list[str]:
    code = (
        "import sys; from click.testing import CliRunner; from sglforge.cli import main;"
        f"CliRunner().invoke(main, {args!r});"
        "import json;"
        f"print(json.dumps(sorted({{m.split('.')[0] if not m.startswith('sglforge') else m"
        f" for m in sys.modules if m.startswith({HEAVY!r})}})))"
    )
    res = subprocess.run([py, "-c", code], cwd=cwd, env=ENV, capture_output=True, text=True)
    return json.loads(res.stdout.strip() or "[]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--src", action="store_true", help="time src/ as it is, not an install")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        if args.src:
            py, sglforge = sys.executable, [sys.executable, "-m", "sglforge"]
        else:
            ENV.pop("PYTHONPATH", None)  # the installed copy, not src/
            ENV.pop("PYTHONDONTWRITEBYTECODE", None)
            bin_ = install(Path(tmp))
            py, sglforge = str(bin_ / "python"), [str(bin_ / "sglforge")]
            print(f"timing sglforge installed by pip in {bin_.parent}")
        project = Path(tmp) / "project"
        project.mkdir()
        for name in ("patches", "images", "smoke"):
            shutil.copytree(ROOT / name, project / name)
        rows = interleaved(
            {
                "python3 -c pass (baseline)": [py, "-c", "pass"],
                "python3 -c 'import click' (baseline)": [py, "-c", "import click"],
                "sglforge --help": [*sglforge, "--help"],
                "sglforge --version": [*sglforge, "--version"],
                "sglforge patches list": [*sglforge, "patches", "list"],
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
                # CPU, not wall: on a shared machine the wall time is mostly waiting for a core
                passed = c < GOAL
                ok &= passed
                verdict = f"  {'PASS' if passed else 'FAIL'} (goal < {GOAL} s CPU)"
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
                f"{heavy_imports(py, cmd, project) or 'none'}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
