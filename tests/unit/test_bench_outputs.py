"""The bench's outputs where people read them: the workflow `init` writes uploads build/bench/,
the step summary holds the serving table, the comparison and Mermaid charts whose numbers are
the report's own, the JUnit carries the figures, and a failed gate says what to run next."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from gate_records import bench_gate
from junit_schema import assert_valid_junit
from sglforge import publish as publish_mod
from sglforge.bench import report as bench_report
from sglforge.bench.stats import Block, Point, compare
from sglforge.reports import bench as bench_view
from sglforge.reports import publish as publish_view
from sglforge.scenario.bench import GENERATED_SHARED_PREFIX, Knee


def _point(rate: float, tok: float, p95: float) -> Point:
    return Point(rate, tok * 1.4, tok, p95 / 2, p95, 1.0, 0.6, sustained_rps=rate)


def _change(slow: float, spread: float = 0.0, max_mde: float = math.inf) -> object:
    blocks = [
        Block(side, i, tuple(1000.0 * (slow if side == "candidate" else 1.0) * (1 + d) for d in (
            -0.01, 0.0, 0.01)) if i != 3 else tuple(1000.0 * (1 + spread) for _ in range(3)))
        for i, side in enumerate(("baseline", "candidate", "candidate", "baseline"))
    ]  # fmt: skip
    return compare(
        "decode_tok_s_per_request_at_concurrency_2", blocks, boot_sd=0.0115, max_mde=max_mde
    )


def _report(tmp_path: Path, **kw: object) -> bench_report.BenchReport:
    rows = (_point(3, 210.123, 0.2104), _point(6, 401.5, 0.61), _point(9, 4433.257, 1.7))
    run = bench_report.ImageRun(
        "img:new", "sha256:1", rows, rows[1], bench_report.SingleStream(341.0, 3.37),
        knee_above=9.0,
    )  # fmt: skip
    base = dict(
        scenario="standin-cpu",
        scenario_path=tmp_path / "standin-cpu.toml",
        hardware="standin-cpu",
        dataset=GENERATED_SHARED_PREFIX,
        expected_hit=0.6,
        knee_rule=Knee(1.0, 1.0),
        run=run,
        baseline=bench_report.ImageRun("reg/img@sha256:2", "sha256:2", (), None, None),
        changes=(_change(0.95),),
        refused=(),
        report_dir=tmp_path / "standin-cpu-20261202T000000Z-abcd1234",
        started_at="2026-12-02T00:00:00+00:00",
        duration_s=61.0,
        repeats=2,
    )
    base.update(kw)
    return bench_report.BenchReport(**base)  # type: ignore[arg-type]


def _mermaid_blocks(md: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)```", md, re.S)


def _series(block: str, kind: str) -> list[list[float]]:
    return [
        [float(x) for x in m.split(",")]
        for m in re.findall(rf'^\s*{kind} (?:"[^"]*" )?\[([^\]]*)\]', block, re.M)
    ]


def test_the_step_summary_holds_the_table_the_comparison_and_charts_of_the_reports_numbers(
    tmp_path: Path,
) -> None:
    report = _report(tmp_path)
    doc = bench_report.report_dict(report)
    md = bench_view.markdown(report)
    assert "| offered RPS | sustained RPS | output tok/s/node |" in md
    assert "| 6 (knee) | 6.00 | 402 |" in md
    # The comparison as a table: both sides, the change, the interval, the verdict.
    assert "| figure | baseline | candidate | change | 90 % CI |" in md
    assert "| decode_tok_s_per_request_at_concurrency_2 | 1000.0 | 950.0 | -5.0% |" in md
    # Charts GitHub renders (an SVG path on the runner renders nowhere): the same numbers
    # as report.json's sweep, in rate order, and the TTFT limit as its own line.
    # The measured series dark, the limit pale and drawn first, the knee's bar green; each
    # titled, and a legend in words under each chart with the STAND-IN label and the knee.
    tok_chart, ttft_chart, vs_chart = _mermaid_blocks(md)
    for block in (tok_chart, ttft_chart):
        assert block.startswith("%%{init: ") and "\nxychart-beta\n" in block
        assert 'x-axis "offered request rate (requests/s)" ["3", "6 knee", "9"]' in block
        legend = md.split(block)[1].split("\n")[2]
        assert legend.startswith("Legend: ") and "STAND-IN" in legend and "knee 6 RPS" in legend
    assert _series(tok_chart, "bar") == [[p["output_tok_s"] for p in doc["sweep"]]]
    assert '"plotColorPalette": "#1f4e9c"' in tok_chart
    limit, ttft = _series(ttft_chart, "line")
    assert ttft == [p["ttft_p95_s"] for p in doc["sweep"]] and limit == [1.0, 1.0, 1.0]
    assert '"plotColorPalette": "#e8a0a0, #1f4e9c"' in ttft_chart
    assert ".line-plot-0 path { stroke-dasharray" in ttft_chart
    assert 'line "limit 1 s (a limit, not measured)"' in ttft_chart
    # A compared run: the baseline's figure beside the candidate's, as report.json has them.
    (change,) = doc["regression"]["changes"]
    assert _series(vs_chart, "bar") == [[change["baseline"], 0.0], [0.0, change["candidate"]]]
    assert '["concurrency 2: baseline", "concurrency 2: this image"]' in vs_chart
    # the 0 beside each bar is not drawn (Mermaid would draw a stub above the axis)
    assert ".bar-plot-0 rect:nth-of-type(2) { display: none; }" in vs_chart
    assert ".bar-plot-1 rect:nth-of-type(1) { display: none; }" in vs_chart
    for block in _mermaid_blocks(md):
        title = re.search(r'title "(.*)"', block)
        assert title and len(title.group(1)) <= 50
    assert "/tmp" not in md.split("```mermaid")[-1] and "`build/bench/` artifact" in md


def test_the_junit_carries_the_bench_figures_as_properties_and_system_out(
    tmp_path: Path,
) -> None:
    report = _report(tmp_path)
    xml = bench_view.junit_xml(report)
    assert_valid_junit(xml)
    root = ET.fromstring(xml.split("\n", 1)[1])
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["figure.bench.hardware"] == "standin-cpu"
    assert props["figure.bench.knee.request_rate"] == "6" and props["figure.bench.knee.failed_at"]
    assert props["figure.bench.single_stream.decode_tok_s"] == "341.0"
    name = "figure.bench.vs_baseline.decode_tok_s_per_request_at_concurrency_2"
    assert float(props[f"{name}.delta"]) == pytest.approx(-0.05, abs=1e-3)
    assert props[f"{name}.status"] == "regressed" and props["figure.bench.comparison.ran"]
    suite_out = root.find("testsuite/system-out")
    assert suite_out is not None and "knee: 6 RPS offered" in (suite_out.text or "")

    # A publish's JUnit carries the same figures (from the release record's bench figures)
    # and the bench stage's case holds the table.
    result = publish_mod.PublishResult(
        target="mi355x", registry="r", image="i", immutable="r/i:v", friendly=(),
        scenario="standin-cpu", dry_run=False, skip_smoke=False,
        steps=(publish_mod.Step("bench", False, 61.0, "FAILED: dropped"),),
        gates=(bench_gate(report, ok=False),), error="bench failed",
    )  # fmt: skip
    pxml = publish_view.junit_xml(result, "mi355x")
    assert_valid_junit(pxml)
    proot = ET.fromstring(pxml.split("\n", 1)[1])
    pprops = {p.get("name"): p.get("value") for p in proot.iter("property")}
    assert pprops[f"{name}.status"] == "regressed"
    assert pprops["figure.bench.knee.request_rate"] == "6"
    (case,) = [c for c in proot.iter("testcase") if c.get("name") == "bench"]
    out = case.find("system-out")
    assert out is not None and "| 6 (knee)" not in (out.text or "")  # text, not Markdown
    assert "offered RPS" in (out.text or "") and "vs baseline:" in (out.text or "")


def test_the_init_workflow_uploads_the_bench_and_summarises_it() -> None:
    from sglforge.init import project_files

    wf = yaml.safe_load(project_files(watch=False)[".github/workflows/sglforge.yml"].decode())
    steps = wf["jobs"]["publish"]["steps"]
    run = next(s for s in steps if "sglforge publish" in str(s.get("run", "")))
    assert '--summary "$GITHUB_STEP_SUMMARY"' in run["run"] and "--junit" in run["run"]
    upload = next(s for s in steps if "upload-artifact" in str(s.get("uses", "")))
    assert upload["if"] == "always()"
    paths = upload["with"]["path"].split()
    # where the bench writes (sglforge.bench.runner: build/bench/<run>/) is uploaded
    assert "build/bench/" in paths and "build/reports/" in paths


@pytest.mark.parametrize(
    ("kw", "expected", "not_expected"),
    [
        # boots spread too far for 2 + 2 to rule out 3 %: more boots (the option named), or
        # measure the node, or accept; never --no-baseline, which is for nothing to compare with
        ({"changes": ("spread",)}, ("repeats = 4", "sglforge bench --calibrate",
         "--accept-regression REASON"), ("--no-baseline",)),
        ({"changes": ("drop",)}, ("--accept-regression REASON",), ("repeats",)),
        # no drop found, but 2 + 2 boots cannot rule out the 1 % a pass must: more boots or
        # requests, or a bound the scenario really needs
        ({"changes": ("weak",)}, ("repeats = 4", "num_prompts", "1.0% drop ([bench.gate] max_mde)",
          "--accept-regression REASON"), ("boot_sd", "--no-baseline")),
        ({"refused": ("mean input 430 tokens",)}, ("declared lengths",), ("--accept",)),
    ],
    ids=["inconclusive", "regressed", "underpowered", "refused"],
)  # fmt: skip
def test_a_failed_bench_says_what_to_run_next(
    tmp_path: Path, kw: dict[str, object], expected: tuple[str, ...], not_expected: tuple[str, ...]
) -> None:
    changes = {
        "spread": (_change(1.0, spread=0.4, max_mde=0.03),),
        "drop": (_change(0.9),),
        "weak": (_change(1.0, max_mde=0.01),),
    }
    if "changes" in kw:
        kw = {"changes": changes[kw["changes"][0]]}  # type: ignore[index]
    report = _report(tmp_path, **kw)
    assert not report.ok
    hint = bench_report.next_step(report)
    assert all(e in hint for e in expected) and not any(n in hint for n in not_expected), hint
    assert f"next: {hint}" in bench_view.text(report)
    assert f"- next: {hint}" in bench_view.markdown(report)
    assert bench_report.next_step(_report(tmp_path, changes=(_change(1.0),))) == ""
