"""``sglforge smoke``: click code over :func:`sglforge.smoke.run_smoke`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sglforge import smoke as core
from sglforge.cli import colour
from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.cli.options import env_option, key_value_option, runtime_options, scenario_option
from sglforge.errors import EXIT_OK, EXIT_PROBLEMS, SmokeError
from sglforge.progress import current
from sglforge.requests import SmokeRequest
from sglforge.smoke.runtime import parse_python
from sglforge.util import check_output_file

if TYPE_CHECKING:
    from sglforge.scenario.file import Scenario
    from sglforge.smoke.report import SmokeReport


def _target_scenario(state: State, image: str) -> Scenario:
    """The scenario whose target is the image's (its io.sglforge.target and -rocm labels)."""
    from sglforge.engine import images
    from sglforge.errors import ConfigError
    from sglforge.provenance import LABEL_ROCM, LABEL_TARGET
    from sglforge.scenario.file import find_scenario

    labels = images.require(image).labels
    target = labels.get(LABEL_TARGET)
    if not target:
        raise ConfigError(
            f"{image}: no io.sglforge.target label, so no scenario of its own",
            "pass --scenario NAME (sglforge smoke --scenario standin-cpu ...)",
        )
    rocm = labels.get(LABEL_ROCM)
    found = find_scenario(state.root, target, f"{target}-{rocm}" if rocm else None)
    return state.project.scenario_file(found)


def outputs_writable(junit: str | None) -> None:
    """The report files proven writable before the server loads (minutes on real hardware)."""
    if junit:
        check_output_file(junit, "--junit")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        check_output_file(os.environ["GITHUB_STEP_SUMMARY"], "$GITHUB_STEP_SUMMARY")


def _chosen(
    state: State,
    scenario: str | None,
    image: str | None,
    runtime: str | None,
    server_url: str | None,
) -> Scenario:
    """The scenario asked for (else the image's); a usage error when no image is given where
    one is needed (the docker runtime starts one)."""
    if scenario:
        chosen = state.project.scenario_named(scenario)
    elif image:
        return _target_scenario(state, image)
    else:
        raise click.UsageError("pass --scenario NAME (without --image no image names one)")
    if not image and not server_url and (runtime or chosen.runtime) == "docker":
        raise click.UsageError(
            "pass --image IMAGE, or --runtime process (a local python), or --server-url URL"
        )
    return chosen


def echo_report(report: SmokeReport, standin: bool) -> None:
    """The smoke report as text; a stand-in's run (accelerator = "none") is labelled in its
    header and verdict, as publish and inspect label it."""
    marker = " [STAND-IN: CPU, no GPU]" if standin else ""
    headers, rows = core.table_rows(report)
    digest = report.image_digest or "no digest"
    click.echo(f"{report.scenario} on {report.image} ({digest}){marker}")
    click.echo(table(headers, rows))
    if report.figures:
        click.echo("figures: " + ", ".join(f"{k}={v}" for k, v in report.figures.items()))
    for w in report.warnings:
        click.echo(f"warning: {w.describe()}" + (f" ({w.why})" if w.why else ""))
    if report.log_tail:
        click.echo(f"last {len(report.log_tail)} log lines:", err=True)
        for line in report.log_tail:
            click.echo(f"  | {line}", err=True)
    verdict = {"passed": "PASSED", "failed": "FAILED", "cannot-run": "CANNOT RUN HERE"}
    shown = verdict[report.verdict]
    if report.warnings:
        shown += f" with {report.warning_count} warning line(s)"
    passed = {"passed": True, "failed": False}.get(report.verdict)
    reason = f": {report.reason}" if report.reason else ""
    click.echo(colour.verdict(shown, passed) + marker + reason)
    if report.log_path:
        click.echo(f"server log: {report.log_path}")
    click.echo(f"reports: {report.report_dir}")


