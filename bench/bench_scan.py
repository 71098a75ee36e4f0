"""Benchmark: `sglforge scan` of the README launch, cold and warm, against reading the tree once.

The README's scan: GLM-5.2 (the stand-in checkpoint config tests/standin/model-mxfp4), the
scenario smoke/glm5-mxfp4-mtp-mi355x.toml, this repository's queue, upstream
``pypi:sglang==0.5.14`` (the pin). The PyPI wheels and histories come from the user cache
(linked into a temporary ``$SGLFORGE_CACHE``, as the tests do), so no download is timed; the
upstream mirror is made by a first untimed scan.

- cold: the scan cache (``$SGLFORGE_CACHE/scan``) emptied before the run;
- warm: the same scan again (served from the cache);
- floor: git reading the scanned tree once (``git archive COMMIT python`` to /dev/null).

Runs are interleaved (cold, warm, floor) ``--runs`` times; the figures are medians of wall
and CPU (user + system of the child processes). Goals (issue 33): warm <= 5 s, cold <= 12 s.

    python bench/bench_scan.py [--runs 3]
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
from timing import run_timed, src_option  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = "pypi:sglang==0.5.14"


def user_cache() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return Path(xdg if xdg.startswith("/") else Path.home() / ".cache") / "sglforge"


def timed(cmd: list[str], env: dict[str, str], out: int | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of ``cmd`` (scan exits 1 when a finding fails)."""
    return run_timed(cmd, env=env, ok=(0, 1), stdout=out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    src_option(ap)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sglforge-bench-scan-"))
    try:
        project = base / "project"
        for name in ("patches", "images"):  # the queue, and the target the scenario names
            shutil.copytree(ROOT / name, project / name)
        cache = base / "cache"
        cache.mkdir()
        (user_cache() / "pypi").mkdir(parents=True, exist_ok=True)
        (cache / "pypi").symlink_to(user_cache() / "pypi", target_is_directory=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SGLFORGE_CACHE=str(cache), PYTHONPATH=str(args.src))
        scan = [
            sys.executable, "-m", "sglforge", "--root", str(project), "scan",
            "--model", str(ROOT / "tests" / "standin" / "model-mxfp4"),
            "--scenario", str(ROOT / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"),
            "--upstream", UPSTREAM, "--json",
        ]  # fmt: skip
        first = subprocess.run(scan, env=env, capture_output=True, text=True)
        doc = json.loads(first.stdout)
        commit = doc["commit"]
        mirror = next((cache / "upstream").glob("*.git"))
        floor_cmd = ["git", "-C", str(mirror), "archive", "--format=tar", commit, "python"]
        rows: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": [], "floor": []}
        for _ in range(args.runs):
            shutil.rmtree(cache / "scan", ignore_errors=True)
            rows["cold"].append(timed(scan, env))
            rows["warm"].append(timed(scan, env))
            with open(os.devnull, "wb") as null:
                rows["floor"].append(timed(floor_cmd, env, out=null.fileno()))
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
               for k, v in rows.items()}  # fmt: skip
        fw, fc = med["floor"]
        print(
            f"scan of the README launch ({UPSTREAM}, queue of {len(doc['queue'])}, "
            f"{len(doc['findings'])} findings); medians of {args.runs} interleaved runs"
        )
        print(f"floor: git archive of the scanned tree   {fw:6.3f} s wall  {fc:6.3f} s CPU")
        ok = True
        for name, goal in (("cold", 12.0), ("warm", 5.0)):
            w, c = med[name]
            passed = w <= goal
            ok = ok and passed
            spread = ", ".join(f"{x:.2f}" for x, _ in rows[name])
            print(
                f"scan {name:4s} {w:6.2f} s wall [{spread}]  {c:6.2f} s CPU   "
                f"ratio to floor {w / fw:6.1f}x wall, {c / max(fc, 1e-3):6.1f}x CPU   "
                f"{'PASS' if passed else 'FAIL'} (goal <= {goal:g} s)"
            )
        return 0 if ok else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
