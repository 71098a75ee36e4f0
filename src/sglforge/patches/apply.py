"""The queue applied in a real worktree: ``build/worktrees/<ref>`` on ``sglforge/<ref>``.

Each patch becomes its own commit through ``git am --3way``. A record next to the worktree
says what was applied, so a rerun with the same queue reuses it and a worktree holding
someone's unexported work is never thrown away.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from sglforge import git, progress
from sglforge.errors import PatchError
from sglforge.patches.check import (
    APPLIED,
    SKIPPED,
    THREE_WAY,
    UPSTREAMED,
    PatchStatus,
    check_ref,
    git_reason,
)
from sglforge.patches.series import Queue, ref_version
from sglforge.patches.upstream import Upstream, hint_upstream, with_upstream
from sglforge.project import Project
from sglforge.util import atomic_write, confined, project_lock


@dataclass(frozen=True)
class AppliedPatch:
    name: str
    status: str
    commit: str | None
    detail: str = ""


@dataclass(frozen=True)
class Applied:
    ref: str
    commit: str
    version: str | None
    worktree: Path
    branch: str
    head: str
    patches: tuple[AppliedPatch, ...]
    changed_files: tuple[str, ...]
    queue_hash: str
    reused: bool
    python_only: bool


def safe_ref(ref: str) -> str:
    """A file name for ``ref``: one path component, never ``.``/``..`` or hidden."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", ref)
    if not name.strip(".") or name.startswith("."):
        name = "_" + name
    return name


def worktree_path(root: Path, ref: str) -> Path:
    return confined(root / "build" / "worktrees", safe_ref(ref), "worktree for ref", "--ref")


def record_path(root: Path, ref: str) -> Path:
    return confined(
        root / "build" / "worktrees", f".{safe_ref(ref)}.sglforge.json", "record", "--ref"
    )


def read_record(root: Path, ref: str) -> dict | None:  # type: ignore[type-arg]
    path = record_path(root, ref)
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def apply_queue(project: Project, ref: str | None = None, force: bool = False) -> Applied:
    """Apply the queue at ``ref`` (default: the pin) in its worktree, one commit per patch."""
    with project_lock(project.root):
        queue = project.queue  # read once per opened project: a build reads it before this
        up = project.upstream
        pin_commit = project.pin_commit()
        ref = up.tag(ref) if ref else queue.pin.ref
        commit = pin_commit if ref == queue.pin.ref else up.resolve(ref)
        return apply_at(queue, up, ref, commit, pin_commit, force=force)


