"""apply, refresh, export and new on real repositories, including their failure modes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from crash import CRASH_EXIT, crash_code
from pipelines import open_project
from sglforge.errors import PatchError, UpstreamError
from sglforge.patches.apply import apply_queue
from sglforge.patches.check import check_refs
from sglforge.patches.export import export_queue, new_patch
from sglforge.patches.refresh import refresh_queue
from sglforge.queue.series import load_pin, load_queue
from sglforge.queue.upstream import record_pin
from synthetic import (
    NO_CONFLICT,
    PATCHES,
    commit,
    edit,
    git,
    lines,
    make_project,
    make_upstream,
    snapshot,
    write,
)


def test_apply_makes_one_commit_per_patch_and_reuses(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path))
    a = apply_queue(open_project(root))
    assert a.ref == "v1.0" and not a.reused
    assert a.branch == "sglforge/v1.0"
    assert a.worktree == root / "build" / "worktrees" / "v1.0"
    log = git(a.worktree, "log", "--format=%s", f"{a.commit}..HEAD").splitlines()
    assert len(log) == len(PATCHES)
    assert (a.worktree / "python/pkg/a.py").read_text().splitlines()[4] == "a line 5 FIXED"
    assert "python/pkg/jit_kernel/f.cuh" in a.changed_files
    assert load_pin(root).commit is None  # apply reads the pin; it never records it
    again = apply_queue(open_project(root))
    assert again.reused and again.head == a.head


def test_a_moved_pinned_tag_is_refused_where_upstream_is_asked(tmp_path: Path) -> None:
    """apply works from the local mirror (no fetch: the pinned commit is there); the verbs
    that ask upstream what it has now (check, pin) see the tag moved and refuse it."""
    upstream = make_upstream(tmp_path)
    root = make_project(tmp_path, upstream)
    first = apply_queue(open_project(root))
    git(upstream, "checkout", "-q", "v1.0")
    edit(upstream, "python/pkg/a.py", 1, "retagged")
    commit(upstream, "retag")
    git(upstream, "tag", "-f", "v1.0")
    again = apply_queue(open_project(root))
    assert again.reused and again.commit == first.commit
    moved = r"pinned tag v1.0 now resolves to .*\(the tag moved\)"
    with pytest.raises(UpstreamError, match=moved):
        check_refs(open_project(root), [])
    with pytest.raises(UpstreamError, match=moved):
        record_pin(root)


def test_unknown_ref_and_unreachable_upstream(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path))
    with pytest.raises(UpstreamError, match="ref 'v9.9' not found"):
        apply_queue(open_project(root), ref="v9.9")
    with pytest.raises(UpstreamError, match="no such folder"):
        apply_queue(open_project(root, str(tmp_path / "nowhere")))
    with pytest.raises(UpstreamError, match="unreachable"):
        apply_queue(open_project(root, "http://127.0.0.1:9/sglang.git"))


def test_dirty_worktree_is_never_thrown_away(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    a = apply_queue(open_project(root))
    (a.worktree / "python/pkg/a.py").write_text("my edit\n")
    with pytest.raises(PatchError, match="uncommitted changes .*python/pkg/a.py") as err:
        apply_queue(open_project(root))
    assert "sglforge patches new" in str(err.value)
    assert (a.worktree / "python/pkg/a.py").read_text() == "my edit\n"
    forced = apply_queue(open_project(root), force=True)
    assert "my edit" not in (forced.worktree / "python/pkg/a.py").read_text()


def test_unexported_commits_are_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    a = apply_queue(open_project(root))
    edit(a.worktree, "python/pkg/a.py", 20, "committed, not exported")
    commit(a.worktree, "extra")
    with pytest.raises(PatchError, match="not yet exported"):
        apply_queue(open_project(root))


def test_stale_am_session_is_aborted(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    a = apply_queue(open_project(root))
    # Leave a `git am` session behind, as a run killed in the middle of it would.
    rebase = a.worktree / git(a.worktree, "rev-parse", "--git-path", "rebase-apply")
    assert not rebase.exists()
    git(a.worktree, "checkout", "-q", "-f", "sglforge/v1.0")
    (rebase).mkdir(parents=True, exist_ok=True)
    (rebase / "applying").write_text("")
    again = apply_queue(open_project(root))
    assert not rebase.exists()
    assert again.head == a.head


def test_conflict_at_a_ref_leaves_am_session_and_names_the_hunk(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path))
    with pytest.raises(PatchError, match=r"0004-fix-d.patch does not apply at v1.1") as err:
        apply_queue(open_project(root), ref="v1.1")
    assert "python/pkg/d.py hunk 1" in str(err.value)
    assert "sglforge patches export --ref v1.1" in str(err.value)


def test_refresh_all_or_nothing_on_conflict(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path))
    before = snapshot(root)
    r = refresh_queue(open_project(root), "v1.1", drop_upstreamed=True)
    assert not r.ok and not r.written
    assert {p.name: p.action for p in r.patches}["0004-fix-d.patch"] == "conflict"
    after = snapshot(root)
    # the only permitted change: the pin's commit recorded by the first resolve
    after.pop("patches/upstream.toml")
    before.pop("patches/upstream.toml")
    assert after == before


def test_refresh_rebases_retires_and_notes_changelog(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    old = load_queue(root)
    r = refresh_queue(open_project(root), "v1.1", drop_upstreamed=True)
    assert r.ok and r.written
    actions = {p.name: p.action for p in r.patches}
    assert actions == {
        "0001-fix-a.patch": "unchanged",
        "0002-fix-b.patch": "refreshed",
        "0003-fix-c.patch": "refreshed",
        "0004-fix-e.patch": "retired",
        "0005-fix-f.patch": "retired",
        "0006-fix-g.patch": "kept",
    }
    q = load_queue(root)
    assert q.pin.ref == "v1.1"
    assert [p.name for p in q.patches] == [
        "0001-fix-a.patch",
        "0002-fix-b.patch",
        "0003-fix-c.patch",
        "0006-fix-g.patch",
    ]
    assert q.hash != old.hash
    # headers it did not create are kept
    assert "Why: tests." in (root / "patches/0002-fix-b.patch").read_text()
    assert "@@ -20,7 +20,7 @@" in (root / "patches/0002-fix-b.patch").read_text()
    retired = (root / "patches/retired/0005-fix-f.patch").read_text()
    assert "Upstream-Status: Backport [1.1]" in retired
    assert "Retired: v1.1: file moved" in retired
    assert not (root / "patches/0005-fix-f.patch").exists()
    changelog = (root / "CHANGELOG.md").read_text()
    assert "Upstream pin moved from v1.0 to v1.1." in changelog
    assert "Retired `0005-fix-f.patch`" in changelog
    # the refreshed queue applies clean at the new pin
    a = apply_queue(open_project(root))
    assert [p.status for p in a.patches] == ["clean", "clean", "clean", "skipped"]


def test_interrupted_refresh_is_all_old_or_all_new(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    apply_queue(open_project(root))  # records the pin commit first
    before = snapshot(root)
    code = (
        "import sys; from pathlib import Path;"
        "from sglforge.patches.refresh import refresh_queue;"
        "from sglforge.project import Project;"
        f"refresh_queue(Project(Path({str(root)!r})), 'v1.1', drop_upstreamed=True)"
    )
    res = subprocess.run(crash_code(2, code), capture_output=True)
    assert res.returncode == CRASH_EXIT, res.stderr  # killed in the middle of the renames
    assert (root / "patches" / ".sglforge-txn.json").exists()
    # The next command that reads the queue finishes the change: everything new.
    q = load_queue(root)
    assert q.pin.ref == "v1.1"
    assert not (root / "patches" / ".sglforge-txn.json").exists()
    assert not list(root.rglob("*.sglforge-tmp"))
    assert [p.name for p in q.patches][:3] == [
        "0001-fix-a.patch",
        "0002-fix-b.patch",
        "0003-fix-c.patch",
    ]
    assert (root / "patches/retired/0004-fix-e.patch").exists()
    assert snapshot(root) != before


def test_interrupt_before_the_journal_leaves_everything_old(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    apply_queue(open_project(root))
    before = snapshot(root)
    # A crash after temp files were written but before the journal: stray temps only.
    (root / "patches" / ".0001-fix-a.patch.x.sglforge-tmp").write_text("half")
    load_queue(root)
    assert snapshot(root) == before


def test_export_round_trip_and_new_patch(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    a = apply_queue(open_project(root))
    before = (root / "patches/0001-fix-a.patch").read_text()
    r = export_queue(open_project(root))
    assert r.written == () and len(r.unchanged) == len(NO_CONFLICT)
    assert (root / "patches/0001-fix-a.patch").read_text() == before
    # amend the first patch's commit by rewriting history on the branch
    git(a.worktree, "rebase", "-q", "--exec", "true", a.commit)
    edit(a.worktree, "python/pkg/g.py", 20, "new work")
    made = new_patch(open_project(root), "tune-g", message="Tune g for ROCm")
    assert made.added == ("0007-tune-g.patch",)
    text = (root / "patches/0007-tune-g.patch").read_text()
    assert "Subject: [PATCH] Tune g for ROCm" in text and "Upstream-Status: Pending" in text
    assert load_queue(root).patches[-1].name == "0007-tune-g.patch"
    assert apply_queue(open_project(root)).reused
    edit(a.worktree, "python/pkg/g.py", 21, "more")
    with pytest.raises(PatchError, match="already has a patch named 'tune-g'"):
        new_patch(open_project(root), "tune-g")


def test_resolving_a_conflict_apply_edit_export(tmp_path: Path) -> None:
    """The documented flow: `apply --ref NEW` stops, the user resolves, `export` rewrites."""
    root = make_project(tmp_path, make_upstream(tmp_path), PATCHES[:4])  # a, b, c, d
    with pytest.raises(PatchError, match="0004-fix-d.patch does not apply at v1.1"):
        apply_queue(open_project(root), ref="v1.1")
    wt = root / "build" / "worktrees" / "v1.1"
    # resolve: keep upstream's line 10 and add ours below it
    d = (wt / "python/pkg/d.py").read_text().splitlines()
    d = [ln for ln in d if not ln.startswith(("<<<<<<<", "=======", ">>>>>>>", "d line 10 FIXED"))]
    d.insert(10, "d line 10 FIXED (after upstream's change)")
    (wt / "python/pkg/d.py").write_text("\n".join(d) + "\n")
    git(wt, "add", "python/pkg/d.py")
    git(wt, "am", "--continue")
    # an unexported resolution is never thrown away by the next apply
    with pytest.raises(PatchError, match="not yet exported"):
        apply_queue(open_project(root), ref="v1.1")
    r = export_queue(open_project(root), ref="v1.1")
    assert "0004-fix-d.patch" in r.written and r.added == ()
    text = (root / "patches/0004-fix-d.patch").read_text()
    assert "Why: tests." in text and "+d line 10 FIXED (after upstream's change)" in text
    # the export rebased every patch onto v1.1: the queue is ready for `refresh --ref v1.1`
    a = apply_queue(open_project(root), ref="v1.1")
    assert [p.status for p in a.patches] == ["clean"] * 4


def test_a_reader_during_a_write_never_half_applies_it(tmp_path: Path) -> None:
    """Another command's recovery runs while a change is being written: it waits for the
    writer's lock instead of deleting the writer's temp files."""
    import threading

    from sglforge.transactions import commit_files, queue_lock, recover_transactions

    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "a.patch").write_text("old a\n")
    (pdir / "series").write_text("a.patch\n")
    done = threading.Event()
    with queue_lock(pdir):  # a writer holds the lock (between its temp files and journal)
        (pdir / ".b.patch.x.sglforge-tmp").write_text("new b\n")
        reader = threading.Thread(target=lambda: (recover_transactions(pdir), done.set()))
        reader.start()
        assert not done.wait(0.3), "recovery must wait for the writer"
        (pdir / ".b.patch.x.sglforge-tmp").unlink()
    reader.join(5)
    assert done.is_set()
    commit_files(
        pdir, {pdir / "a.patch": None, pdir / "b.patch": "new b\n", pdir / "series": "b.patch\n"}
    )
    assert sorted(p.name for p in pdir.iterdir() if not p.name.startswith(".")) == [
        "b.patch",
        "series",
    ]


def test_series_entries_stay_inside_patches(tmp_path: Path) -> None:
    from sglforge.errors import ConfigError
    from sglforge.patches.lint import lint_queue

    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT[:1])
    (tmp_path / "outside.patch").write_text((root / "patches/0001-fix-a.patch").read_text())
    with open(root / "patches" / "series", "a") as fh:
        fh.write("../../outside.patch\n")
    with pytest.raises(ConfigError, match=r"patches/series:3: '../../outside.patch' is not"):
        load_queue(root)
    assert [f.code for f in lint_queue(root)] == ["bad-series"]
    assert (tmp_path / "outside.patch").exists()


def test_refresh_follows_a_moved_file_and_rewrites_the_stat(tmp_path: Path) -> None:
    upstream = make_upstream(tmp_path)
    root = make_project(tmp_path, upstream, NO_CONFLICT[:1])  # fix-a only
    git(upstream, "checkout", "-q", "-b", "move", "v1.1")
    (upstream / "python/pkg/core").mkdir()
    git(upstream, "mv", "python/pkg/a.py", "python/pkg/core/a.py")
    commit(upstream, "move a.py")
    git(upstream, "tag", "v1.2")
    r = refresh_queue(open_project(root), "v1.2")
    assert r.ok and r.patches[0].action == "refreshed"
    assert "moved path" in r.patches[0].detail
    text = (root / "patches/0001-fix-a.patch").read_text()
    head, diff = text.split("\ndiff --git", 1)
    assert "python/pkg/core/a.py" in head.split("\n---\n", 1)[1]  # the diffstat
    assert "python/pkg/jit_kernel" not in head and "Why: tests." in head
    assert diff.startswith(" a/python/pkg/core/a.py b/python/pkg/core/a.py")


def test_python_only_upstream_skips_files_outside_python(tmp_path: Path) -> None:
    """A PyPI-built history cannot judge sgl-kernel/ or docker/ patches: skipped, said why."""
    from dataclasses import replace

    from sglforge.patches.check import check_ref
    from sglforge.queue.upstream import open_upstream, pinned_commit

    upstream = make_upstream(tmp_path)
    write(upstream, "sgl-kernel/csrc/k.cu", lines("k"))
    commit(upstream, "kernel")
    git(upstream, "tag", "v1.3")
    root = make_project(
        tmp_path, upstream, [("fix-k", "sgl-kernel/csrc/k.cu", 3, "k FIXED", "")], base="v1.3"
    )
    q = load_queue(root)
    up = open_upstream(root, q.pin)
    pin = pinned_commit(root, q.pin, up)
    # the same tree seen as a python/-only source (as from PyPI), at a ref without the file
    py_only = replace(up, python_only=True)
    (st,) = check_ref(
        load_queue(root), py_only, "v1.0", up.resolve("v1.0"), pin, root / "build" / "tmp"
    ).patches
    assert st.status == "skipped" and "python/ only" in st.detail


def test_the_pin_check_reads_what_this_machine_saw_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pinned_commit`` records what it resolved into the observations it read, keeping the
    others, without reading build/upstream/observed.json a second time (5.2 mend 10)."""
    import json

    from sglforge.queue.upstream import open_upstream, pinned_commit

    root = make_project(tmp_path, make_upstream(tmp_path))
    observed = root / "build" / "upstream" / "observed.json"
    observed.parent.mkdir(parents=True, exist_ok=True)
    other = {"source": "elsewhere", "ref": "v0.9", "commit": "0" * 40}
    observed.write_text(json.dumps({"elsewhere v0.9": other}))
    q = load_queue(root)
    up = open_upstream(root, q.pin)
    reads: list[Path] = []
    real = Path.read_text

    def counting(self: Path, *a: object, **k: object) -> str:
        if self.name == observed.name:
            reads.append(self)
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counting)
    pinned_commit(root, q.pin, up)
    assert len(reads) == 1
    monkeypatch.undo()
    doc = json.loads(observed.read_text())
    assert doc["elsewhere v0.9"] == other and doc[f"{up.key} v1.0"]["ref"] == "v1.0"
