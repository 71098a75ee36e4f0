"""The queue as quilt and StGit users work it: push, pop, goto, the top patch in `patches
list`, refresh of the top patch, show, header, fold; export never dropping an edit (N9); a
patch's own context width kept (-U1); `patches apply` reading the queue under the lock (N14).
Real git repositories in temporary folders (tests/synthetic.py)."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main
from sglforge.patches.apply import apply_queue, read_record
from sglforge.patches.edit import rename_patch
from sglforge.patches.export import context_width
from sglforge.patches.stack import read_stack
from sglforge.project import Project
from sglforge.queue.series import load_queue, parse_patch
from synthetic import commit, edit, git, make_project, make_upstream, snapshot, write

THREE = [
    ("fix-a", "python/pkg/a.py", 5, "a line 5 FIXED", ""),
    ("fix-b", "python/pkg/b.py", 20, "b line 20 FIXED", ""),
    ("fix-c", "python/pkg/c.py", 10, "c line 10 FIXED", ""),
]
A, B, C = "0001-fix-a.patch", "0002-fix-b.patch", "0003-fix-c.patch"


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["--root", str(root), *args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    return make_upstream(tmp_path)


@pytest.fixture
def project(tmp_path: Path, upstream: Path) -> Path:
    return make_project(tmp_path, upstream, THREE)


def wt(root: Path) -> Path:
    return root / "build" / "worktrees" / "v1.0"


def stack(root: Path) -> dict:
    rc, out, _ = cli(root, "patches", "list", "--json")
    assert rc == 0
    data = json.loads(out)
    return {"top": data["top"], "applied": data["applied"]}


def fixed(root: Path) -> list[str]:
    """Which of a.py, b.py, c.py hold their patch's line in the worktree."""
    return [
        f
        for f, needle in (
            ("a", "a line 5 FIXED"),
            ("b", "b line 20 FIXED"),
            ("c", "c line 10 FIXED"),
        )
        if needle in (wt(root) / f"python/pkg/{f}.py").read_text()
    ]


def test_push_pop_goto_move_the_top_and_list_shows_it(project: Path) -> None:
    before = snapshot(project)
    assert stack(project) == {"top": None, "applied": []}

    rc, out, err = cli(project, "patches", "goto", "2")  # no worktree yet: made, then 1..2
    assert rc == 0, err
    assert f"now at {B}" in out
    assert fixed(project) == ["a", "b"]
    assert stack(project) == {"top": B, "applied": [A, B]}
    rc, out, _ = cli(project, "patches", "list")
    marks = {ln.split()[1]: ln.split()[0] for ln in out.splitlines() if ln[:1] in "=+"}
    assert marks == {"1": "+", "2": "="}

    assert cli(project, "patches", "push")[0] == 0
    assert fixed(project) == ["a", "b", "c"]
    rc, _, err = cli(project, "patches", "push")  # quilt: nothing more to apply
    assert rc == 1 and "nothing to move" in err

    rc, out, _ = cli(project, "patches", "pop")
    assert rc == 0 and f"removed {C}" in out
    assert fixed(project) == ["a", "b"]
    rc, _, err = cli(project, "patches", "pop", "0002")
    assert rc == 1 and "nothing to move" in err  # 0002 is the top already
    assert cli(project, "patches", "pop", "0001")[0] == 0  # a name: 0001 stays on top
    assert stack(project) == {"top": A, "applied": [A]}

    assert cli(project, "patches", "pop", "--all")[0] == 0
    assert fixed(project) == [] and stack(project)["top"] is None
    rc, _, err = cli(project, "patches", "pop")
    assert rc == 1 and "no patch is applied" in err

    assert cli(project, "patches", "push", "2")[0] == 0  # a count, as in quilt
    assert stack(project) == {"top": B, "applied": [A, B]}
    rc, _, err = cli(project, "patches", "push", "fix-a")
    assert rc != 0 and "applied already" in err
    assert cli(project, "patches", "goto", "fix-a")[0] == 0  # backwards too
    assert fixed(project) == ["a"]

    # `patches apply` is push --all; a complete stack is reused again.
    rc, out, _ = cli(project, "patches", "apply")
    assert rc == 0 and out.startswith("applied")
    assert fixed(project) == ["a", "b", "c"]
    assert cli(project, "patches", "apply")[1].startswith("reused")
    assert snapshot(project) == before  # moving the top never writes patches/


