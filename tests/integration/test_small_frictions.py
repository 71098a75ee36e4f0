"""N21: the small things a power user met: "did you mean" offering only likely commands,
an unknown version's neighbours by version, --help never cutting a description with "...",
every table column named, and a stand-in smoke run labelled as one."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sglforge.cli import main
from sglforge.cli.common import near_commands
from sglforge.queue.upstream import nearest_tags
from synthetic import make_project, make_upstream

TOP = ["bench", "build", "cache", "configs", "doctor", "patches", "publish", "scan", "smoke"]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("patch", ["patches"]),
        ("pathces", ["patches"]),
        ("cach", ["cache"]),
        ("smok", ["smoke"]),
        ("xyz", []),
        ("buil", ["build"]),
    ],
)
def test_did_you_mean_offers_only_likely_commands(typed: str, meant: list[str]) -> None:
    assert near_commands(typed, TOP) == meant
    res = CliRunner().invoke(main, [typed, "list"])
    assert res.exit_code == 2
    assert ("cache" in res.stderr) == ("cache" in meant), res.stderr


def test_subcommands_too() -> None:
    res = CliRunner().invoke(main, ["patches", "lst"])
    assert res.exit_code == 2 and "Did you mean 'list'?" in res.stderr, res.stderr


TAGS = ["v0.5.12", "v0.5.14", "v0.5.19", "v0.5.23", "v0.5.24rc1", "gateway-v1"]


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        ("v9.9.9", ["v0.5.23 (the newest)"]),
        ("v0.5.99", ["v0.5.23 (the newest)"]),
        ("v0.5.15", ["v0.5.14 (below)", "v0.5.19 (above)"]),
        ("0.4.0", ["v0.5.12 (the oldest)"]),
        ("main-ish", []),
    ],
)
def test_an_unknown_version_names_its_neighbours_by_version(ref: str, said: list[str]) -> None:
    assert nearest_tags(ref, TAGS) == said


def test_an_unknown_ref_at_the_command_line(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), [])
    res = CliRunner().invoke(main, ["--root", str(root), "patches", "check", "--ref", "v9.9.9"])
    assert res.exit_code == 3 and "nearest tags: v1.1 (the newest)" in res.stderr, res.stderr


def _groups(group: click.Group, prefix: list[str]) -> list[list[str]]:
    ctx = click.Context(group)
    out = [prefix]
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            out += _groups(cmd, [*prefix, name])
    return out


def test_help_never_cuts_a_description() -> None:
    for words in _groups(main, []):
        res = CliRunner().invoke(main, [*words, "--help"], terminal_width=80)
        listing = res.stdout.partition("Commands:")[2]
        assert listing and "..." not in listing, (words, listing)


def test_upstream_tags_names_its_columns(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), [])
    res = CliRunner().invoke(main, ["--root", str(root), "upstream", "tags"])
    assert res.exit_code == 0, res.output
    header = res.stdout.splitlines()[1].split()
    assert header == ["tag", "pin"], res.stdout


def test_a_stand_in_smoke_run_is_labelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sglforge import smoke
    from sglforge.cli.smoke import echo_report

    report = smoke.SmokeReport(
        passed=True,
        verdict="passed",
        checks=(smoke.Check("ready", True, 12.5, 3600.0, seconds=12.5),),
        image="sglforge-standin/sglang:v0.5.14-rocm700-mi35x",
        image_digest=None,
        image_id=None,
        scenario="standin-cpu",
        scenario_path=tmp_path / "standin-cpu.toml",
        figures={},
        log_path=None,
        report_dir=tmp_path,
    )
    echo_report(report, standin=True)
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("[STAND-IN: CPU, no GPU]")
    assert any(ln.startswith("PASSED [STAND-IN: CPU, no GPU]") for ln in out), out
    echo_report(report, standin=False)
    assert "STAND-IN" not in capsys.readouterr().out
