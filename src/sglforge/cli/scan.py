"""``sglforge scan``: click code over :func:`sglforge.scan.run_scan`."""

from __future__ import annotations

from pathlib import Path

import click

from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.cli.complete import complete_tags
from sglforge.cli.options import scenario_option, upstream_option
from sglforge.errors import EXIT_OK, EXIT_PROBLEMS
from sglforge.progress import current


@main.command("scan")
@click.option(
    "--model",
    "model",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Model folder holding config.json (its quantization_config is read).",
)
@click.option(
    "--ref", shell_complete=complete_tags, help="Upstream ref to scan (default: the pin)."
)
@click.option("--no-queue", is_flag=True, help="Scan the release as published, no patches.")
@scenario_option(
    "Smoke scenario (NAME or file) whose launch flags decide which kernels and layers are in play."
)
@upstream_option
@json_option
@pass_state
def scan_cmd(
    st: State,
    model: Path,
    ref: str | None,
    no_queue: bool,
    scenario: str | None,
    upstream: str | None,
    as_json: bool,
) -> None:
    """Find a launch's blockers before renting a GPU: CUDA-only JIT kernels, Quark excludes.

    Reads upstream's tree at the pin (or --ref) with the queue applied (unless --no-queue),
    the model's config.json and the scenario's launch flags. Kinds: cuda-only-jit (a JIT
    kernel source including a CUDA-only header outside a ROCm guard; a fail when the launch
    makes sglang compile it), quant-exclude-unmatched (a Quark exclude entry or
    layer_quant_config key matching no module sglang builds, or a module built quantized whose
    checkpoint tensors are excluded), fused-shared-expert-dtype (a bf16 shared expert fused
    into quantized routed experts), config-read (a warn: config.json was not read by the
    transformers the release pins). Exit 1 when any finding is a fail.

    \b
    Examples:
      sglforge scan --model /data/GLM-5.2-MXFP4 --scenario smoke/glm5-mxfp4-mtp-mi355x.toml
      sglforge scan --model /data/GLM-5.2-MXFP4 --ref v0.5.16 --no-queue --json
    """
    from sglforge import scan as core

    project = st.project
    current().info(f"scan: {model} at {ref or 'the pin'}" + (" (no queue)" if no_queue else ""))
    parsed = project.scenario_named(scenario) if scenario else None
    report = core.run_scan(project, model, ref=ref, queue=not no_queue, scenario=parsed)
    if as_json:
        print_json(
            {
                "ok": report.ok,
                "ref": report.ref,
                "commit": report.commit,
                "queue": list(report.queue),
                "scenario": report.scenario,
                "environment": report.environment.to_dict() if report.environment else None,
                "findings": [
                    {
                        "kind": f.kind,
                        "severity": f.severity,
                        "file": f.file,
                        "line": f.line,
                        "entry": f.entry,
                        "detail": f.detail,
                        "hint": f.hint,
                    }
                    for f in report.findings
                ],
            },
            ok=report.ok,
        )
    else:
        from sglforge.scan.text import scan_text

        queue = ", ".join(report.queue) if report.queue else "no queue"
        click.echo(f"{report.ref} ({report.commit[:12]}), {queue}; model {report.model}")
        if report.environment is not None:
            click.echo(f"environment: {report.environment.describe()}")
        shown = scan_text(report.findings, each=st.verbosity > 0)
        if shown.rows:
            click.echo(table(("severity", "kind", "where", "detail"), shown.rows))
        for h in shown.hints:
            click.echo(f"next: {h}")
        click.echo(shown.footer)
    click.get_current_context().exit(EXIT_OK if report.ok else EXIT_PROBLEMS)
