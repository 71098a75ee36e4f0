"""``sglforge upgrade``: click code over ``sglforge.upgrade.upgrade``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sglforge.cli import colour
from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.cli.complete import complete_tags
from sglforge.cli.options import (
    base_image_option,
    mode_option,
    offline_option,
    publish_options,
    registry_option,
    scenario_option,
    targets_option,
    upstream_option,
)
from sglforge.errors import EXIT_PROBLEMS, ConfigError
from sglforge.gates.result import bench_record
from sglforge.progress import current
from sglforge.reports import bench as bench_view
from sglforge.requests import UpgradeRequest

if TYPE_CHECKING:
    from sglforge.engine.reference import Registry


def _needed(registry: Registry | None) -> Registry:
    """``--publish``'s registry: refused before anything runs when none was given."""
    if registry is None:
        raise ConfigError(
            "--publish needs --registry REG", "sglforge upgrade --publish --registry REG"
        )
    return registry


@main.command("upgrade")
@click.option(
    "--to",
    "to",
    default="latest",
    shell_complete=complete_tags,
    show_default=True,
    help="Upstream ref to move to, or `latest` (newest release tag).",
)
@click.option("--pre", is_flag=True, help="With --to latest, consider pre-releases too.")
@upstream_option
@targets_option
@base_image_option
@click.option("--model", metavar="PATH", help="Model path for the smoke scenario.")
@scenario_option("Smoke scenario instead of the target's own: NAME (smoke/NAME.toml) or a file.")
@click.option("--port", type=int, help="Port for the smoke server.")
@click.option("--no-build", is_flag=True, help="Refresh the queue only; no image, no smoke.")
@click.option(
    "--publish",
    "do_publish",
    is_flag=True,
    help="Publish each image (the smoke gate still applies).",
)
@click.option(
    "--allow-standin",
    is_flag=True,
    envvar="SGLFORGE_ALLOW_STANDIN",
    help="With --publish: publish from a stand-in scenario, recorded as a stand-in. "
    "[env: SGLFORGE_ALLOW_STANDIN]",
)
@publish_options
@registry_option(required=False)
@mode_option
@offline_option
@click.option(
    "--dry-run", is_flag=True, help="Show the plan and each patch's action; write nothing."
)
@click.option(
    "--branch",
    metavar="NAME",
    help="Do the upgrade on a new git branch NAME, as one commit (the current branch stays).",
)
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write report-<ref>.md/.json (default: build/upgrade/).",
)
@json_option
@pass_state
def upgrade_cmd(
    st: State,
    to: str,
    pre: bool,
    upstream: str | None,
    targets: tuple[str, ...],
    base_image: str | None,
    model: str | None,
    scenario: str | None,
    port: int | None,
    no_build: bool,
    do_publish: bool,
    allow_standin: bool,
    accept_regression: str | None,
    no_baseline: str | None,
    retries: int,
    backoff: float,
    registry: Registry | None,
    mode: str,
    offline: bool,
    report_dir: Path | None,
    dry_run: bool,
    branch: str | None,
    as_json: bool,
) -> None:
    """Move the queue to a new upstream release: refresh, retire, build, smoke, report.

    Nothing in the project changes unless every step passed; the exit code is 0 only when
    the upgrade is ready to merge. `patches refresh --ref` moves the pin and rebases the queue
    only; `upgrade` also retires what upstream merged, then builds and smoke-tests before
    writing anything: the one to use for a new release.

    \b
    Examples:
      sglforge upgrade --to latest --dry-run           # the plan, each patch's action
      sglforge upgrade --to latest --no-build --branch upgrade/latest
      sglforge upgrade --to v0.5.16 --upstream pypi:sglang \\
          --base-image 'sglforge-standin/sglang:v{version}-rocm700-mi35x'
    """
    from sglforge.requests import PublishOptions
    from sglforge.upgrade import to_dict, upgrade

    project = st.project
    options = None
    if do_publish:
        options = PublishOptions(
            registry=_needed(registry),
            allow_standin=allow_standin,
            accept_regression=accept_regression,
            no_baseline=no_baseline,
            attempts=retries + 1,
            backoff=backoff,
        )
    req = UpgradeRequest(
        to=to,
        targets=tuple(project.target(t) for t in targets),
        pre=pre,
        build=not no_build,
        smoke=not no_build,
        publish=options,
        mode=mode,
        base_image=base_image,
        model=Path(model) if model else None,
        scenario=project.scenario_named(scenario) if scenario else None,
        port=port,
        offline=offline,
        report_dir=report_dir,
        dry_run=dry_run,
        branch=branch,
    )
    r = upgrade(project, req, current())
    for t in r.targets:  # bench.md and chart.svg beside each bench's report.json
        bench = bench_record(t.gates)
        if bench is not None:
            bench_view.write_outputs(bench.report)
    if as_json:
        print_json(to_dict(r), ok=r.ready)
    else:
        verdict = colour.verdict("READY" if r.ready else "NOT READY", r.ready)
        click.echo(
            f"upgrade {r.old_ref} -> {r.new_ref}: {verdict}{' (dry run)' if dry_run else ''}"
        )
        click.echo(f"  {r.reason}")
        if r.patches:
            click.echo(
                table(
                    ["patch", "action", "status", "detail"],
                    [[p.name, p.action, p.status, p.where] for p in r.patches],
                )
            )
        for t in r.targets:
            click.echo(
                f"  {t.target}: {t.image or '-'} ({t.build_mode or '-'}) smoke="
                f"{t.smoke_verdict or '-'} {t.error}"
            )
        if r.report_md:
            click.echo(f"  report: {r.report_md}")
    if not r.ready:
        raise SystemExit(EXIT_PROBLEMS)
