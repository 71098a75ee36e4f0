"""The numbers of a bench: one sweep point from bench_serving's JSONL, the knee, the prefix-cache
hit rate from the server's Prometheus counters, and the paired comparison with a baseline."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


def min_requests(q: float = 0.95, confidence: float = 0.95) -> int:
    """The fewest requests whose largest TTFT bounds the ``q`` quantile at ``confidence``."""
    return math.ceil(math.log(1 - confidence) / math.log(q))


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
    request's decode tok/s at fixed concurrency), in boot order."""

    side: str
    order: int
    samples: tuple[float, ...]

    def log_mean(self) -> float:
        return math.fsum(math.log(x) for x in self.samples) / len(self.samples)

    def log_var_of_mean(self) -> float:
        """The variance of :meth:`log_mean` from the requests' spread (0 for one request)."""
        n = len(self.samples)
        if n < 2:
            return 0.0
        logs = [math.log(x) for x in self.samples]
        m = math.fsum(logs) / n
        return math.fsum((x - m) ** 2 for x in logs) / (n - 1) / n


@dataclass(frozen=True)
class Change:
    """One figure compared between baseline and candidate blocks.

    ``mean`` is the relative change (geometric means of the blocks, ``candidate / baseline -
    1``); ``low``..``high`` its two-sided interval at ``1 - 2 x alpha``, so ``high`` is the
    one-sided ``1 - alpha`` upper bound the decision uses. ``mde`` is the smallest drop this
    design detects with ``power`` (at ``alpha``), given its blocks and their spread.
    """

    figure: str
    baseline: float
    candidate: float
    mean: float
    low: float
    high: float
    confidence: float  # 1 - alpha: the one-sided level of the upper bound
    tolerance: float
    mde: float
    power: float
    boots: tuple[int, int]  # baseline, candidate
    requests: tuple[int, int]
    boot_sd: float  # the declared per-boot noise (standard deviation of log speed)
    observed_sd: float | None  # the blocks' own spread around their side's mean
    status: str
    why: str = ""
    deltas: tuple[float, ...] = ()  # each candidate block against the baseline mean
    max_mde: float = math.inf  # the drop a pass must rule out ([bench.gate] max_mde)

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
            "delta": self.mean,
            "ci": [self.low, self.high],
            "ci_level": 1 - 2 * (1 - self.confidence),
            "confidence": self.confidence,
            "tolerance": self.tolerance,
            "minimum_detectable_effect": self.mde,
            "power": self.power,
            "boots": {"baseline": self.boots[0], "candidate": self.boots[1]},
            "requests": {"baseline": self.requests[0], "candidate": self.requests[1]},
            "boot_sd": self.boot_sd,
            "observed_boot_sd": self.observed_sd,
            "block_deltas": list(self.deltas),
            "max_mde": self.max_mde if math.isfinite(self.max_mde) else None,
        }


def chi2_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of chi-square with ``df`` degrees of freedom (Wilson-Hilferty)."""
    z = statistics.NormalDist().inv_cdf(p)
    k = float(df)
    return k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3


@dataclass(frozen=True)
class _Logs:
    """Each side's blocks as log figures: every block's mean log sample, the variance of
    that mean from its requests' spread, and each side's mean over its blocks."""

    means: dict[str, list[float]]
    within: dict[str, list[float]]
    mb: float  # the baseline's mean log figure
    mc: float  # the candidate's

    @classmethod
    def of(cls, by_side: Mapping[str, Sequence[Block]]) -> _Logs:
        """The log figures of each side's blocks (at least one block a side)."""
        means = {s: [b.log_mean() for b in by_side[s]] for s in SIDES}
        within = {s: [b.log_var_of_mean() for b in by_side[s]] for s in SIDES}
        mb, mc = statistics.fmean(means["baseline"]), statistics.fmean(means["candidate"])
        return cls(means, within, mb, mc)

    @property
    def boots(self) -> tuple[int, int]:
        """The blocks on each side: (baseline, candidate)."""
        return len(self.means["baseline"]), len(self.means["candidate"])

    def standard_error(self, boot_sd: float) -> float:
        """The declared per-boot noise over each side's boots, plus the requests' own spread
        within each block."""
        nb, nc = self.boots
        var = boot_sd**2 * (1 / nb + 1 / nc)
        var += sum(self.within["baseline"]) / nb**2 + sum(self.within["candidate"]) / nc**2
        return math.sqrt(var)

    def spread(self, boot_sd: float, noise_check: float) -> tuple[float | None, str, str]:
        """(the blocks' observed sd around their side's mean, PASSED or INCONCLUSIVE, why):
        INCONCLUSIVE when the spread is beyond the declared noise (chi-square at
        ``noise_check``); no observed sd with one block a side."""
        nb, nc = self.boots
        dof = nb + nc - 2
        if dof <= 0:
            return None, PASSED, ""
        ss = sum((m - self.mb) ** 2 for m in self.means["baseline"])
        ss += sum((m - self.mc) ** 2 for m in self.means["candidate"])
        observed = math.sqrt(ss / dof)
        expected = boot_sd**2 + statistics.fmean(self.within["baseline"] + self.within["candidate"])
        if expected <= 0 or ss / expected > chi2_quantile(noise_check, dof):
            why = (
                f"the boots spread {observed:.2%} (sd of log speed), beyond the declared "
                f"per-boot noise {boot_sd:.2%}: the interval would not hold"
            )
            return observed, INCONCLUSIVE, why
        return observed, PASSED, ""


