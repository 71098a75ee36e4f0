"""Options several commands share, declared once: the same name, help and environment variable
everywhere (``--target``, ``--upstream``, ``--offline``, ``--label``, ``--base-image``,
``--registry``, ``--mode``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sglforge.cli.complete import complete_scenarios, complete_targets
from sglforge.errors import ConfigError
from sglforge.requests import MODES

if TYPE_CHECKING:
    from sglforge.engine.reference import Registry

F = TypeVar("F", bound=Callable[..., Any])

TARGET_HELP = "Target from images/targets.toml: mi355x, mi300x, or NAME-ROCM (mi355x-rocm720)."


def _one_target(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> str:
    # Collected as a list so that a second --target is refused, not silently the one used
    # (issue 45, U17).
    if len(value) > 1:
        raise click.BadParameter(
            f"given {len(value)} times ({', '.join(value)}): this command takes one target; "
            "run it once per target (the workflow's matrix does)",
            ctx,
            param,
        )
    return value[0] if value else "mi355x"


def target_option(f: F) -> F:
    """``--target`` (also ``$SGLFORGE_TARGET``), once: a repeated one is a usage error."""
    return click.option(
        "--target",
        multiple=True,
        default=("mi355x",),
        show_default=True,
        envvar="SGLFORGE_TARGET",
        metavar="NAME[-ROCM]",
        shell_complete=complete_targets,
        callback=_one_target,
        help=TARGET_HELP + " Once; also $SGLFORGE_TARGET.",
    )(f)


def targets_option(f: F) -> F:
    """``--target`` repeatable, into ``targets`` (also ``$SGLFORGE_TARGET``, space-separated)."""
    return click.option(
        "--target",
        "targets",
        multiple=True,
        default=("mi355x",),
        show_default=True,
        envvar="SGLFORGE_TARGET",
        metavar="NAME[-ROCM]",
        shell_complete=complete_targets,
        help=TARGET_HELP + " Repeatable; also $SGLFORGE_TARGET.",
    )(f)


def scenario_option(help: str, required: bool = False) -> Callable[[F], F]:
    """``--scenario NAME|FILE``: a NAME of ``smoke/NAME.toml`` (the project's, else the
    shipped ones) or a file, resolved by ``Project.scenario_named`` (``scenario_path``'s one
    rule) in every command; completes the names."""

    def deco(f: F) -> F:
        return click.option(
            "--scenario",
            "scenario",
            required=required,
            metavar="NAME|FILE",
            shell_complete=complete_scenarios,
            help=help,
        )(f)

    return deco


def _upstream(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """The project this command opens is opened with this upstream (``State.project``)."""
    from sglforge.cli.common import State

    state = ctx.find_object(State)
    if state is not None:
        state.open_with(value)
    return value


def upstream_option(f: F) -> F:
    """``--upstream`` (also ``$SGLFORGE_UPSTREAM``): the upstream the command's project opens
    with; the value is also passed on, for the hints a command prints."""
    return click.option(
        "--upstream",
        envvar="SGLFORGE_UPSTREAM",
        callback=_upstream,
        metavar="URL|PATH|pypi:PROJECT[SPEC]",
        help="Upstream to fetch instead of the pin's URL: a git URL, a local clone, or "
        "`pypi:sglang[SPEC]` (a python/-only history built from released wheels). "
        "Also $SGLFORGE_UPSTREAM.",
    )(f)


def offline_option(f: F) -> F:
    """``--offline`` (also ``$SGLFORGE_OFFLINE``), a plain bool: read here, and only here."""
    return click.option(
        "--offline",
        is_flag=True,
        default=False,
        envvar="SGLFORGE_OFFLINE",
        help="Never ask a registry for base images; only images on the engine count. "
        "Also $SGLFORGE_OFFLINE.",
    )(f)


def key_values(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    """``KEY=VALUE`` items of a repeatable option as a mapping (the one parser of them)."""
    out: dict[str, str] = {}
    option = f"--{(param.name or '').removesuffix('s')}"
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE, e.g. {option} team=infra")
        out[key] = value
    return out


def key_value_option(name: str, dest: str, help: str) -> Callable[[F], F]:
    """A repeatable ``NAME KEY=VALUE`` option, into ``dest`` as a mapping."""

    def deco(f: F) -> F:
        return click.option(
            name, dest, multiple=True, callback=key_values, metavar="KEY=VALUE", help=help
        )(f)

    return deco


label_option = key_value_option(
    "--label", "labels", "Extra image label (repeatable); wins over sglforge's own."
)
env_option = key_value_option("--env", "envs", "Extra container environment (repeatable).")


def runtime_options(f: F) -> F:
    """``--runtime``, ``--python`` and ``--server-url``: where smoke's and bench's server runs
    (``sglforge.smoke.runtime``)."""
    f = click.option(
        "--server-url",
        metavar="URL",
        help="Check a server sglforge did not start (http://HOST:PORT): nothing is launched; "
        "what needs a boot (boot time, server log, stays-up, the --against comparison) is "
        "not run, and every output says so.",
    )(f)
    f = click.option(
        "--python",
        "python",
        metavar="WORDS",
        help="The process runtime's interpreter, or a prefix ending in one: "
        "'/venv/bin/python3', 'apptainer exec IMAGE.sif python3' (split as a shell does). "
        "It replaces the scenario command's leading python3; the bench client is "
        "WORDS -m sglang.bench_serving. Default: the scenario's python, else python3.",
    )(f)
    return click.option(
        "--runtime",
        type=click.Choice(["docker", "process"]),
        help="Run the server in a container (docker, the default) or as a local process in "
        "its own process group (stopped whole: SIGTERM, then SIGKILL). The process gets only "
        "PATH, HOME, LANG, CUDA_/HIP_VISIBLE_DEVICES, [container.env] and --env "
        "(PYTHONPATH only that way); paths under the model's mount become the --model "
        "folder. Default: the scenario's runtime.",
    )(f)


def base_image_option(f: F) -> F:
    """``--base-image`` (a ``{version}``/``{date}`` template is allowed; also
    ``$SGLFORGE_BASE_IMAGE``, e.g. a mirror of the release images)."""
    return click.option(
        "--base-image",
        metavar="IMG",
        envvar="SGLFORGE_BASE_IMAGE",
        help="Base image instead of the target's; `{version}` and `{date}` are filled in "
        "(the newest published date). Also $SGLFORGE_BASE_IMAGE (a mirror, say).",
    )(f)


def _reason(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A recorded reason: one line of text, no control character (it reaches the terminal,
    the step summary, JUnit and the release record; issue 42, F16)."""
    from sglforge.util import one_line, printable

    if value is None:
        return None
    if not value.strip() or printable(value) != value:
        raise click.BadParameter(
            f"{one_line(value)}: one line of text, without control characters, expected",
            param=param,
        )
    return value.strip()


