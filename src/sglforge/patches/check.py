"""The queue checked against many upstream refs at once, without any worktree.

Each ref gets a private index file (``git read-tree``); patches are applied to it in
series order with ``git apply --cached``, so no files are checked out and the user's
worktrees are never touched. Statuses, per patch and ref: clean, offset, three-way,
conflict, upstreamed, skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from unidiff.patch import PatchSet

from sglforge import git, progress
from sglforge.errors import ConfigError

# the statuses have a module of their own (read without loading the checker); named here too
from sglforge.patches.status import APPLIED as APPLIED
from sglforge.patches.status import CLEAN as CLEAN
from sglforge.patches.status import CONFLICT as CONFLICT
from sglforge.patches.status import OFFSET as OFFSET
from sglforge.patches.status import SKIPPED as SKIPPED
from sglforge.patches.status import THREE_WAY as THREE_WAY
from sglforge.patches.status import UPSTREAMED as UPSTREAMED
from sglforge.patches.status import Status as Status
from sglforge.project import Project
from sglforge.queue.configs import base_tables_from_dir, load_items, upstreamed
from sglforge.queue.series import Patch, Queue, line_heads, ref_version
from sglforge.queue.upstream import Upstream
from sglforge.util import scratch_dir


@dataclass(frozen=True)
class PatchStatus:
    name: str
    status: Status
    detail: str = ""
    files: tuple[str, ...] = ()
    hunks: tuple[str, ...] = ()
    moved: dict[str, str] = field(default_factory=dict)
    # a conflict whose lines left the file: where similar lines are now (context_elsewhere)
    elsewhere: str = ""


@dataclass(frozen=True)
class RefReport:
    ref: str
    commit: str
    version: str | None
    patches: tuple[PatchStatus, ...]

    @property
    def ok(self) -> bool:
        return all(p.status != CONFLICT for p in self.patches)


@dataclass(frozen=True)
class CheckReport:
    upstream: str
    python_only: bool
    pin: str
    refs: tuple[RefReport, ...]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.refs)


class _Index(git.Index):
    """A private index file inside the upstream cache's object store, named so a later run
    can tell a killed run's leftovers from live ones."""

    def __init__(self, cache: Path, tmpdir: Path) -> None:
        tmpdir.mkdir(parents=True, exist_ok=True)
        _sweep_stale_indexes(tmpdir)
        # The pid in the name lets a later run tell a killed run's leftovers from live ones.
        fd, name = tempfile.mkstemp(dir=tmpdir, prefix=f"index-{os.getpid()}-", suffix=".tmp")
        os.close(fd)
        os.unlink(name)
        super().__init__(cache, Path(name))


def _sweep_stale_indexes(tmpdir: Path) -> None:
    """Remove private indexes left by a process that no longer runs (killed with SIGKILL)."""
    for leftover in tmpdir.glob("index-*"):
        m = re.match(r"index-(\d+)-", leftover.name)
        if not m:  # an older sglforge's name: no owner to ask; old enough means abandoned
            with contextlib.suppress(OSError):
                if time.time() - leftover.stat().st_mtime > 3600:
                    leftover.unlink()
            continue
        pid = int(m.group(1))
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            leftover.unlink(missing_ok=True)
        except PermissionError:
            pass


def check_queue(
    queue: Queue,
    up: Upstream,
    refs: list[str],
    pin_commit: str,
    jobs: int | None = None,
) -> CheckReport:
    """Check every patch of ``queue`` at every ref; never touches a worktree."""
    tmpdir = scratch_dir(queue.root, "tmp")  # a reading command: build/ may be read-only
    refs = [up.tag(ref) for ref in refs]  # 0.5.15 -> v0.5.15
    shas = up.resolve_all(refs)
    commits = [(ref, shas[ref]) for ref in refs]
    workers = max(1, min(jobs or (os.cpu_count() or 2), len(commits)))

    with progress.current().task("check", len(commits)) as task:

        def one(item: tuple[str, str]) -> RefReport:
            ref, commit = item
            report = check_ref(queue, up, ref, commit, pin_commit, tmpdir)
            task.advance(note=ref)
            return report

        if workers == 1:
            reports = [one(c) for c in commits]
        else:
            with ThreadPoolExecutor(workers) as pool:
                reports = list(pool.map(one, commits))
    return CheckReport(
        upstream=up.source, python_only=up.python_only, pin=queue.pin.ref, refs=tuple(reports)
    )


