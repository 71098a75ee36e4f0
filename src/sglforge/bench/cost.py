"""The node-minutes a bench (and the publish gate) plans to spend, from a scenario's ``[bench]``
table alone: boots, the knee search, the compared speed probes and the single streams.

Durations are planning figures: arrivals (requests / rate) plus one request's drain for an
open-loop probe, the output tokens over the node's output tok/s for a closed-loop probe, and the
``[bench.cost]`` boot time. ``sglforge bench`` reports what it really spent beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sglforge.bench.stats import best_mde
from sglforge.errors import ConfigError
from sglforge.scenario.bench import Bench


@dataclass(frozen=True)
class CostPart:
    """One line of the plan: what, how many, minutes each, minutes in all."""

    name: str
    count: int
    minutes_each: float

    @property
    def minutes(self) -> float:
        return self.count * self.minutes_each


@dataclass(frozen=True)
class PlannedCost:
    """The node-minutes one bench plans for one target (one node), and its parts."""

    parts: tuple[CostPart, ...]
    boots: int
    compared: bool
    best_mde: float | None = None  # compared: the smallest drop its boots can see (90 %)
    max_mde: float | None = None  # the drop a pass must rule out ([bench.gate] max_mde)

    @property
    def node_minutes(self) -> float:
        return math.fsum(p.minutes for p in self.parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "node_minutes": round(self.node_minutes, 1),
            "boots": self.boots,
            "compared": self.compared,
            "best_minimum_detectable_effect": _r4(self.best_mde),
            "max_mde": _r4(self.max_mde),
            "parts": [
                {
                    "name": p.name,
                    "count": p.count,
                    "minutes_each": round(p.minutes_each, 2),
                    "minutes": round(p.minutes, 1),
                }
                for p in self.parts
            ],
        }


def _r4(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def gate_best_mde(bench: Bench, boots_per_side: int | None = None) -> float:
    """The smallest drop a comparison of the scenario's boots can detect (90 % power): the
    declared per-boot noise alone, before any request's spread."""
    g = bench.gate
    n = bench.repeats if boots_per_side is None else boots_per_side
    return best_mde(n, g.boot_sd, g.confidence, g.tolerance)


def require_passable(bench: Bench, path: object) -> None:
    """ConfigError when no comparison of the scenario could pass: its boots cannot see the
    drop a pass must rule out (``max_mde``) even before the requests' spread. Checked before
    anything boots, so no node time goes to a verdict known in advance."""
    g = bench.gate
    best = gate_best_mde(bench)
    if best <= g.max_mde:
        return
    need = next(
        (n for n in range(bench.repeats + 1, 257) if gate_best_mde(bench, n) <= g.max_mde), None
    )
    fix = (
        f"set [bench] repeats = {need} in {path} (boots per side), or a larger [bench.gate] max_mde"
        if need
        else f"[bench.gate] max_mde must be above tolerance + the noise: raise it in {path}"
    )
    raise ConfigError(
        f"{path}: {bench.repeats} boot(s) a side with boot_sd {g.boot_sd:g} see at best a "
        f"{best:.1%} drop (90 % power), above [bench.gate] max_mde {g.max_mde:.1%}: no "
        "comparison could pass",
        fix,
    )


def search_rates(bench: Bench) -> int:
    """The most probes the knee search makes: the rate list (or the doubling from ``start``
    up to ``max_rate``), then its bisections."""
    if bench.search is None:
        return len(bench.request_rates) + 2
    s = bench.search
    doublings = max(0, math.ceil(math.log2(s.max_rate / s.start))) + 1
    return doublings + s.steps


def _search_rates(bench: Bench) -> list[float]:
    """The rates the knee search plans to probe (the bisections planned at 3/4 of the top)."""
    if bench.search is None:
        rates = list(bench.request_rates)
        rates += [rates[-1]] * 2  # the bisections stay below the last listed rate
    else:
        s = bench.search
        rates, r = [], s.start
        while r < s.max_rate:
            rates.append(r)
            r *= 2
        rates.append(s.max_rate)
        rates += [s.max_rate * 0.75] * s.steps  # bisections between the last pass and fail
    return rates


def _probe_minutes(bench: Bench, rate: float) -> float:
    """One knee probe at ``rate``: its arrivals plus one request's drain."""
    return (bench.prompts(bench.probe_prompts) / rate + _request_seconds(bench)) / 60


def _search_minutes(bench: Bench) -> float:
    """Minutes of the knee search's probes (arrivals plus one request's drain each)."""
    return math.fsum(_probe_minutes(bench, r) for r in _search_rates(bench))


def _request_seconds(bench: Bench) -> float:
    """One request under load: its output at the speed probe's per-stream share."""
    per_stream = bench.cost.output_tok_s / max(bench.speed.concurrency, 1)
    return bench.output_len / per_stream


def planned_cost(bench: Bench, *, compared: bool = True) -> PlannedCost:
    """The plan for one bench of ``bench`` (``compared``: against a baseline, ABBA)."""
    boots = 2 * bench.repeats if compared else 1
    c = bench.cost
    speed_n = bench.prompts(bench.speed.num_prompts)
    speed_minutes = (speed_n * bench.output_len / c.output_tok_s + _request_seconds(bench)) / 60
    parts = [
        CostPart("boots", boots, c.boot_minutes),
        CostPart(f"knee search, at most {search_rates(bench)} probes", 1, _search_minutes(bench)),
        # generated-shared-prefix lengths are text targets: the first probe runs once more
        # with calibrated lengths (sglang 0.5.14 has no random-ids-shared-prefix).
        CostPart(
            "calibration: the first probe again (generated-shared-prefix only)",
            1,
            _probe_minutes(bench, _search_rates(bench)[0]),
        ),
        CostPart(f"speed probe at concurrency {bench.speed.concurrency}", boots, speed_minutes),
    ]
    ss = bench.single_stream
    if ss is not None:
        each = ss.num_prompts * (ss.output_len / c.single_stream_tok_s) / 60
        parts.append(CostPart("single stream", boots, each))
    if not compared:
        return PlannedCost(tuple(parts), boots, compared)
    return PlannedCost(tuple(parts), boots, compared, gate_best_mde(bench), bench.gate.max_mde)
