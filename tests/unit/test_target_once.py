"""A repeated ``--target`` on a command that builds one target is refused (issue 45, U17),
instead of the last one silently winning; ``upgrade`` (several targets) still takes many."""

from __future__ import annotations

import click
from click.testing import CliRunner

from sglforge.cli import main
from sglforge.cli.options import _one_target


def commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name in group.list_commands(click.Context(group)):
        cmd = group.get_command(click.Context(group), name)
        if isinstance(cmd, click.Group):
            found += commands(cmd, (*path, name))
        elif cmd is not None and any(p.callback is _one_target for p in cmd.params):
            found.append((*path, name))
    return found


def test_every_single_target_command_refuses_a_second_target() -> None:
    single = commands(main)
    assert {("build",), ("publish",)} <= set(single), single
    for path in single:
        res = CliRunner().invoke(main, [*path, "--target", "mi355x", "--target", "mi300x"])
        assert res.exit_code == 2, (path, res.output)
        assert "given 2 times (mi355x, mi300x)" in res.output, (path, res.output)


def test_one_target_is_taken_as_given() -> None:
    res = CliRunner().invoke(main, ["build", "--target", "nosuch", "--dry-run"])
    assert "nosuch" in res.output and "given" not in res.output
