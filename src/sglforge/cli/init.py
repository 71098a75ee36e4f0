"""``sglforge init``: click code over ``sglforge.init.init_project``."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from sglforge.cli.common import json_option, main, print_json
from sglforge.init import DEFAULT_UPSTREAM, EXAMPLES, init_project
from sglforge.urls import shown


@main.command("init")
@click.argument(
    "directory",
    default=".",
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--upstream",
    default=DEFAULT_UPSTREAM,
    show_default=True,
    envvar="SGLFORGE_UPSTREAM",
    metavar="pypi:sglang|URL|PATH",
    help="Where upstream sglang comes from, recorded once in patches/upstream.toml (`url`): "
    "released wheels (python/ only), a git URL (needed for --mode source), or a local clone. "
    "Also $SGLFORGE_UPSTREAM.",
)
@click.option(
    "--example",
    type=click.Choice(sorted(EXAMPLES)),
    help="Start from this project's proven queue instead of an empty one: "
    + "; ".join(f"{k}: {v[0]}" for k, v in sorted(EXAMPLES.items()))
    + ".",
)
@click.option(
    "--install-from",
    metavar="REQUIREMENT",
    help="What the CI workflow pip-installs sglforge from (default: where this sglforge was "
    "installed from, e.g. `sglforge @ git+https://...@COMMIT`).",
)
@click.option(
    "--git/--no-git", default=True, show_default=True, help="Run `git init` unless in a repo."
)
@click.option(
    "--watch",
    is_flag=True,
    help="Also the nightly upstream-watch workflow: `upgrade --to latest --branch` on a GPU "
    "runner, then one pull request.",
)
@json_option
def init_cmd(
    directory: Path,
    upstream: str,
    example: str | None,
    install_from: str | None,
    git: bool,
    watch: bool,
    as_json: bool,
) -> None:
    """Lay out a new fork-packaging project in DIRECTORY (default: here).

    Writes patches/ (an empty series, or --example's queue, and the pin of the sglang release
    sglforge targets, taken from --upstream), images/ (targets and the overlay Dockerfile),
    smoke/ (scenarios, with the stand-in model the CPU scenario mounts), a CI workflow
    (.github/workflows/sglforge.yml), CHANGELOG.md and a .gitignore for build/, then runs
    `git init` there unless it is inside a repository. Refuses (exit 2, naming them) when any
    of these files exists; nothing is then written.

    \b
    Examples:
      sglforge init my-sglang
      sglforge init --example glm52 glm52-fork
      sglforge init --upstream https://github.com/sgl-project/sglang my-sglang
      cd my-sglang && sglforge patches apply
    """
    result = init_project(
        directory,
        upstream=upstream,
        example=example,
        install=install_from,
        git_init=git,
        watch=watch,
    )
    if as_json:
        print_json(result)
        return
    click.echo(f"new sglforge project in {result.root}:")
    for rel in result.files:
        click.echo(f"  {rel}")
    click.echo(f"upstream: {shown(result.upstream)} (patches/upstream.toml)")
    if result.note:
        click.echo(f"note: {result.note}")
    click.echo(f"CI installs: {result.install} ({result.install_origin})")
    if result.git == "initialised":
        click.echo(f"git: new repository on branch {result.branch}")
    here = Path.cwd().resolve()
    cd = "" if result.root == here else f"cd {shlex.quote(str(directory))} && "
    click.echo(f"next: {cd}sglforge patches apply   (a worktree of the pinned sglang to patch)")
