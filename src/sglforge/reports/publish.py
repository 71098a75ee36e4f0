"""The reports of one publish: the ``--json`` document, the JUnit suite (a case per stage, and
per smoke check) and the Markdown step summary CI shows, each a view of the
:class:`~sglforge.publish.PublishResult` and the records of its gates."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglforge import formats
from sglforge.errors import SglforgeError
from sglforge.formats import FAILED, SKIPPED, Case, Suite
from sglforge.publish import STANDIN_HARDWARE, PublishResult, Step
from sglforge.reports import bench as bench_view
from sglforge.reports.bench import junit_figures
from sglforge.smoke.report import check_case

if TYPE_CHECKING:
    from sglforge.gates import BenchRecord, GateResult


def summary(result: PublishResult) -> dict[str, Any]:
    """The ``--json`` document (``pushed``, ``digest`` and ``smoke_passed`` always present)."""
    return {
        "target": result.target,
        "pushed": list(result.pushed),
        "digest": result.digest,
        "smoke_passed": result.smoke_passed,
        "tested": result.tested,
        "dry_run": result.dry_run,
        "skip_smoke": result.skip_smoke,
        "image": result.image,
        "immutable": result.immutable,
        "friendly": list(result.friendly),
        "registry": result.registry,
        "scenario": result.scenario,
        "build_reused": result.build_reused,
        "smoke": {
            "verdict": result.smoke_verdict,
            "figures": result.smoke_figures.as_dict(),
            "checks": [
                {"name": c.name, "passed": c.outcome, "detail": c.detail}
                for c in result.smoke_checks
            ],
        },
        "steps": [
            {"name": s.name, "ok": s.ok, "seconds": s.seconds, "detail": s.detail}
            for s in result.steps
        ],
        "gates": [g.to_dict() for g in result.gates],
        "smoke_reports": result.smoke_reports,
        "standin": result.standin,
        "hardware": STANDIN_HARDWARE if result.standin else "gpu",
        "bench": result.bench.figures.as_dict() if result.bench else result.bench_plan,
        "release_record": result.release_record,
        "changelog_written": result.changelog_written,
        "error": result.error,
        "run": result.run,
    }


def failure_summary(target: str, registry: str, error: SglforgeError) -> dict[str, Any]:
    """The ``--json`` document when publish stopped before it had a result."""
    return {
        "target": target,
        "registry": registry,
        "pushed": [],
        "digest": None,
        "smoke_passed": None,
        "error": str(error),
        "exit_code": error.exit_code,
    }


# The stages of a publish, in order: each is a JUnit case under this stable name whether it
# ran or not (a stage not reached is skipped), so CI can follow a stage across runs.
STAGES = (
    "prepare",
    "scan",
    "build",
    "coverage",
    "smoke",
    "bench",
    "push",
    "tag.version",
    "tag.latest",
    "record",
    "record-push",
)


def _fmt(value: object) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def junit_suite(result: PublishResult | None, target: str, error: str | None = None) -> Suite:
    """The publish as one JUnit suite: a case per stage (``push``) and per smoke check."""
    if result is None:
        cases = [Case("prepare", FAILED, error or "publish failed")]
        not_reached = "not reached: publish stopped before it began"
        cases += [Case(stage, SKIPPED, not_reached) for stage in STAGES[1:]]
        return Suite(f"sglforge publish {target}", f"sglforge.publish.{target}", tuple(cases))
    ran: dict[str, Step] = {}
    tags = iter(("tag.latest" if ":latest-" in r else "tag.version") for r in result.friendly)
    for done in result.steps:
        # Tag steps come in the order of ``friendly``; a failed move is the next one.
        name = next(tags, "tag.version") if done.name == "tag" else done.name
        ran.setdefault(name, done)
    stopped = next((s.name for s in result.steps if s.ok is False), None)
    cases = [Case("prepare")]
    for stage in STAGES[1:]:
        step = ran.get(stage)
        if step is None:
            why = (
                "not moved: --skip-smoke pushes the immutable tag only"
                if stage.startswith("tag.") and result.skip_smoke
                else "dry run: planned, not done"
                if result.dry_run
                else f"not reached: {stopped} failed"
                if stopped
                else "not run"
            )
            cases.append(Case(stage, SKIPPED, why))
        elif step.ok is None:
            cases.append(Case(stage, SKIPPED, step.detail or "not run", seconds=step.seconds))
        elif step.ok:
            cases.append(Case(stage, seconds=step.seconds, output=_case_output(result, step)))
        else:
            message = (result.error or step.detail) if stage == "smoke" else step.detail
            out = _case_output(result, step)
            cases.append(Case(stage, FAILED, message, seconds=step.seconds, output=out))
        if stage == "smoke":
            cases += [check_case(check) for check in result.smoke_checks]
    if result.error and not any(c.outcome == FAILED for c in cases):
        cases[0] = Case("prepare", FAILED, result.error)
    props: dict[str, object] = {
        "target": result.target,
        "registry": result.registry,
        "image": result.image,
        "immutable": result.immutable,
        "digest": result.digest,
        "scenario": result.scenario,
        "smoke_verdict": result.smoke_verdict or None,
        "tested": result.tested,
        "dry_run": result.dry_run,
    }
    props.update({f"figure.{k}": v for k, v in sorted(result.smoke_figures.items())})
    if result.bench:
        props.update(junit_figures(result.bench.figures))
    return Suite(
        f"sglforge publish {result.target}",
        f"sglforge.publish.{result.target}",
        tuple(cases),
        props,
        sum(s.seconds for s in result.steps),
    )


def _case_output(result: PublishResult, step: Step) -> str:
    """A stage case's system-out: its detail, and for the bench its table and verdict."""
    if step.name == "bench" and bench_text(result):
        return "\n".join((step.detail, *bench_text(result)))
    return step.detail


