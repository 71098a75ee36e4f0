"""The gate's statistics: ABBA boots, per-request samples, an interval whose coverage the seeded
power study checks (its table in docs/bench.md is held here), non-finite figures refused and an
unevaluated comparison never a pass."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sglforge.bench.stats import (
    INCONCLUSIVE,
    PASSED,
    REGRESSED,
    Block,
    abba,
    compare,
)
from sglforge.errors import BenchError

ROOT = Path(__file__).resolve().parents[2]


def _study() -> ModuleType:
    path = ROOT / "bench" / "power_study.py"
    spec = importlib.util.spec_from_file_location("power_study", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["power_study"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("node", ["+-2 %", "+-1 %"])
def test_the_power_table_in_the_docs_is_the_studys_and_meets_the_target(node: str) -> None:
    ps = _study()
    if node == "+-2 %":
        (row,) = ps.study(2000, 29, (ps.CHOSEN,))
        note = "noise +-2% per boot"
    else:  # the quieter node the 15 node-minute aim would need (docs/bench.md)
        (row,) = ps.study(2000, 29, (ps.QUIET_CHOSEN,), ps.QUIET_NOISE)
        note = "noise +-1% per boot"
    # The target of issue 29: a 3 % slowdown found with >= 90 % power at <= 5 % false alarms,
    # with the per-boot noise and per-request jitter; the 90 % interval covers about 90 %.
    assert row.power >= 0.90 and row.false_alarm <= 0.05, row
    assert 0.87 <= row.coverage <= 0.93 and row.inconclusive <= 0.03, row
    line = (
        f"| {row.boots} | {row.requests} | {row.false_alarm:.1%} | {row.power:.1%} | "
        f"{row.coverage:.1%} | {row.inconclusive:.1%} | {row.mde:.2%} |"
    )
    docs = (ROOT / "docs" / "bench.md").read_text()
    # the row, in the table whose footnote names its noise
    table = next(t for t in docs.split("\n\n") if line in t and "| boots per side" in t)
    footnote = docs[docs.index(table) + len(table) :].split("\n\n", 2)[1]
    assert note in footnote, f"docs/bench.md: the row {line} is not under the {node} table"


def _blocks(base: list[list[float]], cand: list[list[float]]) -> list[Block]:
    order = abba(max(len(base), len(cand)))
    queues = {"baseline": list(base), "candidate": list(cand)}
    out = []
    for i, side in enumerate(order):
        if queues[side]:
            out.append(Block(side, i, tuple(queues[side].pop(0))))
    return out


def test_abba_balances_order_and_drift() -> None:
    assert abba(1) == ("baseline", "candidate")
    assert abba(2) == ("baseline", "candidate", "candidate", "baseline")
    order = abba(4)
    for side in ("baseline", "candidate"):
        positions = [i for i, s in enumerate(order) if s == side]
        assert len(positions) == 4 and sum(positions) == 14  # linear drift cancels
        assert sum(p % 2 for p in positions) == 2  # second of a pair as often as first


@pytest.mark.parametrize("drop", [0.9, 0.5, 0.2, 0.1])
def test_one_boot_each_still_flags_a_large_drop(drop: float) -> None:
    # E10: one pair used to mean "never flags"; the declared boot noise makes it a test.
    blocks = _blocks([[1000.0] * 8], [[1000.0 * (1 - drop)] * 8])
    c = compare("decode_tok_s", blocks, boot_sd=0.0115)
    assert c.status == REGRESSED and c.regressed and c.mde < drop
    assert math.isclose(c.mean, -drop, rel_tol=1e-9)


def test_no_change_passes_and_states_its_minimum_detectable_effect() -> None:
    blocks = _blocks([[1000.0, 1010.0, 990.0]] * 4, [[1001.0, 1009.0, 991.0]] * 4)
    c = compare("decode_tok_s", blocks, boot_sd=0.0115)
    assert c.status == PASSED and not c.regressed and c.evaluated
    assert 0.0 < c.mde < 0.05 and c.boots == (4, 4) and c.requests == (12, 12)
    assert c.as_dict()["minimum_detectable_effect"] == c.mde


@pytest.mark.parametrize(
    "bad", [math.nan, math.inf, -math.inf, 0.0, -5.0], ids=["nan", "inf", "-inf", "zero", "neg"]
)
def test_a_non_finite_or_impossible_figure_is_an_error_never_a_verdict(bad: float) -> None:
    # E11: NaN used to count as "not regressed".
    for base, cand in (([[1000.0, bad]], [[1000.0]]), ([[1000.0]], [[bad, 900.0]])):
        with pytest.raises(BenchError, match="not a finite speed"):
            compare("decode_tok_s", _blocks(base, cand), boot_sd=0.01)


def test_an_unevaluated_comparison_is_inconclusive_not_a_pass() -> None:
    alone = compare("decode_tok_s", _blocks([], [[1000.0]]), boot_sd=0.01)
    assert alone.status == INCONCLUSIVE and not alone.regressed and "no baseline" in alone.why
    # Boots that spread far beyond the declared noise: the interval would not hold.
    wild = _blocks([[1000.0]] * 4 + [[700.0]] * 0, [[1000.0]] * 4)
    wild = [Block(b.side, b.order, (1000.0 * (1.3 if b.order % 3 == 0 else 0.8),)) for b in wild]
    spread = compare("decode_tok_s", wild, boot_sd=0.005)
    assert spread.status == INCONCLUSIVE and "beyond the declared" in spread.why


@pytest.mark.parametrize(
    ("boots", "max_mde", "status"),
    [
        (1, 0.03, INCONCLUSIVE),  # one boot a side sees ~4.7 % at best: cannot rule out 3 %
        (1, 0.08, PASSED),  # ... but can rule out 8 %
        (2, 0.03, INCONCLUSIVE),  # 2 + 2 sees ~3.4 %
        (4, 0.03, PASSED),  # 4 + 4 sees ~2.4 %: the GPU scenarios' design
        (4, 0.01, INCONCLUSIVE),  # nothing this noisy rules out 1 %
    ],
)
def test_a_pass_must_have_been_able_to_see_the_drop_it_rules_out(
    boots: int, max_mde: float, status: str
) -> None:
    """No significant drop is a pass only when the minimum detectable effect is within
    ``[bench.gate] max_mde``; else INCONCLUSIVE, saying both figures (never a silent pass)."""
    blocks = _blocks([[1000.0, 1010.0, 990.0]] * boots, [[1001.0, 1009.0, 991.0]] * boots)
    c = compare("decode_tok_s", blocks, boot_sd=0.0115, max_mde=max_mde)
    assert c.status == status, (c.mde, c.why)
    assert c.as_dict()["max_mde"] == max_mde
    if status == INCONCLUSIVE:
        assert c.underpowered and not c.regressed and c.mde > max_mde
        assert f"sees only a drop of {c.mde:.1%}" in c.why and f"{max_mde:.1%}" in c.why
    else:
        assert not c.underpowered and c.mde <= max_mde


@pytest.mark.parametrize("max_mde", [0.01, 0.03, math.inf])
def test_a_significant_drop_is_a_drop_whatever_the_mde_bound(max_mde: float) -> None:
    """The bound only keeps a weak design from passing; a drop it does find still fails."""
    blocks = _blocks([[1000.0] * 8], [[700.0] * 8])
    c = compare("decode_tok_s", blocks, boot_sd=0.0115, max_mde=max_mde)
    assert c.status == REGRESSED and not c.underpowered
