"""Benchmark: `patches apply` of a 500-patch queue, against one `git am` of the whole series.

Two queue shapes: ``indep`` (each patch adds its own file) and ``same`` (a chain of patches
editing one file). Baseline, measured in the same run on the same upstream: a single
``git am --3way`` of every patch file at once in a fresh worktree (git's own floor for
turning the series into commits). Goal: ``apply`` within 2x of that baseline.

Also measures the peak memory (max RSS of a child process) of ``list``, ``lint`` and
``hash`` on a queue holding one large patch (``--big-mb``, default 42), against the patch's
size. Goal: under 3x the patch size.

    python bench/bench_apply.py [--patches 500] [--big-mb 42] [--skip-big]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
}


def git(cwd: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, env=ENV, text=True, capture_output=True)
    if res.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {res.stderr}")
    return res.stdout


def make(base: Path, shape: str, n: int) -> tuple[Path, Path, list[Path]]:
    """(upstream, project, patch files) for a queue of ``n`` patches of ``shape``."""
    up = base / "upstream"
    up.mkdir(parents=True)
    git(up, "init", "-q", "-b", "main")
    (up / "python" / "pkg").mkdir(parents=True)
    (up / "python" / "pkg" / "one.py").write_text("".join(f"line {i}\n" for i in range(n + 10)))
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "v1.0")
    git(up, "tag", "v1.0")
    root = base / "project"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "upstream.toml").write_text(f'url = "{up}"\nref = "v1.0"\n')
    scratch = base / "scratch"
    git(base, "clone", "-q", str(up), str(scratch))
    one = scratch / "python" / "pkg" / "one.py"
    for i in range(n):
        if shape == "indep":
            (scratch / "python" / "pkg" / f"new_{i:04d}.py").write_text(f"X = {i}\n")
        else:
            lines = one.read_text().splitlines()
            lines[i] = f"line {i} PATCHED"
            one.write_text("\n".join(lines) + "\n")
        git(scratch, "add", "-A")
        git(scratch, "commit", "-q", "-m", f"change {i}\n\nUpstream-Status: Pending")
    text = git(scratch, "format-patch", "--zero-commit", "-o", str(root / "patches"), "v1.0")
    files = [Path(p) for p in text.split()]
    (root / "patches" / "series").write_text("".join(f"{p.name}\n" for p in files))
    return up, root, files


def cli(root: Path, *args: str) -> float:
    start = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "sglforge", "-q", "--root", str(root), *args],
        env={**ENV, "SGLFORGE_CACHE": str(root.parent / "cache")},
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"sglforge {' '.join(args)} exited {res.returncode}: {res.stderr}")
    return took


def one_git_am(up: Path, base: Path, files: list[Path]) -> float:
    wt = base / "baseline"
    git(base, "clone", "-q", str(up), str(wt))
    git(wt, "checkout", "-q", "-B", "b", "v1.0")
    start = time.perf_counter()
    git(wt, "am", "--3way", "--keep-cr", "--quiet", *map(str, files))
    return time.perf_counter() - start


def bench_apply(n: int) -> bool:
    ok = True
    for shape in ("indep", "same"):
        base = Path(tempfile.mkdtemp(prefix=f"sglforge-bench-apply-{shape}-"))
        try:
            up, root, files = make(base, shape, n)
            cli(root, "patches", "check", "--ref", "v1.0")  # warms the upstream cache
            took = cli(root, "patches", "apply", "--force")
            shutil.rmtree(root / "build" / "worktrees")
            took = min(took, cli(root, "patches", "apply", "--force"))
            baseline = one_git_am(up, base, files)
            ratio = took / baseline
            print(
                f"apply {shape:5s} x{n}: {took:.2f} s; one git am of the series: "
                f"{baseline:.2f} s; ratio {ratio:.2f} (goal <= 2)"
            )
            ok = ok and ratio <= 2
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return ok


def peak_rss(root: Path, *args: str) -> int:
    """Max RSS in bytes of one ``sglforge`` child (its own rusage, from wait4)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglforge", "-q", "--root", str(root), *args],
        env={**ENV, "SGLFORGE_CACHE": str(root.parent / "cache")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"sglforge {' '.join(args)} exited {proc.returncode}: {err}")
    return int(usage.ru_maxrss) * 1024


def bench_big(mb: int) -> bool:
    base = Path(tempfile.mkdtemp(prefix="sglforge-bench-bigpatch-"))
    try:
        _up, root, _files = make(base, "indep", 1)
        scratch = base / "scratch"
        big = scratch / "python" / "pkg" / "big.py"
        line = "x = 'abcdefghijklmnopqrstuvwxyz0123456789abcdefghijk'\n"  # 60 bytes
        # Written in blocks: a child's max RSS counts the parent's memory at fork time, so the
        # bench itself must stay small for the figures to be the children's own.
        lines = mb * (1 << 20) // (len(line) + 1)
        with big.open("w") as fh:
            for _ in range(lines // 10_000):
                fh.write(line * 10_000)
            fh.write(line * (lines % 10_000))
        git(scratch, "add", "-A")
        git(scratch, "commit", "-q", "-m", "big\n\nUpstream-Status: Pending")
        text = git(scratch, "format-patch", "--zero-commit", "-1", "-o", str(root / "patches"))
        patch = Path(text.strip())
        with (root / "patches" / "series").open("a") as fh:
            fh.write(f"{patch.name}\n")
        size = patch.stat().st_size
        floor = peak_rss(root, "--version")
        ok = True
        for args in (("patches", "list"), ("patches", "lint"), ("patches", "hash")):
            rss = peak_rss(root, *args)
            ratio = (rss - floor) / size
            print(
                f"{' '.join(args):13s} on a {size / 1e6:.0f} MB patch: max RSS {rss / 1e6:.0f} MB"
                f" ({floor / 1e6:.0f} MB of it the interpreter); {ratio:.1f}x the patch (goal < 3)"
            )
            ok = ok and ratio < 3
        return ok
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patches", type=int, default=500)
    ap.add_argument("--big-mb", type=int, default=42)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--skip-apply", action="store_true")
    args = ap.parse_args()
    ok = True
    if not args.skip_apply:
        ok = bench_apply(args.patches) and ok
    if not args.skip_big:
        ok = bench_big(args.big_mb) and ok
    print("goal met" if ok else "goal NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
