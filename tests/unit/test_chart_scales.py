"""Every knee chart has a scale, whatever its probes: one rate, equal rates, zero values
(the docker bench's one-probe run divided by zero at the rate axis)."""

from __future__ import annotations

import pytest

from sglforge import charts


@pytest.mark.parametrize(
    ("rates", "tok", "ttft"),
    [
        ((9.0,), (700.0,), (0.4,)),  # one probe
        ((12.5, 12.5), (650.0, 660.0), (0.9, 1.1)),  # the same rate twice
        ((0.0,), (0.0,), (0.0,)),  # nothing measured
        ((11.25, 13.5), (0.0, 0.0), (0.0, 0.0)),  # rates but no tokens
        ((1e-4, 1e-4), (1.0, 1.0), (0.1, 0.1)),  # a tiny band
    ],
)
def test_a_knee_chart_draws_without_a_band(
    rates: tuple[float, ...], tok: tuple[float, ...], ttft: tuple[float, ...]
) -> None:
    chart = charts.KneeChart("t", "s", rates, tok, ttft, limit=1.0)
    out = charts.svg(chart)
    assert out.startswith("<svg") and "nan" not in out and "inf" not in out


@pytest.mark.parametrize("value", [0.001, 1.0, 12.5, 4096.0])
def test_fitted_ticks_of_one_value_rise_from_zero_past_it(value: float) -> None:
    t = charts.fitted_ticks(value, value)
    assert t[0] == 0 and t[-1] >= value and len(set(t)) == len(t) > 1
