"""The bench's charts as a person sees them (issue 45, U8/U9): the step summary's Mermaid
charts and chart.svg rendered by Debian's headless Chromium with the pinned Mermaid renderer
(tests/chart_browser.py), for a plain bench and for a compared publish. Each series must be
drawn with one mark per value, the measured series dark and the limit pale and dashed, every
series named in a legend, no title or label past the picture's edge, and on a compared run the
baseline beside the candidate. The PNGs go to ``$SGLFORGE_ARTIFACTS/charts`` (default
``build/logs/charts``, which CI uploads with the test reports)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from chart_browser import Chart, chromium, render
from gate_records import bench_gate
from sglforge import publish as publish_mod
from sglforge.bench import report as bench_report
from sglforge.bench.stats import Block, Point, compare
from sglforge.reports import bench as bench_view
from sglforge.reports import publish as publish_view
from sglforge.scenario.bench import GENERATED_SHARED_PREFIX, Knee

REPO = Path(__file__).resolve().parents[2]
PNG_DIR = Path(os.environ.get("SGLFORGE_ARTIFACTS") or REPO / "build" / "logs") / "charts"
DARK, PALE = 0.2, 0.4  # relative luminance: a measured series below, a limit above


@pytest.fixture(scope="module", autouse=True)
def browser() -> None:
    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/setup installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium; CI installs it)")


def _point(rate: float, tok: float, p95: float) -> Point:
    return Point(rate, tok * 1.3, tok, p95 / 2, p95, 1.0, 0.6, sustained_rps=rate)


def _change(figure: str, base: float, slow: float) -> Any:
    blocks = [
        Block(side, i, tuple(base * (slow if side == "candidate" else 1.0) * (1 + d)
                             for d in (-0.01, 0.0, 0.01)))
        for i, side in enumerate(("baseline", "candidate", "candidate", "baseline"))
    ]  # fmt: skip
    return compare(figure, blocks, boot_sd=0.0115)


def _report(tmp_path: Path, rows: tuple[Point, ...], knee: int, **kw: Any) -> Any:
    run = bench_report.ImageRun(
        "127.0.0.1:5000/t/bp:v0.5.14-rocm700-mi35x-q1", "sha256:1", rows, rows[knee],
        bench_report.SingleStream(341.0, 3.37), knee_above=rows[-1].request_rate,
    )  # fmt: skip
    fields: dict[str, Any] = dict(
        scenario="standin-cpu", scenario_path=tmp_path / "standin-cpu.toml",
        hardware="standin-cpu", dataset=GENERATED_SHARED_PREFIX, expected_hit=0.6,
        knee_rule=Knee(1.0, 1.0), run=run, baseline=None, changes=(), refused=(),
        report_dir=tmp_path / "standin-cpu-20261202T000000Z-abcd1234",
        started_at="2026-12-02T00:00:00+00:00", duration_s=61.0, repeats=2,
        no_baseline="first release",
    )  # fmt: skip
    fields.update(kw)
    return bench_report.BenchReport(**fields)


def plain(tmp_path: Path) -> Any:
    """A first release's bench: six probes up to past the knee (the audit's r1 figures)."""
    rows = tuple(
        _point(r, t, p)
        for r, t, p in zip(
            (1.875, 3.75, 5.625, 7.5, 9.375, 11.25),
            (223.273, 440.819, 598.659, 688.085, 685.325, 719.082),
            (0.1313, 0.1771, 0.2602, 0.4551, 0.8124, 2.3215),
            strict=True,
        )
    )
    return _report(tmp_path, rows, 4)


def compared(tmp_path: Path) -> Any:
    """A second release's bench against the first: two probes near the last knee, and both
    compared figures."""
    rows = (_point(11.25, 713.4, 0.9012), _point(13.5, 731.9, 1.9377))
    changes = (
        _change("decode_tok_s_per_request_at_concurrency_16", 61.2, 0.99),
        _change("single_stream_decode_tok_s", 88.5, 1.01),
    )
    baseline = bench_report.ImageRun("127.0.0.1:5000/t/bp@sha256:77ea6b", "sha256:77", (), None,
                                     None)  # fmt: skip
    return _report(tmp_path, rows, 0, baseline=baseline, changes=changes, no_baseline="")


def _step_summary(report: Any) -> str:
    result = publish_mod.PublishResult(
        target="mi355x", registry="127.0.0.1:5000", image=report.run.image,
        immutable=report.run.image, friendly=(), scenario=report.scenario, dry_run=False,
        skip_smoke=False, gates=(bench_gate(report),),
    )  # fmt: skip
    return publish_view.markdown(result, "mi355x")


def _charts(md: str) -> list[Chart]:
    found = re.findall(r"```mermaid\n(.*?)```\n\n(Legend: [^\n]*)", md, re.S)
    return [Chart(block, legend) for block, legend in found]


def _luminance(colour: str) -> float:
    r, g, b = (int(x) / 255 for x in re.findall(r"\d+", colour)[:3])
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _inside(chart: dict[str, Any]) -> None:
    """No text past the picture's edges (a cut title or label), none over another."""
    texts = [t for t in chart["texts"] if t["text"].strip()]
    assert texts, chart
    for t in texts:
        assert -1 <= t["left"] and t["right"] <= t["width"] + 1, t
        assert -1 <= t["top"] and t["bottom"] <= t["height"] + 1, t
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            across = min(a["right"], b["right"]) - max(a["left"], b["left"])
            down = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
            assert across <= -3 or down <= 2, (a, b)  # over or against each other


