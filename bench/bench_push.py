"""Benchmark: `patches push` of one patch onto a queue of N patches, against `git am` of that
one patch in the same worktree at the same place (git's own floor for the step).

For each N (default 10, 500 and 2,000), a queue of N patches (each adds its own file, as in
bench_apply.py) is applied, its top patch popped, then pushed again; `patches pop` is timed
against `git reset --keep HEAD~1` the same way. Each figure is the best of ``--repeat`` runs:
wall time and CPU time (user + system of the process and its git children). Two ratios per
verb: the command as a user runs it (a new Python process: ``python -m sglforge``), and the
verb's own work in one process (``move_stack``, the interpreter and imports left out).
The command is sglforge installed by pip (bench_startup.py's ``install``), as a user has it.
Goal: push within 10x `git am` of that patch at 500 patches (the in-process ratio; the
process start is bench_startup.py's figure).

    python bench/bench_push.py [--patches 10 500 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_apply import ENV, SRC, git, make  # noqa: E402
from bench_startup import install  # noqa: E402

# the command as a user runs it: sglforge installed by pip (compiled bytecode), its script
SCRIPT: list[str] = []


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(step: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``step``: this process and the children it waited for."""
    wall, cpu = time.perf_counter(), _cpu()
    step()
    return time.perf_counter() - wall, _cpu() - cpu


def sglforge(root: Path, *args: str) -> None:
    env = {k: v for k, v in ENV.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    res = subprocess.run(
        [*SCRIPT, "-q", "--root", str(root), *args],
        env={**env, "SGLFORGE_CACHE": str(root.parent / "cache")},
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise SystemExit(f"sglforge {' '.join(args)} exited {res.returncode}: {res.stderr}")


def best(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return min(p[0] for p in pairs), min(p[1] for p in pairs)


def bench(n: int, repeat: int) -> tuple[float, float, float]:
    """(push in-process ratio, push CLI ratio, pop in-process ratio), CPU based."""
    base = Path(tempfile.mkdtemp(prefix=f"sglforge-bench-push-{n}-"))
    try:
        _up, root, files = make(base, "indep", n)
        os.environ.update({k: v for k, v in ENV.items() if k != "PYTHONPATH"})
        os.environ["SGLFORGE_CACHE"] = str(base / "cache")
        sglforge(root, "patches", "apply")
        wt = root / "build" / "worktrees" / "v1.0"
        from sglforge.patches.stack import Move, move_stack
        from sglforge.project import Project

        push = Move("push", count=1)
        pop = Move("pop", count=1)
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in ("am", "reset", "cli")}
        runs.update(push=[], pop=[])
        for _ in range(repeat):
            runs["pop"].append(timed(lambda: move_stack(Project(root), pop)))
            runs["push"].append(timed(lambda: move_stack(Project(root), push)))
            sglforge(root, "patches", "pop")
            runs["cli"].append(timed(lambda: sglforge(root, "patches", "push")))
            # git's floor, at the same place: the top patch off, then on again
            top = git(wt, "rev-parse", "HEAD").strip()
            runs["reset"].append(timed(lambda: git(wt, "reset", "-q", "--keep", "HEAD~1")))
            runs["am"].append(
                timed(lambda: git(wt, "am", "--3way", "--keep-cr", "--quiet", str(files[-1])))
            )
            git(wt, "reset", "-q", "--keep", top)  # back as sglforge recorded it
        am, reset = best(runs["am"]), best(runs["reset"])
        (pw, pc), (cw, cc), (ow, oc) = best(runs["push"]), best(runs["cli"]), best(runs["pop"])
        print(
            f"{n:5d} patches: push {pc * 1e3:6.0f} ms CPU ({pw * 1e3:.0f} ms wall) = "
            f"{pc / am[1]:5.1f}x git am {am[1] * 1e3:.0f} ms; as a command {cc * 1e3:.0f} ms CPU "
            f"({cw * 1e3:.0f} ms wall) = {cc / am[1]:.1f}x; pop {oc * 1e3:.0f} ms CPU "
            f"({ow * 1e3:.0f} ms wall) = {oc / reset[1]:.1f}x git reset {reset[1] * 1e3:.0f} ms"
        )
        return pc / am[1], cc / am[1], oc / reset[1]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patches", type=int, nargs="+", default=[10, 500, 2000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(SRC))
    with tempfile.TemporaryDirectory(prefix="bench-push-install-") as tmp:
        SCRIPT.append(str(install(Path(tmp)) / "sglforge"))
        results = {n: bench(n, args.repeat) for n in args.patches}
    ok = all(r[0] <= 10 for n, r in results.items() if n <= 500)
    print("goal met (push within 10x git am at 500 patches)" if ok else "goal NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