def best_mde(
    boots_per_side: int, boot_sd: float, confidence: float, tolerance: float, power: float = 0.9
) -> float:
    """The smallest minimum detectable effect a comparison of ``boots_per_side`` ABBA boots a
    side can reach: the declared per-boot noise alone (the requests' spread only adds to it;
    :func:`compare` computes the same figure with it)."""
    z = statistics.NormalDist().inv_cdf(confidence) + statistics.NormalDist().inv_cdf(power)
    return detectable(z, boot_sd * math.sqrt(2 / max(boots_per_side, 1)), tolerance)


def detectable(z: float, se: float, tolerance: float) -> float:
    """The drop detected at ``z`` (the decision's plus the power's normal quantiles) with
    standard error ``se`` of the log change: the one formula :func:`compare` and
    :func:`best_mde` share."""
    return -math.expm1(-(z * se)) + tolerance


def _blocks_by_side(figure: str, blocks: Sequence[Block]) -> dict[str, list[Block]]:
    """Each side's blocks that have samples (BenchError for a non-finite or non-positive
    sample, naming the side and boot)."""
    for b in blocks:
        require_finite(figure, b.samples, f"{b.side} boot {b.order + 1}")
    return {side: [b for b in blocks if b.side == side and b.samples] for side in SIDES}


def compare(
    figure: str,
    blocks: Sequence[Block],
    *,
    boot_sd: float,
    confidence: float = 0.95,
    tolerance: float = 0.0,
    power: float = 0.9,
    noise_check: float = 0.999,
    max_mde: float = math.inf,
) -> Change:
    """Compare the candidate's blocks with the baseline's (ABBA boots on one node).

    Each block's figure is the mean log of its per-request samples; each side's is the mean of
    its blocks. The standard error adds the declared per-boot noise (``boot_sd``, which
    boots do not average away within a boot) to the requests' own spread within each block.
    The interval's coverage under the stand-in's cost model is checked by the seeded study in
    ``bench/power_study.py`` (its table is in docs/bench.md).

    The verdict is never a pass by default: without a block on each side, when the blocks
    spread beyond the declared noise (chi-square at ``noise_check``), or when no significant
    drop was found but the comparison could not have seen a drop of ``max_mde`` (its minimum
    detectable effect at ``power`` is larger), it is INCONCLUSIVE: a pass says a drop of
    ``max_mde`` would have been caught. Non-finite samples raise BenchError.
    """
    by_side = _blocks_by_side(figure, blocks)
    nb, nc = len(by_side["baseline"]), len(by_side["candidate"])
    reqs = (
        sum(len(b.samples) for b in by_side["baseline"]),
        sum(len(b.samples) for b in by_side["candidate"]),
    )
    z = statistics.NormalDist().inv_cdf(confidence)
    z_power = statistics.NormalDist().inv_cdf(power)
    if not math.isfinite(boot_sd) or boot_sd < 0:
        raise ValueError(f"boot_sd must be a finite standard deviation, not {boot_sd!r}")
    if nb == 0 or nc == 0:
        missing = "baseline" if nb == 0 else "candidate"
        return Change(
            figure, 0.0, 0.0, 0.0, 0.0, 0.0, confidence, tolerance, math.inf, power,
            (nb, nc), reqs, boot_sd, None, INCONCLUSIVE, f"no {missing} boot measured",
        )  # fmt: skip
    logs = _Logs.of(by_side)
    mb, mc = logs.mb, logs.mc
    d = mc - mb
    se = logs.standard_error(boot_sd)
    observed, status, why = logs.spread(boot_sd, noise_check)
    high = d + z * se
    low = d - z * se
    mde = detectable(z + z_power, se, tolerance)
    if status == PASSED and math.expm1(high) < -tolerance:
        status = REGRESSED
    elif status == PASSED and mde > max_mde:
        status = INCONCLUSIVE
        why = (
            f"no significant drop, but this comparison sees only a drop of {mde:.1%} or more "
            f"({power:.0%} power), not the {max_mde:.1%} a pass must rule out"
        )
    return Change(
        figure=figure,
        baseline=math.exp(mb),
        candidate=math.exp(mc),
        mean=math.expm1(d),
        low=math.expm1(low),
        high=math.expm1(high),
        confidence=confidence,
        tolerance=tolerance,
        mde=mde,
        power=power,
        boots=(nb, nc),
        requests=reqs,
        boot_sd=boot_sd,
        observed_sd=observed,
        status=status,
        why=why,
        deltas=tuple(math.expm1(m - mb) for m in logs.means["candidate"]),
        max_mde=max_mde,
    )
