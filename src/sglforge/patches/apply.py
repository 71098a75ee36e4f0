"""The queue applied in a real worktree: ``build/worktrees/<ref>`` on ``sglforge/<ref>``.

Each patch becomes its own commit through ``git am --3way``. A record next to the worktree
says what was applied, so a rerun with the same queue reuses it and a worktree holding
someone's unexported work is never thrown away.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from sglforge import git, progress
from sglforge.errors import PatchError
from sglforge.patches.status import APPLIED, SKIPPED, THREE_WAY, UPSTREAMED
from sglforge.project import Project
from sglforge.queue.series import Patch, Pin, Queue, load_queue, queue_stamp, ref_version
from sglforge.queue.upstream import Upstream, hint_upstream, with_upstream
from sglforge.util import atomic_write, confined, project_lock

if TYPE_CHECKING:
    # the checker is loaded where a queue is applied, not to read a worktree's record
    from sglforge.patches.check import PatchStatus


@dataclass(frozen=True)
class AppliedPatch:
    name: str
    status: str
    commit: str | None
    detail: str = ""


# The worktree record's format; files written before it was recorded are format 1 too.
RECORD_FORMAT = 1


@dataclass(frozen=True)
class WorktreeRecord:
    """What ``patches apply`` made in a worktree: the upstream commit it started from, the
    queue it applied (its hash), the HEAD it left, each patch's outcome, and whether it got
    through the whole queue (a conflict leaves it incomplete, so the next apply starts over).
    """

    ref: str
    upstream_commit: str
    queue_hash: str
    head: str
    patches: tuple[AppliedPatch, ...]
    complete: bool = True
    format: int = RECORD_FORMAT
    # patches/ as it stood when this was written (``stamp_of``): while it still stands so, the
    # record's patches are the series' entries, and the stack verbs need not read the queue
    stamp: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "ref": self.ref,
            "upstream_commit": self.upstream_commit,
            "queue_hash": self.queue_hash,
            "head": self.head,
            "complete": self.complete,
            "stamp": self.stamp,
            "patches": [
                {"name": p.name, "status": p.status, "commit": p.commit, "detail": p.detail}
                for p in self.patches
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorktreeRecord:
        """The record ``to_dict`` wrote; KeyError, TypeError or ValueError when malformed."""
        patches = tuple(
            AppliedPatch(
                name=str(p["name"]),
                status=str(p["status"]),
                commit=None if p.get("commit") is None else str(p["commit"]),
                detail=str(p.get("detail", "")),
            )
            for p in data["patches"]
        )
        return cls(
            ref=str(data.get("ref", "")),
            upstream_commit=str(data["upstream_commit"]),
            queue_hash=str(data.get("queue_hash", "")),
            head=str(data["head"]),
            patches=patches,
            complete=bool(data.get("complete", True)),
            format=int(data.get("format", RECORD_FORMAT)),
            stamp=str(data.get("stamp", "")),
        )

    def applied(self) -> tuple[AppliedPatch, ...]:
        """The patches the branch holds commits for, in order: those applied, plus the one
        that stopped with a conflict (its resolved commit comes next, after `git am
        --continue`)."""
        return tuple(p for p in self.patches if p.commit or p.status == "conflict")


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

    def revision(self, pin: Pin) -> str:
        """The upstream revision for the OCI label: the pinned commit when known; a history
        rebuilt from PyPI wheels has commits of its own, so there the tag names the revision."""
        if self.ref == pin.ref and pin.commit:
            return pin.commit
        return self.ref if self.python_only else self.commit


def patches_stamp(root: Path) -> str:
    """A digest of every entry under ``patches/`` with its size and modification time (ns):
    equal stamps mean nothing there was written, renamed or removed in between. Taken under
    the project lock, which every command that writes patches/ holds."""
    import hashlib
    import os

    seen: list[tuple[str, int, int]] = []
    todo = [root / "patches"]
    while todo:
        folder = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            st = e.stat(follow_symlinks=False)
            seen.append((e.path, st.st_mtime_ns, st.st_size))
            if e.is_dir(follow_symlinks=False):
                todo.append(Path(e.path))
    return hashlib.sha256(repr(sorted(seen)).encode()).hexdigest()


def safe_ref(ref: str) -> str:
    """A file name for ``ref``: one path component, never ``.``/``..`` or hidden."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", ref)
    if not name.strip(".") or name.startswith("."):
        name = "_" + name
    return name


