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
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sglforge import __version__
from sglforge.cli import signals
from sglforge.cli.colour import CHOICES as COLOUR_CHOICES
from sglforge.cli.colour import paint, set_mode
from sglforge.errors import (
    EXIT_INTERRUPTED,
    EXIT_PROBLEMS,
    EXIT_UNEXPECTED,
    SglforgeError,
    disk_error,
)
from sglforge.urls import scrub_text
from sglforge.util import find_root, one_line, printable, set_command

if TYPE_CHECKING:
    from sglforge.project import Project

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class State:
    root_option: str | None = None
    _root: Path | None = None
    # -q: -1 (errors only), default 0, -v: 1 (each git command, ...). Under --json (which
    # json_option sets once the subcommand's options are parsed) stdout is the document alone
    # and stderr still gets progress, as plain lines (``plain``): a CI log never looks hung.
    verbosity: int = 0
    as_json: bool = False

    def level(self) -> int:
        return self.verbosity

    def plain(self) -> bool:
        return self.as_json

    _project: Project | None = None
    _upstream: str | None = None

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = find_root(self.root_option)
        return self._root

    def open_with(self, upstream: str | None) -> None:
        """The upstream (``--upstream``) the project is to be opened with."""
        if self._project is not None and upstream != self._upstream:
            raise RuntimeError("the project was opened before --upstream was read")
        self._upstream = upstream

    @property
    def project(self) -> Project:
        """The project, opened once for the whole command, with its upstream."""
        if self._project is None:
            from sglforge.project import Project

            self._project = Project(self.root, self._upstream)
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
    "cache": (
        "sglforge.cli.doctor",
        "Show or prune the shared cache: upstream mirrors, PyPI wheels and histories.",
    ),
    "configs": (
        "sglforge.cli.configs",
        "Tuned kernel tables: which rows a launch will use, before a GPU runs.",
    ),
    "doctor": (
        "sglforge.cli.doctor",
        "Check this machine for sglforge's work, read-only: what is there, what to do.",
    ),
    "init": (
        "sglforge.cli.init",
        "Lay out a new fork-packaging project in DIRECTORY (default: here).",
    ),
    "inspect": (
        "sglforge.cli.inspect",
        "Show where an image came from: upstream, patches, queue hash, base, smoke figures.",
    ),
    "patches": ("sglforge.cli.patches", "Inspect, check and maintain the patch queue in patches/."),
    "publish": (
        "sglforge.cli.publish",
        "Build, smoke-test and push an image; friendly tags move only after all passed.",
    ),
    "scan": (
        "sglforge.cli.scan",
        "Find a launch's blockers before renting a GPU: CUDA-only JIT kernels, Quark excludes.",
    ),
    "smoke": (
        "sglforge.cli.smoke",
        "Prove an image serves with speculative decoding: launch it, check it, remove it.",
    ),
    "tryout": (
        "sglforge.cli.tryout",
        "Try the walk-through without a GPU, on stand-ins (TEST DOUBLES).",
    ),
    "upstream": (
        "sglforge.cli.upstream",
        "Look at upstream sglang: its release tags and where the pin sits.",
    ),
    "upgrade": (
        "sglforge.cli.upgrade",
        "Move the queue to a new upstream release: refresh, retire, build, smoke, report.",
    ),
}


def near_commands(name: str, known: list[str]) -> list[str]:
    """The commands ``name`` likely meant: those it begins or that begin it (``patch`` ->
    ``patches``), else the ones spelled much like it; not every name sharing letters."""
    import difflib

    typed = name.lower()
    prefixed = [k for k in known if k.startswith(typed) or (len(typed) > 3 and typed.startswith(k))]
    return prefixed or difflib.get_close_matches(typed, known, n=3, cutoff=0.75)


