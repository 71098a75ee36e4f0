"""A publish's bench gate compares with the last release, or is told why not.

When no baseline can be had (no earlier release in the registry, or its image cannot be
pulled), the gate refuses the publish, naming why and ``--no-baseline REASON``; with that
option the bench runs uncompared and the reason is what the report carries. Outside a publish
(``upgrade`` without ``--publish``: no registry) nothing is required. ``run_bench`` is
replaced here: the gate must decide before any bench runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from sglforge.candidate import Candidate
from sglforge.gates import bench as bench_gate
from sglforge.project import Project
from sglforge.requests import SmokeRequest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Candidate, list[Any]]:
    root = tmp_path / "project"
    for part in ("patches", "images", "smoke"):
        shutil.copytree(REPO / part, root / part)
    project = Project(root)
    scenario = project.scenario_file(root / "smoke" / "standin-cpu.toml")
    assert scenario.bench is not None
    cand = Candidate(
        project, project.target("mi355x"), scenario, smoke=SmokeRequest(scenario=scenario)
    )
    calls: list[Any] = []

    class Built:
        image = "sglforge-test/candidate:1"

    cand.built = Built()  # type: ignore[assignment]

    def run_bench(root: Path, image: str, req: Any, **kw: Any) -> Any:
        calls.append(kw)
        raise RuntimeError("stop here: the gate decided to run the bench")

    monkeypatch.setattr("sglforge.bench.runner.run_bench", run_bench)
    return cand, calls


@pytest.mark.parametrize(
    "why",
    [
        "no earlier release of mi355x in 127.0.0.1:5000/ns/sglang",
        "the last release's image 127.0.0.1:5000/ns/sglang@sha256:ab cannot be pulled (denied)",
    ],
)
def test_a_publish_without_a_baseline_is_refused_naming_why_and_the_option(
    candidate: tuple[Candidate, list[Any]], why: str
) -> None:
    cand, calls = candidate
    cand.baseline = lambda: (None, why)
    cand.baseline_required = True
    result = bench_gate.check(cand)
    assert result.ran and result.ok is False
    assert why in result.detail and "--no-baseline REASON" in result.error
    assert "nothing was pushed" in result.error
    assert calls == []  # refused before any bench ran


def test_no_baseline_reason_runs_the_bench_uncompared_and_records_why(
    candidate: tuple[Candidate, list[Any]],
) -> None:
    cand, calls = candidate
    cand.baseline = lambda: (None, "no earlier release of mi355x")
    cand.baseline_required, cand.no_baseline = True, "the first release"
    with pytest.raises(RuntimeError, match="stop here"):
        bench_gate.check(cand)
    (kw,) = calls
    assert kw["against"] is None
    assert kw["no_baseline"] == "no earlier release of mi355x; --no-baseline: the first release"


def test_outside_a_publish_nothing_is_required_and_a_baseline_is_compared(
    candidate: tuple[Candidate, list[Any]],
) -> None:
    cand, calls = candidate  # the default: no registry, no requirement
    with pytest.raises(RuntimeError):
        bench_gate.check(cand)
    assert calls[-1]["against"] is None and "no registry" in calls[-1]["no_baseline"]
    cand.baseline = lambda: ("127.0.0.1:5000/ns/sglang@sha256:ab", "")
    cand.baseline_required = True
    with pytest.raises(RuntimeError):
        bench_gate.check(cand)
    assert calls[-1]["against"] == "127.0.0.1:5000/ns/sglang@sha256:ab"
    assert calls[-1]["no_baseline"] == ""