def worktree_path(root: Path, ref: str, discard_copy: bool = False) -> Path:
    wt = confined(root / "build" / "worktrees", safe_ref(ref), "worktree for ref", "--ref")
    _own_worktree(wt, ref, discard_copy)
    return wt


def _own_worktree(wt: Path, ref: str, discard_copy: bool = False) -> None:
    """Refuse a worktree whose git records belong to another project's worktree (this project
    is a copy made with its build/: git would commit there); repair one whose project moved.

    ``discard_copy`` (``apply --force``): a copy holding no edit of its own is removed (this
    project's folder only; the other project's records are not touched), and the apply makes
    this project's own worktree. A copy with edits is always refused: they would be lost."""
    home = git.worktree_home(wt)
    if home is None:
        return
    other, admin = home
    if (other / ".git").exists():
        if discard_copy and not git.uncommitted(wt):
            shutil.rmtree(wt)
            progress.current().warn(
                f"worktree {wt} was a copy of {other} (its git records are that project's) "
                "with no edits of its own: removed (--force); this project's own is made"
            )
            return
        raise PatchError(
            f"worktree {wt} is a copy: its git records ({admin}) belong to {other}, another "
            "project's worktree (this project was copied with its build/); git would commit "
            "there, so nothing was done",
            f"copy out any edits you need, `rm -rf {wt}`, then `sglforge patches apply --ref "
            f"{ref}` (it makes this project's own worktree)",
        )
    git.repair_worktree(wt)
    progress.current().warn(
        f"worktree {wt} was made at {other} (the project moved): its git records were "
        "pointed back at it (git worktree repair)"
    )


def record_path(root: Path, ref: str) -> Path:
    return confined(
        root / "build" / "worktrees", f".{safe_ref(ref)}.sglforge.json", "record", "--ref"
    )


def read_record(root: Path, ref: str) -> WorktreeRecord | None:
    """The record of the worktree for ``ref``; None when there is none, or it is unreadable or
    malformed (then the worktree is treated as unrecorded: applied again)."""
    path = record_path(root, ref)
    try:
        return WorktreeRecord.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_record(root: Path, record: WorktreeRecord) -> WorktreeRecord:
    atomic_write(record_path(root, record.ref), json.dumps(record.to_dict(), indent=2))
    return record


def apply_queue(project: Project, ref: str | None = None, force: bool = False) -> Applied:
    """Apply the queue at ``ref`` (default: the pin) in its worktree, one commit per patch."""
    with project_lock(project.root):
        queue = _queue_under_lock(project)
        up = project.upstream
        pin_commit = project.pin_commit()
        ref = up.tag(ref) if ref else queue.pin.ref
        commit = pin_commit if ref == queue.pin.ref else up.resolve(ref)
        return apply_at(queue, up, ref, commit, pin_commit, force=force)


def _queue_under_lock(project: Project) -> Queue:
    """The queue as patches/ holds it now, under the lock. A caller that read it before (a
    build names its image by the queue hash) is refused when another command changed it
    since: applying the old queue would record old names a later export writes back."""
    seen = project.queue
    if queue_stamp(project.root) == seen.stamp:
        return seen  # nothing under patches/ changed: no second read of the queue
    now = load_queue(project.root)
    if now.hash != seen.hash:
        raise PatchError(
            f"patches/ changed while this command started (queue {seen.hash[:12]} is now "
            f"{now.hash[:12]}: another sglforge command edited it); nothing was applied",
            "run the command again",
        )
    return seen


