"""One ``KEY=VALUE`` parser for every command's repeatable options (build and publish
``--label``, smoke's and bench's ``--env`` and ``--label``): a malformed item is a usage
error naming the option, before the command does anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main

COMMANDS = {
    "build --label": ["build", "--dry-run", "--label"],
    "publish --label": ["publish", "--registry", "127.0.0.1:9", "--dry-run", "--label"],
    "smoke --env": ["smoke", "--image", "x", "--env"],
    "smoke --label": ["smoke", "--image", "x", "--label"],
    "bench --env": ["bench", "--image", "x", "--scenario", "s.toml", "--env"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("item", ["noequals", "=value", ""])
def test_a_malformed_item_is_a_usage_error_naming_the_option(
    tmp_path: Path, command: str, item: str
) -> None:
    res = CliRunner().invoke(main, ["--root", str(tmp_path), *COMMANDS[command], item])
    assert res.exit_code == 2, res.output
    option = command.split()[1]
    assert option in res.stderr and "expected KEY=VALUE" in res.stderr, res.stderr
    assert f"e.g. {option} " in res.stderr  # an example to copy
    assert not (tmp_path / "build").exists()  # nothing ran


def test_items_become_a_mapping_the_last_value_winning() -> None:
    import click

    from sglforge.cli.options import env_option, label_option

    seen: list[object] = []

    @click.command()
    @label_option
    @env_option
    def cmd(labels: object, envs: object) -> None:
        seen.extend([labels, envs])

    res = CliRunner().invoke(
        cmd, ["--label", "a=1", "--label", "b=x=y", "--label", "a=2", "--env", "E="]
    )
    assert res.exit_code == 0, res.output
    assert seen == [{"a": "2", "b": "x=y"}, {"E": ""}]
