"""The scan's copy of upstream's tree (``git.export_files``): the folder's files at the
commit, whatever the repository's own state, and nothing of the repository changed (a local
upstream is the user's own clone: its HEAD, index and work tree stay as they were)."""

from __future__ import annotations

from pathlib import Path

from sglforge import git
from synthetic import git as run_git


def test_the_copy_is_the_commits_folder_and_the_repository_is_untouched(tmp_path: Path) -> None:
    repo = tmp_path / "clone"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    (repo / "python" / "pkg").mkdir(parents=True)
    (repo / "python" / "pkg" / "a.py").write_text("a = 1\n")
    (repo / "python" / "b.cuh").write_text("#include <cuda.h>\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "x.md").write_text("x\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "one")
    first = run_git(repo, "rev-parse", "HEAD")
    (repo / "python" / "pkg" / "a.py").write_text("a = 2\n")
    run_git(repo, "commit", "-qam", "two")
    # the user's clone: sparse, with an uncommitted edit
    run_git(repo, "config", "core.sparseCheckout", "true")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "sparse-checkout").write_text("/docs/\n")
    (repo / "docs" / "x.md").write_text("edited\n")
    status = run_git(repo, "status", "--porcelain")
    dest = tmp_path / "copy"
    dest.mkdir()
    git.export_files(repo, first, "python", dest, tmp_path / "index")
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == ["python/b.cuh", "python/pkg/a.py"]
    assert (dest / "python" / "pkg" / "a.py").read_text() == "a = 1\n"
    assert not (tmp_path / "index").exists()
    assert run_git(repo, "status", "--porcelain") == status
    assert run_git(repo, "rev-parse", "HEAD") != first
    assert (repo / "python" / "pkg" / "a.py").read_text() == "a = 2\n"