def publish_options(f: F) -> F:
    """``--accept-regression``, ``--no-baseline``, ``--retries`` and ``--backoff``: how a
    publish goes (publish and ``upgrade --publish`` alike, copied into each target's
    publish)."""
    f = click.option(
        "--backoff",
        type=click.FloatRange(0, 300),
        default=2.0,
        show_default=True,
        help="Seconds before the first retry; doubles each time.",
    )(f)
    f = click.option(
        "--retries",
        type=click.IntRange(0, 20),
        default=3,
        show_default=True,
        help="Retries of a push after a transient registry error (exponential backoff).",
    )(f)
    f = click.option(
        "--no-baseline",
        metavar="REASON",
        callback=_reason,
        help="Publish with no bench comparison when no earlier release can be compared (the "
        "first release, say); REASON is recorded. Without it, a bench that cannot compare "
        "refuses the publish.",
    )(f)
    return click.option(
        "--accept-regression",
        metavar="REASON",
        callback=_reason,
        help="Publish despite a serving regression against the last release; REASON is recorded.",
    )(f)


def mode_option(f: F) -> F:
    """``--mode auto|overlay|source``."""
    return click.option(
        "--mode",
        type=click.Choice(MODES),
        default="auto",
        show_default=True,
        help="overlay: release image + changed files; source: upstream's rocm.Dockerfile "
        "(docker buildx); auto: source only when a patch is aot-kernel or build kind.",
    )(f)


def _registry(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Registry | None:
    """The registry validated as it is read, the one time it is: nothing runs with a reference
    that cannot push, and credentials in it are refused without being echoed. The core takes
    the ``Registry`` value and never checks it again."""
    if value is None:
        return None
    from sglforge.engine.reference import Registry

    try:
        return Registry(value)
    except ConfigError as exc:  # the message never holds the credentials
        raise click.BadParameter(str(exc)) from None


def registry_option(required: bool) -> Callable[[F], F]:
    """``--registry HOST[:PORT][/NS]`` (also ``$SGLFORGE_REGISTRY``)."""

    def deco(f: F) -> F:
        return click.option(
            "--registry",
            required=required,
            envvar="SGLFORGE_REGISTRY",
            metavar="HOST[:PORT][/NS]",
            callback=_registry,
            help="Registry to push to, e.g. 127.0.0.1:5000 or ghcr.io/your-org (yours, lowercase). "
            "Also $SGLFORGE_REGISTRY.",
        )(f)

    return deco
