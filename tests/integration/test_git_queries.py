"""The git package's named queries on real repositories built in temporary folders (no mocks).

The repositories are made with plain git (``synthetic.git``, a pinned identity); what is
checked is what sglforge relies on: exact bytes (a non-UTF-8 patch survives ``format_patch``
and ``am`` byte for byte), errors that name the ref or path, and a git that is killed when
its time is up.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglforge import git
from sglforge.errors import ConfigError, UpstreamError
from sglforge.git import _process
from sglforge.util import encode_exact
from synthetic import git as run_git

LATIN1 = b"caf\xe9 = 1\r\nna\xefve = 2\n"  # not UTF-8, with a CRLF line


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main: c1 (a.txt) <- c2 (b.bin, non-UTF-8) tagged v1.0 (annotated) <- c3 tagged v1.1."""
    r = tmp_path / "repo"
    r.mkdir()
    run_git(r, "init", "-q", "-b", "main")
    (r / "a.txt").write_text("one\ntwo\nthree\n")
    run_git(r, "add", "-A")
    run_git(r, "commit", "-qm", "first")
    (r / "b.bin").write_bytes(LATIN1)
    run_git(r, "add", "-A")
    run_git(r, "commit", "-qm", "latin-1 bytes")
    run_git(r, "tag", "-a", "v1.0", "-m", "release 1.0")
    (r / "a.txt").write_text("one\nTWO\nthree\n")
    run_git(r, "commit", "-qam", "shout two")
    run_git(r, "tag", "v1.1")
    return r


def sha(repo: Path, rev: str) -> str:
    return run_git(repo, "rev-parse", f"{rev}^{{commit}}")


# --- refs, tags, commits, objects ------------------------------------------------------------


def test_refs_and_tags(repo: Path) -> None:
    assert git.tags(repo) == ["v1.0", "v1.1"]
    assert git.resolve(repo, "v1.0") == sha(repo, "v1.0")  # an annotated tag, peeled
    assert git.resolve_many(repo, ["v1.0", "v1.1"]) == {
        "v1.0": sha(repo, "v1.0"),
        "v1.1": sha(repo, "v1.1"),
    }
    assert git.head(repo) == sha(repo, "HEAD") == git.commit_id(repo, "main")
    assert git.tags_containing(repo, sha(repo, "HEAD~1")) == ["v1.0", "v1.1"]
    assert git.is_ancestor(repo, "v1.0", "v1.1")
    assert not git.is_ancestor(repo, "v1.1", "v1.0")
    assert not git.is_ancestor(repo, "no-such-ref", "v1.1")
    assert git.merge_base(repo, "v1.0", "v1.1") == sha(repo, "v1.0")
    assert git.commits_between(repo, "v1.0", "v1.1") == [sha(repo, "v1.1")]
    assert git.subject(repo, "v1.0") == "latin-1 bytes"
    assert git.tree(repo, "v1.0") == run_git(repo, "rev-parse", "v1.0^{tree}")
    assert git.has_tree(repo, "v1.0") and not git.has_tree(repo, "v9")
    assert git.current_branch(repo) == "main" and git.has_head(repo)
    assert git.is_repository(repo) and git.in_work_tree(repo)
    assert git.branch_exists(repo, "main") and not git.branch_exists(repo, "nope")
    assert git.valid_branch_name(repo, "upgrade/v1.2") and not git.valid_branch_name(repo, "a..b")


def test_blobs_are_exact_bytes(repo: Path) -> None:
    assert git.blob(repo, "v1.0", "b.bin") == LATIN1
    assert git.blob_id(LATIN1) == run_git(repo, "rev-parse", "v1.0:b.bin")
    assert git.blob_id(LATIN1) in git.blob_ids(repo)
    assert git.blob(repo, "v1.0", "missing.txt") is None
    assert git.blob(repo, "no-such-commit", "b.bin") is None


def test_errors_name_the_ref_or_path(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(UpstreamError, match="'v9.9' not found"):
        git.resolve(repo, "v9.9")
    with pytest.raises(git.GitFailed, match=r"'v1.0\^\^\^\^' names no commit"):
        git.commit_id(repo, "v1.0^^^^")
    with pytest.raises(git.GitFailed, match="'nope' names no tree"):
        git.tree(repo, "nope")
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ConfigError, match=f"{plain}: not a git repository"):
        git.tags(plain)
    with pytest.raises(ConfigError, match=f"{tmp_path / 'gone'}: no such folder"):
        git.head(tmp_path / "gone")
    with pytest.raises(git.GitFailed, match=f"failed in {repo}: fatal: .*'no-such-base..HEAD'"):
        git.commits_between(repo, "no-such-base")


# --- diffs, patches, exact bytes --------------------------------------------------------------


