"""Worktree commits back to patch files (``export``), and new patches from edits (``new``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from sglforge import git
from sglforge.errors import ConfigError, NothingToDo, PatchError, WorktreeMissing
from sglforge.patches.apply import (
    AppliedPatch,
    WorktreeRecord,
    read_record,
    record_path,
    worktree_path,
    write_record,
)
from sglforge.patches.check import git_reason
from sglforge.project import Project
from sglforge.queue.series import Queue, check_trailers, load_queue, read_series, split_patch
from sglforge.transactions import commit_files
from sglforge.util import confined, project_lock, read_exact


@dataclass(frozen=True)
class Exported:
    ref: str
    written: tuple[str, ...]  # patch files whose content changed
    added: tuple[str, ...]  # new patch files
    unchanged: tuple[str, ...]


def slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    if len(s) > 52:  # cut at a word's end, not inside one
        cut = s[:53].rfind("-")
        s = s[: cut if cut > 0 else 52]
    return s.rstrip("-") or "patch"


def format_commit(wt: Path, commit: str, like: str | None = None) -> str:
    """``git format-patch`` text of one commit, stable across runs (zero From hash). ``like``
    is the patch file it replaces: its context width (a -U1 patch stays -U1), the length of
    the blob ids on its ``index`` lines and its signature line are kept, so a rewritten
    patch differs from the old one only where its changes do."""
    if like is None:
        return git.format_patch(wt, commit)
    width = context_width(like)
    abbrev = _abbrev(like)
    if (width is None or width == 3) and abbrev is None:
        text = git.format_patch(wt, commit)
    else:
        text = git.format_patch_width(wt, commit, 3 if width is None else width, abbrev)
    return _with_signature(text, like)


_INDEX = re.compile(r"^index ([0-9a-f]{4,64})\.\.([0-9a-f]{4,64})", re.M)
_SIGNATURE = re.compile(r"\n-- \n[^\n]*\n*\Z")


def _abbrev(text: str) -> int | None:
    """The digits of the blob ids on a patch's ``index`` lines (None without any, or when
    they are full ids: git's default then)."""
    m = _INDEX.search(text)
    return len(m.group(1)) if m and len(m.group(1)) < 40 else None


def _with_signature(text: str, like: str) -> str:
    """``text`` ending with ``like``'s format-patch signature (``-- `` and git's version),
    when ``like`` had one: the version git runs here is not news to a reviewer."""
    old = _SIGNATURE.search(like)
    if old is None or _SIGNATURE.search(text):
        return text
    return text.rstrip("\n") + "\n" + like[old.start() + 1 :]


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


def context_width(text: str) -> int | None:
    """The context width a patch was written with (``diff -U N``): the most context lines
    any hunk has before its first change or after its last. None without a hunk (then git's
    default of 3 applies); a width chosen by hand (``-U1``, to apply across releases) is
    kept when the patch is made again."""
    widths: list[int] = []
    lead = trail = 0
    seen_change = in_hunk = False

    def close() -> None:
        if in_hunk:
            widths.extend((lead, trail) if seen_change else (lead,))

    for line in split_patch(text)[1].splitlines():
        if _HUNK.match(line):
            close()
            lead = trail = 0
            seen_change, in_hunk = False, True
        elif not in_hunk or line.startswith("\\"):
            continue
        elif line.startswith("diff --git") or line == "-- ":
            close()
            in_hunk = False
        elif line.startswith(" "):
            if seen_change:
                trail += 1
            else:
                lead += 1
        elif line.startswith(("+", "-")):
            seen_change, trail = True, 0
    close()
    return max(widths) if widths else None


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


def same_effect(wt: Path, patch_text: str, commit: str) -> bool:
    """Whether the patch file, applied on ``commit``'s parent, gives exactly ``commit``'s tree.

    Then the commit holds nothing new and the file keeps its bytes: its context width, its
    message, its signature (so the queue hash and the image tag do not move either).
    """
    made = git.apply_to_tree(wt, f"{commit}^", patch_text)
    return made is not None and made == git.tree(wt, commit)


def export_queue(project: Project, ref: str | None = None, new_slug: str | None = None) -> Exported:
    """Write the commits on the ref's worktree branch back to the queue, keeping series order.

    Only patches whose content changed are rewritten (``same_effect``); the others keep
    every byte.
    """
    with project_lock(project.root):
        return _export(project.root, ref, new_slug)


def export_at(root: Path, ref: str) -> Exported:
    """``export_queue`` for a caller already holding the project lock."""
    return _export(root, ref, None)