def _full_short_help(group: click.Group, ctx: click.Context) -> list[tuple[str, str]]:
    """(name, whole first sentence) of each visible command: wrapped, never cut with ``...``."""
    rows = []
    for name in group.list_commands(ctx):
        cmd = group.commands.get(name)
        if cmd is not None and not cmd.hidden:
            rows.append((name, cmd.get_short_help_str(limit=1 << 16)))
        elif cmd is None and name in COMMANDS:
            rows.append((name, COMMANDS[name][1]))
    return rows


class UnknownCommand(click.UsageError):
    """A mistyped command and the names it likely meant: the project's own, so that every
    click the floor in pyproject.toml admits says the same (click's ``NoSuchCommand`` came in
    8.4, and its ``possibilities`` became read-only in 8.5)."""

    def __init__(self, name: str, near: list[str], ctx: click.Context) -> None:
        super().__init__(f"No such command {name!r}.", ctx)
        self.command_name = name
        self.near = list(near)

    def format_message(self) -> str:
        if not self.near:
            return self.message
        if len(self.near) == 1:
            return f"{self.message} Did you mean {self.near[0]!r}?"
        return f"{self.message} (Did you mean one of: {', '.join(map(repr, self.near))}?)"


class SubGroup(click.Group):
    """``patches``, ``cache``, ``configs``, ``upstream``: the listing and "did you mean" of
    the root group (errors are still mapped by the root group's ``invoke``)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = _full_short_help(self, ctx)
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, but "did you mean" offers only likely names (``near_commands``), the
        root's commands not loaded yet included (``list_commands``)."""
        name = args[0] if args else ""
        if name[:1].isalnum() and not ctx.resilient_parsing and not self._knows(ctx, name):
            raise UnknownCommand(name, near_commands(name, self.list_commands(ctx)), ctx)
        return super().resolve_command(ctx, args)

    def _knows(self, ctx: click.Context, name: str) -> bool:
        """Whether ``name`` (or its normalized spelling, as click tries it) is a command."""
        if self.get_command(ctx, name) is not None:
            return True
        norm = ctx.token_normalize_func
        return norm is not None and self.get_command(ctx, norm(name)) is not None


class Group(SubGroup):
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

    group_class = SubGroup  # its groups list and suggest as it does

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if self.name == "main":
            # kept for the error document: a usage error can come before --json is parsed
            ctx.meta[_ARGS_KEY] = list(args)
            try:
                return super().parse_args(ctx, args)
            except click.ClickException as exc:
                _usage_document(ctx, exc)
                raise
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        signals.install_running()
        if ctx.parent is None:
            _JSON_PRINTED[0] = False  # a new command (click's runner reuses the process)
        try:
            return super().invoke(ctx)
        except SglforgeError as exc:
            _end_progress()
            if exc.hint:
                exc.hint = with_root(ctx, exc.hint)
            # every URL in a message is shown without its credentials, whoever built it
            said = printable(scrub_text(str(exc)), keep=chr(10))
            click.echo(f"{paint('error:', 'bad', err=True)} {said}", err=True)
            _error_document(ctx, exc.exit_code, exc.message, exc.hint)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            _end_progress()
            code = signals.exit_code(exc)
            why = "" if code == EXIT_INTERRUPTED else f" ({exc})"
            click.echo(f"interrupted{why}: cleaned up, nothing half-written", err=True)
            _error_document(ctx, code, f"interrupted{why}", "nothing was half-written; run again")
            ctx.exit(code)
        except click.exceptions.Exit:
            raise
        except click.ClickException as exc:
            _usage_document(ctx, exc)
            raise
        except click.Abort:
            _error_document(ctx, EXIT_PROBLEMS, "aborted", None)
            raise
        except BrokenPipeError:
            # the reader went away (`sglforge ... | head`): not an error of ours
            sys.stderr.close()
            ctx.exit(EXIT_PROBLEMS)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            _end_progress()
            disk = disk_error(exc) if isinstance(exc, OSError) else None
            if disk is not None:  # a full or read-only disk is the machine's, not a bug
                _json_failure(ctx, disk)
                click.echo(f"error: {printable(str(disk), keep=chr(10))}", err=True)
                ctx.exit(disk.exit_code)
            log = _crash_log(ctx, exc)
            click.echo(
                f"error: unexpected {type(exc).__name__}: {printable(scrub_text(str(exc)))}",
                err=True,
            )
            click.echo(
                f"  a log for bug reports is at {log}"
                if log
                else "  (no log could be written; the traceback follows)",
                err=True,
            )
            if log is None:
                click.echo("".join(traceback.format_exception(exc)), err=True)
            _error_document(
                ctx,
                EXIT_UNEXPECTED,
                f"unexpected {type(exc).__name__}: {scrub_text(str(exc))}",
                f"a log for bug reports is at {log}" if log else "no log could be written",
            )
            ctx.exit(EXIT_UNEXPECTED)
        finally:
            # The command's cleanup is done: a signal from here on just ends the process.
            signals.install_startup()


