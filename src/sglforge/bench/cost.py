"""The node-minutes a bench (and the publish gate) plans to spend, from a scenario's ``[bench]``
table alone: boots, the knee search, the compared speed probes and the single streams.

Durations are planning figures: arrivals (requests / rate) plus one request's drain for an
open-loop probe, the output tokens over the node's output tok/s for a closed-loop probe, and the
boot time: the node profile's measured one (``sglforge bench --calibrate``) when there is one,
else ``[bench.cost] boot_minutes``, labelled as declared. ``sglforge bench`` reports what it
really spent beside them.

The boots a side come from the node's measured noise when a profile exists (the fewest that
see ``[bench.gate] max_mde``, at most ``[bench] repeats``; more is refused before any boot,
naming the noise and the boots it would take), else ``repeats`` against the declared noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sglforge.bench.stats import Noise, best_mde, boots_needed, plan_mde
from sglforge.errors import ConfigError
from sglforge.scenario.bench import Bench

DECLARED_BOOT = "declared ([bench.cost] boot_minutes; not measured on this node)"


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
    boot_source: str = DECLARED_BOOT  # where the boot time comes from
    noise_sd: float | None = None  # the boot-to-boot noise the boots a side were planned for
    noise_source: str = ""  # "declared ([bench.gate] boot_sd)" or the node profile
    interim_boots: int | None = None  # boots in all at the early look (None: one look)

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
            "boot_source": self.boot_source,
            "noise_sd": _r4(self.noise_sd),
            "noise_source": self.noise_source or None,
            "interim_boots": self.interim_boots,
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


def gate_best_mde(
    bench: Bench, boots_per_side: int | None = None, noise: Noise | None = None
) -> float:
    """The smallest drop a comparison of the scenario's boots can detect (90 % power): with
    the node's measured ``noise`` its t quantiles included, else the declared per-boot noise
    alone, before any request's spread."""
    g = bench.gate
    n = bench.repeats if boots_per_side is None else boots_per_side
    if noise is not None:
        return plan_mde(
            n, noise, requests=_speed_requests(bench), confidence=g.confidence,
            tolerance=g.tolerance,
        )  # fmt: skip
    return best_mde(n, g.boot_sd, g.confidence, g.tolerance)


def _speed_requests(bench: Bench) -> int:
    return bench.prompts(bench.speed.num_prompts)


def boots_planned(bench: Bench, noise: Noise) -> int | None:
    """The fewest boots a side that see ``max_mde`` on a node of ``noise``, at most
    ``[bench.gate] max_repeats``; None when more would be needed (refused before any boot)."""
    g = bench.gate
    return boots_needed(
        noise, g.max_mde, requests=_speed_requests(bench), confidence=g.confidence,
        tolerance=g.tolerance, most=g.max_repeats,
    )  # fmt: skip


def boots_a_side(bench: Bench, noise: Noise | None) -> int:
    """The boots a side a comparison plans: from the node's measured noise the fewest that
    see ``max_mde`` (at most ``max_repeats``; :func:`require_passable` refuses more), else
    ``repeats``."""
    n = None if noise is None else boots_planned(bench, noise)
    return bench.repeats if n is None else n


def require_passable(bench: Bench, path: object, noise: Noise | None = None) -> None:
    """ConfigError when no comparison of the scenario could pass: its boots cannot see the
    drop a pass must rule out (``max_mde``). With the node's measured ``noise`` the message
    names it and the boots a side it would take; without, the declared per-boot noise.
    Checked before anything boots, so no node time goes to a verdict known in advance."""
    g = bench.gate
    if noise is not None:
        _require_measured(bench, path, noise)
        return
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


