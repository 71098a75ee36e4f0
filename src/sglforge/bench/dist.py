"""The distributions the gate's decisions need, in the standard library only: Student's t and
Snedecor's F (through the regularized incomplete beta function), and the two-look boundaries
of a group-sequential test (Lan-DeMets alpha spending over the bivariate normal of the two
looks' statistics)."""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

_N = NormalDist()


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with ``dof`` degrees of freedom (normal for an infinite one)."""
    if math.isinf(dof):
        return _N.cdf(t)
    tail = 0.5 * beta_cdf(dof / (dof + t * t), dof / 2, 0.5)
    return 1 - tail if t > 0 else tail


def _solve(cdf: object, p: float, low: float, high: float) -> float:
    """The x in ``[low, high]`` with ``cdf(x) = p`` (bisection; ``cdf`` increasing)."""
    f = cdf  # a callable; typed loosely to keep the helper private and small
    assert callable(f)
    while f(high) < p:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if f(mid) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, abs(mid)):
            break
    return (low + high) / 2


@lru_cache(maxsize=4096)
def t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t (the normal's for an infinite ``dof``)."""
    if not 0 < p < 1 or dof <= 0:
        raise ValueError(f"t quantile of p={p!r} at {dof!r} degrees of freedom")
    if math.isinf(dof):
        return _N.inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1 - p, dof)
    return _solve(lambda t: t_cdf(t, dof), p, 0.0, 10.0)


def f_cdf(f: float, d1: float, d2: float) -> float:
    """P(F <= f) for Snedecor's F with (``d1``, ``d2``) degrees of freedom."""
    return 0.0 if f <= 0 else beta_cdf(d1 * f / (d1 * f + d2), d1 / 2, d2 / 2)


@lru_cache(maxsize=4096)
def f_quantile(p: float, d1: float, d2: float) -> float:
    """The ``p`` quantile of Snedecor's F."""
    if not 0 < p < 1 or d1 <= 0 or d2 <= 0:
        raise ValueError(f"F quantile of p={p!r} at ({d1!r}, {d2!r}) degrees of freedom")
    return _solve(lambda f: f_cdf(f, d1, d2), p, 0.0, 10.0)


def _both_below(c1: float, c2: float, rho: float) -> float:
    """P(Z1 < c1, Z2 < c2) for standard normals with correlation ``rho`` (Simpson's rule over
    Z1: the conditional normal of Z2 given Z1)."""
    low, steps = -8.0, 400
    if c1 <= low:
        return 0.0
    h = (c1 - low) / steps
    s = math.sqrt(1 - rho * rho)
    total = 0.0
    for i in range(steps + 1):
        z = low + i * h
        w = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total += w * _N.pdf(z) * _N.cdf((c2 - rho * z) / s)
    return total * h / 3


def spent(alpha: float, fraction: float, kind: str) -> float:
    """Lan-DeMets alpha spending at information ``fraction``: ``obf`` spends little early
    (O'Brien-Fleming's shape: the final look keeps nearly all of ``alpha``), ``pocock``
    spends evenly (an early stop is likelier)."""
    t = min(max(fraction, 1e-9), 1.0)
    if kind == "pocock":
        return alpha * math.log1p((math.e - 1) * t)
    if kind == "obf":
        return 2 * (1 - _N.cdf(_N.inv_cdf(1 - alpha / 2) / math.sqrt(t)))
    raise ValueError(f"unknown alpha spending {kind!r} (obf or pocock)")


@lru_cache(maxsize=256)
def two_looks(alpha: float, fraction: float, kind: str) -> tuple[float, float]:
    """One-sided normal boundaries (first look, final look) of a test looked at twice, at
    information ``fraction`` and at 1, whose chance of crossing either is ``alpha`` in all:
    the first spends :func:`spent`, the final the rest given the looks' correlation
    ``sqrt(fraction)``."""
    if not 0 < fraction < 1:
        return math.inf, _N.inv_cdf(1 - alpha)
    first = spent(alpha, fraction, kind)
    c1 = _N.inv_cdf(1 - first) if first > 1e-12 else 7.0  # beyond 7 sd nothing is spent
    rho = math.sqrt(fraction)

    def crossed(c2: float) -> float:
        return 1 - _both_below(c1, c2, rho)

    low, high = 0.0, 6.0
    for _ in range(48):
        mid = (low + high) / 2
        low, high = (mid, high) if crossed(mid) > alpha else (low, mid)
    return c1, (low + high) / 2


def t_boundary(z: float, dof: float) -> float:
    """A normal boundary carried to Student's t at ``dof`` by its tail probability."""
    if math.isinf(z):
        return math.inf
    return t_quantile(_N.cdf(z), dof)
