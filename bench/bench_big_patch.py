"""Benchmark: `patches lint` and `patches check` of one big patch, against git's own floors.

One queue holding a patch that adds a file of ``--mb`` MiB (42 by default, as PERF.md's). The
floors are measured in the same run on the same patch:

- lint: ``git apply --numstat PATCH`` (git reading and parsing the whole diff);
- check: ``git read-tree`` of the pin into a temporary index, then ``git apply --cached``.

Each command runs ``--runs`` times, interleaved with its floor; the figure is the median CPU time
(user + system) of the child processes. Goal (issue 33): each within 10x its floor. The CPU time
of ``python3 -c pass`` is printed too: the part of any sglforge command that is the interpreter.

    python bench/bench_big_patch.py [--mb 42] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_apply import ENV, git, make  # noqa: E402

from timing import run_timed  # noqa: E402


def cpu(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """CPU seconds (user + system) of running ``cmd`` to its end (lint exits 1 on findings;
    these patches have warnings only)."""
    return run_timed(cmd, cwd=cwd, env=env or ENV, ok=(0, 1))[1]


def big_queue(base: Path, mb: int) -> tuple[Path, Path]:
    """(project, the big patch) in a queue on a one-file upstream."""
    _up, root, _files = make(base, "indep", 1)
    scratch = base / "scratch"
    line = "x = 'abcdefghijklmnopqrstuvwxyz0123456789abcdefghijk'\n"
    lines = mb * (1 << 20) // len(line)
    with (scratch / "python" / "pkg" / "big.py").open("w") as fh:
        for _ in range(lines // 10_000):
            fh.write(line * 10_000)
        fh.write(line * (lines % 10_000))
    git(scratch, "add", "-A")
    git(scratch, "commit", "-q", "-m", "big\n\nUpstream-Status: Pending")
    text = git(scratch, "format-patch", "--zero-commit", "-1", "-o", str(root / "patches"))
    patch = Path(text.strip())
    with (root / "patches" / "series").open("a") as fh:
        fh.write(f"{patch.name}\n")
    return root, patch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=42)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sglforge-bench-bigpatch-"))
    try:
        root, patch = big_queue(base, args.mb)
        up = base / "upstream"
        index = base / "floor.index"
        env = {**ENV, "SGLFORGE_CACHE": str(base / "cache")}
        sglforge = [sys.executable, "-m", "sglforge", "-q", "--root", str(root), "patches"]
        cpu([*sglforge, "check"], root, env)  # the first check fetches the upstream mirror

        def check_floor() -> float:
            genv = {**ENV, "GIT_INDEX_FILE": str(index)}
            t = cpu(["git", "read-tree", "v1.0"], up, genv)
            return t + cpu(["git", "apply", "--cached", str(patch)], up, genv)

        pairs: dict[str, tuple[Callable[[], float], Callable[[], float]]] = {
            "lint": (
                lambda: cpu([*sglforge, "lint"], root, env),
                lambda: cpu(["git", "apply", "--numstat", str(patch)], root),
            ),
            "check": (lambda: cpu([*sglforge, "check"], root, env), check_floor),
        }
        interp = statistics.median(
            cpu([sys.executable, "-c", "pass"], root) for _ in range(args.runs)
        )
        size = patch.stat().st_size
        print(f"one patch of {size / 2**20:.1f} MiB; medians of {args.runs} interleaved runs")
        print(f"interpreter start (python3 -c pass): {interp:.3f} s CPU")
        ok = True
        for name, (ours, floor) in pairs.items():
            mine: list[float] = []
            theirs: list[float] = []
            for _ in range(args.runs):
                mine.append(ours())
                theirs.append(floor())
            m, f = statistics.median(mine), statistics.median(theirs)
            ratio = m / f
            ok = ok and ratio <= 10
            print(
                f"patches {name:5s} {m:6.3f} s CPU   floor {f:6.3f} s   ratio {ratio:5.1f}x "
                f"(goal <= 10x; above the interpreter: {(m - interp) / f:5.1f}x)"
            )
        return 0 if ok else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
