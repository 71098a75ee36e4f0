"""Benchmark: the first `patches apply` from an empty cache, against `pip download` of the wheel.

Each run makes a new project (``sglforge init --example glm52``, not timed) and a new, empty
``$SGLFORGE_CACHE``, then times ``sglforge -q patches apply`` (the index read, the wheel
downloaded and checked, imported into the PyPI history, the mirror, the worktree, ``git am``
of the queue) and ``pip download --no-deps --no-cache-dir`` of the same release into an empty
folder: the floor, from the same index configuration (the machine's pip configuration: both
read ``pip config``, here pypi.org plus its local extra indexes). pip is given the tags of the
wheel sglforge chooses (``--python-version``, ``--implementation``, ``--abi``, ``--platform``,
binary only), so both fetch the same file; the two names are printed, and different names
fail the run. The two alternate within each run (the order flips every run); the figures are
medians of wall and CPU (user + system of the child processes), and the median of the per-run
ratios. Goal (issue 33): <= 1.5x.

pip runs from its installed bytecode (``__pycache__`` written at install). sglforge's own
modules are compiled once before the runs too (``compileall`` of ``--src``, untimed: the
``__pycache__`` folders an installed sglforge has), since this machine's environment sets
``PYTHONDONTWRITEBYTECODE`` (without it, the first run of a checkout writes them).

The first run starts after a sync and ``--settle`` seconds (65 by default): ext4 skips inodes
freed in the last minute each time it makes a file (``SETTLE``), and on this 2-core VM a
worktree written right after a test suite's clean-up took 0.7-2.4 s instead of 0.2 s.

    python bench/bench_first_apply.py [--runs 3] [--settle 65]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from packaging.utils import parse_wheel_filename

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import run_timed, src_option  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETTLE = (
    "ext4 passes over inodes freed in the last 60 s (360 s while their table block is unwritten) "
    "each time it makes a file, so a run started right after a large deletion (a test suite, "
    "this bench's own clean-up) spends up to 1.5 s more making the worktree's 3,200 files"
)


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of ``cmd``, started on a settled disk; exits on failure.

    The earlier runs' writes (a worktree of 3,200 files and a pack each) are flushed first,
    untimed: on this ext4 a run creating thousands of files while the kernel still writes
    back another's took 0.6-1.4 s instead of 0.12-0.19 s to create them, so without it each
    run partly timed the one before."""
    os.sync()
    return run_timed(cmd, cwd=cwd, env=env)


