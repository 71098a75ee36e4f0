"""Diffs and patches: changed names, renames, patch ids, and applying text to an index."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sglforge.git._process import RENAME_LIMIT, GitResult, _run


def diff_names(repo: Path | str, a: str, b: str) -> list[str]:
    """The files that differ between two commits, named exactly (no quoting, no renames)."""
    out_z = _run(repo, "diff", "--name-only", "-z", "--no-renames", a, b, strip=False).stdout
    return [f for f in out_z.split("\0") if f]


def name_status(repo: Path, a: str, b: str) -> list[tuple[str, str]]:
    """(status letter, path) of each file that differs between two commits, no renames:
    ``("A", path)`` added, ``("D", path)`` deleted, ``("M", path)`` modified."""
    res = _run(repo, "diff", "--name-status", "-z", "--no-renames", a, b, check=False, strip=False)
    fields = res.stdout.split("\0")
    return [(fields[i], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def renames(repo: Path, a: str, b: str, paths: Sequence[str] = ()) -> dict[str, str]:
    """{old path: new path} of the files git sees renamed between two commits (among
    ``paths`` only, when given)."""
    res = _run(
        repo,
        "diff",
        "--name-status",
        "-z",
        "-M",
        f"-l{RENAME_LIMIT}",
        "--diff-filter=R",
        a,
        b,
        *(["--", *paths] if paths else []),
        check=False,
        strip=False,
    )
    fields = res.stdout.split("\0")
    moved: dict[str, str] = {}
    for i in range(0, len(fields) - 2, 3):
        if fields[i].startswith("R"):
            moved[fields[i + 1]] = fields[i + 2]
    return moved


def diff(repo: Path, a: str, b: str, paths: Sequence[str] = ()) -> str:
    """The diff from ``a`` to ``b`` (limited to ``paths``), exact bytes."""
    return _run(repo, "diff", a, b, "--", *paths, check=False, strip=False).stdout


def patch_id(repo: Path, text: str) -> str:
    """git's stable patch-id of the diff ``text``; '' when it holds no diff."""
    res = _run(repo, "patch-id", "--stable", stdin=text, check=False)
    return res.stdout.split()[0] if res.stdout else ""


