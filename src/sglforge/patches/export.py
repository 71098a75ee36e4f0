"""Worktree commits back to patch files (``export``), and new patches from edits (``new``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sglforge import git
from sglforge.errors import PatchError
from sglforge.patches.apply import read_record, record_path, worktree_path
from sglforge.patches.series import Queue, load_queue, split_patch
from sglforge.util import atomic_write, commit_files


@dataclass(frozen=True)
class Exported:
    ref: str
    written: tuple[str, ...]  # patch files whose content changed
    added: tuple[str, ...]  # new patch files
    unchanged: tuple[str, ...]


def slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return s[:52].rstrip("-") or "patch"


def format_commit(wt: Path, commit: str) -> str:
    """``git format-patch`` text of one commit, stable across runs (zero From hash)."""
    return git.run(
        wt,
        "format-patch",
        "-1",
        "--stdout",
        "--zero-commit",
        "--no-signature",
        commit,
        strip=False,
    ).stdout


_STAT_SEP = re.compile(r"^---[ \t]*$", re.M)


def merge_header(old_text: str, new_text: str) -> str:
    """Keep the old file's message (mail headers, description, trailers); take the new
    diffstat and diff, so the stat above the diff always describes it."""
    old_header, _ = split_patch(old_text)
    new_header, new_diff = split_patch(new_text)
    old_sep = _STAT_SEP.search(old_header)
    new_sep = _STAT_SEP.search(new_header)
    if old_sep and new_sep:
        return old_header[: old_sep.start()] + new_header[new_sep.start() :] + new_diff
    return old_header + new_diff


def export_queue(root: Path, ref: str | None = None, new_slug: str | None = None) -> Exported:
    """Write the commits on the ref's worktree branch back to the queue, keeping series order."""
    queue = load_queue(root)
    ref = ref or queue.pin.ref
    wt = worktree_path(root, ref)
    record = read_record(root, ref)
    if not (wt / ".git").exists() or not record:
        raise PatchError(
            f"no sglforge worktree for {ref} at {wt}",
            f"run `sglforge patches apply --ref {ref}` first",
        )
    base = record["upstream_commit"]
    rebase = Path(git.out(wt, "rev-parse", "--git-path", "rebase-apply"))
    if (rebase if rebase.is_absolute() else wt / rebase).exists():
        raise PatchError(
            f"a `git am` session is still in progress in {wt}",
            f"finish it with `git -C {wt} am --continue` (or --abort), then export again",
        )
    commits = git.out(wt, "rev-list", "--reverse", f"{base}..HEAD").split()
    # The patches the branch holds commits for, in order: those applied, plus the one that
    # stopped with a conflict (its resolved commit comes next, after `git am --continue`).
    applied = [p for p in record["patches"] if p.get("commit") or p.get("status") == "conflict"]
    files: dict[Path, str | bytes | None] = {}
    written: list[str] = []
    unchanged: list[str] = []
    added: list[str] = []
    names = [e.name for e in queue.entries]
    for i, c in enumerate(commits):
        text = format_commit(wt, c)
        if i < len(applied):
            name = applied[i]["name"]
            path = root / "patches" / name
            old = path.read_text(errors="replace") if path.exists() else ""
            new = merge_header(old, text) if old else text
            if diff_body(new) != diff_body(old):
                files[path] = new
                written.append(name)
            else:
                unchanged.append(name)
        else:
            subject = git.out(wt, "log", "-1", "--format=%s", c)
            last = i == len(commits) - 1
            name = _new_name(queue, names, new_slug if new_slug and last else subject)
            names.append(name)
            files[root / "patches" / name] = _with_status(text)
            added.append(name)
    if len(commits) < len(applied):
        missing = [p["name"] for p in applied[len(commits) :]]
        raise PatchError(
            f"worktree {wt} lost the commits of {', '.join(missing)}",
            "restore them, or remove those patches from patches/series by hand",
        )
    if added:
        series = (
            (root / "patches" / "series").read_text()
            if (root / "patches" / "series").exists()
            else ""
        )
        if series and not series.endswith("\n"):
            series += "\n"
        files[root / "patches" / "series"] = series + "".join(f"{n}\n" for n in added)
    if files:
        commit_files(root / "patches", files)
        head = git.out(wt, "rev-parse", "HEAD")
        new_queue = load_queue(root)
        record["head"] = head
        record["queue_hash"] = new_queue.hash
        by_commit = dict(zip(commits, [p["name"] for p in applied] + added, strict=False))
        exported = {by_commit[c]: c for c in commits}
        kept = [p for p in record["patches"] if p["name"] not in exported]
        record["patches"] = [
            {"name": n, "status": "clean", "commit": c, "detail": ""} for n, c in exported.items()
        ] + kept
        # patches never attempted (after a conflict) still need an apply
        record["complete"] = not any(p.get("status") == "pending" for p in kept)
        atomic_write(record_path(root, ref), json.dumps(record, indent=2))
    return Exported(ref, tuple(written), tuple(added), tuple(unchanged))


def diff_body(text: str) -> str:
    """The diff, without what format-patch varies by version: index lines and signature."""
    diff = split_patch(text)[1]
    diff = re.sub(r"^-- \n[^\n]*\n*\Z", "", diff, flags=re.M)
    return "\n".join(ln for ln in diff.splitlines() if not ln.startswith("index ")).strip()


def _new_name(queue: Queue, names: list[str], subject: str) -> str:
    numbers = [int(m.group(1)) for n in names if (m := re.match(r"(\d{4})-", n))]
    n = max(numbers, default=0) + 1
    return f"{n:04d}-{slug(subject)}.patch"


def _with_status(text: str) -> str:
    if re.search(r"^Upstream-Status:", text, re.M):
        return text
    header, diff = split_patch(text)
    parts = re.split(r"^(---\s*)$", header, maxsplit=1, flags=re.M)
    if len(parts) == 3:
        body = parts[0].rstrip("\n") + "\n\nUpstream-Status: Pending\n"
        return body + parts[1] + parts[2] + diff
    return header.rstrip("\n") + "\n\nUpstream-Status: Pending\n---\n" + diff


def new_patch(
    root: Path, name: str, ref: str | None = None, message: str | None = None
) -> Exported:
    """Commit the worktree's uncommitted changes as a new patch named ``name``."""
    queue = load_queue(root)
    ref = ref or queue.pin.ref
    wt = worktree_path(root, ref)
    if not (wt / ".git").exists():
        raise PatchError(
            f"no sglforge worktree for {ref} at {wt}",
            f"run `sglforge patches apply --ref {ref}`, edit files there, then rerun",
        )
    if not git.out(wt, "status", "--porcelain"):
        raise PatchError(
            f"worktree {wt} has no changes to turn into a patch", f"edit files under {wt} first"
        )
    if any(re.sub(r"^\d{4}-|\.patch$", "", e.name) == slug(name) for e in queue.entries):
        raise PatchError(
            f"patches/series already has a patch named {slug(name)!r}",
            "pick another NAME, or edit that patch with `sglforge patches apply` + `export`",
        )
    subject = message or name.replace("-", " ")
    git.run(wt, "add", "-A")
    git.run(wt, "commit", "-q", "-m", f"{subject}\n\nUpstream-Status: Pending")
    return export_queue(root, ref, new_slug=name)
