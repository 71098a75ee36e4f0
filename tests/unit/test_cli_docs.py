"""Every command has help text and is documented in README.md; README has its two commands."""

from __future__ import annotations

import re
from pathlib import Path

import click

from sglforge.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"


def commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, f"sglforge {prefix}{name} is listed but cannot be loaded"
        full = f"{prefix}{name}"
        out.append((full, cmd))
        if isinstance(cmd, click.Group):
            out.extend(commands(cmd, full + " "))
    return out


def test_every_command_has_help_and_is_in_readme() -> None:
    text = README.read_text()
    found = commands(main)
    assert {"patches check", "build", "smoke", "publish", "inspect", "upgrade"} <= {
        n for n, _ in found
    }
    for name, cmd in found:
        assert (cmd.help or "").strip(), f"sglforge {name} has no help text"
        assert f"sglforge {name}" in text, f"sglforge {name} is not documented in README.md"


def test_every_command_help_has_an_example() -> None:
    """README promises it: `sglforge COMMAND --help` has examples."""
    missing = [
        name
        for name, cmd in commands(main)
        if not isinstance(cmd, click.Group) and "Example" not in (cmd.help or "")
    ]
    assert missing == []


def test_readme_has_exactly_two_setup_commands() -> None:
    """The contributors' two commands, under Development: not what a new user reads first."""
    text = README.read_text()
    dev = text.split("\n## Development\n", 1)[1]
    section = dev.split("### Set up (contributors)", 1)[1].split("\n## ", 1)[0].split("\n### ")[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    lines = [ln for b in blocks for ln in b.splitlines() if ln.strip()]
    assert [ln.split("#")[0].strip() for ln in lines] == ["bash .ci/e2e", "bash .ci/run"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python3 -m pytest" in ci
    assert ".ci/e2e" not in text.split("\n## Development\n", 1)[0]


def test_readme_first_screen_is_for_users() -> None:
    """What it is, for whom, what you need, how to install (what exists), a walk-through."""
    text = README.read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[:3] == ["Prerequisites", "Install", "A first patch to a published image"]
    first = text.split("\n## Install\n", 1)[0]
    for needed in ("Who it is for", "Docker", "GB", "MI355X", "Python 3.11", "git"):
        assert needed in first, needed
    install = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "git+https://" in install and "pip wheel" in install
    assert re.search(r"^pip install sglforge\b", text, re.M) is None


def test_exit_codes_are_documented() -> None:
    from sglforge import errors

    text = README.read_text()
    for name in dir(errors):
        if name.startswith("EXIT_"):
            assert f"| {getattr(errors, name)} |" in text, f"{name} missing from README"


def test_top_level_help_needs_no_command_module() -> None:
    """`sglforge --help` lists every command from COMMANDS without importing its module; the
    table's one-line help is each command's own."""
    import subprocess
    import sys

    from sglforge.cli.common import COMMANDS

    ctx = click.Context(main)
    for name, (module, short) in COMMANDS.items():
        cmd = main.get_command(ctx, name)
        assert cmd is not None and cmd.get_short_help_str(200) == short, name
        assert module.startswith("sglforge.cli.")
    code = (
        "import sys; from click.testing import CliRunner; from sglforge.cli import main;"
        "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output;"
        "print(sorted(m for m in sys.modules if m.startswith(('sglforge.cli.', 'docker',"
        " 'requests', 'sglforge.build', 'sglforge.smoke', 'sglforge.publish'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "['sglforge.cli.colour', 'sglforge.cli.common', 'sglforge.cli.signals']"
    ), out.stdout


def test_shared_options_read_their_environment_variables() -> None:
    """--target, --upstream, --offline and --registry are declared once (cli/options.py), with
    the same environment variable in every command that takes them."""
    from sglforge import requests
    from sglforge.cli import options

    assert options.MODES is requests.MODES  # one list of build modes
    seen: dict[str, set[str | None]] = {}
    for _name, cmd in commands(main):
        for p in cmd.params:
            if isinstance(p, click.Option) and p.opts[0] in (
                "--target",
                "--upstream",
                "--offline",
                "--registry",
            ):
                seen.setdefault(p.opts[0], set()).add(p.envvar)  # type: ignore[arg-type]
    assert seen == {
        "--target": {"SGLFORGE_TARGET"},
        "--upstream": {"SGLFORGE_UPSTREAM"},
        "--offline": {"SGLFORGE_OFFLINE"},
        "--registry": {"SGLFORGE_REGISTRY"},
    }, seen


def test_every_json_document_carries_schema_and_ok(tmp_path) -> None:
    """--json goes through one serializer: `schema` and `ok` first, whatever the command."""
    import json

    from click.testing import CliRunner

    from sglforge.cli.common import JSON_SCHEMA

    root = tmp_path / "p"
    runner = CliRunner()
    init = runner.invoke(main, ["init", str(root), "--json"])
    assert init.exit_code == 0, init.output
    for args in (["patches", "list"], ["patches", "lint"], ["patches", "hash"]):
        res = runner.invoke(main, ["--root", str(root), *args, "--json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert list(doc)[:2] == ["schema", "ok"] and doc["schema"] == JSON_SCHEMA, args
        assert doc["ok"] is True
    doc = json.loads(init.stdout)
    assert list(doc)[:2] == ["schema", "ok"]
