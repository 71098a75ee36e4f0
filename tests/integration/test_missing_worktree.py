"""N20: a command that needs a ref's worktree nobody made is a usage error (exit 2, nothing
was applied), never "a patch could not be applied" (4); the hint is the command making it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main
from synthetic import make_project, make_upstream


@pytest.mark.parametrize(
    ("args", "next_command"),
    [
        (["patches", "export", "--ref", "v1.1"], "patches apply --ref v1.1"),
        (["patches", "export"], "patches apply --ref v1.0"),
        (["patches", "new", "fix-x", "--ref", "v1.1"], "patches apply --ref v1.1"),
        (["patches", "refresh", "--at", "v1.1"], "patches push"),
    ],
)
def test_a_missing_worktree_is_exit_2_with_the_command_that_makes_it(
    tmp_path: Path, args: list[str], next_command: str
) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path))
    res = CliRunner().invoke(main, ["--root", str(root), *args])
    assert res.exit_code == 2, res.output
    assert "no sglforge worktree for v1." in res.stderr, res.stderr
    assert next_command in res.stderr, res.stderr
    assert not (root / "build" / "worktrees" / "v1.1").exists()
