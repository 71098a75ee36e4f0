"""``sglforge tryout``: the walk-through's settings on TEST DOUBLES, for a machine without GPU."""

from __future__ import annotations

from pathlib import Path

import click

from sglforge.cli.common import json_option, main, print_json
from sglforge.errors import NothingToDo

DEFAULT_DIR = "sglforge-tryout"


@main.command("tryout")
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DIR,
    show_default=True,
    envvar="SGLFORGE_TRYOUT_DIR",
    help="Where the scenario, its model folder, the registry's storage and env.sh go. "
    "[env: SGLFORGE_TRYOUT_DIR, which the printed settings set]",
)
@click.option(
    "--bench",
    is_flag=True,
    help="Also a bench on the stand-in: a bigger base (CPU torch, bench_serving's "
    "dependencies; about 9 to 12 minutes and 3.3 GB once, its first push about 6 minutes) "
    "and about 5 minutes more per publish. Its releases start a new line: one made on the "
    "plain base cannot be a bench baseline.",
)
@click.option(
    "--use-registry",
    "registry",
    metavar="HOST:PORT",
    help="Push to this registry you run instead of starting Debian's docker-registry on "
    "127.0.0.1 (not $SGLFORGE_REGISTRY: a try-out never pushes where releases go).",
)
@click.option(
    "--sglang",
    "version",
    metavar="VERSION",
    help="The sglang release the stand-in base replicates (default: the pin init writes).",
)
@click.option("--stop", is_flag=True, help="Stop the registry an earlier tryout started here.")
@json_option
def tryout_cmd(
    folder: Path,
    bench: bool,
    registry: str | None,
    version: str | None,
    stop: bool,
    as_json: bool,
) -> None:
    """Try the walk-through without a GPU, on stand-ins (TEST DOUBLES).

    Builds (first run: 5 to 10 minutes; later runs reuse it) a replica of the sglang release
    image whose launch_server is a stand-in server, a TEST DOUBLE; starts a registry on
    127.0.0.1 (Debian's docker-registry); writes the stand-in scenario (standin-cpu) and its
    model folder. Prints the shell lines that set REGISTRY, SCENARIO, MODEL,
    SGLFORGE_BASE_IMAGE and SGLFORGE_ALLOW_STANDIN (also in DIR/env.sh); the README's
    walk-through then runs as written, and every image, smoke and record it makes says it
    ran on a stand-in (standin-cpu). Needs Docker, and for the first build debootstrap, root
    and PyPI. --stop ends the registry.

    \b
    Examples:
      sglforge tryout && . sglforge-tryout/env.sh   # then README's walk-through
      sglforge tryout --stop
    """
    from sglforge import progress, tryout

    say = progress.current()
    if stop:
        source = click.get_current_context().get_parameter_source("folder")
        folder = tryout.folder_to_stop(folder, source is click.core.ParameterSource.DEFAULT)
        pid = tryout.stop(folder)
        if pid is None:
            raise NothingToDo(
                f"no registry of the tryout in {folder.resolve()} is running: nothing was stopped",
                "sglforge tryout starts it again",
            )
        if as_json:
            print_json({"stopped": True, "pid": pid, "folder": folder.resolve()})
        else:
            said = f"registry (pid {pid}) of {folder.resolve()} stopped"
            click.echo(f"tryout: {said}; the stand-in base image stays", err=True)
        return
    for line in tryout.plan_text(tryout.release_version(version), bench):
        say.info(line)
    result = tryout.prepare(folder, bench=bench, registry=registry, version=version)
    if as_json:
        print_json(result)
        return
    click.echo(tryout.shell_lines(result.env), nl=False)
    say.info(f"tryout: settings written to {result.env_file}")
    say.info(
        f"next: . {result.env_file} (or eval the lines above), then README's \"A first patch "
        'to a published image" as written; sglforge tryout --stop at the end'
    )
