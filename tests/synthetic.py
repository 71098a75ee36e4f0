"""Helpers that build real git repositories in temporary folders for the queue tests.

``make_upstream`` makes a small upstream with tags; ``make_project`` makes a sglforge project
whose queue is made of real ``git format-patch`` files cut from a scratch clone.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ENV = {
    "GIT_AUTHOR_NAME": "Upstream Dev",
    "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
    "GIT_COMMITTER_NAME": "Upstream Dev",
    "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    """Run git in ``cwd`` with a pinned identity; returns stdout."""
    env = {**os.environ, **ENV}
    res = subprocess.run(
        ["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {res.stderr}")
    return res.stdout.strip()


def lines(name: str, n: int = 30) -> list[str]:
    return [f"{name} line {i}" for i in range(1, n + 1)]


def write(repo: Path, rel: str, content: list[str] | str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    text = content if isinstance(content, str) else "\n".join(content) + "\n"
    path.write_text(text)


def edit(repo: Path, rel: str, lineno: int, new: str) -> None:
    path = repo / rel
    content = path.read_text().splitlines()
    content[lineno - 1] = new
    path.write_text("\n".join(content) + "\n")


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


BASE_FILES = {
    "python/pkg/a.py": "a",
    "python/pkg/b.py": "b",
    "python/pkg/c.py": "c",
    "python/pkg/d.py": "d",
    "python/pkg/e.py": "e",
    "python/pkg/jit_kernel/f.cuh": "f",
    "python/pkg/g.py": "g",
}


def make_upstream(tmp: Path) -> Path:
    """Upstream with v1.0 (the pin) and v1.1, where each queue patch meets a different fate.

    At v1.1: a.py untouched (clean); b.py has 3 lines added at the top (offset); c.py has a
    change two lines below the patched line (3-way); d.py has the patched line changed
    differently (conflict); e.py got the identical change (upstreamed); f.cuh moved to
    python/pkg/kernels/jit/f.cuh with the change (upstreamed after a move).
    """
    repo = tmp / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for rel, name in BASE_FILES.items():
        write(repo, rel, lines(name))
    write(repo, "python/pkg/version.py", '__version__ = "1.0"\n')
    commit(repo, "release 1.0")
    git(repo, "tag", "v1.0")
    # v1.1
    b = lines("b")
    write(repo, "python/pkg/b.py", ["# header 1", "# header 2", "# header 3", *b])
    edit(repo, "python/pkg/c.py", 12, "c line 12 changed upstream")
    edit(repo, "python/pkg/d.py", 10, "d line 10 changed upstream differently")
    commit(repo, "upstream work")
    edit(repo, "python/pkg/e.py", 10, "e line 10 FIXED")
    commit(repo, "fix e the same way")
    f = lines("f")
    f[9] = "f line 10 FIXED"
    (repo / "python/pkg/jit_kernel/f.cuh").unlink()
    write(repo, "python/pkg/kernels/jit/f.cuh", f)
    write(repo, "python/pkg/version.py", '__version__ = "1.1"\n')
    commit(repo, "move kernels, fix f")
    git(repo, "tag", "v1.1")
    return repo


PATCHES = [
    # (slug, file, line, new text, extra trailers)
    ("fix-a", "python/pkg/a.py", 5, "a line 5 FIXED", ""),
    ("fix-b", "python/pkg/b.py", 20, "b line 20 FIXED", ""),
    ("fix-c", "python/pkg/c.py", 10, "c line 10 FIXED", ""),
    ("fix-d", "python/pkg/d.py", 10, "d line 10 FIXED", ""),
    ("fix-e", "python/pkg/e.py", 10, "e line 10 FIXED", "Upstream-Fixed-In: 1.1\n"),
    ("fix-f", "python/pkg/jit_kernel/f.cuh", 10, "f line 10 FIXED", ""),
    ("fix-g", "python/pkg/g.py", 10, "g line 10 FIXED", "Applies-To: <1.1\n"),
    ("fix-d-more", "python/pkg/d.py", 11, "d line 11 FIXED too", ""),
]


def make_project(
    tmp: Path,
    upstream: Path,
    patches: list[tuple[str, str, int, str, str]] | None = None,
    base: str = "v1.0",
) -> Path:
    """A sglforge project whose queue patches ``upstream`` at ``base``."""
    patches = PATCHES if patches is None else patches
    root = tmp / "project"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "upstream.toml").write_text(f'url = "{upstream}"\nref = "{base}"\n')
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    scratch = tmp / "scratch"
    git(tmp, "clone", "-q", str(upstream), str(scratch))
    git(scratch, "checkout", "-q", base)
    names = []
    for n, (slug, rel, lineno, new, extra) in enumerate(patches, 1):
        edit(scratch, rel, lineno, new)
        msg = f"{slug}: patch {rel}\n\nWhy: tests.\n\nUpstream-Status: Pending\n{extra}"
        commit(scratch, msg)
        text = git(scratch, "format-patch", "-1", "--stdout", "--zero-commit", "HEAD") + "\n"
        name = f"{n:04d}-{slug}.patch"
        (root / "patches" / name).write_text(text)
        names.append(name)
    (root / "patches" / "series").write_text("# the queue\n" + "".join(f"{x}\n" for x in names))
    return root


# The queue minus the patches that conflict at v1.1 (fix-d and the one depending on it).
NO_CONFLICT = [p for p in PATCHES if not p[0].startswith("fix-d")]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every byte of the queue and CHANGELOG.md (the queue's empty lock file left out)."""
    files = [root / "CHANGELOG.md", *sorted((root / "patches").rglob("*"))]
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in files
        if p.is_file() and p.name != ".sglforge.lock"
    }
