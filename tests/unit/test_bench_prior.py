"""A release record's knee is a hint for the search, used only inside the band the scenario's
schedule searches (issue 42, F18): a poisoned prior (1e-300 RPS, 1e300 RPS) is not probed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sglforge.bench import runner
from sglforge.scenario.file import load_scenario

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("prior", "kept"),
    [
        ((1e-300, None), None),  # REDTEAM-5: a first probe waiting ~1e300 s per request
        ((5e-324, 1.0), None),
        ((1e300, None), None),
        ((0.01, 2.0), None),  # below an eighth of the schedule's start
        ((-1.0, None), None),
        ((math.inf, None), None),
        ((3.0, 1e300), (3.0, None)),  # a failure beyond max_rate says nothing
        ((3.0, 2.0), (3.0, None)),  # a "failure" below the knee neither
        ((2.5, 3.2), (2.5, 3.2)),
        ((2.5, 4.5), (2.5, None)),  # max_rate 3.2
        ((0.25, None), (0.25, None)),  # start 2: an eighth of it is still searched
    ],
)
def test_only_a_plausible_prior_knee_is_used(
    prior: tuple[float, float | None], kept: tuple[float, float | None] | None
) -> None:
    bench = load_scenario(ROOT / "smoke" / "glm5-mxfp4-mtp-mi355x.toml").bench
    assert bench is not None and bench.search is not None
    assert runner._usable_prior(prior, bench) == kept


def test_a_rate_list_bounds_the_prior_too() -> None:
    from types import SimpleNamespace

    bench = SimpleNamespace(search=None, request_rates=(1.0, 2.0, 4.0))
    assert runner._usable_prior((3.0, 4.0), bench) == (3.0, 4.0)
    assert runner._usable_prior((5.0, None), bench) is None
    assert runner._usable_prior((0.1, None), bench) is None
