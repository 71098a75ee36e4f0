"""A publish's bench gate compares with the last release, or is told why not.

When no baseline can be had (no earlier release in the registry, or its image cannot be
pulled), the gate refuses the publish, naming why and ``--no-baseline REASON``; with that
option the bench runs uncompared and the reason is what the report carries. Outside a publish
(``upgrade`` without ``--publish``: no registry) nothing is required. ``run_bench`` is
replaced here: the gate must decide before any bench runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglforge.candidate import Against, Candidate, GatePolicy
from sglforge.gates import bench as bench_gate
from sglforge.project import Project
from sglforge.requests import SmokeRequest

REPO = Path(__file__).resolve().parents[2]


Make = Callable[[GatePolicy], Candidate]


@pytest.fixture
def candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Make, list[Any]]:
    """A candidate under a given gate policy (the policy is the candidate's from the start)."""
    root = tmp_path / "project"
    for part in ("patches", "images", "smoke"):
        shutil.copytree(REPO / part, root / part)
    project = Project(root)
    scenario = project.scenario_file(root / "smoke" / "standin-cpu.toml")
    assert scenario.bench is not None
    calls: list[Any] = []

    class Built:
        image = "sglforge-test/candidate:1"

    def make(policy: GatePolicy | None = None) -> Candidate:
        cand = Candidate(
            project,
            project.target("mi355x"),
            scenario,
            smoke=SmokeRequest(scenario=scenario),
            policy=policy or GatePolicy(),
        )
        cand.built = Built()  # type: ignore[assignment]
        return cand

    def run_bench(project: Project, image: str, req: Any, **kw: Any) -> Any:
        calls.append(kw)
        raise RuntimeError("stop here: the gate decided to run the bench")

    monkeypatch.setattr("sglforge.bench.runner.run_bench", run_bench)
    return make, calls


@pytest.mark.parametrize(
    "why",
    [
        "no earlier release of mi355x in 127.0.0.1:5000/ns/sglang",
        "the last release's image 127.0.0.1:5000/ns/sglang@sha256:ab cannot be pulled (denied)",
    ],
)
def test_a_publish_without_a_baseline_is_refused_naming_why_and_the_option(
    candidate: tuple[Make, list[Any]], why: str
) -> None:
    make, calls = candidate
    cand = make(GatePolicy(baseline=lambda _c: Against(None, why), baseline_required=True))
    result = bench_gate.check(cand)
    assert result.ran and result.ok is False
    assert why in result.detail and "--no-baseline REASON" in result.error
    assert "nothing was pushed" in result.error
    assert calls == []  # refused before any bench ran


def test_no_baseline_reason_runs_the_bench_uncompared_and_records_why(
    candidate: tuple[Make, list[Any]],
) -> None:
    make, calls = candidate
    none = Against(None, "no earlier release of mi355x")
    policy = GatePolicy(lambda _c: none, baseline_required=True, no_baseline="the first release")
    cand = make(policy)
    with pytest.raises(RuntimeError, match="stop here"):
        bench_gate.check(cand)
    (kw,) = calls
    assert kw["against"] is None
    assert kw["no_baseline"] == "no earlier release of mi355x; --no-baseline: the first release"


def test_outside_a_publish_nothing_is_required_and_a_baseline_is_compared(
    candidate: tuple[Make, list[Any]],
) -> None:
    make, calls = candidate  # the default: no registry, no requirement
    with pytest.raises(RuntimeError):
        bench_gate.check(make())
    assert calls[-1]["against"] is None and "no registry" in calls[-1]["no_baseline"]
    found = Against("127.0.0.1:5000/ns/sglang@sha256:ab", "", (6.0, 9.0))
    with pytest.raises(RuntimeError):
        bench_gate.check(make(GatePolicy(lambda _c: found, baseline_required=True)))
    assert calls[-1]["against"] == "127.0.0.1:5000/ns/sglang@sha256:ab"
    assert calls[-1]["no_baseline"] == ""
    assert calls[-1]["knee_prior"] == (6.0, 9.0)  # the last release's knee, where to start
