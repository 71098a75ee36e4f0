"""Patch 0002 does what it claims on the real v0.5.14 code: the MTP excludes are found.

The draft model is built by released 0.5.14 itself (stock and with the queue applied), through
sglang's config, registry, loader and layer constructors, with the harness of
test_backport_0002.py (torch and the GPU stack faked; see that module's docstring). What is
checked is the quant method each layer got from ``QuarkConfig.get_quant_method``, read off the
built model, so the test does not depend on how the patch is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_backport_0002 import (
    DEEPSEEK,
    GLM,
    NO_FUSION,
    README,
    Decisions,
    build_drafts,
    quark,
    shared_expert,
)

pytestmark = pytest.mark.pypi

SHARED = "model.decoder.mlp.shared_experts"
MXFP4_LINEAR = "QuarkW4A4MXFP4"


def _case(name: str, model: dict, quant: dict, launch: str) -> dict:
    return {"id": name, "config": model, "quant": quant, "disable_fusion": launch == NO_FUSION}


CASES = [
    _case("glm", GLM, quark(shared_expert(78)), NO_FUSION),
    _case("glm-readme", GLM, quark(shared_expert(78)), README),
    _case("deepseek", DEEPSEEK, quark(shared_expert(61)), NO_FUSION),
    _case(
        "glm-own-modules",
        GLM,
        quark(["model.layers.78.eh_proj", "model.layers.78.self_attn.o_proj"]),
        NO_FUSION,
    ),
    _case("deepseek-whole-layer", DEEPSEEK, quark(["model.layers.61"]), NO_FUSION),
]


@pytest.fixture(scope="module")
def stock_and_patched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Decisions]]:
    from sglang_release import release_tree

    base = tmp_path_factory.mktemp("v0.5.14")
    trees: dict[str, Path] = {
        "stock": release_tree(base / "stock", "0.5.14", patched=False),
        "patched": release_tree(base / "patched", "0.5.14", patched=True),
    }
    return {name: build_drafts(tree / "python", CASES) for name, tree in trees.items()}


@pytest.fixture(scope="module")
def patched(stock_and_patched: dict[str, dict[str, Decisions]]) -> dict[str, Decisions]:
    return stock_and_patched["patched"]


@pytest.mark.parametrize("case", ["glm", "glm-readme"])
@pytest.mark.parametrize("proj", ["gate_up_proj", "down_proj"])
def test_glm_mtp_shared_expert_is_excluded(
    patched: dict[str, Decisions], case: str, proj: str
) -> None:
    # Under the README launch too: the GLM draft no longer folds it into the MXFP4 experts.
    assert patched[case][f"{SHARED}.{proj}"].endswith(": bf16")
    assert "fused shared" not in patched[case]["model.decoder.mlp.experts"]


def test_glm_mtp_other_layers_stay_quantized(patched: dict[str, Decisions]) -> None:
    draft = patched["glm"]
    assert draft["model.decoder.mlp.experts"] == "FusedMoE: QuarkW4A4MXFp4MoE"
    assert draft["model.decoder.self_attn.fused_qkv_a_proj_with_mqa"].endswith(MXFP4_LINEAR)
    assert draft["model.eh_proj"].endswith(MXFP4_LINEAR)


@pytest.mark.parametrize("proj", ["gate_up_proj", "down_proj"])
def test_stock_v0_5_14_misses_the_glm_mtp_shared_expert(
    stock_and_patched: dict[str, dict[str, Decisions]], proj: str
) -> None:
    # The bug: in stock 0.5.14 the lookup misses and the bf16 expert is built as MXFP4...
    stock = stock_and_patched["stock"]
    assert stock["glm"][f"{SHARED}.{proj}"].endswith(MXFP4_LINEAR)
    # ...and under the README launch it is fused into the MXFP4 routed experts.
    assert f"{SHARED}.{proj}" not in stock["glm-readme"]
    assert "(+1 fused shared)" in stock["glm-readme"]["model.decoder.mlp.experts"]


@pytest.mark.parametrize("case", ["deepseek", "deepseek-whole-layer"])
def test_deepseek_layer_61_is_still_excluded_and_unchanged(
    stock_and_patched: dict[str, dict[str, Decisions]], case: str
) -> None:
    after, before = stock_and_patched["patched"][case], stock_and_patched["stock"][case]
    assert after == before
    assert after[f"{SHARED}.down_proj"].endswith(": bf16")


def test_mtp_own_modules_map_to_model_not_decoder(patched: dict[str, Decisions]) -> None:
    draft = patched["glm-own-modules"]
    assert draft["model.eh_proj"].endswith(": bf16")
    assert draft["model.decoder.self_attn.o_proj"].endswith(": bf16")
    assert draft["model.decoder.self_attn.q_b_proj"].endswith(MXFP4_LINEAR)


def test_a_wholly_excluded_deepseek_mtp_layer_still_drops_the_quant_config(
    patched: dict[str, Decisions],
) -> None:
    draft = patched["deepseek-whole-layer"]
    assert all(label.endswith(": bf16") or "KVCache" in label for label in draft.values()), draft
