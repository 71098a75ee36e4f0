"""Gate results as a run leaves them, for tests of the outputs that read them (issue 44: the
gates' records are the one carrier of what a publish or an upgrade found)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglforge.gates import BenchRecord, GateResult, failed, passed
from sglforge.smoke.report import Check, SmokeReport


def smoke_gate(
    ok: bool,
    checks: tuple[Check, ...] = (),
    figures: Mapping[str, Any] | None = None,
    verdict: str = "",
    report_dir: Path | None = None,
) -> GateResult:
    """The smoke gate with its report: ``ok`` passed, else failed (``verdict`` failed unless
    given, say ``cannot-run``)."""
    verdict = verdict or ("passed" if ok else "failed")
    report = SmokeReport(
        ok, verdict, checks, "img", None, None, "x", Path("smoke/x.toml"), dict(figures or {}),
        None, report_dir,
    )  # fmt: skip
    if ok:
        return passed("smoke", verdict, report)
    return failed("smoke", verdict, f"smoke {verdict}", 1, report)


def bench_gate(
    report: Any, unevaluated: str = "", ok: bool = True, figures: Mapping[str, Any] | None = None
) -> GateResult:
    """The bench gate with ``report`` (a BenchReport) and the figures a release keeps (those
    of ``report``, else ``figures``: a record's JSON form)."""
    from sglforge.bench.report import record_figures
    from sglforge.figures import BenchFigures

    kept = BenchFigures.from_dict(figures) if figures is not None else record_figures(report)
    record = BenchRecord(report, kept, unevaluated)
    if ok:
        return passed("bench", "passed", record)
    return failed("bench", "FAILED", "bench failed", 1, record)