def test_moves_refuse_to_lose_work(project: Path) -> None:
    assert cli(project, "patches", "goto", "2")[0] == 0
    edit(wt(project), "python/pkg/b.py", 3, "an edit not in any patch")
    rc, _, err = cli(project, "patches", "pop")
    assert rc != 0 and "python/pkg/b.py" in err and "patches refresh" in err
    rc, _, err = cli(project, "patches", "push")
    assert rc != 0 and "python/pkg/b.py" in err
    commit(wt(project), "a commit of the user's")
    rc, _, err = cli(project, "patches", "pop")
    assert rc != 0 and "patches export" in err


def test_refresh_folds_staged_unstaged_new_and_deleted_into_the_top(project: Path) -> None:
    assert cli(project, "patches", "goto", "2")[0] == 0
    before = snapshot(project)
    tree = wt(project)
    edit(tree, "python/pkg/b.py", 25, "b line 25 reviewed")  # unstaged
    edit(tree, "python/pkg/d.py", 2, "d line 2 staged")
    git(tree, "add", "python/pkg/d.py")  # staged
    write(tree, "python/pkg/new.py", "NEW = 1\n")  # untracked
    (tree / "python/pkg/g.py").unlink()  # deleted
    write(tree, "python/pkg/__pycache__/b.cpython-312.pyc", "bytecode")  # never an edit
    write(tree, ".pytest_cache/v/cache/lastfailed", "{}")
    rc, out, err = cli(project, "patches", "refresh")
    assert rc == 0, err
    assert f"refreshed {B}" in out
    after = snapshot(project)
    assert after[f"patches/{A}"] == before[f"patches/{A}"]
    assert after[f"patches/{C}"] == before[f"patches/{C}"]
    patch = parse_patch(project / "patches" / B)
    assert set(patch.files) == {
        "python/pkg/b.py",
        "python/pkg/d.py",
        "python/pkg/new.py",
        "python/pkg/g.py",
    }
    assert "Why: tests." in patch.description and patch.upstream_status == "Pending"
    assert git(tree, "status", "--porcelain", "--", "python/pkg/b.py", "python/pkg/new.py") == ""
    # The stack goes on from the refreshed patch (the caches left behind do not stop it).
    assert cli(project, "patches", "push")[0] == 0
    assert cli(project, "patches", "check")[0] == 0
    rc, _, err = cli(project, "patches", "refresh")
    assert rc == 1 and "no edits" in err
    assert cli(project, "patches", "pop", "--all")[0] == 0
    write(tree, "python/pkg/new2.py", "x\n")
    rc, _, err = cli(project, "patches", "refresh")
    assert rc != 0 and "no patch is applied" in err and "patches new" in err


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda t: edit(t, "python/pkg/a.py", 7, "modified, not committed"), "python/pkg/a.py"),
        (lambda t: write(t, "python/pkg/added.py", "new\n"), "python/pkg/added.py"),
        (lambda t: (t / "python/pkg/e.py").unlink(), "python/pkg/e.py"),
        (
            lambda t: (
                edit(t, "python/pkg/c.py", 2, "staged only"),
                git(t, "add", "python/pkg/c.py"),
            ),
            "python/pkg/c.py",
        ),
    ],
    ids=["modified", "added", "deleted", "staged"],
)
def test_export_never_drops_an_uncommitted_edit(project: Path, change, named: str) -> None:
    """N9: export used to say "0 rewritten, 3 unchanged" and leave the edit out."""
    assert cli(project, "patches", "apply")[0] == 0
    before = snapshot(project)
    change(wt(project))
    rc, _, err = cli(project, "patches", "export")
    assert rc != 0
    assert named in err and "nothing was written" in err
    assert "patches refresh" in err and C in err and "patches new" in err
    assert snapshot(project) == before
    # The way out it names works: refresh puts the edit into the top patch.
    assert cli(project, "patches", "refresh")[0] == 0
    assert named in parse_patch(project / "patches" / C).files
    assert cli(project, "patches", "export")[0] == 0


