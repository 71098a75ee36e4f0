"""The coverage gate (issue 21): ``configs coverage`` of the scenario's launch on the base's
aiter tables plus the queue's items; a hot shape (the main model's MoE) with no tuned row
fails unless the scenario's ``[[coverage.accept]]`` names it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglforge.gates.result import GateResult, failed, passed, skipped

if TYPE_CHECKING:
    from sglforge.candidate import Candidate

NAME = "coverage"


def check(c: Candidate) -> GateResult:
    """The coverage over the candidate's construction and base tables; skipped, saying why,
    without a model config.json, routed experts, a patched tree or aiter tables."""
    from sglforge import coverage
    from sglforge.errors import EXIT_PROBLEMS, SglforgeError

    sc = c.scenario
    if sc is None:
        return skipped(NAME, "no smoke scenario (--skip-smoke)")
    config = c.model_config
    if config is None:
        return skipped(NAME, f"no config.json in the scenario's model folder ({c.model})")
    if not config.get("n_routed_experts") and not config.get("num_experts"):
        return skipped(NAME, "the model has no routed experts (no fused-MoE lookups)")
    try:
        tree = c.scan_tree
    except SglforgeError as exc:
        return skipped(NAME, exc.message)
    base = c.base_tables
    if base is None:
        return skipped(NAME, "the base image has no aiter tables")
    # the candidate's facts: its construction of the config it read, on its tree, for its
    # target (the items that target's build installs), in its environment
    cov = coverage.of_construction(
        c.construction,
        config,
        tree,
        base,
        coverage.items_of(c.project, c.target),
        gfx=c.target.gpu_arch,
        environment=c.environment,
    )
    gate = coverage.gate(cov, sc.accepted_misses)
    accepted = f", {len(gate.accepted)} accepted" if gate.accepted else ""
    if gate.passed:
        return passed(NAME, f"{len(cov.lookups)} lookup group(s), no hot miss{accepted}", gate)
    return failed(
        NAME,
        f"hot misses: {gate.summary()}",
        f"coverage: no tuned aiter row for hot shape(s) of {sc.name}: {gate.summary()}; "
        "nothing was pushed and no tag moved\n  next: sglforge configs coverage --model DIR "
        "--scenario FILE --base-image BASE, then add a config item (or accept the miss with "
        "[[coverage.accept]] and a reason)",
        EXIT_PROBLEMS,
        gate,
    )
