"""``sglforge bench``: click code over :func:`sglforge.bench.runner.run_bench`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sglforge.bench import report as core_report
from sglforge.bench.runner import ensure_local, run_bench
from sglforge.cli.common import State, json_option, main, pass_state, print_json
from sglforge.cli.options import env_option, runtime_options, scenario_option
from sglforge.cli.smoke import outputs_writable
from sglforge.errors import EXIT_OK, EXIT_PROBLEMS
from sglforge.progress import current
from sglforge.requests import SmokeRequest
from sglforge.smoke.runtime import parse_python


@main.command("bench")
@click.option(
    "--image",
    help="Image to benchmark (tag or ID); not needed with --runtime process.",
)
@scenario_option(
    "Scenario with a [bench] table: NAME (smoke/NAME.toml) or a file, e.g. standin-cpu.",
    required=True,
)
@click.option(
    "--against",
    "against",
    metavar="REF",
    help="The last release's image (REPO:TAG or REPO@sha256:...): boot it alternately with "
    "IMAGE (ABBA) and compare.",
)
@click.option(
    "--model", type=click.Path(), help="Model folder on this host (overrides the scenario)."
)
@click.option("--port", type=click.IntRange(1, 65535), help="Server port (overrides the scenario).")
@env_option
@click.option(
    "--report-dir", type=click.Path(file_okay=False), help="Where the JSONL, table and chart go."
)
@click.option("--junit", type=click.Path(dir_okay=False), help="Also write JUnit XML here.")
@runtime_options
@json_option
@pass_state
def bench_cmd(
    state: State,
    image: str | None,
    scenario: str,
    against: str | None,
    model: str | None,
    port: int | None,
    envs: dict[str, str],
    report_dir: str | None,
    junit: str | None,
    runtime: str | None,
    python: str | None,
    server_url: str | None,
    as_json: bool,
) -> None:
    """Measure serving performance the case study's way, with the image's own client.

    Launches the server as `sglforge smoke` does (plus --enable-metrics) and runs
    `python3 -m sglang.bench_serving` from inside the image. The knee is searched (the
    scenario's request rates or [bench.search], then bisections), each probe passing when all
    requests are served and a 95 % upper bound of its TTFT p95 is within the limit; every point
    records the tokens the server counted (refused 2 % off the declared input, or far from the
    declared prefix-cache hit). Writes the table (sustained RPS, output tok/s per node, TTFT
    p50/p95, success; total in+out labelled as total), the knee with its bracket, the speed at
    a fixed concurrency, single-stream decode tok/s and accept length (text prompts through the
    chat template), a chart (chart.svg) and bench.md beside report.json, and the node-minutes
    it spent and plans.

    With --against REF (a local image, REPO:TAG, or REPO@sha256:... pulled from its registry)
    baseline and candidate boot alternately in ABBA blocks, `repeats` boots each, and each
    request's decode tok/s at the fixed concurrency (and the single stream's) is compared: a
    drop whose one-sided 95 % bound is below the tolerance fails; a comparison that cannot
    conclude fails too. Without --against the output says no comparison ran. A scenario with
    accelerator = "none" is a stand-in: its figures are labelled "standin-cpu", never a GPU run.

    --runtime process runs the server as a local process and the client as `WORDS -m
    sglang.bench_serving` under --python (see `sglforge smoke --help`): no Docker. --server-url
    measures a server sglforge did not start: no boot time, no --against; the report says so.

    Exit code 0 when a knee was found and nothing regressed, 1 otherwise, 7 when it cannot run.

    \b
    Examples:
      sglforge bench --image sglforge/sglang:v0.5.14-rocm700-mi355x-q1a2b3c4d \\
          --scenario smoke/glm5-mxfp4-mtp-tp4dp2-mi355x.toml --model /data/GLM-5.2-MXFP4 \\
          --against registry.example/sglforge/sglang:v0.5.14-rocm700-mi355x
      sglforge bench --image sglforge-standin/sglang:v0.5.14-rocm700-mi35x-bench \\
          --scenario smoke/standin-cpu.toml --json
      sglforge bench --runtime process --python /opt/venv/bin/python3 \\
          --scenario my-h200.toml --env PYTHONPATH=/opt/site
    """
    outputs_writable(junit)
    say = current().info
    chosen = state.project.scenario_named(scenario)
    if not image and (runtime or chosen.runtime) == "docker":
        raise click.UsageError("pass --image IMAGE, or --runtime process (a local python)")
    if against and (runtime or chosen.runtime) == "docker" and not server_url:
        against = ensure_local(against, lambda m: say(f"bench: {m}"))
    req = SmokeRequest(
        scenario=chosen,
        model=Path(model) if model else None,
        port=port,
        log_dir=Path(report_dir) if report_dir else None,
        env=envs,
        runtime=runtime,
        python=parse_python(python, "--python") if python else (),
        server_url=server_url,
    )
    report = run_bench(
        state.root,
        image or "",
        req,
        against=against,
        progress=lambda message: say(f"bench: {message}"),
    )
    _emit(report, junit, as_json)
    click.get_current_context().exit(EXIT_OK if report.ok else EXIT_PROBLEMS)


def _emit(report: core_report.BenchReport, junit: str | None, as_json: bool) -> None:
    """The report on stdout (text or --json), in the JUnit file and the CI step summary."""
    if junit:
        core_report.write_junit(report, Path(junit))
    core_report.append_step_summary(report)
    if as_json:
        print_json(core_report.report_dict(report), ok=report.ok)
    else:
        for line in core_report.text(report):
            click.echo(line)
    sys.stdout.flush()
