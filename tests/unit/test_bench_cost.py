"""What the gate costs: the planned node-minutes of the TP8 scenario and their parts, and a knee
search that starts near the expected knee yet still finds one below it."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglforge.bench.cost import planned_cost
from sglforge.bench.runner import _search
from sglforge.bench.stats import Point
from sglforge.scenario.bench import Search
from sglforge.smoke import load_scenario

ROOT = Path(__file__).resolve().parents[2]
TP8 = ROOT / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"


def test_the_tp8_gate_plan_says_where_its_node_minutes_go() -> None:
    b = load_scenario(TP8).bench
    assert b is not None
    plan = planned_cost(b)
    parts = {p.name.split(",")[0].split(":")[0]: p for p in plan.parts}
    assert plan.boots == 8 and parts["boots"].minutes == 16.0  # 4 per side, ABBA
    assert plan.boot_source.startswith("declared")  # the MI355X's boot time is not measured
    # The search starts under the case study's 2.4 RPS knee: 2, 3.2, two bisections.
    assert parts["knee search"].name == "knee search, at most 4 probes"
    # every boot discards a warm-up probe of the compared shape (issue 40); the first one
    # calibrates the generated-shared-prefix lengths, so no probe runs twice
    assert parts["warm-up probe"].count == 8 and "calibration" not in parts
    assert parts["speed probe at concurrency 16"].count == 8
    # one discarded priming boot (with its warm-up probe) before the first ABBA block: on an
    # H200 the first boot of each machine lease stood 13-23 % from the later ones (issue 40)
    assert parts["priming boot"].count == 1
    assert parts["priming boot"].minutes_each == pytest.approx(
        2.0 + parts["warm-up probe"].minutes_each
    )
    assert plan.as_dict()["node_minutes"] == pytest.approx(33.7, abs=0.05)
    unprimed = planned_cost(b, priming=False)
    assert "priming boot" not in {p.name.split(",")[0] for p in unprimed.parts}
    assert unprimed.as_dict()["node_minutes"] == pytest.approx(31.1, abs=0.05)
    # without the warm-up: the first probe again (0.5.14: GSP lengths), issue 29's 30 held
    bare = planned_cost(b, warmup=False)
    bare_parts = {p.name.split(",")[0].split(":")[0]: p for p in bare.parts}
    assert bare_parts["calibration"].count == 1 and "warm-up probe" not in bare_parts
    assert bare.node_minutes <= 30  # 27.4 and the priming boot's 2.0 (no warm-up probe in it)
    primed = [p for p in bare.parts if p.name.startswith("priming boot")]
    assert [p.name for p in primed] == ["priming boot, discarded (no warm-up probe)"]
    assert primed[0].minutes_each == pytest.approx(2.0)
    assert bare.as_dict()["node_minutes"] == pytest.approx(29.4, abs=0.05)


def _probe(rate: float, passes: bool) -> Point:
    ttfts = tuple([0.5 if passes else 9.0] * 64)
    return Point(rate, 1.0, 1.0, 0.5, ttfts[0], 1.0, 0.6, ttfts=ttfts, ttft_p95_upper_s=ttfts[0])


@pytest.mark.parametrize(
    ("capacity", "probed"),
    [
        (2.5, [2.0, 3.2, 2.6, 2.3]),  # the knee bracketed from above
        (1.2, [2.0, 1.0, 1.5]),  # a slower server: the first probe fails, bisect below it
        (5.0, [2.0, 3.2]),  # beyond max_rate: "at least 3.2", no bisection
    ],
)
def test_the_knee_search_brackets_the_capacity_from_its_start(
    capacity: float, probed: list[float]
) -> None:
    b = load_scenario(TP8).bench
    assert b is not None
    ctx = SimpleNamespace(bench=replace(b, search=Search(2.0, 3.2, 2)), knee_prior=None, notes=[])
    asked: list[float] = []

    def measure(rate: float) -> Point:
        asked.append(rate)
        return _probe(rate, rate <= capacity)

    points = _search(ctx, measure)  # type: ignore[arg-type]
    assert asked == probed
    passed = [p.request_rate for p in points if p.within(b.knee)]
    assert passed and max(passed) <= capacity and math.isfinite(max(passed))