def with_root(ctx: click.Context, hint: str) -> str:
    """``hint`` with ``--root DIR`` in each sglforge command it names, when the command line
    gave --root: pasted anywhere, the hint acts on the same project."""
    import re
    import shlex

    st = ctx.find_object(State)
    if st is None or not st.root_option or "--root" in hint:
        return hint
    names = "|".join(sorted(COMMANDS, key=len, reverse=True))
    root = shlex.quote(str(Path(st.root_option).resolve()))
    return re.sub(rf"\bsglforge (?=(?:{names})\b)", f"sglforge --root {root} ", hint)


_JSON_PRINTED = [False]  # whether this command printed its --json document already
_ARGS_KEY = "sglforge.args"
_DONE_KEY = "sglforge.error-document"


def _json_requested(ctx: click.Context) -> bool:
    """Whether the command line asked for --json (parsed or not: a usage error may come first)."""
    st = ctx.find_object(State)
    if st is not None and st.as_json:
        return True
    args = ctx.find_root().meta.get(_ARGS_KEY, ())
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _error_document(ctx: click.Context, code: int, message: str, hint: str | None) -> None:
    """With --json, every failure prints one document on stdout, as successes do:
    ``{"schema": 1, "ok": false, "error": {"code", "message", "hint"}}``; printed once."""
    if ctx.find_root().meta.get(_DONE_KEY) or _JSON_PRINTED[0] or not _json_requested(ctx):
        return
    error_document({}, code, scrub_text(message), scrub_text(hint) if hint else hint)