def check_ref(
    queue: Queue, up: Upstream, ref: str, commit: str, pin_commit: str, tmpdir: Path
) -> RefReport:
    """Apply the series in order at one ref on a private index and classify each patch."""
    version = ref_version(ref)
    pinned = ref_version(queue.pin.ref)
    older = version is not None and pinned is not None and version < pinned
    index = _Index(up.cache, tmpdir)
    renames: dict[str, str] | None = None
    results: list[PatchStatus] = []
    failed: dict[str, str] = {}  # patch name -> why it failed (for dependants)
    try:
        index.read_paths(commit, sorted({f for p in queue.patches for f in p.paths or p.files}))
        fast = _fast_path(queue, index, version)
        if fast is not None:
            return RefReport(ref, commit, str(version) if version else None, fast)
        for patch in queue.patches:
            blocker = _failed_dependency(patch, queue, failed)
            if blocker:
                st = PatchStatus(patch.name, SKIPPED, blocker, patch.files)
                results.append(st)
                failed[patch.name] = "skipped"
                continue
            if renames is None and _needs_renames(index, patch):
                files = tuple(f for p in queue.patches for f in p.files)
                renames = _renames(up.cache, pin_commit, commit, files)
                if renames:
                    index.read_paths(commit, sorted(set(renames.values())), add=True)
            ctx = _RefCheck(index, up, pin_commit, commit, version, renames or {}, older)
            st = _check_patch(ctx, patch)
            results.append(st)
            if st.status == CONFLICT or (st.status == SKIPPED and "Applies-To" not in st.detail):
                failed[patch.name] = st.status
    finally:
        index.discard()
    return RefReport(ref, commit, str(version) if version else None, tuple(results))


def _fast_path(
    queue: Queue, index: _Index, version: Version | None
) -> tuple[PatchStatus, ...] | None:
    """One `git apply` of the whole series; None unless every patch applies (the common case).

    git applies the files in order and reports, per file section, any hunk it had to move;
    those reports are mapped back to patches by the order of their file sections.
    """
    patches = queue.patches
    if not patches or any(p.applies_at(version) is False or not p.has_diff() for p in patches):
        return None
    res = index.apply([p.path.resolve() for p in patches])
    if res.status != 0:
        return None  # git apply is atomic: the index is unchanged
    owners = [p for p in patches for _ in _file_sections(p)]
    sections = re.split(r"^Checking patch ", res.stderr, flags=re.M)[1:]
    if len(sections) != len(owners):
        return None  # unexpected output: let the per-patch path decide
    offsets: dict[str, list[str]] = {}
    for owner, section in zip(owners, sections, strict=True):
        detail = _offset_detail(section)
        if detail:
            offsets.setdefault(owner.name, []).append(detail)
    return tuple(
        PatchStatus(p.name, OFFSET, ", ".join(offsets[p.name]), p.files)
        if p.name in offsets
        else PatchStatus(p.name, CLEAN, "", p.files)
        for p in patches
    )


def _file_sections(patch: Patch) -> list[str]:
    found = [m.group(1) for m in line_heads(_SECTION, patch.body, patch.diff_start)]
    return found or [m.group(1) for m in line_heads(_PLUS, patch.body, patch.diff_start)]


_SECTION = re.compile(r"\ndiff --git a/\S+ b/(\S+)")  # newline-first, for line_heads
_PLUS = re.compile(r"\n\+\+\+ (?:b/)?(\S+)")