def apply_at(
    queue: Queue, up: Upstream, ref: str, commit: str, pin_commit: str, force: bool = False
) -> Applied:
    root = queue.root
    wt = worktree_path(root, ref)
    with git.cache_lock(up.cache):
        branch = _branch_for(up.cache, wt, ref)
    record = read_record(root, ref)
    if (wt / ".git").exists() and not _usable(wt):
        # Its repository (the upstream cache) was deleted or replaced: the worktree is an
        # orphan. Its commits went with the cache; uncommitted edits would go with --force.
        if not force and _has_files(wt):
            raise PatchError(
                f"worktree {wt} belongs to an upstream cache that no longer exists "
                "(build/upstream was deleted or replaced)",
                f"copy out any edits you need from {wt}, then rerun with --force to make it again",
            )
        shutil.rmtree(wt)
        record = None
    if wt.exists() and (wt / ".git").exists():
        _abort_stale_am(wt)
        if not force:
            _refuse_if_unsaved(wt, ref, record)
        if (
            record
            and not (force and git.out(wt, "status", "--porcelain"))
            and record.get("queue_hash") == queue.hash
            and record.get("upstream_commit") == commit
            and git.out(wt, "rev-parse", "HEAD") == record.get("head")
            and record.get("complete", True)
        ):
            return _applied_from_record(queue, up, ref, commit, wt, branch, record, reused=True)
    report = check_ref(queue, up, ref, commit, pin_commit, root / "build" / "tmp")
    with git.cache_lock(up.cache):
        _ensure_worktree(up.cache, wt, branch, commit)
    results: list[AppliedPatch] = []
    steps = progress.current().start(f"apply at {ref}", len(queue.patches))
    pairs = list(zip(queue.patches, report.patches, strict=True))
    i = 0
    while i < len(pairs):
        patch, st = pairs[i]
        if st.status in (UPSTREAMED, SKIPPED):
            steps.advance(note=patch.name)
            results.append(AppliedPatch(patch.name, st.status, None, st.detail))
            i += 1
            continue
        # The run of patches up to the next skipped one goes through one `git am` (one
        # process, not one per patch); where it stops, that patch is applied again on its
        # own, so a conflict leaves exactly the one-patch `git am` session to resolve.
        j = i
        while j < len(pairs) and pairs[j][1].status not in (UPSTREAMED, SKIPPED):
            j += 1
        before = git.out(wt, "rev-parse", "HEAD")
        batch = [str(p.path.resolve()) for p, _ in pairs[i:j]]
        res = _am(wt, batch) if j - i > 1 else None
        made = git.out(wt, "rev-list", "--reverse", f"{before}..HEAD").split() if res else []
        for (patch, st), made_commit in zip(pairs[i:j], made, strict=False):
            steps.advance(note=patch.name)
            results.append(_applied_patch(patch.name, st, made_commit))
        if res is not None and res.status == 0 and len(made) == j - i:
            i = j
            continue
        if res is not None:
            # Stopped inside the run: drop the session, keep the commits made.
            git.run(wt, "am", "--quit", check=False)
            git.run(wt, "reset", "-q", "--hard", "HEAD", check=False)
            git.run(wt, "clean", "-fdq", check=False)
        i += len(made)
        patch, st = pairs[i]
        steps.advance(note=patch.name)
        # A conflicting patch still goes through `git am --3way`: it stops with conflict
        # markers in the worktree, which is where the user resolves it.
        res = _am(wt, [str(patch.path.resolve())])
        if res.status == 0 and st.status not in APPLIED:
            # git's own verdict wins: the commit is made, so the queue goes on from it.
            said = st.detail.splitlines()[0] if st.detail else st.status
            st = replace(st, status=THREE_WAY, detail=f"applied by git am --3way ({said})")
        if res.status != 0 or st.status not in APPLIED:
            detail = st.detail if st.status not in APPLIED else ""
            if res.status != 0:
                said = git_reason(res.stderr) or (res.stderr or res.stdout).strip()
                detail = f"{detail}; git am: {said}" if detail else f"git am: {said}"
            in_conflict = res.status != 0 and _conflict_in_progress(wt)
            if res.status != 0 and not in_conflict:
                # Nothing to resolve: leave no `git am` session behind to mislead.
                git.run(wt, "am", "--abort", check=False)
            # Record how far it got, so `patches export` maps the resolved commit back to
            # this patch; the record is incomplete, so the next apply starts over.
            pending = [
                AppliedPatch(p.name, "pending", None) for p in queue.patches[len(results) + 1 :]
            ]
            _write_record(
                root,
                ref,
                commit,
                queue.hash,
                git.out(wt, "rev-parse", "HEAD"),
                [*results, AppliedPatch(patch.name, "conflict", None, detail.strip()), *pending],
                complete=False,
            )
            progress.current().finish(steps, ok=False)
            _conflict(
                wt, ref, patch.name, detail.strip(), hint_upstream(up, queue.pin), am=in_conflict
            )
        results.append(
            AppliedPatch(patch.name, st.status, git.out(wt, "rev-parse", "HEAD"), st.detail)
        )
        i += 1
    progress.current().finish(steps)
    head = git.out(wt, "rev-parse", "HEAD")
    record = _write_record(root, ref, commit, queue.hash, head, results, complete=True)
    return _applied_from_record(queue, up, ref, commit, wt, branch, record, reused=False)


def _am(wt: Path, paths: list[str]) -> git.GitResult:
    return git.run(wt, "am", "--3way", "--keep-cr", "--quiet", *paths, check=False)