def _export(root: Path, ref: str | None, new_slug: str | None) -> Exported:
    queue = load_queue(root)
    ref = ref or queue.pin.ref
    wt = worktree_path(root, ref)
    record = read_record(root, ref)
    if not (wt / ".git").exists() or not record:
        raise WorktreeMissing(ref, wt, f"run `sglforge patches apply --ref {ref}` first")
    base = record.upstream_commit
    if git.am_in_progress(wt):
        raise PatchError(
            f"a `git am` session is still in progress in {wt}",
            f"finish it with `git -C {wt} am --continue` (or --abort), then export again",
        )
    refuse_uncommitted(wt, "" if ref == queue.pin.ref else f" --at {ref}", record)
    commits = git.commits_between(wt, base)
    applied = _refuse_strays(root, queue, ref, wt, record, commits)
    if len(commits) < len(applied):
        missing = [p.name for p in applied[len(commits) :]]
        raise PatchError(
            f"worktree {wt} lost the commits of {', '.join(missing)}",
            "restore them, or remove those patches from patches/series by hand",
        )
    files: dict[Path, str | bytes | None] = {}
    written: list[str] = []
    unchanged: list[str] = []
    for c, p in zip(commits, applied, strict=False):
        path = confined(root / "patches", p.name, "patch name", record_path(root, ref).name)
        old = read_exact(path) if path.exists() else ""
        if old and same_effect(wt, old, c):
            unchanged.append(p.name)
            continue
        new = format_commit(wt, c, old or None)
        new = merge_header(old, new) if old else new
        if diff_body(new) != diff_body(old):
            files[path] = new
            written.append(p.name)
        else:
            unchanged.append(p.name)
    names = [e.name for e in queue.entries]
    added: list[str] = []
    for i, c in enumerate(commits[len(applied) :], len(applied)):
        last = i == len(commits) - 1
        name = _new_name(queue, names, new_slug if new_slug and last else git.subject(wt, c))
        names.append(name)
        files[confined(root / "patches", name, "new patch", "patches/series")] = _with_status(
            format_commit(wt, c)
        )
        added.append(name)
    if added:
        files[root / "patches" / "series"] = _series_with(root, record, added)
    if files:
        commit_files(root / "patches", files)
        names_of = [p.name for p in applied] + added
        _record_export(root, record, wt, dict(zip(commits, names_of, strict=True)))
    return Exported(ref, tuple(written), tuple(added), tuple(unchanged))


# What running Python or pytest in a worktree leaves (a tree made from wheels has no
# .gitignore): never an edit, never part of a patch.
BYTECODE = ("**/__pycache__/**", "**/*.pyc", "**/.pytest_cache/**")


def edits_in(wt: Path) -> list[str]:
    """The worktree's uncommitted changes as ``git status`` names them, bytecode caches
    left out (``BYTECODE``)."""
    return [
        f
        for f in git.uncommitted(wt)
        if not (
            f.endswith(".pyc") or {"__pycache__", ".pytest_cache"} & set(f.rstrip("/").split("/"))
        )
    ]


def refuse_uncommitted(wt: Path, at: str, record: WorktreeRecord) -> None:
    """PatchError naming the worktree's uncommitted edits: they belong to no commit, so an
    export would leave them out (quilt's "needs to be refreshed first"). ``at`` is the
    `` --at REF`` the hint's refresh needs ('' at the pin)."""
    dirty = edits_in(wt)
    if not dirty:
        return
    shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
    top = [p.name for p in record.applied()]
    into = f"the top patch, {top[-1]}" if top else "the top patch"
    ref = at.replace(" --at ", " --ref ")
    raise PatchError(
        f"worktree {wt} has uncommitted edits ({shown}) that no patch holds; nothing was written",
        f"fold them into {into}: `sglforge patches refresh{at}`; or make a new patch: "
        f"`sglforge patches new NAME{ref}`",
    )


def _series_with(root: Path, record: WorktreeRecord, added: list[str]) -> str:
    """patches/series with the ``added`` patches just above the top (quilt's `new`): after
    the last applied patch, before the first when none is; at the end when none waits."""
    path = root / "patches" / "series"
    lines = read_exact(path).splitlines() if path.exists() else []
    below = [p.name for p in record.applied()]
    waiting = [p.name for p in record.patches if p.status in UNAPPLIED_STATES]
    entries = {n: (line.split("#", 1)[0].split() or [""])[0] for n, line in enumerate(lines)}
    at = len(lines)
    if waiting and below:
        at = max((n + 1 for n, w in entries.items() if w == below[-1]), default=at)
    elif waiting:
        at = min((n for n, w in entries.items() if w == waiting[0]), default=at)
    return "\n".join([*lines[:at], *added, *lines[at:]]) + "\n"


# Record statuses of patches not (yet) applied in the worktree: after a conflict, or popped.
UNAPPLIED_STATES = ("pending", "unapplied")


def _record_export(root: Path, record: WorktreeRecord, wt: Path, by_commit: dict[str, str]) -> None:
    """The worktree record after an export: each commit now belongs to its patch, and the
    record lists the patches in the order of patches/series as written (a new patch sits
    where ``_series_with`` put it)."""
    exported = {name: c for c, name in by_commit.items()}
    known = {p.name for p in record.patches}
    out = [
        AppliedPatch(p.name, "clean", exported[p.name]) if p.name in exported else p
        for p in record.patches
    ]
    out += [AppliedPatch(n, "clean", c) for n, c in exported.items() if n not in known]
    place = {e.name: i for i, e in enumerate(read_series(root))}
    out.sort(key=lambda p: place.get(p.name, len(place)))
    write_record(
        root,
        replace(
            record,
            head=git.head(wt),
            queue_hash=load_queue(root).hash,
            patches=tuple(out),
            # patches never attempted (after a conflict) or popped still need an apply
            complete=not any(p.status in UNAPPLIED_STATES for p in out),
        ),
    )


