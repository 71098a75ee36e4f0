"""``sglforge bench``: click code over :func:`sglforge.bench.runner.run_bench`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sglforge.bench import report as core_report
from sglforge.bench.runner import BenchProtocol, ensure_local, run_bench
from sglforge.cli.common import State, json_option, main, pass_state, print_json
from sglforge.cli.options import env_option, runtime_options, scenario_option
from sglforge.cli.smoke import outputs_writable
from sglforge.errors import EXIT_OK, EXIT_PROBLEMS
from sglforge.progress import current
from sglforge.reports import bench as bench_view
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
@click.option(
    "--calibrate",
    "calibrate",
    type=click.IntRange(2, 64),
    metavar="K",
    help="Measure this node instead: K boots of IMAGE (6 or more), each with the compared "
    "speed probe; writes the node's noise profile (boot-to-boot spread, intra-batch "
    "correlation, boot time) to the cache, where later comparisons find it.",
)
@click.option(
    "--noise-profile",
    "noise_profile",
    type=click.Path(dir_okay=False),
    help="The node's noise profile to plan and compare with (a --calibrate file from any "
    "node); default: the cache's for this scenario and hardware. With --calibrate: where "
    "to write it.",
)
@click.option(
    "--no-warmup",
    "no_warmup",
    is_flag=True,
    help="No discarded warm-up probe of the compared shape before the compared one (the "
    "report says so).",
)
@click.option(
    "--no-priming-boot",
    "no_priming",
    is_flag=True,
    help="No discarded first boot before a comparison's or a calibration's measured boots "
    "(the report says so; the first boot of a machine is not like the later ones).",
)
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
    calibrate: int | None,
    noise_profile: str | None,
    no_warmup: bool,
    no_priming: bool,
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
    records the tokens the server counted. Writes the table, the knee with its bracket, the
    speed at a fixed concurrency (after a discarded warm-up probe of that shape, unless
    --no-warmup), single-stream decode tok/s and accept length, chart.svg and bench.md beside
    report.json, and the node-minutes it spent and plans.

    With --against REF (an image, or REPO@sha256:...) the two boot in ABBA blocks, after one
    discarded priming boot (unless --no-priming-boot), and the per-request decode tok/s is
    compared on the boots' measured noise (--calibrate K: measure the node once): a drop
    below the tolerance at 95 % fails, a pass needs the lower bound above -max_mde, anything
    else fails as inconclusive. Stand-ins are labelled "standin-cpu".

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
        runtime=runtime or chosen.runtime,
        python=parse_python(python, "--python") if python else (),
        server_url=server_url,
    )
    protocol = BenchProtocol(
        not no_warmup, Path(noise_profile) if noise_profile else None, priming=not no_priming
    )
    if calibrate:
        _calibrate(state, image or "", req, calibrate, protocol, as_json)
        return
    progress = lambda message: say(f"bench: {message}")  # noqa: E731
    report = run_bench(state.project, image or "", req, against=against, progress=progress,
                       protocol=protocol)  # fmt: skip
    _emit(report, junit, as_json)
    click.get_current_context().exit(EXIT_OK if report.ok else EXIT_PROBLEMS)


def _emit(report: core_report.BenchReport, junit: str | None, as_json: bool) -> None:
    """The report on stdout (text or --json), bench.md and chart.svg beside its report.json,
    in the JUnit file and the CI step summary."""
    bench_view.write_outputs(report)
    if junit:
        bench_view.write_junit(report, Path(junit))
    bench_view.append_step_summary(report)
    if as_json:
        print_json(core_report.report_dict(report), ok=report.ok)
    else:
        for line in bench_view.text(report):
            click.echo(line)
    sys.stdout.flush()


def _calibrate(
    state: State,
    image: str,
    req: SmokeRequest,
    boots: int,
    protocol: BenchProtocol,
    as_json: bool,
) -> None:
    """``bench --calibrate K``: the node profile, written, and what it makes of the gate."""
    from sglforge.bench.cost import boots_a_side, gate_best_mde, require_passable
    from sglforge.bench.runner import run_calibration
    from sglforge.errors import ConfigError

    if req.server_url:
        raise click.UsageError("--calibrate boots the server K times: drop --server-url")
    say = current().info
    profile, path = run_calibration(
        state.project, image, req, boots=boots, protocol=protocol,
        progress=lambda m: say(f"bench: {m}"),
    )  # fmt: skip
    bench = req.scenario.bench
    assert bench is not None
    noise = profile.noise()
    try:
        require_passable(bench, req.scenario.path, noise)
        n = boots_a_side(bench, noise)
        verdict = (
            f"{n} boots a side see a {gate_best_mde(bench, n, noise):.1%} drop at best (a pass "
            f"rules out {bench.gate.max_mde:.1%})"
        )
    except ConfigError as exc:
        verdict = exc.message
    doc = {**profile.as_dict(), "path": str(path), "gate": verdict}
    if as_json:
        print_json(doc, ok=True)
    else:
        corr = profile.correlation
        click.echo(
            f"node profile {path}: {len(profile.boot_means)} boots of {image} on "
            f"{profile.hardware}: boot-to-boot sd {profile.boot_sd:.2%}, within a boot "
            f"{profile.within_sd or 0:.2%}, intra-batch correlation "
            f"{'-' if corr is None else f'{corr:.2f}'}, boot to ready "
            f"{', '.join(f'{s:g}' for s in profile.boot_seconds)} s"
        )
        click.echo(f"gate on this node: {verdict}")