def _u1_project(tmp_path: Path, upstream: Path) -> Path:
    """A project whose one patch was written with -U1 on purpose."""
    root = make_project(tmp_path, upstream, [THREE[1]])
    scratch = tmp_path / "scratch"
    git(scratch, "reset", "-q", "--hard", "v1.0")
    edit(scratch, "python/pkg/b.py", 20, "b line 20 FIXED")
    edit(scratch, "python/pkg/b.py", 26, "b line 26 FIXED")
    why = "Why: tests, -U1 to apply across releases."
    commit(scratch, f"fix-b: patch b.py\n\n{why}\n\nUpstream-Status: Pending")
    text = git(scratch, "format-patch", "-1", "--stdout", "--zero-commit", "-U1", "HEAD") + "\n"
    (root / "patches" / B.replace("0002", "0001")).write_text(text)
    return root


def test_a_hand_chosen_context_width_survives_export_and_rebase(
    tmp_path: Path, upstream: Path
) -> None:
    root = _u1_project(tmp_path, upstream)
    name = "0001-fix-b.patch"
    assert context_width((root / "patches" / name).read_text()) == 1
    old = (root / "patches" / name).read_text()
    assert cli(root, "patches", "apply")[0] == 0
    edit(wt(root), "python/pkg/b.py", 20, "b line 20 FIXED after review")
    assert cli(root, "patches", "refresh")[0] == 0
    text = (root / "patches" / name).read_text()
    assert "b line 20 FIXED after review" in text
    assert context_width(text) == 1 and "-U1 to apply across releases" in text
    # Nothing else moves: the blob ids keep their length, the signature stays.
    ids = re.compile(r"^index (\w+)\.\.", re.M)
    assert [len(x) for x in ids.findall(text)] == [len(x) for x in ids.findall(old)]
    assert text.split("\n-- \n")[1] == old.split("\n-- \n")[1]
    # Rebasing onto v1.1 (b.py has 3 lines more at the top: the patch is rewritten).
    rc, out, err = cli(root, "patches", "refresh", "--ref", "v1.1")
    assert rc == 0, err
    assert "refreshed" in out
    assert context_width((root / "patches" / name).read_text()) == 1


@pytest.mark.parametrize(
    "width, lines_changed",
    [(0, [10]), (1, [10]), (3, [10]), (3, [2]), (2, [10, 20]), (5, [28])],
    ids=["U0", "U1", "U3", "U3-at-top", "U2-two-hunks", "U5-near-end"],
)
def test_context_width_read_from_the_hunks(
    tmp_path: Path, upstream: Path, width: int, lines_changed: list[int]
) -> None:
    repo = tmp_path / "w"
    git(tmp_path, "clone", "-q", str(upstream), str(repo))
    git(repo, "checkout", "-q", "v1.0")
    for n in lines_changed:
        edit(repo, "python/pkg/a.py", n, f"a line {n} changed")
    commit(repo, "change")
    text = git(repo, "format-patch", "-1", "--stdout", f"-U{width}", "HEAD") + "\n"
    assert context_width(text) == width