def junit_xml(result: PublishResult | None, target: str, error: str | None = None) -> str:
    """JUnit XML (the schema Jenkins' xUnit plugin validates) of one publish."""
    return formats.junit_xml([junit_suite(result, target, error)], "sglforge publish")


def markdown(result: PublishResult | None, target: str, error: str | None = None) -> str:
    """The GitHub step summary for one target."""
    if result is None:
        head = f"## sglforge publish {formats.md_text(target)}: failed"
        return "\n".join([head, "", *formats.md_block(error)]) + "\n"
    state = (
        "dry run"
        if result.dry_run
        else "published from a STAND-IN run (--allow-standin; not a GPU run)"
        if result.ok and result.standin
        else "published"
        if result.ok and result.tested
        else "published UNTESTED (--skip-smoke)"
        if result.ok
        else "failed, nothing moved"
        if not result.pushed
        else "failed after a partial push"
    )
    # every free text through formats.md_text/md_code/md_block (issue 42, F16)
    lines = [f"## sglforge publish {formats.md_text(result.target)}: {state}", ""]
    if result.error:
        lines += [*formats.md_block(result.error), ""]
    scenario = f" ({formats.md_text(result.scenario)})" if result.scenario else ""
    lines += [
        f"- image: {formats.md_code(result.image)}",
        f"- digest: {formats.md_code(result.digest or '-')}",
        f"- smoke: {_smoke_word(result)}{scenario}",
    ]
    lines += [f"- pushed: {formats.md_code(ref)}" for ref in result.pushed]
    lines += [
        f"- gate {formats.md_text(g.name)}: {formats.md_text(_gate_word(g))}" for g in result.gates
    ]
    # the smoke's own summary holds its checks and figures: a table written once, there
    for part in (smoke_markdown(result), bench_markdown(result)):
        lines += ["", part.rstrip()] if part else []
    return "\n".join(lines) + "\n"


def smoke_markdown(result: PublishResult) -> str:
    """The smoke runner's own summary (values and thresholds); "" when no smoke ran."""
    from sglforge.smoke import markdown as smoke_md

    return smoke_md(result.smoke) if result.smoke is not None else ""


def _unevaluated(record: BenchRecord) -> tuple[str, ...]:
    if not record.unevaluated:
        return ()
    return (f"comparison against the last release: not evaluated ({record.unevaluated})",)


def bench_text(result: PublishResult) -> tuple[str, ...]:
    """The bench's table and verdict for people (none when no bench ran)."""
    record = result.bench
    if record is None:
        return ()
    return (*bench_view.text(record.report), *_unevaluated(record))


def bench_markdown(result: PublishResult) -> str:
    """The bench's step summary ("" when no bench ran)."""
    record = result.bench
    if record is None:
        return ""
    notes = "".join(f"\n{line}\n" for line in _unevaluated(record))
    return bench_view.markdown(record.report) + notes


def _gate_word(gate: GateResult) -> str:
    if not gate.ran:
        return f"skipped ({gate.why})"
    word = "passed" if gate.ok else "FAILED"
    # a detail that only repeats the word is not said twice ("passed: passed", F19)
    return word + (
        f": {gate.detail}" if gate.detail and gate.detail.lower() != word.lower() else ""
    )


def _smoke_word(result: PublishResult) -> str:
    if result.skip_smoke:
        return "skipped (untested)"
    if result.smoke_passed is None:
        return "not run"
    word = "passed" if result.smoke_passed else "FAILED"
    return word + (" on a STAND-IN (standin-cpu, not a GPU run)" if result.standin else "")