def _failed_dependency(patch: Patch, queue: Queue, failed: dict[str, str]) -> str:
    for name in patch.depends_on:
        if name in failed:
            return f"depends on {name}, which is {failed[name]} here (Depends-On)"
    for earlier in queue.patches:
        if earlier.index >= patch.index:
            break
        if earlier.name in failed and set(earlier.files) & set(patch.files):
            return f"depends on {earlier.name} (same files), which is {failed[earlier.name]} here"
    return ""


def _needs_renames(index: _Index, patch: Patch) -> bool:
    # Only files that exist in the patch's preimage yet are missing here can have moved.
    for f in patch.files:
        if not index.has_path(f):
            return True
    return False


def _renames(cache: Path, a: str, b: str, files: tuple[str, ...] = ()) -> dict[str, str]:
    """Files renamed between two commits (either direction of history).

    Full rename detection over sglang's thousands of files takes seconds, so when the
    patched ``files`` are known, only they and the added files sharing their names are
    compared (a moved file keeps its name far more often than not); the full detection runs
    only when that finds nothing.
    """
    if files:
        changes = git.name_status(cache, a, b)
        deleted = {path for st, path in changes if st == "D" and path in files}
        added = [path for st, path in changes if st == "A"]
        if not deleted:
            return {}
        names = {d.rsplit("/", 1)[-1] for d in deleted}
        candidates = [f for f in added if f.rsplit("/", 1)[-1] in names]
        if candidates:
            found = git.renames(cache, a, b, [*sorted(deleted), *candidates])
            if set(found) >= deleted:
                return found
    return git.renames(cache, a, b)


@dataclass(frozen=True)
class _RefCheck:
    """What checking one patch at one ref needs: the private index holding the ref's tree,
    the upstream, the pin's and the ref's commits, the ref's version, and the files renamed
    between pin and ref."""

    index: _Index
    up: Upstream
    pin_commit: str
    commit: str
    version: Version | None
    renames: dict[str, str]
    older: bool = False  # a ref before the pin: its code is older, not moved

    def moved(self, patch: Patch) -> dict[str, str]:
        """The patch's files that moved between the pin and this ref (old -> new path)."""
        return {a: b for a, b in self.renames.items() if a in patch.files}


def _check_patch(ctx: _RefCheck, patch: Patch) -> PatchStatus:
    if not patch.has_diff():
        return PatchStatus(patch.name, CONFLICT, "empty patch: no diff", patch.files)
    allowed = patch.applies_at(ctx.version)
    text = patch.text  # the exact bytes `git am` gets in apply: one verdict for both
    index = ctx.index
    if allowed is not False:
        res = index.apply(text)
        if res.status == 0:
            offset = "offset" in res.stderr
            return PatchStatus(
                patch.name,
                OFFSET if offset else CLEAN,
                _offset_detail(res.stderr) if offset else "",
                patch.files,
            )
    evidence = _upstreamed(ctx, patch, text)
    if evidence:
        note = f" (outside Applies-To {patch.applies_to})" if allowed is False else ""
        return PatchStatus(
            patch.name, UPSTREAMED, evidence + note, patch.files, moved=ctx.moved(patch)
        )
    if allowed is False:
        return PatchStatus(
            patch.name,
            SKIPPED,
            f"Applies-To {patch.applies_to} excludes {ctx.version}",
            patch.files,
        )
    before = index.write_tree()
    res = index.apply(text, three_way=True)
    if res.status == 0:
        return PatchStatus(patch.name, THREE_WAY, "merged with git's 3-way fallback", patch.files)
    index.read_tree(before)
    at_moved = _at_moved_path(ctx, patch, text, before)
    if at_moved is not None:
        return at_moved
    outside = [f for f in patch.files if not f.startswith("python/")]
    if ctx.up.python_only and outside:
        # A PyPI-built history has python/ only: it cannot say anything about these files.
        return PatchStatus(
            patch.name,
            SKIPPED,
            f"{', '.join(outside)} not in this upstream (built from PyPI wheels: python/ only); "
            "check it against a git clone of sglang",
            patch.files,
        )
    return _conflict_status(ctx, patch, text)