def test_show_and_header_edit_trailers_checked_as_lint_does(project: Path) -> None:
    rc, out, _ = cli(project, "patches", "show", "2")
    assert rc == 0 and f"#2 patches/{B} (unapplied)" in out and "+b line 20 FIXED" in out
    before = (project / "patches" / B).read_text()
    url = "https://github.com/sgl-project/sglang/pull/7"
    rc, out, err = cli(
        project,
        "patches",
        "header",
        "fix-b",
        "--set",
        f"Forwarded={url}",
        "--set",
        "bug=https://github.com/sgl-project/sglang/issues/8",
        "--set",
        f"Upstream-Status=Submitted [{url}]",
    )
    assert rc == 0, err
    assert "Upstream-Status: Pending -> Submitted" in out
    p = parse_patch(project / "patches" / B)
    assert p.trailer("Forwarded") == url and p.upstream_status == f"Submitted [{url}]"
    assert p.trailer("Bug") == "https://github.com/sgl-project/sglang/issues/8"
    after = (project / "patches" / B).read_text()
    assert after.split("\ndiff --git", 1)[1] == before.split("\ndiff --git", 1)[1]
    rc, out, _ = cli(project, "patches", "lint", "--json")
    found = [f for f in json.loads(out)["findings"] if f["file"].endswith(B)]
    assert not [f for f in found if f["rule"] == "pending-not-forwarded"]
    rc, out, _ = cli(project, "patches", "show", "2", "--json")
    assert json.loads(out)["trailers"]["Forwarded"] == url
    assert cli(project, "patches", "header", "2", "--unset", "Bug")[0] == 0
    assert parse_patch(project / "patches" / B).trailer("Bug") is None
    assert cli(project, "patches", "header", "2", "--set", f"Depends-On={A}")[0] == 0
    assert parse_patch(project / "patches" / B).depends_on == (A,)
    good = (project / "patches" / B).read_bytes()
    for bad, says in [
        ("Forwarded=maybe", "URL, `no` or `not-needed`"),
        ("Bug=not a url", "a URL"),
        ("Upstream-Status=Bogus", "not one of"),
        ("Upstream-Status=Backport", "needs a [detail]"),
        ("Applies-To=>>1.0", "PEP 440"),
        ("Upstream-Fixed-In=soon", "a version"),
        ("Colour=blue", "KEY one of"),
        ("Forwarded", "KEY=VALUE"),
        (f"Depends-On={C}", "not a patch before"),
    ]:
        rc, _, err = cli(project, "patches", "header", "2", "--set", bad)
        assert rc == 2 and says in err, (bad, err)
    assert (project / "patches" / B).read_bytes() == good


def test_fold_merges_two_patches_and_keeps_the_tree(project: Path) -> None:
    assert cli(project, "patches", "apply")[0] == 0
    tree_before = git(wt(project), "rev-parse", "HEAD^{tree}")
    rc, out, err = cli(project, "patches", "fold", "0003", "0001")
    assert rc == 0, err
    assert [e.name for e in load_queue(project).entries] == [A, B]
    p = parse_patch(project / "patches" / A)
    assert set(p.files) == {"python/pkg/a.py", "python/pkg/c.py"}
    assert f"Folded-In: {C}" in p.text and p.upstream_status == "Pending"
    assert "Retired: folded into" in (project / "patches" / "retired" / C).read_text()
    assert not (project / "patches" / C).exists()
    assert cli(project, "patches", "lint")[0] == 0
    assert cli(project, "patches", "apply")[0] == 0  # the worktree is made again
    assert git(wt(project), "rev-parse", "HEAD^{tree}") == tree_before


def test_fold_refused_when_the_series_would_change(tmp_path: Path, upstream: Path) -> None:
    """0002's context holds 0001's line: 0001 cannot move below it into 0003."""
    root = make_project(
        tmp_path,
        upstream,
        [
            ("fix-d", "python/pkg/d.py", 10, "d line 10 FIXED", ""),
            ("fix-d-more", "python/pkg/d.py", 11, "d line 11 FIXED too", ""),
            ("fix-e", "python/pkg/e.py", 10, "e line 10 FIXED", ""),
        ],
    )
    before = snapshot(root)
    rc, _, err = cli(root, "patches", "fold", "1", "3")
    assert rc != 0 and "nothing was changed" in err and "reorder" in err
    assert snapshot(root) == before
    rc, _, err = cli(root, "patches", "fold", "2", "2")
    assert rc != 0 and "into itself" in err