def apply_at(
    queue: Queue, up: Upstream, ref: str, commit: str, pin_commit: str, force: bool = False
) -> Applied:
    root = queue.root
    wt = worktree_path(root, ref, discard_copy=force)
    with git.cache_lock(up.cache):
        branch = _branch_for(up.cache, wt, ref)
    run = _Run(queue, up, ref, commit, wt, branch)
    record = _reusable(run, force)
    if record is not None:
        return run.applied(record, reused=True)
    from sglforge.patches.check import check_ref

    report = check_ref(queue, up, ref, commit, pin_commit, root / "build" / "tmp")
    pairs = list(zip(queue.patches, report.patches, strict=True))
    todo = [p for p, st in pairs if st.status not in (UPSTREAMED, SKIPPED)]
    with git.cache_lock(up.cache):
        fresh = _ensure_worktree(up.cache, wt, branch, commit, checkout=not todo)
    steps = progress.current().start(f"apply at {ref}", len(queue.patches))
    if fresh and todo:
        results = _apply_fresh(run, pairs, todo, steps)
    else:
        results = _apply_patches(run, pairs, steps)
    progress.current().finish(steps)
    done = WorktreeRecord(
        ref, commit, queue.hash, git.head(wt), tuple(results), stamp=patches_stamp(root)
    )
    return run.applied(write_record(root, done), reused=False)


@dataclass(frozen=True)
class _Run:
    """One ``apply_at``: the queue applied at ``ref`` (``commit``) in worktree ``wt``."""

    queue: Queue
    up: Upstream
    ref: str
    commit: str
    wt: Path
    branch: str

    def applied(self, record: WorktreeRecord, reused: bool) -> Applied:
        version = ref_version(self.ref)
        return Applied(
            ref=self.ref,
            commit=self.commit,
            version=str(version) if version else None,
            worktree=self.wt,
            branch=self.branch,
            head=record.head,
            patches=record.patches,
            changed_files=tuple(git.diff_names(self.wt, self.commit, record.head)),
            queue_hash=self.queue.hash,
            reused=reused,
            python_only=self.up.python_only,
        )


def _reusable(run: _Run, force: bool) -> WorktreeRecord | None:
    """The worktree's record when it already holds this queue at this commit, untouched; else
    None (an orphaned worktree is removed first, refused when it holds files and no --force)."""
    wt = run.wt
    record = read_record(run.queue.root, run.ref)
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
        return None
    if not (wt.exists() and (wt / ".git").exists()):
        return None
    _abort_stale_am(wt)
    if not force:
        _refuse_if_unsaved(wt, run.ref, record)
    if (
        record
        and not (force and git.uncommitted(wt))
        and record.queue_hash == run.queue.hash
        and record.upstream_commit == run.commit
        and git.head(wt) == record.head
        and record.complete
    ):
        return record
    return None


def _apply_fresh(
    run: _Run, pairs: list[tuple[Patch, PatchStatus]], todo: list[Patch], steps: progress.Task
) -> list[AppliedPatch]:
    """A new worktree (no file written yet): the patches committed by one ``git am`` before
    sglang's files are written, once, at the last commit (``git.am_then_checkout``). Where
    ``git am`` does not commit every one of them, the worktree is at the upstream commit
    with its files, and the usual per-run path takes over (it stops on the conflict with
    the session to resolve). An interrupt removes the half-made worktree: it held no work."""
    try:
        res = git.am_then_checkout(
            run.wt,
            run.commit,
            [p.path.resolve() for p in todo],
            sorted({f for p in todo for f in p.paths or p.files}),
        )
    except BaseException:
        with git.cache_lock(run.up.cache):
            git.remove_worktree(run.up.cache, run.wt)
        raise
    made = git.commits_between(run.wt, run.commit) if res.status == 0 else []
    if len(made) != len(todo):
        if res.status == 0:
            git.reset_worktree(run.wt, run.branch, run.commit)
        return _apply_patches(run, pairs, steps)
    commits = iter(made)
    results: list[AppliedPatch] = []
    for patch, st in pairs:
        steps.advance(note=patch.name)
        if st.status in (UPSTREAMED, SKIPPED):
            results.append(AppliedPatch(patch.name, st.status, None, st.detail))
        else:
            results.append(_applied_patch(patch.name, st, next(commits)))
    return results


