"""A bench's reports: its table and verdict for a terminal, the step summary with the Mermaid
charts, the JUnit suite and its ``figure.bench.*`` properties, ``chart.svg``, and the files
beside the bench's ``report.json`` (``bench.md``, ``chart.svg``): views of one
:class:`~sglforge.bench.report.BenchReport`."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

from sglforge import charts, formats
from sglforge.bench.report import BenchReport, next_step, record_figures, rounded
from sglforge.bench.stats import INCONCLUSIVE, Change
from sglforge.figures import BenchFigures
from sglforge.util import atomic_write

# The case study's columns as it means them: sustained RPS, output tok/s per node (its
# 2626 tok/s at 2.4 RPS is about 1.1k tokens per request for a 1k output), TTFT p50/p95 and
# success; then what the server counted, and the total (input + output) labelled as total.
TABLE_HEADERS: tuple[str, ...] = (
    "offered RPS",
    "sustained RPS",
    "output tok/s/node",
    "TTFT p50",
    "TTFT p95",
    "success",
    "hit",
    "input tok (server)",
    "total tok/s (in+out)",
)


def table_rows(report: BenchReport) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The case study's table over the knee search's points (see TABLE_HEADERS)."""
    rows: list[tuple[str, ...]] = []
    for p in report.run.sweep:
        mark = (
            " (knee)" if report.run.knee and p.request_rate == report.run.knee.request_rate else ""
        )
        rows.append(
            (
                f"{p.request_rate:g}{mark}",
                f"{p.sustained_rps:.2f}",
                f"{p.output_tok_s:.0f}",
                f"{p.ttft_p50_s:.2f} s",
                f"{p.ttft_p95_s:.2f} s",
                f"{p.success_rate:.0%}",
                "-" if p.cache_hit_rate is None else f"{p.cache_hit_rate:.0%}",
                "-" if p.input_tokens is None else f"{p.input_tokens:.0f}",
                f"{p.total_tok_s:.0f}",
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
    lines.append(_speed_line(report))
    lines.append(_single_line(report))
    lines.append(_comparison_line(report))
    lines += [f"vs baseline: {_change_line(c)}" for c in report.changes]
    lines.append(_cost_line(report))
    lines += [f"note: {n}" for n in report.notes]
    if report.accepted_regression:
        lines.append(f"regression accepted: {report.accepted_regression}")
    lines.append(
        ("PASSED" if report.ok else "FAILED") + (f": {report.reason}" if report.reason else "")
    )
    if next_step(report):
        lines.append(f"next: {next_step(report)}")
    lines.append(f"reports: {report.report_dir}")
    return lines


def _knee_line(report: BenchReport) -> str:
    k, rule = report.run.knee, report.knee_rule
    where = f"TTFT p95 <= {rule.ttft_p95_max_s:g} s at 95 % confidence, all requests served"
    if k is None:
        return f"knee: none ({where})"
    above = report.run.knee_above
    bracket = (
        f"between {k.request_rate:g} and {above:g}" if above else f"at least {k.request_rate:g}"
    )
    return (
        f"knee: {k.request_rate:g} RPS offered ({bracket}), {k.sustained_rps:.2f} sustained, "
        f"{k.output_tok_s:.0f} output tok/s/node ({k.total_tok_s:.0f} total in+out) ({where})"
    )


def _speed_line(report: BenchReport) -> str:
    run = report.run
    out = run.speed_output_tok_s()
    if out is None:
        return "speed probe: not run"
    return (
        f"speed probe: {out:.0f} output tok/s/node at fixed concurrency (median of "
        f"{len(run.speed)} boot(s))"
    )


def _single_line(report: BenchReport) -> str:
    s = report.run.single
    if s is None:
        return "single stream: not run"
    accept = "-" if s.accept_length is None else f"{s.accept_length:.2f}"
    return f"single stream: {s.decode_tok_s:.1f} decode tok/s, accept length {accept}"


def _comparison_line(report: BenchReport) -> str:
    if report.baseline is None:
        return f"comparison: NOT RUN ({report.no_baseline})"
    return f"comparison against {report.baseline.image}: " + (
        "inconclusive" if report.inconclusive else "ran"
    )


def _change_line(c: Change) -> str:
    verdict = {"regressed": "REGRESSION", "passed": "no significant drop"}.get(
        c.status, f"INCONCLUSIVE ({c.why})"
    )
    level = 1 - 2 * (1 - c.confidence)
    return (
        f"{c.figure} {_side(c, 0)} -> {_side(c, 1)} ({_mean(c)}, {level:.0%} CI "
        f"{_interval(c)}, {c.boots[0]}+{c.boots[1]} boots, "
        f"{c.requests[0]}+{c.requests[1]} requests, minimum detectable drop {_mde(c)}): "
        f"{verdict}"
    )


def _side(c: Change, side: int) -> str:
    """A side's measured figure, or "-" where no boot of that side was measured."""
    return f"{(c.baseline, c.candidate)[side]:.1f}" if c.boots[side] else "-"


def _mean(c: Change) -> str:
    return f"{c.mean:+.1%}" if all(c.boots) else "-"


def _interval(c: Change) -> str:
    """The interval, or "none" where nothing measured the noise (one boot a side, no
    profile: the change is shown, its interval cannot be)."""
    if not all(c.boots):
        return "-"
    return f"{c.low:+.1%}..{c.high:+.1%}" if math.isfinite(c.low + c.high) else "none"


def _mde(c: Change) -> str:
    return f"{c.mde:.1%}" if math.isfinite(c.mde) else "none"


def _cost_line(report: BenchReport) -> str:
    planned = report.planned.node_minutes if report.planned else None
    shown = "-" if planned is None else f"{planned:.1f}"
    return (
        f"cost: {report.spent_node_minutes:.1f} node-minutes spent "
        f"({len(report.boot_seconds)} boots), {shown} planned for a GPU node"
    )


def markdown(report: BenchReport) -> str:
    """The step summary: the table CI renders, the knee, single stream, comparison, chart."""
    headers, rows = table_rows(report)
    state = "passed" if report.ok else "FAILED"
    md, code = formats.md_text, formats.md_code  # every free text escaped there (F16)
    lines = [
        f"## sglforge bench {md(report.scenario)}: {state} ({_label(report)})",
        "",
        f"- image: {code(report.run.image)} ({code(report.run.digest or '-')})",
        f"- dataset: {code(report.dataset)}, declared prefix-cache hit {report.expected_hit:.0%}",
        f"- {md(_knee_line(report))}",
        f"- {md(_speed_line(report))}",
        f"- {md(_single_line(report))}",
        f"- {md(_comparison_line(report))}",
        f"- {md(_cost_line(report))}",
    ]
    lines += [
        f"- vs {code(report.baseline.image)}: {md(_change_line(c))}"
        for c in report.changes
        if report.baseline
    ]
    if report.accepted_regression:
        lines.append(f"- regression accepted: {md(report.accepted_regression)}")
    if report.reason:
        lines.append(f"- reason: {md(report.reason)}")
    if next_step(report):
        lines.append(f"- next: {md(next_step(report))}")
    lines += ["", *formats.md_table(headers, rows)]
    if report.changes:
        lines += ["", *formats.md_table(*comparison_rows(report))]
    lines += ["", *mermaid(report)]
    lines += [
        "",
        f"chart.svg, report.json and the JSONL of every run: `{report.report_dir.name}/` in the "
        "`build/bench/` artifact",
    ]
    return "\n".join(lines) + "\n"


COMPARISON_HEADERS: tuple[str, ...] = (
    "figure",
    "baseline",
    "candidate",
    "change",
    "90 % CI",
    "boots",
    "minimum detectable drop",
    "verdict",
)


def comparison_rows(report: BenchReport) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The comparison as a table: each compared figure, both sides, the change and verdict."""
    rows: list[tuple[str, ...]] = []
    for c in report.changes:
        level = 1 - 2 * (1 - c.confidence)
        rows.append(
            (
                c.figure,
                _side(c, 0),
                _side(c, 1),
                _mean(c),
                _interval(c) if level else "-",
                f"{c.boots[0]}+{c.boots[1]}",
                _mde(c),
                c.status if c.status != INCONCLUSIVE else f"inconclusive ({c.why})",
            )
        )
    return COMPARISON_HEADERS, rows


def chart_series(report: BenchReport) -> tuple[list[float], list[float], list[float]]:
    """The chart's data, shared by the SVG and the Mermaid chart: the probed rates and, at
    each, output tok/s/node and TTFT p95 (seconds), in rate order."""
    rows = sorted(
        (p for p in report.run.sweep if math.isfinite(p.request_rate)),
        key=lambda p: p.request_rate,
    )
    return (
        [p.request_rate for p in rows],
        [round(p.output_tok_s, 3) for p in rows],  # rounded as report.json's sweep is
        [round(p.ttft_p95_s, 4) for p in rows],
    )


def mermaid(report: BenchReport) -> list[str]:
    """The knee search as Mermaid ``xychart-beta`` blocks (GitHub renders them in step
    summaries; an SVG on the runner renders nowhere), drawn by :mod:`sglforge.charts`: output
    tok/s/node with the knee's bar marked, TTFT p95 over its limit and, on a compared run, the
    baseline beside the candidate; each with its legend under it."""
    rates, tok, ttft = chart_series(report)
    if not rates:
        return ["(no knee probe ran: no chart)"]
    k = report.run.knee
    limit = report.knee_rule.ttft_p95_max_s
    knee_at = k.request_rate if k else None
    labels = tuple(f"{r:g} knee" if r == knee_at else f"{r:g}" for r in rates)
    x_title = "offered request rate (requests/s)"
    note = f"{_label(report)}; " + (f"knee {k.request_rate:g} RPS." if k else "no knee.")
    tok_chart = charts.XYChart(
        "output tok/s per node by offered rate", x_title, labels, "output tok/s per node",
        charts.ticks(max([*tok, 1.0]))[-1],
        (charts.Series("output tok/s per node, measured", tuple(tok), kind="bar"),), note,
    )  # fmt: skip
    ttft_chart = charts.XYChart(
        f"TTFT p95 by offered rate, limit {limit:g} s", x_title, labels, "TTFT p95 (s)",
        charts.ticks(max([*ttft, limit]) * 1.05)[-1],
        (
            charts.Series(f"limit {limit:g} s (a limit, not measured)", (limit,) * len(rates),
                          charts.LIMIT),
            charts.Series("TTFT p95, measured", tuple(ttft)),
        ),
        note,
    )  # fmt: skip
    out = [*charts.mermaid(tok_chart), "", *charts.mermaid(ttft_chart)]
    if report.changes:
        out += ["", *charts.mermaid(_compared_chart(report))]
    return out


def _figure_name(figure: str) -> str:
    """A compared figure's short name for a chart's label."""
    at = re.search(r"at_concurrency_(\d+)$", figure)
    if at:
        return f"concurrency {at.group(1)}"
    return "single stream" if figure.startswith("single_stream") else figure.replace("_", " ")


def _change_words(c: Change) -> str:
    level = 1 - 2 * (1 - c.confidence)
    verdict = {"regressed": "REGRESSION", "passed": "no significant drop"}.get(
        c.status, "inconclusive"
    )
    return f"{_mean(c)} ({level:.0%} CI {_interval(c)}), {verdict}"


def _compared_chart(report: BenchReport) -> charts.XYChart:
    """Each compared figure's baseline and candidate as two neighbouring bars."""
    labels: list[str] = []
    base: list[float] = []
    cand: list[float] = []
    for c in report.changes:
        name = _figure_name(c.figure)
        labels += [f"{name}: baseline", f"{name}: this image"]
        base += [c.baseline, 0.0]
        cand += [0.0, c.candidate]
    decode = all("decode_tok_s" in c.figure for c in report.changes)
    unit = "decode tok/s per request" if decode else "figure"
    against = report.baseline.image if report.baseline else "-"
    note = f"Baseline {against}: " + "; ".join(
        f"{_figure_name(c.figure)} {_change_words(c)}" for c in report.changes
    )
    return charts.XYChart(
        f"baseline vs this image: {unit}", "compared figure", tuple(labels), unit,
        charts.ticks(max([*base, *cand, 1.0]))[-1],
        (
            charts.Series("baseline", tuple(base), charts.BASELINE, "bar"),
            charts.Series("this image", tuple(cand), kind="bar"),
        ),
        note + ".", horizontal=True,
    )  # fmt: skip


def junit_suite(report: BenchReport) -> formats.Suite:
    """One case per sweep point (the knee rule), single stream, and each comparison."""
    cases = []
    rule = report.knee_rule
    for p in report.run.sweep:
        name = f"bench.rate-{p.request_rate:g}"
        if p.refused:
            cases.append(formats.Case(name, formats.FAILED, p.refused))
        elif p.within(rule):
            cases.append(
                formats.Case(
                    name,
                    output=f"{p.output_tok_s:.1f} output tok/s, TTFT p95 {p.ttft_p95_s:.3f} s",
                )
            )
        else:
            # Past the knee is what a sweep is for: reported, not a failure.
            cases.append(
                formats.Case(
                    name,
                    formats.SKIPPED,
                    f"past the knee: TTFT p95 {p.ttft_p95_s:.3f} s, success {p.success_rate:.0%}",
                )
            )
    cases.append(
        formats.Case("bench.knee")
        if report.run.knee
        else formats.Case("bench.knee", formats.FAILED, _knee_line(report))
    )
    cases.append(formats.Case("bench.single-stream", output=_single_line(report)))
    if report.baseline is None:
        # A gate that did not compare says so: skipped, with the reason.
        cases.append(formats.Case("bench.vs-baseline", formats.SKIPPED, _comparison_line(report)))
    for c in report.changes:
        failed = (c.status == INCONCLUSIVE or c.regressed) and not report.accepted_regression
        outcome = formats.FAILED if failed else formats.PASSED
        cases.append(
            formats.Case(
                f"bench.vs-baseline.{c.figure}",
                outcome,
                _change_line(c) if outcome == formats.FAILED else "",
                output=_change_line(c),
            )
        )
    props: dict[str, object] = {
        "hardware": report.hardware,
        "image": report.run.image,
        "dataset": report.dataset,
        "knee_rps": report.run.knee.request_rate if report.run.knee else None,
        "knee_output_tok_s": round(report.run.knee.output_tok_s, 3) if report.run.knee else None,
        "compared": report.compared,
        "no_baseline": report.no_baseline or None,
    }
    props.update(junit_figures(record_figures(report)))
    return formats.Suite(
        f"sglforge bench {report.scenario}",
        f"sglforge.bench.{report.scenario}",
        tuple(cases),
        props,
        report.duration_s,
        report.started_at,
        output="\n".join(text(report)),
    )


def junit_figures(bench: BenchFigures | None) -> dict[str, object]:
    """A bench's figures (as :func:`record_figures` keeps them) as ``figure.bench.*`` JUnit
    properties, for ``bench --junit`` and a publish's JUnit alike: the hardware they were
    measured on, the knee and its bracket, the speed probe, the single stream and each
    compared figure's change and verdict (None values are left out)."""
    if bench is None:
        return {}
    out: dict[str, object] = {"figure.bench.hardware": bench.hardware or None}
    knee = bench.knee or {}
    for key in ("request_rate", "failed_at", "sustained_rps", "output_tok_s", "total_tok_s"):
        out[f"figure.bench.knee.{key}"] = knee.get(key)
    out["figure.bench.speed.output_tok_s"] = (bench.speed or {}).get("output_tok_s")
    single = bench.single_stream or {}
    for key in ("decode_tok_s", "accept_length", "input_tokens_server"):
        out[f"figure.bench.single_stream.{key}"] = single.get(key)
    comparison = bench.comparison or {}
    out["figure.bench.comparison.ran"] = comparison.get("ran", comparison.get("evaluated"))
    out["figure.bench.comparison.reason"] = comparison.get("reason") or comparison.get("why")
    changes = (bench.regression or {}).get("changes")
    for c in changes if isinstance(changes, list | tuple) else ():
        name = f"figure.bench.vs_baseline.{c['figure']}"
        out[f"{name}.delta"] = rounded(c.get("delta"), 4)
        ci = [x for x in c.get("ci") or () if isinstance(x, int | float)]
        out[f"{name}.ci"] = " ".join(f"{x:+.4f}" for x in ci) if len(ci) == 2 else "none"
        out[f"{name}.minimum_detectable_effect"] = rounded(c.get("minimum_detectable_effect"), 4)
        out[f"{name}.status"] = c.get("status")
    return {k: v for k, v in out.items() if v is not None}


def junit_xml(report: BenchReport) -> str:
    return formats.junit_xml([junit_suite(report)], "sglforge bench")


def svg(report: BenchReport) -> str:
    """The knee search as chart.svg (drawn by :mod:`sglforge.charts`): output tok/s/node and
    TTFT p95 against the offered rate on two axes, the limit, the knee, a legend and, on a
    compared run, the baseline's figures beside the candidate's."""
    rates, tok, ttft = chart_series(report)
    k = report.run.knee
    knee = f"knee {k.request_rate:g} RPS" if k else "no knee"
    return charts.svg(
        charts.KneeChart(
            title=f"{report.scenario}: output tok/s per node and TTFT p95 by offered rate",
            subtitle=f"{_label(report)}; {knee}; {report.run.image}",
            rates=tuple(rates),
            tok=tuple(tok),
            ttft=tuple(ttft),
            limit=report.knee_rule.ttft_p95_max_s,
            knee=(k.request_rate, round(k.output_tok_s, 3)) if k else None,
            baseline=report.baseline.image if report.baseline else "",
            compared=tuple(
                charts.Compared(_figure_name(c.figure), c.baseline, c.candidate, _change_words(c))
                for c in report.changes
            ),
        )
    )


def write_outputs(report: BenchReport) -> None:
    """bench.md and chart.svg beside the report.json the bench wrote as it ended."""
    folder = report.report_dir
    folder.mkdir(parents=True, exist_ok=True)
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
