"""What a gate found: :class:`GateResult` (ran or skipped and why, pass or fail, its record),
shared by the gate modules and :func:`sglforge.gates.run`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from sglforge.figures import BenchFigures, SmokeFigures

if TYPE_CHECKING:
    from sglforge.bench.report import BenchReport
    from sglforge.coverage import Gate
    from sglforge.errors import SglforgeError
    from sglforge.scan import ScanReport
    from sglforge.scan.waivers import Refused, Waiver
    from sglforge.smoke.report import SmokeReport

# What a gate that ran keeps: the scan's report, the coverage gate, the smoke report, the bench.
Record = Union["ScanRecord", "Gate", "SmokeReport", "BenchRecord", None]


@dataclass(frozen=True)
class ScanRecord:
    """The scan gate's record: the report, the waivers the queue's ``Fixes-Scan:`` trailers
    gave, and the trailers refused (with why), for the outputs and the release record."""

    report: ScanReport
    waived: tuple[Waiver, ...] = ()
    refused: tuple[Refused, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """The release record's ``scan`` (and the JSON outputs' ``waived``/``refused``)."""
        from sglforge.scan.waivers import record, refused_record

        return {"waived": record(self.waived), "refused": refused_record(self.refused)}


@dataclass(frozen=True)
class BenchRecord:
    """The bench gate's record: the report, the figures a release keeps, and why there was no
    comparison against the last release ("" when there was one)."""

    report: BenchReport
    figures: BenchFigures
    unevaluated: str = ""


@dataclass(frozen=True)
class GateResult:
    """One gate's outcome: ``ran`` False with ``why`` when it was skipped; ``ok`` None then."""

    name: str
    ran: bool
    ok: bool | None
    detail: str  # one line for people: what it found, or why it did not run
    record: Record = None
    error: str = ""  # why the image may not be published (a failed gate)
    exit_code: int = 0
    raised: SglforgeError | None = None  # a failure the caller raises (the scan's ScanBlocked)
    seconds: float = 0.0
    why: str = ""  # a skipped gate: why it did not run

    @property
    def skipped(self) -> bool:
        return not self.ran

    def to_dict(self) -> dict[str, object]:
        """The JSON form (the record stays out: each output has its own view of it)."""
        return {
            "name": self.name,
            "ran": self.ran,
            "ok": self.ok,
            "detail": self.detail,
            "why": self.why or None,
            "error": self.error or None,
            # the scan's waivers (issue 31): each finding waived and its patch, each refusal
            **(self.record.to_dict() if isinstance(self.record, ScanRecord) else {}),
        }


def skipped(name: str, why: str) -> GateResult:
    return GateResult(name, False, None, f"skipped: {why}", why=why)


def passed(name: str, detail: str, record: Record = None) -> GateResult:
    return GateResult(name, True, True, detail, record)


def failed(
    name: str,
    detail: str,
    error: str,
    exit_code: int,
    record: Record = None,
    raised: SglforgeError | None = None,
) -> GateResult:
    return GateResult(name, True, False, detail, record, error, exit_code, raised)


def smoke_report(gates: Sequence[GateResult]) -> SmokeReport | None:
    """The smoke gate's report among ``gates`` (None: the smoke did not run)."""
    from sglforge.smoke.report import SmokeReport

    return next((g.record for g in gates if isinstance(g.record, SmokeReport)), None)


def smoke_figures(gates: Sequence[GateResult]) -> SmokeFigures:
    """The smoke's figures among ``gates`` (empty: the smoke did not run)."""
    report = smoke_report(gates)
    return SmokeFigures.of(report.figures) if report is not None else SmokeFigures()


def bench_record(gates: Sequence[GateResult]) -> BenchRecord | None:
    """The bench gate's record among ``gates`` (None: no bench ran)."""
    return next((g.record for g in gates if isinstance(g.record, BenchRecord)), None)
