"""What an upgrade found: each target's outcome and the whole result, the data that
:mod:`sglforge.upgrade` returns and the reports (:mod:`sglforge.reports.upgrade`, the JSON
form) read; the one home of that contract, so the flow and its report need not import each
other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sglforge.figures import BenchFigures, SmokeFigures
from sglforge.gates.result import GateResult, bench_record, smoke_figures, smoke_report

if TYPE_CHECKING:
    from sglforge.patches.refresh import PatchOutcome


@dataclass(frozen=True)
class TargetOutcome:
    target: str
    image: str | None = None
    build_mode: str | None = None
    up_to_date: bool | None = None
    build_seconds: float | None = None
    changed_files: tuple[str, ...] = ()
    published: tuple[str, ...] = ()
    error: str = ""
    # (config item, status at this target's base): "upstreamed" (the base's aiter carries
    # every row with the same kernel choice: retired) or "installed"
    configs: tuple[tuple[str, str], ...] = ()
    # every gate with what it found or why it was skipped: the one carrier of what the gates
    # found (the smoke and bench properties read it)
    gates: tuple[GateResult, ...] = ()

    @property
    def smoke_passed(self) -> bool | None:
        report = smoke_report(self.gates)
        return None if report is None else report.passed

    @property
    def smoke_verdict(self) -> str:
        report = smoke_report(self.gates)
        return "" if report is None else report.verdict

    @property
    def smoke_figures(self) -> SmokeFigures:
        return smoke_figures(self.gates)

    @property
    def bench(self) -> BenchFigures | None:
        """The bench's figures with the delta against the last release (publish runs it)."""
        record = bench_record(self.gates)
        return None if record is None else record.figures

    def to_dict(self) -> dict[str, object]:
        """The JSON form (a target of the upgrade report)."""
        return {
            "target": self.target,
            "image": self.image,
            "build_mode": self.build_mode,
            "up_to_date": self.up_to_date,
            "build_seconds": self.build_seconds,
            "changed_files": list(self.changed_files),
            "smoke_passed": self.smoke_passed,
            "smoke_verdict": self.smoke_verdict,
            "smoke_figures": self.smoke_figures.as_dict(),
            "bench": None if self.bench is None else self.bench.as_dict(),
            "published": list(self.published),
            "error": self.error,
            "configs": [list(c) for c in self.configs],
            "gates": [g.to_dict() for g in self.gates],
        }


@dataclass(frozen=True)
class UpgradeResult:
    old_ref: str
    new_ref: str
    new_commit: str | None
    ready: bool  # ready to merge: queue refreshed and every target built and passed
    applied: bool  # the staged queue was written back to the project
    reason: str
    patches: tuple[PatchOutcome, ...]
    targets: tuple[TargetOutcome, ...]
    changelog: tuple[str, ...]
    stages: dict[str, float]
    report_json: Path | None = None
    report_md: Path | None = None
