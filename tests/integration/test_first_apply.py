"""A first apply (a new worktree) commits the queue with ``git am`` before the files are
written (``git.am_then_checkout``), and makes exactly what checking out and then running
``git am`` makes: the same commits, byte for byte, for every kind of patch the check tells
apart (clean, offset, 3-way, upstreamed, skipped). Where ``git am`` refuses, the usual path
takes over with a full worktree; an interrupt leaves no half-made worktree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines import open_project
from sglforge import git as sgit
from sglforge.errors import PatchError
from sglforge.patches import apply as apply_mod
from sglforge.patches.apply import apply_queue
from synthetic import NO_CONFLICT, PATCHES, git, make_project, make_upstream

SRC = Path(apply_mod.__file__).resolve().parents[2]


def reference_head(cache: Path, where: Path, commit: str, patches: list[Path]) -> str:
    """The old way: every file checked out at ``commit``, then one ``git am --3way``."""
    sgit.add_worktree(cache, where, commit)
    res = sgit.am(where, patches)
    assert res.status == 0, res.stderr
    return sgit.head(where)


@pytest.mark.parametrize(
    ("queue", "ref"),
    [(PATCHES, "v1.0"), (NO_CONFLICT, "v1.1")],
    ids=["all-clean-at-v1.0", "offset-3way-upstreamed-skipped-at-v1.1"],
)
def test_the_first_apply_makes_what_checkout_then_am_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queue: list, ref: str
) -> None:
    monkeypatch.setenv("GIT_COMMITTER_DATE", "1700000000 +0000")  # the same commit bytes
    root = make_project(tmp_path, make_upstream(tmp_path), queue)
    taken_over = []
    usual = apply_mod._apply_patches
    monkeypatch.setattr(
        apply_mod, "_apply_patches", lambda *a, **k: taken_over.append(1) or usual(*a, **k)
    )
    project = open_project(root)
    got = apply_queue(project, ref=ref)
    assert not taken_over, "the first apply fell back to checkout-then-am"
    statuses = {p.status for p in got.patches}
    if ref == "v1.1":
        assert {"offset", "three-way", "upstreamed", "skipped"} <= statuses, statuses
    applied = [root / "patches" / p.name for p in got.patches if p.commit]
    want = reference_head(project.upstream.cache, tmp_path / "reference", got.commit, applied)
    assert got.head == want
    wt = got.worktree
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
    on_disk = sorted(
        str(p.relative_to(wt)) for p in wt.rglob("*") if p.is_file() and p.name != ".git"
    )
    assert on_disk == sorted(git(wt, "ls-files").splitlines())
    assert not sgit.am_in_progress(wt)


def test_a_refused_am_hands_over_to_the_usual_path_with_every_file(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), PATCHES[:2])
    project = open_project(root)
    hooks = Path(git(project.upstream.cache, "rev-parse", "--git-common-dir"))
    hooks = (hooks if hooks.is_absolute() else project.upstream.cache / hooks) / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = hooks / "applypatch-msg"
    hook.write_text("#!/bin/sh\necho 'refused by the test hook' >&2\nexit 1\n")
    hook.chmod(0o755)
    with pytest.raises(PatchError, match="does not apply"):
        apply_queue(project)
    wt = root / "build" / "worktrees" / "v1.0"
    assert not sgit.am_in_progress(wt)
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
    assert (wt / "python/pkg/a.py").is_file() and (wt / "python/pkg/version.py").is_file()
    hook.unlink()
    again = apply_queue(open_project(root))  # nothing to clean up by hand
    assert len([p for p in again.patches if p.commit]) == 2


def test_an_interrupt_during_the_first_apply_leaves_no_worktree(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), PATCHES[:2])
    project = open_project(root)
    cache = project.upstream.cache
    hooks = Path(git(cache, "rev-parse", "--git-common-dir"))
    hooks = (hooks if hooks.is_absolute() else cache / hooks) / "hooks"
    hooks.mkdir(exist_ok=True)
    flag = tmp_path / "in-am"
    hook = hooks / "pre-applypatch"
    hook.write_text(f"#!/bin/sh\ntouch {flag}\nsleep 30\n")
    hook.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglforge", "-q", "patches", "apply"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flag.exists(), proc.communicate(timeout=30)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    wt = root / "build" / "worktrees" / "v1.0"
    assert not wt.exists(), sorted(os.listdir(wt))
    assert str(wt) not in git(cache, "worktree", "list", "--porcelain")
    hook.unlink()
    done = apply_queue(open_project(root))  # the next apply starts clean
    assert not done.reused and len([p for p in done.patches if p.commit]) == 2
