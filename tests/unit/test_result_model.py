"""One result model (issue 44): the gates' records are the only carrier of what a run found,
and a candidate's gate policy is given when it is made.

- No field of ``PublishResult`` or ``TargetOutcome`` holds a gate's record, its figures or a
  copy of them (``smoke_*``/``bench*`` fields): they read their ``gates``.
- ``GatePolicy`` is frozen and no module sets an attribute of a candidate after building it
  (``with_build`` is the one step that adds to it).
- ``publish`` has one mode: it is always handed its candidate.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from sglforge.candidate import Candidate, GatePolicy
from sglforge.publish import PublishResult, publish
from sglforge.upgrade import TargetOutcome

SRC = Path(__file__).resolve().parents[2] / "src" / "sglforge"
# the types of what a gate found: its record and its figures
FOUND = ("SmokeReport", "BenchRecord", "ScanRecord", "Gate", "Check", "Figures", "Any]")


def _copied(cls: type) -> list[str]:
    """Fields named or typed as a copy of what a gate found (``gates`` itself aside)."""
    out = []
    for f in dataclasses.fields(cls):
        named = f.name.startswith(("smoke_", "bench")) and f.name != "bench_plan"
        typed = any(word in str(f.type) for word in FOUND) and f.name != "gates"
        if named or typed:
            out.append(f.name)
    return out


@pytest.mark.parametrize("cls", [PublishResult, TargetOutcome])
def test_results_hold_no_copy_of_a_gate_s_record(cls: type) -> None:
    assert _copied(cls) == [], cls
    names = {f.name for f in dataclasses.fields(cls)}
    assert "gates" in names
    # the readers are properties over the gates
    for prop in ("smoke_passed", "smoke_verdict", "smoke_figures", "bench"):
        assert isinstance(inspect.getattr_static(cls, prop), property), prop


def test_the_copy_rule_finds_what_it_looks_for() -> None:
    @dataclasses.dataclass(frozen=True)
    class Planted:
        target: str
        smoke_passed: bool | None = None
        figures: tuple[Check, ...] = ()  # noqa: F821 (a string: never evaluated)
        coverage: Mapping[str, Any] | None = None  # noqa: F821

    assert _copied(Planted) == ["smoke_passed", "figures", "coverage"]


def _set_on_a_candidate(tree: ast.AST) -> list[int]:
    """Lines that assign an attribute of a name that holds a candidate (cand, candidate, c)."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets += [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                if t.value.id in ("cand", "candidate", "c", "run_cand"):
                    found.append(t.lineno)
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Attribute):
                if t.value.attr == "cand":  # run.cand.x = ...
                    found.append(t.lineno)
    return found


def test_no_module_sets_a_candidate_s_attributes_after_it_is_made() -> None:
    found = [
        f"{p.relative_to(SRC)}:{line}"
        for p in sorted(SRC.rglob("*.py"))
        if p.name != "candidate.py" and "data" not in p.parts
        for line in _set_on_a_candidate(ast.parse(p.read_text()))
    ]
    assert found == []
    planted = "cand.baseline = f\nrun.cand.knee_prior = 1\nc.no_baseline: str = 'x'\nx.y = 1\n"
    assert _set_on_a_candidate(ast.parse(planted)) == [1, 2, 3]


def test_the_gate_policy_is_frozen_and_given_at_construction() -> None:
    policy = GatePolicy(no_baseline="the first release")
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.no_baseline = None  # type: ignore[misc]
    assert "policy" in inspect.signature(Candidate).parameters
    assert GatePolicy().baseline_required is False  # outside a publish nothing is required


def test_publish_has_one_mode_it_is_handed_its_candidate() -> None:
    candidate = inspect.signature(publish).parameters["candidate"]
    assert candidate.default is inspect.Parameter.empty
