"""Benchmark: `patches check` of a 10-patch queue against 20 tags of a ~10,000-file upstream.

Baseline, measured in the same run: the naive loop people write by hand (check out each
tag in a worktree, then `git apply` each patch in order). Goal: under 10 s on a 2-core
machine and at least 3x faster than the naive loop.

    python bench/bench_check.py [--files 10000] [--tags 20] [--patches 10]
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

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    res = subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, input=stdin, text=True, capture_output=True
    )
    if res.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {res.stderr}")
    return res.stdout


def build_upstream(base: Path, files: int, tags: int) -> Path:
    repo = base / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(files):
        d = repo / "python" / "sglang" / f"mod{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.py").write_text("".join(f"line {n} of file {i}\n" for n in range(40)))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.1.0")
    git(repo, "tag", "v0.1.0")
    for t in range(1, tags):
        # each release touches a handful of files, some of them patched (offsets)
        for k in range(5):
            i = (t * 37 + k * 101) % files
            p = repo / "python" / "sglang" / f"mod{i // 100:03d}" / f"f{i:05d}.py"
            p.write_text(f"# release {t}\n" + p.read_text())
        git(repo, "commit", "-q", "-am", f"v0.1.{t}")
        git(repo, "tag", f"v0.1.{t}")
    return repo


def build_project(base: Path, upstream: Path, patches: int) -> tuple[Path, list[Path]]:
    root = base / "project"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "upstream.toml").write_text(f'url = "{upstream}"\nref = "v0.1.0"\n')
    scratch = base / "scratch"
    git(base, "clone", "-q", str(upstream), str(scratch))
    git(scratch, "checkout", "-q", "v0.1.0")
    names = []
    for n in range(patches):
        i = n * 211 + 3
        p = scratch / "python" / "sglang" / f"mod{i // 100:03d}" / f"f{i:05d}.py"
        lines = p.read_text().splitlines()
        lines[20] = f"patched line {n}"
        p.write_text("\n".join(lines) + "\n")
        git(scratch, "commit", "-q", "-am", f"fix {n}\n\nUpstream-Status: Pending")
        text = git(scratch, "format-patch", "-1", "--stdout", "--zero-commit", "HEAD")
        name = f"{n + 1:04d}-fix-{n}.patch"
        (root / "patches" / name).write_text(text)
        names.append(name)
    (root / "patches" / "series").write_text("".join(f"{x}\n" for x in names))
    return root, [root / "patches" / x for x in names]


def naive(upstream: Path, base: Path, tags: list[str], patches: list[Path]) -> float:
    clone = base / "naive"
    git(base, "clone", "-q", str(upstream), str(clone))
    start = time.perf_counter()
    for tag in tags:
        git(clone, "checkout", "-q", "-f", tag)
        git(clone, "clean", "-fdq")
        for p in patches:
            subprocess.run(["git", "apply", str(p)], cwd=clone, env=ENV, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--tags", type=int, default=20)
    ap.add_argument("--patches", type=int, default=10)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sglforge-bench-check-"))
    try:
        t0 = time.perf_counter()
        upstream = build_upstream(base, args.files, args.tags)
        root, patch_files = build_project(base, upstream, args.patches)
        print(
            f"setup: {args.files} files, {args.tags} tags, {args.patches} patches "
            f"({time.perf_counter() - t0:.1f} s)"
        )
        tags = [f"v0.1.{t}" for t in range(args.tags)]
        from pipelines import open_project
        from sglforge.patches.check import check_refs

        # first run includes the one-time clone into the shared cache; report both
        start = time.perf_counter()
        report = check_refs(open_project(root), tags)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        report = check_refs(open_project(root), tags)
        warm = time.perf_counter() - start
        statuses = {p.status for r in report.refs for p in r.patches}
        baseline = naive(upstream, base, tags, patch_files)
        print(f"sglforge patches check (cold cache): {cold:.2f} s")
        print(f"sglforge patches check (warm cache): {warm:.2f} s  statuses={sorted(statuses)}")
        print(f"naive loop (checkout + git apply):   {baseline:.2f} s")
        print(
            f"speed-up vs naive: {baseline / warm:.1f}x warm, {baseline / cold:.1f}x cold "
            f"(goal >= 3x, and < 10 s)"
        )
        ok = warm < 10 and baseline / warm >= 3
        print("goal met" if ok else "goal NOT met")
        return 0 if ok else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
