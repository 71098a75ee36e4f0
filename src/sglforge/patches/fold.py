"""``patches fold NAME INTO``: one patch's changes merged into another (quilt's ``fold``,
StGit's ``squash``).

The merged diff is made in a private index at the pin (no worktree touched): INTO's base
(the series before INTO's place, without NAME), then both patches in their series order.
The fold is refused unless the new series makes exactly the tree the old one made. INTO
keeps its header (a ``Folded-In:`` trailer is added) and its own context width; NAME goes to
``patches/retired/`` with a ``Retired:`` line, as ``drop`` keeps it; the series, the two
patch files and any ``Depends-On:`` naming NAME change in one all-or-nothing write.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sglforge import git
from sglforge.errors import ConfigError, PatchError
from sglforge.patches.edit import find_entry, set_trailers
from sglforge.patches.export import context_width
from sglforge.patches.refresh import rewrite_series
from sglforge.project import Project
from sglforge.queue.series import Patch, Queue, split_patch
from sglforge.transactions import commit_files
from sglforge.util import confined, project_lock


@dataclass(frozen=True)
class Folded:
    name: str  # the patch folded in (now in patches/retired/)
    into: str
    series: tuple[str, ...]
    retired: str


def fold_patch(project: Project, name: str, into: str) -> Folded:
    """Merge patch ``name`` into patch ``into`` and retire ``name``; nothing is written
    unless the series still makes the same tree at the pin."""
    with project_lock(project.root):
        queue = project.fresh_queue()
        src = queue.by_name(find_entry(queue, name).name)
        dst = queue.by_name(find_entry(queue, into).name)
        if src.name == dst.name:
            raise ConfigError(f"patches fold: {src.name} into itself", "name two patches")
        up = project.upstream
        base = project.pin_commit()
        version = queue.pin.version
        used = [p for p in queue.patches if p.applies_at(version) is not False]
        for p in (src, dst):
            if p not in used:
                raise PatchError(
                    f"{p.name} does not apply at the pin {queue.pin.ref} (Applies-To "
                    f"{p.applies_to}); nothing was changed",
                    "fold patches that both apply at the pin",
                )
        diff = _merged_diff(up.cache, base, used, src, dst)
        text = _folded_text(dst, src, diff)
        files = _files(project.root, queue, src, dst, text)
        commit_files(project.root / "patches", files)
    project.reload()
    order = tuple(e.name for e in queue.entries if e.name != src.name)
    return Folded(src.name, dst.name, order, f"patches/retired/{src.name}")


@contextmanager
def _index(repo: Path, commit: str, paths: Sequence[str]) -> Iterator[git.Index]:
    fd, name = tempfile.mkstemp(prefix="sglforge-fold-")
    os.close(fd)
    index = git.Index(repo, Path(name))
    try:
        index.read_paths(commit, paths)
        yield index
    finally:
        index.discard()


def _apply(index: git.Index, patch: Patch | str, what: str) -> None:
    text = patch if isinstance(patch, str) else patch.text
    res = index.apply(text)
    if res.status != 0:
        said = (res.stderr or res.stdout).strip().splitlines()
        raise PatchError(
            f"patches fold: {what} does not apply at the pin after the fold"
            + (f" ({said[-1]})" if said else "")
            + "; nothing was changed",
            "move the patches next to each other first (`sglforge patches reorder NAME "
            "--after INTO`), then fold",
        )


def _merged_diff(cache: Path, base: str, used: list[Patch], src: Patch, dst: Patch) -> str:
    """The diff of ``dst`` and ``src`` together at ``dst``'s place, with ``dst``'s width;
    PatchError when the series with it makes another tree than without."""
    paths = sorted({x for p in used for x in p.paths})
    with _index(cache, base, paths) as old:
        for p in used:
            _apply(old, p, p.name)
        want = old.write_tree()
    width = context_width(dst.text)
    with _index(cache, base, paths) as new:
        before = [p for p in used[: used.index(dst)] if p is not src]
        for p in before:
            _apply(new, p, p.name)
        start = new.write_tree()
        for p in (q for q in used if q is src or q is dst):
            _apply(new, p, p.name)
        merged = git.diff_width(cache, start, new.write_tree(), 3 if width is None else width)
    if not merged.strip():
        raise PatchError(
            f"patches fold: {src.name} undoes {dst.name} (together they change nothing); "
            "nothing was changed",
            f"drop both: `sglforge patches drop {dst.name} --reason ...`",
        )
    with _index(cache, base, paths) as check:
        for p in used:
            if p is dst:
                _apply(check, merged, f"{dst.name} with {src.name} folded in")
            elif p is not src:
                _apply(check, p, p.name)
        if check.write_tree() != want:
            raise PatchError(
                f"patches fold: the series would make another tree with {src.name} folded "
                f"into {dst.name}; nothing was changed",
                "move the patches next to each other first (`sglforge patches reorder`)",
            )
    return merged


def _folded_text(dst: Patch, src: Patch, diff: str) -> str:
    """``dst``'s file: its mail header and description, a ``Folded-In:`` trailer, the merged
    diff (no diffstat: it would describe the old diff)."""
    header, _ = split_patch(dst.text)
    header = set_trailers(header, {"Folded-In": f"{src.name} ({src.subject})"})
    cut = re.search(r"^---[ \t]*$", header, re.M)
    message = header[: cut.start()] if cut else header.rstrip("\n") + "\n"
    return message + "---\n" + diff


def _files(
    root: Path, queue: Queue, src: Patch, dst: Patch, text: str
) -> dict[Path, str | bytes | None]:
    retired = confined(root / "patches" / "retired", src.name, "retired", src.name)
    if retired.exists():
        raise ConfigError(
            f"patches/retired/{src.name} exists already; nothing was changed",
            "rename the patch first (sglforge patches rename)",
        )
    files: dict[Path, str | bytes | None] = {
        retired: set_trailers(src.text, {"Retired": f"folded into {dst.name}"}),
        src.path: None,
        dst.path: text,
    }
    for p in queue.patches:
        if src.name in p.depends_on and p is not dst:
            deps = dict.fromkeys(dst.name if d == src.name else d for d in p.depends_on)
            files[p.path] = set_trailers(p.text, {"Depends-On": ", ".join(deps)})
    if src.name in dst.depends_on:
        rest = [d for d in dst.depends_on if d != src.name]
        if rest:
            files[dst.path] = set_trailers(text, {"Depends-On": ", ".join(rest)})
        else:
            files[dst.path] = re.sub(r"^Depends-On:.*\n", "", text, count=1, flags=re.M)
    series = root / "patches" / "series"
    files[series] = rewrite_series(series, [e.name for e in queue.entries if e.name != src.name])
    return files