def _check_mermaid(chart: dict[str, Any], mermaid: Chart, values: list[list[float]]) -> None:
    assert "error" not in chart, chart
    _inside(chart)
    assert chart["title"] and chart["title"][0]["text"], chart["title"]
    names = re.findall(r'^\s*(?:bar|line) "([^"]*)"', mermaid.block, re.M)
    texts = {t["text"] for t in chart["texts"]}
    assert set(names) <= texts, (names, texts)  # the renderer's legend names every series
    for name in names:
        assert name in mermaid.legend  # and so does the legend in words under it
    plots = chart["plots"]
    assert len(plots) == len(values) == len(names)
    for i, vals in enumerate(values):
        plot = plots[str(i)]
        drawn = sum(1 for v in vals if v > 0)
        if plot["kind"] == "bar":
            assert plot["rects"] == drawn, (i, plot, vals)
        else:
            assert plot["vertices"] == len(vals), (i, plot, vals)


def _values(block: str) -> list[list[float]]:
    return [
        [float(x) for x in m.split(",")]
        for m in re.findall(r'^\s*(?:bar|line) "[^"]*" \[([^\]]*)\]', block, re.M)
    ]


def _check_svg(chart: dict[str, Any], report: Any) -> None:
    _inside(chart)
    n = len(report.run.sweep)
    plots = chart["plots"]
    for role in ("measured", "second"):
        assert plots[f"series-{role}"]["points"] == n and plots[f"point-{role}"]["count"] == n
    assert _luminance(plots["series-measured"]["stroke"]) < DARK
    texts = {t["text"] for t in chart["texts"]}
    assert {"output tok/s/node", "TTFT p95", "TTFT limit 1 s (a limit)"} <= texts
    assert "limit: TTFT p95 1 s" in texts
    if report.changes:
        assert "baseline" in texts
        assert (
            plots["bar-baseline"]["count"] == plots["bar-measured"]["count"] == len(report.changes)
        )
        assert _luminance(plots["bar-baseline"]["fill"]) > _luminance(plots["bar-measured"]["fill"])


@pytest.mark.parametrize("make", [plain, compared], ids=["plain-bench", "compared-publish"])
def test_the_rendered_charts_draw_every_series_with_a_legend_and_titles_that_fit(
    tmp_path: Path, make: Any
) -> None:
    report = make(tmp_path)
    md = _step_summary(report)
    mermaid = _charts(md)
    assert len(mermaid) == (3 if report.changes else 2)
    found = render(tmp_path, make.__name__, mermaid, [bench_view.svg(report)], PNG_DIR)
    *drawn, svg = found["charts"]
    for chart, m in zip(drawn, mermaid, strict=True):
        _check_mermaid(chart, m, _values(m.block))
    tok, ttft = drawn[0]["plots"], drawn[1]["plots"]
    # the measured series dark, the limit pale and dashed (drawn first, under the data)
    assert _luminance(tok["0"]["fill"]) < DARK and _luminance(ttft["1"]["stroke"]) < DARK
    assert _luminance(ttft["0"]["stroke"]) > PALE and ttft["0"]["dash"] not in ("none", "")
    if report.changes:
        vs = drawn[2]["plots"]
        assert _luminance(vs["0"]["fill"]) > _luminance(vs["1"]["fill"])  # baseline paler
    # GitHub's dark colour mode draws the same chart on white: the dark series stays dark
    for light, dark in zip(drawn, found["dark"], strict=True):
        assert "error" not in dark and dark["background"] == "rgb(255, 255, 255)", dark
        assert {k: (p["fill"], p["stroke"]) for k, p in dark["plots"].items()} == {
            k: (p["fill"], p["stroke"]) for k, p in light["plots"].items()
        }
    _check_svg(svg, report)
    assert not math.isnan(found["height"]) and Path(found["png"]).stat().st_size > 10_000
