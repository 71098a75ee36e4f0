"""The queue as a stack in its worktree, the way quilt and StGit users work it.

``patches apply`` makes ``build/worktrees/<ref>`` with one commit per patch. These verbs move
the top of that stack (``push``, ``pop``, ``goto``: apply the series up to a patch, to bisect
which one breaks) and fold the worktree's edits into the top patch (``refresh_top``). The
worktree record (``patches.apply``) is the stack's state: a patch with a commit is applied,
one marked ``unapplied`` waits above the top. The files stay quilt's own: ``patches/series``
and the patch files, rewritten all-or-nothing under the project lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sglforge import git
from sglforge.errors import ConfigError, NothingToDo, PatchError, WorktreeMissing
from sglforge.patches.apply import (
    AppliedPatch,
    WorktreeRecord,
    apply_at,
    patches_stamp,
    read_record,
    worktree_path,
    write_record,
)
from sglforge.patches.status import CLEAN, CONFLICT, SKIPPED, UPSTREAMED
from sglforge.project import Project
from sglforge.queue.series import (
    Patch,
    Pin,
    Queue,
    SeriesEntry,
    load_pin,
    parse_patch,
    ref_version,
    validate_patch,
)
from sglforge.util import project_lock

if TYPE_CHECKING:
    from sglforge.patches.export import Exported

# The queue edits (find_entry) and export are loaded where used: `patches list`, push and
# pop read a worktree's record and run git, and start faster without them.

# A patch's place in the stack.
APPLIED = "applied"
UNAPPLIED = "unapplied"


@dataclass(frozen=True)
class StackEntry:
    index: int  # its place in patches/series, from 1 (the `#` of `patches list`)
    name: str
    # applied | unapplied | conflict | upstreamed | skipped (at this ref) | stale (its commit
    # is in the worktree, but patches/series changed around it since: renamed, reordered,
    # folded; `patches apply` makes the worktree again)
    state: str
    commit: str | None = None


STALE = "stale"


@dataclass(frozen=True)
class Stack:
    """The worktree of ``ref`` seen as quilt sees a tree: which patches are applied, the top
    one, and what the verb just pushed or popped. ``stale``: patches/series changed under
    the commits the worktree holds (no top then: `patches apply` makes it again)."""

    ref: str
    worktree: Path
    exists: bool
    entries: tuple[StackEntry, ...]
    applied: tuple[str, ...]
    unapplied: tuple[str, ...]
    top: str | None
    action: str = "list"
    moved: tuple[str, ...] = ()
    stale: bool = False


def read_stack(queue: Queue, ref: str | None = None, record: WorktreeRecord | None = None) -> Stack:
    """The stack of the worktree for ``ref`` (default: the pin), read from the worktree's own
    history: a patch is applied when the commit its record names is on the worktree's branch
    (a commit reset away is not; a patch `git am` stopped on is a conflict, not applied).
    Reads only. Without a worktree, every patch is unapplied. ``record``: the worktree's
    record as the caller holds it (a move just wrote it), else it is read."""
    ref = ref or queue.pin.ref
    wt = worktree_path(queue.root, ref)
    if not (wt / ".git").exists():
        record = None
    elif record is None:
        record = read_record(queue.root, ref)
    if record is None:
        return _stack(ref, wt, False, _all_unapplied(queue))
    history = set(git.commits_between(wt, record.upstream_commit)) if record.head else set()
    record = replace(
        record,
        patches=tuple(
            p if p.commit is None or p.commit in history else AppliedPatch(p.name, UNAPPLIED, None)
            for p in record.patches
        ),
    )
    patches = _reconcile(queue, record)
    if patches is not None:
        return _stack(ref, wt, True, patches)
    # The series changed under the applied commits: which entries have one, marked stale.
    held = {p.name for p in record.patches if p.commit}
    stale = tuple(
        AppliedPatch(e.name, STALE if e.name in held else UNAPPLIED, None) for e in queue.entries
    )
    return replace(_stack(ref, wt, True, stale), stale=True)


def _all_unapplied(queue: Queue) -> tuple[AppliedPatch, ...]:
    return tuple(AppliedPatch(e.name, UNAPPLIED, None) for e in queue.entries)


def _state(p: AppliedPatch) -> str:
    if p.commit:
        return APPLIED
    if p.status in (CONFLICT, UPSTREAMED, SKIPPED, STALE):
        return p.status
    return UNAPPLIED


def _stack(
    ref: str,
    wt: Path,
    exists: bool,
    patches: tuple[AppliedPatch, ...],
    action: str = "list",
    moved: tuple[str, ...] = (),
) -> Stack:
    entries = tuple(StackEntry(i, p.name, _state(p), p.commit) for i, p in enumerate(patches, 1))
    applied = tuple(e.name for e in entries if e.state == APPLIED)
    return Stack(
        ref=ref,
        worktree=wt,
        exists=exists,
        entries=entries,
        applied=applied,
        unapplied=tuple(e.name for e in entries if e.state == UNAPPLIED),
        top=applied[-1] if applied else None,
        action=action,
        moved=moved,
    )


def _reconcile(queue: Queue, record: WorktreeRecord) -> tuple[AppliedPatch, ...] | None:
    """The record's patches lined up with patches/series: the entries it holds in series
    order, then the rest unapplied. None when a patch applied in the worktree is no longer
    at its place in the series (renamed, reordered, folded since)."""
    names = [e.name for e in queue.entries]
    same = 0
    while same < min(len(names), len(record.patches)) and record.patches[same].name == names[same]:
        same += 1
    if any(p.commit or p.status == CONFLICT for p in record.patches[same:]):
        return None
    return record.patches[:same] + tuple(AppliedPatch(n, UNAPPLIED, None) for n in names[same:])


# ---- moving the top


@dataclass(frozen=True)
class _Open:
    """A worktree the stack verbs may move: no `git am` stopped, no unsaved work."""

    wt: Path
    record: WorktreeRecord
    patches: tuple[AppliedPatch, ...]

    @property
    def height(self) -> int:
        """How many series entries lie at or below the top (skipped ones included)."""
        return max((i + 1 for i, p in enumerate(self.patches) if p.commit), default=0)


def _open(
    queue: Queue, ref: str, record: WorktreeRecord | None, edits_ok: bool = False
) -> _Open | None:
    """The worktree of ``ref`` (``record``: its record, read once by the verb) ready to move;
    None when there is none yet. PatchError when it holds work a move would lose: a stopped
    `git am`, edits, commits not exported."""
    wt = worktree_path(queue.root, ref)
    if not (wt / ".git").exists() or record is None:
        return None
    _refuse_unsaved(wt, record, ref, _ref(queue, ref), _at(queue, ref), edits_ok)
    patches = _reconcile(queue, record)
    if patches is None:
        raise PatchError(
            f"patches/series changed under the patches applied in {wt} (renamed, reordered "
            "or folded since)",
            f"make the worktree again: `sglforge patches apply{_ref(queue, ref)}`",
        )
    return _Open(wt, record, patches)


def _refuse_unsaved(
    wt: Path, record: WorktreeRecord, ref: str, ref_opt: str, at_opt: str, edits_ok: bool
) -> None:
    """PatchError when the worktree holds work a move would lose: a stopped `git am`, edits,
    commits not exported (``ref_opt``/``at_opt``: the ``--ref``/``--at`` its hints need)."""
    if git.am_in_progress(wt):
        raise PatchError(
            f"a `git am` is stopped in {wt} (a patch met a conflict)",
            f"resolve it, `git -C {wt} am --continue`, `sglforge patches export --ref {ref}`; "
            f"or `git -C {wt} am --abort`",
        )
    from sglforge.patches.export import edits_in

    dirty = [] if edits_ok else edits_in(wt)
    if dirty:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        raise PatchError(
            f"worktree {wt} has edits no patch holds ({shown}); nothing was moved",
            f"fold them into the top patch: `sglforge patches refresh{at_opt}`, or "
            f"`sglforge patches new NAME{ref_opt}`",
        )
    if git.head(wt) != record.head:
        raise PatchError(
            f"worktree {wt} has commits not yet in patches/; nothing was moved",
            f"write them back first: `sglforge patches export{ref_opt}`",
        )


def _ref(queue: Queue, ref: str) -> str:
    return "" if ref == queue.pin.ref else f" --ref {ref}"


def _at(queue: Queue, ref: str) -> str:
    return "" if ref == queue.pin.ref else f" --at {ref}"


@dataclass(frozen=True)
class Move:
    """Where a stack verb takes the top: ``count`` patches more or fewer (``--count N``, what
    quilt spells ``push N``), up to and including patch ``name`` or the ``position``-th entry
    of the series (the ``#`` of ``patches list``), or ``all`` of them."""

    verb: str  # push | pop | goto
    count: int | None = None
    name: str | None = None
    position: int | None = None
    all: bool = False


def parse_move(verb: str, arg: str | None, all_: bool = False, count: int | None = None) -> Move:
    """The Move ``sglforge patches VERB [ARG] [--all] [--count N]`` asks for.

    A bare number is the patch's ``#`` in ``patches list``, for every verb (``pop 2``: #2
    becomes the top); a zero-padded one (``0002``) is the number in a file's name, any other
    word a name or slug. How many to move is ``--count N`` (quilt's ``push N``).
    """
    given = [x for x, on in (("a patch", arg), ("--all", all_), ("--count", count)) if on]
    if len(given) > 1:
        raise ConfigError(f"patches {verb}: give {' or '.join(given)}, not both", "")
    if verb == "goto" and (all_ or count is not None or arg is None):
        raise ConfigError("patches goto: which patch? (its # in `patches list`, or a NAME)", "")
    if count is not None and count < 1:
        raise ConfigError(f"patches {verb} --count {count}: a count is 1 or more", "")
    if all_:
        return Move(verb, all=True)
    if arg is None:
        return Move(verb, count=count or 1)
    if arg.isdigit() and not arg.startswith("0"):
        return Move(verb, position=int(arg))
    return Move(verb, name=arg)


def _target(names: list[str], opened: _Open | None, move: Move, find: Callable[[str], str]) -> int:
    """The number of series entries (``names``) to leave at or below the top; ``find`` gives
    the entry a patch NAME means."""
    height = opened.height if opened else 0
    total = len(names)
    if move.all:
        return total if move.verb == "push" else 0
    if move.position is not None:
        if not 1 <= move.position <= total:
            raise ConfigError(
                f"patches {move.verb} {move.position}: the series has {total} patches (a bare "
                "number is the # of `patches list`)",
                "sglforge patches list  (the # column)"
                + ("" if move.verb == "goto" else "; to move N patches: --count N"),
            )
        return move.position
    if move.name is not None:
        wanted = find(move.name)
        return names.index(wanted) + 1
    count = move.count or 0
    if move.verb == "push":
        return min(total, height + count)
    below = [i for i, p in enumerate(opened.patches if opened else ()) if p.commit][:-count]
    return below[-1] + 1 if below else 0


def move_stack(project: Project, move: Move, ref: str | None = None) -> Stack:
    """Push, pop or go to a patch in the worktree of ``ref`` (default: the pin), making the
    worktree when there is none. NothingToDo when the top is there already.

    Pop moves the branch back (one ``git reset``); push applies the patches it adds onto the
    current top (one ``git am``); neither reads more of the queue than the record says
    changed, nor asks upstream anything when its commit is in the local mirror."""
    with project_lock(project.root):
        pin = load_pin(project.root)
        # the worktree record, read once for the verb (the quick way and the full one)
        read_for = pin.ref if ref in (None, pin.ref) else None
        seen = read_record(project.root, pin.ref) if read_for else None
        quick = _quick_move(project, move, ref, pin, seen)
        if quick is not None:
            return quick
        queue = project.fresh_queue()
        ref = project.upstream.tag(ref) if ref else queue.pin.ref
        record = seen if ref == read_for else read_record(queue.root, ref)
        opened = _open(queue, ref, record)
        height = opened.height if opened else 0
        from sglforge.patches.edit import find_entry

        names = [e.name for e in queue.entries]
        n = _target(names, opened, move, lambda a: find_entry(queue, a).name)
        _refuse_direction(names, opened, move, n, height)
        if n < height and opened is not None:
            same = opened.record.queue_hash == queue.hash
            moved, record = _pop_to(
                queue.root, opened, n, patches_stamp(queue.root) if same else ""
            )
        else:
            moved, record = _push_to(project, queue, ref, n, opened)
        stack = read_stack(queue, ref, record)
    return replace(stack, action=move.verb, moved=moved)


def _quick_move(
    project: Project, move: Move, ref: str | None, pin: Pin, record: WorktreeRecord | None
) -> Stack | None:
    """The move at the pin while patches/ stands as the worktree ``record`` last saw it (its
    stamp): the record's entries are then the series', and only the patches pushed are read
    (no parse of the whole queue, no upstream). None where the full way must decide."""
    root = project.root
    if ref not in (None, pin.ref) or project.upstream_option not in (None, pin.url):
        return None  # another ref or upstream: its commit is resolved the full way
    wt = worktree_path(root, pin.ref)
    if record is None or not record.stamp or not (wt / ".git").exists():
        return None
    if record.stamp != patches_stamp(root):
        return None
    _refuse_unsaved(wt, record, pin.ref, "", "", edits_ok=False)
    opened = _Open(wt, record, record.patches)
    names = [p.name for p in record.patches]
    entries = tuple(SeriesEntry(name, i) for i, name in enumerate(names, 1))
    n = _target(names, opened, move, lambda a: _find_in(entries, a))
    _refuse_direction(names, opened, move, n, opened.height)
    if n < opened.height:
        moved, after = _pop_to(root, opened, n, record.stamp)
    else:
        todo = [_read_patch(root, names[i], i + 1) for i in range(opened.height, n)]
        pushed = _push_on_top(root, pin.ref, opened, n, todo, record.stamp)
        if pushed is None:
            return None
        moved, after = pushed
    return _stack(pin.ref, wt, True, after.patches, action=move.verb, moved=moved)


def _find_in(entries: tuple[SeriesEntry, ...], name: str) -> str:
    from sglforge.patches.edit import find_in

    return find_in(entries, name).name


def _read_patch(root: Path, name: str, index: int) -> Patch:
    patch = parse_patch(root / "patches" / name, index)
    validate_patch(patch)
    return patch


def _refuse_direction(
    names: list[str], opened: _Open | None, move: Move, n: int, height: int
) -> None:
    top = next((p.name for p in reversed(opened.patches) if p.commit), None) if opened else None
    where = f"the top is {top}" if top else "no patch is applied"
    said = move.name or (f"{move.position}" if move.position is not None else "")
    if move.position is not None:
        said += f" (#{move.position} is {names[move.position - 1]})"
    count = (
        f"; to move {move.position} patches: `sglforge patches {move.verb} --count {move.position}`"
        if move.position is not None
        else ""
    )
    if n == height:
        raise NothingToDo(
            f"patches {move.verb}: nothing to move, {where}", "sglforge patches list" + count
        )
    if move.verb == "push" and n < height:
        raise PatchError(
            f"patches push {said}: it is applied already ({where})",
            f"sglforge patches pop {move.name or move.position}  (leaves it on top){count}",
        )
    if move.verb == "pop" and n > height:
        raise PatchError(
            f"patches pop {said}: it is not applied ({where})",
            f"sglforge patches push {move.name or move.position}{count}",
        )


def _pop_to(
    root: Path, opened: _Open, n: int, stamp: str
) -> tuple[tuple[str, ...], WorktreeRecord]:
    """Take the patches above entry ``n`` off: the branch goes back to the commit of the
    last one kept (their content is in their patch files). What came off, and the record."""
    keep = opened.patches[:n]
    record = opened.record
    target = next((p.commit for p in reversed(keep) if p.commit), record.upstream_commit)
    git.move_branch(opened.wt, target)
    off = opened.patches[n:]
    patches = keep + tuple(AppliedPatch(p.name, UNAPPLIED, None) for p in off)
    written = replace(record, head=target, patches=patches, complete=False, stamp=stamp)
    return tuple(p.name for p in reversed(off) if p.commit), write_record(root, written)


def _push_to(
    project: Project, queue: Queue, ref: str, n: int, opened: _Open | None
) -> tuple[tuple[str, ...], WorktreeRecord | None]:
    """Apply the series up to entry ``n``: onto the current top when it can (``_push_on_top``:
    one ``git am`` of the patches pushed), else the worktree made again from upstream with
    the first ``n`` patches (``apply_at``: git am --3way, skips, conflicts as `patches apply`
    has them); the rest recorded unapplied. (The patches pushed, the record written.)"""
    height = opened.height if opened else 0
    up = project.upstream
    pin_commit = project.pin_commit()
    commit = pin_commit if ref == queue.pin.ref else up.resolve(ref)
    if (
        opened is not None
        and opened.record.queue_hash == queue.hash
        and opened.record.upstream_commit == commit
    ):
        todo = list(queue.patches[height:n])
        pushed = _push_on_top(queue.root, ref, opened, n, todo, patches_stamp(queue.root))
        if pushed is not None:
            return pushed
    part = replace(queue, entries=queue.entries[:n], patches=queue.patches[:n])
    # `_open` found nothing to lose in a recorded worktree but bytecode caches, which
    # apply's own check would count as edits: it may start over without asking.
    done = apply_at(part, up, ref, commit, pin_commit, force=opened is not None)
    rest = tuple(AppliedPatch(e.name, UNAPPLIED, None) for e in queue.entries[n:])
    record = read_record(queue.root, ref)  # as apply_at wrote it
    if record is not None:
        record = write_record(
            queue.root, replace(record, patches=record.patches + rest, complete=not rest)
        )
    return tuple(p.name for p in done.patches[height:] if p.commit), record


def _push_on_top(
    root: Path, ref: str, opened: _Open, n: int, todo: list[Patch], stamp: str
) -> tuple[tuple[str, ...], WorktreeRecord] | None:
    """quilt's push: entries ``height..n`` (``todo``) applied onto the current top by one
    ``git am``, nothing below touched (the record is of this queue at this upstream commit).
    None, with the worktree as it was, where that is not the whole story and ``apply_at``
    must decide: a patch is outside its Applies-To, empty, or needs a patch not applied, or
    `git am` stops (a conflict, a change upstream holds already)."""
    record, height, wt = opened.record, opened.height, opened.wt
    version = ref_version(ref)
    have = {p.name for p in opened.patches[:height] if p.commit} | {p.name for p in todo}
    if any(
        p.applies_at(version) is False
        or not p.has_diff()
        or any(d not in have for d in p.depends_on)
        for p in todo
    ):
        return None
    before = record.head
    res = git.am(wt, [p.path.resolve() for p in todo])
    made = git.commits_between(wt, before) if res.status == 0 else []
    if len(made) != len(todo):
        if res.status != 0:
            git.am_abort(wt)
        git.move_branch(wt, before)
        return None
    # (git am --quiet does not say which needed a 3-way merge: `patches apply` tells)
    pushed = tuple(AppliedPatch(p.name, CLEAN, c) for p, c in zip(todo, made, strict=True))
    patches = opened.patches[:height] + pushed + opened.patches[n:]
    complete = n == len(opened.patches)
    written = replace(record, head=made[-1], patches=patches, complete=complete, stamp=stamp)
    return tuple(p.name for p in pushed), write_record(root, written)


# ---- refreshing the top patch


@dataclass(frozen=True)
class Refreshed:
    """``patches refresh`` without --ref: the top patch and what export wrote."""

    ref: str
    worktree: Path
    top: str
    exported: Exported


def refresh_top(project: Project, ref: str | None = None) -> Refreshed:
    """Fold the worktree's edits (staged, unstaged, new files) into its top patch and write
    that patch file again (quilt's ``refresh``); its header and context width are kept."""
    from sglforge.patches.export import BYTECODE, export_at, refuse_gitlinks

    with project_lock(project.root):
        queue = project.fresh_queue()
        ref = project.upstream.tag(ref) if ref else queue.pin.ref
        opened = _open(queue, ref, read_record(queue.root, ref), edits_ok=True)
        wt = worktree_path(queue.root, ref)
        if opened is None:
            raise WorktreeMissing(
                ref, wt, f"make one: `sglforge patches push{_ref(queue, ref)}` (or `patches apply`)"
            )
        stopped = next((p for p in opened.patches if p.status == CONFLICT), None)
        top = stopped.name if stopped else None
        top = top or next((p.name for p in reversed(opened.patches) if p.commit), None)
        if top is None:
            raise PatchError(
                f"no patch is applied in {wt}: the edits have no top patch to go into",
                f"`sglforge patches new NAME{_ref(queue, ref)}` makes them a patch; or "
                f"`sglforge patches push{_ref(queue, ref)}` first",
            )
        refuse_gitlinks(wt)
        if stopped is not None:
            # The patch `apply` stopped at without a `git am` session (it did not apply at
            # all): the edits made by hand become its commit, which export maps back to it.
            made = git.commit_all(wt, queue.by_name(top).subject or top)
        else:
            made = git.amend_all(wt, BYTECODE)
        if not made:
            raise NothingToDo(
                f"worktree {wt} has no edits to fold into {top}", f"edit files under {wt} first"
            )
        exported = export_at(queue.root, ref)
    project.reload()
    return Refreshed(ref, wt, top, exported)