def patch_ids(repo: Path, base: str, tip: str, paths: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(patch-id, commit) of each non-merge commit in ``base..tip`` that touches ``paths``."""
    log = _run(
        repo,
        "log",
        "-p",
        "--no-merges",
        "--format=commit %H",
        f"{base}..{tip}",
        "--",
        *paths,
        check=False,
        strip=False,
    ).stdout
    if not log.strip():
        return []
    ids = _run(repo, "patch-id", "--stable", stdin=log, check=False).stdout
    return [(p[0], p[1]) for line in ids.splitlines() if len(p := line.split()) == 2]


def format_patch(repo: Path | str, commit: str) -> str:
    """``git format-patch`` text of one commit, stable across runs (zero From hash)."""
    return _run(
        repo,
        "format-patch",
        "-1",
        "--stdout",
        "--zero-commit",
        "--no-signature",
        commit,
        strip=False,
    ).stdout


def format_patch_width(
    repo: Path | str, commit: str, context: int, abbrev: int | None = None
) -> str:
    """``format_patch`` of ``commit`` with ``context`` lines of context around each change
    (``-U``) and, when given, blob ids on ``index`` lines cut to ``abbrev`` digits: a patch
    regenerated keeps the shape it was written with."""
    return _run(
        repo,
        "format-patch",
        "-1",
        "--stdout",
        "--zero-commit",
        "--no-signature",
        f"-U{context}",
        *([f"--abbrev={abbrev}"] if abbrev else []),
        commit,
        strip=False,
    ).stdout


def diff_width(repo: Path | str, a: str, b: str, context: int) -> str:
    """The diff from tree (or commit) ``a`` to ``b`` with ``context`` lines of context, exact
    bytes; '' when they hold the same files."""
    return _run(repo, "diff", f"-U{context}", a, b, check=False, strip=False).stdout


def holds_any_line(repo: Path, commit: str, path: str, lines: Sequence[str]) -> bool:
    """Whether ``path`` at ``commit`` holds any of ``lines`` (fixed strings)."""
    patterns = [a for ln in lines for a in ("-e", ln)]
    res = _run(repo, "grep", "-F", "-c", *patterns, commit, "--", path, check=False)
    return res.status == 0 and bool(res.stdout.strip())


def find_line(repo: Path, commit: str, text: str, limit: int = 3) -> list[str]:
    """``path:line`` of the first ``limit`` places the tree of ``commit`` holds ``text``."""
    res = _run(repo, "grep", "-F", "-n", "-e", text, commit, "--", ":/", check=False)
    found = res.stdout.splitlines()[:limit]
    return [":".join(ln.removeprefix(f"{commit}:").split(":", 2)[:2]) for ln in found]


def grep_lines(repo: Path, commit: str, lines: Sequence[str]) -> list[tuple[str, int, str]]:
    """(path, line number, text) of every line of the tree of ``commit`` holding one of
    ``lines`` (fixed strings), in one ``git grep``."""
    if not lines:
        return []
    patterns = [a for ln in lines for a in ("-e", ln)]
    res = _run(repo, "grep", "-F", "-n", "--full-name", *patterns, commit, "--", ":/", check=False)
    out: list[tuple[str, int, str]] = []
    for row in res.stdout.splitlines():
        path, _, rest = row.removeprefix(f"{commit}:").partition(":")
        number, _, text = rest.partition(":")
        if number.isdigit():
            out.append((path, int(number), text))
    return out


def apply_to_folder(folder: Path, patch: Path, include: str) -> GitResult:
    """``patch`` applied to the plain files of ``folder`` (no repository needed), only its
    files matching ``include``; the result says whether it applied."""
    return _run(
        folder, "apply", "--whitespace=nowarn", f"--include={include}", str(patch), check=False
    )


def apply_to_tree(repo: Path | str, commit: str, text: str) -> str | None:
    """The tree ``text`` (a patch) gives applied on ``commit``, made in a private index (no
    file of the work tree is touched); None when it does not apply."""
    fd, name = tempfile.mkstemp(prefix="sglforge-index-")
    os.close(fd)
    os.unlink(name)
    index = Index(repo, Path(name))
    try:
        index.read_tree(commit, check=False)
        if not index.loaded or index.apply(text).status != 0:
            return None
        return index.write_tree()
    finally:
        index.discard()


class Index:
    """A private index file (``GIT_INDEX_FILE``) over ``repo``'s objects: patches are applied
    to it with ``git apply --cached``, so no file is checked out and no worktree touched."""

    def __init__(self, repo: Path | str, path: Path) -> None:
        self.repo = repo
        self.path = path
        self.loaded = False

    def _git(self, *args: str, stdin: str | None = None, check: bool = False) -> GitResult:
        env = {"GIT_INDEX_FILE": str(self.path)}
        return _run(self.repo, *args, stdin=stdin, env=env, check=check)

    def read_tree(self, tree: str, check: bool = True) -> None:
        """The index becomes the tree (or commit) ``tree``."""
        self.loaded = self._git("read-tree", tree, check=check).status == 0

    def read_paths(self, commit: str, paths: Sequence[str], add: bool = False) -> None:
        """An index holding only ``paths`` of ``commit`` (added to what it holds with ``add``).

        Writing a full index of sglang's thousands of files costs more than the patches' own
        work; the handful of files a queue touches gives the same answers.
        """
        listing = self._git("ls-tree", "-r", "--full-tree", commit, "--", *paths, check=True)
        if not add:
            self.path.unlink(missing_ok=True)
        if not listing.stdout:
            if not add:
                self._git("read-tree", "--empty", check=True)
            return
        self._git("update-index", "--index-info", stdin=listing.stdout + "\n", check=True)
        self.loaded = True

    def write_tree(self) -> str:
        """The SHA of a tree object holding what the index holds."""
        return self._git("write-tree", check=True).stdout

    def has_path(self, path: str) -> bool:
        return self._git("ls-files", "--error-unmatch", "--", path).status == 0

    def apply(
        self,
        patch: str | Sequence[Path],
        three_way: bool = False,
        reverse: bool = False,
        check: bool = False,
    ) -> GitResult:
        """``git apply --cached -v`` of ``patch`` (a patch's text, or patch files applied in
        order, atomically); ``check`` only tells whether it would apply. git's verdict and its
        per-hunk report are in the result (status, stderr)."""
        flags = [
            *(["--3way"] if three_way else []),
            *(["--reverse"] if reverse else []),
            *(["--check"] if check else []),
        ]
        if isinstance(patch, str):
            return self._git("apply", "--cached", "-v", *flags, "-", stdin=patch)
        return self._git("apply", "--cached", "-v", *flags, *(str(p) for p in patch))

    def discard(self) -> None:
        """Remove the index file (and a lock a killed git left)."""
        self.path.unlink(missing_ok=True)
        Path(f"{self.path}.lock").unlink(missing_ok=True)
