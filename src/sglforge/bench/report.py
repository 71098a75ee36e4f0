"""What a bench found and how it goes out: the ``--json`` document (schema 1), the case study's
table as text and Markdown, JUnit, the CI step summary and an SVG chart beside the report."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from sglforge import reports
from sglforge.bench.spec import Knee
from sglforge.bench.stats import Change, Point
from sglforge.util import atomic_write

JSON_SCHEMA = 1
TABLE_HEADERS: tuple[str, ...] = (
    "RPS",
    "total tok/s/node",
    "output tok/s",
    "TTFT p50",
    "TTFT p95",
    "success",
    "hit",
)


@dataclass(frozen=True)
class SingleStream:
    """One single-stream run: decode tok/s (1 / TPOT) and the server's accept length."""

    decode_tok_s: float
    accept_length: float | None
    ttft_s: float = 0.0
    output_tok_s: float = 0.0


@dataclass(frozen=True)
class ImageRun:
    """One image's figures over every repeat: the sweep (medians), its knee, single stream."""

    image: str
    digest: str | None
    sweep: tuple[Point, ...]
    knee: Point | None
    single: SingleStream | None

    @classmethod
    def of(
        cls,
        image: str,
        digest: str | None,
        rows: Sequence[Point],
        knee: Point | None,
        singles: Sequence[SingleStream],
    ) -> ImageRun:
        single = None
        if singles:
            accepts = [s.accept_length for s in singles if s.accept_length is not None]
            single = SingleStream(
                decode_tok_s=statistics.median(s.decode_tok_s for s in singles),
                accept_length=statistics.median(accepts) if accepts else None,
                ttft_s=statistics.median(s.ttft_s for s in singles),
                output_tok_s=statistics.median(s.output_tok_s for s in singles),
            )
        return cls(image, digest, tuple(rows), knee, single)

    def summary(self) -> dict[str, Any]:
        """The figures a release record keeps (and ``--json``'s ``baseline`` holds)."""
        return {
            "image": self.image,
            "digest": self.digest,
            "knee": _knee_dict(self.knee),
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

    @property
    def regressed(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.regressed)

    @property
    def ok(self) -> bool:
        """A knee was found, no point was refused and nothing regressed (or it was accepted)."""
        regression_ok = not self.regressed or bool(self.accepted_regression)
        return self.run.knee is not None and not self.refused and regression_ok

    @property
    def standin(self) -> bool:
        return self.hardware != "gpu"

    @property
    def reason(self) -> str:
        if self.refused:
            return f"sweep point refused: {self.refused[0]}"
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
                f" ({c.confidence:.0%} CI {c.low:+.1%}..{c.high:+.1%}, tolerance {c.tolerance:.0%})"
            )
        return ""


def _point_dict(p: Point) -> dict[str, Any]:
    return {
        "request_rate": p.request_rate,
        "total_tok_s": round(p.total_tok_s, 3),
        "output_tok_s": round(p.output_tok_s, 3),
        "ttft_p50_s": round(p.ttft_p50_s, 4),
        "ttft_p95_s": round(p.ttft_p95_s, 4),
        "success_rate": round(p.success_rate, 4),
        "cache_hit_rate": None if p.cache_hit_rate is None else round(p.cache_hit_rate, 4),
        "refused": p.refused or None,
    }


def _knee_dict(p: Point | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"request_rate": p.request_rate, "total_tok_s": round(p.total_tok_s, 3)}


def _single_dict(s: SingleStream | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "decode_tok_s": round(s.decode_tok_s, 3),
        "accept_length": None if s.accept_length is None else round(s.accept_length, 3),
    }


def report_dict(report: BenchReport) -> dict[str, Any]:
    """The ``--json`` document body (the CLI adds ``schema`` and ``ok``)."""
    regression = None
    if report.changes:
        regression = {
            "regressed": bool(report.regressed),
            "accepted": report.accepted_regression or None,
            "changes": [c.as_dict() for c in report.changes],
        }
    return {
        "schema": JSON_SCHEMA,
        "ok": report.ok,
        "sweep": [_point_dict(p) for p in report.run.sweep],
        "knee": _knee_dict(report.run.knee),
        "single_stream": _single_dict(report.run.single),
        "baseline": report.baseline.summary() if report.baseline else None,
        "regression": regression,
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
        "report_dir": str(report.report_dir),
        "started_at": report.started_at,
        "duration_s": report.duration_s,
    }


def record_figures(report: BenchReport) -> dict[str, Any]:
    """What a release record keeps of a bench (``inspect`` and the CHANGELOG read it)."""
    data = report_dict(report)
    keep = ("hardware", "scenario", "dataset", "knee", "single_stream", "sweep", "regression")
    out = {k: data[k] for k in keep}
    out["baseline"] = report.baseline.summary() if report.baseline else None
    return out