def _apply_patches(
    run: _Run, pairs: list[tuple[Patch, PatchStatus]], steps: progress.Task
) -> list[AppliedPatch]:
    """Each patch's commit, in order; a conflict stops the run (``_conflict`` raises)."""
    results: list[AppliedPatch] = []
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
        before = git.head(run.wt)
        batch = [p.path.resolve() for p, _ in pairs[i:j]]
        res = git.am(run.wt, batch) if j - i > 1 else None
        made = git.commits_between(run.wt, before) if res else []
        for (patch, st), made_commit in zip(pairs[i:j], made, strict=False):
            steps.advance(note=patch.name)
            results.append(_applied_patch(patch.name, st, made_commit))
        if res is not None and res.status == 0 and len(made) == j - i:
            i = j
            continue
        if res is not None:
            # Stopped inside the run: drop the session, keep the commits made.
            git.am_quit(run.wt)
        i += len(made)
        patch, st = pairs[i]
        steps.advance(note=patch.name)
        results.append(_apply_one(run, patch, st, results, steps))
        i += 1
    return results


def _apply_one(
    run: _Run,
    patch: Patch,
    st: PatchStatus,
    results: list[AppliedPatch],
    steps: progress.Task,
) -> AppliedPatch:
    """One patch through its own ``git am --3way``; a conflict records how far the queue got
    and raises, leaving the session (with conflict markers) for the user to resolve."""
    wt = run.wt
    res = git.am(wt, [patch.path.resolve()])
    if res.status == 0 and st.status not in APPLIED:
        # git's own verdict wins: the commit is made, so the queue goes on from it.
        said = st.detail.splitlines()[0] if st.detail else st.status
        st = replace(st, status=THREE_WAY, detail=f"applied by git am --3way ({said})")
    if res.status == 0 and st.status in APPLIED:
        return AppliedPatch(patch.name, st.status, git.head(wt), st.detail)
    detail = st.detail if st.status not in APPLIED else ""
    if res.status != 0:
        from sglforge.patches.check import git_reason

        said = git_reason(res.stderr) or (res.stderr or res.stdout).strip()
        detail = f"{detail}; git am: {said}" if detail else f"git am: {said}"
    in_conflict = res.status != 0 and _conflict_in_progress(wt)
    if res.status != 0 and not in_conflict:
        # Nothing to resolve: leave no `git am` session behind to mislead.
        git.am_abort(wt)
    # Record how far it got, so `patches export` maps the resolved commit back to this patch;
    # the record is incomplete, so the next apply starts over.
    queue = run.queue
    pending = [AppliedPatch(p.name, "pending", None) for p in queue.patches[len(results) + 1 :]]
    stopped = AppliedPatch(patch.name, "conflict", None, detail.strip())
    write_record(
        queue.root,
        WorktreeRecord(
            run.ref,
            run.commit,
            queue.hash,
            git.head(wt),
            (*results, stopped, *pending),
            complete=False,
            stamp=patches_stamp(queue.root),
        ),
    )
    progress.current().finish(steps, ok=False)
    _conflict(
        wt,
        run.ref,
        patch.name,
        detail.strip(),
        hint_upstream(run.up, queue.pin),
        am=in_conflict,
        at_pin=run.ref == queue.pin.ref,
    )


def _applied_patch(name: str, st: PatchStatus, made: str) -> AppliedPatch:
    """A patch git am committed as ``made``: git's verdict wins over the check's."""
    if st.status not in APPLIED:
        said = st.detail.splitlines()[0] if st.detail else st.status
        return AppliedPatch(name, THREE_WAY, made, f"applied by git am --3way ({said})")
    return AppliedPatch(name, st.status, made, st.detail)


