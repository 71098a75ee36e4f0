"""``sglforge init``: click code over ``sglforge.init.init_project``."""

from __future__ import annotations

from pathlib import Path

import click

from sglforge.cli.common import json_option, main, print_json
from sglforge.init import init_project


@main.command("init")
@click.argument(
    "directory",
    default=".",
    type=click.Path(file_okay=False, path_type=Path),
)
@json_option
def init_cmd(directory: Path, as_json: bool) -> None:
    """Lay out a new fork-packaging project in DIRECTORY (default: here).

    Writes patches/ (an empty series and the pin of the sglang release sglforge targets),
    images/ (targets and the overlay Dockerfile), smoke/ (scenarios, with the stand-in model
    the CPU scenario mounts), a CI workflow (.github/workflows/sglforge.yml), CHANGELOG.md and
    a .gitignore for build/. Refuses (exit 2, naming them) when any of these files exists;
    nothing is then written.

    \b
    Examples:
      sglforge init my-sglang
      cd my-sglang && git init && sglforge build --target mi355x --dry-run
    """
    result = init_project(directory)
    if as_json:
        print_json(result)
        return
    click.echo(f"new sglforge project in {result.root}:")
    for rel in result.files:
        click.echo(f"  {rel}")
    click.echo("next: sglforge patches apply   (a worktree of the pinned sglang to patch)")