def table_rows(report: BenchReport) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The case study's table: RPS, total tok/s per node, TTFT p50/p95, success."""
    rows: list[tuple[str, ...]] = []
    for p in report.run.sweep:
        mark = (
            " (knee)" if report.run.knee and p.request_rate == report.run.knee.request_rate else ""
        )
        rows.append(
            (
                f"{p.request_rate:g}{mark}",
                f"{p.total_tok_s:.0f}",
                f"{p.output_tok_s:.0f}",
                f"{p.ttft_p50_s:.2f} s",
                f"{p.ttft_p95_s:.2f} s",
                f"{p.success_rate:.0%}",
                "-" if p.cache_hit_rate is None else f"{p.cache_hit_rate:.0%}",
            )
        )
    return TABLE_HEADERS, rows


def _label(report: BenchReport) -> str:
    return "STAND-IN (CPU, not a GPU run)" if report.standin else "GPU"


def text(report: BenchReport) -> list[str]:
    """The table and the verdict as lines for a terminal."""
    headers, rows = table_rows(report)
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = [
        f"{report.scenario} on {report.run.image} [{_label(report)}], dataset {report.dataset}, "
        f"declared prefix-cache hit {report.expected_hit:.0%}",
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(_knee_line(report))
    lines.append(_single_line(report))
    lines += [f"vs baseline: {_change_line(c)}" for c in report.changes]
    if report.accepted_regression:
        lines.append(f"regression accepted: {report.accepted_regression}")
    lines.append(
        ("PASSED" if report.ok else "FAILED") + (f": {report.reason}" if report.reason else "")
    )
    lines.append(f"reports: {report.report_dir}")
    return lines


def _knee_line(report: BenchReport) -> str:
    k, rule = report.run.knee, report.knee_rule
    where = f"TTFT p95 <= {rule.ttft_p95_max_s:g} s, success >= {rule.min_success:.0%}"
    if k is None:
        return f"knee: none ({where})"
    return f"knee: {k.request_rate:g} RPS, {k.total_tok_s:.0f} tok/s/node ({where})"


def _single_line(report: BenchReport) -> str:
    s = report.run.single
    if s is None:
        return "single stream: not run"
    accept = "-" if s.accept_length is None else f"{s.accept_length:.2f}"
    return f"single stream: {s.decode_tok_s:.1f} decode tok/s, accept length {accept}"


def _change_line(c: Change) -> str:
    verdict = "REGRESSION" if c.regressed else "within the noise band"
    return (
        f"{c.figure} {c.baseline:.1f} -> {c.candidate:.1f} ({c.mean:+.1%}, {c.confidence:.0%} CI "
        f"{c.low:+.1%}..{c.high:+.1%}, tolerance {c.tolerance:.0%}): {verdict}"
    )


def markdown(report: BenchReport) -> str:
    """The step summary: the table CI renders, the knee, single stream, comparison, chart."""
    headers, rows = table_rows(report)
    state = "passed" if report.ok else "FAILED"
    lines = [
        f"## sglforge bench {report.scenario}: {state} ({_label(report)})",
        "",
        f"- image: `{report.run.image}` (`{report.run.digest or '-'}`)",
        f"- dataset: `{report.dataset}`, declared prefix-cache hit {report.expected_hit:.0%}",
        f"- {_knee_line(report)}",
        f"- {_single_line(report)}",
    ]
    lines += [
        f"- vs `{report.baseline.image}`: {_change_line(c)}"
        for c in report.changes
        if report.baseline
    ]
    if report.accepted_regression:
        lines.append(f"- regression accepted: {report.accepted_regression}")
    if report.reason:
        lines.append(f"- reason: {report.reason}")
    lines += [
        "",
        *reports.md_table(headers, rows),
        "",
        f"chart: `{report.report_dir / 'chart.svg'}`",
    ]
    return "\n".join(lines) + "\n"


def junit_suite(report: BenchReport) -> reports.Suite:
    """One case per sweep point (the knee rule), single stream, and each comparison."""
    cases = []
    rule = report.knee_rule
    for p in report.run.sweep:
        name = f"bench.rate-{p.request_rate:g}"
        if p.refused:
            cases.append(reports.Case(name, reports.FAILED, p.refused))
        elif p.within(rule):
            cases.append(
                reports.Case(
                    name, output=f"{p.total_tok_s:.1f} tok/s, TTFT p95 {p.ttft_p95_s:.3f} s"
                )
            )
        else:
            # Past the knee is what a sweep is for: reported, not a failure.
            cases.append(
                reports.Case(
                    name,
                    reports.SKIPPED,
                    f"past the knee: TTFT p95 {p.ttft_p95_s:.3f} s, success {p.success_rate:.0%}",
                )
            )
    cases.append(
        reports.Case("bench.knee")
        if report.run.knee
        else reports.Case("bench.knee", reports.FAILED, _knee_line(report))
    )
    cases.append(reports.Case("bench.single-stream", output=_single_line(report)))
    for c in report.changes:
        outcome = (
            reports.FAILED if c.regressed and not report.accepted_regression else reports.PASSED
        )
        cases.append(
            reports.Case(
                f"bench.vs-baseline.{c.figure}",
                outcome,
                _change_line(c) if outcome == reports.FAILED else "",
                output=_change_line(c),
            )
        )
    props: dict[str, object] = {
        "hardware": report.hardware,
        "image": report.run.image,
        "dataset": report.dataset,
        "knee_rps": report.run.knee.request_rate if report.run.knee else None,
        "knee_tok_s": round(report.run.knee.total_tok_s, 3) if report.run.knee else None,
    }
    return reports.Suite(
        f"sglforge bench {report.scenario}",
        f"sglforge.bench.{report.scenario}",
        tuple(cases),
        props,
        report.duration_s,
        report.started_at,
    )


def junit_xml(report: BenchReport) -> str:
    return reports.junit_xml([junit_suite(report)], "sglforge bench")


def svg(report: BenchReport, width: int = 640, height: int = 360) -> str:
    """Total tok/s against RPS (bars) with TTFT p95 (line) and the knee limit, as SVG."""
    rows = report.run.sweep
    pad_l, pad_r, pad_t, pad_b = 60, 60, 40, 50
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    tok_max = max([p.total_tok_s for p in rows] + [1.0])
    limit = report.knee_rule.ttft_p95_max_s
    ttft_max = max([p.ttft_p95_s for p in rows] + [limit]) * 1.1
    n = max(len(rows), 1)
    slot = w / n
    name, label = escape(report.scenario), escape(_label(report))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{name}: tok/s and TTFT p95 by request rate ({label})</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{pad_l}" y="20" font-size="13">{name} ({label})</text>',
        f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" stroke="black"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + h}" stroke="black"/>',
        f'<text x="10" y="{pad_t - 8}">tok/s</text>',
        f'<text x="{pad_l + w - 10}" y="{pad_t - 8}">TTFT p95 (s)</text>',
        f'<text x="{pad_l + w / 2 - 20}" y="{height - 10}">request rate (RPS)</text>',
    ]
    y_limit = pad_t + h - limit / ttft_max * h
    out.append(
        f'<line x1="{pad_l}" y1="{y_limit:.1f}" x2="{pad_l + w}" y2="{y_limit:.1f}" '
        'stroke="red" stroke-dasharray="4 3"/>'
    )
    out.append(f'<text x="{pad_l + w + 4}" y="{y_limit + 4:.1f}" fill="red">{limit:g} s</text>')
    line = []
    for i, p in enumerate(rows):
        x = pad_l + i * slot + slot * 0.2
        bh = p.total_tok_s / tok_max * h
        is_knee = report.run.knee is not None and p.request_rate == report.run.knee.request_rate
        fill = "#2a7" if is_knee else "#58a"
        out.append(
            f'<rect x="{x:.1f}" y="{pad_t + h - bh:.1f}" width="{slot * 0.6:.1f}" '
            f'height="{bh:.1f}" fill="{fill}"><title>{p.request_rate:g} RPS: '
            f"{p.total_tok_s:.0f} tok/s, TTFT p95 {p.ttft_p95_s:.2f} s</title></rect>"
        )
        out.append(f'<text x="{x:.1f}" y="{pad_t + h + 14}">{p.request_rate:g}</text>')
        out.append(f'<text x="{x:.1f}" y="{pad_t + h - bh - 3:.1f}">{p.total_tok_s:.0f}</text>')
        line.append(
            (pad_l + i * slot + slot / 2, pad_t + h - min(p.ttft_p95_s, ttft_max) / ttft_max * h)
        )
    if line:
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
        out.append(f'<polyline points="{pts}" fill="none" stroke="#d70" stroke-width="2"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_outputs(report: BenchReport) -> None:
    """report.json, bench.md and chart.svg in the report folder."""
    folder = report.report_dir
    atomic_write(folder / "report.json", json.dumps(report_dict(report), indent=2) + "\n")
    atomic_write(folder / "bench.md", markdown(report))
    atomic_write(folder / "chart.svg", svg(report))


def write_junit(report: BenchReport, path: Path) -> None:
    atomic_write(Path(path), junit_xml(report))


def append_step_summary(
    report: BenchReport, environ: Mapping[str, str] = os.environ
) -> Path | None:
    """Append the Markdown summary to ``$GITHUB_STEP_SUMMARY`` when set."""
    target = environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(markdown(report) + "\n")
    return Path(target)
