"""The coverage gate judges the candidate it is given (ARCHITECTURE-REVIEW-5 section 5.2, mend 5).

Its lookups come from the candidate's construction of the config the candidate read (the
model folder is not read again), in the candidate's environment, against the config items
the candidate's target's build installs (``item.target == BuildTarget.name``, as
``overlay_configs.stage``): not those of the target the scenario file names. Each case is a
scenario whose own target line differs from the candidate's target; before the mend the gate
resolved the scenario's (a ROCm-flavoured spec matched no item; another target's items and
defaults were used; no target line gave no target defaults).

No engine and no sglang tree: the candidate's facts are given, the way a publish computes
them (a construction holding the shipped item's hot shape: GLM-5.2 MXFP4, 257 experts, top 9).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from helpers_build import make_build_project
from sglforge import coverage
from sglforge.aiter_rules import default_rule
from sglforge.candidate import Candidate, Checkout
from sglforge.construct.built import Construction, Model, MoeLayer, Tokens
from sglforge.gates import coverage as coverage_gate
from sglforge.project import Project
from sglforge.queue.configs import base_tables

REPO = Path(__file__).resolve().parents[2]
ITEM = REPO / "patches" / "configs" / "glm52-mxfp4-moe-gfx950.csv"
HEADER = ITEM.read_text().splitlines()[0]  # a base whose aiter has every column the item has
# the shipped item's key: model_dim 6144, inter_dim 2048, 257 experts, top 9, MXFP4 (its rows
# answer tokens 1, 2 and 4, the decode graphs below; no prefill is asked)
MOE: MoeLayer = {
    "module": "model.layers.3.mlp.experts",
    "class": "FusedMoE",
    "scheme": "QuarkW4A4MXFp4MoE",
    "method": None,
    "num_experts": 257,
    "num_local_experts": 257,
    "num_fused_shared_experts": 1,
    "top_k": 9,
    "hidden_size": 6144,
    "intermediate_size_per_partition": 2048,
    "activation": "silu",
    "w13_shape": [257, 4096, 6144],
    "w2_shape": [257, 6144, 2048],
    "moe_ep_size": 1,
}
TOKENS: Tokens = {
    "capture_bs": [1, 2, 4],
    "chunked_prefill_size": 0,
    "speculative": False,
    "cuda_graph_disabled": False,
    "tokens_per_bs": {"decode": 1},
}
CONFIG = {"architectures": ["GlmMoeDsaForCausalLM"], "n_routed_experts": 256}


def _candidate(tmp_path: Path, scenario_target: str | None, target: str) -> Candidate:
    p = make_build_project(tmp_path, changes=())
    shutil.copytree(REPO / "patches" / "configs", p.root / "patches" / "configs")
    # the shipped GLM-5.2 scenario (its [bench] left out) with its target line changed
    text = (REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml").read_text()
    text = text[: text.index("\n[bench]\n")] + text[text.index("\n[checks]\n") :]
    line = f'target = "{scenario_target}"' if scenario_target else ""
    text = text.replace('target = "mi355x"', line, 1)
    (p.root / "smoke").mkdir(exist_ok=True)
    path = p.root / "smoke" / "case.toml"
    path.write_text(text)
    project = Project(p.root)
    bt = project.target(target)
    # a model folder with no config.json: the gate must take the candidate's config
    cand = Candidate(project, bt, project.scenario_file(path), tmp_path / "no-such-model")
    cand.model_config = dict(CONFIG)
    cand.checkout = Checkout(tmp_path, "v0.5.14", "", ())
    empty = base_tables("/sgl-workspace/aiter/aiter/configs", "tuned_fmoe", HEADER + "\n", None, {})
    cand.base_tables = replace(empty, aiter=default_rule())  # the base answers nothing itself
    model = Model("GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLM", {}, (MOE,), TOKENS, (), None)
    cand.construction = Construction(bt.device, {}, False, None, {"main": model})
    return cand


@pytest.mark.parametrize(
    ("scenario_target", "target"),
    [
        ("mi355x-rocm720", "mi355x-rocm720"),  # a ROCm-flavoured spec: no item is named so
        ("mi300x", "mi355x"),  # --scenario of another target, --target mi355x
        (None, "mi355x"),  # a scenario naming no target
    ],
)
def test_the_gate_counts_the_items_and_environment_of_the_candidate_s_target(
    tmp_path: Path, scenario_target: str | None, target: str
) -> None:
    cand = _candidate(tmp_path, scenario_target, target)
    result = coverage_gate.check(cand)
    gate = result.record
    assert result.ran and isinstance(gate, coverage.Gate), result
    cov = gate.coverage
    # the construction's environment (the candidate's target defaults and the scenario's env)
    assert cov.environment == cand.environment
    assert any("targets.mi355x.env" in s for s in cand.environment.sources), cand.environment
    # the mi355x item the build of this target installs answers every hot lookup
    assert any("glm52" in t for t in cov.tables), cov.tables
    assert cov.lookups and gate.passed and not cov.misses, gate.summary()
    if scenario_target:  # what the scenario's own target name selected: not this build's items
        assert coverage.items_for(cand.project.queue.configs, scenario_target, "0.5.14") == []
