"""The numbers of a bench: one sweep point from bench_serving's JSONL, the knee, the prefix-cache
hit rate from the server's Prometheus counters, and the paired comparison with a baseline."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sglforge.bench.dist import f_quantile, t_boundary, t_quantile, two_looks
from sglforge.scenario.bench import Knee

# sglang 0.5.14 srt/observability/metrics_collector.py:1428-1431 and :1507-1511: counters bumped
# per finished request; the hit rate over a sweep point is their growth's ratio.
PROMPT_TOKENS = "sglang:prompt_tokens_total"
CACHED_TOKENS = "sglang:cached_tokens_total"
HIT_GAUGE = "sglang:cache_hit_rate"  # metrics_collector.py:292-296: the last prefill batch's
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


@dataclass(frozen=True)
class Point:
    """One run of bench_serving at one request rate: the case study's columns (output tok/s
    per node, total tok/s labelled as total, TTFT p50/p95, success) and the tokens the server
    itself counted for it."""

    request_rate: float
    total_tok_s: float
    output_tok_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    success_rate: float
    cache_hit_rate: float | None
    completed: int = 0
    requests: int = 0
    accept_length: float | None = None
    tpot_ms: float | None = None
    refused: str = ""  # why the point does not count (hit rate or input length off)
    input_tokens: float | None = None  # mean per request, counted by the server
    output_tokens: float | None = None
    sustained_rps: float = 0.0  # completed / duration: what the server kept up with
    ttft_p95_upper_s: float | None = None  # one-sided upper bound of the p95 (None: too few)
    ttfts: tuple[float, ...] = ()
    decode_tok_s: tuple[float, ...] = ()  # per served request: (output - 1) / sum(ITL)

    def within(self, knee: Knee) -> bool:
        """Whether the point meets the knee rule with confidence: every request served and
        the upper confidence bound of TTFT p95 within the limit (a point too small to bound
        its p95 does not pass)."""
        bound = self.ttft_p95_s if self.ttft_p95_upper_s is None else self.ttft_p95_upper_s
        if self.ttfts and self.ttft_p95_upper_s is None:
            return False
        return (
            not self.refused
            and bound <= knee.ttft_p95_max_s
            and self.success_rate >= knee.min_success
        )


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )


def quantile_upper_bound(
    samples: Sequence[float], q: float = 0.95, confidence: float = 0.95
) -> float | None:
    """A one-sided ``confidence`` upper bound of the ``q`` quantile from the order statistics
    (distribution-free, as MLPerf Inference's early stopping bounds a latency percentile):
    the smallest ``x_(k)`` with ``P(Binomial(n, q) < k) >= confidence``. None when ``n`` is
    too small for any bound (fewer than 59 requests for p95 at 95 %)."""
    xs = sorted(samples)
    n = len(xs)
    cdf = 0.0
    for k in range(n):
        cdf += math.exp(_log_binom_pmf(k, n, q))
        if cdf >= confidence:
            return xs[k]
    return None


def metric_sums(text: str) -> dict[str, float]:
    """Every metric of a Prometheus text exposition, summed over its label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m or line.startswith("#"):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def hit_rate(before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
    """Cached / prompt tokens between two scrapes (None when nothing was prefilled)."""
    prompt = after.get(PROMPT_TOKENS, 0.0) - before.get(PROMPT_TOKENS, 0.0)
    cached = after.get(CACHED_TOKENS, 0.0) - before.get(CACHED_TOKENS, 0.0)
    return cached / prompt if prompt > 0 else None


def per_request(result: Mapping[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(TTFT of each served request, decode tok/s of each served request with 2+ tokens) from
    ``--output-details`` (0.5.14 bench_serving.py:1804-1811: ``output_lens`` is 0 for a failed
    request, ``itls`` its inter-token latencies; TPOT at :1072-1073 is the same quantity)."""
    lens, ttfts, itls, errors = (result.get(k) for k in ("output_lens", "ttfts", "itls", "errors"))
    if not (isinstance(lens, list) and isinstance(ttfts, list) and isinstance(itls, list)):
        return (), ()
    errs = errors if isinstance(errors, list) else [""] * len(lens)
    served, speeds = [], []
    for n, ttft, itl, err in zip(lens, ttfts, itls, errs, strict=False):
        if err or not isinstance(n, int) or n <= 0 or not isinstance(ttft, int | float):
            continue
        served.append(float(ttft))
        gap = (
            math.fsum(x for x in itl if isinstance(x, int | float)) if isinstance(itl, list) else 0
        )
        if n > 1 and gap > 0:
            speeds.append((n - 1) / gap)
    return tuple(served), tuple(speeds)


def point_from_result(
    rate: float,
    result: Mapping[str, Any],
    hit: float | None,
    counted: tuple[float | None, float | None] = (None, None),
    confidence: float = 0.95,
) -> Point:
    """A Point from the last JSONL line bench_serving wrote (sglang/bench_serving.py:1717-1770,
    with ``--output-details`` adding one ``errors`` entry per request, :1807-1814);
    ``counted`` is the server's mean input and output tokens per request."""
    errors = result.get("errors")
    completed = int(result.get("completed") or 0)
    requests = len(errors) if isinstance(errors, list) else completed
    duration = _opt(result.get("duration")) or 0.0
    ttfts, speeds = per_request(result)
    return Point(
        request_rate=rate,
        total_tok_s=float(result.get("total_throughput") or 0.0),
        output_tok_s=float(result.get("output_throughput") or 0.0),
        ttft_p50_s=float(result.get("median_ttft_ms") or 0.0) / 1000,
        ttft_p95_s=float(result.get("p95_ttft_ms") or 0.0) / 1000,
        success_rate=completed / requests if requests else 0.0,
        cache_hit_rate=hit,
        completed=completed,
        requests=requests,
        accept_length=_opt(result.get("accept_length")),
        tpot_ms=_opt(result.get("mean_tpot_ms")),
        input_tokens=counted[0],
        output_tokens=counted[1],
        sustained_rps=completed / duration if duration > 0 else 0.0,
        ttft_p95_upper_s=quantile_upper_bound(ttfts, 0.95, confidence) if ttfts else None,
        ttfts=ttfts,
        decode_tok_s=speeds,
    )


def _opt(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


@dataclass(frozen=True)
class Capacity:
    """The knee as a capacity: the highest probed rate meeting the rule (``rate``) and the
    lowest probed rate above it that did not (``above``; None when none failed): the knee
    lies in ``[rate, above)``, the search's uncertainty."""

    point: Point
    above: float | None

    @property
    def rate(self) -> float:
        return self.point.request_rate


def capacity(points: Sequence[Point], rule: Knee) -> Capacity | None:
    """The highest rate meeting the rule below the first that does not (a pass above a
    failure is noise, not capacity), with that failure as its upper bracket."""
    ordered = sorted(points, key=lambda p: p.request_rate)
    best: Point | None = None
    for p in ordered:
        if not p.within(rule):
            return Capacity(best, p.request_rate) if best else None
        best = p
    return Capacity(best, None) if best else None


def knee(rows: Sequence[Point], rule: Knee) -> Point | None:
    """The knee point (see :func:`capacity`)."""
    found = capacity(rows, rule)
    return found.point if found else None


# What a comparison concluded: a regression, no regression, or no verdict (never a pass).
REGRESSED = "regressed"
PASSED = "passed"
INCONCLUSIVE = "inconclusive"
SIDES = ("baseline", "candidate")
POWER = 0.9  # the power at which a comparison states its minimum detectable effect


def require_finite(figure: str, values: Sequence[float], where: str = "") -> None:
    """BenchError for a NaN, an infinity or a figure at or below zero: such a number is a
    broken measurement, never a speed that passes (or fails) a gate."""
    from sglforge.errors import BenchError

    for v in values:
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise BenchError(
                f"{figure}: the measurement {v!r} is not a finite speed above 0"
                + (f" ({where})" if where else ""),
                "read the bench_serving JSONL and the server log in the report folder",
            )


def abba(boots_per_side: int) -> tuple[str, ...]:
    """The boot order: baseline (A) and candidate (B) in ABBA blocks, ``boots_per_side`` each.

    Over an ABBA block each side comes first once and second once, so an order effect (the
    second boot of a pair running faster) and a linear drift of the node fall on both alike.
    """
    pattern = ("baseline", "candidate", "candidate", "baseline")
    return tuple(pattern[i % 4] for i in range(2 * max(boots_per_side, 0)))


@dataclass(frozen=True)
class Block:
    """One boot of one side: the per-request samples of the compared figure (e.g. each
    request's decode tok/s at fixed concurrency), in the order the client sent them.

    ``batch`` is the requests of one closed-loop wave (the probe's concurrency): requests
    decoded in one batch share its step times, so they are not independent samples (on an
    H200 the requests of one wave of 16 correlated at 0.62). The within-boot spread is taken
    from the means of whole waves, never from the requests as if independent. 1 (the
    default) is a figure whose requests run one at a time (the single stream)."""

    side: str
    order: int
    samples: tuple[float, ...]
    batch: int = 1

    def log_mean(self) -> float:
        return math.fsum(math.log(x) for x in self.samples) / len(self.samples)

    def batch_means(self) -> list[float]:
        """The mean log sample of each whole wave, in send order (a partial last wave is
        left out)."""
        size = max(self.batch, 1)
        logs = [math.log(x) for x in self.samples]
        return [math.fsum(logs[i : i + size]) / size for i in range(0, len(logs) - size + 1, size)]

    def log_var_of_mean(self) -> float | None:
        """The variance of :meth:`log_mean` from its waves' spread (None with fewer than two
        whole waves: nothing within the boot measures it)."""
        means = self.batch_means()
        if len(means) < 2:
            return None
        return _variance(means) / len(means)


def _variance(xs: Sequence[float]) -> float:
    """The sample variance in floats (statistics.variance's exact fractions are too slow for
    the power study's hundreds of thousands of comparisons)."""
    m = math.fsum(xs) / len(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


@dataclass(frozen=True)
class Noise:
    """A node's measured boot-to-boot noise of one compared figure (a calibration run's, or
    any node's profile file: ``sglforge.bench.noise``).

    ``boot_sd``: the standard deviation of one boot's mean log figure from boot to boot, with
    ``dof`` degrees of freedom (boots - 1), measured at ``requests`` requests a boot; it holds
    the within-boot part, ``within_sd`` (the standard deviation of a boot's mean from its
    waves), which alone more requests would shrink."""

    boot_sd: float
    dof: int
    requests: int = 0
    within_sd: float | None = None
    source: str = ""
    check: float = 0.95  # the F test's level at which a comparison's boots overrule it

    def at(self, requests: int) -> float:
        """The boot-to-boot sd for boots of ``requests`` requests (the within part scaled).

        At the measured shape it is the measured ``boot_sd``, whatever the waves said: the
        within part is at most the whole (on the H200's shared-prefix probes the waves spread
        2.9 % a boot's mean while the boots spread 1.4 %: a wave's place in the probe is the
        same in every boot, so part of the waves' spread never reaches the boots)."""
        if not (requests and self.requests) or self.within_sd is None:
            return self.boot_sd
        within = min(self.within_sd, self.boot_sd)
        between = self.boot_sd**2 - within**2
        return math.sqrt(between + within**2 * self.requests / requests)


@dataclass(frozen=True)
class Looks:
    """A group-sequential comparison: looked at after ``first`` boots a side (the first ABBA
    block) and at ``final``. Each side of the decision spends its error rate over the two
    looks (Lan-DeMets): a drop O'Brien-Fleming's way (the final look keeps nearly all of it,
    so the power stays), a pass Pocock's way (an unchanged image can stop at the first)."""

    first: int
    final: int

    @property
    def fraction(self) -> float:
        return self.first / self.final


@dataclass(frozen=True)
class Change:
    """One figure compared between baseline and candidate blocks.

    ``mean`` is the relative change (geometric means of the blocks, ``candidate / baseline -
    1``); ``low``..``high`` its interval: ``high`` the one-sided upper bound the drop decision
    uses, ``low`` the lower bound the pass decision uses (each at ``confidence``, adjusted for
    the looks). ``mde`` is the smallest drop this design detects with ``power``, given its
    boots and their noise.
    """

    figure: str
    baseline: float
    candidate: float
    mean: float
    low: float
    high: float
    confidence: float  # 1 - alpha: the one-sided level of each bound
    tolerance: float
    mde: float
    power: float
    boots: tuple[int, int]  # baseline, candidate
    requests: tuple[int, int]
    boot_sd: float  # the boot-to-boot noise the interval used (sd of a boot's mean log figure)
    observed_sd: float | None  # the blocks' own spread around their side's mean
    status: str
    why: str = ""
    deltas: tuple[float, ...] = ()  # each candidate block against the baseline mean
    max_mde: float = math.inf  # the drop a pass must rule out ([bench.gate] max_mde)
    dof: int = 0  # degrees of freedom of boot_sd (the t quantile's)
    noise_source: str = ""  # where boot_sd came from
    within_sd: float | None = None  # a boot mean's sd from its waves, pooled (reported only)
    look: int = 1  # boots a side at this look
    final: bool = True  # False: an interim look; INCONCLUSIVE there means "go on"

    @property
    def underpowered(self) -> bool:
        """No significant drop, but the design could not see ``max_mde``."""
        return self.status == INCONCLUSIVE and self.mde > self.max_mde and 0 not in self.boots

    @property
    def regressed(self) -> bool:
        """A significant drop: the one-sided upper bound below ``-tolerance``."""
        return self.status == REGRESSED

    @property
    def evaluated(self) -> bool:
        return self.status != INCONCLUSIVE

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "status": self.status,
            "regressed": self.regressed,
            "why": self.why or None,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "delta": self.mean if all(self.boots) else None,
            # JSON has no infinity: None where nothing measured the noise (no interval)
            "ci": [x if math.isfinite(x) else None for x in (self.low, self.high)],
            "ci_level": 1 - 2 * (1 - self.confidence),
            "confidence": self.confidence,
            "tolerance": self.tolerance,
            "minimum_detectable_effect": self.mde if math.isfinite(self.mde) else None,
            "power": self.power,
            "boots": {"baseline": self.boots[0], "candidate": self.boots[1]},
            "requests": {"baseline": self.requests[0], "candidate": self.requests[1]},
            "boot_sd": self.boot_sd,
            "boot_sd_dof": self.dof,
            "noise_source": self.noise_source or None,
            "observed_boot_sd": self.observed_sd,
            "within_boot_sd": self.within_sd,
            "block_deltas": list(self.deltas),
            "max_mde": self.max_mde if math.isfinite(self.max_mde) else None,
            "look": {"boots_a_side": self.look, "final": self.final},
        }


@dataclass(frozen=True)
class _Logs:
    """Each side's blocks as log figures: every block's mean log sample and each side's mean
    over its blocks."""

    means: dict[str, list[float]]
    within: list[float]  # each block's variance of its mean from its waves (where it has 2+)
    mb: float  # the baseline's mean log figure
    mc: float  # the candidate's

    @classmethod
    def of(cls, by_side: Mapping[str, Sequence[Block]]) -> _Logs:
        """The log figures of each side's blocks (at least one block a side)."""
        means = {s: [b.log_mean() for b in by_side[s]] for s in SIDES}
        within = [v for s in SIDES for b in by_side[s] if (v := b.log_var_of_mean()) is not None]
        mb, mc = (math.fsum(means[s]) / len(means[s]) for s in SIDES)
        return cls(means, within, mb, mc)

    @property
    def boots(self) -> tuple[int, int]:
        """The blocks on each side: (baseline, candidate)."""
        return len(self.means["baseline"]), len(self.means["candidate"])

    @property
    def dof(self) -> int:
        return sum(self.boots) - 2

    def squares(self) -> float:
        """The blocks' squared deviations from their side's mean."""
        ss = sum((m - self.mb) ** 2 for m in self.means["baseline"])
        return ss + sum((m - self.mc) ** 2 for m in self.means["candidate"])

    def within_sd(self) -> float | None:
        return math.sqrt(statistics.fmean(self.within)) if self.within else None


@dataclass(frozen=True)
class _Used:
    """The boot-to-boot noise a comparison uses: its sd, degrees of freedom, source, and a
    note when the node profile was overruled."""

    sd: float
    dof: int
    source: str
    note: str = ""


def _noise_used(logs: _Logs, noise: Noise | None, requests: int, floor: float) -> _Used:
    """The boots' own spread, pooled with the node profile's (its degrees of freedom added)
    unless the boots spread beyond it (F test at ``noise.check``: the profile is overruled
    and the boots' own spread is used alone); never below the declared ``floor``."""
    own_dof, ss = logs.dof, logs.squares()
    own = math.sqrt(ss / own_dof) if own_dof > 0 else None
    prior_dof = noise.dof if noise is not None and noise.boot_sd > 0 else 0
    prior = noise.at(requests) if noise is not None and prior_dof > 0 else None
    if noise is not None and prior is not None and own is not None:
        check = noise.check
        if (own / prior) ** 2 > f_quantile(check, own_dof, prior_dof):
            note = (
                f"the boots spread {own:.2%}, beyond the node profile's {prior:.2%} "
                f"(F test at {check:.0%}): the profile is overruled"
            )
            used = _Used(own, own_dof, "the boots' own spread (the node profile overruled)", note)
        else:
            dof = own_dof + prior_dof
            pooled = math.sqrt((ss + prior**2 * prior_dof) / dof)
            used = _Used(pooled, dof, "the node profile pooled with the boots' own spread")
    elif prior is not None:
        used = _Used(prior, prior_dof, "the node profile")
    elif own is not None:
        used = _Used(own, own_dof, "the boots' own spread")
    else:
        return _Used(0.0, 0, "none")
    if floor > used.sd:
        used = replace(used, sd=floor, source=f"{used.source}, raised to the declared {floor:.2%}")
    return used


def _boundaries(looks: Looks | None, n: int, alpha: float) -> tuple[float, float, bool]:
    """(the drop's normal boundary, the pass's, whether this is the final look) at ``n``
    boots a side."""
    if looks is None or looks.final <= looks.first:
        z = statistics.NormalDist().inv_cdf(1 - alpha)
        return z, z, True
    final = n >= looks.final
    drop = two_looks(alpha, looks.fraction, "obf")
    keep = two_looks(alpha, looks.fraction, "pocock")
    i = 1 if final else 0
    return drop[i], keep[i], final


def detectable(z: float, se: float, tolerance: float) -> float:
    """The drop detected at ``z`` (the decision's plus the power's quantiles) with standard
    error ``se`` of the log change: the one formula :func:`compare` and the plans share."""
    return -math.expm1(-(z * se)) + tolerance


def best_mde(
    boots_per_side: int, boot_sd: float, confidence: float, tolerance: float, power: float = 0.9
) -> float:
    """The minimum detectable effect of ``boots_per_side`` ABBA boots a side at a boot-to-boot
    noise ``boot_sd`` known exactly (normal quantiles): the best any comparison of them can
    do; a measured noise adds its t quantile (:func:`boots_needed`)."""
    z = statistics.NormalDist().inv_cdf(confidence) + statistics.NormalDist().inv_cdf(power)
    return detectable(z, boot_sd * math.sqrt(2 / max(boots_per_side, 1)), tolerance)


def plan_mde(
    boots_per_side: int,
    noise: Noise,
    *,
    requests: int,
    confidence: float,
    tolerance: float,
    power: float = 0.9,
) -> float:
    """The minimum detectable effect a comparison of ``boots_per_side`` boots a side expects
    on a node of ``noise`` (its t quantiles at the pooled degrees of freedom; the larger of
    the drop's and the pass's final boundaries: an unchanged image then passes with
    ``power``)."""
    n = max(boots_per_side, 1)
    dof = 2 * n - 2 + max(noise.dof, 0)
    if dof <= 0:
        return math.inf
    looks = Looks(2, n) if n > 2 else None
    drop, keep, _ = _boundaries(looks, n, 1 - confidence)
    c = max(t_boundary(drop, dof), t_boundary(keep, dof))
    return detectable(c + t_quantile(power, dof), noise.at(requests) * math.sqrt(2 / n), tolerance)


def boots_needed(
    noise: Noise,
    max_mde: float,
    *,
    requests: int,
    confidence: float,
    tolerance: float,
    power: float = 0.9,
    most: int = 256,
) -> int | None:
    """The fewest boots a side in whole ABBA blocks (2, 4, ...: one boot a side leaves the
    order effect uncancelled) whose comparison sees ``max_mde`` on a node of ``noise``; None
    when not even ``most`` would (a doubling, then a bisection over whole blocks: the
    detectable drop shrinks as the boots grow)."""

    def sees(n: int) -> bool:
        mde = plan_mde(
            n, noise, requests=requests, confidence=confidence, tolerance=tolerance, power=power
        )
        return mde <= max_mde

    low, high = 0, 2  # in boots a side: ``low`` does not see it, ``high`` is tried
    while not sees(high):
        if high >= most:
            return None
        low, high = high, min(2 * high, most - most % 2)
        if high <= low:
            return None
    while high - low > 2:
        mid = (low + high) // 4 * 2
        low, high = (low, mid) if sees(mid) else (mid, high)
    return high


def _blocks_by_side(figure: str, blocks: Sequence[Block]) -> dict[str, list[Block]]:
    """Each side's blocks that have samples (BenchError for a non-finite or non-positive
    sample, naming the side and boot)."""
    for b in blocks:
        require_finite(figure, b.samples, f"{b.side} boot {b.order + 1}")
    return {side: [b for b in blocks if b.side == side and b.samples] for side in SIDES}


def _verdict(low: float, high: float, gate: tuple[float, float], final: bool) -> tuple[str, str]:
    """(status, why) from the bounds of the log change; ``gate`` is (tolerance, max_mde)."""
    tolerance, max_mde = gate
    if math.expm1(high) < -tolerance:
        return REGRESSED, ""
    if math.expm1(low) > -max_mde:
        return PASSED, ""
    if not final:
        return INCONCLUSIVE, "an interim look: neither bound decides yet, the boots go on"
    return INCONCLUSIVE, (
        f"no significant drop, but the lower bound {math.expm1(low):+.1%} does not rule out "
        f"the {max_mde:.1%} drop a pass must"
    )


def _one_side(empty: Change, by_side: Mapping[str, Sequence[Block]]) -> Change:
    """No comparison: one side never booted. The side that did keeps its figure (the
    geometric mean of its boots); the other reads 0.0 with no boots, shown as "-"."""
    measured = {
        side: math.exp(statistics.fmean(statistics.fmean(map(math.log, b.samples)) for b in bs))
        for side, bs in by_side.items()
        if bs and all(b.samples for b in bs)
    }
    missing = "baseline" if not by_side.get("baseline") else "candidate"
    return replace(
        empty, why=f"no {missing} boot measured",
        baseline=measured.get("baseline", 0.0), candidate=measured.get("candidate", 0.0),
    )  # fmt: skip


def compare(
    figure: str,
    blocks: Sequence[Block],
    *,
    boot_sd: float = 0.0,
    noise: Noise | None = None,
    confidence: float = 0.95,
    tolerance: float = 0.0,
    max_mde: float = math.inf,
    looks: Looks | None = None,
) -> Change:
    """Compare the candidate's blocks with the baseline's (ABBA boots on one node).

    Each block's figure is the mean log of its samples; each side's, the mean of its blocks.
    The boots are the unit: the noise of a boot's figure (boot to boot, the within-boot part
    included) is measured, never declared: the blocks' own spread around their side's mean,
    pooled with the node profile ``noise`` (a calibration run's) when the blocks do not spread
    beyond it (F test at ``noise.check``; beyond it, the profile is overruled), with Student's
    t at the pooled degrees of freedom. ``boot_sd`` (the scenario's declared noise) is only a
    floor. With ``looks`` the error rates are spent over two looks (:class:`Looks`).

    REGRESSED when the upper bound of the change is below ``-tolerance``; PASSED when not and
    the lower bound is above ``-max_mde`` (a pass rules out that drop at ``confidence``);
    else INCONCLUSIVE, as with no block on a side or nothing measuring the noise (one boot a
    side, no profile). Non-finite samples raise BenchError.
    """
    if not math.isfinite(boot_sd) or boot_sd < 0:
        raise ValueError(f"boot_sd must be a finite standard deviation, not {boot_sd!r}")
    by_side = _blocks_by_side(figure, blocks)
    nb, nc = len(by_side["baseline"]), len(by_side["candidate"])
    reqs = tuple(sum(len(b.samples) for b in by_side[s]) for s in SIDES)
    empty = Change(
        figure, 0.0, 0.0, 0.0, -math.inf, math.inf, confidence, tolerance, math.inf, POWER,
        (nb, nc), (reqs[0], reqs[1]), boot_sd, None, INCONCLUSIVE, max_mde=max_mde,
    )  # fmt: skip
    if nb == 0 or nc == 0:
        return _one_side(empty, by_side)
    logs = _Logs.of(by_side)
    per_boot = round(sum(reqs) / (nb + nc))
    used = _noise_used(logs, noise, per_boot, boot_sd)
    drop_z, keep_z, final = _boundaries(looks, min(nb, nc), 1 - confidence)
    observed = math.sqrt(logs.squares() / logs.dof) if logs.dof > 0 else None
    d = logs.mc - logs.mb
    if used.dof <= 0:
        why = (
            "one boot a side and no node profile: nothing measured the boot-to-boot noise "
            "(run sglforge bench --calibrate on this node, or boot more a side)"
        )
        # what the boots measured, with no interval around it (none can be computed)
        return replace(
            empty, why=why, observed_sd=observed, within_sd=logs.within_sd(),
            baseline=math.exp(logs.mb), candidate=math.exp(logs.mc), mean=math.expm1(d),
            low=-math.inf, high=math.inf,
        )  # fmt: skip
    se = used.sd * math.sqrt(1 / nb + 1 / nc)
    c_drop, c_keep = t_boundary(drop_z, used.dof), t_boundary(keep_z, used.dof)
    high, low = d + c_drop * se, d - c_keep * se
    mde = detectable(c_drop + t_quantile(POWER, used.dof), se, tolerance)
    status, why = _verdict(low, high, (tolerance, max_mde), final)
    if status == INCONCLUSIVE and final and mde > max_mde:
        why = (
            f"no significant drop, but this comparison sees only a drop of {mde:.1%} or more "
            f"({POWER:.0%} power), not the {max_mde:.1%} a pass must rule out: the boots' "
            f"noise is {used.sd:.2%} a boot ({used.source})"
        )
    if used.note and status == INCONCLUSIVE:
        why = f"{why}; {used.note}"
    return Change(
        figure=figure, baseline=math.exp(logs.mb), candidate=math.exp(logs.mc),
        mean=math.expm1(d), low=math.expm1(low), high=math.expm1(high), confidence=confidence,
        tolerance=tolerance, mde=mde, power=POWER, boots=(nb, nc), requests=(reqs[0], reqs[1]),
        boot_sd=used.sd, observed_sd=observed, status=status, why=why,
        deltas=tuple(math.expm1(m - logs.mb) for m in logs.means["candidate"]),
        max_mde=max_mde, dof=used.dof, noise_source=used.source, within_sd=logs.within_sd(),
        look=min(nb, nc), final=final,
    )  # fmt: skip
