"""``sglforge publish``: click code over ``sglforge.publish.publish``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sglforge.cli.common import (
    State,
    error_document,
    json_option,
    main,
    pass_state,
    print_json,
    table,
)
from sglforge.cli.options import (
    base_image_option,
    label_option,
    mode_option,
    offline_option,
    publish_options,
    registry_option,
    scenario_option,
    target_option,
    upstream_option,
)
from sglforge.errors import SglforgeError, split_hint
from sglforge.progress import current
from sglforge.publish import PublishResult, candidate_for, publish
from sglforge.reports import bench as bench_view
from sglforge.reports.publish import bench_text, failure_summary, junit_xml, markdown, summary
from sglforge.requests import BuildRequest, PublishRequest, SmokeRequest
from sglforge.util import atomic_write, check_output_file, printable

if TYPE_CHECKING:
    from sglforge.engine.reference import Registry


@main.command("publish")
@target_option
@registry_option(required=True)
@click.option("--model", metavar="PATH", help="Model folder for the smoke run.")
@click.option(
    "--port", type=click.IntRange(1, 65535), help="Smoke server port (overrides the scenario)."
)
@scenario_option(
    "Smoke scenario: NAME (smoke/NAME.toml) or a file (default: the smoke/*.toml whose "
    "target matches)."
)
@click.option(
    "--skip-smoke",
    is_flag=True,
    help="Emergency only: push the immutable tag without a smoke run; recorded as untested. "
    "Friendly tags do not move.",
)
@click.option(
    "--allow-standin",
    is_flag=True,
    envvar="SGLFORGE_ALLOW_STANDIN",
    help='Publish a GPU target with a stand-in scenario (accelerator = "none"); the record, '
    "inspect, CHANGELOG and labels then say it was a stand-in. [env: SGLFORGE_ALLOW_STANDIN]",
)
@publish_options
@mode_option
@base_image_option
@upstream_option
@label_option
@offline_option
@click.option("--dry-run", is_flag=True, help="Show the plan: what would be built, smoked, pushed.")
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a JUnit XML report here (one case per stage and smoke check).",
)
@click.option(
    "--summary",
    "summary_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append a Markdown summary here (CI: $GITHUB_STEP_SUMMARY).",
)
@click.option(
    "--changelog",
    type=click.Path(dir_okay=False, path_type=Path),
    help="CHANGELOG file that gets the release entry (default: CHANGELOG.md in the root).",
)
@json_option
@pass_state
def publish_cmd(
    state: State,
    target: str,
    registry: Registry,
    model: str | None,
    port: int | None,
    scenario: str | None,
    skip_smoke: bool,
    allow_standin: bool,
    accept_regression: str | None,
    no_baseline: str | None,
    mode: str,
    base_image: str | None,
    upstream: str | None,
    labels: dict[str, str],
    offline: bool,
    retries: int,
    backoff: float,
    dry_run: bool,
    junit: Path | None,
    summary_path: Path | None,
    changelog: Path | None,
    as_json: bool,
) -> None:
    """Build, smoke-test and push an image; friendly tags move only after all passed.

    Builds the target's image (or reuses it when the inputs are unchanged), runs the
    target's smoke scenario, and only if it passed pushes the immutable tag, checks that
    the registry serves the local digest, then moves the friendly tags
    (v0.5.14-rocm700-mi355x, latest-mi355x). When the scenario has a [bench] table the
    serving benchmark runs after the smoke, paired with the previous release of the target
    (its *-release record in the registry): a significant drop of the knee throughput or
    single-stream tok/s beyond the scenario's tolerance fails (exit 1, nothing pushed) unless
    --accept-regression REASON. A stand-in scenario (accelerator = "none") never counts as a
    GPU target's smoke: refused unless --allow-standin. Writes a release record under
    build/releases/ and one CHANGELOG.md entry per release. Credentials come from
    SGLFORGE_REGISTRY_USER/SGLFORGE_REGISTRY_PASSWORD or the Docker config.

    \b
    Examples:
      sglforge publish --registry 127.0.0.1:5000 --dry-run
      sglforge publish --target mi355x --registry ghcr.io/your-org --model /models/glm
      sglforge publish --registry 127.0.0.1:5000 --json --junit build/reports/p.xml
    """

    # Outputs are proven writable before an hour of build and smoke, not after it.
    for path, option in (
        (junit, "--junit"),
        (summary_path, "--summary"),
        (changelog, "--changelog"),
    ):
        if path is not None:
            check_output_file(path, option)
    try:
        project = state.project
        build = BuildRequest(
            target=project.target(target),
            mode=mode,
            base_image=base_image,
            labels=labels,
            offline=offline,
            dry_run=dry_run,
        )
        smoke = None
        if not skip_smoke:
            chosen = (
                project.scenario_named(scenario) if scenario else project.scenario_for(build.target)
            )
            smoke = SmokeRequest(
                scenario=chosen, model=Path(model) if model else None, port=port, labels=labels
            )
        req = PublishRequest(
            build=build,
            registry=registry,
            smoke=smoke,
            allow_standin=allow_standin,
            accept_regression=accept_regression,
            no_baseline=no_baseline,
            attempts=retries + 1,
            backoff=backoff,
            changelog=changelog,
        )
        with candidate_for(project, req, current()) as cand:
            result = publish(project, req, cand, current())
    except SglforgeError as exc:
        # Reports still get written: CI shows why nothing was published.
        _reports(None, target, junit, summary_path, str(exc))
        if as_json:
            doc = failure_summary(target, registry.prefix, exc)
            error_document(doc, exc.exit_code, exc.message, exc.hint)
        raise
    _reports(result, target, junit, summary_path, result.error)
    if as_json:
        doc = summary(result)
        doc["run_by_digest"] = by_digest(result)
        if result.error:
            # the hint in `hint`, as every other error document has it (U11)
            error_document(doc, result.exit_code or 1, *split_hint(result.error))
        else:
            print_json(doc)
        # a CI log shows stderr only: it states the outcome too (U12)
        for line in outcome_lines(result):
            click.echo(line, err=True)
    else:
        click.echo(printable(render(result), keep="\n"))
    if result.error:
        click.echo(f"error: {printable(result.error, keep=chr(10))}", err=True)
        raise click.exceptions.Exit(result.exit_code or 1)


def _reports(
    result: PublishResult | None,
    target: str,
    junit: Path | None,
    summary_path: Path | None,
    error: str | None,
) -> None:
    if result is not None and result.bench is not None:
        bench_view.write_outputs(result.bench.report)  # beside the bench's report.json
    if junit:
        atomic_write(junit, junit_xml(result, target, error))
    if summary_path:
        # GitHub's step summary file is appended to by every step.
        summary_path.parent.mkdir(parents=True, exist_ok=True)
        with open(summary_path, "a") as fh:
            fh.write(markdown(result, target, error))


def by_digest(r: PublishResult) -> str | None:
    """The pull-and-run line with the pushed digest instead of a tag (``repo@sha256:...``)."""
    if not (r.run and r.digest and r.digest.startswith("sha256:")):
        return None
    repo = _repository(r.immutable)
    for ref in (*r.friendly, r.immutable):
        if ref in r.run:
            return r.run.replace(ref, f"{repo}@{r.digest}", 1)
    return None


def _repository(ref: str) -> str:
    """``host:port/ns/repo`` of ``host:port/ns/repo:tag`` (a port's colon is no tag)."""
    head, sep, tail = ref.rpartition(":")
    return head if sep and "/" not in tail else ref


def outcome_lines(r: PublishResult) -> list[str]:
    """The verdict of each gate and of the publish, one line each, for a log that has only
    stderr (``--json`` puts the document on stdout)."""
    if r.dry_run:
        return [f"publish {r.target}: dry run, nothing done"]
    lines = [f"gate {g.name}: {g.detail}" for g in r.gates]
    lines += [
        f"bench {line}"
        for line in bench_text(r)
        if line.startswith(("comparison", "vs baseline:", "regression accepted:"))
        # the same "not evaluated" a second time, as the summary's note has it
        and not line.startswith("comparison against the last release:")
    ]
    if r.error:
        lines.append(f"publish {r.target}: NOT published (exit {r.exit_code or 1})")
    elif r.digest:
        moved = ", ".join(ref.rpartition(":")[2] for ref in r.pushed if ref != r.immutable)
        lines.append(
            f"publish {r.target}: published {r.immutable}@{r.digest}"
            + (f"; moved {moved}" if moved else "; no friendly tag moved")
        )
    return lines


def render(r: PublishResult) -> str:
    """The outcome (or the plan) for people."""
    lines = []
    if r.dry_run:
        lines.append(f"plan for {r.target} -> {r.registry} (dry run; nothing done)")
        lines.append(f"  image     {r.image}" + ("  (up to date)" if r.build_reused else ""))
        # every gate a real run takes, with what it will use (the bench: its node-minutes,
        # and whether the registry has a last release to compare with)
        gates = [s for s in r.steps if s.name not in ("build", "push", "tag")]
        for s in gates:
            lines.append(f"  {s.name:<9} {s.detail}")
        if not gates:
            smoke = "skipped (--skip-smoke; recorded untested)" if r.skip_smoke else r.scenario
            lines.append(f"  smoke     {smoke}")
        lines.append(f"  push      {r.immutable}")
        for ref in r.friendly:
            lines.append(f"  then tag  {ref}")
        return "\n".join(lines)
    rows = [
        (
            s.name,
            {True: "ok", False: "FAILED", None: "skipped"}[s.ok],
            f"{s.seconds:.1f}s",
            s.detail,
        )
        for s in r.steps
    ]
    lines.append(table(["step", "result", "time", "detail"], rows))
    if r.smoke is not None and r.smoke_checks and r.smoke_passed is not True:
        # what `sglforge smoke` prints: each check with its value and threshold (one table)
        from sglforge.smoke.report import table_rows

        lines += ["", table(*table_rows(r.smoke))]
    if r.smoke_figures:
        lines.append("")
        lines.append(
            table(["smoke figure", "value"], [(k, v) for k, v in sorted(r.smoke_figures.items())])
        )
    if r.pushed:
        lines.append("")
        lines += [f"pushed  {ref}" for ref in r.pushed]
        lines.append(f"digest  {r.digest}")
    if r.ok and r.standin:
        ran = "smoke and bench" if any(g.name == "bench" and g.ran for g in r.gates) else "smoke"
        lines.append(f"STAND-IN: the {ran} ran on the CPU stand-in (--allow-standin), no GPU")
    elif r.ok and not r.tested:
        lines.append("UNTESTED: published with --skip-smoke; friendly tags were not moved")
    if bench_text(r):
        lines += ["", *bench_text(r)]
    if r.run:
        pinned = by_digest(r)
        if pinned:
            lines += ["", "pull and run (by digest: a tag moves later):", f"  {pinned}"]
        else:
            lines += ["", "pull and run:", f"  {r.run}"]
    if r.release_record:
        note = "entry added" if r.changelog_written else "entry already present"
        lines.append(f"record  {r.release_record} (CHANGELOG.md: {note})")
    return "\n".join(lines)
