"""What a bench found (:class:`BenchReport`), its ``--json`` document (schema 1, written as
``report.json`` when the bench ends), the figures a release keeps of it, and what to run next
when it did not pass. Its other reports are views in :mod:`sglforge.reports.bench`."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.bench.cost import PlannedCost
from sglforge.bench.stats import INCONCLUSIVE, Change, Point
from sglforge.figures import BenchFigures
from sglforge.scenario.bench import Knee
from sglforge.util import atomic_write

JSON_SCHEMA = 1


@dataclass(frozen=True)
class SingleStream:
    """One single-stream run: decode tok/s (1 / TPOT) and the server's accept length."""

    decode_tok_s: float
    accept_length: float | None
    ttft_s: float = 0.0
    output_tok_s: float = 0.0
    input_tokens: float | None = None  # mean per request, counted by the server


@dataclass(frozen=True)
class ImageRun:
    """One image's figures: the knee search's points, the knee (and the lowest failing rate
    above it), the speed probe of every boot, the single stream (median over boots)."""

    image: str
    digest: str | None
    sweep: tuple[Point, ...]
    knee: Point | None
    single: SingleStream | None
    speed: tuple[Point, ...] = ()
    knee_above: float | None = None

    @classmethod
    def of(
        cls,
        image: str,
        digest: str | None,
        rows: Sequence[Point],
        knee: Point | None,
        singles: Sequence[SingleStream],
        *,
        speed: tuple[Point, ...] = (),
        knee_above: float | None = None,
    ) -> ImageRun:
        single = None
        if singles:
            accepts = [s.accept_length for s in singles if s.accept_length is not None]
            single = SingleStream(
                decode_tok_s=statistics.median(s.decode_tok_s for s in singles),
                accept_length=statistics.median(accepts) if accepts else None,
                ttft_s=statistics.median(s.ttft_s for s in singles),
                output_tok_s=statistics.median(s.output_tok_s for s in singles),
                input_tokens=_median_or_none([s.input_tokens for s in singles]),
            )
        return cls(image, digest, tuple(rows), knee, single, speed, knee_above)

    def speed_output_tok_s(self) -> float | None:
        """The speed probe's output tok/s per node (median over boots)."""
        return statistics.median(p.output_tok_s for p in self.speed) if self.speed else None

    def summary(self) -> dict[str, Any]:
        """The figures a release record keeps (and ``--json``'s ``baseline`` holds)."""
        return {
            "image": self.image,
            "digest": self.digest,
            "knee": _knee_dict(self.knee, self.knee_above),
            "speed": _speed_dict(self),
            "single_stream": _single_dict(self.single),
        }


@dataclass(frozen=True)
class BenchReport:
    """A whole bench: the candidate's run, the baseline's (paired) and the comparison."""

    scenario: str
    scenario_path: Path
    hardware: str  # "gpu", or "standin-cpu" for a scenario with accelerator = "none"
    dataset: str
    expected_hit: float
    knee_rule: Knee
    run: ImageRun
    baseline: ImageRun | None
    changes: tuple[Change, ...]
    refused: tuple[str, ...]
    report_dir: Path
    started_at: str
    duration_s: float
    repeats: int
    accepted_regression: str = ""  # --accept-regression REASON
    no_baseline: str = ""  # why nothing was compared ("" when a baseline ran)
    planned: PlannedCost | None = None
    boot_seconds: tuple[float, ...] = ()
    input_len: int = 0
    notes: tuple[str, ...] = ()

    @property
    def regressed(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.regressed)

    @property
    def inconclusive(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.status == INCONCLUSIVE)

    @property
    def compared(self) -> bool:
        """A baseline ran and every comparison reached a verdict."""
        return self.baseline is not None and bool(self.changes) and not self.inconclusive

    @property
    def spent_node_minutes(self) -> float:
        return round(self.duration_s / 60, 2)

    @property
    def ok(self) -> bool:
        """A knee was found, no point was refused, no comparison was inconclusive and nothing
        regressed (or it was accepted). A bench without a baseline can be ok: whether that is
        enough is the caller's (``publish`` refuses it without ``--no-baseline REASON``)."""
        # --accept-regression REASON (recorded) waives a drop and an inconclusive comparison
        # alike: a person decided, and the record says so.
        gate_ok = not (self.regressed or self.inconclusive) or bool(self.accepted_regression)
        return self.run.knee is not None and not self.refused and gate_ok

    @property
    def standin(self) -> bool:
        return self.hardware != "gpu"

    @property
    def reason(self) -> str:
        if self.refused:
            return f"sweep point refused: {self.refused[0]}"
        if self.inconclusive:
            c = self.inconclusive[0]
            return f"{c.figure}: comparison inconclusive ({c.why}); not a pass"
        if self.run.knee is None:
            rule = self.knee_rule
            return (
                f"no swept rate meets the knee rule (TTFT p95 <= {rule.ttft_p95_max_s:g} s, "
                f"success >= {rule.min_success:.0%})"
            )
        if self.regressed:
            c = self.regressed[0]
            against = self.baseline.image if self.baseline else "?"
            return (
                f"{c.figure} dropped {-c.mean:.1%} against {against}"
                f" (one-sided {c.confidence:.0%} bound {c.high:+.1%}, tolerance {c.tolerance:.0%})"
            )
        return ""