def _applied_patch(name: str, st: PatchStatus, made: str) -> AppliedPatch:
    """A patch git am committed as ``made``: git's verdict wins over the check's."""
    if st.status not in APPLIED:
        said = st.detail.splitlines()[0] if st.detail else st.status
        return AppliedPatch(name, THREE_WAY, made, f"applied by git am --3way ({said})")
    return AppliedPatch(name, st.status, made, st.detail)


def _write_record(
    root: Path,
    ref: str,
    commit: str,
    queue_hash: str,
    head: str,
    patches: list[AppliedPatch],
    complete: bool,
) -> dict:  # type: ignore[type-arg]
    record = {
        "ref": ref,
        "upstream_commit": commit,
        "queue_hash": queue_hash,
        "head": head,
        "complete": complete,
        "patches": [p.__dict__ for p in patches],
    }
    atomic_write(record_path(root, ref), json.dumps(record, indent=2))
    return record


def _applied_from_record(
    queue: Queue,
    up: Upstream,
    ref: str,
    commit: str,
    wt: Path,
    branch: str,
    record: dict,  # type: ignore[type-arg]
    reused: bool,
) -> Applied:
    # -z: names exactly as they are (no C-style quoting of spaces, quotes or UTF-8)
    changed = git.run(
        wt, "diff", "--name-only", "-z", "--no-renames", commit, record["head"], strip=False
    ).stdout
    version = ref_version(ref)
    return Applied(
        ref=ref,
        commit=commit,
        version=str(version) if version else None,
        worktree=wt,
        branch=branch,
        head=record["head"],
        patches=tuple(AppliedPatch(**p) for p in record["patches"]),
        changed_files=tuple(f for f in changed.split("\0") if f),
        queue_hash=queue.hash,
        reused=reused,
        python_only=up.python_only,
    )


def _abort_stale_am(wt: Path) -> None:
    rebase_dir = Path(git.out(wt, "rev-parse", "--git-path", "rebase-apply"))
    if not rebase_dir.is_absolute():
        rebase_dir = wt / rebase_dir
    if rebase_dir.exists():
        git.run(wt, "am", "--abort", check=False)
        shutil.rmtree(rebase_dir, ignore_errors=True)


def _refuse_if_unsaved(wt: Path, ref: str, record: dict | None) -> None:  # type: ignore[type-arg]
    dirty = git.out(wt, "status", "--porcelain", "--untracked-files=normal")
    if dirty:
        first = dirty.splitlines()[0][3:]
        raise PatchError(
            f"worktree {wt} has uncommitted changes ({first}"
            + (f" and {len(dirty.splitlines()) - 1} more" if len(dirty.splitlines()) > 1 else "")
            + ")",
            f"save them with `sglforge patches new NAME --ref {ref}`, or rerun with --force "
            "to discard them",
        )
    head = git.out(wt, "rev-parse", "HEAD")
    if record and record.get("head") and head != record["head"]:
        base = record.get("upstream_commit", "")
        if base and git.is_ancestor(wt, record["head"], head):
            raise PatchError(
                f"worktree {wt} has commits not yet exported to patches/",
                f"run `sglforge patches export --ref {ref}`, or rerun with --force to drop them",
            )


def _usable(wt: Path) -> bool:
    return git.run(wt, "rev-parse", "--git-dir", check=False).status == 0


def _has_files(wt: Path) -> bool:
    return any(p.name != ".git" for p in wt.iterdir())


def _conflict_in_progress(wt: Path) -> bool:
    """A `git am` stopped with unmerged files: the one case `git am --continue` helps."""
    unmerged = git.run(wt, "diff", "--name-only", "--diff-filter=U", check=False).stdout
    return bool(unmerged.strip())


def _branch_for(cache: Path, wt: Path, ref: str) -> str:
    """``sglforge/<ref>``, unless another project's worktree on a shared (symlinked or copied)
    cache holds that branch: then a name of this project's own, so neither breaks the other."""
    branch = f"sglforge/{safe_ref(ref)}"
    git.run(cache, "worktree", "prune", check=False)
    listing = git.run(cache, "worktree", "list", "--porcelain", check=False).stdout
    holder = None
    for block in listing.split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        if fields.get("branch") == f"refs/heads/{branch}":
            holder = fields.get("worktree")
    if holder is None or Path(holder).resolve() == wt.resolve():
        return branch
    import hashlib

    return f"{branch}-{hashlib.sha256(str(wt.resolve()).encode()).hexdigest()[:8]}"