def test_a_non_utf8_patch_round_trips_byte_for_byte(repo: Path, tmp_path: Path) -> None:
    text = git.format_patch(repo, "v1.0")
    assert b"caf\xe9 = 1\r\n" in encode_exact(text)  # the patch holds the raw bytes
    wt = tmp_path / "wt"
    git.add_worktree(repo, wt, sha(repo, "v1.0~1"), branch="replay")
    res = git.am(wt, text=text)
    assert res.status == 0, res.stderr
    assert (wt / "b.bin").read_bytes() == LATIN1
    assert git.tree(wt, "HEAD") == git.tree(repo, "v1.0")  # the very same tree
    # and applied in a private index: the same tree again, no file touched
    assert git.apply_to_tree(repo, "v1.0~1", text) == git.tree(repo, "v1.0")
    assert git.apply_to_tree(repo, "v1.0", text) is None  # already there: does not apply


def test_names_are_exact(repo: Path) -> None:
    raw = b"na\xefve name.txt"
    (repo / os.fsdecode(raw)).write_text("x\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "odd name")
    names = git.diff_names(repo, "v1.1", "HEAD")
    assert [encode_exact(n) for n in names] == [raw]
    assert git.name_status(repo, "v1.1", "HEAD") == [("A", names[0])]


def test_patch_ids_find_the_same_change(repo: Path) -> None:
    text = git.format_patch(repo, "v1.1")
    pid = git.patch_id(repo, text)
    assert pid and git.patch_ids(repo, "v1.0", "v1.1", ["a.txt"]) == [(pid, sha(repo, "v1.1"))]
    assert git.patch_ids(repo, "v1.0", "v1.1", ["b.bin"]) == []
    assert git.patch_id(repo, git.diff(repo, "v1.0", "v1.1", ["a.txt"])) == pid
    assert git.patch_id(repo, "no diff here\n") == ""


def test_renames_and_lines(repo: Path) -> None:
    run_git(repo, "mv", "a.txt", "moved.txt")
    run_git(repo, "commit", "-qm", "move")
    assert git.renames(repo, "v1.1", "HEAD") == {"a.txt": "moved.txt"}
    assert git.renames(repo, "v1.1", "HEAD", ["b.bin"]) == {}
    assert git.holds_any_line(repo, "v1.1", "a.txt", ["TWO"])
    assert not git.holds_any_line(repo, "HEAD", "a.txt", ["TWO"])
    assert git.find_line(repo, "HEAD", "TWO") == ["moved.txt:2"]


def test_private_index_leaves_the_worktree_alone(repo: Path, tmp_path: Path) -> None:
    text = git.format_patch(repo, "v1.1")
    index = git.Index(repo, tmp_path / "index")
    try:
        index.read_paths(sha(repo, "v1.0"), ["a.txt"])
        assert index.has_path("a.txt") and not index.has_path("b.bin")
        assert index.apply(text, check=True).status == 0
        assert index.apply(text).status == 0
        assert index.apply(text, reverse=True, check=True).status == 0  # now present
        assert "error: patch failed: a.txt" in index.apply(text).stderr
    finally:
        index.discard()
    assert not (tmp_path / "index").exists()
    assert run_git(repo, "status", "--porcelain") == ""


# --- worktrees and `git am` sessions --------------------------------------------------------


def test_worktree_lifecycle_and_a_stopped_am(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git.add_worktree(repo, wt, sha(repo, "v1.0"), branch="sglforge/v1.0")
    assert git.worktree_branches(repo)["refs/heads/sglforge/v1.0"] == wt
    assert git.common_dir(wt) == (repo / ".git").resolve()
    (wt / "a.txt").write_text("one\nthree and a half\nthree\n")
    assert git.uncommitted(wt) == ["a.txt"]
    assert git.commit_all(wt, "edit two", author=("Ann", "ann@example.com", "1700000000 +0000"))
    assert not git.commit_all(wt, "nothing")
    assert run_git(wt, "log", "-1", "--format=%an %ae") == "Ann ann@example.com"
    # v1.1's change conflicts with that edit: `git am` stops, the session is there to resolve
    res = git.am(wt, text=git.format_patch(repo, "v1.1"))
    assert res.status != 0
    assert git.am_in_progress(wt) and git.unmerged(wt) == ["a.txt"]
    git.am_abort(wt)
    assert not git.am_in_progress(wt) and not git.uncommitted(wt)
    git.reset_worktree(wt, "sglforge/v1.0", sha(repo, "v1.0"))
    assert git.head(wt) == sha(repo, "v1.0")
    git.remove_worktree(repo, wt)
    git.delete_branch(repo, "sglforge/v1.0")
    assert not wt.exists() and not git.branch_exists(repo, "sglforge/v1.0")
    assert "refs/heads/sglforge/v1.0" not in git.worktree_branches(repo)


def test_a_branch_of_the_users_own(repo: Path) -> None:
    start = git.head(repo)
    git.checkout(repo, new_branch="upgrade/v1.2")
    assert git.current_branch(repo) == "upgrade/v1.2" and git.head(repo) == start
    (repo / "patches").mkdir()
    (repo / "patches" / "series").write_text("0001-x.patch\n")
    (repo / "elsewhere.txt").write_text("not committed\n")
    assert git.uncommitted(repo, "patches") == ["patches/"]
    assert git.commit_all(repo, "Upgrade\n\nwhy", paths=["patches"], own_identity=True)
    # the user's identity (conftest pins it in the environment), not sglforge's fixed one
    who = f"{os.environ['GIT_AUTHOR_NAME']} {os.environ['GIT_COMMITTER_NAME']}"
    assert run_git(repo, "log", "-1", "--format=%an %cn") == who != "sglforge sglforge"
    assert git.uncommitted(repo) == ["elsewhere.txt"]
    assert git.subject(repo, "HEAD") == "Upgrade"
    git.checkout(repo, "main")
    assert git.current_branch(repo) == "main" and git.head(repo) == start


def test_a_bare_mirror_without_a_config_file(repo: Path, tmp_path: Path) -> None:
    # GitPython alone takes such a folder for a work tree's .git (its parent, the work tree)
    mirror = tmp_path / "mirrors" / "repo"
    run_git(tmp_path, "clone", "-q", "--bare", str(repo), str(mirror))
    (mirror / "config").unlink()
    assert git.blob(mirror, sha(repo, "v1.0"), "b.bin") == LATIN1
    assert git.tags(mirror) == ["v1.0", "v1.1"]
    assert git.commit_id(mirror, "v1.1") == sha(repo, "v1.1")
    assert git.is_ancestor(mirror, "v1.0", "v1.1")


def test_init_and_a_fresh_repository(tmp_path: Path) -> None:
    bare = tmp_path / "store.git"
    git.init(bare, bare=True, head="refs/heads/trunk")
    assert git.is_repository(bare) and not git.in_work_tree(bare)
    assert git.tags(bare) == [] and not git.has_head(bare)
    assert git.fsck(bare) == ""
    assert git.version()


# --- a git that does not finish is killed -------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie waiting to be reaped is dead


@pytest.fixture
def hanging(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A repository whose ``git hang`` alias starts a shell that records its pid and sleeps."""
    r = tmp_path / "r"
    r.mkdir()
    run_git(r, "init", "-q")
    pidfile = tmp_path / "pid"
    run_git(r, "config", "alias.hang", f"!echo $$ > {pidfile}; exec sleep 60")
    yield r, pidfile
    if pidfile.exists():
        pid = int(pidfile.read_text())
        if _alive(pid):
            os.kill(pid, 9)


def test_a_timeout_kills_git(hanging: tuple[Path, Path]) -> None:
    r, _pidfile = hanging
    started = time.monotonic()
    with pytest.raises(UpstreamError, match="git hang gave no result within 1 s"):
        _process._run(r, "hang", timeout=1)
    assert time.monotonic() - started < 10


def test_a_network_timeout_kills_the_whole_process_group(hanging: tuple[Path, Path]) -> None:
    r, pidfile = hanging
    started = time.monotonic()
    with pytest.raises(UpstreamError, match="gave no result within 1 s while fetching"):
        _process._run_with_progress(r, "hang", label="hang", timeout=1, waiting_for="fetching")
    assert time.monotonic() - started < 10
    # the helper git started (the shell running sleep) went with it
    deadline = time.monotonic() + 5
    while _alive(int(pidfile.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(int(pidfile.read_text()))


def test_an_interrupted_pack_leaves_nothing_git_reads(tmp_path: Path) -> None:
    store = tmp_path / "s.git"
    git.init(store, bare=True)
    with pytest.raises(KeyboardInterrupt), git.new_pack(store) as pack:
        pack.add(git.BLOB, b"half of a release\n")
        raise KeyboardInterrupt
    assert list((store / "objects" / "pack").iterdir()) == []
    with git.new_pack(store) as pack:
        blob = pack.add(git.BLOB, b"a whole one\n").hex()
    assert blob == git.blob_id(b"a whole one\n")
    assert (
        subprocess.run(
            ["git", "-C", str(store), "cat-file", "-p", blob], capture_output=True, check=True
        ).stdout
        == b"a whole one\n"
    )


def _children() -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(os.getpid())], capture_output=True, text=True
    )
    return [int(p) for p in out.stdout.split()]


def test_a_worktree_is_checked_out_in_parallel_keeping_the_callers_config(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """add_worktree and reset_worktree ask for git's parallel checkout after the config the
    environment gives: here the caller's own entry lowers the threshold so that a small tree
    is written by workers, which happens only when both entries are in effect."""
    trace = tmp_path / "trace.json"
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "checkout.thresholdForParallelism")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "1")
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    wt = tmp_path / "wt"
    git.add_worktree(repo, wt, git.head(repo), branch="w")
    assert "checkout--worker" in trace.read_text()
    trace.unlink()
    (wt / "stray.txt").write_text("gone after the reset\n")
    for name in ("a.txt", "b.bin"):  # two files to write again: git's workers need two
        (wt / name).write_text("edited\n")
    git.reset_worktree(wt, "w2", git.head(repo))
    assert "checkout--worker" in trace.read_text()
    assert not (wt / "stray.txt").exists() and git.current_branch(wt) == "w2"
    assert (wt / "b.bin").read_bytes() == LATIN1