def chosen_wheel(py: str, version: str, cwd: Path, env: dict[str, str]) -> str:
    """The file name of the wheel sglforge downloads for ``sglang==version`` (asked of
    sglforge's own choice, ``pypi.releases``; not timed)."""
    code = (
        "import sglforge; print(sglforge.__file__); "
        "from packaging.version import Version; from sglforge import pypi; "
        f"print(pypi.releases('sglang')[Version({version!r})].file.filename)"
    )
    res = subprocess.run([py, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"cannot tell which wheel sglforge chooses:\n{res.stderr[-2000:]}")
    where, name = res.stdout.strip().splitlines()[-2:]
    if not Path(where).resolve().is_relative_to(Path(env["PYTHONPATH"]).resolve()):
        raise SystemExit(f"the runs would time {where}, not the sources under --src")
    return name


def pip_tags(wheel: str) -> list[str]:
    """``pip download`` options that make pip choose ``wheel`` (its first tag triple)."""
    _name, _ver, _build, tags = parse_wheel_filename(wheel)
    tag = sorted(tags, key=str)[0]
    opts = ["--only-binary=:all:", "--platform", tag.platform, "--abi", tag.abi]
    interpreter = tag.interpreter
    impl, digits = interpreter[:2], interpreter[2:]
    if digits.isdigit():
        version = f"{digits[0]}.{digits[1:]}" if len(digits) > 1 else digits
        opts += ["--implementation", impl, "--python-version", version]
    return opts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--settle", type=float, default=65.0,
        help="seconds to wait (after a sync) before the first run; see SETTLE",
    )  # fmt: skip
    src_option(ap)
    args = ap.parse_args()
    if args.settle > 0:
        print(f"settling {args.settle:g} s first (after a sync): {SETTLE}", flush=True)
        os.sync()
        time.sleep(args.settle)
    base = Path(tempfile.mkdtemp(prefix="sglforge-bench-first-apply-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(args.src)
    py = sys.executable
    floor_env = dict(env)  # pip: its own installed bytecode
    # sglforge's __pycache__ beside its sources (ignored by git), as pip installs it
    subprocess.run([py, "-m", "compileall", "-q", str(args.src)], env=env, check=True)
    ours: list[tuple[float, float]] = []
    floor: list[tuple[float, float]] = []
    wheels: set[str] = set()
    chosen: str | None = None
    try:
        for n in range(args.runs):
            run_env = {**env, "SGLFORGE_CACHE": str(base / f"cache-{n}")}
            project = base / f"p-{n}"
            timed([py, "-m", "sglforge", "-q", "init", "--example", "glm52", str(project)],
                  base, run_env)  # fmt: skip
            pin = tomllib.loads((project / "patches" / "upstream.toml").read_text())["ref"]
            version = pin.removeprefix("v")
            dl = base / f"pipdl-{n}"
            if chosen is None:
                chosen = chosen_wheel(py, version, base, run_env)

            apply = [py, "-m", "sglforge", "-q", "patches", "apply"]
            pip = [py, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q", "-d",
                   str(dl), *pip_tags(chosen), f"sglang=={version}"]  # fmt: skip
            if n % 2 == 0:
                ours.append(timed(apply, project, run_env))
                floor.append(timed(pip, base, floor_env))
            else:
                floor.append(timed(pip, base, floor_env))
                ours.append(timed(apply, project, run_env))
            got = sorted((base / f"cache-{n}").glob("pypi/*/wheels/*.whl"))
            wheels.update(f"sglforge {w.name}" for w in got)
            wheels.update(f"pip {w.name}" for w in dl.glob("*.whl"))
        fetched = {who: {w.split(" ", 1)[1] for w in wheels if w.startswith(who)} for who in
                   ("pip", "sglforge")}  # fmt: skip
        ratios = [a[0] / b[0] for a, b in zip(ours, floor, strict=True)]
        cpu_ratios = [a[1] / b[1] for a, b in zip(ours, floor, strict=True)]
        ow, oc = statistics.median(w for w, _ in ours), statistics.median(c for _, c in ours)
        fw, fc = statistics.median(w for w, _ in floor), statistics.median(c for _, c in floor)
        ratio = statistics.median(ratios)
        print(f"first patches apply at {pin} from an empty cache; {args.runs} interleaved runs")
        print(f"wheels: {'; '.join(sorted(wheels))}")
        if fetched["pip"] != fetched["sglforge"] or len(fetched["pip"]) != 1:
            print("FAIL: pip and sglforge fetched different wheels; the ratio compares unlike work")
            return 1
        print(
            f"sglforge patches apply {ow:6.2f} s wall [{', '.join(f'{w:.2f}' for w, _ in ours)}]"
            f"  {oc:5.2f} s CPU"
        )
        print(
            f"pip download (floor)   {fw:6.2f} s wall [{', '.join(f'{w:.2f}' for w, _ in floor)}]"
            f"  {fc:5.2f} s CPU"
        )
        verdict = "PASS" if ratio <= 1.5 else "FAIL"
        print(
            f"ratio {ratio:.2f}x wall (median of per-run ratios), "
            f"{statistics.median(cpu_ratios):.2f}x CPU   {verdict} (goal <= 1.5x)"
        )
        return 0 if ratio <= 1.5 else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