def error_document(doc: dict[str, Any], code: int, message: str, hint: str | None) -> None:
    """Print a command's own failure document (its keys plus ``error``): the one document
    of this run, so the error handler prints no second one."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.find_root().meta[_DONE_KEY] = True
    error = {"code": code, "message": message, "hint": hint}
    print_json({**doc, "error": error, "exit_code": code}, ok=False)


def _usage_document(ctx: click.Context, exc: click.ClickException) -> None:
    path = exc.ctx.command_path.split()[1:] if isinstance(exc, click.UsageError) and exc.ctx else []
    _error_document(
        ctx, exc.exit_code, exc.format_message(), " ".join(["sglforge", *path, "--help"])
    )


def _json_failure(ctx: click.Context, exc: SglforgeError) -> None:
    """The failure document for ``exc`` (see ``_error_document``)."""
    _error_document(ctx, exc.exit_code, exc.message, exc.hint)


def _end_progress() -> None:
    """End a bar still drawn, so an error message starts on a line of its own."""
    from sglforge import progress

    progress.current().close()


def _crash_log(ctx: click.Context, exc: BaseException) -> Path | None:
    """Where the crash log went: the project's build/logs, else the temp folder; None when
    neither can be written. Never raises (it runs inside the last error handler)."""
    import tempfile

    from sglforge.urls import scrub_text
    from sglforge.util import write_private

    # A bug report is shared: argv and the traceback lose their credentials (issue 42, F4).
    known = (os.environ.get("SGLFORGE_REGISTRY_PASSWORD", ""),)
    argv = [scrub_text(a, known) for a in sys.argv]
    text = scrub_text(
        f"sglforge {__version__}\npython {sys.version}\nplatform {platform.platform()}\n"
        f"argv {argv}\n\n" + "".join(traceback.format_exception(exc)),
        known,
    )
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    folders: list[tuple[Path, bool]] = []
    try:
        state = ctx.find_object(State)
        folders.append(((state.root if state else Path.cwd()) / "build" / "logs", False))
    except Exception:  # noqa: BLE001 - no root, no cwd: the temp folder still works
        pass
    folders.append((Path(tempfile.gettempdir()) / f"sglforge-logs-{os.getuid()}", True))
    for base, shared in folders:
        try:
            name = f"crash-{stamp}-{os.getpid()}.log"
            return write_private(base, name, text.encode(errors="replace"), shared=shared)
        except Exception:  # noqa: BLE001, S112 - try the next folder
            continue
    return None


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _p, value: _print_version(ctx) if value else None,
    help="Show the version, the sglang release it pins, Python and the Docker SDK.",
)
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
@click.option(
    "--color",
    "colour",
    type=click.Choice(COLOUR_CHOICES),
    default="auto",
    show_default=True,
    help="Colour verdicts and errors: auto (a terminal, unless $NO_COLOR is set), always, never.",
)
@click.pass_context
def main(ctx: click.Context, root: str | None, quiet: bool, verbose: bool, colour: str) -> None:
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
    set_mode(colour)
    # click.echo strips styles off a terminal unless the context says otherwise
    ctx.color = {"always": True, "never": False}.get(colour)
    ctx.obj = State(root_option=root, verbosity=-1 if quiet else 1 if verbose else 0)
    from sglforge import progress
    from sglforge.cli.progress import Renderer

    ctx.with_resource(progress.using(Renderer(ctx.obj.level, plain=ctx.obj.plain)))


def _print_version(ctx: click.Context) -> None:
    """``sglforge --version``: enough for a bug report (``docker version`` style)."""
    click.echo(f"sglforge, version {__version__}")
    for name, value in version_facts().items():
        click.echo(f"  {name}: {value}")
    ctx.exit(0)


def version_facts() -> dict[str, str]:
    """The default sglang pin, Python and the Docker SDK (the engine is ``doctor``'s)."""
    import importlib.metadata
    import tomllib

    from sglforge.defaults import defaults_root

    facts: dict[str, str] = {}
    shipped = defaults_root()
    try:
        pin = tomllib.loads((shipped / "patches" / "upstream.toml").read_text()) if shipped else {}
        facts["sglang pin"] = f"{pin.get('ref', '?')} (what `sglforge init` writes)"
    except (OSError, tomllib.TOMLDecodeError):
        facts["sglang pin"] = "unknown (no shipped patches/upstream.toml)"
    facts["python"] = f"{platform.python_version()} ({sys.executable})"
    try:
        facts["docker SDK"] = importlib.metadata.version("docker")
    except importlib.metadata.PackageNotFoundError:
        facts["docker SDK"] = "not installed"
    # Asking the engine costs the Docker SDK's import and a round trip (a stopped engine: a
    # time-out); `doctor` asks it, --version stays instant.
    facts["engine"] = "not asked (`sglforge doctor` shows the engine and its version)"
    return facts


def _json_seen(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.ensure_object(State).as_json = True  # stderr: plain progress lines, errors
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
    _JSON_PRINTED[0] = True
    doc = to_jsonable(obj)
    if isinstance(doc, dict):
        success = ok if ok is not None else bool(doc.get("ok", True))
        doc = {"schema": JSON_SCHEMA, "ok": success, **{k: v for k, v in doc.items() if k != "ok"}}
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table; cells show control characters escaped (``printable``)."""
    cells = [[str(h) for h in headers]] + [
        ["" if c is None else one_line(c) for c in r] for r in rows
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
        # The lock file names the subcommand ("sglforge patches apply"), for the busy message.
        set_command(" ".join(["sglforge", *ctx.command_path.split()[1:]]))
        return ctx.invoke(f, state(ctx), *args, **kwargs)

    return wrapper  # type: ignore[return-value]