def _require_measured(bench: Bench, path: object, noise: Noise) -> None:
    g = bench.gate
    req = _speed_requests(bench)
    if boots_planned(bench, noise) is not None:
        return
    need = boots_needed(
        noise, g.max_mde, requests=req, confidence=g.confidence, tolerance=g.tolerance,
        most=4096,
    )  # fmt: skip
    best = gate_best_mde(bench, g.max_repeats, noise)
    takes = (
        f"it would take {need} boots a side"
        if need
        else "no number of boots would (max_mde is within the tolerance plus the noise)"
    )
    raise ConfigError(
        f"{path}: this node's boot-to-boot noise is {noise.at(req):.2%} a boot (sd of the "
        f"compared figure's log, {noise.dof + 1} boots measured: {noise.source}); "
        f"{g.max_repeats} boot(s) a side ([bench.gate] max_repeats) see at best a {best:.1%} "
        f"drop (90 % power), above [bench.gate] max_mde {g.max_mde:.1%}: {takes}",
        f"set [bench.gate] max_repeats = {need} in {path}, or a larger max_mde, or calibrate a "
        "quieter node (sglforge bench --calibrate)"
        if need
        else f"raise [bench.gate] max_mde in {path}, or calibrate a quieter node",
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


def warmup_prompts(bench: Bench) -> int:
    """The discarded warm-up probe's requests: two closed-loop waves of the compared shape
    (whole prompt groups), enough for the server to meet every batch size of the probe once
    (on an H200 the first probe after a boot carried first-use compilation: TTFT p95 601 ms
    against 96 ms in the second, decode once 7.3 % slower)."""
    return bench.prompts(2 * max(bench.speed.concurrency, 1))


def _closed_loop_minutes(bench: Bench, requests: int) -> float:
    return (requests * bench.output_len / bench.cost.output_tok_s + _request_seconds(bench)) / 60


def planned_cost(
    bench: Bench,
    *,
    compared: bool = True,
    noise: Noise | None = None,
    boot_minutes: tuple[float, str] | None = None,
    warmup: bool = True,
    priming: bool = True,
) -> PlannedCost:
    """The plan for one bench of ``bench`` (``compared``: against a baseline, ABBA), its boots
    a side from the node's measured ``noise`` when given (:func:`boots_a_side`), its boot time
    ``boot_minutes`` (minutes, where they were measured) when given, else the declared one.
    ``warmup``: each boot's discarded warm-up probe of the compared shape (unless the
    scenario's ``[bench.speed] warmup_probe`` is false). ``priming``: a comparison's discarded
    first boot, with its warm-up probe (unless ``[bench.gate] priming_boot`` is false)."""
    per_side = boots_a_side(bench, noise)
    boots = 2 * per_side if compared else 1
    warmup = warmup and bench.speed.warmup_probe
    c = bench.cost
    minutes, source = boot_minutes or (c.boot_minutes, DECLARED_BOOT)
    speed = _closed_loop_minutes(bench, _speed_requests(bench))
    parts = [
        CostPart("boots", boots, minutes),
        CostPart(f"knee search, at most {search_rates(bench)} probes", 1, _search_minutes(bench)),
    ]
    if warmup:
        # generated-shared-prefix lengths are text targets: the first warm-up calibrates them
        # (sglang 0.5.14 has no random-ids-shared-prefix), so no probe runs twice.
        each = _closed_loop_minutes(bench, warmup_prompts(bench))
        parts.append(CostPart("warm-up probe, discarded (the compared shape)", boots, each))
    else:
        parts.append(
            CostPart(
                "calibration: the first probe again (generated-shared-prefix only)",
                1,
                _probe_minutes(bench, _search_rates(bench)[0]),
            )
        )
    parts.append(CostPart(f"speed probe at concurrency {bench.speed.concurrency}", boots, speed))
    if compared and priming and bench.gate.priming_boot:
        probe = _closed_loop_minutes(bench, warmup_prompts(bench)) if warmup else 0.0
        what = "with its warm-up probe" if warmup else "no warm-up probe"
        parts.append(CostPart(f"priming boot, discarded ({what})", 1, minutes + probe))
    ss = bench.single_stream
    if ss is not None:
        each = ss.num_prompts * (ss.output_len / c.single_stream_tok_s) / 60
        parts.append(CostPart("single stream", boots, each))
    if not compared:
        return PlannedCost(tuple(parts), boots, compared, boot_source=source)
    g = bench.gate
    sd = noise.at(_speed_requests(bench)) if noise else g.boot_sd
    why = noise.source if noise else "declared ([bench.gate] boot_sd; not measured on this node)"
    return PlannedCost(
        tuple(parts), boots, compared, gate_best_mde(bench, per_side, noise), g.max_mde,
        boot_source=source, noise_sd=sd, noise_source=why,
        interim_boots=4 if per_side > 2 else None,
    )  # fmt: skip


def per_boot_minutes(plan: PlannedCost) -> float:
    """The minutes each boot adds (its boot time and its probes): what an early stop saves."""
    return math.fsum(p.minutes_each for p in plan.parts if p.count == plan.boots)


def minutes_for(plan: PlannedCost, boots: int) -> float:
    """The plan's node-minutes had it stopped after ``boots`` boots in all."""
    return plan.node_minutes - (plan.boots - boots) * per_boot_minutes(plan)
