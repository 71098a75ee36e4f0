"""Rebasing the queue onto a new upstream ref, all or nothing.

The series is replayed with ``git am --3way`` in a scratch worktree; only when every patch
went through are the patch files, series, pin and CHANGELOG.md replaced, in one journalled
change (see ``sglforge.transactions.commit_files``). Patches upstream already has are retired to
``patches/retired/`` with the evidence, never deleted.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglforge import git, progress
from sglforge.changelog import add_unreleased
from sglforge.errors import PatchError
from sglforge.patches.check import (
    APPLIED,
    CLEAN,
    CONFLICT,
    SKIPPED,
    UPSTREAMED,
    RefReport,
    check_ref,
    retarget,
)
from sglforge.patches.export import diff_body, format_commit, merge_header
from sglforge.project import Project
from sglforge.queue.series import Patch, Queue, render_pin, split_patch
from sglforge.queue.upstream import (
    Upstream,
    hint_upstream,
    machine_local,
    pins_commit,
    with_upstream,
)
from sglforge.transactions import commit_files
from sglforge.util import confined, project_lock, read_exact


@dataclass(frozen=True)
class PatchOutcome:
    name: str
    action: str  # refreshed | unchanged | retired | kept | conflict
    status: str  # the check status at the new ref
    detail: str = ""
    hunks: tuple[str, ...] = ()
    elsewhere: str = ""  # a conflict whose lines left the file: where similar lines are

    @property
    def where(self) -> str:
        """What fails, for one line: the failing hunks and where their lines went, else the
        detail (the same words in upgrade's reason, its table and its report)."""
        if not self.hunks:
            return self.detail
        return "; ".join(self.hunks) + (f" [{self.elsewhere}]" if self.elsewhere else "")


@dataclass(frozen=True)
class RefreshResult:
    old_ref: str
    new_ref: str
    new_commit: str
    ok: bool
    written: bool
    patches: tuple[PatchOutcome, ...]
    report: RefReport
    changelog: tuple[str, ...] = ()


def refresh_queue(
    project: Project,
    new_ref: str,
    drop_upstreamed: bool = False,
    retire_excluded: bool = False,
    dry_run: bool = False,
    changelog: bool = True,
) -> RefreshResult:
    """Rebase the queue onto ``new_ref``; writes nothing unless every patch goes through.

    A patch that still applies exactly (clean: no offset, no fuzz, same path) keeps every
    byte; only the patches whose diff had to change are rewritten.
    """
    with project_lock(project.root):
        result = _refresh(project, new_ref, drop_upstreamed, retire_excluded, dry_run, changelog)
    project.reload()  # the queue and the pin may have been rewritten
    return result


def _refresh(
    project: Project,
    new_ref: str,
    drop_upstreamed: bool,
    retire_excluded: bool,
    dry_run: bool,
    changelog: bool,
) -> RefreshResult:
    root = project.root
    queue = project.fresh_queue()
    up = project.upstream
    pin_commit = project.pin_commit()
    new_ref = up.tag(new_ref)
    new_commit = up.resolve(new_ref)
    report = check_ref(queue, up, new_ref, new_commit, pin_commit, root / "build" / "tmp")
    outcomes: list[PatchOutcome] = []
    conflicts = [s for s in report.patches if s.status == CONFLICT]
    if conflicts:
        for s in report.patches:
            action = "conflict" if s.status == CONFLICT else "unchanged"
            outcomes.append(PatchOutcome(s.name, action, s.status, s.detail, s.hunks, s.elsewhere))
        return RefreshResult(
            queue.pin.ref, new_ref, new_commit, False, False, tuple(outcomes), report
        )
    texts = _replay(queue, up, report, new_commit)
    files: dict[Path, str | bytes | None] = {}
    series_names: list[str] = []
    notes: list[str] = []
    for patch, st in zip(queue.patches, report.patches, strict=True):
        retire = (st.status == UPSTREAMED and drop_upstreamed) or (
            st.status == SKIPPED and retire_excluded and "Applies-To" in st.detail
        )
        if retire:
            record = confined(
                root / "patches" / "retired", patch.name, "retired record", "patches/series"
            )
            files[record] = retired_text(patch, new_ref, st.detail)
            files[patch.path] = None
            outcomes.append(PatchOutcome(patch.name, "retired", st.status, st.detail))
            notes.append(f"Retired `{patch.name}` at {new_ref}: {st.detail}.")
            continue
        series_names.append(patch.name)
        if patch.name in texts and not (st.status == CLEAN and not st.moved):
            new_text = texts[patch.name]
            if diff_body(new_text) != diff_body(patch.text):
                files[patch.path] = new_text
                outcomes.append(PatchOutcome(patch.name, "refreshed", st.status, st.detail))
                notes.append(f"Refreshed `{patch.name}` onto {new_ref} ({st.status}).")
                continue
        action = "unchanged" if st.status in APPLIED else "kept"
        outcomes.append(PatchOutcome(patch.name, action, st.status, st.detail))
    unchanged = {o.name for o in outcomes if o.action == "unchanged"}
    notes += _rewritten_before(queue, up, pin_commit, new_ref, unchanged)
    series_path = root / "patches" / "series"
    files[series_path] = rewrite_series(series_path, series_names)
    pin = queue.pin
    sources = dict(pin.sources)
    if pins_commit(up, pin):
        new_pin = dataclasses.replace(pin, ref=new_ref, commit=new_commit)
    else:
        if not machine_local(up.key):  # a local path's tree is this machine's fact only
            sources[up.key] = {"ref": new_ref, "tree": up.tree(new_commit)}
        # The pin URL's commit for the new tag is unknown from here; `sglforge patches pin`
        # against that URL records it.
        new_pin = dataclasses.replace(pin, ref=new_ref, commit=None, sources=sources)
    if new_pin != pin:
        pin_file = root / "patches" / "upstream.toml"
        files[pin_file] = render_pin(new_pin, pin_file.read_text(encoding="utf-8"))
        notes.insert(0, f"Upstream pin moved from {pin.ref} to {new_ref}.")
    cl = root / "CHANGELOG.md"
    if changelog and notes and cl.exists():
        files[cl] = add_unreleased(cl.read_text(), "Changed", notes)
    if not dry_run:
        commit_files(root / "patches", files)
    return RefreshResult(
        pin.ref, new_ref, new_commit, True, not dry_run, tuple(outcomes), report, tuple(notes)
    )


def _rewritten_before(
    queue: Queue, up: Upstream, pin_commit: str, new_ref: str, unchanged: set[str]
) -> list[str]:
    """CHANGELOG lines for the patches already rewritten for ``new_ref`` before this refresh
    (a conflict resolved in its worktree and exported): they apply at ``new_ref`` but no
    longer at the old pin, so the pin's move alone would not say that they changed."""
    if not unchanged:
        return []
    tmp = queue.root / "build" / "tmp"
    at_pin = check_ref(queue, up, queue.pin.ref, pin_commit, pin_commit, tmp)
    by_name = {p.name: p for p in queue.patches}
    return [
        f"Rewrote `{s.name}` for {new_ref} (it no longer applies at {queue.pin.ref}); it now "
        f"changes {', '.join(f'`{f}`' for f in by_name[s.name].files)}."
        for s in at_pin.patches
        if s.name in unchanged and s.status == CONFLICT
    ]


def _replay(queue: Queue, up: Upstream, report: RefReport, commit: str) -> dict[str, str]:
    """Patch texts re-made on ``commit`` with ``git am --3way`` in a scratch worktree."""
    tmp_root = queue.root / "build" / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    wt = Path(tempfile.mkdtemp(dir=tmp_root, prefix="refresh-"))
    texts: dict[str, str] = {}
    try:
        with progress.current().task(f"checkout {report.ref} for the 3-way replay"):
            with git.cache_lock(up.cache):
                git.add_worktree(up.cache, wt, commit)
        for patch, st in zip(queue.patches, report.patches, strict=True):
            if st.status not in APPLIED:
                continue
            source = patch.text
            if st.moved:
                source = retarget(source, st.moved)
            res = git.am(wt, text=source)
            if res.status != 0:
                git.am_abort(wt)
                raise PatchError(
                    f"{patch.name} passed the check at {report.ref} but `git am` failed: "
                    f"{(res.stderr or res.stdout).strip().splitlines()[0]}",
                    with_upstream(
                        f"sglforge patches apply --ref {report.ref}", hint_upstream(up, queue.pin)
                    ),
                )
            made = format_commit(wt, "HEAD", patch.text)
            texts[patch.name] = merge_header(source, made)
    finally:
        with progress.current().task(f"remove the {report.ref} replay checkout"):
            with git.cache_lock(up.cache):
                git.remove_worktree(up.cache, wt)
    return texts


def rewrite_series(path: Path, keep: list[str]) -> str:
    """The series with dropped entries removed; comments and blank lines kept."""
    lines = read_exact(path).splitlines() if path.exists() else []
    out: list[str] = []
    for line in lines:
        name = line.split("#", 1)[0].strip().split()[0] if line.split("#", 1)[0].strip() else ""
        if name and name not in keep:
            continue
        out.append(line)
    present = {ln.split("#", 1)[0].strip().split()[0] for ln in out if ln.split("#", 1)[0].strip()}
    out.extend(n for n in keep if n not in present)
    return "\n".join(out) + "\n"


def retired_text(patch: Patch, ref: str, evidence: str) -> str:
    """The patch file as kept in ``patches/retired/``: Backport status plus the evidence."""
    header, diff = split_patch(patch.text)
    version = ref.lstrip("v")
    status = f"Upstream-Status: Backport [{patch.fixed_in or version}]"
    if re.search(r"^Upstream-Status:.*$", header, re.M):
        header = re.sub(r"^Upstream-Status:.*$", status, header, count=1, flags=re.M)
    retired = f"Retired: {ref}: {evidence}"
    if re.search(r"^Upstream-Status:.*$", header, re.M):
        header = re.sub(
            r"^(Upstream-Status:.*)$", rf"\1\n{_escape(retired)}", header, count=1, flags=re.M
        )
    return header + diff


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\")