def _refuse_strays(
    root: Path,
    queue: Queue,
    ref: str,
    wt: Path,
    record: WorktreeRecord | None,
    commits: list[str] | None = None,
) -> tuple[AppliedPatch, ...]:
    """The record's applied patches; PatchError when a commit on the branch belongs to a patch
    that is no longer in patches/series (export would write a file outside the series)."""
    if not record:
        return ()
    applied = record.applied()
    if commits is None:
        base = record.upstream_commit
        commits = git.commits_between(wt, base) if base else []
    listed = {e.name for e in queue.entries}
    stray = [(p.name, c) for p, c in zip(applied, commits, strict=False)]
    stray = [(n, c) for n, c in stray if n not in listed]
    if stray:
        shown = ", ".join(f"{c[:12]} ({n})" for n, c in stray[:3])
        more = f" and {len(stray) - 3} more" if len(stray) > 3 else ""
        raise PatchError(
            f"worktree {wt} has commits for patches not in patches/series: {shown}{more}; "
            "nothing was written",
            f"add them back to patches/series, or start over: "
            f"`sglforge patches apply --ref {ref} --force` (drops those commits)",
        )
    return applied


def refuse_gitlinks(wt: Path) -> None:
    """PatchError for a submodule the new patch would hold (a staged gitlink, or a nested git
    repository `git add -A` would record as one): a patch cannot carry one, and `add -A`
    would silently drop a staged gitlink whose folder is absent."""
    links = git.staged_gitlinks(wt)
    for entry in git.untracked(wt):
        if (wt / entry / ".git").exists():
            links.append(entry.rstrip("/"))
    if links:
        shown = ", ".join(repr(x) for x in links[:3])
        raise PatchError(
            f"worktree {wt}: {shown} would be a submodule (gitlink), which a patch cannot "
            "carry; nothing was committed",
            f"unstage or move it: git -C {wt} rm --cached -r -- {links[0]} "
            "(or add the files themselves, without their .git)",
        )


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
    project: Project,
    name: str,
    ref: str | None = None,
    message: str | None = None,
    trailers: dict[str, str] | None = None,
) -> Exported:
    """Commit the worktree's uncommitted changes as a new patch named ``name``.

    The author and date are the user's (``git var GIT_AUTHOR_IDENT``, and now), as a commit
    of theirs would have; the patches already in the queue are left byte for byte.
    ``trailers`` (``Upstream-Status``, default Pending; ``Origin``, ``Applies-To``, ...) go
    into its description.
    """
    given = check_trailers(dict(trailers or {}))
    with project_lock(project.root):
        return _new_patch(project.root, name, ref, message, given)


def author_ident(cwd: Path) -> tuple[str, str, str]:
    """(name, email, date) of the user's git identity, dated now; ConfigError if unset."""
    import time

    res = git.user_identity(cwd)
    m = re.match(r"^(.*) <(.*)> \d+ [+-]\d{4}$", res.stdout.strip())
    if res.status != 0 or not m or not m.group(1).strip():
        raise ConfigError(
            "git knows no author identity for the new patch: "
            + (git_reason(res.stderr) or res.stderr.strip() or "GIT_AUTHOR_IDENT is empty"),
            'set it: git config --global user.name "Your Name"; '
            "git config --global user.email you@example.com",
        )
    return m.group(1), m.group(2), f"{int(time.time())} {time.strftime('%z')}"


def _new_patch(
    root: Path, name: str, ref: str | None, message: str | None, trailers: dict[str, str]
) -> Exported:
    queue = load_queue(root)
    ref = ref or queue.pin.ref
    wt = worktree_path(root, ref)
    if not (wt / ".git").exists():
        raise WorktreeMissing(
            ref, wt, f"run `sglforge patches apply --ref {ref}`, edit files there, then rerun"
        )
    if not git.uncommitted(wt):
        raise NothingToDo(
            f"worktree {wt} has no changes to turn into a patch", f"edit files under {wt} first"
        )
    if any(re.sub(r"^\d{4}-|\.patch$", "", e.name) == slug(name) for e in queue.entries):
        raise PatchError(
            f"patches/series already has a patch named {slug(name)!r}",
            "pick another NAME, or edit that patch with `sglforge patches apply` + `export`",
        )
    _refuse_strays(root, queue, ref, wt, read_record(root, ref))
    refuse_gitlinks(wt)
    subject = message or name.replace("-", " ")
    lines = {"Upstream-Status": "Pending", **trailers}
    body = "\n".join(f"{k}: {v}" for k, v in lines.items())
    who, email, when = author_ident(wt)
    if not git.commit_all(wt, f"{subject}\n\n{body}", author=(who, email, when)):
        raise PatchError(
            f"worktree {wt}: after `git add -A` nothing differs from HEAD, so there is no "
            "patch to make",
            f"edit files under {wt} first (`git -C {wt} status` shows what git sees)",
        )
    return _export(root, ref, name)
