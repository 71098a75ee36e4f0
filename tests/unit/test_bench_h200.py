"""The gate on real data: 10 boots of one real sglang 0.5.14 server on an NVIDIA H200
(tests/data/h200-run/probes/, bench_serving's own ``--output-details`` JSONL, verbatim).

The same image booted 10 times is the truest "unchanged candidate" there is: fed as ABBA
baseline and candidate in any arrangement, the gate must never call it a drop; calibrated on
these boots, it must refuse before any boot and name the noise and the boots it would take."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from sglforge.bench import noise as node_noise
from sglforge.bench.cost import require_passable
from sglforge.bench.stats import REGRESSED, Block, Looks, abba, compare, point_from_result
from sglforge.errors import ConfigError
from sglforge.scenario.file import load_scenario

DATA = Path(__file__).resolve().parents[1] / "data" / "h200-run" / "probes"
REPO = Path(__file__).resolve().parents[2]
# per boot, from ../shared/h200-run/analyze.py (its own code, not sglforge's): the geometric
# mean of the requests' decode tok/s and the intra-batch correlation in waves of 16
GEOMEAN = (183.3, 188.2, 197.6, 267.1, 230.2, 207.3, 223.3, 270.8, 204.3, 229.3)
ICC = (0.27, 0.42, 0.58, 0.51, 0.36, 0.73, 0.65, 0.79, 0.57, 0.61)


@cache
def result(boot: int) -> dict[str, Any]:
    with gzip.open(DATA / f"boot{boot:02d}-probe1.jsonl.gz", "rt") as f:
        doc: dict[str, Any] = json.loads(f.readline())
    return doc


@cache
def speeds(boot: int) -> tuple[float, ...]:
    return point_from_result(math.inf, result(boot), None).decode_tok_s


def test_real_bench_serving_output_reads_as_its_own_figures() -> None:
    for boot in range(1, 11):
        raw = result(boot)
        p = point_from_result(math.inf, raw, None)
        assert (p.requests, p.completed, p.success_rate) == (64, 64, 1.0)
        assert p.output_tok_s == raw["output_throughput"] and p.tpot_ms == raw["mean_tpot_ms"]
        assert p.ttft_p95_s == pytest.approx(raw["p95_ttft_ms"] / 1000)
        assert p.ttft_p50_s == pytest.approx(raw["median_ttft_ms"] / 1000)
        assert p.accept_length == 1.0  # a random draft model: acceptance 1 by construction
        # each request's decode speed: tokens after the first over the sum of its ITLs
        expected = [
            (n - 1) / sum(itl) for n, itl in zip(raw["output_lens"], raw["itls"], strict=True)
        ]
        assert p.decode_tok_s == pytest.approx(expected, rel=1e-12)
        assert p.ttfts == tuple(raw["ttfts"])
        geo = math.exp(statistics.fmean(math.log(x) for x in p.decode_tok_s))
        assert geo == pytest.approx(GEOMEAN[boot - 1], abs=0.06)
        # 64 requests at concurrency 16, every one 256 tokens: a p95 bound exists
        assert p.ttft_p95_upper_s is not None and p.ttft_p95_upper_s >= p.ttft_p95_s


def test_the_node_profile_of_these_boots_is_what_was_measured() -> None:
    blocks = [Block("baseline", i, speeds(i + 1), 16) for i in range(10)]
    for b, icc in zip(blocks, ICC, strict=True):
        assert node_noise.intra_batch_correlation(b.samples, 16) == pytest.approx(icc, abs=0.006)
    prof = node_noise.measure(blocks, scenario="h200", hardware="1x NVIDIA H200", figure="d")
    assert prof.boot_sd == pytest.approx(0.134, abs=0.001)  # the README's 13.4 %
    assert prof.correlation == pytest.approx(statistics.fmean(ICC), abs=0.005)
    # within a boot, from its 4 waves: half the boot-to-boot spread; the requests taken as
    # independent would say a third of that
    assert prof.within_sd is not None and 0.05 < prof.within_sd < 0.08
    naive = statistics.fmean(
        statistics.variance([math.log(x) for x in b.samples]) / 64 for b in blocks
    )
    assert prof.within_sd > 2.5 * math.sqrt(naive)


ARRANGEMENTS = {
    "boots 1-8 ABBA": (list(range(1, 9)), None),
    "boots 3-10 ABBA (warm caches)": (list(range(3, 11)), None),
    "boots 1-8, roles swapped": (list(range(1, 9)), "swap"),
    "boots 1-8 alternating AB": (list(range(1, 9)), "ab"),
    "odd boots baseline, even candidate": ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "ab"),
    "boots 10 down to 3 ABBA": (list(range(10, 2, -1)), None),
}


def _blocks(boots: list[int], how: str | None) -> list[Block]:
    order = list(abba(len(boots) // 2 + len(boots) % 2))[: len(boots)]
    if how == "swap":
        order = ["candidate" if s == "baseline" else "baseline" for s in order]
    elif how == "ab":
        order = ["baseline" if i % 2 == 0 else "candidate" for i in range(len(boots))]
    return [
        Block(side, i, speeds(b), 16) for i, (side, b) in enumerate(zip(order, boots, strict=True))
    ]


@pytest.mark.parametrize("name", list(ARRANGEMENTS))
def test_the_unchanged_image_is_never_called_a_drop(name: str) -> None:
    boots, how = ARRANGEMENTS[name]
    blocks = _blocks(boots, how)
    plain = compare("decode", blocks, boot_sd=0.0115, max_mde=0.03)
    assert plain.status != REGRESSED, plain
    # the boots' own spread is what the interval used, never the declared 1.15 %
    assert plain.boot_sd > 0.08 and plain.dof == len(boots) - 2, plain
    # with a node profile from the other boots, and with the two looks
    others = sorted(set(range(1, 11)) - set(boots))
    rest = [Block("baseline", i, speeds(b), 16) for i, b in enumerate(others)]
    noise = (
        node_noise.measure(rest, scenario="h", hardware="h", figure="d").noise()
        if len(rest) > 1
        else None
    )
    for looks in (None, Looks(2, len(boots) // 2)):
        c = compare("decode", blocks, noise=noise, max_mde=0.03, looks=looks)
        assert c.status != REGRESSED, (looks, c)
        first = compare("decode", blocks[:4], noise=noise, max_mde=0.03, looks=looks)
        assert first.status != REGRESSED, (looks, first)


def test_no_arrangement_of_eight_of_the_ten_boots_is_a_drop() -> None:
    """Every choice of 8 of the 10 boots in boot order, ABBA both ways round: 90 gates."""
    verdicts = []
    for chosen in itertools.combinations(range(1, 11), 8):
        for how in (None, "swap"):
            c = compare("decode", _blocks(list(chosen), how), boot_sd=0.0115, max_mde=0.03)
            verdicts.append(c.status)
    assert len(verdicts) == 90 and REGRESSED not in verdicts, verdicts


def test_calibrated_on_these_boots_the_gate_refuses_before_any_boot() -> None:
    blocks = [Block("baseline", i, speeds(i + 1), 16) for i in range(10)]
    noise = node_noise.measure(blocks, scenario="h", hardware="1x NVIDIA H200", figure="d")
    sc = load_scenario(REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml")
    assert sc.bench is not None
    with pytest.raises(ConfigError) as err:
        require_passable(sc.bench, sc.path, noise.noise())
    said = err.value.message
    assert "noise is 13.44% a boot" in said and "10 boots measured" in said, said
    takes = int(said.split("it would take ")[1].split(" ")[0])
    assert 200 < takes < 500, said  # ~ 2 x ((2.0 + 1.3) x 13.4 / 3) ^ 2
    assert f"max_repeats = {takes}" in err.value.hint