def test_apply_reads_the_queue_under_the_lock(project: Path) -> None:
    """N14: a rename started while `patches apply` runs (from a git hook, a real second
    sglforge process) waits for the lock instead of being undone by the apply."""
    up = Project(project).upstream
    hooks = Path(git(up.cache, "rev-parse", "--path-format=absolute", "--git-common-dir")) / "hooks"
    hooks.mkdir(exist_ok=True)
    said = project.parent / "rename.out"
    hook = hooks / "post-applypatch"
    hook.write_text(
        "#!/bin/sh\n"
        "env -u GIT_DIR -u GIT_WORK_TREE -u GIT_INDEX_FILE -u GIT_PREFIX "
        f"SGLFORGE_LOCK_WAIT=0 {sys.executable} -m sglforge --root {project} "
        f"patches rename 1 renamed >> {said} 2>&1; echo rc=$? >> {said}\n"
    )
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    try:
        rc, _, err = cli(project, "patches", "apply")
    finally:
        hook.unlink()
    assert rc == 0, err
    out = said.read_text()
    assert "rc=0" not in out and "rc=" in out, out  # the rename was refused: apply held it
    names = [e.name for e in load_queue(project).entries]
    assert names == [A, B, C]
    record = read_record(project, "v1.0")
    assert record is not None and [p.name for p in record.patches] == names
    # A caller that read the queue before the lock (a build) is refused, not fed the old one.
    seen = Project(project)
    assert seen.queue.entries[0].name == A
    rename_patch(Project(project), "1", "renamed")
    with pytest.raises(Exception, match="changed while this command started"):
        apply_queue(seen)
    assert os.path.exists(project / "patches" / "0001-renamed.patch")


def test_new_while_popped_goes_just_above_the_top(project: Path) -> None:
    """quilt's `new` puts the patch above the top; the record keeps series order."""
    assert cli(project, "patches", "goto", "1")[0] == 0
    edit(wt(project), "python/pkg/e.py", 3, "e line 3 NEW")
    rc, out, err = cli(project, "patches", "new", "fix-e", "-m", "fix e")
    assert rc == 0, err
    names = [e.name for e in load_queue(project).entries]
    assert names == [A, "0004-fix-e.patch", B, C]
    assert stack(project) == {"top": "0004-fix-e.patch", "applied": [A, "0004-fix-e.patch"]}
    assert cli(project, "patches", "push", "--all")[0] == 0
    assert stack(project)["applied"] == names


def test_a_stopped_patch_is_resolved_by_hand_then_refreshed(tmp_path: Path, upstream: Path) -> None:
    """At v1.1 fix-d conflicts; with its blob ids unknown git am cannot even start a 3-way
    session, so the user edits by hand and `patches refresh` makes the edits that patch."""
    root = make_project(
        tmp_path, upstream, [THREE[0], ("fix-d", "python/pkg/d.py", 10, "d line 10 FIXED", "")]
    )
    name = "0002-fix-d.patch"
    path = root / "patches" / name
    path.write_text(
        re.sub(r"^index \w+\.\.\w+", "index 1111111..2222222", path.read_text(), flags=re.M)
    )
    rc, _, err = cli(root, "patches", "push", "--all", "--ref", "v1.1")
    assert rc == 4 and name in err
    tree = root / "build" / "worktrees" / "v1.1"
    states = {e.name: e.state for e in read_stack(load_queue(root), "v1.1").entries}
    assert states == {"0001-fix-a.patch": "applied", name: "conflict"}
    edit(tree, "python/pkg/d.py", 10, "d line 10 FIXED")
    rc, _, err = cli(root, "patches", "export", "--ref", "v1.1")
    assert rc != 0 and "python/pkg/d.py" in err and name in err and "--at v1.1" in err
    rc, out, err = cli(root, "patches", "refresh", "--at", "v1.1")
    assert rc == 0, err
    assert f"refreshed {name}" in out
    text = path.read_text()
    assert "-d line 10 changed upstream differently" in text and "Why: tests." in text
    assert cli(root, "patches", "check", "--ref", "v1.1")[0] == 0


def test_new_with_nothing_applied_goes_first(project: Path) -> None:
    assert cli(project, "patches", "goto", "1")[0] == 0
    assert cli(project, "patches", "pop")[0] == 0
    edit(wt(project), "python/pkg/e.py", 3, "e line 3 NEW")
    assert cli(project, "patches", "new", "fix-e")[0] == 0
    names = [e.name for e in load_queue(project).entries]
    assert names == ["0004-fix-e.patch", A, B, C]
    assert stack(project) == {"top": names[0], "applied": names[:1]}
    assert cli(project, "patches", "push", "--all")[0] == 0


