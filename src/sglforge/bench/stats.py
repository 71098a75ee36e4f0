"""The numbers of a bench: one sweep point from bench_serving's JSONL, the knee, the prefix-cache
hit rate from the server's Prometheus counters, and the paired comparison with a baseline."""

from __future__ import annotations

import math
import random
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglforge.bench.spec import Knee

# sglang 0.5.14 srt/observability/metrics_collector.py:1428-1431 and :1507-1511: counters bumped
# per finished request; the hit rate over a sweep point is their growth's ratio.
PROMPT_TOKENS = "sglang:prompt_tokens_total"
CACHED_TOKENS = "sglang:cached_tokens_total"
HIT_GAUGE = "sglang:cache_hit_rate"  # metrics_collector.py:292-296: the last prefill batch's
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


@dataclass(frozen=True)
class Point:
    """One run of bench_serving at one request rate (one repeat)."""

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
    refused: str = ""  # why the point does not count (hit rate far from the declared one)

    def within(self, knee: Knee) -> bool:
        """Whether the point meets the knee rule."""
        return (
            not self.refused
            and self.ttft_p95_s <= knee.ttft_p95_max_s
            and self.success_rate >= knee.min_success
        )


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


def point_from_result(rate: float, result: Mapping[str, Any], hit: float | None) -> Point:
    """A Point from the last JSONL line bench_serving wrote (sglang/bench_serving.py:1717-1770,
    with ``--output-details`` adding one ``errors`` entry per request, :1807-1814)."""
    errors = result.get("errors")
    completed = int(result.get("completed") or 0)
    requests = len(errors) if isinstance(errors, list) else completed
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
    )


def _opt(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def aggregate(points: Sequence[Point]) -> list[Point]:
    """One row per rate: the median of its repeats (a refused repeat refuses the row)."""
    by_rate: dict[float, list[Point]] = {}
    for p in points:
        by_rate.setdefault(p.request_rate, []).append(p)
    rows = []
    for rate in sorted(by_rate):
        ps = by_rate[rate]
        hits = [p.cache_hit_rate for p in ps if p.cache_hit_rate is not None]
        rows.append(
            Point(
                request_rate=rate,
                total_tok_s=statistics.median(p.total_tok_s for p in ps),
                output_tok_s=statistics.median(p.output_tok_s for p in ps),
                ttft_p50_s=statistics.median(p.ttft_p50_s for p in ps),
                ttft_p95_s=statistics.median(p.ttft_p95_s for p in ps),
                success_rate=min(p.success_rate for p in ps),
                cache_hit_rate=statistics.median(hits) if hits else None,
                completed=sum(p.completed for p in ps),
                requests=sum(p.requests for p in ps),
                refused="; ".join(dict.fromkeys(p.refused for p in ps if p.refused)),
            )
        )
    return rows


def knee(rows: Sequence[Point], rule: Knee) -> Point | None:
    """The largest rate meeting the knee rule (TTFT p95 within the limit, enough successes)."""
    good = [r for r in rows if r.within(rule)]
    return max(good, key=lambda r: r.request_rate) if good else None


@dataclass(frozen=True)
class Change:
    """A paired comparison of one figure: candidate / baseline - 1 per repeat, its mean and CI."""

    figure: str
    baseline: float
    candidate: float
    deltas: tuple[float, ...]
    mean: float
    low: float
    high: float
    confidence: float
    tolerance: float

    @property
    def regressed(self) -> bool:
        """A significant drop beyond the tolerance: the whole interval below ``-tolerance``
        (one pair measures no noise band, so it never counts as significant)."""
        return len(self.deltas) >= 2 and self.high < -self.tolerance

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "delta": self.mean,
            "ci": [self.low, self.high],
            "confidence": self.confidence,
            "tolerance": self.tolerance,
            "paired_deltas": list(self.deltas),
            "regressed": self.regressed,
        }


def paired_change(
    figure: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float,
    tolerance: float,
    resamples: int = 2000,
    seed: int = 0,
) -> Change | None:
    """The paired relative change of ``candidate`` against ``baseline`` with a bootstrap CI.

    Pairs are the repeats run back to back (baseline then candidate on the same node), so the
    node's drift cancels; the interval is the percentile bootstrap of the mean paired change
    (seeded: the same runs give the same verdict). None without a usable pair.
    """
    pairs = [(b, c) for b, c in zip(baseline, candidate, strict=False) if b > 0]
    if not pairs:
        return None
    deltas = tuple(c / b - 1.0 for b, c in pairs)
    mean = statistics.fmean(deltas)
    rng = random.Random(seed)
    n = len(deltas)
    means = sorted(statistics.fmean(rng.choices(deltas, k=n)) for _ in range(max(resamples, 1)))
    tail = (1.0 - confidence) / 2
    low = means[int(tail * (len(means) - 1))]
    high = means[int(math.ceil((1 - tail) * (len(means) - 1)))]
    return Change(
        figure=figure,
        baseline=statistics.median(b for b, _ in pairs),
        candidate=statistics.median(c for _, c in pairs),
        deltas=deltas,
        mean=mean,
        low=low,
        high=high,
        confidence=confidence,
        tolerance=tolerance,
    )