def _at_moved_path(ctx: _RefCheck, patch: Patch, text: str, before: str) -> PatchStatus | None:
    """The patch applied (plainly, then 3-way) at the paths its files moved to; None when
    none moved or it does not apply there either (the index is then back at ``before``)."""
    moved = ctx.moved(patch)
    if not moved:
        return None
    moved_text = retarget(text, moved)
    where = ", ".join(f"{a} -> {b}" for a, b in moved.items())
    if ctx.index.apply(moved_text).status == 0:
        return PatchStatus(
            patch.name, OFFSET, f"applied at moved path ({where})", patch.files, moved=moved
        )
    if ctx.index.apply(moved_text, three_way=True).status == 0:
        return PatchStatus(
            patch.name, THREE_WAY, f"3-way at moved path ({where})", patch.files, moved=moved
        )
    ctx.index.read_tree(before)
    return None


def _conflict_status(ctx: _RefCheck, patch: Patch, text: str) -> PatchStatus:
    """A conflict, with the hunks that fail, git's reason, and where their context went."""
    files, hunks, reason = _failing_hunks(ctx.index, text, patch)
    detail = "; ".join(hunks or files)
    if reason and reason not in detail:
        detail = f"{detail} ({reason})" if detail else reason
    moved_to = "" if ctx.older else context_elsewhere(ctx.up.cache, ctx.commit, patch, files)
    if moved_to:
        detail += f" [{moved_to}]"
    if "\r\n" in text and text.count("\r\n") >= text.count("\n") - 1:
        detail += " [the patch file has CRLF line endings: was it converted by an editor?]"
    return PatchStatus(
        patch.name,
        CONFLICT,
        "does not apply: " + (detail or "git apply failed without saying why"),
        files or patch.files,
        hunks,
        elsewhere=moved_to,
    )


