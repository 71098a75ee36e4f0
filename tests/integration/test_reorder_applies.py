"""`patches reorder` writes only an order that applies at the pin (issue 45, U14): the new
series is tried at the pin with real git first; an order under which a patch stops applying is
refused in one or two lines naming the patch, the hunk and the reorder that fixes it, and
patches/series is left as it was. The apply conflict at the pin never says to move the pin."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main
from synthetic import make_project, make_upstream

# fix-a2 rewrites the line fix-a wrote (it was made on top of it); fix-b is independent;
# fix-a3 edits a.py far below both (it applies in any order)
QUEUE = [
    ("fix-a", "python/pkg/a.py", 5, "a line 5 FIXED", ""),
    ("fix-b", "python/pkg/b.py", 5, "b line 5 FIXED", ""),
    ("fix-a2", "python/pkg/a.py", 5, "a line 5 FIXED twice", ""),
    ("fix-a3", "python/pkg/a.py", 25, "a line 25 FIXED", ""),
]
CLASH = ("fix-x", "python/pkg/a.py", 5, "a line 5 fixed otherwise", "")
A, B, A2, A3 = (f"{n:04d}-{q[0]}.patch" for n, q in enumerate(QUEUE, 1))


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["--root", str(root), *args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def series(root: Path) -> list[str]:
    text = (root / "patches" / "series").read_text()
    return [x for x in text.splitlines() if x and not x.startswith("#")]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_upstream(tmp_path_factory.mktemp("up"))


@pytest.fixture
def root(tmp_path: Path, upstream: Path) -> Path:
    return make_project(tmp_path, upstream, QUEUE)


@pytest.mark.parametrize(
    ("args", "stuck", "fix"),
    [
        # the patch moved before the one it was written on top of
        (("fix-a2", "--first"), A2, f"sglforge patches reorder {A2} --after {A}"),
        (("fix-a2", "--before", "fix-a"), A2, f"sglforge patches reorder {A2} --after {A}"),
        # the patch it was written on top of moved after it
        (("fix-a", "--last"), A2, f"sglforge patches reorder {A} --before {A2}"),
        (("fix-a", "--after", "fix-a2"), A2, f"sglforge patches reorder {A} --before {A2}"),
    ],
)
def test_an_order_that_cannot_apply_is_refused_naming_patch_hunk_and_fix(
    root: Path, args: tuple[str, ...], stuck: str, fix: str
) -> None:
    before = (root / "patches" / "series").read_bytes()
    code, out, err = cli(root, "patches", "reorder", *args)
    assert code != 0, out
    assert (root / "patches" / "series").read_bytes() == before  # nothing written
    lines = err[err.index("error:") :].splitlines()  # after the fetch's progress lines
    assert 1 <= len(lines) <= 2, err
    assert f"{stuck} would not apply at v1.0 in that order" in lines[0], err
    assert "python/pkg/a.py hunk 1" in lines[0], err
    assert fix.removeprefix("sglforge ") in err, err  # (the CLI puts --root before it)
    assert "pin" not in err.replace("at v1.0", ""), err
    # the suggested command is itself an order that applies
    code, out, err = cli(root, *fix.split()[1:])
    assert code == 0, err


def test_an_order_that_applies_is_written(root: Path) -> None:
    # independent files, or one file far from the lines the others touch
    assert cli(root, "patches", "reorder", "fix-b", "--first")[0] == 0
    assert cli(root, "patches", "reorder", "fix-a3", "--first")[0] == 0
    assert series(root) == [A3, B, A, A2]
    assert cli(root, "patches", "apply")[0] == 0


def test_a_queue_that_already_fails_at_the_pin_can_still_be_reordered(root: Path) -> None:
    """The check blames a move only for a conflict it makes: a patch that does not apply in
    the series as it stands (here one made against other code) does not block other moves."""
    patch = root / "patches" / B
    patch.write_text(patch.read_text().replace("-b line 5\n", "-b line 5 elsewhere\n"))
    assert cli(root, "patches", "reorder", "fix-a3", "--first")[0] == 0
    assert series(root) == [A3, A, B, A2]
    code, out, err = cli(root, "patches", "reorder", "fix-a2", "--first")
    assert code != 0 and f"{A2} would not apply" in err, err


def test_apply_at_the_pin_does_not_say_move_the_pin(
    tmp_path: Path, upstream: Path, root: Path
) -> None:
    """Two patches changing one line of the pin's code (both apply alone, not together): `git
    am --3way` stops in a conflict at the pin, and its hint keeps the pin where it is."""
    (tmp_path / "other").mkdir()
    other = make_project(tmp_path / "other", upstream, [CLASH])
    (root / "patches" / "0005-fix-x.patch").write_bytes(
        (other / "patches" / "0001-fix-x.patch").read_bytes()
    )
    (root / "patches" / "series").write_text(f"{A}\n0005-fix-x.patch\n")
    code, out, err = cli(root, "patches", "apply")
    assert code != 0 and "0005-fix-x.patch does not apply at v1.0" in err, err
    assert "am --continue" in err and "patches export --ref v1.0" in err, err
    assert "move the pin" not in err and "upgrade --to" not in err, err


@pytest.mark.parametrize("renumber", [False, True])
def test_force_writes_the_order_and_says_which_patch_to_mend_and_how(
    root: Path, renumber: bool
) -> None:
    """`--force` writes an order the check refuses (StGit's float, then a fix by hand): the
    note names the patch that stops applying (under its new name when renumbered), the hunk
    and the stack verb that stops on it; that verb then stops there, as the note says."""
    extra = ("--renumber",) if renumber else ()
    code, out, err = cli(root, "patches", "reorder", "fix-a2", "--first", *extra)
    assert code != 0 and "--force" in err, err  # the refusal offers it
    code, out, err = cli(root, "patches", "reorder", "fix-a2", "--first", "--force", *extra)
    assert code == 0, err
    stuck = "0001-fix-a2.patch" if renumber else A2
    assert series(root)[0] == stuck
    assert f"moved anyway (--force): {stuck} would not apply at v1.0" in out, out
    assert "python/pkg/a.py hunk 1" in out and f"patches goto {stuck}" in out, out
    # what the note promises: goto stops on that patch, with git am's way on
    code, out, err = cli(root, "patches", "goto", stuck)
    assert code != 0, out
    assert stuck in err and "am --continue" in err, err
