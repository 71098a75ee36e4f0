"""The gate's statistics: ABBA boots as the unit, the within-boot spread from whole waves,
the boot-to-boot noise measured (the boots' own spread with Student's t, pooled with the
node's profile unless the boots overrule it; a declared figure only a floor), two looks that
keep the error rates, non-finite figures refused, an unevaluated comparison never a pass,
and the power study's grid (bench/power_study.py runs the gate's own code) within its bound."""

from __future__ import annotations

import importlib.util
import math
import random
import re
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sglforge.bench.dist import f_quantile, t_quantile, two_looks
from sglforge.bench.stats import (
    INCONCLUSIVE,
    PASSED,
    REGRESSED,
    Block,
    Looks,
    Noise,
    abba,
    boots_needed,
    compare,
)
from sglforge.errors import BenchError

ROOT = Path(__file__).resolve().parents[2]


def _study() -> ModuleType:
    if "power_study" in sys.modules:
        return sys.modules["power_study"]
    path = ROOT / "bench" / "power_study.py"
    spec = importlib.util.spec_from_file_location("power_study", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["power_study"] = module
    spec.loader.exec_module(module)
    return module


def test_a_tiny_grid_keeps_false_alarms_within_the_bound() -> None:
    """Cells where the gate boots (a quiet node, correlated requests, a bad boot in ten, no
    order effect): an unchanged image is refused as a drop at most 5 % of the time, within 3
    binomial standard errors; and the harness can fail: the old rule (a declared noise, the
    requests taken as independent) breaks the bound on correlated requests."""
    ps = _study()
    cells = [
        ps.Truth("quiet", 0.005, 0.0),
        ps.Truth("quiet, corr 0.3, bad boots", 0.004, 0.3, request_sd=0.03, bad=0.1),
        ps.Truth("quiet, no order effect", 0.005, 0.0, order=0.0),
    ]
    trials = 300
    bench = ps.study_bench()
    for t in cells:
        rng = random.Random(f"unit-{t.name}")
        outs = [ps.trial(rng, t, 0.0, bench) for _ in range(trials)]
        booted = [o for o in outs if o.status != "refused"]
        assert len(booted) > trials / 2, t  # the gate ran: the rate below means something
        false_alarms = sum(o.status == REGRESSED for o in outs) / trials
        assert false_alarms <= ps.bound(trials), (t, false_alarms)
    # the old rule on 0.3-correlated requests: a declared 1.15 % known exactly (a huge dof),
    # every request its own wave
    rng = random.Random("unit-old-rule")
    old = ps.Truth("old rule", 0.0115, 0.3)
    wrong = 0
    for _ in range(trials):
        blocks = [ps.boot(rng, old, side, i, 0.0) for i, side in enumerate(abba(4))]
        blocks = [Block(b.side, b.order, b.samples) for b in blocks]  # waves of 1
        declared = Noise(0.0115, 10**6, check=0.999999)
        c = compare("decode", blocks, noise=declared, max_mde=0.03)
        wrong += c.status == REGRESSED
    assert wrong / trials > ps.bound(trials), wrong


def test_the_docs_table_is_the_studys_grid_within_its_bound() -> None:
    ps = _study()
    docs = (ROOT / "docs" / "bench.md").read_text()
    head = "| truth (boot noise sd, intra-batch corr.) |"
    table = docs[docs.index(head) :].split("\n\n")[0].splitlines()[2:]
    names = [row.split("|")[1].strip() for row in table]
    assert names == [t.name for t in ps.grid()]
    assert any(n.startswith("H200 measured: sd 13.4%, corr 0.62") for n in names)
    footnote = docs[docs.index(head) :].split("\n\n")[1]
    trials = int(re.match(r"(\d+) trials per cell", footnote).group(1))  # type: ignore[union-attr]
    assert trials >= 2000
    for row in table:
        false_alarm = float(row.split("|")[2].strip().rstrip("%")) / 100
        assert false_alarm <= ps.bound(trials), row


def _blocks(base: list[list[float]], cand: list[list[float]], batch: int = 1) -> list[Block]:
    order = abba(max(len(base), len(cand)))
    queues = {"baseline": list(base), "candidate": list(cand)}
    out = []
    for i, side in enumerate(order):
        if queues[side]:
            out.append(Block(side, i, tuple(queues[side].pop(0)), batch))
    return out


def test_abba_balances_order_and_drift() -> None:
    assert abba(1) == ("baseline", "candidate")
    assert abba(2) == ("baseline", "candidate", "candidate", "baseline")
    order = abba(4)
    for side in ("baseline", "candidate"):
        positions = [i for i, s in enumerate(order) if s == side]
        assert len(positions) == 4 and sum(positions) == 14  # linear drift cancels
        assert sum(p % 2 for p in positions) == 2  # second of a pair as often as first


@pytest.mark.parametrize(
    ("p", "dof", "value"),
    [(0.95, 2, 2.919986), (0.95, 6, 1.943180), (0.975, 10, 2.228139), (0.9, 1, 3.077684)],
)
def test_t_quantiles_are_students(p: float, dof: int, value: float) -> None:
    assert t_quantile(p, dof) == pytest.approx(value, abs=1e-5)
    assert t_quantile(1 - p, dof) == pytest.approx(-value, abs=1e-5)


def test_f_quantiles_and_the_two_look_boundaries() -> None:
    assert f_quantile(0.95, 6, 7) == pytest.approx(3.865969, abs=1e-5)
    assert f_quantile(0.95, 2, 9) == pytest.approx(4.256495, abs=1e-5)
    # one-sided 5 % over two equal halves: O'Brien-Fleming's and Pocock's shapes
    obf, pocock = two_looks(0.05, 0.5, "obf"), two_looks(0.05, 0.5, "pocock")
    assert obf[0] == pytest.approx(2.538, abs=0.002) and obf[1] == pytest.approx(1.662, abs=0.002)
    assert pocock[0] == pytest.approx(1.866, abs=0.002)
    assert pocock[1] == pytest.approx(1.885, abs=0.002)
    assert two_looks(0.05, 1.0, "obf") == (math.inf, pytest.approx(1.6449, abs=1e-4))


def test_the_within_boot_spread_comes_from_whole_waves() -> None:
    # 4 waves of 4: the requests of a wave agree, the waves differ
    waves = [100.0, 110.0, 90.0, 105.0]
    b = Block("baseline", 0, tuple(w * (1 + 0.001 * j) for w in waves for j in range(4)), 4)
    means = b.batch_means()
    assert len(means) == 4
    expected = statistics.variance(means) / 4
    assert b.log_var_of_mean() == pytest.approx(expected)
    logs = [math.log(x) for x in b.samples]
    naive = statistics.variance(logs) / len(logs)
    assert b.log_var_of_mean() > 3 * naive  # as if independent: a third of it or less
    # a partial last wave is left out; one wave measures nothing
    assert len(Block("b", 0, b.samples[:14], 4).batch_means()) == 3
    assert Block("b", 0, b.samples[:4], 4).log_var_of_mean() is None


@pytest.mark.parametrize("drop", [0.5, 0.2, 0.1])
def test_one_boot_a_side_needs_a_node_profile(drop: float) -> None:
    blocks = _blocks([[1000.0] * 8], [[1000.0 * (1 - drop)] * 8])
    alone = compare("decode_tok_s", blocks, boot_sd=0.0115)
    assert alone.status == INCONCLUSIVE and "nothing measured the boot-to-boot noise" in alone.why
    node = Noise(0.0115, 9, source="a calibration run")
    c = compare("decode_tok_s", blocks, noise=node)
    assert c.status == REGRESSED and c.regressed and c.dof == 9 and c.mde < drop
    assert c.noise_source == "the node profile" and math.isclose(c.mean, -drop, rel_tol=1e-9)


def test_no_change_passes_on_the_boots_own_spread_and_states_its_mde() -> None:
    base = [[1000.0, 1010.0, 990.0], [1004.0, 1012.0, 995.0]] * 2
    cand = [[1001.0, 1009.0, 991.0], [1003.0, 1006.0, 999.0]] * 2
    c = compare("decode_tok_s", _blocks(base, cand), max_mde=0.03)
    assert c.status == PASSED and c.evaluated and c.dof == 6
    assert c.noise_source == "the boots' own spread" and c.boot_sd == c.observed_sd
    assert 0.0 < c.mde < 0.03 and c.boots == (4, 4) and c.requests == (12, 12)
    assert c.as_dict()["minimum_detectable_effect"] == c.mde
    assert c.as_dict()["boot_sd_dof"] == 6


def test_the_declared_noise_is_only_a_floor() -> None:
    base, cand = [[1000.0], [1002.0]] * 2, [[1001.0], [999.0]] * 2
    low = compare("decode_tok_s", _blocks(base, cand), boot_sd=0.0001)
    assert low.boot_sd == pytest.approx(low.observed_sd)  # measured beats a smaller declared
    high = compare("decode_tok_s", _blocks(base, cand), boot_sd=0.05)
    assert high.boot_sd == 0.05 and "raised to the declared 5.00%" in high.noise_source
    assert high.mde > low.mde


def test_the_boots_overrule_a_node_profile_they_spread_beyond() -> None:
    quiet = Noise(0.005, 20, source="yesterday")
    calm = _blocks([[1000.0], [1004.0]] * 2, [[1002.0], [998.0]] * 2)
    pooled = compare("decode_tok_s", calm, noise=quiet)
    assert pooled.dof == 26 and "pooled" in pooled.noise_source
    wild = _blocks([[1000.0], [1100.0]] * 2, [[1050.0], [950.0]] * 2)
    c = compare("decode_tok_s", wild, noise=quiet, max_mde=0.03)
    assert c.dof == 6 and "overruled" in c.noise_source
    assert c.boot_sd == pytest.approx(c.observed_sd)
    assert c.status == INCONCLUSIVE and "beyond the node profile's 0.50%" in c.why


@pytest.mark.parametrize(
    "bad", [math.nan, math.inf, -math.inf, 0.0, -5.0], ids=["nan", "inf", "-inf", "zero", "neg"]
)
def test_a_non_finite_or_impossible_figure_is_an_error_never_a_verdict(bad: float) -> None:
    for base, cand in (([[1000.0, bad]], [[1000.0]]), ([[1000.0]], [[bad, 900.0]])):
        with pytest.raises(BenchError, match="not a finite speed"):
            compare("decode_tok_s", _blocks(base, cand), boot_sd=0.01)


def test_an_unevaluated_comparison_is_inconclusive_not_a_pass() -> None:
    alone = compare("decode_tok_s", _blocks([], [[1000.0]]), boot_sd=0.01)
    assert alone.status == INCONCLUSIVE and not alone.regressed and "no baseline" in alone.why


@pytest.mark.parametrize(
    ("spread", "max_mde", "status"),
    [
        (0.002, 0.03, PASSED),  # quiet boots: the lower bound is well above -3 %
        (0.02, 0.03, INCONCLUSIVE),  # 2 % boots over 4 + 4 cannot rule out 3 %
        (0.02, 0.10, PASSED),  # ... but can rule out 10 %
        (0.002, 0.001, INCONCLUSIVE),  # nothing rules out 0.1 %
    ],
)
def test_a_pass_rules_out_the_drop_it_names(spread: float, max_mde: float, status: str) -> None:
    """No significant drop is a pass only when the lower bound of the change is above
    ``-max_mde``; else INCONCLUSIVE, saying why (never a silent pass)."""
    up, down = 1000.0 * (1 + spread), 1000.0 * (1 - spread)
    blocks = _blocks([[up], [down]] * 2, [[down], [up]] * 2)
    c = compare("decode_tok_s", blocks, max_mde=max_mde)
    assert c.status == status, (c.low, c.mde, c.why)
    assert c.as_dict()["max_mde"] == max_mde
    if status == PASSED:
        assert c.low > -max_mde
    else:
        assert c.low <= -max_mde and not c.regressed
        assert f"{max_mde:.1%}" in c.why


def test_the_first_look_passes_an_unchanged_image_on_a_quiet_node() -> None:
    quiet = Noise(0.004, 9, source="a calibration run")
    same = _blocks([[1000.0], [1003.0]], [[1001.0], [1002.0]])
    first = compare("decode_tok_s", same, noise=quiet, max_mde=0.03, looks=Looks(2, 6))
    assert first.status == PASSED and not first.final and first.look == 2
    # the same boots at a single look would use the unadjusted quantile: a narrower interval
    single = compare("decode_tok_s", same, noise=quiet, max_mde=0.03)
    assert single.final and single.high - single.low < first.high - first.low
    # at the first look, undecided means "go on", said so
    noisy = Noise(0.02, 9, source="a calibration run")
    on = compare("decode_tok_s", same, noise=noisy, max_mde=0.03, looks=Looks(2, 6))
    assert on.status == INCONCLUSIVE and not on.final and "interim look" in on.why


@pytest.mark.parametrize("max_mde", [0.01, 0.03, math.inf])
def test_a_significant_drop_is_a_drop_whatever_the_mde_bound(max_mde: float) -> None:
    blocks = _blocks([[1000.0] * 8], [[700.0] * 8])
    c = compare("decode_tok_s", blocks, noise=Noise(0.0115, 9), max_mde=max_mde)
    assert c.status == REGRESSED and not c.underpowered


def test_the_plan_grows_with_the_noise_and_refuses_what_no_budget_reaches() -> None:
    kw = {"requests": 64, "confidence": 0.95, "tolerance": 0.0}
    needs = [boots_needed(Noise(sd, 7), 0.03, most=4096, **kw) for sd in (0.004, 0.012, 0.03)]
    assert needs[0] == 2 and needs[0] < needs[1] < needs[2]  # type: ignore[operator]
    assert all(n is not None and n % 2 == 0 for n in needs)  # whole ABBA blocks
    assert boots_needed(Noise(0.03, 7), 0.03, most=8, **kw) is None
    # the within-boot part scales with the requests: more requests, fewer boots
    wavy = Noise(0.02, 7, requests=64, within_sd=0.018)
    assert wavy.at(256) < wavy.at(64) == 0.02


@pytest.mark.parametrize(
    ("boot_sd", "within_sd", "measured_at", "asked", "want"),
    [
        # at the measured shape: the measured boot-to-boot sd, whatever the waves said
        (0.014, 0.029, 128, 128, 0.014),  # the H200's calibration (runs 4-6): waves > boots
        (0.02, 0.01, 64, 64, 0.02),
        # fewer requests: only the within part grows, and it is at most the whole
        (0.014, 0.029, 128, 64, 0.014 * 2**0.5),
        (0.02, 0.01, 64, 16, (0.02**2 - 0.01**2 + 0.01**2 * 4) ** 0.5),
        # more requests shrink the within part only
        (0.02, 0.01, 64, 256, (0.02**2 - 0.01**2 + 0.01**2 / 4) ** 0.5),
        # no within part measured: the boots' sd at any size
        (0.03, None, 64, 16, 0.03),
    ],
)
def test_the_noise_at_a_shape_never_exceeds_what_the_boots_measured_there(
    boot_sd: float, within_sd: float | None, measured_at: int, asked: int, want: float
) -> None:
    from sglforge.bench.stats import Noise

    noise = Noise(boot_sd, 4, measured_at, within_sd)
    assert noise.at(asked) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize(
    ("base", "cand", "want"),
    [
        # one boot a side, no profile: the boots measured both sides, nothing measured the noise
        ([[372.4]], [[373.9]], "372.4 -> 373.9 (+0.4%, 90% CI none, 1+1 boots"),
        ([[500.0, 510.0]], [[450.0, 460.0]], "505.0 -> 455.0 (-9.9%, 90% CI none, 1+1 boots"),
        # one side never booted: the other side's figure, nothing to compare it with
        ([[372.4]], [], "372.4 -> - (-, 90% CI -, 1+0 boots"),
        ([], [[373.9]], "- -> 373.9 (-, 90% CI -, 0+1 boots"),
    ],
)
def test_an_inconclusive_comparison_shows_what_its_boots_measured(
    base: list[list[float]], cand: list[list[float]], want: str
) -> None:
    """Never "0.0 -> 0.0 (+0.0 %)" for boots that measured 372.4 and 373.9 (issue 45's run),
    and never an infinity in the JSON."""
    import json

    from sglforge.reports.bench import _change_line

    c = compare("decode_tok_s", _blocks(base, cand))
    assert c.status == INCONCLUSIVE
    line = _change_line(c)
    assert line.startswith(f"decode_tok_s {want}"), line
    assert "minimum detectable drop none)" in line, line
    doc = json.loads(json.dumps(c.as_dict(), allow_nan=False))
    assert doc["ci"] == [None, None] and doc["minimum_detectable_effect"] is None
