"""The bench gate: the scenario's ``[bench]`` paired with the last release of the target; a
significant regression beyond the tolerance fails unless accepted. Without a last release the
comparison is not evaluated, and the gate says why (never a silent ``baseline: null``)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sglforge.gates.result import BenchRecord, GateResult, failed, passed, skipped

if TYPE_CHECKING:
    from sglforge.candidate import Candidate

NAME = "bench"
# What a first release needs: this gate and publish's check before the build say it alike.
FIRST_RELEASE_HINT = (
    "pass --no-baseline REASON (the first release, say); in CI, run the workflow "
    "`sglforge init` wrote by hand (Run workflow) with its no_baseline input"
)


def check(c: Candidate) -> GateResult:
    """Bench the built image (against the last release its policy finds, when there is one)."""
    from sglforge.bench import report as bench_report
    from sglforge.bench.runner import run_bench
    from sglforge.errors import EXIT_PROBLEMS, SglforgeError

    sc, req = c.scenario, c.smoke
    if sc is None or req is None:
        return skipped(NAME, "--skip-smoke: nothing is benched")
    if sc.bench is None:
        return skipped(NAME, "the scenario has no [bench] table")
    policy = c.policy
    last = policy.baseline(c)
    against, unevaluated = last.image, last.why
    if against is None and policy.baseline_required and not policy.no_baseline:
        why = f"no bench comparison: {unevaluated}"
        return failed(
            NAME,
            why,
            f"bench: {why}; a publish compares with the last release, so nothing was pushed "
            f"and no tag moved\n  next: fix the registry or the last release, or "
            f"{FIRST_RELEASE_HINT}",
            EXIT_PROBLEMS,
        )
    if against is None:
        if policy.no_baseline:
            unevaluated = f"{unevaluated}; --no-baseline: {policy.no_baseline}"
        c.say(f"bench: no comparison ({unevaluated})")
    try:
        report = run_bench(
            c.project,
            c.build_result.image,
            req,
            against=against,
            no_baseline=unevaluated if against is None else "",
            progress=c.say,
            knee_prior=last.knee_prior if against else None,
        )
    except SglforgeError as exc:
        hint = f"\n  next: {exc.hint}" if exc.hint else ""
        return failed(
            NAME,
            exc.message,
            f"bench could not run: {exc.message}; nothing was pushed and no tag moved{hint}",
            exc.exit_code,
        )
    if (report.regressed or report.inconclusive) and policy.accept_regression:
        # A person decided: the waiver covers a drop and a comparison that could not
        # conclude alike (BenchReport.ok), and the record says so.
        report = replace(report, accepted_regression=policy.accept_regression)
    comparison = (
        {"evaluated": True, "against": against}
        if against
        else {"evaluated": False, "why": unevaluated}
    )
    figures = replace(bench_report.record_figures(report), comparison=comparison)
    record = BenchRecord(report, figures, unevaluated if against is None else "")
    compared = "" if against else f" (comparison not evaluated: {unevaluated})"
    if report.ok:
        return passed(NAME, f"passed{compared}", record)
    hint = bench_report.next_step(report)
    return failed(
        NAME,
        f"FAILED: {report.reason}",
        f"bench failed: {report.reason}; nothing was pushed and no tag moved\n  next: {hint}",
        EXIT_PROBLEMS,
        record,
    )