def _ensure_worktree(cache: Path, wt: Path, branch: str, commit: str) -> None:
    if wt.exists() and not (wt / ".git").exists():
        shutil.rmtree(wt)
    if not wt.exists():
        git.run(cache, "worktree", "prune", check=False)
        wt.parent.mkdir(parents=True, exist_ok=True)
        git.run(cache, "worktree", "add", "--force", "-B", branch, str(wt), commit)
    else:
        git.run(wt, "checkout", "--force", "-B", branch, commit)
        git.run(wt, "clean", "-fdq")


def _conflict(
    wt: Path, ref: str, name: str, detail: str, upstream: str | None, am: bool = False
) -> None:
    refresh = with_upstream(f"sglforge patches refresh --ref {ref}", upstream)
    upgrade = with_upstream(f"sglforge upgrade --to {ref}", upstream)
    check = with_upstream(f"sglforge patches check --ref {ref}", upstream)
    if am:
        resolve = (
            f"resolve the conflict in {wt}, `git -C {wt} am --continue`, "
            f"`sglforge patches export --ref {ref}` (the patches then target {ref}), then "
            f"`{refresh}` or `{upgrade}` to move the pin"
        )
    else:
        resolve = (
            f"edit the files in {wt} by hand, `sglforge patches new` or "
            f"`sglforge patches export --ref {ref}` (or `{check}`)"
        )
    raise PatchError(
        f"{name} does not apply at {ref}: {detail.splitlines()[0] if detail else ''}", resolve
    )


@dataclass(frozen=True)
class Pruned:
    """A worktree ``patches prune`` looked at: removed, or kept and why."""

    ref: str
    path: Path
    removed: bool
    why: str


def prune_worktrees(project: Project, dry_run: bool = False) -> list[Pruned]:
    """Remove ``build/worktrees/<ref>`` for every ref but the pin's, unless it holds work not
    saved to patches/ (uncommitted edits, unexported commits, a `git am` stopped midway)."""
    from sglforge.errors import SglforgeError

    base = project.root / "build" / "worktrees"
    out: list[Pruned] = []
    with project_lock(project.root):
        pin = safe_ref(project.fresh_queue().pin.ref)
        for wt in sorted(base.iterdir()) if base.is_dir() else []:
            if wt.name.startswith(".") or not wt.is_dir():
                continue
            if wt.name == pin:
                out.append(Pruned(wt.name, wt, False, "the pin's worktree"))
                continue
            record = read_record(project.root, wt.name)
            try:
                if _usable(wt):
                    if _conflict_in_progress(wt):
                        raise PatchError("a `git am` is stopped on a conflict there", "")
                    _refuse_if_unsaved(wt, wt.name, record)
            except SglforgeError as exc:
                out.append(Pruned(wt.name, wt, False, exc.message))
                continue
            if not dry_run:
                _remove_worktree(wt)
                record_path(project.root, wt.name).unlink(missing_ok=True)
            out.append(Pruned(wt.name, wt, True, "no unsaved work"))
    return out


def _remove_worktree(wt: Path) -> None:
    """The worktree and its branch, from the upstream cache it belongs to."""
    common = None
    if _usable(wt):
        res = git.run(wt, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
        common = Path(res.stdout) if res.status == 0 and res.stdout else None
        branch = git.run(wt, "symbolic-ref", "--short", "-q", "HEAD", check=False).stdout
    if common is not None and common.is_dir():
        with git.cache_lock(common):
            git.run(common, "worktree", "remove", "--force", str(wt), check=False)
            if branch.startswith("sglforge/"):
                git.run(common, "branch", "-D", branch, check=False)
            git.run(common, "worktree", "prune", check=False)
    shutil.rmtree(wt, ignore_errors=True)