def next_step(report: BenchReport) -> str:
    """What to run next when the bench did not pass, naming the option ("" when it passed).

    An inconclusive comparison is not a drop: more boots (or a quieter node, or a declared
    per-boot noise the node really has) give it a verdict; ``--no-baseline`` is for a publish
    with nothing to compare with, never for a comparison that ran.
    """
    if report.ok:
        return ""
    where = report.scenario_path
    if report.refused:
        return (
            f"read the refused point's JSONL and server log in {report.report_dir}; the "
            f"declared lengths or prefix-cache hit of [bench] in {where} may be wrong"
        )
    if report.inconclusive:
        c = report.inconclusive[0]
        if 0 in c.boots:
            return f"rerun: a side has no boot measured (read {report.report_dir})"
        if c.underpowered:
            return (
                f"rerun with more boots per side ([bench] repeats = {2 * report.repeats} in "
                f"{where}, now {report.repeats}) or more requests per boot ([bench.speed] "
                f"num_prompts); a pass must rule out a {c.max_mde:.1%} drop ([bench.gate] "
                "max_mde); measure the node once (sglforge bench --calibrate 8) so that its "
                "noise plans the boots; or, to publish anyway, pass --accept-regression REASON "
                "(recorded)"
            )
        return (
            f"rerun with more boots per side ([bench] repeats = {2 * report.repeats} in "
            f"{where}, now {report.repeats}) or on a quieter node; the boots spread "
            f"{c.observed_sd or 0:.2%} a boot: measure the node (sglforge bench --calibrate 8) "
            "so that its noise plans the boots; or, to publish anyway, pass "
            "--accept-regression REASON (recorded)"
        )
    if report.run.knee is None:
        return (
            f"read the knee probes in {report.report_dir}; start the search lower "
            f"([bench.search] start or request_rates in {where})"
        )
    return (
        "fix the regression and rerun, or pass --accept-regression REASON to publish "
        "anyway (recorded)"
    )


