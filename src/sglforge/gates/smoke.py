"""The smoke gate: the scenario served from the candidate image on this host's GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglforge.gates.result import GateResult, failed, passed, skipped

if TYPE_CHECKING:
    from sglforge.candidate import Candidate

NAME = "smoke"


def check(c: Candidate) -> GateResult:
    """Run the smoke request on ``c.image`` with the candidate's GPU facts (probed once)."""
    from sglforge.errors import EXIT_PROBLEMS, EXIT_SMOKE
    from sglforge.smoke import run_smoke

    sc, req = c.scenario, c.smoke
    if sc is None or req is None:
        return skipped(NAME, "--skip-smoke: the release is recorded as untested")
    c.say(f"smoke {c.image} with {sc.path}")
    report = run_smoke(c.project, c.image, req, progress=c.say, gpus=c.host.gpus)
    if report.passed:
        return passed(NAME, report.verdict, report)
    bad = [check.name for check in report.checks if check.outcome is False]
    why = report.reason or (f"failed checks: {', '.join(bad)}" if bad else report.verdict)
    # what each failed check found, as `sglforge smoke` shows it: a preflight's "something
    # listens on 127.0.0.1:30123; pass --port" reaches publish and upgrade too (U13)
    details = "; ".join(c.detail for c in report.failed_checks if c.detail)
    if details and details not in why:
        why = f"{why} ({details})"
    next_step = (
        f"\n  next: read the smoke reports in {report.report_dir}" if report.report_dir else ""
    )
    return failed(
        NAME,
        report.verdict,
        f"smoke {report.verdict}: {sc.name} on {c.image}: {why}; nothing was pushed and no "
        f"tag moved{next_step}",
        EXIT_SMOKE if report.verdict == "cannot-run" else EXIT_PROBLEMS,
        report,
    )