@main.command("smoke")
@click.option(
    "--image", help="Image to test (tag or ID); not needed with --runtime process or --server-url."
)
@scenario_option(
    "Scenario: a NAME of smoke/NAME.toml (standin-cpu) or a file. Default: the one "
    "whose target is the image's (as publish picks it)."
)
@click.option(
    "--model", type=click.Path(), help="Model folder on this host (overrides the scenario)."
)
@click.option("--port", type=click.IntRange(1, 65535), help="Server port (overrides the scenario).")
@click.option("--load-timeout", type=float, help="Seconds to wait for readiness (overrides).")
@env_option
@key_value_option("--label", "labels", "Extra container label (repeatable).")
@click.option("--log-dir", type=click.Path(file_okay=False), help="Where the log and reports go.")
@click.option("--junit", type=click.Path(dir_okay=False), help="Also write JUnit XML here.")
@runtime_options
@json_option
@pass_state
def smoke_cmd(
    state: State,
    image: str | None,
    scenario: str | None,
    model: str | None,
    port: int | None,
    load_timeout: float | None,
    envs: dict[str, str],
    labels: dict[str, str],
    log_dir: str | None,
    junit: str | None,
    runtime: str | None,
    python: str | None,
    server_url: str | None,
    as_json: bool,
) -> None:
    """Prove an image serves with speculative decoding: launch it, check it, remove it.

    Preflight (devices, GPU arch and count, model folder, free port) decides whether the run
    can happen here; then the container runs `python3 -m sglang.launch_server ARGS` as its
    command (no image ENTRYPOINT is relied on), readiness is polled while the container is
    watched (a crash is reported at once with its exit code and last log lines), and the
    scenario's checks run: output, arithmetic answers, speculative accept length, decode
    speed, log lines. A log pattern of severity "fail" fails the run; "warn" lines are
    counted and listed (table, JSON, JUnit, step summary) without failing it. The container
    is removed whatever happens; reports go to a new build/smoke/<scenario>-<time>-<run id>/.

    With --runtime process the launch runs as a local process under --python (a venv's
    python3, or a prefix such as `apptainer exec IMAGE.sif python3`), with the same readiness
    polling, log, crash detection, timeout and teardown (the whole process group); no Docker
    is needed. With --server-url the checks run against a server sglforge did not start: no
    boot time, log check or stays-up (the report lists them as not run).

    Exit code 0 when every check passed (warnings or not), 1 when some failed, 7 when it
    cannot run here.

    \b
    Examples:
      sglforge smoke --image sglforge/sglang:v0.5.14-rocm700-mi355x-q1a2b3c4d \\
          --scenario smoke/glm5-mxfp4-mtp-mi355x.toml --model /data/GLM-5.2-MXFP4
      sglforge smoke --image sglforge-standin/sglang:v0.5.14-rocm700-mi35x \\
          --scenario smoke/standin-cpu.toml --json --junit build/smoke.xml
      sglforge smoke --runtime process --python /opt/venv/bin/python3 \\
          --scenario my-h200.toml --env PYTHONPATH=/opt/site
      sglforge smoke --server-url http://10.0.0.5:30000 --scenario my-h200.toml
    """

    outputs_writable(junit)
    chosen = _chosen(state, scenario, image, runtime, server_url)
    req = SmokeRequest(
        scenario=chosen,
        model=Path(model) if model else None,
        port=port,
        log_dir=Path(log_dir) if log_dir else None,
        env=envs,
        labels=labels,
        load_timeout=load_timeout,
        runtime=runtime or chosen.runtime,
        python=parse_python(python, "--python") if python else (),
        server_url=server_url,
    )
    report = core.run_smoke(
        state.project,
        image or "",
        req,
        progress=lambda message: current().info(f"smoke: {message}"),
    )
    if junit:
        core.write_junit(report, Path(junit))
    core.append_step_summary(report)
    if as_json:
        hardware = {"hardware": "standin-cpu" if chosen.standin else "gpu"}
        print_json({**core.report_dict(report), **hardware}, ok=report.passed)
    else:
        echo_report(report, chosen.standin)
    sys.stdout.flush()
    codes = {"passed": EXIT_OK, "failed": EXIT_PROBLEMS}
    click.get_current_context().exit(codes.get(report.verdict, SmokeError.exit_code))