def _median_or_none(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def rounded(x: float | None, nd: int = 3) -> float | None:
    """``x`` rounded to ``nd`` places; None for None or a value that is not finite."""
    return None if x is None or not math.isfinite(x) else round(x, nd)


def _point_dict(p: Point) -> dict[str, Any]:
    return {
        "request_rate": p.request_rate if math.isfinite(p.request_rate) else None,
        "sustained_rps": rounded(p.sustained_rps, 4),
        "output_tok_s": round(p.output_tok_s, 3),
        "total_tok_s": round(p.total_tok_s, 3),
        "ttft_p50_s": round(p.ttft_p50_s, 4),
        "ttft_p95_s": round(p.ttft_p95_s, 4),
        "ttft_p95_upper_s": rounded(p.ttft_p95_upper_s, 4),
        "success_rate": round(p.success_rate, 4),
        "cache_hit_rate": rounded(p.cache_hit_rate, 4),
        "input_tokens_server": rounded(p.input_tokens, 1),
        "output_tokens_server": rounded(p.output_tokens, 1),
        "requests": p.requests,
        "refused": p.refused or None,
    }


def _knee_dict(p: Point | None, above: float | None = None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {
        "request_rate": p.request_rate,
        "sustained_rps": rounded(p.sustained_rps, 4),
        "output_tok_s": round(p.output_tok_s, 3),
        "total_tok_s": round(p.total_tok_s, 3),
        "ttft_p95_s": round(p.ttft_p95_s, 4),
        # The knee lies in [request_rate, failed_at): the search's uncertainty.
        "failed_at": above,
    }


def _speed_dict(run: ImageRun) -> dict[str, Any] | None:
    if not run.speed:
        return None
    per_boot = [p.output_tok_s for p in run.speed]
    return {
        "output_tok_s": rounded(run.speed_output_tok_s()),
        "output_tok_s_per_boot": [round(x, 3) for x in per_boot],
        "requests_per_boot": [len(p.decode_tok_s) for p in run.speed],
    }


def _single_dict(s: SingleStream | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "decode_tok_s": round(s.decode_tok_s, 3),
        "accept_length": None if s.accept_length is None else round(s.accept_length, 3),
        "input_tokens_server": rounded(s.input_tokens, 1),
    }


def report_dict(report: BenchReport) -> dict[str, Any]:
    """The ``--json`` document body (the CLI adds ``schema`` and ``ok``)."""
    regression = None
    if report.changes:
        regression = {
            "regressed": bool(report.regressed),
            "inconclusive": bool(report.inconclusive),
            "accepted": report.accepted_regression or None,
            "changes": [c.as_dict() for c in report.changes],
        }
    return {
        "schema": JSON_SCHEMA,
        "ok": report.ok,
        "sweep": [_point_dict(p) for p in report.run.sweep],
        "knee": _knee_dict(report.run.knee, report.run.knee_above),
        "speed": _speed_dict(report.run),
        "speed_points": [_point_dict(p) for p in report.run.speed],
        "single_stream": _single_dict(report.run.single),
        "baseline": report.baseline.summary() if report.baseline else None,
        "regression": regression,
        # Never silent: whether a comparison ran, and why not.
        "comparison": {
            "ran": report.baseline is not None,
            "conclusive": report.compared,
            "reason": report.no_baseline or None,
        },
        "notes": list(report.notes),
        "cost": {
            "planned": report.planned.as_dict() if report.planned else None,
            "spent_node_minutes": report.spent_node_minutes,
            "boot_seconds": list(report.boot_seconds),
        },
        "hardware": report.hardware,
        "scenario": report.scenario,
        "image": report.run.image,
        "image_digest": report.run.digest,
        "dataset": report.dataset,
        "expected_cache_hit_rate": round(report.expected_hit, 4),
        "knee_rule": {
            "ttft_p95_max_s": report.knee_rule.ttft_p95_max_s,
            "min_success": report.knee_rule.min_success,
        },
        "repeats": report.repeats,
        "reason": report.reason or None,
        "next": next_step(report) or None,
        "report_dir": str(report.report_dir),
        "started_at": report.started_at,
        "duration_s": report.duration_s,
    }


def record_figures(report: BenchReport) -> BenchFigures:
    """What a release record keeps of a bench (``inspect`` and the CHANGELOG read it)."""
    data = report_dict(report)
    keep = (
        "hardware", "scenario", "dataset", "knee", "speed", "single_stream", "sweep",
        "regression", "comparison", "notes",
    )  # fmt: skip
    out = {k: data[k] for k in keep}
    out["baseline"] = report.baseline.summary() if report.baseline else None
    return BenchFigures.from_dict(out)


def write_json(report: BenchReport) -> None:
    """report.json in the report folder, as the bench ends."""
    atomic_write(
        report.report_dir / "report.json", json.dumps(report_dict(report), indent=2) + "\n"
    )
