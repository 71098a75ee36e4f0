"""A scenario is named as a user would name it: a bare NAME for smoke/NAME.toml (the
project's, else the shipped ones), a file, or nothing (the image's target's own); a wrong
name lists the real ones."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sglforge.cli import main
from sglforge.defaults import defaults_root
from sglforge.errors import ConfigError
from sglforge.scenario.file import scenario_path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("")
    return tmp_path


def test_names_files_and_defaults(root: Path) -> None:
    shipped = defaults_root()
    assert shipped is not None
    for given in ("standin-cpu", "standin-cpu.toml"):
        assert scenario_path(root, given) == shipped / "smoke" / "standin-cpu.toml"
    (root / "smoke").mkdir()
    own = root / "smoke" / "mine.toml"
    own.write_text((shipped / "smoke" / "standin-cpu.toml").read_text())
    assert scenario_path(root, "mine") == own  # the project's own smoke/ wins
    assert scenario_path(root, own) == own
    assert scenario_path(root, "smoke/mine.toml") == root / "smoke" / "mine.toml"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("stanin-cpu", "did you mean standin-cpu"),
        ("glm5-mxfp4-mtp-mi35x", "did you mean glm5-mxfp4-mtp-mi355x"),
        ("nothing-like-it", "known in "),
        ("other/standin-cpu.toml", "no smoke scenario 'other/standin-cpu.toml'"),
    ],
)
def test_a_wrong_name_lists_the_real_ones(root: Path, given: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        scenario_path(root, given)
    assert said in err.value.message and "standin-cpu" in err.value.message


@pytest.mark.parametrize(
    "command",
    [
        ["smoke", "--image", "x:y"],
        ["publish", "--registry", "127.0.0.1:5999", "--dry-run"],
        ["bench", "--image", "x:y"],
        ["scan", "--model", "no-model"],
    ],
)
def test_commands_resolve_names_before_any_work(root: Path, command: list[str]) -> None:
    res = CliRunner().invoke(main, ["--root", str(root), *command, "--scenario", "stanin-cpu"])
    assert res.exit_code == 2 and "did you mean standin-cpu" in res.stderr, res.output


@pytest.mark.docker
def test_smoke_without_a_scenario_takes_the_image_s_target(root: Path, docker_client) -> None:
    """No --scenario: the image's io.sglforge.target picks it, as publish does; an image
    without the label says to name one."""
    res = CliRunner().invoke(main, ["--root", str(root), "smoke", "--image", "sglforge-none/x:y"])
    assert res.exit_code == 9, res.output  # no such image
    from standin.base import ensure_debian_base

    base = ensure_debian_base(docker_client)
    res = CliRunner().invoke(main, ["--root", str(root), "smoke", "--image", base])
    assert res.exit_code == 2 and "no io.sglforge.target label" in res.stderr, res.output


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        out.append((prefix + name, cmd))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, prefix + name + " ")
    return out


def test_every_scenario_option_is_the_one_rule() -> None:
    """N4: every command's --scenario takes a NAME or a file (one option, one resolver:
    Project.scenario_named) and completes the names; no command takes only a path."""
    found = {
        name: p
        for name, cmd in _commands(main)
        for p in cmd.params
        if isinstance(p, click.Option) and "--scenario" in p.opts
    }
    assert {"smoke", "publish", "upgrade", "bench", "scan", "configs tune"} <= set(found)
    for name, p in found.items():
        assert p.metavar == "NAME|FILE" and p._custom_shell_complete is not None, name
        assert not isinstance(p.type, click.Path), name


def test_a_name_and_a_file_give_the_same_scenario(root: Path) -> None:
    from sglforge.project import Project

    project = Project(root)
    by_name = project.scenario_named("standin-cpu")
    assert by_name is project.scenario_named(by_name.path)  # parsed once, either way