def _offset_detail(stderr: str) -> str:
    found = re.findall(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", stderr)
    return ", ".join(f"hunk {h} at line {line} (offset {off})" for h, line, off in found)


def retarget(text: str, moved: dict[str, str]) -> str:
    for old, new in moved.items():
        text = re.sub(
            rf"^(diff --git a/){re.escape(old)}( b/){re.escape(old)}$",
            rf"\g<1>{new}\g<2>{new}",
            text,
            flags=re.M,
        )
        text = re.sub(rf"^(--- a/){re.escape(old)}$", rf"\g<1>{new}", text, flags=re.M)
        text = re.sub(rf"^(\+\+\+ b/){re.escape(old)}$", rf"\g<1>{new}", text, flags=re.M)
    return text


def _upstreamed(ctx: _RefCheck, patch: Patch, text: str) -> str:
    """Evidence that upstream already has this change, strongest first; '' when none."""
    rev = ctx.index.apply(text, reverse=True, check=True)
    if rev.status == 0:
        return "change already present: the patch reverse-applies here"
    pid = git.patch_id(ctx.up.cache, text)
    if pid and ctx.commit != ctx.pin_commit:
        found = _commit_with_patch_id(ctx.up.cache, ctx.pin_commit, ctx.commit, patch.files, pid)
        if found:
            return f"same change as upstream commit {found[:12]} (patch-id {pid[:12]})"
    moved = ctx.moved(patch)
    if moved:
        rev = ctx.index.apply(retarget(text, moved), reverse=True, check=True)
        if rev.status == 0:
            where = ", ".join(f"{a} -> {b}" for a, b in moved.items())
            return f"file moved ({where}) and the change is present at the new path"
    if patch.fixed_in and ctx.version is not None:
        try:
            fixed = Version(patch.fixed_in)
        except InvalidVersion:
            fixed = None
        if fixed is not None and ctx.version >= fixed:
            return f"Upstream-Fixed-In {fixed} and this ref is {ctx.version}"
    return ""


def _commit_with_patch_id(
    cache: Path, pin_commit: str, commit: str, files: tuple[str, ...], pid: str
) -> str:
    base = git.merge_base(cache, pin_commit, commit)
    if not base:
        # unrelated commits (a PyPI store: one parentless commit per release): the change
        # between the two releases, as one diff
        between = git.patch_id(cache, git.diff(cache, pin_commit, commit, files))
        return commit if between == pid else ""
    for found, sha in git.patch_ids(cache, base, commit, files):
        if found == pid:
            return sha
    return ""


def git_reason(stderr: str) -> str:
    """git's own words for a failure: its ``error:``/``fatal:`` lines, joined."""
    lines = [
        ln.strip()
        for ln in stderr.splitlines()
        if ln.startswith(("error:", "fatal:")) and "patch does not apply" not in ln
    ]
    return "; ".join(dict.fromkeys(lines))[:400]


# A line shorter than this is too common to say where code went (``)``, ``return x``).
_DISTINCT_LINE = 20
# Without the removed lines, this many context lines must be found together in one file.
_CONTEXT_LINES = 3


def context_elsewhere(cache: Path, commit: str, patch: Patch, files: Sequence[str]) -> str:
    """When a failing file no longer holds any of the lines the patch touches (the code moved
    to another file, as server_args.py's overrides did), where similar lines are now:
    ``server_args.py no longer holds the lines the patch touches; similar lines are in
    X:LINE (4 of 5 lines)``. '' else.

    Only a distinctive match counts: one file holding half of the patch's lines, among them
    every line it removes or at least three context lines; a line shorter than 20
    characters is never looked for. A caller skips refs before the pin (their code is older,
    not moved)."""
    try:
        parsed = PatchSet(patch.diff)
    except Exception:  # noqa: BLE001 - an unparsable diff has no lines to look for
        return ""
    notes = []
    for pf in parsed:
        if pf.path not in files:
            continue
        removed = _distinct(ln.value for h in pf for ln in h if ln.is_removed)
        context = _distinct(ln.value for h in pf for ln in h if ln.is_context) - removed
        lines = removed | context
        if not lines:
            continue
        if git.holds_any_line(cache, commit, pf.path, sorted(lines)):
            continue  # some of its lines are still there: an ordinary conflict
        best = _similar_place(cache, commit, pf.path, removed, context)
        note = f"{pf.path} no longer holds the lines the patch touches"
        if best:
            where, found = best
            note += f"; similar lines are in {where} ({found} of {len(lines)} lines)"
        notes.append(note)
    return "; ".join(notes)


def _distinct(values: Iterable[str]) -> set[str]:
    return {v.strip() for v in values if len(v.strip()) >= _DISTINCT_LINE}


def _similar_place(
    cache: Path, commit: str, path: str, removed: set[str], context: set[str]
) -> tuple[str, int] | None:
    """(``file:line``, lines found) of the one file holding the patch's lines the most
    distinctively (see ``context_elsewhere``); None when no file does."""
    lines = removed | context
    found: dict[str, set[str]] = {}
    first: dict[str, int] = {}
    for where, line, text in git.grep_lines(cache, commit, sorted(lines)):
        if where == path:
            continue
        matched = {ln for ln in lines if text.strip() == ln}
        if matched:
            found.setdefault(where, set()).update(matched)
            first[where] = min(first.get(where, line), line)
    accepted = [
        (len(m), where)
        for where, m in found.items()
        if 2 * len(m) >= len(lines)
        and ((removed and removed <= m) or len(m & context) >= _CONTEXT_LINES)
    ]
    if not accepted:
        return None
    count, where = max(accepted)
    return f"{where}:{first[where]}", count


def _failing_hunks(
    index: _Index, text: str, patch: Patch
) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    res = index.apply(text, check=True)
    files: list[str] = []
    hunks: list[str] = []
    try:
        parsed = PatchSet(patch.diff)
    except Exception:  # noqa: BLE001 - lint reports unparsable diffs; here we only need names
        parsed = None
    for m in re.finditer(r"error: patch failed: (\S+):(\d+)", res.stderr):
        path, line = m.group(1), int(m.group(2))
        files.append(path)
        label = f"{path}:{line}"
        if parsed is not None:
            for pf in parsed:
                if pf.path == path:
                    for n, h in enumerate(pf, 1):
                        if h.source_start == line or (
                            h.source_start <= line < h.source_start + max(h.source_length, 1)
                        ):
                            label = f"{path} hunk {n} (@@ -{h.source_start},{h.source_length} @@)"
                            break
        hunks.append(label)
    for m in re.finditer(
        r"error: (\S+): (does not exist in index|already exists in index)", res.stderr
    ):
        files.append(m.group(1))
        hunks.append(f"{m.group(1)}: {m.group(2)}")
    reason = "" if hunks else git_reason(res.stderr)
    return tuple(dict.fromkeys(files)), tuple(dict.fromkeys(hunks)), reason


def select_tags(up: Upstream, spec: str, pre: bool = False) -> list[str]:
    """Upstream tags whose version matches the PEP 440 ``spec``, oldest first."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        wanted = SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise ConfigError(
            f"--tags {spec!r} is not a PEP 440 specifier", "for example --tags '>=0.5.10,<=0.5.23'"
        ) from exc
    found = []
    for tag in up.tags():
        v = ref_version(tag)
        if v is not None and wanted.contains(v, prereleases=pre) and (pre or not v.is_prerelease):
            found.append((v, tag))
    return [t for _, t in sorted(found)]


def check_refs(
    project: Project, refs: list[str], tags: str | None = None, jobs: int | None = None
) -> CheckReport:
    """Check the project's queue at ``refs`` (plus upstream tags matching ``tags``)."""
    up = project.upstream
    up.refresh()  # what upstream has now: new tags, and a pinned tag that moved
    pin_commit = project.pin_commit()
    queue = project.queue
    wanted = list(refs)
    if tags and "pin" in tags:
        # `--tags '>=pin'`: the pinned release and every later one (the CI job's spelling)
        pinned = ref_version(queue.pin.ref)
        if pinned is None:
            raise ConfigError(
                f"--tags {tags!r}: the pin {queue.pin.ref!r} names no version",
                "spell the version: --tags '>=0.5.14'",
            )
        tags = tags.replace("pin", str(pinned))
    if tags:
        matched = select_tags(up, tags)
        if not matched:
            known = sorted((v, t) for t in up.tags() if (v := ref_version(t)) is not None)
            shown = [t for _, t in known]
            listing = ", ".join(shown[-12:]) if shown else "none"
            raise ConfigError(
                f"--tags {tags!r} matches no tag of upstream {up.source}; its version tags: "
                f"{listing}"
                + (f" (newest {len(shown[-12:])} of {len(shown)})" if len(shown) > 12 else ""),
                "widen --tags, or pass --ref",
            )
        wanted += [t for t in matched if t not in wanted]
    if not wanted:
        wanted = [queue.pin.ref]  # nothing asked: the pin
    return check_queue(queue, up, wanted, pin_commit, jobs=jobs)


def check_items(
    root: Path, refs: Sequence[str], aiter_configs: Path | None = None
) -> list[dict[str, str]]:
    """Each config item at each ref: applies, skipped (Applies-To) or upstreamed.

    An item is *upstreamed* when the base's aiter (``aiter_configs``, a copy of the base's
    ``aiter/configs`` folder) already carries every row with the same kernel choice.
    """
    items = load_items(root)
    base = base_tables_from_dir(aiter_configs) if aiter_configs else None
    out = []
    for ref in refs:
        version = ref_version(ref)
        for item in items:
            if base is not None and upstreamed(item, base):
                status, detail = "upstreamed", f"{base.configs_dir} carries every row"
            elif (
                item.applies_to
                and version is not None
                and version not in SpecifierSet(item.applies_to)
            ):
                status, detail = "skipped", f"Applies-To {item.applies_to}"
            else:
                status = "applies"
                detail = "installed by the build" + (
                    "" if base is not None else " (rows not compared: no --aiter-configs)"
                )
            out.append({"ref": ref, "name": item.name, "status": status, "detail": detail})
    return out
