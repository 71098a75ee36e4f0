"""Issue 31 (E3): sglforge writes only inside the project. ``init`` refuses any folder on its
write path that is a symbolic link (``patches/``, ``.github/``, ``.github/workflows``,
``smoke/``, ...), and a project copied with its ``build/`` never acts on the original's
worktree (its git records name the original); a moved project's worktree is repaired.
Real git repositories in temporary folders."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from reliability_helpers import cli

from sglforge.init import init_project
from synthetic import edit, git, make_project, make_upstream


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize(
    "linked",
    ["patches", ".github", ".github/workflows", "smoke", "tests/standin", "images"],
)
def test_init_refuses_a_symlinked_folder_on_its_write_path(tmp_path: Path, linked: str) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "mine.txt").write_text("keep\n")
    dest = tmp_path / "p"
    (dest / linked).parent.mkdir(parents=True, exist_ok=True)
    (dest / linked).symlink_to(victim, target_is_directory=True)
    before = _tree(dest)
    code, out, err = cli(dest, "init", "--no-git", str(dest))
    assert code == 2, out + err
    assert f"{linked}/ is a symbolic link" in err and "nothing was written" in err
    assert _tree(victim) == ["mine.txt"]  # nothing written outside
    assert _tree(dest) == before  # nor inside


def test_init_follows_no_link_on_the_way_even_under_a_real_folder(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    dest = tmp_path / "p"
    (dest / "tests").mkdir(parents=True)
    (dest / "tests" / "standin").mkdir()
    (dest / "tests" / "standin" / "model").symlink_to(victim, target_is_directory=True)
    with pytest.raises(Exception, match="tests/standin/model/ is a symbolic link"):
        init_project(dest)
    assert list(victim.iterdir()) == []
    init_project(tmp_path / "fine")  # a project with no link is written as before


def _applied(tmp_path: Path) -> Path:
    upstream = make_upstream(tmp_path)
    project = make_project(tmp_path, upstream)
    code, out, err = cli(project, "patches", "apply")
    assert code == 0, err
    return project


def test_a_project_copied_with_its_build_never_commits_into_the_original(tmp_path: Path) -> None:
    original = _applied(tmp_path)
    wt = next(p for p in (original / "build" / "worktrees").iterdir() if not p.name.startswith("."))
    head = git(wt, "rev-parse", "HEAD")
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
    copy_wt = copy / "build" / "worktrees" / wt.name
    edit(copy_wt, "python/pkg/c.py", 4, "c edited in the copy")
    for args in (
        ("patches", "new", "from-the-copy"),
        ("patches", "export"),
        ("patches", "apply"),
        ("patches", "apply", "--force"),
    ):
        code, out, err = cli(copy, *args)
        assert code != 0, (args, out)
        assert "is a copy" in err and str(wt) in err and f"rm -rf {copy_wt}" in err, err
    assert git(wt, "rev-parse", "HEAD") == head  # the original's worktree is untouched
    assert git(wt, "status", "--porcelain") == ""
    # the hint works: the copy gets a worktree of its own, and the original keeps its own
    shutil.rmtree(copy_wt)
    code, out, err = cli(copy, "patches", "apply")
    assert code == 0, err
    edit(copy_wt, "python/pkg/c.py", 4, "c edited in the copy")
    code, out, err = cli(copy, "patches", "new", "from-the-copy")
    assert code == 0, err
    assert git(wt, "rev-parse", "HEAD") == head
    assert (copy / "patches" / "series").read_text() != (
        original / "patches" / "series"
    ).read_text()


def test_a_moved_project_gets_its_worktree_repaired(tmp_path: Path) -> None:
    original = _applied(tmp_path)
    moved = tmp_path / "moved"
    original.rename(moved)
    code, out, err = cli(moved, "patches", "apply")
    assert code == 0, err
    assert "git worktree repair" in err
    wt = next(p for p in (moved / "build" / "worktrees").iterdir() if not p.name.startswith("."))
    edit(wt, "python/pkg/c.py", 4, "c edited after the move")
    code, out, err = cli(moved, "patches", "new", "after-the-move")
    assert code == 0, err
    assert cli(moved, "patches", "apply")[2].count("repair") == 0  # once is enough
