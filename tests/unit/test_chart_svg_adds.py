"""chart.svg is kept beside the Mermaid charts because it shows what a Mermaid ``xychart-beta``
cannot (issue 44: keep the SVG only if a test shows it adds something):

1. **The rate axis is numeric.** A knee search probes uneven rates (6, 12, 24, then a
   bisection at 9): chart.svg places each probe at its rate, so the gaps between probes read
   true, where a Mermaid ``x-axis`` is a list of category labels drawn evenly apart.
2. **Both figures on one plot, against two axes**: output tok/s per node on the left, TTFT p95
   on the right, the knee where the one bends and the other crosses its limit. Mermaid's
   ``xychart-beta`` has one y axis, so the step summary draws two charts.
3. **It renders anywhere**: a file in the bench's artifact, opened in any browser or viewer
   with no script; a Mermaid block renders only where a Markdown viewer runs Mermaid.
"""

from __future__ import annotations

import re
from pathlib import Path

from sglforge.bench import report as bench_report
from sglforge.bench.stats import Point
from sglforge.reports import bench as bench_view
from sglforge.scenario.bench import GENERATED_SHARED_PREFIX, Knee

RATES = (6.0, 12.0, 24.0, 9.0)  # the search's order: doubling, then a bisection


def _report(tmp_path: Path) -> bench_report.BenchReport:
    rows = tuple(
        Point(r, t * 1.3, t, p / 2, p, 1.0, 0.6, sustained_rps=r)
        for r, t, p in zip(RATES, (400.0, 610.0, 640.0, 560.0), (0.4, 1.6, 4.0, 0.8), strict=True)
    )
    run = bench_report.ImageRun("img:new", "sha256:1", rows, rows[3], None, knee_above=12.0)
    return bench_report.BenchReport(
        scenario="glm", scenario_path=tmp_path / "glm.toml", hardware="gpu",
        dataset=GENERATED_SHARED_PREFIX, expected_hit=0.6, knee_rule=Knee(1.0, 1.0), run=run,
        baseline=None, changes=(), refused=(), report_dir=tmp_path / "glm-1",
        started_at="2026-12-02T00:00:00+00:00", duration_s=61.0, repeats=2,
        no_baseline="first release",
    )  # fmt: skip


def test_the_svg_places_each_probe_at_its_rate_where_mermaid_spaces_labels_evenly(
    tmp_path: Path,
) -> None:
    report = _report(tmp_path)
    svg = bench_view.svg(report)
    xs = [float(x) for x in re.findall(r'class="point-measured" cx="([0-9.]+)"', svg)]
    assert len(xs) == 4  # in rate order: 6, 9, 12, 24
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    # 9-6 and 12-9 are 3 RPS apart, 24-12 is 12: the last gap is four times the others
    assert abs(gaps[0] - gaps[1]) < 0.5 and abs(gaps[2] / gaps[1] - 4.0) < 0.05, gaps
    md = "\n".join(bench_view.mermaid(report))
    axes = re.findall(r'x-axis "[^"]*" \[(.*)\]', md)
    assert axes and all('"6"' in a and '"24"' in a for a in axes)  # category labels only
    assert not re.search(r"x-axis [^\[\n]*-->", md)  # no numeric x range in any chart


def test_the_svg_holds_both_figures_on_two_axes_where_mermaid_needs_two_charts(
    tmp_path: Path,
) -> None:
    report = _report(tmp_path)
    svg = bench_view.svg(report)
    assert svg.count("<svg") == 1 and "output tok/s per node</text>" in svg
    assert "TTFT p95 (s)</text>" in svg  # the right axis's title
    assert svg.count('class="point-measured"') == svg.count('class="point-second"') == 4
    md = "\n".join(bench_view.mermaid(report))
    charts = md.count("xychart-beta")
    y_axes = re.findall(r'^\s*y-axis "([^"]*)"', md, re.M)
    assert charts == 2 and y_axes == ["output tok/s per node", "TTFT p95 (s)"]  # one axis each
    assert "<script" not in svg  # a picture on its own: nothing to run to see it
