"""The quilt stack as git's own (issue 44): push is one `git am` of the patches it adds onto
the current top, pop one `git reset`; nothing is fetched while the pinned commit is in the
local mirror, so the verbs work with the upstream gone; a bare number is the `#` of `patches
list` for every verb (counts are `--count N`); `list`'s marks come from the worktree's own
history. Real git repositories in temporary folders (tests/synthetic.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_build import make_build_project
from sglforge.cli import main
from sglforge.git import _process
from sglforge.queue import series
from synthetic import edit, git, make_project, make_upstream

FOUR = [
    ("fix-a", "python/pkg/a.py", 5, "a line 5 FIXED", ""),
    ("fix-b", "python/pkg/b.py", 20, "b line 20 FIXED", ""),
    ("fix-c", "python/pkg/c.py", 10, "c line 10 FIXED", ""),
    ("fix-d", "python/pkg/d.py", 10, "d line 10 FIXED", ""),
]
A, B, C, D = (f"000{i}-fix-{x}.patch" for i, x in enumerate("abcd", 1))


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["--root", str(root), *args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def gits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """Every git command sglforge starts, as its argument list (options before the verb too)."""
    seen: list[list[str]] = []
    real = _process._start

    def start(cwd: Path | str, args: list[str], *a: object, **k: object) -> object:
        seen.append([str(x) for x in args])
        return real(cwd, args, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(_process, "_start", start)
    yield seen


def verbs(seen: list[list[str]]) -> list[str]:
    return [next((x for x in args if not x.startswith("-") and "=" not in x), "?") for args in seen]


def listed(root: Path) -> dict[str, object]:
    rc, out, err = cli(root, "patches", "list", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    return {
        "top": doc["top"],
        "applied": doc["applied"],
        "stale": doc["stale"],
        "states": [p["state"] for p in doc["patches"]],
    }


def commits(root: Path) -> list[str]:
    wt = root / "build" / "worktrees" / "v1.0"
    return git(wt, "rev-list", "--reverse", "v1.0..HEAD").split()


@pytest.mark.parametrize(
    ("height", "to", "pushed"), [(0, "1", [A]), (1, "3", [B, C]), (3, "4", [D])]
)
def test_push_is_one_git_am_of_the_patches_it_adds(
    tmp_path: Path, gits: list[list[str]], height: int, to: str, pushed: list[str]
) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), FOUR)
    assert cli(root, "patches", "apply")[0] == 0
    assert cli(root, "patches", "goto", str(height))[0] == 0 if height else True
    if not height:
        assert cli(root, "patches", "pop", "--all")[0] == 0
    below = commits(root)
    gits.clear()
    rc, out, err = cli(root, "patches", "push", to)
    assert rc == 0, err
    ams = [a for a in gits if "am" in verbs([a])]
    assert len(ams) == 1 and [Path(x).name for x in ams[0] if x.endswith(".patch")] == pushed
    assert not {"worktree", "checkout", "fetch", "clone"} & set(verbs(gits)), verbs(gits)
    assert commits(root)[:height] == below  # nothing below the top was made again
    assert listed(root)["top"] == pushed[-1]


def test_pop_is_one_reset_and_reads_no_queue(
    tmp_path: Path, gits: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), FOUR)
    assert cli(root, "patches", "apply")[0] == 0
    loads: list[Path] = []
    real = series.load_queue
    monkeypatch.setattr(series, "load_queue", lambda r: loads.append(r) or real(r))
    for how, top in (
        (("pop",), C),
        (("pop", "1"), A),
        (("push", "-n", "2"), C),
        (("pop", "--all"), None),
    ):
        gits.clear()
        loads.clear()
        rc, _out, err = cli(root, "patches", *how)
        assert rc == 0, err
        assert loads == [], how  # patches/ as the record saw it: the queue is not parsed
        one = "am" if how[0] == "push" else "reset"
        assert verbs(gits).count(one) == 1, verbs(gits)
        assert listed(root)["top"] == top


def test_the_verbs_work_with_the_upstream_gone(tmp_path: Path, gits: list[list[str]]) -> None:
    """After the first fetch the upstream folder is removed: the pinned commit is in the
    mirror, so push, pop, goto and apply go on; what needs upstream says it is gone."""
    upstream = make_upstream(tmp_path)
    root = make_project(tmp_path, upstream, FOUR)
    assert cli(root, "patches", "apply")[0] == 0
    shutil.rmtree(upstream)
    gits.clear()
    for args, top in (
        (("pop",), C),
        (("push",), D),
        (("goto", "2"), B),
        (("goto", "4"), D),
        (("pop", "--all"), None),
        (("apply",), D),  # the whole queue again, from the local mirror
        (("push", "1"), None),  # refused: #1 is applied (exit 4), nothing fetched
    ):
        rc, _out, err = cli(root, "patches", *args)
        assert rc == (4 if args == ("push", "1") else 0), (args, err)
        if top:
            assert listed(root)["top"] == top
    assert "fetch" not in verbs(gits) and "clone" not in verbs(gits)
    rc, _out, err = cli(root, "patches", "check")  # asks upstream: it is gone
    assert rc == 3 and "no such folder" in err


def test_build_dry_run_with_the_upstream_gone(tmp_path: Path) -> None:
    p = make_build_project(tmp_path)
    args = ["--root", str(p.root), "build", "--upstream", str(p.upstream), "--dry-run", "--json"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.stderr
    shutil.rmtree(p.upstream)
    again = CliRunner().invoke(main, [*args, "--offline"])
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["image"] == json.loads(first.stdout)["image"]


def test_a_bare_number_is_the_list_number_for_every_verb(tmp_path: Path) -> None:
    """U5: after a patch is made in the middle, file numbers and `#` differ; a bare number
    names the `#` of `patches list` everywhere, 0004 the file; counts are --count."""
    root = make_project(tmp_path, make_upstream(tmp_path), FOUR[:3])
    assert cli(root, "patches", "goto", "2")[0] == 0
    edit(root / "build/worktrees/v1.0", "python/pkg/e.py", 3, "e line 3 NEW")
    assert cli(root, "patches", "new", "mid", "-m", "mid")[0] == 0
    mid = "0004-mid.patch"
    assert listed(root)["top"] == mid  # `#` 3 is 0004-mid, the file 0003 is `#` 4
    rc, out, _ = cli(root, "patches", "show", "3")
    assert rc == 0 and mid in out
    assert cli(root, "patches", "header", "3", "--set", "Bug=https://example.invalid/9")[0] == 0
    assert "Bug: https://example.invalid/9" in (root / "patches" / mid).read_text()
    assert "Bug:" not in (root / "patches" / C).read_text()
    assert cli(root, "patches", "pop", "1")[0] == 0  # #1 becomes the top
    assert listed(root)["applied"] == [A]
    assert cli(root, "patches", "goto", "3")[0] == 0
    assert listed(root)["top"] == mid
    assert cli(root, "patches", "show", "0004")[1].count(mid) >= 1  # 0004: the file's number
    rc, _out, err = cli(root, "patches", "push", "2")  # the old count spelling, refused
    assert rc == 4 and "#2 is 0002-fix-b.patch" in err and "--count 2" in err
    assert cli(root, "patches", "pop", "-n", "2")[0] == 0  # a count: two off
    assert listed(root)["applied"] == [A]
    assert cli(root, "patches", "push", "--count", "2")[0] == 0
    assert listed(root)["applied"] == [A, B, mid]
    rc, _out, err = cli(root, "patches", "goto", "9")
    assert rc == 2 and "the series has 4 patches" in err


def test_list_marks_come_from_the_worktree(tmp_path: Path) -> None:
    """U6: after fold or reorder the applied commits no longer match the series: `?`, stale,
    no top; after a conflicting apply the stopped patch is `!`, not the top."""
    upstream = make_upstream(tmp_path)
    root = make_project(tmp_path, upstream, FOUR[:3])
    assert cli(root, "patches", "apply")[0] == 0
    rc, out, _ = cli(root, "patches", "reorder", C, "--first")
    assert rc == 0 and "is now stale" in out and "sglforge patches apply" in out
    seen = listed(root)
    assert seen["stale"] is True and seen["top"] is None and seen["applied"] == []
    assert seen["states"] == ["stale", "stale", "stale"]
    rc, out, _ = cli(root, "patches", "list")
    assert rc == 0 and "is stale" in out and "sglforge patches apply" in out
    assert cli(root, "patches", "apply")[0] == 0
    assert listed(root) == {
        "top": B,
        "applied": [C, A, B],
        "stale": False,
        "states": ["applied"] * 3,
    }

    # a patch made against upstream, editing the line #2 edits too: git am stops on it
    scratch = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(upstream), str(scratch))
    git(scratch, "checkout", "-q", "v1.0")
    edit(scratch, "python/pkg/a.py", 5, "a line 5 OTHER")
    git(scratch, "commit", "-qam", "other: a\n\nUpstream-Status: Pending")
    text = git(scratch, "format-patch", "-1", "--stdout", "--zero-commit", "HEAD")
    (root / "patches" / "0005-other.patch").write_text(text)
    with (root / "patches" / "series").open("a") as fh:
        fh.write("0005-other.patch\n")
    assert cli(root, "patches", "apply")[0] == 4
    seen = listed(root)
    assert seen["top"] == B and seen["applied"] == [C, A, B]
    assert seen["states"][-1] == "conflict"


def test_list_push_and_pop_never_import_gitpython(tmp_path: Path) -> None:
    """GitPython is loaded where a repository is opened with it, not to run git: the stack
    verbs and `patches list` start git processes only."""
    import os
    import subprocess
    import sys

    root = make_project(tmp_path, make_upstream(tmp_path), FOUR)
    assert cli(root, "patches", "apply")[0] == 0
    code = (
        "import sys; from click.testing import CliRunner; from sglforge.cli import main\n"
        "for args in (['patches', 'list'], ['patches', 'pop'], ['patches', 'push']):\n"
        f"    r = CliRunner().invoke(main, ['--root', {str(root)!r}, *args])\n"
        "    assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m == 'git' or m.startswith(('git.', 'gitdb'))))"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