def _abort_stale_am(wt: Path) -> None:
    if git.am_in_progress(wt):
        git.am_abort(wt)


def _refuse_if_unsaved(wt: Path, ref: str, record: WorktreeRecord | None) -> None:
    dirty = git.uncommitted(wt)
    if dirty:
        raise PatchError(
            f"worktree {wt} has uncommitted changes ({dirty[0]}"
            + (f" and {len(dirty) - 1} more" if len(dirty) > 1 else "")
            + ")",
            f"save them with `sglforge patches new NAME --ref {ref}`, or rerun with --force "
            "to discard them",
        )
    head = git.head(wt)
    if record and record.head and head != record.head:
        if record.upstream_commit and git.is_ancestor(wt, record.head, head):
            raise PatchError(
                f"worktree {wt} has commits not yet exported to patches/",
                f"run `sglforge patches export --ref {ref}`, or rerun with --force to drop them",
            )


def _usable(wt: Path) -> bool:
    return git.is_repository(wt)


def _has_files(wt: Path) -> bool:
    return any(p.name != ".git" for p in wt.iterdir())


def _conflict_in_progress(wt: Path) -> bool:
    """A `git am` stopped with unmerged files: the one case `git am --continue` helps."""
    return bool(git.unmerged(wt))


def _branch_for(cache: Path, wt: Path, ref: str) -> str:
    """``sglforge/<ref>``, unless another project's worktree on a shared (symlinked or copied)
    cache holds that branch: then a name of this project's own, so neither breaks the other."""
    branch = f"sglforge/{safe_ref(ref)}"
    git.prune_worktrees(cache)
    holder = git.worktree_branches(cache).get(f"refs/heads/{branch}")
    if holder is None or holder.resolve() == wt.resolve():
        return branch
    import hashlib

    return f"{branch}-{hashlib.sha256(str(wt.resolve()).encode()).hexdigest()[:8]}"


def _ensure_worktree(
    cache: Path, wt: Path, branch: str, commit: str, checkout: bool = True
) -> bool:
    """The worktree at ``commit`` on ``branch``; True when it is new, and then with no file
    written unless ``checkout`` (``_apply_fresh`` writes them after ``git am``)."""
    if wt.exists() and not (wt / ".git").exists():
        shutil.rmtree(wt)
    if not wt.exists():
        git.prune_worktrees(cache)
        wt.parent.mkdir(parents=True, exist_ok=True)
        git.add_worktree(cache, wt, commit, branch=branch, checkout=checkout)
        return True
    git.reset_worktree(wt, branch, commit)
    return False


def _conflict(
    wt: Path,
    ref: str,
    name: str,
    detail: str,
    upstream: str | None,
    am: bool = False,
    at_pin: bool = False,
) -> NoReturn:
    refresh = with_upstream(f"sglforge patches refresh --ref {ref}", upstream)
    upgrade = with_upstream(f"sglforge upgrade --to {ref}", upstream)
    check = with_upstream(f"sglforge patches check --ref {ref}", upstream)
    if am:
        resolve = (
            f"resolve the conflict in {wt}, `git -C {wt} am --continue`, "
            f"`sglforge patches export --ref {ref}` (the patches then target {ref}), then "
            f"`{refresh}` or `{upgrade}` to move the pin"
        )
        if at_pin:  # the pin is here already: the cause is in the queue, not upstream
            resolve = (
                f"resolve the conflict in {wt}, `git -C {wt} am --continue`, then "
                f"`sglforge patches export --ref {ref}` to keep the resolved patches"
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
    if _usable(wt) and git.worktree_home(wt) is None:  # a copy's records are another's
        common = git.common_dir(wt)
        branch = git.current_branch(wt)
    if common is not None and common.is_dir():
        with git.cache_lock(common):
            git.remove_worktree(common, wt)
            if branch.startswith("sglforge/"):
                git.delete_branch(common, branch)
    shutil.rmtree(wt, ignore_errors=True)
