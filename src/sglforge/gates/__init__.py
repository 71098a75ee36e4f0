"""The gates an image passes before sglforge vouches for it: one list of named steps over one
:class:`~sglforge.candidate.Candidate`, run by ``publish`` and ``upgrade`` alike.

- ``scan``: blockers a launch would hit, read statically (needs no image: it runs before the
  build, ``BEFORE_BUILD``);
- ``coverage``: a hot fused-MoE shape with no tuned aiter row;
- ``smoke``: the scenario served from the image;
- ``bench``: the scenario's ``[bench]`` against the last release.

Each gate module has ``check(candidate) -> GateResult``. A gate that does not run says why
(``skipped``), and every output of publish and upgrade shows it; a failed gate stops the
gates after it, which are then skipped as "not reached".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from sglforge.gates.result import (
    BenchRecord,
    GateResult,
    Record,
    ScanRecord,
    failed,
    passed,
    skipped,
)

if TYPE_CHECKING:
    from sglforge.candidate import Candidate

__all__ = ["GATES", "BenchRecord", "GateResult", "Record", "failed", "first_failure", "passed"]
__all__ += ["ScanRecord", "run", "skipped"]

GATES = ("scan", "coverage", "smoke", "bench")
BEFORE_BUILD = ("scan",)  # the gates that need no image
AFTER_BUILD = tuple(g for g in GATES if g not in BEFORE_BUILD)


def _checks() -> dict[str, Callable[[Candidate], GateResult]]:
    from sglforge.gates import bench, coverage, scan, smoke

    return {
        "scan": scan.check,
        "coverage": coverage.check,
        "smoke": smoke.check,
        "bench": bench.check,
    }


def run(
    candidate: Candidate,
    skip: Mapping[str, str] | None = None,
    only: Sequence[str] = GATES,
    on_result: Callable[[GateResult], None] = lambda _r: None,
) -> tuple[GateResult, ...]:
    """The gates of ``only`` (in ``GATES`` order) over ``candidate``; ``skip`` maps a gate to
    why it is not run. Each gate runs at most once per candidate (its result is kept on it);
    after a failed gate the rest are skipped as not reached. ``on_result`` sees each result as
    it is decided (publish makes its steps of them)."""
    skip = dict(skip or {})
    unknown = sorted((set(skip) | set(only)) - set(GATES))
    assert not unknown, f"unknown gates {unknown} (known: {GATES})"
    checks = _checks()
    out: list[GateResult] = []
    stopped = ""
    for name in GATES:
        if name not in only:
            continue
        done = candidate.results.get(name)
        if isinstance(done, GateResult):
            result = done  # run once per candidate (upgrade ran it before handing it over)
        else:
            t = time.monotonic()
            if stopped:
                result = skipped(name, f"not reached: {stopped} failed")
            elif name in skip:
                result = skipped(name, skip[name])
            else:
                result = checks[name](candidate)
            result = replace(result, seconds=round(time.monotonic() - t, 3))
            candidate.results[name] = result
            if not result.ran:
                candidate.say(f"{name}: {result.detail}")
        if result.ran and result.ok is False:
            stopped = name
        on_result(result)
        out.append(result)
    return tuple(out)


def first_failure(results: Sequence[GateResult]) -> GateResult | None:
    return next((r for r in results if r.ok is False), None)
