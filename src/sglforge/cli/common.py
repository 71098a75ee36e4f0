"""Shared click plumbing: the root group, global options, rendering and error handling."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import json
import os
import platform
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from sglforge import __version__
from sglforge.cli import signals
from sglforge.errors import EXIT_INTERRUPTED, EXIT_PROBLEMS, EXIT_UNEXPECTED, SglforgeError
from sglforge.urls import scrub_text
from sglforge.util import find_root, printable

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class State:
    root_option: str | None = None
    _root: Path | None = None
    # -q: -1 (errors only), default 0, -v: 1 (each git command, ...). --json alone counts as
    # -q on stderr (json_option sets it once the subcommand's options are parsed); --json -v
    # shows everything.
    verbosity: int = 0
    as_json: bool = False

    def level(self) -> int:
        return -1 if self.as_json and self.verbosity == 0 else self.verbosity

    _project: Any = None

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = find_root(self.root_option)
        return self._root

    @property
    def project(self) -> Any:
        """The project, opened once for the whole command (``sglforge.project.Project``)."""
        if self._project is None:
            from sglforge.project import Project

            self._project = Project(self.root)
        return self._project


# The top-level commands, the module that defines each, and its one-line help. A command's
# module (and the core modules, the Docker SDK and requests behind it) is imported only when
# that command runs or its own help is asked for, so `sglforge --help` and `sglforge patches
# list` start fast. tests/unit/test_cli_docs.py checks this table against the commands.
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": (
        "sglforge.cli.bench",
        "Measure serving performance the case study's way, with the image's own client.",
    ),
    "build": ("sglforge.cli.build", "Build the image of the patch queue for a GPU target."),
    "configs": (
        "sglforge.cli.configs",
        "Tuned kernel tables: which rows a launch will use, before a GPU runs.",
    ),
    "init": (
        "sglforge.cli.init",
        "Lay out a new fork-packaging project in DIRECTORY (default: here).",
    ),
    "inspect": (
        "sglforge.cli.publish",
        "Show where an image came from: upstream, patches, queue hash, base, smoke figures.",
    ),
    "patches": ("sglforge.cli.patches", "Inspect, check and maintain the patch queue in patches/."),
    "publish": (
        "sglforge.cli.publish",
        "Build, smoke-test and push an image; friendly tags move only after all passed.",
    ),
    "smoke": (
        "sglforge.cli.smoke",
        "Prove an image serves with speculative decoding: launch it, check it, remove it.",
    ),
    "upgrade": (
        "sglforge.cli.upgrade",
        "Move the queue to a new upstream release: refresh, retire, build, smoke, report.",
    ),
}


class Group(click.Group):
    """A group whose commands map project errors to exit codes in one place.

    Top-level commands are imported on first use (``COMMANDS``).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        if self.name != "main":
            return super().list_commands(ctx)
        return sorted(set(self.commands) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if self.name == "main" and cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            importlib.import_module(COMMANDS[cmd_name][0])
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.name != "main":
            return super().format_commands(ctx, formatter)
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(formatter.width)))
            elif cmd is None:
                rows.append((name, COMMANDS[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        signals.install_running()
        try:
            return super().invoke(ctx)
        except SglforgeError as exc:
            _end_progress()
            # every URL in a message is shown without its credentials, whoever built it
            click.echo(f"error: {printable(scrub_text(str(exc)), keep=chr(10))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            _end_progress()
            code = signals.exit_code(exc)
            why = "" if code == EXIT_INTERRUPTED else f" ({exc})"
            click.echo(f"interrupted{why}: cleaned up, nothing half-written", err=True)
            ctx.exit(code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BrokenPipeError:
            # the reader went away (`sglforge ... | head`): not an error of ours
            sys.stderr.close()
            ctx.exit(EXIT_PROBLEMS)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            _end_progress()
            log = _crash_log(ctx, exc)
            click.echo(f"error: unexpected {type(exc).__name__}: {scrub_text(str(exc))}", err=True)
            click.echo(f"  a log for bug reports is at {log}", err=True)
            ctx.exit(EXIT_UNEXPECTED)
        finally:
            # The command's cleanup is done: a signal from here on just ends the process.
            signals.install_startup()


def _end_progress() -> None:
    """End a bar still drawn, so an error message starts on a line of its own."""
    from sglforge import progress

    progress.current().close()


def _crash_log(ctx: click.Context, exc: BaseException) -> Path:
    state = ctx.find_object(State)
    try:
        base = state.root / "build" / "logs" if state else Path.cwd()
    except SglforgeError:
        base = Path.cwd() / "build" / "logs"
    base.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = base / f"crash-{stamp}.log"
    path.write_text(
        f"sglforge {__version__}\npython {sys.version}\nplatform {platform.platform()}\n"
        f"argv {sys.argv}\n\n" + "".join(traceback.format_exception(exc))
    )
    return path


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sglforge")
@click.option(
    "--root",
    "root",
    envvar="SGLFORGE_ROOT",
    type=click.Path(file_okay=False),
    help="Folder holding patches/ (default: found by walking up from here).",
)
@click.option(
    "-q", "--quiet", is_flag=True, help="No progress or info lines on stderr (errors still print)."
)
@click.option(
    "-v", "--verbose", is_flag=True, help="More detail on stderr (each git command, ...)."
)
@click.pass_context
def main(ctx: click.Context, root: str | None, quiet: bool, verbose: bool) -> None:
    """sglforge: patch queue, ROCm images and MTP smoke tests for sglang on AMD MI355X.

    \b
    Examples:
      sglforge patches list
      sglforge patches check --ref v0.5.14 --ref v0.5.16 --upstream pypi:sglang
      sglforge build --target mi355x --dry-run
      sglforge -q patches apply       # errors only on stderr
    """
    if quiet and verbose:
        raise click.UsageError("-q/--quiet and -v/--verbose exclude each other")
    ctx.obj = State(root_option=root, verbosity=-1 if quiet else 1 if verbose else 0)
    from sglforge import progress
    from sglforge.cli.progress import Renderer

    ctx.with_resource(progress.using(Renderer(ctx.obj.level)))


def _json_seen(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.ensure_object(State).as_json = True  # stderr: errors only
    return value


def json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, callback=_json_seen, help="Print JSON for machines."
    )(f)


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    return obj


# Version of the --json documents' shape; bumped when a key changes meaning or goes away.
JSON_SCHEMA = 1


def print_json(obj: Any, ok: bool | None = None) -> None:
    """Every ``--json`` document: ``schema`` (its version) and ``ok`` (whether the command
    succeeded: the same key in every command) first, then the command's own keys."""
    doc = to_jsonable(obj)
    if isinstance(doc, dict):
        success = ok if ok is not None else bool(doc.get("ok", True))
        doc = {"schema": JSON_SCHEMA, "ok": success, **{k: v for k, v in doc.items() if k != "ok"}}
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table; cells show control characters escaped (``printable``)."""
    cells = [[str(h) for h in headers]] + [
        ["" if c is None else printable(str(c)) for c in r] for r in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def state(ctx: click.Context) -> State:
    return ctx.ensure_object(State)


def pass_state(f: F) -> F:
    @functools.wraps(f)
    @click.pass_context
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        return ctx.invoke(f, state(ctx), *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
