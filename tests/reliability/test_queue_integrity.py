"""Issue 19, the queue side: what a patch may carry and what the queue's verdicts say.

One class per defect class; real git repositories in temporary folders (tests/synthetic.py)
and the real CLI through click's runner. No mocks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from reliability_helpers import cli

from synthetic import NO_CONFLICT, git, make_project, make_upstream


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    return make_upstream(tmp_path)


@pytest.fixture
def project(tmp_path: Path, upstream: Path) -> Path:
    return make_project(tmp_path, upstream, NO_CONFLICT)


def applied(project: Path, ref: str = "v1.0") -> Path:
    code, _out, err = cli(project, "patches", "apply", "--ref", ref)
    assert code == 0, err
    return project / "build" / "worktrees" / ref


def lint(project: Path) -> list[dict[str, object]]:
    code, out, err = cli(project, "patches", "lint", "--json")
    return list(json.loads(out)["findings"])


# --- symlinks out of the tree are lint findings ------------------------------------------


class TestSymlinkPatches:
    @pytest.mark.parametrize(
        ("link", "target", "bad"),
        [
            ("python/pkg/link_etc", "../../../../../../etc/passwd", True),
            ("python/pkg/link_abs", "/etc", True),
            ("link_top", "..", True),
            ("python/pkg/deep/link_up", "../../../../outside", True),
            ("python/pkg/deep/link_ok", "../../../outside", False),
            ("python/pkg/link_in", "a.py", False),
            ("python/pkg/link_round", "../pkg/../../python/pkg/b.py", False),
        ],
    )
    def test_a_new_symlink_leaving_the_tree_is_a_finding(
        self, project: Path, link: str, target: str, bad: bool
    ) -> None:
        wt = applied(project)
        (wt / link).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, wt / link)
        code, out, err = cli(project, "patches", "new", "add-symlink")
        assert code == 0, err
        found = [f for f in lint(project) if f["code"] == "unsafe-symlink"]
        if bad:
            assert len(found) == 1, found
            assert link in str(found[0]["message"]) and target in str(found[0]["message"])
        else:
            assert found == []

    def test_a_file_turned_into_an_escaping_symlink_is_a_finding(self, project: Path) -> None:
        wt = applied(project)
        (wt / "python/pkg/g.py").unlink()
        os.symlink("/root/.ssh/id_rsa", wt / "python/pkg/g.py")
        code, _out, err = cli(project, "patches", "new", "g-to-link")
        assert code == 0, err
        found = [f for f in lint(project) if f["code"] == "unsafe-symlink"]
        assert len(found) == 1 and "python/pkg/g.py" in str(found[0]["message"]), lint(project)
        code, _out, _err = cli(project, "patches", "lint")
        assert code != 0  # an error, not a warning

    def test_a_retargeted_symlink_is_checked_too(self, project: Path) -> None:
        wt = applied(project)
        os.symlink("a.py", wt / "python/pkg/ln")
        assert cli(project, "patches", "new", "ln")[0] == 0
        (wt / "python/pkg/ln").unlink()
        os.symlink("../../../../x", wt / "python/pkg/ln")
        assert cli(project, "patches", "new", "ln-moved")[0] == 0
        found = [f for f in lint(project) if f["code"] == "unsafe-symlink"]
        assert len(found) == 1 and "ln-moved" in str(found[0]["file"]), found
        git(wt, "status")  # the worktree is still a sane git checkout


# --- renames: check and apply give git's own verdict ---------------------------------------


def statuses(project: Path, ref: str) -> dict[str, str]:
    code, out, err = cli(project, "patches", "check", "--ref", ref, "--json")
    assert code in (0, 1), (code, out, err)
    refs = json.loads(out)["refs"]
    return {p["name"]: p["status"] for p in refs[0]["patches"]}


class TestRenamePatches:
    @pytest.mark.parametrize(
        ("old", "new", "edit"),
        [
            ("python/pkg/d.py", "python/pkg/d_renamed.py", False),  # no patch touches d.py
            ("python/pkg/d.py", "d_at_top.py", False),
            ("python/pkg/d.py", "python/pkg/sub/dir/d2.py", True),
            ("python/pkg/b.py", "python/pkg/b_moved.py", True),  # b.py is patched earlier
        ],
    )
    def test_a_rename_is_clean_at_its_pin_and_apply_goes_on(
        self, project: Path, old: str, new: str, edit: bool
    ) -> None:
        wt = applied(project)
        (wt / new).parent.mkdir(parents=True, exist_ok=True)
        git(wt, "mv", old, new)
        if edit:
            with (wt / new).open("a") as f:
                f.write("# edited after the move\n")
        code, out, err = cli(project, "patches", "new", "rename-it")
        assert code == 0, err
        at_pin = statuses(project, "v1.0")
        assert all(s in ("clean", "offset") for s in at_pin.values()), at_pin
        # v1.1 moves other files around; the rename still applies and so does the rest.
        code, _out, err = cli(project, "patches", "apply", "--ref", "v1.1")
        assert code == 0, err
        wt11 = project / "build" / "worktrees" / "v1.1"
        assert (wt11 / new).is_file() and not (wt11 / old).exists()
        record = json.loads((project / "build" / "worktrees" / ".v1.1.sglforge.json").read_text())
        assert record["complete"] is True
        assert statuses(project, "v1.1")[next(reversed(at_pin))] != "conflict"


# --- `patches new` never writes outside the series, never drops what the user staged ----------


def patch_files(project: Path) -> set[str]:
    return {p.name for p in (project / "patches").glob("*.patch")}


class TestNewPatchRefusals:
    @pytest.mark.parametrize("dropped", [-1, 0, 2])  # the last, the first, a middle patch
    def test_commits_of_a_patch_dropped_from_the_series_are_refused(
        self, project: Path, dropped: int
    ) -> None:
        wt = applied(project)
        series = project / "patches" / "series"
        lines = [x for x in series.read_text().splitlines() if x and not x.startswith("#")]
        gone = lines.pop(dropped)
        series.write_text("".join(f"{x}\n" for x in lines))
        (project / "patches" / gone).unlink()
        before = patch_files(project)
        with (wt / "python/pkg/a.py").open("a") as f:
            f.write("x = 1\n")
        code, out, err = cli(project, "patches", "new", "evil-name")
        assert code == 4, (out, err)
        assert gone in err and "not in patches/series" in err and "--force" in err
        assert patch_files(project) == before  # nothing written, inside the series or out
        assert series.read_text().count(".patch") == len(lines)
        assert "x = 1" in (wt / "python/pkg/a.py").read_text()  # the edit is still there

    def test_a_staged_gitlink_is_refused_and_kept(self, project: Path) -> None:
        wt = applied(project)
        sha = git(wt, "rev-parse", "HEAD").strip()
        git(wt, "update-index", "--add", "--cacheinfo", f"160000,{sha},python/pkg/subm")
        code, out, err = cli(project, "patches", "new", "with-gitlink")
        assert code == 4, (out, err)
        assert "python/pkg/subm" in err and "submodule" in err
        staged = git(wt, "diff", "--cached", "--raw")
        assert "160000" in staged and "python/pkg/subm" in staged  # not discarded
        assert git(wt, "rev-parse", "HEAD").strip() == sha  # nothing committed

    def test_a_nested_repository_is_refused(self, project: Path) -> None:
        wt = applied(project)
        nested = wt / "python/pkg/vendored"
        nested.mkdir()
        git(nested, "init", "-q")
        (nested / "v.py").write_text("v = 1\n")
        git(nested, "add", "v.py")
        git(nested, "commit", "-q", "-m", "v")
        before = patch_files(project)
        code, out, err = cli(project, "patches", "new", "vendored")
        assert code == 4, (out, err)
        assert "python/pkg/vendored" in err and "submodule" in err
        assert patch_files(project) == before

    def test_a_staged_gitlink_beside_real_edits_is_refused_too(self, project: Path) -> None:
        wt = applied(project)
        sha = git(wt, "rev-parse", "HEAD").strip()
        with (wt / "python/pkg/g.py").open("a") as f:
            f.write("g = 2\n")
        git(wt, "update-index", "--add", "--cacheinfo", f"160000,{sha},deps/lib")
        before = patch_files(project)
        code, out, err = cli(project, "patches", "new", "mixed")
        assert code == 4 and "deps/lib" in err, (out, err)
        assert patch_files(project) == before and git(wt, "rev-parse", "HEAD").strip() == sha


# --- apply runs one `git am` per run of patches, with the same verdicts and conflict state -------


class TestBatchedApply:
    def test_a_conflict_inside_a_run_leaves_a_one_patch_session(
        self, tmp_path: Path, upstream: Path
    ) -> None:
        from synthetic import PATCHES

        project = make_project(tmp_path / "full", upstream, PATCHES)
        code, _out, err = cli(project, "patches", "apply", "--ref", "v1.1")
        assert code == 4 and "0004-fix-d.patch" in err, err
        wt = project / "build" / "worktrees" / "v1.1"
        subjects = git(wt, "log", "--format=%s", "v1.1..HEAD").split("\n")
        assert [s.split(":")[0] for s in subjects if s] == ["fix-c", "fix-b", "fix-a"]
        rebase = Path(git(wt, "rev-parse", "--git-path", "rebase-apply").strip())
        rebase = rebase if rebase.is_absolute() else wt / rebase
        assert (rebase / "last").read_text().strip() == "1"  # only fix-d is in the session
        assert git(wt, "diff", "--name-only", "--diff-filter=U").strip() == "python/pkg/d.py"

    def test_verdicts_match_the_check_across_skips_and_runs(self, project: Path) -> None:
        code, out, err = cli(project, "patches", "apply", "--ref", "v1.1", "--json")
        assert code == 0, err
        applied = {p["name"]: p["status"] for p in json.loads(out)["patches"]}
        assert applied == statuses(project, "v1.1")
        wt = project / "build" / "worktrees" / "v1.1"
        made = git(wt, "rev-list", "--count", "v1.1..HEAD").strip()
        assert int(made) == sum(s in ("clean", "offset", "three-way") for s in applied.values())


# --- the streaming diff scan agrees with unidiff (it replaced it: a 40 MB patch in memory once) --


REPO = Path(__file__).resolve().parents[2]


class TestDiffScan:
    @pytest.mark.parametrize(
        "path", sorted((REPO / "patches").glob("*.patch")), ids=lambda p: p.name
    )
    def test_counts_match_unidiff_on_the_real_queue(self, path: Path) -> None:
        from unidiff import PatchSet

        from sglforge.queue.series import parse_patch, scan_diff

        patch = parse_patch(path)
        scan = scan_diff(patch.diff_lines())
        parsed = PatchSet(patch.diff)
        assert scan.error == ""
        assert (scan.added, scan.removed) == (
            sum(f.added for f in parsed),
            sum(f.removed for f in parsed),
        )
        assert (patch.added, patch.removed) == (scan.added, scan.removed)
        assert scan.sections == len(parsed)
        assert patch.header + patch.diff == patch.body  # one text, the diff its tail

    @pytest.mark.parametrize(
        ("diff", "error"),
        [
            ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,3 @@\n a\n+b\n", True),
            ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n-- \n2.4\n", False),
            ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\\ No newline\n", False),
            ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n@@ -5 +5 @@\n", True),
        ],
    )
    def test_malformed_hunks_are_found(self, diff: str, error: bool) -> None:
        from sglforge.queue.series import iter_lines, scan_diff

        assert bool(scan_diff(iter_lines(diff)).error) == error