def test_new_after_a_skipped_last_patch_keeps_the_stack(tmp_path: Path, upstream: Path) -> None:
    """At v1.1 fix-g (Applies-To: <1.1) is skipped: a new patch goes after it, in the series
    and in the worktree record alike, and pop takes it off again."""
    root = make_project(
        tmp_path,
        upstream,
        [THREE[0], ("fix-g", "python/pkg/g.py", 10, "g line 10 FIXED", "Applies-To: <1.1\n")],
    )
    rc, out, err = cli(root, "patches", "goto", "2", "--ref", "v1.1")
    assert rc == 0, err
    assert "0002-fix-g.patch: skipped at v1.1" in out
    tree = root / "build" / "worktrees" / "v1.1"
    edit(tree, "python/pkg/e.py", 3, "e line 3 NEW")
    assert cli(root, "patches", "new", "fix-e", "--ref", "v1.1")[0] == 0
    names = [e.name for e in load_queue(root).entries]
    assert names == [A, "0002-fix-g.patch", "0003-fix-e.patch"]
    s = read_stack(load_queue(root), "v1.1")
    assert [e.state for e in s.entries] == ["applied", "skipped", "applied"]
    rc, out, err = cli(root, "patches", "pop", "--ref", "v1.1")
    assert rc == 0, err
    assert "removed 0003-fix-e.patch" in out and f"now at {A}" in out


def test_the_real_queue_patches_read_as_written_with_one_line_of_context() -> None:
    """0002 was cut with -U1 to apply unchanged from 0.5.12 to 0.5.15: export keeps that."""
    real = Path(__file__).resolve().parents[2] / "patches"
    widths = {p.name[:4]: context_width(p.read_text()) for p in sorted(real.glob("*.patch"))}
    assert widths["0002"] == 1


@pytest.mark.pypi
def test_fix_patch_2_after_review_on_the_real_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README's recipe on the real queue (sglang 0.5.14 from its PyPI wheel): goto 2, edit,
    refresh. 0002 changes where the edit is and nowhere else: -U1, header, blob-id length
    and signature are kept."""
    import shutil

    from sglang_release import REPO_ROOT, adopt_checkout_wheels

    root = tmp_path / "real"
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    adopt_checkout_wheels()
    monkeypatch.setenv("SGLFORGE_UPSTREAM", "pypi:sglang")
    p2 = next((root / "patches").glob("0002-*.patch"))
    old = p2.read_text()
    rc, _, err = cli(root, "patches", "goto", "2")
    assert rc == 0, err
    f = root / "build/worktrees/v0.5.14/python/sglang/srt/configs/model_config.py"
    code = f.read_text()
    assert code.count("\ndef get_mimo_v2_fused_qkv_expected_tp_size(") == 1
    f.write_text(code.replace("\ndef get_mimo_v2", "\n# reviewed\ndef get_mimo_v2"))
    rc, _, err = cli(root, "patches", "refresh")
    assert rc == 0, err
    new = p2.read_text()
    assert "+# reviewed" in new and context_width(new) == 1
    kept = set(new.splitlines())
    gone = [ln for ln in old.splitlines() if ln not in kept]
    assert all(ln.startswith((" python/", " 3 files", "index ", "@@ ")) for ln in gone), gone
    assert cli(root, "patches", "lint")[0] == 0


def test_a_move_reads_the_worktree_record_once(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stack verb reads the worktree's record once, also the full way (patches/ touched
    since the record: the quick way declines, the full one decides): the quick check, the
    move and the stack it answers share it (review 5, 5.2 mend 10)."""
    from sglforge.patches.stack import move_stack, parse_move

    apply_queue(Project(project))
    reads: list[str] = []
    real = Path.read_text

    def counting(self: Path, *a: object, **k: object) -> str:
        if self.name.endswith(".sglforge.json"):
            reads.append(self.name)
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counting)
    for verb, top in (("pop", B), ("push", C)):
        os.utime(project / "patches" / "series")  # a new stamp: the full way
        reads.clear()
        moved = move_stack(Project(project), parse_move(verb, None))
        assert moved.top == top and len(reads) == 1, (verb, reads)
